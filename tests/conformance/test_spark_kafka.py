"""Spark's own Kafka connector (spark-sql-kafka-0-10, `format("kafka")`) works against raftlog's
Kafka listener as against the reference Apache Kafka: a batch write, a batch read of the whole
topic, and a streaming query with a checkpoint that, run again after more records arrive, reads
only the new ones. The one SparkSession of the test run (tests/integration/spark_fixtures.py)
carries the connector: PySpark is 4.3.0, whose connector Maven Central does not serve; 4.2.0's
is, and runs on it (tests/reference/spark-kafka.pom.xml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from differential import Sides, assert_same
from kafka_ref import ReferenceUnavailable, kafka_tool, spark_kafka_jars
from spark_fixtures import spark  # noqa: F401 - the shared session fixture

pytestmark = pytest.mark.spark

TOPIC = "spark-kafka"
PARTITIONS = 3


@pytest.fixture(scope="module")
def connector(spark) -> Any:  # noqa: F811 - the fixture imported above
    try:
        jars = spark_kafka_jars()
    except ReferenceUnavailable as e:
        pytest.skip(f"Spark's Kafka connector unavailable: {e}")
    given = spark.sparkContext.getConf().get("spark.jars", "")
    if not all(str(j) in given for j in jars):
        pytest.skip("the SparkSession started before Spark's Kafka connector was fetched: "
                    "run `python tests/reference/kafka_ref.py fetch` (scripts/test does) and again")
    return spark


def _write(spark: Any, bootstrap: str, first: int, count: int) -> None:
    rows = [(f"k{i}", f"v{i}") for i in range(first, first + count)]
    (spark.createDataFrame(rows, "key string, value string").write.format("kafka")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", TOPIC).save())


def _read_batch(spark: Any, bootstrap: str) -> dict:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    rows = df.selectExpr("partition", "offset", "CAST(key AS STRING) k", "CAST(value AS STRING) v", "topic").collect()
    by_partition: dict[int, list] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append((r.offset, r.k, r.v))
    return {
        # The default partitioner hashes the key (murmur2): the same key lands in the same
        # partition on both; the offsets of a partition run from 0 without a gap.
        "keys_by_partition": {p: sorted(k for _, k, _ in recs) for p, recs in sorted(by_partition.items())},
        "offsets_contiguous": all(sorted(o for o, _, _ in recs) == list(range(len(recs)))
                                  for recs in by_partition.values()),
        "values_match_keys": all(v == "v" + k[1:] for recs in by_partition.values() for _, k, v in recs),
        "topics": sorted({r.topic for r in rows}),
    }


def _stream_once(spark: Any, bootstrap: str, out: Path, checkpoint: Path) -> int:
    """Run the streaming query until it has read what is there (availableNow), into JSON files;
    the number of records it wrote this run."""
    before = spark.read.json(str(out)).count() if any(out.glob("*.json")) else 0
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
             .selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "partition", "offset")
             .writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(300), "the streaming query did not finish reading within 300 s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return spark.read.json(str(out)).count() - before


def spark_kafka_scenario(spark: Any, bootstrap: str, root: Path) -> dict:
    done = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
                      "--partitions", str(PARTITIONS), "--replication-factor", "3")
    assert done.returncode == 0, done.stderr[-800:]
    out: dict = {}
    _write(spark, bootstrap, 0, 60)
    out["batch_read"] = _read_batch(spark, bootstrap)
    files, checkpoint = root / "stream-out", root / "checkpoint"
    out["stream_first_run"] = _stream_once(spark, bootstrap, files, checkpoint)
    _write(spark, bootstrap, 60, 15)
    # The same query from its checkpoint: only the 15 records written since.
    out["stream_resumed_run"] = _stream_once(spark, bootstrap, files, checkpoint)
    streamed = spark.read.json(str(files)).collect()
    out["streamed_keys"] = sorted(r.k for r in streamed)
    out["batch_read_after"] = _read_batch(spark, bootstrap)
    return out


def test_spark_kafka_batch_write_read_and_checkpointed_stream(sides: Sides, connector: Any, tmp_path: Path) -> None:
    answers = {side: spark_kafka_scenario(connector, bootstrap, tmp_path / side)
               for side, bootstrap in (("kafka", sides.kafka), ("raftlog", sides.raftlog))}
    same = assert_same(answers, "Spark's format(\"kafka\"): batch write, batch read, checkpointed stream")
    assert sum(len(keys) for keys in same["batch_read"]["keys_by_partition"].values()) == 60
    assert same["batch_read"]["offsets_contiguous"] and same["batch_read"]["values_match_keys"]
    assert (same["stream_first_run"], same["stream_resumed_run"]) == (60, 15)
    assert same["streamed_keys"] == sorted(f"k{i}" for i in range(75))

"""The sink format("raftlog") against a real 3-node cluster: batch writes with every Kafka sink column, streaming writes under each trigger, and exactly-once for read_committed readers (each micro-batch one transaction per task, committed on Spark's commit): a write failing mid-batch is never visible, then the query restarted from its checkpoint writes every row once; and when a partition leader is SIGKILLed mid-write."""

from __future__ import annotations

import os
import sys
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark import cloudpickle  # noqa: E402


import node_harness as harness  # noqa: E402
import sink_helpers as helpers  # noqa: E402
from spark_fixtures import spark  # noqa: E402

# Spark's Python workers cannot import test modules by name: ship these by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(helpers)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("spark-sink"), 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=40)
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster) -> str:
    return ",".join(cluster.client(n) for n in sorted(cluster.configs))


@pytest.fixture(scope="module", autouse=True)
def _registered(spark):
    from spark_source import register

    register(spark)


def test_batch_write_takes_every_kafka_sink_column_and_refuses_bad_input(spark, bootstrap):
    from pyspark.sql import functions as F
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructField,
                                   StructType)

    helpers.create_topic(bootstrap, "sink-a", 3)
    helpers.create_topic(bootstrap, "sink-b", 2)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("headers", ArrayType(header)), StructField("ignored", StringType())])
    rows = [(f"k{i}" if i % 4 else None, b"v%d" % i, "sink-a" if i % 2 else "sink-b",
             (i % 2) if i % 3 == 0 else None, [("h", b"%d" % i)] if i % 5 == 0 else None, "x")
            for i in range(200)]
    df = spark.createDataFrame(rows, schema)
    df.write.format("raftlog").option("bootstrap", bootstrap).mode("append").save()

    got = {}
    for topic in ("sink-a", "sink-b"):
        for r in helpers.read_topic(bootstrap, topic):
            got[r.value] = r
    assert sorted(got) == sorted(b"v%d" % i for i in range(200))  # at least once: no retry here
    from raftlog.client import partition_for_key

    for i in range(200):
        r = got[b"v%d" % i]
        assert r.topic == ("sink-a" if i % 2 else "sink-b")
        assert r.key == (None if i % 4 == 0 else b"k%d" % i)
        assert list(r.headers or ()) == ([("h", b"%d" % i)] if i % 5 == 0 else [])
        if i % 3 == 0:
            assert r.partition == i % 2
        elif r.key is not None:
            assert r.partition == partition_for_key(r.key, 3 if i % 2 else 2)

    # The topic option overrides the column; strings are written as UTF-8.
    spark.createDataFrame([("sink-b", "é")], "topic string, value string").write.format(
        "raftlog").option("bootstrap", bootstrap).option("topic", "sink-a").mode("append").save()
    assert b"\xc3\xa9" in {r.value for r in helpers.read_topic(bootstrap, "sink-a")}

    bad = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic option required"):
        bad.write.format("raftlog").option("bootstrap", bootstrap).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        bad.write.format("raftlog").option("bootstrap", bootstrap).option("topic", "sink-a") \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="out of range"):
        spark.createDataFrame([("v", 7)], "value string, partition int").write.format(
            "raftlog").option("bootstrap", bootstrap).option("topic", "sink-a") \
            .mode("append").save()
    with pytest.raises(Exception, match="exactlyOnce is for streaming"):
        bad.write.format("raftlog").option("bootstrap", bootstrap).option("topic", "sink-a") \
            .option("exactlyOnce", "true").mode("append").save()
    assert F is not None


@pytest.mark.parametrize("trigger", [{"availableNow": True}, {"once": True},
                                     {"processingTime": "200 milliseconds"}])
def test_stream_writes_every_row_once_under_each_trigger(spark, bootstrap, tmp_path, trigger):
    name = "-".join(str(k) for k in trigger).lower()
    source, sink = f"trig-src-{name}", f"trig-dst-{name}"
    helpers.create_topic(bootstrap, source, 3)
    helpers.create_topic(bootstrap, sink, 3)
    helpers.produce_ids(bootstrap, source, 0, 3000)
    q = helpers.copy_query(spark, bootstrap, source, sink, str(tmp_path / "cp"),
                           max_offsets=1000, trigger=trigger)
    if "processingTime" in trigger:
        deadline = time.monotonic() + 120
        while sum(p.numInputRows for p in q.recentProgress) < 3000:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the processingTime query did not catch up"
            time.sleep(0.2)
        q.stop()
    else:
        helpers.await_query(q)
    helpers.check_exactly_once(helpers.read_topic(bootstrap, sink), range(3000))


def _fail_once(marker: str, bootstrap: str, sink: str, at_id: int):
    """A UDF on value: the first time it meets id `at_id` it waits until the sink topic
    holds some rows (so the failing write task is part-way through), then raises."""

    def check(value: bytes) -> bytes:
        if value == b"id-%07d" % at_id and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write("failed once")
            deadline = time.monotonic() + 60
            while helpers.count_records(bootstrap, sink) < 50:
                if time.monotonic() > deadline:
                    raise TimeoutError("the sink never received rows before the injected failure")
                time.sleep(0.05)
            raise RuntimeError("injected write failure")
        return value

    return check


def test_a_batch_failing_mid_write_then_restarted_from_the_checkpoint_is_exactly_once(
        spark, bootstrap, tmp_path):
    from pyspark.sql import functions as F

    source, sink = "eo-restart-src", "eo-restart-dst"
    helpers.create_topic(bootstrap, source, 3)
    helpers.create_topic(bootstrap, sink, 3)
    n = 20_000
    helpers.produce_ids(bootstrap, source, 0, n)
    marker = str(tmp_path / "failed-once")
    check = F.udf(_fail_once(marker, bootstrap, sink, at_id=n // 2), "binary", useArrow=False)
    cp = str(tmp_path / "cp")
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    # Small Arrow batches: the writer gets rows before the failing row reaches the UDF.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        q = helpers.copy_query(spark, bootstrap, source, sink, cp, max_offsets=n,
                               transform=lambda df: df.select("key", check("value").alias("value")))
        with pytest.raises(AssertionError, match="injected write failure"):
            helpers.await_query(q)  # local[2]: a task failure fails the batch and the query
        written = helpers.count_records(bootstrap, sink)
        assert 0 < written < n, f"the failed batch should have written part of its rows: {written}"
        # ... in transactions aborted or still open (a task Spark killed ends at its timeout or
        # when the batch is retried): a read_committed reader sees none of it.
        assert helpers.read_topic(bootstrap, sink, settled=False) == []
        q = helpers.copy_query(spark, bootstrap, source, sink, cp, max_offsets=n,
                               transform=lambda df: df.select("key", check("value").alias("value")))
        helpers.await_query(q)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    helpers.check_exactly_once(helpers.read_topic(bootstrap, sink), range(n))
    # More input, the same checkpoint: the next batch appends only the new rows.
    helpers.produce_ids(bootstrap, source, n, 500)
    helpers.await_query(helpers.copy_query(spark, bootstrap, source, sink, cp))
    helpers.check_exactly_once(helpers.read_topic(bootstrap, sink), range(n + 500))


def test_a_partition_leader_sigkilled_mid_write_leaves_every_row_once(
        spark, cluster, bootstrap, tmp_path):
    source, sink = "eo-kill-src", "eo-kill-dst"
    helpers.create_topic(bootstrap, source, 3)
    helpers.create_topic(bootstrap, sink, 3)
    n = 30_000
    helpers.produce_ids(bootstrap, source, 0, n)
    q = helpers.copy_query(spark, bootstrap, source, sink, str(tmp_path / "cp"),
                           max_offsets=n // 2, **{"raftlog.delivery.timeout.ms": "90000"})
    victim = None
    try:
        deadline = time.monotonic() + 120
        while helpers.count_records(bootstrap, sink) < 2000:
            assert q.isActive or q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the sink never received rows"
            time.sleep(0.02)
        victim = helpers.leaders(bootstrap, sink)[0]
        cluster.kill(victim)  # SIGKILL by PID, mid-write
        helpers.await_query(q)
        assert not q.isActive
    finally:
        if victim is not None:
            cluster.start(victim)
            cluster.wait_ready(timeout_s=40)
    helpers.check_exactly_once(helpers.read_topic(bootstrap, sink), range(n))

"""SPARK API PLUMBING ONLY (no broker): a local SparkSession reads format("raftlog") through an in-memory provider: batch rows, AvailableNow batches split by maxOffsetsPerTrigger, and a checkpoint restart that reads exactly the new records."""

import json
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark import cloudpickle  # noqa: E402

from partition.batch import BatchBuilder  # noqa: E402
from spark_source.fetch import FetchAnswer  # noqa: E402
from spark_source.planning import PartitionMeta  # noqa: E402
from spark_source.source import RaftlogDataSource, register  # noqa: E402

pytestmark = pytest.mark.spark

# Spark's Python workers import nothing from this test module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCH_RECORDS = 7  # small batches, so planned ranges begin and end inside batches
BASE_TS_MS = 1_700_000_000_000


def record(topic, partition, offset):
    return (b"k-%s-%d-%d" % (topic.encode(), partition, offset),
            b"v-%s-%d-%d" % (topic.encode(), partition, offset), BASE_TS_MS + offset)


class PlumbingOnlyMemoryProvider:
    """NOT A BROKER: a deterministic in-memory log per partition, built from the option
    raftlog.provider.records = {"topic": [records in partition 0, 1, ...]}, so that the
    driver and every executor process see the same data. Exercises only Spark's API."""

    def __init__(self, options):
        spec = json.loads(options.raw["raftlog.provider.records"])
        self.logs = {}
        for topic, counts in spec.items():
            for p, n in enumerate(counts):
                batches = []
                for base in range(0, n, BATCH_RECORDS):
                    b = BatchBuilder(base_offset=base)
                    for off in range(base, min(n, base + BATCH_RECORDS)):
                        k, v, ts = record(topic, p, off)
                        b.append(v, k, timestamp_ms=ts)
                    batches.append((base, min(n, base + BATCH_RECORDS), b.build()))
                self.logs[(topic, p)] = (n, batches)

    def list_partitions(self, topics):
        return [PartitionMeta(t, p, 1, "127.0.0.1:1") for (t, p) in sorted(self.logs)
                if topics is None or t in topics]

    def earliest_offsets(self, partitions):
        return {tp: 0 for tp in partitions}

    def latest_offsets(self, partitions):
        return {tp: self.logs[tp][0] for tp in partitions}

    def offsets_for_times(self, timestamps):
        return {tp: (ts - BASE_TS_MS if ts - BASE_TS_MS < self.logs[tp][0] else None)
                for tp, ts in timestamps.items()}

    def fetch(self, topic, partition, offset, max_bytes, *, leader_id=None, max_wait_ms=0):
        n, batches = self.logs[(topic, partition)]
        out = b"".join(raw for _base, end, raw in batches if end > offset)
        return FetchAnswer(out, n, 0)

    def committed_offsets(self, group_id, partitions):
        raise AssertionError("not used")

    def commit_offsets(self, group_id, offsets, metadata=""):
        raise AssertionError("not used")

    def check_groups(self):
        pass

    def close(self):
        pass


class PlumbingOnlyDataSource(RaftlogDataSource):
    provider_factory = PlumbingOnlyMemoryProvider

    @classmethod
    def name(cls):
        return "raftlog_plumbing_only"


from spark_fixtures import spark  # noqa: E402  (the session-scoped `spark` fixture)


@pytest.fixture(scope="module", autouse=True)
def _plumbing_source_registered(spark):
    register(spark, PlumbingOnlyDataSource)


def expected_rows(counts_by_topic, starts=None):
    rows = []
    for topic, counts in counts_by_topic.items():
        for p, n in enumerate(counts):
            for off in range((starts or {}).get((topic, p), 0), n):
                k, v, _ts = record(topic, p, off)
                rows.append((topic, p, off, k, v))
    return sorted(rows)


def test_batch_read_returns_every_record_with_the_kafka_schema(spark):
    counts = {"events": [23, 0, 11]}
    df = (spark.read.format("raftlog_plumbing_only").option("bootstrap", "127.0.0.1:1")
          .option("subscribe", "events").option("raftlog.provider.records", json.dumps(counts))
          .option("minPartitions", "4").option("raftlog.read.timeout.ms", "10000").load())
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    rows = df.collect()
    got = sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    assert got == expected_rows(counts)
    first = min(rows, key=lambda r: (r.partition, r.offset))
    assert first.timestampType == 0
    assert int(first.timestamp.timestamp() * 1000) == BASE_TS_MS
    empty = (spark.read.format("raftlog_plumbing_only").option("bootstrap", "127.0.0.1:1")
             .option("subscribe", "events").option("raftlog.provider.records", '{"events": [0]}')
             .load())
    assert empty.count() == 0  # no input partitions at all is fine


def test_stream_available_now_splits_by_max_offsets_and_resumes_exactly(spark, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")

    def run(counts):
        seen = []

        def sink(df, batch_id):
            seen.append((batch_id, sorted((r.topic, r.partition, r.offset, bytes(r.key),
                                           bytes(r.value)) for r in df.collect())))

        q = (spark.readStream.format("raftlog_plumbing_only").option("bootstrap", "127.0.0.1:1")
             .option("subscribe", "events").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "25").option("raftlog.read.timeout.ms", "10000")
             .option("raftlog.provider.records", json.dumps(counts)).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120), "the AvailableNow query did not finish"
        assert q.exception() is None
        return seen

    first = run({"events": [30, 20, 10]})
    sizes = [len(rows) for _bid, rows in first if rows]
    assert sizes == [25, 25, 10]  # 60 offsets backlog, at most 25 per trigger
    assert sorted(r for _bid, rows in first for r in rows) == expected_rows({"events": [30, 20, 10]})

    second = run({"events": [34, 20, 15]})  # "more was produced": 4 + 5 new records
    new_rows = sorted(r for _bid, rows in second for r in rows)
    assert new_rows == expected_rows({"events": [34, 20, 15]},
                                     {("events", 0): 30, ("events", 1): 20, ("events", 2): 10})
    assert min(bid for bid, rows in second if rows) > max(bid for bid, _ in first)

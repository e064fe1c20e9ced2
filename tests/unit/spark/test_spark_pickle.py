"""The data source, its readers (fresh and after driver-side planning) and their input partitions pickle as Spark pickles them, no socket is opened building them, and an unpickled reader reads through a provider it makes itself."""

import pickle
import socket

import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql.datasource import InputPartition  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from partition.batch import BatchBuilder  # noqa: E402
from spark_source.fetch import ClusterProvider, FetchAnswer, clear_provider_cache  # noqa: E402
from spark_source.options import NotAvailableYet  # noqa: E402
from spark_source.planning import PartitionMeta, RaftlogInputPartition  # noqa: E402
from spark_source.source import RaftlogDataSource  # noqa: E402

OPTIONS = {"bootstrap": "127.0.0.1:1", "subscribe": "t", "startingOffsets": "earliest",
           "maxOffsetsPerTrigger": "5"}
MADE = []  # providers made by TinyProvider, across the test


class TinyProvider:
    """Two partitions of 8 records each, in memory."""

    def __init__(self, options):
        MADE.append(self)
        b = BatchBuilder()
        for i in range(8):
            b.append(b"v%d" % i, None, timestamp_ms=i)
        self.batch = b.build()

    def list_partitions(self, topics):
        return [PartitionMeta("t", 0, 1, "h:1"), PartitionMeta("t", 1, 2, "h:2")]

    def earliest_offsets(self, tps):
        return {tp: 0 for tp in tps}

    def latest_offsets(self, tps):
        return {tp: 8 for tp in tps}

    def fetch(self, topic, partition, offset, max_bytes, *, leader_id=None, max_wait_ms=0):
        return FetchAnswer(self.batch, 8, 0)

    def check_groups(self):
        raise NotAvailableYet("no groups")

    def close(self):
        pass


class TinySource(RaftlogDataSource):
    provider_factory = TinyProvider


@pytest.fixture(autouse=True)
def no_sockets(monkeypatch):
    clear_provider_cache()

    def refuse(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield
    clear_provider_cache()


def roundtrip(obj):
    """As Spark does: cloudpickle for the source and readers, pickle for partitions."""
    return cloudpickle.loads(cloudpickle.dumps(obj))


def test_fresh_source_and_readers_pickle_without_io():
    src = roundtrip(RaftlogDataSource(dict(OPTIONS)))
    assert src.schema().startswith("key BINARY, value BINARY")
    for reader in (src.reader(None), src.streamReader(None)):
        back = roundtrip(reader)
        assert type(back) is type(reader)
        assert back._options == reader._options
        assert back._factory.__qualname__ == ClusterProvider.from_options.__qualname__


def test_commit_to_group_checks_the_provider_at_query_start():
    src = TinySource({**OPTIONS, "commitToGroup": "g"})
    with pytest.raises(NotAvailableYet, match="no groups"):
        src.streamReader(None)  # TinyProvider has no groups: the query fails at start


def test_driver_side_reader_after_planning_pickles_and_reads_elsewhere():
    reader = TinySource(dict(OPTIONS)).streamReader(None)
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(5)
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, ReadMaxRows(5))
    assert end == {"t": {"0": 3, "1": 2}}  # 5 of 16, shared by backlog
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 8, "1": 8}}
    parts = reader.partitions(start, end)
    assert [(p.partition, p.start, p.end, p.leader_id) for p in parts] == [(0, 0, 3, 1), (1, 0, 2, 2)]
    # The executor side: a new process knows nothing the driver built.
    shipped = roundtrip(reader)
    shipped_parts = [pickle.loads(pickle.dumps(p)) for p in parts]
    assert shipped_parts == parts and isinstance(shipped_parts[0], RaftlogInputPartition)
    clear_provider_cache()
    made_before = len(MADE)
    batches = list(shipped.read(shipped_parts[0]))
    assert [b.column("value").to_pylist() for b in batches] == [[b"v0", b"v1", b"v2"]]
    assert len(MADE) == made_before + 1  # made lazily in the reading process
    list(shipped.read(shipped_parts[1]))
    assert len(MADE) == made_before + 1  # and reused for the next partition


def test_batch_reader_plans_and_pickles():
    batch_options = {k: v for k, v in OPTIONS.items() if k != "maxOffsetsPerTrigger"}
    reader = TinySource(batch_options).reader(None)
    parts = reader.partitions()
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 8), (1, 0, 8)]
    back = roundtrip(reader)
    assert sum(b.num_rows for p in parts for b in back.read(p)) == 16
    # Spark reads one plain InputPartition(None) when partitions() is empty.
    assert list(back.read(InputPartition(None))) == []

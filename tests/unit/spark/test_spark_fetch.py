"""read_range reads exactly [start, end) of one partition through retriable errors and data loss rules, and ClusterProvider follows a NOT_LEADER answer to the new leader over real sockets (two in-memory trio listeners, not brokers)."""

import pytest
import trio

from partition.batch import BatchBuilder
from raftlog.base.errors import (
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raftlog.node.server import serve
from spark_source.fetch import ClusterProvider, FetchAnswer, read_range
from spark_source.options import DataLoss, ReadTimedOut
from spark_source.planning import RaftlogInputPartition


def batches(first, last, per=4):
    """Batches holding offsets [first, last), `per` records each."""
    out = []
    for base in range(first, last, per):
        b = BatchBuilder(base_offset=base)
        for off in range(base, min(last, base + per)):
            b.append(b"v%d" % off, None, timestamp_ms=off)
        out.append((base, min(last, base + per), b.build()))
    return out


class ScriptedProvider:
    """A log of offsets [log_start, log_end); `script` injects errors before answers."""

    def __init__(self, log_start, log_end, script=()):
        self.log = batches(0, log_end)
        self.log_start = log_start
        self.log_end = log_end
        self.script = list(script)
        self.asked = []

    def fetch(self, topic, partition, offset, max_bytes, *, leader_id=None, max_wait_ms=0):
        self.asked.append(offset)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            self.log_end = step  # "more records arrived"
            self.log = batches(0, self.log_end)
        if offset < self.log_start:
            raise OffsetOutOfRangeError("below", log_start_offset=self.log_start,
                                   log_end_offset=self.log_end)
        # Two batches per answer, whole, the first may begin before `offset`.
        got = [raw for base, end, raw in self.log if end > offset][:2]
        return FetchAnswer(b"".join(got), self.log_end, self.log_start)


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def offsets(provider, start, end, **kw):
    clock = FakeClock()
    part = RaftlogInputPartition("t", 0, start, end, 1, "h:1")
    out = [o for b in read_range(provider, part, clock=clock, sleep=clock.sleep, min_yield_rows=1,
                                 **kw) for o in b.column("offset").to_pylist()]
    return out, clock


def test_reads_exactly_the_range_even_when_more_arrives():
    p = ScriptedProvider(0, 20, script=[40])  # the first answer already sees 40 records
    got, clock = offsets(p, 3, 17)
    assert got == list(range(3, 17)) and clock.slept == []


def test_retriable_errors_back_off_and_retry():
    p = ScriptedProvider(0, 12, script=[NotLeaderError("moved", leader_id=2, leader="h:2"),
                                        UnknownTopicOrPartitionError("electing")])
    got, clock = offsets(p, 0, 12)
    assert got == list(range(12)) and len(clock.slept) == 2


def test_non_retriable_errors_raise():
    p = ScriptedProvider(0, 12, script=[OffsetOutOfRangeError("past the end", log_start_offset=0,
                                                         log_end_offset=5)] * 100)
    with pytest.raises(ReadTimedOut, match="planned end 12"):
        offsets(p, 8, 12, read_timeout_ms=1000)


def test_records_below_log_start_are_data_loss():
    with pytest.raises(DataLoss, match="log starts at 6"):
        offsets(ScriptedProvider(6, 12), 2, 12)
    got, _ = offsets(ScriptedProvider(6, 12), 2, 12, fail_on_data_loss=False)
    assert got == list(range(6, 12))


def test_a_leader_behind_the_planned_end_times_out():
    p = ScriptedProvider(0, 8)
    with pytest.raises(ReadTimedOut, match="high watermark 8"):
        offsets(p, 0, 12, read_timeout_ms=2000)


# ---------------------------------------------------------------- ClusterProvider over sockets


class Listener:
    """Broker `my_id` of two; partition t-0 is served by broker 2 (offsets 0..9); broker 1
    answers NOT_LEADER with a hint, at the request level or the partition level."""

    def __init__(self, my_id, ports, metadata_calls):
        self.my_id = my_id
        self.ports = ports
        self.fetches = 0
        self.metadata_calls = metadata_calls  # shared: the cluster's view moves once

    def handlers(self):
        return {"metadata": self.metadata, "fetch": self.fetch, "list_offsets": self.list_offsets}

    async def metadata(self, req):
        # The first answer says broker 1 leads (then leadership moves to broker 2): the client
        # must follow NOT_LEADER's hint and the next metadata.
        self.metadata_calls.append(self.my_id)
        leader, epoch = (1, 0) if len(self.metadata_calls) == 1 else (2, 1)
        return {"cluster_id": "c", "controller_id": 1,
                "brokers": [{"id": i, "host": "127.0.0.1", "port": self.ports[i], "fenced": False}
                            for i in (1, 2)],
                "topics": [{"name": "t", "internal": False, "configs": {}, "partitions": [
                    {"partition": 0, "leader": leader, "leader_epoch": epoch, "replicas": [1, 2],
                     "preferred_leader": 1}]}]}

    async def fetch(self, req):
        self.fetches += 1
        p = req.fields["partitions"][0]
        if self.my_id != 2:
            return {"partitions": [{"topic": "t", "partition": 0, "error": {
                "code": "NOT_LEADER", "message": "moved", "leader_id": 2,
                "leader": f"127.0.0.1:{self.ports[2]}"}}]}
        data = b"".join(raw for _b, end, raw in batches(0, 10) if end > p["fetch_offset"])
        return {"partitions": [{"topic": "t", "partition": 0, "high_watermark": 10,
                                "log_start_offset": 0, "records": data}]}

    async def list_offsets(self, req):
        p = req.fields["partitions"][0]
        if self.my_id != 2:
            raise NotLeaderError("moved", leader_id=2, leader=f"127.0.0.1:{self.ports[2]}")
        return {"partitions": [{"topic": "t", "partition": 0,
                                "offset": 0 if p["timestamp"] == -2 else 10, "timestamp": -1}]}


async def test_cluster_provider_follows_the_leader():
    ports = {}
    metadata_calls = []
    listeners = {i: Listener(i, ports, metadata_calls) for i in (1, 2)}
    async with trio.open_nursery() as nursery:
        for i, lst in listeners.items():
            ports[i] = await nursery.start(
                lambda task_status, lst=lst: serve(lst.handlers(), "127.0.0.1", 0,
                                                   max_frame_bytes=1 << 22,
                                                   request_timeout_ms=5000,
                                                   task_status=task_status))

        def client_side():
            provider = ClusterProvider(f"127.0.0.1:{ports[1]}", request_timeout_ms=5000)
            try:
                metas = provider.list_partitions(["t"])
                part = RaftlogInputPartition("t", 0, 2, 9, metas[0].leader_id, metas[0].leader)
                # The first fetch goes to broker 1: partition-level NOT_LEADER, then broker 2.
                rows = [o for b in read_range(provider, part, read_timeout_ms=10_000)
                        for o in b.column("offset").to_pylist()]
                ends = (provider.earliest_offsets([("t", 0)]), provider.latest_offsets([("t", 0)]))
                return metas, ends, rows
            finally:
                provider.close()

        with trio.fail_after(30):
            metas, ends, rows = await trio.to_thread.run_sync(client_side)
        nursery.cancel_scope.cancel()
    assert metas[0].leader_id == 1 and metas[0].leader == f"127.0.0.1:{ports[1]}"
    assert ends == ({("t", 0): 0}, {("t", 0): 10})
    assert rows == list(range(2, 9))
    assert listeners[1].fetches >= 1 and listeners[2].fetches >= 1

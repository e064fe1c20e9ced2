"""Issue 46: where an acks=all produce's time goes, on the leader. Each acks=all append that
waited for the high watermark is timed from its append to the commit (the majority's fsyncs;
raftlog_produce_commit_seconds, Kafka's Produce RemoteTimeMs), beside the fsync histogram;
an append committed already, or acks=1, is not counted. The broker's families sum the
replicas' buckets cumulatively, ending in +Inf."""

from __future__ import annotations

import random

import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.replica import Replica
from partition.telemetry import COMMIT_BUCKETS_S, LatencyBuckets, histogram_family

WAIT_S = 30


class _Quiet:
    def send(self, replica, to, message):
        raise AssertionError("a single voter sends nothing")

    def answering(self, broker_id):
        return False


def _batch(i: int) -> bytes:
    b = BatchBuilder()
    b.append(b"v%04d" % i, key=b"k%d" % i, timestamp_ms=1000 + i)
    return b.build()


async def test_acks_all_appends_are_timed_to_their_commit(tmp_path, nursery):
    r = Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1,), directory=tmp_path / "t-0",
                topic_config=TopicConfig.from_configs({}), transport=_Quiet(), rng=random.Random(1),
                clock_ms=lambda: 1000)
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    await r.start_election()
    with trio.fail_after(WAIT_S):
        while not r.is_leader:
            await r.tick()
            await trio.sleep(0.01)
    try:
        assert r.commit_seconds.snapshot()[2] == 0
        waited = 0
        for i in range(5):
            appended = await r.append_as_leader(_batch(i), acks=-1)
            if appended.waiter is not None:
                waited += 1
                await appended.waiter.wait(trio.current_time() + WAIT_S)
        await r.append_as_leader(_batch(9), acks=1)
        counts, total, count = r.commit_seconds.snapshot()
        assert waited >= 1 and count == waited  # one observation per acks=all wait, none for acks=1
        assert sum(counts) == count and total >= 0
    finally:
        await r.close()


def test_histogram_family_sums_replicas_cumulatively():
    broker, one, two = (LatencyBuckets(COMMIT_BUCKETS_S) for _ in range(3))
    one.observe(0.003)
    two.observe(0.003)
    two.observe(30.0)  # past the last bound: only +Inf
    broker.add(one)
    broker.add(two)
    family = histogram_family("raftlog_produce_commit_seconds", "help", buckets=broker)
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets["0.0025"] == 0 and buckets["0.005"] == 2 and buckets["10.0"] == 2 and buckets["+Inf"] == 3
    assert {s.name: s.value for s in family.samples if not s.name.endswith("_bucket")} == {
        "raftlog_produce_commit_seconds_count": 3, "raftlog_produce_commit_seconds_sum": 30.006}

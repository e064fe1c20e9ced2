"""Partition replication across real node processes: acks=all survives a leader SIGKILL exactly once, the old leader catches up, a stopped follower does not stop writes, and without a majority writes time out instead of being acknowledged."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from partition.batch import BatchBuilder

import node_harness as harness

TOPIC = "replicated"


def _batch(value: bytes) -> bytes:
    b = BatchBuilder()
    b.append(value, None, timestamp_ms=int(time.time() * 1000))
    return b.build()


def _partition(cluster, node: int, topic: str = TOPIC, partition: int = 0) -> dict | None:
    _, health = cluster.health(node)
    return health.get("replicas", {}).get("partitions", {}).get(f"{topic}-{partition}")


def _leader(cluster, topic: str = TOPIC) -> int | None:
    """The live node whose replica leads (and only one does)."""
    leaders = []
    for n in cluster.live():
        try:
            p = _partition(cluster, n, topic)
        except OSError:
            continue
        if p is not None and p.get("role") == "leader":
            leaders.append(n)
    return leaders[0] if len(leaders) == 1 else None


def _produce(cluster, node: int, value: bytes, timeout_ms: int = 2000) -> dict:
    r = harness.raw_call(cluster.client(node), "produce", timeout_s=timeout_ms / 1000 + 5,
                         acks=-1, timeout_ms=timeout_ms,
                         partitions=[{"topic": TOPIC, "partition": 0, "records": _batch(value)}])
    return r["partitions"][0] if "partitions" in r else r


def _produce_anywhere(cluster, value: bytes) -> int | None:
    """Try every live node once; the node that acknowledged, or None."""
    for n in cluster.live():
        try:
            if "error" not in _produce(cluster, n, value, timeout_ms=1000):
                return n
        except OSError:
            continue
    return None


@pytest.fixture
def cluster(tmp_path):
    with harness.NodeCluster(tmp_path, 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=30)
        c.call(1, "create_topic", name=TOPIC, partitions=1, replication_factor=3)
        c.wait_for(lambda: _leader(c), 15, "a partition leader")
        yield c
        for p in c.processes.values():
            p.signal(signal.SIGCONT)  # never leave a stopped process behind


def test_leader_sigkill_under_load_keeps_every_acked_record_exactly_once(cluster):
    from raftlog.client import Consumer, Producer

    producer = Producer(cluster.bootstrap(), acks="all", linger_ms=2, enable_idempotence=True,
                        delivery_timeout_ms=30_000, request_timeout_ms=5_000)
    acked: list[bytes] = []
    failed: list[bytes] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            futures = [(b"v%06d" % (i + k), producer.send(TOPIC, b"v%06d" % (i + k), partition=0))
                       for k in range(20)]
            i += 20
            for value, f in futures:
                try:
                    f.result(timeout=40)
                    acked.append(value)
                except Exception:  # an unknown or failed delivery: not counted as acked
                    failed.append(value)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        cluster.wait_for(lambda: len(acked) >= 200, 20, "some acknowledged writes")
        victim = _leader(cluster)
        assert victim is not None
        cluster.kill(victim)
        # How fast is `scripts/bench replication --failovers`'s to measure; here: it happens.
        cluster.wait_for(lambda: _produce_anywhere(cluster, b"probe"), 30, "a new leader")
        count = len(acked)
        cluster.wait_for(lambda: len(acked) >= count + 200, 30, "acked writes after failover")
    finally:
        stop.set()
        thread.join(60)
        producer.close()
    assert not thread.is_alive()
    cluster.start(victim)  # the old leader comes back and catches up from the new one
    new = _leader(cluster)

    def caught_up():
        old, lead = _partition(cluster, victim), _partition(cluster, new)
        return (old and lead and old["role"] == "follower"
                and old["log_end_offset"] == lead["log_end_offset"])

    cluster.wait_for(caught_up, 20, "the old leader to catch up")
    consumer = Consumer(cluster.bootstrap(), auto_offset_reset="earliest")
    consumer.assign([(TOPIC, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not set(acked) <= set(seen):
        seen += [r.value for r in consumer.poll(timeout_ms=500)]
    consumer.close()
    data = [v for v in seen if v != b"probe"]
    assert set(acked) <= set(data), "an acknowledged record is missing"
    assert len(data) == len(set(data)), "a record was written twice"


def test_a_stopped_follower_does_not_stop_writes_but_a_lost_majority_does(cluster):
    leader = _leader(cluster)
    followers = [n for n in cluster.live() if n != leader]
    assert "error" not in _produce(cluster, leader, b"before")
    cluster.processes[followers[0]].signal(signal.SIGSTOP)
    started = time.monotonic()
    for i in range(20):
        out = _produce(cluster, leader, b"one-follower-%d" % i)
        assert "error" not in out, out
    assert time.monotonic() - started < 10
    cluster.processes[followers[1]].signal(signal.SIGSTOP)
    out = _produce(cluster, leader, b"no-majority", timeout_ms=1000)
    # Never acknowledged: a timeout (unknown outcome), or NOT_LEADER once the leader resigns.
    assert out.get("error", {}).get("code") in ("REQUEST_TIMED_OUT", "NOT_LEADER"), out
    for n in followers:
        cluster.processes[n].signal(signal.SIGCONT)
    cluster.wait_for(lambda: _produce_anywhere(cluster, b"after"), 15, "writes to resume")

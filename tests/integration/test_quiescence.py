"""Quiescent partitions on real node processes (issue 19): idle groups stop ticking and wake at a write, and they fail over when their leader's process dies, is paused, or restarts at once."""

from __future__ import annotations

import signal
import time

import pytest

from partition.batch import BatchBuilder

import node_harness as harness

TOPIC = "idle"
PARTITIONS = 6
WINDOW_S = 3.0


def _batch(value: bytes) -> bytes:
    b = BatchBuilder()
    b.append(value, None, timestamp_ms=int(time.time() * 1000))
    return b.build()


def _replicas(cluster, node: int) -> dict:
    _, health = cluster.health(node)
    return health["replicas"]


def _all_quiet(cluster, nodes) -> bool:
    """Every replica of every node is quiescent: none is in its manager's tick loop."""
    for n in nodes:
        r = _replicas(cluster, n)
        if r["replicas"] == 0 or r["ticking"] != 0:
            return False
    return True


def _produce(cluster, node: int, partition: int, value: bytes, timeout_ms: int = 2000) -> dict:
    r = harness.raw_call(cluster.client(node), "produce", timeout_s=timeout_ms / 1000 + 5,
                         acks=-1, timeout_ms=timeout_ms,
                         partitions=[{"topic": TOPIC, "partition": partition, "records": _batch(value)}])
    return r["partitions"][0] if "partitions" in r else r


def _produce_anywhere(cluster, partition: int, value: bytes, nodes=None) -> int | None:
    for n in nodes or cluster.live():
        try:
            if "error" not in _produce(cluster, n, partition, value, timeout_ms=1000):
                return n
        except OSError:
            continue
    return None


def _leaders(cluster, node: int) -> dict[int, int]:
    md = cluster.call(node, "metadata", topics=[TOPIC])
    return {p["partition"]: p["leader"] for p in md["topics"][0]["partitions"]}


def _read_values(cluster, node: int, partition: int) -> list[bytes]:
    from raftlog.client import Consumer

    consumer = Consumer([cluster.client(node)], auto_offset_reset="earliest")
    try:
        consumer.assign([(TOPIC, partition)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=300)
            if not batch and seen:
                break
            seen += [r.value for r in batch]
        return seen
    finally:
        consumer.close()


@pytest.fixture
def cluster(tmp_path):
    with harness.NodeCluster(tmp_path, 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=30)
        c.call(1, "create_topic", name=TOPIC, partitions=PARTITIONS, replication_factor=3)
        c.wait_for(lambda: all(l in (1, 2, 3) for l in _leaders(c, 1).values()), 20, "leaders")
        yield c
        for p in c.processes.values():
            p.signal(signal.SIGCONT)  # never leave a stopped process behind


def test_idle_partitions_quiesce_and_wake_at_a_write(cluster):
    cluster.wait_for(lambda: _all_quiet(cluster, (1, 2, 3)), 20, "every replica quiescent")
    for p in range(PARTITIONS):
        assert cluster.wait_for(lambda: _produce_anywhere(cluster, p, b"w%d" % p), 15, "a write")
    # Every follower got the write (the leader answered the held fetches), and the groups
    # went quiet again.
    cluster.wait_for(lambda: _all_quiet(cluster, (1, 2, 3)), 20, "quiescent again")
    for n in (1, 2, 3):
        parts = _replicas(cluster, n)["partitions"]
        for p in range(PARTITIONS):
            s = parts[f"{TOPIC}-{p}"]
            assert s["quiescent"] and s["high_watermark"] == s["log_end_offset"] == 1, (n, p, s)
    assert _read_values(cluster, 1, 0) == [b"w0"]


def test_an_idle_node_does_not_run_its_tick_loop_every_tick(cluster):
    """With every replica quiescent, the tick loop sleeps until the links could have news
    (about once per silence limit, 1.25 s) instead of passing every 50 ms."""
    def quiet_window() -> dict[int, int] | None:
        """Each node's tick passes over WINDOW_S in which every replica stayed quiescent
        (None if one woke meanwhile: a new group may wake once more after it first quiets)."""
        cluster.wait_for(lambda: _all_quiet(cluster, (1, 2, 3)), 20, "every replica quiescent")
        before = {n: _replicas(cluster, n)["tick_passes"] for n in (1, 2, 3)}
        start = time.monotonic()
        while time.monotonic() - start < WINDOW_S:
            if not _all_quiet(cluster, (1, 2, 3)):
                return None
            time.sleep(0.25)
        return {n: _replicas(cluster, n)["tick_passes"] - before[n] for n in (1, 2, 3)}

    passes = cluster.wait_for(quiet_window, 60, "a window with every replica quiescent")
    assert all(p <= WINDOW_S * 2 for p in passes.values()), passes  # 20 a second before


@pytest.mark.parametrize("fault", ["kill", "pause", "restart"])
def test_quiescent_partitions_fail_over_from_their_leader(cluster, fault):
    """kill: connections to the dead leader are refused; pause (SIGSTOP): nothing answers,
    the link watch notices the silence; restart: the leader is back before any silence, and
    the fetches it held died with its process."""
    cluster.wait_for(lambda: _all_quiet(cluster, (1, 2, 3)), 20, "every replica quiescent")
    leaders = _leaders(cluster, 1)
    victim = max(set(leaders.values()), key=lambda n: list(leaders.values()).count(n))
    orphans = [p for p, l in leaders.items() if l == victim]
    survivors = [n for n in (1, 2, 3) if n != victim]
    if fault == "kill":
        cluster.kill(victim)
    elif fault == "pause":
        cluster.processes[victim].signal(signal.SIGSTOP)
    else:
        cluster.kill(victim)
        cluster.start(victim)
    reachable = survivors if fault == "pause" else None  # a paused process answers nothing
    for p in orphans:
        writer = cluster.wait_for(lambda: _produce_anywhere(cluster, p, b"after-%d" % p, reachable),
                                  30, f"a write to partition {p} after the leader's {fault}")
        if fault != "restart":
            assert writer in survivors
    if fault == "pause":
        cluster.processes[victim].signal(signal.SIGCONT)
    elif fault == "kill":
        cluster.start(victim)
    # The old leader rejoins as a follower and the groups go quiet again, everything in step.
    cluster.wait_for(lambda: _all_quiet(cluster, (1, 2, 3)), 30, "quiescent again")
    for p in orphans:
        ends = {_replicas(cluster, n)["partitions"][f"{TOPIC}-{p}"]["log_end_offset"] for n in (1, 2, 3)}
        assert len(ends) == 1, (p, ends)
        assert b"after-%d" % p in _read_values(cluster, survivors[0], p)

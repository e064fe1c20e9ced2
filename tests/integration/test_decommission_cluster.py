"""Growing and shrinking a cluster of real node processes on three racks: 3 -> 5 brokers while
an acks=all producer and a consumer run, `balance` spreads replicas and leaders over all five (one replica
per rack), then decommissioning one of the five empties it (internal topics included) and
fences it, and it is stopped; no acknowledged record is lost or written twice. A
decommission that would leave a topic with fewer brokers than its RF is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import node_harness as harness
from raftlog.base.errors import InvalidReplicationFactorError, RaftlogError

TOPIC = "elastic"
RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b"}


def _brokers(cluster) -> dict[int, dict]:
    return {b["id"]: b for b in cluster.status()["brokers"]}


def _partitions(cluster) -> list[tuple[str, dict]]:
    meta = cluster.call(1, "metadata", topics=None, internal=True)
    return [(t["name"], p) for t in meta["topics"] for p in t["partitions"]]


def _moving(cluster) -> list[dict]:
    return cluster.call(1, "list_partition_reassignments")["reassignments"]


def _start(cluster, node_id: int, *, add: bool) -> None:
    if add:
        cluster.add_node(node_id, start=False)
    cluster.configs[node_id] = dataclasses.replace(cluster.configs[node_id], broker_rack=RACKS[node_id])
    cluster.start(node_id)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("elastic"), 3) as c:
        for n in (1, 2, 3):
            c.configs[n] = dataclasses.replace(c.configs[n], broker_rack=RACKS[n])
        c.start_all()
        c.wait_ready(timeout_s=60)
        c.call(1, "create_topic", name=TOPIC, partitions=6, replication_factor=3)
        c.wait_for(lambda: all(p["leader"] >= 0 for _, p in _partitions(c)), 60, "leaders everywhere")
        yield c


class _Worker:
    """A client (`self.client`) used by `_run` in a thread until `close`, which closes it."""

    client: object

    def __init__(self, prefix: bytes):
        self.prefix = prefix
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        self.thread.join(90)
        self.client.close()
        assert not self.thread.is_alive()


class _Load(_Worker):
    """An acks=all idempotent producer on TOPIC; `acked` are the values acknowledged."""

    def __init__(self, cluster, prefix: bytes):
        from raftlog.client import Producer

        self.client = Producer(cluster.bootstrap(), acks="all", linger_ms=2, enable_idempotence=True,
                               delivery_timeout_ms=60_000, request_timeout_ms=5_000)
        self.acked: list[bytes] = []
        super().__init__(prefix)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            values = [self.prefix + b"%07d" % (i + k) for k in range(20)]
            futures = [(v, self.client.send(TOPIC, v)) for v in values]
            i += 20
            for value, f in futures:
                try:
                    f.result(timeout=70)
                    self.acked.append(value)
                except RaftlogError:
                    pass


class _Reader(_Worker):
    """A consumer of every partition of TOPIC from the start while the cluster changes;
    `seen` are the values of `prefix` it read."""

    def __init__(self, cluster, prefix: bytes):
        from raftlog.client import Consumer

        self.client = Consumer(cluster.bootstrap(), auto_offset_reset="earliest")
        self.client.assign([(TOPIC, p) for p in range(6)])
        self.seen: list[bytes] = []
        super().__init__(prefix)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.seen += [r.value for r in self.client.poll(timeout_ms=300) if r.value.startswith(self.prefix)]
            except RaftlogError:  # a leader moved: the next poll finds it
                pass


def _check_all_read(cluster, acked: list[bytes]) -> None:
    from raftlog.client import Consumer

    consumer = Consumer(cluster.bootstrap(), auto_offset_reset="earliest")
    consumer.assign([(TOPIC, p) for p in range(6)])
    seen: list[bytes] = []
    prefix = acked[0][:1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not set(acked) <= set(seen):
        seen += [r.value for r in consumer.poll(timeout_ms=500) if r.value.startswith(prefix)]
    consumer.close()
    assert set(acked) <= set(seen), f"{len(set(acked) - set(seen))} acknowledged records missing"
    assert len(seen) == len(set(seen)), "a record was written twice"


def test_grow_three_to_five_and_balance_under_load(cluster):
    load = _Load(cluster, b"g")
    reader = _Reader(cluster, b"g")
    try:
        cluster.wait_for(lambda: len(load.acked) >= 200, 60, "acknowledged writes before growing")
        _start(cluster, 4, add=True)
        _start(cluster, 5, add=True)
        cluster.wait_ready(timeout_s=60, brokers=[1, 2, 3, 4, 5])
        assert _brokers(cluster)[4]["replicas"] == 0  # a new broker is empty until balancing
        plan = cluster.call(1, "balance", dry_run=True)["moves"]
        assert plan and not _moving(cluster)
        started = cluster.call(2, "balance")["moves"]
        assert started and not any("error" in m for m in started), started
        cluster.wait_for(lambda: not _moving(cluster), 240, "the balancing moves to finish")
        brokers = _brokers(cluster)
        counts = {b: brokers[b]["replicas"] for b in range(1, 6)}
        # rack c has one broker (3): it keeps a replica of every partition; racks a and b split theirs
        assert counts[3] == len(_partitions(cluster)), counts
        assert abs(counts[1] - counts[4]) <= 3 and abs(counts[2] - counts[5]) <= 3, counts
        for name, p in _partitions(cluster):
            assert len({RACKS[r] for r in p["replicas"]}) == 3, (name, p)
        count = len(load.acked)
        cluster.wait_for(lambda: len(load.acked) >= count + 200, 60, "acknowledged writes after balancing")
    finally:
        load.close()
    try:  # the consumer that ran throughout reads every acknowledged record, each once
        cluster.wait_for(lambda: set(load.acked) <= set(reader.seen), 60, "the running consumer to catch up")
    finally:
        reader.close()
    assert len(reader.seen) == len(set(reader.seen)), "the running consumer read a record twice"
    _check_all_read(cluster, load.acked)


def test_decommission_refused_when_a_topic_would_lack_brokers(cluster):
    cluster.call(1, "create_topic", name="wide", partitions=1, replication_factor=5)
    try:
        with pytest.raises(InvalidReplicationFactorError, match="topic wide"):
            cluster.call(1, "decommission_broker", broker_id=5)
        assert _brokers(cluster)[5]["state"] == "active"
    finally:
        cluster.call(1, "delete_topic", name="wide")
    with pytest.raises(RaftlogError, match="not registered"):
        cluster.call(1, "decommission_broker", broker_id=42)


def test_decommission_one_of_five_under_load_then_stop_it(cluster):
    load = _Load(cluster, b"d")
    try:
        cluster.wait_for(lambda: len(load.acked) >= 200, 60, "acknowledged writes before")
        env = dict(os.environ, RAFTLOG_BOOTSTRAP=",".join(cluster.bootstrap()))
        env.pop("RAFTLOG_DEBUG", None)
        out = subprocess.run([sys.executable, "-m", "raftlog.cli", "brokers", "decommission", "5"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0 and "broker 5: draining" in out.stdout, out
        cluster.wait_for(lambda: _brokers(cluster)[5]["state"] == "decommissioned", 240,
                         "broker 5 to be emptied and decommissioned")
        assert all(5 not in p["replicas"] for _, p in _partitions(cluster))
        listed = subprocess.run([sys.executable, "-m", "raftlog.cli", "brokers", "list", "--json"],
                                capture_output=True, text=True, env=env, timeout=60)
        row = next(b for b in json.loads(listed.stdout) if b["id"] == 5)
        assert row["state"] == "decommissioned" and row["replicas"] == 0 and row["fenced"], row
        cluster.terminate(5)
        count = len(load.acked)
        cluster.wait_for(lambda: len(load.acked) >= count + 200, 60, "acknowledged writes after")
    finally:
        load.close()
    _check_all_read(cluster, load.acked)

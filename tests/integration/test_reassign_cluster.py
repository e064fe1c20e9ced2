"""A replica moves between real node processes: of a 4-node cluster, one partition's replica
goes from one broker to the new one while an acks=all producer runs, and nothing acknowledged
is lost; bad plans are refused with Kafka's errors and change nothing."""

from __future__ import annotations

import json
import threading
import time

import pytest

import node_harness as harness
from raftlog.base.errors import RaftlogError

TOPIC = "moving"


def _partition(cluster, node: int, partition: int = 0) -> dict | None:
    try:
        _, health = cluster.health(node)
    except OSError:
        return None
    return health.get("replicas", {}).get("partitions", {}).get(f"{TOPIC}-{partition}")


def _replicas(cluster, partition: int = 0) -> list[int]:
    meta = cluster.call(1, "metadata", topics=[TOPIC])
    [topic] = meta["topics"]
    return topic["partitions"][partition]["replicas"]


def _moves(cluster) -> list[dict]:
    return cluster.call(1, "list_partition_reassignments")["reassignments"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("reassign"), 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        c.add_node(4)
        c.wait_ready(timeout_s=60, brokers=[1, 2, 3, 4])
        c.call(1, "create_topic", name=TOPIC, partitions=2, replication_factor=3)
        c.wait_for(lambda: any((_partition(c, n) or {}).get("role") == "leader" for n in (1, 2, 3, 4)),
                   30, "a leader of the partition")
        yield c


def test_bad_plans_are_refused_and_change_nothing(cluster):
    before = _replicas(cluster, 1)
    cases = [([1, 2, 99], "INVALID_REPLICA_ASSIGNMENT"), ([1, 1, 2], "INVALID_REPLICA_ASSIGNMENT"),
             ([], "INVALID_REPLICA_ASSIGNMENT")]
    for replicas, code in cases:
        answer = cluster.call(1, "alter_partition_reassignments",
                              partitions=[{"topic": TOPIC, "partition": 1, "replicas": replicas}])
        assert answer["results"][0]["error"]["code"] == code, (replicas, answer)
    answer = cluster.call(2, "alter_partition_reassignments",
                          partitions=[{"topic": TOPIC, "partition": 1, "replicas": None}])
    assert answer["results"][0]["error"]["code"] == "NO_REASSIGNMENT_IN_PROGRESS"
    answer = cluster.call(2, "alter_partition_reassignments",
                          partitions=[{"topic": "nope", "partition": 0, "replicas": [1, 2, 3]}])
    assert answer["results"][0]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert _replicas(cluster, 1) == before and _moves(cluster) == []


def test_a_replica_moves_to_the_new_broker_under_acks_all_load(cluster):
    from raftlog.client import Consumer, Producer

    original = _replicas(cluster)
    new = next(b for b in (1, 2, 3, 4) if b not in original)  # 3 replicas on 4 brokers
    leaving = original[-1]
    target = [r for r in original if r != leaving] + [new]
    producer = Producer(cluster.bootstrap(), acks="all", linger_ms=2, enable_idempotence=True,
                        delivery_timeout_ms=30_000, request_timeout_ms=5_000)
    acked: list[bytes] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            futures = [(b"m%06d" % (i + k), producer.send(TOPIC, b"m%06d" % (i + k), partition=0))
                       for k in range(20)]
            i += 20
            for value, f in futures:
                try:
                    f.result(timeout=40)
                    acked.append(value)
                except RaftlogError:  # failed or unknown: not counted as acked
                    pass

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        cluster.wait_for(lambda: len(acked) >= 200, 30, "acknowledged writes before the move")
        answer = cluster.call(1, "alter_partition_reassignments",
                              partitions=[{"topic": TOPIC, "partition": 0, "replicas": target}])
        assert answer["results"] == [{}], answer
        moves = _moves(cluster)
        assert moves and moves[0]["adding_replicas"] == [new] and moves[0]["removing_replicas"] == [leaving]
        cluster.wait_for(lambda: not _moves(cluster) and sorted(_replicas(cluster)) == sorted(target),
                         90, "the move to finish")
        cluster.wait_for(lambda: _partition(cluster, new) is not None and _partition(cluster, leaving) is None,
                         60, "the new broker to host the replica and the old one to drop it")
        count = len(acked)
        cluster.wait_for(lambda: len(acked) >= count + 200, 30, "acknowledged writes after the move")
    finally:
        stop.set()
        thread.join(60)
        producer.close()
    assert not thread.is_alive()

    def caught_up():
        parts = [_partition(cluster, n) for n in target]
        ends = {p["log_end_offset"] for p in parts if p}
        return len(ends) == 1 and all(parts)

    cluster.wait_for(caught_up, 30, "the new replica set to agree")
    consumer = Consumer(cluster.bootstrap(), auto_offset_reset="earliest")
    consumer.assign([(TOPIC, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not set(acked) <= set(seen):
        seen += [r.value for r in consumer.poll(timeout_ms=500)]
    consumer.close()
    assert set(acked) <= set(seen), "an acknowledged record is missing"
    assert len(seen) == len(set(seen)), "a record was written twice"


def test_kafka_admin_moves_lists_and_cancels(cluster):
    """kafka-python's KafkaAdminClient speaks AlterPartitionReassignments and
    ListPartitionReassignments to our Kafka listener: a move is listed, then cancelled;
    an unknown broker is refused per partition."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import InvalidReplicationAssignmentError as KafkaInvalidReplicaAssignment

    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=15_000)
    try:
        tp = TopicPartition(TOPIC, 1)
        original = _replicas(cluster, 1)
        refused = admin.alter_partition_reassignments({tp: [1, 2, 99]})
        assert refused[tp] is KafkaInvalidReplicaAssignment and _replicas(cluster, 1) == original
        # A move to a broker whose replica we then cancel before it can finish for certain:
        # either the cancel finds the move (then the replicas go back) or it already ended.
        new = next(b for b in (1, 2, 3, 4) if b not in original)
        target = original[:-1] + [new]
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        listed = admin.list_partition_reassignments([tp])
        cancelled = admin.alter_partition_reassignments({tp: None})
        if cancelled[tp] is None:  # it was still moving
            assert tp in listed and listed[tp]["adding_replicas"] == [new]
            cluster.wait_for(lambda: not _moves(cluster) and sorted(_replicas(cluster, 1)) == sorted(original),
                             60, "the cancelled move to end at the original replicas")
        else:
            assert cancelled[tp].__name__ == "NoReassignmentInProgressError"
            assert sorted(_replicas(cluster, 1)) == sorted(target)
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()


def test_cli_reassign_and_reassignments(cluster):
    """`raftlog partitions reassign` refuses a bad plan with the reason and exit 1, and
    `raftlog partitions reassignments` lists what is moving (nothing, here)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, RAFTLOG_BOOTSTRAP=",".join(cluster.bootstrap()))
    env.pop("RAFTLOG_DEBUG", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raftlog.cli", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    bad = run("partitions", "reassign", TOPIC, "1", "--to-brokers", "1,2,99")
    assert bad.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in bad.stdout and "99" in bad.stdout, bad
    assert run("partitions", "reassign", TOPIC, "1", "--to-brokers", "1,x").returncode != 0
    listed = run("partitions", "reassignments", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed

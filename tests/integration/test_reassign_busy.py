"""A move of an internal topic's partition while its coordinator is busy is refused with the
reason and changes nothing; the same move goes through once the coordinator is idle (issue
44 "Bad input"; metadata/reassignment.py "Busy coordinators").

Busy, for real: a transaction writes to a partition on one broker, that broker is killed,
the transaction is committed: its coordinator (the leader of its `__transaction_state`
partition, on another broker) has COMMIT markers it cannot write. Moving that
`__transaction_state` partition is refused with CONCURRENT_TRANSACTIONS naming the
transactional id, through `raftlog partitions reassign` and the Kafka listener's
AlterPartitionReassignments; once the broker is back and the markers are written it moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from raftlog.base.topics import TRANSACTION_STATE_TOPIC, partition_for_transactional_id

pytestmark = pytest.mark.cluster

TID = "h4-busy-coordinator"
TOPIC = "busy-target"


def _replicas(cluster, node: int, topic: str, partition: int) -> tuple[int, list[int]]:
    [t] = cluster.call(node, "metadata", topics=[topic])["topics"]
    p = t["partitions"][partition]
    return p["leader"], p["replicas"]


def _busy(cluster) -> list[dict]:
    for n in cluster.live():
        try:
            return cluster.call(n, "cluster_status")["busy_partitions"]
        except Exception:  # noqa: BLE001 - another node answers (a controller election)
            continue
    return []


def _moves(cluster) -> list[dict]:
    return cluster.call(cluster.live()[0], "list_partition_reassignments")["reassignments"]


def _cli(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAFTLOG_BOOTSTRAP=",".join(cluster.bootstrap()))
    env.pop("RAFTLOG_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "raftlog.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_a_busy_transaction_coordinators_partition_is_not_moved_until_idle(cluster):
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import ConcurrentTransactionsError, KafkaConnectionError

    p = partition_for_transactional_id(TID)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": TID,
                         "transaction.timeout.ms": 300_000, "message.timeout.ms": 120_000})
    cluster.wait_for(lambda: _init(producer), 120, "InitProducerId (it creates the topic)")
    coordinator, original = _replicas(cluster, 1, TRANSACTION_STATE_TOPIC, p)
    controller = cluster.call(1, "cluster_status")["controller_id"]  # it stays up: no failover
    victim = next(b for b in (3, 2, 1) if b not in (coordinator, controller))
    cluster.call(1, "create_topic", name=TOPIC, partitions=1, replication_factor=1, assignments=[[victim]])
    cluster.wait_for(lambda: all(_replicas(cluster, n, TOPIC, 0)[0] == victim for n in (1, 2, 3)),
                     60, "every node to know the topic's leader")
    producer.begin_transaction()
    producer.produce(TOPIC, b"in a transaction", partition=0)
    assert producer.flush(60) == 0
    cluster.kill(victim)
    committed: list[BaseException | None] = []
    committer = threading.Thread(target=lambda: committed.append(_commit(producer)), daemon=True)
    committer.start()
    try:
        cluster.wait_for(lambda: any(b["topic"] == TRANSACTION_STATE_TOPIC and b["partition"] == p
                                     for b in _busy(cluster)), 120, "the coordinator reported busy")
        target = [coordinator, next(b for b in (1, 2, 3) if b not in (coordinator, victim))]
        refused = _cli(cluster, "partitions", "reassign", TRANSACTION_STATE_TOPIC, str(p),
                       "--to-brokers", ",".join(map(str, target)))
        assert refused.returncode == 1, refused
        assert "CONCURRENT_TRANSACTIONS" in refused.stdout and TID in refused.stdout, refused
        assert "coordinator is busy" in refused.stdout, refused
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)

        def refused_by_admin() -> bool:
            """kafka-python's admin client learns the controller from any broker Metadata names,
            the killed one too until it is fenced (as on Kafka), and raises ECONNREFUSED if it
            picks that one: ask again, a new client each time, under the deadline."""
            try:
                admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=15_000)
            except KafkaConnectionError:
                return False
            try:
                return admin.alter_partition_reassignments({tp: target})[tp] is ConcurrentTransactionsError
            except KafkaConnectionError:
                return False
            finally:
                admin.close()
        assert cluster.wait_for(refused_by_admin, 60, "the admin client's reassignment refused")
        live = next(b for b in (1, 2, 3) if b != victim)
        assert _moves(cluster) == [] and sorted(_replicas(cluster, live, TRANSACTION_STATE_TOPIC, p)[1]) == \
            sorted(original)  # nothing half-done
    finally:
        cluster.start(victim)
        cluster.wait_ready(timeout_s=120)
        committer.join(timeout=180)
    assert committed == [None], committed
    producer.flush(10)
    # Idle: the markers are written and the same move goes through (then back to RF 3).
    cluster.wait_for(lambda: not any(b["topic"] == TRANSACTION_STATE_TOPIC for b in _busy(cluster)),
                     120, "the coordinator idle again")
    moved = _cli(cluster, "partitions", "reassign", TRANSACTION_STATE_TOPIC, str(p),
                 "--to-brokers", ",".join(map(str, target)))
    assert moved.returncode == 0 and "moving to" in moved.stdout, moved
    cluster.wait_for(lambda: not _moves(cluster), 120, "the move to finish")
    back = _cli(cluster, "partitions", "reassign", TRANSACTION_STATE_TOPIC, str(p),
                "--to-brokers", ",".join(map(str, original)))
    assert back.returncode == 0, back
    cluster.wait_for(lambda: not _moves(cluster) and sorted(_replicas(cluster, 1, TRANSACTION_STATE_TOPIC, p)[1])
                     == sorted(original), 120, "the move back to finish")


def _init(producer) -> bool:
    from confluent_kafka import KafkaException

    try:
        producer.init_transactions(30)
    except KafkaException as exc:  # retriable while __transaction_state elects its leaders
        if not exc.args[0].retriable():
            raise
        return False
    return True


def _commit(producer) -> BaseException | None:
    try:
        producer.commit_transaction(170)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        return exc
    return None

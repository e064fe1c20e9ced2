"""Share groups (KIP-932) through the Kafka listener on a fresh three-node cluster: the first ShareGroupHeartbeats, sent at once to every coordinator while `__share_group_state` is created and elects its leaders, are answered with success or a retriable coordinator error (never NOT_LEADER_OR_FOLLOWER, which Kafka's clients take as fatal in a heartbeat); then confluent-kafka's ShareConsumer reads and acknowledges every record."""

from __future__ import annotations

import threading
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from raftlog.client import Admin  # noqa: E402
from raftlog.node.kafka.schemas import ShareGroupHeartbeatRequest  # noqa: E402
from test_kafka_groups import create, wait_coordinators  # noqa: E402
from test_kip848_kafka import raw  # noqa: E402

pytestmark = pytest.mark.cluster

TOPIC = "share-kafka"
PARTITIONS = 3
TIMEOUT_S = 90
GROUP_ID_NOT_FOUND = 69
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _join(cluster, group: str) -> int:
    """One ShareGroupHeartbeat v1 joining `group` (member epoch 0): its error code."""
    answer = raw(cluster, group, ShareGroupHeartbeatRequest[1](
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None,
        subscribed_topic_names=[TOPIC]), 1)
    return answer.error_code


def test_first_heartbeats_race_the_state_topic_and_get_retriable_errors(cluster):
    wait_coordinators(cluster)
    create(cluster, TOPIC, PARTITIONS)
    groups = [f"first-share-{i}" for i in range(6)]  # spread over the three coordinators
    codes: dict[str, list[int]] = {g: [] for g in groups}
    start = threading.Barrier(len(groups))

    def join(group: str) -> None:
        start.wait(timeout=30)
        while not codes[group] or codes[group][-1] in RETRIABLE:
            if len(codes[group]) >= 200:  # bounded: the assertion below names what came back
                return
            codes[group].append(_join(cluster, group))

    threads = [threading.Thread(target=join, args=(g,), daemon=True) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert all(not t.is_alive() for t in threads), codes
    assert {g: c[-1] for g, c in codes.items()} == {g: 0 for g in groups}, codes
    assert set().union(*codes.values()) <= RETRIABLE | {0}, codes


def test_confluent_share_consumer_acknowledges_every_record(cluster):
    values = [f"v-{i}" for i in range(30)]
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": cluster.kafka_bootstrap(),
                                              "group.id": "ck-share", "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([TOPIC])
        producer = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
        seen: list[str] = []
        warmed: set[int] = set()

        def poll_once() -> None:
            for m in consumer.poll(0.5) or ():
                if m.error() is not None:
                    continue
                consumer.acknowledge(m)
                value = m.value().decode()
                if value.startswith("warm"):
                    warmed.add(m.partition())
                else:
                    seen.append(value)
            consumer.commit_sync()

        # A new share group starts at the log end (share.auto.offset.reset=latest): warm-up
        # records until every partition delivered one, then the records counted.
        def warm() -> bool:
            for p in range(PARTITIONS):
                producer.produce(TOPIC, b"warm", partition=p)
            assert producer.flush(30) == 0
            poll_once()
            return len(warmed) == PARTITIONS

        cluster.wait_for(warm, TIMEOUT_S, "a warm-up record from every partition")
        for i, v in enumerate(values):
            producer.produce(TOPIC, v.encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        def all_read() -> bool:
            poll_once()
            return set(values) <= set(seen)

        cluster.wait_for(all_read, TIMEOUT_S, "every record acknowledged")
        assert sorted(seen) == sorted(values), "each record delivered once"
        del producer  # flushed: destroyed now, not after the cluster stops
    finally:
        consumer.close()


def test_delete_groups_deletes_an_empty_share_group_only(cluster):
    """DeleteGroups (42) serves share groups as Kafka 4 does (kafka-share-groups --delete):
    one with members is NON_EMPTY_GROUP and keeps serving; an empty one is deleted, then gone."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})

    def delete(group: str) -> int:
        try:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(60)
            return 0
        except confluent_kafka.KafkaException as exc:
            return exc.args[0].code()

    assert delete("first-share-0") == confluent_kafka.KafkaError.NON_EMPTY_GROUP  # its member's session runs
    assert _join(cluster, "first-share-0") == 0, "the group keeps serving"
    with Admin(cluster.bootstrap()) as native:
        def start_offset() -> int | None:
            return native.request({"op": "share_group_offsets", "group_id": "ck-share", "topic": TOPIC,
                                   "partition": 0}, route=(TOPIC, 0))["start_offset"]

        assert start_offset() is not None, "the consumer's share partitions have state"
        assert delete("ck-share") == 0, "closed consumer: the group is empty"
        assert delete("ck-share") == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND
        assert start_offset() is None, "its share partitions' state is deleted with it, as Kafka's"


def test_share_heartbeat_for_a_classic_groups_id_is_group_id_not_found(cluster):
    """A group id a classic group holds: ShareGroupHeartbeat answers GROUP_ID_NOT_FOUND (69), as
    Kafka's, and the classic group keeps its member."""
    consumer = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "classic-not-share",
                           "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        cluster.wait_for(lambda: (consumer.poll(0.2), consumer.assignment())[1], TIMEOUT_S,
                         "the classic member's assignment")
        assert _join(cluster, "classic-not-share") == GROUP_ID_NOT_FOUND
        assert consumer.assignment(), "the classic group keeps serving"
    finally:
        consumer.close()

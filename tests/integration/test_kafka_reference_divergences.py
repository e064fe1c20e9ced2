"""Where raftlog's Kafka listener answered differently from Apache Kafka (issue 40, "Why"), each
checked with a real client against a three-node cluster: negative committed offsets are stored
(KafkaJS commits -2 after OFFSET_OUT_OF_RANGE), a commit for a topic that does not exist is
refused per partition, an invalid topic name is INVALID_TOPIC_EXCEPTION, a consumer whose
rebalance timeout is small joins an empty group, Produce answers the log start offset, and
ListOffsets by timestamp answers the first offset whose record timestamp is at or after the one
asked for."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KPTopicPartition

from raftlog.client.group_admin import GroupAdmin

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError  # noqa: E402
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition as CKTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from test_kafka_wire_versions import Conn  # noqa: E402
from test_kafka_groups import TIMEOUT_S, create, produce, wait_coordinators, wait_until  # noqa: E402


MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def kafka(cluster) -> str:
    """The cluster's Kafka bootstrap once every group has a coordinator."""
    wait_coordinators(cluster)
    return cluster.kafka_bootstrap()


def test_negative_committed_offset_is_stored_and_means_no_position(cluster, kafka):
    create(cluster, "neg-commit")
    produce(cluster, "neg-commit", ["a", "b", "c"])
    tp = KPTopicPartition("neg-commit", 0)
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id="neg-group", enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(-2, "after OFFSET_OUT_OF_RANGE", -1)})  # before: INVALID_REQUEST
        assert consumer.committed(tp) == -2 or consumer.committed(tp) is None
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": kafka})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("neg-group")])["neg-group"].result(TIMEOUT_S)
    assert [(p.topic, p.partition, p.offset) for p in listed.topic_partitions] == [("neg-commit", 0, -2)]
    with GroupAdmin(cluster.bootstrap()) as groups:
        rows = groups.describe_group("neg-group")["partitions"]
    # A negative committed offset is no position: no lag computed from it (end - (-2) would be 5).
    assert all(r["lag"] is None for r in rows if r["topic"] == "neg-commit"), rows


def test_commit_for_a_topic_that_does_not_exist_is_unknown_topic(cluster, kafka):
    create(cluster, "commit-known", 1)
    admin = AdminClient({"bootstrap.servers": kafka})
    request = ConsumerGroupTopicPartitions("ghost-group", [CKTopicPartition("no-such-topic", 0, 5),
                                                           CKTopicPartition("commit-known", 0, 0)])
    answer = admin.alter_consumer_group_offsets([request])["ghost-group"].result(TIMEOUT_S)
    errors = {(p.topic, p.partition): p.error and p.error.code() for p in answer.topic_partitions}
    # Before: both committed with no error (Kafka answers UNKNOWN_TOPIC_OR_PARTITION for the first).
    assert errors == {("no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART, ("commit-known", 0): None}, errors


@pytest.mark.parametrize("name", ["bad name!", "t" * 250])
def test_producing_to_an_invalid_topic_name_fails_the_message(kafka, name):
    """librdkafka fails the queued messages on INVALID_TOPIC_EXCEPTION; on the
    UNKNOWN_TOPIC_OR_PARTITION answered before it kept them until message.timeout.ms."""
    reports: list[Any] = []
    producer = CKProducer({"bootstrap.servers": kafka, "message.timeout.ms": 120_000})
    producer.produce(name, b"v", on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + TIMEOUT_S
    while not reports and time.monotonic() < deadline:
        producer.poll(0.2)
    assert reports, "no delivery report (the message waits out message.timeout.ms)"
    assert reports[0] is not None and reports[0].code() in (KafkaError.TOPIC_EXCEPTION, KafkaError._INVALID_ARG), reports[0]


def test_consumer_with_a_small_rebalance_timeout_joins_an_empty_group(cluster, kafka):
    """librdkafka's rebalance timeout is max.poll.interval.ms; here it equals the coordinator's
    initial rebalance delay (1 s). Before, the listener's wait for the join ended with the delay
    and every JoinGroup was answered REQUEST_TIMED_OUT; Kafka completes the rebalance."""
    create(cluster, "small-rebalance")
    produce(cluster, "small-rebalance", [f"v{i}" for i in range(6)])
    joins: list[str] = []
    consumer = CKConsumer({
        "bootstrap.servers": kafka, "group.id": "small-rebalance-group", "auto.offset.reset": "earliest",
        "session.timeout.ms": 1000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 1000,
    })
    try:
        consumer.subscribe(["small-rebalance"], on_assign=lambda c, parts: joins.append("assigned"))
        deadline = time.monotonic() + TIMEOUT_S
        got = None
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got = message
    finally:
        consumer.close()
    assert joins and got is not None, "the consumer never joined the group"


def batch(values: list[bytes], timestamps_ms: list[int]) -> bytes:
    """One record batch of `values`, each with its own timestamp."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (v, ts) in enumerate(zip(values, timestamps_ms)):
        b.append(i, timestamp=ts, key=None, value=v, headers=[])
    return bytes(b.build())


def leader_of(cluster, topic: str, partition: int) -> int:
    def known() -> int | None:
        [t] = cluster.call(cluster.live()[0], "metadata", topics=[topic])["topics"]
        leader = {p["partition"]: p["leader"] for p in t["partitions"]}[partition]
        return leader if leader is not None and leader >= 0 else None

    return cluster.wait_for(known, 30, f"the leader of {topic}-{partition}")


def test_produce_answer_carries_the_log_start_offset(cluster, kafka):
    """Kafka's Produce answer gives the partition's log start offset (before: -1)."""
    create(cluster, "produce-start")
    produce(cluster, "produce-start", ["a", "b", "c", "d", "e", "f", "g"])  # i % PARTITIONS: 0 and 6 in 0
    admin = AdminClient({"bootstrap.servers": kafka})
    tp = CKTopicPartition("produce-start", 0, 1)
    admin.delete_records([tp])[tp].result(TIMEOUT_S)
    conn = Conn(cluster, leader_of(cluster, "produce-start", 0))
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name="produce-start", partition_data=[T.PartitionProduceData(
            index=0, records=batch([b"h"], [int(time.time() * 1000)]))])])
    try:
        [t] = conn.call(request, ProduceResponse, 9).responses
    finally:
        conn.sock.close()
    [p] = t.partition_responses
    assert (p.error_code, p.base_offset, p.log_start_offset) == (0, 2, 1), p


def produce_batches(cluster, topic: str, batches: list[list[int]]) -> None:
    """To partition 0, one Produce request a batch, each record with its timestamp (ms)."""
    conn = Conn(cluster, leader_of(cluster, topic, 0))
    T = ProduceRequest.TopicProduceData
    try:
        for stamps in batches:
            records = batch([f"at {ts}".encode() for ts in stamps], stamps)
            request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
                T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=records)])])
            [t] = conn.call(request, ProduceResponse, 9).responses
            assert t.partition_responses[0].error_code == 0, t
    finally:
        conn.sock.close()


def test_offsets_for_times_is_the_first_record_at_or_after(cluster, kafka):
    """Kafka answers the earliest offset whose record timestamp >= the one asked for, each
    record of a batch by its own timestamp (before: the base offset of the batch holding it)."""
    create(cluster, "by-time")
    t0 = int(time.time() * 1000) - 60_000
    produce_batches(cluster, "by-time", [[t0, t0 + 1000, t0 + 2000], [t0 + 3000, t0 + 4000]])
    consumer = CKConsumer({"bootstrap.servers": kafka, "group.id": "by-time-reader"})
    try:
        asked = {t0 - 1: 0, t0 + 500: 1, t0 + 2000: 2, t0 + 2500: 3, t0 + 3500: 4, t0 + 9000: -1}
        found = {ts: consumer.offsets_for_times([CKTopicPartition("by-time", 0, ts)], TIMEOUT_S)[0].offset
                 for ts in asked}  # one partition asked once a request, as Kafka requires
    finally:
        consumer.close()
    assert found == asked, found


def join(conn: Conn, group: str, member_id: str, rebalance_timeout_ms: int) -> Any:
    request = JoinGroupRequest[5](
        group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=rebalance_timeout_ms, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    return conn.call(request, JoinGroupResponse, 5)


def test_join_within_the_initial_rebalance_delay_is_answered_with_the_group(cluster, kafka):
    """Member B (rebalance timeout 10 s) starts the first rebalance, delayed 1 s; A (1 s) joins
    within the delay, which is then extended up to 1 s more. Kafka answers A when the rebalance
    completes; before, the listener's wait for A ended at A's 1 s and answered REQUEST_TIMED_OUT."""
    group = "join-in-delay"
    probe = Conn(cluster, 1)
    try:
        coordinator = probe.call(FindCoordinatorRequest[3](key=group, key_type=0), FindCoordinatorResponse, 3)
    finally:
        probe.sock.close()
    assert coordinator.error_code == 0, coordinator
    a, b = Conn(cluster, coordinator.node_id), Conn(cluster, coordinator.node_id)
    answers: dict[str, Any] = {}
    try:
        first = join(b, group, "", 10_000)
        assert first.error_code == MEMBER_ID_REQUIRED, first
        waiter = threading.Thread(target=lambda: answers.update(b=join(b, group, first.member_id, 10_000)))
        waiter.start()
        wait_until(lambda: cluster.call(coordinator.node_id, "describe_groups", group_ids=[group])["groups"][0]
                   .get("state") == "PreparingRebalance", "the first rebalance")
        first = join(a, group, "", 1000)
        assert first.error_code == MEMBER_ID_REQUIRED, first
        answers["a"] = join(a, group, first.member_id, 1000)
        waiter.join(TIMEOUT_S)
    finally:
        a.sock.close()
        b.sock.close()
    assert answers["a"].error_code == 0, answers["a"]
    assert answers["b"].error_code == 0 and answers["b"].generation_id == answers["a"].generation_id, answers

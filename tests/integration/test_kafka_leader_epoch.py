"""KIP-320 on the Kafka listener: Fetch, ListOffsets and OffsetForLeaderEpoch check a client's `current_leader_epoch` as Kafka's brokers do (older than the leader's: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH, -1: not checked), ListOffsets answers the leader epoch of the offset it names, and confluent-kafka, which sends the epoch from its metadata, consumes through the check."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

import node_harness as harness
from partition.batch import BatchBuilder

TOPIC = "epochs"
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
HERE = Path(__file__).resolve().parent


Conn = harness.load_module("kafka_wire_versions", HERE / "test_kafka_wire_versions.py").Conn


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.one_node_with_topic(tmp_path_factory.mktemp("kafka-epochs"), TOPIC) as c:
        yield c


@pytest.fixture
def conn(node) -> Iterator[Any]:
    c = Conn(node, client_id="epochs-test")
    yield c
    c.sock.close()


def leader_epoch(node: harness.NodeCluster, conn: Any) -> int:
    """The partition's leader epoch from Metadata (what a client sends), once the leader has
    reported one (a new partition's first leader reports epoch >= 1)."""
    def reported() -> int | None:
        md = conn.call(MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                          allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False), MetadataResponse, 9)
        [p] = md.topics[0].partitions
        return p.leader_epoch if p.error_code == 0 and p.leader_epoch >= 1 else None
    return node.wait_for(reported, 30, f"a leader epoch for {TOPIC}")


def produce(conn, *values: bytes) -> int:
    b = BatchBuilder()
    for v in values:
        b.append(v, timestamp_ms=1_000)
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[8](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=b.build())])])
    [t] = conn.call(req, ProduceResponse, 8).responses
    [p] = t.partition_responses
    assert p.error_code == 0, p
    return p.base_offset


def fetch(conn, current: int) -> Any:
    F = FetchRequest.FetchTopic
    req = FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
                               partition=0, current_leader_epoch=current, fetch_offset=0, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
    [t] = conn.call(req, FetchResponse, 12).responses
    [p] = t.partitions
    return p


def list_offset(conn, current: int, timestamp: int) -> tuple[int, int, int]:
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
        T(name=TOPIC, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=current,
                                                         timestamp=timestamp)])])
    [t] = conn.call(req, ListOffsetsResponse, 7).topics
    [p] = t.partitions
    return p.error_code, p.offset, p.leader_epoch


def epoch_end(conn, current: int, asked: int) -> tuple[int, int, int]:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest[3](replica_id=-1, topics=[T(topic=TOPIC, partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=asked)])])
    [t] = conn.call(req, OffsetForLeaderEpochResponse, 3).topics
    [p] = t.partitions
    return p.error_code, p.leader_epoch, p.end_offset


def test_fetch_checks_the_clients_leader_epoch(node, conn):
    produce(conn, b"a", b"b")
    epoch = leader_epoch(node, conn)
    for current in (-1, epoch):  # not checked, and the leader's own: records
        p = fetch(conn, current)
        assert p.error_code == 0 and p.high_watermark >= 2 and p.records
    older, newer = fetch(conn, epoch - 1), fetch(conn, epoch + 1)
    assert (older.error_code, newer.error_code) == (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH)
    assert not older.records and not newer.records and older.high_watermark == -1


def test_list_offsets_checks_the_epoch_and_names_the_offsets_epoch(node, conn):
    produce(conn, b"c")
    epoch = leader_epoch(node, conn)
    code, end, end_epoch = list_offset(conn, epoch, -1)  # latest: the leader's current epoch, as Kafka
    assert code == 0 and end >= 1 and end_epoch == epoch
    code, start, start_epoch = list_offset(conn, -1, -2)  # earliest: the epoch of the batch at the log start
    assert code == 0 and start == 0 and 0 <= start_epoch <= epoch
    code, found, found_epoch = list_offset(conn, -1, 1_000)  # by timestamp: the batch holding it
    assert code == 0 and found >= 0 and found_epoch == epoch  # every batch here was written in this epoch
    assert list_offset(conn, epoch - 1, -1)[0] == FENCED_LEADER_EPOCH
    assert list_offset(conn, epoch + 1, -1)[0] == UNKNOWN_LEADER_EPOCH
    assert list_offset(conn, epoch + 1, -2)[0] == UNKNOWN_LEADER_EPOCH  # earliest too: checked first


def test_offset_for_leader_epoch_fences_an_older_epoch(node, conn):
    produce(conn, b"d")
    epoch = leader_epoch(node, conn)
    code, found, end = epoch_end(conn, epoch, epoch)
    assert code == 0 and found == epoch and end >= 1
    assert epoch_end(conn, epoch - 1, epoch) == (FENCED_LEADER_EPOCH, -1, -1)
    assert epoch_end(conn, epoch + 1, epoch) == (UNKNOWN_LEADER_EPOCH, -1, -1)
    assert epoch_end(conn, -1, epoch)[0] == 0


def test_confluent_kafka_consumes_through_the_check(node, conn):
    """librdkafka sends the leader epoch of its metadata in every Fetch (and validates its
    position with OffsetForLeaderEpoch): a wrong check would leave it refetching metadata."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    values = [f"ck-{i}".encode() for i in range(20)]
    produce(conn, *values)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": node.kafka(1), "group.id": "epochs-ck",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while not set(values) <= set(got) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    assert set(values) <= set(got)

"""The Kafka listener serves the newest versions it advertises, byte for byte through Kafka's own schemas: Metadata v13 topic ids, Produce v13 and Fetch v16 by topic id (UNKNOWN_TOPIC_ID for an unknown one; a batch damaged on disk never sent), ListOffsets v11's tiered-storage timestamps, DeleteTopics v6 by id, DescribeCluster v2."""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any, Iterator

import pytest
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.topics import DeleteTopicsRequest, DeleteTopicsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from partition.batch import BatchBuilder, decode_batches
from raftlog.client import Admin

import node_harness as harness

UNKNOWN_TOPIC_ID = 100
NOT_LEADER_OR_FOLLOWER = 6
TOPIC = "by-id"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.one_node_with_topic(tmp_path_factory.mktemp("kafka-versions"), TOPIC) as c:
        yield c


class Conn:
    """One Kafka connection to node `node_id` speaking requests at chosen versions (header v2:
    flexible). test_kafka_lying_batches.py uses it too."""

    def __init__(self, node: harness.NodeCluster, node_id: int = 1, client_id: str = "versions-test"):
        host, _, port = node.kafka(node_id).rpartition(":")
        self.client_id = client_id
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.next_id = 0

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self.next_id += 1
        request.with_header(correlation_id=self.next_id, client_id=self.client_id)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        (size,) = struct.unpack(">i", self._exact(4))
        frame = self._exact(size)
        assert struct.unpack(">i", frame[:4])[0] == self.next_id
        flexible = response_cls.flexible_version_q(version)
        return response_cls.decode(frame[5 if flexible else 4:], version=version)  # header v1: + empty tags

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data


@pytest.fixture
def conn(node) -> Iterator[Conn]:
    c = Conn(node)
    yield c
    c.sock.close()


def topic_id(conn: Conn) -> uuid.UUID:
    md = conn.call(MetadataRequest[13](topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC, topic_id=None)],
                                       allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), MetadataResponse, 13)
    [t] = md.topics
    assert t.error_code == 0 and t.name == TOPIC and t.topic_id != uuid.UUID(int=0)
    return t.topic_id


def batch(*values: bytes) -> bytes:
    b = BatchBuilder()
    for v in values:
        b.append(v, timestamp_ms=1_000)
    return b.build()


def produce(conn: Conn, tid: uuid.UUID, records: bytes) -> Any:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[13](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name=None, topic_id=tid, partition_data=[T.PartitionProduceData(index=0, records=records)])])
    [t] = conn.call(req, ProduceResponse, 13).responses
    assert t.topic_id == tid
    [p] = t.partition_responses
    return p


def fetch(conn: Conn, tid: uuid.UUID, offset: int, max_bytes: int = 1 << 20) -> Any:
    F = FetchRequest.FetchTopic
    req = FetchRequest[16](max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=[F(topic_id=tid, partitions=[F.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
    [t] = conn.call(req, FetchResponse, 16).responses
    assert t.topic_id == tid
    [p] = t.partitions
    return p


def test_produce_v13_and_fetch_v16_by_topic_id(conn):
    tid = topic_id(conn)
    first = produce(conn, tid, batch(b"a", b"b"))
    assert first.error_code == 0 and first.base_offset == 0  # a new partition starts at 0
    assert produce(conn, tid, batch(b"c")).base_offset == 2
    p = fetch(conn, tid, 0)
    assert p.error_code == 0 and p.high_watermark == 3
    assert [r.value for h, recs in decode_batches(p.records) if not h.is_control for r in recs] == [b"a", b"b", b"c"]
    unknown = uuid.uuid4()
    assert produce(conn, unknown, batch(b"x")).error_code == UNKNOWN_TOPIC_ID
    answer = fetch(conn, unknown, 0)
    assert answer.error_code == UNKNOWN_TOPIC_ID
    assert answer.records == b""  # empty, not null: librdkafka cannot parse a size of -1


def test_fetch_answers_a_whole_first_batch_larger_than_its_max_bytes(conn):
    """Kafka (KIP-74) returns the first batch whole even when it exceeds the request's and the
    partition's max bytes, so a consumer always progresses (franz-go's
    TestIssueFetchLargerThanBrokerMaxReadBytes reads a 5 MiB batch with 1 MiB limits); the
    batches after it wait for the next fetch."""
    tid = topic_id(conn)
    big = bytes(range(256)) * 1024  # 256 KiB, uncompressed
    first = produce(conn, tid, batch(big)).base_offset
    produce(conn, tid, batch(b"after"))
    p = fetch(conn, tid, first, max_bytes=64 << 10)
    assert p.error_code == 0
    assert len(p.records) > 64 << 10
    assert [r.value for _, recs in decode_batches(p.records) for r in recs] == [big]


def test_list_offsets_v11_answers_as_a_broker_without_tiered_storage(conn):
    tid = topic_id(conn)
    produce(conn, tid, batch(b"z"))
    T = ListOffsetsRequest.ListOffsetsTopic
    specs = [-2, -4, -1, -5, -6, -3]
    req = ListOffsetsRequest[11](replica_id=-1, isolation_level=0, timeout_ms=5000, topics=[
        T(name=TOPIC, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
                                  for ts in specs])])
    [t] = conn.call(req, ListOffsetsResponse, 11).topics
    got = {ts: (p.error_code, p.offset) for ts, p in zip(specs, t.partitions)}
    end = got[-1][1]
    assert end >= 1
    assert got[-2] == got[-4] == (0, 0)  # earliest local is the earliest
    assert got[-5] == got[-6] == (0, -1)  # no tiered storage
    assert got[-3][0] == 0 and 0 <= got[-3][1] < end


def test_list_offsets_max_timestamp_names_the_record_not_the_batch(conn):
    """ListOffsets -3 answers the offset of the record with the largest timestamp, inside its
    batch, as Kafka 3.8+ (KAFKA-16310; librdkafka 0081's ListOffsets: timestamps 100, 400, 250
    in one batch -> its second record)."""
    tid = topic_id(conn)
    b = BatchBuilder()
    for ts in (10_000_100, 10_000_400, 10_000_250):  # later than every other batch of the topic
        b.append(b"t", timestamp_ms=ts)
    base = produce(conn, tid, b.build()).base_offset
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[T(name=TOPIC, partitions=[
        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-3)])])
    [p] = conn.call(req, ListOffsetsResponse, 7).topics[0].partitions
    assert (p.error_code, p.offset, p.timestamp) == (0, base + 1, 10_000_400)


def test_delete_topics_v6_by_unknown_id_and_describe_cluster_v2(conn):
    req = DeleteTopicsRequest[6](topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())],
                                 timeout_ms=5000)
    [r] = conn.call(req, DeleteTopicsResponse, 6).responses
    assert r.error_code == UNKNOWN_TOPIC_ID
    cluster = conn.call(DescribeClusterRequest[2](include_cluster_authorized_operations=False, endpoint_type=1,
                                                  include_fenced_brokers=True), DescribeClusterResponse, 2)
    assert cluster.error_code == 0 and [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(1, False)]


def test_a_damaged_batch_is_never_sent_zero_copy(node, conn):
    """The zero-copy path checks CRCs before sending (the log checks each byte once, before
    its first slice): a bit flipped on disk under a running node gets CORRUPT_MESSAGE for that
    partition (one replica: nobody to repair from), not the bad bytes."""
    with Admin(node.bootstrap(), request_timeout_ms=15_000) as admin:
        admin.create_topic("damaged", 1, 1)
        node.wait_for(lambda: admin.describe_topics(["damaged"])["damaged"].partitions[0].leader is not None,
                      20, "a leader")
    md = conn.call(MetadataRequest[13](topics=[MetadataRequest.MetadataRequestTopic(name="damaged", topic_id=None)],
                                       allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), MetadataResponse, 13)
    tid = md.topics[0].topic_id

    def taken() -> bool:
        # Metadata may name the leader before its replica takes writes (its election or the
        # new epoch's quorum-state write still running); until then the node answers
        # NOT_LEADER_OR_FOLLOWER and writes nothing, and a Kafka producer retries it too.
        code = produce(conn, tid, batch(b"intact" * 20)).error_code
        assert code in (0, NOT_LEADER_OR_FOLLOWER), code
        return code == 0

    node.wait_for(taken, 20, "the leader taking writes")
    [segment] = (node.configs[1].data_dir / "partitions" / "damaged-0").glob("*.log")
    with open(segment, "r+b") as f:  # in place, as a disk would: the node's descriptor sees it
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = fetch(conn, tid, 0)
    assert p.error_code == 2 and not p.records  # CORRUPT_MESSAGE
    log = (node.configs[1].data_dir / "node.log").read_text()
    assert "replica_damage_found" in log and "found_by=fetch" in log


def test_offset_for_leader_epoch_v4_answers_from_the_leaders_epoch_cache(conn):
    from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

    tid = topic_id(conn)
    produce(conn, tid, batch(b"e"))
    md = conn.call(MetadataRequest[13](topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC, topic_id=None)],
                                       allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), MetadataResponse, 13)
    epoch = md.topics[0].partitions[0].leader_epoch
    end = fetch(conn, tid, 0).high_watermark
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic

    def ask(current: int, leader_epoch: int) -> Any:
        req = OffsetForLeaderEpochRequest[4](replica_id=-1, topics=[T(topic=TOPIC, partitions=[
            T.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=leader_epoch)])])
        [t] = conn.call(req, OffsetForLeaderEpochResponse, 4).topics
        [p] = t.partitions
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(epoch, epoch) == (0, epoch, end)  # the latest epoch ends at the log end
    assert ask(-1, epoch + 5) == (0, epoch, end)  # a later epoch: the largest one <= it
    assert ask(epoch, 0) == (0, -1, -1)  # below every epoch
    assert ask(epoch + 1, epoch)[0] == 75  # UNKNOWN_LEADER_EPOCH: the client's is newer

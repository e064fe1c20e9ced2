"""CreateTopics answers once the new partitions have leaders (issue 40: KafkaJS's createTopics
tests and a class of CI flakes): Kafka's answer comes with the leaders assigned, so a Metadata
request right after, through the same broker, names a leader for every partition; raftlog's
partitions elect in their own Raft groups after the controller commits the topic, and the
answer used to come before that (LEADER_NOT_AVAILABLE). `timeout_ms` 0 still answers at once.
Issue 46: the controller names each new partition's first leader, so the first Metadata answer
that lists a topic names them all, and the named leader holds a client's first requests until
its replica leads instead of answering NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest

from partition.batch import BatchBuilder

from test_kafka_group_versions import Conn

pytestmark = pytest.mark.cluster

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
C = CreateTopicsRequest
PARTITIONS = 12  # twelve Raft groups to elect: on the old code some were still electing


def _create(conn: Conn, name: str, timeout_ms: int) -> int:
    r = conn.call(C, 5, topics=[C.CreatableTopic(name=name, num_partitions=PARTITIONS, replication_factor=3,
                                                 assignments=[], configs=[])],
                  timeout_ms=timeout_ms, validate_only=False)
    return r.topics[0].error_code


def _leaders(conn: Conn, name: str) -> list[tuple[int, int]]:
    r = conn.call(MetadataRequest, 9, topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                  allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                  include_cluster_authorized_operations=False)
    [t] = r.topics
    assert t.error_code == NONE, t
    return sorted((p.partition_index, p.error_code if p.error_code else p.leader_id) for p in t.partitions)


def test_a_metadata_request_right_after_create_topics_names_every_leader(cluster):
    name = f"led-{uuid.uuid4().hex[:8]}"
    conn = Conn(cluster.kafka(2))
    try:
        assert _create(conn, name, timeout_ms=30_000) == NONE
        leaders = _leaders(conn, name)
    finally:
        conn.close()
    assert len(leaders) == PARTITIONS
    # Every partition led by one of the three brokers (5, LEADER_NOT_AVAILABLE, is not one).
    assert all(leader in (1, 2, 3) for _, leader in leaders), leaders


def test_create_topics_with_timeout_0_answers_without_waiting_for_leaders(cluster):
    name = f"now-{uuid.uuid4().hex[:8]}"
    conn = Conn(cluster.kafka(3))
    try:
        assert _create(conn, name, timeout_ms=0) == NONE
        assert len(_leaders(conn, name)) == PARTITIONS  # the topic is there, led or electing
    finally:
        conn.close()



def _first_sight(cluster, conn: Conn, name: str, version: int, timeout_s: float = 60.0):
    """Metadata at `version` for `name`, polled until the topic is there (the other node's
    image may lag the controller's): the partitions of the first answer that lists it."""
    fields = {"topics": [MetadataRequest.MetadataRequestTopic(name=name)]}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False

    def listed():
        [t] = conn.call(MetadataRequest, version, **fields).topics
        assert t.error_code in (NONE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE), t
        return t.partitions if t.error_code == NONE and len(t.partitions) == PARTITIONS else None

    return cluster.wait_for(listed, timeout_s, f"{name} in Metadata v{version}")


@pytest.mark.parametrize("version", [12, 0])
def test_the_first_metadata_that_lists_a_new_topic_names_every_leader(cluster, version):
    """The controller names each new partition's first leader in the topic record
    (partition/raft.py "First term"), so even with `timeout_ms` 0 (no wait for the Raft
    groups) the first Metadata answer through another node that lists the topic names a
    leader for every partition: KafkaJS's Metadata v0 throws on a partition with none."""
    name = f"first-{version}-{uuid.uuid4().hex[:8]}"
    creator, other = Conn(cluster.kafka(1)), Conn(cluster.kafka(2))
    try:
        assert _create(creator, name, timeout_ms=0) == NONE
        if version < 4:  # v0 has no allow_auto_topic_creation: wait for the topic with v12 first
            _first_sight(cluster, other, name, 12)
        partitions = _first_sight(cluster, other, name, version)
    finally:
        creator.close()
        other.close()
    assert sorted(p.partition_index for p in partitions) == list(range(PARTITIONS))
    assert all(p.error_code == NONE and p.leader_id in (1, 2, 3) for p in partitions), partitions


def test_the_named_leader_answers_the_first_produce_and_list_offsets(cluster):
    """A client that sends its first Produce (acks=all) and ListOffsets to the leader the
    first Metadata answer names, at once, gets them served (partition/service.py "Named
    leaders": held until the replica leads), not NOT_LEADER_OR_FOLLOWER (the whole suite
    found raftlog's own tests, every codec of test_kafka_compat and kcat's watermark query
    doing just that)."""
    name = f"held-{uuid.uuid4().hex[:8]}"
    creator, other = Conn(cluster.kafka(1)), Conn(cluster.kafka(2))
    conns: dict[int, Conn] = {}
    try:
        assert _create(creator, name, timeout_ms=0) == NONE
        leaders = {p.partition_index: p.leader_id for p in _first_sight(cluster, other, name, 12)}
        conns = {b: Conn(cluster.kafka(b)) for b in set(leaders.values())}
        P = ProduceRequest.TopicProduceData
        L = ListOffsetsRequest.ListOffsetsTopic
        produced, latest = {}, {}
        for partition, leader in sorted(leaders.items()):
            builder = BatchBuilder()
            builder.append(b"first", timestamp_ms=1)
            r = conns[leader].call(ProduceRequest, 9, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
                P(name=name, partition_data=[P.PartitionProduceData(index=partition, records=builder.build())])])
            [p] = r.responses[0].partition_responses
            produced[partition] = (p.error_code, p.base_offset)
        for partition, leader in sorted(leaders.items()):
            r = conns[leader].call(ListOffsetsRequest, 7, replica_id=-1, isolation_level=0, topics=[
                L(name=name, partitions=[L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                               timestamp=-1)])])
            [p] = r.topics[0].partitions
            latest[partition] = (p.error_code, p.offset)
    finally:
        for conn in (creator, other, *conns.values()):
            conn.close()
    assert produced == {p: (NONE, 0) for p in range(PARTITIONS)}
    assert latest == {p: (NONE, 1) for p in range(PARTITIONS)}

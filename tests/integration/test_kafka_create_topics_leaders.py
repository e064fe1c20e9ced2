"""CreateTopics answers once the new partitions have leaders (issue 40: KafkaJS's createTopics
tests and a class of CI flakes): Kafka's answer comes with the leaders assigned, so a Metadata
request right after, through the same broker, names a leader for every partition; raftlog's
partitions elect in their own Raft groups after the controller commits the topic, and the
answer used to come before that (LEADER_NOT_AVAILABLE). `timeout_ms` 0 still answers at once."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

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


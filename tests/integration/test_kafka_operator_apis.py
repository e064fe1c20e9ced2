"""The read-only operator APIs of issue 41 on a real 3-node cluster, through the clients'
admin APIs: DescribeConfigs of a broker (its settings under Kafka's names, the static ones
read-only, and AlterConfigs of one of those refused with a reason), DescribeLogDirs, DescribeTopicPartitions
(paginated), DescribeProducers and DescribeQuorum (before: broker configs were an empty list, the four
others unserved)."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from confluent_kafka.admin import ResourceType as CResourceType
from kafka import KafkaAdminClient, TopicPartition
from kafka.protocol.admin.cluster import DescribeQuorumRequest
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest

import node_harness as harness
from test_kafka_bad_input import connect
from test_kafka_unsupported import call

TOPIC = "ops"
PARTITIONS = 3
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def ready(cluster: harness.NodeCluster) -> harness.NodeCluster:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(timeout=60)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "enable.idempotence": True})
    for i in range(30):
        producer.produce(TOPIC, value=b"x" * 100, partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    return cluster


def _kp(cluster: harness.NodeCluster) -> Any:
    return KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=30_000)


def test_broker_configs_describe_the_node_read_only(ready: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": ready.kafka_bootstrap()})
    res = ConfigResource(CResourceType.BROKER, "2")
    entries = admin.describe_configs([res])[res].result(timeout=30)
    config = ready.configs[2]
    assert entries["node.id"].value == "2" and entries["broker.id"].value == "2"
    assert entries["num.partitions"].value == str(config.default_partitions)
    assert entries["log.dirs"].value == str(config.data_dir)
    assert entries["max.connections"].value == str(config.max_connections)
    assert entries["advertised.listeners"].value.endswith(ready.kafka(2).rpartition(":")[2])
    dynamic = {"num.partitions", "default.replication.factor", "auto.create.topics.enable",
               "max.connections", "max.connections.per.ip", "compression.type"}
    assert {n for n, e in entries.items() if not e.is_read_only} == dynamic
    # Kafka's names and defaults of what raftlog has under other names (read-only here)
    assert (entries["log.retention.hours"].value, entries["message.max.bytes"].value) == ("168", "1048588")
    assert entries["raftlog.cluster.secret"].is_sensitive and entries["raftlog.cluster.secret"].value is None
    assert entries["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["max.connections"].source in (ConfigSource.DEFAULT_CONFIG.value,
                                                 ConfigSource.STATIC_BROKER_CONFIG.value)
    # The cluster default "" (both clients refuse it, Kafka's tools send it): no dynamic
    # default set in this cluster, an empty list and no error; another broker's id: Kafka's answer.
    Resource = DescribeConfigsRequest.DescribeConfigsResource
    with connect(ready) as sock:
        answer = call(sock, DescribeConfigsRequest[4](resources=[
            Resource(resource_type=4, resource_name="", configuration_keys=None),
            Resource(resource_type=4, resource_name="3", configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4, 1)
    (default, other) = answer.results
    assert (default.error_code, default.configs) == (0, []), answer
    assert other.error_code == INVALID_REQUEST and "Unexpected broker id" in other.error_message, answer


def test_broker_configs_refuse_alteration_with_a_reason(ready: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": ready.kafka_bootstrap()})
    res = ConfigResource(CResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(timeout=30)
    assert "Cannot update these configs dynamically" in str(info.value) and "log.dirs" in str(info.value)
    check = ConfigResource(CResourceType.BROKER, "1")
    assert admin.describe_configs([check])[check].result(timeout=30)["log.dirs"].value != "/elsewhere"


def test_describe_log_dirs_lists_each_replica_with_its_size(ready: harness.NodeCluster) -> None:
    admin = _kp(ready)
    try:
        answers = admin.describe_log_dirs()
    finally:
        admin.close()
    text = repr(answers)
    assert sorted(a["broker"] for a in answers) == [1, 2, 3], text
    for answer in answers:
        (r,) = answer["log_dirs"]
        assert r["error_code"] == 0 and r["log_dir"] == os.path.abspath(ready.configs[answer["broker"]].data_dir), text
        topics = {t["name"]: t for t in r["topics"]}
        parts = {p["partition_index"]: p for p in topics[TOPIC]["partitions"]}
        assert sorted(parts) == list(range(PARTITIONS)), text
        assert all(p["partition_size"] > 0 and p["offset_lag"] >= 0 and not p["is_future_key"]
                   for p in parts.values()), text
        assert r["total_bytes"] >= r["usable_bytes"] > 0, text


def test_describe_topic_partitions_pages_with_a_cursor(ready: harness.NodeCluster) -> None:
    admin = _kp(ready)
    try:
        first = admin.describe_topic_partitions([TOPIC], response_partition_limit=2)
        assert first["next_cursor"] is not None, first
        rest = admin.describe_topic_partitions([TOPIC], response_partition_limit=2, cursor=first["next_cursor"])
    finally:
        admin.close()
    assert rest["next_cursor"] is None, rest
    parts = [p for page in (first, rest) for t in page["topics"] for p in t["partitions"]]
    assert [p["partition_index"] for p in parts] == list(range(PARTITIONS))
    for p in parts:
        assert sorted(p["replica_nodes"]) == [1, 2, 3] and p["leader_id"] in (1, 2, 3)
        assert p["eligible_leader_replicas"] in ([], None)
    with connect(ready) as sock:  # no topics named: every topic, by name
        every = call(sock, DescribeTopicPartitionsRequest[0](topics=[], response_partition_limit=100, cursor=None), 0, 1)
    assert TOPIC in [t.name for t in every.topics], every


def test_describe_producers_shows_the_idempotent_producer(ready: harness.NodeCluster) -> None:
    admin = _kp(ready)
    try:
        states = admin.describe_producers([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    finally:
        admin.close()
    assert len(states) == PARTITIONS, states
    for state in states.values():
        producers = state.active_producers if hasattr(state, "active_producers") else state["active_producers"]
        assert len(producers) == 1, states
        (p,) = producers
        get = (lambda k: getattr(p, k)) if hasattr(p, "producer_id") else p.__getitem__
        assert get("producer_id") >= 0 and get("last_sequence") >= 0 and get("coordinator_epoch") == -1


def test_describe_metadata_quorum_from_any_node_and_from_the_leader(ready: harness.NodeCluster) -> None:
    admin = _kp(ready)
    try:
        answer = admin.describe_metadata_quorum()  # to any node
    finally:
        admin.close()
    (topic,) = answer["topics"]
    (p,) = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata" and p["error"] is None, answer
    assert p["leader_id"] in (1, 2, 3) and p["leader_epoch"] >= 1 and p["high_watermark"] > 0, answer
    assert sorted(v["replica_id"] for v in p["current_voters"]) == [1, 2, 3] and p["observers"] == [], answer
    assert sorted(n["node_id"] for n in answer["nodes"]) == [1, 2, 3], answer
    # The leader knows every voter's log end (its match index); the others know their own.
    leader = p["leader_id"]
    host, _, port = ready.kafka(leader).rpartition(":")
    Topic = DescribeQuorumRequest.TopicData
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        direct = call(sock, DescribeQuorumRequest[2](topics=[Topic(topic_name="__cluster_metadata", partitions=[
            Topic.PartitionData(partition_index=0)])]), 2, 1)
        wrong = call(sock, DescribeQuorumRequest[2](topics=[Topic(topic_name="t", partitions=[
            Topic.PartitionData(partition_index=0)])]), 2, 2)
    (dp,) = direct.topics[0].partitions
    assert dp.leader_id == leader and all(v.log_end_offset > 0 for v in dp.current_voters), direct
    assert wrong.error_code == UNKNOWN_TOPIC_OR_PARTITION, wrong

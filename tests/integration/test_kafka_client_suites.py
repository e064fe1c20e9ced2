"""Divergences from Kafka that the clients' own test suites found (issue 40), each fixed and
held here against a real 3-node cluster: a null key on a compacted topic (librdkafka 0011),
manual assignments in CreatePartitions (kafka-python test_create_partitions), the source of a
broker's static configs (kafka-python test_describe_configs_broker; unit-tested in
tests/unit/kafka/test_broker_config_sources.py), a KIP-848 regex over internal topics (franz-go
Test848RegexBrokerResolves)."""

from __future__ import annotations

import socket

from confluent_kafka import KafkaError, Producer
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.protocol.producer.produce import ProduceRequest

import node_harness as harness
from partition.batch import BatchBuilder
from raftlog.node.kafka.schemas import ConsumerGroupHeartbeatRequest
from test_kafka_groups import wait_coordinators, wait_until
from test_kafka_unsupported import call
from test_kip848_kafka import describe, raw

INVALID_REPLICA_ASSIGNMENT = 39


def test_null_key_on_compacted_topic_is_refused(cluster: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("cs-compacted", 1, 3, config={"cleanup.policy": "compact"})])[
        "cs-compacted"].result(timeout=60)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "retries": 0})
    outcomes: list[tuple[bytes | None, KafkaError | None]] = []
    producer.produce("cs-compacted", value=b"keyed", key=b"k", partition=0,
                     on_delivery=lambda err, msg: outcomes.append((msg.key(), err)))
    assert producer.flush(60) == 0
    producer.produce("cs-compacted", value=b"no key", partition=0,
                     on_delivery=lambda err, msg: outcomes.append((msg.key(), err)))
    assert producer.flush(60) == 0
    assert outcomes[0] == (b"k", None)
    key, err = outcomes[1]
    assert key is None and err is not None and err.code() == KafkaError.INVALID_RECORD, err
    # librdkafka shows only the code: the record errors, read raw, name record 1 of the batch
    batch = BatchBuilder()
    batch.append(b"keyed", key=b"k", timestamp_ms=1)
    batch.append(b"no key", timestamp_ms=1)
    T, P = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
    leader = admin.list_topics("cs-compacted", timeout=30).topics["cs-compacted"].partitions[0].leader
    host, _, port = cluster.kafka(leader).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = call(sock, ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            T(name="cs-compacted", partition_data=[P(index=0, records=batch.build())])]), 9, 1)
    part = answer.responses[0].partition_responses[0]
    message = "Compacted topic cannot accept message without key in topic partition cs-compacted-0."
    assert (part.error_code, part.base_offset) == (KafkaError.INVALID_RECORD, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, message)]


def test_create_partitions_with_manual_assignment(cluster: harness.NodeCluster) -> None:
    """kafka-python's test_create_partitions sends NewPartitions(6, [[0], [0]]): one replica list
    per new partition. Its fixture is ONE Kafka broker with node id 0 and topics of RF 1; on this
    cluster (nodes 1-3) broker 0 does not exist, and Kafka refuses that too
    (INVALID_REPLICA_ASSIGNMENT). The same request naming brokers that exist is served."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), client_id="cs-admin")
    try:
        admin.create_topics([KNewTopic("cs-grow", 4, 1)])
        ids = sorted(cluster.configs)
        answer = admin.create_partitions({"cs-grow": NewPartitions(6, [[ids[1]], [ids[2]]])})
        assert [(r.name, r.error_code) for r in answer.results] == [("cs-grow", 0)]
        absent = max(ids) + 1
        answer = admin.create_partitions({"cs-grow": NewPartitions(7, [[absent]])}, raise_errors=False)
        assert [(r.name, r.error_code) for r in answer.results] == [("cs-grow", INVALID_REPLICA_ASSIGNMENT)]
        assert f"[{absent}]" in answer.results[0].error_message
    finally:
        admin.close()
    reader = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    described = reader.describe_topics(TopicCollection(["cs-grow"]))["cs-grow"].result(timeout=30)
    assert [[n.id for n in p.replicas] for p in described.partitions][4:] == [[ids[1]], [ids[2]]]


def test_kip848_regex_resolves_internal_topics(cluster: harness.NodeCluster) -> None:
    """franz-go Test848RegexBrokerResolves: Kafka's broker resolves a SubscribedTopicRegex over
    every topic, `__consumer_offsets` included; the member is assigned its partitions."""
    group = "cs-regex-internal"
    wait_coordinators(cluster)
    H = ConsumerGroupHeartbeatRequest[1]
    joined = raw(cluster, group, H(
        group_id=group, member_id="cs-member", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_topic_names=None, subscribed_topic_regex="__consumer_off.*",
        server_assignor=None, topic_partitions=[]), 1)
    assert joined.error_code == 0, joined

    def assigned() -> set[str]:
        raw(cluster, group, H(group_id=group, member_id="cs-member", member_epoch=joined.member_epoch,
                              instance_id=None, rack_id=None, rebalance_timeout_ms=-1,
                              subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
                              topic_partitions=None), 1)
        member = describe(cluster, group).members[0]
        return {t.topic_name for t in member.assignment.topic_partitions}

    wait_until(lambda: assigned() == {"__consumer_offsets"}, "__consumer_offsets assigned by the regex", 60)

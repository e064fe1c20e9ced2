"""The clusters `scripts/client_suites` starts for the clients' own suites (issue 40) work as
the suites expect of their docker clusters: broker ids 0, 1, 2 (KafkaJS's tests assign replicas
to broker 0 and look it up), ACLs open to everyone where none is set on a PLAINTEXT listener
(Kafka's authorizer with allow.everyone.if.no.acl.found, as KafkaJS's docker-compose runs it),
and a SASL_SSL cluster seeded with KafkaJS's users, one user with a different password per SCRAM
mechanism (`testscram`), PLAIN checked against the SCRAM credential."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from raftlog.base.client_properties import load_properties

import node_harness as harness

pytestmark = pytest.mark.cluster

PLAINTEXT_SETTINGS = {**harness.TEST_SETTINGS, "acls_enabled": True, "allow_everyone_if_no_acl_found": True}


def led(admin: AdminClient, topic: str) -> object:
    """The topic's metadata once each partition has a leader, else None."""
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return meta if meta.error is None and all(p.leader >= 0 for p in meta.partitions.values()) else None


def test_broker_ids_from_zero_and_acls_open_where_none(tmp_path: Path) -> None:
    with harness.NodeCluster(tmp_path, size=3, settings=PLAINTEXT_SETTINGS, first_node_id=0) as cluster:
        cluster.start_all()
        status = cluster.wait_ready(timeout_s=90)
        assert sorted(b["id"] for b in status["brokers"]) == [0, 1, 2]
        admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
        # a manual assignment naming broker 0, as KafkaJS's createTopics tests give one
        created = admin.create_topics([NewTopic("ids-t", num_partitions=2,
                                                replica_assignment=[[0, 1], [1, 0]]),
                                       NewTopic("ids-other", 1, 3)])
        for future in created.values():
            future.result(timeout=60)
        metadata = cluster.wait_for(lambda: led(admin, "ids-t"), 60, "leaders of ids-t")
        cluster.wait_for(lambda: led(admin, "ids-other"), 60, "leaders of ids-other")
        assert {p: sorted(m.replicas) for p, m in metadata.partitions.items()} == {0: [0, 1], 1: [0, 1]}
        assert sorted(admin.list_topics(timeout=10).brokers) == [0, 1, 2]
        # anonymous creates an ACL (no ACL on the cluster: open to everyone, as Kafka's authorizer)
        binding = AclBinding(ResourceType.TOPIC, "ids-other", ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.ALL, AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(timeout=30)
        query = AclBindingFilter(ResourceType.TOPIC, "ids-other", ResourcePatternType.LITERAL, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        assert admin.describe_acls(query).result(timeout=30) == [binding]
        # a topic with no ACL stays open to ANONYMOUS; the one with bob's ACL is closed to it
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "message.timeout.ms": 30000})
        results: list[object] = []
        producer.produce("ids-t", b"open", partition=0, on_delivery=lambda err, msg: results.append(err))
        assert producer.flush(60) == 0
        assert results == [None]
        producer.produce("ids-other", b"closed", partition=0, on_delivery=lambda err, msg: results.append(err))
        producer.flush(60)
        assert len(results) == 2 and results[1] is not None


def test_secure_cluster_seeds_users_per_mechanism(tmp_path: Path) -> None:
    users = {("testscram", "SCRAM-SHA-256"): "testtestscram=256", ("testscram", "SCRAM-SHA-512"): "testtestscram=512",
             ("test", "SCRAM-SHA-512"): "testtest"}
    with harness.secure_cluster(tmp_path, secrets.token_urlsafe(12), users=users,
                                settings={"allow_everyone_if_no_acl_found": True}) as cluster:
        base = load_properties(cluster.material.client_properties)
        base["bootstrap.servers"] = cluster.kafka(1)

        def login(user: str, password: str, mechanism: str) -> bool:
            admin = AdminClient({**base, "sasl.username": user, "sasl.password": password,
                                 "sasl.mechanism": mechanism})
            try:
                admin.list_topics(timeout=15)
                return True
            except KafkaException:
                return False

        assert login("testscram", "testtestscram=256", "SCRAM-SHA-256")
        assert login("testscram", "testtestscram=512", "SCRAM-SHA-512")
        assert not login("testscram", "testtestscram=512", "SCRAM-SHA-256")
        assert login("test", "testtest", "PLAIN")
        assert not login("test", "wrong", "PLAIN")
        # no ACL on the cluster: a user who is no super user creates a topic, as on KafkaJS's Kafka
        admin = AdminClient({**base, "sasl.username": "test", "sasl.password": "testtest", "sasl.mechanism": "PLAIN"})
        admin.create_topics([NewTopic("by-test", 1, 1)])["by-test"].result(timeout=60)

"""KIP-430's authorized operations, as librdkafka's 0081_admin asks them: DescribeTopics
(Metadata include_topic_authorized_operations), DescribeCluster and DescribeConsumerGroups
(DescribeGroups include_authorized_operations) answer every operation the principal may do on
the resource (without ACLs: all of the resource type's, as Kafka without an authorizer), and
nothing when not asked. raftlog answered "not asked" (INT32_MIN, an empty list) every time."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient

import node_harness as harness

TOPIC, GROUP = "authz-ops", "authz-ops-group"
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}
GROUP_OPS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.one_node_with_topic(tmp_path_factory.mktemp("authz-ops"), TOPIC) as c:
        yield c


@pytest.fixture(scope="module")
def kadmin(node) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.kafka(1)})


def ops(found: Any) -> set[Any]:
    return set(found or ())


def test_describe_topics_and_cluster_answer_every_operation_when_asked(kadmin):
    for asked, topic_ops, cluster_ops in ((True, TOPIC_OPS, CLUSTER_OPS), (False, set(), set())):
        [topic] = kadmin.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=asked,
                                         request_timeout=30).values()
        assert ops(topic.result(60).authorized_operations) == topic_ops
        cluster = kadmin.describe_cluster(include_authorized_operations=asked, request_timeout=30).result(60)
        assert ops(cluster.authorized_operations) == cluster_ops


def test_describe_consumer_groups_answers_every_operation_when_asked(node, kadmin):
    consumer = Consumer({"bootstrap.servers": node.kafka(1), "group.id": GROUP, "enable.auto.commit": False})
    try:  # a committed offset makes the group (the first commit may meet a loading coordinator: retry)
        node.wait_for(lambda: _committed(consumer), 60, "the group's first commit")
    finally:
        consumer.close()
    for asked, expected in ((True, GROUP_OPS), (False, set())):
        [group] = kadmin.describe_consumer_groups([GROUP], include_authorized_operations=asked,
                                                  request_timeout=30).values()
        assert ops(group.result(60).authorized_operations) == expected


def _committed(consumer: Consumer) -> bool:
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
        return True
    except Exception:  # noqa: BLE001 - COORDINATOR_LOAD_IN_PROGRESS and the like: polled again
        return False

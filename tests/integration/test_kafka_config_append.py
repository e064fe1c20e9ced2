"""IncrementalAlterConfigs APPEND and SUBTRACT on a list-type topic config (`cleanup.policy`),
with confluent-kafka's admin client on a three-node cluster: APPEND adds to the current value
(the default when the topic has none), SUBTRACT removes, and either on a key that is not a
list is INVALID_CONFIG, as in Kafka (issue 40: they were refused)."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)


def _alter(admin: AdminClient, resource_name: str, name: str, value: str, op: AlterConfigOpType) -> None:
    resource = ConfigResource(ResourceType.TOPIC, resource_name,
                              incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    admin.incremental_alter_configs([resource])[resource].result(30)


def _policy(admin: AdminClient, topic: str) -> set[str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    value = admin.describe_configs([resource])[resource].result(30)["cleanup.policy"].value
    return set(value.split(","))


def test_append_and_subtract_cleanup_policy(cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("cfg-append", 1, 3)])["cfg-append"].result(30)
    _alter(admin, "cfg-append", "cleanup.policy", "compact", AlterConfigOpType.APPEND)
    assert _policy(admin, "cfg-append") == {"delete", "compact"}
    _alter(admin, "cfg-append", "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    assert _policy(admin, "cfg-append") == {"compact"}
    with pytest.raises(KafkaException) as refused:
        _alter(admin, "cfg-append", "retention.ms", "1000", AlterConfigOpType.APPEND)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert _policy(admin, "cfg-append") == {"compact"}

"""Dynamic broker configs, ElectLeaders and manual replica assignments on a real 3-node cluster (issue 41): IncrementalAlterConfigs and
AlterConfigs of a broker and of the cluster default, recorded in the metadata log and applied
without a restart (new topics' partition count, auto-creation), their sources in
DescribeConfigs, each bad input refused with Kafka's error, and APPEND / SUBTRACT on a topic's
list config."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions, NewTopic,
)
from confluent_kafka.admin import ResourceType as CResourceType
from kafka.protocol.admin.configs import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.topics import CreateTopicsRequest, ElectLeadersRequest
from kafka.protocol.metadata import MetadataRequest

import node_harness as harness
from test_kafka_unsupported import call

DEADLINE_S = 60
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST = 0, 3, 39, 40, 42
ELECTION_NOT_NEEDED = 84
BROKER, TOPIC = 4, 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _sock(cluster: harness.NodeCluster, node: int) -> socket.socket:
    host, _, port = cluster.kafka(node).rpartition(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _incremental(cluster: harness.NodeCluster, node: int, resource_type: int, name: str,
                 ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> tuple[int, str | None]:
    R = IncrementalAlterConfigsRequest
    with _sock(cluster, node) as sock:
        answer = call(sock, R[1](resources=[R.AlterConfigsResource(
            resource_type=resource_type, resource_name=name,
            configs=[R.AlterConfigsResource.AlterableConfig(name=k, config_operation=op, value=v)
                     for k, op, v in ops])], validate_only=validate_only), 1, 1)
    (result,) = answer.responses
    return result.error_code, result.error_message


def _alter(cluster: harness.NodeCluster, node: int, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """AlterConfigs (the whole set) of broker resource `name`, sent to `node`."""
    R = AlterConfigsRequest
    with _sock(cluster, node) as sock:
        answer = call(sock, R[2](resources=[R.AlterConfigsResource(
            resource_type=BROKER, resource_name=name,
            configs=[R.AlterConfigsResource.AlterableConfig(name=k, value=v) for k, v in configs.items()])],
            validate_only=False), 2, 1)
    (result,) = answer.responses
    return result.error_code, result.error_message


def _described(cluster: harness.NodeCluster, node: int, name: str) -> dict[str, Any]:
    R = DescribeConfigsRequest
    with _sock(cluster, node) as sock:
        answer = call(sock, R[4](resources=[R.DescribeConfigsResource(
            resource_type=BROKER, resource_name=name, configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 4, 2)
    (result,) = answer.results
    assert result.error_code == NONE, answer
    return {e.name: e for e in result.configs}


def _poll(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling a condition under a deadline, not synchronising on time
    raise AssertionError(f"not within {DEADLINE_S}s: {what}")


def test_a_brokers_dynamic_config_is_described_with_its_source_and_deleted_again(cluster: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    res = ConfigResource(CResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("default.replication.factor", "2", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    check = ConfigResource(CResourceType.BROKER, "1")
    entry = _poll(lambda: (e := admin.describe_configs([check])[check].result(timeout=30)
                           ["default.replication.factor"]).value == "2" and e, "broker 1 shows the new value")
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value and not entry.is_read_only
    # Only broker 1's: broker 2 keeps its static value.
    assert _described(cluster, 2, "2")["default.replication.factor"].config_source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
    res = ConfigResource(CResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("default.replication.factor", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    _poll(lambda: admin.describe_configs([check])[check].result(timeout=30)["default.replication.factor"].source
          != ConfigSource.DYNAMIC_BROKER_CONFIG.value, "the value goes back to the static one")


def test_the_cluster_default_applies_on_every_node_without_a_restart(cluster: harness.NodeCluster) -> None:
    assert _incremental(cluster, 1, BROKER, "", [("num.partitions", SET, "4"),
                                                 ("auto.create.topics.enable", SET, "false")]) == (NONE, None)
    for node in (1, 2, 3):
        entries = _poll(lambda: (d := _described(cluster, node, str(node)))["auto.create.topics.enable"].value
                        == "false" and d, f"node {node} applies the cluster default")
        assert entries["num.partitions"].value == "4"
        assert entries["num.partitions"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    default = _described(cluster, 2, "")
    assert {n: e.value for n, e in default.items()} == {"auto.create.topics.enable": "false", "num.partitions": "4"}
    # A topic created without a count gets the dynamic default; auto-creation is off.
    C = CreateTopicsRequest
    with _sock(cluster, 2) as sock:
        created = call(sock, C[5](topics=[C.CreatableTopic(name="dyn-default", num_partitions=-1, replication_factor=-1,
                                                          assignments=[], configs=[])],
                                  timeout_ms=30_000, validate_only=False), 5, 3)
        assert created.topics[0].error_code == NONE and created.topics[0].num_partitions == 4, created
        asked = call(sock, MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name="auto-off")],
                                              allow_auto_topic_creation=True, include_topic_authorized_operations=False,
                                              include_cluster_authorized_operations=False), 9, 4)
    assert asked.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION, asked
    assert _incremental(cluster, 3, BROKER, "", [("num.partitions", DELETE, None),
                                                 ("auto.create.topics.enable", DELETE, None)]) == (NONE, None)
    _poll(lambda: _described(cluster, 2, "2")["auto.create.topics.enable"].value == "true", "auto-creation back on")
    assert _described(cluster, 2, "") == {}


@pytest.mark.parametrize("resource, ops, code, words", [
    ("1", [("num.partitions", SET, "0")], INVALID_CONFIG, "out of range"),
    ("1", [("auto.create.topics.enable", SET, "maybe")], INVALID_CONFIG, "not true or false"),
    ("", [("log.dirs", SET, "/x")], INVALID_REQUEST, "Cannot update these configs dynamically"),
    ("1", [("num.partitions", APPEND, "3")], INVALID_CONFIG, "list configs only"),
    ("b1", [("num.partitions", SET, "3")], INVALID_REQUEST, "broker id"),
    ("1", [("num.partitions", SET, "3"), ("num.partitions", DELETE, None)], INVALID_REQUEST, "both set and deleted"),
])
def test_bad_broker_alterations_are_refused_with_kafkas_error(cluster: harness.NodeCluster, resource: str,
                                                              ops: list[Any], code: int, words: str) -> None:
    got, message = _incremental(cluster, 1, BROKER, resource, ops)
    assert got == code and words in (message or ""), (got, message)
    assert "num.partitions" not in _described(cluster, 1, "1") or \
        _described(cluster, 1, "1")["num.partitions"].value != "3"


def test_validate_only_and_alter_configs_replacing_the_whole_set(cluster: harness.NodeCluster) -> None:
    assert _incremental(cluster, 1, BROKER, "3", [("max.connections", SET, "777")], validate_only=True) == (NONE, None)
    assert _described(cluster, 3, "3")["max.connections"].value != "777"
    assert _alter(cluster, 3, "3", {"max.connections": "777"}) == (NONE, None)
    _poll(lambda: _described(cluster, 3, "3")["max.connections"].value == "777", "node 3 takes max.connections")
    # AlterConfigs replaces the set: max.connections goes back to its static value.
    assert _alter(cluster, 3, "3", {"max.connections.per.ip": "900"}) == (NONE, None)
    entries = _poll(lambda: (d := _described(cluster, 3, "3"))["max.connections.per.ip"].value == "900" and d,
                    "node 3 takes max.connections.per.ip")
    assert entries["max.connections"].config_source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
    code, message = _alter(cluster, 3, "3", {"node.id": "9"})
    assert code == INVALID_REQUEST and "Cannot update these configs dynamically" in message
    assert _alter(cluster, 3, "3", {}) == (NONE, None)


def test_append_and_subtract_on_a_topics_list_config(cluster: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("lists", 1, 1)])["lists"].result(timeout=60)

    def policy() -> str:  # as node 1 sees it: APPEND / SUBTRACT sent to it start from its image
        R = DescribeConfigsRequest
        with _sock(cluster, 1) as sock:
            answer = call(sock, R[4](resources=[R.DescribeConfigsResource(
                resource_type=TOPIC, resource_name="lists", configuration_keys=["cleanup.policy"])],
                include_synonyms=False, include_documentation=False), 4, 9)
        result = answer.results[0]
        return result.configs[0].value if result.error_code == NONE else None

    _poll(lambda: policy() == "delete", "node 1's metadata has the new topic")  # created through another node
    assert _incremental(cluster, 1, TOPIC, "lists", [("cleanup.policy", APPEND, "compact")]) == (NONE, None)
    _poll(lambda: policy() == "compact,delete", "APPEND compact")
    assert _incremental(cluster, 1, TOPIC, "lists", [("cleanup.policy", SUBTRACT, "delete")]) == (NONE, None)
    _poll(lambda: policy() == "compact", "SUBTRACT delete")
    code, message = _incremental(cluster, 1, TOPIC, "lists", [("cleanup.policy", SUBTRACT, "compact")])
    assert code == INVALID_CONFIG and "empty" in message
    code, message = _incremental(cluster, 1, TOPIC, "lists", [("retention.ms", APPEND, "5")])
    assert code == INVALID_CONFIG and "list configs only" in message
    assert policy() == "compact"


def test_the_cli_alters_broker_configs_and_names_a_refusal(cluster: harness.NodeCluster) -> None:
    def raftlog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raftlog.cli", *args, "--bootstrap", cluster.client(1)],
                              capture_output=True, text=True, timeout=120)

    done = raftlog("brokers", "alter-config", "--broker", "2", "--set", "num.partitions=7", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"broker": 2, "configs": {"num.partitions": "7"}}, done
    _poll(lambda: _described(cluster, 2, "2")["num.partitions"].value == "7", "node 2 takes the CLI's value")
    refused = raftlog("brokers", "alter-config", "--set", "log.dirs=/x")
    assert refused.returncode == 1 and "Cannot update these configs dynamically" in refused.stderr, refused
    done = raftlog("brokers", "alter-config", "--broker", "2", "--delete", "num.partitions")
    assert done.returncode == 0 and "dynamic configs now: (none)" in done.stdout, done


def test_elect_leaders_preferred_and_unclean_answer_per_partition(cluster: harness.NodeCluster) -> None:
    """ElectLeaders (kafka-leader-election): PREFERRED hands leadership back to the first
    replica (that path: tests/unit/metadata/test_election.py); a partition already led by it is
    ELECTION_NOT_NEEDED; UNCLEAN on a led partition
    is ELECTION_NOT_NEEDED too; an unknown partition UNKNOWN_TOPIC_OR_PARTITION."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("elect", 3, 3)])["elect"].result(timeout=60)

    def led_by_preferred() -> bool:
        parts = admin.list_topics("elect", timeout=30).topics["elect"].partitions.values()
        return len(parts) == 3 and all(p.leader == p.replicas[0] for p in parts)

    _poll(led_by_preferred, "every partition led by its preferred replica")
    E = ElectLeadersRequest
    with _sock(cluster, 1) as sock:
        answer = call(sock, E[2](election_type=0, timeout_ms=30_000, topic_partitions=[
            E.TopicPartitions(topic="elect", partitions=[0, 1, 2, 7])]), 2, 5)
    codes = {r.partition_id: r.error_code for t in answer.replica_election_results for r in t.partition_result}
    assert answer.error_code == NONE and codes == {0: ELECTION_NOT_NEEDED, 1: ELECTION_NOT_NEEDED, 2: ELECTION_NOT_NEEDED,
                                                    7: UNKNOWN_TOPIC_OR_PARTITION}, answer
    with _sock(cluster, 1) as sock:
        answer = call(sock, E[2](election_type=1, timeout_ms=30_000, topic_partitions=[
            E.TopicPartitions(topic="elect", partitions=[0])]), 2, 6)
        (result,) = answer.replica_election_results[0].partition_result
        assert result.error_code == ELECTION_NOT_NEEDED and "has a leader" in result.error_message, answer
        answer = call(sock, E[2](election_type=1, timeout_ms=30_000, topic_partitions=None), 2, 7)
        assert answer.error_code == INVALID_REQUEST, answer


def test_manual_replica_assignments_in_create_topics_and_create_partitions(cluster: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("manual", num_partitions=2, replica_assignment=[[3, 1], [2, 3]])])["manual"].result(timeout=60)
    admin.create_partitions([NewPartitions("manual", 3, replica_assignment=[[1, 2]])])["manual"].result(timeout=60)
    parts = admin.list_topics("manual", timeout=30).topics["manual"].partitions
    assert {i: list(p.replicas) for i, p in parts.items()} == {0: [3, 1], 1: [2, 3], 2: [1, 2]}
    for bad, words in (([[1, 9]], "do not exist"), ([[1, 1]], "twice"), ([[1, 2], [3]], "every partition needs 2")):
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic("manual-bad", num_partitions=len(bad), replica_assignment=bad)])["manual-bad"].result(timeout=60)
        assert info.value.args[0].code() == INVALID_REPLICA_ASSIGNMENT and words in str(info.value), info.value
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions("manual", 5, replica_assignment=[[1, 2]])])["manual"].result(timeout=60)
    assert info.value.args[0].code() == INVALID_REPLICA_ASSIGNMENT and "1 assignments for 2 new partitions" in str(info.value)
    # A count with an assignment: Kafka's INVALID_REQUEST.
    C = CreateTopicsRequest
    with _sock(cluster, 1) as sock:
        answer = call(sock, C[5](topics=[C.CreatableTopic(
            name="manual-both", num_partitions=2, replication_factor=-1, configs=[],
            assignments=[C.CreatableTopic.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])])],
            timeout_ms=30_000, validate_only=False), 5, 8)
    assert answer.topics[0].error_code == INVALID_REQUEST, answer
    assert "manual-bad" not in admin.list_topics(timeout=30).topics


def test_the_cli_elects_preferred_leaders(cluster: harness.NodeCluster) -> None:
    done = subprocess.run([sys.executable, "-m", "raftlog.cli", "partitions", "elect-leaders", "elect", "--json",
                           "--bootstrap", cluster.client(2)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    assert [(r["partition"], r["error"]) for r in json.loads(done.stdout)] == [
        (0, "ELECTION_NOT_NEEDED"), (1, "ELECTION_NOT_NEEDED"), (2, "ELECTION_NOT_NEEDED")], done
    missing = subprocess.run([sys.executable, "-m", "raftlog.cli", "partitions", "elect-leaders", "elect", "9",
                              "--bootstrap", cluster.client(2)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stdout, missing


def test_a_broker_config_name_raftlog_does_not_know_is_stored_as_kafka_stores_it(cluster: harness.NodeCluster) -> None:
    # KafkaJS's `alter broker configs`: AlterConfigs of a broker with a topic config's name.
    assert _alter(cluster, 1, "2", {"cleanup.policy": "delete"}) == (NONE, None)
    assert _incremental(cluster, 3, BROKER, "2", [("no.such.config", SET, "x")]) == (NONE, None)
    assert _incremental(cluster, 3, BROKER, "2", [("no.such.config", DELETE, None),
                                                  ("cleanup.policy", DELETE, None)]) == (NONE, None)
    code, message = _incremental(cluster, 1, BROKER, "2", [("socket.request.max.bytes", SET, "1000")])
    assert code == INVALID_REQUEST and "socket.request.max.bytes" in message  # read at start, as in Kafka
    assert "cleanup.policy" not in _described(cluster, 2, "2")


def test_a_topics_compression_type_lists_its_broker_synonym(cluster: harness.NodeCluster) -> None:
    # KafkaJS's Broker describeConfigs: includeSynonyms lists the broker's compression.type.
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("synonyms", 1, 1, config={"max.message.bytes": "12345"})])["synonyms"].result(timeout=30)
    R = DescribeConfigsRequest

    def described() -> dict[str, Any]:
        with _sock(cluster, 1) as sock:
            answer = call(sock, R[4](resources=[R.DescribeConfigsResource(
                resource_type=TOPIC, resource_name="synonyms",
                configuration_keys=["compression.type", "retention.ms", "max.message.bytes"])],
                include_synonyms=True, include_documentation=False), 4, 2)
        (result,) = answer.results
        return result.error_code == NONE and {e.name: e for e in result.configs}

    entries = _poll(described, "the new topic's configs")
    compression = entries["compression.type"]
    assert (compression.value, compression.config_source) == ("producer", 5)
    assert [(s.name, s.value, s.source) for s in compression.synonyms] == [("compression.type", "producer", 5)]
    assert entries["retention.ms"].synonyms == []  # log.retention.ms has no value: none, as in Kafka
    assert [(s.name, s.value, s.source) for s in entries["max.message.bytes"].synonyms][0] == (
        "max.message.bytes", "12345", 1)


def test_named_broker_configs_are_answered_in_the_order_asked(cluster: harness.NodeCluster) -> None:
    # KafkaJS's Broker createTopics test reads ['default.replication.factor', 'num.partitions']
    # by position, as Kafka answers them
    R = DescribeConfigsRequest
    for keys in (["default.replication.factor", "num.partitions"], ["num.partitions", "default.replication.factor"]):
        with _sock(cluster, 1) as sock:
            answer = call(sock, R[1](resources=[R.DescribeConfigsResource(
                resource_type=BROKER, resource_name="1", configuration_keys=keys)], include_synonyms=False), 1, 3)
        (result,) = answer.results
        assert result.error_code == NONE, answer
        assert [e.name for e in result.configs] == keys

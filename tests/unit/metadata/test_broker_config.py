"""Dynamic broker configs: validation, the controller's records, replay into the image, the
snapshot round trip, and which value is in force on a broker (its own, the cluster's, static)."""

from __future__ import annotations

import pytest

from metadata import broker_config
from metadata.delta import image_from_snapshot, image_to_snapshot
from metadata.records import BrokerConfig, decode_record, encode_record
from metadata.errors import InvalidRecordError
from raftlog.base.errors import InvalidConfigError, InvalidRequestError
import random

from metadata.controller import Controller, ControllerResult
from metadata.delta import replay_envelope
from metadata.image import MetadataImage
from metadata.records import encode_envelope


class Cluster:
    """A controller and its committed image (no brokers needed: configs may name any id)."""

    def __init__(self) -> None:
        self.image = MetadataImage.empty()
        self.c = Controller(self.image, 1, 0, random.Random(0), random_bytes=random.Random(0).randbytes)
        self.commit(self.c.noop())

    def commit(self, result: ControllerResult):
        for env in result.envelopes:
            self.image = replay_envelope(self.image, encode_envelope(env))
            assert self.image.request_outcome(env.request_id).ok
        self.c.update_image(self.image, 0)
        return result.response


def test_values_are_normalized_and_bad_ones_named():
    assert broker_config.normalize_broker_configs(
        {"num.partitions": " 7 ", "auto.create.topics.enable": "TRUE"}) == {
        "auto.create.topics.enable": "true", "num.partitions": "7"}
    with pytest.raises(InvalidConfigError) as info:
        broker_config.normalize_broker_configs({"num.partitions": "0"})
    assert info.value.key == "num.partitions" and "out of range" in str(info.value)
    with pytest.raises(InvalidConfigError, match="not true or false"):
        broker_config.normalize_broker_configs({"auto.create.topics.enable": "yes"})


@pytest.mark.parametrize("name", ["log.dirs", "node.id", "advertised.listeners", "socket.request.max.bytes"])
def test_a_read_only_config_is_refused_naming_it(name):
    with pytest.raises(InvalidRequestError, match="Cannot update these configs dynamically") as info:
        broker_config.alter({}, {name: "1"}, [])
    assert name in str(info.value)
    with pytest.raises(InvalidRequestError, match=name.replace(".", r"\.")):
        broker_config.alter({}, {}, [name])


def test_a_name_raftlog_does_not_know_is_stored_with_no_effect_as_kafka_stores_it():
    # KafkaJS's `alter broker configs` sets a topic config's name on a broker; Kafka keeps it.
    after = broker_config.alter({"num.partitions": "3"}, {"cleanup.policy": "delete", "no.such.config": " x "}, [])
    assert after == {"cleanup.policy": "delete", "no.such.config": " x ", "num.partitions": "3"}
    assert broker_config.effective({"1": after}, 1) == {"num.partitions": (3, broker_config.SOURCE_DYNAMIC_BROKER)}
    assert broker_config.alter(after, {}, ["no.such.config"]) == {"cleanup.policy": "delete", "num.partitions": "3"}
    for bad in ({"": "1"}, {"a b": "1"}, {"x" * 300: "1"}, {"ok.name": "v" * 5000}):
        with pytest.raises(InvalidRequestError, match="not a broker config name"):
            broker_config.alter({}, bad, [])


@pytest.mark.parametrize("resource", ["x", "-1", "1.5", None, "12345678901"])
def test_a_bad_resource_is_refused(resource):
    with pytest.raises(InvalidRequestError, match="broker id"):
        broker_config.check_resource(resource)


def test_controller_records_replay_and_effective_values():
    cl = Cluster()
    after = cl.commit(cl.c.alter_broker_configs("", {"num.partitions": "4", "max.connections": "50"}, [], now_ms=0))
    assert after == {"max.connections": "50", "num.partitions": "4"}
    cl.commit(cl.c.alter_broker_configs("2", {"num.partitions": "6"}, [], now_ms=0))
    assert cl.c.alter_broker_configs("2", {"num.partitions": "6"}, [], now_ms=0).envelopes == ()  # no change
    assert dict(cl.image.broker_configs["2"]) == {"num.partitions": "6"}
    assert broker_config.effective(cl.image.broker_configs, 2) == {
        "num.partitions": (6, broker_config.SOURCE_DYNAMIC_BROKER),
        "max.connections": (50, broker_config.SOURCE_DYNAMIC_DEFAULT_BROKER)}
    assert broker_config.effective(cl.image.broker_configs, 1)["num.partitions"] == (
        4, broker_config.SOURCE_DYNAMIC_DEFAULT_BROKER)
    # Deleting the last key removes the entry; the snapshot carries what is left.
    cl.commit(cl.c.alter_broker_configs("2", {}, ["num.partitions"], now_ms=0))
    assert "2" not in cl.image.broker_configs
    again = image_from_snapshot(image_to_snapshot(cl.image))
    assert again == cl.image and dict(again.broker_configs[""]) == after
    with pytest.raises(InvalidRequestError, match="both set and deleted"):
        cl.c.alter_broker_configs("", {"num.partitions": "2"}, ["num.partitions"], now_ms=0)


def test_an_image_without_broker_configs_keeps_its_snapshot_bytes():
    cl = Cluster()
    before = image_to_snapshot(cl.image)
    assert b"broker_configs" not in before and image_from_snapshot(before) == cl.image


def test_the_record_round_trips_and_checks_its_resource():
    record = BrokerConfig("3", {"num.partitions": "2"}, ("max.connections",))
    assert decode_record(encode_record(record)) == record
    with pytest.raises(InvalidRecordError):
        BrokerConfig("b3")


def test_the_replication_throttles_are_dynamic_and_reach_the_node():
    """kafka-reassign-partitions --throttle sets them and --verify/--cancel delete them
    (issue 44); a node applies the effective rates to its replica manager."""
    from types import SimpleNamespace

    from raftlog.node.dynamic_config import DynamicBrokerConfig

    configs = {"leader.replication.throttled.rate": "1048576", "follower.replication.throttled.rate": "2048",
               "replica.alter.log.dirs.io.max.bytes.per.second": "1"}
    assert broker_config.normalize_broker_configs(configs) == configs
    with pytest.raises(InvalidConfigError):
        broker_config.normalize_broker_configs({"leader.replication.throttled.rate": "-1"})
    node = SimpleNamespace(node_id=1, leader_replication_throttled_rate=0, follower_replication_throttled_rate=0)
    target = SimpleNamespace(leader_replication_throttled_rate=0, follower_replication_throttled_rate=0)
    image = SimpleNamespace(broker_configs={"1": configs})
    DynamicBrokerConfig(node, [target]).on_image(image)
    assert (target.leader_replication_throttled_rate, target.follower_replication_throttled_rate) == (1048576, 2048)

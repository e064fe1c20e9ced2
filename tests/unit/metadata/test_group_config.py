"""Group configs (Kafka 4's GROUP resource): validation as Kafka's GroupConfig, the controller's
records, replay into the image, the snapshot round trip, and a refused change stores nothing."""

from __future__ import annotations

import pytest

from metadata import group_config
from metadata.delta import image_from_snapshot, image_to_snapshot
from raftlog.base.errors import InvalidConfigError, InvalidRequestError


def test_values_are_normalized():
    assert group_config.normalize({"share.auto.offset.reset": "EARLIEST", "share.record.lock.duration.ms": " 2000",
                                   "share.renew.acknowledge.enable": "FALSE"}) == {
        "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000",
        "share.renew.acknowledge.enable": "false"}
    assert group_config.normalize({"share.auto.offset.reset": "by_duration:pt1h"}) == {
        "share.auto.offset.reset": "by_duration:PT1H"}


@pytest.mark.parametrize("configs, key, says", [
    ({"no.such.config": "1"}, "no.such.config", "Unknown group config name"),
    ({"share.record.lock.duration.ms": "999"}, "share.record.lock.duration.ms", "at least 1000"),
    ({"share.record.lock.duration.ms": "3600001"}, "share.record.lock.duration.ms", "no more than"),
    ({"consumer.session.timeout.ms": "abc"}, "consumer.session.timeout.ms", "Not a number"),
    ({"share.auto.offset.reset": "newest"}, "share.auto.offset.reset", "latest, earliest"),
    ({"share.auto.offset.reset": "by_duration:1h"}, "share.auto.offset.reset", "by_duration"),
    ({"share.isolation.level": "none"}, "share.isolation.level", "read_committed"),
    ({"share.delivery.count.limit": "11"}, "share.delivery.count.limit", "no more than 10"),
    ({"share.session.timeout.ms": "5000", "share.heartbeat.interval.ms": "5000"}, "share.session.timeout.ms",
     "greater than share.heartbeat.interval.ms"),
])
def test_a_bad_config_is_refused_naming_its_key(configs, key, says):
    with pytest.raises(InvalidConfigError, match=says) as info:
        group_config.alter({}, configs, [])
    assert info.value.key == key and info.value.code == "INVALID_CONFIG"


def test_delete_of_an_unknown_name_and_set_and_delete_of_one_key_are_refused():
    with pytest.raises(InvalidConfigError, match="Unknown group config name"):
        group_config.alter({}, {}, ["nope"])
    with pytest.raises(InvalidRequestError, match="both set and deleted"):
        group_config.alter({}, {"share.session.timeout.ms": "50000"}, ["share.session.timeout.ms"])


def test_value_reads_a_group_setting_else_the_default():
    configs = {"share.record.lock.duration.ms": "2000", "share.auto.offset.reset": "earliest"}
    assert group_config.value(configs, "share.record.lock.duration.ms", 30_000) == 2000
    assert group_config.value(configs, "share.session.timeout.ms", 45_000) == 45_000
    assert group_config.value({"share.session.timeout.ms": "garbage"}, "share.session.timeout.ms", 7) == 7
    assert group_config.value(None, "share.auto.offset.reset", "latest") == "latest"


def test_the_controller_records_group_configs_and_replay_builds_the_image(controller_cluster):
    cl = controller_cluster()
    after = cl.commit(cl.c.alter_group_configs("g1", {"share.auto.offset.reset": "Earliest"}, [], now_ms=0))
    assert after == {"share.auto.offset.reset": "earliest"}
    cl.commit(cl.c.alter_group_configs("g1", {"share.record.lock.duration.ms": "2000"}, [], now_ms=0))
    assert dict(cl.image.group_configs["g1"]) == {"share.auto.offset.reset": "earliest",
                                                  "share.record.lock.duration.ms": "2000"}
    assert image_from_snapshot(image_to_snapshot(cl.image)) == cl.image
    unchanged = cl.c.alter_group_configs("g1", {"share.record.lock.duration.ms": "2000"}, [], now_ms=0)
    assert unchanged.envelopes == ()
    cl.commit(cl.c.alter_group_configs("g1", {}, ["share.auto.offset.reset", "share.record.lock.duration.ms"],
                                       now_ms=0))
    assert "g1" not in cl.image.group_configs  # an entry left empty goes


def test_a_refused_change_stores_nothing(controller_cluster):
    cl = controller_cluster()
    cl.commit(cl.c.alter_group_configs("g", {"share.record.lock.duration.ms": "5000"}, [], now_ms=0))
    before = cl.image
    with pytest.raises(InvalidConfigError):
        cl.c.alter_group_configs("g", {"share.record.lock.duration.ms": "6000", "share.auto.offset.reset": "x"}, [],
                                 now_ms=0)
    with pytest.raises(InvalidRequestError, match="Default group resources are not allowed"):
        cl.c.alter_group_configs("", {"share.record.lock.duration.ms": "6000"}, [], now_ms=0)
    assert cl.image == before and dict(cl.image.group_configs["g"]) == {"share.record.lock.duration.ms": "5000"}

"""Group configs (Kafka 4's GROUP resource) on a real three-node cluster: confluent-kafka's AdminClient describes and alters them (defaults from the broker's settings, GROUP_CONFIG when set), a bad value is refused naming its key and nothing is stored, `raftlog groups config` sets them, a share group with share.auto.offset.reset=earliest reads from the start, and one with a short share.record.lock.duration.ms redelivers unacknowledged records long before the broker's lock would end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

import node_harness as harness  # noqa: E402
from raftlog.client import Admin, Producer, ShareConsumer  # noqa: E402
from test_kafka_groups import create  # noqa: E402

pytestmark = pytest.mark.cluster

# The broker's lock is ten minutes: a redelivery within the test's deadline is the group's lock.
BROKER_LOCK_MS = 600_000
GROUP_LOCK_MS = 2_000
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def gc_cluster(tmp_path_factory):
    settings = {**harness.TEST_SETTINGS, "group_share_record_lock_duration_ms": BROKER_LOCK_MS}
    with harness.NodeCluster(tmp_path_factory.mktemp("group_configs"), size=3, settings=settings) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


def cli(cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "raftlog.cli", *args, "--bootstrap", ",".join(cluster.bootstrap())],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stderr
    return done


def _describe(admin: AdminClient, group: str) -> dict:
    resource = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=60)


def _alter(admin: AdminClient, group: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    return admin.incremental_alter_configs([resource], request_timeout=30)[resource]


def test_confluent_admin_describes_and_alters_group_configs(gc_cluster):
    admin = AdminClient({"bootstrap.servers": gc_cluster.kafka_bootstrap()})
    group = "gc-admin"
    before = _describe(admin, group)  # a group need not exist to have configs
    lock = before["share.record.lock.duration.ms"]
    assert lock.value == str(BROKER_LOCK_MS) and lock.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert before["share.auto.offset.reset"].value == "latest"
    assert before["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    assert before["consumer.session.timeout.ms"].value == "45000"
    assert {"streams.session.timeout.ms", "share.isolation.level", "share.delivery.count.limit"} <= set(before)

    _alter(admin, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET),
           ("consumer.session.timeout.ms", "50000", AlterConfigOpType.SET)).result(timeout=60)
    after = _describe(admin, group)
    assert after["share.auto.offset.reset"].value == "earliest"
    assert after["share.auto.offset.reset"].source == ConfigSource.GROUP_CONFIG.value
    assert after["consumer.session.timeout.ms"].value == "50000"

    # Bad values: refused naming the key (INVALID_CONFIG), nothing of the request stored.
    for name, value in (("share.record.lock.duration.ms", "999"), ("share.auto.offset.reset", "newest"),
                        ("no.such.config", "1")):
        with pytest.raises(confluent_kafka.KafkaException) as info:
            _alter(admin, group, ("share.heartbeat.interval.ms", "6000", AlterConfigOpType.SET),
                   (name, value, AlterConfigOpType.SET)).result(timeout=60)
        error = info.value.args[0]
        assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG and name in error.str(), error
    unchanged = _describe(admin, group)
    assert unchanged["share.heartbeat.interval.ms"].source != ConfigSource.GROUP_CONFIG.value
    assert unchanged["share.auto.offset.reset"].value == "earliest"

    _alter(admin, group, ("share.auto.offset.reset", None, AlterConfigOpType.DELETE)).result(timeout=60)
    assert _describe(admin, group)["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    # The native admin may ask a node whose metadata image has not applied the delete yet.
    with Admin(gc_cluster.bootstrap()) as native:
        gc_cluster.wait_for(lambda: native.describe_group_configs(group) == {"consumer.session.timeout.ms": "50000"},
                            30, "the delete seen through the native protocol")


def test_cli_sets_auto_offset_reset_and_a_new_share_consumer_reads_from_the_start(gc_cluster):
    topic, group = "gc-earliest", "gc-earliest-group"
    create(gc_cluster, topic, 2)
    values = [f"early-{i}" for i in range(10)]
    with Producer(gc_cluster.bootstrap(), acks="all") as p:
        for i, v in enumerate(values):
            p.send(topic, v.encode(), partition=i % 2)
        p.flush(timeout=60)
    bad = cli(gc_cluster, "groups", "config", group, "--set", "share.auto.offset.reset=newest", ok=False)
    assert "share.auto.offset.reset" in bad.stderr
    cli(gc_cluster, "groups", "config", group, "--set", "share.auto.offset.reset=earliest")
    shown = json.loads(cli(gc_cluster, "groups", "config", group, "--json").stdout)
    assert shown == {"group_id": group, "configs": {"share.auto.offset.reset": "earliest"}}
    got: list[str] = []
    # The consumer asks for `latest` (its default); the group's config decides.
    with ShareConsumer(gc_cluster.bootstrap(), group) as c:
        c.subscribe([topic])
        gc_cluster.wait_for(lambda: got.extend(r.value.decode() for r in c.poll(timeout_ms=500)) or
                            sorted(got) == sorted(values), TIMEOUT_S, "every record from the start")
    assert sorted(got) == sorted(values)


def test_a_short_group_lock_redelivers_unacknowledged_records(gc_cluster):
    topic, group = "gc-lock", "gc-lock-group"
    create(gc_cluster, topic, 1)
    # The group's sessions outlast the test, so only the lock can free the record A holds.
    cli(gc_cluster, "groups", "config", group, "--set", f"share.record.lock.duration.ms={GROUP_LOCK_MS}",
        "--set", "share.session.timeout.ms=600000", "--set", "share.auto.offset.reset=earliest")
    with Producer(gc_cluster.bootstrap(), acks="all") as p:
        p.send(topic, b"held", partition=0)
        p.flush(timeout=60)
    with ShareConsumer(gc_cluster.bootstrap(), group, acknowledgement_mode="explicit") as a, \
            ShareConsumer(gc_cluster.bootstrap(), group, acknowledgement_mode="explicit") as b:
        a.subscribe([topic])
        held = gc_cluster.wait_for(lambda: a.poll(timeout_ms=500), TIMEOUT_S, "A acquires the record")
        assert [(r.value, r.delivery_count) for r in held] == [(b"held", 1)]  # A never acknowledges it
        b.subscribe([topic])
        again = gc_cluster.wait_for(lambda: b.poll(timeout_ms=500), TIMEOUT_S, "B gets it after the group's lock")
        assert [(r.value, r.delivery_count) for r in again] == [(b"held", 2)]  # the broker's 10-minute lock holds on
        b.acknowledge(again[0], "accept")
        b.commit_sync()

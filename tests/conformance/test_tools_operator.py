"""Kafka's operator tools give the same answers against raftlog as against the reference Apache
Kafka: kafka-configs (topic and broker, and client quotas for users, clients, both and
defaults), kafka-metadata-quorum, kafka-log-dirs, kafka-features, kafka-verifiable-producer/
-consumer (the building blocks of Kafka's system tests: every acknowledged record consumed, in
order per partition), kafka-leader-election."""

from __future__ import annotations

import json
import time

import pytest

from differential import Sides, assert_same
from kafka_ref import kafka_tool

RECORDS = 300


def _json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def test_configs_quorum_log_dirs_features(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict:
        topic = "tools-operator"
        out: dict = {}
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "2", "--replication-factor", "3", check=True)
        configs = ("kafka-configs", "--bootstrap-server", bootstrap)
        done = kafka_tool(*configs, "--alter", "--entity-type", "topics", "--entity-name", topic,
                          "--add-config", "retention.ms=86400000,cleanup.policy=compact")
        out["configs_alter_topic"] = (done.returncode, done.stdout.strip())
        done = kafka_tool(*configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
        out["configs_describe_topic"] = (done.returncode, sorted(
            kv.strip() for line in done.stdout.splitlines()[1:] for kv in [line.split(" sensitive=")[0]] if kv.strip()))
        done = kafka_tool(*configs, "--alter", "--entity-type", "topics", "--entity-name", topic,
                          "--delete-config", "cleanup.policy")
        out["configs_delete_topic"] = done.returncode
        done = kafka_tool(*configs, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
        wanted = ("num.partitions=", "default.replication.factor=", "auto.create.topics.enable=")
        out["configs_describe_broker"] = (done.returncode, sorted(
            line.strip().split(" ")[0] for line in done.stdout.splitlines() if line.strip().startswith(wanted)))
        done = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status")
        status = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
        out["quorum_status"] = (done.returncode, len(json.loads(status.get("CurrentVoters", "[]").strip() or "[]")),
                                status.get("LeaderId", "").strip().isdigit())
        done = kafka_tool("kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic)
        listing = next((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")), {})
        out["log_dirs"] = (done.returncode, sorted(
            (len(b["logDirs"]), sorted(p["partition"] for d in b["logDirs"] for p in d["partitions"]))
            for b in listing.get("brokers", [])))
        done = kafka_tool("kafka-features", "--bootstrap-server", bootstrap, "describe")
        # The feature names (the levels are each broker's own: docs/operator-apis.md "Features")
        # and whether metadata.version is finalized.
        listed = [line.split() for line in done.stdout.splitlines() if line.startswith("Feature:")]
        out["features"] = (done.returncode, sorted(f[1] for f in listed),
                           any(f[1] == "metadata.version" and "FinalizedVersionLevel:" in f and
                               f[f.index("FinalizedVersionLevel:") + 1] != "0" for f in listed))
        return out

    assert_same(sides.run(scenario), "kafka-configs, kafka-metadata-quorum, kafka-log-dirs, kafka-features")


def test_verifiable_producer_and_consumer(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict:
        topic = "tools-verifiable"
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "3", "--replication-factor", "3", check=True)
        done = kafka_tool("kafka-verifiable-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--max-messages", str(RECORDS), "--acks", "-1", timeout_s=180)
        events = _json_lines(done.stdout)
        acked = {(e["partition"], e["offset"]) for e in events if e.get("name") == "producer_send_success"}
        done = kafka_tool("kafka-verifiable-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--group-id", "verifiable-group", "--max-messages", str(RECORDS),
                          "--reset-policy", "earliest", timeout_s=180)
        consumed: set[tuple[int, int]] = set()
        in_order = True
        last: dict[int, int] = {}
        for e in _json_lines(done.stdout):
            if e.get("name") != "records_consumed":
                continue
            for p in e.get("partitions", []):
                if p["minOffset"] <= last.get(p["partition"], -1):
                    in_order = False
                last[p["partition"]] = p["maxOffset"]
                consumed.update((p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1))
        # Which partitions the records went to is the sticky partitioner's random pick: not compared.
        return {"acked": len(acked), "every_acked_consumed": acked <= consumed, "in_order": in_order}

    same = assert_same(sides.run(scenario), "kafka-verifiable-producer/-consumer")
    assert same["acked"] == RECORDS and same["every_acked_consumed"] and same["in_order"]


def test_leader_election(sides: Sides) -> None:
    """kafka-leader-election: a PREFERRED election leaves each partition led by its preferred
    replica (whether it had to move or was already there: the leaders Raft elected may differ
    from Kafka's), and an UNCLEAN one of a partition that has a leader is not needed."""
    def scenario(bootstrap: str) -> dict:
        topic = "tools-election"
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "3", "--replication-factor", "3", check=True)
        election = ("kafka-leader-election", "--bootstrap-server", bootstrap)
        preferred = kafka_tool(*election, "--election-type", "preferred", "--topic", topic, "--partition", "0")
        every = kafka_tool(*election, "--election-type", "preferred", "--all-topic-partitions")
        unclean = kafka_tool(*election, "--election-type", "unclean", "--topic", topic, "--partition", "1")
        described = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
        preferred_leads = []
        for line in described.stdout.splitlines():
            fields = dict(part.split(": ", 1) for part in line.strip().split("\t") if ": " in part)
            if "Leader" in fields and "Replicas" in fields:
                preferred_leads.append(fields["Leader"] == fields["Replicas"].split(",")[0])
        return {"preferred": preferred.returncode, "all": every.returncode, "unclean": unclean.returncode,
                "unclean_not_needed": "already elected" in unclean.stdout + unclean.stderr,
                "preferred_leads": preferred_leads}

    same = assert_same(sides.run(scenario), "kafka-leader-election")
    assert same["preferred_leads"] == [True, True, True] and same["unclean_not_needed"], same


def test_quotas_through_kafka_configs(sides: Sides) -> None:
    """Client quotas as operators set them with kafka-configs: a user, a client id, both, and the
    user default; described back, then one deleted."""
    def scenario(bootstrap: str) -> dict:
        configs = ("kafka-configs", "--bootstrap-server", bootstrap)
        out: dict = {}
        for name, entity in (("user", ("--entity-type", "users", "--entity-name", "alice")),
                             ("client", ("--entity-type", "clients", "--entity-name", "etl")),
                             ("user_default", ("--entity-type", "users", "--entity-default")),
                             ("both", ("--entity-type", "users", "--entity-name", "bob",
                                       "--entity-type", "clients", "--entity-name", "etl"))):
            done = kafka_tool(*configs, "--alter", *entity,
                              "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
            out[f"alter_{name}"] = (done.returncode, done.stdout.strip())
        done = kafka_tool(*configs, "--alter", "--entity-type", "clients", "--entity-name", "etl",
                          "--delete-config", "consumer_byte_rate")
        out["delete"] = (done.returncode, done.stdout.strip())
        for name, entity in (("user", ("--entity-type", "users", "--entity-name", "alice")),
                             ("client", ("--entity-type", "clients", "--entity-name", "etl")),
                             ("users", ("--entity-type", "users"))):
            done = kafka_tool(*configs, "--describe", *entity)
            out[f"describe_{name}"] = (done.returncode, sorted(line.strip() for line in done.stdout.splitlines()
                                                               if line.strip()))
        return out

    same = assert_same(sides.run(scenario), "kafka-configs --entity-type users/clients (quotas)")
    assert all(same[k][0] == 0 for k in same), same  # every step succeeded on both, not failed alike
    assert any("producer_byte_rate=1048576" in line for line in same["describe_user"][1]), same
    assert not any("consumer_byte_rate" in line for line in same["describe_client"][1]), same


def test_group_configs_through_kafka_configs(sides: Sides) -> None:
    """Kafka 4's group configs as operators set them with kafka-configs --entity-type groups:
    set, described (the group's own, and --all), a bad value and an unknown name refused naming
    the key (nothing stored), one deleted."""
    def scenario(bootstrap: str) -> dict:
        configs = ("kafka-configs", "--bootstrap-server", bootstrap)
        group = ("--entity-type", "groups", "--entity-name", "tools-group-configs")
        out: dict = {}

        def describe(*extra: str) -> tuple[int, list[str]]:
            done = kafka_tool(*configs, "--describe", *group, *extra)
            return done.returncode, sorted(line.strip() for line in done.stdout.splitlines() if line.strip())

        done = kafka_tool(*configs, "--alter", *group,
                          "--add-config", "share.auto.offset.reset=earliest,consumer.session.timeout.ms=50000")
        out["alter"] = (done.returncode, done.stdout.strip())
        out["describe"] = describe()
        code, lines = describe("--all")
        out["describe_all"] = (code, sorted(line.split("=")[0] for line in lines[1:]))
        for name, value in (("share.record.lock.duration.ms", "500"), ("share.auto.offset.reset", "newest"),
                            ("no.such.group.config", "1")):
            done = kafka_tool(*configs, "--alter", *group, "--add-config",
                              f"share.heartbeat.interval.ms=6000,{name}={value}")
            out[f"refused_{name}"] = (done.returncode != 0, name in done.stdout + done.stderr)
        done = kafka_tool(*configs, "--alter", *group, "--delete-config", "consumer.session.timeout.ms")
        out["delete"] = (done.returncode, done.stdout.strip())
        out["describe_after"] = describe()
        return out

    same = assert_same(sides.run(scenario), "kafka-configs --entity-type groups")
    assert same["alter"][0] == 0 and same["delete"][0] == 0, same
    assert any("share.auto.offset.reset=earliest" in line for line in same["describe_after"][1]), same
    assert not any("consumer.session.timeout.ms" in line for line in same["describe_after"][1]), same
    assert all(same[k] == (True, True) for k in same if k.startswith("refused_")), same


def test_group_configs_through_the_admin_api(sides: Sides) -> None:
    """DescribeConfigs and the legacy AlterConfigs of a GROUP resource with confluent-kafka's
    AdminClient: the sources and flags of set and unset configs, a whole-set replacement, a bad
    value."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    def scenario(bootstrap: str) -> dict:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        group = "admin-group-configs"
        out: dict = {}

        def describe(name: str) -> dict:
            resource = ConfigResource(ResourceType.GROUP, name)
            try:
                found = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=60)
            except KafkaException as exc:
                return {"error": exc.args[0].name()}
            return {k: (e.value, e.source, e.is_read_only, e.is_sensitive)
                    for k, e in found.items() if k.startswith(("share.", "consumer."))}

        def alter(name: str, configs: dict[str, str]) -> str | None:
            resource = ConfigResource(ResourceType.GROUP, name, set_config=configs)
            try:
                admin.alter_configs([resource], request_timeout=30)[resource].result(timeout=60)
            except KafkaException as exc:
                return exc.args[0].name()
            return None

        def settled(keys: set[str]) -> dict:
            """The configs set on the group once they are `keys` on the broker asked (a broker
            applies the metadata log's records a moment after the controller committed them),
            else what it says at the deadline."""
            deadline = time.monotonic() + 30
            while True:
                found = {k: v for k, v in describe(group).items() if v[1] == 8}
                if set(found) == keys or time.monotonic() > deadline:
                    return found
                time.sleep(0.2)

        out["describe_unset"] = {k: v[1:] for k, v in describe(group).items()}  # values are each broker's
        out["alter_legacy"] = alter(group, {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "6000"})
        out["after_legacy"] = settled({"share.auto.offset.reset", "share.heartbeat.interval.ms"})
        out["replace_legacy"] = alter(group, {"share.isolation.level": "read_committed"})
        out["after_replace"] = settled({"share.isolation.level"})
        out["alter_legacy_bad"] = alter(group, {"share.auto.offset.reset": "newest"})
        return out

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent-kafka's alter_configs is deprecated
        answers = sides.run(scenario)
    assert_same(answers, "DescribeConfigs / AlterConfigs of GROUP resources")


def test_group_configs_after_delete_groups(sides: Sides) -> None:
    """A group's configs outlive DeleteGroups of the group, in Kafka 4.4 as in raftlog (a classic
    group with a committed offset, deleted with confluent-kafka's AdminClient)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    def scenario(bootstrap: str) -> dict:
        topic, group = "tools-group-configs-delete", "group-configs-deleted"
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "1", "--replication-factor", "3", check=True)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, b"x", partition=0)
        producer.flush(60)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the group's coordinator may still be loading
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
                break
            except Exception:  # noqa: BLE001 - retried under the deadline; the comparison says what came of it
                time.sleep(0.5)
        consumer.close()
        out: dict = {}
        done = kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "groups",
                          "--entity-name", group, "--add-config", "consumer.session.timeout.ms=50000")
        out["alter"] = done.returncode
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
            out["delete"] = None
        except Exception as exc:  # noqa: BLE001 - compared
            out["delete"] = str(exc)[:80]
        resource = ConfigResource(ResourceType.GROUP, group)
        deadline = time.monotonic() + 15
        while True:  # a broker applies the metadata log a moment after the controller committed it
            found = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=60)
            kept = found["consumer.session.timeout.ms"].source == 8
            if not kept or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out["config_kept"] = kept
        return out

    same = assert_same(sides.run(scenario), "group configs after DeleteGroups")
    assert same["alter"] == 0 and same["delete"] is None and same["config_kept"], same  # Kafka 4.4 keeps them

"""DescribeConfigs of a broker reports Kafka's sources (kafka-python test_describe_configs_broker):
STATIC_BROKER_CONFIG for what the node's config file, environment or flags set, even to its
default value, DEFAULT_CONFIG for the rest; `raftlog cluster up`'s TOML sets only what differs
from the defaults, so its nodes report the same."""

from __future__ import annotations

from pathlib import Path

from metadata.broker_config import STATIC_BROKER_CONFIGS
from raftlog.node.config import config_to_toml, load_config
from raftlog.node.kafka.broker_configs import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, broker_entries

NODE = """
node_id = 1
data_dir = "/tmp/raftlog-sources-1"
cluster_secret = "ssssssssssssssss"
default_partitions = 1
[listeners]
kafka = "127.0.0.1:19092"
[topic_defaults]
max_message_bytes = "2000000"
[controller_quorum_voters]
1 = "127.0.0.1:9095"
"""


def _sources(config) -> dict[str, tuple[int, bool]]:
    return {e["name"]: (e["config_source"], e["is_default"]) for e in broker_entries(config, None)}


def test_static_for_what_the_node_sets_default_for_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(NODE)
    config = load_config(path, env={"RAFTLOG_MAX_CONNECTIONS": "1024"}, overrides={"auto_create_topics": False})
    sources = _sources(config)
    assert sources["node.id"][0] == SOURCE_STATIC_BROKER
    assert sources["log.dirs"][0] == SOURCE_STATIC_BROKER
    assert sources["listeners"][0] == SOURCE_STATIC_BROKER
    assert sources["num.partitions"] == (SOURCE_STATIC_BROKER, True)  # set, to the default value
    assert sources["max.connections"] == (SOURCE_STATIC_BROKER, True)  # by the environment
    assert sources["auto.create.topics.enable"] == (SOURCE_STATIC_BROKER, False)  # by a flag
    assert sources["message.max.bytes"][0] == SOURCE_STATIC_BROKER
    assert sources["log.retention.hours"][0] == SOURCE_DEFAULT
    assert sources["default.replication.factor"] == (SOURCE_DEFAULT, True)
    assert sources["compression.type"] == (SOURCE_DEFAULT, True)
    assert sources["socket.request.max.bytes"] == (SOURCE_DEFAULT, True)


def test_a_written_config_keeps_its_sources(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(NODE)
    original = load_config(path, env={}, overrides={"auto_create_topics": False})
    path.write_text(config_to_toml(original))
    again = load_config(path, env={})
    assert again == original
    expected = _sources(original)
    expected["num.partitions"] = (SOURCE_DEFAULT, True)  # set to its default: not written
    assert _sources(again) == expected


def test_every_read_only_config_listed_is_refused_when_altered(tmp_path: Path) -> None:
    # metadata/broker_config.py stores a name it does not know (as Kafka does) and refuses the
    # read-only ones: each of those DescribeConfigs lists must be in its static set.
    path = tmp_path / "node.toml"
    path.write_text(NODE)
    read_only = {e["name"] for e in broker_entries(load_config(path, env={}, overrides={}), None) if e["read_only"]}
    assert read_only and read_only <= STATIC_BROKER_CONFIGS, read_only - STATIC_BROKER_CONFIGS

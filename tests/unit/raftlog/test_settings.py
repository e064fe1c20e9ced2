"""The services' typed settings carry the node config's values (raftlog/node/settings.py): a value set in the file reaches the service that reads it, defaults come from config.py alone, and the group coordinator's settings are validated there."""

from pathlib import Path

import pytest

from raftlog.base.errors import ConfigError
from raftlog.base.topics import OFFSETS_TOPIC_PARTITIONS, TRANSACTION_STATE_TOPIC_PARTITIONS
from raftlog.node.config import NodeConfig, load_config
from raftlog.node.settings import group_settings, listener_settings, metadata_settings, partition_settings, txn_settings

SECRET = "s" * 16
FILE = f"""
node_id = 2
data_dir = "{{data}}"
cluster_secret = "{SECRET}"
advertised_host = "broker-2.example"
heartbeat_ms = 700
session_timeout_ms = 7000
election_timeout_ms = 900
request_timeout_ms = 12000
max_frame_bytes = 2000000
peer_max_frame_bytes = 3000000
max_in_flight = 17
default_partitions = 3
default_replication_factor = 2
scrub_bytes_per_s = 1234
scrub_interval_ms = 5678
log_open_files_max = 99
group_min_session_timeout_ms = 250
group_max_session_timeout_ms = 60000
group_initial_rebalance_delay_ms = 0
acls_enabled = true
allow_plaintext = true
[listeners]
kafka = "0.0.0.0:19092"
client = "0.0.0.0:19093"
peer = "0.0.0.0:19094"
quorum = "127.0.0.1:19095"
[controller_quorum_voters]
2 = "127.0.0.1:19095"
[topic_defaults]
retention_ms = "1000"
"""


def _config(tmp_path: Path, **extra: str) -> NodeConfig:
    path = tmp_path / "node.toml"
    path.write_text(FILE.format(data=tmp_path / "data"))
    return load_config(path, env={}, overrides=extra or None)


def test_each_service_gets_the_values_of_the_file(tmp_path):
    config = _config(tmp_path)
    p = partition_settings(config)
    assert (p.node_id, p.data_dir) == (2, tmp_path / "data")
    assert p.replica.election_timeout_ms == 900
    assert (p.scrub_bytes_per_s, p.scrub_interval_ms, p.log_open_files_max) == (1234, 5678, 99)
    g = group_settings(config)
    assert (g.node_id, g.request_timeout_ms) == (2, 12000)
    assert g.coordinator.partitions == OFFSETS_TOPIC_PARTITIONS
    assert (g.coordinator.group_min_session_timeout_ms, g.coordinator.group_max_session_timeout_ms,
            g.coordinator.group_initial_rebalance_delay_ms) == (250, 60000, 0)
    m = metadata_settings(config)
    assert (m.node_id, m.is_controller, m.is_broker) == (2, True, True)
    assert m.voter_quorum == {2: "127.0.0.1:19095"}
    assert m.voter_peers == {2: "broker-2.example:19094"}  # its own: the advertised peer listener
    assert m.advertised_client == ("broker-2.example", 19093)
    assert m.advertised_kafka == ("broker-2.example", 19092)
    assert (m.heartbeat_ms, m.session_timeout_ms, m.request_timeout_ms) == (700, 7000, 12000)
    assert (m.max_frame_bytes, m.default_partitions, m.default_replication_factor) == (2000000, 3, 2)
    assert m.topic_defaults == {"retention_ms": "1000"} and m.authorizer_enabled
    client, peer = listener_settings(config), listener_settings(config, peer=True)
    assert (client.max_frame_bytes, peer.max_frame_bytes) == (2000000, 3000000)
    assert client.max_in_flight == peer.max_in_flight == 17
    assert client.request_timeout_ms == 12000


def test_group_defaults_come_from_the_config(tmp_path):
    config = NodeConfig(node_id=1, data_dir=tmp_path)
    g = group_settings(config).coordinator
    assert (g.group_min_session_timeout_ms, g.group_max_session_timeout_ms,
            g.group_initial_rebalance_delay_ms) == (1_000, 1_800_000, 1_000)


def test_the_migration_policy_is_kafkas_and_refuses_other_values(tmp_path):
    assert group_settings(NodeConfig(node_id=1, data_dir=tmp_path)).coordinator.group_consumer_migration_policy == \
        "bidirectional"
    g = group_settings(_config(tmp_path, group_consumer_migration_policy="UPGRADE")).coordinator
    assert g.group_consumer_migration_policy == "upgrade"
    with pytest.raises(ConfigError, match="group_consumer_migration_policy"):
        _config(tmp_path, group_consumer_migration_policy="sideways")


def test_the_transaction_coordinator_gets_its_max_timeout_from_the_config(tmp_path):
    t = txn_settings(_config(tmp_path, transaction_max_timeout_ms=60000))
    assert (t.node_id, t.coordinator.max_timeout_ms) == (2, 60000)
    assert (t.coordinator.partitions, t.coordinator.offsets_partitions) == (
        TRANSACTION_STATE_TOPIC_PARTITIONS, OFFSETS_TOPIC_PARTITIONS)
    assert txn_settings(NodeConfig(node_id=1, data_dir=tmp_path)).coordinator.max_timeout_ms == 900_000
    with pytest.raises(ConfigError, match="transaction_max_timeout_ms"):
        _config(tmp_path, transaction_max_timeout_ms=0)


def test_a_min_session_timeout_over_the_max_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="group_min_session_timeout_ms.*more than"):
        _config(tmp_path, group_min_session_timeout_ms=70000)


def test_a_voter_without_a_peer_address_is_a_config_error(tmp_path):
    config = _config(tmp_path)
    broker_only = NodeConfig(node_id=3, data_dir=tmp_path, roles=frozenset({"broker"}),
                             controller_quorum_voters=config.controller_quorum_voters)
    with pytest.raises(ConfigError, match="no peer address for voter"):
        metadata_settings(broker_only)

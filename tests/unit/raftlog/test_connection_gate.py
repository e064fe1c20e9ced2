"""The accept-side gate: the client and Kafka listeners share one node-wide budget while the peer listener has its own, one address gets at most its limit (or its override) over every listener, a release frees both, refusals are counted; the timers close a connection unauthenticated past the pre-auth timeout or idle past the idle timeout, never one with a request in flight; the connection-limit settings load with Kafka's names and formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftlog.base.errors import ConfigError
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.config import load_config
from raftlog.node.gate import ConnectionGate, overdue


def test_client_and_kafka_share_the_budget_and_the_peer_listener_has_its_own():
    gate = ConnectionGate(max_connections=2)
    assert gate.admit("client", "10.0.0.1") is None
    assert gate.admit("kafka", "10.0.0.2") is None
    assert gate.admit("kafka", "10.0.0.3") == "max_connections"
    assert gate.admit("client", "10.0.0.3") == "max_connections"
    assert gate.admit("peer", "10.0.0.3") is None  # strangers on the client ports never cut the cluster's links
    gate.release("client", "10.0.0.1")
    assert gate.admit("kafka", "10.0.0.3") is None


def test_one_address_gets_its_limit_over_every_listener_and_overrides_win():
    gate = ConnectionGate(max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 3, "10.0.0.8": 0})
    assert gate.admit("client", "10.0.0.1") is None
    assert gate.admit("peer", "10.0.0.1") is None
    assert gate.admit("kafka", "10.0.0.1") == "max_connections_per_ip"
    assert [gate.admit("kafka", "10.0.0.9") for _ in range(4)] == [None, None, None, "max_connections_per_ip"]
    assert gate.admit("client", "10.0.0.8") == "max_connections_per_ip"  # 0: this address never
    gate.release("peer", "10.0.0.1")
    assert gate.admit("kafka", "10.0.0.1") is None
    for _ in range(3):
        gate.release("kafka", "10.0.0.9")
    assert "10.0.0.9" not in gate._per_ip  # only addresses with connections are kept


def test_refusals_are_counted_by_listener_and_reason():
    registry = MetricsRegistry()
    gate = ConnectionGate(max_connections=1, registry=registry)
    gate.refused("kafka", "10.0.0.1", "max_connections")
    gate.refused("kafka", "10.0.0.1", "max_connections")  # logged once, counted twice
    assert 'raftlog_connections_refused_total{listener="kafka",reason="max_connections"} 2.0' in registry.render()


@pytest.mark.parametrize(
    ("now", "accepted", "active", "authenticated", "busy", "idle", "preauth", "expected"),
    [
        (5, 0, 5, False, False, 0, 10, (None, 10)),  # pre-auth: look again at its deadline
        (10, 0, 9, False, False, 0, 10, ("preauth_timeout", 10)),
        (10, 0, 9, True, False, 0, 10, (None, float("inf"))),  # authenticated: no pre-auth timer
        (8, 0, 4, True, False, 5, 10, (None, 9)),  # idle since 4: closes at 9
        (9, 0, 4, True, False, 6, 0, (None, 10)),
        (11, 0, 4, True, False, 6, 0, ("idle", 11)),
        (11, 0, 4, True, True, 6, 0, (None, 17)),  # a request in flight is not idle
        (11, 0, 4, True, False, 0, 0, (None, float("inf"))),  # both off
        (20, 0, 4, False, False, 6, 30, ("idle", 20)),  # silent before its login: idle first
    ],
)
def test_the_timers(now, accepted, active, authenticated, busy, idle, preauth, expected):
    assert overdue(now, accepted_s=accepted, active_s=active, authenticated=authenticated, busy=busy,
                   idle_s=idle, preauth_s=preauth) == expected


MINIMAL = """
node_id = 1
data_dir = "/tmp/raftlog-test-1"
cluster_secret = "ssssssssssssssss"
[controller_quorum_voters]
1 = "127.0.0.1:9095"
"""


def test_connection_settings_load_with_kafkas_names_and_defaults(tmp_path: Path):
    path = tmp_path / "node.toml"
    path.write_text(MINIMAL)
    config = load_config(path, env={})
    assert (config.max_connections, config.max_connections_per_ip, config.connections_max_idle_ms,
            config.connections_preauth_timeout_ms, config.connections_max_reauth_ms,
            config.sasl_server_max_receive_size) == (1024, 256, 600_000, 10_000, 0, 524_288)
    assert config.per_ip_overrides == {}
    path.write_text(MINIMAL.replace("node_id = 1", 'node_id = 1\nmax_connections_per_ip_overrides = '
                                                   '"10.0.0.1:5, [::1]:7"'))
    config = load_config(path, env={"RAFTLOG_CONNECTIONS_MAX_REAUTH_MS": "60000"})
    assert config.per_ip_overrides == {"10.0.0.1": 5, "::1": 7}
    assert config.max_connections_per_ip_overrides == "10.0.0.1:5,[::1]:7"
    assert config.connections_max_reauth_ms == 60_000
    table = load_config(path, env={}, overrides={"max_connections_per_ip_overrides": {"10.0.0.2": 1}})
    assert table.per_ip_overrides == {"10.0.0.2": 1}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_connections_per_ip_overrides", "10.0.0.1"),
        ("max_connections_per_ip_overrides", "10.0.0.1:x"),
        ("max_connections_per_ip_overrides", "10.0.0.1:1,10.0.0.1:2"),
        ("connections_max_idle_ms", -1),
        ("sasl_server_max_receive_size", 10),
    ],
)
def test_bad_connection_settings_name_the_key(tmp_path: Path, key, value):
    path = tmp_path / "node.toml"
    path.write_text(MINIMAL)
    with pytest.raises(ConfigError, match=key):
        load_config(path, env={}, overrides={key: value})

"""The Schema Registry's listener setting: on by default beside the http listener (its host,
the next port), set by TOML, RAFTLOG_LISTENERS_SCHEMA_REGISTRY or an override, checked for
clashes and, off loopback, for security like the other listeners."""

from __future__ import annotations

import pytest

from raftlog.base.errors import ConfigError
from raftlog.node.config import HostPort, load_config

MINIMAL = """
node_id = 1
data_dir = "/tmp/raftlog-test-1"
cluster_secret = "registry-config-test-secret-0123456789"
[controller_quorum_voters]
1 = "127.0.0.1:9095"
"""


def load(tmp_path, text=MINIMAL, env=None, overrides=None):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_config(path, env=env or {}, overrides=overrides)


def test_default_is_beside_the_http_listener(tmp_path):
    assert load(tmp_path).listeners.schema_registry == HostPort("127.0.0.1", 9097)
    moved = load(tmp_path, overrides={"listeners.http": "127.0.0.2:7000"})
    assert moved.listeners.schema_registry == HostPort("127.0.0.2", 7001)
    assert load(tmp_path, overrides={"listeners.http": "127.0.0.1:0"}).listeners.schema_registry.port == 0


def test_set_by_toml_env_and_override(tmp_path):
    toml = MINIMAL.replace("[controller_quorum_voters]", '[listeners]\nschema_registry = "127.0.0.1:8081"\n[controller_quorum_voters]')
    assert load(tmp_path, toml).listeners.schema_registry.port == 8081
    env = {"RAFTLOG_LISTENERS_SCHEMA_REGISTRY": "127.0.0.1:8082"}
    assert load(tmp_path, env=env).listeners.schema_registry.port == 8082
    assert load(tmp_path, overrides={"listeners_schema_registry": "127.0.0.1:8083"}).listeners.schema_registry.port == 8083


def test_a_clash_or_an_open_plaintext_registry_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="listeners.schema_registry"):
        load(tmp_path, overrides={"listeners.schema_registry": "127.0.0.1:9093"})
    with pytest.raises(ConfigError, match="listeners.schema_registry"):
        load(tmp_path, overrides={"listeners.schema_registry": "0.0.0.0:8081"})
    opened = load(tmp_path, overrides={"listeners.schema_registry": "0.0.0.0:8081", "allow_plaintext": True})
    assert opened.listeners.schema_registry == HostPort("0.0.0.0", 8081)

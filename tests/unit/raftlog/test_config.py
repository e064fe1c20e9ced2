"""Node configuration: file < environment < overrides, every validation error names its key and source, and meta.properties binds a data dir to one cluster and node."""

import random
from pathlib import Path

import pytest

from raftlog.node.config import (
    HostPort,
    NodeConfig,
    config_to_toml,
    take_incarnation,
    ensure_meta_properties,
    load_config,
    new_cluster_id,
    parse_host_port,
)
from raftlog.base.errors import ConfigError

SECRET = "s" * 16
MINIMAL = f"""
node_id = 1
data_dir = "/tmp/raftlog-test-1"
cluster_secret = "{SECRET}"
[controller_quorum_voters]
1 = "127.0.0.1:9095"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_minimal_file_gets_defaults(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), env={})
    assert config.node_id == 1
    assert config.data_dir == Path("/tmp/raftlog-test-1")
    assert config.roles == frozenset({"controller", "broker"})
    assert config.listeners.kafka == HostPort("127.0.0.1", 9092)
    assert config.listeners.client == HostPort("127.0.0.1", 9093)
    assert config.controller_quorum_voters == {1: HostPort("127.0.0.1", 9095)}
    assert config.auto_create_topics is True
    assert (config.heartbeat_ms, config.session_timeout_ms) == (1500, 9000)
    assert (config.election_timeout_ms, config.request_timeout_ms) == (1000, 30000)
    assert config.max_frame_bytes == 64 << 20
    assert config.cluster_id is None
    assert SECRET not in repr(config)


def test_precedence_file_then_env_then_overrides(tmp_path):
    path = write(
        tmp_path,
        MINIMAL + '[listeners]\nclient = "127.0.0.1:1000"\npeer = "127.0.0.1:1001"\n',
    )
    env = {
        "RAFTLOG_LISTENERS_CLIENT": "127.0.0.1:2000",
        "RAFTLOG_LISTENERS_PEER": "127.0.0.1:2001",
        "RAFTLOG_HEARTBEAT_MS": "500",
        "RAFTLOG_BOOTSTRAP_SERVERS": "ignored:1",  # not a config key: ignored
    }
    overrides = {"listeners.client": "127.0.0.1:3000", "heartbeat_ms": None, "log_level": "debug"}
    config = load_config(path, env=env, overrides=overrides)
    assert config.listeners.client.port == 3000  # override wins
    assert config.listeners.peer.port == 2001  # env beats file
    assert config.heartbeat_ms == 500  # a None override is skipped
    assert config.log_level == "DEBUG"


def test_everything_from_env_alone():
    env = {
        "RAFTLOG_NODE_ID": "2",
        "RAFTLOG_DATA_DIR": "/tmp/d2",
        "RAFTLOG_ROLES": "broker",
        "RAFTLOG_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9094,3@127.0.0.1:9194",
        "RAFTLOG_CLUSTER_ID": "abc_DEF-1",
        "RAFTLOG_TOPIC_DEFAULTS": "retention_ms=1000,segment_bytes=4096",
        "RAFTLOG_CLUSTER_SECRET": SECRET,
    }
    config = load_config(None, env=env)
    assert config.roles == frozenset({"broker"}) and not config.is_controller
    assert sorted(config.controller_quorum_voters) == [1, 3]
    assert config.cluster_id == "abc_DEF-1"
    assert dict(config.topic_defaults) == {"retention_ms": "1000", "segment_bytes": "4096"}


def test_nested_override_maps_and_underscore_aliases(tmp_path):
    config = load_config(
        write(tmp_path, MINIMAL),
        env={},
        overrides={"listeners": {"http": "127.0.0.1:0"}, "listeners_peer": "127.0.0.1:0"},
    )
    assert config.listeners.http.port == 0 and config.listeners.peer.port == 0


def test_toml_round_trip(tmp_path):
    original = load_config(
        write(tmp_path, MINIMAL + '[topic_defaults]\nretention_ms = 5\ncleanup_policy = "compact"\n'),
        env={"RAFTLOG_CLUSTER_ID": new_cluster_id(random.Random(1)), "RAFTLOG_LOG_FILE": "/tmp/l"},
    )
    again = load_config(write(tmp_path, config_to_toml(original)), env={})
    assert again == original


@pytest.mark.parametrize(
    "text, env, overrides, expected",
    [
        ("node_id = 1\nnode_idd = 2\n", {}, {}, "unknown key 'node_idd' (did you mean 'node_id'?)"),
        ('[listeners]\nclinet = "h:1"\n', {}, {}, "unknown key 'listeners.clinet'"),
        ("listeners = 5\n", {}, {}, "listeners: expected a table"),
        ('node_id = "one"\n', {}, {}, "node_id: expected an integer"),
        ("node_id = true\n", {}, {}, "node_id: expected an integer"),
        ("node_id = -1\n", {}, {}, "node_id: -1 is out of range"),
        ("", {"RAFTLOG_NODE_ID": "x"}, {}, "environment variable RAFTLOG_NODE_ID: node_id: expected"),
        ("", {}, {"nodeid": 1}, "override: unknown key 'nodeid'"),
        ("data_dir = 3\n", {}, {}, "data_dir: expected a string"),
        ('roles = ["brokr"]\n', {}, {}, "roles: unknown role(s) ['brokr']"),
        ("roles = []\n", {}, {}, "roles: at least one role"),
        ('[listeners]\nclient = "127.0.0.1:70000"\n', {}, {}, "listeners.client: port 70000 is out of range"),
        ('[listeners]\nclient = "nocolon"\n', {}, {}, "listeners.client: expected \"host:port\""),
        ('[listeners]\nclient = "h:abc"\n', {}, {}, "listeners.client: port must be a number"),
        ('[listeners]\nquorum = "127.0.0.1:0"\n', {}, {}, "listeners.quorum: port 0 is out of range 1..65535"),
        ('[listeners]\npeer = "127.0.0.1:9093"\n', {}, {}, "listeners.peer: 127.0.0.1:9093 clashes with listeners.client"),
        ('[listeners]\nclient = "127.0.0.1:9092"\n', {}, {}, "listeners.client: 127.0.0.1:9092 clashes with listeners.kafka"),
        ('auto_create_topics = "maybe"\n', {}, {}, "auto_create_topics: expected true or false"),
        ('[listeners]\nclient = "0.0.0.0:9093"\n', {}, {}, "listeners.client: binds every interface"),
        ('[listeners]\nkafka = "0.0.0.0:9092"\n', {}, {}, "listeners.kafka: binds every interface"),
        ("heartbeat_ms = 9000\n", {}, {}, "heartbeat_ms: session_timeout_ms (9000) must be more than heartbeat_ms (9000)"),
        ("max_frame_bytes = 10\n", {}, {}, "max_frame_bytes: 10 is out of range"),
        ("max_in_flight = 0\n", {}, {}, "max_in_flight: 0 is out of range"),
        ('log_level = "LOUD"\n', {}, {}, "log_level: unknown log level"),
        ('cluster_id = "has space"\n', {}, {}, "cluster_id: use 1 to 64 characters"),
        ('cluster_secret = "short"\n', {}, {}, "cluster_secret: use at least 16 characters"),
        ("[topic_defaults]\nx = [1]\n", {}, {}, "topic_defaults: value of 'x' must be"),
    ],
)
def test_validation_errors_name_key_and_source(tmp_path, text, env, overrides, expected):
    # Each case edits a valid config: base keys the case does not set, then the case, then
    # the voters table (TOML wants top-level keys before tables).
    base = {"node_id": "node_id = 1", "data_dir": 'data_dir = "/tmp/x"',
            "cluster_secret": f'cluster_secret = "{SECRET}"'}  # fmt: skip
    set_here = {line.split("=")[0].strip() for line in text.splitlines() if "=" in line}
    head = [line for key, line in base.items() if key not in set_here]
    voters = '[controller_quorum_voters]\n1 = "127.0.0.1:9095"\n'
    path = write(tmp_path, "\n".join(head) + "\n" + text + "\n" + voters)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env, overrides=overrides)
    message = str(caught.value)
    assert expected in message
    if not env and not overrides:
        assert message.startswith(f"{path}: ")


@pytest.mark.parametrize(
    "voters, expected",
    [
        ('"2@127.0.0.1:9094"', "node 1 has the controller role but is not among the voters [2]"),
        ('"1@127.0.0.1:9999"', "listeners.quorum: 127.0.0.1:9095 differs from this node's voter"),
        ('"1@127.0.0.1:9094,1@127.0.0.1:9095"', "voter 1 is listed twice"),
        ('"1@127.0.0.1:9094,2@127.0.0.1:9094"', "two voters share an address"),
        ('"1-127.0.0.1:9094"', 'expected "id@host:port"'),
        ('"x@127.0.0.1:9094"', "expected an integer"),
        ("5", "expected a table"),
    ],
)
def test_voter_errors(tmp_path, voters, expected):
    path = write(
        tmp_path,
        f'node_id = 1\ndata_dir = "/tmp/x"\ncluster_secret = "{SECRET}"\n'
        f"controller_quorum_voters = {voters}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert expected in str(caught.value)


def test_required_keys_and_secret(tmp_path):
    with pytest.raises(ConfigError, match="node_id is required.*RAFTLOG_NODE_ID"):
        load_config(None, env={})
    with pytest.raises(ConfigError, match="data_dir is required"):
        load_config(None, env={"RAFTLOG_NODE_ID": "1"})
    base = {"RAFTLOG_NODE_ID": "1", "RAFTLOG_DATA_DIR": "/tmp/x"}
    with pytest.raises(ConfigError, match="controller_quorum_voters is required"):
        load_config(None, env=base)
    with_voters = {**base, "RAFTLOG_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9095"}
    with pytest.raises(ConfigError, match="cluster_secret is required"):
        load_config(None, env=with_voters)
    # A broker-only node needs no quorum listener, but the secret still: peers authenticate.
    with pytest.raises(ConfigError, match="cluster_secret is required"):
        load_config(None, env={**with_voters, "RAFTLOG_ROLES": "broker"})
    config = load_config(None, env={**with_voters, "RAFTLOG_ROLES": "broker", "RAFTLOG_CLUSTER_SECRET": SECRET})
    assert config.roles == frozenset({"broker"})


def test_unreadable_and_invalid_files(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match=f"{missing}: cannot read config file"):
        load_config(missing, env={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "node_id = = 1"), env={})


def test_advertised_host_for_wildcard_listener(tmp_path):
    config = load_config(
        write(tmp_path, MINIMAL),
        env={"RAFTLOG_LISTENERS_CLIENT": "0.0.0.0:9093", "RAFTLOG_ADVERTISED_HOST": "node1",
             "RAFTLOG_ALLOW_PLAINTEXT": "true"},
    )
    assert config.advertised("client") == HostPort("node1", 9093)
    assert config.advertised("peer") == HostPort("127.0.0.1", 9094)


def test_parse_host_port_ipv6():
    assert parse_host_port("[::1]:80") == HostPort("::1", 80)
    assert str(HostPort("::1", 80)) == "[::1]:80"
    with pytest.raises(ValueError, match="IPv6"):
        parse_host_port("::1:80")


def test_meta_properties_first_start_then_checks(tmp_path):
    data_dir = tmp_path / "data" / "n1"
    assert ensure_meta_properties(data_dir, 1, "clusterA") == "clusterA"
    text = (data_dir / "meta.properties").read_text()
    assert "cluster.id=clusterA" in text and "node.id=1" in text
    assert not list(data_dir.glob("*.tmp"))
    assert ensure_meta_properties(data_dir, 1, None) == "clusterA"  # stored id is used
    assert ensure_meta_properties(data_dir, 1, "clusterA") == "clusterA"
    with pytest.raises(ConfigError, match="belongs to cluster clusterA, not clusterB"):
        ensure_meta_properties(data_dir, 1, "clusterB")
    with pytest.raises(ConfigError, match="belongs to node 1, not node 2"):
        ensure_meta_properties(data_dir, 2, "clusterA")


def test_meta_properties_needs_a_cluster_id_and_a_sane_file(tmp_path):
    with pytest.raises(ConfigError, match="not formatted"):
        ensure_meta_properties(tmp_path / "fresh", 1, None)
    with pytest.raises(ConfigError, match="use 1 to 64 characters"):
        ensure_meta_properties(tmp_path / "fresh", 1, "bad id")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.properties").write_text("version=1\nnode.id=1\n")
    with pytest.raises(ConfigError, match="missing or bad cluster.id"):
        ensure_meta_properties(broken, 1, "c")
    (broken / "meta.properties").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not a text file"):
        ensure_meta_properties(broken, 1, "c")


def test_meta_properties_unwritable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write"):
        ensure_meta_properties(blocker / "data", 1, "c")


def test_new_cluster_id_shape():
    cluster_id = new_cluster_id(random.Random(7))
    assert len(cluster_id) == 22 and cluster_id == new_cluster_id(random.Random(7))
    assert new_cluster_id() != new_cluster_id()


def test_node_config_is_frozen():
    config = NodeConfig(node_id=1, data_dir=Path("/x"))
    with pytest.raises(AttributeError):
        config.node_id = 2  # type: ignore[misc]


# --- security keys (issue 16) ---


def test_security_defaults_are_plaintext_on_loopback(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), env={})
    assert config.security_protocol == "PLAINTEXT" and not config.client_tls and not config.client_sasl
    assert not config.authorizer_enabled and not config.peer_tls and not config.allow_plaintext


@pytest.mark.parametrize("listener", ["client", "peer", "http", "kafka"])
def test_a_non_loopback_listener_without_tls_and_auth_refuses_to_start(tmp_path, listener):
    env = {f"RAFTLOG_LISTENERS_{listener.upper()}": "10.1.2.3:7000", "RAFTLOG_ADVERTISED_HOST": "node1"}
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, MINIMAL), env=env)
    message = str(info.value)
    assert f"listeners.{listener}" in message and "allow_plaintext = true" in message and "\n" not in message
    load_config(write(tmp_path, MINIMAL), env={**env, "RAFTLOG_ALLOW_PLAINTEXT": "true"})


def test_a_secure_node_may_bind_every_interface(tmp_path):
    secure = """security_protocol = "sasl_ssl"
tls_cert_file = "/tls/node.pem"
tls_key_file = "/tls/node.key"
tls_ca_file = "/tls/ca.pem"
peer_tls = true
http_token = "a-metrics-token"
super_users = ["User:admin"]
sasl_mechanisms = ["SCRAM-SHA-512"]
advertised_host = "node1"
"""
    listeners = ('[listeners]\nkafka = "0.0.0.0:9092"\nclient = "0.0.0.0:9093"\npeer = "0.0.0.0:9094"\n'
                 'http = "0.0.0.0:9096"\n')
    config = load_config(write(tmp_path, MINIMAL.replace("cluster_secret", secure + "cluster_secret") + listeners), env={})
    assert config.security_protocol == "SASL_SSL" and config.client_tls and config.client_sasl
    assert config.authorizer_enabled and config.super_users == ("User:admin",)
    assert config.sasl_mechanisms == ("SCRAM-SHA-512",)
    assert "a-metrics-token" not in repr(config)
    assert load_config(write(tmp_path, config_to_toml(config)), env={}) == config


@pytest.mark.parametrize(
    "extra, key",
    [
        ('security_protocol = "TLS"\n', "security_protocol"),
        ('security_protocol = "SSL"\n', "tls_cert_file"),
        ('peer_tls = true\ntls_cert_file = "/c"\ntls_key_file = "/k"\n', "tls_ca_file"),
        ('ssl_client_auth = "required"\ntls_ca_file = "/ca"\n', "ssl_client_auth"),
        ('sasl_mechanisms = ["GSSAPI"]\n', "sasl_mechanisms"),
        ('super_users = ["admin"]\n', "super_users"),
        ('peer_tls = "maybe"\n', "peer_tls"),
    ],
)
def test_bad_security_settings_name_the_key(tmp_path, extra, key):
    with pytest.raises(ConfigError, match=key):
        load_config(write(tmp_path, MINIMAL.replace('cluster_secret', extra + 'cluster_secret')), env={})


def test_each_start_on_a_data_dir_names_the_incarnation_before_it(tmp_path):
    first_previous, first = take_incarnation(tmp_path)
    second_previous, second = take_incarnation(tmp_path)
    assert first_previous is None and second_previous == first and second != first
    (tmp_path / "broker.incarnation").write_bytes(b"\xff\xfe")  # unreadable: no predecessor
    assert take_incarnation(tmp_path)[0] is None


def test_controller_quorum_fetch_timeout_reaches_the_quorum_and_is_bounded(tmp_path):
    """Issue 46: the metadata quorum's timeout (Kafka's controller.quorum.fetch.timeout.ms)
    is a setting: PySyncObj's leader fallback, and its voters' 0.4-1.4x election timeout."""
    from raftlog.node.main import quorum_factory

    default = load_config(write(tmp_path, MINIMAL), env={})
    assert default.controller_quorum_fetch_timeout_ms == 1000
    config = load_config(write(tmp_path, MINIMAL), env={"RAFTLOG_CONTROLLER_QUORUM_FETCH_TIMEOUT_MS": "4000"})
    assert config.controller_quorum_fetch_timeout_ms == 4000
    assert quorum_factory(config).args[0].leader_fallback_timeout_s == 4.0
    with pytest.raises(ConfigError, match="controller_quorum_fetch_timeout_ms"):
        load_config(write(tmp_path, MINIMAL), env={"RAFTLOG_CONTROLLER_QUORUM_FETCH_TIMEOUT_MS": "500"})

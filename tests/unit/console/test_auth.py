"""The console's login seam and sessions: command configs parse (Kafka keys, the file's own credentials dropped), a plaintext cluster needs no login and passes nothing to the client, sessions are bounded and expire, CSRF tokens compare in constant time, and passwords never show in a repr."""

from __future__ import annotations

import pytest

from raftlog.console.auth import (
    Credentials,
    SessionStore,
    check_csrf,
    client_config,
    client_options,
    cluster_security,
    login_required,
    read_properties,
)
from raftlog.console.errors import BadInputError


def test_properties_file(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# made by cluster up --secure\nsecurity.protocol=SASL_SSL\nsasl.mechanism = SCRAM-SHA-512\n"
                    "sasl.username=admin\nsasl.password=s3cr=t\n! comment\nssl.ca.location: /tmp/ca.pem\n")
    props = read_properties(path)
    assert props["sasl.password"] == "s3cr=t" and props["ssl.ca.location"] == "/tmp/ca.pem"
    security = cluster_security(props)
    assert security == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.ca.location": "/tmp/ca.pem"}
    assert login_required(security)


@pytest.mark.parametrize("text", ["security.protocol=SASL_SSL\nnot a pair\n", "security.protocol=CARRIER_PIGEON\n",
                                  "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n"])
def test_bad_command_configs_are_one_clear_error(tmp_path, text):
    path = tmp_path / "c.properties"
    path.write_text(text)
    with pytest.raises(BadInputError) as info:
        cluster_security(read_properties(path))
    assert info.value.field == "command-config"
    with pytest.raises(BadInputError):
        read_properties(tmp_path / "missing.properties")


def test_plaintext_needs_no_login_and_passes_nothing_to_the_client():
    security = cluster_security({})
    assert not login_required(security)
    config = client_config(security, None)
    assert config == {"security.protocol": "PLAINTEXT"} and client_options(config) == {}


def test_secure_config_carries_the_users_credentials_in_kafka_keys():
    security = cluster_security({"security.protocol": "SASL_SSL", "ssl.ca.location": "/ca.pem"})
    with pytest.raises(BadInputError):
        client_config(security, None)
    config = client_config(security, Credentials("alice", "pw"))
    assert config == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.ca.location": "/ca.pem",
                      "sasl.username": "alice", "sasl.password": "pw"}
    assert client_options(config) == {"security": config}


def test_credentials_hide_the_password_and_check_the_form():
    assert "hunter2" not in repr(Credentials("bob", "hunter2"))
    for user, pw in (("", "x"), ("u" * 300, "x"), ("bob", "")):
        with pytest.raises(BadInputError):
            Credentials.from_form(user, pw)
    assert Credentials.from_form("  bob ", "x").username == "bob"


def test_sessions_are_bounded_and_expire():
    store = SessionStore(max_sessions=2, idle_ms=100, max_age_ms=1000)
    a = store.create(None, 0)
    b = store.create(Credentials("b", "p"), 0)
    assert store.get(a.sid, 50) is a           # a is now the most recent
    c = store.create(None, 60)                  # evicts b, the least recently seen
    assert store.get(b.sid, 60) is None and len(store) == 2
    assert store.get(c.sid, 200) is None        # idle too long
    assert store.get(a.sid, 120) is a and store.get(a.sid, 1001) is None   # too old
    assert store.get(12, 0) is None and store.get("nope", 0) is None
    assert a.csrf_token != c.csrf_token and len(a.sid) >= 40


def test_csrf_check():
    assert check_csrf("abc", "abc")
    assert not check_csrf("abc", "abd") and not check_csrf("abc", None) and not check_csrf("abc", "")

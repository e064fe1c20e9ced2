"""A secure cluster of real node processes (SASL_SSL clients, mutual-TLS peers, ACLs, /metrics token, bootstrap admin): the admin works, strangers and wrong passwords get nothing, an ACL denies produce on one topic and allows another, a user removed while connected is cut off, and no log holds a password."""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from metadata.records import UserScramCredential
from metadata.security_ops import write_bootstrap_credentials
from partition.batch import BatchBuilder
from raftlog.base.certs import issue, new_ca, write_private_file
from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import RaftlogError
from raftlog.base.sasl import salted_password, scram_credential

import node_harness as harness

ADMIN_PASSWORD = "admin-" + secrets.token_urlsafe(18)
ALICE_PASSWORD = "alice-" + secrets.token_urlsafe(18)
HTTP_TOKEN = "metrics-" + secrets.token_urlsafe(12)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("secure")
    tls = root / "tls"
    tls.mkdir()
    ca = new_ca("secure test cluster")
    (tls / "ca.pem").write_bytes(ca.cert)
    bootstrap = root / "bootstrap_credentials"
    write_bootstrap_credentials(bootstrap, [
        UserScramCredential.of("admin", scram_credential(m, ADMIN_PASSWORD)) for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")
    ])  # fmt: skip
    settings = {
        **harness.TEST_SETTINGS, "security_protocol": "SASL_SSL", "peer_tls": True,
        "tls_cert_file": tls / "unset.pem", "tls_key_file": tls / "unset.key", "tls_ca_file": tls / "ca.pem",
        "super_users": ("User:admin",), "http_token": HTTP_TOKEN, "bootstrap_credentials_file": bootstrap,
    }  # fmt: skip
    admin = ClientSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="admin",
                           password=ADMIN_PASSWORD, ca_location=str(tls / "ca.pem"))
    with harness.NodeCluster(root, size=3, settings=settings, security=admin) as cluster:
        for node_id, config in list(cluster.configs.items()):
            node = issue(ca, f"node-{node_id}", kind="node", hosts=["127.0.0.1"])
            (tls / f"node-{node_id}.pem").write_bytes(node.cert)
            write_private_file(tls / f"node-{node_id}.key", node.key)
            cluster.configs[node_id] = dataclasses.replace(
                config, tls_cert_file=tls / f"node-{node_id}.pem", tls_key_file=tls / f"node-{node_id}.key"
            )
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        yield cluster


def as_user(cluster: Any, user: str, password: str) -> ClientSecurity:
    return dataclasses.replace(cluster.security, username=user, password=password)


def call_as(cluster: Any, security: ClientSecurity | None, node_id: int, op: str, **fields: Any) -> dict[str, Any]:
    return harness.raw_call(cluster.client(node_id), op, security=security, **fields)


def test_the_admin_runs_the_cluster_over_tls_and_mtls_peers(secure):
    status = secure.status()
    assert sorted(b["id"] for b in status["brokers"] if not b["fenced"]) == [1, 2, 3]
    assert status["controller_id"] in (1, 2, 3)


def test_no_credentials_wrong_password_and_plaintext_get_nothing(secure):
    # plaintext to the TLS port: the handshake fails, the connection closes
    with pytest.raises((ConnectionError, OSError)):
        call_as(secure, None, 1, "metadata")
    tls_only = ClientSecurity(protocol="SSL", ca_location=secure.security.ca_location)
    assert call_as(secure, tls_only, 1, "metadata")["error"]["code"] == "ILLEGAL_SASL_STATE"
    wrong = call_as(secure, as_user(secure, "admin", "not-the-password"), 1, "metadata")
    assert wrong["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    nobody = call_as(secure, as_user(secure, "nobody", ADMIN_PASSWORD), 2, "metadata")
    assert nobody["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    assert nobody["error"]["message"] == wrong["error"]["message"]  # who exists is not told


def test_a_peer_without_a_node_certificate_gets_nothing(secure):
    address = str(secure.configs[1].listeners.peer)
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=secure.security.ca_location)
    with socket.create_connection((host, int(port)), timeout=10) as plain:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with context.wrap_socket(plain, server_hostname=host) as tls:
                tls.sendall(b"\0\0\0\1\xa0")  # TLS 1.3: the refusal may come at the first read
                assert tls.recv(1) == b""
                raise ConnectionError("closed")
    with pytest.raises((ConnectionError, OSError)):  # a forged vote in plaintext
        harness.raw_call(address, "raft", messages=[{"kind": "vote_request"}])


def _leader(secure: Any, topic: str) -> int:
    def find() -> int | None:
        md = secure.call(1, "metadata", topics=[topic])
        leader = md["topics"][0]["partitions"][0]["leader"]
        return leader if leader >= 0 else None

    return secure.wait_for(find, 30, f"a leader of {topic}")


def _batch(value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append_value(value, 1)
    return builder.build()


def test_an_acl_denies_produce_on_one_topic_and_allows_another(secure):
    for topic in ("allowed", "denied"):
        secure.call(1, "create_topic", name=topic, partitions=1, replication_factor=3)
    salt = secrets.token_bytes(16)
    upsert = {"name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096, "salt": salt,
              "salted_password": salted_password("SCRAM-SHA-512", ALICE_PASSWORD, salt, 4096)}
    assert secure.call(2, "alter_user_scram_credentials", upsertions=[upsert], deletions=[])["results"] == [{"user": "alice"}]
    acls = [
        {"resource_type": "topic", "resource_name": "*", "pattern_type": "literal", "principal": "User:alice",
         "host": "*", "operation": "write", "permission": "allow"},
        {"resource_type": "topic", "resource_name": "denied", "pattern_type": "literal", "principal": "User:alice",
         "host": "*", "operation": "write", "permission": "deny"},
    ]
    assert secure.call(3, "create_acls", acls=acls)["results"] == [{}, {}]
    described = secure.call(1, "describe_acls", filter={"principal": "User:alice"})["acls"]
    assert sorted(a["permission"] for a in described) == ["allow", "deny"]
    alice = as_user(secure, "alice", ALICE_PASSWORD)
    leaders = {t: _leader(secure, t) for t in ("allowed", "denied")}

    def produce(topic: str) -> dict[str, Any]:
        answer = call_as(secure, alice, leaders[topic], "produce", acks=-1, timeout_ms=5000,
                         partitions=[{"topic": topic, "partition": 0, "records": _batch(b"x")}])
        assert "error" not in answer, answer
        return answer["partitions"][0]

    assert secure.wait_for(lambda: "base_offset" in produce("allowed"), 30, "alice's produce to allowed")
    refused = produce("denied")
    assert refused["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
    # Nothing reached the denied topic: its log end did not move.
    offsets = secure.call(leaders["denied"], "list_offsets", partitions=[{"topic": "denied", "partition": 0, "timestamp": -1}])
    latest = offsets["partitions"][0]["offset"]
    allowed = secure.call(leaders["allowed"], "list_offsets", partitions=[{"topic": "allowed", "partition": 0, "timestamp": -1}])
    assert allowed["partitions"][0]["offset"] > latest
    # And alice may not administer: no ACL gives her the cluster.
    assert call_as(secure, alice, 1, "delete_topic", name="allowed")["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert call_as(secure, alice, 1, "create_acls", acls=acls)["error"]["code"] == "CLUSTER_AUTHORIZATION_FAILED"


def test_a_user_removed_while_connected_is_cut_off(secure):
    salt = secrets.token_bytes(16)
    upsert = {"name": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096, "salt": salt,
              "salted_password": salted_password("SCRAM-SHA-256", ALICE_PASSWORD, salt, 4096)}
    secure.call(1, "alter_user_scram_credentials", upsertions=[upsert], deletions=[])
    bob = dataclasses.replace(as_user(secure, "bob", ALICE_PASSWORD), mechanism="SCRAM-SHA-256")
    # bob may ask for metadata (topics he may not describe are left out): no ACL needed.
    conn = secure.wait_for(lambda: _Connection(secure.client(2), bob), 30, "bob logged in on node 2")
    try:
        assert "brokers" in conn.call("metadata", topics=None)
        secure.call(1, "alter_user_scram_credentials", upsertions=[],
                    deletions=[{"name": "bob", "mechanism": "SCRAM-SHA-256"}])
        secure.wait_for(lambda: "bob" not in json.dumps(secure.call(2, "describe_user_scram_credentials", users=None)),
                        30, "bob's removal on node 2")
        answer = conn.call("metadata", topics=None)
        assert answer is None or answer["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    finally:
        conn.close()


class _Connection:
    """One logged-in connection that stays open between requests."""

    def __init__(self, address: str, security: ClientSecurity) -> None:
        host, _, port = address.rpartition(":")
        context = security.ssl_context()
        assert context is not None
        self.sock = context.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=host)
        self.decoder = harness.FrameDecoder(max_frame_bytes=1 << 24)
        self.next_id = 0
        client = security.sasl_client()
        assert client is not None
        self.call("sasl_handshake", mechanism=client.mechanism)
        first = self.call("sasl_authenticate", auth_bytes=client.first_message())
        final = None if first is None or "error" in first else self.call(
            "sasl_authenticate", auth_bytes=client.final_message(first["auth_bytes"]))
        if final is None or "error" in final:
            self.sock.close()
            raise ConnectionError(f"login failed: {final or first}")

    def call(self, op: str, **fields: Any) -> dict[str, Any] | None:
        self.next_id += 1
        try:
            return harness._exchange(self.sock, self.decoder, "node", self.next_id, op, fields)
        except (ConnectionError, OSError):
            return None

    def close(self) -> None:
        self.sock.close()


def test_metrics_need_the_token_and_count_failed_logins(secure):
    url = f"http://{secure.http(1)}/metrics"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=5)
    assert info.value.code == 401
    info.value.close()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {HTTP_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    assert "raftlog_auth_failures_total" in text and "raftlog_tls_handshake_failures_total" in text
    # HTTP Basic with the token as password (scrapers that only do Basic); any other password: 401.
    for password, status in ((HTTP_TOKEN, 200), ("not-the-token", 401)):
        basic = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {basic}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                got = response.status
        except urllib.error.HTTPError as exc:
            with exc:
                got = exc.code
        assert got == status, (password == HTTP_TOKEN, got)
    code, health = secure.health(1)
    assert code == 200 and HTTP_TOKEN not in json.dumps(health)


def test_no_log_holds_a_secret(secure):
    # Runs last in this module: every log the cluster wrote so far, grepped for every secret.
    secrets_ = [ADMIN_PASSWORD, ALICE_PASSWORD, HTTP_TOKEN, secure.secret]
    for path in secure.root.rglob("*.log"):
        text = path.read_text(errors="replace")
        for secret in secrets_:
            assert secret not in text, f"{path} holds a secret"


def test_admin_error_types_round_trip():
    with pytest.raises(RaftlogError):
        harness.ok({"error": {"code": "CLUSTER_AUTHORIZATION_FAILED", "message": "no"}})

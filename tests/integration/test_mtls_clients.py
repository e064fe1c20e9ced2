"""A client certificate is a login (mTLS, security.protocol=SSL with ssl.certificate.location / ssl.key.location) for both Python clients on the native listener and for confluent-kafka on the Kafka listener of a real node: the certificate's common name is the principal the ACLs judge, and no certificate or another CA's gets nothing, told why (the TLS alert)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from raftlog import aio
from raftlog.base.acl import AclBinding
from raftlog.base.certs import issue, new_ca, write_private_file, write_public_file
from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import TopicAuthorizationFailedError
from raftlog.client import Admin, Producer
from raftlog.client.errors import SslAuthenticationFailedError

import node_harness as harness


@dataclasses.dataclass
class MtlsNode:
    cluster: Any
    tls: Path

    def keys(self, user: str, ca: str = "ca") -> dict[str, str]:
        """librdkafka/Kafka client keys that log in as `user` with its certificate."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.tls / "ca.pem"),
                "ssl.certificate.location": str(self.tls / f"{user}-{ca}.pem"),
                "ssl.key.location": str(self.tls / f"{user}-{ca}.key")}  # fmt: skip

    @property
    def client(self) -> str:
        return self.cluster.client(1)

    @property
    def kafka(self) -> str:
        return self.cluster.kafka(1)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("mtls")
    tls = root / "tls"
    tls.mkdir()
    ca, other_ca = new_ca("mtls test cluster"), new_ca("another CA")
    write_public_file(tls / "ca.pem", ca.cert)
    node_cert = issue(ca, "node-1", kind="node", hosts=["127.0.0.1"])
    write_public_file(tls / "node-1.pem", node_cert.cert)
    write_private_file(tls / "node-1.key", node_cert.key)
    for user, authority, name in (("admin", ca, "ca"), ("alice", ca, "ca"), ("alice", other_ca, "other")):
        pair = issue(authority, user, kind="user")
        write_public_file(tls / f"{user}-{name}.pem", pair.cert)
        write_private_file(tls / f"{user}-{name}.key", pair.key)
    settings = {
        **harness.TEST_SETTINGS, "security_protocol": "SSL", "ssl_client_auth": "required", "peer_tls": True,
        "tls_cert_file": tls / "node-1.pem", "tls_key_file": tls / "node-1.key", "tls_ca_file": tls / "ca.pem",
        "super_users": ("User:admin",),
    }  # fmt: skip
    made = MtlsNode(None, tls)
    admin = ClientSecurity.from_properties(made.keys("admin"))
    with harness.NodeCluster(root, size=1, settings=settings, security=admin) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        made.cluster = cluster
        with Admin(made.client, security=made.keys("admin")) as client:
            client.create_topic("m-ok", 1, 1)
            client.create_topic("m-no", 1, 1)
            client.create_acls([AclBinding("topic", "m-ok", "literal", "User:alice", "*", op, "allow")
                                for op in ("write", "read", "describe")])
        yield made


def test_the_certificate_is_the_login_of_the_blocking_clients(node):
    with Producer(node.client, security=node.keys("alice"), max_block_ms=60_000) as producer:
        assert producer.send("m-ok", b"by certificate").result(timeout=60)[0] == 0
        # alice may describe only m-ok: the refusal names the topic, at once.
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("m-no", b"x").result(timeout=60)


def test_the_certificate_is_the_login_of_the_trio_clients(node):
    async def round_trip() -> list[bytes]:
        async with aio.Producer(node.client, security=node.keys("alice")) as producer:
            await (await producer.send("m-ok", b"trio by certificate"))
        async with aio.Consumer(node.client, security=node.keys("alice"), auto_offset_reset="earliest") as consumer:
            consumer.assign([("m-ok", 0)])
            got: list[bytes] = []
            with trio.fail_after(60):
                while b"trio by certificate" not in got:
                    got += [r.value for r in await consumer.poll(1000)]
            return got

    assert b"trio by certificate" in trio.run(round_trip)


def test_confluent_kafka_logs_in_with_the_same_keys(node):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    delivered: list[Any] = []
    producer = confluent_kafka.Producer({**node.keys("alice"), "bootstrap.servers": node.kafka, "acks": "all"})
    for topic in ("m-ok", "m-no"):
        producer.produce(topic, b"via librdkafka", on_delivery=lambda err, msg: delivered.append((msg.topic(), err)))
    assert producer.flush(60) == 0
    outcome = dict(delivered)
    assert outcome["m-ok"] is None, outcome
    assert outcome["m-no"] is not None and outcome["m-no"].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_python_connects_over_tls(node):
    """What kafka-python's own test_ssl_integration.py checks (it always spawns its own Kafka,
    so scripts/client_suites cannot point it here): its network client speaks TLS to the Kafka
    listener, learns the API versions and the brokers."""
    from kafka.net.compat import KafkaNetClient

    keys = node.keys("admin")
    client = KafkaNetClient(bootstrap_servers=node.kafka, security_protocol="SSL", ssl_cafile=keys["ssl.ca.location"],
                            ssl_certfile=keys["ssl.certificate.location"], ssl_keyfile=keys["ssl.key.location"],
                            ssl_check_hostname=False, request_timeout_ms=60_000)
    try:
        assert client.check_version(timeout_ms=60_000) is not None
        assert client.cluster.brokers()
    finally:
        client.close()


def test_no_certificate_or_another_cas_gets_nothing_at_once(node):
    no_cert = {k: v for k, v in node.keys("alice").items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    # Long deadlines: had the clients taken the refusal for a lost connection and retried,
    # they would fail much later with another error type.
    for keys in (no_cert, node.keys("alice", ca="other")):
        with Admin(node.client, security=keys, request_timeout_ms=120_000) as admin:
            with pytest.raises(SslAuthenticationFailedError):
                admin.list_topics()
        with Producer(node.client, security=keys, max_block_ms=120_000) as producer:
            with pytest.raises(SslAuthenticationFailedError):
                producer.send("m-ok", b"x").result(timeout=120)

        async def refused(keys: dict[str, str] = keys) -> None:
            async with aio.Admin(node.client, security=keys, request_timeout_ms=120_000) as admin:
                with pytest.raises(SslAuthenticationFailedError):
                    await admin.list_topics()

        trio.run(refused)
    # the node still serves a good certificate afterwards
    with Admin(node.client, security=node.keys("admin")) as admin:
        assert {"m-ok", "m-no"} <= set(admin.list_topics())


def test_confluent_kafka_is_told_why_its_certificate_was_refused(node):
    # The Kafka listener sends the TLS alert before closing: librdkafka reports the reason
    # (not a bare disconnect it would retry without saying why).
    confluent_kafka = pytest.importorskip("confluent_kafka")
    no_cert = {k: v for k, v in node.keys("alice").items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    for keys, reason in ((no_cert, "alert certificate required"), (node.keys("alice", ca="other"), "alert unknown ca")):
        errors: list[Any] = []
        producer = confluent_kafka.Producer({**keys, "bootstrap.servers": node.kafka, "error_cb": errors.append})
        producer.produce("m-ok", b"never delivered")
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        producer.purge()
        producer.flush(5)
        assert any(reason in e.str() for e in errors), [e.str() for e in errors]

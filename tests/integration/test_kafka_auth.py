"""The Kafka listener's TLS and SASL on real loopback sockets (in-process listener, raw Kafka frames): no credentials, a wrong password, a replayed SCRAM nonce, PLAIN over plaintext, TLS/plaintext mix-ups, another CA's certificate, a user removed while connected, a thousand failed logins while another client keeps being served; and requests run as the connection's principal."""

from __future__ import annotations

import base64
import os
import ssl
import struct
from functools import partial
from typing import Any

import pytest
import trio
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from raftlog.base.certs import issue, new_ca, write_private_file
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.sasl import PlainClient, ScramClient, scram_credential
from raftlog.base.tls import client_context, server_context
from raftlog.node.auth import ListenerSecurity, LoginThrottle, client_session_factory
from raftlog.node.kafka import sasl, versions
from raftlog.node.kafka.context import Call, KafkaContext, Reply
from raftlog.node.kafka.listener import serve_kafka

PASSWORD = "kafka-listener-test-password"
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 58, 33, 34


class Users:
    def __init__(self) -> None:
        self.creds = {(u, m): scram_credential(m, PASSWORD, iterations=4096)
                      for u in ("alice", "bob") for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")}

    def lookup(self, user: str, mechanism: str) -> Any:
        return self.creds.get((user, mechanism))


async def handle_whoami_metadata(ctx: KafkaContext, call: Call) -> Reply:
    """Metadata answered with the principal the guard saw, in cluster_id: what ACLs would use."""
    return MetadataResponse[call.version](throttle_time_ms=0, brokers=[], cluster_id=ctx.access().principal,
                                          controller_id=-1, topics=[])


HANDLERS = {**versions.HANDLERS, **sasl.HANDLERS, 3: handle_whoami_metadata}


class KConn:
    """A raw Kafka connection (trio), TLS or not."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.cid = 0

    @classmethod
    async def open(cls, port: int, context: ssl.SSLContext | None = None) -> "KConn":
        stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
        if context is not None:
            stream = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
            try:
                await stream.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        return cls(stream)

    async def call(self, message: Any, version: int, response_cls: Any) -> Any:
        """Send; return the decoded response, or None if the connection closed instead."""
        self.cid += 1
        message.with_header(correlation_id=self.cid, client_id="auth-test")
        await self.stream.send_all(bytes(message.encode(version=version, header=True, framed=True)))
        frame = await self.frame()
        if frame is None:
            await self.aclose()
            return None
        assert struct.unpack(">i", frame[:4])[0] == self.cid
        return response_cls.decode(frame[4:], version=version)

    async def frame(self) -> bytes | None:
        with trio.fail_after(10):
            while len(self.buffer) < 4 or len(self.buffer) < 4 + struct.unpack(">i", self.buffer[:4])[0]:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return None
                if not data:
                    return None
                self.buffer += data
        size = struct.unpack(">i", self.buffer[:4])[0]
        frame = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        return frame

    async def closed(self) -> bool:
        gone = await self.frame() is None
        await self.aclose()
        return gone

    async def handshake(self, mechanism: str) -> Any:
        return await self.call(SaslHandshakeRequest[1](mechanism=mechanism), 1, SaslHandshakeResponse)

    async def authenticate(self, auth_bytes: bytes) -> Any:
        return await self.call(SaslAuthenticateRequest[1](auth_bytes=auth_bytes), 1, SaslAuthenticateResponse)

    async def login(self, client: ScramClient | PlainClient) -> Any:
        answer = await self.handshake(client.mechanism)
        if answer is None or answer.error_code:
            return answer
        answer = await self.authenticate(client.first_message())
        if isinstance(client, PlainClient) or answer is None or answer.error_code:
            return answer
        final = await self.authenticate(client.final_message(bytes(answer.auth_bytes)))
        if final is not None and not final.error_code:
            client.verify_server_final(bytes(final.auth_bytes))
        return final

    async def whoami(self) -> str | None:
        answer = await self.call(MetadataRequest[8](topics=[], allow_auto_topic_creation=False,
                                                    include_cluster_authorized_operations=False,
                                                    include_topic_authorized_operations=False), 8, MetadataResponse)
        return None if answer is None else answer.cluster_id

    async def api_versions(self) -> Any:
        return await self.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-pki")
    ca, other = new_ca("kafka listener test"), new_ca("other")
    paths = {}
    for name, pair in (("ca", ca), ("node", issue(ca, "node-1", kind="node", hosts=["127.0.0.1"])),
                       ("alice", issue(ca, "alice", kind="user")), ("mallory", issue(other, "alice", kind="user"))):
        (root / f"{name}.pem").write_bytes(pair.cert)
        write_private_file(root / f"{name}.key", pair.key)
        paths[name] = (str(root / f"{name}.pem"), str(root / f"{name}.key"))
    return paths


async def start(nursery, *, sasl_on=True, tls_ctx=None, users=None, throttle=None, registry=None):
    users = users or Users()
    factory = client_session_factory(sasl=sasl_on, tls=tls_ctx is not None, lookup=users.lookup,
                                     clock_ms=lambda: int(trio.current_time() * 1000), throttle=throttle)
    ctx = KafkaContext(node_id=1, cluster_id="test", metadata=None,
                       replicas=None, authorizer_of=lambda: None)  # principal passed: ACLs "on"
    port = await nursery.start(partial(
        serve_kafka, ctx, "127.0.0.1", 0, max_request_bytes=1 << 20, request_timeout_ms=10_000,
        handlers=HANDLERS, security=ListenerSecurity(tls_ctx, factory), registry=registry,
    ))  # fmt: skip
    return port, users


async def test_no_credentials_get_nothing_but_api_versions():
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await KConn.open(port)
        versions_answer = await conn.api_versions()  # allowed before the login (clients start with it)
        assert {k.api_key for k in versions_answer.api_keys} >= {17, 36}
        assert await conn.whoami() is None  # anything else closes the connection
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
async def test_scram_login_then_requests_run_as_the_principal(mechanism):
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await KConn.open(port)
        answer = await conn.login(ScramClient(mechanism, "alice", PASSWORD))
        assert answer.error_code == 0
        assert await conn.whoami() == "User:alice"
        # a second handshake after the login: ILLEGAL_SASL_STATE, then closed
        assert (await conn.handshake(mechanism)).error_code == ILLEGAL_SASL_STATE
        assert await conn.closed()
        nursery.cancel_scope.cancel()


async def test_wrong_password_is_refused_counted_and_closed():
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery, registry=registry, throttle=LoginThrottle(base_delay_ms=1, max_delay_ms=5))
        conn = await KConn.open(port)
        answer = await conn.login(ScramClient("SCRAM-SHA-512", "alice", "wrong-password"))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert "wrong-password" not in str(answer.error_message) and PASSWORD not in str(answer.error_message)
        assert await conn.closed()
        unknown = await KConn.open(port)  # an unknown user: the same answer, word for word
        other = await unknown.login(ScramClient("SCRAM-SHA-512", "nobody", PASSWORD))
        assert (other.error_code, other.error_message) == (answer.error_code, answer.error_message)
        await unknown.aclose()
        nursery.cancel_scope.cancel()
    assert 'raftlog_auth_failures_total{listener="kafka"} 2' in registry.render()


async def test_replayed_scram_messages_are_refused():
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await KConn.open(port)
        client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
        await conn.handshake("SCRAM-SHA-256")
        first_msg = client.first_message()
        first = await conn.authenticate(first_msg)
        final_msg = client.final_message(bytes(first.auth_bytes))
        assert (await conn.authenticate(final_msg)).error_code == 0
        await conn.aclose()
        # An eavesdropper replays the recorded exchange on a new connection.
        replay = await KConn.open(port)
        await replay.handshake("SCRAM-SHA-256")
        assert (await replay.authenticate(first_msg)).error_code == SASL_AUTHENTICATION_FAILED
        assert await replay.closed()
        nursery.cancel_scope.cancel()


async def test_plain_is_refused_over_plaintext_and_works_over_tls(pki):
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await KConn.open(port)
        answer = await conn.handshake("PLAIN")
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM and "PLAIN" not in answer.mechanisms
        assert "SCRAM-SHA-512" in answer.mechanisms
        assert await conn.closed()
        tls_port, _ = await start(nursery, tls_ctx=server_context(cert_file=pki["node"][0], key_file=pki["node"][1]))
        tls = await KConn.open(tls_port, client_context(ca_file=pki["ca"][0]))
        assert (await tls.login(PlainClient("alice", PASSWORD))).error_code == 0
        assert await tls.whoami() == "User:alice"
        await tls.aclose()
        nursery.cancel_scope.cancel()


async def test_tls_and_plaintext_mixups_close_the_connection(pki):
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        tls_port, _ = await start(nursery, registry=registry,
                                  tls_ctx=server_context(cert_file=pki["node"][0], key_file=pki["node"][1]))
        plain_port, _ = await start(nursery, registry=registry)
        # a plaintext Kafka request to the TLS port: the handshake fails, the connection closes
        conn = await KConn.open(tls_port)
        assert await conn.api_versions() is None
        # a TLS ClientHello to the plaintext port: not a Kafka frame; closed
        with pytest.raises(trio.BrokenResourceError):
            await KConn.open(plain_port, client_context(ca_file=pki["ca"][0]))
        # both listeners still serve others
        ok = await KConn.open(plain_port)
        assert (await ok.login(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))).error_code == 0
        await ok.aclose()
        nursery.cancel_scope.cancel()
    assert 'raftlog_tls_handshake_failures_total{listener="kafka"} 1' in registry.render()


async def test_mtls_principal_and_another_cas_certificate(pki):
    async with trio.open_nursery() as nursery:
        context = server_context(cert_file=pki["node"][0], key_file=pki["node"][1], ca_file=pki["ca"][0],
                                 client_auth="optional")
        port, _ = await start(nursery, sasl_on=False, tls_ctx=context)
        alice = await KConn.open(port, client_context(ca_file=pki["ca"][0], cert_file=pki["alice"][0],
                                                      key_file=pki["alice"][1]))
        assert await alice.whoami() == "User:alice"  # SSL listener: the certificate is the login
        await alice.aclose()
        anonymous = await KConn.open(port, client_context(ca_file=pki["ca"][0]))
        assert await anonymous.whoami() == "User:ANONYMOUS"
        await anonymous.aclose()
        # a certificate for "alice" from another CA is refused at the handshake
        mallory = client_context(ca_file=pki["ca"][0], cert_file=pki["mallory"][0], key_file=pki["mallory"][1])
        try:
            conn = await KConn.open(port, mallory)
        except trio.BrokenResourceError:
            pass  # refused during the handshake
        else:  # TLS 1.3: the refusal arrives after the client's side of the handshake ended
            assert await conn.whoami() is None
        nursery.cancel_scope.cancel()


async def test_a_user_removed_while_connected_is_cut_off():
    async with trio.open_nursery() as nursery:
        port, users = await start(nursery)
        conn = await KConn.open(port)
        assert (await conn.login(ScramClient("SCRAM-SHA-512", "bob", PASSWORD))).error_code == 0
        assert await conn.whoami() == "User:bob"
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            del users.creds[("bob", mechanism)]
        assert await conn.whoami() is None  # the next request closes the connection
        nursery.cancel_scope.cancel()


async def test_a_thousand_failed_logins_do_not_disturb_another_client():
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery, registry=registry, throttle=LoginThrottle(base_delay_ms=1, max_delay_ms=4))
        good = await KConn.open(port)
        assert (await good.login(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))).error_code == 0
        served = 0
        done = trio.Event()

        async def attacker(logins: int) -> None:
            for _ in range(logins):
                conn = await KConn.open(port)
                await conn.handshake("SCRAM-SHA-512")
                first = await conn.authenticate(ScramClient("SCRAM-SHA-512", "alice", "x").first_message())
                nonce = bytes(first.auth_bytes).split(b",")[0][2:]
                guess = b"c=biws,r=" + nonce + b",p=" + base64.b64encode(os.urandom(64))
                assert (await conn.authenticate(guess)).error_code == SASL_AUTHENTICATION_FAILED
                await conn.aclose()

        async def attackers() -> None:
            async with trio.open_nursery() as inner:
                for _ in range(4):
                    inner.start_soon(attacker, 250)
            done.set()

        nursery.start_soon(attackers)
        while not done.is_set():
            assert await good.whoami() == "User:alice"
            served += 1
        assert served > 10  # the good client kept being answered throughout
        await good.aclose()
        nursery.cancel_scope.cancel()
    assert 'raftlog_auth_failures_total{listener="kafka"} 1000' in registry.render()

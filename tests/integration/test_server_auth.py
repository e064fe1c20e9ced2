"""The native listener's SASL and TLS on real loopback sockets: no credentials, a wrong password, a replayed nonce, PLAIN over plaintext, TLS/plaintext mix-ups, another CA's certificate, a user removed while connected, and a thousand failed logins while another client keeps being served."""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
import trio

from raftlog.base.certs import issue, new_ca, write_private_file
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.protocol import FrameDecoder, Request, encode_frame
from raftlog.base.sasl import PlainClient, ScramClient, scram_credential
from raftlog.base.tls import client_context, server_context
from raftlog.node.auth import ListenerSecurity, LoginThrottle, client_session_factory
from raftlog.node.server import serve

PASSWORD = "listener-test-password-42"


class Users:
    def __init__(self) -> None:
        self.creds = {("alice", "SCRAM-SHA-512"): scram_credential("SCRAM-SHA-512", PASSWORD, iterations=4096),
                      ("alice", "SCRAM-SHA-256"): scram_credential("SCRAM-SHA-256", PASSWORD, iterations=4096),
                      ("bob", "SCRAM-SHA-512"): scram_credential("SCRAM-SHA-512", PASSWORD, iterations=4096)}

    def lookup(self, user: str, mechanism: str) -> Any:
        return self.creds.get((user, mechanism))


async def whoami(request: Request) -> Mapping[str, Any]:
    return {"principal": request.principal, "host": request.client_host}


class Conn:
    """A raw native-protocol client connection (trio), TLS or not."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(1 << 20)
        self.next_id = 0

    @classmethod
    async def open(cls, port: int, context: ssl.SSLContext | None = None) -> "Conn":
        stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", port)
        if context is not None:
            stream = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
            try:
                await stream.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        return cls(stream)

    async def call(self, op: str, **fields: Any) -> dict[str, Any] | None:
        self.next_id += 1
        await self.stream.send_all(encode_frame({**fields, "v": 1, "id": self.next_id, "op": op}))
        return await self.receive()

    async def receive(self) -> dict[str, Any] | None:
        with trio.fail_after(10):
            while (frame := self.decoder.next_frame()) is None:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return None
                if not data:
                    return None
                self.decoder.feed(data)
        return frame

    async def closed(self) -> bool:
        """True when the server closed the connection (it is closed here too)."""
        gone = await self.receive() is None
        if gone:
            await self.aclose()
        return gone

    async def login(self, client: ScramClient | PlainClient) -> dict[str, Any] | None:
        answer = await self.call("sasl_handshake", mechanism=client.mechanism)
        if answer is None or "error" in answer:
            return answer
        if isinstance(client, PlainClient):
            return await self.call("sasl_authenticate", auth_bytes=client.first_message())
        first = await self.call("sasl_authenticate", auth_bytes=client.first_message())
        if first is None or "error" in first:
            return first
        final = await self.call("sasl_authenticate", auth_bytes=client.final_message(first["auth_bytes"]))
        if final is not None and "error" not in final:
            client.verify_server_final(final["auth_bytes"])
        return final

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def code(response: dict[str, Any] | None) -> str | None:
    return None if response is None else response.get("error", {}).get("code")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca, other = new_ca("listener test"), new_ca("other")
    paths = {}
    for name, pair in (("ca", ca), ("node", issue(ca, "node-1", kind="node", hosts=["127.0.0.1"])),
                       ("alice", issue(ca, "alice", kind="user")), ("mallory", issue(other, "alice", kind="user"))):
        (root / f"{name}.pem").write_bytes(pair.cert)
        write_private_file(root / f"{name}.key", pair.key)
        paths[name] = (str(root / f"{name}.pem"), str(root / f"{name}.key"))
    return paths


async def start(nursery, *, sasl=True, tls_ctx=None, users=None, throttle=None, registry=None):
    users = users or Users()
    factory = client_session_factory(sasl=sasl, tls=tls_ctx is not None, lookup=users.lookup,
                                     clock_ms=lambda: int(trio.current_time() * 1000), throttle=throttle)
    port = await nursery.start(partial(
        serve, {"whoami": whoami}, "127.0.0.1", 0, max_frame_bytes=1 << 20, request_timeout_ms=10_000,
        security=ListenerSecurity(tls_ctx, factory), registry=registry,
    ))  # fmt: skip
    return port, users


async def test_no_credentials_get_nothing(pki):
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await Conn.open(port)
        assert code(await conn.call("whoami")) == "ILLEGAL_SASL_STATE"
        assert await conn.closed()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
async def test_scram_login_then_requests_carry_the_principal(mechanism):
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await Conn.open(port)
        final = await conn.login(ScramClient(mechanism, "alice", PASSWORD))
        assert final["complete"] is True and final["principal"] == "User:alice"
        answer = await conn.call("whoami")
        assert answer["principal"] == "User:alice" and answer["host"] == "127.0.0.1"
        assert code(await conn.call("sasl_handshake", mechanism=mechanism)) == "ILLEGAL_SASL_STATE"
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_wrong_password_is_refused_and_counted():
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery, registry=registry, throttle=LoginThrottle(base_delay_ms=1, max_delay_ms=5))
        conn = await Conn.open(port)
        client = ScramClient("SCRAM-SHA-512", "alice", "wrong-password")
        answer = await conn.login(client)
        assert code(answer) == "SASL_AUTHENTICATION_FAILED"
        assert "wrong-password" not in str(answer) and PASSWORD not in str(answer)
        assert await conn.closed()
        nursery.cancel_scope.cancel()
    assert 'raftlog_auth_failures_total{listener="client"} 1' in registry.render()


async def test_replayed_scram_messages_are_refused():
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        # Record a successful exchange ...
        conn = await Conn.open(port)
        client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
        await conn.call("sasl_handshake", mechanism="SCRAM-SHA-256")
        first_msg = client.first_message()
        first = await conn.call("sasl_authenticate", auth_bytes=first_msg)
        final_msg = client.final_message(first["auth_bytes"])
        assert (await conn.call("sasl_authenticate", auth_bytes=final_msg))["complete"]
        await conn.aclose()
        # ... and replay it on a new connection: the nonce was seen.
        replay = await Conn.open(port)
        await replay.call("sasl_handshake", mechanism="SCRAM-SHA-256")
        assert code(await replay.call("sasl_authenticate", auth_bytes=first_msg)) == "SASL_AUTHENTICATION_FAILED"
        assert await replay.closed()
        nursery.cancel_scope.cancel()


async def test_plain_is_refused_over_plaintext_and_works_over_tls(pki):
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery)
        conn = await Conn.open(port)
        answer = await conn.call("sasl_handshake", mechanism="PLAIN")
        assert code(answer) == "UNSUPPORTED_SASL_MECHANISM" and "PLAIN" not in answer["error"]["enabled"]
        assert await conn.closed()
        tls_port, _ = await start(nursery, tls_ctx=server_context(cert_file=pki["node"][0], key_file=pki["node"][1]))
        tls = await Conn.open(tls_port, client_context(ca_file=pki["ca"][0]))
        assert (await tls.login(PlainClient("alice", PASSWORD)))["principal"] == "User:alice"
        assert (await tls.call("whoami"))["principal"] == "User:alice"
        await tls.aclose()
        nursery.cancel_scope.cancel()


async def test_tls_and_plaintext_mixups_close_the_connection(pki):
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        tls_port, _ = await start(nursery, registry=registry,
                                  tls_ctx=server_context(cert_file=pki["node"][0], key_file=pki["node"][1]))
        plain_port, _ = await start(nursery)
        # plaintext frames to the TLS port
        conn = await Conn.open(tls_port)
        await conn.stream.send_all(encode_frame({"v": 1, "id": 1, "op": "whoami"}))
        assert await conn.closed()
        # a TLS ClientHello to the plaintext port: an undecodable frame, answered with id 0
        with pytest.raises(trio.BrokenResourceError):
            await Conn.open(plain_port, client_context(ca_file=pki["ca"][0]))
        nursery.cancel_scope.cancel()
    assert 'raftlog_tls_handshake_failures_total{listener="client"} 1' in registry.render()


async def test_mtls_principal_and_another_cas_certificate(pki):
    async with trio.open_nursery() as nursery:
        context = server_context(cert_file=pki["node"][0], key_file=pki["node"][1], ca_file=pki["ca"][0],
                                 client_auth="optional")
        port, _ = await start(nursery, sasl=False, tls_ctx=context)
        alice = await Conn.open(port, client_context(ca_file=pki["ca"][0], cert_file=pki["alice"][0], key_file=pki["alice"][1]))
        assert (await alice.call("whoami"))["principal"] == "User:alice"
        await alice.aclose()
        anonymous = await Conn.open(port, client_context(ca_file=pki["ca"][0]))
        assert (await anonymous.call("whoami"))["principal"] == "User:ANONYMOUS"
        await anonymous.aclose()
        # a certificate for "alice" from another CA is refused at the handshake
        mallory = client_context(ca_file=pki["ca"][0], cert_file=pki["mallory"][0], key_file=pki["mallory"][1])
        try:
            conn = await Conn.open(port, mallory)
        except trio.BrokenResourceError:
            pass  # refused during the handshake
        else:  # TLS 1.3: the server's refusal arrives after the client's handshake ended
            await conn.stream.send_all(encode_frame({"v": 1, "id": 1, "op": "whoami"}))
            assert await conn.closed()
        nursery.cancel_scope.cancel()


async def test_a_user_removed_while_connected_fails_its_next_request():
    async with trio.open_nursery() as nursery:
        port, users = await start(nursery)
        conn = await Conn.open(port)
        await conn.login(ScramClient("SCRAM-SHA-512", "bob", PASSWORD))
        assert (await conn.call("whoami"))["principal"] == "User:bob"
        del users.creds[("bob", "SCRAM-SHA-512")]
        assert code(await conn.call("whoami")) == "SASL_AUTHENTICATION_FAILED"
        assert await conn.closed()
        nursery.cancel_scope.cancel()


async def test_a_thousand_failed_logins_do_not_disturb_another_client():
    registry = MetricsRegistry()
    async with trio.open_nursery() as nursery:
        port, _ = await start(nursery, registry=registry, throttle=LoginThrottle(base_delay_ms=1, max_delay_ms=4))
        good = await Conn.open(port)
        await good.login(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))
        served = 0
        done = trio.Event()

        async def attacker(logins: int) -> None:
            # A guessed proof costs the server what a wrong password does, without our PBKDF2.
            for _ in range(logins):
                conn = await Conn.open(port)
                await conn.call("sasl_handshake", mechanism="SCRAM-SHA-512")
                first = await conn.call("sasl_authenticate", auth_bytes=ScramClient("SCRAM-SHA-512", "alice", "x").first_message())
                nonce = first["auth_bytes"].split(b",")[0][2:]
                guess = b"c=biws,r=" + nonce + b",p=" + base64.b64encode(os.urandom(64))
                assert code(await conn.call("sasl_authenticate", auth_bytes=guess)) == "SASL_AUTHENTICATION_FAILED"
                await conn.aclose()

        async def attackers() -> None:
            async with trio.open_nursery() as inner:
                for _ in range(4):
                    inner.start_soon(attacker, 250)
            done.set()

        nursery.start_soon(attackers)
        while not done.is_set():
            assert (await good.call("whoami"))["principal"] == "User:alice"
            served += 1
        assert served > 10  # the good client kept being answered throughout
        await good.aclose()
        nursery.cancel_scope.cancel()
    assert 'raftlog_auth_failures_total{listener="client"} 1000' in registry.render()

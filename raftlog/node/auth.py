"""Who is on the other end of a listener's connection: per-connection authentication sessions
for the native listeners (PROTOCOL.md "Authentication and authorization").

    security = ListenerSecurity(ssl_context=ctx, new_session=factory)   # given to serve()
    session = security.new_session(client_host, peer_certificate)       # one per connection
    if not session.complete: answer = await session.handle(request)     # auth ops only
    session.check()                                                     # before every later op

Sessions:
* `PeerSession`: the peer listener. Complete at once when TLS showed a node certificate of
  the cluster CA; else the HMAC handshake (`peer_auth_hello`, `peer_auth_finish`) of
  raftlog/base/peer_auth.py.
* `SaslSession`: a client listener with SASL: `sasl_handshake` then `sasl_authenticate`
  rounds (raftlog/base/sasl.py); PLAIN only on TLS connections. Afterwards `check()` fails
  the connection once the user's credentials are gone (a user deleted while connected).
* `OpenSession`: no SASL (PLAINTEXT or SSL): complete at once; the principal is the client
  certificate's (mTLS) or User:ANONYMOUS.

Failures: a session raises a RaftlogError (SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE,
UNSUPPORTED_SASL_MECHANISM); the listener answers it and closes the connection. A failed login
costs the caller a delay from `LoginThrottle` (per host, doubling, bounded), and one address
gets one login step at a time across all its connections and both client listeners
(`LoginThrottle.turn`), so guessing is slow however many connections it opens, while other
clients are served as usual; the listener counts failures (`raftlog_auth_failures_total`).
A SASL session may have a lifetime (`connections_max_reauth_ms`, KIP-368): re-authentication
on the connection renews it, else the next request after it ends closes the connection.

Concurrency: trio-thread only. PLAIN's PBKDF2 runs in a worker thread (`trio.to_thread`, at
most PBKDF2_THREADS at once), so a flood of PLAIN logins does not stall the event loop.
"""

from __future__ import annotations

import logging
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from raftlog.base.acl import ANONYMOUS
from raftlog.base.errors import (
    IllegalSaslStateError,
    InvalidRequestError,
    RaftlogError,
    SaslAuthenticationFailedError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.peer_auth import PeerAuthAcceptor
from raftlog.base.protocol import Request
from raftlog.base.sasl import (
    MECHANISMS,
    CredentialLookup,
    NonceCache,
    PlainServer,
    ScramServer,
    new_server,
)
from raftlog.base.tls import node_id_of_certificate, principal_of_certificate
from raftlog.node.gate import OnceLog

__all__ = [
    "AUTH_OPS",
    "ListenerSecurity",
    "LoginThrottle",
    "OpenSession",
    "PeerSession",
    "SaslSession",
    "Session",
    "SessionExpiredError",
    "client_session_factory",
    "peer_session_factory",
    "send_tls_alert",
]

logger = logging.getLogger(__name__)

PEER_AUTH_OPS: Final = frozenset({"peer_auth_hello", "peer_auth_finish"})
SASL_OPS: Final = frozenset({"sasl_handshake", "sasl_authenticate"})
AUTH_OPS: Final = PEER_AUTH_OPS | SASL_OPS
PBKDF2_THREADS: Final = 2

_pbkdf2_limiter: trio.CapacityLimiter | None = None


def _limiter() -> trio.CapacityLimiter:
    global _pbkdf2_limiter
    if _pbkdf2_limiter is None:
        _pbkdf2_limiter = trio.CapacityLimiter(PBKDF2_THREADS)
    return _pbkdf2_limiter


class Session(Protocol):
    complete: bool
    principal: str

    async def handle(self, request: Request) -> dict[str, Any]: ...

    def check(self) -> None: ...


@dataclass(frozen=True)
class ListenerSecurity:
    """What serve() needs to secure one listener: a TLS context (None: plaintext) and the
    session factory `new_session(client_host, peer_certificate or None) -> Session`."""

    ssl_context: ssl.SSLContext | None
    new_session: Callable[[str, Mapping[str, Any] | None], Session]
    tls_handshake_timeout_s: float = 10.0

    async def accept(
        self, stream: trio.SocketStream, peer: str, *, listener: str, tls_failures: Any
    ) -> tuple[trio.abc.Stream, Session] | None:
        """One accepted connection, secured: (the stream to talk on, its new session). The
        TLS handshake runs first when the listener has TLS; when it fails the failure is
        counted in `tls_failures` (labelled by listener) and logged, the client gets the
        alert OpenSSL queued, the connection is closed, and None is returned."""
        secured: trio.abc.Stream = stream
        certificate = None
        if self.ssl_context is not None:
            tls = trio.SSLStream(stream, self.ssl_context, server_side=True)
            try:
                with trio.fail_after(self.tls_handshake_timeout_s):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
                tls_failures.labels(listener=listener).inc()
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                log_event(
                    logger, "conn_tls_failed", level=logging.DEBUG,
                    listener=listener, peer=peer, reason=str(cause)[:200] or type(cause).__name__,
                )  # fmt: skip
                await send_tls_alert(tls, stream)
                await trio.aclose_forcefully(tls)
                return None
            secured, certificate = tls, tls.getpeercert()
        return secured, self.new_session(peer.rsplit(":", 1)[0], certificate)


class LoginThrottle:
    """Per-host failed-login delays: the n-th failure in a row from a host waits
    min(max_delay_ms, base_delay_ms * 2**(n-1)) before its answer; a success or `forget_ms`
    without failures resets it. At most `max_hosts` hosts are tracked (oldest dropped).
    `failed` and `succeeded` are pure: the caller passes `now_ms`.

    Across connections (issue 39): a login step runs inside `turn(host)`, which lets one step
    per host run at a time, and a failure waits out its delay inside its turn. So parallel
    connections from one address guess no faster than one connection does (the delays add
    up instead of running side by side), while other addresses are not slowed. The table of
    turns holds only hosts with a step running or waiting: bounded by the connections."""

    def __init__(self, *, base_delay_ms: int = 100, max_delay_ms: int = 3000, forget_ms: int = 60_000,
                 max_hosts: int = 10_000) -> None:
        self.base_delay_ms = base_delay_ms
        self.max_delay_ms = max_delay_ms
        self.forget_ms = forget_ms
        self.max_hosts = max_hosts
        self._failures: OrderedDict[str, tuple[int, int]] = OrderedDict()  # host -> (count, last_ms)
        self._turns: dict[str, tuple[trio.Lock, list[int]]] = {}  # host -> (its lock, [users])

    @asynccontextmanager
    async def turn(self, host: str) -> AsyncIterator[None]:
        """Hold the host's one login turn (wait for it first). Cancel-safe."""
        entry = self._turns.get(host)
        if entry is None:
            entry = self._turns[host] = (trio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._turns[host]

    def failed(self, host: str, now_ms: int) -> int:
        """Record a failure; return the delay (ms) to wait before answering it."""
        count, last = self._failures.pop(host, (0, now_ms))
        if now_ms - last > self.forget_ms:
            count = 0
        count += 1
        self._failures[host] = (count, now_ms)
        while len(self._failures) > self.max_hosts:
            self._failures.popitem(last=False)
        return min(self.max_delay_ms, self.base_delay_ms * 2 ** min(count - 1, 30))

    def succeeded(self, host: str) -> None:
        self._failures.pop(host, None)


# --- the peer listener --------------------------------------------------------------------------


class PeerSession:
    def __init__(self, key: bytes | None, host: str, node_id: int | None, refused: OnceLog) -> None:
        self._acceptor = PeerAuthAcceptor(key) if key is not None else None
        self._host = host
        self._refused = refused
        self.complete = node_id is not None
        self.principal = f"User:node-{node_id}" if node_id is not None else ANONYMOUS
        self.node_id = node_id

    def __repr__(self) -> str:
        return f"PeerSession(node_id={self.node_id}, complete={self.complete})"

    async def handle(self, request: Request) -> dict[str, Any]:
        try:
            if self._acceptor is None or request.op not in PEER_AUTH_OPS:
                raise SaslAuthenticationFailedError("peer authentication required before any peer op")
            if request.op == "peer_auth_hello":
                return self._acceptor.challenge(request.fields)
            node_id = self._acceptor.verify(request.fields)
        except RaftlogError as exc:
            if self._refused.first(self._host):
                log_event(logger, "peer_auth_refused", level=logging.WARNING, address=self._host,
                          op=request.op[:40], reason=exc.message)
            raise
        self.complete, self.node_id, self.principal = True, node_id, f"User:node-{node_id}"
        return {"node_id": node_id}

    def check(self) -> None:
        return None


def peer_session_factory(key: bytes | None) -> Callable[[str, Mapping[str, Any] | None], PeerSession]:
    """Sessions of the peer listener: a node certificate (TLS) or the HMAC handshake with
    `key` (None: TLS only; a connection without a node certificate gets nothing)."""
    refused = OnceLog()

    def new_session(host: str, certificate: Mapping[str, Any] | None) -> PeerSession:
        return PeerSession(key, host, node_id_of_certificate(certificate), refused)

    return new_session


# --- client listeners ---------------------------------------------------------------------------


class OpenSession:
    """No SASL: the principal is the client certificate's, or anonymous."""

    complete = True

    def __init__(self, principal: str) -> None:
        self.principal = principal

    async def handle(self, request: Request) -> dict[str, Any]:
        raise IllegalSaslStateError("this listener has no SASL: connect without sasl.* settings")

    def check(self) -> None:
        return None


class SessionExpiredError(SaslAuthenticationFailedError):
    """The session is older than `connections_max_reauth_ms` and was not renewed (KIP-368):
    the connection is closed; the client connects and logs in again."""


class SaslSession:
    """SASL on a client listener (Kafka's SaslHandshake + SaslAuthenticate, native form).

    With `reauth_ms` (Kafka's connections.max.reauth.ms; 0: off) a session lives that long
    after its login: `check()` fails once it is older, and before that the client may log in
    again on the same connection (KIP-368: a new handshake and authenticate rounds; the
    principal must stay the same), which starts a new lifetime. Requests keep running as
    the session's principal meanwhile."""

    def __init__(
        self,
        *,
        host: str,
        tls: bool,
        mechanisms: tuple[str, ...],
        lookup: CredentialLookup,
        nonces: NonceCache,
        throttle: LoginThrottle,
        clock_ms: Callable[[], int],
        reauth_ms: int = 0,
    ) -> None:
        self._host = host
        self._mechanisms = tuple(m for m in mechanisms if tls or m != "PLAIN")
        self._lookup = lookup
        self._nonces = nonces
        self._throttle = throttle
        self._clock_ms = clock_ms
        self._server: ScramServer | PlainServer | None = None
        self._user: str | None = None
        self.reauth_ms = reauth_ms
        self.authenticated_ms: int | None = None  # when the last login completed
        self.complete = False
        self.principal = ANONYMOUS

    def __repr__(self) -> str:
        return f"SaslSession(user={self._user!r}, complete={self.complete})"

    @property
    def lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ reports as session_lifetime_ms: 0 without a limit."""
        return self.reauth_ms

    async def handle(self, request: Request) -> dict[str, Any]:
        if request.op not in SASL_OPS:
            raise IllegalSaslStateError("authenticate first (sasl_handshake, then sasl_authenticate)")
        if request.op == "sasl_handshake":
            if self.complete and not self.reauth_ms:
                raise IllegalSaslStateError("already authenticated")
            if self._server is not None and not self._server.done:
                raise IllegalSaslStateError("one sasl_handshake per login")
            mechanism = request.fields.get("mechanism")
            if type(mechanism) is not str:
                raise InvalidRequestError("field 'mechanism' must be a string", field="mechanism")
            self._server = new_server(mechanism, self._lookup, nonces=self._nonces,
                                      now_ms=self._clock_ms(), enabled=self._mechanisms)
            return {"mechanisms": list(self._mechanisms)}
        if self._server is None or self._server.done:
            raise IllegalSaslStateError("sasl_handshake comes before sasl_authenticate"
                                        if not self.complete else "already authenticated")
        auth_bytes = request.fields.get("auth_bytes")
        if type(auth_bytes) is not bytes:
            raise InvalidRequestError("field 'auth_bytes' must be bytes", field="auth_bytes")
        server = self._server
        async with self._throttle.turn(self._host):  # one step per address at a time
            try:
                if isinstance(server, PlainServer):  # one PBKDF2: off the event loop
                    answer = await trio.to_thread.run_sync(server.step, auth_bytes, limiter=_limiter())
                else:
                    answer = server.step(auth_bytes)
            except SaslAuthenticationFailedError:
                await trio.sleep(self._throttle.failed(self._host, self._clock_ms()) / 1000)
                raise
        if not server.done:
            return {"auth_bytes": answer, "complete": False}
        assert server.principal is not None and server.username is not None
        if self.complete and server.principal != self.principal:
            raise SaslAuthenticationFailedError("re-authentication must keep the session's principal")
        self._throttle.succeeded(self._host)
        self._user, self.principal, self.complete = server.username, server.principal, True
        self.authenticated_ms = self._clock_ms()
        return {"auth_bytes": answer, "complete": True, "principal": server.principal,
                "session_lifetime_ms": self.lifetime_ms}

    def check(self) -> None:
        """Fail (and close) once the user has no credential left, or the session is older
        than `reauth_ms`."""
        assert self._user is not None and self.authenticated_ms is not None
        if self.reauth_ms and self._clock_ms() - self.authenticated_ms > self.reauth_ms:
            raise SessionExpiredError(
                f"the session expired after connections_max_reauth_ms ({self.reauth_ms} ms): log in again")
        if all(self._lookup(self._user, m) is None for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")):
            raise SaslAuthenticationFailedError("authentication failed: the user's credentials were removed")


def client_session_factory(
    *,
    sasl: bool,
    tls: bool,
    lookup: CredentialLookup,
    mechanisms: tuple[str, ...] = MECHANISMS,
    clock_ms: Callable[[], int],
    throttle: LoginThrottle | None = None,
    reauth_ms: int = 0,
) -> Callable[[str, Mapping[str, Any] | None], Session]:
    """Sessions of a client listener (Kafka's SASL_SSL when `sasl` and `tls`, and so on).
    One `throttle` (and replay window) for every connection of every listener that uses
    this factory; `reauth_ms`: SaslSession's session lifetime (0: none)."""
    nonces = NonceCache()
    throttle = throttle if throttle is not None else LoginThrottle()

    def new_session(host: str, certificate: Mapping[str, Any] | None) -> Session:
        if not sasl:
            return OpenSession(principal_of_certificate(certificate) or ANONYMOUS)
        return SaslSession(host=host, tls=tls, mechanisms=mechanisms, lookup=lookup, nonces=nonces,
                           throttle=throttle, clock_ms=clock_ms, reauth_ms=reauth_ms)

    return new_session



async def send_tls_alert(tls: trio.SSLStream[Any], transport: trio.abc.Stream, timeout_s: float = 1.0) -> None:
    """After a server-side handshake failed, send the alert OpenSSL queued for the client
    (certificate required, unknown CA, ...), so the client learns it was refused instead of
    seeing a bare close it would retry as a lost connection (TLS 1.3: the client's handshake
    has already ended when the server checks its certificate). trio keeps those bytes in the
    stream's outgoing BIO and drops them when the handshake raises; best effort, bounded."""
    bio = getattr(tls, "_outgoing", None)
    if not isinstance(bio, ssl.MemoryBIO) or not bio.pending:
        return
    alert = bio.read()
    with trio.move_on_after(timeout_s):
        try:
            await transport.send_all(alert)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            logger.debug("TLS alert not sent: %r", exc)

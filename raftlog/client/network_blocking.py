"""The blocking shell's network: sockets by broker id, read with one selector, driven by
`step()` on the caller's thread (raftlog/client/blocking.py, group_blocking.py and
group_admin.py use it). Every decision is the core's; this module only moves frames.

Time: `Network.clock` is the shell's one clock (clock.py); `step` reads no other.

Security (`security=`, a ClientSecurity; raftlog/client/security.py): a new connection does
the TLS handshake (stdlib `ssl`, server name checked against the certificate) and the SASL
login before any request of the core goes out, both within the connect timeout. A refused
login or certificate is reported to the core as a refusal (`step` passes `refused`), a
network failure as a failed connection. TLS sockets are read without blocking (drained until
the TLS layer wants more bytes), since a readable socket may hold only part of a TLS record
or a post-handshake message with no data in it.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl

from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import RaftlogError
from raftlog.base.protocol import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FirstBytes, encode_frame
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.core import ClientCore, Close
from raftlog.client.security import NativeLogin, tls_failure

__all__ = ["Connection", "Network", "open_socket", "step"]

log = logging.getLogger(__name__)

_RECV_BYTES = 1 << 20


class Connection:
    __slots__ = ("broker_id", "sock", "decoder", "tls", "first")

    def __init__(self, broker_id: int, sock: socket.socket, decoder: FrameDecoder):
        self.broker_id = broker_id
        self.sock = sock
        self.decoder = decoder
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.first = FirstBytes()  # what the connection's first bytes say spoke


def open_socket(addr: tuple[str, int], *, timeout_s: float, security: ClientSecurity | None = None,
                ssl_context: ssl.SSLContext | None = None, decoder: FrameDecoder | None = None) -> socket.socket:
    """A connected socket to a node's native listener, TLS and logged in as `security` says,
    each step under `timeout_s` (the socket keeps that timeout). `ssl_context` defaults to
    security's; `decoder` receives any bytes read past the login (none, from a node).
    Raises a RaftlogError when the node refuses the credentials or certificates, OSError
    when the connection fails."""
    if ssl_context is None and security is not None:
        ssl_context = security.ssl_context()
    sock = socket.create_connection(addr, timeout=timeout_s)
    decoder = decoder if decoder is not None else FrameDecoder(DEFAULT_MAX_FRAME_BYTES)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=addr[0])
            except ssl.SSLError as exc:
                raise (tls_failure(exc) or exc) from None
        if security is not None and security.sasl:
            _login(sock, decoder, security)
    except BaseException:
        sock.close()
        raise
    return sock


def _login(sock: socket.socket, decoder: FrameDecoder, security: ClientSecurity) -> None:
    """The SASL exchange on a blocking socket. Raises a RaftlogError (refused) or OSError."""
    client = security.sasl_client()
    assert client is not None
    login = NativeLogin(client)
    request = login.first_request()
    while request is not None:
        sock.sendall(encode_frame(request))
        while (msg := decoder.next_frame()) is None:
            try:
                data = sock.recv(_RECV_BYTES)
            except ssl.SSLError as exc:  # TLS 1.3: a refused client certificate shows here
                raise (tls_failure(exc) or exc) from None
            if not data:
                raise ConnectionResetError("the node closed the connection during the login")
            decoder.feed(data)
        request = login.on_response(msg)


class Network:
    """Sockets by broker id. Not thread-safe: only the thread that drives the core uses it."""

    def __init__(self, core: ClientCore, *, connect_timeout_ms: int, send_timeout_ms: int,
                 clock: Clock = SYSTEM_CLOCK, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 wakeup: bool = False, security: ClientSecurity | None = None):
        self._core = core
        self._security = security
        # Loaded once (raises InvalidConfigError for unreadable CA/certificate files).
        self._ssl = security.ssl_context() if security is not None else None
        self.refused: list[tuple[int, RaftlogError]] = []  # logins refused since the last step
        self.clock = clock
        self._conns: dict[int, Connection] = {}
        self._sel = selectors.DefaultSelector()
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._send_timeout_s = send_timeout_ms / 1000
        self._max_frame_bytes = max_frame_bytes
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        if wakeup:
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            self._sel.register(self._wake_r, selectors.EVENT_READ, None)

    def wake(self) -> None:
        """Interrupt `wait` from another thread."""
        try:
            self._wake_w.send(b"\0")
        except OSError as exc:  # BlockingIOError included
            # The buffer is full of wakeups not yet read (the waiter wakes anyway), or the
            # network is closing (no one waits any more).
            log.debug("wakeup not written: %r", exc)

    def perform(self, actions: list) -> list[int]:
        """Carry out Send/Close; returns broker ids whose connection failed (report them).
        Connections whose login was refused go to `refused` instead (`take_refused`)."""
        failed: list[int] = []
        for a in actions:
            if isinstance(a, Close):
                if self._drop(a.broker_id):
                    failed.append(a.broker_id)
                continue
            if a.broker_id in failed:
                continue
            try:
                frame = encode_frame(a.request)
            except (TypeError, ValueError, RaftlogError) as exc:
                # Our own request cannot be encoded: a bug or an unencodable header value.
                log.error("cannot encode %s request: %s", a.request.get("op"), exc)
                failed.append(a.broker_id)
                continue
            conn = self._conns.get(a.broker_id)
            try:
                if conn is None:
                    conn = self._connect(a.broker_id)
                    self._core.on_connected(a.broker_id)
                conn.sock.sendall(frame)
            except RaftlogError as exc:  # the login or the certificates were refused
                log.info("broker %s refused the connection: %s", a.broker_id, exc)
                self.refused.append((a.broker_id, exc))
                failed.append(a.broker_id)  # skip its other sends; reported as refused
            except OSError as exc:
                log.info("broker %s: %s", a.broker_id, exc)
                self._drop(a.broker_id)
                failed.append(a.broker_id)
        if self.refused:
            refused = {b for b, _ in self.refused}
            return [b for b in failed if b not in refused]
        return failed

    def _connect(self, broker_id: int) -> Connection:
        addr = self._core.address(broker_id)
        if addr is None:
            raise OSError(f"no address known for broker {broker_id}")
        decoder = FrameDecoder(self._max_frame_bytes)
        sock = open_socket(addr, timeout_s=self._connect_timeout_s, security=self._security,
                           ssl_context=self._ssl, decoder=decoder)
        sock.settimeout(self._send_timeout_s)
        conn = Connection(broker_id, sock, decoder)
        self._conns[broker_id] = conn
        self._sel.register(sock, selectors.EVENT_READ, conn)
        return conn

    def take_refused(self) -> list[tuple[int, RaftlogError]]:
        """The (broker_id, error) of logins refused since the last call."""
        refused, self.refused = self.refused, []
        return refused

    def _recv(self, conn: Connection) -> bytes | None:
        """What the socket has now: bytes, b"" at EOF, None when nothing (yet)."""
        if not conn.tls:
            return conn.sock.recv(_RECV_BYTES)
        sock = conn.sock
        chunks: list[bytes] = []
        sock.setblocking(False)
        try:
            while True:
                try:
                    data = sock.recv(_RECV_BYTES)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    break
                if not data:
                    if not chunks:
                        return b""
                    break  # EOF: the next select reports it again
                chunks.append(data)
        finally:
            sock.settimeout(self._send_timeout_s)
        return b"".join(chunks) if chunks else None

    def _drop(self, broker_id: int) -> bool:
        conn = self._conns.pop(broker_id, None)
        if conn is None:
            return False
        if conn.sock in self._sel.get_map():
            self._sel.unregister(conn.sock)
        conn.sock.close()
        return True

    def wait(self, timeout_s: float) -> tuple[list[tuple[int, dict]], list[int]]:
        """Wait up to timeout_s for input; returns (responses, broker ids disconnected)."""
        responses: list[tuple[int, dict]] = []
        lost: list[int] = []
        # With nothing registered, epoll still waits out the timeout (reconnect backoff).
        for key, _ in self._sel.select(max(0.0, timeout_s)):
            conn = key.data
            if conn is None:
                self._drain_wakeups()
                continue
            try:
                data = self._recv(conn)
            except (TimeoutError, BlockingIOError):
                continue
            except ssl.SSLError as exc:  # TLS 1.3 without SASL: a refused certificate shows here
                refusal = tls_failure(exc)
                if refusal is None:
                    log.info("broker %s: %s", conn.broker_id, exc)
                    data = b""
                else:
                    log.info("broker %s refused the connection: %s", conn.broker_id, refusal)
                    self._drop(conn.broker_id)
                    self.refused.append((conn.broker_id, refusal))
                    continue
            except OSError as exc:
                log.info("broker %s: %s", conn.broker_id, exc)
                data = b""
            if data is None:
                continue
            if not data:
                if self._drop(conn.broker_id):
                    lost.append(conn.broker_id)
                continue
            conn.decoder.feed(data)
            if (what := conn.first.check(data)) is not None:
                self._core.note_foreign(conn.broker_id, what)  # said once, in one line
                if self._drop(conn.broker_id):
                    lost.append(conn.broker_id)
                continue
            try:
                while (msg := conn.decoder.next_frame()) is not None:
                    responses.append((conn.broker_id, msg))
            except RaftlogError as exc:
                log.warning("broker %s sent a bad frame (%s); reconnecting", conn.broker_id, exc)
                if self._drop(conn.broker_id):
                    lost.append(conn.broker_id)
        return responses, lost

    def _drain_wakeups(self) -> None:
        """Read every pending wakeup byte (`wake` may have written several)."""
        while True:
            try:
                if not self._wake_r.recv(4096):
                    return  # the writer closed: the network is closing
            except OSError:  # BlockingIOError: nothing more to read now
                return

    def close(self) -> None:
        for broker_id in list(self._conns):
            self._drop(broker_id)
        if self._wake_r is not None:
            self._sel.unregister(self._wake_r)
            self._wake_r.close()
            self._wake_w.close()
        self._sel.close()


def step(core: ClientCore, net: Network, deadline_ms: int | None) -> None:
    """One round on the caller's thread: poll, send, wait for input until the earliest of
    the core's wakeup and `deadline_ms`, hand the input to the core."""
    now = net.clock.monotonic_ms()
    failed = net.perform(core.poll(now))
    if failed or net.refused:
        core.on_input((), failed, now, net.take_refused())
        return
    responses, lost = net.wait(core.wait_ms(now, deadline_ms) / 1000)
    core.on_input(responses, lost, net.clock.monotonic_ms(), net.take_refused())

"""The trio shell's network: one stream per broker id, a reader task per connection feeding
one bounded inbox, driven by `step()` (raftlog/client/aio.py and group_aio.py use it).
Every decision is the core's; this module only moves frames.

Time: `Network.clock` is the shell's one clock (clock.py), by default `TRIO_CLOCK`, which
reads trio's clock: under `trio.testing.MockClock` the core's deadlines and trio's timeouts
move together. Streams: `connect(host, port)` opens one (default trio.open_tcp_stream); a
test passes one that returns an in-memory stream to a fake broker.

Security (`security=`, a ClientSecurity; raftlog/client/security.py): a new connection is
wrapped in trio's SSLStream (the handshake checks the server's name against its
certificate) and does the SASL login before any request of the core goes out, all within
the connect timeout. A refused login or certificate is reported to the core as a refusal
(`step` passes `refused`), a network failure as a failed connection. (Under TLS 1.3 a
refused client certificate without SASL shows only at the first read: the reader reports it
as a refusal too.)
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable

import trio

from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import RaftlogError
from raftlog.base.protocol import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FirstBytes, encode_frame
from raftlog.client.clock import Clock
from raftlog.client.core import ClientCore, Close
from raftlog.client.security import NativeLogin, tls_failure

__all__ = ["TRIO_CLOCK", "Connect", "Connection", "Network", "step"]

log = logging.getLogger(__name__)

_INBOX_SIZE = 1024
_RECV_BYTES = 1 << 20

TRIO_CLOCK = Clock(monotonic_s=trio.current_time, wall_s=time.time)
Connect = Callable[[str, int], Awaitable[trio.abc.Stream]]


class Connection:
    __slots__ = ("broker_id", "stream", "send_lock", "closed", "decoder")

    def __init__(self, broker_id: int, stream: trio.abc.Stream, decoder: FrameDecoder):
        self.broker_id = broker_id
        self.stream = stream
        self.send_lock = trio.Lock()
        self.closed = False
        self.decoder = decoder


class Network:
    """Connections by broker id; a reader task per connection feeds one bounded inbox."""

    def __init__(self, core: ClientCore, nursery: trio.Nursery, *, connect_timeout_ms: int,
                 send_timeout_ms: int, clock: Clock = TRIO_CLOCK, connect: Connect | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: ClientSecurity | None = None):
        self._core = core
        self._security = security
        # Loaded once (raises InvalidConfigError for unreadable CA/certificate files).
        self._ssl = security.ssl_context() if security is not None else None
        self.refused: list[tuple[int, RaftlogError]] = []  # logins refused since the last step
        self.clock = clock
        self._open_stream: Connect = connect or trio.open_tcp_stream
        self._nursery = nursery
        self._conns: dict[int, Connection] = {}
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._send_timeout_s = send_timeout_ms / 1000
        self._max_frame_bytes = max_frame_bytes
        # Items: (conn, msg) for an answer, (conn, None) for a lost connection, None = wakeup.
        self.inbox_send, self.inbox_recv = trio.open_memory_channel(_INBOX_SIZE)
        self._kicked = False

    def kick(self) -> None:
        """Wake `wait` (from the trio thread)."""
        if self._kicked:
            return
        try:
            self.inbox_send.send_nowait(None)
            self._kicked = True
        except (trio.WouldBlock, trio.ClosedResourceError) as exc:
            # Inbox full (the waiter wakes anyway) or the client is closing (no one waits).
            log.debug("kick not queued: %r", exc)

    async def perform(self, actions: list) -> list[int]:
        failed: list[int] = []
        for a in actions:
            if isinstance(a, Close):
                if await self._drop(a.broker_id):
                    failed.append(a.broker_id)
                continue
            if a.broker_id in failed:
                continue
            try:
                frame = encode_frame(a.request)
            except (TypeError, ValueError, RaftlogError) as exc:
                log.error("cannot encode %s request: %s", a.request.get("op"), exc)
                failed.append(a.broker_id)
                continue
            try:
                conn = self._conns.get(a.broker_id)
                if conn is None:
                    conn = await self._connect(a.broker_id)
                    self._core.on_connected(a.broker_id)
                async with conn.send_lock:
                    with trio.fail_after(self._send_timeout_s):
                        await conn.stream.send_all(frame)
            except RaftlogError as exc:  # the login or the certificates were refused
                log.info("broker %s refused the connection: %s", a.broker_id, exc)
                self.refused.append((a.broker_id, exc))
                failed.append(a.broker_id)  # skip its other sends; reported as refused
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
                log.info("broker %s: %r", a.broker_id, exc)
                await self._drop(a.broker_id)
                failed.append(a.broker_id)
        if self.refused:
            refused = {b for b, _ in self.refused}
            return [b for b in failed if b not in refused]
        return failed

    def take_refused(self) -> list[tuple[int, RaftlogError]]:
        """The (broker_id, error) of logins refused since the last call."""
        refused, self.refused = self.refused, []
        return refused

    async def _connect(self, broker_id: int) -> Connection:
        addr = self._core.address(broker_id)
        if addr is None:
            raise OSError(f"no address known for broker {broker_id}")
        decoder = FrameDecoder(self._max_frame_bytes)
        with trio.fail_after(self._connect_timeout_s):
            stream = await self._open_stream(*addr)
            try:
                if self._ssl is not None:
                    stream = trio.SSLStream(stream, self._ssl, server_hostname=addr[0])
                    try:
                        await stream.do_handshake()
                    except trio.BrokenResourceError as exc:
                        raise (tls_failure(exc) or exc) from None
                if self._security is not None and self._security.sasl:
                    await self._login(stream, decoder)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        conn = Connection(broker_id, stream, decoder)
        self._conns[broker_id] = conn
        self._nursery.start_soon(self._reader, conn)
        return conn

    async def _login(self, stream: trio.abc.Stream, decoder: FrameDecoder) -> None:
        """The SASL exchange (the caller bounds it). Raises a RaftlogError (refused) or a
        trio/OS error (the connection failed)."""
        client = self._security.sasl_client()
        assert client is not None
        login = NativeLogin(client)
        request = login.first_request()
        while request is not None:
            await stream.send_all(encode_frame(request))
            while (msg := decoder.next_frame()) is None:
                try:
                    data = await stream.receive_some(_RECV_BYTES)
                except trio.BrokenResourceError as exc:  # TLS 1.3: a refused certificate shows here
                    raise (tls_failure(exc) or exc) from None
                if not data:
                    raise trio.BrokenResourceError("the node closed the connection during the login")
                decoder.feed(data)
            request = login.on_response(msg)

    async def _reader(self, conn: Connection) -> None:
        decoder = conn.decoder
        first = FirstBytes()  # what the connection's first bytes say spoke
        try:
            while True:
                data = await conn.stream.receive_some(_RECV_BYTES)
                if not data:
                    break
                if (what := first.check(data)) is not None:
                    self._core.note_foreign(conn.broker_id, what)  # said once, in one line
                    break
                decoder.feed(data)
                while (msg := decoder.next_frame()) is not None:
                    await self.inbox_send.send((conn, msg))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # TLS 1.3 without SASL: a refused client certificate shows on the first read.
            refusal = tls_failure(exc) if isinstance(exc, trio.BrokenResourceError) and not conn.closed else None
            if refusal is None:
                log.debug("broker %s: connection ended: %r", conn.broker_id, exc)
            else:
                log.info("broker %s refused the connection: %s", conn.broker_id, refusal)
                self.refused.append((conn.broker_id, refusal))  # reported with the loss below
        except RaftlogError as exc:
            log.warning("broker %s sent a bad frame (%s); reconnecting", conn.broker_id, exc)
        if not conn.closed:
            conn.closed = True
            if self._conns.get(conn.broker_id) is conn:
                del self._conns[conn.broker_id]
            try:
                await self.inbox_send.send((conn, None))
            except trio.ClosedResourceError:
                log.debug("broker %s: loss not reported: the client is closing", conn.broker_id)
        with trio.CancelScope(shield=True):
            await conn.stream.aclose()

    async def _drop(self, broker_id: int) -> bool:
        conn = self._conns.pop(broker_id, None)
        if conn is None:
            return False
        conn.closed = True
        with trio.CancelScope(shield=True):
            await conn.stream.aclose()
        return True

    def take(self, first: Any) -> tuple[list[tuple[int, dict]], list[int]]:
        """Split inbox items (first plus all queued now) into answers and lost broker ids."""
        responses: list[tuple[int, dict]] = []
        lost: list[int] = []
        item = first
        while True:
            if item is None:
                self._kicked = False
            else:
                conn, msg = item
                if msg is None:
                    lost.append(conn.broker_id)
                elif not conn.closed:
                    responses.append((conn.broker_id, msg))
            try:
                item = self.inbox_recv.receive_nowait()
            except trio.WouldBlock:
                return responses, lost

    async def aclose(self) -> None:
        for broker_id in list(self._conns):
            await self._drop(broker_id)


async def step(core: ClientCore, net: Network, deadline_ms: int | None) -> None:
    """One round: poll, send, wait for input until the earliest of the core's wakeup and
    `deadline_ms`, hand the input to the core."""
    now = net.clock.monotonic_ms()
    failed = await net.perform(core.poll(now))
    if failed or net.refused:
        core.on_input((), failed, now, net.take_refused())
        return
    try:
        first = net.inbox_recv.receive_nowait()
        await trio.lowlevel.checkpoint()  # answers were waiting: still let other tasks run
    except trio.WouldBlock:
        first = _NOTHING
        with trio.move_on_after(core.wait_ms(now, deadline_ms) / 1000):
            first = await net.inbox_recv.receive()
        if first is _NOTHING:
            return
    responses, lost = net.take(first)
    core.on_input(responses, lost, net.clock.monotonic_ms(), net.take_refused())


_NOTHING = object()

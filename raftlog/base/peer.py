"""Peer links: one multiplexed native-protocol connection per peer address (trio).

Brokers call the active controller (register, heartbeat, leader reports, producer-id blocks,
forwarded admin ops), broker-only nodes pull the metadata log from a voter, and replicas
fetch from leaders, all through one `PeerPool` per node:

    pool = PeerPool(node_id)
    await nursery.start(pool.run)           # owns the connections' reader tasks
    fields = await pool.call("127.0.0.1:9093", "broker_heartbeat", {...}, timeout_s=2.0)

Framing is PROTOCOL.md's (u32 length + canonical CBOR map); the peer listener is a plain
`raftlog.node.server.serve()`. The raftlog/client/aio.py network is tied to the client core's
broker ids and metadata, so it is not reused here; this is the small address-keyed twin.

Invariants and limits:
* One connection per address at a time; requests on it are matched by `id`, so many are
  in flight at once, answered in any order. At most `max_in_flight` per address: further
  callers wait for a slot (under their own timeout), so nothing queues without bound.
* At most `max_addresses` addresses are tracked; idle ones are forgotten first.
* A failed connect puts the address in backoff (doubling from `backoff_initial_s` up to
  `backoff_max_s`, reset on success); calls during backoff fail at once with
  PeerUnavailableError, so callers' retry loops do not hammer a dead peer. Its detail
  `refused` says the last connect was refused (nothing listens there: a dead process, not
  a slow or unreachable host); partition/replication.py lets followers of such a leader run.
* Error semantics: PeerUnavailableError = nothing was sent (definite); RequestTimedOutError = sent
  (or maybe sent) and no answer within `timeout_s` or the connection broke: the outcome is
  unknown; any other RaftlogError = the peer's error response (error_from_wire).
* Authentication (PROTOCOL.md "Peer listener"): with `ssl_context` every connection is TLS
  and presents this node's certificate (the listener checks it is a node's; we check the
  listener's name against its SANs); else with `auth_key` the HMAC handshake of
  raftlog/base/peer_auth.py runs on each new connection before any request. A failed
  handshake counts as a failed connect (backoff, PeerUnavailableError: nothing was sent).
* `dial_overrides` ({address: address to dial}, config key `dial_overrides`): the link keeps
  its address (the peer's identity: logs, status, backoff) but connects to the mapped one,
  e.g. a fault-injection proxy in front of the peer.
* Attachments (PROTOCOL.md "Attachments"): `call_attached` returns an answer's attachment
  too. The reader takes it into ONE buffer: what its last receive already brought past the
  frame, then the rest with readv straight from the socket, waiting only while none has
  arrived, and then for the rest or 1 MiB of it at once (SO_RCVLOWAT; through the stream
  over TLS). The connection's reader reads attachments into buffers it keeps
  (`_attachment_buffer`): one is used again once no view of it is left (its caller is
  done), so a buffer is not allocated and zeroed anew for each answer.
  An attachment over `max_frame_bytes`, a stream that ends inside one, or one stalled for
  ATTACHMENT_STALL_S closes the connection (`peer_bad_response` / `peer_disconnected` log
  lines; the calls in flight fail as a lost connection). `close_connection` lets a caller
  that finds an answer bad close it as well.
* Concurrency: trio-thread only. `call` is cancel-safe: a cancelled call leaves its request
  possibly delivered (unknown outcome), and its late answer is dropped. On a plain socket a
  call writes its frame directly when the socket takes it (no pass through trio's scheduler
  for a free slot, a free send lock or the write), so a call costs one wait: its answer's.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    PeerUnavailableError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.peer_auth import PeerAuthDialer
from raftlog.base.protocol import (
    ATTACHMENT_STALL_S,
    PEER_MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    FrameDecoder,
    attachment_length,
    encode_frame,
    parse_response,
)

__all__ = ["PeerPool", "StreamReader"]

logger = logging.getLogger(__name__)

# A receive may bring the start of an attachment along with its frame; the reader copies
# that part (at most this much) out of the decoder, the rest arrives in place.
RECEIVE_CHUNK_BYTES: Final = 64 << 10
RCVLOWAT_MAX: Final = 1 << 20  # the most an attachment's reader waits for before it wakes
# A connection's reader keeps this many attachment buffers (two answers may follow each other
# before their caller runs), of whole MiB, none over KEPT_BUFFER_MAX.
KEPT_BUFFERS: Final = 2
KEPT_BUFFER_MAX: Final = 16 << 20
_EMPTY: Final = memoryview(b"")
_ID_LIMIT: Final = (1 << 62)


@dataclass
class _Waiter:
    event: trio.Event = field(default_factory=trio.Event)
    fields: Mapping[str, Any] | None = None
    error: RaftlogError | None = None
    attachment: memoryview | None = None


def _refused(exc: BaseException) -> bool:
    """Was a connect refused (nothing listens there), as opposed to timing out? trio's
    open_tcp_stream raises a plain OSError caused by the group of every attempt's error."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        return all(isinstance(e, ConnectionRefusedError) for e in cause.exceptions)
    return isinstance(exc, ConnectionRefusedError) or isinstance(cause, ConnectionRefusedError)


class _Link:
    """State of one peer address. `stream` is None while disconnected."""

    def __init__(self, address: str, max_in_flight: int) -> None:
        self.address = address
        self.stream: trio.abc.Stream | None = None
        self.generation = 0  # bumps on every (dis)connection: a reader of an old stream exits
        self.send_lock = trio.Lock()
        self.connect_lock = trio.Lock()
        self.slots = trio.Semaphore(max_in_flight)
        self.pending: dict[int, _Waiter] = {}
        self.failures = 0
        self.refused = False  # the last connect attempt was refused (nothing listens there)
        self.retry_at = -math.inf  # trio clock
        self.last_used = 0.0

    @property
    def idle(self) -> bool:
        return not self.pending and self.slots.value == self.slots.max_value


class PeerPool:
    """Address-keyed multiplexed connections to other nodes' peer listeners."""

    def __init__(
        self,
        node_id: int,
        *,
        max_frame_bytes: int = PEER_MAX_FRAME_BYTES,
        max_in_flight: int = 256,
        max_addresses: int = 1024,
        connect_timeout_s: float = 2.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 2.0,
        attachment_stall_s: float = ATTACHMENT_STALL_S,
        dial_overrides: Mapping[str, str] | None = None,
        auth_key: bytes | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_in_flight < 1 or max_addresses < 1 or connect_timeout_s <= 0:
            raise ValueError("max_in_flight, max_addresses and connect_timeout_s must be positive")
        self.node_id = node_id
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.max_addresses = max_addresses
        self.connect_timeout_s = connect_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.attachment_stall_s = attachment_stall_s
        self._dial_overrides = dict(dial_overrides or {})
        self._auth_key = auth_key
        self._ssl_context = ssl_context
        self._links: dict[str, _Link] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None

    @property
    def tls(self) -> bool:
        """Whether connections are TLS (else plain TCP, where a peer may use os.sendfile)."""
        return self._ssl_context is not None

    # -- lifecycle --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the reader tasks until cancelled; then close every connection (pending calls
        end with RequestTimedOutError)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            # The readers closed their streams on cancellation; fail what is still waiting.
            for link in list(self._links.values()):
                self._disconnect(link, "peer pool stopped")

    def status(self) -> dict[str, Any]:
        """JSON-able summary for /health."""
        return {
            address: {
                "connected": link.stream is not None,
                "in_flight": len(link.pending),
                "failures": link.failures,
            }
            for address, link in sorted(self._links.items())
        }

    # -- calls --

    async def call(
        self, address: str, op: str, fields: Mapping[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        """Send `op` with `fields` to the peer listener at `address` ("host:port"); return
        the ok response's fields (without `id`/`ok`).

        Raises PeerUnavailableError (not sent: no connection, or in backoff), RequestTimedOutError (no
        answer within `timeout_s`, or the connection broke after sending: unknown outcome),
        the peer's RaftlogError (its error response), MessageTooLargeError (the request frame is
        over max_frame_bytes; not sent).
        """
        return (await self._call(address, op, fields, timeout_s))[0]

    async def call_attached(
        self, address: str, op: str, fields: Mapping[str, Any], timeout_s: float
    ) -> tuple[dict[str, Any], memoryview]:
        """`call`, for an op whose answer may carry an attachment (PROTOCOL.md "Attachments"):
        (the ok response's fields, its attachment: empty when it has none). Raises as `call`."""
        return await self._call(address, op, fields, timeout_s)

    def close_connection(self, address: str, reason: str) -> None:
        """Close the connection to `address` (a caller found its answers bad): the requests
        in flight on it fail as a lost connection; the next call connects again."""
        link = self._links.get(address)
        if link is not None and link.stream is not None:
            self._disconnect(link, reason)

    async def _call(
        self, address: str, op: str, fields: Mapping[str, Any], timeout_s: float
    ) -> tuple[dict[str, Any], memoryview]:
        if self._nursery is None:
            raise PeerUnavailableError("the peer pool is not running", address=address)
        deadline = trio.current_time() + max(0.0, timeout_s)
        link = self._link(address)
        link.last_used = trio.current_time()
        with trio.move_on_at(deadline) as scope:
            await acquire_free(link.slots)  # the answer's wait is the checkpoint
            try:
                return await self._call_on(link, op, fields, deadline)
            finally:
                link.slots.release()
        assert scope.cancelled_caught
        raise RequestTimedOutError(f"{op} to {address}: no answer within {timeout_s:.3g} s")

    async def _call_on(
        self, link: _Link, op: str, fields: Mapping[str, Any], deadline: float
    ) -> tuple[dict[str, Any], memoryview]:
        stream = await self._connected(link, deadline)
        request_id = next(self._ids) % _ID_LIMIT or 1
        message = {**fields, "v": PROTOCOL_VERSION, "id": request_id, "op": op}
        frame = encode_frame(message, max_frame_bytes=self.max_frame_bytes)
        waiter = _Waiter()
        link.pending[request_id] = waiter
        try:
            await self._send_frame(link, stream, frame, op)
            await waiter.event.wait()
        finally:
            link.pending.pop(request_id, None)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.fields is not None
        return dict(waiter.fields), waiter.attachment if waiter.attachment is not None else _EMPTY

    async def _send_frame(self, link: _Link, stream: trio.abc.Stream, frame: bytes, op: str) -> None:
        """Send one request frame under the link's send lock. On a plain socket what it
        takes at once is written directly (most frames: no pass through trio's scheduler,
        which a free lock and a send_all would each cost); the rest with send_all. Raises
        RequestTimedOutError (the connection broke: outcome unknown)."""
        lock = link.send_lock
        await acquire_free(lock)
        try:
            sending = True
            try:
                rest: Any = frame
                if type(stream) is trio.SocketStream:
                    try:
                        n = os.write(stream.socket.fileno(), frame)
                    except BlockingIOError:
                        n = 0
                    rest = memoryview(frame)[n:] if n else frame
                if rest:
                    await stream.send_all(rest)
                sending = False
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise RequestTimedOutError(
                    f"{op} to {link.address}: connection lost while sending; outcome unknown"
                ) from None
            finally:
                if sending:
                    # Failed or cancelled mid-frame: the byte stream can no longer be
                    # trusted (a partial frame may be out), so the connection goes.
                    if link.stream is stream:
                        self._disconnect(link, "send interrupted")
        finally:
            lock.release()

    async def _connected(self, link: _Link, deadline: float) -> trio.abc.Stream:
        if link.stream is not None:
            return link.stream
        async with link.connect_lock:
            if link.stream is not None:
                return link.stream
            now = trio.current_time()
            if now < link.retry_at:
                raise PeerUnavailableError(
                    f"{link.address}: reconnect backoff ({link.retry_at - now:.2f} s left, "
                    f"{link.failures} failed attempt(s))",
                    address=link.address, refused=link.refused,
                )
            host, port = _split(self._dial_overrides.get(link.address, link.address))
            stream: trio.abc.Stream | None = None
            try:
                with trio.fail_at(min(deadline, now + self.connect_timeout_s)):
                    stream = await trio.open_tcp_stream(host, port)
                    stream = await self._authenticate(stream, _split(link.address)[0])
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, RaftlogError) as exc:
                if stream is not None:
                    await trio.aclose_forcefully(stream)
                if isinstance(exc, RaftlogError):
                    log_event(logger, "peer_auth_failed", level=logging.WARNING, address=link.address,
                              reason=exc.message)
                    exc = OSError(exc.message)
                link.failures += 1
                delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (link.failures - 1))
                link.retry_at = trio.current_time() + delay
                log_event(
                    logger, "peer_connect_failed", level=logging.DEBUG,
                    address=link.address, failures=link.failures, reason=str(exc) or type(exc).__name__,
                )  # fmt: skip
                link.refused = _refused(exc)
                raise PeerUnavailableError(f"{link.address}: cannot connect ({exc or 'timeout'})",
                                      address=link.address, refused=link.refused) from None
            link.failures = 0
            link.retry_at = -math.inf
            link.stream = stream
            link.generation += 1
            assert self._nursery is not None
            self._nursery.start_soon(self._reader, link, stream, link.generation)
            log_event(logger, "peer_connected", level=logging.DEBUG, address=link.address)
            return stream

    async def _authenticate(self, stream: trio.SocketStream, server_host: str) -> trio.abc.Stream:
        """Prove membership on a new connection (see the module docstring); the stream to use.
        Raises RaftlogError (refused), trio.BrokenResourceError / OSError (connection lost)."""
        if self._ssl_context is not None:
            tls = trio.SSLStream(stream, self._ssl_context, server_hostname=server_host)
            await tls.do_handshake()
            return tls
        if self._auth_key is None:
            return stream
        dialer = PeerAuthDialer(self._auth_key, self.node_id)
        challenge = await self._exchange(stream, "peer_auth_hello", dialer.hello())
        await self._exchange(stream, "peer_auth_finish", dialer.finish(challenge))
        return stream

    async def _exchange(self, stream: trio.abc.Stream, op: str, fields: Mapping[str, Any]) -> Mapping[str, Any]:
        """One request and its answer on a connection no reader owns yet."""
        request_id = next(self._ids) % _ID_LIMIT or 1
        await stream.send_all(encode_frame({**fields, "v": PROTOCOL_VERSION, "id": request_id, "op": op}))
        decoder = FrameDecoder(64 << 10)
        while (frame := decoder.next_frame()) is None:
            data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
            if not data:
                raise trio.BrokenResourceError(f"{op}: the peer closed the connection")
            decoder.feed(data)
        response = parse_response(frame)
        if response.error is not None:
            raise response.error
        return response.fields

    async def _reader(self, link: _Link, stream: trio.abc.Stream, generation: int) -> None:
        decoder = FrameDecoder(self.max_frame_bytes)
        reason = "closed by peer"
        kept: list[bytearray] = []
        try:
            reader = StreamReader(stream)
            while True:
                data = await reader.receive(RECEIVE_CHUNK_BYTES)
                if not data:
                    break
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    response = parse_response(frame)
                    if response.id == 0:  # the peer could not read our stream: it closes
                        reason = f"peer refused a frame: {response.error}"
                        return
                    attachment = None
                    size = attachment_length(response.fields, self.max_frame_bytes)
                    if size:
                        buffer = _attachment_buffer(kept, size)
                        attachment = await self._read_attachment(stream, decoder, buffer, size)
                        if attachment is None:
                            reason = f"closed inside an attachment of {size} bytes"
                            log_event(logger, "peer_bad_response", level=logging.WARNING,
                                      address=link.address, reason=reason)
                            return
                    waiter = link.pending.get(response.id)
                    if waiter is None or waiter.event.is_set():
                        continue  # its caller gave up (timeout/cancel): drop the late answer
                    waiter.fields, waiter.error = response.fields, response.error
                    waiter.attachment = attachment
                    waiter.event.set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            reason = f"receive failed: {type(exc).__name__}"
        except trio.TooSlowError:
            reason = f"an attachment stalled for {self.attachment_stall_s:g} s"
            log_event(logger, "peer_bad_response", level=logging.WARNING, address=link.address,
                      reason=reason)
        except InvalidRequestError as exc:  # an undecodable or malformed response frame
            reason = f"bad response: {exc.message}"
            log_event(logger, "peer_bad_response", level=logging.WARNING, address=link.address,
                      reason=reason)
        except MessageTooLargeError as exc:  # a frame or an attachment over the limit
            reason = f"bad response: {exc.message}"
            log_event(logger, "peer_bad_response", level=logging.WARNING, address=link.address,
                      reason=reason)
        finally:
            if link.generation == generation:
                self._disconnect(link, reason)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _read_attachment(self, stream: trio.abc.Stream, decoder: FrameDecoder,
                               buffer: bytearray, size: int) -> memoryview | None:
        """The `size` bytes after the frame just decoded, read into the start of `buffer`
        (a view of them); None when the stream ends first. Raises trio.TooSlowError when the
        rest (or RCVLOWAT_MAX bytes of it) has not come within attachment_stall_s."""
        with memoryview(buffer)[:size] as view:
            got = decoder.take_buffered(view)
            sock = stream.socket if isinstance(stream, trio.SocketStream) else None
            if sock is None:
                while got < size:
                    with trio.fail_after(self.attachment_stall_s):
                        data = await stream.receive_some(min(size - got, 1 << 20))
                    if not data:
                        return None
                    view[got : got + len(data)] = data
                    got += len(data)
                return memoryview(buffer)[:size]
            lowat = 1
            try:
                while got < size:
                    # What has arrived is read at once; only an empty socket is waited on (no
                    # deadline and no pass through the scheduler per chunk), and then until
                    # the rest has come (SO_RCVLOWAT: the kernel wakes us once, not once per
                    # segment the sender's window let through).
                    try:
                        n = os.readv(sock.fileno(), [view[got:]])
                    except BlockingIOError:
                        want = min(size - got, RCVLOWAT_MAX)
                        if want != lowat:
                            lowat = _receive_low_water(sock, want)
                        with trio.fail_after(self.attachment_stall_s):
                            await trio.lowlevel.wait_readable(sock)
                        continue
                    if n == 0:
                        return None
                    got += n
            finally:
                if lowat != 1:
                    with contextlib.suppress(OSError):  # closed by a cancellation meanwhile
                        _receive_low_water(sock, 1)
        return memoryview(buffer)[:size]

    def _disconnect(self, link: _Link, reason: str) -> None:
        """Drop the link's stream and fail every request in flight on it (unknown outcome)."""
        if link.stream is None and not link.pending:
            return
        log_event(
            logger, "peer_disconnected", level=logging.DEBUG,
            address=link.address, reason=reason, in_flight=len(link.pending),
        )  # fmt: skip
        stream, link.stream = link.stream, None
        link.generation += 1
        for waiter in link.pending.values():
            if not waiter.event.is_set():
                waiter.error = RequestTimedOutError(
                    f"connection to {link.address} lost ({reason}); outcome unknown"
                )
                waiter.event.set()
        if stream is not None and self._nursery is not None:
            # The reader of this stream notices (its generation is stale) and closes it.
            self._nursery.start_soon(trio.aclose_forcefully, stream)

    def _link(self, address: str) -> _Link:
        link = self._links.get(address)
        if link is not None:
            return link
        if len(self._links) >= self.max_addresses:
            idle = sorted((l for l in self._links.values() if l.idle), key=lambda l: l.last_used)
            if not idle:
                raise PeerUnavailableError(
                    f"more than {self.max_addresses} peer addresses in use", address=address
                )
            victim = idle[0]
            self._disconnect(victim, "evicted (address limit)")
            del self._links[victim.address]
        link = _Link(address, self.max_in_flight)
        self._links[address] = link
        return link


class StreamReader:
    """`receive(max_bytes)`: `stream.receive_some` for the reader of a connection. On a plain
    socket what has arrived is read at once, with no pass through trio's scheduler (that
    costs one per message); after a read that emptied the socket (less than `max_bytes`) the
    next one waits for it to be readable first (no read that only says it is empty), and a
    reader that never finds it empty yields every READS_PER_CHECKPOINT reads. Raises OSError
    (plain socket) or trio.BrokenResourceError / trio.ClosedResourceError, as receive_some
    does."""

    READS_PER_CHECKPOINT: Final = 16

    __slots__ = ("_stream", "_sock", "_reads", "_drained")

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._sock = stream.socket if type(stream) is trio.SocketStream else None
        self._reads = 0
        self._drained = False

    async def receive(self, max_bytes: int) -> bytes:
        sock = self._sock
        if sock is None:
            return await self._stream.receive_some(max_bytes)
        if self._drained:
            self._reads = 0
            await trio.lowlevel.wait_readable(sock)
        else:
            self._reads += 1
            if self._reads >= self.READS_PER_CHECKPOINT:
                self._reads = 0
                await trio.lowlevel.checkpoint()
        while True:
            try:
                data = os.read(sock.fileno(), max_bytes)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            self._drained = len(data) < max_bytes
            return data


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise PeerUnavailableError(f"bad peer address {address!r}, want host:port", address=address)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _attachment_buffer(kept: list[bytearray], size: int) -> bytearray:
    """A buffer of at least `size` bytes for the next attachment: a kept one of which no
    view is left (a bytearray cannot be resized while a view of it lives), else a new one,
    kept in place of a free one too small, or while fewer than KEPT_BUFFERS are."""
    free = -1
    for i, buffer in enumerate(kept):
        try:
            buffer.append(0)  # within its allocation (see below): nothing is copied
        except BufferError:
            continue  # still in use
        del buffer[-1]
        if len(buffer) >= size:
            return buffer
        free = i
    capacity = -(-size // (1 << 20)) << 20
    buffer = bytearray(capacity + 1)
    del buffer[-1]  # the byte past the end stays allocated, for the append above
    if capacity <= KEPT_BUFFER_MAX:
        if free >= 0:
            kept[free] = buffer
        elif len(kept) < KEPT_BUFFERS:
            kept.append(buffer)
    return buffer


def _receive_low_water(sock: trio.socket.SocketType, nbytes: int) -> int:
    """Set the socket's SO_RCVLOWAT: epoll reports it readable once `nbytes` have arrived
    (or the stream ended, or the receive window filled: the kernel never waits past that).
    Returns `nbytes`."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
    return nbytes

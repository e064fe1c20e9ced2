"""The local link between the node's main process and one Kafka network worker process
(issue 46, workers.py and network_worker.py): many client connections over one unix socket,
each a `Pipe` (a trio stream) at both ends.

    mux = Mux(stream)                        # one per worker, at each end
    pipe = mux.open_pipe(conn_id)            # a client connection's stream
    await mux.run(on_open)                   # reads and writes until the link ends

Wire: messages `u32 payload length | u8 kind | u32 connection id | payload`:
OPEN (worker -> main, payload the client's "host:port"), DATA (bytes of the connection),
EOF (no more bytes this way), CLOSE (the connection is gone: the client's socket at the
worker, the handler's stream at the main), ACK (u32: bytes the receiver consumed, which
give the sender that much credit back), MSG (one message of the connection's fast path,
not counted in its credit: a produce call worker -> main, its answer main -> worker; bounded
by the worker, which has at most the connection's max_in_flight calls out; see
network_worker.py), HANDOVER (worker -> main, payload the bytes the worker read from
the client and did not serve: the worker has passed the client's socket itself to the main
over the side channel with SCM_RIGHTS and forgotten the connection; workers.py). Everything written waits in one buffer that the
writer task sends with one write per wake-up, so many connections' messages share a
syscall.

Bounds: each pipe may have at most `window_bytes` of DATA sent and not yet consumed by the
other end (credit), so the bytes waiting for one connection, at either end, are bounded
and a slow client holds up only its own connection; a message over `MAX_MESSAGE_BYTES` is
a broken link. When the link ends (a worker died) every pipe of it is broken: its
connections end as if their clients had gone.

Concurrency: trio-thread only.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import trio

__all__ = ["Mux", "Pipe", "OPEN", "DATA", "EOF", "CLOSE", "ACK", "MSG", "HANDOVER", "SIDE_CONN_ID",
           "WINDOW_BYTES"]

OPEN: Final = 1
DATA: Final = 2
EOF: Final = 3
CLOSE: Final = 4
ACK: Final = 5
MSG: Final = 6
HANDOVER: Final = 7
_HEADER: Final = struct.Struct(">IBI")
_U32: Final = struct.Struct(">I")
SIDE_CONN_ID: Final = _U32  # a side-channel message: the id of the connection whose socket it carries
WINDOW_BYTES: Final = 1 << 20  # per connection and direction: DATA sent, not yet consumed
CHUNK_BYTES: Final = 256 << 10  # one DATA message at most
# A MSG: a produce call (a request of up to CHUNK_BYTES) or its answer, whose record errors
# (one per record of a refused batch) may outgrow the request: the main closes the
# connection instead of sending a larger one (listener.py).
MAX_MESSAGE_BYTES: Final = 16 << 20
RECEIVE_BYTES: Final = 1 << 20


class LinkError(Exception):
    """The other end sent something that is not this protocol."""


class Pipe(trio.abc.HalfCloseableStream):
    """One client connection's bytes over the link: receive_some / send_all / send_eof /
    aclose as a socket's. A CLOSE from the other end breaks it (BrokenResourceError both
    ways); an EOF ends its receive side (b"")."""

    def __init__(self, mux: "Mux", conn_id: int, window_bytes: int) -> None:
        self._mux = mux
        self.conn_id = conn_id
        self._inbound: deque[bytes] = deque()
        self.messages: deque[bytes] = deque()  # MSG payloads, in order
        self.owner: object = None  # the main's connection serving it (listener.py)
        self.handed_over: bytes | None = None  # main: the unserved bytes of a handed-over socket
        self._eof = False
        self._broken = False
        self._closed = False
        self._credit = window_bytes
        self._changed = trio.Event()

    # --- fed by the link's reader -------------------------------------------------------
    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def feed(self, data: bytes) -> None:
        self._inbound.append(data)
        self._wake()

    def feed_message(self, payload: bytes) -> None:
        self.messages.append(payload)
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def feed_ack(self, count: int) -> None:
        self._credit += count
        self._wake()

    def break_(self) -> None:
        self._broken = True
        self._wake()

    # --- the stream ---------------------------------------------------------------------
    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._inbound:
            if self._closed:
                raise trio.ClosedResourceError("pipe closed")
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            if self._broken:
                raise trio.BrokenResourceError("connection closed by the other end")
            await self._changed.wait()
        data = self._inbound.popleft()
        if max_bytes is not None and len(data) > max_bytes:
            self._inbound.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        self._mux.send(ACK, self.conn_id, _U32.pack(len(data)))
        await trio.lowlevel.checkpoint()
        return data

    async def next_message(self) -> bytes:
        """The next MSG from the other end, in order; BrokenResourceError once the pipe is
        broken or closed and none is left."""
        while not self.messages:
            if self._broken or self._closed:
                raise trio.BrokenResourceError("connection closed")
            await self._changed.wait()
        return self.messages.popleft()

    def send_message(self, payload: bytes) -> None:
        """One MSG to the other end (dropped once the pipe is closed or broken)."""
        if not (self._closed or self._broken):
            self._mux.send(MSG, self.conn_id, payload)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while True:
            if self._closed:
                raise trio.ClosedResourceError("pipe closed")
            if self._broken:
                raise trio.BrokenResourceError("connection closed by the other end")
            if not view:
                break
            if self._credit <= 0:
                await self._changed.wait()
                continue
            count = min(len(view), self._credit, CHUNK_BYTES)
            self._mux.send(DATA, self.conn_id, view[:count])
            self._credit -= count
            view = view[count:]
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        while self._credit <= 0 and not (self._closed or self._broken):
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("pipe closed")
        if not self._broken:
            self._mux.send(EOF, self.conn_id)
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def hand_over(self, unserved: bytes) -> None:
        """The worker's side: the client's socket went to the main (the side channel); tell it
        the bytes read and not served, and forget the connection (no CLOSE)."""
        if not (self._closed or self._broken):
            self._mux.send(HANDOVER, self.conn_id, unserved)
        self._closed = True
        self._mux.pipes.pop(self.conn_id, None)
        self._wake()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._broken:
            self._mux.send(CLOSE, self.conn_id)
        self._mux.pipes.pop(self.conn_id, None)
        self._wake()


class Mux:
    """One end of the link (module docstring). `run(on_open)` reads and writes until the
    link ends; `on_open(conn_id, peer)` is called for each OPEN (the main's side)."""

    def __init__(self, stream: trio.abc.Stream, *, window_bytes: int = WINDOW_BYTES) -> None:
        self._stream = stream
        self.window_bytes = window_bytes
        self.pipes: dict[int, Pipe] = {}
        self.handing: set[int] = set()  # main: connections handed over, their socket not yet taken
        self.last_opened = 0  # main: the highest connection id opened (the worker counts up)
        self._out = bytearray()
        self._wake = trio.Event()
        self._done = False

    def open_pipe(self, conn_id: int) -> Pipe:
        pipe = self.pipes[conn_id] = Pipe(self, conn_id, self.window_bytes)
        return pipe

    def send(self, kind: int, conn_id: int, payload: bytes | memoryview = b"") -> None:
        if self._done:
            return
        self._out += _HEADER.pack(len(payload), kind, conn_id)
        self._out += payload
        self._wake.set()

    async def run(self, on_open: Callable[[int, str], None] | None = None) -> None:
        """Until the link ends (EOF, an error, a message that is not this protocol);
        then every pipe is broken. Cancel it to end the link."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._until_broken, self._write_loop, nursery.cancel_scope)
                await self._until_broken(partial(self._read_loop, on_open), nursery.cancel_scope)
        finally:
            self._done = True
            for pipe in list(self.pipes.values()):
                pipe.break_()
            self.pipes.clear()

    @staticmethod
    async def _until_broken(loop: Callable[[], Awaitable[None]], link: trio.CancelScope) -> None:
        """Run one direction's loop; when it ends (the link broke or closed), end the other."""
        try:
            await loop()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, LinkError):
            pass
        finally:
            link.cancel()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            out, self._out = self._out, bytearray()
            if out:
                await self._stream.send_all(out)

    async def _read_loop(self, on_open: Callable[[int, str], None] | None) -> None:
        buffer = bytearray()
        pos = 0
        while True:
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            if pos:
                del buffer[:pos]
                pos = 0
            buffer += data
            end = len(buffer)
            while end - pos >= _HEADER.size:
                size, kind, conn_id = _HEADER.unpack_from(buffer, pos)
                if size > MAX_MESSAGE_BYTES:
                    raise LinkError(f"message of {size} bytes")
                start = pos + _HEADER.size
                if end - start < size:
                    break
                pos = start + size
                self._deliver(kind, conn_id, bytes(buffer[start:pos]), on_open)

    def _deliver(self, kind: int, conn_id: int, payload: bytes,
                 on_open: Callable[[int, str], None] | None) -> None:
        if kind == OPEN:
            if on_open is None or conn_id in self.pipes:
                raise LinkError(f"unexpected OPEN of {conn_id}")
            self.last_opened = max(self.last_opened, conn_id)
            on_open(conn_id, payload.decode("utf-8", "replace"))
            return
        pipe = self.pipes.get(conn_id)
        if pipe is None:
            return  # closed here already: what was in flight is dropped
        if kind == DATA:
            pipe.feed(payload)
        elif kind == MSG:
            pipe.feed_message(payload)
        elif kind == ACK:
            pipe.feed_ack(_U32.unpack(payload)[0])
        elif kind == EOF:
            pipe.feed_eof()
        elif kind == HANDOVER:  # the connection's stream ends here; its socket comes aside
            pipe.handed_over = payload
            self.handing.add(conn_id)
            pipe.feed_eof()
        elif kind == CLOSE:
            self.pipes.pop(conn_id, None)
            pipe.break_()
        else:
            raise LinkError(f"unknown message kind {kind}")

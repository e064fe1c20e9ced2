"""The one writer of file regions to a client connection: the native listener's
(raftlog/node/server.py) drains the connection's bounded channel of encoded responses and
sends them, with their attachments; the Kafka listener (raftlog/node/kafka/listener.py) sends
each response's chunks, its fetched records as file parts, with `send_parts`.

What it sends (`Item`): a frame (bytes), or an `Outgoing`, a frame with the `Attached` parts
that follow it (PROTOCOL.md "Attachments"). Whatever is queued within WRITE_COALESCE_BYTES goes
out together.

* Plain socket: buffers go out with the frames around them (one writev, no join); a FilePart
  goes with os.sendfile from its file straight to the socket, on the trio thread (the replica
  that made it read or warmed its range into the page cache, and the socket is non-blocking:
  each call sends what fits), asking `intact()` before each call. The writer sends what the
  socket takes at once, and waits (under the write deadline) only when it is full.
* TLS: the bytes pass through the stream; a FilePart is read in a worker thread.

A part no longer intact, or a file shorter than its range, ends the connection mid-answer
(`conn_attachment_failed`): the peer sees a lost connection, never other bytes. A write that
fails or outlasts the write deadline (a client that does not read) ends it too
(`conn_write_failed`). Every FilePart is released once sent or dropped, also when the
connection ends with it queued.

Concurrency: trio-thread only; one writer per connection.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Final, NoReturn, Union

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Attached

__all__ = ["ConnectionWriter", "Outgoing", "Item", "release", "WRITE_COALESCE_BYTES"]

logger = logging.getLogger(__name__)

WRITE_COALESCE_BYTES: Final = 1 << 20  # join small queued responses into one send
MAX_IOV: Final = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux)
TLS_READ_CHUNK: Final = 1 << 20  # a FilePart over TLS is read this much at a time
TLS_JOIN_BYTES: Final = 64 << 10  # over TLS, smaller buffers are joined into one send
_BUFFERS: Final = (bytes, bytearray, memoryview)


class Outgoing:
    """A response frame and the attachment parts that follow it."""

    __slots__ = ("frame", "attached")

    def __init__(self, frame: bytes, attached: Attached) -> None:
        self.frame = frame
        self.attached = attached


Item = Union[bytes, Outgoing]  # what the writer sends: a frame, or a frame with its attachment


def release(item: Item) -> None:
    """Close what `item` still holds (its file parts)."""
    if type(item) is Outgoing:
        item.attached.close()


class _FileRange:
    """A FilePart being sent: where the next os.sendfile starts, and how much is left."""

    __slots__ = ("part", "offset", "remaining")

    def __init__(self, part: Any) -> None:
        self.part = part
        self.offset = part.offset
        self.remaining = part.length


def _pieces(items: list[Item]) -> list[Any]:
    """What a plain socket sends for `items`, in order: byte views (frames, buffer parts;
    none empty) and _FileRanges."""
    pieces: list[Any] = []
    for item in items:
        if type(item) is bytes:
            pieces.append(memoryview(item))
            continue
        pieces.append(memoryview(item.frame))
        _add_parts(pieces, item.attached.parts)
    return pieces


def _add_parts(pieces: list[Any], parts: Sequence[Any]) -> None:
    """Append to `pieces` what a plain socket sends for `parts` (buffers and FileParts)."""
    for part in parts:
        if isinstance(part, _BUFFERS):
            if len(part):
                pieces.append(memoryview(part).cast("B"))
        elif part.length:
            pieces.append(_FileRange(part))


class ConnectionWriter:
    """Sends one connection's responses (module docstring). `socket_stream` is the plain
    socket under `stream` (os.sendfile, writev); None over TLS. `listener` and `peer` name
    the connection in the log; `disk_limiter` bounds the worker threads that read file
    parts over TLS (None: trio's default limiter).

    Two ways in: `run` drains a channel of Items (the native listener); `send_parts` sends
    one response's parts in order (the Kafka listener, which keeps its own response order)."""

    def __init__(self, stream: trio.abc.Stream, socket_stream: trio.SocketStream | None,
                 write_timeout_s: float, listener: str, peer: str,
                 disk_limiter: trio.CapacityLimiter | None = None) -> None:
        self.stream = stream
        self.socket_stream = socket_stream
        self.write_timeout_s = write_timeout_s
        self.listener = listener
        self.peer = peer
        self.disk_limiter = disk_limiter

    async def send_parts(self, parts: Sequence[Any]) -> None:
        """Send `parts` (buffers and FileParts) in order, as `run` sends an attachment: on a
        plain socket at once or under the write deadline; over TLS through the stream. The
        caller closes the file parts. Raises trio.BrokenResourceError (a part no longer
        intact or shorter than its range), trio.TooSlowError (the write deadline passed),
        OSError, trio.ClosedResourceError."""
        if self.socket_stream is None:
            await self._send_tls_parts([], parts)
            return
        pieces: list[Any] = []
        _add_parts(pieces, parts)
        await self._send_pieces(pieces)

    async def run(self, receive: trio.MemoryReceiveChannel[Item], on_failed: trio.CancelScope) -> None:
        """Send what `receive` brings until it closes; a failed write cancels `on_failed`
        (the connection) and returns."""
        async with receive:
            try:
                async for item in receive:
                    items = [item]
                    size = len(item) if type(item) is bytes else item.attached.length
                    while size < WRITE_COALESCE_BYTES:
                        try:
                            more = receive.receive_nowait()
                        except trio.WouldBlock:
                            break
                        except trio.EndOfChannel:
                            break
                        items.append(more)
                        size += len(more) if type(more) is bytes else more.attached.length
                    try:
                        if self.socket_stream is None:
                            with trio.fail_after(self.write_timeout_s):
                                await self._send_items(items)
                        else:
                            await self._send_pieces(_pieces(items))
                    except (
                        trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError
                    ) as exc:  # fmt: skip
                        log_event(
                            logger, "conn_write_failed", level=logging.DEBUG,
                            listener=self.listener, peer=self.peer, reason=str(exc) or type(exc).__name__,
                        )  # fmt: skip
                        on_failed.cancel()
                        return
                    finally:
                        for sent in items:
                            release(sent)
            finally:
                # Answers that will never be sent still own file descriptors.
                while True:
                    try:
                        release(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break

    async def _send_pieces(self, pieces: list[Any]) -> None:
        """Send `pieces` on the plain socket: at once, or waiting for room under the write
        deadline. (Corking the socket so that a frame leaves with its attachment, TCP_CORK
        or MSG_MORE on the frame, delayed answers by up to 200 ms here: not done.)"""
        if not self._push(pieces):  # the socket is full: wait for room
            with trio.fail_after(self.write_timeout_s):
                while True:
                    await trio.lowlevel.wait_writable(self.socket_stream.socket)  # type: ignore[union-attr]
                    if self._push(pieces):
                        break

    def _push(self, pieces: list[Any]) -> bool:
        """Send what the plain socket takes now, without waiting, from `pieces` (_pieces;
        consumed in place): consecutive buffers with one writev, file parts with os.sendfile
        (asking `intact()` before each call). True once everything is sent. Raises OSError
        (the connection broke) and trio.BrokenResourceError (a file part no longer intact
        or shorter than its range: module docstring).

        Most answers fit in the socket's buffer: they go out here, from the writer's loop,
        with no deadline and no pass through trio's scheduler (a send_all costs two, and a
        cancel scope more)."""
        fd = self.socket_stream.socket.fileno()  # type: ignore[union-attr]
        while pieces:
            head = pieces[0]
            if type(head) is memoryview:
                run = []
                for piece in pieces:
                    if type(piece) is not memoryview or len(run) == MAX_IOV:
                        break
                    run.append(piece)
                try:
                    n = os.writev(fd, run)
                except BlockingIOError:
                    return False
                for piece in run:
                    if n < len(piece):
                        pieces[0] = piece[n:]
                        return False  # partly sent: the socket's buffer is full
                    n -= len(piece)
                    pieces.pop(0)
                continue
            if not head.part.intact():
                self._attachment_failed("file range changed while being sent")
            try:
                sent = os.sendfile(fd, head.part.fd, head.offset, head.remaining)
            except BlockingIOError:
                return False
            if sent == 0:
                self._attachment_failed("file ended before the range")
            head.offset += sent
            head.remaining -= sent
            if head.remaining:
                return False
            pieces.pop(0)
        return True

    async def _send_items(self, items: list[Item]) -> None:
        """Over TLS: send frames and their attachments in order, consecutive buffers
        together, file parts read in a worker thread."""
        if len(items) == 1 and type(items[0]) is bytes:
            await self.stream.send_all(items[0])
            return
        buffers: list[Any] = []
        for item in items:
            if type(item) is bytes:
                buffers.append(item)
                continue
            buffers.append(item.frame)
            buffers = await self._send_tls_parts(buffers, item.attached.parts, flush=False)
        await self._send_buffers(buffers)

    async def _send_tls_parts(self, buffers: list[Any], parts: Sequence[Any], *,
                              flush: bool = True) -> list[Any]:
        """Over TLS: send `buffers` and then `parts` in order, consecutive buffers together,
        file parts read in a worker thread. With `flush` False the buffers after the last
        file part are not sent but returned (to go out with what follows)."""
        for part in parts:
            if isinstance(part, _BUFFERS):
                buffers.append(part)
                continue
            await self._send_buffers(buffers)
            buffers = []
            await self._send_file_part(part)
        if flush:
            await self._send_buffers(buffers)
            return []
        return buffers

    async def _send_buffers(self, buffers: list[Any]) -> None:
        if not buffers:
            return
        if len(buffers) == 1:
            await self.stream.send_all(buffers[0])
            return
        small: list[Any] = []  # TLS: small ones joined, large ones as they are
        for b in buffers:
            if len(b) < TLS_JOIN_BYTES:
                small.append(b)
                continue
            if small:
                await self.stream.send_all(b"".join(small))
                small = []
            await self.stream.send_all(b)
        if small:
            await self.stream.send_all(b"".join(small))

    async def _send_file_part(self, part: Any) -> None:
        """TLS: read (in a worker thread) and write through the stream."""
        offset, remaining = part.offset, part.length
        while remaining > 0:
            data = await trio.to_thread.run_sync(os.pread, part.fd, min(remaining, TLS_READ_CHUNK), offset,
                                                 limiter=self.disk_limiter)
            if not data or not part.intact():
                self._attachment_failed("file range changed or ended while being sent")
            await self.stream.send_all(data)
            offset += len(data)
            remaining -= len(data)

    def _attachment_failed(self, reason: str) -> NoReturn:
        log_event(logger, "conn_attachment_failed", level=logging.WARNING,
                  listener=self.listener, peer=self.peer, reason=reason)
        raise trio.BrokenResourceError(reason)

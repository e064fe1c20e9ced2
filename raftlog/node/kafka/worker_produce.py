"""Produce's connection side in a Kafka network worker process (issue 46; network_worker.py
runs it on plaintext connections without SASL, where every connection is User:ANONYMOUS and
complete at once).

    await FastConnection(client_stream, pipe, max_in_flight, max_frame_bytes).run()

The worker frames the client's requests and reads each header. A Produce at a version the
node serves and can use is decoded here, its records put through the validator's checks
that need no topic (header, CRC-32C, counts, every record: partition/port.py
ProducePart.checked; bytes that fail go unchecked and the leader's validation names the
error, so the CRC is computed once either way) and sent to the main as one compact call
(fast_produce.py, a mux MSG), which the main's connection serves with the produce handler
(ACLs, quotas, request timeouts, idempotence and transactions as for any produce:
listener.py `_call_loop`) and answers compactly; the answer is encoded here
(fast_encode.py). Every other request goes to the main as its frame, and the main's
responses come back framed.

Order and bounds: the answers are written in request order (Kafka's per-connection
guarantee); a produce call waits until the main has answered the earlier requests it serves
itself (so it runs after them, as on the main's own path); at most `max_in_flight` requests
of a connection await their answer (then the worker stops reading it), and answers waiting
for the client hold at most the link's window. A frame over the link's CHUNK_BYTES or the
listener's `max_frame_bytes` (or a negative size) hands the rest of the connection to the main as bytes (its limits and errors
apply).

Hand-over (with `side`, the worker's side channel to the main): at the connection's first
Fetch the worker stops reading it, waits until every earlier request is answered and
written, then passes the client's socket to the main (SCM_RIGHTS, with the connection id)
and the bytes it read and did not serve (the Fetch and whatever followed) over the pipe
(mux HANDOVER), and forgets the connection: the main serves it from then on as a
connection it accepted (workers.py), with os.sendfile for the records. The order of
answers holds: nothing of the Fetch or after it was answered here.

Imports kafka-python (the codec): loaded by the worker in a thread after it starts
accepting; connections accepted before are carried as bytes.
"""

from __future__ import annotations

import array
import contextlib
import logging
import socket
import struct
from collections import deque
from typing import Any, Final

import trio

from partition.batch import DEFAULT_MAX_DECOMPRESSED_BYTES
from partition.validator import validate_client_records
from raftlog.base.eventlog import log_event
from raftlog.node.kafka.codec import decode_body, decode_header, encode_response
from raftlog.node.kafka.fast_produce import PRODUCE_KEY, call_bytes, read_answer
from raftlog.node.kafka.mux import CHUNK_BYTES, SIDE_CONN_ID, WINDOW_BYTES, Pipe
from raftlog.node.kafka.versions import PRODUCE_MIN_USABLE, supported
from raftlog.node.kafka.wire import CodecError, Header

__all__ = ["FastConnection"]

logger = logging.getLogger(__name__)

_SIZE: Final = struct.Struct(">i")
_PREFIX: Final = struct.Struct(">hh")  # api_key, api_version
FETCH_KEY: Final = 1
_ANY_SIZE: Final = (1 << 31) - 1  # max.message.bytes is the topic's: the leader checks it

RAW: Final = 0  # one response frame from the main's stream of the connection
FAST: Final = 1  # a produce call's answer (fast_produce.py)
REST: Final = 2  # the main's stream from here on, unframed


class _Slot:
    """One request's place in the connection's response order."""

    __slots__ = ("kind", "header", "data", "done", "close")

    def __init__(self, kind: int, header: Header | None = None) -> None:
        self.kind = kind
        self.header = header
        self.data: bytes | bytearray = bytearray() if kind == REST else b""
        self.done = False
        self.close = False


class FastConnection:
    """A plaintext connection whose Produce requests this worker decodes (module docstring):
    the other requests' frames go to the main's connection code over the pipe as they came,
    produce calls as pipe messages; the answers are written in request order."""

    def __init__(self, client: trio.SocketStream, pipe: Pipe, max_in_flight: int,
                 max_frame_bytes: int = CHUNK_BYTES, side: trio.socket.SocketType | None = None) -> None:
        self.client = client
        self.side = side  # the side channel to the main: hand the socket over at a Fetch
        self.pipe = pipe
        self.max_in_flight = max_in_flight
        self.max_frame_bytes = min(max_frame_bytes, CHUNK_BYTES)  # larger: the main's to judge
        self.slots: deque[_Slot] = deque()  # at most max_in_flight, in request order
        self.raw_waiting: deque[_Slot] = deque()  # RAW slots the main has not answered yet
        self.by_seq: dict[int, _Slot] = {}
        self.seq = 0
        self.rest: _Slot | None = None
        self.held_bytes = 0  # answers received, not yet written
        self.main_ended = False
        self.client_gone = False
        self.handover: bytes | None = None  # the bytes read from the Fetch on, to hand over
        self.handed = False  # every earlier answer written: the socket goes to the main
        self._changed = trio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def run(self) -> None:
        async with self.client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._upstream)
                nursery.start_soon(self._from_main)
                nursery.start_soon(self._answers)
                await self._write_loop()
                nursery.cancel_scope.cancel()
            if self.handed:
                await self._hand_over()
        self.pipe.close()  # a no-op once handed over

    async def _hand_over(self) -> None:
        """The client's socket to the main, then the unserved bytes (module docstring); our
        copy of the socket closes after (no FIN: the main holds it)."""
        assert self.side is not None and self.handover is not None
        fds = array.array("i", [self.client.socket.fileno()])
        try:
            await self.side.sendmsg([SIDE_CONN_ID.pack(self.pipe.conn_id)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except OSError:
            return  # the main is gone: the link's end closes everything
        self.pipe.hand_over(self.handover)

    # --- client -> main -------------------------------------------------------------------
    async def _upstream(self) -> None:
        buffer = bytearray()
        try:
            while True:
                data = await self.client.receive_some(CHUNK_BYTES)
                if not data:
                    if buffer:
                        await self.pipe.send_all(buffer)  # a truncated frame: the main logs it
                    await self.pipe.send_eof()
                    return
                if self.rest is not None:
                    await self.pipe.send_all(data)
                    continue
                buffer += data
                while len(buffer) >= 4:
                    size = _SIZE.unpack_from(buffer, 0)[0]
                    if size < 0 or size > self.max_frame_bytes:  # the main's limits and errors from here on
                        self.rest = _Slot(REST)
                        self.slots.append(self.rest)
                        await self.pipe.send_all(buffer)
                        buffer = bytearray()
                        break
                    if len(buffer) < 4 + size:
                        break
                    if self.side is not None and size >= 4 and _PREFIX.unpack_from(buffer, 4)[0] == FETCH_KEY:
                        self.handover = bytes(buffer)  # the Fetch and what followed: the main's
                        self._wake()
                        return
                    frame = bytes(buffer[4:4 + size])
                    del buffer[:4 + size]
                    await self._request(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.client_gone = True
            self._wake()

    async def _request(self, frame: bytes) -> None:
        while len(self.slots) >= self.max_in_flight:
            await self._changed.wait()
        produce = _decoded_produce(frame)
        if produce is None:
            slot = _Slot(RAW)
            self.slots.append(slot)
            self.raw_waiting.append(slot)
            await self.pipe.send_all(_SIZE.pack(len(frame)) + frame)
            return
        while self.raw_waiting:  # the main serves what came before first, as on its own path
            await self._changed.wait()
        header, request = produce
        self.seq += 1
        slot = self.by_seq[self.seq] = _Slot(FAST, header)
        self.slots.append(slot)
        self.pipe.send_message(call_bytes(self.seq, header, request, 4 + len(frame), _checked))

    # --- main -> client -------------------------------------------------------------------
    async def _from_main(self) -> None:
        buffer = bytearray()
        try:
            while True:
                while self.held_bytes > WINDOW_BYTES:  # bounded: wait for the client
                    await self._changed.wait()
                data = await self.pipe.receive_some()
                if not data:
                    return
                buffer += data
                while self.raw_waiting and len(buffer) >= 4:
                    end = 4 + _SIZE.unpack_from(buffer, 0)[0]
                    if len(buffer) < end:
                        break
                    slot = self.raw_waiting.popleft()
                    slot.data = bytes(buffer[:end])
                    slot.done = True
                    self.held_bytes += end
                    del buffer[:end]
                if buffer and not self.raw_waiting and self.rest is not None:
                    self.rest.data += buffer
                    self.held_bytes += len(buffer)
                    buffer.clear()
                self._wake()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.main_ended = True
            self._wake()

    async def _answers(self) -> None:
        try:
            while True:
                self._answer(await self.pipe.next_message())
        except trio.BrokenResourceError:
            pass

    def _answer(self, payload: bytes) -> None:
        seq, answer, close = read_answer(payload)
        slot = self.by_seq.pop(seq, None)
        if slot is None:
            return
        if close is not None:
            slot.close = True
        elif answer is not None:
            assert slot.header is not None
            try:
                slot.data = encode_response(slot.header, answer)[0]
            except Exception as exc:  # noqa: BLE001 - a bug: this connection closes, not the worker
                log_event(logger, "kafka_response_unencodable", level=logging.ERROR, exc_info=exc, api="Produce",
                          version=slot.header.api_version)
                slot.close = True
            self.held_bytes += len(slot.data)
        slot.done = True
        self._wake()

    async def _write_loop(self) -> None:
        client = self.client
        try:
            while True:
                while self.slots and self.slots[0].done:
                    slot = self.slots.popleft()
                    self._wake()
                    if slot.close:
                        return
                    if slot.data:
                        self.held_bytes -= len(slot.data)
                        await client.send_all(slot.data)
                if self.handover is not None and not self.slots and not self.client_gone:
                    self.handed = True  # every earlier answer written
                    return
                head = self.slots[0] if self.slots else None
                if head is not None and head.kind == REST and head.data:
                    data = bytes(head.data)
                    head.data.clear()
                    self.held_bytes -= len(data)
                    self._wake()
                    await client.send_all(data)
                    continue
                if self.client_gone:
                    return
                if self.main_ended:
                    while self.pipe.messages:  # answers the main sent before it ended
                        self._answer(self.pipe.messages.popleft())
                    if not (self.slots and self.slots[0].done):
                        if head is None or head.kind != REST:
                            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                                await client.send_eof()
                        return
                    continue
                await self._changed.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


def _checked(records: bytes, transactional: bool) -> bytes | None:
    """`records` after the validator's checks that need no topic (partition/port.py
    ProducePart.checked: header, CRC-32C, counts, every record, max timestamps fixed), or None
    where they fail: the leader's own validation then names the error, as without workers."""
    try:
        return bytes(validate_client_records(records, max_message_bytes=_ANY_SIZE, transactional=transactional,
                                             max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES))
    except Exception:  # noqa: BLE001 - any refusal is the leader's to make and explain
        return None


def _decoded_produce(frame: bytes) -> tuple[Header, Any] | None:
    """The header and request of a Produce this worker serves (a version the node serves
    and can use), else None: the main serves the frame (and judges what is wrong with it)."""
    if len(frame) < 4:
        return None
    api_key, version = _PREFIX.unpack_from(frame, 0)
    if api_key != PRODUCE_KEY or version < PRODUCE_MIN_USABLE or not supported(api_key, version):
        return None
    try:
        header, offset = decode_header(frame)
        return header, decode_body(header, frame, offset)
    except CodecError:
        return None

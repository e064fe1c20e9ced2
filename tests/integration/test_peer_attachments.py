"""Replica fetch answers with attachments over real sockets: a follower takes the records of a good answer from one buffer, and a bad one (attachment over the frame limit, a bad length, a range outside it, a stream that ends or stalls inside it) is a logged error, a closed connection and nothing delivered, after which the links fetch again; the listener sends file parts with os.sendfile (waiting for room in a full socket anywhere in an answer) and closes the connection when one is no longer intact."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import cbor2
import pytest
import trio

from partition.batch import BatchBuilder, CheckedBatches
from partition.raft import FetchRequest, FetchResponse
from partition.replication import ReplicationLinks, encode_fetch_response
from raftlog.base.errors import RaftlogError, RequestTimedOutError
from raftlog.base.eventlog import _FIELDS_ATTR as FIELDS_ATTR
from raftlog.base import peer as peer_module
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Attached, FrameDecoder, encode_frame, parse_request
from raftlog.node.server import serve

LEADER = 7
TOPIC = "t"
MAX_FRAME = 1 << 20


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every event logged, with its fields (log_event keeps them apart from the message)."""
    return "\n".join(f"{r.getMessage()} {getattr(r, FIELDS_ATTR, {})}" for r in caplog.records)


def batches(base_offset: int, count: int, epoch: int = 1) -> bytes:
    """`count` one-record batches from `base_offset`, stamped as a leader would."""
    out = bytearray()
    for i in range(count):
        b = BatchBuilder(base_offset=base_offset + i, partition_leader_epoch=epoch)
        b.append(b"v" * 100, None, timestamp_ms=1)
        out += b.build()
    return bytes(out)


def response(partition: int, records_bytes: int | None, at: int = 0, fetch_id: int = 1) -> dict:
    m = FetchResponse(LEADER, 1, LEADER, fetch_id, None, 0, 0, None, -1, 0)
    d = encode_fetch_response(TOPIC, partition, m)
    if records_bytes is not None:
        del d["records"]
        d.update(records_at=at, records_bytes=records_bytes)
    return d


class FakeReplica:
    def __init__(self, partition: int, got: list):
        self.topic, self.partition = TOPIC, partition
        self.got = got

    async def deliver(self, m: Any) -> None:
        self.got.append((self.partition, m))


Answer = Callable[[trio.SocketStream, dict], Awaitable[bool]]


async def fake_leader(answer: Answer, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A peer listener that reads replica_fetch requests and lets `answer` write raw bytes
    back; `answer` returns False to close the connection."""

    async def connection(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder(MAX_FRAME)
        async with stream:
            while True:
                data = await stream.receive_some(1 << 16)
                if not data:
                    return
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    request = parse_request(frame)
                    if not await answer(stream, {"id": request.id, **request.fields}):
                        return

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(connection, listeners)


def raw_frame(m: dict) -> bytes:
    body = cbor2.dumps(m, canonical=True)
    return struct.pack(">I", len(body)) + body


async def run_follower(answer: Answer, *, want: int, stall_s: float = 30.0,
                       timeout_s: float = 10.0) -> tuple[list, list]:
    """Start the links against a fake leader that answers with `answer`, ask for partitions
    0 and 1, and return (deliveries, requests the leader saw) once `want` requests were
    answered (the links keep fetching after a bad answer)."""
    got: list = []
    seen: list = []
    done = trio.Event()

    async def counting(stream: trio.SocketStream, request: dict) -> bool:
        seen.append(request)
        try:
            return await answer(stream, request)
        finally:
            if len(seen) >= want:
                done.set()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(fake_leader, counting)
        pool = PeerPool(1, max_frame_bytes=MAX_FRAME, attachment_stall_s=stall_s)
        await nursery.start(pool.run)
        replicas = {(TOPIC, p): FakeReplica(p, got) for p in (0, 1)}
        links = ReplicationLinks(1, pool, lambda b: f"127.0.0.1:{port}",
                                 lambda t, p: replicas.get((t, p)), session_max_wait_ms=100)
        await nursery.start(links.run)
        for p in (0, 1):
            links.send(replicas[(TOPIC, p)], LEADER, FetchRequest(1, 1, 0, 0, 0, 1))
        with trio.fail_after(timeout_s):
            await done.wait()
            await trio.sleep(0.05)  # let a delivery that would follow happen
        nursery.cancel_scope.cancel()
    return got, seen


async def test_records_arrive_from_the_attachment_in_one_buffer():
    data0, data1 = batches(0, 3), batches(0, 2)

    async def answer(stream: trio.SocketStream, request: dict) -> bool:
        assert request["attach"] is True
        frame = raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(data0) + len(data1),
                           "responses": [response(0, len(data0)), response(1, len(data1), at=len(data0))]})
        await stream.send_all(frame[:7])  # the attachment's start arrives with the frame's end
        await stream.send_all(frame[7:] + data0[:100])
        await stream.send_all(data0[100:] + data1)
        return True

    got, _ = await run_follower(answer, want=1)
    by_partition = {p: m for p, m in got}
    assert set(by_partition) == {0, 1}
    r0, r1 = by_partition[0].records, by_partition[1].records
    assert type(r0) is CheckedBatches and bytes(r0.data) == data0 and bytes(r1.data) == data1
    assert [h.base_offset for _, h in r0.headers] == [0, 1, 2]
    assert by_partition[0].batches == ((0, 0, 1), (1, 1, 1), (2, 2, 1))
    assert r0.data.obj is r1.data.obj  # views of one buffer


def bad_then_good(bad: Callable[[dict], Awaitable[bytes] | bytes], *, close: bool = True,
                  stall: bool = False) -> Answer:
    """The first answer is `bad(request)` (then the connection closes, or stalls); later
    answers are good, for partition 1 only."""
    good = batches(0, 1)
    state = {"n": 0}

    async def answer(stream: trio.SocketStream, request: dict) -> bool:
        state["n"] += 1
        if state["n"] == 1:
            await stream.send_all(bad(request))
            if stall:
                await trio.sleep_forever()
            return not close
        await stream.send_all(raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(good),
                                         "responses": [response(1, len(good), fetch_id=2)]}) + good)
        return True

    return answer


def no_partition_0_delivered(got: list) -> None:
    assert got, "the links fetched again after the bad answer"
    assert all(p == 1 and m.fetch_id == 2 for p, m in got), got


async def test_attachment_over_the_frame_limit_closes_and_delivers_nothing(caplog):
    def bad(request: dict) -> bytes:
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": MAX_FRAME + 1,
                          "responses": [response(0, 10)]}) + b"x" * 10

    got, seen = await run_follower(bad_then_good(bad, close=False), want=2)
    no_partition_0_delivered(got)
    assert "attachment of 1048577 bytes is over the limit" in logged(caplog)


@pytest.mark.parametrize("length", [-1, "12", 1.5])
async def test_attachment_length_not_an_integer_closes(length, caplog):
    def bad(request: dict) -> bytes:
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": length,
                          "responses": [response(0, 1)]}) + b"x"

    got, _ = await run_follower(bad_then_good(bad, close=False), want=2)
    no_partition_0_delivered(got)
    assert "'attachment_bytes' must be an integer >= 0" in logged(caplog)


@pytest.mark.parametrize("at,size", [(0, 1000), (200, 100), (1 << 40, 1)])
async def test_range_outside_the_attachment_drops_the_whole_answer(at, size, caplog):
    data = batches(0, 1)

    def bad(request: dict) -> bytes:  # partition 1's range is fine, partition 0's is not
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(data),
                          "responses": [response(1, len(data)), response(0, size, at=at)]}) + data

    got, _ = await run_follower(bad_then_good(bad, close=False), want=2)
    no_partition_0_delivered(got)  # nor the good partition 1 of the bad answer (fetch_id 1)
    assert "replica_fetch_bad_response" in logged(caplog) and "outside the attachment" in logged(caplog)


async def test_peer_closing_inside_the_attachment_delivers_nothing(caplog):
    data = batches(0, 2)

    def bad(request: dict) -> bytes:
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(data),
                          "responses": [response(0, len(data))]}) + data[: len(data) // 2]

    got, _ = await run_follower(bad_then_good(bad, close=True), want=2)
    no_partition_0_delivered(got)
    assert "closed inside an attachment" in logged(caplog)


async def test_stalled_attachment_closes_after_the_stall_limit(caplog):
    data = batches(0, 2)

    def bad(request: dict) -> bytes:
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(data),
                          "responses": [response(0, len(data))]}) + data[:10]

    got, _ = await run_follower(bad_then_good(bad, stall=True), want=2, stall_s=0.3)
    no_partition_0_delivered(got)
    assert "an attachment stalled for 0.3 s" in logged(caplog)


async def test_corrupt_records_in_the_attachment_are_dropped_not_delivered():
    data = bytearray(batches(0, 1))
    data[-1] ^= 0xFF  # the CRC no longer matches

    def bad(request: dict) -> bytes:
        return raw_frame({"id": request["id"], "ok": True, "attachment_bytes": len(data),
                          "responses": [response(0, len(data))]}) + bytes(data)

    got, _ = await run_follower(bad_then_good(bad, close=False), want=2)
    no_partition_0_delivered(got)


# ------------------------------------------------------------------ the listener's side


class Part:
    """A FilePart over a temp file."""

    def __init__(self, path, offset: int, length: int, intact: Callable[[], bool] = lambda: True):
        self.fd = os.open(path, os.O_RDONLY)
        self.offset, self.length = offset, length
        self._intact = intact
        self.closed = False

    def intact(self) -> bool:
        return self._intact()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


async def serve_answer(make: Callable[[], Attached], *, task_status=trio.TASK_STATUS_IGNORED):
    async def handler(request):
        return make()

    await serve({"get": handler}, "127.0.0.1", 0, max_frame_bytes=MAX_FRAME, request_timeout_ms=5000,
                name="peer", task_status=task_status)


async def fetch_attached(port: int) -> tuple[dict, bytearray]:
    """One call_attached; raises what it raised (outside the pool's nursery)."""
    pool = PeerPool(1, max_frame_bytes=MAX_FRAME)
    result: Any = None
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        try:
            result = await pool.call_attached(f"127.0.0.1:{port}", "get", {}, timeout_s=5)
        except RaftlogError as exc:
            result = exc
        nursery.cancel_scope.cancel()
    if isinstance(result, RaftlogError):
        raise result
    return result


async def test_listener_sends_file_parts_and_buffers_after_the_frame(tmp_path):
    path = tmp_path / "segment"
    content = os.urandom(300_000)
    path.write_bytes(content)
    parts: list[Part] = []

    def make() -> Attached:
        parts[:] = [Part(path, 1000, 200_000), Part(path, 5, 10)]
        return Attached({"n": 1}, [parts[0], b"between", parts[1], bytearray(b"end")])

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_answer, make)
        fields, attachment = await fetch_attached(port)
        nursery.cancel_scope.cancel()
    assert fields["n"] == 1 and fields["attachment_bytes"] == 200_000 + 7 + 10 + 3
    assert bytes(attachment) == content[1000:201_000] + b"between" + content[5:15] + b"end"
    assert all(p.closed for p in parts)


async def test_a_slow_reader_gets_every_byte_of_answers_larger_than_the_socket_buffers(tmp_path):
    """The writer sends what the socket takes and waits for room wherever it fills: inside
    a frame's buffers, between parts, inside a file part."""
    path = tmp_path / "segment"
    content = os.urandom(1 << 20)
    path.write_bytes(content)
    head, sizes = os.urandom(3) * (1 << 16), (7, 512 << 10, 256 << 10)
    sent: list[Part] = []

    def make() -> Attached:
        parts = [Part(path, sizes[0], sizes[1]), Part(path, 0, sizes[2])]
        sent.extend(parts)
        return Attached({"n": len(sent)}, [head, parts[0], b"mid", parts[1]])

    one = len(head) + sizes[1] + 3 + sizes[2]
    want = content[sizes[0]: sizes[0] + sizes[1]], content[: sizes[2]]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_answer, make)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the listener's socket fills
        await sock.connect(("127.0.0.1", port))
        stream = trio.SocketStream(sock)
        for i in (1, 2):
            await stream.send_all(encode_frame({"v": 1, "id": i, "op": "get"}))
        got = bytearray()
        with trio.fail_after(20):
            while len(got) < 4 or len(got) < 2 * (4 + struct.unpack(">I", got[:4])[0] + one):
                data = await stream.receive_some(4096)  # a window this small fills the listener's socket
                assert data
                got += data
        await stream.aclose()
        nursery.cancel_scope.cancel()
    at = 0
    for _ in (1, 2):
        frame_len = struct.unpack(">I", got[at: at + 4])[0]
        body = got[at + 4 + frame_len: at + 4 + frame_len + one]
        assert body == head + want[0] + b"mid" + want[1]
        at += 4 + frame_len + one
    assert at == len(got) and all(p.closed for p in sent)


@pytest.mark.parametrize("file_bytes,intact,reason", [
    (1000, False, "file range changed while being sent"),  # the log was cut since the slice
    (100, True, "file ended before the range"),
])
async def test_listener_closes_the_connection_mid_answer(tmp_path, caplog, file_bytes, intact, reason):
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(file_bytes))
    parts: list[Part] = []

    def make() -> Attached:
        parts[:] = [Part(path, 0, 1000, intact=lambda: intact)]
        return Attached({}, parts)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_answer, make)
        with pytest.raises(RequestTimedOutError):
            await fetch_attached(port)
        nursery.cancel_scope.cancel()
    assert all(p.closed for p in parts)
    assert reason in logged(caplog)


async def test_plain_call_still_reads_past_an_attachment(tmp_path):
    """`call` (no attachment wanted) keeps the stream aligned: the next answer is read."""
    n = {"i": 0}

    def make() -> Attached:
        n["i"] += 1
        return Attached({"i": n["i"]}, [b"y" * 5000])

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_answer, make)
        pool = PeerPool(1, max_frame_bytes=MAX_FRAME)
        await nursery.start(pool.run)
        first = await pool.call(f"127.0.0.1:{port}", "get", {}, timeout_s=5)
        second, attachment = await pool.call_attached(f"127.0.0.1:{port}", "get", {}, timeout_s=5)
        nursery.cancel_scope.cancel()
    assert first["i"] == 1 and second["i"] == 2 and bytes(attachment) == b"y" * 5000


async def test_the_rest_of_an_attachment_is_awaited_at_once_then_every_byte_wakes_again(monkeypatch):
    """Once the socket runs dry inside an attachment, the reader waits for the rest of it
    in one piece (SO_RCVLOWAT set to what is missing), and sets the mark back to one byte
    after: the small answer that follows is read at once, not after the call's timeout."""
    rest_awaited = trio.Event()
    marks: list[int] = []
    real_mark = peer_module._receive_low_water

    def mark(sock, nbytes: int) -> int:
        marks.append(nbytes)
        if nbytes > 1:
            rest_awaited.set()
        return real_mark(sock, nbytes)

    monkeypatch.setattr(peer_module, "_receive_low_water", mark)
    data = os.urandom(300_000)

    async def answer(stream: trio.SocketStream, request: dict) -> bool:
        if "small" not in request:
            await stream.send_all(raw_frame({"id": request["id"], "ok": True,
                                             "attachment_bytes": len(data)}) + data[:1000])
            await rest_awaited.wait()  # the reader has run dry and waits for the rest
            await stream.send_all(data[1000:])
        else:
            await stream.send_all(raw_frame({"id": request["id"], "ok": True, "small": True}))
        return True

    async with trio.open_nursery() as nursery:
        port = await nursery.start(fake_leader, answer)
        pool = PeerPool(1, max_frame_bytes=MAX_FRAME)
        await nursery.start(pool.run)
        fields, attachment = await pool.call_attached(f"127.0.0.1:{port}", "get", {}, timeout_s=5)
        small = await pool.call(f"127.0.0.1:{port}", "get", {"small": True}, timeout_s=5)
        nursery.cancel_scope.cancel()
    assert bytes(attachment) == data
    assert marks == [len(data) - 1000, 1]
    assert small["small"] is True


async def test_an_attachment_still_held_is_never_overwritten_and_a_released_buffer_is_used_again():
    """The reader reads each attachment into a buffer it keeps: never into one a caller
    still holds a view of, and again into one whose views are all gone."""
    contents = [bytes([i]) * 200_000 for i in range(3)]

    async def answer(stream: trio.SocketStream, request: dict) -> bool:
        data = contents[request["n"]]
        await stream.send_all(raw_frame({"id": request["id"], "ok": True,
                                         "attachment_bytes": len(data)}) + data)
        return True

    async with trio.open_nursery() as nursery:
        port = await nursery.start(fake_leader, answer)
        pool = PeerPool(1, max_frame_bytes=MAX_FRAME)
        await nursery.start(pool.run)
        address = f"127.0.0.1:{port}"
        _, first = await pool.call_attached(address, "get", {"n": 0}, timeout_s=5)
        _, second = await pool.call_attached(address, "get", {"n": 1}, timeout_s=5)
        assert bytes(first) == contents[0] and bytes(second) == contents[1]
        assert id(second.obj) != id(first.obj)  # the first is still held
        second_buffer = second.obj
        second.release()
        _, third = await pool.call_attached(address, "get", {"n": 2}, timeout_s=5)
        nursery.cancel_scope.cancel()
    assert bytes(third) == contents[2] and bytes(first) == contents[0]
    assert id(third.obj) == id(second_buffer)  # its view was released: the same buffer again

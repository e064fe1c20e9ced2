"""A live trio listener answers many in-flight requests out of order by id, enforces deadlines, frame limits, backpressure and connection limits, runs inline handlers in the reader (their Later under the deadline, and the inline part too where the handler asks, their errors answered alike), and survives bad clients."""

import logging
import random
import struct
from collections import defaultdict
from functools import partial

import cbor2
import pytest
import trio

from partition.errors import CorruptRecordError
from raftlog.base.errors import NotLeaderError
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.protocol import (
    FrameDecoder,
    Later,
    Request,
    encode_frame,
    inline_handler,
    inline_handler_under_deadline,
)
from raftlog.node.server import DEADLINE_MARGIN_MS, request_deadline_ms, serve

RECEIVE_TIMEOUT_S = 10


class Harness:
    """Toy handlers whose progress the test can see and steer."""

    def __init__(self) -> None:
        self.gates: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.started: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.acks0_done = trio.Event()
        self.registry = MetricsRegistry()
        self.port = 0
        self.handlers = {
            "echo": self.echo,
            "gated": self.gated,
            "hang": self.hang,
            "acks0": self.acks0,
            "crash": self.crash,
            "not_leader": self.not_leader,
            "unencodable": self.unencodable,
            "huge": self.huge,
            "foreign": self.foreign,
            "inline": self.inline,
            "inline_locked": self.inline_locked,
        }
        self.lock = trio.Lock()  # what an inline_locked request's inline part waits for
        self.inline_tasks: list[trio.lowlevel.Task] = []
        self.reader_tasks: set[trio.lowlevel.Task] = set()

    async def echo(self, request: Request):
        return dict(request.fields)

    async def gated(self, request: Request):
        name = request.fields["gate"]
        self.started[name].set()
        await self.gates[name].wait()
        return {"gate": name}

    async def hang(self, request: Request):
        await trio.sleep_forever()

    async def acks0(self, request: Request):
        self.acks0_done.set()
        return None

    async def crash(self, request: Request):
        raise ValueError("kaboom")

    async def not_leader(self, request: Request):
        raise NotLeaderError(leader_id=2, leader="127.0.0.1:9192")

    async def foreign(self, request: Request):
        raise CorruptRecordError("bad CRC in batch at offset 0")  # a package's own error class

    async def unencodable(self, request: Request):
        return {"x": object()}

    async def huge(self, request: Request):
        return {"blob": b"\x00" * (2 << 20)}

    @inline_handler
    async def inline(self, request: Request):
        """Answers at once, raises, or waits in a request task (`then`: a Later)."""
        self.inline_tasks.append(trio.lowlevel.current_task())
        then = request.fields.get("then")
        if then == "raise":
            raise NotLeaderError(leader_id=3, leader="127.0.0.1:9193")
        if then == "crash":
            raise ValueError("inline kaboom")
        if then is None:
            return {"answered": "inline"}

        async def wait():
            self.reader_tasks.add(trio.lowlevel.current_task())
            return await self.handlers[then](request)

        return Later(wait)


    @inline_handler_under_deadline
    async def inline_locked(self, request: Request):
        """Like produce's append: in the reader, in request order, waiting on a lock."""
        async with self.lock:
            return {"n": request.fields.get("n")}


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int) -> "Client":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def request(self, request_id: int, op: str, **fields) -> None:
        await self.stream.send_all(encode_frame({"v": 1, "id": request_id, "op": op, **fields}))

    async def receive(self) -> dict | None:
        """The next response, or None at EOF."""
        with trio.fail_after(RECEIVE_TIMEOUT_S):
            while True:
                frame = self.decoder.next_frame()
                if frame is not None:
                    return frame
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    return None
                self.decoder.feed(data)

    async def call(self, request_id: int, op: str, **fields) -> dict:
        await self.request(request_id, op, **fields)
        response = await self.receive()
        assert response is not None
        return response

    async def aclose(self) -> None:
        await self.stream.aclose()


async def start(nursery, **limits) -> Harness:
    harness = Harness()
    options = dict(max_frame_bytes=1 << 20, request_timeout_ms=10_000, max_in_flight=64)
    options.update(limits)
    harness.port = await nursery.start(
        partial(serve, harness.handlers, "127.0.0.1", 0, registry=harness.registry, **options)
    )
    return harness


@pytest.fixture
async def server(nursery) -> Harness:
    return await start(nursery)


@pytest.fixture
async def client(server):
    client = await Client.connect(server.port)
    yield client
    await client.aclose()


def test_deadline_rule():
    assert request_deadline_ms(None, 30_000) == 30_000
    assert request_deadline_ms(100, 30_000) == 100 + DEADLINE_MARGIN_MS
    assert request_deadline_ms(60_000, 30_000) == 30_000


async def test_echo(client, server):
    response = await client.call(1, "echo", payload=b"\x01\x02", n=[1, {"a": None}])
    assert response == {"id": 1, "ok": True, "payload": b"\x01\x02", "n": [1, {"a": None}]}
    assert server.registry.counter(
        "raftlog_requests_total", "", ("listener", "op", "code")
    ).value(listener="client", op="echo", code="OK") == 1


async def test_many_in_flight_complete_out_of_order(client, server):
    count = 40
    pipelined = b"".join(
        encode_frame({"v": 1, "id": 100 + k, "op": "gated", "gate": f"g{k}"}) for k in range(count)
    )
    await client.stream.send_all(pipelined)
    for k in range(count):
        await server.started[f"g{k}"].wait()
    # An echo overtakes all forty blocked requests.
    assert (await client.call(1, "echo"))["id"] == 1
    order = list(range(count))
    random.Random(5).shuffle(order)
    for k in order:
        server.gates[f"g{k}"].set()
        response = await client.receive()
        assert response == {"id": 100 + k, "ok": True, "gate": f"g{k}"}


async def test_request_timeout_ms_gives_request_timed_out(client):
    await client.request(7, "hang", timeout_ms=0)
    response = await client.receive()
    assert response["id"] == 7 and response["error"]["code"] == "REQUEST_TIMED_OUT"
    assert (await client.call(8, "echo"))["ok"] is True  # the connection lives on


async def test_server_cap_applies_without_timeout_ms(nursery):
    harness = await start(nursery, request_timeout_ms=200)
    client = await Client.connect(harness.port)
    async with client.stream:
        response = await client.call(3, "hang")
        assert response["error"]["code"] == "REQUEST_TIMED_OUT"


async def test_none_result_sends_nothing(client, server):
    await client.request(5, "acks0")
    await server.acks0_done.wait()
    # Had acks0 answered, its response would be queued before this one.
    assert (await client.call(6, "echo"))["id"] == 6


async def test_handler_bug_is_unknown_server_error_and_logged(client, caplog):
    with caplog.at_level(logging.ERROR, logger="raftlog.node.server"):
        response = await client.call(9, "crash")
    assert response["id"] == 9 and response["error"]["code"] == "UNKNOWN_SERVER_ERROR"
    failed = [r for r in caplog.records if r.getMessage() == "handler_failed"]
    assert failed and failed[0].exc_info is not None  # with its traceback
    assert (await client.call(10, "echo"))["ok"] is True


async def test_inline_handler_answers_in_the_reader_and_waits_in_a_task(client, server, caplog):
    assert (await client.call(1, "inline")) == {"id": 1, "ok": True, "answered": "inline"}
    assert (await client.call(2, "inline", then="echo", x=1)) == {"id": 2, "ok": True, "then": "echo", "x": 1}
    reader = server.inline_tasks[0]
    assert all(t is reader for t in server.inline_tasks)  # the connection's reader each time
    assert reader not in server.reader_tasks  # a Later runs in a request task of its own
    # Errors are answered as any handler's.
    error = (await client.call(3, "inline", then="raise"))["error"]
    assert (error["code"], error["leader_id"]) == ("NOT_LEADER", 3)
    with caplog.at_level(logging.ERROR, logger="raftlog.node.server"):
        assert (await client.call(4, "inline", then="crash"))["error"]["code"] == "UNKNOWN_SERVER_ERROR"
    assert any(r.getMessage() == "handler_failed" for r in caplog.records)
    # A Later waits under the request's deadline, and other requests overtake it.
    await client.request(5, "inline", then="hang", timeout_ms=300)
    await client.request(6, "inline", then="gated", gate="g")
    await server.started["g"].wait()
    assert (await client.call(7, "inline"))["id"] == 7
    response = await client.receive()
    assert response["id"] == 5 and response["error"]["code"] == "REQUEST_TIMED_OUT"
    server.gates["g"].set()
    assert await client.receive() == {"id": 6, "ok": True, "gate": "g"}
    counter = server.registry.counter("raftlog_requests_total", "", ("listener", "op", "code"))
    assert counter.value(listener="client", op="inline", code="OK") == 4
    assert counter.value(listener="client", op="inline", code="REQUEST_TIMED_OUT") == 1


async def test_raftlog_error_carries_details(client):
    error = (await client.call(11, "not_leader"))["error"]
    assert error["code"] == "NOT_LEADER"
    assert (error["leader_id"], error["leader"]) == (2, "127.0.0.1:9192")


async def test_package_errors_answer_with_their_registry_code(client):
    error = (await client.call(12, "foreign"))["error"]
    assert error == {"code": "CORRUPT_MESSAGE", "message": "bad CRC in batch at offset 0"}


async def test_unencodable_and_oversized_results(client):
    assert (await client.call(12, "unencodable"))["error"]["code"] == "UNKNOWN_SERVER_ERROR"
    response = await client.call(13, "huge")
    assert response["id"] == 13 and response["error"]["code"] == "MESSAGE_TOO_LARGE"


@pytest.mark.parametrize(
    "message, answer_id, field",
    [
        ({"v": 1, "id": 4, "op": "nope"}, 4, "op"),
        ({"v": 1, "op": "echo"}, 0, "id"),
        ({"v": 1, "id": "4", "op": "echo"}, 0, "id"),
        ({"v": 2, "id": 4, "op": "echo"}, 4, "v"),
        ({"v": 1, "id": 4, "op": "echo", "timeout_ms": "soon"}, 4, "timeout_ms"),
        ({"v": 1, "id": 4, "op": "echo", "timeout_ms": -1}, 4, "timeout_ms"),
    ],
)
async def test_bad_requests_answered_and_connection_kept(client, message, answer_id, field):
    await client.stream.send_all(encode_frame(message))
    response = await client.receive()
    assert response["id"] == answer_id
    assert response["error"]["code"] == "INVALID_REQUEST"
    assert response["error"]["field"] == field
    assert (await client.call(50, "echo"))["ok"] is True


async def test_duplicate_in_flight_id_refused(client, server):
    await client.request(21, "gated", gate="dup")
    await server.started["dup"].wait()
    response = await client.call(21, "echo")
    assert response["error"]["code"] == "INVALID_REQUEST" and response["error"]["field"] == "id"
    server.gates["dup"].set()
    assert (await client.receive()) == {"id": 21, "ok": True, "gate": "dup"}


async def test_oversized_frame_gets_error_then_close(client, server):
    await client.stream.send_all(struct.pack(">I", (1 << 20) + 1) + b"\x00" * 1000)
    response = await client.receive()
    assert response["id"] == 0 and response["error"]["code"] == "MESSAGE_TOO_LARGE"
    assert await client.receive() is None  # closed
    fresh = await Client.connect(server.port)
    async with fresh.stream:
        assert (await fresh.call(1, "echo"))["ok"] is True


@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff", cbor2.dumps([1, 2, 3]), cbor2.dumps({"a": cbor2.CBORTag(35, "x")})],
    ids=["malformed", "not-a-map", "tagged"],
)
async def test_undecodable_frame_gets_error_then_close(client, server, body):
    await client.request(1, "gated", gate="never")  # in flight when the garbage lands
    await server.started["never"].wait()
    await client.stream.send_all(struct.pack(">I", len(body)) + body)
    response = await client.receive()
    assert response["id"] == 0 and response["error"]["code"] == "INVALID_REQUEST"
    assert await client.receive() is None
    fresh = await Client.connect(server.port)
    async with fresh.stream:
        assert (await fresh.call(1, "echo"))["ok"] is True


async def test_backpressure_stops_reading_when_in_flight_is_full(nursery):
    harness = await start(nursery, max_in_flight=2)
    client = await Client.connect(harness.port)
    async with client.stream:
        await client.request(1, "gated", gate="a")
        await client.request(2, "gated", gate="b")
        await client.request(3, "echo")
        await harness.started["a"].wait()
        await harness.started["b"].wait()
        harness.gates["a"].set()
        # The echo cannot start until request 1 frees its slot, so it answers after it.
        assert (await client.receive())["id"] == 1
        assert (await client.receive())["id"] == 3
        harness.gates["b"].set()
        assert (await client.receive())["id"] == 2


async def test_connection_limit_refuses_new_connections_at_once(nursery):
    harness = await start(nursery, max_connections=1)
    first = await Client.connect(harness.port)
    assert (await first.call(1, "echo"))["ok"] is True
    second = await Client.connect(harness.port)  # the kernel accepts; the server closes it
    async with second.stream:
        assert await second.receive() is None  # closed unanswered, not left in the backlog
    await first.aclose()
    with trio.fail_after(10):  # the slot is free again once the server has seen `first` go
        while True:
            third = await Client.connect(harness.port)
            async with third.stream:
                try:
                    await third.request(3, "echo")
                    answer = await third.receive()
                except trio.BrokenResourceError:
                    answer = None
            if answer is not None:
                break
    assert answer["ok"] is True


async def test_half_closed_client_still_gets_answers(client):
    await client.request(31, "echo", x=1)
    await client.stream.send_eof()
    assert (await client.receive())["id"] == 31
    assert await client.receive() is None


async def test_truncated_frame_then_eof_closes_quietly(client, server):
    frame = encode_frame({"v": 1, "id": 1, "op": "echo"})
    await client.stream.send_all(frame[:-2])
    await client.stream.send_eof()
    assert await client.receive() is None
    fresh = await Client.connect(server.port)
    async with fresh.stream:
        assert (await fresh.call(1, "echo"))["ok"] is True


async def test_an_inline_part_that_waits_answers_request_timed_out_at_its_deadline(client, server):
    """Issue 39: produce appends in the reader; an append stuck on its replica's lock is
    answered REQUEST_TIMED_OUT at the request's deadline, and the requests behind it on the
    connection are read and answered, in order, once it is."""
    await server.lock.acquire()
    await client.stream.send_all(b"".join(
        encode_frame({"v": 1, "id": 10 + k, "op": "inline_locked", "n": k, "timeout_ms": 100}) for k in range(3)))
    for k in range(3):
        response = await client.receive()
        assert response["id"] == 10 + k and response["error"]["code"] == "REQUEST_TIMED_OUT"
    server.lock.release()
    assert await client.call(20, "inline_locked", n=7) == {"id": 20, "ok": True, "n": 7}

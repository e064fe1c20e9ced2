"""Garbage on the wire (random bytes, truncated frames, non-map CBOR, wrong envelope types, unknown ops, huge announced lengths) gets well-formed answers or a close, and a fresh client is still answered after every example."""

import socket
import struct
import threading
from collections.abc import Iterator
from functools import partial

import cbor2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.base.protocol import FrameDecoder, encode_frame, parse_response
from raftlog.node.server import serve

Address = tuple[str, int]
SOCKET_TIMEOUT_S = 10.0
FUZZ = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
MAX_REQUEST_ID = (1 << 63) - 1


@pytest.fixture(scope="module")
def node_address() -> Iterator[Address]:
    """(host, port) of a listener to attack. Here: an in-process server on its own trio
    thread. Point this at a real node process to fuzz the whole node."""
    ready = threading.Event()
    box: dict = {}

    async def main() -> None:
        async def echo(request):
            return dict(request.fields)

        async with trio.open_nursery() as nursery:
            box["token"] = trio.lowlevel.current_trio_token()
            box["scope"] = nursery.cancel_scope
            box["port"] = await nursery.start(
                partial(
                    serve, {"echo": echo}, "127.0.0.1", 0,
                    max_frame_bytes=1 << 20, request_timeout_ms=5000,
                )  # fmt: skip
            )
            ready.set()

    thread = threading.Thread(target=trio.run, args=(main,), name="fuzz-server")
    thread.start()
    try:
        assert ready.wait(10), "server did not start"
        yield ("127.0.0.1", box["port"])
    finally:
        if "token" in box:
            trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)
        assert not thread.is_alive()


def exchange(address: Address, payload: bytes) -> list[dict]:
    """Send `payload`, half-close, and return every response frame until the server closes.
    Fails (socket timeout) if the server neither answers nor closes."""
    decoder = FrameDecoder(max_frame_bytes=(1 << 32) - 1)
    frames: list[dict] = []
    with socket.create_connection(address, timeout=SOCKET_TIMEOUT_S) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # The server may close mid-send after a fatal frame; read what it said first.
            assert payload, exc
        while True:
            try:
                data = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            if not data:
                break
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
    assert decoder.buffered_bytes == 0, "the server sent a partial frame"
    for frame in frames:
        parse_response(frame)  # raises unless it is a well-formed response
    return frames


def assert_alive(address: Address) -> None:
    # An op no node has: any raftlog listener must answer it with INVALID_REQUEST.
    probe = encode_frame({"v": 1, "id": 77, "op": "fuzz_probe"})
    frames = exchange(address, probe)
    assert len(frames) == 1
    assert frames[0]["id"] == 77 and frames[0]["error"]["code"] == "INVALID_REQUEST"


def body_frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def has_bignum(value) -> bool:
    if type(value) is int:
        return not -(2**64) <= value < 2**64
    if isinstance(value, dict):
        return any(has_bignum(v) for v in value.values())
    if isinstance(value, list):
        return any(has_bignum(v) for v in value)
    return False


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)  # fmt: skip
non_maps = plain.filter(lambda value: not isinstance(value, dict))
fuzz_ops = st.text(max_size=12).map(lambda text: "fuzz_" + text)


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(node_address, payload):
    exchange(node_address, payload)
    assert_alive(node_address)


@FUZZ
@given(st.binary(min_size=0, max_size=300), st.data())
def test_truncated_frames(node_address, blob, data):
    frame = encode_frame({"v": 1, "id": 5, "op": "fuzz_x", "blob": blob})
    cut = data.draw(st.integers(0, len(frame) - 1))
    assert exchange(node_address, frame[:cut]) == []
    assert_alive(node_address)


@FUZZ
@given(non_maps)
def test_cbor_that_is_not_a_map(node_address, value):
    frames = exchange(node_address, body_frame(cbor2.dumps(value)))
    assert len(frames) == 1
    assert frames[0]["id"] == 0 and frames[0]["error"]["code"] == "INVALID_REQUEST"
    assert_alive(node_address)


@FUZZ
@given(
    st.one_of(st.just(1), plain),
    st.one_of(st.integers(min_value=-5, max_value=2**64 - 1), plain),
    st.one_of(fuzz_ops, plain),
    st.dictionaries(st.text(max_size=5), plain, max_size=3),
)
def test_wrong_envelope_types(node_address, version, request_id, op, extra):
    message = {**extra, "v": version, "id": request_id, "op": op}
    frames = exchange(node_address, encode_frame(message))
    assert len(frames) == 1
    # Ints beyond 64 bits travel as CBOR bignum tags, which make the whole frame undecodable.
    decodable = not has_bignum(message)
    valid_id = decodable and type(request_id) is int and 0 < request_id <= MAX_REQUEST_ID
    assert frames[0]["id"] == (request_id if valid_id else 0)
    assert frames[0]["error"]["code"] == "INVALID_REQUEST"
    assert_alive(node_address)


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(1, 1000), fuzz_ops), min_size=1, max_size=5, unique_by=lambda t: t[0]
    )
)
def test_unknown_ops_answered_by_id(node_address, requests):
    payload = b"".join(encode_frame({"v": 1, "id": i, "op": op}) for i, op in requests)
    frames = exchange(node_address, payload)
    assert sorted(f["id"] for f in frames) == sorted(i for i, _ in requests)
    assert all(f["error"]["code"] == "INVALID_REQUEST" for f in frames)
    assert_alive(node_address)


@FUZZ
@given(st.integers(min_value=(1 << 30), max_value=(1 << 32) - 1), st.binary(max_size=200))
def test_huge_announced_length(node_address, length, tail):
    frames = exchange(node_address, struct.pack(">I", length) + tail)
    assert len(frames) == 1
    assert frames[0]["id"] == 0 and frames[0]["error"]["code"] == "MESSAGE_TOO_LARGE"
    assert_alive(node_address)


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=40), plain.map(cbor2.dumps)), max_size=4))
def test_valid_request_then_garbage(node_address, junk):
    # A request ahead of garbage is still answered (or the connection closes with an error):
    # either way every frame that comes back is well formed.
    payload = encode_frame({"v": 1, "id": 9, "op": "fuzz_first"}) + b"".join(
        body_frame(item) for item in junk
    )
    frames = exchange(node_address, payload)
    assert frames and frames[0]["id"] == 9
    assert_alive(node_address)

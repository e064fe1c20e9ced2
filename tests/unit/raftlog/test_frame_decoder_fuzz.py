"""Fuzzing the native frame decoder (raftlog/base/protocol.py FrameDecoder): any bytes, split anywhere, give plain maps, InvalidRequestError (that frame dropped, decoding goes on) or MessageTooLargeError (and the same on every later call), never another exception; it never holds more than one frame's worth of bytes beyond what was just fed, and decoding a frame allocates a bounded multiple of its size. A short derandomized run here; the long one under `slow` (the socket-level fuzz of a server and a node: test_server_fuzz.py, test_node_fuzz.py)."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.base.errors import InvalidRequestError, MessageTooLargeError
from raftlog.base.protocol import FrameDecoder, encode_frame

SHORT = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])
LONG = settings(SHORT, max_examples=10_000)
MAX_FRAME_BYTES = 4096
ALLOC_PER_FRAME_BYTE = 64  # see test_kafka_decoder_fuzz.py: a multiple of the frame, never what it announces
# cbor2 reads a long byte or text string in 64 KiB steps: a 5-byte frame announcing 65537 bytes
# costs one step before it is found short (measured), whatever length it announces.
ALLOC_SLACK_BYTES = 128 << 10

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12) | st.binary(max_size=24),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
# CBOR heads that announce much more than follows: arrays, maps, byte and text strings of 2^32-1.
HUGE_HEADS = [b"\x9b" + b"\xff" * 8, b"\x9a\xff\xff\xff\xff", b"\xba\xff\xff\xff\xff", b"\x5a\xff\xff\xff\xff",
              b"\x7a\x00\xff\xff\xff", b"\xc1\x1a\x00\x00\x00\x01", b"\x9f\x9f\x9f", b"\xa1" * 64]


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


frames = st.one_of(
    st.builds(lambda m, v: encode_frame({**m, "v": 1, "id": 1, "op": "x", "f": v}), st.dictionaries(
        st.text(max_size=6), plain, max_size=3), plain),
    st.builds(framed, st.binary(max_size=200)),
    st.builds(lambda head, tail: framed(head + tail), st.sampled_from(HUGE_HEADS), st.binary(max_size=40)),
    st.builds(lambda n: struct.pack(">I", n), st.sampled_from([MAX_FRAME_BYTES + 1, 1 << 31, (1 << 32) - 1, 0])),
    st.binary(max_size=64),  # garbage between frames
)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """Some frames back to back, cut into chunks at arbitrary places."""
    data = b"".join(draw(st.lists(frames, min_size=1, max_size=6)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def decode_stream(chunks: list[bytes]) -> None:
    """The property, fed the way the server feeds it: drain after every chunk."""
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    for chunk in chunks:
        decoder.feed(chunk)
        assert decoder.buffered_bytes <= MAX_FRAME_BYTES + 4 + len(chunk)
        while True:
            held = decoder.buffered_bytes
            tracemalloc.reset_peak()
            base, _ = tracemalloc.get_traced_memory()
            try:
                frame = decoder.next_frame()
            except MessageTooLargeError as exc:
                with pytest.raises(MessageTooLargeError) as again:
                    decoder.next_frame()
                assert again.value is exc  # the stream is lost: the same error every time
                return
            except InvalidRequestError:
                assert decoder.buffered_bytes < held  # that frame was consumed
                continue
            finally:
                _, peak = tracemalloc.get_traced_memory()
                assert peak - base <= ALLOC_PER_FRAME_BYTE * held + ALLOC_SLACK_BYTES, (peak - base, held)
            if frame is None:
                break
            assert type(frame) is dict


@pytest.fixture(scope="module", autouse=True)
def traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


@SHORT
@given(streams())
def test_frame_decoder_fuzz(chunks):
    decode_stream(chunks)


@pytest.mark.slow
@LONG
@given(streams())
def test_frame_decoder_fuzz_long(chunks):
    decode_stream(chunks)

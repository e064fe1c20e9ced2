"""Fuzzing the Kafka request decoder (raftlog/node/kafka/codec.py): arbitrary bytes, bodies of random bytes under a valid header, and mutated valid requests of every API key and version decode or raise CodecError, nothing else, and decoding never allocates more than a bounded multiple of the frame. A short derandomized run here; the long one under `slow`."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import JoinGroupRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest

from raftlog.node.kafka.codec import REQUEST_CLASSES, CodecError, decode_body, decode_header

# The short run is part of scripts/test (seconds); the long one, `scripts/test --slow`. Both are
# derandomized: CI tests the same examples every time (a failure prints its input).
SHORT = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])
LONG = settings(SHORT, max_examples=20_000)
# What decoding a frame may allocate at its peak: Python objects cost more than their wire
# bytes, so the bound is a multiple of the frame, never a length the frame merely announces
# (measured: at most ~4 KiB for frames up to 400 bytes, ~150x for the smallest). The first
# decode of each API version also compiles its decoder (up to ~600 KiB, once per version,
# bounded by the schemas, not by what a client sends): the fixture does that before tracing.
ALLOC_PER_FRAME_BYTE = 64
ALLOC_SLACK_BYTES = 64 << 10


def _encoded(message: Any, version: int) -> bytes:
    message.with_header(correlation_id=7, client_id="fuzz")
    return bytes(message.encode(version=version, header=True, framed=False))


def _valid_requests() -> list[bytes]:
    """Every API key and version with its schema's default values, and a few with data."""
    out = []
    for cls in REQUEST_CLASSES.values():
        lo, hi = cls.valid_versions
        out.extend(_encoded(cls[v](), v) for v in range(lo, hi + 1))
    T = ProduceRequest.TopicProduceData
    F = FetchRequest.FetchTopic
    for v in (3, 9, 13):
        out.append(_encoded(ProduceRequest[v](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
            T(name="t", partition_data=[T.PartitionProduceData(index=i, records=b"r" * 80) for i in range(3)])]), v))
    for v in (4, 12, 16):
        out.append(_encoded(FetchRequest[v](
            max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=[F(topic="t", partitions=[F.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(3)])],
            forgotten_topics_data=[], rack_id=""), v))
    for v in (4, 12):
        out.append(_encoded(MetadataRequest[v](topics=[MetadataRequest.MetadataRequestTopic(name=f"t{i}")
                                                       for i in range(4)], allow_auto_topic_creation=False), v))
    P = JoinGroupRequest.JoinGroupRequestProtocol
    for v in (5, 9):
        out.append(_encoded(JoinGroupRequest[v](
            group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            group_instance_id=None, protocol_type="consumer",
            protocols=[P(name="range", metadata=b"m" * 20), P(name="rr", metadata=b"")]), v))
    return out


VALID = _valid_requests()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid request with 1-4 mutations: a byte set, a length-like window set to a huge,
    negative or -1 value (int32, int16 or a varint run), a cut, or bytes inserted."""
    frame = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(frame) - 1)))
        kind = draw(st.sampled_from(["byte", "int32", "int16", "varint", "cut", "insert"]))
        if kind == "byte":
            frame[at:at + 1] = bytes([draw(st.integers(0, 255))])
        elif kind == "int32":
            frame[at:at + 4] = draw(st.sampled_from([0x7FFFFFFF, -1, -2, 1 << 20, 0x80000000 - 2])).to_bytes(
                4, "big", signed=True)
        elif kind == "int16":
            frame[at:at + 2] = draw(st.sampled_from([0x7FFF, -1, -2])).to_bytes(2, "big", signed=True)
        elif kind == "varint":
            frame[at:at + 1] = b"\xff" * draw(st.integers(1, 6)) + b"\x0f"
        elif kind == "cut":
            del frame[at:]
        else:
            frame[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(frame)


def header_then_noise() -> st.SearchStrategy[bytes]:
    """A header naming a real API key and version, then random body bytes."""
    def build(key: int, version_at: float, correlation_id: int, body: bytes) -> bytes:
        lo, hi = REQUEST_CLASSES[key].valid_versions
        version = lo + int(version_at * (hi - lo + 1)) if hi > lo else lo
        return key.to_bytes(2, "big") + version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big", signed=True) \
            + b"\x00\x04fuzz" + body

    return st.builds(build, st.sampled_from(sorted(REQUEST_CLASSES)), st.floats(0, 0.999),
                     st.integers(-(1 << 31), (1 << 31) - 1), st.binary(max_size=300))


FRAMES = st.one_of(st.binary(max_size=400), header_then_noise(), mutated())


def decodes_or_codec_error(frame: bytes) -> None:
    """The property: CodecError or a message, within the allocation bound."""
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    try:
        header, offset = decode_header(frame)
        decode_body(header, frame, offset)
    except CodecError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    bound = ALLOC_PER_FRAME_BYTE * len(frame) + ALLOC_SLACK_BYTES
    assert peak - base <= bound, f"decoding {len(frame)} bytes allocated {peak - base} bytes"


@pytest.fixture(scope="module", autouse=True)
def traced():
    for frame in VALID:  # every decoder compiled before the allocations are traced
        header, offset = decode_header(frame)
        decode_body(header, frame, offset)
    tracemalloc.start()
    yield
    tracemalloc.stop()


def test_valid_requests_decode():
    for frame in VALID:
        header, offset = decode_header(frame)
        assert decode_body(header, frame, offset) is not None


@SHORT
@given(FRAMES)
def test_decoder_fuzz(frame):
    decodes_or_codec_error(frame)


@pytest.mark.slow
@LONG
@given(FRAMES)
def test_decoder_fuzz_long(frame):
    decodes_or_codec_error(frame)

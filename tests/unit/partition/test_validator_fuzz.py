"""Fuzzing the produce validator (partition/validator.py) with mutations of valid batches (bytes of the records changed, inserted or cut, header fields set to other values, the CRC made right again or not): it raises only its registry errors, and whatever it accepts decodes back to exactly record_count records per batch at offsets base + 0, 1, ... with the header's max timestamp the largest record timestamp. A short derandomized run here; the long one under `slow`."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partition.batch import BatchBuilder, Compression, decode_batches, iter_headers
from partition.compression import available
from partition.errors import CorruptRecordError
from partition.validator import validate_client_records
from raftlog.base.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedCompressionTypeError,
)

_spec = importlib.util.spec_from_file_location("batch_forge", Path(__file__).with_name("batch_forge.py"))
forge = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("batch_forge", forge)
_spec.loader.exec_module(forge)

SHORT = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LONG = settings(SHORT, max_examples=20_000)
REFUSALS = (InvalidRecordError, CorruptRecordError, MessageTooLargeError, InvalidTimestampError,
            TransactionalIdAuthorizationFailedError, UnsupportedCompressionTypeError)
# Uncompressed thrice as often: a mutated compressed stream mostly fails to decompress, and
# the record walk is what the fuzzing is for.
CODECS = [Compression.NONE] * 3 + [c for c in Compression if available(c)]
# Header fields (offset in the batch, struct format) a mutation may set.
FIELDS = [(23, ">i"), (57, ">i"), (21, ">h"), (35, ">q"), (27, ">q"), (43, ">q"), (51, ">h"), (53, ">i")]
INTERESTING = [0, 1, -1, 2, -2, 127, 128, 0x7FFF, 0x7FFFFFFF, 1 << 20, -(1 << 31)]

records = st.lists(st.tuples(
    st.none() | st.binary(max_size=12),  # key
    st.none() | st.binary(max_size=40),  # value
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2),  # headers
    st.integers(-(1 << 40), 1 << 40),  # timestamp
), min_size=1, max_size=12)


@st.composite
def uniform_records(draw: st.DrawFn) -> list:
    """What producers mostly send, and what the validator checks by strided runs: many
    records of one shape (key and value lengths), timestamps a few ms apart."""
    n = draw(st.integers(1, 400))
    key_len = draw(st.none() | st.integers(0, 20))
    value_len = draw(st.integers(0, 300))
    start = draw(st.integers(0, 1 << 41))
    steps = draw(st.sampled_from([0, 1, 3, 40]))
    return [(None if key_len is None else bytes([j % 251]) * key_len, bytes([j % 7]) * value_len, [],
             start + j * steps) for j in range(n)]


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        b = BatchBuilder(compression=draw(st.sampled_from(CODECS)))
        for key, value, headers, ts in draw(records | uniform_records()):
            b.append(value, key, headers, timestamp_ms=ts)
        if draw(st.booleans()):
            b.set_producer_state(draw(st.integers(0, 1 << 40)), draw(st.integers(0, 10)),
                                 draw(st.integers(0, (1 << 31) - 1)))
        out += b.build()
    return out


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(valid_batches()))
    batches = [pos for pos, _ in iter_headers(bytes(raw))]
    pos = draw(st.sampled_from(batches))
    end = pos + 12 + struct.unpack_from(">i", raw, pos + 8)[0]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["byte", "field", "insert", "cut"]))
        at = draw(st.integers(pos + 61, max(pos + 61, end - 1)))
        if kind == "byte" and at < end:
            raw[at] = draw(st.integers(0, 255))
        elif kind == "field":
            offset, fmt = draw(st.sampled_from(FIELDS))
            size = struct.calcsize(fmt)
            value = draw(st.sampled_from(INTERESTING))
            raw[pos + offset:pos + offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "big")
        elif kind == "insert":
            extra = draw(st.binary(min_size=1, max_size=8))
            raw[at:at] = extra
            end += len(extra)
        elif end - at > 0:
            n = draw(st.integers(1, end - at))
            del raw[at:at + n]
            end -= n
    struct.pack_into(">i", raw, pos + 8, end - pos - 12)
    return forge.recrc(raw, pos) if draw(st.integers(0, 9)) else bytes(raw)  # mostly past the CRC


def accepted_means_decodable(raw: bytes) -> None:
    try:
        out = validate_client_records(raw, max_message_bytes=1 << 20, max_decompressed_bytes=1 << 20)
    except REFUSALS:
        return
    batches = list(decode_batches(bytes(out)))
    for header, recs in batches:
        assert header.record_count == len(recs) == header.last_offset_delta + 1
        assert [r.offset for r in recs] == [header.base_offset + i for i in range(len(recs))]
        assert header.max_timestamp == max(r.timestamp for r in recs)
        assert not header.is_control and not header.is_transactional
    assert len(out) == len(raw)


@SHORT
@given(valid_batches())
def test_valid_batches_are_accepted_as_they_are(raw):
    assert validate_client_records(raw, max_message_bytes=1 << 20, max_decompressed_bytes=1 << 20) is raw


@SHORT
@given(mutated_batches())
def test_validator_fuzz(raw):
    accepted_means_decodable(raw)


@pytest.mark.slow
@LONG
@given(mutated_batches())
def test_validator_fuzz_long(raw):
    accepted_means_decodable(raw)

"""Fast paths agree with the reference codec: decode_batches_into vs decode_batch, append_value vs append."""

import struct
from typing import NamedTuple

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD,
    BatchBuilder,
    Compression,
    TimestampType,
    control_batch,
    decode_batch,
    decode_batches_into,
)
from partition.errors import CorruptRecordError


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


def expected(raw: bytes, min_offset: int) -> list[Rec]:
    """What the reference decoder says the fast one must produce, batch by batch."""
    out: list[Rec] = []
    pos = 0
    while pos < len(raw):
        h, records = decode_batch(raw, pos)
        if not h.is_control:
            out.extend(Rec("t", 7, r.offset, r.timestamp, r.key, r.value, r.headers)
                       for r in records if r.offset >= min_offset)
        pos += h.size
    return out


headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2
)
record_st = st.tuples(
    # Values across the one-, two- and three-byte length varints.
    st.one_of(st.none(), st.binary(max_size=12), st.integers(60, 9000).map(lambda n: b"v" * n)),
    st.one_of(st.none(), st.binary(max_size=12)),  # key
    headers_st,
    st.one_of(st.integers(-100, 100), st.integers(-(2**40), 2**40)),  # timestamp
)


def build(records, *, base_offset=0, codec=Compression.NONE, log_append=False) -> bytes:
    b = BatchBuilder(base_offset=base_offset, compression=codec,
                     timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else 0)
    for value, key, headers, ts in records:
        b.append(value, key, headers, timestamp_ms=ts)
    return b.build()


@settings(max_examples=120, deadline=None)
@given(
    batches=st.lists(st.lists(record_st, min_size=1, max_size=8), min_size=1, max_size=3),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
    log_append=st.booleans(),
    control_at=st.integers(-1, 3),
    start=st.integers(0, 30),
)
def test_fast_decode_equals_reference(batches, codec, log_append, control_at, start):
    parts, offset = [], 0
    for i, records in enumerate(batches):
        if i == control_at:
            parts.append(control_batch(1, timestamp_ms=5, partition_leader_epoch=0,
                                       base_offset=offset))
            offset += 1
        parts.append(build(records, base_offset=offset, codec=codec, log_append=log_append))
        offset += len(records)
    raw = b"".join(parts)
    min_offset = min(start, offset)
    out: list[Rec] = [Rec("x", 0, -1, 0, None, None)]  # appended to, never replaced
    nxt = decode_batches_into(raw, out, "t", 7, Rec, min_offset)
    assert out[0].topic == "x"
    assert out[1:] == expected(raw, min_offset)
    assert all(type(r) is Rec for r in out)
    assert nxt == max(offset, min_offset)


def test_long_varints_and_offset_deltas_past_two_bytes():
    records = [(b"x" * 300_000, b"k" * 20_000, [("h", None)], -(2**62)),
               (None, None, [], 2**63 - 1 - 2**62)]
    records += [(b"", None, [], 0)] * 17_000  # offset deltas of three varint bytes
    raw = build(records, base_offset=10)
    out: list = []
    assert decode_batches_into(bytearray(raw), out, "t", 7, Rec, 0) == 10 + len(records)
    assert out == expected(raw, 0)


def test_batches_wholly_below_the_position_are_skipped():
    raw = build([(b"a", None, [], 1)] * 3) + build([(b"b", None, [], 1)] * 2, base_offset=3)
    out: list = []
    assert decode_batches_into(raw, out, "t", 7, Rec, 4) == 5
    assert [r.offset for r in out] == [4]
    assert decode_batches_into(raw, out, "t", 7, Rec, 9) == 9  # nothing past it: unchanged


def reseal(batch: bytearray) -> bytes:
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=5),
    data=st.data(),
)
def test_damaged_records_fail_alike_and_leave_no_partial_batch(records, data):
    good = build([(b"ok", None, [], 0)])
    bad = bytearray(build(records, base_offset=1))
    i = data.draw(st.integers(HEADER_BYTES, len(bad) - 1))
    bad[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del bad[data.draw(st.integers(HEADER_BYTES, len(bad) - 1)):]  # also truncate
    raw = good + reseal(bad)
    try:
        want = expected(raw, 0)
    except CorruptRecordError:
        want = None
    out: list = []
    if want is None:
        with pytest.raises(CorruptRecordError):
            decode_batches_into(raw, out, "t", 7, Rec, 0)
        assert out == expected(good, 0)  # the good batch, none of the bad one
    else:
        decode_batches_into(raw, out, "t", 7, Rec, 0)
        assert out == want


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=10),
                            st.integers(60, 9000).map(lambda n: b"w" * n)),
                  st.one_of(st.integers(-100, 100), st.integers(-(2**62), 2**62))),
        min_size=1, max_size=10,
    ),
)
def test_append_value_writes_what_append_writes(values):
    fast, ref = BatchBuilder(), BatchBuilder()
    for value, ts in values:
        try:
            want = ref.append(value, timestamp_ms=ts)
        except ValueError:
            with pytest.raises(ValueError):
                fast.append_value(value, ts)
            continue
        assert fast.append_value(bytearray(value) if value else value, ts) == want
    assert fast.size_bytes == ref.size_bytes
    if ref.record_count:
        assert fast.build() == ref.build()


def test_append_value_refuses_a_timestamp_outside_int64():
    b = BatchBuilder()
    with pytest.raises(ValueError):
        b.append_value(b"x", 2**63)
    b.append_value(b"x", 2**63 - 1)
    with pytest.raises(ValueError):
        b.append_value(b"x", 2**63 + 1)  # delta 2 fits the table; the timestamp does not
    assert b.record_count == 1

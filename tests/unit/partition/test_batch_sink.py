"""decode_record_rows is the one record walk: its rows are decode_batch's records, and decode_batch, decode_batches_into and the Arrow builder fail alike on any damaged byte."""

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD,
    BatchBuilder,
    TimestampType,
    decode_batch,
    decode_batches_into,
    decode_record_rows,
    read_header,
)
from partition.errors import CorruptRecordError
from raftlog.client.consumer import ConsumerRecord  # the record type the consumer passes in

maybe_bytes = st.one_of(st.none(), st.binary(max_size=20), st.integers(60, 9000).map(b"v".__mul__))
header_st = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5)))
record_st = st.tuples(maybe_bytes, maybe_bytes, st.lists(header_st, max_size=2),
                      st.integers(-(2**40), 2**40))


def build(records, *, base_offset=0, log_append=False) -> bytes:
    b = BatchBuilder(base_offset=base_offset,
                     timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else 0)
    for key, value, headers, ts in records:
        b.append(value, key, headers, timestamp_ms=ts)
    return b.build()


@settings(max_examples=80, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=6), st.booleans(), st.binary(max_size=9),
       st.integers(0, 2**40))
def test_rows_are_decode_batch_records_wherever_the_section_sits(records, log_append, before,
                                                                base_offset):
    raw = build(records, base_offset=base_offset, log_append=log_append)
    h, recs = decode_batch(raw)
    want = [(None, None, r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]
    assert decode_record_rows(raw[HEADER_BYTES:], 0, len(raw) - HEADER_BYTES, h, 0) == want
    # The same section inside a larger buffer, read in place, topic and partition given.
    buf = before + raw + b"\x00trailing"
    start = len(before) + HEADER_BYTES
    rows = decode_record_rows(buf, start, len(before) + len(raw), h, len(before), "t", 3)
    assert rows == [("t", 3) + row[2:] for row in want]
    if log_append:
        assert {row[3] for row in want} == {h.max_timestamp}


def _reseal(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


def _outcome(call):
    try:
        return "ok", call()
    except CorruptRecordError as exc:
        return "error", exc.message


def test_every_damaged_byte_fails_alike_in_all_three_decoders():
    pa = pytest.importorskip("pyarrow")
    from spark_source.arrow import ColumnBuilder

    good = build([(b"k%d" % i if i % 2 else None, b"x" * (i * 9), [("h", b"y")] if i == 3 else [],
                   1000 + i * 50) for i in range(6)], base_offset=40)
    prefix = build([(None, b"first", [], 1)], base_offset=39)  # bad bytes are not at 0
    errors = 0
    for where in range(HEADER_BYTES, len(good)):
        bad = bytearray(good)
        bad[where] ^= 0x41
        buf = prefix + _reseal(bad)
        pos = len(prefix)

        def rows_of_decode_batch():
            return [(r.offset, r.timestamp, r.key, r.value, r.headers)
                    for r in decode_batch(buf, pos)[1]]

        def rows_of_consumer():
            out: list = []
            decode_batches_into(buf, out, "t", 0, ConsumerRecord, 40)
            return [tuple(r)[2:] for r in out]

        def rows_of_arrow():
            cb = ColumnBuilder("t", 0, include_headers=True)
            cb.add(buf, 40, 1 << 40)
            rb = cb.take()
            ts_us = rb.column("timestamp").cast(pa.int64()).to_pylist()
            return [(o, t // 1000, k, v, tuple((hh["key"], hh["value"]) for hh in hs))
                    for o, t, k, v, hs in zip(rb.column("offset").to_pylist(), ts_us, *(
                        rb.column(c).to_pylist() for c in ("key", "value", "headers")))]

        results = [_outcome(f) for f in (rows_of_decode_batch, rows_of_consumer, rows_of_arrow)]
        assert results[1] == results[2] == results[0], where
        if results[0][0] == "error":
            errors += 1
            assert results[0][1].startswith(f"batch at position {pos}: ")
    assert errors > 20  # the damage was seen, not only carried into values


def test_arrow_refuses_offsets_past_int64_naming_the_record():
    pytest.importorskip("pyarrow")
    from spark_source.arrow import ColumnBuilder

    top = (1 << 63) - 2
    raw = build([(None, b"v", [], 5)] * 3, base_offset=top)  # offsets top, top+1, top+2
    h = read_header(raw)
    rows = decode_record_rows(raw, HEADER_BYTES, LOG_OVERHEAD + h.batch_length, h, 0)
    assert [r[2] for r in rows] == [top, top + 1, top + 2]  # Python ints: no limit here
    cb = ColumnBuilder("t", 0)
    with pytest.raises(CorruptRecordError, match=r"record 2: offset or timestamp outside int64"):
        cb.add(raw, 0, 1 << 64)
    assert len(cb) == 0  # no half batch


def test_count_disagreeing_with_the_bytes_is_named():
    raw = bytearray(build([(None, b"v", [], 1)] * 2))
    struct.pack_into(">i", raw, 57, 3)  # one record more than the bytes hold
    h = read_header(raw)
    with pytest.raises(CorruptRecordError, match=r"records end inside record 2 of 3"):
        decode_record_rows(bytes(raw), HEADER_BYTES, len(raw), h, 0)
    struct.pack_into(">i", raw, 57, 1)  # one fewer: bytes left over
    h = read_header(raw)
    with pytest.raises(CorruptRecordError, match=r"bytes left after the 1 records"):
        decode_record_rows(bytes(raw), HEADER_BYTES, len(raw), h, 0)

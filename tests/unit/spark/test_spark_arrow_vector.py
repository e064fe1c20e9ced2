"""ColumnBuilder's vectorised whole-batch path gives exactly the rows of the per-record loop (keys/values null, empty, 1- and 2-byte lengths, deltas past 63, LogAppendTime) and leaves rare shapes and bad bytes to the loop, which raises the same errors."""

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spark_source.arrow as arrow_mod
from partition.batch import BatchBuilder, Compression, TimestampType
from partition.errors import CorruptRecordError
from spark_source.arrow import ColumnBuilder

pytest.importorskip("numpy")

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200), st.just(b"v" * 9000))
record = st.tuples(maybe_bytes, maybe_bytes, st.booleans(), st.integers(-6000, 6000))


def build(recs, base=0, log_append=False, compression=Compression.NONE):
    b = BatchBuilder(base_offset=base, compression=compression,
                     timestamp_type=TimestampType.LOG_APPEND_TIME if log_append
                     else TimestampType.CREATE_TIME)
    for key, value, with_header, ts in recs:
        b.append(value, key, [("h", b"x")] if with_header else None,
                 timestamp_ms=1_700_000_000_000 + ts)
    return b.build()


def decode(buf, vectorised, start=0, end=1 << 40):
    # vectorised: every batch the vector path can take goes there, however small (in use,
    # only batches of _VECTOR_MIN_RECORDS or more do); else numpy is hidden.
    old, old_min = arrow_mod._np, arrow_mod._VECTOR_MIN_RECORDS
    if vectorised:
        arrow_mod._VECTOR_MIN_RECORDS = 1
    else:
        arrow_mod._np = None
    try:
        cb = ColumnBuilder("t", 1)
        cb.add(buf, start, end)
        return cb.take().to_pylist()
    finally:
        arrow_mod._np, arrow_mod._VECTOR_MIN_RECORDS = old, old_min


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=90), min_size=1, max_size=3),
       st.booleans(), st.booleans())
def test_vectorised_rows_equal_the_loop_rows(batches, log_append, plain_only):
    if plain_only:  # the shape the vectorised path takes: no headers, lengths < 8192
        batches = [[(k if k is None or len(k) < 8000 else k[:50], v if v is None or len(v) < 8000
                     else v[:70], False, ts) for k, v, _h, ts in recs] for recs in batches]
    parts, base = [], 0
    for recs in batches:
        parts.append(build(recs, base, log_append))
        base += len(recs) + 3  # gaps between batches, as after compaction
    buf = b"".join(parts)
    assert decode(buf, True) == decode(buf, False)
    assert decode(buf, True, 5, base - 4) == decode(buf, False, 5, base - 4)


def test_a_large_plain_batch_takes_the_vectorised_path(monkeypatch):
    # 9000 records: offset deltas past 8191 take three varint bytes.
    recs = [(None if i % 7 == 0 else b"k%d" % i, b"x" * (i % 150), False, i * 3)
            for i in range(9000)]
    buf = build(recs, 10, compression=Compression.GZIP)
    calls = []
    real = arrow_mod._vector_decode
    monkeypatch.setattr(arrow_mod, "_vector_decode",
                        lambda data, h: calls.append(real(data, h)) or calls[-1])
    rows = decode(buf, True)
    assert calls and calls[0] is not None
    assert [r["offset"] for r in rows] == list(range(10, 9010))
    assert rows[0]["key"] is None and rows[1]["key"] == b"k1"
    assert rows == decode(buf, False)


def _recrc(buf: bytearray) -> None:
    struct.pack_into(">I", buf, 17, google_crc32c.value(bytes(buf[21:])))


def test_any_damaged_byte_gives_the_loops_answer():
    """Flip every byte of the records section (CRC fixed up, so only the record checks can
    notice): the vectorised decoder raises the loop's error, or returns the loop's rows."""
    good = build([(None if i % 5 == 0 else b"k%d" % i, b"x" * (i * 7), False, i * 40)
                  for i in range(20)])
    raised = 0
    for where in range(61, len(good)):
        buf = bytearray(good)
        buf[where] ^= 0x41
        _recrc(buf)
        try:
            expected = decode(bytes(buf), False)
        except CorruptRecordError as exc:
            raised += 1
            with pytest.raises(CorruptRecordError) as vector_error:
                decode(bytes(buf), True)
            assert str(vector_error.value) == str(exc)
        else:
            assert decode(bytes(buf), True) == expected
    assert raised > 30  # the damage was seen, not only carried into values

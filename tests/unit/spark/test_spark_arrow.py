"""ColumnBuilder decodes RecordBatch v2 into Arrow columns exactly as partition.batch.decode_batches does (trimmed to [start, end), control batches skipped), in the Kafka source's schema, and rejects bad bytes without leaving half a batch."""

import struct

import google_crc32c
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.batch import BatchBuilder, Compression, TimestampType, control_batch, decode_batches
from partition.errors import CorruptRecordError
from spark_source.arrow import ColumnBuilder, arrow_schema

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=8), maybe_bytes)
record = st.tuples(maybe_bytes, maybe_bytes, st.lists(header, max_size=3),
                   st.integers(-(1 << 40), 1 << 40))


def build_log(batches, compression=Compression.NONE, log_append=False):
    """Concatenated batches with contiguous offsets; returns (bytes, next offset)."""
    out, base = [], 0
    for recs in batches:
        b = BatchBuilder(base_offset=base, compression=compression,
                         timestamp_type=TimestampType.LOG_APPEND_TIME if log_append
                         else TimestampType.CREATE_TIME)
        for key, value, headers, ts in recs:
            b.append(value, key, headers, timestamp_ms=1_700_000_000_000 + ts)
        out.append(b.build())
        base += len(recs)
    return b"".join(out), base


def reference(buf, start, end):
    rows = []
    for h, recs in decode_batches(buf):
        if h.is_control:
            continue
        for r in recs:
            if start <= r.offset < end:
                rows.append((r.key, r.value, r.offset, r.timestamp * 1000, int(h.timestamp_type),
                             [{"key": k, "value": v} for k, v in r.headers]))
    return rows


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=6), min_size=1, max_size=5),
       st.sampled_from([Compression.NONE, Compression.GZIP]), st.booleans(), st.data())
def test_matches_decode_batches_on_any_range(batches, compression, log_append, data):
    buf, n = build_log(batches, compression, log_append)
    start = data.draw(st.integers(0, n))
    end = data.draw(st.integers(start, n + 2))
    cb = ColumnBuilder("t", 3, include_headers=True)
    nxt = cb.add(buf, start, end)
    assert nxt >= min(end, n)
    rb = cb.take()
    assert rb.schema == arrow_schema(True)
    got = list(zip(rb.column("key").to_pylist(), rb.column("value").to_pylist(),
                   rb.column("offset").to_pylist(),
                   rb.column("timestamp").cast(pa.int64()).to_pylist(),
                   rb.column("timestampType").to_pylist(), rb.column("headers").to_pylist()))
    assert got == reference(buf, start, end)
    assert set(rb.column("topic").to_pylist()) <= {"t"}
    assert set(rb.column("partition").to_pylist()) <= {3}
    assert len(cb) == 0  # take() empties the builder


def test_control_batches_are_skipped_but_advance_the_position():
    data, n = build_log([[(b"k", b"v", [], 0)] * 3])
    ctrl = control_batch(2, timestamp_ms=1, partition_leader_epoch=1, base_offset=n)
    # Re-base the second data batch after the control record (offset n + 1).
    b = BatchBuilder(base_offset=n + 1)
    for _ in range(2):
        b.append(b"y", None, timestamp_ms=5)
    cb = ColumnBuilder("t", 0)
    assert cb.add(data + ctrl + b.build(), 0, 100) == n + 3
    rb = cb.take()
    assert rb.column("offset").to_pylist() == [0, 1, 2, 4, 5]
    assert rb.num_columns == 7  # no headers column unless asked


def test_stops_at_end_even_if_more_batches_follow():
    buf, _ = build_log([[(b"k", b"v", [], i) for i in range(5)]] * 4)
    cb = ColumnBuilder("t", 0)
    nxt = cb.add(buf, 2, 7)
    assert cb.take().column("offset").to_pylist() == [2, 3, 4, 5, 6]
    assert nxt == 10  # the end of the batch holding offset 6: past end, the caller stops


def test_timestamps_are_utc_microseconds():
    buf, _ = build_log([[(None, b"v", [], 0)]])
    ts = ColumnBuilder("t", 0)
    ts.add(buf, 0, 1)
    col = ts.take().column("timestamp")
    assert col.type == pa.timestamp("us", tz="UTC")
    assert col.cast(pa.int64()).to_pylist() == [1_700_000_000_000_000]


def with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, google_crc32c.value(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize("damage", ["truncated header", "truncated body", "flipped byte",
                                    "count too high", "count too low"])
def test_corrupt_bytes_raise_and_leave_no_half_batch(damage):
    good, n = build_log([[(b"k", b"v" * 50, [], i) for i in range(4)]])
    second = BatchBuilder(base_offset=n)
    for i in range(4):
        second.append(b"w" * 50, b"k", timestamp_ms=i)
    bad = bytearray(second.build())
    count = struct.unpack_from(">i", bad, 57)[0]
    if damage == "truncated header":
        bad = bytes(bad[:20])
    elif damage == "truncated body":
        bad = bytes(bad[:70])
    elif damage == "flipped byte":
        bad[70] ^= 0xFF  # the CRC catches it
        bad = bytes(bad)
    else:  # a valid CRC over records that disagree with the header: fails mid-decode
        struct.pack_into(">i", bad, 57, count + (1 if damage == "count too high" else -1))
        bad = with_crc(bad)
    cb = ColumnBuilder("t", 0)
    with pytest.raises(CorruptRecordError):
        cb.add(good + bad, 0, 100)
    rb = cb.take()  # the good batch stays, whole
    assert rb.column("offset").to_pylist() == list(range(n))

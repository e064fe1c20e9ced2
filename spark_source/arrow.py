"""Fetched RecordBatch v2 bytes -> pyarrow RecordBatches in the Kafka source's schema, fast.

The hot path of `read()`. `partition.batch.decode_batch` makes one `Record` object per
record and the columns then need one pass each (~410 k rows/s for 100-byte records here);
`ColumnBuilder.add` instead decodes the records section straight into per-column lists and
`array`s (~0.9-1 M rows/s), and Arrow builds the binary columns from those lists in C.

Checks are decode_batch's: CRC-32C and header via `verify_crc`, every record length, key and
value lengths inside the record, offset deltas within [0, last_offset_delta], the record count,
no bytes left over; bad bytes raise `CorruptRecordError` (never IndexError). Compressed
batches are decompressed with the same bounded codecs.

Schema (Spark's Kafka source, same names and order):
    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int[, headers array<struct<key string, value binary>>]
`timestamp` is microseconds since the epoch, UTC (Arrow `timestamp("us", "UTC")`); Kafka's
milliseconds are multiplied by 1000 in Arrow. `timestampType` is 0 (CreateTime) or 1
(LogAppendTime, every record of the batch takes the batch's max timestamp).

decode=offsets gives OFFSETS_SCHEMA_DDL (built in source.py from these columns), the latest
value per (group, topic, partition) key of `__consumer_offsets`.

Whole uncompressed-or-decompressed batches of the common shape (no headers, short varints)
take a vectorised path (numpy, when installed): one tight loop finds record boundaries,
every field is read for all records at once, and binary columns are cut out of the batch
in C; ~3x the per-record loop. Anything else, and any bytes that break a check, go to the
per-record loop, which makes the same checks and names the corruption.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from partition.batch import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_BYTES,
    LOG_OVERHEAD,
    Header,
    verify_crc,
)
from partition.compression import Compression, decompress
from partition.errors import CorruptRecordError

try:  # numpy makes whole batches ~3x faster to decode; without it the per-record loop runs.
    import numpy as _np
except ImportError:  # pragma: no cover - numpy comes with pyarrow's usual installs
    _np = None

__all__ = [
    "SCHEMA_DDL",
    "HEADERS_DDL",
    "OFFSETS_SCHEMA_DDL",
    "arrow_schema",
    "schema_ddl",
    "ColumnBuilder",
]

SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
              "timestamp TIMESTAMP, timestampType INT")
HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
OFFSETS_SCHEMA_DDL = ("group STRING, topic STRING, partition INT, committed_offset BIGINT, "
                      "metadata STRING, commit_timestamp TIMESTAMP")

_TS = pa.timestamp("us", tz="UTC")
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_CONTROL_BIT = 0x20
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_VECTOR_MIN_RECORDS = 16  # below this the per-record loop is as fast


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (", " + HEADERS_DDL if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", _TS),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", _HEADER_TYPE))
    return pa.schema(fields)


def _varint(data: bytes, p: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint at p of up to max_bytes bytes -> (value, next p)."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes")


def _corrupt(pos: int, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {pos}: {what}")


class ColumnBuilder:
    """Accumulates the records of one topic-partition as columns; `take()` -> RecordBatch.

    Concurrency: not thread-safe; one per read task.
    """

    __slots__ = ("topic", "partition", "include_headers", "max_decompressed_bytes",
                 "keys", "values", "offsets", "timestamps", "types", "headers",
                 "chunks", "chunk_rows")

    def __init__(self, topic: str, partition: int, *, include_headers: bool = False,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.max_decompressed_bytes = max_decompressed_bytes
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets = array("q")
        self.timestamps = array("q")  # milliseconds
        self.types = array("i")
        self.headers: list[list[tuple[str, bytes | None]]] = []
        # Whole batches decoded by the vectorised path (in order, before the lists' rows).
        self.chunks: list[_Chunk] = []
        self.chunk_rows = 0

    def __len__(self) -> int:
        return self.chunk_rows + len(self.offsets)

    def _seal(self) -> None:
        """Move the rows of the per-record lists into a chunk (keeps the row order when a
        vectorised batch follows them)."""
        n = len(self.offsets)
        if not n:
            return
        self.chunks.append(_Chunk(
            pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self.types)]),
            self.headers if self.include_headers else None))
        self.chunk_rows += n
        self.keys, self.values, self.headers = [], [], []
        self.offsets, self.timestamps, self.types = array("q"), array("q"), array("i")

    def add(self, buf, start: int, end: int) -> int:
        """Decode every batch of a fetch answer `buf`, keeping records with offsets in
        [start, end) and skipping control batches. Returns the next offset to fetch: the end
        of the last batch seen (it may pass `end`; the caller stops there). Raises
        CorruptRecordError on bad bytes (records of the good batches before stay added)."""
        if type(buf) is not bytes:
            buf = bytes(buf)
        pos = 0
        n = len(buf)
        position = start
        while pos < n:
            h = verify_crc(buf, pos)
            nxt = h.next_offset
            if nxt > position and not (h.attributes & _CONTROL_BIT) and h.base_offset < end:
                before = len(self.offsets)
                try:
                    if h.base_offset >= start and h.last_offset < end:
                        self._decode(buf, pos, h, vectorised=not self.include_headers)
                    else:
                        self._decode_trimmed(buf, pos, h, start, end)
                except Exception:
                    self._truncate(before)  # no half batch: columns stay the same length
                    raise
            if nxt > position:
                position = nxt
            pos += LOG_OVERHEAD + h.batch_length
            if position >= end:
                break
        return position

    def _truncate(self, n: int) -> None:
        for col in (self.keys, self.values, self.offsets, self.timestamps, self.types):
            del col[n:]
        if self.include_headers:
            del self.headers[n:]

    def _decode_trimmed(self, buf: bytes, pos: int, h: Header, start: int, end: int) -> None:
        # A batch straddling the range (a fetch may begin mid-batch; a batch may run past the
        # planned end): decode it apart, keep the records inside. At most two per range.
        before = len(self.offsets)
        self._decode(buf, pos, h)
        keep = [i for i in range(before, len(self.offsets)) if start <= self.offsets[i] < end]
        if len(keep) == len(self.offsets) - before:
            return
        for name in ("keys", "values", "offsets", "timestamps", "types") + (
            ("headers",) if self.include_headers else ()
        ):
            col = getattr(self, name)
            kept = [col[i] for i in keep]
            del col[before:]
            col.extend(kept)

    def _decode(self, buf: bytes, pos: int, h: Header, vectorised: bool = False) -> None:
        body_start = pos + HEADER_BYTES
        body_end = pos + LOG_OVERHEAD + h.batch_length
        codec = h.attributes & _COMPRESSION_MASK
        if codec == Compression.NONE:
            data = buf[body_start:body_end]
        else:
            data = decompress(codec, memoryview(buf)[body_start:body_end],
                              max_decompressed_bytes=self.max_decompressed_bytes)
            if type(data) is not bytes:
                data = bytes(data)
        count = h.record_count
        base_offset = h.base_offset
        last_delta = h.last_offset_delta
        log_append = bool(h.attributes & _TIMESTAMP_TYPE_BIT)
        if vectorised and _np is not None and count >= _VECTOR_MIN_RECORDS:
            chunk = _vector_decode(data, h)
            if chunk is not None:
                self._seal()
                self.chunks.append(chunk)
                self.chunk_rows += count
                return
            # Not the common shape (or bad bytes): the per-record loop decides, and raises
            # the precise CorruptRecordError when the bytes are bad.
        base_ts = h.base_timestamp
        self.types.extend(array("i", [1 if log_append else 0]) * count)
        with_headers = self.include_headers
        ka = self.keys.append
        va = self.values.append
        oa = self.offsets.append
        ta = self.timestamps.append
        ha = self.headers.append
        varint = _varint
        size = len(data)
        p = 0
        i = 0
        try:
            for i in range(count):
                # Each varint: one byte, two bytes (lengths 64..8191), else the slow loop.
                b = data[p]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    b = (b & 0x7F) | (data[p + 1] << 7)
                    length = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    length, p = varint(data, p, 5)
                rec_end = p + length
                if length < 6 or rec_end > size:
                    raise _corrupt(pos, f"record {i}: length {length} does not fit the batch")
                p += 1  # record attributes: unused
                b = data[p]
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    b = (b & 0x7F) | (data[p + 1] << 7)
                    ts_delta = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    ts_delta, p = varint(data, p, 10)
                b = data[p]
                if b < 0x80:
                    offset_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    b = (b & 0x7F) | (data[p + 1] << 7)
                    offset_delta = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    offset_delta, p = varint(data, p, 5)
                if not 0 <= offset_delta <= last_delta:
                    raise _corrupt(pos, f"record {i}: offset delta {offset_delta} outside "
                                        f"[0, {last_delta}]")
                b = data[p]
                if b < 0x80:
                    klen = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    b = (b & 0x7F) | (data[p + 1] << 7)
                    klen = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    klen, p = varint(data, p, 5)
                if klen >= 0:
                    q = p + klen
                    if q > rec_end:
                        raise _corrupt(pos, f"record {i}: key length {klen} runs past the record")
                    ka(data[p:q])
                    p = q
                elif klen == -1:
                    ka(None)
                else:
                    raise _corrupt(pos, f"record {i}: key length {klen}")
                b = data[p]
                if b < 0x80:
                    vlen = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    b = (b & 0x7F) | (data[p + 1] << 7)
                    vlen = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    vlen, p = varint(data, p, 5)
                if vlen >= 0:
                    q = p + vlen
                    if q > rec_end:
                        raise _corrupt(pos, f"record {i}: value length {vlen} runs past the record")
                    va(data[p:q])
                    p = q
                elif vlen == -1:
                    va(None)
                else:
                    raise _corrupt(pos, f"record {i}: value length {vlen}")
                if data[p] == 0:
                    p += 1
                    if with_headers:
                        ha([])
                else:
                    hdrs, p = _headers(data, p, rec_end, pos, i)
                    if with_headers:
                        ha(hdrs)
                if p != rec_end:
                    raise _corrupt(pos, f"record {i}: length {length} disagrees with its "
                                        f"fields ({p - rec_end:+d})")
                oa(base_offset + offset_delta)
                ta(base_ts + ts_delta)
        except IndexError:
            raise _corrupt(pos, f"records end inside record {i} of {count}") from None
        except OverflowError:
            raise _corrupt(pos, f"record {i}: offset or timestamp outside int64") from None
        if p != size:
            raise _corrupt(pos, f"{size - p} bytes left after the {count} records the "
                                "header counts")
        if log_append:
            # LogAppendTime: the broker's time, the batch's max timestamp, for every record.
            del self.timestamps[len(self.timestamps) - count:]
            self.timestamps.extend(array("q", [h.max_timestamp]) * count)

    def take(self) -> pa.RecordBatch:
        """The records added since the last take, as one RecordBatch; the builder is empty
        afterwards."""
        self._seal()
        chunks = self.chunks
        n = self.chunk_rows
        if len(chunks) == 1:
            keys, values, offsets, ts_ms, types, headers = chunks[0]
        elif chunks:
            keys = pa.concat_arrays([c.keys for c in chunks])
            values = pa.concat_arrays([c.values for c in chunks])
            offsets = pa.concat_arrays([c.offsets for c in chunks])
            ts_ms = pa.concat_arrays([c.ts_ms for c in chunks])
            types = pa.concat_arrays([c.types for c in chunks])
            headers = ([hs for c in chunks for hs in (c.headers or [[]] * len(c.offsets))]
                       if self.include_headers else None)
        else:
            keys = values = pa.array([], pa.binary())
            offsets = ts_ms = pa.array([], pa.int64())
            types = pa.array([], pa.int32())
            headers = []
        # ms -> us in C; Kafka's timestamps are ms, so *1000 cannot overflow int64 for any
        # timestamp before year 294,000 - checked anyway, an overflow is an error not a wrap.
        ts_us = pc.multiply_checked(ts_ms, 1000).cast(_TS)
        columns = [
            keys,
            values,
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            offsets,
            ts_us,
            types,
        ]
        if self.include_headers:
            columns.append(pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in headers], _HEADER_TYPE))
        batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.include_headers))
        self._reset()
        return batch


# ---------------------------------------------------------------- the vectorised path


class _Chunk(NamedTuple):
    keys: pa.Array
    values: pa.Array
    offsets: pa.Array  # int64
    ts_ms: pa.Array  # int64, milliseconds
    types: pa.Array  # int32
    headers: list | None


def _varints(d, q, limit: int):
    """Zig-zag varints of one to three bytes at positions q (one per record) -> (values,
    positions after), or None if any is longer (the per-record loop handles those)."""
    np = _np
    b0 = d[np.minimum(q, limit)].astype(np.int64)
    one = b0 < 0x80
    if one.all():
        return (b0 >> 1) ^ -(b0 & 1), q + 1
    b1 = d[np.minimum(q + 1, limit)].astype(np.int64)
    two = ~one & (b1 < 0x80)
    raw = np.where(one, b0, (b0 & 0x7F) | ((b1 & 0x7F) << 7))
    width = np.where(one, 1, 2)
    three = ~(one | two)
    if three.any():
        b2 = d[np.minimum(q + 2, limit)].astype(np.int64)
        if (b2[three] >= 0x80).any():
            return None
        raw = np.where(three, raw | (b2 << 14), raw)
        width = np.where(three, 3, width)
    return (raw >> 1) ^ -(raw & 1), q + width


def _binary_column(data: bytes, starts, lengths) -> pa.Array:
    """A BinaryArray of data[starts[i] : starts[i] + lengths[i]] (length -1: null).

    The slices are in order and do not overlap, so [s0, e0, s1, e1, ...] is a valid offsets
    buffer over `data` itself: a zero-copy array whose even elements are the slices, which
    Arrow's `take` then copies out in C.
    """
    np = _np
    n = len(starts)
    valid = lengths >= 0
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.where(valid, lengths, 0)
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1,
                                  [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    taken = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    nulls = int(n - np.count_nonzero(valid))
    if not nulls:
        return taken
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [bitmap] + taken.buffers()[1:],
                                 null_count=nulls)


def _vector_decode(data: bytes, h: Header) -> _Chunk | None:
    """Decode the records section of one whole batch with numpy: a tight loop finds the
    record boundaries, every field is then read for all records at once.

    Handles the common shape: record lengths of one or two varint bytes (< 8192 bytes),
    timestamp and offset deltas, key and value lengths of up to three, no headers. Returns
    None for anything else, or for bytes that break a check (offset delta outside
    [0, last_offset_delta], fields not ending exactly at the record's end, records not
    ending exactly at the end of the batch): the caller then runs the per-record loop,
    which accepts the rare shapes and names the corruption."""
    np = _np
    count = h.record_count
    size = len(data)
    margin = 1 << 21  # three varint bytes hold |delta| < 2**20
    if not (_INT64_MIN + margin <= h.base_timestamp <= _INT64_MAX - margin
            and h.base_offset <= _INT64_MAX - margin and size < (1 << 31)):
        # numpy's int64 wraps where the loop raises, and Arrow binary offsets are int32:
        # leave those edges to the loop.
        return None
    bodies = array("q")
    lengths = array("q")
    put = bodies.append
    put_length = lengths.append
    p = 0
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                p += 1
                length = (b >> 1) ^ -(b & 1)
            else:
                c = data[p + 1]
                if c >= 0x80:
                    return None
                p += 2
                b = (b & 0x7F) | (c << 7)
                length = (b >> 1) ^ -(b & 1)
            if length < 6:
                return None
            put(p)
            put_length(length)
            p += length
    except IndexError:
        return None
    if p != size:
        return None
    d = np.frombuffer(data, dtype=np.uint8)
    limit = size - 1
    s = np.frombuffer(bodies, dtype=np.int64)
    e = s + np.frombuffer(lengths, dtype=np.int64)
    got = _varints(d, s + 1, limit)  # skip the record attributes byte
    if got is None:
        return None
    ts_delta, q = got
    got = _varints(d, q, limit)
    if got is None:
        return None
    offset_delta, q = got
    if offset_delta.min() < 0 or offset_delta.max() > h.last_offset_delta:
        return None
    got = _varints(d, q, limit)
    if got is None:
        return None
    klen, q = got
    if klen.min() < -1:
        return None
    kstart = q
    q = q + np.maximum(klen, 0)
    got = _varints(d, q, limit)
    if got is None:
        return None
    vlen, q = got
    if vlen.min() < -1:
        return None
    vstart = q
    q = q + np.maximum(vlen, 0)
    # No headers (header count 0, one byte), and every record ends exactly there: since
    # positions only grow, this also proves every byte read above was inside its record.
    if (d[np.minimum(q, limit)] != 0).any() or not np.array_equal(q + 1, e):
        return None
    offsets = h.base_offset + offset_delta
    if h.attributes & _TIMESTAMP_TYPE_BIT:
        ts = np.full(count, h.max_timestamp, np.int64)
        kind = 1
    else:
        ts = h.base_timestamp + ts_delta
        kind = 0
    return _Chunk(
        _binary_column(data, kstart, klen),
        _binary_column(data, vstart, vlen),
        pa.array(offsets, pa.int64()),
        pa.array(ts, pa.int64()),
        pa.repeat(pa.scalar(kind, pa.int32()), count),
        None,
    )


def _headers(data: bytes, p: int, end: int, pos: int, i: int) -> tuple[list, int]:
    count, p = _varint(data, p, 5)
    if count < 0 or 2 * count > end - p:
        raise _corrupt(pos, f"record {i}: header count {count}")
    out = []
    for _ in range(count):
        hklen, p = _varint(data, p, 5)
        q = p + hklen
        if hklen < 0 or q > end:
            raise _corrupt(pos, f"record {i}: header key length {hklen}")
        try:
            hkey = data[p:q].decode("utf-8")
        except UnicodeDecodeError:
            raise _corrupt(pos, f"record {i}: header key is not UTF-8") from None
        p = q
        hvlen, p = _varint(data, p, 5)
        if hvlen == -1:
            hvalue = None
        else:
            q = p + hvlen
            if hvlen < 0 or q > end:
                raise _corrupt(pos, f"record {i}: header value length {hvlen}")
            hvalue = data[p:q]
            p = q
        out.append((hkey, hvalue))
    return out, p

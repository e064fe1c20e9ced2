"""Fetched RecordBatch v2 bytes -> pyarrow RecordBatches in the Kafka source's schema, fast.

The hot path of `read()`. Records are read by partition.batch's one record walk,
`decode_record_rows` (the walk `decode_batch` uses too); `ColumnBuilder.add` turns its rows
into per-column lists and `array`s in C (`zip(*rows)`, `extend`; ~1 M rows/s for 100-byte
records here), skipping Record objects, and Arrow builds the binary columns from those lists.

Checks are decode_batch's, by construction: CRC-32C and header via `verify_crc`, the records
via the shared walk; bad bytes raise `CorruptRecordError` (never IndexError). The one check
of its own: offsets and timestamps must fit Arrow's int64. Compressed batches are
decompressed with the same bounded codecs.

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
in C; measured (100-byte records) 2x the shared walk at 500 records a batch, 3x at 1000,
but slower below ~130 (1.3x slower at 100, 4x at 16: numpy's per-call cost). Anything
else, and any bytes that break a check, go to the shared walk, which names the corruption.
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
    decode_record_rows,
    verify_crc,
)
from partition.compression import Compression, decompress
from partition.errors import CorruptRecordError

try:  # numpy makes large batches 2-3x faster to decode; without it the shared walk runs.
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
# Below this many records a batch takes the shared walk: measured with 100-byte records the
# vector path is 4.3x slower at 16 records, even at ~130, 2x faster at 500, ~3x at 1000.
_VECTOR_MIN_RECORDS = 128


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
        log_append = bool(h.attributes & _TIMESTAMP_TYPE_BIT)
        if vectorised and _np is not None and count >= _VECTOR_MIN_RECORDS:
            chunk = _vector_decode(data, h)
            if chunk is not None:
                self._seal()
                self.chunks.append(chunk)
                self.chunk_rows += count
                return
            # Not the common shape (or bad bytes): the shared walk decides, and raises the
            # precise CorruptRecordError when the bytes are bad.
        rows = decode_record_rows(data, 0, len(data), h, pos)
        _topic, _partition, offsets, timestamps, keys, values, headers = (
            zip(*rows) if rows else ((),) * 7)
        try:
            self.offsets.extend(offsets)
            self.timestamps.extend(timestamps)
        except OverflowError:  # Python ints have no bound; Arrow's int64 has
            i = next(i for i, (o, t) in enumerate(zip(offsets, timestamps))
                     if not (_INT64_MIN <= o <= _INT64_MAX and _INT64_MIN <= t <= _INT64_MAX))
            raise CorruptRecordError(f"batch at position {pos}: record {i}: offset or "
                                     "timestamp outside int64") from None
        self.keys.extend(keys)
        self.values.extend(values)
        self.types.extend(array("i", [1 if log_append else 0]) * count)
        if self.include_headers:
            self.headers.extend(headers)

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
#
# Why this does not use partition.batch's record walk: the walk does Python work for every
# field of every record, which is exactly what this path avoids. Here Python only steps
# from record length to record length; the fields are then read for all records at once
# with numpy. Whatever it cannot take (rare shapes, bad bytes) goes to the walk, so the
# walk alone decides what is corrupt and how the error reads.


class _Chunk(NamedTuple):
    keys: pa.Array
    values: pa.Array
    offsets: pa.Array  # int64
    ts_ms: pa.Array  # int64, milliseconds
    types: pa.Array  # int32
    headers: list | None


def _varints(d, q, limit: int):
    """Zig-zag varints of one to three bytes at positions q (one per record) -> (values,
    positions after), or None if any is longer (the shared walk handles those)."""
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
    ending exactly at the end of the batch): the caller then runs the shared walk,
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

"""Kafka RecordBatch v2 (magic 2): header checks, CRC-32C, in-place stamping, build and decode.

The batch is the unit of storage, replication and transfer (DESIGN §4 "Records"). The bytes
are Kafka's, byte for byte, so a Kafka-protocol listener and zero-copy fetch stay possible::

    0  baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of [21, end)) | 21 attributes int16 | 23 lastOffsetDelta int32
    27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64
    51 producerEpoch int16 | 53 baseSequence int32 | 57 recordsCount int32 | 61 records...

Invariants:
* `read_header` never touches the records and never trusts a length: every batch it returns
  lies wholly inside the buffer it was given. It does not check the CRC (`verify_crc` does).
* baseOffset and partitionLeaderEpoch are outside the CRC, so `stamp` rewrites them in place
  and the batch stays valid; anything else changed needs a new CRC.
* Decoding bad bytes raises `CorruptRecordError` (never IndexError/struct.error/ValueError),
  and decompression output is bounded (`max_decompressed_bytes`), so a zip bomb is an error.
* No clock: every timestamp is an argument.
* Records are read by one walk, `decode_record_rows`; `decode_batch`, `decode_batches_into`
  and spark_source.arrow's per-record path only shape its rows, so they accept and reject
  the same bytes with the same errors.
* The fast path `BatchBuilder.append_value` writes exactly what `append` does, with the
  same checks and errors (the test_batch_fastpath tests hold it, and the decoders, to it).

Size (issue 13's ~800-line rule): over it because the builder, the one record walk and its
fast path are held byte for byte to each other; builder versus decoders is the seam.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from partition.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from partition.compression import available as _codec_available
from partition.compression import compress as _compress
from partition.compression import decompress as _decompress
from partition.errors import CorruptRecordError

__all__ = [
    "HEADER_BYTES",
    "LOG_OVERHEAD",
    "MAGIC",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "Compression",
    "TimestampType",
    "Header",
    "Record",
    "BatchBuilder",
    "read_header",
    "verify_crc",
    "iter_headers",
    "CheckedBatches",
    "scan_valid_prefix",
    "stamp",
    "stamp_checked",
    "decode_batch",
    "decode_batches",
    "decode_batches_into",
    "decode_record_rows",
    "control_batch",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "txn_marker_batch",
    "control_type",
    "CONTROL_LEADER_CHANGE",
    "HEADER",
    "HEADER_HEAD",
    "HEADER_TAIL",
    "BATCH_PREFIX",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "PARTITION_LEADER_EPOCH_AT",
    "LAST_OFFSET_DELTA_AT",
    "INT32_MAX",
]

HEADER_BYTES = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
MAGIC = 2
CRC_START = 21  # the CRC covers attributes..end
# batchLength counts from partitionLeaderEpoch to the end: 61 - 12 bytes of header at least.
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_LEADER_CHANGE = 2  # KRaft's LeaderChange control record

COMPRESSION_MASK = 0x07  # attributes bits 0-2: the codec
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
CONTROL_BIT = _CONTROL_BIT  # attributes bit 5: a control batch (read in place by hot paths)

# The RecordBatch v2 header, declared here once; every module that reads or writes header
# fields in place (the log's checks, segments, the cleaner, telemetry) uses these:
# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I | attributes h,
# lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
# baseSequence i, recordsCount i.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_HEAD = struct.Struct(">qiibI")  # bytes [0, CRC_START): outside the CRC
HEADER_TAIL = struct.Struct(">hiqqqhii")  # bytes [CRC_START, HEADER_BYTES): first under the CRC
BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength: the LOG_OVERHEAD bytes
PARTITION_LEADER_EPOCH_AT = 12
LAST_OFFSET_DELTA_AT = 23
assert HEADER.size == HEADER_BYTES and BATCH_PREFIX.size == LOG_OVERHEAD
assert HEADER_HEAD.size == CRC_START and HEADER_TAIL.size == HEADER_BYTES - CRC_START
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
INT32_MAX = 0x7FFFFFFF


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Header(NamedTuple):
    """The 61 header bytes of one batch, as read (trusted only as far as `read_header` checks).

    A named tuple, not a dataclass: `read_header` makes one per batch on every produce,
    replication and recovery walk, and a tuple is one C call where a frozen dataclass's
    __init__ was thirteen `object.__setattr__` calls (issue 46)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        bits = self.attributes & COMPRESSION_MASK
        return _CODEC_OF_BITS[bits] if bits < len(_CODEC_OF_BITS) else Compression(bits)  # enum call: ~1 us

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & _TIMESTAMP_TYPE_BIT
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        """base_sequence + last_offset_delta, wrapping past int32 max like Kafka; -1 if none."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)


_CODEC_OF_BITS = tuple(sorted(Compression))
_new_header = tuple.__new__  # Header from the unpacked tuple, as Header._make without its len check


def _corrupt(pos: int, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {pos}: {what}")


def read_header(buf, pos: int = 0) -> Header:
    """Parse and sanity-check the header of the batch at `pos`; never reads the records.

    Returns the Header. Raises CorruptRecordError (message says what) if fewer than 61 bytes
    are left, magic != 2, batchLength < 49 or past the end of `buf`, an unknown codec, or a
    negative record count / last offset delta. The CRC is not checked (see `verify_crc`).
    """
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    available = len(buf) - pos
    if available < HEADER_BYTES:
        if available >= 17 and buf[pos + 16] != MAGIC:
            raise _corrupt(pos, f"magic {buf[pos + 16]} (expected {MAGIC}), truncated header")
        raise _corrupt(pos, f"truncated header: {max(available, 0)} of {HEADER_BYTES} bytes")
    h = _new_header(Header, HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise _corrupt(pos, f"magic {h.magic} (expected {MAGIC})")
    if h.batch_length < MIN_BATCH_LENGTH:
        raise _corrupt(pos, f"batch length {h.batch_length} < {MIN_BATCH_LENGTH}")
    if h.batch_length + LOG_OVERHEAD > available:
        raise _corrupt(
            pos,
            f"batch length {h.batch_length} runs past the end "
            f"({available - LOG_OVERHEAD} bytes follow the length field)",
        )
    if h.attributes & COMPRESSION_MASK > Compression.ZSTD:
        raise _corrupt(pos, f"unknown compression codec {h.attributes & COMPRESSION_MASK}")
    if h.record_count < 0:
        raise _corrupt(pos, f"negative record count {h.record_count}")
    if h.last_offset_delta < 0:
        raise _corrupt(pos, f"negative last offset delta {h.last_offset_delta}")
    return h


def _crc_of(buf, start: int, end: int) -> int:
    if start == 0 and end == len(buf):
        return crc32c(buf)
    return crc32c(memoryview(buf)[start:end])  # checked where it lies, not copied


def verify_crc(buf, pos: int = 0, header: Header | None = None) -> Header:
    """Check the CRC-32C of the batch at `pos` (reading its header first unless given).

    Returns the Header; raises CorruptRecordError on a bad header or a CRC mismatch.
    """
    h = read_header(buf, pos) if header is None else header
    actual = _crc_of(buf, pos + CRC_START, pos + LOG_OVERHEAD + h.batch_length)
    if actual != h.crc:
        raise _corrupt(pos, f"CRC-32C mismatch: stored {h.crc:#010x}, computed {actual:#010x}")
    return h


def iter_headers(buf, pos: int = 0, *, verify: bool = True) -> Iterator[tuple[int, Header]]:
    """Yield (position, Header) for every batch of a concatenation, from `pos` to the end.

    Raises CorruptRecordError at the first bad or truncated batch (a partial trailing batch
    included); with verify=True (default) every CRC is checked too.
    """
    end = len(buf)
    while pos < end:
        h = read_header(buf, pos)
        if verify:
            verify_crc(buf, pos, h)
        yield pos, h
        pos += LOG_OVERHEAD + h.batch_length


class CheckedBatches:
    """Whole batches (`data`: any buffer) whose headers and CRC-32Cs were checked, with what
    that check found: `headers`, the (position in data, Header) of each batch. What a
    follower hands the log, so the bytes it fetched are walked and CRC-checked once
    (partition/replication.py) instead of again by the log and the producer state. Its
    length is that of `data` (an opaque `records` for partition/raft.py)."""

    __slots__ = ("data", "headers")

    def __init__(self, data, headers: Sequence[tuple[int, Header]]):
        self.data = data
        self.headers = headers

    def __len__(self) -> int:
        return len(self.data)


def scan_valid_prefix(buf, pos: int = 0) -> tuple[int, list[tuple[int, Header]]]:
    """For recovery: walk the batches from `pos` and stop at the first bad one.

    Returns (end position of the last intact batch, [(position, Header), ...]); the end is
    `pos` if even the first batch is bad. Stops, never raises, at a bad length, magic, CRC or
    a truncated tail.
    """
    found: list[tuple[int, Header]] = []
    end = len(buf)
    while pos < end:
        try:
            h = verify_crc(buf, pos)
        except CorruptRecordError:
            break
        found.append((pos, h))
        pos += LOG_OVERHEAD + h.batch_length
    return pos, found


def stamp(buf, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch of the batch at `pos` in place.

    Both fields lie outside the CRC, so the batch stays valid. `buf` must be writable
    (bytearray or writable memoryview). Raises CorruptRecordError if no valid header is there.
    """
    read_header(buf, pos)
    stamp_checked(buf, pos, base_offset, partition_leader_epoch)


def stamp_checked(buf, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """`stamp` of a batch whose header the caller has checked already (no check here)."""
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_AT, partition_leader_epoch)


# ------------------------------------------------------------------------------ records

@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp, key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# The decoder fills Records through the slot descriptors: the frozen dataclass __init__
# (one object.__setattr__ per field) costs ~3.5x more, and decode makes one Record per record.
_new = object.__new__
_set_offset = Record.offset.__set__
_set_timestamp = Record.timestamp.__set__
_set_key = Record.key.__set__
_set_value = Record.value.__set__
_set_headers = Record.headers.__set__
# In the order of decode_record_rows' row fields after topic and partition.
_RECORD_SETTERS = (_set_offset, _set_timestamp, _set_key, _set_value, _set_headers)


def _uvarint(n: int) -> bytes:
    """Unsigned LEB128 of n >= 0 (the zig-zag step is the caller's)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Precomputed varints of every zig-zagged value below 2**14 (two bytes at most): record
# lengths, offset deltas, small timestamp deltas and key/value lengths of small records hit
# this table instead of a Python loop.
_UV_N = 1 << 14
_UV = tuple(_uvarint(i) for i in range(_UV_N))
_NULL = b"\x01"  # zig-zag varint of -1: a null key/value
_ZERO = b"\x00"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _zz_bytes(n: int) -> bytes:
    """Zig-zag varint bytes of a signed int64 `n`."""
    zz = (n << 1) ^ (n >> 63)
    if 0 <= zz < _UV_N:  # zz < 0 only for n below int64: caught next
        return _UV[zz]
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit in a varlong")
    return _uvarint(zz)


def _len_bytes(b: bytes) -> bytes:
    # Zig-zag varint of a length (n >= 0 → 2n).
    zz = len(b) << 1
    return _UV[zz] if zz < _UV_N else _uvarint(zz)


def _headers_bytes(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = bytearray(_zz_bytes(len(headers)))
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        out += _zz_bytes(len(kb))
        out += kb
        if hvalue is None:
            out += _NULL
        else:
            out += _zz_bytes(len(hvalue))
            out += hvalue
    return bytes(out)


class BatchBuilder:
    """Accumulates records and builds one RecordBatch v2 (the producer's hot path).

    Records are encoded as they are appended (byte strings joined once in `build`, which adds
    the header, compresses and computes the CRC). Offsets are base_offset + 0, 1, 2, ...; the
    base timestamp is the first record's, the max timestamp the largest. Raises
    CompressionUnavailableError at construction if the codec needs cramjam and it is missing.
    Concurrency: not thread-safe; one builder per producer batch.
    """

    __slots__ = (
        "_parts", "_parts_extend", "_records_bytes", "_count", "_base_timestamp",
        "_max_timestamp", "_compression", "_attributes", "_producer_id", "_producer_epoch",
        "_base_sequence", "_base_offset", "_partition_leader_epoch",
    )

    def __init__(
        self,
        *,
        compression: Compression | int = Compression.NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
    ):
        self._compression = Compression(compression)
        if not _codec_available(self._compression):
            _compress(self._compression, b"")  # raises CompressionUnavailableError naming the extra
        self._attributes = (
            int(self._compression)
            | (_TIMESTAMP_TYPE_BIT if TimestampType(timestamp_type) else 0)
            | (_TRANSACTIONAL_BIT if is_transactional else 0)
            | (_CONTROL_BIT if is_control else 0)
        )
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._parts: list[bytes] = []
        self._parts_extend = self._parts.extend
        self._records_bytes = 0
        self._count = 0
        self._base_timestamp = NO_TIMESTAMP
        self._max_timestamp = NO_TIMESTAMP

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        """Uncompressed size of the batch built now, header included."""
        return HEADER_BYTES + self._records_bytes

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        *,
        timestamp_ms: int,
    ) -> int:
        """Add one record; returns the bytes it adds to the (uncompressed) batch.

        `timestamp_ms` is required (no clock in the core): omitting it is a TypeError.

        Raises ValueError if the timestamp or its delta to the first record's timestamp does
        not fit in an int64.
        """
        if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp_ms {timestamp_ms} does not fit in an int64")
        n = self._count
        if n == 0:
            ts = _ZERO
        else:
            d = timestamp_ms - self._base_timestamp
            zz = (d << 1) ^ (d >> 63)
            ts = _UV[zz] if 0 <= zz < _UV_N else _zz_bytes(d)
        zz = n << 1
        od = _UV[zz] if zz < _UV_N else _uvarint(zz)
        if key is None:
            kl, key = _NULL, b""
        else:
            if type(key) is not bytes:
                key = bytes(key)  # a later change to a caller's bytearray must not leak in
            kl = _len_bytes(key)
        if value is None:
            vl, value = _NULL, b""
        else:
            if type(value) is not bytes:
                value = bytes(value)
            vl = _len_bytes(value)
        hb = _headers_bytes(headers) if headers else _ZERO
        body = 1 + len(ts) + len(od) + len(kl) + len(key) + len(vl) + len(value) + len(hb)
        zz = body << 1
        lb = _UV[zz] if zz < _UV_N else _uvarint(zz)
        # Parts are joined once in build(): cheaper than growing a bytearray per field.
        self._parts_extend((lb, _ZERO, ts, od, kl, key, vl, value, hb))
        added = len(lb) + body
        self._records_bytes += added
        # State changes last, so a refused record (bad header type, ...) leaves no trace.
        if n == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        self._count = n + 1
        return added

    def append_value(self, value: bytes | None, timestamp_ms: int) -> int:
        """`append(value, timestamp_ms=timestamp_ms)` for a record with no key and no headers
        (the keyless producer's hot path): the same bytes and checks, fewer steps.

        Returns the bytes it adds; raises ValueError like `append`.
        """
        if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp_ms {timestamp_ms} does not fit in an int64")
        n = self._count
        if n:
            d = timestamp_ms - self._base_timestamp
            zz = (d << 1) ^ (d >> 63)
            ts = _UV[zz] if 0 <= zz < _UV_N else _zz_bytes(d)
        else:
            ts = _ZERO
        zz = n << 1
        od = _UV[zz] if zz < _UV_N else _uvarint(zz)
        if value is None:
            # attributes, null key, null value, no headers
            body = 4 + len(ts) + len(od)
            zz = body << 1
            lb = _UV[zz] if zz < _UV_N else _uvarint(zz)
            self._parts_extend((lb, _ZERO, ts, od, _NULL, _NULL, _ZERO))
        else:
            if type(value) is not bytes:
                value = bytes(value)  # a later change to a caller's bytearray must not leak in
            zz = len(value) << 1
            vl = _UV[zz] if zz < _UV_N else _uvarint(zz)
            # attributes, null key, value length and bytes, no headers
            body = 3 + len(ts) + len(od) + len(vl) + len(value)
            zz = body << 1
            lb = _UV[zz] if zz < _UV_N else _uvarint(zz)
            self._parts_extend((lb, _ZERO, ts, od, _NULL, vl, value, _ZERO))
        added = len(lb) + body
        self._records_bytes += added
        if n == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        self._count = n + 1
        return added

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotent producer's id, epoch and base sequence for the next `build`.

        The producer learns the base sequence only when the batch is sealed (after its records
        were appended), so this is separate from the constructor. Raises ValueError when a
        value does not fit its field (int64, int16, int32).
        """
        if not (_INT64_MIN <= producer_id <= _INT64_MAX and -(1 << 15) <= producer_epoch < (1 << 15)
                and -(1 << 31) <= base_sequence < (1 << 31)):
            raise ValueError(
                f"producer state out of range: id={producer_id} epoch={producer_epoch} seq={base_sequence}"
            )
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def build(self) -> bytes:
        """The batch bytes (header, CRC, records compressed with the chosen codec).

        Raises ValueError if no record was appended; CompressionUnavailableError if the codec
        needs cramjam and it is missing. The builder may be built again (same bytes).
        """
        if self._count == 0:
            raise ValueError("a batch needs at least one record")
        payload = b"".join(self._parts)
        if self._compression is not Compression.NONE:
            payload = _compress(self._compression, payload)
        tail = HEADER_TAIL.pack(
            self._attributes,
            self._count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
        )
        crc = crc32c(payload, crc32c(tail))
        head = HEADER_HEAD.pack(
            self._base_offset,
            HEADER_BYTES - LOG_OVERHEAD + len(payload),
            self._partition_leader_epoch,
            MAGIC,
            crc,
        )
        return b"".join((head, tail, payload))




# ------------------------------------------------------------- decode: the one record walk

# Zig-zag values of one-byte varints (b < 0x80) and of two-byte ones indexed by
# `(second << 8) | first` (first >= 0x80, second < 0x80): one tuple lookup instead of four
# operations per field. Entries with first < 0x80 are never looked up.
_ZZ1 = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
_ZZ2 = tuple(
    (v >> 1) ^ -(v & 1)
    for v in (((i >> 8) << 7) | (i & 0x7F) for i in range(0x80 << 8))
)


def _varint_slow(data: bytes, p: int, max_bytes: int) -> tuple[int, int]:
    # Multi-byte zig-zag varint starting at p; IndexError past the end is the caller's to map.
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


def decode_record_rows(
    data: bytes, start: int, end: int, h: Header, pos: int, topic=None, partition=None
) -> list[tuple]:
    """Decode the records section data[start:end] of the batch whose header is `h`.

    The one walk over record bytes: `decode_batch` (Record objects), `decode_batches_into`
    (the consumer's tuples) and spark_source.arrow (Arrow columns; `zip(*rows)` gives the
    columns) all read records here, so they accept and reject exactly the same bytes.

    Returns h.record_count rows `(topic, partition, offset, timestamp, key, value, headers)`
    (a consumer record's fields, in its order), in batch order: `topic` and `partition` as
    given, absolute offset and timestamp (the batch's max timestamp for every record of a
    LogAppendTime batch), key and value as bytes or None (null), headers a tuple of
    (str key, bytes-or-None value). `data` is bytes; `pos` is the batch's position in its
    buffer, used only in error messages. Checks stop at `end` (the records section may sit
    inside a larger buffer) except that a read past `end` meets the next bytes of `data`,
    not an IndexError: the record-length check then names the error.

    Raises CorruptRecordError naming the record on any bad bytes: a record length that does
    not fit, an offset delta outside [0, last_offset_delta], a key, value or header running
    past its record, a non-UTF-8 header key, fields that disagree with the record length,
    fewer records than the count, bytes left over.
    """
    p = start
    base_offset = h.base_offset
    last_delta = h.last_offset_delta
    if h.attributes & _TIMESTAMP_TYPE_BIT:
        log_append_time = h.max_timestamp  # LogAppendTime: every record takes the batch's
    else:
        log_append_time = None
    base_ts = h.base_timestamp
    count = h.record_count
    # Locals, not globals or attributes, in the per-record loop. One tuple per record, in
    # the consumer record's shape, is the cheapest thing to hand on: the consumer's tuples
    # are then one C call each (five column appends, or adding topic and partition later,
    # measured 4-6% slower on that path).
    rows: list[tuple] = []
    append = rows.append
    zz1, zz2, slow = _ZZ1, _ZZ2, _varint_slow
    i = 0
    try:
        for i in range(count):
            # Each varint: one byte, two bytes (table lookups), else the general loop. The
            # fields are inline on purpose: a helper for the key and value fields (one call
            # each) measured 6-8% slower on decode_batch and decode_batches_into.
            b = data[p]
            if b < 0x80:
                length = zz1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    length = zz2[(c << 8) | b]
                    p += 2
                else:
                    length, p = slow(data, p, 5)
            rend = p + length
            if length < 6 or rend > end:
                raise _corrupt(pos, f"record {i}: length {length} does not fit the batch")
            b = data[p + 1]  # data[p] is the record's attributes: unused
            if b < 0x80:
                ts_delta = zz1[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    ts_delta = zz2[(c << 8) | b]
                    p += 3
                else:
                    ts_delta, p = slow(data, p + 1, 10)
            b = data[p]
            if b < 0x80:
                offset_delta = zz1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    offset_delta = zz2[(c << 8) | b]
                    p += 2
                else:
                    offset_delta, p = slow(data, p, 5)
            if offset_delta < 0 or offset_delta > last_delta:
                raise _corrupt(
                    pos, f"record {i}: offset delta {offset_delta} outside [0, {last_delta}]"
                )
            b = data[p]
            if b == 1:  # null key: the usual case
                key = None
                p += 1
            else:
                if b < 0x80:
                    klen = zz1[b]
                    p += 1
                else:
                    klen, p = slow(data, p, 5)
                if klen >= 0:
                    q = p + klen
                    if q > rend:
                        raise _corrupt(pos, f"record {i}: key length {klen} runs past the record")
                    key = data[p:q]
                    p = q
                elif klen == -1:
                    key = None
                else:
                    raise _corrupt(pos, f"record {i}: key length {klen}")
            b = data[p]
            if b < 0x80:
                vlen = zz1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    vlen = zz2[(c << 8) | b]
                    p += 2
                else:
                    vlen, p = slow(data, p, 5)
            if vlen >= 0:
                q = p + vlen
                if q > rend:
                    raise _corrupt(pos, f"record {i}: value length {vlen} runs past the record")
                value = data[p:q]
                p = q
            elif vlen == -1:
                value = None
            else:
                raise _corrupt(pos, f"record {i}: value length {vlen}")
            if data[p] == 0:
                p += 1
                hdrs = ()
            else:
                hdrs, p = _decode_headers(data, p, rend, pos, i)
            if p != rend:
                raise _corrupt(
                    pos, f"record {i}: length {length} disagrees with its fields ({p - rend:+d})"
                )
            append((
                topic, partition, base_offset + offset_delta,
                base_ts + ts_delta if log_append_time is None else log_append_time,
                key, value, hdrs,
            ))
    except IndexError:
        raise _corrupt(pos, f"records end inside record {i} of {count}") from None
    if p != end:
        raise _corrupt(
            pos, f"{end - p} bytes left after the {count} records the header counts"
        )
    return rows


def _decode_headers(data: bytes, p: int, end: int, pos: int, i: int):
    count, p = _varint_slow(data, p, 5)
    if count < 0 or 2 * count > end - p:
        raise _corrupt(pos, f"record {i}: header count {count}")
    headers = []
    for _ in range(count):
        hklen, p = _varint_slow(data, p, 5)
        q = p + hklen
        if hklen < 0 or q > end:
            raise _corrupt(pos, f"record {i}: header key length {hklen}")
        try:
            hkey = data[p:q].decode("utf-8")
        except UnicodeDecodeError:
            raise _corrupt(pos, f"record {i}: header key is not UTF-8") from None
        p = q
        hvlen, p = _varint_slow(data, p, 5)
        if hvlen == -1:
            hvalue = None
        else:
            q = p + hvlen
            if hvlen < 0 or q > end:
                raise _corrupt(pos, f"record {i}: header value length {hvlen}")
            hvalue = data[p:q]
            p = q
        headers.append((hkey, hvalue))
    return tuple(headers), p


def _decode_records(data: bytes, h: Header, pos: int) -> list[Record]:
    """Record objects for the h.record_count records filling all of `data` (the records
    section); raises like `decode_record_rows`."""
    rows = decode_record_rows(data, 0, len(data), h, pos)
    records = list(map(_new, repeat(Record, len(rows))))
    # One C-level pass per field (zip(*rows) turns rows into columns; each slot's descriptor
    # is mapped over its column): ~20% cheaper than a Python loop making six calls a record.
    # The first two columns are topic and partition (None here): the setters skip them.
    for set_field, column in zip(_RECORD_SETTERS, islice(zip(*rows), 2, None)):
        deque(map(set_field, records, column), 0)
    return records


def decode_batch(
    buf, pos: int = 0, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[Header, list[Record]]:
    """Decode the batch at `pos` fully: header, CRC, decompression, every record.

    Returns (Header, records) with absolute offsets and timestamps (LogAppendTime batches give
    every record the batch's max timestamp). Raises CorruptRecordError if anything is off:
    CRC, a record's length, fewer or more records than record_count, bytes left over, an
    offset delta outside [0, last_offset_delta]; MessageTooLargeError if decompression would
    exceed `max_decompressed_bytes`; CompressionUnavailableError for a codec needing cramjam.
    """
    h = verify_crc(buf, pos)
    start = pos + HEADER_BYTES
    end = pos + LOG_OVERHEAD + h.batch_length
    codec = h.attributes & COMPRESSION_MASK
    if codec == Compression.NONE:
        data = buf[start:end] if type(buf) is bytes else bytes(memoryview(buf)[start:end])
    else:
        data = _decompress(codec, memoryview(buf)[start:end],
                           max_decompressed_bytes=max_decompressed_bytes)
        if type(data) is not bytes:
            data = bytes(data)  # so keys and values come out as bytes
    return h, _decode_records(data, h, pos)


def decode_batches(
    buf, pos: int = 0, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[Header, list[Record]]]:
    """Decode every batch of a concatenation in order; raises like `decode_batch` at the
    first bad or truncated batch (after yielding the good ones before it)."""
    end = len(buf)
    while pos < end:
        h, records = decode_batch(buf, pos, max_decompressed_bytes=max_decompressed_bytes)
        yield h, records
        pos += LOG_OVERHEAD + h.batch_length


_CONTROL_KEY = struct.Struct(">hh")


def control_batch(
    control_type: int,
    *,
    timestamp_ms: int,
    partition_leader_epoch: int,
    base_offset: int = 0,
    value: bytes = b"",
) -> bytes:
    """A control batch of one record whose key is (version 0, control_type) as int16s.

    control_type: CONTROL_ABORT 0, CONTROL_COMMIT 1, CONTROL_LEADER_CHANGE 2 (what a new Raft
    leader appends in its epoch).
    """
    b = BatchBuilder(
        is_control=True, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch
    )
    b.append(value, _CONTROL_KEY.pack(0, control_type), timestamp_ms=timestamp_ms)
    return b.build()


def txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A transaction marker (Kafka's EndTransactionMarker): a control and transactional batch
    of the producer's id and epoch (no sequence) holding one record whose key is (version 0,
    COMMIT 1 / ABORT 0) and whose value is (version 0, coordinator_epoch) as int16, int32."""
    b = BatchBuilder(
        is_control=True, is_transactional=True, producer_id=producer_id,
        producer_epoch=producer_epoch, partition_leader_epoch=partition_leader_epoch,
    )  # fmt: skip
    b.append(struct.pack(">hi", 0, coordinator_epoch),
             _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT), timestamp_ms=timestamp_ms)
    return b.build()


def txn_marker(buf, pos: int = 0) -> tuple[bool, int]:
    """(whether it is a COMMIT, its coordinator epoch) of the transaction marker at `pos`
    (Kafka's EndTransactionMarker; a value too short for the epoch gives -1). Raises
    CorruptRecordError when that is not a control batch."""
    h, records = decode_batch(buf, pos)
    key = records[0].key if records else None
    if not h.is_control or key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"batch at {pos}: not a control batch with a control key")
    value = records[0].value
    epoch = struct.unpack_from(">i", value, 2)[0] if value is not None and len(value) >= 6 else -1
    return _CONTROL_KEY.unpack_from(key)[1] == CONTROL_COMMIT, epoch


def control_type(buf, pos: int = 0) -> int:
    """The control type (CONTROL_ABORT, CONTROL_COMMIT, ...) of the control batch at `pos`:
    its first record's key. Raises CorruptRecordError when that is not a control key."""
    h, records = decode_batch(buf, pos)
    key = records[0].key if records else None
    if not h.is_control or key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"batch at {pos}: not a control batch with a control key")
    return _CONTROL_KEY.unpack_from(key)[1]


# ------------------------------------------------------------- decode for the consumer

_tuple_new = tuple.__new__


def decode_batches_into(
    buf,
    out: list,
    topic,
    partition,
    record_type: type,
    min_offset: int,
    pos: int = 0,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> int:
    """Decode a concatenation of batches straight into `out` as record tuples (the consumer's
    hot path); returns the offset after the last batch seen, or `min_offset` if none was past it.

    Each record is `tuple.__new__(record_type, (topic, partition, offset, timestamp, key, value,
    headers))`, so `record_type` is a tuple subclass with those seven fields (a NamedTuple).
    Records below `min_offset` are left out (a fetch may begin mid-batch); batches that end
    at or below it, and control batches, are skipped without decoding their records (their
    header and CRC are still checked). Checks and errors are `decode_batch`'s: on bad bytes
    CorruptRecordError is raised after the records of the good batches before it were
    appended (none of the bad batch's).
    """
    end_all = len(buf)
    position = min_offset
    if type(buf) is not bytes:
        buf = bytes(buf)
    while pos < end_all:
        h = verify_crc(buf, pos)
        nxt = h.base_offset + h.last_offset_delta + 1
        if nxt > position and not h.attributes & _CONTROL_BIT:
            start = pos + HEADER_BYTES
            end = pos + LOG_OVERHEAD + h.batch_length
            codec = h.attributes & COMPRESSION_MASK
            if codec == Compression.NONE:
                data = buf
            else:
                data = _decompress(codec, memoryview(buf)[start:end],
                                   max_decompressed_bytes=max_decompressed_bytes)
                if type(data) is not bytes:
                    data = bytes(data)
                start, end = 0, len(data)
            # The record_type tuples are made in C from the walk's rows (no Python loop).
            rows = map(_tuple_new, repeat(record_type),
                       decode_record_rows(data, start, end, h, pos, topic, partition))
            mark = len(out)
            try:
                if h.base_offset < position:
                    out.extend(r for r in rows if r[2] >= position)
                else:
                    out.extend(rows)
            except BaseException:
                del out[mark:]  # none of this batch, even if interrupted
                raise
        if nxt > position:
            position = nxt
        pos += LOG_OVERHEAD + h.batch_length
    return position

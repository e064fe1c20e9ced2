"""Kafka's LogValidator for what clients append: every batch a producer sends is checked against
its own records before the leader appends it, so no writer can store a batch that lies (a
header claiming 2^31-1 records while holding one moved a partition's next offset past 2^31;
offset deltas or record lengths that disagree with the header made every later read fail).

    records = validate_client_records(records, max_message_bytes=..., max_decompressed_bytes=...)

Pure: bytes in, bytes (or an error) out; no I/O, and the clock only as the caller's `now_ms`
(`TimestampPolicy`: a topic's message.timestamp.before/after.max.ms, checked on each batch's
first and largest timestamps, INVALID_TIMESTAMP; with LogAppendTime the batch's type bit and
max timestamp are rewritten to `now_ms` and its CRC recomputed, as Kafka's LogValidator does;
a topic with neither costs nothing). The caller (partition/manager.py
`append_partitions`, where the Kafka listener's Produce and the native `produce` both pass)
appends what it returns; batches the node writes itself (control batches, the group
coordinator's) do not come through here, as Kafka validates only AppendOrigin.CLIENT this way.

Checks, batch by batch; the first failure refuses the partition's whole `records` (nothing is
stored) with the error Kafka's broker gives (LogValidator, UnifiedLog, KafkaApis):
1. Header: magic 2 (INVALID_RECORD, as ProduceRequest.validateRecords); a header that reads and
   a batch length inside the bytes (CORRUPT_MESSAGE); size <= `max_message_bytes`
   (MESSAGE_TOO_LARGE); the CRC-32C (CORRUPT_MESSAGE).
2. Counts: record_count >= 1 and last_offset_delta == record_count - 1 (INVALID_RECORD).
3. Attributes: a control batch (INVALID_RECORD: "clients are not allowed to write control
   records"); the transactional bit without a transactional id on the request
   (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers for transactional records without
   an authorized transactional id) or without a producer id (INVALID_RECORD); the LogAppendTime bit (INVALID_TIMESTAMP: "producer should not set
   timestamp type to LogAppendTime": the leader sets it, below).
4. Producer fields: producer_id -1 (none), or >= 0 with producer_epoch >= 0 and
   base_sequence >= 0 (INVALID_RECORD; Kafka checks the sequence, the epoch check is ours).
5. Records, after decompression (bounded by `max_decompressed_bytes`: MESSAGE_TOO_LARGE past
   it, CORRUPT_MESSAGE if the stream is bad): exactly record_count records filling the
   section to its last byte; record i has offset delta i; every length varint well formed and
   inside its record (key, value, header count, header key and value lengths); header keys
   UTF-8; each record's fields consume exactly its length; timestamps fit in an int64 (and
   the base timestamp is not within 2^13 of its limits) (INVALID_RECORD naming the record, as
   DefaultRecord's InvalidRecordException).
6. Max timestamp: when the header's max timestamp is not the largest record timestamp, it is
   rewritten (and the CRC recomputed), as Kafka's validator does with `setMaxTimestamp` for
   CreateTime; the returned bytes are then a copy.

Invariant (held by tests/unit/partition/test_validator*.py): whatever this accepts,
`decode_batches` decodes to exactly record_count records per batch with offsets
base_offset + 0, 1, ..., so raftlog's own consumer and Kafka clients read it.

7. Keys, on a compacted topic only (`require_keys`): a record without a key is refused
   (INVALID_RECORD, `record_errors` naming each such record's index in its batch, as
   LogValidator.validateKey: "Compacted topic cannot accept message without key in topic
   partition ..."). Only producers' batches come here: what the node writes itself and what
   the cleaner rewrites (partition/cleaner.py) is not checked.

Not checked: a timestamp window (no `message.timestamp.*.max.ms` topic
configs yet), baseOffset 0 (the log stamps offsets anyway).

Cost: no key or value is copied. Records are walked one by one (~500-800 ns a record, about
half of decode_batch's), except runs of records shaped like the one before them, checked with
strided slices in C (`_same_shape_run`): a confluent-kafka batch of 100-byte records costs
~55-90 ns a record; records built to break runs cost what the walk costs. Measured (2
cores, 6 runs each, alternating): the three nodes' CPU for a million 100-byte records
produced by confluent-kafka (acks=all, RF=3), median 0.89 s before validation and 0.98 s
with it at load ~1 (the walk alone had added ~0.45 s at load 2-5); records/s the same
(median 815k before, 835k after); `scripts/bench kafka` and `e2e` moved within their noise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
import struct
import sys
from typing import Final

from crc32c import crc32c

from partition.batch import (
    _ZZ1,
    _ZZ2,
    COMPRESSION_MASK,
    CRC_START,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    CheckedBatches,
    Header,
    _varint_slow,
    decode_record_rows,
    read_header,
    verify_crc,
)
from partition.compression import Compression, decompress
from partition.errors import CorruptRecordError
from raftlog.base.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    TransactionalIdAuthorizationFailedError,
)

__all__ = ["validate_client_records", "validate_client_batches", "TimestampPolicy", "check_batch_header", "check_records", "batch_too_large"]

_MAGIC_AT = 16
_MAX_TIMESTAMP_AT = 35
_ATTRIBUTES_AT = 21
_LOG_APPEND_TIME_BIT = 0x08
_INT16 = struct.Struct(">h")
_CRC = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
NO_PRODUCER_ID = -1
# One- and two-byte zig-zag varints hold [-8192, 8191]: a timestamp delta read by the fast
# paths leaves int64 only from a base timestamp this near the limits (refused, absurd anyway).
_SMALL_DELTA = 1 << 13


def _invalid(pos: int, what: str) -> InvalidRecordError:
    return InvalidRecordError(f"batch at position {pos}: {what}")


def check_batch_header(h: Header, pos: int, *, transactional: bool = False) -> None:
    """Steps 2-4 of the module docstring for one batch's header (pure, O(1)); `transactional`:
    the request names a transactional id. Raises InvalidRecordError,
    TransactionalIdAuthorizationFailedError or InvalidTimestampError."""
    if h.record_count < 1:
        raise _invalid(pos, f"record count {h.record_count} (a batch holds at least one record)")
    if h.last_offset_delta != h.record_count - 1:
        raise _invalid(pos, f"last offset delta {h.last_offset_delta} disagrees with the record "
                            f"count {h.record_count}")
    if h.is_control:
        raise _invalid(pos, "clients may not write control batches")
    if h.is_transactional:
        if not transactional:
            raise TransactionalIdAuthorizationFailedError(
                f"batch at position {pos}: transactional batch in a produce without a transactional id")
        if h.producer_id < 0:
            raise _invalid(pos, "a transactional batch needs a producer id")
    if h.attributes & _LOG_APPEND_TIME_BIT:
        raise InvalidTimestampError(
            f"batch at position {pos}: timestamp type LogAppendTime is the broker's to set, not a producer's")
    if h.producer_id != NO_PRODUCER_ID:
        if h.producer_id < 0:
            raise _invalid(pos, f"producer id {h.producer_id} (-1 for none, else >= 0)")
        if h.producer_epoch < 0 or h.base_sequence < 0:
            raise _invalid(pos, f"producer id {h.producer_id} with epoch {h.producer_epoch} and base "
                                f"sequence {h.base_sequence} (both must be >= 0)")


def check_records(data, start: int, end: int, count: int, base_timestamp: int, pos: int) -> int:
    """Step 5 for one batch's records section data[start:end] (decompressed): walk the
    `count` records without copying keys or values. Returns the largest record timestamp
    (base_timestamp + the largest delta). Raises InvalidRecordError naming the record.

    Records are walked one by one (`_walk`), except runs of records shaped exactly like the
    one before them, which `_same_shape_run` checks with a few strided slices in C (a
    producer's batch is mostly such runs). Accepts a subset of what
    partition.batch.decode_record_rows accepts (offset deltas must be exactly 0..count-1
    here), so an accepted section decodes."""
    if not _INT64_MIN + _SMALL_DELTA <= base_timestamp <= _INT64_MAX - _SMALL_DELTA:
        raise _invalid(pos, f"base timestamp {base_timestamp} too near the int64 limits")
    p = start
    ts_max = _INT64_MIN
    i = 0
    slow_n = 1  # records walked one by one before the next run is tried; doubles while none is found
    while i < count:
        stop = min(count, i + slow_n)
        p, walked_max, last = _walk(data, p, end, i, stop, count, base_timestamp, pos)
        ts_max = max(ts_max, walked_max)
        i = stop
        if count - i < _MIN_RUN:
            continue
        n, run_max = _same_shape_run(data, last, p, end, i, count)
        if n:
            p += n * (p - last)
            i += n
            ts_max = max(ts_max, run_max)
            slow_n = 1
        else:
            slow_n = min(2 * slow_n, _MAX_SLOW_STEP)
    if p != end:
        raise _invalid(pos, f"{end - p} bytes left after the {count} records the header counts")
    return base_timestamp + ts_max


# Same-shape runs: strided slices compared in C instead of one Python walk per record.
_MIN_RUN = 8  # shorter runs are walked
_FIRST_CHUNK = 64
_MAX_SLOW_STEP = 64
# Offset deltas j with a canonical varint of n bytes: lo <= j < hi (three bytes: up to 2^17,
# more records than a batch of max_message_bytes holds at the default).
_OD_RANGES: Final = {1: (0, 64), 2: (64, 8192), 3: (8192, 1 << 17)}
# One-byte timestamp delta varint -> delta + 64 (order-preserving, so max() of the translated
# bytes is the largest delta); bytes >= 0x80 never reach it (checked first).
_TS1_RANK: Final = bytes((_ZZ1[b] + 64) if b < 0x80 else 0 for b in range(256))
_ODD: Final = bytes(range(1, 256, 2))  # zig-zag varints whose first byte is odd are negative


def _varint_size(data, p: int) -> int:
    n = 1
    while data[p + n - 1] >= 0x80:
        n += 1
    return n


def _same_shape_run(data, template: int, p: int, end: int, i: int, count: int) -> tuple[int, int]:
    """How many records from position p (records i, i+1, ...) are shaped exactly like the
    valid record at `template` (which ends at p): the same length, attributes, key length,
    value length and no headers, a one- or two-byte timestamp delta (>= 0 if two) and the canonical
    one- to three-byte offset delta of their index. Returns (n, largest timestamp delta of
    the n), or (0, 0) when not even the first _MIN_RUN are."""
    size = p - template
    if data[p:p + 2] != data[template:template + 2]:
        return 0, 0  # the next record differs in length (or attributes): walk it
    # The template's layout (it was walked: its varints are well formed and fit); one-byte
    # varints, the usual case, without a call.
    o_ts = (1 if data[template] < 0x80 else _varint_size(data, template)) + 1
    t = 1 if data[template + o_ts] < 0x80 else _varint_size(data, template + o_ts)
    o_od = o_ts + t
    n_od = 1 if data[template + o_od] < 0x80 else _varint_size(data, template + o_od)
    o_key = o_od + n_od
    b = data[template + o_key]
    if b == 1:
        o_val = o_key + 1
    else:
        o_val = o_key + 1 + _ZZ1[b] if b < 0x80 else -1
    if t > 2 or n_od > 3 or o_val < 0 or data[template + size - 1] != 0:
        return 0, 0  # wide deltas, a long key or headers: walk
    vb = 1 if data[template + o_val] < 0x80 else _varint_size(data, template + o_val)
    if o_val + vb + _value_length(data, template + o_val, vb) + 1 != size:
        return 0, 0
    # Bytes every record of the run shares with the template: length and attributes, the key
    # length (or null), the value length, the header count 0.
    fixed = (*range(template, template + o_ts), template + o_key, *range(template + o_val, template + o_val + vb),
             template + size - 1)
    lo, hi = _OD_RANGES[n_od]
    limit = min(count - i, (end - p) // size, hi - i)
    if i < lo:
        return 0, 0
    tables = _offset_delta_bytes(n_od)
    # Growing chunks (64, 256, 1024, ...; the last one what is left; a first chunk that fails
    # is halved down to _MIN_RUN) until one fails: a run that breaks off costs at most about
    # four times what it covered plus 128 records' slices, so records built to break runs cost
    # no more than walking them (measured).
    done, best, k = 0, _INT64_MIN, min(_FIRST_CHUNK, limit)
    while k >= _MIN_RUN or (done and k):
        at = p + done * size
        stop = at + k * size
        shift = at - template
        largest = None
        for f in fixed:  # each shared byte, every record's at once (strided slices, in C)
            if data[f + shift:stop:size] != data[f:f + 1] * k:
                break
        else:
            j = i + done
            for b, table in enumerate(tables):  # the offset deltas: j, j + 1, ..., canonical
                if data[at + o_od + b:stop:size] != table[j:j + k]:
                    break
            else:
                largest = _largest_delta(data, at + o_ts, stop, size, t)
        if largest is None:
            if done or k <= _MIN_RUN:
                break
            k //= 2  # the first chunk: halved down to _MIN_RUN
            continue
        done += k
        best = max(best, largest)
        k = min(4 * k, limit - done)
    return (done, best) if done else (0, 0)


def _value_length(data, p: int, vb: int) -> int:
    return _ZZ1[data[p]] if vb == 1 else _ZZ2[(data[p + 1] << 8) | data[p]] if vb == 2 else -(1 << 40)


@functools.cache
def _offset_delta_bytes(n: int) -> tuple[bytes, ...]:
    """For n-byte offset deltas: byte b of the canonical varint of every j < hi, one bytes
    object per b (index j; made on first use: 384 KiB for n = 3)."""
    hi = _OD_RANGES[n][1]
    return tuple(bytes(((2 * j >> (7 * b)) & 0x7F) | (0x80 if b < n - 1 else 0) for j in range(hi))
                 for b in range(n))


def _largest_delta(data, at: int, stop: int, size: int, t: int) -> int | None:
    """The largest of the run's timestamp deltas, all `t` bytes long (else None: walk)."""
    lo = data[at:stop:size]
    if t == 1:
        return max(lo.translate(_TS1_RANK)) - 64 if max(lo) < 0x80 else None
    hi = data[at + 1:stop:size]
    if min(lo) < 0x80 or max(hi) >= 0x80 or len(lo.translate(None, _ODD)) != len(lo):
        return None  # not all two bytes long, or a negative delta
    pairs = bytearray(2 * len(lo))
    pairs[0::2], pairs[1::2] = (lo, hi) if sys.byteorder == "little" else (hi, lo)
    m = max(memoryview(pairs).cast("H"))
    return (((m >> 8) << 7) | (m & 0x7F)) >> 1  # zig-zag of a delta >= 0: value * 2


def _walk(data, p: int, end: int, first: int, stop: int, count: int, base_timestamp: int,
          pos: int) -> tuple[int, int, int]:
    """Records first..stop-1 of `count`, one by one from position p: returns (the position
    after them, the largest timestamp delta, the position of the last one)."""
    zz1, zz2, slow = _ZZ1, _ZZ2, _varint_slow
    ts_max = _INT64_MIN
    i = last = first
    try:
        for i in range(first, stop):
            last = p
            # Varints inline (one byte, two bytes by table, else the general loop), as in
            # decode_record_rows: a helper call per field would cost as much as the walk.
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
                raise _invalid(pos, f"record {i}: length {length} does not fit the batch")
            b = data[p + 1]  # data[p]: the record's attributes, unused
            if b < 0x80:
                ts = zz1[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    ts = zz2[(c << 8) | b]
                    p += 3
                else:  # only a delta of 3+ bytes (|delta| >= _SMALL_DELTA) can leave int64
                    ts, p = slow(data, p + 1, 10)
                    if not _INT64_MIN <= base_timestamp + ts <= _INT64_MAX:
                        raise _invalid(pos, f"record {i}: timestamp delta {ts} leaves int64")
            if ts > ts_max:
                ts_max = ts
            b = data[p]
            if b < 0x80:
                delta = zz1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    delta = zz2[(c << 8) | b]
                    p += 2
                else:
                    delta, p = slow(data, p, 5)
            if delta != i:
                raise _invalid(pos, f"record {i}: offset delta {delta} (expected {i})")
            b = data[p]
            if b == 1:  # null key
                p += 1
            else:
                if b < 0x80:
                    n = zz1[b]
                    p += 1
                else:
                    n, p = slow(data, p, 5)
                if n > 0:
                    p += n
                elif n < -1:
                    raise _invalid(pos, f"record {i}: key length {n}")
                if p > rend:
                    raise _invalid(pos, f"record {i}: key length {n} runs past the record")
            b = data[p]
            if b < 0x80:
                n = zz1[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    n = zz2[(c << 8) | b]
                    p += 2
                else:
                    n, p = slow(data, p, 5)
            if n > 0:
                p += n
            elif n < -1:
                raise _invalid(pos, f"record {i}: value length {n}")
            if p >= rend:
                raise _invalid(pos, f"record {i}: value length {n} runs past the record")
            if data[p] == 0:
                p += 1
            else:
                p = _check_headers(data, p, rend, pos, i)
            if p != rend:
                raise _invalid(pos, f"record {i}: length {length} disagrees with its fields ({p - rend:+d})")
    except IndexError:
        raise _invalid(pos, f"records end inside record {i} of {count}") from None
    except CorruptRecordError as exc:  # _varint_slow's: a varint longer than its type
        raise _invalid(pos, f"record {i}: {exc.message}") from None
    return p, ts_max, last


def _check_headers(data, p: int, end: int, pos: int, i: int) -> int:
    count, p = _varint_slow(data, p, 5)
    if count < 0 or 2 * count > end - p:
        raise _invalid(pos, f"record {i}: header count {count}")
    for _ in range(count):
        n, p = _varint_slow(data, p, 5)
        q = p + n
        if n < 0 or q > end:
            raise _invalid(pos, f"record {i}: header key length {n}")
        try:
            bytes(data[p:q]).decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(pos, f"record {i}: header key is not UTF-8") from None
        p = q
        n, p = _varint_slow(data, p, 5)
        if n < -1 or p + n > end:
            raise _invalid(pos, f"record {i}: header value length {n}")
        if n > 0:
            p += n
    return p


def batch_too_large(size: int, max_message_bytes: int, topic: str) -> MessageTooLargeError:
    """The refusal of a batch over its topic's limit, saying how to raise it (also the
    replica's, partition/replica.py `append_as_leader`)."""
    return MessageTooLargeError(
        f"batch of {size} bytes > max_message_bytes {max_message_bytes} of {topic} (raise it: "
        f"raftlog topics alter {topic} --set max_message_bytes=N; Kafka's max.message.bytes)")


def _null_keys(data, start: int, end: int, h: Header, pos: int, where: str) -> None:
    """Step 7 for one (already checked) batch: refuse it if a record has no key."""
    rows = decode_record_rows(data, start, end, h, pos)
    missing = [i for i, row in enumerate(rows) if row[4] is None]
    if missing:
        message = f"Compacted topic cannot accept message without key in topic partition {where}."
        raise InvalidRecordError(
            f"One or more records have been rejected due to {len(missing)} record errors in total, "
            f"and only showing the first three errors at most: {missing[:3]}: {message}",
            record_errors=[[i, message] for i in missing])


@dataclass(frozen=True)
class TimestampPolicy:
    """A topic's timestamp rules at one moment (`now_ms`, the leader's clock): CreateTime
    timestamps must lie in [now - before_max_ms, now + after_max_ms] (Kafka's
    message.timestamp.before/after.max.ms; INVALID_TIMESTAMP), checked on each batch's first
    and largest timestamps; `log_append_time`: the batch's timestamp type becomes
    LogAppendTime and its max timestamp `now_ms` (Kafka's LogValidator; the CRC is recomputed)."""

    now_ms: int
    before_max_ms: int = _INT64_MAX
    after_max_ms: int = _INT64_MAX
    log_append_time: bool = False

    def check(self, first: int, largest: int, pos: int) -> None:
        if self.log_append_time:
            return
        low = self.now_ms - self.before_max_ms if self.before_max_ms < _INT64_MAX else None
        high = self.now_ms + self.after_max_ms if self.after_max_ms < _INT64_MAX else None
        for ts in (first, largest):
            if ts >= 0 and ((low is not None and ts < low) or (high is not None and ts > high)):
                raise InvalidTimestampError(
                    f"batch at position {pos}: timestamp {ts} is out of range: the topic takes "
                    f"[{low if low is not None else '-inf'}, {high if high is not None else '+inf'}] "
                    "(message.timestamp.before.max.ms / after.max.ms)")


def validate_client_records(
    records: bytes, *, max_message_bytes: int, max_decompressed_bytes: int, topic: str = "the topic",
    transactional: bool = False,
    require_keys: bool = False, partition: int = -1, timestamps: TimestampPolicy | None = None,
) -> bytes | bytearray:
    """Validate a producer's `records` (one or more RecordBatch v2) as the module docstring
    says. Returns the bytes to append: `records` itself, or a corrected copy when a max
    timestamp was rewritten. Raises (all RejectedError: nothing was stored) InvalidRecordError,
    CorruptRecordError, MessageTooLargeError, InvalidTimestampError,
    TransactionalIdAuthorizationFailedError, UnsupportedCompressionTypeError (a codec this
    node cannot read). `topic` names the topic in a MESSAGE_TOO_LARGE message; `require_keys`
    (a compacted topic) refuses records without a key (step 7), naming topic-`partition`.
    `timestamps`: the topic's bounds and LogAppendTime (TimestampPolicy)."""
    return validate_client_batches(
        records, max_message_bytes=max_message_bytes, max_decompressed_bytes=max_decompressed_bytes,
        topic=topic, transactional=transactional, require_keys=require_keys, partition=partition,
        timestamps=timestamps).data


def validate_client_batches(
    records: bytes, *, max_message_bytes: int, max_decompressed_bytes: int, topic: str = "the topic",
    transactional: bool = False,
    require_keys: bool = False, partition: int = -1, timestamps: TimestampPolicy | None = None,
) -> CheckedBatches:
    """`validate_client_records`, returning what the check found too: the bytes to append
    with the (position, Header) of each of their batches, headers and CRC-32Cs checked
    (batch.CheckedBatches), so the leader's append reads no header and computes no CRC
    again (partition/replica_writes.py, Log.append `checked`). Same checks, same errors."""
    fixes: list[tuple[int, int]] = []  # (batch position, true max timestamp)
    checked: list[tuple[int, Header]] = []
    pos = 0
    total = len(records)
    while pos < total:
        if total - pos > _MAGIC_AT and records[pos + _MAGIC_AT] != MAGIC:
            raise _invalid(pos, f"magic {records[pos + _MAGIC_AT]}: produce requests carry "
                                f"RecordBatch v2 (magic {MAGIC}) only")
        h = read_header(records, pos)  # what locates the batch: CORRUPT_MESSAGE
        if h.batch_length + LOG_OVERHEAD > max_message_bytes:
            raise batch_too_large(h.size, max_message_bytes, topic)
        verify_crc(records, pos, h)
        check_batch_header(h, pos, transactional=transactional)
        start = pos + HEADER_BYTES
        end = pos + LOG_OVERHEAD + h.batch_length
        if not h.attributes & COMPRESSION_MASK:
            max_timestamp = check_records(records, start, end, h.record_count, h.base_timestamp, pos)
            if require_keys:
                _null_keys(records, start, end, h, pos, f"{topic}-{partition}")
        else:
            data = decompress(h.compression, memoryview(records)[start:end],
                              max_decompressed_bytes=max_decompressed_bytes)
            max_timestamp = check_records(data, 0, len(data), h.record_count, h.base_timestamp, pos)
            if require_keys:
                _null_keys(data, 0, len(data), h, pos, f"{topic}-{partition}")
        if timestamps is not None:
            timestamps.check(h.base_timestamp, max_timestamp, pos)
            if timestamps.log_append_time:
                max_timestamp = timestamps.now_ms
        if max_timestamp != h.max_timestamp or (timestamps is not None and timestamps.log_append_time):
            fixes.append((pos, max_timestamp))
        checked.append((pos, h))
        pos = end
    if not fixes:
        return CheckedBatches(records, checked)
    fixed = bytearray(records)
    log_append_time = timestamps is not None and timestamps.log_append_time
    for pos, max_timestamp in fixes:
        if log_append_time:
            attributes = _INT16.unpack_from(fixed, pos + _ATTRIBUTES_AT)[0]
            _INT16.pack_into(fixed, pos + _ATTRIBUTES_AT, attributes | _LOG_APPEND_TIME_BIT)
        _INT64.pack_into(fixed, pos + _MAX_TIMESTAMP_AT, max_timestamp)
        end = pos + LOG_OVERHEAD + struct.unpack_from(">i", fixed, pos + 8)[0]
        _CRC.pack_into(fixed, pos + 17, crc32c(memoryview(fixed)[pos + CRC_START:end]))
    # The rewritten headers (max timestamp, attributes, CRC) as they now are in `fixed`.
    return CheckedBatches(fixed, [(pos, read_header(fixed, pos)) for pos, _ in checked])

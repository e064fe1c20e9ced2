"""Log compaction (cleanup_policy "compact"): keep the newest record of every key.

The log cleans the segments it may: CLOSED, fully fsynced segments (all below the log's
recovery point, and below the high watermark when the caller gives one), oldest first. The
active segment is never touched. Two phases, so that the long one runs beside the log's
writer (Kafka's cleaner thread does the same):
* `clean(...)`: reads the candidates (pinned by the log), builds the offset map, filters
  every batch, and writes each rewritten segment's `.cleaned` files, fsynced. Any thread;
  never changes a file the log uses; `should_stop()` ends it early (CleanAborted).
* `install(...)`: the swap of one segment (steps 2-4 below), by the log's writer, oldest
  first, each followed by the log replacing its in-memory segment.
`compact(...)` does both in one call (the log's `maintain` and the tests use it).

What survives (Kafka's rules, with the differences named):
* a record whose key has no newer record in the cleaned segments (the offset map is built
  from those segments only, so a newer value that is not yet durable never removes an old one);
* records with a null key (Kafka rejects them on compacted topics; here they are kept);
* a tombstone (null value) until `delete_retention_ms` after its segment's largest timestamp;
* control batches, whole and untouched: they carry leader-change markers for the partition
  Raft and the COMMIT/ABORT markers of transactions, and have no key in the user's sense
  (Kafka removes a transaction's marker in a later pass once its records are gone; here markers
  stay: never removed too early, at the cost of a few bytes per transaction);
* never a record of an aborted transaction (`aborted`: the partition's aborted-transaction
  entries, producer id and offset range, as Kafka's cleaner reads its `.txnindex`): such a
  batch neither enters the offset map (an aborted value must not obsolete a committed one)
  nor survives, as Kafka discards it. The caller cleans only below the last stable offset, so
  no record of an open transaction is ever cleaned.
Offsets never change: a filtered batch keeps its base offset, last offset delta, base
timestamp, producer fields and attributes; the surviving records are copied byte for byte (their
offset and timestamp deltas stay valid because the base values stay), so offset deltas inside
a batch may skip values, which Kafka allows. An emptied batch is dropped (an idempotent
producer's is reported, `CleanedSegment.emptied`: producer state may name it, and Kafka's rule
of keeping each producer's last batch is not followed here); an emptied segment stays as an
empty file (its base offset keeps the segment map simple).

Crash safety of one segment's swap (each step fsyncs what it wrote, then the directory):
  1. write `<base>.log.cleaned`, `.index.cleaned`, `.timeindex.cleaned`; fsync; fsync dir
  2. create the marker `<base>.swap`; fsync dir            <- the commit point
  3. os.replace each `.cleaned` over its final name; fsync dir
  4. unlink the marker; fsync dir
`recover_swaps` (run by Log.open before anything else) rolls a swap forward when the marker
exists (every `.cleaned` file is then complete) and back otherwise (deletes `.cleaned`).
Segments are swapped oldest first, so when a crash leaves some cleaned and some not, no key
loses its newest value: a record is only ever dropped because a newer one exists at a
higher offset in an already durable segment, and a tombstone is only dropped after the older
values it covers were dropped from earlier (already swapped) segments.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from crc32c import crc32c

from partition.batch import (
    HEADER_BYTES,
    HEADER_HEAD,
    HEADER_TAIL,
    LOG_OVERHEAD,
    MAGIC,
    Compression,
    Header,
    TimestampType,
    decode_batch,
)
from partition.compression import compress, decompress
from partition.errors import CorruptRecordError
from partition.file_io import pwrite_all
from partition.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
    parse_segment_name,
    segment_name,
)

__all__ = [
    "CleanResult",
    "CleanedSegment",
    "CleanAborted",
    "clean",
    "install",
    "discard",
    "compact",
    "filter_batch",
    "recover_swaps",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
]

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
_MAX_DECOMPRESSED_BYTES = 256 << 20


@dataclass
class CleanResult:
    """What one compaction pass did."""

    segments_rewritten: list[str] = field(default_factory=list)
    records_removed: int = 0
    bytes_reclaimed: int = 0
    # Earliest now_ms at which a kept tombstone may expire (None: no tombstone kept).
    next_tombstone_expiry_ms: int | None = None
    # Base offsets of the idempotent producers' batches no record of which survived (filled by
    # the log's install, for the segments swapped in): producer state may name them.
    batches_emptied: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CleanedSegment:
    """One segment `clean` rewrote: its `.cleaned` files are written and fsynced."""

    segment: Segment
    records_removed: int
    emptied: tuple[int, ...] = ()  # base offsets of producer batches dropped whole, ascending


class CleanAborted(Exception):
    """`clean` stopped because `should_stop()` said so; its `.cleaned` files are deleted."""


def _fsync_dir(dir_fd: int) -> None:
    os.fsync(dir_fd)


def _record_spans(payload: bytes, count: int) -> list[tuple[int, int]]:
    """(start, end) of each record in an uncompressed records section (length varints only)."""
    spans = []
    p = 0
    n = len(payload)
    for _ in range(count):
        shift = 0
        raw = 0
        q = p
        while True:
            if q >= n or shift > 28:
                raise CorruptRecordError("bad record length varint")
            b = payload[q]
            q += 1
            raw |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        length = (raw >> 1) ^ -(raw & 1)
        end = q + length
        if length < 0 or end > n:
            raise CorruptRecordError("record length past the batch end")
        spans.append((p, end))
        p = end
    return spans


def filter_batch(batch: bytes, keep: Callable[[int, bytes | None, bytes | None], bool]
                 ) -> tuple[bytes | None, int]:
    """Apply `keep(offset, key, value)` to every record of one (non-control) batch.

    Returns (new batch bytes or None if no record survives, records removed). The batch is
    returned as is when every record survives; otherwise rebuilt as the module docstring says.
    Raises CorruptRecordError if the batch does not decode."""
    h, records = decode_batch(batch, max_decompressed_bytes=_MAX_DECOMPRESSED_BYTES)
    kept = [keep(r.offset, r.key, r.value) for r in records]
    n_kept = sum(kept)
    removed = len(records) - n_kept
    if removed == 0:
        return batch, 0
    if n_kept == 0:
        return None, removed
    body = memoryview(batch)[HEADER_BYTES:h.size]
    codec = h.compression
    payload = bytes(body) if codec == Compression.NONE else bytes(
        decompress(codec, body, max_decompressed_bytes=_MAX_DECOMPRESSED_BYTES))
    spans = _record_spans(payload, h.record_count)
    new_records = b"".join(payload[s:e] for (s, e), k in zip(spans, kept) if k)
    new_payload = new_records if codec == Compression.NONE else compress(codec, new_records)
    if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_ts = h.max_timestamp
    else:
        max_ts = max(r.timestamp for r, k in zip(records, kept) if k)
    tail = HEADER_TAIL.pack(h.attributes, h.last_offset_delta, h.base_timestamp, max_ts,
                             h.producer_id, h.producer_epoch, h.base_sequence, n_kept)
    crc = crc32c(new_payload, crc32c(tail))
    head = HEADER_HEAD.pack(h.base_offset, HEADER_BYTES - LOG_OVERHEAD + len(new_payload),
                             h.partition_leader_epoch, MAGIC, crc)
    return b"".join((head, tail, new_payload)), removed


AbortedRange = tuple[int, int, int]  # (producer id, first offset, last offset): an aborted transaction


def _aborted_index(aborted: Sequence[AbortedRange]) -> dict[int, list[tuple[int, int]]]:
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for pid, first, last in aborted:
        by_pid.setdefault(pid, []).append((first, last))
    return by_pid


def _in_aborted(h: Header, by_pid: dict[int, list[tuple[int, int]]]) -> bool:
    """Whether `h` is a transactional batch of an aborted transaction."""
    if not h.is_transactional or h.is_control:
        return False
    return any(first <= h.base_offset <= last for first, last in by_pid.get(h.producer_id, ()))


def _offset_map(segments: Iterable[Segment], by_pid: dict[int, list[tuple[int, int]]]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in segments:
        for _, h, data in seg.batch_bytes():
            if h.is_control or _in_aborted(h, by_pid):
                continue
            for r in decode_batch(data, max_decompressed_bytes=_MAX_DECOMPRESSED_BYTES)[1]:
                if r.key is not None:
                    latest[r.key] = r.offset  # offsets ascend: the last one wins
    return latest


def clean(directory: Path, segments: list[Segment], *, now_ms: int, delete_retention_ms: int,
          index_interval_bytes: int, max_index_bytes: int,
          should_stop: Callable[[], bool] = lambda: False, aborted: Sequence[AbortedRange] = (),
          ) -> tuple[list[CleanedSegment], CleanResult]:
    """Phase 1: filter `segments` (closed, durable, oldest first; pinned by the caller) and
    write each one that loses records as `.cleaned` files (segment, index, timeindex), every
    file fsynced and then the directory. Returns ([CleanedSegment], a CleanResult with the
    counts and the next tombstone expiry; `segments_rewritten` is filled by `install`).
    Raises OSError, CorruptRecordError (a batch that does not decode), CleanAborted."""
    result = CleanResult()
    cleaned: list[CleanedSegment] = []
    by_pid = _aborted_index(aborted)
    latest = _offset_map(segments, by_pid)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)  # our own: the log's may close
    try:
        for seg in segments:
            if should_stop():
                raise CleanAborted(f"stopped before segment {seg.name}")
            tombstones_expire = now_ms - seg.max_timestamp > delete_retention_ms
            kept_tombstone = False

            def keep(offset: int, key: bytes | None, value: bytes | None) -> bool:
                nonlocal kept_tombstone
                if key is None:
                    return True
                if latest.get(key) != offset:
                    return False
                if value is None:
                    if tombstones_expire:
                        return False
                    kept_tombstone = True
                return True

            out = bytearray()
            removed = 0
            emptied = []
            for _, h, data in seg.batch_bytes():
                if h.is_control:
                    out += data
                    continue
                new, n = filter_batch(data, (lambda offset, key, value: False) if _in_aborted(h, by_pid) else keep)
                removed += n
                if new is not None:
                    out += new
                elif h.producer_id >= 0:
                    emptied.append(h.base_offset)
            if kept_tombstone:
                expiry = seg.max_timestamp + delete_retention_ms + 1
                if result.next_tombstone_expiry_ms is None or expiry < result.next_tombstone_expiry_ms:
                    result.next_tombstone_expiry_ms = expiry
            if removed == 0:
                continue
            index_bytes, timeindex_bytes = Segment.index_bytes_for(
                bytes(out), seg.base_offset, index_interval_bytes=index_interval_bytes,
                max_index_bytes=max_index_bytes)
            _write_cleaned(directory, seg.base_offset, (bytes(out), index_bytes, timeindex_bytes))
            cleaned.append(CleanedSegment(seg, removed, tuple(emptied)))
            result.records_removed += removed
            result.bytes_reclaimed += seg.size_bytes - len(out)
        if cleaned:
            _fsync_dir(dir_fd)
    except BaseException:
        discard(directory, [c.segment.base_offset for c in cleaned])
        raise
    finally:
        os.close(dir_fd)
    return cleaned, result


def install(directory: Path, dir_fd: int, base_offset: int,
            crash_point: Callable[[str], None] = lambda step: None) -> None:
    """Phase 2 for one segment whose `.cleaned` files `clean` wrote: mark, replace, unmark
    (module docstring, steps 2-4), fsyncing the directory after each. The caller then swaps
    its in-memory segment. Raises OSError."""
    name = segment_name(base_offset)
    fd = os.open(directory / (name + SWAP_SUFFIX), os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    _fsync_dir(dir_fd)
    crash_point("swap_marked")
    for suffix, step in zip(_SUFFIXES, ("log_replaced", "index_replaced", "timeindex_replaced")):
        os.replace(directory / (name + suffix + CLEANED_SUFFIX), directory / (name + suffix))
        _fsync_dir(dir_fd)
        crash_point(step)
    os.unlink(directory / (name + SWAP_SUFFIX))
    _fsync_dir(dir_fd)
    crash_point("marker_removed")


def discard(directory: Path, base_offsets: Iterable[int]) -> None:
    """Delete the `.cleaned` files of segments that will not be installed (no fsync needed:
    an unmarked `.cleaned` file is deleted by `recover_swaps` anyway)."""
    for base in base_offsets:
        for suffix in _SUFFIXES:
            try:
                os.unlink(directory / (segment_name(base) + suffix + CLEANED_SUFFIX))
            except FileNotFoundError:
                pass


def compact(directory: Path, dir_fd: int, segments: list[Segment], *, now_ms: int,
            delete_retention_ms: int, index_interval_bytes: int, max_index_bytes: int,
            on_swapped: Callable[[Segment], None],
            crash_point: Callable[[str], None] = lambda step: None) -> CleanResult:
    """Clean `segments` (closed, durable, oldest first) and swap each rewritten one in: `clean`
    then `install` per segment. `on_swapped(old_segment)` is called after each swap so the log
    replaces its in-memory segment before the next one. `crash_point(step)` is a test seam
    called after each durable step ("cleaned_written", "swap_marked", "log_replaced",
    "index_replaced", "timeindex_replaced", "marker_removed"); raising from it simulates a
    crash there."""
    cleaned, result = clean(directory, segments, now_ms=now_ms,
                            delete_retention_ms=delete_retention_ms,
                            index_interval_bytes=index_interval_bytes,
                            max_index_bytes=max_index_bytes)
    for c in cleaned:
        crash_point("cleaned_written")  # every .cleaned file is durable, none swapped in yet
        install(directory, dir_fd, c.segment.base_offset, crash_point)
        result.segments_rewritten.append(c.segment.name)
        on_swapped(c.segment)
    return result


def _write_cleaned(directory: Path, base_offset: int, contents: tuple[bytes, bytes, bytes]) -> None:
    name = segment_name(base_offset)
    for suffix, data in zip(_SUFFIXES, contents):
        fd = os.open(directory / (name + suffix + CLEANED_SUFFIX),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            pwrite_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)


def recover_swaps(directory: Path, dir_fd: int) -> list[str]:
    """Finish every marked swap, delete every unmarked `.cleaned` file. Returns what it did,
    one line per segment (empty when the directory was clean)."""
    done = []
    names = os.listdir(directory)
    for fname in names:
        base = parse_segment_name(fname, SWAP_SUFFIX)
        if base is None:
            continue
        name = segment_name(base)
        for suffix in _SUFFIXES:
            cleaned = directory / (name + suffix + CLEANED_SUFFIX)
            if cleaned.exists():
                os.replace(cleaned, directory / (name + suffix))
        _fsync_dir(dir_fd)
        os.unlink(directory / fname)
        _fsync_dir(dir_fd)
        done.append(f"{name}: swap completed")
    for fname in os.listdir(directory):
        if fname.endswith(CLEANED_SUFFIX):
            os.unlink(directory / fname)
            done.append(f"{fname}: rolled back")
    if done:
        _fsync_dir(dir_fd)
    return done

"""The one definition of an intact segment (partition/segment.py "Invariants"):
`SegmentVerifier`, used by recovery's scan (`Segment.recover`), the scrubber and the damage
check. Every batch's header and CRC-32C are good, base offsets start at or after the
segment's base and strictly increase past the previous batch's last offset, offsets stay
within int32 of the base (and below the next segment's base when given), and partition
leader epochs never decrease. It can also check the segment's in-memory indexes against the
batches it reads. What it checked it marks as checked on the segment ("checked once").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from partition.batch import (
    HEADER,
    HEADER_BYTES,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    Header,
    read_header,
    scan_valid_prefix,
    verify_crc,
)
from partition.errors import CorruptRecordError
from partition.file_io import pread_exact
from partition.index import OffsetIndex, TimeIndex

__all__ = ["SegmentVerifier", "SegmentScan", "ResumePoint", "parse_header_prefix", "CheckedSegment"]

T = TypeVar("T")


class CheckedSegment(Protocol):
    """What the verifier reads of a segment (partition/segment.py `Segment`)."""

    name: str
    base_offset: int
    size_bytes: int
    verified_version: int
    index: OffsetIndex
    timeindex: TimeIndex

    def _io(self, call: Callable[..., T], *args: Any) -> T: ...

    def mark_verified(self, start: int, end: int, version: int) -> None: ...


def parse_header_prefix(data, off: int = 0) -> Header:
    """Header fields at `off` (61 bytes must be there); checks magic and minimum length only."""
    h = Header(*HEADER.unpack_from(data, off))  # not read_header: the walk reads headers only
    if h.magic != MAGIC:
        raise CorruptRecordError(f"magic {h.magic} (expected {MAGIC})")
    if h.batch_length < MIN_BATCH_LENGTH or h.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch length {h.batch_length} / last offset delta {h.last_offset_delta}")
    return h


@dataclass(frozen=True)
class ResumePoint:
    """Where the recovery of an active segment may start (partition/log.py "recovery point"):
    every batch in [0, position) was checked and fsynced, the last ending just before
    `next_offset` with epoch `last_epoch`; the indexes and index state describe that prefix."""

    position: int
    next_offset: int
    last_epoch: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int
    index: OffsetIndex
    timeindex: TimeIndex


@dataclass(frozen=True)
class SegmentScan:
    """What a CRC scan of a segment found: the intact prefix and what was cut after it."""

    valid_bytes: int
    headers: list[tuple[int, Header]]
    bytes_dropped: int
    offsets_lost: int


class SegmentVerifier:
    """A resumable, read-only check of one segment's batches (the module docstring's rules),
    from position 0 to `end` (default: the segment's size when created).

    Call `step(max_bytes)` until `done`; each step reads about `max_bytes` (at least one whole
    batch) with one or two preads, so a caller can pace it (the scrubber) or run it to the end
    (recovery, the damage check). Afterwards: `damage` is None when every batch was intact,
    else the reason for the first bad one, which starts at `valid_bytes` (the end of the
    intact prefix); `next_offset` / `last_epoch` describe that prefix; `damage_offset` is the
    bad batch's base offset when its header still reads sanely, else `next_offset`. With
    `check_index=True` the segment's in-memory `index` and `timeindex` are compared with the
    batches as they are read: every offset-index entry must be the position and base offset
    of a batch, every timeindex entry the base offset and max timestamp of one; the first
    disagreement is in `index_problem` (the batches themselves may still be intact).

    Concurrency: reads only (preads on the pinned fd); safe beside the log's writer, but a
    truncation of this segment meanwhile shows up as damage: re-check under the writer."""

    def __init__(self, seg: CheckedSegment, *, end: int | None = None, min_epoch: int = -1,
                 max_offset: int | None = None, check_index: bool = False,
                 keep_headers: bool = False, start: int = 0, next_offset: int | None = None):
        self.seg = seg
        self.end = seg.size_bytes if end is None else end
        self.max_offset = max_offset
        # `start` > 0: resume after a prefix checked earlier (recovery from an offset-granular
        # recovery point), whose batches end just before `next_offset`.
        self.valid_bytes = start
        self.next_offset = seg.base_offset if next_offset is None else next_offset
        self.last_epoch = min_epoch
        self.damage: str | None = None
        self.damage_offset = seg.base_offset
        self.batches = 0
        self.headers: list[tuple[int, Header]] | None = [] if keep_headers else None
        self.index_problem: str | None = None
        self._check_index = check_index
        self._ix = 0
        self._tx = 0
        self._version = seg.verified_version
        if check_index:
            self._index = (seg.index.rel_offsets, seg.index.positions)
            self._timeindex = (seg.timeindex.timestamps, seg.timeindex.rel_offsets)

    @property
    def done(self) -> bool:
        return self.damage is not None or self.valid_bytes >= self.end

    def run(self) -> "SegmentVerifier":
        """Check to the end in 8 MiB steps; returns self."""
        while not self.done:
            self.step(_SCAN_CHUNK_BYTES)
        return self

    def step(self, max_bytes: int) -> int:
        """Check the next ~max_bytes (at least one batch); returns the bytes read."""
        if self.done:
            return 0
        seg, pos = self.seg, self.valid_bytes
        chunk = seg._io(pread_exact, min(max(max_bytes, HEADER_BYTES), self.end - pos), pos)
        read = len(chunk)
        if len(chunk) >= LOG_OVERHEAD:
            total = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
            if len(chunk) < total and pos + total <= self.end:
                chunk = seg._io(pread_exact, total, pos)  # one batch bigger than the step
                read += len(chunk)
        at_end = pos + len(chunk) >= self.end
        _, found = scan_valid_prefix(chunk)
        for p, h in found:
            why = self._batch_problem(h)
            if why is not None:
                self._fail(why, h.base_offset)
                break
            self._accept(pos + p, h)
        seg.mark_verified(pos, self.valid_bytes, self._version)
        if self.damage is not None:
            return read
        if self.valid_bytes == pos or (at_end and self.valid_bytes < self.end):
            # Nothing intact at pos, or bad bytes after the last intact batch at the end (a
            # batch merely cut by the chunk is re-read from its start at the next step).
            self._fail(self._why_bad(chunk, self.valid_bytes - pos), self._header_offset(
                chunk, self.valid_bytes - pos))
        elif self.done:
            self._finish_index()
        return read

    def _batch_problem(self, h: Header) -> str | None:
        if h.base_offset < self.next_offset:
            return f"base offset {h.base_offset} below the expected {self.next_offset}"
        if h.last_offset - self.seg.base_offset > INT32_MAX:
            return f"last offset {h.last_offset} beyond int32 of the segment base"
        if self.max_offset is not None and h.next_offset > self.max_offset:
            return f"last offset {h.last_offset} reaches the next segment's base {self.max_offset}"
        if h.partition_leader_epoch < self.last_epoch:
            return f"leader epoch {h.partition_leader_epoch} below the previous {self.last_epoch}"
        return None

    def _accept(self, pos: int, h: Header) -> None:
        if self._check_index and self.index_problem is None:
            self._check_entries(pos, h)
        if self.headers is not None:
            self.headers.append((pos, h))
        self.valid_bytes = pos + h.size
        self.next_offset = h.next_offset
        self.last_epoch = h.partition_leader_epoch
        self.batches += 1

    def _fail(self, why: str, offset: int) -> None:
        self.damage = f"segment {self.seg.name} at position {self.valid_bytes}: {why}"
        self.damage_offset = offset if offset >= self.next_offset else self.next_offset

    def _why_bad(self, chunk: bytes, off: int) -> str:
        try:
            h = read_header(chunk, off)
            verify_crc(chunk, off, h)
        except CorruptRecordError as e:
            return str(e).partition(": ")[2] or str(e)
        return "bad batch"

    def _header_offset(self, chunk: bytes, off: int) -> int:
        if len(chunk) - off >= 27 and chunk[off + 16] == MAGIC:
            return int.from_bytes(chunk[off:off + 8], "big", signed=True)
        return self.next_offset

    def _check_entries(self, pos: int, h: Header) -> None:
        base = self.seg.base_offset
        rels, positions = self._index
        while self._ix < len(positions) and positions[self._ix] <= pos:
            if positions[self._ix] < pos or base + rels[self._ix] != h.base_offset:
                self.index_problem = (f"index entry {self._ix} ({rels[self._ix]}, "
                                      f"{positions[self._ix]}) names no batch")
                return
            self._ix += 1
        stamps, trels = self._timeindex
        while self._tx < len(trels) and base + trels[self._tx] <= h.base_offset:
            if base + trels[self._tx] < h.base_offset or stamps[self._tx] != h.max_timestamp:
                self.index_problem = (f"timeindex entry {self._tx} ({stamps[self._tx]}, "
                                      f"{trels[self._tx]}) names no batch")
                return
            self._tx += 1

    def _finish_index(self) -> None:
        if not self._check_index or self.index_problem is not None:
            return
        if self._ix < len(self._index[1]):
            self.index_problem = f"index entry {self._ix} points past the last batch"
        elif self._tx < len(self._timeindex[1]):
            self.index_problem = f"timeindex entry {self._tx} names no batch"


_SCAN_CHUNK_BYTES = 8 << 20

"""One log segment on disk: `<base_offset:020d>.log` plus its `.index` and `.timeindex`.

A segment holds whole RecordBatch v2 batches back to back. It is written only at its end, by
`append` (os.pwrite on a raw fd, never a buffered Python file), and read with os.pread.

Invariants (as Kafka's LogSegment):
* Every batch's offsets lie in [base_offset, base_offset + 2**31 - 1] and base offsets
  strictly increase (gaps are allowed: compaction and replicated compacted data make them).
* `size_bytes` is the byte length of the `.log` file as this process wrote it; the file may
  be longer only after a crash (recovery cuts it).
* The in-memory indexes (`index`, `timeindex`, see partition/index.py) describe every batch
  in [0, size_bytes); the files on disk are only a copy, written whole by `seal()` (a roll,
  a close, a recovery). The ACTIVE segment's index files are never trusted: recovery
  rebuilds them from the batches it scans.
* `max_timestamp` is the largest batch max_timestamp in the segment (-1 if none); for a
  sealed segment it equals the last `.timeindex` entry.
* Reading never decodes records. `read_at` returns raw bytes; the log checks their CRCs
  before it hands them out (partition/log.py "Integrity"). `walk` and `locate` check each
  header's sanity, and `locate` that the index entry it starts from names the batch found
  there; a failure raises `StorageDamageError` with the segment and position.
* `SegmentVerifier` (partition/segment_verifier.py) is the one definition of an intact
  segment; the indexes' upkeep is partition/segment_index.py (a base class of Segment).
* Bytes are checked once (DESIGN §9 "Integrity"): each segment keeps the byte ranges whose
  batches a read or a SegmentVerifier has checked since this process opened it
  (`unverified` / `mark_verified`, at most MAX_VERIFIED_RANGES ranges, whole batches), and
  reads skip the CRCs of those. A cut of the file (`truncate_to`, `recover`) drops the ranges
  past the cut and bumps `verified_version`; a check that read its bytes under an older
  version marks nothing and trusts no range (a reader racing a repair). Bytes damaged on
  disk after their check are the scrubber's to find (it re-checks every sealed segment) or a
  restart's (the ranges live in memory only). A segment also remembers where this process's
  own appends begin (`append` takes whole batches whose CRCs its caller checked): the log
  lets a leader's reads for its followers take those bytes as checked while they lie in its
  cached tail (`trusted_from`, partition/log.py "Integrity"), where the page cache most
  likely still holds what was written; other reads, and reads of older bytes, check them.

Open files (issue 19): the active segment keeps its fd open; a sealed segment, once fsynced
(`make_evictable`, called by the log), is in the node's FileCache (partition/file_cache.py:
one per node, handed to every log it hosts; a log opened alone has its own), which closes the
least recently used of those nobody pins once more than `max_open` are open (the node sets it
from `log_open_files_max`), and a later use reopens it by name. Every use of an fd pins it
(`pin` / `_io`), so an fd is never closed under a call; a truncation that makes a sealed
segment active again takes it out of the cache (`keep_open`). Reopening by name is safe
because a sealed segment's file is only replaced (compaction) or unlinked (retention) while
the log's writer holds it pinned or after it left the segment list.

Disk blocks ahead (issue 19): the active segment allocates disk blocks past its end before
its appends reach them (`fallocate` with FALLOC_FL_KEEP_SIZE: the file's size stays the end
of its data, so nothing past it is ever read or recovered): as much as it holds, at most
RESERVE_AHEAD_MAX, none while under RESERVE_AHEAD_MIN, never past the log's segment size.
A buffered write into allocated blocks skips ext4's delayed allocation, which was ~60% of a
follower's write CPU (perf, `scripts/bench replication --sizes 256`). `seal`,
`release_reserved` (a clean close) and a cut free what was not used (ftruncate, which on
ext4 frees blocks past the size); a segment reopened after a crash counts the blocks it
finds past its size as reserved, so its next seal or clean close frees them. A file system
that cannot (EOPNOTSUPP, FUSE) or a full disk (ENOSPC) just writes without.

Concurrency: a segment is changed (append, truncate, seal, index rebuild) only by the log's
single writer (partition/log.py "Concurrency"); flushes and readers in other threads use its
fd at the same time. `pin()`/`unpin()` (called under the log's lock) keep the fd open while
a flush or a read uses it: `close()` of a pinned segment only marks it, and the last
`unpin()` closes it. So an fd number is never closed (and reused) under a running fsync or
pread. A reader racing a truncation of the same segment may see a short or torn read; it
reports damage, which the log re-checks under the writer before acting (never on a hunch).
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from collections import deque
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from partition.batch import (
    INT32_MAX,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    Header,
    decode_batch,
)
from partition.errors import CorruptRecordError, StorageDamageError
from partition.file_cache import DEFAULT_MAX_OPEN_SEGMENTS, FileCache
from partition.file_io import (
    pread_exact,
    pwrite_all,
    reserve_blocks,
)
from partition.segment_index import SegmentIndexes
from partition.segment_verifier import (
    ResumePoint,
    SegmentScan,
    SegmentVerifier,
    parse_header_prefix,
)
from partition.index import (
    OFFSET_ENTRY_BYTES,
    TIME_ENTRY_BYTES,
    OffsetIndex,
    TimeIndex,
)

class FileSlice:
    """`length` bytes of a segment file from `offset`, read through `fd`. A slice of a log
    (`Log.read_slice`) holds a pin on its segment (`release` unpins it), so `fd` is the
    segment's own descriptor, kept open and never evicted nor closed until the last slice
    of it is closed: a segment closed or deleted meanwhile stays readable through it, and
    any number of slices of one segment take no descriptor beyond the segment's one
    (issue 46; a dup per slice took one each and ran a node at 10,000 partitions out of
    descriptors). Without `release` the slice owns `fd` and closes it. The holder must
    close() it (idempotent). What zero-copy readers send with os.sendfile."""

    __slots__ = ("fd", "offset", "length", "_release")

    def __init__(self, fd: int, offset: int, length: int,
                 release: Callable[[], None] | None = None) -> None:
        self.fd = fd
        self.offset = offset
        self.length = length
        self._release = release

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, offset={self.offset}, length={self.length})"

    def intact(self) -> bool:
        """Until closed (raftlog.base.protocol.FilePart): the pin (or the owned descriptor)
        keeps the bytes readable; a maker that must know whether they are still the log's
        wraps the slice (replica.LogSlice)."""
        return self.fd >= 0

    def close(self) -> None:
        """Idempotent."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        release, self._release = self._release, None
        if release is None:
            os.close(fd)
        else:
            release()


__all__ = [
    "DEFAULT_MAX_OPEN_SEGMENTS",
    "FileCache",
    "FileSlice",
    "ResumePoint",
    "Segment",
    "SegmentScan",
    "SegmentVerifier",
    "segment_name",
    "parse_segment_name",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "INT32_MAX",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
_WALK_CHUNK_BYTES = 8192
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")  # drop_cached advises whole pages
# Checked byte ranges a segment remembers (module docstring); past this the smallest go.
# Readers at a few positions (followers at the tail, a consumer catching up) need a handful.
MAX_VERIFIED_RANGES = 16
TRUST_MARK_SPACING = 1 << 20  # how finely `trusted_from` follows the end (~17 marks at 16 MiB)




def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(filename: str, suffix: str = LOG_SUFFIX) -> int | None:
    """Base offset of `<20 digits><suffix>`, else None."""
    if not filename.endswith(suffix):
        return None
    stem = filename[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)







# How far past its end the active segment allocates disk blocks ("Disk blocks ahead"): as far
# as it holds, at most the MAX, none while under the MIN (idle partitions reserve nothing).
RESERVE_AHEAD_MAX = 16 << 20
RESERVE_AHEAD_MIN = 1 << 20

















class Segment(SegmentIndexes):
    """One segment; see the module docstring for invariants. Use `create` or `open_existing`."""

    def __init__(self, directory: Path, base_offset: int, fd: int, size_bytes: int,
                 *, max_index_entries: int, max_time_entries: int, files: FileCache):
        self.directory = directory
        self._files = files  # the node's open-file cache ("Open files")
        self.base_offset = base_offset
        self.name = segment_name(base_offset)
        self._fd: int | None = fd
        self._evictable = False
        self.size_bytes = size_bytes
        self.index = OffsetIndex(max_index_entries)
        self.timeindex = TimeIndex(max_time_entries)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        # Offset after the last batch; exact for the active segment and for scanned or
        # rebuilt ones; None for a sealed segment trusted through its index (not needed).
        self.next_offset: int | None = base_offset if size_bytes == 0 else None
        self.created_ms: int | None = None  # owner's clock at the first append (segment_ms)
        self.bytes_since_index = 0
        self.last_epoch = -1  # partition_leader_epoch of the last batch appended or scanned
        self._pins = 0
        # drop_cached never advises below this: bytes found at open are not ours to evict (a
        # restarted broker keeps what the page cache still holds of its log).
        self._cached_from = size_bytes & ~(_PAGE_BYTES - 1)
        self._close_requested = False
        self._fd_closed = False
        # Checked byte ranges (module docstring "checked once"): sorted, disjoint [start, end).
        self._verified: list[tuple[int, int]] = []
        self.verified_version = 0
        self._verified_lock = threading.Lock()
        # Where reads may take bytes as checked by their write ("checked once"): the oldest
        # of `_append_marks` (starts of this process's appends, whole batches, at least
        # TRUST_MARK_SPACING apart, none further behind the end than `append`'s
        # trusted_tail), or None. Only the writer changes them.
        self._append_marks: deque[int] = deque()
        self._written_from: int | None = None
        self._reserved_to = size_bytes  # disk blocks are allocated up to here (at least)

    # ------------------------------------------------------------------ paths, open, close

    @property
    def log_path(self) -> Path:
        return self.directory / (self.name + LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        return self.directory / (self.name + INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> Path:
        return self.directory / (self.name + TIMEINDEX_SUFFIX)

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, max_index_bytes: int,
               files: FileCache) -> "Segment":
        """A new empty segment file (O_EXCL: an existing file of that name is a bug)."""
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        return cls(directory, base_offset, fd, 0,
                   max_index_entries=max_index_bytes // OFFSET_ENTRY_BYTES,
                   max_time_entries=max_index_bytes // TIME_ENTRY_BYTES, files=files)

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, *, max_index_bytes: int,
                      files: FileCache) -> "Segment":
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        st = os.fstat(fd)
        seg = cls(directory, base_offset, fd, st.st_size,
                  max_index_entries=max_index_bytes // OFFSET_ENTRY_BYTES,
                  max_time_entries=max_index_bytes // TIME_ENTRY_BYTES, files=files)
        # Blocks past the size's last one: a reserve a crash left ("Disk blocks ahead"),
        # freed like one of our own.
        seg._reserved_to = max(st.st_size, st.st_blocks * 512 - st.st_blksize + 1)
        return seg

    @property
    def fd(self) -> int:
        """The open descriptor. Only while pinned (or held through `_io`) for a segment
        the file cache may close (`make_evictable`); always for the others."""
        fd = self._fd
        assert fd is not None, f"segment {self.name}: fd used unpinned after eviction"
        return fd

    def pin(self) -> None:
        """Keep the fd open (reopening it if the file cache closed it) until `unpin`."""
        with self._files.lock:
            assert not self._fd_closed
            if self._fd is None:
                self._files.reopen(self)
            elif self._evictable:
                self._files.touch(self)
            self._pins += 1

    def unpin(self) -> None:
        with self._files.lock:
            self._pins -= 1
            if self._pins == 0:
                if self._close_requested:
                    self._close_fd()
                elif self._evictable:
                    self._files.evict_over_cap()

    def _io(self, call: Callable[..., T], *args: Any) -> T:
        """`call(fd, *args)`: one system call on the segment's fd, pinned meanwhile when the
        file cache may close it. An active segment's fd is used as it is, without the cache's
        lock: this is every append and every batch header a read looks at (through the lock,
        log reads were ~20% and appends ~14% slower in `scripts/bench storage`); only the
        log's writer makes a segment evictable, and readers pin the segments they read."""
        if not self._evictable:
            return call(self.fd, *args)
        self.pin()
        try:
            return call(self.fd, *args)
        finally:
            self.unpin()

    def make_evictable(self) -> None:
        """A sealed, fsynced segment: the file cache may close its fd while nobody pins it
        and reopen it on the next use (module docstring "Open files")."""
        with self._files.lock:
            if self._evictable or self._fd_closed:
                return
            self._evictable = True
            if self._fd is not None:
                self._files.touch(self)
                if self._pins == 0:
                    self._files.evict_over_cap()

    def keep_open(self) -> None:
        """The segment is (again) the active one: open, and never closed by the cache."""
        with self._files.lock:
            if not self._evictable:
                return
            self._evictable = False
            self._files.forget(self)
            if self._fd is None and not self._fd_closed:
                self._files.reopen(self)

    def close(self) -> None:
        """Close the fd now, or at the last unpin if a flush is using it."""
        with self._files.lock:
            if self._pins:
                self._close_requested = True
            else:
                self._close_fd()

    def _close_fd(self) -> None:
        # Under self._files.lock.
        if not self._fd_closed:
            self._fd_closed = True
            self._files.forget(self)
            if self._fd is not None and self._fd >= 0:
                os.close(self._fd)
            self._fd = None

    def delete_files(self) -> None:
        """Unlink the segment's files (the fd closes via `close()`)."""
        for p in (self.log_path, self.index_path, self.timeindex_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def fsync(self) -> None:
        self._io(os.fsync)

    # ------------------------------------------------------------------ checked ranges

    def trusted_from(self) -> int:
        """Where the bytes start that a read may take as checked by their write (module
        docstring "checked once"): the start of one of this process's appends, at most
        `trusted_tail` behind the end as of the last append; size_bytes where there is none.
        Any thread."""
        written = self._written_from
        return self.size_bytes if written is None else written

    def unverified(self, start: int, end: int, version: int | None = None,
                   trusted: int | None = None) -> list[tuple[int, int]]:
        """The parts of [start, end) no check has covered, in order ([] when all of it was
        checked), bytes from `trusted` on (`trusted_from`) counting as checked; the whole
        range when `version` (what `verified_version` was before the caller read its bytes)
        is no longer current. Any thread."""
        with self._verified_lock:
            if version is not None and version != self.verified_version:
                return [(start, end)] if start < end else []
            if trusted is not None and trusted < end:
                end = max(start, trusted)
            gaps: list[tuple[int, int]] = []
            at = start
            for a, b in self._verified:
                if b <= at:
                    continue
                if a >= end:
                    break
                if a > at:
                    gaps.append((at, a))
                at = b
                if at >= end:
                    break
            if at < end:
                gaps.append((at, end))
            return gaps

    def mark_verified(self, start: int, end: int, version: int) -> None:
        """Remember that the batches in [start, end) (whole ones) passed a check of bytes read
        under `version`; nothing if the file was cut since. Any thread."""
        if start >= end:
            return
        with self._verified_lock:
            if version != self.verified_version:
                return
            merged: list[tuple[int, int]] = []
            for a, b in self._verified:
                if b < start or a > end:
                    merged.append((a, b))
                else:  # overlapping or adjacent: one range
                    start, end = min(a, start), max(b, end)
            merged.append((start, end))
            if len(merged) > MAX_VERIFIED_RANGES:
                merged = sorted(merged, key=lambda r: r[1] - r[0])[-MAX_VERIFIED_RANGES:]
            merged.sort()
            self._verified = merged

    def _forget_verified_from(self, cut: int) -> None:
        """The file was cut at `cut`: no range reaches past it, and checks that read before
        the cut mark nothing (the writer, after the ftruncate)."""
        with self._verified_lock:
            self._verified = [(a, min(b, cut)) for a, b in self._verified if a < cut]
            self.verified_version += 1
            marks = self._append_marks
            while marks and marks[-1] >= cut:
                marks.pop()
            self._written_from = marks[0] if marks else None

    def drop_cached(self, end: int) -> None:
        """Advise the kernel to drop cached pages of this file below byte `end` (only call for
        fsynced bytes: clean pages are dropped, dirty ones would only be written back early).
        Page-aligned and incremental: each byte is advised at most once."""
        end &= ~(_PAGE_BYTES - 1)
        if end > self._cached_from:
            self._io(os.posix_fadvise, self._cached_from, end - self._cached_from, os.POSIX_FADV_DONTNEED)
            self._cached_from = end

    # ------------------------------------------------------------------ indexes

    # ------------------------------------------------------------------ recovery scan

    def recover(self, *, index_interval_bytes: int, min_epoch: int = -1,
                max_offset: int | None = None, resume: "ResumePoint | None" = None) -> SegmentScan:
        """CRC-scan the whole segment (`SegmentVerifier`), keep the intact prefix, cut the
        rest off the file, and rebuild the in-memory indexes. `min_epoch`: the previous
        segment's last epoch; `max_offset`: the next segment's base offset, if one stays.
        With `resume` (an offset-granular recovery point: a prefix fsynced and checked before
        the crash, with its indexes) the scan starts at its position and the indexes go on
        from its state; the caller has checked that the file is at least that long.
        Returns the SegmentScan (bytes and headers from where the scan started). The cut is
        not fsynced here (the log does it)."""
        self.pin()
        try:
            return self._recover(index_interval_bytes, min_epoch, max_offset, resume)
        finally:
            self.unpin()

    def _recover(self, index_interval_bytes: int, min_epoch: int, max_offset: int | None,
                 resume: "ResumePoint | None") -> SegmentScan:
        size = os.fstat(self.fd).st_size
        if resume is None:
            check = SegmentVerifier(self, end=size, min_epoch=min_epoch, max_offset=max_offset,
                                    keep_headers=True).run()
        else:
            check = SegmentVerifier(self, end=size, min_epoch=max(min_epoch, resume.last_epoch),
                                    max_offset=max_offset, keep_headers=True,
                                    start=resume.position, next_offset=resume.next_offset).run()
        valid = check.headers or []
        valid_bytes = check.valid_bytes
        dropped = size - valid_bytes
        lost = self._count_lost(valid_bytes, size, check.next_offset) if dropped else 0
        if dropped:
            os.ftruncate(self.fd, valid_bytes)  # also frees any blocks reserved past it
            self._reserved_to = valid_bytes
            self._forget_verified_from(valid_bytes)
            self._cached_from = min(self._cached_from, valid_bytes & ~(_PAGE_BYTES - 1))
        self.size_bytes = valid_bytes
        self._reset_indexes()
        if resume is not None:
            self.index, self.timeindex = resume.index, resume.timeindex
            self.max_timestamp = resume.max_timestamp
            self.offset_of_max_timestamp = resume.offset_of_max_timestamp
            self.bytes_since_index = resume.bytes_since_index
            self.next_offset = resume.next_offset
            self.last_epoch = resume.last_epoch
        for p, h in valid:
            self._index_batch(p, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                              h.partition_leader_epoch, index_interval_bytes)
        return SegmentScan(valid_bytes, valid, dropped, lost)

    def _count_lost(self, pos: int, size: int, prev_next: int) -> int:
        # Best effort: records of the cut batches whose headers still read sanely (enough
        # bytes for lastOffsetDelta, magic 2, offsets moving forward).
        lost = 0
        while pos < size:
            head = self._io(pread_exact, min(HEADER_BYTES, size - pos), pos)
            if len(head) < 27 or head[16] != MAGIC:
                break
            base = int.from_bytes(head[0:8], "big", signed=True)
            blen = int.from_bytes(head[8:12], "big", signed=True)
            delta = int.from_bytes(head[23:27], "big", signed=True)
            if base < prev_next or delta < 0 or blen < MIN_BATCH_LENGTH or delta > INT32_MAX:
                break
            lost += delta + 1
            prev_next = base + delta + 1
            pos += LOG_OVERHEAD + blen
        return lost

    # ------------------------------------------------------------------ append

    def append(self, data, entries: list[tuple[int, int, int, int, int, int]], *,
               index_interval_bytes: int, now_ms: int, trusted_tail: int = 0,
               reserve_limit: int = 0) -> None:
        """Write `data` (whole, checked batches; one buffer or a list of buffers that are
        written back to back) at the end of the file and index it. Reads may take the
        appended bytes as checked (`trusted_from`) while they are at most `trusted_tail`
        bytes behind the end (0: never). Disk blocks are allocated ahead (module docstring
        "Disk blocks ahead") up to `reserve_limit` bytes into the file (0: none).

        `entries`: one (position in data, size, base_offset, next_offset, max_timestamp,
        partition_leader_epoch) per batch, offsets as stamped. Not fsynced."""
        start = self.size_bytes
        total_bytes = sum(len(b) for b in data) if isinstance(data, list) else len(data)
        if start + total_bytes > self._reserved_to and reserve_limit:
            self._reserve(start + total_bytes, reserve_limit)
        self._io(pwrite_all, data, start)
        marks = self._append_marks
        oldest = start + total_bytes - trusted_tail
        while marks and marks[0] < oldest:
            marks.popleft()
        if start >= oldest and (not marks or start - marks[-1] >= TRUST_MARK_SPACING):
            marks.append(start)
        self._written_from = marks[0] if marks else None
        if self.created_ms is None:
            self.created_ms = now_ms
        for p, size, base, nxt, max_ts, epoch in entries:
            self._index_batch(start + p, base, nxt, max_ts, size, epoch, index_interval_bytes)
        self.size_bytes = start + total_bytes

    def _reserve(self, end: int, limit: int) -> None:
        """Allocate disk blocks up to `end` and as far past it as the segment holds, at
        most RESERVE_AHEAD_MAX and `limit`; nothing while it holds less than
        RESERVE_AHEAD_MIN. Best effort: a failure leaves the appends to allocate as they
        write."""
        ahead = min(end, RESERVE_AHEAD_MAX)
        if ahead < RESERVE_AHEAD_MIN:
            return
        target = min(end + ahead, max(limit, end))
        if reserve_blocks(self.fd, self._reserved_to, target - self._reserved_to):
            self._reserved_to = target

    def release_reserved(self) -> None:
        """Free the disk blocks allocated past the end and not written (module docstring
        "Disk blocks ahead")."""
        if self._reserved_to > self.size_bytes:
            self._io(os.ftruncate, self.size_bytes)
            self._reserved_to = self.size_bytes

    # ------------------------------------------------------------------ reads

    def walk(self, start: int, end: int, *, expect_offset: int | None = None
             ) -> Iterator[tuple[int, Header]]:
        """(position, Header) of each batch in [start, end), reading headers only, in small
        chunks. Raises StorageDamageError on a header that does not parse, runs past end, or
        (with `expect_offset`: the base offset the batch at `start` must have) names another
        offset, or whose offsets do not increase."""
        pos = start
        buf = b""
        buf_start = start
        next_offset = -1

        def damage(why: str) -> StorageDamageError:
            at = next_offset if next_offset >= 0 else (
                expect_offset if expect_offset is not None else self.base_offset)
            return StorageDamageError(f"segment {self.name} at {pos}: {why}",
                                      segment=self.base_offset, position=pos, offset=at)

        while pos < end:
            off = pos - buf_start
            if off < 0 or off + HEADER_BYTES > len(buf):
                buf = self._io(pread_exact, min(_WALK_CHUNK_BYTES, max(end - pos, HEADER_BYTES)), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_BYTES:
                    raise damage("truncated header")
            try:
                h = parse_header_prefix(buf, off)
            except CorruptRecordError as e:
                raise damage(str(e)) from None
            if pos + h.size > end:
                raise damage(f"batch runs past {end}")
            if next_offset < 0 and expect_offset is not None and h.base_offset != expect_offset:
                raise StorageDamageError(
                    f"segment {self.name}: index names offset {expect_offset} at position "
                    f"{pos}, the batch there starts at {h.base_offset}",
                    segment=self.base_offset, position=pos, offset=expect_offset, what="index")
            if h.base_offset < next_offset:
                raise damage(f"base offset {h.base_offset} below the previous batch's end {next_offset}")
            yield pos, h
            next_offset = h.next_offset
            pos += h.size

    def locate(self, offset: int) -> tuple[int, Header] | None:
        """(position, Header) of the first batch whose last offset >= `offset` (the batch
        holding it, or the next one after a gap); None if no such batch in this segment.
        Raises StorageDamageError (a bad header, or an index entry naming another batch)."""
        rel = offset - self.base_offset
        expect = None
        if rel < 0:
            start = 0
        else:
            entry, start = self.index.lookup(min(rel, INT32_MAX))
            if start:
                expect = self.base_offset + entry
        for pos, h in self.walk(start, self.size_bytes, expect_offset=expect):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read_at(self, pos: int, first: Header, max_bytes: int, max_offset: int | None) -> bytes:
        """Whole batches from `pos` (where `first` starts): the first always (even if larger
        than max_bytes), then more while they fit in max_bytes and start below max_offset.

        The end is found before reading (index positions are batch starts, then a short
        header walk), so the data is one exact pread: no copy to trim a partial batch."""
        return self.read_range(pos, self.read_end(pos, first, max_bytes, max_offset),
                               first.base_offset)

    def read_range(self, start: int, end: int, offset: int) -> bytes:
        """The bytes [start, end) (one pread). Raises StorageDamageError (`offset`: the first
        offset the range was to hold) when the file ends early."""
        data = self._io(pread_exact, end - start, start)
        if len(data) != end - start:
            raise StorageDamageError(f"segment {self.name}: short read at {start}",
                                     segment=self.base_offset, position=start, offset=offset)
        return data

    def read_end(self, pos: int, first: Header, max_bytes: int, max_offset: int | None) -> int:
        """Where `read_at(pos, first, max_bytes, max_offset)` would end (header walk only)."""
        end = pos + first.size
        limit = min(self.size_bytes, pos + max_bytes)
        if end < limit:
            positions = self.index.positions
            i = bisect_right(positions, limit) - 1
            if i >= 0 and positions[i] > end:
                end = positions[i]  # every batch before an indexed start <= limit fits
            for p, h in self.walk(end, self.size_bytes):
                if p + h.size > limit:
                    break
                end = p + h.size
        if max_offset is not None and end > pos + first.size:
            found = self.locate(max_offset)
            if found is not None:
                p, h = found
                cut = p if h.base_offset >= max_offset else p + h.size
                end = max(pos + first.size, min(end, cut))
        return end

    def batch_bytes(self) -> Iterator[tuple[int, Header, bytes]]:
        """Every batch's (position, Header, bytes); one pread each (compaction's reader)."""
        for pos, h in self.walk(0, self.size_bytes):
            data = self._io(pread_exact, h.size, pos)
            yield pos, h, data

    def first_record_for_timestamp(self, timestamp_ms: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record (offset >= min_offset) whose timestamp >=
        timestamp_ms, as Kafka's LogSegment.findOffsetByTimestamp: the first batch whose
        max_timestamp qualifies is decoded and its records looked at one by one."""
        rel = self.timeindex.lookup(timestamp_ms)
        _, start = self.index.lookup(rel)
        for pos, h in self.walk(start, self.size_bytes):
            if h.max_timestamp < timestamp_ms or h.last_offset < min_offset:
                continue
            _, records = decode_batch(self.read_range(pos, pos + h.size, h.base_offset))
            for r in records:
                if r.timestamp >= timestamp_ms and r.offset >= min_offset:
                    return r.offset, r.timestamp
        return None

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int, *, index_interval_bytes: int) -> int:
        """Drop the batch holding `offset` (or the first after it) and everything after.
        Returns the bytes removed. Recomputes next_offset, max_timestamp and the index tail
        by walking from the last kept index entry. Not fsynced."""
        found = self.locate(offset)
        if found is None:
            cut = self.size_bytes
        else:
            cut = found[0]
        removed = self.size_bytes - cut
        if removed:
            self._io(os.ftruncate, cut)  # also frees the blocks allocated ahead
            self._reserved_to = cut
            self._forget_verified_from(cut)
            self.size_bytes = cut
            self._cached_from = min(self._cached_from, cut & ~(_PAGE_BYTES - 1))
            self.index.truncate_from_position(cut)
            self.timeindex.truncate_from_rel_offset(found[1].base_offset - self.base_offset)
        # Tail state: everything before the last kept index entry is summarised by the
        # timeindex; walk the rest.
        start = self.index.last_position()
        self.max_timestamp = self.timeindex.last_timestamp
        self.offset_of_max_timestamp = (self.base_offset + self.timeindex.rel_offsets[-1]
                                        if len(self.timeindex) else self.base_offset)
        self.next_offset = self.base_offset
        self.last_epoch = -1
        for _, h in self.walk(start, self.size_bytes):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset
            self.next_offset = h.next_offset
            self.last_epoch = h.partition_leader_epoch
        self.bytes_since_index = self.size_bytes - start
        self.created_ms = None
        return removed

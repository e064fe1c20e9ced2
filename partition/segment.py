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
* Reading never decodes records and never checks a CRC: bytes in a segment were checked
  before they were written, and the active segment's tail is re-checked by recovery.

Concurrency: a segment belongs to the log's owner thread, except that `Log.flush()` may
fsync its fd from a worker thread. `pin()`/`unpin()` (called under the log's lock) keep the
fd open while a flush uses it: `close()` of a pinned segment only marks it, and the last
`unpin()` closes it. So an fd number is never closed (and reused) under a running fsync.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from partition.batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC, Header, scan_valid_prefix
from partition.errors import CorruptRecordError
from partition.index import (
    OFFSET_ENTRY_BYTES,
    TIME_ENTRY_BYTES,
    IndexCorrupt,
    OffsetIndex,
    TimeIndex,
)

@dataclass(frozen=True, slots=True)
class FileSlice:
    """`length` bytes of a segment file from `offset`, through `fd`: a dup of the segment's
    descriptor owned by the holder, who must close() it (so a segment deleted or closed
    meanwhile stays readable). What zero-copy readers send with os.sendfile."""

    fd: int
    offset: int
    length: int

    def close(self) -> None:
        os.close(self.fd)


__all__ = [
    "FileSlice",
    "Segment",
    "SegmentScan",
    "segment_name",
    "parse_segment_name",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "INT32_MAX",
]

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
INT32_MAX = 0x7FFFFFFF
_MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD
# Header layout of RecordBatch v2 (see partition/batch.py); parsed here without the
# "whole batch inside the buffer" check because the walk reads headers only.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_WALK_CHUNK_BYTES = 8192
_SCAN_CHUNK_BYTES = 8 << 20
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")  # drop_cached advises whole pages


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


def pread_exact(fd: int, n: int, pos: int) -> bytes:
    """os.pread until `n` bytes or end of file (pread may return short)."""
    data = os.pread(fd, n, pos)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, pos + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pwrite_all(fd: int, data, pos: int) -> None:
    """Write `data` (a buffer, or a list of buffers written back to back) at `pos`."""
    if isinstance(data, list):
        views = [memoryview(b).cast("B") for b in data]
        while views:
            n = os.pwritev(fd, views, pos)
            pos += n
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]
        return
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        pos += n
        view = view[n:]


TMP_SUFFIX = ".tmp"


def write_durably(directory: Path, name: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Replace `directory/name` with `data` so that a crash leaves the old or the new contents:
    write a temp file, fsync it, rename it over, fsync the directory (`dir_fd` if the caller
    keeps one open)."""
    tmp = directory / (name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / name)
    if dir_fd is not None:
        os.fsync(dir_fd)
        return
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_whole_file(path: Path, data: bytes) -> None:
    """Replace the contents of `path` (no fsync; callers fsync when it must be durable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> bool:
    """fsync a file by name (fsync flushes the inode, whichever fd asks); False if gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def parse_header_prefix(data, off: int = 0) -> Header:
    """Header fields at `off` (61 bytes must be there); checks magic and minimum length only."""
    h = Header(*_HEADER.unpack_from(data, off))
    if h.magic != MAGIC:
        raise CorruptRecordError(f"magic {h.magic} (expected {MAGIC})")
    if h.batch_length < _MIN_BATCH_LENGTH or h.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch length {h.batch_length} / last offset delta {h.last_offset_delta}")
    return h


@dataclass(frozen=True)
class SegmentScan:
    """What a CRC scan of a segment found: the intact prefix and what was cut after it."""

    valid_bytes: int
    headers: list[tuple[int, Header]]
    bytes_dropped: int
    offsets_lost: int


class Segment:
    """One segment; see the module docstring for invariants. Use `create` or `open_existing`."""

    def __init__(self, directory: Path, base_offset: int, fd: int, size_bytes: int,
                 *, max_index_entries: int, max_time_entries: int):
        self.directory = directory
        self.base_offset = base_offset
        self.name = segment_name(base_offset)
        self.fd = fd
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
    def create(cls, directory: Path, base_offset: int, *, max_index_bytes: int) -> "Segment":
        """A new empty segment file (O_EXCL: an existing file of that name is a bug)."""
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        return cls(directory, base_offset, fd, 0,
                   max_index_entries=max_index_bytes // OFFSET_ENTRY_BYTES,
                   max_time_entries=max_index_bytes // TIME_ENTRY_BYTES)

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, *, max_index_bytes: int) -> "Segment":
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        return cls(directory, base_offset, fd, size,
                   max_index_entries=max_index_bytes // OFFSET_ENTRY_BYTES,
                   max_time_entries=max_index_bytes // TIME_ENTRY_BYTES)

    def pin(self) -> None:
        assert not self._fd_closed
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._close_requested:
            self._close_fd()

    def close(self) -> None:
        """Close the fd now, or at the last unpin if a flush is using it."""
        if self._pins:
            self._close_requested = True
        else:
            self._close_fd()

    def _close_fd(self) -> None:
        if not self._fd_closed:
            self._fd_closed = True
            os.close(self.fd)

    def delete_files(self) -> None:
        """Unlink the segment's files (the fd closes via `close()`)."""
        for p in (self.log_path, self.index_path, self.timeindex_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def fsync(self) -> None:
        os.fsync(self.fd)

    def drop_cached(self, end: int) -> None:
        """Advise the kernel to drop cached pages of this file below byte `end` (only call for
        fsynced bytes: clean pages are dropped, dirty ones would only be written back early).
        Page-aligned and incremental: each byte is advised at most once."""
        end &= ~(_PAGE_BYTES - 1)
        if end > self._cached_from:
            os.posix_fadvise(self.fd, self._cached_from, end - self._cached_from, os.POSIX_FADV_DONTNEED)
            self._cached_from = end

    def fsync_index_files(self) -> None:
        fsync_path(self.index_path)
        fsync_path(self.timeindex_path)

    # ------------------------------------------------------------------ indexes

    def seal(self) -> None:
        """Close the segment for appends: final timeindex entry, index files written (not
        fsynced: the log's flush does that before it trusts the segment)."""
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)
        self.write_index_files()

    def write_index_files(self) -> None:
        write_whole_file(self.index_path, self.index.to_bytes())
        write_whole_file(self.timeindex_path, self.timeindex.to_bytes())

    def load_indexes(self, *, next_base_offset: int | None, index_interval_bytes: int) -> bool:
        """For a sealed segment: read and sanity-check both index files; rebuild them from the
        batch headers if missing or damaged. Returns True if they were rebuilt.

        Checks: entries monotonic and inside the file, the last offset entry points at a real
        batch header with the offset it names, timeindex offsets below the next segment."""
        try:
            data = self.index_path.read_bytes()
            tdata = self.timeindex_path.read_bytes()
            index = OffsetIndex.from_bytes(data, max_entries=self.index.max_entries,
                                           segment_bytes=self.size_bytes)
            timeindex = TimeIndex.from_bytes(tdata, max_entries=self.timeindex.max_entries)
            if len(index):
                pos = index.positions[-1]
                head = pread_exact(self.fd, HEADER_BYTES, pos)
                if len(head) < HEADER_BYTES:
                    raise IndexCorrupt(f"last entry position {pos} has no whole header")
                try:
                    h = parse_header_prefix(head)
                except CorruptRecordError as e:
                    raise IndexCorrupt(f"last entry position {pos}: {e}") from None
                if h.base_offset != self.base_offset + index.rel_offsets[-1]:
                    raise IndexCorrupt(
                        f"last entry names offset {self.base_offset + index.rel_offsets[-1]},"
                        f" batch there starts at {h.base_offset}")
            if len(timeindex) and next_base_offset is not None and \
                    self.base_offset + timeindex.rel_offsets[-1] >= next_base_offset:
                raise IndexCorrupt("timeindex names an offset of the next segment")
        except (OSError, IndexCorrupt) as e:
            logger.warning("segment %s: rebuilding indexes (%s)", self.name, e)
            self.rebuild_indexes(index_interval_bytes=index_interval_bytes)
            self.seal()
            return True
        self.index, self.timeindex = index, timeindex
        self.max_timestamp = timeindex.last_timestamp
        if len(timeindex):
            self.offset_of_max_timestamp = self.base_offset + timeindex.rel_offsets[-1]
        return False

    def _reset_indexes(self) -> None:
        self.index = OffsetIndex(self.index.max_entries)
        self.timeindex = TimeIndex(self.timeindex.max_entries)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index = 0
        self.next_offset = self.base_offset
        self.last_epoch = -1

    def _index_batch(self, pos: int, base_offset: int, next_offset: int, max_timestamp: int,
                     size: int, epoch: int, index_interval_bytes: int) -> None:
        # Kafka's rule: an entry at the start of a batch once more than the interval was
        # written since the last entry; the timeindex moves with it when time moved on.
        if self.bytes_since_index > index_interval_bytes:
            self.index.append(base_offset - self.base_offset, pos)
            self.timeindex.maybe_append(self.max_timestamp,
                                        self.offset_of_max_timestamp - self.base_offset)
            self.bytes_since_index = 0
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        self.bytes_since_index += size
        self.next_offset = next_offset
        self.last_epoch = epoch

    def rebuild_indexes(self, *, index_interval_bytes: int) -> None:
        """Rebuild both indexes by walking every batch header (no CRC: for trusted sealed
        segments). A header that does not parse ends the segment there (the file is cut and
        a warning logged): nothing past it could be read anyway."""
        interval = index_interval_bytes
        self._reset_indexes()
        end = 0
        try:
            for pos, h in self.walk(0, self.size_bytes):
                self._index_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                                  h.partition_leader_epoch, interval)
                end = pos + h.size
        except CorruptRecordError as e:
            logger.warning("segment %s: bad header at %d (%s); cutting %d bytes",
                           self.name, end, e, self.size_bytes - end)
            os.ftruncate(self.fd, end)
            self.size_bytes = end

    @classmethod
    def index_bytes_for(cls, data: bytes, base_offset: int, *, index_interval_bytes: int,
                        max_index_bytes: int) -> tuple[bytes, bytes]:
        """(.index bytes, .timeindex bytes) of a sealed segment holding `data` (whole, trusted
        batches): what the compactor writes next to a rewritten segment."""
        seg = cls(Path("."), base_offset, -1, 0,
                  max_index_entries=max(1, max_index_bytes // OFFSET_ENTRY_BYTES),
                  max_time_entries=max(1, max_index_bytes // TIME_ENTRY_BYTES))
        pos = 0
        while pos < len(data):
            h = parse_header_prefix(data, pos)
            seg._index_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                             h.partition_leader_epoch, index_interval_bytes)
            pos += h.size
        seg.timeindex.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp - base_offset)
        return seg.index.to_bytes(), seg.timeindex.to_bytes()

    # ------------------------------------------------------------------ recovery scan

    def recover(self, *, index_interval_bytes: int, min_epoch: int = -1) -> SegmentScan:
        """CRC-scan the whole segment (`scan_valid_prefix` over chunks), keep the intact
        prefix, cut the rest off the file, and rebuild the in-memory indexes.

        Beyond the CRC a batch must: start at or after the segment's base offset and after
        the previous batch's last offset, keep its offsets within int32 of the base, and not
        lower the partition leader epoch (below `min_epoch` or the previous batch's).
        Returns the SegmentScan. The cut is not fsynced here (the log does it)."""
        valid: list[tuple[int, Header]] = []
        pos = 0
        size = os.fstat(self.fd).st_size
        prev_next = self.base_offset
        prev_epoch = min_epoch
        while pos < size:
            chunk = pread_exact(self.fd, min(_SCAN_CHUNK_BYTES, size - pos), pos)
            if len(chunk) >= LOG_OVERHEAD:
                total = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
                if len(chunk) < total and pos + total <= size:
                    chunk = pread_exact(self.fd, total, pos)  # one batch bigger than a chunk
            end, found = scan_valid_prefix(chunk)
            bad = not found
            for p, h in found:
                if (h.base_offset < prev_next or h.last_offset - self.base_offset > INT32_MAX
                        or h.partition_leader_epoch < prev_epoch):
                    bad = True
                    break
                valid.append((pos + p, h))
                prev_next = h.next_offset
                prev_epoch = h.partition_leader_epoch
            if bad:
                break
            at_eof = pos + len(chunk) >= size
            pos = valid[-1][0] + valid[-1][1].size
            if end < len(chunk) and at_eof:
                break  # bad bytes at the end, not a batch merely cut by the chunk
        valid_bytes = valid[-1][0] + valid[-1][1].size if valid else 0
        dropped = size - valid_bytes
        lost = self._count_lost(valid_bytes, size, prev_next) if dropped else 0
        if dropped:
            os.ftruncate(self.fd, valid_bytes)
        self.size_bytes = valid_bytes
        self._reset_indexes()
        for p, h in valid:
            self._index_batch(p, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                              h.partition_leader_epoch, index_interval_bytes)
        return SegmentScan(valid_bytes, valid, dropped, lost)

    def _count_lost(self, pos: int, size: int, prev_next: int) -> int:
        # Best effort: records of the cut batches whose headers still read sanely (enough
        # bytes for lastOffsetDelta, magic 2, offsets moving forward).
        lost = 0
        while pos < size:
            head = pread_exact(self.fd, min(HEADER_BYTES, size - pos), pos)
            if len(head) < 27 or head[16] != MAGIC:
                break
            base = int.from_bytes(head[0:8], "big", signed=True)
            blen = int.from_bytes(head[8:12], "big", signed=True)
            delta = int.from_bytes(head[23:27], "big", signed=True)
            if base < prev_next or delta < 0 or blen < _MIN_BATCH_LENGTH or delta > INT32_MAX:
                break
            lost += delta + 1
            prev_next = base + delta + 1
            pos += LOG_OVERHEAD + blen
        return lost

    # ------------------------------------------------------------------ append

    def append(self, data, entries: list[tuple[int, int, int, int, int, int]], *,
               index_interval_bytes: int, now_ms: int) -> None:
        """Write `data` (whole, checked batches; one buffer or a list of buffers that are
        written back to back) at the end of the file and index it.

        `entries`: one (position in data, size, base_offset, next_offset, max_timestamp,
        partition_leader_epoch) per batch, offsets as stamped. Not fsynced."""
        start = self.size_bytes
        total_bytes = sum(len(b) for b in data) if isinstance(data, list) else len(data)
        pwrite_all(self.fd, data, start)
        if self.created_ms is None:
            self.created_ms = now_ms
        for p, size, base, nxt, max_ts, epoch in entries:
            self._index_batch(start + p, base, nxt, max_ts, size, epoch, index_interval_bytes)
        self.size_bytes = start + total_bytes

    # ------------------------------------------------------------------ reads

    def walk(self, start: int, end: int) -> Iterator[tuple[int, Header]]:
        """(position, Header) of each batch in [start, end), reading headers only, in small
        chunks. Raises CorruptRecordError on a header that does not parse or runs past end."""
        pos = start
        buf = b""
        buf_start = start
        while pos < end:
            off = pos - buf_start
            if off < 0 or off + HEADER_BYTES > len(buf):
                buf = pread_exact(self.fd, min(_WALK_CHUNK_BYTES, max(end - pos, HEADER_BYTES)), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_BYTES:
                    raise CorruptRecordError(
                        f"segment {self.name}: truncated header at {pos}")
            try:
                h = parse_header_prefix(buf, off)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"segment {self.name} at {pos}: {e}") from None
            if pos + h.size > end:
                raise CorruptRecordError(
                    f"segment {self.name}: batch at {pos} runs past {end}")
            yield pos, h
            pos += h.size

    def locate(self, offset: int) -> tuple[int, Header] | None:
        """(position, Header) of the first batch whose last offset >= `offset` (the batch
        holding it, or the next one after a gap); None if no such batch in this segment."""
        rel = offset - self.base_offset
        if rel < 0:
            start = 0
        else:
            _, start = self.index.lookup(min(rel, INT32_MAX))
        for pos, h in self.walk(start, self.size_bytes):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read_at(self, pos: int, first: Header, max_bytes: int, max_offset: int | None) -> bytes:
        """Whole batches from `pos` (where `first` starts): the first always (even if larger
        than max_bytes), then more while they fit in max_bytes and start below max_offset.

        The end is found before reading (index positions are batch starts, then a short
        header walk), so the data is one exact pread: no copy to trim a partial batch."""
        end = self._read_end(pos, first, max_bytes, max_offset)
        data = pread_exact(self.fd, end - pos, pos)
        if len(data) != end - pos:
            raise CorruptRecordError(f"segment {self.name}: short read at {pos}")
        return data

    def slice_at(self, pos: int, first: Header, max_bytes: int, max_offset: int | None) -> FileSlice:
        """What `read_at` would read, as a FileSlice (nothing is read; the caller sends it)."""
        end = self._read_end(pos, first, max_bytes, max_offset)
        return FileSlice(os.dup(self.fd), pos, end - pos)

    def _read_end(self, pos: int, first: Header, max_bytes: int, max_offset: int | None) -> int:
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
            yield pos, h, pread_exact(self.fd, h.size, pos)

    def first_batch_for_timestamp(self, timestamp_ms: int, min_offset: int) -> Header | None:
        """First batch (with last offset >= min_offset) whose max_timestamp >= timestamp_ms."""
        rel = self.timeindex.lookup(timestamp_ms)
        _, start = self.index.lookup(rel)
        for _, h in self.walk(start, self.size_bytes):
            if h.max_timestamp >= timestamp_ms and h.last_offset >= min_offset:
                return h
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
            os.ftruncate(self.fd, cut)
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

    def scan_tail(self) -> None:
        """Compute next_offset/last_epoch of a sealed segment (walk from its last index entry)."""
        self.next_offset = self.base_offset
        for _, h in self.walk(self.index.last_position(), self.size_bytes):
            self.next_offset = h.next_offset
            self.last_epoch = h.partition_leader_epoch

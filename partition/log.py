"""The log of one partition replica: segments on disk, recovery, retention, compaction, and
the leader-epoch cache. The partition Raft uses it as its Raft log (DESIGN §4 "Log").

The log is cut as Kafka cuts its own (UnifiedLog / LocalLog / LogLoader / LogSegment):
* this module: `Log`, the segment list and its I/O (append, read, truncate, flush, the
  directory and the checkpoints it writes), with the locks below;
* partition/log_loader.py: opening and recovery (`LogLoader`);
* partition/log_integrity.py: the read-path checks, the scrubber's segment check, repair;
* partition/log_retention.py: retention, DeleteRecords' log start, compaction passes;
* partition/producer_snapshot.py: producer-state snapshot files;
* partition/checkpoint.py: the checkpoint files and their formats;
* partition/epoch_cache.py: the leader-epoch cache; partition/log_config.py: `LogConfig`;
* partition/segment.py: one segment and its indexes.
The parts of `Log` in the other modules are its base classes: they hold no state of their
own, and every rule below holds for them.

Invariants:
* log_start_offset <= log_end_offset; offsets in the log strictly increase across batches
  and segments; segment base offsets strictly increase and the active (last) segment starts
  at or below log_end_offset.
* flushed_offset <= log_end_offset, and every offset below flushed_offset is fsynced
  (`open()` fsyncs what it recovered, so after open flushed_offset == log_end_offset).
* Epoch cache: epochs and start offsets strictly increase; every start offset is in
  [log_start_offset, log_end_offset). The durable checkpoint holds every entry starting
  below the durable recovery point (`_sync_epochs` before a point moves) and is a prefix of
  the cache, else is rewritten at once (truncations, retention): a new epoch's entry waits
  for the next point (issue 46), as open's scan past the point assigns it again.
* Recovery on open CRC-scans only segments at or above the recovery point (normally just the
  active one); segments below it are trusted through their sanity-checked indexes. The
  active segment is scanned from its offset-granular point when one applies. The first
  bad batch ends the log: the tail is cut and later segments deleted (RecoveryReport).
* Retention and compaction touch only closed segments; compaction only fsynced ones.

Integrity: no byte leaves the log unchecked (partition/log_integrity.py).

Concurrency: three kinds of callers, in any threads.
* The WRITER: every call that changes the log (append, append_replicated, truncate_to, repair,
  rebuild_indexes, maintain and its phases roll_and_retain / plan_compaction /
  install_cleaned, set_config, close). One at a time: the caller serialises them (the replica
  holds its lock around each, on the trio thread for appends, in a worker thread for the
  blocking ones). Writer calls may block on disk (fsync).
* FLUSH: `flush()` may run in another thread at the same time as the writer.
* READERS: `read`, `read_slice`, `unverified_bytes`, `batch_headers`, `offset_for_timestamp`,
  `check_segment`, `pinned_segment`, `clean_planned` may run in any thread beside the writer
  and each other.
  They take their snapshot of the segment list under `_lock` and pin the segments they read.
  Offsets a reader asks for below the high watermark are never cut by the writer except by a
  `repair` or a log reset; a reader racing those may see a torn read, which it reports as
  damage that the writer re-checks before acting.
Two locks make that safe:
* `_lock` (held for microseconds) guards the segment list, `log_end_offset`, the
  not-yet-durable sealed segments (`_pending`) and the directory-dirty flag. `flush()` and
  readers take a consistent snapshot under it and pin the segments they use; a roll meanwhile
  only appends to the list, and a retention/compaction/truncation that drops a pinned segment
  closes its fd at the last unpin, never under a running fsync or pread (so an fd number
  cannot be reused under it). Files renamed over or unlinked stay readable through a pinned fd.
* `_flush_lock` serialises flushes with each other and with `truncate_to`, `repair` and
  `close` (which therefore may wait for one running fsync: run them in a worker thread).
  `flushed_offset` only moves to the snapshot's target, after the fsyncs of every segment
  holding offsets below it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from partition.batch import HEADER_BYTES, Header, iter_headers, stamp_checked
from partition.checkpoint import (
    ACTIVE_POINT_CHECKPOINT,
    EPOCH_CHECKPOINT,
    LOG_START_CHECKPOINT,
    PRODUCER_SNAPSHOT_PREFIX,
    PRODUCER_SNAPSHOTS_KEPT,
    RECOVERY_POINT_CHECKPOINT,
    RECOVERY_POINT_CLOSE_MIN_BYTES,
    RECOVERY_POINT_FLUSH_BYTES,
    RECOVERY_POINT_MIN_BYTES,
    ActiveCheckpoint,
    encode_checkpoint,
    producer_snapshot_name,
)
from partition.epoch_cache import LeaderEpochCache
from partition.errors import (
    CorruptRecordError,
    EpochRegression,
    InvalidAppendError,
    LogClosedError,
    NonContiguousAppend,
)
from partition.log_config import LogConfig
from partition.log_integrity import LogIntegrity, RepairReport, check_read
from partition.log_loader import LogLoader, RecoveryReport, ScannedTail
from partition.log_retention import CompactionPlan, LogRetention
from partition.producer_snapshot import ProducerCheckpoint, ProducerSnapshots, ProducerStateLoad
from partition.file_io import unlink_if_present, write_durably
from partition.segment import DEFAULT_MAX_OPEN_SEGMENTS, INT32_MAX, FileCache, FileSlice, Segment
from partition.telemetry import LatencyBuckets
from raftlog.base.errors import MessageTooLargeError, OffsetOutOfRangeError

# Re-exported: the names callers of the log have always imported from here.
__all__ = [
    "Log", "LogConfig", "RecoveryReport", "RepairReport", "CompactionPlan", "LeaderEpochCache",
    "InvalidAppendError", "NonContiguousAppend", "EpochRegression",
    "EPOCH_CHECKPOINT", "LOG_START_CHECKPOINT", "RECOVERY_POINT_CHECKPOINT",
    "ACTIVE_POINT_CHECKPOINT", "ActiveCheckpoint", "RECOVERY_POINT_MIN_BYTES",
    "RECOVERY_POINT_FLUSH_BYTES", "RECOVERY_POINT_CLOSE_MIN_BYTES",
    "PRODUCER_SNAPSHOT_PREFIX", "PRODUCER_SNAPSHOTS_KEPT", "producer_snapshot_name",
    "ProducerCheckpoint", "ProducerStateLoad",
]

logger = logging.getLogger(__name__)

class Log(LogLoader, LogIntegrity, LogRetention, ProducerSnapshots):
    """A partition's log. Open with `Log.open`; see the module docstring for invariants."""

    def __init__(self, directory: Path, config: LogConfig, files: FileCache | None = None):
        self.directory = directory
        self.config = config
        # The node's open-file cache of sealed segments; a log opened alone has its own.
        self._files = files if files is not None else FileCache(DEFAULT_MAX_OPEN_SEGMENTS)
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._pending: list[Segment] = []
        self._dir_dirty = False
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._epochs = LeaderEpochCache()
        self._epochs_dirty = False  # entries the durable checkpoint lacks
        self._epochs_io = threading.Lock()  # one checkpoint write at a time
        self._clean_below = 0
        self._closed = False
        self._failed: BaseException | None = None
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.flushed_offset = 0
        self.recovery: RecoveryReport | None = None
        self.sync_pending = False  # open(defer_sync=True) left fsyncs to its caller
        self.fsync_seconds = LatencyBuckets()  # every flush() (/metrics raftlog_log_fsync_seconds)
        # Compaction bookkeeping (in memory: after a restart the first maintain cleans once).
        self._compacted_below = -1
        self._next_tombstone_expiry_ms: int | None = None
        # The durable offset-granular point (base, position), None if none applies; the cut
        # counter that voids snapshots taken before a truncation or repair.
        self._active_point: tuple[int, int] | None = None
        self._cut_generation = 0
        # S of each durable producer snapshot, ascending; why open refused one.
        self._producer_snapshots: list[int] = []
        self._producer_snapshot_refused: str | None = None
        # For the producer-state rebuild that follows open (taken by the first one).
        self._scanned_tail: ScannedTail | None = None
        # Test seam: called after each durable step of a compaction swap.
        self._cleaner_crash_point: Callable[[str], None] = lambda step: None

    @contextmanager
    def _dir(self) -> Iterator[int]:
        """An fd of the log's directory for one durable step. Opened on demand, not kept: a
        node with 1,000 partitions would otherwise hold 1,000 directory fds (issue 19)."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield fd
        finally:
            os.close(fd)

    def _fsync_dir(self) -> None:
        with self._dir() as fd:
            os.fsync(fd)

    # ------------------------------------------------------------------ checkpoints

    def _write_epochs(self) -> None:
        """Durably, as the cache stands (a copy of its list: one state, the writer may append)."""
        with self._epochs_io:
            self._epochs_dirty = False
            write_durably(self.directory, EPOCH_CHECKPOINT, LeaderEpochCache(list(self._epochs.entries)).encode())

    def _sync_epochs(self) -> None:
        """Before a recovery point moves: the entries only added since the last write."""
        if self._epochs_dirty:
            self._write_epochs()

    def _write_log_start(self) -> None:
        write_durably(self.directory, LOG_START_CHECKPOINT,
                      encode_checkpoint(LOG_START_CHECKPOINT, [str(self.log_start_offset)]))

    def _set_recovery_point(self, clean_below: int) -> None:
        if clean_below != self._clean_below:
            self._sync_epochs()
            write_durably(self.directory, RECOVERY_POINT_CHECKPOINT,
                          encode_checkpoint(RECOVERY_POINT_CHECKPOINT, [str(clean_below)]))
            self._clean_below = clean_below

    def recovery_snapshot(self, min_bytes: int = RECOVERY_POINT_MIN_BYTES) -> ActiveCheckpoint | None:
        """Writer, no I/O: the active segment's offset-granular recovery point as it stands
        (its indexes copied), or None when it would cover fewer than `min_bytes` new bytes
        (or the log is closed). Make it durable with `write_recovery_point` (any thread)."""
        if self._closed or self._failed is not None:
            return None
        a = self._active
        covered = self._active_point[1] if (self._active_point is not None
                                            and self._active_point[0] == a.base_offset) else 0
        if a.size_bytes == 0 or a.size_bytes - covered < max(min_bytes, 1):
            return None
        return ActiveCheckpoint(a.base_offset, a.size_bytes, a.next_offset, a.last_epoch,
                                a.max_timestamp, a.offset_of_max_timestamp, a.bytes_since_index,
                                a.index.to_bytes(), a.timeindex.to_bytes(), self._cut_generation)

    def write_recovery_point(self, point: ActiveCheckpoint) -> bool:
        """Make `point` durable: fsync the log first if it holds bytes the point covers that
        are not yet flushed, then replace the checkpoint atomically. False (nothing written)
        when a truncation or repair came after the snapshot. Blocking; any thread (it waits
        for a running flush). Raises LogClosedError (an fsync or write failed)."""
        self._check_open()
        with self._flush_lock:
            self._check_open()
            if point.generation != self._cut_generation:
                return False
            try:
                if self.flushed_offset < point.next_offset:
                    self._flush_locked()
                self._sync_epochs()  # the point's epochs: open will not scan below it
                write_durably(self.directory, ACTIVE_POINT_CHECKPOINT, point.encode())
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"recovery point write failed: {e}") from e
            self._active_point = (point.base, point.position)
            return True

    def _before_cut(self, cut_offset: int | None) -> None:
        """Before any cut (under _flush_lock): void snapshots taken so far and remove the
        durable point, so that a crash from here on scans the active segment whole; and the
        producer snapshots whose offset the cut may reach below (`cut_offset`: the lowest
        offset the cut may remove; None: all of them). Durable when it returns."""
        self._cut_generation += 1
        self._active_point = None
        gone = unlink_if_present(self.directory / ACTIVE_POINT_CHECKPOINT)
        gone |= self._unlink_producer_snapshots(lambda at: cut_offset is None or cut_offset < at)
        if gone:
            self._fsync_dir()

    # ------------------------------------------------------------------ state checks

    def _check_open(self) -> None:
        if self._failed is not None:
            raise LogClosedError(f"log {self.directory} failed: {self._failed}")
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    @property
    def _active(self) -> Segment:
        return self._segments[-1]

    # ------------------------------------------------------------------ appends

    def append(self, batches: bytes | bytearray, *, leader_epoch: int, now_ms: int,
               checked: Sequence[tuple[int, Header]] | None = None) -> tuple[int, int]:
        """Leader path: append client batches, assigning offsets. Checks each batch's header
        and CRC (records are not decoded; `checked`: the (position, Header) of every batch from
        the caller's own check of these bytes, the validator's CheckedBatches: not done again),
        stamps base offset (from log_end_offset on) and `leader_epoch`, rolls first if the
        active segment is full or old, writes (not fsynced: see `flush`). Returns (first_offset,
        last_offset). Raises CorruptRecordError (bad or empty input), MessageTooLargeError (a
        batch over max_batch_bytes), EpochRegression (leader_epoch below the latest),
        LogClosedError. Ordering: a new epoch's cache entry is fsynced before the batch is written."""
        self._check_open()
        if not batches:
            raise CorruptRecordError("empty append")
        view = memoryview(batches).cast("B")
        if leader_epoch < self._epochs.last_epoch:
            raise EpochRegression(f"epoch {leader_epoch} < latest {self._epochs.last_epoch}")
        if checked is not None and (not checked or checked[0][0] or checked[-1][0] + checked[-1][1].size != len(view)):
            raise CorruptRecordError("checked batches do not cover the append")
        entries = []
        # No copy of the payload: each batch is written as its stamped header (a small copy)
        # followed by a view of the rest, back to back with pwritev.
        parts: list = []
        first = offset = self.log_end_offset
        limit = self.config.max_batch_bytes
        for pos, h in _headers_of(view, checked):
            if h.size > limit:
                raise MessageTooLargeError(f"batch of {h.size} bytes > max_batch_bytes {limit}")
            head = bytearray(view[pos : pos + HEADER_BYTES])
            stamp_checked(head, 0, offset, leader_epoch)  # both fields lie outside the CRC
            parts.append(head)
            parts.append(view[pos + HEADER_BYTES : pos + h.size])
            nxt = offset + h.last_offset_delta + 1
            entries.append((pos, h.size, offset, nxt, h.max_timestamp, leader_epoch))
            offset = nxt
        self._write(parts, entries, [(leader_epoch, first)], now_ms, size=len(view))
        return first, offset - 1

    def append_replicated(self, batches: bytes | bytearray | memoryview, *, now_ms: int,
                          checked: Sequence[tuple[int, Header]] | None = None) -> int:
        """Follower path: append batches that already carry offsets and epochs, in one write.

        The first batch must start at log_end_offset, base offsets must then increase past
        each batch's last offset (gaps allowed) and epochs must not decrease; CRCs are checked
        (`checked`: the (position, Header) of every batch of `batches`, from the caller's own
        check of these very bytes, header and CRC-32C (batch.CheckedBatches): not done again).
        Returns the new log_end_offset. Raises NonContiguousAppend, EpochRegression,
        CorruptRecordError, MessageTooLargeError, LogClosedError. Nothing is written if any
        batch is refused."""
        self._check_open()
        view = memoryview(batches).cast("B") if not isinstance(batches, bytes) else batches
        if not len(view):
            raise CorruptRecordError("empty append")
        entries = []
        new_epochs: list[tuple[int, int]] = []
        expected = self.log_end_offset
        last_epoch = self._epochs.last_epoch
        limit = self.config.max_batch_bytes
        for pos, h in _headers_of(view, checked):
            if h.size > limit:
                raise MessageTooLargeError(f"batch of {h.size} bytes > max_batch_bytes {limit}")
            if (h.base_offset != expected) if not entries else (h.base_offset < expected):
                raise NonContiguousAppend(
                    f"batch at offset {h.base_offset}, log end offset / next expected {expected}")
            epoch = h.partition_leader_epoch
            if epoch < last_epoch:
                raise EpochRegression(f"batch epoch {epoch} < latest {last_epoch}")
            if epoch > last_epoch:
                new_epochs.append((epoch, h.base_offset))
                last_epoch = epoch
            entries.append((pos, h.size, h.base_offset, h.next_offset, h.max_timestamp, epoch))
            expected = h.next_offset
        self._write(view, entries, new_epochs, now_ms)
        return self.log_end_offset

    def _write(self, data, entries, epochs: list[tuple[int, int]], now_ms: int, *,
               size: int | None = None) -> None:
        """`data` is one buffer or a list of buffers of `size` bytes in all."""
        size = len(data) if size is None else size
        if size > INT32_MAX:
            raise MessageTooLargeError(f"append of {size} bytes")
        self._maybe_roll(size, entries[-1][3] - 1, now_ms)
        for epoch, start in epochs:
            if self._epochs.assign(epoch, start):
                self._epochs_dirty = True  # durable with the next recovery point (docstring)
        try:
            self._active.append(data, entries, index_interval_bytes=self.config.index_interval_bytes,
                                now_ms=now_ms, trusted_tail=self.config.hot_tail_bytes,
                                reserve_limit=self.config.segment_bytes)
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"write failed: {e}") from e
        with self._lock:
            self.log_end_offset = entries[-1][3]

    def _maybe_roll(self, nbytes: int, last_offset: int, now_ms: int) -> None:
        a = self._active
        if a.size_bytes == 0:
            return
        cfg = self.config
        if (a.size_bytes + nbytes > cfg.segment_bytes or a.index.is_full or a.timeindex.is_full
                or (a.created_ms is not None and now_ms - a.created_ms >= cfg.segment_ms)
                or last_offset - a.base_offset > INT32_MAX):
            self._roll()

    def _roll(self) -> None:
        old = self._active
        old.seal()
        new = Segment.create(self.directory, self.log_end_offset,
                             max_index_bytes=self.config.max_index_bytes, files=self._files)
        with self._lock:
            self._segments.append(new)
            self._bases.append(new.base_offset)
            self._pending.append(old)
            self._dir_dirty = True

    # ------------------------------------------------------------------ reads

    def _pin_segment_at(self, offset: int, after: Segment | None = None) -> Segment | None:
        """Under _lock: the segment that may hold `offset` (or, with `after`, the one after
        that segment), pinned; None past the last one."""
        with self._lock:
            if after is None:
                i = max(bisect_right(self._bases, offset) - 1, 0)
            else:
                i = bisect_right(self._bases, after.base_offset)
            if i >= len(self._segments):
                return None
            seg = self._segments[i]
            seg.pin()
            return seg

    def _unpin(self, seg: Segment) -> None:
        with self._lock:
            seg.unpin()

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             own_tail: bool = False) -> bytes:
        """Whole batches from the batch that holds `offset` (or, in a compaction gap, the next
        one), within one segment: at least one batch even if larger than max_bytes, then more
        while they fit; never a batch whose base_offset >= max_offset (pass the high watermark).
        `offset == log_end_offset` (or >= max_offset) gives b"". Records are not decoded and
        the first batch may start before `offset` (clients skip). Every batch returned has had
        its header and CRC-32C checked ("Integrity"), or with `own_tail`, is this process's
        own append in the active segment's cached tail. Raises OffsetOutOfRangeError for offset
        < log_start_offset or > log_end_offset; StorageDamageError; LogClosedError. A reader
        (module docstring): any thread."""
        with self._located(offset, max_offset) as found:
            if found is None:
                return b""
            seg, pos, h = found
            version = seg.verified_version
            data = seg.read_at(pos, h, max_bytes, max_offset)
            check_read(seg, pos, h, data, 0, version, self._trusted_from(seg, own_tail))
            return data

    def read_slice(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   warm: bool = False, own_tail: bool = False) -> FileSlice | None:
        """What `read` would return, as a FileSlice of the segment file (the caller closes
        it; it pins the segment meanwhile and takes no descriptor of its own; zero-copy
        senders), or None where `read` returns b"". Before the slice is made,
        the parts of its range not yet checked are read and checked as `read` checks them,
        so a slice never covers a bad batch; with `warm`, the checked parts are read too
        (into the page cache, so that sending the slice does not wait on the disk). Same
        errors. A reader: any thread; blocking while it reads."""
        with self._located(offset, max_offset) as found:
            if found is None:
                return None
            seg, pos, h = found
            version = seg.verified_version
            end = seg.read_end(pos, h, max_bytes, max_offset)
            trusted = self._trusted_from(seg, own_tail)
            if warm:
                check_read(seg, pos, h, seg.read_range(pos, end, h.base_offset), 0, version,
                            trusted)
            else:
                for a, b in seg.unverified(pos, end, version, trusted):
                    data = seg.read_range(a, b, h.base_offset)
                    check_read(seg, pos, h, data, a - pos, version, trusted)
                seg.mark_verified(pos, min(end, max(pos, trusted)), version)
            seg.pin()  # the slice's own pin, released by its close() (FileSlice)
            return FileSlice(seg.fd, pos, end - pos, release=seg.unpin)

    def unverified_bytes(self, offset: int, max_bytes: int, *, own_tail: bool = False) -> int:
        """About how many bytes of a read of `offset` (at most max_bytes) are still to be
        checked (an index lookup, no I/O): what decides where a zero-copy read runs. A
        reader."""
        with self._lock:
            i = max(bisect_right(self._bases, offset) - 1, 0)
            if i >= len(self._segments):
                return 0
            seg = self._segments[i]
        _, pos = seg.index.lookup(max(0, min(offset - seg.base_offset, INT32_MAX)))
        return sum(b - a for a, b in seg.unverified(pos, min(seg.size_bytes, pos + max_bytes),
                                                    trusted=self._trusted_from(seg, own_tail)))

    def _trusted_from(self, seg: Segment, own_tail: bool) -> int:
        """Where a read of `seg` may take bytes as checked by their write ("Integrity"): with
        `own_tail`, in the active segment, this process's own appends within the cached tail;
        nowhere else (size_bytes). A reader."""
        if not own_tail or seg is not self._segments[-1]:
            return seg.size_bytes
        return seg.trusted_from()

    @contextmanager
    def _located(self, offset: int, max_offset: int | None) -> Iterator[tuple[Segment, int, Header] | None]:
        """(segment, position, first batch header) where a read of `offset` starts, the
        segment pinned for the `with` block; None: nothing to read. Raises as `read`."""
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(offset=offset, log_start_offset=self.log_start_offset,
                                        log_end_offset=self.log_end_offset)
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            yield None
            return
        seg = self._pin_segment_at(offset)
        while seg is not None:
            try:
                found = seg.locate(offset)
                if found is not None:
                    pos, h = found
                    if max_offset is not None and h.base_offset >= max_offset:
                        found = None
                    yield None if found is None else (seg, pos, h)
                    return
            finally:
                self._unpin(seg)
            seg = self._pin_segment_at(offset, after=seg)
        yield None

    def bytes_behind_end(self, offset: int) -> int:
        """About how many bytes of log lie at and after `offset` (index lookups only, no I/O):
        what a read from there may touch, and how far back it reaches into the page cache
        (flushed pages more than `cache_tail_bytes` behind the end are dropped). A reader."""
        with self._lock:
            segments = list(self._segments)
            bases = list(self._bases)
        i = max(bisect_right(bases, offset) - 1, 0)
        if i >= len(segments):
            return 0
        seg = segments[i]
        _, pos = seg.index.lookup(max(0, min(offset - seg.base_offset, INT32_MAX)))
        return seg.size_bytes - pos + sum(s.size_bytes for s in segments[i + 1:])

    def batch_headers(self, start: int | None = None) -> Iterator[Header]:
        """The header of every batch holding an offset at or above log_start_offset (and
        `start` if given), in offset order, reading headers only (a few KiB per batch, not the
        records): rebuilding state from a whole log (the producers' windows) costs ~1/20 of a
        full read, and on a cold page cache (drop-behind, a reboot) that is the difference
        between milliseconds and seconds per GiB. With `start` the walk begins at the offset
        index's entry for it (checked: StorageDamageError what="index" when it names another
        batch). A reader; raises StorageDamageError on a header that does not parse."""
        self._check_open()
        begin = self.log_start_offset if start is None else max(start, self.log_start_offset)
        seg = self._pin_segment_at(begin)
        pos, expect = 0, None
        if seg is not None and start is not None and begin > seg.base_offset:
            entry, pos = seg.index.lookup(min(begin - seg.base_offset, INT32_MAX))
            expect = seg.base_offset + entry if pos else None
        while seg is not None:
            try:
                for _, h in seg.walk(pos, seg.size_bytes, expect_offset=expect):
                    if h.next_offset > begin:
                        yield h
            finally:
                self._unpin(seg)
            pos, expect = 0, None
            seg = self._pin_segment_at(begin, after=seg)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) for ListOffsets, Kafka's rule: the first record (at or after
        log_start_offset) whose timestamp >= timestamp_ms, with its timestamp (the batch holding
        it is decoded: each record counts by its own timestamp). None if no record qualifies.
        A reader."""
        self._check_open()
        start = self.log_start_offset
        seg = self._pin_segment_at(start)
        while seg is not None:
            try:
                if seg.max_timestamp >= timestamp_ms:
                    found = seg.first_record_for_timestamp(timestamp_ms, start)
                    if found is not None:
                        return found
            finally:
                self._unpin(seg)
            seg = self._pin_segment_at(start, after=seg)
        return None

    # ------------------------------------------------------------------ epochs

    def epochs(self) -> list[tuple[int, int]]:
        """[(epoch, start_offset)] ascending (the leader-epoch cache)."""
        return list(self._epochs.entries)

    def last_epoch(self) -> int:
        """The latest epoch in the log; -1 if none."""
        return self._epochs.last_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, its end offset: the next epoch's start offset, or
        log_end_offset for the latest); (-1, -1) if `epoch` is below every known epoch."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= `offset`; a batch holding `offset` goes whole, so
        log_end_offset becomes its base offset. Later segments are deleted, indexes and the
        epoch cache trimmed, and all of it fsynced (with everything appended before) before
        returning. No-op if offset >= log_end_offset. Below log_start_offset (or when the cut
        batch starts below it) the log is emptied and restarts at max(offset, ...) as Kafka's
        truncateFullyAndStartAt does. Concurrency: waits for a running flush."""
        self._check_open()
        with self._flush_lock:
            if offset >= self.log_end_offset:
                return
            try:
                self._truncate_locked(offset)
                self._flush_locked()
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"truncation failed: {e}") from e

    def _truncate_locked(self, offset: int) -> None:
        if offset < self.log_start_offset:
            self._truncate_fully_locked(offset)
            return
        i = max(bisect_right(self._bases, offset) - 1, 0)
        seg = self._segments[i]
        later = self._cut_after(i, offset)
        for s in later:
            self._close_segment(s)
            s.delete_files()
        seg.keep_open()  # the active segment again
        seg.truncate_to(offset, index_interval_bytes=self.config.index_interval_bytes)
        new_end = seg.next_offset if seg.next_offset is not None else seg.base_offset
        if new_end < self.log_start_offset:
            self._truncate_fully_locked(self.log_start_offset)
            return
        with self._lock:
            self.log_end_offset = new_end
            self.flushed_offset = min(self.flushed_offset, new_end)
        if self._epochs.truncate_from_end(new_end):
            self._write_epochs()

    def _cut_after(self, i: int, cut_offset: int) -> list[Segment]:
        """Under _flush_lock, the start of a cut inside the i-th segment (a truncation, a
        repair): first lower the recovery point, since a crash from here on must find that
        segment scanned, not trusted through index files that no longer match it; then take
        every later segment out of the list. Returns those (the caller closes and deletes
        them); the i-th is no longer pending a flush (the caller makes it active)."""
        seg = self._segments[i]
        later = self._segments[i + 1:]
        self._before_cut(cut_offset)
        self._set_recovery_point(min(self._clean_below, seg.base_offset))
        with self._lock:
            del self._segments[i + 1:]
            del self._bases[i + 1:]
            self._pending = [s for s in self._pending if s not in later and s is not seg]
            self._dir_dirty = True
        return later

    def _epochs_from_start(self, start: int) -> bool:
        """The epoch cache after the log start moved to `start`: epochs wholly below it go,
        and an emptied log keeps none (an entry must start below the end, as open leaves it:
        the next leader's epoch starts there). Returns whether the cache changed."""
        changed = self._epochs.truncate_from_start(start)
        if start >= self.log_end_offset:
            changed |= self._epochs.truncate_from_end(self.log_end_offset)
        return changed

    def _truncate_fully_locked(self, start: int) -> None:
        self._before_cut(None)
        old = self._segments
        with self._lock:
            self._segments = []
            self._bases = []
            self._pending = []
            self._dir_dirty = True
        for s in old:
            self._close_segment(s)
            s.delete_files()
        new = Segment.create(self.directory, start, max_index_bytes=self.config.max_index_bytes,
                             files=self._files)
        with self._lock:
            self._segments = [new]
            self._bases = [start]
            self.log_start_offset = start
            self.log_end_offset = start
            self.flushed_offset = min(self.flushed_offset, start)
        self._write_log_start()
        self._epochs.truncate_from_end(start)
        self._write_epochs()
        self._set_recovery_point(start)

    # ------------------------------------------------------------------ flush

    def flush(self) -> int:
        """fsync everything appended so far (segments, their index files once sealed, the
        directory after a roll); returns the new flushed_offset. Group commit: one call
        covers every append before it. May run in a worker thread (module docstring).
        Raises LogClosedError (closed, or an fsync failed: the log is then unusable)."""
        self._check_open()
        with self._flush_lock:
            self._check_open()
            try:
                started = time.perf_counter()
                flushed = self._flush_locked()
                self.fsync_seconds.observe(time.perf_counter() - started)
                return flushed
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"flush failed: {e}") from e

    def _flush_locked(self) -> int:
        with self._lock:
            target = self.log_end_offset
            active = self._segments[-1]
            active_bytes = active.size_bytes
            pending = list(self._pending)
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
            for s in pending:
                s.pin()
            active.pin()
        try:
            for s in pending:
                s.fsync()
                s.fsync_index_files()
            active.fsync()
            if dir_dirty:
                self._fsync_dir()
            self._drop_behind(pending, active, active_bytes)
        except BaseException:
            with self._lock:
                self._dir_dirty |= dir_dirty
            raise
        finally:
            with self._lock:
                for s in pending:
                    s.unpin()
                active.unpin()
        for s in pending:
            s.make_evictable()
        with self._lock:
            self._pending = [s for s in self._pending if s not in pending]
            if target > self.flushed_offset:
                self.flushed_offset = target
            # Every segment below the active one of the snapshot is now durable, unless
            # truncation made an older one active again (then the point only goes down).
            still_pending = any(s.base_offset < active.base_offset for s in self._pending)
        if not still_pending and active.base_offset > self._clean_below:
            self._set_recovery_point(active.base_offset)
        return self.flushed_offset

    def _drop_behind(self, sealed: list[Segment], active: Segment, active_bytes: int) -> None:
        """Drop just-fsynced (so clean) pages more than `cache_tail_bytes` behind the end
        from the page cache, in the flushing thread while the segments are pinned.

        Why: appends then write into pages the kernel just freed instead of growing the page
        cache. On the VMs we run on, first-touched memory costs the host a fault per page,
        and the copy into new page-cache pages was ~40% of a broker's CPU at RF=3 (the
        write(2) copy ran at ~0.3 GB/s; with drop-behind, 1.1 -> 0.17 ms of system time per
        256 KiB fsynced append). The tail that followers and consumers read stays cached;
        older reads come from disk through read-ahead, as in any log larger than memory."""
        keep = self.config.cache_tail_bytes
        if keep < 0:
            return
        for s in sealed:
            if s is not active and s.size_bytes + active_bytes > keep:
                s.drop_cached(s.size_bytes)
        active.drop_cached(active_bytes - keep)

    def _close_segment(self, seg: Segment) -> None:
        # Under _lock: a flush pins/unpins under it, so "pinned? then close at unpin" is
        # decided atomically with the flusher's unpin (never a leak, never a close under fsync).
        with self._lock:
            seg.close()

    def _fail(self, e: BaseException) -> None:
        logger.error("log %s failed: %s", self.directory, e)
        self._failed = e

    # ------------------------------------------------------------------ misc

    def set_config(self, config: LogConfig) -> None:
        """Use `config` from now on (new limits apply at the next append / maintain)."""
        self._check_open()
        self.config = config

    def size_bytes(self) -> int:
        """Bytes in all segment files."""
        return sum(s.size_bytes for s in self._segments)

    def segment_count(self) -> int:
        return len(self._segments)

    def close(self) -> None:
        """Flush, write the active segment's index files, close every fd. Idempotent. Later
        calls raise LogClosedError."""
        if self._closed:
            return
        with self._flush_lock:
            try:
                if self._failed is None:
                    self._flush_locked()
                    self._active.write_index_files()
                    self._active.release_reserved()
                    # Clean shutdown: the next open scans only what a crash may have torn.
                    point = self.recovery_snapshot(RECOVERY_POINT_CLOSE_MIN_BYTES)
                    if point is not None:
                        self._sync_epochs()
                        write_durably(self.directory, ACTIVE_POINT_CHECKPOINT, point.encode())
            finally:
                with self._lock:
                    self._closed = True
                    for s in self._segments:
                        s.close()
                    for s in self._pending:
                        s.close()

    def _abandon(self) -> None:
        """Close every fd without writing anything: what a crash leaves (tests, failed open)."""
        if self._closed:
            return
        self._closed = True
        for s in self._segments + self._pending:
            s.close()


def _headers_of(view, checked: Sequence[tuple[int, Header]] | None) -> Iterable[tuple[int, Header]]:
    """Each batch's (position, Header): `checked` (the caller's check of these very bytes)
    when it covers them exactly, else read and CRC-checked here."""
    if checked is None:
        return iter_headers(view, verify=True)
    if not checked or checked[0][0] != 0 or checked[-1][0] + checked[-1][1].size != len(view):
        raise CorruptRecordError("checked batches do not cover the append")
    return checked

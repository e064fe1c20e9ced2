"""Loading a partition log from its directory, Kafka's LogLoader: finish or roll back
half-done compaction swaps, drop temp files and orphans, trust the segments below the
recovery point through their indexes, CRC-scan the rest and cut a torn tail, reload or
rebuild the leader-epoch cache, and make what it kept durable (partition/log.py "Invariants";
the files it reads: partition/checkpoint.py).

`LogLoader` is a part of `partition.log.Log` (a base class of it, holding no state of its
own): `Log.open` runs it once, before the log is shared with any other thread.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from partition import cleaner
from partition.batch import Header
from partition.checkpoint import (
    ACTIVE_POINT_CHECKPOINT,
    EPOCH_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    ActiveCheckpoint,
    read_checkpoint,
    read_offset_checkpoint,
)
from partition.epoch_cache import LeaderEpochCache
from partition.file_io import TMP_SUFFIX, read_or_none
from partition.errors import CorruptRecordError, StorageDamageError
from partition.index import IndexCorrupt, OffsetIndex, TimeIndex
from partition.log_config import LogConfig
from partition.segment_verifier import ResumePoint
from partition.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    FileCache,
    Segment,
    parse_segment_name,
)

__all__ = ["LogLoader", "RecoveryReport", "ScannedTail", "count_records"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryReport:
    """What `Log.open` found: the first segment it cut (None if nothing was cut), the bytes
    and offsets cut (offsets: records of cut batches whose headers still read, plus those of
    deleted later segments), the index files it rebuilt, and how long open took."""

    segment: str | None
    bytes_dropped: int
    offsets_lost: int
    indexes_rebuilt: list[str]
    duration_ms: float
    swaps_recovered: list[str] = field(default_factory=list)
    segments_scanned: int = 0
    # Where the active segment's scan started (its offset-granular recovery point), or None
    # when it was scanned from the start.
    resumed_at: int | None = None


@dataclass(frozen=True)
class ScannedTail:
    """The active segment's batch headers as open's recovery scan checked them, from
    `first_offset` (where the scan started) to the log end, and the log's shape then
    (`shape`: end offset, cut generation, active base), which must still hold to use them."""

    first_offset: int
    headers: list[tuple[int, Header]]  # (position, header), as SegmentScan has them
    shape: tuple[int, int, int]


def count_records(seg: Segment) -> int:
    n = 0
    try:
        for _, h in seg.walk(0, seg.size_bytes):
            n += h.last_offset_delta + 1
    except CorruptRecordError:
        pass  # best effort: the count is for the report only
    return n


class LogLoader:
    """Log's opening and recovery (module docstring)."""

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, now_ms: int,
             files: FileCache | None = None, fresh: bool = False, defer_sync: bool = False) -> Self:
        """Open (creating if absent) the log in `directory` and recover it.

        Order: finish or roll back half-done compaction swaps; drop temp files and segments
        wholly below the log start; trust segments below the recovery point through their
        (checked, else rebuilt) indexes; CRC-scan the rest, cutting at the first bad batch;
        reload or rebuild the epoch cache; fsync what recovery changed. `.recovery` holds the
        RecoveryReport. `files`: the node's open-file cache of sealed segments (None: one of
        the log's own). Raises OSError on I/O failure.

        `fresh` (issue 46: creating 10,000 partitions, four fsyncs of each new log were most
        of the time): `directory` was just made and holds no log. The empty segment is
        created and nothing else: no checkpoint is written (absent, each reads as the empty
        log's; the next open writes them durably) and nothing is fsynced. The caller makes
        the directory and its entry durable before anything relies on them (the manager's
        batched creation, partition/fresh_open.py); the directory stays dirty, so the first
        flush fsyncs it too. Raises FileExistsError if it holds a log after all.

        `defer_sync` (issue 46: a restart with 10,000 replicas): when recovery leaves the
        recovery point where it was, the fsyncs of what it kept (the active segment, the
        directory) are left to the caller, who makes the directory durable before anything
        relies on the log (`sync_pending` says whether any was left; the manager's batched
        open, partition/fresh_open.py, with one syncfs per batch). A recovery point that
        moves is written after those fsyncs, as without it."""
        started = time.perf_counter()
        directory = Path(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = cls(directory, config, files)
        try:
            if fresh:
                log._create_fresh(now_ms, started)
                return log
            log._recover(now_ms, started, defer_sync)
        except BaseException:
            log._abandon()
            raise
        return log

    def _create_fresh(self, now_ms: int, started: float) -> None:
        """`open(fresh=True)`: the state `_recover` gives an empty directory, without its
        checkpoint writes and fsyncs."""
        if self._segment_files():
            raise FileExistsError(f"{self.directory}: not a fresh log directory")
        self._segments = [Segment.create(self.directory, 0, max_index_bytes=self.config.max_index_bytes,
                                         files=self._files)]
        self._bases = [0]
        self.log_end_offset = self.log_start_offset = self.flushed_offset = 0
        self._scanned_tail = ScannedTail(0, [], self._shape())
        self._epochs = LeaderEpochCache()
        self._dir_dirty = True  # the first flush fsyncs the directory
        self._clean_below = 0
        self.recovery = RecoveryReport(
            segment=None, bytes_dropped=0, offsets_lost=0, indexes_rebuilt=[],
            duration_ms=(time.perf_counter() - started) * 1000, swaps_recovered=[],
            segments_scanned=0, resumed_at=None)

    def _segment_files(self) -> list[int]:
        bases = []
        names = os.listdir(self.directory)
        present = set(names)
        for fname in names:
            if fname.endswith(TMP_SUFFIX):
                os.unlink(self.directory / fname)
                self._dir_dirty = True
                continue
            base = parse_segment_name(fname)
            if base is not None:
                bases.append(base)
                continue
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                b = parse_segment_name(fname, suffix)
                if b is not None and f"{b:020d}{LOG_SUFFIX}" not in present:
                    os.unlink(self.directory / fname)  # an index without its segment
                    self._dir_dirty = True
        return sorted(bases)

    def _recover(self, now_ms: int, started: float, defer_sync: bool = False) -> None:
        cfg = self.config
        with self._dir() as dir_fd:
            swaps = cleaner.recover_swaps(self.directory, dir_fd)
        self._dir_dirty = bool(swaps)
        bases = self._segment_files()
        ckpt_start = read_offset_checkpoint(self.directory, LOG_START_CHECKPOINT)
        log_start = ckpt_start if ckpt_start is not None else (bases[0] if bases else 0)
        # Segments wholly below the log start: a retention whose unlink did not happen.
        while len(bases) > 1 and bases[1] <= log_start:
            self._unlink_segment_files(bases.pop(0))
            self._dir_dirty = True
        clean_below = read_offset_checkpoint(self.directory, RECOVERY_POINT_CHECKPOINT) or 0
        point = self._read_active_point()
        resumed_at: int | None = None
        if not bases:
            self._dir_dirty = True
            self._segments = [Segment.create(self.directory, log_start,
                                             max_index_bytes=cfg.max_index_bytes,
                                             files=self._files)]
        else:
            self._segments = [Segment.open_existing(self.directory, b,
                                                    max_index_bytes=cfg.max_index_bytes,
                                                    files=self._files)
                              for b in bases]
        self._bases = [s.base_offset for s in self._segments]
        rebuilt: list[str] = []
        cut_segment: str | None = None
        bytes_dropped = 0
        offsets_lost = 0
        scanned: list[Segment] = []
        scanned_headers = []
        tail: tuple[int, list[tuple[int, Header]]] | None = None  # the last segment's scan
        prev_epoch = -1
        i = 0
        while i < len(self._segments):
            seg = self._segments[i]
            last = i == len(self._segments) - 1
            if not last and seg.base_offset < clean_below:
                next_base = self._segments[i + 1].base_offset
                try:
                    if seg.load_indexes(next_base_offset=next_base,
                                        index_interval_bytes=cfg.index_interval_bytes):
                        rebuilt += [seg.index_path.name, seg.timeindex_path.name]
                        self._dir_dirty = True
                    i += 1
                    continue
                except StorageDamageError as e:
                    # A header the index rebuild cannot walk: scan this segment with CRCs
                    # and cut it at the first bad batch, as for the active one below.
                    logger.warning("log %s: %s; scanning segment %s", self.directory, e, seg.name)
            old_index = read_or_none(seg.index_path)
            old_timeindex = read_or_none(seg.timeindex_path)
            resume = self._resume_point(seg, point) if last else None
            scan = seg.recover(index_interval_bytes=cfg.index_interval_bytes, min_epoch=prev_epoch,
                               max_offset=None if last else self._segments[i + 1].base_offset,
                               resume=resume)
            if resume is not None:
                resumed_at = resume.position
                self._active_point = (seg.base_offset, resume.position)
            if last:
                tail = (seg.base_offset if resume is None else resume.next_offset, scan.headers)
            scanned.append(seg)
            scanned_headers.extend(h for _, h in scan.headers)
            if scan.headers:
                prev_epoch = scan.headers[-1][1].partition_leader_epoch
            if not last:
                seg.seal()
                self._dir_dirty = True
            else:
                seg.created_ms = now_ms if seg.size_bytes else None
            if seg.size_bytes and resume is None and (
                    old_index != seg.index.to_bytes() and not last
                    or old_index is None and len(seg.index)):
                rebuilt.append(seg.index_path.name)
            if seg.size_bytes and not last and old_timeindex != seg.timeindex.to_bytes():
                rebuilt.append(seg.timeindex_path.name)
            if scan.bytes_dropped:
                logger.warning("log %s: segment %s cut at %d: %d bytes, %d offsets dropped",
                               self.directory, seg.name, scan.valid_bytes, scan.bytes_dropped,
                               scan.offsets_lost)
                cut_segment = cut_segment or seg.log_path.name
                bytes_dropped += scan.bytes_dropped
                offsets_lost += scan.offsets_lost
                # Nothing after a hole can be trusted: delete every later segment.
                for later in self._segments[i + 1:]:
                    bytes_dropped += later.size_bytes
                    offsets_lost += count_records(later)
                    later.close()
                    later.delete_files()
                    self._dir_dirty = True
                    logger.warning("log %s: deleted segment %s after the cut",
                                   self.directory, later.name)
                del self._segments[i + 1:]
                self._bases = [s.base_offset for s in self._segments]
            i += 1
        active = self._segments[-1]
        self.log_end_offset = active.next_offset if active.next_offset is not None else active.base_offset
        self.log_start_offset = max(log_start, self._segments[0].base_offset)
        if tail is not None:
            self._scanned_tail = ScannedTail(*tail, self._shape())
        if self.log_start_offset > self.log_end_offset:
            # The persisted start is past what survived; start an empty log there.
            self._truncate_fully_locked(self.log_start_offset)
        # Epochs: the checkpoint, else a rebuild; then reconcile with what was scanned.
        lines = read_checkpoint(self.directory, EPOCH_CHECKPOINT)
        cache = LeaderEpochCache.decode(lines) if lines is not None else None
        durable = list(cache.entries) if cache is not None else []  # what the file holds
        if cache is None:
            cache = self._rebuild_epochs(scanned)
        else:
            cache.truncate_from_end(self.log_end_offset)
            for h in scanned_headers:
                cache.assign_lenient(h.partition_leader_epoch, max(h.base_offset, self.log_start_offset))
        cache.truncate_from_start(self.log_start_offset)
        # No entry starts at the end (a log emptied by its start: DeleteRecords, retention).
        cache.truncate_from_end(self.log_end_offset)
        self._epochs = cache
        if cache.entries[:len(durable)] != durable:
            self._write_epochs()  # entries removed or changed: durable before anything relies on it
        else:
            # Only added (or none, or no valid file): written with the next recovery point,
            # as an append's are (partition/log.py "Epoch cache"); until then every open
            # scans and assigns them again. 2 of a restart's 5 fsyncs per replica (issue 46).
            self._epochs_dirty = cache.entries != durable
        if ckpt_start != self.log_start_offset and not (
                ckpt_start is None and self.log_start_offset == self._segments[0].base_offset):
            # Without a checkpoint the log starts at its first segment: the same offset,
            # derived again at the next open; retention and resets write one before files go.
            self._write_log_start()
        self._check_producer_snapshots()
        # Make what recovery kept durable, then move the recovery point up to the active one.
        # A clean restart spends no fsyncs on what was durable already (issue 19: four per
        # partition, a third of a replica's open): the active segment's bytes up to its
        # recovery point, its index files (never trusted: recovery rebuilds them), and the
        # directory when recovery changed no name in it.
        fsyncs = []
        for seg in scanned:
            if not (seg is active and resumed_at is not None and resumed_at == seg.size_bytes
                    and not bytes_dropped):
                fsyncs.append(seg.fsync)
            if seg is not active:
                fsyncs.append(seg.fsync_index_files)
        if self._dir_dirty or bytes_dropped:
            fsyncs.append(self._fsync_dir)
        self._dir_dirty = False
        if defer_sync and active.base_offset == clean_below and not bytes_dropped:  # `open`
            self.sync_pending = bool(fsyncs)
        else:
            for fsync in fsyncs:
                fsync()
        for seg in self._segments[:-1]:
            seg.make_evictable()  # sealed and durable: the file cache may close it
        self.flushed_offset = self.log_end_offset
        self._clean_below = clean_below
        self._set_recovery_point(active.base_offset)
        self.recovery = RecoveryReport(
            segment=cut_segment, bytes_dropped=bytes_dropped, offsets_lost=offsets_lost,
            indexes_rebuilt=rebuilt, duration_ms=(time.perf_counter() - started) * 1000,
            swaps_recovered=swaps, segments_scanned=len(scanned), resumed_at=resumed_at)

    def _read_active_point(self) -> ActiveCheckpoint | None:
        data = read_or_none(self.directory / ACTIVE_POINT_CHECKPOINT)
        if data is None:
            return None
        point = ActiveCheckpoint.decode(data)
        if point is None:
            logger.warning("%s/%s is damaged; ignoring it", self.directory, ACTIVE_POINT_CHECKPOINT)
        return point

    def _resume_point(self, seg: Segment, point: ActiveCheckpoint | None) -> ResumePoint | None:
        """Where recovery of the active segment `seg` may start: `point` when it names this
        segment, the file still holds its position, and its indexes describe that prefix
        (sane, inside it, the last offset entry naming the batch there); else None (scan
        all)."""
        if point is None or point.base != seg.base_offset:
            return None
        try:
            if os.fstat(seg.fd).st_size < point.position:
                raise IndexCorrupt(f"file shorter than the point's position {point.position}")
            index = OffsetIndex.from_bytes(point.index, max_entries=seg.index.max_entries,
                                           segment_bytes=point.position)
            timeindex = TimeIndex.from_bytes(point.timeindex, max_entries=seg.timeindex.max_entries)
            if len(timeindex) and seg.base_offset + timeindex.rel_offsets[-1] >= point.next_offset:
                raise IndexCorrupt("timeindex names an offset past the point")
            if len(index):
                if seg.base_offset + index.rel_offsets[-1] >= point.next_offset:
                    raise IndexCorrupt("index names an offset past the point")
                seg._check_index_entry(index, len(index) - 1)
        except (OSError, IndexCorrupt) as e:
            logger.warning("log %s: recovery point of %s not used (%s); scanning it whole",
                           self.directory, seg.name, e)
            return None
        return ResumePoint(point.position, point.next_offset, point.last_epoch,
                           point.max_timestamp, point.offset_of_max_timestamp,
                           point.bytes_since_index, index, timeindex)

    def _rebuild_epochs(self, scanned: list[Segment]) -> LeaderEpochCache:
        if self.size_bytes():
            logger.warning("log %s: rebuilding the leader-epoch cache from the segments",
                           self.directory)
        cache = LeaderEpochCache()
        for seg in self._segments:
            for _, h in seg.walk(0, seg.size_bytes):
                cache.assign_lenient(h.partition_leader_epoch, max(h.base_offset, self.log_start_offset))
        return cache

    def _unlink_segment_files(self, base: int) -> None:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
            try:
                os.unlink(self.directory / f"{base:020d}{suffix}")
            except FileNotFoundError:
                pass

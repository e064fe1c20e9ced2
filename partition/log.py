"""The log of one partition replica: segments on disk, recovery, retention, compaction, and
the leader-epoch cache. The partition Raft uses it as its Raft log (DESIGN §4 "Log").

Files in the log directory:
* `<base_offset:020d>.log` / `.index` / `.timeindex`: segments (partition/segment.py).
* `leader-epoch-checkpoint`: [(epoch, start_offset)], Kafka's LeaderEpochFileCache.
* `log-start-offset-checkpoint`: log_start_offset, so it survives a restart even when
  retention leaves it where no segment starts.
* `recovery-point-offset-checkpoint`: the base offset of the first segment that may not be
  durable. Every segment below it was fsynced (data and index files) after it was sealed.
* `recovery-point-active`: the offset-granular part of the recovery point (issue 19): the
  active segment's base, a byte position and offset up to which its batches were checked and
  fsynced, and its indexes and index state for that prefix (binary, CRC-32C at the end; see
  `ActiveCheckpoint`). Written every few seconds by the replica (`recovery_snapshot` +
  `write_recovery_point`) and at `close`; removed (durably) before any cut of the log. A
  missing, damaged or stale one (another base, a file shorter than its position, an index
  that does not match) is ignored: the active segment is then scanned whole.
* `producer-snapshot-<S:020d>`: the replica's producer state as of an offset S (issue 19;
  format in partition/producer_state.py "Snapshot"), so that a restart walks batch headers
  only from S (`load_producer_state`) instead of the whole log. Written beside the recovery
  point by the replica (`producer_snapshot` + `write_producer_snapshot`: the log is fsynced up
  to S first); the newest PRODUCER_SNAPSHOTS_KEPT are kept, since S is the log end when taken
  and a new leader's truncation of the uncommitted tail can cut below the newest one: the one
  before it, older by a checkpoint interval, is then below the cut. Each is removed durably
  before any cut that reaches below its S, as the recovery point is: a truncation or repair
  below S, a reset, the log start moving past S, and a compaction that empties a producer's
  batch below S. One that is damaged, past the log end, below the log start, of another
  leader epoch at S-1, or whose S falls inside a batch is not used (and removed): the next
  older one, else a walk of the whole log, serves instead.
The first three are `<kind>\\n<count>\\n<lines>\\ncrc32c <hex>\\n`, replaced atomically (tmp file,
fsync, rename, fsync dir); a missing or bad one is rebuilt from the segments (epochs), or
taken as the safe default (log start: the first segment; recovery point: 0, scan all).

Invariants:
* log_start_offset <= log_end_offset; offsets in the log strictly increase across batches
  and segments; segment base offsets strictly increase and the active (last) segment starts
  at or below log_end_offset.
* flushed_offset <= log_end_offset, and every offset below flushed_offset is fsynced
  (`open()` fsyncs what it recovered, so after open flushed_offset == log_end_offset).
* Epoch cache: epochs and start offsets strictly increase; every start offset is in
  [log_start_offset, log_end_offset); the cache entry for an epoch is durable before any
  batch of that epoch is written (so a durable batch never has an unknown epoch).
* Recovery on open CRC-scans only segments at or above the recovery point (normally just the
  active one); segments below it are trusted through their sanity-checked indexes. The
  active segment is scanned from its offset-granular point when one applies. The first
  bad batch ends the log: the tail is cut and later segments deleted (RecoveryReport).
* Retention and compaction touch only closed segments; compaction only fsynced ones.

Size (issue 13's ~800-line rule): over it; the seams are the checkpoints and epoch cache
(pure, ~200 lines) and the integrity calls, which could move to their own modules.

Integrity (DESIGN §9): no byte leaves the log unchecked. `read` checks the header and CRC-32C
of every batch it returns (and that offsets increase from the batch it located), and raises
StorageDamageError (segment, position, offset) instead of returning bad bytes; `read_slice`
(zero-copy senders) checks the range the same way before it makes the slice; `locate`
checks the index entry it starts from. Each byte is checked once: a segment remembers the
ranges a read or a SegmentVerifier (recovery, the scrubber) checked, and later reads of them
skip the CRCs (partition/segment.py "checked once"). A leader's reads for its followers
(`own_tail`) also skip the bytes this process appended itself while they are in the active
segment's cached tail (`config.hot_tail_bytes`, which `_drop_behind` keeps in the page cache):
the append checked those CRCs before the write, a read there most likely gets the page cache's
copy of what was written, and the follower checks every CRC it receives. Re-checking them was
~15% of an RF=3 leader's CPU (every follower fetch read back and checked the bytes just
appended, in a worker thread). The replica asks a checked read when a follower asks for the
same offset again (it may have refused the bytes), so damage there is still found; consumers'
reads always check. `check_segment` runs the full check of one segment (partition/segment.py
`SegmentVerifier`, optionally with its indexes); `pinned_segment` lets a scrubber run it in
paced steps. What to do about damage is the replica's decision: `repair` cuts the log at the
first bad batch of a segment (deleting later segments, as recovery does) only if the check,
run again by the writer, still finds it; `rebuild_indexes` rewrites a segment's indexes when
only they disagree with its batches.

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
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from crc32c import crc32c

from partition import cleaner
from partition.batch import (
    CRC_START,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    Compression,
    Header,
    iter_headers,
    read_header,
    verify_crc,
)
from partition.errors import CorruptRecordError, LogClosedError, StorageDamageError
from partition.index import IndexCorrupt, OffsetIndex, TimeIndex
from partition.producer_state import MAX_SNAPSHOT_BYTES, ProducerSnapshot, ProducerStateManager
from partition.segment import (
    FileSlice,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TMP_SUFFIX,
    Segment,
    SegmentVerifier,
    ResumePoint,
    parse_segment_name,
    read_whole_file_or_none,
    write_durably,
)
from partition.telemetry import LatencyBuckets
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)

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

# RecordBatch v2 header fields the leader stamps (bytes 0-8 and 12-16).
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
ACTIVE_POINT_CHECKPOINT = "recovery-point-active"
PRODUCER_SNAPSHOT_PREFIX = "producer-snapshot-"
PRODUCER_SNAPSHOTS_KEPT = 2  # the newest, and one older by a checkpoint interval (docstring)
# LogConfig.cache_tail_bytes's default, and the hot tail of a log that keeps everything cached.
CACHED_TAIL_BYTES = 16 << 20
# A new offset-granular point is written once the active segment holds this many bytes past
# the last one (periodically and at close): what a restart scans is bounded by it plus what
# was written since the last checkpoint, and idle or slow partitions cost no fsyncs.
RECOVERY_POINT_MIN_BYTES = 4 << 20
RECOVERY_POINT_CLOSE_MIN_BYTES = 1 << 20
# ... and after a flush once this many bytes are past it (a fast writer's 5 s can be a GiB).
RECOVERY_POINT_FLUSH_BYTES = 64 << 20
_ACTIVE_MAGIC = b"RPA1"
# magic, base, position, next_offset, last_epoch, max_timestamp, offset_of_max_timestamp,
# bytes_since_index, index bytes, timeindex bytes; then the two indexes, then CRC-32C.
_ACTIVE_HEAD = struct.Struct(">4sqqqiqqqII")
_CRC = struct.Struct(">I")


class InvalidAppendError(InvalidRequestError):
    """Batches that are well-formed but cannot go at the end of this log."""


class NonContiguousAppend(InvalidAppendError):
    """Replicated batches that do not start at log_end_offset or whose offsets go back."""


class EpochRegression(InvalidAppendError):
    """A batch whose partition leader epoch is below the log's latest epoch."""


@dataclass(frozen=True)
class LogConfig:
    """Per-log settings (Kafka's topic configs of the same names)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 << 20
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1 = forever
    retention_bytes: int = -1  # -1 = unlimited
    cleanup_policy: str = "delete"  # "delete" | "compact" | "compact,delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    max_batch_bytes: int = 8 << 20  # larger batches -> MessageTooLargeError
    # Flushed bytes more than this far behind the end are dropped from the page cache
    # (drop-behind); -1 keeps everything cached. See `_drop_behind`.
    cache_tail_bytes: int = CACHED_TAIL_BYTES

    @property
    def hot_tail_bytes(self) -> int:
        """How far behind the end a read still counts as a read of the cached tail."""
        return self.cache_tail_bytes if self.cache_tail_bytes >= 0 else CACHED_TAIL_BYTES

    def __post_init__(self):
        if not 100 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes} outside [100, 2**31-1]")
        if self.max_index_bytes < 12:
            raise ValueError(f"max_index_bytes {self.max_index_bytes} < 12")
        if self.index_interval_bytes < 0 or self.segment_ms <= 0 or self.max_batch_bytes <= 0:
            raise ValueError("index_interval_bytes, segment_ms and max_batch_bytes must be positive")
        if self.cache_tail_bytes < -1:
            raise ValueError(f"cache_tail_bytes {self.cache_tail_bytes} < -1")
        policies = set(self.cleanup_policy.replace(" ", "").split(","))
        if not policies or not policies <= {"delete", "compact"}:
            raise ValueError(f"cleanup_policy {self.cleanup_policy!r}")

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy


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
class _ScannedTail:
    """The active segment's batch headers as open's recovery scan checked them, from
    `first_offset` (where the scan started) to the log end, and the log's shape then
    (`shape`: end offset, cut generation, active base), which must still hold to use them."""

    first_offset: int
    headers: list[tuple[int, Header]]  # (position, header), as SegmentScan has them
    shape: tuple[int, int, int]


@dataclass(frozen=True)
class RepairReport:
    """What `Log.repair` cut: the segment where the first bad batch was found, why, the bytes
    and offsets dropped (that segment's tail plus every later segment), and the new end."""

    segment: str
    reason: str
    bytes_dropped: int
    offsets_lost: int
    log_end_offset: int


@dataclass
class CompactionPlan:
    """The segments one compaction pass may clean (`Log.plan_compaction`), pinned until
    `install_cleaned` or `discard_plan`. `cleaned` / `result` are filled by `clean_planned`."""

    segments: list[Segment]
    upto: int
    now_ms: int
    cleaned: list = field(default_factory=list)
    result: cleaner.CleanResult | None = None


# ------------------------------------------------------------------------------ checkpoints

def _encode_checkpoint(kind: str, lines: list[str]) -> bytes:
    body = f"{kind}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    raw = body.encode()
    return raw + f"crc32c {crc32c(raw):08x}\n".encode()


def _decode_checkpoint(kind: str, data: bytes) -> list[str] | None:
    """The lines of a checkpoint, or None if it is not a whole, valid one of this kind."""
    cut = data.rfind(b"crc32c ")
    if cut < 0 or not data.endswith(b"\n"):
        return None
    raw = data[:cut]
    try:
        if int(data[cut + 7:].strip(), 16) != crc32c(raw):
            return None
        lines = raw.decode().split("\n")
        if lines[0] != kind or lines[-1] != "":
            return None
        count = int(lines[1])
        body = lines[2:-1]
    except (ValueError, UnicodeDecodeError, IndexError):
        return None
    return body if len(body) == count else None


def _read_checkpoint(directory: Path, name: str) -> list[str] | None:
    try:
        data = (directory / name).read_bytes()
    except FileNotFoundError:
        return None
    lines = _decode_checkpoint(name, data)
    if lines is None:
        logger.warning("%s/%s is damaged; ignoring it", directory, name)
    return lines


def _read_offset_checkpoint(directory: Path, name: str) -> int | None:
    lines = _read_checkpoint(directory, name)
    if lines is None or len(lines) != 1:
        return None
    try:
        return int(lines[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class ActiveCheckpoint:
    """The offset-granular recovery point of the active segment (module docstring): taken by
    the writer (`Log.recovery_snapshot`, no I/O), made durable by `write_recovery_point`.
    `generation` is the log's cut counter when taken (a cut since makes it void)."""

    base: int
    position: int
    next_offset: int
    last_epoch: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int
    index: bytes
    timeindex: bytes
    generation: int = 0

    def encode(self) -> bytes:
        raw = _ACTIVE_HEAD.pack(_ACTIVE_MAGIC, self.base, self.position, self.next_offset,
                                self.last_epoch, self.max_timestamp, self.offset_of_max_timestamp,
                                self.bytes_since_index, len(self.index), len(self.timeindex))
        raw += self.index + self.timeindex
        return raw + _CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, data: bytes) -> "ActiveCheckpoint | None":
        """The checkpoint in `data`, or None if it is not a whole, valid one."""
        if len(data) < _ACTIVE_HEAD.size + _CRC.size:
            return None
        raw = data[:-_CRC.size]
        if _CRC.unpack_from(data, len(raw))[0] != crc32c(raw):
            return None
        (magic, base, position, next_offset, last_epoch, max_ts, off_max_ts, since, n_index,
         n_time) = _ACTIVE_HEAD.unpack_from(raw)
        if magic != _ACTIVE_MAGIC or len(raw) != _ACTIVE_HEAD.size + n_index + n_time:
            return None
        if base < 0 or position <= 0 or next_offset <= base or since < 0:
            return None
        at = _ACTIVE_HEAD.size
        return cls(base, position, next_offset, last_epoch, max_ts, off_max_ts, since,
                   raw[at:at + n_index], raw[at + n_index:])


@dataclass(frozen=True)
class ProducerCheckpoint:
    """A producer-state snapshot taken by the writer (`Log.producer_snapshot`, no I/O), to
    be made durable by `write_producer_snapshot`; `generation` as in ActiveCheckpoint."""

    snapshot: ProducerSnapshot
    generation: int


@dataclass(frozen=True)
class ProducerStateLoad:
    """What `Log.load_producer_state` did: the snapshot offset it started from (None: the
    whole log was walked; `unused` then says why no snapshot served) and the batch headers
    it walked."""

    snapshot_offset: int | None
    batches_walked: int
    unused: str | None = None


# ------------------------------------------------------------------------------ epoch cache

class LeaderEpochCache:
    """[(epoch, start_offset)] with both strictly increasing (pure; the Log persists it)."""

    def __init__(self, entries: list[tuple[int, int]] | None = None):
        self.entries: list[tuple[int, int]] = list(entries or [])

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the last epoch;
        returns whether the cache changed. Raises EpochRegression for an older epoch."""
        if epoch < self.last_epoch:
            raise EpochRegression(f"epoch {epoch} is below the log's latest {self.last_epoch}")
        if epoch == self.last_epoch:
            return False
        assert not self.entries or start_offset > self.entries[-1][1]
        self.entries.append((epoch, start_offset))
        return True

    def assign_lenient(self, epoch: int, start_offset: int) -> bool:
        """Recovery's assign: ignore epochs not newer than the last; when `start_offset` is
        not past the last entry's (both clamped to the log start), the newer epoch replaces
        it. Returns whether the cache changed."""
        if epoch <= self.last_epoch or epoch < 0:
            return False
        if self.entries and start_offset <= self.entries[-1][1]:
            self.entries[-1] = (epoch, self.entries[-1][1])
        else:
            self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop epochs that start at or after `end_offset`; returns whether anything changed."""
        n = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        return len(self.entries) != n

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget epochs wholly below `start_offset`; the epoch covering it starts there."""
        i = bisect_right([s for _, s in self.entries], start_offset)
        if i == 0 or (i == 1 and self.entries[0][1] == start_offset):
            return False
        self.entries = [(self.entries[i - 1][0], start_offset)] + self.entries[i:]
        return True

    def epoch_at(self, offset: int) -> int:
        """The epoch of the entry covering `offset` (the last one starting at or below it);
        -1 below every entry."""
        i = bisect_right([s for _, s in self.entries], offset) - 1
        return self.entries[i][0] if i >= 0 else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """KIP-279/KIP-595: (largest known epoch <= `epoch`, the start offset of the next
        larger epoch or log_end_offset if it is the latest); (-1, -1) below every epoch."""
        if not self.entries or epoch < self.entries[0][0]:
            return -1, -1
        i = bisect_right([e for e, _ in self.entries], epoch) - 1
        if i == len(self.entries) - 1:
            return self.entries[i][0], log_end_offset
        return self.entries[i][0], self.entries[i + 1][1]

    def encode(self) -> bytes:
        return _encode_checkpoint(EPOCH_CHECKPOINT, [f"{e} {s}" for e, s in self.entries])

    @classmethod
    def decode(cls, lines: list[str]) -> "LeaderEpochCache | None":
        try:
            entries = [(int(a), int(b)) for a, b in (line.split() for line in lines)]
        except ValueError:
            return None
        if any(e1 >= e2 or s1 >= s2 for (e1, s1), (e2, s2) in zip(entries, entries[1:])):
            return None
        return cls(entries)


# ------------------------------------------------------------------------------ the log

class Log:
    """A partition's log. Open with `Log.open`; see the module docstring for invariants."""

    def __init__(self, directory: Path, config: LogConfig):
        self.directory = directory
        self.config = config
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._pending: list[Segment] = []
        self._dir_dirty = False
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._epochs = LeaderEpochCache()
        self._clean_below = 0
        self._closed = False
        self._failed: BaseException | None = None
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.flushed_offset = 0
        self.recovery: RecoveryReport | None = None
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
        self._scanned_tail: _ScannedTail | None = None
        # Test seam: called after each durable step of a compaction swap.
        self._cleaner_crash_point: Callable[[str], None] = lambda step: None

    # ------------------------------------------------------------------ open and recovery

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, now_ms: int) -> "Log":
        """Open (creating if absent) the log in `directory` and recover it.

        Order: finish or roll back half-done compaction swaps; drop temp files and segments
        wholly below the log start; trust segments below the recovery point through their
        (checked, else rebuilt) indexes; CRC-scan the rest, cutting at the first bad batch;
        reload or rebuild the epoch cache; fsync what recovery changed. `.recovery` holds the
        RecoveryReport. Raises OSError on I/O failure."""
        started = time.perf_counter()
        directory = Path(directory)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = cls(directory, config)
        try:
            log._recover(now_ms, started)
        except BaseException:
            log._abandon()
            raise
        return log

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

    def _recover(self, now_ms: int, started: float) -> None:
        cfg = self.config
        with self._dir() as dir_fd:
            swaps = cleaner.recover_swaps(self.directory, dir_fd)
        self._dir_dirty = bool(swaps)
        bases = self._segment_files()
        ckpt_start = _read_offset_checkpoint(self.directory, LOG_START_CHECKPOINT)
        log_start = ckpt_start if ckpt_start is not None else (bases[0] if bases else 0)
        # Segments wholly below the log start: a retention whose unlink did not happen.
        while len(bases) > 1 and bases[1] <= log_start:
            self._unlink_segment_files(bases.pop(0))
            self._dir_dirty = True
        clean_below = _read_offset_checkpoint(self.directory, RECOVERY_POINT_CHECKPOINT) or 0
        point = self._read_active_point()
        resumed_at: int | None = None
        if not bases:
            self._dir_dirty = True
            self._segments = [Segment.create(self.directory, log_start,
                                             max_index_bytes=cfg.max_index_bytes)]
        else:
            self._segments = [Segment.open_existing(self.directory, b,
                                                    max_index_bytes=cfg.max_index_bytes)
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
            old_index = _read_or_none(seg.index_path)
            old_timeindex = _read_or_none(seg.timeindex_path)
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
                    offsets_lost += _count_records(later)
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
            self._scanned_tail = _ScannedTail(*tail, self._shape())
        if self.log_start_offset > self.log_end_offset:
            # The persisted start is past what survived; start an empty log there.
            self._truncate_fully_locked(self.log_start_offset)
        # Epochs: the checkpoint, else a rebuild; then reconcile with what was scanned.
        lines = _read_checkpoint(self.directory, EPOCH_CHECKPOINT)
        cache = LeaderEpochCache.decode(lines) if lines is not None else None
        epochs_dirty = cache is None
        if cache is None:
            cache = self._rebuild_epochs(scanned)
        else:
            epochs_dirty |= cache.truncate_from_end(self.log_end_offset)
            for h in scanned_headers:
                epochs_dirty |= cache.assign_lenient(h.partition_leader_epoch,
                                                     max(h.base_offset, self.log_start_offset))
        epochs_dirty |= cache.truncate_from_start(self.log_start_offset)
        # No entry starts at the end (a log emptied by its start: DeleteRecords, retention).
        epochs_dirty |= cache.truncate_from_end(self.log_end_offset)
        self._epochs = cache
        if epochs_dirty:
            self._write_epochs()
        if ckpt_start != self.log_start_offset:
            self._write_log_start()
        self._check_producer_snapshots()
        # Make what recovery kept durable, then move the recovery point up to the active one.
        # A clean restart spends no fsyncs on what was durable already (issue 19: four per
        # partition, a third of a replica's open): the active segment's bytes up to its
        # recovery point, its index files (never trusted: recovery rebuilds them), and the
        # directory when recovery changed no name in it.
        for seg in scanned:
            if not (seg is active and resumed_at is not None and resumed_at == seg.size_bytes
                    and not bytes_dropped):
                seg.fsync()
            if seg is not active:
                seg.fsync_index_files()
        if self._dir_dirty or bytes_dropped:
            self._fsync_dir()
        self._dir_dirty = False
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
        data = _read_or_none(self.directory / ACTIVE_POINT_CHECKPOINT)
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

    # ------------------------------------------------------------------ checkpoints

    def _write_epochs(self) -> None:
        write_durably(self.directory, EPOCH_CHECKPOINT, self._epochs.encode())

    def _write_log_start(self) -> None:
        write_durably(self.directory, LOG_START_CHECKPOINT,
                      _encode_checkpoint(LOG_START_CHECKPOINT, [str(self.log_start_offset)]))

    def _set_recovery_point(self, clean_below: int) -> None:
        if clean_below != self._clean_below:
            write_durably(self.directory, RECOVERY_POINT_CHECKPOINT,
                          _encode_checkpoint(RECOVERY_POINT_CHECKPOINT, [str(clean_below)]))
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
        gone = _unlink_if_present(self.directory / ACTIVE_POINT_CHECKPOINT)
        gone |= self._unlink_producer_snapshots(lambda at: cut_offset is None or cut_offset < at)
        if gone:
            self._fsync_dir()

    # ------------------------------------------------------------------ producer snapshots

    @property
    def producer_snapshot_offset(self) -> int | None:
        """S of the newest durable producer snapshot; None when there is none."""
        return self._producer_snapshots[-1] if self._producer_snapshots else None

    def producer_snapshot(self, state: ProducerStateManager,
                          min_bytes: int = RECOVERY_POINT_MIN_BYTES) -> ProducerCheckpoint | None:
        """Writer, no I/O: `state` (the producer state of this log as it stands: the caller
        holds the writer's place) as of log_end_offset, or None when it is not `exact`, the
        log holds fewer than `min_bytes` past the newest durable snapshot (past the log start
        when there is none), or the log is closed. O(producers). Make it durable with
        `write_producer_snapshot` (any thread)."""
        if self._closed or self._failed is not None or not state.exact:
            return None
        end = self.log_end_offset
        prev = self.producer_snapshot_offset
        if end == prev or end <= self.log_start_offset:
            return None
        since = self.bytes_behind_end(self.log_start_offset if prev is None else prev)
        if since < max(min_bytes, 1):
            return None
        return ProducerCheckpoint(state.snapshot(end, self._epochs.epoch_at(end - 1)),
                                  self._cut_generation)

    def write_producer_snapshot(self, ckpt: ProducerCheckpoint) -> bool:
        """Make `ckpt` durable: fsync the log first if it holds offsets below the snapshot's
        that are not yet flushed, then write its file atomically, the oldest kept one removed
        in the same directory fsync. False (nothing written) when a cut or a move of the log
        start came after the snapshot, or a snapshot at its offset or later was written since
        it was taken (the flush task's and the maintenance pass's can be taken together).
        Blocking; any thread (it waits for a running flush). Raises LogClosedError (an fsync
        or write failed)."""
        self._check_open()
        data = ckpt.snapshot.encode()
        at = ckpt.snapshot.offset
        with self._flush_lock:
            self._check_open()
            if ckpt.generation != self._cut_generation:
                return False
            try:
                if self._producer_snapshots and self._producer_snapshots[-1] >= at:
                    return False  # another checkpoint (flush, maintenance) wrote it or a newer one
                if self.flushed_offset < at:
                    self._flush_locked()
                doomed = set(self._producer_snapshots[:max(0, len(self._producer_snapshots)
                                                           - PRODUCER_SNAPSHOTS_KEPT + 1)])
                self._unlink_producer_snapshots(lambda s: s in doomed)
                write_durably(self.directory, producer_snapshot_name(at), data)  # fsyncs the dir
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"producer snapshot write failed: {e}") from e
            self._producer_snapshots.append(at)
            self._producer_snapshot_refused = None
            return True

    def discard_producer_snapshots(self) -> None:
        """Writer: remove every producer snapshot durably and void any taken so far (before
        the replica resets the log). Blocking. Raises LogClosedError."""
        self._check_open()
        with self._flush_lock:
            self._void_producer_snapshots(lambda at: True)

    def _void_producer_snapshots(self, doomed: Callable[[int], bool]) -> None:
        """Under _flush_lock: void the producer snapshots taken so far; remove the durable
        ones `doomed(offset)` names, durably."""
        self._cut_generation += 1
        try:
            if self._unlink_producer_snapshots(doomed):
                self._fsync_dir()
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"producer snapshot removal failed: {e}") from e

    def _unlink_producer_snapshots(self, doomed: Callable[[int], bool]) -> bool:
        """Unlink the producer snapshot files (as the directory lists them: during open, before
        they are checked, they are not known yet) whose offset `doomed` names; the caller
        fsyncs the directory. Returns whether any went."""
        gone = False
        for name in os.listdir(self.directory):
            at = _producer_snapshot_offset_of(name)
            if at is not None and doomed(at):
                gone |= _unlink_if_present(self.directory / name)
        self._producer_snapshots = [at for at in self._producer_snapshots if not doomed(at)]
        return gone

    def load_producer_state(self, state: ProducerStateManager, *,
                            use_snapshot: bool = True) -> ProducerStateLoad:
        """Writer (blocking: at open, or with the replica's lock held): rebuild `state` from
        the newest durable producer snapshot that fits this log (module docstring) and the
        batch headers from its offset to the log end; or, when none does, from every batch
        header of the log. One found not to fit (damaged, or its offset inside a batch) is
        removed. Returns a ProducerStateLoad. Raises StorageDamageError (a header in the walk
        does not parse: the replica repairs and calls again), LogClosedError."""
        self._check_open()
        why = "not asked" if not use_snapshot else (self._producer_snapshot_refused or "none")
        self._producer_snapshot_refused = None
        tail, self._scanned_tail = self._scanned_tail, None
        if tail is not None and tail.shape != self._shape():
            tail = None  # the log changed since open
        for at in reversed(self._producer_snapshots if use_snapshot else []):
            state.clear()
            snap, why = self._read_producer_snapshot(at, state.max_producers)
            try:
                if snap is not None:
                    state.load(snap, log_start_offset=self.log_start_offset)
                    walked = _apply_counted(state, self._headers_from(at, tail), from_offset=at)
                    return ProducerStateLoad(at, walked)
            except _SnapshotMisfit as e:
                why = str(e)
            except StorageDamageError as e:
                if e.what != "index":
                    raise
                why = f"the index led the walk astray ({e})"  # the scrubber or a read rebuilds it
                logger.warning("log %s: %s not used: %s", self.directory, producer_snapshot_name(at), why)
                continue
            logger.warning("log %s: %s not used: %s; removing it", self.directory,
                           producer_snapshot_name(at), why)
            with self._flush_lock:
                self._void_producer_snapshots(lambda s, at=at: s == at)
        state.clear()
        return ProducerStateLoad(None, _apply_counted(state, self._headers_from(None, tail)), why)

    def _shape(self) -> tuple[int, int, int]:
        return self.log_end_offset, self._cut_generation, self._segments[-1].base_offset

    def _headers_from(self, start: int | None, tail: _ScannedTail | None) -> Iterator[Header]:
        """`batch_headers(start)`, from `tail` when it covers every batch that walk would
        give: right after open, the producer-state rebuild then walks the headers recovery
        just checked instead of reading them again (at 1,000 partitions after a load, that
        second walk was ~1/4 of a restarted node's replica opening)."""
        begin = self.log_start_offset if start is None else max(start, self.log_start_offset)
        if tail is None or tail.first_offset > begin:
            return self.batch_headers(start)
        return (h for _, h in tail.headers if h.next_offset > begin)

    def _read_producer_snapshot(self, at: int, max_producers: int | None) -> tuple[ProducerSnapshot | None, str]:
        """(the durable producer snapshot at `at`, "") if it is whole and fits this log as it
        stands; else (None, why)."""
        data = _read_or_none(self.directory / producer_snapshot_name(at), MAX_SNAPSHOT_BYTES + 1)
        if data is None:
            return None, "gone"
        snap = ProducerSnapshot.decode(data, max_producers=max_producers)
        if snap is None or snap.offset != at:
            return None, "damaged, or more producers than max_producers"
        start, end = self.log_start_offset, self.log_end_offset
        if at > end:
            return None, f"its offset {at} is past the log end {end}"
        if at < start:
            return None, f"its offset {at} is below the log start {start}"
        if at > start and self._epochs.epoch_at(at - 1) != snap.last_epoch:
            return None, (f"the log's leader epoch at {at - 1} is {self._epochs.epoch_at(at - 1)}, "
                          f"the snapshot's {snap.last_epoch}")
        return snap, ""

    def _check_producer_snapshots(self) -> None:
        """Open, before the directory fsync: keep the newest PRODUCER_SNAPSHOTS_KEPT producer
        snapshots that fit the recovered log. The others are unlinked, durably before
        anything is appended: after a recovery that cut below a snapshot's offset, a log
        grown past it again would seem to fit."""
        found = sorted(at for at in map(_producer_snapshot_offset_of, os.listdir(self.directory))
                       if at is not None)
        good = []
        for at in reversed(found):
            snap, why = self._read_producer_snapshot(at, None)
            if snap is not None and len(good) < PRODUCER_SNAPSHOTS_KEPT:
                good.append(at)
                continue
            if snap is None:
                logger.warning("log %s: %s not used: %s; removing it", self.directory,
                               producer_snapshot_name(at), why)
                self._producer_snapshot_refused = self._producer_snapshot_refused or why
            os.unlink(self.directory / producer_snapshot_name(at))
            self._dir_dirty = True
        self._producer_snapshots = sorted(good)
        if good:
            self._producer_snapshot_refused = None  # one serves

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

    def append(self, batches: bytes | bytearray, *, leader_epoch: int, now_ms: int) -> tuple[int, int]:
        """Leader path: append one or more client batches, assigning offsets.

        Checks each batch's header and CRC (records are not decoded), stamps base offset
        (from log_end_offset on) and `leader_epoch`, rolls first if the active segment is full
        or old, and writes (not fsynced: see `flush`). Returns (first_offset, last_offset).
        Raises CorruptRecordError (bad or empty input), MessageTooLargeError (a batch over
        max_batch_bytes), EpochRegression (leader_epoch below the latest), LogClosedError.
        Ordering: a new epoch's cache entry is fsynced before the batch is written."""
        self._check_open()
        if not batches:
            raise CorruptRecordError("empty append")
        view = memoryview(batches).cast("B")
        if leader_epoch < self._epochs.last_epoch:
            raise EpochRegression(f"epoch {leader_epoch} < latest {self._epochs.last_epoch}")
        entries = []
        # No copy of the payload: each batch is written as its stamped header (a small copy)
        # followed by a view of the rest, back to back with pwritev.
        parts: list = []
        offset = self.log_end_offset
        limit = self.config.max_batch_bytes
        for pos, h in iter_headers(view, verify=True):
            if h.size > limit:
                raise MessageTooLargeError(f"batch of {h.size} bytes > max_batch_bytes {limit}")
            head = bytearray(view[pos : pos + HEADER_BYTES])
            _BASE_OFFSET.pack_into(head, 0, offset)  # both fields lie outside the CRC
            _LEADER_EPOCH.pack_into(head, 12, leader_epoch)
            parts.append(head)
            parts.append(view[pos + HEADER_BYTES : pos + h.size])
            nxt = offset + h.last_offset_delta + 1
            entries.append((pos, h.size, offset, nxt, h.max_timestamp, leader_epoch))
            offset = nxt
        first = self.log_end_offset
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
        if checked is not None:
            if not checked or checked[0][0] != 0 or checked[-1][0] + checked[-1][1].size != len(view):
                raise CorruptRecordError("checked batches do not cover the append")
        for pos, h in (checked if checked is not None else iter_headers(view, verify=True)):
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
        changed = False
        for epoch, start in epochs:
            changed |= self._epochs.assign(epoch, start)
        if changed:
            self._write_epochs()
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
                             max_index_bytes=self.config.max_index_bytes)
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
            _check_read(seg, pos, h, data, 0, version, self._trusted_from(seg, own_tail))
            return data

    def read_slice(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   warm: bool = False, own_tail: bool = False) -> FileSlice | None:
        """What `read` would return, as a FileSlice of the segment file (the caller closes
        it; zero-copy senders), or None where `read` returns b"". Before the slice is made,
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
                _check_read(seg, pos, h, seg.read_range(pos, end, h.base_offset), 0, version,
                            trusted)
            else:
                for a, b in seg.unverified(pos, end, version, trusted):
                    data = seg.read_range(a, b, h.base_offset)
                    _check_read(seg, pos, h, data, a - pos, version, trusted)
                seg.mark_verified(pos, min(end, max(pos, trusted)), version)
            return FileSlice(os.dup(seg.fd), pos, end - pos)

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

    # ------------------------------------------------------------------ integrity

    @contextmanager
    def pinned_segment(self, base_offset: int) -> Iterator[tuple[Segment, int | None] | None]:
        """(segment, next segment's base offset or None) for the segment starting at
        `base_offset`, pinned for the `with` block; None if no segment starts there any more.
        A reader (the scrubber drives a SegmentVerifier over it in paced steps)."""
        with self._lock:
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset or self._closed:
                found = None
            else:
                seg = self._segments[i]
                nxt = self._bases[i + 1] if i + 1 < len(self._bases) else None
                seg.pin()
                found = (seg, nxt)
        if found is None:
            yield None
            return
        try:
            yield found
        finally:
            self._unpin(found[0])

    def scrub_candidates(self) -> list[tuple[int, int]]:
        """[(base_offset, size_bytes)] of the sealed segments below the recovery point (every
        one of them fsynced, data and index files): what a scrubber re-reads. A reader."""
        with self._lock:
            return [(s.base_offset, s.size_bytes) for s in self._segments[:-1]
                    if s.base_offset < self._clean_below and s not in self._pending]

    def check_segment(self, base_offset: int, *, check_index: bool = True) -> SegmentVerifier | None:
        """Run the full check of the segment starting at `base_offset` (SegmentVerifier, with
        its in-memory indexes when `check_index`); None if no segment starts there. Blocking
        (reads the whole segment). A reader."""
        with self.pinned_segment(base_offset) as found:
            if found is None:
                return None
            seg, nxt = found
            return SegmentVerifier(seg, max_offset=nxt, check_index=check_index).run()

    def index_files_match(self, base_offset: int) -> bool | None:
        """Whether a sealed segment's `.index` / `.timeindex` files hold exactly its in-memory
        indexes (what the next open would load); None if the segment is gone or active. A
        reader."""
        with self.pinned_segment(base_offset) as found:
            if found is None or found[1] is None:
                return None
            seg = found[0]
            return (read_whole_file_or_none(seg.index_path) == seg.index.to_bytes()
                    and read_whole_file_or_none(seg.timeindex_path) == seg.timeindex.to_bytes())

    def repair(self, base_offset: int) -> RepairReport | None:
        """The writer's answer to damage in the segment starting at `base_offset`: check it
        again and, if a batch is still bad, cut the log there (the segment keeps its intact
        prefix, every later segment is deleted, the epoch cache trimmed), lower the recovery
        point first, and fsync it all before returning. Returns the RepairReport, or None
        (and changes nothing) when the segment is gone or every batch in it is intact.
        Raises LogClosedError (an I/O failure: the log is then unusable)."""
        self._check_open()
        with self._flush_lock:
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset:
                return None
            seg = self._segments[i]
            later = self._segments[i + 1:]
            nxt = later[0].base_offset if later else None
            check = SegmentVerifier(seg, max_offset=nxt).run()
            if check.damage is None:
                return None
            try:
                self._before_cut(seg.base_offset)
                self._set_recovery_point(min(self._clean_below, seg.base_offset))
                with self._lock:
                    del self._segments[i + 1:]
                    del self._bases[i + 1:]
                    self._pending = [s for s in self._pending if s not in later and s is not seg]
                    self._dir_dirty = True
                dropped = sum(s.size_bytes for s in later)
                lost = sum(_count_records(s) for s in later)
                for s in later:
                    self._close_segment(s)
                    s.delete_files()
                seg.keep_open()  # the active segment now
                scan = seg.recover(index_interval_bytes=self.config.index_interval_bytes,
                                   max_offset=nxt)
                seg.created_ms = None
                new_end = seg.next_offset if seg.next_offset is not None else seg.base_offset
                if new_end < self.log_start_offset:
                    self._truncate_fully_locked(self.log_start_offset)
                    new_end = self.log_start_offset
                else:
                    with self._lock:
                        self.log_end_offset = new_end
                        self.flushed_offset = min(self.flushed_offset, new_end)
                    if self._epochs.truncate_from_end(new_end):
                        self._write_epochs()
                self._flush_locked()
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"repair failed: {e}") from e
        report = RepairReport(seg.log_path.name, check.damage, dropped + scan.bytes_dropped,
                              lost + scan.offsets_lost, new_end)
        logger.warning("log %s: cut at %s (%s): %d bytes, %d offsets dropped", self.directory,
                       report.segment, report.reason, report.bytes_dropped, report.offsets_lost)
        return report

    def rebuild_indexes(self, base_offset: int) -> bool:
        """The writer rebuilds the indexes of the segment starting at `base_offset` from its
        batch headers and, for a sealed segment, rewrites and fsyncs its index files. Returns
        False if no segment starts there. Raises StorageDamageError (a header does not parse:
        repair instead), LogClosedError."""
        self._check_open()
        i = bisect_right(self._bases, base_offset) - 1
        if i < 0 or self._bases[i] != base_offset:
            return False
        seg = self._segments[i]
        sealed = i < len(self._segments) - 1
        seg.rebuild_indexes(index_interval_bytes=self.config.index_interval_bytes)
        try:
            if sealed:
                seg.seal()
                seg.fsync_index_files()
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"index rewrite failed: {e}") from e
        logger.warning("log %s: rebuilt the indexes of segment %s", self.directory, seg.name)
        return True

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
        later = self._segments[i + 1:]
        # First lower the recovery point: a crash from here on must find this segment
        # scanned, not trusted through index files that no longer match it.
        self._before_cut(offset)
        self._set_recovery_point(min(self._clean_below, seg.base_offset))
        with self._lock:
            del self._segments[i + 1:]
            del self._bases[i + 1:]
            self._pending = [s for s in self._pending if s not in later and s is not seg]
            self._dir_dirty = True
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
        new = Segment.create(self.directory, start, max_index_bytes=self.config.max_index_bytes)
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

    # ------------------------------------------------------------------ maintenance

    def maintain(self, now_ms: int, *, high_watermark: int | None = None) -> dict:
        """All housekeeping in one writer call: `roll_and_retain`, then (under "compact") one
        compaction pass (`plan_compaction`, `clean_planned`, `install_cleaned`). Returns
        {"rolled", "deleted_segments", "log_start_offset", "compacted_segments",
        "records_removed", "bytes_reclaimed"}. Tests and tools call this; the replica runs the
        phases itself so that cleaning runs beside its writes."""
        done = self.roll_and_retain(now_ms, high_watermark=high_watermark)
        done.update(compacted_segments=[], records_removed=0, bytes_reclaimed=0)
        plan = self.plan_compaction(now_ms, high_watermark=high_watermark)
        if plan is not None:
            try:
                self.clean_planned(plan)
            except BaseException:
                self.discard_plan(plan)
                raise
            res = self.install_cleaned(plan)
            done["compacted_segments"] = res.segments_rewritten
            done["records_removed"] = res.records_removed
            done["bytes_reclaimed"] = res.bytes_reclaimed
        return done

    def roll_or_retention_due(self, now_ms: int, *, high_watermark: int | None = None) -> bool:
        """Writer (no I/O): whether `roll_and_retain` would change anything now. The replica
        asks first, so an idle partition's maintenance costs no worker-thread hand-off."""
        self._check_open()
        a = self._active
        if a.size_bytes and a.created_ms is not None and now_ms - a.created_ms >= self.config.segment_ms:
            return True
        return self.config.deletes and self._retention_count(now_ms, high_watermark) > 0

    def roll_and_retain(self, now_ms: int, *, high_watermark: int | None = None) -> dict:
        """Writer: roll the active segment if older than segment_ms; under "delete", drop the
        oldest CLOSED segments past retention_ms (by their largest timestamp) or beyond
        retention_bytes (never one at or above `high_watermark` if given) and advance
        log_start_offset (persisted before any file goes). Returns {"rolled",
        "deleted_segments", "log_start_offset"}. Blocking (fsyncs a checkpoint, unlinks)."""
        self._check_open()
        cfg = self.config
        done = {"rolled": False, "deleted_segments": [], "log_start_offset": self.log_start_offset}
        a = self._active
        try:
            if a.size_bytes and a.created_ms is not None and now_ms - a.created_ms >= cfg.segment_ms:
                self._roll()
                done["rolled"] = True
            if cfg.deletes:
                done["deleted_segments"] = self._apply_retention(now_ms, high_watermark)
                done["log_start_offset"] = self.log_start_offset
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"retention failed: {e}") from e
        return done

    def _apply_retention(self, now_ms: int, high_watermark: int | None) -> list[str]:
        k = self._retention_count(now_ms, high_watermark)
        if k == 0:
            return []
        gone = self._segments[:k]
        new_start = self._segments[k].base_offset
        if new_start <= self.log_start_offset:
            new_start = self.log_start_offset
        else:
            with self._flush_lock:
                self._void_producer_snapshots(lambda at: at < new_start)
        self.log_start_offset = new_start
        self._write_log_start()  # before any file goes: reopen then drops what is below
        if self._epochs_from_start(new_start):
            self._write_epochs()
        with self._lock:
            del self._segments[:k]
            del self._bases[:k]
            self._pending = [s for s in self._pending if s not in gone]
        for s in gone:
            self._close_segment(s)
            s.delete_files()
        return [s.name for s in gone]

    def _retention_count(self, now_ms: int, high_watermark: int | None) -> int:
        """How many of the oldest closed segments retention would delete now (no I/O)."""
        cfg = self.config
        closed = self._segments[:-1]
        k = 0
        if cfg.retention_ms >= 0:
            while k < len(closed) and now_ms - closed[k].max_timestamp > cfg.retention_ms:
                k += 1
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes() - cfg.retention_bytes
            j = 0
            while j < len(closed) and excess - closed[j].size_bytes >= 0:
                excess -= closed[j].size_bytes
                j += 1
            k = max(k, j)
        if high_watermark is not None:
            while k and self._segments[k].base_offset > high_watermark:
                k -= 1
        return k

    def advance_start(self, offset: int) -> list[str]:
        """DeleteRecords (partition/raft.py "Log start"): raise log_start_offset to `offset`
        (log_start_offset < offset <= log_end_offset; the replica keeps it at or below its
        high watermark). Durable when it returns: the checkpoint is fsynced before any file
        goes, as in retention; closed segments wholly below `offset` are deleted, and reads
        below it raise OffsetOutOfRangeError (the batch holding it may still be returned
        whole; clients trim). Owner thread. Returns the deleted segment names. Raises
        ValueError (out of range), LogClosedError, OSError."""
        self._check_open()
        if not self.log_start_offset < offset <= self.log_end_offset:
            raise ValueError(f"log start {offset} outside ({self.log_start_offset}, "
                             f"{self.log_end_offset}]")
        with self._flush_lock:
            self._void_producer_snapshots(lambda at: at < offset)
        self.log_start_offset = offset
        self._write_log_start()
        if self._epochs_from_start(offset):
            self._write_epochs()
        k = 0
        while k < len(self._segments) - 1 and self._segments[k + 1].base_offset <= offset:
            k += 1
        gone = self._segments[:k]
        with self._lock:
            del self._segments[:k]
            del self._bases[:k]
            self._pending = [s for s in self._pending if s not in gone]
        for seg in gone:
            self._close_segment(seg)
            seg.delete_files()
        return [seg.name for seg in gone]

    def plan_compaction(self, now_ms: int, *, high_watermark: int | None = None) -> CompactionPlan | None:
        """Writer (no I/O): the closed, fsynced segments a compaction pass may clean now (all
        below `high_watermark` if given, so uncommitted data never obsoletes committed data),
        pinned; None when the policy does not compact or nothing is due. Hand the plan to
        `clean_planned` (any thread) and then `install_cleaned` (writer), or `discard_plan`."""
        self._check_open()
        if not self.config.compacts:
            return None
        limit = self._clean_below if high_watermark is None else min(self._clean_below, high_watermark)
        with self._lock:
            candidates = []
            for i, seg in enumerate(self._segments[:-1]):
                if self._segments[i + 1].base_offset > limit:
                    break
                candidates.append(seg)
            if not candidates:
                return None
            upto = candidates[-1].base_offset
            due = self._next_tombstone_expiry_ms is not None and now_ms >= self._next_tombstone_expiry_ms
            if upto <= self._compacted_below and not due:
                return None
            for seg in candidates:
                seg.pin()
        return CompactionPlan(candidates, upto, now_ms)

    def clean_planned(self, plan: CompactionPlan, *,
                      should_stop: Callable[[], bool] = lambda: False) -> None:
        """A reader (any thread, beside the writer): the long phase of a compaction pass, the
        segments' `.cleaned` files written and fsynced (partition/cleaner.py `clean`). Fills
        `plan.cleaned` and `plan.result`. Raises OSError, CorruptRecordError,
        cleaner.CleanAborted; the plan stays pinned either way (`discard_plan`)."""
        cfg = self.config
        plan.cleaned, plan.result = cleaner.clean(
            self.directory, plan.segments, now_ms=plan.now_ms,
            delete_retention_ms=cfg.delete_retention_ms,
            index_interval_bytes=cfg.index_interval_bytes, max_index_bytes=cfg.max_index_bytes,
            should_stop=should_stop)

    def install_cleaned(self, plan: CompactionPlan) -> cleaner.CleanResult:
        """Writer: swap in, oldest first, every segment `clean_planned` rewrote that is still
        in the log (a truncation or reset meanwhile ends the pass: the rest is discarded), then
        unpin the plan. Returns the CleanResult. Raises LogClosedError (the log failed)."""
        result = plan.result or cleaner.CleanResult()
        cleaned = list(plan.cleaned)
        try:
            self._check_open()
            while cleaned:
                c = cleaned[0]
                old = c.segment
                with self._lock:
                    i = next((k for k, seg in enumerate(self._segments) if seg is old), -1)
                    still_ours = 0 <= i < len(self._segments) - 1
                if not still_ours:
                    break
                if c.emptied:
                    # Batches of producers go: a snapshot past one of them may name it (and
                    # one taken meanwhile from a state that names one must not be written).
                    with self._flush_lock:
                        self._void_producer_snapshots(lambda at: c.emptied[0] < at)
                self._cleaner_crash_point("cleaned_written")
                try:
                    with self._dir() as dir_fd:
                        cleaner.install(self.directory, dir_fd, old.base_offset,
                                        self._cleaner_crash_point)
                    new = Segment.open_existing(self.directory, old.base_offset,
                                                max_index_bytes=self.config.max_index_bytes)
                    new.load_indexes(next_base_offset=self._segments[i + 1].base_offset,
                                     index_interval_bytes=self.config.index_interval_bytes)
                    new.make_evictable()  # the cleaner fsynced it
                except OSError as e:
                    self._fail(e)
                    raise LogClosedError(f"compaction failed: {e}") from e
                with self._lock:
                    self._segments[i] = new
                self._close_segment(old)
                result.segments_rewritten.append(old.name)
                result.batches_emptied.extend(c.emptied)
                cleaned.pop(0)
            else:
                self._compacted_below = plan.upto
                self._next_tombstone_expiry_ms = result.next_tombstone_expiry_ms
            # A pass ended by a truncation: its other .cleaned files go (on an exception they
            # stay, as a crash would leave them, for the next open's recover_swaps).
            cleaner.discard(self.directory, [c.segment.base_offset for c in cleaned])
        finally:
            self._unpin_plan(plan)
        return result

    def discard_plan(self, plan: CompactionPlan) -> None:
        """Give up a plan: delete its `.cleaned` files and unpin its segments. Any thread."""
        cleaner.discard(self.directory, [c.segment.base_offset for c in plan.cleaned])
        self._unpin_plan(plan)

    def _unpin_plan(self, plan: CompactionPlan) -> None:
        with self._lock:
            for seg in plan.segments:
                seg.unpin()
        plan.segments = []

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


class _SnapshotMisfit(Exception):
    """The producer snapshot's offset falls inside a batch of this log."""


def _apply_counted(state: ProducerStateManager, headers: Iterator[Header], *,
                   from_offset: int | None = None) -> int:
    """`state.apply_headers(headers)`; returns how many headers it took. With `from_offset`,
    the first must start at or after it (raises _SnapshotMisfit)."""
    walked = 0

    def counted() -> Iterator[Header]:
        nonlocal walked
        for h in headers:
            if not walked and from_offset is not None and h.base_offset < from_offset:
                raise _SnapshotMisfit(f"its offset {from_offset} lies inside the batch "
                                      f"{h.base_offset}-{h.last_offset}")
            walked += 1
            yield h

    try:
        state.apply_headers(counted())
    finally:
        headers.close()  # unpin now, not at garbage collection
    return walked


def producer_snapshot_name(offset: int) -> str:
    """The file name of the producer snapshot at `offset`."""
    return f"{PRODUCER_SNAPSHOT_PREFIX}{offset:020d}"


def _producer_snapshot_offset_of(name: str) -> int | None:
    """The offset a producer snapshot's file name carries; None for any other name."""
    tail = name[len(PRODUCER_SNAPSHOT_PREFIX):]
    if not name.startswith(PRODUCER_SNAPSHOT_PREFIX) or len(tail) != 20 or not tail.isdigit():
        return None
    return int(tail)


def _unlink_if_present(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _read_or_none(path: Path, max_bytes: int = -1) -> bytes | None:
    """The file's bytes (at most `max_bytes` of them if given), None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes)
    except FileNotFoundError:
        return None


def _count_records(seg: Segment) -> int:
    n = 0
    try:
        for _, h in seg.walk(0, seg.size_bytes):
            n += h.last_offset_delta + 1
    except CorruptRecordError:
        pass  # best effort: the count is for the report only
    return n


def _check_read(seg: Segment, pos: int, first: Header, data, skip: int, version: int,
                trusted: int) -> None:
    """The read-path check ("Integrity") of bytes read from `seg`: `data` holds the segment's
    bytes from `pos + skip`, where `pos` is the start of the batch `first` that `locate`
    found. Every batch in it that no earlier check covered (Segment.unverified under
    `version`, bytes from `trusted` on taken as checked by their write) must have a sane
    header and a good CRC-32C, and base offsets must increase from `first`'s within the
    segment's offset range; then the range below `trusted` is marked checked. Raises
    StorageDamageError naming the first bad batch."""
    start = pos + skip
    end = start + len(data)
    for a, b in seg.unverified(start, end, version, trusted):
        _check_batches(seg, data, a - start, b - start, start,
                       first.base_offset if a == pos else None, first.next_offset)
    seg.mark_verified(start, min(end, max(start, trusted)), version)


# The whole RecordBatch v2 header as a plain tuple: the read-path check parses one per batch,
# so it skips partition/batch.py's Header objects (5x the cost) unless a batch looks bad.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK = 0x07


def _check_batches(seg: Segment, data: bytes, lo: int, hi: int, at: int, exact: int | None,
                   floor: int) -> None:
    """Check the batches in data[lo:hi] (`data` starts at segment position `at`): each has
    the header `read_header` accepts and a good CRC-32C; the first starts at offset `exact`
    if given, else at or above `floor`; offsets increase and stay in the segment's range.
    Raises StorageDamageError (what `read_header` / `verify_crc` say about a bad batch)."""
    p = lo
    expected = exact if exact is not None else floor
    seg_base = seg.base_offset
    view = memoryview(data)  # each batch's CRC is taken where it lies, not from a copy
    unpack = _BATCH_HEADER.unpack_from
    while p < hi:
        if hi - p >= HEADER_BYTES:
            base, length, _, magic, crc, attrs, delta, _, _, _, _, _, count = unpack(data, p)
            nxt = p + LOG_OVERHEAD + length
            if (magic == MAGIC and length >= MIN_BATCH_LENGTH and nxt <= hi and delta >= 0
                    and count >= 0 and attrs & _CODEC_MASK <= Compression.ZSTD
                    and (base == exact if p == lo and exact is not None else base >= expected)
                    and base >= seg_base and base + delta - seg_base <= INT32_MAX
                    and crc32c(view[p + CRC_START:nxt]) == crc):
                expected = base + delta + 1
                p = nxt
                continue
        _raise_bad_batch(seg, data, p, hi, at, expected, exact if p == lo else None)


def _raise_bad_batch(seg: Segment, data: bytes, p: int, hi: int, at: int, expected: int,
                     exact: int | None) -> None:
    """Say what is wrong with the batch at data[p] (one the fast check refused)."""
    h = None
    try:
        h = read_header(data, p)
        verify_crc(data, p, h)
        if (h.base_offset != exact) if exact is not None else (h.base_offset < expected):
            why = f"base offset {h.base_offset}, expected {expected}"
        elif h.last_offset - seg.base_offset > INT32_MAX or h.base_offset < seg.base_offset:
            why = f"offsets {h.base_offset}..{h.last_offset} outside the segment's range"
        else:
            why = f"batch runs past the checked range's end {at + hi}"
    except CorruptRecordError as e:
        why = str(e).partition(": ")[2] or str(e)
    bad = h.base_offset if h is not None and h.base_offset >= expected else expected
    raise StorageDamageError(f"segment {seg.name} at position {at + p}: {why}",
                             segment=seg.base_offset, position=at + p, offset=bad)

"""One partition replica's shell: the Log, the pure RaftCore, the `quorum-state` file, the
effect executor, acks waiters and consumer long-poll watchers (DESIGN §4 "Replication").

The core decides, this module does the I/O, following raft.py's "contract with the shell":

* Events (tick, a message, a leader append, a finished flush, a transfer) go to the core one
  at a time under the replica's lock (`_event`), and the effects each returns are performed
  in order, all of them, before the lock is released. Most effects are synchronous (appends,
  reads, enqueueing a send); the executor awaits only to fsync the quorum state (in a worker
  thread) and to let a running flush finish before a truncation.
* PersistQuorumState: `quorum-state` = u32 big-endian CRC-32C + canonical CBOR {epoch,
  voted_for, leader_id, needs_catch_up}, zero-padded to 512 bytes (a file without
  needs_catch_up reads as false; open sets it, durably, when log recovery dropped data; a
  file without padding, from an older version, reads the same), overwritten in place and
  fdatasynced (a first write, or one over an unpadded file, writes a temp file and renames
  it); only then `quorum_state_persisted(version)`. An attached replica's write joins the
  node's group commit (`QuorumStateCommits`: one syncfs per batch instead of an fdatasync
  per file, on filesystems whose syncfs makes files durable).
* Flush: one `log.flush()` in a worker thread (group commit), reported exactly once with
  `flushed(offset)`. A truncation waits until no flush thread runs, then truncates in a
  worker thread.
* AppendControl lands exactly at its offset (checked); it is not reported with
  `leader_appended`. AppendReplicated's new end must be the core's (checked).
* Send(FetchResponse with read_offset): the leader reads `log.read(read_offset, max_bytes)`
  right there, before any later effect (so before any later TruncateTo), and the bytes go to
  the transport untouched. A read that finds damage drops the response (the follower asks
  again) and reports the damage (below). Where the transport sends file slices
  (`file_slices`: plain TCP peers, partition/replication.py) it gets `log.read_slice`
  instead, checked the same way, and its bytes are read later, by os.sendfile. So that they
  are still the bytes of that moment, every cut of the log (TruncateTo, TruncateFully, a
  repair, a reopen) first bumps `log_cuts` on the trio thread, before its worker thread
  starts; a slice is `intact()` only while `log_cuts` is what it was when the slice was made,
  and the sender asks before each os.sendfile call (on the trio thread), so every byte it
  sends was read before any cut began. A slice found no longer intact closes the follower's
  connection; its fetch comes again.
* A RaftStateError, a failed log (LogClosedError) or an OSError takes the replica offline:
  every request then answers KAFKA_STORAGE_ERROR; the node stays up, and the manager calls
  `reopen()` with backoff: the replica is opened again from disk exactly as a restart would
  (recovery, needs_catch_up if recovery cut data, RESIGNED if it led) and rejoins. A full disk
  (ENOSPC) therefore heals by itself once space returns (`offline_kind` says which failure).

Threads and disk (issue 13). Nothing blocking runs on the trio thread except appends into the
page cache and reads of the cached tail: every fsync, truncation, repair, segment check, cold
or large read (more than INLINE_READ_MAX_BYTES, or further back than the log's cached tail),
producer-state rebuild, ListOffsets walk, retention and compaction runs in a worker thread
through the node's `DiskWork` limiters. A zero-copy read (`read_committed_slice`, the Kafka
listener's fetch) reads only the bytes not yet checked (partition/segment.py "checked
once"): inline when those are few and in the cached tail; else in a worker thread, which for
a cold range reads all of it into the page cache for the sendfile. The replica's lock serialises the LOG'S WRITER (partition/log.py
"Concurrency"): appends on the trio thread, and the blocking writer calls in worker threads
while the lock is held; consumer reads and compaction's clean phase run beside it as
readers. A busy lock never stalls other partitions: `tick()` skips a replica whose lock is
held and hands a tick that starts an election to the replica's own task, and `deliver()`
queues a message (bounded, MAX_INBOX; oldest dropped, Raft retries) for
a task that hands it to the core when the lock frees.

Recovery point (issue 19): the maintenance pass (every few seconds) and a finished flush
write the log's offset-granular recovery point (partition/log.py) when the active segment grew
by RECOVERY_POINT_MIN_BYTES / RECOVERY_POINT_FLUSH_BYTES past it: the writer's snapshot under
the lock, its fsync and write in a worker thread (DiskWork.io). A restart then CRC-scans only
the bytes past it.

Producer snapshot (issue 19). At the same moments (and at close, with
RECOVERY_POINT_CLOSE_MIN_BYTES) the producer state is snapshotted as of the log end S when the
log grew by as many bytes past the last snapshot: a copy under the lock (or, in the flush
task, while nobody holds it), encoded and written durably in the worker thread after the log
is fsynced up to S (`Log.producer_snapshot` / `write_producer_snapshot`). Only an exact state
is snapshotted (partition/producer_state.py: not dirty, and no truncation or compaction made
it differ from a walk of the log); a state that stopped being exact is rebuilt at the next
checkpoint from the snapshot and the headers after it when the log still has one. Open
(`_rebuild_producers_at_open`) loads it and walks only the batch headers from S (those
the recovery scan just checked, when it began at or below S: not read twice); the log
removes it before any cut below S, and ignores one that does not fit (the whole walk then).

Damage (DESIGN §9 "Integrity"). Every read path checks CRCs (partition/log.py): the leader's
consumer reads (bytes or zero-copy slices) and replica-fetch answers, the follower's check of what it fetched
(partition/replication.py), recovery at open, and the manager's scrubber. A read that finds
damage never serves the bytes; it calls `report_damage`, and a task then re-checks the whole
segment under the lock. Index damage only: the indexes are rebuilt. A bad batch, with other
voters to repair from: the replica steps down if it leads, persists needs_catch_up, cuts its
log at the last good batch (`Log.repair`), and restarts its core from the log as a restart
would (RESIGNED if it led, high watermark 0), so it fetches the rest from the leader and only
votes or leads again once caught up (raft.py "Damaged storage"). A single voter has nobody to
repair from: it keeps its log, reports the damage in `status()`, and answers reads of the bad
batch CORRUPT_MESSAGE with its offset.

Leader writes (`append_as_leader`): the header of every batch is read (no record decoding),
its size checked against max_message_bytes, idempotent batches checked against the producer
state (a retry answers with its original offsets, even one appended by an earlier leader:
the state is rebuilt from the log's headers at open and kept in step by every append and
truncation); then `log.append` (which checks the CRC and stamps offsets and epoch) and
`core.leader_appended`. acks=all waits on an ack waiter released when the high watermark
passes the batch's last offset; losing leadership fails the waiters with REQUEST_TIMED_OUT
(the outcome is unknown: the batch may still commit under the next leader).

Size (issue 13's ~800-line rule): over it because the executor, damage repair and reopen all
work under the one replica lock on the same state; the seam to cut along is "damage and
reopen" (a `ReplicaStorage` helper holding the lock's disk work), not yet done.

Invariants:
* The log's writer calls run only under the replica's lock (on the trio thread or in a worker
  thread awaited under it); `log.flush()` runs in the flush thread; reads anywhere.
* Ack waiters are kept in offset order; all are answered (ok, timed out, or failed) by the
  time leadership or the replica ends.
* A replica that was leader restarts RESIGNED (the core does it from the quorum state); the
  high watermark restarts at 0 (never above the flushed offset).
"""

from __future__ import annotations

import errno
import io
import logging
import os
import random
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Final, Protocol

import cbor2
import trio
from crc32c import crc32c

from metadata.topic_config import TopicConfig
from partition.batch import CONTROL_LEADER_CHANGE, CheckedBatches, Header, control_batch, iter_headers
from partition.cleaner import CleanAborted
from partition.validator import batch_too_large
from partition.errors import CorruptRecordError, LogClosedError, RaftStateError, StorageDamageError
from partition.log import (
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CLOSE_MIN_BYTES,
    RECOVERY_POINT_FLUSH_BYTES,
    RECOVERY_POINT_MIN_BYTES,
    ActiveCheckpoint,
    Log,
    LogConfig,
    ProducerCheckpoint,
    ProducerStateLoad,
    RepairReport,
)
from partition.producer_state import ProducerStateManager
from partition.raft import (
    AdvanceLogStart,
    AppendControl,
    AppendReplicated,
    FetchResponse,
    Flush,
    HighWatermarkChanged,
    LeadershipChanged,
    LogState,
    LowWatermarkChanged,
    PersistQuorumState,
    QuorumState,
    RaftConfig,
    RaftCore,
    Role,
    Send,
    TruncateFully,
    TruncateTo,
)
from partition.segment import (
    ATOMIC_OVERWRITE_BYTES,
    FileSlice,
    overwrite_durably,
    overwrite_durably_many,
    write_durably,
)
from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    InvalidRequestError,
    KafkaStorageError,
    MessageTooLargeError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.base.eventlog import log_event

__all__ = [
    "QUORUM_STATE_FILE",
    "PARTITION_METADATA_FILE",
    "ReplicaSettings",
    "DiskWork",
    "ReplicaObserver",
    "Replica",
    "AckWaiter",
    "Transport",
    "LogSlice",
    "read_quorum_state",
    "write_quorum_state",
    "raft_config_for",
    "fetch_wait_ticks",
    "log_config_for",
]

logger = logging.getLogger(__name__)

QUORUM_STATE_FILE = "quorum-state"
PARTITION_METADATA_FILE = "partition.metadata"
_KEEP_ON_RESET = frozenset({QUORUM_STATE_FILE, PARTITION_METADATA_FILE})
_CRC = struct.Struct(">I")
# quorum-state's size: CRC and CBOR, zero-padded to one sector, so that it is overwritten in
# place (segment.overwrite_durably). Files of older versions hold no padding and read the same.
QUORUM_STATE_BYTES: Final = ATOMIC_OVERWRITE_BYTES
# The follower's log must take whatever a leader accepted, whatever max_message_bytes says now:
# the producer limit is checked on the leader path only.
REPLICA_MAX_BATCH_BYTES = 64 << 20
MAX_PRODUCE_BATCHES = 10_000  # batches in one partition's `records` of one produce request
INLINE_READ_MAX_BYTES: Final = 256 << 10  # larger reads (and their CRC checks) go to a thread
DISK_IO_THREADS: Final = 8  # a node's worker threads for reads, truncations, checks, repairs
MAX_INBOX: Final = 1024  # Raft messages queued for a busy replica (oldest dropped)
LOUD_PRODUCER_WALK_BATCHES: Final = 1_000  # an open that walked more headers says so


class QuorumStateCorruptError(KafkaStorageError):
    """The replica's quorum-state file is damaged: the replica cannot vote or lead."""


class Transport(Protocol):
    """How a replica reaches its peers (partition/replication.py's ReplicationLinks)."""

    # True when FetchResponses may carry a log slice instead of bytes (plain TCP links).
    file_slices: bool

    def send(self, replica: "Replica", to: int, message: Any) -> None:
        """Queue a Raft message to voter `to` (may drop it; Raft retries)."""

    def answering(self, broker_id: int) -> bool:
        """Whether broker `broker_id` answered this broker just now (raft.py `leader_alive`)."""


class LogSlice:
    """A FileSlice of a replica's log in a FetchResponse (raftlog.base.protocol.FilePart):
    intact while no cut of the log began since it was made (module docstring, "Send")."""

    __slots__ = ("fd", "offset", "length", "_replica", "_cuts")

    def __init__(self, piece: FileSlice, replica: "Replica") -> None:
        self.fd = piece.fd
        self.offset = piece.offset
        self.length = piece.length
        self._replica = replica
        self._cuts = replica.log_cuts

    def __len__(self) -> int:
        return self.length

    def intact(self) -> bool:
        return self._replica.log_cuts == self._cuts and self.fd >= 0

    def close(self) -> None:
        """Idempotent."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


@dataclass
class DiskWork:
    """The bounded worker threads of one node's blocking disk work, shared by its replicas:
    `io` for cold reads, truncations, log resets, segment checks, repairs and reopens;
    `maintenance` for retention and compaction (one replica at a time); `quorum_states`, the
    group commit of quorum-state writes."""

    io: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(DISK_IO_THREADS))
    maintenance: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(1))
    quorum_states: QuorumStateCommits = field(default_factory=lambda: QuorumStateCommits())


class ReplicaObserver:
    """What a replica tells its manager about its storage (metrics, /health). No-ops here."""

    def damage_found(self, replica: "Replica", found_by: str, what: str) -> None: ...

    def index_rebuilt(self, replica: "Replica") -> None: ...

    def repaired(self, replica: "Replica", report: RepairReport) -> None: ...

    def went_offline(self, replica: "Replica", kind: str) -> None: ...

    def reopened(self, replica: "Replica", ok: bool) -> None: ...


def offline_kind(exc: BaseException) -> str:
    """"disk_full" (ENOSPC / EDQUOT anywhere in the cause chain), "io_error" (another OSError
    or a failed log), or "state_error" (a broken Raft contract)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk_full"
        e = e.__cause__ or e.__context__
        seen += 1
    return "state_error" if isinstance(exc, RaftStateError) else "io_error"


@dataclass(frozen=True)
class ReplicaSettings:
    tick_ms: int = 50
    election_timeout_ms: int = 1000
    fetch_max_wait_ms: int = 250  # a leader parks a caught-up follower fetch this long
    replica_fetch_max_bytes: int = 4 << 20  # per partition per replica fetch answer
    max_producers: int = 10_000


def fetch_wait_ticks(settings: ReplicaSettings) -> int:
    """RaftConfig.fetch_max_wait_ticks of every replica with these settings."""
    ticks = max(4, settings.election_timeout_ms // settings.tick_ms)
    return max(1, min(settings.fetch_max_wait_ms // settings.tick_ms, ticks // 4))


def raft_config_for(settings: ReplicaSettings, topic_config: TopicConfig) -> RaftConfig:
    ticks = max(4, settings.election_timeout_ms // settings.tick_ms)
    fetch_wait = fetch_wait_ticks(settings)
    return RaftConfig(
        election_timeout_ticks=ticks,
        fetch_max_wait_ticks=fetch_wait,
        fetch_request_timeout_ticks=max(fetch_wait + 1, min(fetch_wait + 3, ticks - 1)),
        check_quorum_ticks=ticks + ticks // 2,
        transfer_timeout_ticks=ticks,
        begin_quorum_resend_ticks=max(1, fetch_wait),
        require_flush=topic_config.flush_policy == "always",
    )


def log_config_for(topic_config: TopicConfig) -> LogConfig:
    return LogConfig(
        segment_bytes=topic_config.segment_bytes,
        segment_ms=topic_config.segment_ms,
        retention_ms=topic_config.retention_ms,
        retention_bytes=topic_config.retention_bytes,
        cleanup_policy=topic_config.cleanup_policy,
        delete_retention_ms=topic_config.delete_retention_ms,
        max_batch_bytes=max(REPLICA_MAX_BATCH_BYTES, topic_config.max_message_bytes),
    )


async def _in_thread(fn: Callable[[], Any], limiter: trio.CapacityLimiter) -> Any:
    """`trio.to_thread.run_sync(fn, limiter=limiter)` without what that adds to each call
    (a pass through the scheduler for a free limiter, naming the worker thread and back with
    two prctl calls, a copy of the context: 103 -> 68 us of CPU per call, hand-offs
    included, load 6): for the flushes, one per group commit of every replica.
    Returns what `fn` returns, raises what it raises; like to_thread's default, not
    cancellable once started (the caller waits for `fn`)."""
    await acquire_free(limiter)
    try:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        trio.lowlevel.start_thread_soon(
            fn, lambda result: token.run_sync_soon(trio.lowlevel.reschedule, task, result))
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
    finally:
        limiter.release()


# ------------------------------------------------------------------------- quorum state


def _quorum_state_bytes(state: QuorumState) -> bytes:
    body = cbor2.dumps(
        {"epoch": state.epoch, "voted_for": state.voted_for, "leader_id": state.leader_id,
         "needs_catch_up": state.needs_catch_up},
        canonical=True,
    ).ljust(QUORUM_STATE_BYTES - _CRC.size, b"\0")
    return _CRC.pack(crc32c(body)) + body


def write_quorum_state(directory: Path, state: QuorumState) -> None:
    """Write `quorum-state` durably: in place, fdatasynced, once it has the padded size
    (segment.overwrite_durably). Blocking."""
    overwrite_durably(directory, QUORUM_STATE_FILE, _quorum_state_bytes(state))


def write_quorum_states(writes: list[tuple[Path, QuorumState]]) -> list[OSError | None]:
    """Many replicas' `quorum-state` files at once, each as durably as `write_quorum_state`
    writes one (segment.overwrite_durably_many): an OSError or None per write. Blocking."""
    return overwrite_durably_many([(d, QUORUM_STATE_FILE, _quorum_state_bytes(st)) for d, st in writes])


@dataclass(eq=False)
class _QuorumStateWrite:
    directory: Path
    state: QuorumState
    done: trio.Event = field(default_factory=trio.Event)
    error: OSError | None = None


class QuorumStateCommits:
    """Group commit of one node's quorum-state writes (`DiskWork.quorum_states`). A write
    joins the next batch; one worker thread writes a batch with `write_quorum_states` (one
    syncfs for all of it instead of an fdatasync per file, where syncfs makes files durable:
    segment.overwrite_durably_many), and a batch takes whatever arrived
    while the one before was written. When a node dies, its followers on the others run
    hundreds of elections at once, and each chains three quorum-state writes (the
    candidate's vote, the voter's, the new leader's): one at a time they queued behind each
    other in the journal, and the vote round trip outgrew the window that keeps the two
    survivors from running against each other (split votes: a fifth of the partitions)."""

    def __init__(self) -> None:
        self._waiting: list[_QuorumStateWrite] = []
        self._writing = False
        self.batches = 0
        self.writes = 0

    async def write(self, nursery: trio.Nursery, directory: Path, state: QuorumState) -> None:
        """Write `state` durably; the batch runs in `nursery`. Raises the write's OSError.
        Like the worker thread it stands for, not cancellable once asked."""
        w = _QuorumStateWrite(directory, state)
        self._waiting.append(w)
        if not self._writing:
            nursery.start_soon(self._write_batches)
            self._writing = True
        with trio.CancelScope(shield=True):
            await w.done.wait()
        if w.error is not None:
            raise w.error

    async def _write_batches(self) -> None:
        with trio.CancelScope(shield=True):  # every waiter is answered, at shutdown too
            try:
                while self._waiting:
                    batch, self._waiting = self._waiting, []
                    try:
                        errors = await trio.to_thread.run_sync(
                            write_quorum_states, [(w.directory, w.state) for w in batch])
                    except Exception as exc:  # a bug, not a disk error: fail the batch loudly
                        errors = [OSError(errno.EIO, f"quorum-state group commit: {exc!r}") for _ in batch]
                    self.batches += 1
                    self.writes += len(batch)
                    for w, error in zip(batch, errors, strict=True):
                        w.error = error
                        w.done.set()
            finally:
                self._writing = False


def read_quorum_state(directory: Path) -> QuorumState:
    """The durable quorum state; QuorumState() if there is none. Raises QuorumStateCorruptError."""
    try:
        data = (directory / QUORUM_STATE_FILE).read_bytes()
    except FileNotFoundError:
        return QuorumState()
    if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c(data[4:]):
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad CRC")
    try:
        body = io.BytesIO(data[_CRC.size:])
        obj = cbor2.load(body)
        if body.read().strip(b"\0"):
            raise ValueError("bytes after the state are not padding")
        # Files written before needs_catch_up existed lack it: nothing was flagged then.
        state = QuorumState(obj["epoch"], obj["voted_for"], obj["leader_id"],
                            obj.get("needs_catch_up", False))
    except (cbor2.CBORDecodeError, KeyError, TypeError, ValueError) as exc:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: {exc}") from None
    if type(state.needs_catch_up) is not bool:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad needs_catch_up")
    if type(state.epoch) is not int or state.epoch < 0:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad epoch")
    return state


def _checkpoint_bytes(kind: str, lines: list[str]) -> bytes:
    # The format log.py documents for its checkpoints: kind, count, lines, crc32c line.
    raw = (f"{kind}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)).encode()
    return raw + f"crc32c {crc32c(raw):08x}\n".encode()


# ----------------------------------------------------------------------------- waiters


class AckWaiter:
    """One acks=all produce waiting for the high watermark to pass `last_offset`."""

    __slots__ = ("last_offset", "event", "error")

    def __init__(self, last_offset: int):
        self.last_offset = last_offset
        self.event = trio.Event()
        self.error: Exception | None = None

    def finish(self, error: Exception | None = None) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()

    async def wait(self, deadline: float) -> None:
        """Returns once committed. Raises RequestTimedOutError (deadline; unknown outcome) or the
        failure it was finished with (leadership lost, replica offline)."""
        with trio.move_on_at(deadline):
            await self.event.wait()
        if not self.event.is_set():
            raise RequestTimedOutError(
                f"offset {self.last_offset} not replicated to a majority in time; "
                "it may still be committed"
            )
        if self.error is not None:
            raise self.error


@dataclass
class AppendResult:
    first_offset: int
    last_offset: int
    duplicate: bool
    waiter: AckWaiter | None


# ----------------------------------------------------------------------------- replica


class Replica:
    """One local replica of (topic, partition). Create, then `open()` (blocking disk work
    in a worker thread), then `attach(nursery)`; `close()` at the end."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        topic_id: str,
        replica_id: int,
        voters: tuple[int, ...],
        directory: Path,
        topic_config: TopicConfig,
        transport: Transport,
        settings: ReplicaSettings = ReplicaSettings(),
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        on_leadership: Callable[["Replica"], None] = lambda replica: None,
        on_ticking: Callable[["Replica"], None] = lambda replica: None,
        disk: DiskWork | None = None,
        observer: ReplicaObserver | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.replica_id = replica_id
        self.voters = tuple(sorted(voters))
        self.directory = Path(directory)
        self.topic_config = topic_config
        self.transport = transport
        self.settings = settings
        self._rng = rng if rng is not None else random.Random()
        self._clock_ms = clock_ms
        self._on_leadership = on_leadership
        self._on_ticking = on_ticking
        self.ticking = True  # the manager ticks it (until a tick finds `needs_tick` false)
        self.log: Log | None = None
        self.core: RaftCore | None = None
        self.producers = ProducerStateManager(max_producers=settings.max_producers)
        self._producers_dirty = False
        self.producers_loaded: ProducerStateLoad | None = None  # how the last rebuild went
        self._lock = trio.StrictFIFOLock()
        self._nursery: trio.Nursery | None = None
        self._flushing = False
        self._flush_idle = trio.Event()
        self._flush_idle.set()
        self._report_flush_after = False
        self._last_flush_ms = 0
        self._ack_waiters: deque[AckWaiter] = deque()
        self._delete_waiters: list[AckWaiter] = []  # DeleteRecords: last_offset = target start
        self._watchers: set[trio.Event] = set()
        self.high_watermark = 0
        self.leader_id: int | None = None
        self.leader_epoch = 0
        self.is_leader = False
        self.offline_reason: str | None = None
        self.offline_kind: str | None = None  # offline_kind(): disk_full | io_error | state_error
        self.offline_since_ms: int | None = None
        self.reopen_failures = 0
        self.closed = False
        self.new_log = False  # the log was empty at open: a candidate for start_election
        self.disk = disk if disk is not None else DiskWork()
        self.observer = observer if observer is not None else ReplicaObserver()
        self._inbox: deque[Any] = deque()
        self._tick_queued = False  # a tick that runs for election, for the pump (tick())
        self._pumping = False
        self.dropped_messages = 0
        self.skipped_ticks = 0
        # Damage: segments (base offsets) reported by a read and not yet re-checked; the
        # last confirmed damage ({"segment", "offset", "reason", ...}) while unrepaired.
        self._damage_reports: dict[int, str] = {}
        self._served: dict[int, int] = {}  # follower broker -> read offset of its last answer
        self._damage_task = False
        self.damaged: dict[str, Any] | None = None
        self.repairs = 0
        self._cleaning = False
        # Bumped on the trio thread before any cut of the log starts (LogSlice.intact).
        self.log_cuts = 0

    # ---------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """Blocking (run it in a worker thread before `attach`): write the partition
        metadata file, open and recover the log, read the quorum state, rebuild producer
        state from the batch headers, build the core. Raises OSError, QuorumStateCorruptError."""
        log, state = self._load()
        self.log = log
        self.new_log = log.log_end_offset == 0 and state.epoch == 0
        self._build_core(log, state)

    def _load(self) -> tuple[Log, QuorumState]:
        """Blocking: open (and recover) the log and read the quorum state, flagging
        needs_catch_up durably when recovery, or a header damaged in a trusted segment found
        by the producer-state rebuild, cut data (raft.py "Damaged storage")."""
        d = self.directory
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        meta = cbor2.dumps({"topic": self.topic, "partition": self.partition,
                            "topic_id": self.topic_id}, canonical=True)
        if _read_or_none(d / PARTITION_METADATA_FILE) != meta:
            write_durably(d, PARTITION_METADATA_FILE, meta)
        now = self._clock_ms()
        log = Log.open(d, log_config_for(self.topic_config), now_ms=now)
        try:
            if log.recovery is not None and log.recovery.segment is not None:
                log_event(logger, "replica_tail_cut", level=logging.WARNING, topic=self.topic,
                          partition=self.partition, segment=log.recovery.segment,
                          bytes_dropped=log.recovery.bytes_dropped)
            state = read_quorum_state(d)
            rec = log.recovery
            lost = rec is not None and (rec.bytes_dropped > 0 or rec.offsets_lost > 0)
            cut = self._rebuild_producers_at_open(log)
            if (lost or cut) and not state.needs_catch_up:
                # Recovery cut data that may have been fsynced and counted toward a commit:
                # no votes until caught up (raft.py "Damaged storage"). Durable before the
                # core runs, since the next restart will find a clean log. A new, empty
                # partition directory recovers nothing, so it is never flagged.
                state = QuorumState(state.epoch, state.voted_for, state.leader_id, True)
                write_quorum_state(d, state)
                log_event(logger, "replica_needs_catch_up", level=logging.WARNING,
                          topic=self.topic, partition=self.partition,
                          bytes_dropped=rec.bytes_dropped if rec else 0,
                          offsets_lost=rec.offsets_lost if rec else 0)
        except BaseException:
            log.close()
            raise
        return log, state

    def _rebuild_producers_at_open(self, log: Log) -> bool:
        """Producer state from the producer snapshot and the headers after it, or from the
        whole log's headers without one (`_rebuild_producers`); a header that does not walk
        (damage in a segment recovery trusted) is cut like a torn tail when other voters can
        supply the rest, else the state covers what precedes it (a repair below the snapshot
        removes it, so the next try walks the whole log). Damage below the snapshot is not
        walked here: reads and the scrubber find it. Returns whether data was cut."""
        cut = False
        for _ in range(64):  # each repair shortens the log; bounded anyway
            try:
                started = time.perf_counter()
                loaded = self._rebuild_producers(log)
                if loaded.batches_walked >= LOUD_PRODUCER_WALK_BATCHES or (
                        loaded.unused not in (None, "none")):
                    log_event(logger, "replica_producers_loaded", topic=self.topic,
                              partition=self.partition, snapshot_offset=loaded.snapshot_offset,
                              batches_walked=loaded.batches_walked, snapshot_unused=loaded.unused,
                              duration_ms=round((time.perf_counter() - started) * 1000, 1))
                return cut
            except StorageDamageError as exc:
                self.observer.damage_found(self, "open", exc.what)
                log_event(logger, "replica_damage_found", level=logging.ERROR, topic=self.topic,
                          partition=self.partition, found_by="open", segment=exc.segment,
                          offset=exc.offset, reason=str(exc))
                if len(self.voters) == 1:
                    self.damaged = {"segment": exc.segment, "offset": exc.offset,
                                    "reason": str(exc), "found_by": "open"}
                    # The state covers what precedes the damage (nobody to repair from):
                    # serve with it, but never snapshot it as the state of this log.
                    self._producers_dirty = False
                    self.producers.exact = False
                    return cut
                report = log.repair(exc.segment)
                if report is None:
                    raise  # the header walk and the check disagree: refuse to guess
                cut = True
                self.repairs += 1
                self.observer.repaired(self, report)
        raise RaftStateError(f"{self.name}: damage found again after 64 repairs at open")

    def _build_core(self, log: Log, state: QuorumState) -> None:
        """A core from the durable quorum state and the log, as at a restart (raft.py
        contract 7): a replica that led restarts RESIGNED; the high watermark restarts at 0."""
        self.core = RaftCore(
            self.replica_id, self.voters, rng=self._rng, quorum_state=state,
            log_state=LogState(log.log_start_offset, log.log_end_offset, log.flushed_offset,
                               tuple(log.epochs())),
            high_watermark=0, config=raft_config_for(self.settings, self.topic_config),
        )  # fmt: skip
        self.leader_epoch = self.core.epoch
        self.leader_id = self.core.leader_id
        self.high_watermark = 0
        self.is_leader = False

    def attach(self, nursery: trio.Nursery) -> None:
        """Start serving: flush threads run in `nursery` (the manager's)."""
        self._nursery = nursery

    async def close(self) -> None:
        """Stop: fail waiters, wait for a running flush, close the log (flushes it)."""
        if self.closed:
            return
        self._abandon_core()
        self.closed = True
        self._fail_waiters(KafkaStorageError(f"{self.topic}-{self.partition}: replica closed"))
        self._wake_watchers()
        with trio.CancelScope(shield=True):
            async with self._lock:
                await self._flush_idle.wait()
                if self.log is not None:
                    log = self.log
                    pstate = None
                    if self.offline_reason is None and not self._producers_dirty:
                        pstate = log.producer_snapshot(self.producers, RECOVERY_POINT_CLOSE_MIN_BYTES)
                    try:
                        await trio.to_thread.run_sync(_snapshot_and_close, log, pstate)
                    except (OSError, RaftlogError) as exc:
                        log_event(logger, "replica_close_failed", level=logging.WARNING,
                                  topic=self.topic, partition=self.partition, reason=str(exc))

    # ---------------------------------------------------------------- queries

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def attached(self) -> bool:
        """Open and serving (the manager routes to it)."""
        return self._nursery is not None and self.core is not None and not self.closed

    @property
    def online(self) -> bool:
        return self.offline_reason is None and not self.closed and self.core is not None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"online": self.online}
        if self.offline_reason is not None:
            out["offline_reason"] = self.offline_reason
            out["offline_kind"] = self.offline_kind
            out["offline_since_ms"] = self.offline_since_ms
            out["reopen_failures"] = self.reopen_failures
        if self.damaged is not None:
            out["damaged"] = dict(self.damaged)
        if self.repairs:
            out["repairs"] = self.repairs
        if self.core is not None:
            s = self.core.status()
            role, leader_id = s["role"], s["leader_id"]
            if role == "leader" and not self.is_leader:
                # Elected, but its epoch is not durable yet: it serves nothing as leader until
                # then (the LeaderChange waits for the quorum-state fsync), so it does not say so
                # either (a client that trusted /health got NOT_LEADER from it meanwhile).
                role, leader_id = "candidate", None
            out.update(role=role, epoch=s["epoch"], leader_id=leader_id,
                       log_end_offset=s["log_end_offset"], flushed_offset=s["flushed_offset"],
                       high_watermark=s["high_watermark"],
                       needs_catch_up=s["needs_catch_up"], quiescent=s["quiescent"])
        if self.log is not None:
            out["log_start_offset"] = self.log.log_start_offset
        return out

    def needs_tick(self) -> bool:
        """Whether ticks would do anything: online, and its core not quiescent (raft.py
        "Quiescence") or an interval flush pending. Once false, the manager stops ticking
        this replica until an event makes it true again (then `on_ticking` is called)."""
        core = self.core
        if core is None or not self.online:
            return False
        if not core.quiescent:
            return True
        log = self.log
        return (self.topic_config.flush_policy == "interval" and log is not None
                and log.flushed_offset < log.log_end_offset)

    def quiescent_on(self, broker_id: int) -> bool:
        """A follower of broker `broker_id` whose fetch that leader holds."""
        core = self.core
        return (core is not None and self.online and core.role is Role.FOLLOWER
                and core.leader_id == broker_id and core.quiescent)

    def _check_ticking(self) -> None:
        if not self.ticking and self.needs_tick():
            self.ticking = True
            self._on_ticking(self)

    def check_online(self) -> None:
        if self.offline_reason is not None:
            raise KafkaStorageError(f"{self.name} is offline: {self.offline_reason}")
        if self.closed or self.core is None:
            raise KafkaStorageError(f"{self.name} is not open")

    def check_leader(self) -> None:
        """Raises KafkaStorageError (offline) or NotLeaderError (with the core's hint)."""
        self.check_online()
        if not self.is_leader:
            raise NotLeaderError(leader_id=self.core.leader_id, epoch=self.core.epoch)

    # ---------------------------------------------------------------- events

    async def tick(self, *, answer_parked: bool = False) -> None:
        """One tick of the core (`answer_parked`: RaftCore.tick). Skipped while the lock is
        held (disk work in a thread), so the manager's tick loop never waits on one replica;
        the core's timers just pause. A tick that starts an election
        (`RaftCore.runs_on_next_tick`) is run by the replica's own task instead: a
        candidacy writes the quorum state first, and after a node died, hundreds of them
        waited in the tick loop one after another (single passes took 0.4-1.3 s, so the
        last candidacies began 1.6 s after the kill instead of within the 0.5 s window).
        Before such a tick, a follower whose leader's broker answers this one still waits
        (raft.py `leader_alive`)."""
        if not self.online:
            return
        if self._lock.locked() or self._tick_queued:
            self.skipped_ticks += 1
            return
        if self._nursery is not None and self.core.runs_on_next_tick():
            leader = self.core.leader_id
            if leader is not None and self.transport.answering(leader):
                await self._event(RaftCore.leader_alive, leader)
            if self.core.runs_on_next_tick():
                self._tick_queued = True
                self._start_pump()
                return
        await self._event(_tick_answering if answer_parked else RaftCore.tick)
        if (self.topic_config.flush_policy == "interval" and not self._flushing
                and self.log is not None and self.log.flushed_offset < self.log.log_end_offset):
            now = self._clock_ms()
            if now - self._last_flush_ms >= self.topic_config.flush_interval_ms:
                self._last_flush_ms = now
                self._start_flush(report=False)

    async def deliver(self, message: Any) -> None:
        """A Raft message from another voter of this partition. Handled at once when the
        replica is idle; queued otherwise (module docstring), so the caller (a replication
        session carrying many partitions) never waits on this one's disk work."""
        if not self.online:
            return
        if not self._inbox and not self._lock.locked():
            await self._event(RaftCore.handle, message)
            return
        self.deliver_soon(message)

    def deliver_soon(self, message: Any) -> None:
        """Queue a Raft message and return at once; the replica's own task handles it. For a
        peer op carrying many partitions' votes: handling one may wait for a quorum-state
        fsync, and in line those fsyncs added up (1,000 partitions: seconds per batch, past
        the votes' election timeouts, so elections never finished)."""
        if not self.online:
            return
        if len(self._inbox) >= MAX_INBOX:
            self._inbox.popleft()
            self.dropped_messages += 1
        self._inbox.append(message)
        self._start_pump()

    def _start_pump(self) -> None:
        if not self._pumping and self._nursery is not None:
            self._pumping = True
            self._nursery.start_soon(self._pump)

    async def _pump(self) -> None:
        try:
            while (self._inbox or self._tick_queued) and self.online:
                if self._tick_queued:
                    self._tick_queued = False
                    await self._event(RaftCore.tick)
                else:
                    await self._event(RaftCore.handle, self._inbox.popleft())
                await trio.lowlevel.checkpoint()  # _event may not yield (its docstring)
        finally:
            self._pumping = False
            if not self.online:
                self._inbox.clear()
                self._tick_queued = False

    async def start_election(self) -> None:
        if self.online:
            await self._event(RaftCore.start_election)

    async def leader_unreachable(self, broker_id: int, *, refused: bool = False) -> None:
        """A connection to broker `broker_id` was refused or its link went silent (raft.py
        `leader_unreachable`). Skipped while busy, like a tick, unless quiescent: the next
        refused fetch says it again, but a silence is reported once."""
        if self.online and (not self._lock.locked() or self.quiescent_on(broker_id)):
            await self._event(partial(RaftCore.leader_unreachable, refused=refused), broker_id)

    async def wake(self, broker_id: int) -> None:
        """The link to broker `broker_id` broke (raft.py `wake`)."""
        if self.online:
            await self._event(RaftCore.wake, broker_id)

    async def follower_silent(self, broker_id: int) -> None:
        """Broker `broker_id` sent nothing for a while (raft.py `follower_silent`)."""
        if self.online:
            await self._event(RaftCore.follower_silent, broker_id)

    async def follower_heard(self, broker_id: int) -> None:
        """Broker `broker_id` is heard again (raft.py `follower_heard`)."""
        if self.online:
            await self._event(RaftCore.follower_heard, broker_id)

    async def clear_catch_up(self) -> bool:
        """Operator override (unclean recovery, raft.py "Damaged storage"): clear this
        replica's needs_catch_up durably, then run for election at once. Returns False (and
        changes nothing) if the flag was not set when the event ran (it may clear itself by
        catching up between the caller's check and now). Raises KafkaStorageError (offline).
        Ordering: the cleared flag is fsynced before any unclean vote request goes out."""
        self.check_online()
        cleared = False

        def clear(core: RaftCore) -> list:
            # Checked under the replica's lock: the core raises RaftStateError when the flag
            # is not set, and `_event` would take the replica offline for that.
            nonlocal cleared
            if not core.needs_catch_up:
                return []
            cleared = True
            return core.clear_catch_up()

        await self._event(clear)
        if cleared:
            log_event(logger, "replica_catch_up_cleared", level=logging.WARNING,
                      topic=self.topic, partition=self.partition,
                      log_end_offset=self.core.log_end_offset)
            await self.start_election()
        return cleared

    async def transfer_leadership(self, target: int) -> None:
        """Raises NotLeaderError, ValueError (target not a voter, or behind: it does not hold
        every committed offset, e.g. while it repairs damage; raft.py `transfer_refusal`),
        KafkaStorageError."""
        self.check_online()
        refusal = self.core.transfer_refusal(target)
        if refusal is not None:
            raise ValueError(refusal)
        await self._event(RaftCore.transfer_leadership, target)

    async def resign(self) -> None:
        if self.online:
            await self._event(RaftCore.resign)

    async def maintain(self) -> dict | None:
        """Retention and compaction below the high watermark, off the trio thread: roll and
        retention by the log's writer (under the lock, in a worker thread), then compaction's
        clean phase beside the writer (no lock: produce and fetch go on), then its install by
        the writer. Reports a moved log start to the core. Returns Log.maintain's dict, or
        None when offline."""
        if not self.online:
            return None
        if not await self.checkpoint_recovery_point():
            return None
        plan = None
        async with self._lock:
            if not self.online:
                return None
            log = self.log
            try:
                before = log.log_start_offset
                now = self._clock_ms()
                hw = self.core.high_watermark
                if log.roll_or_retention_due(now, high_watermark=hw):
                    done = await trio.to_thread.run_sync(
                        partial(log.roll_and_retain, now, high_watermark=hw),
                        limiter=self.disk.maintenance)
                else:  # the usual case: no worker-thread hand-off for nothing
                    done = {"rolled": False, "deleted_segments": [], "log_start_offset": before}
                if log.log_start_offset > before:
                    await self._execute(self.core.log_start_advanced(log.log_start_offset))
                plan = log.plan_compaction(now, high_watermark=hw)
            except (RaftStateError, LogClosedError, OSError) as exc:
                self._go_offline(exc)
                return None
        done.update(compacted_segments=[], records_removed=0, bytes_reclaimed=0)
        if plan is None:
            return done
        self._cleaning = True
        try:
            await trio.to_thread.run_sync(
                partial(log.clean_planned, plan, should_stop=lambda: self.closed or not self.online),
                limiter=self.disk.maintenance)
        except (OSError, CleanAborted, CorruptRecordError) as exc:
            log.discard_plan(plan)
            if isinstance(exc, StorageDamageError):
                self.report_damage(exc, found_by="compaction")
            log_event(logger, "replica_compaction_failed", level=logging.WARNING,
                      topic=self.topic, partition=self.partition, reason=str(exc))
            return done
        finally:
            self._cleaning = False
        async with self._lock:
            if not self.online or self.log is not log:
                log.discard_plan(plan)
                return done
            try:
                res = await trio.to_thread.run_sync(log.install_cleaned, plan,
                                                    limiter=self.disk.maintenance)
            except (LogClosedError, OSError) as exc:
                self._go_offline(exc)
                return None
            self.producers.batches_removed(res.batches_emptied)  # not exact if it named one
        done.update(compacted_segments=res.segments_rewritten, records_removed=res.records_removed,
                    bytes_reclaimed=res.bytes_reclaimed)
        return done

    async def checkpoint_recovery_point(self, min_bytes: int | None = None) -> bool:
        """The periodic offset-granular recovery point (partition/log.py) and producer
        snapshot (module docstring): the writer's snapshots under the lock (no I/O), then
        their fsyncs and durable writes in a worker thread (DiskWork.io) beside appends,
        each only when the log grew by `min_bytes` (default RECOVERY_POINT_MIN_BYTES) past
        it. A producer state that is dirty or no longer exact is first rebuilt, in a worker
        thread under the lock, when the log has a snapshot to start from. Returns False when
        the replica is (or went) offline."""
        min_bytes = RECOVERY_POINT_MIN_BYTES if min_bytes is None else min_bytes
        async with self._lock:
            if not self.online:
                return False
            log = self.log
            if (self._producers_dirty or not self.producers.exact) and log.producer_snapshot_offset is not None:
                try:
                    await trio.to_thread.run_sync(self._rebuild_producers, log, limiter=self.disk.io)
                except StorageDamageError as exc:  # dirty until a repair; no snapshot meanwhile
                    self.report_damage(exc, found_by="producer_state")
                except (LogClosedError, OSError) as exc:
                    self._go_offline(exc)
                    return False
            point, pstate = self._checkpoints(log, min_bytes)
        return await self._write_checkpoints(log, point, pstate)

    def _checkpoints(self, log: Log, min_bytes: int) -> tuple[ActiveCheckpoint | None, ProducerCheckpoint | None]:
        """The writer's snapshots (no I/O, no await: the caller holds the writer's place):
        the recovery point and the producer state, each None when not due."""
        point = log.recovery_snapshot(min_bytes)
        pstate = None if self._producers_dirty else log.producer_snapshot(self.producers, min_bytes)
        return point, pstate

    async def _write_checkpoints(self, log: Log, point: ActiveCheckpoint | None,
                                 pstate: ProducerCheckpoint | None) -> bool:
        """Make `_checkpoints`' snapshots durable in a worker thread. Returns False when the
        replica went offline (a failed write)."""
        if point is None and pstate is None:
            return True
        try:
            await trio.to_thread.run_sync(_write_checkpoints, log, point, pstate, limiter=self.disk.io)
        except (LogClosedError, OSError) as exc:
            if self.log is log and not self.closed:
                self._go_offline(exc)
            return False
        return True

    async def _event(self, method: Callable[..., list], *args: Any) -> None:
        """`method(core, *args)` under the lock, its effects executed. `method` is an unbound
        RaftCore method (or takes the core first): a repair or reopen may replace the core
        while this waits for the lock, and the event goes to the core of the moment.
        An uncontended lock is taken without a pass through trio's scheduler (`async with`
        a trio lock always yields once): most events are ticks that do nothing, and at 1,000
        partitions 20,000 of those a second each cost a round of trio's loop and an epoll
        call. Callers that loop (the tick loop, the inbox pump) yield themselves."""
        await acquire_free(self._lock)
        try:
            if not self.online:
                return
            effects = method(self.core, *args)
            if effects:
                await self._execute(effects)
            self._check_ticking()
        except (RaftStateError, LogClosedError, OSError, QuorumStateCorruptError) as exc:
            self._go_offline(exc)
        finally:
            self._lock.release()

    # ---------------------------------------------------------------- damage and reopen

    def report_damage(self, exc: StorageDamageError, *, found_by: str) -> None:
        """A read path found damage in segment `exc.segment`: note it and make sure the
        damage task re-checks that segment (module docstring "Damage"). Never blocks."""
        known = self.damaged is not None and self.damaged["segment"] == exc.segment
        if known and len(self.voters) == 1:
            return  # confirmed already, and nothing to repair from: no re-check per read
        self.observer.damage_found(self, found_by, exc.what)
        log_event(logger, "replica_damage_found", level=logging.ERROR, topic=self.topic,
                  partition=self.partition, found_by=found_by, segment=exc.segment,
                  offset=exc.offset, what=exc.what, reason=str(exc))
        if exc.segment in self._damage_reports or not self.online:
            return
        self._damage_reports[exc.segment] = found_by
        if not self._damage_task and self._nursery is not None:
            self._damage_task = True
            self._nursery.start_soon(self._handle_damage)

    async def _handle_damage(self) -> None:
        try:
            while self._damage_reports and self.online:
                base, found_by = next(iter(self._damage_reports.items()))
                try:
                    await self._check_and_repair(base, found_by)
                finally:
                    self._damage_reports.pop(base, None)
        finally:
            self._damage_task = False

    async def _check_and_repair(self, base: int, found_by: str) -> None:
        async with self._lock:
            if not self.online:
                return
            log = self.log
            try:
                check = await trio.to_thread.run_sync(log.check_segment, base, limiter=self.disk.io)
                if check is None:
                    return  # the segment went (truncated, retained, reset) meanwhile
                if check.damage is None:
                    if check.index_problem is not None or log.index_files_match(base) is False:
                        await trio.to_thread.run_sync(log.rebuild_indexes, base,
                                                      limiter=self.disk.io)
                        self.observer.index_rebuilt(self)
                        log_event(logger, "replica_index_rebuilt", level=logging.WARNING,
                                  topic=self.topic, partition=self.partition, segment=base,
                                  reason=check.index_problem or "index files differ")
                    return
                self.damaged = {"segment": base, "offset": check.damage_offset,
                                "reason": check.damage, "found_by": found_by}
                if len(self.voters) == 1:
                    log_event(logger, "replica_damaged_unrepairable", level=logging.ERROR,
                              topic=self.topic, partition=self.partition, segment=base,
                              offset=check.damage_offset, reason=check.damage)
                    return
                await self._repair_locked(base)
            except (RaftStateError, LogClosedError, OSError, QuorumStateCorruptError) as exc:
                self._go_offline(exc)
            except CorruptRecordError as exc:  # e.g. an index rebuild meeting a torn header
                log_event(logger, "replica_damage_check_failed", level=logging.WARNING,
                          topic=self.topic, partition=self.partition, segment=base,
                          reason=str(exc))

    async def _repair_locked(self, base: int) -> None:
        """Under the lock: step down, persist needs_catch_up, cut at the last good batch,
        restart the core from the log (module docstring "Damage")."""
        was_leader = self.is_leader
        if self.core.role is Role.LEADER:
            await self._execute(self.core.resign())  # EndQuorumEpoch: the others elect at once
        qs = self.core.quorum_state
        state = QuorumState(qs.epoch, qs.voted_for, qs.leader_id, True)
        # Ordering: the flag is durable before any data goes, so a crash in between finds the
        # replica flagged (and the damage still there for the next check).
        await trio.to_thread.run_sync(write_quorum_state, self.directory, state)
        await self._flush_idle.wait()
        log = self.log
        self.log_cuts += 1
        report = await trio.to_thread.run_sync(log.repair, base, limiter=self.disk.io)
        self.producers.clear()
        self._producers_dirty = True  # rebuilt (in a thread) before this replica's next write
        self._fail_waiters(RequestTimedOutError(
            f"{self.name}: leader stepped down to repair damaged storage; the write may still"
            " be committed by the next leader"))
        self._build_core(log, state)
        self._check_ticking()
        self.damaged = None
        if report is not None:
            self.repairs += 1
            self.observer.repaired(self, report)
            log_event(logger, "replica_repaired", level=logging.WARNING, topic=self.topic,
                      partition=self.partition, segment=report.segment, reason=report.reason,
                      bytes_dropped=report.bytes_dropped, offsets_lost=report.offsets_lost,
                      log_end_offset=report.log_end_offset)
        self._wake_watchers()
        if was_leader:
            self._on_leadership(self)

    async def reopen(self) -> bool:
        """An offline replica tries to come back: close what is left of its log and open it
        again from disk, as a restart would (recovery; needs_catch_up if recovery cut data;
        RESIGNED if it led), then rejoin. Returns whether it is online. Never raises: a failure
        (the disk still full, say) keeps it offline, and the manager tries again later."""
        if self.closed or self.offline_reason is None or self.core is None:
            return self.online
        async with self._lock:
            if self.closed or self.offline_reason is None:
                return self.online
            await self._flush_idle.wait()
            old = self.log
            self.log_cuts += 1  # recovery may cut the files the old log's slices read

            def reload() -> tuple[Log, QuorumState]:
                if old is not None:
                    try:
                        old.close()
                    except (OSError, RaftlogError):
                        old._abandon()  # a disk that fails the final flush: what a crash leaves
                return self._load()

            try:
                log, state = await trio.to_thread.run_sync(reload, limiter=self.disk.io)
            except (OSError, RaftlogError) as exc:
                self.reopen_failures += 1
                self.observer.reopened(self, False)
                log_event(logger, "replica_reopen_failed", level=logging.WARNING,
                          topic=self.topic, partition=self.partition, reason=str(exc),
                          attempts=self.reopen_failures)
                return False
            self.log = log
            self._producers_dirty = False
            self._build_core(log, state)
            self.offline_reason = self.offline_kind = self.offline_since_ms = None
            self.reopen_failures = 0
            self._check_ticking()
            self.observer.reopened(self, True)
            log_event(logger, "replica_reopened", level=logging.WARNING, topic=self.topic,
                      partition=self.partition, log_end_offset=log.log_end_offset,
                      needs_catch_up=state.needs_catch_up)
        self._wake_watchers()
        return True

    # ---------------------------------------------------------------- leader writes

    async def append_as_leader(self, records: bytes, *, acks: int) -> AppendResult:
        """Append a producer's batches. Returns AppendResult (waiter set for acks=all when
        the batch is not committed yet). Raises NotLeaderError, CorruptRecordError,
        MessageTooLargeError, InvalidRequestError, the producer-state errors, KafkaStorageError."""
        self.check_leader()
        if not records:
            raise CorruptRecordError("empty records")
        limit = self.topic_config.max_message_bytes
        headers: list[Header] = []
        for _, h in iter_headers(records, verify=False):
            if h.size > limit:
                raise batch_too_large(h.size, limit, self.topic)
            if h.is_control:
                raise InvalidRequestError("producers may not write control batches", field="records")
            headers.append(h)
            if len(headers) > MAX_PRODUCE_BATCHES:
                raise InvalidRequestError("too many batches in one produce", field="records")
        idem = [h for h in headers if h.producer_id >= 0]
        if idem and len(headers) != 1:
            raise InvalidRequestError(
                "an idempotent produce carries exactly one batch per partition", field="records"
            )
        # The lock as `_event` takes it: uncontended, without a pass through the scheduler (a
        # produce holding it across that yield made the fetches arriving meanwhile queue).
        await acquire_free(self._lock)
        try:
            self.check_leader()
            core = self.core
            if not core.may_accept_writes:
                raise NotLeaderError(leader_id=core.leader_id, epoch=core.epoch)  # transferring, or not durable
            try:
                if self._producers_dirty:
                    await trio.to_thread.run_sync(self._rebuild_producers, self.log,
                                                  limiter=self.disk.io)
                if idem:
                    h = idem[0]
                    dup = self.producers.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                               h.last_sequence)
                    if dup is not None:
                        waiter = None
                        if acks == -1 and dup.last_offset >= core.high_watermark:
                            waiter = self._add_waiter(dup.last_offset)
                        return AppendResult(dup.first_offset, dup.last_offset, True, waiter)
                first, last = await self._log_append(core.epoch, self.log.append, records,
                                                     leader_epoch=core.epoch, now_ms=self._clock_ms())
                if idem:
                    h = idem[0]
                    self.producers.record(h.producer_id, h.producer_epoch, h.base_sequence,
                                          h.last_sequence, first, last)
                waiter = self._add_waiter(last) if acks == -1 else None
                await self._execute(core.leader_appended(first, last))
            except StorageDamageError as exc:  # the producer-state rebuild met damage
                self.report_damage(exc, found_by="producer_state")
                raise KafkaStorageError(f"{self.name}: {exc}") from None
            except (RaftStateError, LogClosedError, OSError) as exc:
                self._go_offline(exc)
                raise KafkaStorageError(f"{self.name}: {exc}") from None
        finally:
            self._lock.release()
        return AppendResult(first, last, False, waiter)

    def _add_waiter(self, last_offset: int) -> AckWaiter:
        w = AckWaiter(last_offset)
        if last_offset < self.high_watermark:
            w.finish()
        else:
            self._ack_waiters.append(w)
        return w

    # ---------------------------------------------------------------- DeleteRecords

    async def delete_records(self, offset: int, deadline: float) -> int:
        """Kafka's DeleteRecords on the leader: raise the log start of every replica to
        `offset` (-1: the high watermark), answering once a majority holds it durably
        (raft.py "Log start"). Returns the low watermark then (>= offset; the log start
        when `offset` is at or below it already). Raises NotLeaderError, OffsetOutOfRangeError
        (below -1 or past the high watermark), RequestTimedOutError (deadline, or leadership
        lost meanwhile: the deletion may still happen), KafkaStorageError."""
        self.check_leader()
        async with self._lock:
            self.check_leader()
            core = self.core
            hw = core.high_watermark
            target = hw if offset == -1 else offset
            if target < 0 or target > hw:
                raise OffsetOutOfRangeError(
                    f"{self.name}: delete_records offset {offset} outside [0, {hw}] (the high "
                    "watermark)", offset=offset, log_start_offset=self.log.log_start_offset,
                    log_end_offset=hw)
            try:
                await self._execute(core.delete_records(target))
            except (RaftStateError, LogClosedError, OSError) as exc:
                self._go_offline(exc)
                raise KafkaStorageError(f"{self.name}: {exc}") from None
            if target <= core.log_start_offset and target <= core.low_watermark:
                return max(core.low_watermark, target)
            waiter = AckWaiter(target)
            self._delete_waiters.append(waiter)
        try:
            await waiter.wait(deadline)
        except RequestTimedOutError:
            raise RequestTimedOutError(
                f"{self.name}: log start {target} not on a majority in time; it may still be"
            ) from None
        finally:
            if waiter in self._delete_waiters:
                self._delete_waiters.remove(waiter)
        return max(self.core.low_watermark, target) if self.core is not None else target

    async def _advance_log_start(self, offset: int) -> None:
        # A writer call (one checkpoint fsync, whole-segment deletes): in a worker thread under
        # the replica's lock (the executor holds it), as retention's roll_and_retain runs.
        target = min(offset, self.log.log_end_offset)
        if target <= self.log.log_start_offset:
            return  # retention got there first
        gone = await trio.to_thread.run_sync(self.log.advance_start, target, limiter=self.disk.io)
        log_event(logger, "replica_log_start_advanced", topic=self.topic,
                  partition=self.partition, log_start_offset=target, deleted_segments=len(gone))

    def _on_low_watermark(self, low_watermark: int) -> None:
        keep = []
        for w in self._delete_waiters:
            if w.last_offset <= low_watermark:
                w.finish()
            else:
                keep.append(w)
        self._delete_waiters = keep

    # ---------------------------------------------------------------- consumer reads

    async def read_committed(self, fetch_offset: int, max_bytes: int) -> bytes:
        """Whole, CRC-checked batches from `fetch_offset` below the high watermark (leader
        only); cold or large reads in a worker thread. Raises NotLeaderError,
        KafkaStorageError (offline, or damage found: this replica repairs it from a peer),
        StorageDamageError (CORRUPT_MESSAGE with the offset: damage and no peer to repair
        from), OffsetOutOfRangeError."""
        self.check_leader()
        log = self.log
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            raise OffsetOutOfRangeError(offset=fetch_offset, log_start_offset=log.log_start_offset,
                                        log_end_offset=log.log_end_offset)
        hw = self.high_watermark
        if fetch_offset >= hw:
            return b""
        try:
            return await self._read(log, fetch_offset, max_bytes, max_offset=hw)
        except StorageDamageError as exc:
            raise self._damaged_read(exc) from None
        except LogClosedError as exc:
            self._go_offline(exc)
            raise

    def _damaged_read(self, exc: StorageDamageError) -> RaftlogError:
        """A consumer read found damage: report it, and the error to answer with (the damage
        itself, CORRUPT_MESSAGE with the offset, when no peer can repair it; else
        KAFKA_STORAGE_ERROR: this replica repairs itself and clients go elsewhere)."""
        self.report_damage(exc, found_by="fetch")
        if len(self.voters) == 1:
            return exc
        return KafkaStorageError(
            f"{self.name}: damaged batch at offset {exc.offset} on broker {self.replica_id};"
            " it is being repaired from another replica", offset=exc.offset)

    async def read_committed_slice(self, fetch_offset: int, max_bytes: int) -> FileSlice | None:
        """`read_committed` as a FileSlice of the segment file (zero-copy senders; the caller
        closes it), None where that returns b"". The range is checked as `read_committed`'s
        bytes are (never a slice over a bad batch); the check runs where `_read` would read.
        Same errors."""
        self.check_leader()
        log = self.log
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            raise OffsetOutOfRangeError(offset=fetch_offset, log_start_offset=log.log_start_offset,
                                        log_end_offset=log.log_end_offset)
        hw = self.high_watermark
        if fetch_offset >= hw:
            return None
        try:
            return await self._read(log, fetch_offset, max_bytes, max_offset=hw, zero_copy=True)
        except StorageDamageError as exc:
            raise self._damaged_read(exc) from None
        except LogClosedError as exc:
            self._go_offline(exc)
            raise

    async def _read(self, log: Log, offset: int, max_bytes: int, *,
                    max_offset: int | None = None, zero_copy: bool = False,
                    own_tail: bool = False) -> Any:
        """`log.read` inline when it touches only the cached tail and little of it, else in a
        worker thread (module docstring "Threads and disk"). With `zero_copy`,
        `log.read_slice`: it reads only the bytes still to be checked (once per byte), so it
        runs inline when it stays in the cached tail and those are few; else in a worker
        thread, which for a cold range also reads the rest into the page cache, so that
        the sender's sendfile on the trio thread does not wait on the disk either.
        `own_tail`: a read for a follower (partition/log.py "Integrity").
        Concurrency: a slice made in a worker thread is returned even when the caller is
        cancelled meanwhile (to_thread does not abandon the thread), so it is never lost
        unclosed."""
        behind = log.bytes_behind_end(offset)
        hot = behind <= log.config.hot_tail_bytes
        if zero_copy:
            if hot and log.unverified_bytes(offset, max_bytes, own_tail=own_tail) <= INLINE_READ_MAX_BYTES:
                return log.read_slice(offset, max_bytes, max_offset=max_offset, own_tail=own_tail)
            return await trio.to_thread.run_sync(
                partial(log.read_slice, offset, max_bytes, max_offset=max_offset, warm=not hot,
                        own_tail=own_tail),
                limiter=self.disk.io)
        if hot and min(behind, max_bytes) <= INLINE_READ_MAX_BYTES:
            return log.read(offset, max_bytes, max_offset=max_offset, own_tail=own_tail)
        return await trio.to_thread.run_sync(
            partial(log.read, offset, max_bytes, max_offset=max_offset, own_tail=own_tail),
            limiter=self.disk.io)

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Log.offset_for_timestamp in a worker thread (it may walk cold segments)."""
        return await trio.to_thread.run_sync(self.log.offset_for_timestamp, timestamp_ms,
                                             limiter=self.disk.io)

    async def max_timestamp_offset(self, high_watermark: int) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets -3 (KIP-734): the largest timestamp below the
        high watermark, at batch granularity (the last offset of the first batch holding it;
        control batches skipped); (-1, -1) for an empty log. In a worker thread: it reads
        every batch header of the log."""
        return await trio.to_thread.run_sync(_max_timestamp, self.log, high_watermark,
                                             limiter=self.disk.io)

    def watch(self, event: trio.Event) -> None:
        """Set `event` at the next high-watermark or leadership change (once)."""
        self._watchers.add(event)

    def unwatch(self, event: trio.Event) -> None:
        self._watchers.discard(event)

    def _wake_watchers(self) -> None:
        watchers, self._watchers = self._watchers, set()
        for ev in watchers:
            ev.set()

    # ---------------------------------------------------------------- the executor

    async def _execute(self, effects: list) -> None:
        queue = deque(effects)
        while queue:
            eff = queue.popleft()
            kind = type(eff)
            if kind is Send:
                await self._send(eff.to, eff.message)
            elif kind is Flush:
                self._start_flush(report=True)
            elif kind is HighWatermarkChanged:
                self._on_high_watermark(eff.high_watermark)
            elif kind is AppendReplicated:
                await self._append_replicated(eff)
            elif kind is PersistQuorumState:
                if self._nursery is not None:
                    await self.disk.quorum_states.write(self._nursery, self.directory, eff.state)
                else:
                    await trio.to_thread.run_sync(write_quorum_state, self.directory, eff.state)
                queue.extend(self.core.quorum_state_persisted(eff.version))
            elif kind is AppendControl:
                await self._append_control(eff)
            elif kind is LeadershipChanged:
                self._on_leadership_changed(eff)
            elif kind is TruncateTo:
                await self._flush_idle.wait()
                self.log_cuts += 1
                await trio.to_thread.run_sync(self.log.truncate_to, eff.offset,
                                              limiter=self.disk.io)
                if self.log.log_end_offset > eff.offset:
                    raise RaftStateError(f"truncate_to({eff.offset}) left {self.log.log_end_offset}")
                if self.producers.truncate(self.log.log_end_offset):
                    self._producers_dirty = True
                log_event(logger, "replica_truncated", topic=self.topic, partition=self.partition,
                          offset=eff.offset)
            elif kind is TruncateFully:
                await self._flush_idle.wait()
                self.log_cuts += 1
                await self._reset_log(eff.offset)
            elif kind is AdvanceLogStart:
                await self._advance_log_start(eff.offset)
            elif kind is LowWatermarkChanged:
                self._on_low_watermark(eff.low_watermark)
            else:
                raise RaftStateError(f"unknown effect {eff!r}")
        self._check_ticking()

    async def _send(self, to: int, message: Any) -> None:
        if type(message) is FetchResponse and message.read_offset is not None:
            slices = self.transport.file_slices
            # The leader's own tail goes unchecked (partition/log.py "Integrity"), but not to
            # a follower asking for the same offset again: it may have refused those bytes
            # (its CRC check), and this read finds the damage.
            again = self._served.get(to) == message.read_offset
            self._served[to] = message.read_offset
            try:
                records = await self._read(self.log, message.read_offset,
                                           self.settings.replica_fetch_max_bytes, zero_copy=slices,
                                           own_tail=not again)
            except OffsetOutOfRangeError:
                return  # the follower's fetch times out and comes again
            except StorageDamageError as exc:
                self.report_damage(exc, found_by="replica_fetch")
                return  # never send damaged bytes; the follower asks again
            if slices and records is not None:
                records = LogSlice(records, self)
            message = message.with_records(records, ())
        self.transport.send(self, to, message)

    async def _log_append(self, epoch: int, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A log append (a writer call, under the lock): on the trio thread, except the first
        one of an epoch the log does not know yet, which fsyncs the leader-epoch checkpoint
        before it writes its batch (partition/log.py "Epoch cache"): in a worker thread. After
        elections (hundreds at once when a node dies) those fsyncs on the loop had stalled
        every partition of the node (seen: seconds, under disk contention)."""
        if epoch > self.log.last_epoch():
            return await trio.to_thread.run_sync(partial(call, *args, **kwargs), limiter=self.disk.io)
        return call(*args, **kwargs)

    async def _append_control(self, eff: AppendControl) -> None:
        batch = control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=self._clock_ms(),
                              partition_leader_epoch=eff.epoch)
        first, _ = await self._log_append(eff.epoch, self.log.append, batch, leader_epoch=eff.epoch,
                                          now_ms=self._clock_ms())
        if first != eff.offset:
            raise RaftStateError(f"control batch landed at {first}, expected {eff.offset}")

    async def _append_replicated(self, eff: AppendReplicated) -> None:
        records = eff.records
        checked = records.headers if type(records) is CheckedBatches else None
        data = records.data if checked is not None else records
        last = checked[-1][1] if checked else None
        if last is None:
            last = next(reversed([h for _, h in iter_headers(data, verify=False)]), None)
        epoch = last.partition_leader_epoch if last is not None else -1
        try:
            end = await self._log_append(epoch, self.log.append_replicated, data,
                                         now_ms=self._clock_ms(), checked=checked)
        except (CorruptRecordError, MessageTooLargeError) as exc:
            # The core already counted these offsets: the mirror would be wrong from here on.
            raise RaftStateError(f"replicated batches refused by the log: {exc}") from exc
        if end != eff.end_offset:
            raise RaftStateError(f"replicated append ended at {end}, expected {eff.end_offset}")
        self.producers.apply_headers(h for _, h in (checked if checked is not None else
                                                    iter_headers(data, verify=False)))

    def _on_high_watermark(self, hw: int) -> None:
        self.high_watermark = hw
        waiters = self._ack_waiters
        while waiters and waiters[0].last_offset < hw:
            waiters.popleft().finish()
        self._wake_watchers()

    def _on_leadership_changed(self, eff: LeadershipChanged) -> None:
        was_leader = self.is_leader
        self.leader_epoch = eff.epoch
        self.leader_id = eff.leader_id
        self.is_leader = eff.leader_id == self.replica_id
        if was_leader and not self.is_leader:
            self._fail_waiters(RequestTimedOutError(
                f"{self.name}: leadership lost (epoch {eff.epoch}, leader {eff.leader_id}) "
                "before the write was committed; it may still be"
            ))  # fmt: skip
        log_event(logger, "partition_leader_changed", topic=self.topic, partition=self.partition,
                  epoch=eff.epoch, leader_id=eff.leader_id, replica_id=self.replica_id)
        self._wake_watchers()
        self._on_leadership(self)

    def _fail_waiters(self, error: Exception) -> None:
        waiters, self._ack_waiters = self._ack_waiters, deque()
        for w in waiters:
            w.finish(error)
        deletes, self._delete_waiters = self._delete_waiters, []
        for w in deletes:
            w.finish(error)

    # ---------------------------------------------------------------- flush

    def _start_flush(self, *, report: bool) -> None:
        if self._flushing:
            # Only an interval flush can be running here (the core asks one at a time).
            self._report_flush_after |= report
            return
        if self._nursery is None:
            raise RaftStateError("replica not attached: no nursery for flushes")
        self._flushing = True
        self._flush_idle = trio.Event()
        self._nursery.start_soon(self._flush_task, report)

    async def _flush_task(self, report: bool) -> None:
        offset = None
        core, log = self.core, self.log
        try:
            offset = await _in_thread(log.flush, trio.to_thread.current_default_thread_limiter())
        except (LogClosedError, OSError) as exc:
            if self.log is log:
                self._go_offline(exc)
        finally:
            self._flushing = False
            self._flush_idle.set()
        if offset is None:
            return
        if self.log is log and not self._lock.locked() and self.online:
            # The writer's snapshots (no await: no append or cut runs meanwhile); a fast
            # writer's recovery point and producer snapshot then trail by a bounded number
            # of bytes.
            point, pstate = self._checkpoints(log, RECOVERY_POINT_FLUSH_BYTES)
            if not await self._write_checkpoints(log, point, pstate):
                return
        if report and self.core is core:  # a repair or reopen meanwhile: the new core has its own
            await self._event(_flushed_if_core, core, offset)
        if self._report_flush_after and self.online:
            self._report_flush_after = False
            self._start_flush(report=True)

    # ---------------------------------------------------------------- state helpers

    def _rebuild_producers(self, log: Log) -> ProducerStateLoad:
        """Producer state from the log's producer snapshot and the batch headers after it, or
        from every batch header when no snapshot fits (headers only; Log.load_producer_state).
        Blocking: at open, or in a worker thread under the lock. Raises StorageDamageError
        (the state then stays dirty), LogClosedError."""
        self._producers_dirty = True  # until the walk completes
        self.producers_loaded = log.load_producer_state(self.producers)
        self._producers_dirty = False
        return self.producers_loaded

    async def _reset_log(self, offset: int) -> None:
        """TruncateFully: close, delete the log files, write the new log start, reopen.
        (Log has no truncate-fully-and-start-at call; its documented checkpoint does it.)"""
        old = self.log
        config = old.config
        directory = self.directory

        def work() -> Log:
            old.discard_producer_snapshots()  # durably gone before any segment goes
            old.close()
            for name in os.listdir(directory):
                if name not in _KEEP_ON_RESET:
                    os.unlink(directory / name)
            write_durably(directory, LOG_START_CHECKPOINT,
                          _checkpoint_bytes(LOG_START_CHECKPOINT, [str(offset)]))
            return Log.open(directory, config, now_ms=self._clock_ms())

        self.log = await trio.to_thread.run_sync(work)
        if (self.log.log_start_offset, self.log.log_end_offset) != (offset, offset):
            raise RaftStateError(
                f"log reset to {offset} gave [{self.log.log_start_offset}, "
                f"{self.log.log_end_offset})"
            )
        self.producers.clear()
        log_event(logger, "replica_log_reset", level=logging.WARNING, topic=self.topic,
                  partition=self.partition, log_start_offset=offset)

    def _abandon_core(self) -> None:
        """The core stops being used (offline, closed): release what other voters wait on
        here (raft.py `abandon`: parked fetches answered NOT_LEADER, a held fetch of ours
        replaced by one that is not held). Only sends; never blocks."""
        core = self.core
        if core is None or self.closed:
            return
        for eff in core.abandon():
            self.transport.send(self, eff.to, eff.message)

    def _go_offline(self, exc: BaseException) -> None:
        if self.offline_reason is not None:
            return
        self.offline_reason = f"{type(exc).__name__}: {exc}"
        self.offline_kind = offline_kind(exc)
        self.offline_since_ms = self._clock_ms()
        log_event(logger, "replica_offline", level=logging.ERROR, topic=self.topic,
                  partition=self.partition, reason=self.offline_reason, kind=self.offline_kind)
        self._abandon_core()
        self.observer.went_offline(self, self.offline_kind)
        self._fail_waiters(KafkaStorageError(f"{self.name} went offline: {exc}"))
        was_leader = self.is_leader
        self.is_leader = False
        self._wake_watchers()
        if was_leader:
            self._on_leadership(self)

    @property
    def role(self) -> Role | None:
        return None if self.core is None else self.core.role


def _max_timestamp(log: Log, high_watermark: int) -> tuple[int, int]:
    best_offset, best_ts = -1, -1
    for h in log.batch_headers():
        if h.base_offset >= high_watermark:
            break
        if not h.is_control and h.max_timestamp > best_ts:
            best_offset, best_ts = h.last_offset, h.max_timestamp
    return best_offset, best_ts


def _write_checkpoints(log: Log, point: ActiveCheckpoint | None,
                       pstate: ProducerCheckpoint | None) -> None:
    """Blocking: the recovery point, then the producer snapshot, each made durable."""
    if point is not None:
        log.write_recovery_point(point)
    if pstate is not None:
        log.write_producer_snapshot(pstate)


def _snapshot_and_close(log: Log, pstate: ProducerCheckpoint | None) -> None:
    """Blocking: the producer snapshot taken at close (if any), then `log.close()` in any case."""
    try:
        if pstate is not None:
            log.write_producer_snapshot(pstate)
    finally:
        log.close()


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _flushed_if_core(core: RaftCore, expected: RaftCore, offset: int) -> list:
    return core.flushed(offset) if core is expected else []


def _tick_answering(core: RaftCore) -> list:
    return core.tick(answer_parked=True)

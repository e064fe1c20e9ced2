"""One partition replica's shell: the Log, the pure RaftCore, the `quorum-state` file, the
effect executor, acks waiters and consumer long-poll watchers (DESIGN §4 "Replication").

The core decides, this module does the I/O, following raft.py's "contract with the shell":

* Events (tick, a message, a leader append, a finished flush, a transfer) go to the core one
  at a time under the replica's lock (`_event`), and the effects each returns are performed
  in order, all of them, before the lock is released. Most effects are synchronous (appends,
  reads, enqueueing a send); the executor awaits only to fsync the quorum state (in a worker
  thread) and to let a running flush finish before a truncation.
* PersistQuorumState: the `quorum-state` file, written durably (partition/quorum_state.py:
  its format, and the node's group commit of these writes); only then
  `quorum_state_persisted(version)`.
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

The replica is cut in four: this module (lifecycle, events, the effect executor) and its
base classes, which hold no state of their own: partition/replica_storage.py (open,
checkpoints, flush, maintenance, damage and reopen; "Threads and disk", "Recovery point",
"Producer snapshot", "Damage"), partition/replica_reads.py (consumer reads, long-poll
watchers) and partition/replica_writes.py (leader writes, DeleteRecords, ack waiters).

The replica's lock serialises the LOG'S WRITER (partition/log.py "Concurrency"): appends on
the trio thread, and the blocking writer calls in worker threads while the lock is held;
consumer reads and compaction's clean phase run beside it as readers. A busy lock never
stalls other partitions: `tick()` skips a replica whose lock is held and hands a tick that
starts an election to the replica's own task, and `deliver()` queues a message (bounded,
MAX_INBOX; oldest dropped, Raft retries) for a task that hands it to the core when the lock
frees.

Invariants:
* The log's writer calls run only under the replica's lock (on the trio thread or in a worker
  thread awaited under it); `log.flush()` runs in the flush thread; reads anywhere.
* Ack waiters are kept in offset order; all are answered (ok, timed out, or failed) by the
  time leadership or the replica ends.
* A replica that was leader restarts RESIGNED (the core does it from the quorum state); the
  high watermark restarts at 0 (never above the flushed offset).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any, Callable, Final, Protocol

import trio

from metadata.topic_config import TopicConfig
from partition.batch import (
    CONTROL_LEADER_CHANGE, CheckedBatches, control_batch, iter_headers, txn_marker,
)
from partition.errors import CorruptRecordError, LogClosedError, RaftStateError, StorageDamageError
from partition.checkpoint import (
    RECOVERY_POINT_CLOSE_MIN_BYTES,
)
from partition.log import Log
from partition.log_integrity import RepairReport
from partition.membership import membership_batch, scan_log
from partition.producer_snapshot import ProducerStateLoad
from partition.producer_state import ProducerStateManager
from partition.raft import (
    FIRST_EPOCH,
    AdvanceLogStart,
    AppendControl,
    AppendMembership,
    AppendReplicated,
    FetchResponse,
    Flush,
    HighWatermarkChanged,
    LeadershipChanged,
    LogState,
    LowWatermarkChanged,
    Membership,
    PersistQuorumState,
    QuorumState,
    RaftCore,
    Role,
    Send,
    TruncateFully,
    TruncateTo,
)
from partition.quorum_state import (
    QuorumStateCorruptError,
    write_quorum_state,
)
from partition.replica_settings import ReplicaSettings, fetch_wait_ticks, log_config_for, raft_config_for
from partition.replica_reads import ReplicaReads
from partition.replica_storage import (
    PARTITION_METADATA_FILE,
    DiskWork,
    ReplicaStorage,
    snapshot_and_close,
    offline_kind,
)
from partition.replica_writes import AckWaiter, ReplicaWrites
from partition.segment import FileSlice
from partition.telemetry import COMMIT_BUCKETS_S, LatencyBuckets
from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    KafkaStorageError,
    MessageTooLargeError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.base.eventlog import log_event

__all__ = [
    "PARTITION_METADATA_FILE",
    "DiskWork",
    "ReplicaObserver",
    "Replica",
    "AckWaiter",
    "Transport",
    "LogSlice",
    # Re-exported for partition/manager.py (its imports are another change's to move).
    "offline_kind",
    "ReplicaSettings",
    "fetch_wait_ticks",
    "log_config_for",
]

logger = logging.getLogger(__name__)

MAX_INBOX: Final = 1024  # Raft messages queued for a busy replica (oldest dropped)


class ReplicaObserver:
    """What a replica tells its manager about its storage (metrics, /health). No-ops here."""

    def damage_found(self, replica: "Replica", found_by: str, what: str) -> None: ...

    def index_rebuilt(self, replica: "Replica") -> None: ...

    def repaired(self, replica: "Replica", report: RepairReport) -> None: ...

    def went_offline(self, replica: "Replica", kind: str) -> None: ...

    def reopened(self, replica: "Replica", ok: bool) -> None: ...


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

    __slots__ = ("_piece", "offset", "length", "_replica", "_cuts")

    def __init__(self, piece: FileSlice, replica: "Replica") -> None:
        self._piece = piece
        self.offset = piece.offset
        self.length = piece.length
        self._replica = replica
        self._cuts = replica.log_cuts

    @property
    def fd(self) -> int:
        return self._piece.fd

    def __len__(self) -> int:
        return self.length

    def intact(self) -> bool:
        return self._replica.log_cuts == self._cuts and self._piece.intact()

    def close(self) -> None:
        """Idempotent."""
        self._piece.close()


# ----------------------------------------------------------------------------- replica


class Replica(ReplicaStorage, ReplicaReads, ReplicaWrites):
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
        learners: tuple[int, ...] = (),
    ):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.replica_id = replica_id
        self._voters = tuple(sorted(voters))  # the voters it is built with (the metadata's)
        self.learners = tuple(sorted(learners))  # joining by a move (partition/mover.py)
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
        self._flush_next: bool | None = None  # a flush asked by the flush task's own report (`report` of it)
        self._flush_reporting = False
        self._last_flush_ms = 0
        self._ack_waiters: deque[AckWaiter] = deque()
        self.commit_seconds = LatencyBuckets(COMMIT_BUCKETS_S)  # /metrics raftlog_produce_commit_seconds
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

    def open(self, fresh: bool = False, defer_sync: bool = False) -> None:
        """Blocking (run it in a worker thread before `attach`): write the partition
        metadata file, open and recover the log, read the quorum state, rebuild producer
        state from the batch headers, build the core. Raises OSError, QuorumStateCorruptError.
        `fresh`: a new directory, nothing fsynced (`_load`; partition/fresh_open.py).
        `defer_sync`: the log's recovery fsyncs may be left to the caller (`Log.open`;
        `self.log.sync_pending`), who makes the directory durable before `attach`."""
        log, state = self._load(fresh, defer_sync)
        self.log = log
        self.new_log = log.log_end_offset == 0 and state.epoch == 0
        self._build_core(log, state)

    def _build_core(self, log: Log, state: QuorumState) -> None:
        """A core from the durable quorum state and the log, as at a restart (raft.py
        contract 7): a replica that led restarts RESIGNED; the high watermark restarts at 0."""
        self.core = RaftCore(
            self.replica_id, self._voters, learners=self.learners, rng=self._rng, quorum_state=state,
            log_state=LogState(log.log_start_offset, log.log_end_offset, log.flushed_offset,
                               tuple(log.epochs()), scan_log(log, state.membership_scan_from)),
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
                        await trio.to_thread.run_sync(snapshot_and_close, log, pstate)
                    except (OSError, RaftlogError) as exc:
                        log_event(logger, "replica_close_failed", level=logging.WARNING,
                                  topic=self.topic, partition=self.partition, reason=str(exc))

    # ---------------------------------------------------------------- queries

    @property
    def voters(self) -> tuple[int, ...]:
        """The group's voters: the membership in force (moves change it), before the core is
        built the ones the replica was built with."""
        return self.core.voters if self.core is not None else self._voters

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

    async def begin_first_term(self, leader_id: int, leader_epoch: int) -> None:
        """A new replica learns its leader from the partition's record (raft.py "First term")."""
        if self.online:
            await self._event(RaftCore.begin_first_term, leader_id, leader_epoch)

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

    async def change_membership(self, membership: Membership) -> None:
        """Leader: append a membership change (partition/raft.py `change_membership`).
        Raises NotLeaderError, ReassignmentInProgressError, InvalidReplicaAssignmentError
        (refused: nothing was written), KafkaStorageError."""
        self.check_online()
        await self._event(RaftCore.change_membership, membership)  # a refusal raises through

    async def resign(self) -> None:
        if self.online:
            await self._event(RaftCore.resign)

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
            elif kind is AppendMembership:
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
            except KafkaStorageError:
                return  # out of descriptors (logged by _read): the follower asks again
            if slices and records is not None:
                records = LogSlice(records, self)
            message = message.with_records(records, ())
        self.transport.send(self, to, message)

    async def _append_control(self, eff: AppendControl | AppendMembership) -> None:
        if type(eff) is AppendMembership:
            batch = membership_batch(eff.membership, timestamp_ms=self._clock_ms(),
                                     partition_leader_epoch=eff.epoch)
        else:
            batch = control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=self._clock_ms(),
                                  partition_leader_epoch=eff.epoch)
        # On the trio thread: a new epoch's append costs no fsync (partition/log.py "Epoch
        # cache"; it used to fsync the epoch checkpoint, in a worker thread, per election).
        first, _ = self.log.append(batch, leader_epoch=eff.epoch, now_ms=self._clock_ms())
        if first != eff.offset:
            raise RaftStateError(f"control batch landed at {first}, expected {eff.offset}")

    async def _append_replicated(self, eff: AppendReplicated) -> None:
        records = eff.records
        checked = records.headers if type(records) is CheckedBatches else None
        data = records.data if checked is not None else records
        try:
            end = self.log.append_replicated(data, now_ms=self._clock_ms(), checked=checked)
        except (CorruptRecordError, MessageTooLargeError) as exc:
            # The core already counted these offsets: the mirror would be wrong from here on.
            raise RaftStateError(f"replicated batches refused by the log: {exc}") from exc
        if end != eff.end_offset:
            raise RaftStateError(f"replicated append ended at {end}, expected {eff.end_offset}")
        pairs = checked if checked is not None else list(iter_headers(data, verify=False))
        at = {h.base_offset: pos for pos, h in pairs if h.is_control}
        self.producers.apply_headers((h for _, h in pairs), lambda h: txn_marker(data, at[h.base_offset]))

    def _on_high_watermark(self, hw: int) -> None:
        self.high_watermark = hw
        waiters = self._ack_waiters
        if waiters and waiters[0].last_offset < hw:
            now = trio.current_time()
            while waiters and waiters[0].last_offset < hw:
                waiter = waiters.popleft()
                waiter.finish()
                self.commit_seconds.observe(now - waiter.started)
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
        # A new replica's first term (raft.py "First term") says so at debug: one line per
        # replica was 10,000 lines per node at a creation (py-spy: logging on the loop).
        first = self.new_log and eff.epoch == FIRST_EPOCH
        log_event(logger, "partition_leader_changed", level=logging.DEBUG if first else logging.INFO,
                  topic=self.topic, partition=self.partition,
                  epoch=eff.epoch, leader_id=eff.leader_id, replica_id=self.replica_id)
        self._wake_watchers()
        self._on_leadership(self)

    # ---------------------------------------------------------------- state helpers

    def _abandon_core(self) -> None:
        """The core stops being used (offline, closed): release what other voters wait on
        here (raft.py `abandon`: parked fetches answered NOT_LEADER, a held fetch of ours
        replaced by one that is not held). Only sends; never blocks."""
        core = self.core
        if core is None or self.closed:
            return
        for eff in core.abandon():
            self.transport.send(self, eff.to, eff.message)

    @property
    def role(self) -> Role | None:
        return None if self.core is None else self.core.role


def _tick_answering(core: RaftCore) -> list:
    return core.tick(answer_parked=True)

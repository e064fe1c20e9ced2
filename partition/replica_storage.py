"""A replica's storage work, the part of `partition.replica.Replica` that opens, checkpoints,
flushes, maintains, repairs and reopens its log (a base class of it, holding no state of its
own; the rules of partition/replica.py hold for it: the log's writer calls run under the
replica's lock).

Threads and disk (issue 13). Nothing blocking runs on the trio thread except appends into the
page cache and reads of the cached tail: every fsync, truncation, repair, segment check, cold
or large read (more than INLINE_READ_MAX_BYTES, or further back than the log's cached tail),
producer-state rebuild, ListOffsets walk, retention and compaction runs in a worker thread
through the node's `DiskWork` limiters (reads: partition/replica_reads.py).

Recovery point (issue 19): the maintenance pass (every few seconds) and a finished flush
write the log's offset-granular recovery point (partition/checkpoint.py) when the active
segment grew by RECOVERY_POINT_MIN_BYTES / RECOVERY_POINT_FLUSH_BYTES past it: the writer's
snapshot under the lock, its fsync and write in a worker thread (DiskWork.io). A restart then
CRC-scans only the bytes past it.

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

Damage (DESIGN §9 "Integrity"). Every read path checks CRCs (partition/log_integrity.py): the
leader's consumer reads (bytes or zero-copy slices) and replica-fetch answers, the follower's
check of what it fetched (partition/replication.py), recovery at open, and the manager's
scrubber. A read that finds damage never serves the bytes; it calls `report_damage`, and a
task then re-checks the whole segment under the lock. Index damage only: the indexes are
rebuilt. A bad batch, with other voters to repair from: the replica steps down if it leads,
persists needs_catch_up, cuts its log at the last good batch (`Log.repair`), and restarts its
core from the log as a restart would (RESIGNED if it led, high watermark 0), so it fetches
the rest from the leader and only votes or leads again once caught up (raft.py "Damaged
storage"). A single voter has nobody to repair from: it keeps its log, reports the damage in
`status()`, and answers reads of the bad batch CORRUPT_MESSAGE with its offset.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Final

import cbor2
import trio

from partition.cleaner import CleanAborted
from partition.errors import CorruptRecordError, LogClosedError, RaftStateError, StorageDamageError
from partition.checkpoint import (
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_FLUSH_BYTES,
    RECOVERY_POINT_MIN_BYTES,
    ActiveCheckpoint,
    encode_checkpoint,
)
from partition.log import Log
from partition.producer_snapshot import ProducerCheckpoint, ProducerStateLoad
from partition.raft import (
    QuorumState,
    RaftCore,
    Role,
)
from partition.file_io import read_or_none, write_durably, write_whole_file
from partition.quorum_state import (
    QUORUM_STATE_FILE,
    QuorumStateCommits,
    QuorumStateCorruptError,
    read_quorum_state,
    write_quorum_state,
)
from partition.segment import DEFAULT_MAX_OPEN_SEGMENTS, FileCache
from partition.replica_settings import log_config_for
from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    KafkaStorageError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.base.eventlog import log_event

__all__ = ['ReplicaStorage', 'DiskWork', 'offline_kind', 'PARTITION_METADATA_FILE', 'DISK_IO_THREADS']

logger = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
@dataclass
class DiskWork:
    """The bounded worker threads of one node's blocking disk work, shared by its replicas:
    `io` for cold reads, truncations, log resets, segment checks, repairs and reopens;
    `maintenance` for retention and compaction (one replica at a time); `quorum_states`, the
    group commit of quorum-state writes. And `files`, the open-file cache of their logs'
    sealed segments (partition/segment.py "Open files"), which the node sizes."""

    io: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(DISK_IO_THREADS))
    maintenance: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(1))
    quorum_states: QuorumStateCommits = field(default_factory=lambda: QuorumStateCommits())
    files: FileCache = field(default_factory=lambda: FileCache(DEFAULT_MAX_OPEN_SEGMENTS))



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


def _write_checkpoints(log: Log, point: ActiveCheckpoint | None,
                       pstate: ProducerCheckpoint | None) -> None:
    """Blocking: the recovery point, then the producer snapshot, each made durable."""
    if point is not None:
        log.write_recovery_point(point)
    if pstate is not None:
        log.write_producer_snapshot(pstate)


def snapshot_and_close(log: Log, pstate: ProducerCheckpoint | None) -> None:
    """Blocking: the producer snapshot taken at close (if any), then `log.close()` in any case."""
    try:
        if pstate is not None:
            log.write_producer_snapshot(pstate)
    finally:
        log.close()


def _flushed_if_core(core: RaftCore, expected: RaftCore, offset: int) -> list:
    return core.flushed(offset) if core is expected else []
_KEEP_ON_RESET = frozenset({QUORUM_STATE_FILE, PARTITION_METADATA_FILE})
DISK_IO_THREADS: Final = 8  # a node's worker threads for reads, truncations, checks, repairs
LOUD_PRODUCER_WALK_BATCHES: Final = 1_000  # an open that walked more headers says so


class ReplicaStorage:
    """Replica's storage work (module docstring)."""

    def _load(self, fresh: bool = False, defer_sync: bool = False) -> tuple[Log, QuorumState]:
        """Blocking: open (and recover) the log and read the quorum state, flagging
        needs_catch_up durably when recovery, or a header damaged in a trusted segment found
        by the producer-state rebuild, cut data (raft.py "Damaged storage"). `fresh`: make
        the directory (FileExistsError if it is there) and a new log in it, fsyncing nothing
        (`Log.open`'s `fresh`): the caller makes it durable before the replica serves."""
        d = self.directory
        meta = cbor2.dumps({"topic": self.topic, "partition": self.partition,
                            "topic_id": self.topic_id}, canonical=True)
        if fresh:
            d.mkdir(mode=0o700)
            write_whole_file(d / PARTITION_METADATA_FILE, meta)
        else:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            if read_or_none(d / PARTITION_METADATA_FILE) != meta:
                write_durably(d, PARTITION_METADATA_FILE, meta)
        now = self._clock_ms()
        log = Log.open(d, log_config_for(self.topic_config), now_ms=now, files=self.disk.files,
                       fresh=fresh, defer_sync=defer_sync)
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
                state = replace(state, needs_catch_up=True)
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
                # Retention and compaction stop at the last stable offset (issue 42): the log
                # start never passes the first offset of an open transaction (nor of one whose
                # marker is not committed yet), and no record of one is ever compacted.
                hw = self.producers.txns.last_stable_offset(self.core.high_watermark)
                if self._producers_dirty:  # the open transactions are known after the rebuild: wait
                    hw = log.log_start_offset
                if log.roll_or_retention_due(now, high_watermark=hw):
                    done = await trio.to_thread.run_sync(
                        partial(log.roll_and_retain, now, high_watermark=hw),
                        limiter=self.disk.maintenance)
                else:  # the usual case: no worker-thread hand-off for nothing
                    done = {"rolled": False, "deleted_segments": [], "log_start_offset": before}
                if log.log_start_offset > before:
                    await self._execute(self.core.log_start_advanced(log.log_start_offset))
                    self.producers.txns.drop_below(log.log_start_offset)
                plan = log.plan_compaction(now, high_watermark=hw)
                aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in self.producers.txns.aborted]
            except (RaftStateError, LogClosedError, OSError) as exc:
                self._go_offline(exc)
                return None
        done.update(compacted_segments=[], records_removed=0, bytes_reclaimed=0)
        if plan is None:
            return done
        self._cleaning = True
        try:
            await trio.to_thread.run_sync(
                partial(log.clean_planned, plan, should_stop=lambda: self.closed or not self.online,
                        aborted=aborted),
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
        state = replace(self.core.quorum_state, needs_catch_up=True)
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
            log.set_config(log_config_for(self.topic_config))  # a change made while it reopened
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

    def _start_flush(self, *, report: bool) -> None:
        if self._flushing:
            # Only an interval flush can be running here (the core asks one at a time).
            self._report_flush_after |= report
            return
        if self._nursery is None:
            raise RaftStateError("replica not attached: no nursery for flushes")
        self._flushing = True
        self._flush_idle = trio.Event()
        if self._flush_reporting:
            # Asked by the flush task's own report (the core's next Flush, appends having come
            # meanwhile): that task runs it next, instead of a new task per group commit.
            self._flush_next = report
            return
        self._nursery.start_soon(self._flush_task, report)

    async def _flush_task(self, report: bool) -> None:
        """Flushes one after another while each one's report asks the next (`_start_flush`)."""
        try:
            while True:
                self._flush_next = None
                await self._flush_once(report)
                if self._flush_next is None:
                    return
                report = self._flush_next
        except BaseException:
            if self._flush_next is not None:  # asked, and will not run: nobody waits for it forever
                self._flush_next = None
                self._flushing = False
                self._flush_idle.set()
            raise

    async def _flush_once(self, report: bool) -> None:
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
            self._flush_reporting = True
            try:
                await self._event(_flushed_if_core, core, offset)
            finally:
                self._flush_reporting = False
        if self._report_flush_after and self.online:
            self._report_flush_after = False
            self._start_flush(report=True)

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
                          encode_checkpoint(LOG_START_CHECKPOINT, [str(offset)]))
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

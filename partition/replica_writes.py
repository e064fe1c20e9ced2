"""A replica's leader writes, the part of `partition.replica.Replica` that appends a
producer's batches and moves the log start for DeleteRecords (a base class of it, holding no
state of its own), with the acks=all waiters they return.

Leader writes (`append_as_leader`): the header of every batch is read (no record decoding),
its size checked against max_message_bytes, idempotent batches checked against the producer
state (a retry answers with its original offsets, even one appended by an earlier leader:
the state is rebuilt from the log's headers at open and kept in step by every append and
truncation); then `log.append` (which checks the CRC and stamps offsets and epoch) and
`core.leader_appended`. acks=all waits on an ack waiter released when the high watermark
passes the batch's last offset; losing leadership fails the waiters with REQUEST_TIMED_OUT
(the outcome is unknown: the batch may still commit under the next leader).

Ack waiters are kept in offset order; all are answered (ok, timed out, or failed) by the time
leadership or the replica ends.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

import trio

from collections.abc import Awaitable, Callable

from partition.batch import CONTROL_BIT, CheckedBatches, Header, iter_headers, txn_marker_batch
from partition.validator import batch_too_large
from partition.errors import CorruptRecordError, LogClosedError, RaftStateError, StorageDamageError
from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from raftlog.base.eventlog import log_event

__all__ = ['ReplicaWrites', 'AckWaiter', 'AppendResult', 'MAX_PRODUCE_BATCHES', 'TxnVerifier']

logger = logging.getLogger(__name__)

class AckWaiter:
    """One acks=all produce waiting for the high watermark to pass `last_offset` (since
    `started`, trio time: raftlog_produce_commit_seconds)."""

    __slots__ = ("last_offset", "event", "error", "started")

    def __init__(self, last_offset: int):
        self.last_offset = last_offset
        self.started = trio.current_time()
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


# KIP-890 part 1: asks the transaction coordinator whether (producer id, epoch) has this
# partition in its ongoing transaction; raises the coordinator's error if not. Returns what the
# third argument (the producer's last marker offset here) was when the question its answer
# holds for was sent (TxnVerifierPort in partition/port.py).
TxnVerifier = Callable[[int, int, Callable[[], int]], Awaitable[int]]

MAX_PRODUCE_BATCHES = 10_000  # batches in one partition's `records` of one produce request


class ReplicaWrites:
    """Replica's leader writes (module docstring)."""

    async def append_as_leader(self, records: bytes | CheckedBatches, *, acks: int,
                               verify_txn: TxnVerifier | None = None, coordinator: bool = False) -> AppendResult:
        """Append a producer's batches. Returns AppendResult (waiter set for acks=all when
        the batch is not committed yet). `records`: the batches, or (batch.CheckedBatches) the
        batches with the headers the validator read and whose CRC-32Cs it checked, which the
        append then neither reads nor checks again (CRC-32C once per byte). A transactional batch of a producer with no
        transaction of its epoch open here is first checked with `verify_txn(producer_id, epoch,
        marker_offset)` (KIP-890: the coordinator says whether this partition is in its ongoing
        transaction; it raises INVALID_TXN_STATE, PRODUCER_FENCED, ...); a marker of the producer
        landing here after the question was sent refuses the batch (`_check_verification`). Raises NotLeaderError, CorruptRecordError,
        MessageTooLargeError, InvalidRequestError, the producer-state errors, KafkaStorageError,
        what `verify_txn` raises. `coordinator`: a coordinator's own append to its internal topic
        (Kafka's AppendOrigin.COORDINATOR: the group coordinator's transactional offsets): no
        verification and no sequence check, only the producer epoch's (a fenced epoch is
        INVALID_PRODUCER_EPOCH)."""
        self.check_leader()
        checked = None
        if type(records) is CheckedBatches:
            checked, records = records.headers, records.data
        if not records:
            raise CorruptRecordError("empty records")
        limit = self.topic_config.max_message_bytes
        headers: list[Header] = []
        for _, h in (checked if checked is not None else iter_headers(records, verify=False)):
            if h.size > limit:
                raise batch_too_large(h.size, limit, self.topic)
            if h.attributes & CONTROL_BIT:
                raise InvalidRequestError("producers may not write control batches", field="records")
            headers.append(h)
            if len(headers) > MAX_PRODUCE_BATCHES:
                raise InvalidRequestError("too many batches in one produce", field="records")
        idem = [h for h in headers if h.producer_id >= 0]
        if idem and len(headers) != 1:
            raise InvalidRequestError(
                "an idempotent produce carries exactly one batch per partition", field="records"
            )
        txn = idem[0] if idem and idem[0].is_transactional else None
        verified_at = None  # the producer's last marker offset when its verification began
        if txn is not None and not coordinator and not self.producers.in_txn(txn.producer_id, txn.producer_epoch):
            if verify_txn is None:
                raise InvalidTxnStateError(
                    f"{self.name}: transactional batch of producer {txn.producer_id} outside a transaction")
            producer_id = txn.producer_id
            verified_at = await verify_txn(producer_id, txn.producer_epoch,
                                           lambda: self.producers.marker_offset(producer_id))
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
                if idem and coordinator:
                    self.producers.check_epoch(idem[0].producer_id, idem[0].producer_epoch)
                elif idem:
                    h = idem[0]
                    if verified_at is not None:
                        self._check_verification(h.producer_id, h.producer_epoch, verified_at)
                    dup = self.producers.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                               h.last_sequence, transactional=txn is not None)
                    if dup is not None:
                        waiter = None
                        if acks == -1 and dup.last_offset >= core.high_watermark:
                            waiter = self._add_waiter(dup.last_offset)
                        return AppendResult(dup.first_offset, dup.last_offset, True, waiter)
                first, last = self.log.append(records, leader_epoch=core.epoch, now_ms=self._clock_ms(),
                                              checked=checked)
                if idem:
                    h = idem[0]
                    self.producers.record(h.producer_id, h.producer_epoch, h.base_sequence,
                                          h.last_sequence, first, last)
                    if txn is not None:
                        self.producers.txns.begin(h.producer_id, first)
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

    def _check_verification(self, producer_id: int, producer_epoch: int, verified_at: int) -> None:
        """Kafka's verification guard (KIP-890 part 1): a marker of the producer appended here
        while its batch was being verified ended the transaction the verification was about,
        so, unless a transaction of its epoch is open here again, the batch is a late one of
        an ended transaction: INVALID_TXN_STATE, nothing written."""
        if self.producers.marker_offset(producer_id) != verified_at and not self.producers.in_txn(
                producer_id, producer_epoch):
            raise InvalidTxnStateError(
                f"{self.name}: producer {producer_id}'s transaction ended here while its batch was verified")

    async def append_marker(self, producer_id: int, producer_epoch: int, *, commit: bool,
                            coordinator_epoch: int) -> AckWaiter:
        """Append the COMMIT/ABORT marker of `producer_id`'s transaction (the coordinator's
        WriteTxnMarkers) and return the waiter of its commit. A marker for a producer with no
        transaction open here is written too (Kafka does: it fences older epochs). Raises
        NotLeaderError, InvalidProducerEpochError (an epoch below the producer's here: a
        stale coordinator), TransactionCoordinatorFencedError (a coordinator epoch below the
        one of the producer's last marker here: a coordinator that has lost its
        `__transaction_state` partition), KafkaStorageError."""
        self.check_leader()
        await acquire_free(self._lock)
        try:
            self.check_leader()
            core = self.core
            if not core.may_accept_writes:
                raise NotLeaderError(leader_id=core.leader_id, epoch=core.epoch)
            try:
                if self._producers_dirty:
                    await trio.to_thread.run_sync(self._rebuild_producers, self.log, limiter=self.disk.io)
                self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
                batch = txn_marker_batch(producer_id, producer_epoch, commit=commit,
                                         coordinator_epoch=coordinator_epoch, timestamp_ms=self._clock_ms())
                first, last = self.log.append(batch, leader_epoch=core.epoch, now_ms=self._clock_ms())
                self.producers.marker(producer_id, producer_epoch, first, commit=commit,
                                      coordinator_epoch=coordinator_epoch)
                waiter = self._add_waiter(last)
                await self._execute(core.leader_appended(first, last))
            except StorageDamageError as exc:
                self.report_damage(exc, found_by="producer_state")
                raise KafkaStorageError(f"{self.name}: {exc}") from None
            except (RaftStateError, LogClosedError, OSError) as exc:
                self._go_offline(exc)
                raise KafkaStorageError(f"{self.name}: {exc}") from None
        finally:
            self._lock.release()
        self._wake_watchers()
        return waiter

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: read_committed readers see offsets below it (producer_txn.py)."""
        return self.producers.txns.last_stable_offset(self.high_watermark)

    def _add_waiter(self, last_offset: int) -> AckWaiter:
        w = AckWaiter(last_offset)
        if last_offset < self.high_watermark:
            w.finish()
        else:
            self._ack_waiters.append(w)
        return w

    async def delete_records(self, offset: int, deadline: float) -> int:
        """Kafka's DeleteRecords on the leader: raise the log start of every replica to
        `offset` (-1: the high watermark), answering once a majority holds it durably
        (raft.py "Log start"). Returns the low watermark then (>= offset; the log start
        when `offset` is at or below it already). Raises NotLeaderError, OffsetOutOfRangeError
        (below -1 or past the high watermark), RequestTimedOutError (deadline, or leadership
        lost meanwhile: the deletion may still happen), KafkaStorageError.
        A transaction open below `offset` is first given until its marker is committed (at most
        half the request's time left, so the deletion still fits in the rest): Kafka cuts
        through it, raftlog never does (issue 42), and a client that deletes right after
        commit_transaction() returned is ahead of the markers, which the coordinator writes
        after answering (librdkafka 0103)."""
        self.check_leader()
        await self._wait_txns_closed_below(offset, deadline)
        async with self._lock:
            self.check_leader()
            core = self.core
            hw = core.high_watermark
            target = hw if offset == -1 else offset
            open_at = self.producers.txns.first_open_offset()
            if open_at is not None and 0 <= open_at < target <= hw:
                target = open_at  # never cut an open transaction in half (issue 42)
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

    async def _wait_txns_closed_below(self, offset: int, deadline: float) -> None:
        """Until no transaction open or unstable starts below `offset` (-1: the high
        watermark), this replica stops leading, or the bounded wait ends (delete_records)."""
        now = trio.current_time()
        with trio.move_on_at(now + (deadline - now) / 2):
            while self.is_leader and self.core is not None:
                open_at = self.producers.txns.first_open_offset()
                target = self.core.high_watermark if offset == -1 else offset
                if open_at is None or not 0 <= open_at < target:
                    return
                event = trio.Event()
                self.watch(event)  # the marker's commit moves the high watermark
                try:
                    await event.wait()
                finally:
                    self.unwatch(event)

    async def _advance_log_start(self, offset: int) -> None:
        # A writer call (one checkpoint fsync, whole-segment deletes): in a worker thread under
        # the replica's lock (the executor holds it), as retention's roll_and_retain runs.
        target = min(offset, self.log.log_end_offset)
        if target <= self.log.log_start_offset:
            return  # retention got there first
        gone = await trio.to_thread.run_sync(self.log.advance_start, target, limiter=self.disk.io)
        self.producers.txns.drop_below(target)
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

    def _fail_waiters(self, error: Exception) -> None:
        waiters, self._ack_waiters = self._ack_waiters, deque()
        for w in waiters:
            w.finish(error)
        deletes, self._delete_waiters = self._delete_waiters, []
        for w in deletes:
            w.finish(error)

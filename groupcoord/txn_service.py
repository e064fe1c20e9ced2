"""The transaction coordinator's trio shell (a NodeService): one pure `TxnCoordinator`
(txn_coordinator.py) driven on the node's trio thread, its state in `__transaction_state`
through the coordinators' partition port, as the group coordinator's is in `__consumer_offsets`
(service.py, whose contract this follows).

    TxnCoordinatorService(settings, metadata, topics, *, new_producer_id, write_markers=..., clock_ms=...)

`settings` (settings.py) is built by the node from its config; `metadata` is a
`TxnMetadataView` and `topics` the node's `InternalTopics` (internal_topic.py, implemented by
partition/internal_topic.py), None on a node that is not a broker; `new_producer_id()` gives
a fresh producer id (the node passes the partition port's `init_producer_id`).

* Calls into the core are synchronous, between trio checkpoints (the core needs no lock).
* Writes: a `Write` becomes a one-record RecordBatch v2 appended with acks=all to the local
  leader partition of `__transaction_state-<p>` (`InternalPartition.append`); once committed (within COMMIT_TIMEOUT_S) the
  core applies it (`on_written`) and the request is answered; a failed append changes
  nothing (`on_write_failed`) and the request gets its error. At most MAX_WRITES_IN_FLIGHT
  writes at once (more: COORDINATOR_NOT_AVAILABLE, retriable).
* Markers: a prepared transaction's `Markers` go to `write_markers` (injected by the node,
  raftlog/node/txn_link.py: COMMIT/ABORT control batches to every partition of the
  transaction, each on its leader), then `on_markers_written` writes the Complete state.
  Their coordinator epoch is the leader epoch of the id's `__transaction_state` partition here
  (Kafka's coordinatorEpoch), so a coordinator that lost the partition is fenced by each
  partition that saw the newer one's markers (TRANSACTION_COORDINATOR_FENCED).
  A failure is retried every MARKER_RETRY_S until it succeeds or the partition moves.
* Ownership: every LEADERSHIP_CHECK_S and on each leadership change of a local
  `__transaction_state` partition (partition_load.follow_leadership), a partition newly led
  here is replayed (partition_load.replay_partition, the group coordinator's loop: after its
  high watermark reaches the log end seen at election, so every earlier leader's write is in)
  and served; prepared transactions found there have their markers written again. Ids of a
  partition being replayed answer COORDINATOR_LOAD_IN_PROGRESS, of one not led here
  NOT_COORDINATOR.
* Timer: one task sleeps until the core's `next_deadline_ms` and aborts timed-out
  transactions (`tick`), at most once per `abort_scan_interval_ms` (Kafka's
  transaction.abort.timed.out.transaction.cleanup.interval.ms scan: a transaction outlives its
  timeout by up to that, as on Kafka; KafkaJS's tests give a 100 ms timeout and expect it).

The port (txn_port.py `TxnPort`; native adapter raftlog/node/native_txn.py, guard
raftlog/node/guarded_txn.py): find_txn_coordinator (any node: the leader of the id's partition;
asks the controller to create `__transaction_state` on first use), init_txn_producer_id,
add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit (the group
coordinator's), describe_transactions, list_transactions (this node's ids: clients ask every
broker).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import trio

from groupcoord.context import append_error
from groupcoord.internal_topic import InternalPartition, InternalTopics, TxnMetadataView
from groupcoord.partition_load import follow_leadership, replay_partition
from groupcoord.port import Coordinator, PartitionOutcome
from groupcoord.settings import TxnCoordinatorSettings
from groupcoord.txn_coordinator import NEED_PRODUCER_ID, Markers, TxnCoordinator, TxnResult, Write
from metadata.image import MetadataImage
from groupcoord.txn_port import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    DescribedTxn,
    EndTxn,
    InitTxnProducerId,
    ListedTxn,
    ListTransactions,
    ProducerEpoch,
    TxnListing,
    TxnOffsetCommit,
    TxnPartitionsAdded,
)
from groupcoord.txn_records import txn_record
from partition.batch import BatchBuilder
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotCoordinatorError,
    RaftlogError,
    RequestTimedOutError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Request
from raftlog.base.topics import TRANSACTION_STATE_TOPIC, busy_row

__all__ = ["TxnCoordinatorService"]

logger = logging.getLogger(__name__)

LEADERSHIP_CHECK_S: Final = 0.5
COMMIT_TIMEOUT_S: Final = 5.0
MARKER_RETRY_S: Final = 1.0
MAX_WRITES_IN_FLIGHT: Final = 1024
MAX_IDS: Final = 1000               # per describe_transactions request
MAX_PARTITIONS: Final = 10_000      # per add_partitions_to_txn request
ENSURE_TOPIC_TIMEOUT_S: Final = 2.0

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]
MarkerWriter = Callable[[Markers], Awaitable[None]]


class ProducerIdentity(Protocol):
    """What the coordinator reads of partition.port's ProducerIdentity."""

    @property
    def producer_id(self) -> int: ...


ProducerIdSource = Callable[[], Awaitable[ProducerIdentity]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


async def _no_markers(markers: Markers) -> None:
    """Until the log stores transactional batches there is nothing to mark."""


class TxnOffsetsPort(Protocol):
    """What the service calls of the group coordinator's TxnOffsets (txn_offsets.py)."""

    async def commit(self, request: TxnOffsetCommit) -> None: ...


class TxnCoordinatorService:
    """See the module docstring. Implements `TxnPort` (txn_port.py). `topics` is None on a node that is not a broker: then only
    find_txn_coordinator is useful."""

    name = "transactions"

    def __init__(self, settings: TxnCoordinatorSettings, metadata: TxnMetadataView, topics: InternalTopics | None,
                 *, new_producer_id: ProducerIdSource, write_markers: MarkerWriter = _no_markers,
                 clock_ms: Callable[[], int] = _wall_ms):
        self.node_id = settings.node_id
        self.metadata = metadata
        self.topics = topics
        self._write_markers = write_markers
        self._new_producer_id = new_producer_id
        self._clock_ms = clock_ms
        self.core = TxnCoordinator(settings.coordinator)
        self._abort_scan_interval_ms = settings.abort_scan_interval_ms
        self._owned: dict[int, int] = {}  # partition -> leader epoch loaded / loading
        # partition -> the number of its current load: a write or marker task begun under an
        # earlier load of the partition never touches the state of a later one
        self._load_gen: dict[int, int] = {}
        self._loads_started = 0
        self._writes = trio.CapacityLimiter(MAX_WRITES_IN_FLIGHT)
        self._timer_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        # TxnOffsetCommit is the group coordinator's (groupcoord/txn_offsets.py; set by the node).
        self.txn_offsets: TxnOffsetsPort | None = None
        # The client ops are the port's (TxnPort): their native adapter is raftlog/node/native_txn.py.
        self.client_handlers: Mapping[str, Handler] = {}
        self.peer_handlers: Mapping[str, Handler] = {}

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._marker_retry_loop)
                if self.topics is not None:
                    nursery.start_soon(follow_leadership, self.topics, TRANSACTION_STATE_TOPIC,
                                       self._check_leadership, LEADERSHIP_CHECK_S)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for p in list(self._owned):
                del self._owned[p]
                self.core.unload(p)
            self._load_gen.clear()

    def on_image(self, image: MetadataImage) -> None:
        """Nothing to do: ownership follows the local replicas."""

    def health(self) -> dict[str, Any]:
        return {"ok": True, **self.core.health()}

    def busy_partitions(self) -> list[dict[str, Any]]:
        """The `__transaction_state` partitions a replica move must not take now, as the
        broker heartbeat carries them (TxnCoordinator.busy_partitions)."""
        return [busy_row(TRANSACTION_STATE_TOPIC, p, exc) for p, exc in self.core.busy_partitions().items()]

    async def drain(self) -> None:
        """Nothing to hand over: ownership follows `__transaction_state` leadership."""

    # ------------------------------------------------------------------ results

    async def _settle(self, result: TxnResult) -> Any:
        """Carry out `result` (its write, then its markers, in tasks) and give its response
        (raising its error); a write is awaited, since the answer follows its commit."""
        if result.write is not None:
            result = await self._commit(result.write)
        if result.markers is not None:
            self._spawn_markers(result.markers)
        self._timer_changed.set()
        response = result.response
        if isinstance(response, RaftlogError):
            raise response
        return response

    async def _commit(self, write: Write) -> TxnResult:
        token = object()
        try:
            self._writes.acquire_on_behalf_of_nowait(token)
        except trio.WouldBlock:
            return self.core.on_write_failed(write, CoordinatorNotAvailableError("too many transaction writes in flight"))
        p = write.partition
        gen = self._load_gen.get(p)
        try:
            part = None if self.topics is None else self.topics.partition(TRANSACTION_STATE_TOPIC, p)
            if part is None or not part.is_leader:
                return self.core.on_write_failed(write, NotCoordinatorError("not the leader of the partition"))
            key, value = txn_record(write.metadata)
            builder = BatchBuilder()
            builder.append(value, key, timestamp_ms=self._clock_ms())
            try:
                appended = await part.append(builder.build())
            except RaftlogError as exc:  # nothing appended
                return self._failed(write, gen, append_error(exc, TRANSACTION_STATE_TOPIC))
            except BaseException:
                self._failed(write, gen, RequestTimedOutError("cancelled"))
                raise
            try:
                await appended.wait_committed(trio.current_time() + COMMIT_TIMEOUT_S)
            except BaseException as exc:
                # The record is in the log, its fate unknown: it may yet commit (or a new leader
                # cut it). The state follows the log, never a guess: the partition is replayed
                # (after its high watermark passes the record), its ids answer
                # COORDINATOR_LOAD_IN_PROGRESS meanwhile, and this request COORDINATOR_NOT_AVAILABLE
                # (Kafka's answer to a timed-out append; retriable): a client that retries its
                # EndTxn gets the outcome the log holds, never INVALID_TXN_STATE for a commit
                # that went through.
                if self._load_gen.get(p) == gen:
                    self.core.on_write_failed(write, RequestTimedOutError("outcome unknown"))
                    self._reload(p, f"a write's outcome is unknown: {exc!r}")
                if not isinstance(exc, RaftlogError):
                    raise
                return TxnResult(response=append_error(exc, TRANSACTION_STATE_TOPIC))
            if self._load_gen.get(p) != gen:  # replayed meanwhile: the replay has this record
                return TxnResult(response=CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC}-{p} was reloaded"))
            return self.core.on_written(write, self._clock_ms())
        finally:
            self._writes.release_on_behalf_of(token)

    def _failed(self, write: Write, gen: int | None, error: RaftlogError) -> TxnResult:
        """A write that changed nothing: the core forgets it unless its partition was reloaded
        meanwhile (then the core's state of the id is the replay's)."""
        if self._load_gen.get(write.partition) != gen:
            return TxnResult(response=error)
        return self.core.on_write_failed(write, error)

    def _reload(self, p: int, reason: str) -> None:
        """Forget `p`'s state and replay it from the log (if it is still led here)."""
        if self._owned.pop(p, None) is None:
            return
        self._load_gen.pop(p, None)
        self.core.unload(p)
        log_event(logger, "txn_partition_reload", level=logging.WARNING, partition=p, reason=reason)
        if self._nursery is not None and self.topics is not None:
            self._check_leadership()

    def _spawn_markers(self, markers: Markers) -> None:
        if self._nursery is None:
            self.core.on_markers_failed(markers.transactional_id)
            return
        p = self.core.partition_for(markers.transactional_id)
        gen = self._load_gen.get(p)
        # Kafka's coordinator epoch: the partition's leader epoch this load serves under.
        markers = dataclasses.replace(markers, coordinator_epoch=max(0, self._owned.get(p, 0)))
        self._nursery.start_soon(self._send_markers, markers, gen)

    async def _send_markers(self, markers: Markers, gen: int | None) -> None:
        p = self.core.partition_for(markers.transactional_id)
        try:
            await self._write_markers(markers)
        except RaftlogError as exc:
            log_event(logger, "txn_markers_failed", level=logging.WARNING, transactional_id=markers.transactional_id,
                      reason=str(exc))
            if self._load_gen.get(p) == gen:
                self.core.on_markers_failed(markers.transactional_id)
            return
        if self._load_gen.get(p) != gen:
            return  # the partition was replayed meanwhile: that load sends the markers it finds
        try:
            await self._settle(self.core.on_markers_written(markers.transactional_id, self._clock_ms()))
        except RaftlogError as exc:  # the Complete write failed: the next leader's replay resends
            log_event(logger, "txn_complete_failed", level=logging.WARNING,
                      transactional_id=markers.transactional_id, reason=str(exc))

    async def _marker_retry_loop(self) -> None:
        while True:
            await trio.sleep(MARKER_RETRY_S)
            for markers in self.core.pending_markers():
                self.core.claim_markers(markers.transactional_id)
                self._spawn_markers(markers)

    # ------------------------------------------------------------------ timer

    async def _timer_loop(self) -> None:
        next_scan_ms = self._clock_ms() + self._abort_scan_interval_ms
        while True:
            self._timer_changed = trio.Event()
            deadline = self.core.next_deadline_ms()
            if deadline is None:
                await self._timer_changed.wait()
                continue
            deadline = max(deadline, next_scan_ms)
            delay_s = (deadline - self._clock_ms()) / 1000
            if delay_s > 0:
                with trio.move_on_after(delay_s):
                    await self._timer_changed.wait()
                continue
            assert self._nursery is not None
            now_ms = self._clock_ms()
            next_scan_ms = now_ms + self._abort_scan_interval_ms
            for result in self.core.tick(now_ms):
                self._nursery.start_soon(self._settle_quietly, result)
            await trio.sleep(0)

    async def _settle_quietly(self, result: TxnResult) -> None:
        try:
            await self._settle(result)
        except RaftlogError as exc:
            log_event(logger, "txn_timeout_abort_failed", level=logging.WARNING, reason=str(exc))

    # ------------------------------------------------------------------ ownership

    def _check_leadership(self) -> None:
        assert self.topics is not None
        for p in range(self.core.config.partitions):
            r = self.topics.partition(TRANSACTION_STATE_TOPIC, p)
            current = self._owned.get(p)
            if r is not None and r.is_leader:
                if current == r.leader_epoch:
                    continue
                self._owned[p] = r.leader_epoch
                self._loads_started += 1
                self._load_gen[p] = self._loads_started
                self.core.begin_load(p)
                assert self._nursery is not None
                self._nursery.start_soon(self._load, p, r, r.leader_epoch, self._loads_started)
            elif current is not None:
                del self._owned[p]
                self._load_gen.pop(p, None)
                self.core.unload(p)
                log_event(logger, "txn_partition_unloaded", partition=p)

    async def _load(self, p: int, r: InternalPartition, epoch: int, gen: int) -> None:
        def ours() -> bool:
            return (self._owned.get(p) == epoch and self._load_gen.get(p) == gen and r.is_leader
                    and r.leader_epoch == epoch)

        try:
            applied, _ = await replay_partition(r, ours, lambda records: self.core.load(p, records))
            if not ours():
                return
            resend = self.core.finish_load(p, self._clock_ms())
            for markers in resend:
                self._spawn_markers(markers)
            self._timer_changed.set()
            log_event(logger, "txn_partition_loaded", partition=p, epoch=epoch, records=applied,
                      prepared=len(resend))
        except RaftlogError as exc:
            log_event(logger, "txn_partition_load_failed", level=logging.WARNING, partition=p, reason=str(exc))
            if self._owned.get(p) == epoch and self._load_gen.get(p) == gen:
                del self._owned[p]
                self._load_gen.pop(p, None)
                self.core.unload(p)

    # ------------------------------------------------------------------ client ops

    async def find_txn_coordinator(self, transactional_id: str) -> Coordinator:
        image = self.metadata.image
        topic = image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.complete:
            if topic is None:
                try:
                    with trio.move_on_after(ENSURE_TOPIC_TIMEOUT_S):
                        await self.metadata.ensure_transaction_state_topic(timeout_s=ENSURE_TOPIC_TIMEOUT_S)
                except RaftlogError as exc:
                    log_event(logger, "txn_topic_create_failed", level=logging.WARNING, reason=str(exc))
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} is being created")
        p = self.core.partition_for(transactional_id) if topic.partition_count == self.core.config.partitions else None
        if p is None:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} has {topic.partition_count} partitions")
        state = image.partition(TRANSACTION_STATE_TOPIC, p)
        address = None
        if state is not None and state.reported_leader >= 0:
            address = self.metadata.client_address(state.leader)
        if address is None:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC}-{p} has no leader now")
        host, _, port = address.rpartition(":")
        return Coordinator(state.leader, host, int(port), p)

    async def init_txn_producer_id(self, request: InitTxnProducerId) -> ProducerEpoch:
        r = request
        result = self.core.init_producer_id(r.transactional_id, r.transaction_timeout_ms, r.producer_id,
                                            r.producer_epoch, self._clock_ms())
        if result.response == NEED_PRODUCER_ID:
            fresh = (await self._new_producer_id()).producer_id
            result = self.core.init_producer_id(r.transactional_id, r.transaction_timeout_ms, r.producer_id,
                                                r.producer_epoch, self._clock_ms(), new_producer_id=fresh)
            if result.response == NEED_PRODUCER_ID:  # cannot happen: a fresh id always serves
                raise CoordinatorNotAvailableError("no producer id")
        return _producer_epoch(await self._settle(result), r.producer_id, r.producer_epoch)

    async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded:
        if len(request.partitions) > MAX_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_PARTITIONS} partitions", field="partitions")
        image = self.metadata.image
        unknown = [(t, p) for t, p in request.partitions if image.partition(t, p) is None]
        if unknown:  # Kafka: the unknown ones UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED
            return TxnPartitionsAdded(unknown)
        result = self.core.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                          list(request.partitions), self._clock_ms(), verify_only=request.verify_only)
        await self._settle(result)
        return TxnPartitionsAdded()

    async def add_offsets_to_txn(self, request: AddOffsetsToTxn) -> None:
        result = self.core.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                       request.group_id, self._clock_ms())
        await self._settle(result)

    async def end_txn(self, request: EndTxn) -> ProducerEpoch:
        """With `bump_epoch` (Transactions V2, KIP-890 part 2): the producer id and epoch of
        the next transaction; without, the request's own."""
        r = request
        if not r.bump_epoch:
            await self._settle(self.core.end_txn(r.transactional_id, r.producer_id, r.producer_epoch, r.commit,
                                                 self._clock_ms()))
            return ProducerEpoch(r.producer_id, r.producer_epoch)
        result = self.core.end_txn_v2(r.transactional_id, r.producer_id, r.producer_epoch, r.commit, self._clock_ms())
        if result.response == NEED_PRODUCER_ID:
            fresh = (await self._new_producer_id()).producer_id
            result = self.core.end_txn_v2(r.transactional_id, r.producer_id, r.producer_epoch, r.commit,
                                          self._clock_ms(), new_producer_id=fresh)
            if result.response == NEED_PRODUCER_ID:  # cannot happen: a fresh id always serves
                raise CoordinatorNotAvailableError("no producer id")
        return _producer_epoch(await self._settle(result), r.producer_id, r.producer_epoch)

    async def txn_offset_commit(self, request: TxnOffsetCommit) -> list[PartitionOutcome]:
        """Served by the group coordinator's `TxnOffsets` on this node (set by the node)."""
        if self.txn_offsets is None:
            raise CoordinatorNotAvailableError("no group coordinator on this node")
        await self.txn_offsets.commit(request)
        return [PartitionOutcome(c.topic, c.partition) for c in request.offsets]

    async def describe_transactions(self, transactional_ids: Sequence[str]) -> list[DescribedTxn]:
        if len(transactional_ids) > MAX_IDS:
            raise InvalidRequestError(f"at most {MAX_IDS} transactional ids", field="transactional_ids")
        out = []
        for tid in transactional_ids:
            try:
                d = self.core.describe(tid)
            except RaftlogError as exc:
                wire = as_wire_error(exc)
                assert wire is not None
                out.append(DescribedTxn(tid, error=wire))
                continue
            out.append(DescribedTxn(tid, d["state"], d["producer_id"], d["producer_epoch"], d["timeout_ms"],
                                    d["start_ms"], [(t, p) for t, p in d["partitions"]]))
        return out

    async def list_transactions(self, request: ListTransactions) -> TxnListing:
        found = self.core.list(request.states or (), request.producer_ids or (), request.min_duration_ms,
                               self._clock_ms())
        return TxnListing(self.node_id, [ListedTxn(t["transactional_id"], t["producer_id"], t["state"])
                                         for t in found])


def _producer_epoch(answer: Any, producer_id: int, producer_epoch: int) -> ProducerEpoch:
    """The core's answer {producer_id, producer_epoch}; {} (a retry of a completed one): the asked ones."""
    answer = answer or {}
    return ProducerEpoch(answer.get("producer_id", producer_id), answer.get("producer_epoch", producer_epoch))

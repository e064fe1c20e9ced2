"""The transaction coordinator's pure core: Kafka's TransactionCoordinator over the states of
`__transaction_state` (txn_records.py). No I/O, no clock (`now_ms` is an argument), no
threads; the trio shell (txn_service.py) appends, waits and sends markers.

    core = TxnCoordinator(TxnConfig(partitions=16))
    r = core.init_producer_id(txn_id, timeout_ms, pid, epoch, now_ms, new_producer_id=None)
    r = core.add_partitions(txn_id, pid, epoch, partitions, now_ms)
    r = core.add_offsets(txn_id, pid, epoch, group_id, now_ms)      (adds the group's
                                                                    __consumer_offsets partition)
    r = core.end_txn(txn_id, pid, epoch, commit, now_ms)
    r = core.end_txn_v2(txn_id, pid, epoch, commit, now_ms, new_producer_id=None)   (KIP-890 part 2)
    core.on_written(write) / core.on_write_failed(write) -> TxnResult
    core.on_markers_written(txn_id, now_ms) -> TxnResult
    core.tick(now_ms) -> [TxnResult]; core.next_deadline_ms() -> int | None
    core.describe(txn_id), core.list(states, producer_ids, min_duration_ms, now_ms)
    begin_load(p) / load(p, [(offset, key, value)]) / finish_load(p, now_ms) -> [TxnResult] / unload(p)

Contract with the shell (as the group coordinator's, coordinator.py):
* A `TxnResult` carries `response` (a dict to answer with, a RaftlogError to raise, or
  `NEED_PRODUCER_ID`: call again with `new_producer_id` from the node's block), `write` (a
  state change to append to `__transaction_state-<write.partition>`; the response is sent
  only once it is committed, and the shell then calls `on_written`, or `on_write_failed` with
  the error, whose result it applies in turn) and `markers` (write COMMIT/ABORT markers to
  `markers.partitions`, then call `on_markers_written`).
* Ordering: the state is changed only by `on_written`, i.e. after the record is committed
  (Kafka's "pending state"); while a write or the markers of a transactional id are in
  flight, its requests answer CONCURRENT_TRANSACTIONS (retriable), as Kafka's do.
* Ownership: ids of partitions not ACTIVE here answer NOT_COORDINATOR (not led here) or
  COORDINATOR_LOAD_IN_PROGRESS (being replayed). A transaction replayed in PrepareCommit or
  PrepareAbort has its markers sent again (`finish_load` returns them): markers are
  idempotent, so a failover between the prepare and the complete write never tears it.

Errors are Kafka's (TransactionCoordinator.scala, Transactions V1): an unknown id or another
producer id -> INVALID_PRODUCER_ID_MAPPING; an older epoch -> PRODUCER_FENCED; an EndTxn that
does not fit the state -> INVALID_TXN_STATE; a timeout outside 1..max -> INVALID_TRANSACTION_TIMEOUT.
Fencing: InitProducerId for an id with an ongoing transaction bumps the epoch and aborts it
(the old producer's next request is PRODUCER_FENCED) and answers CONCURRENT_TRANSACTIONS; the
client retries and gets the next epoch. A transaction older than its timeout is aborted the
same way by `tick`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.txn_records import (
    MAX_PRODUCER_EPOCH,
    MAX_TXN_PARTITIONS,
    NO_PRODUCER_ID,
    TxnMetadata,
    TxnState,
    decode_txn_key,
    decode_txn_value,
)
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    RaftlogError,
    TransactionalIdNotFoundError,
)
from raftlog.base.topics import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, partition_for_group, partition_for_transactional_id

__all__ = ["TxnCoordinator", "TxnConfig", "TxnResult", "Write", "Markers", "NEED_PRODUCER_ID"]

log = logging.getLogger(__name__)

LOADING: Final = "loading"
ACTIVE: Final = "active"
NEED_PRODUCER_ID: Final = "need_producer_id"


@dataclass(frozen=True)
class TxnConfig:
    partitions: int
    max_timeout_ms: int = 900_000           # Kafka's transaction.max.timeout.ms
    offsets_partitions: int = OFFSETS_TOPIC_PARTITIONS


@dataclass(frozen=True)
class Write:
    """Append `metadata` to `__transaction_state-<partition>`; `reply` is the response to
    give once it is committed (None: the one `on_written` returns)."""

    partition: int
    metadata: TxnMetadata
    reply: Any = None


@dataclass(frozen=True)
class Markers:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]
    # WriteTxnMarkers' coordinator_epoch: the leader epoch of the id's `__transaction_state`
    # partition, set by the shell (txn_service.py) that sends them; a partition refuses a
    # marker older than one it holds for the producer (TRANSACTION_COORDINATOR_FENCED).
    coordinator_epoch: int = 0


@dataclass(frozen=True)
class TxnResult:
    response: Any = None
    write: Write | None = None
    markers: Markers | None = None


@dataclass
class _Load:
    last_offset: int = -1
    txns: dict[str, TxnMetadata | None] = field(default_factory=dict)
    errors: int = 0


def _fail(exc: RaftlogError) -> TxnResult:
    return TxnResult(response=exc)


class TxnCoordinator:
    """See the module docstring. Not thread-safe and not re-entrant: one caller at a time."""

    def __init__(self, config: TxnConfig):
        if config.partitions < 1:
            raise ValueError("partitions must be positive")
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        self.partitions: dict[int, str] = {}
        self._loads: dict[int, _Load] = {}
        self._busy: set[str] = set()  # ids with a write or markers in flight

    # ------------------------------------------------------------------ routing

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.config.partitions)

    def _check_owned(self, transactional_id: str) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidRequestError("transactional_id must be a non-empty string", field="transactional_id")
        p = self.partition_for(transactional_id)
        state = self.partitions.get(p)
        if state is None:
            raise NotCoordinatorError(f"__transaction_state-{p} is not led here")
        if state == LOADING:
            raise CoordinatorLoadInProgressError(f"__transaction_state-{p} is loading")

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int, *,
                 busy_ok: bool = False) -> TxnMetadata:
        """The id's state, checked against the caller's producer id and epoch (Kafka's rules);
        CONCURRENT_TRANSACTIONS while a step of the id is being written unless `busy_ok`."""
        self._check_owned(transactional_id)
        m = self.txns.get(transactional_id)
        if m is None or m.state is TxnState.DEAD:
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has no producer id")
        if m.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} is held by producer id {m.producer_id}, not {producer_id}")
        if producer_epoch != m.producer_epoch:
            raise ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id!r} is fenced by epoch {m.producer_epoch}")
        if transactional_id in self._busy and not busy_ok:
            raise ConcurrentTransactionsError(f"{transactional_id!r}: a previous step is still being written")
        return m

    def _write(self, m: TxnMetadata, reply: Any = None) -> TxnResult:
        self._busy.add(m.transactional_id)
        return TxnResult(write=Write(self.partition_for(m.transactional_id), m, reply))

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                         now_ms: int, new_producer_id: int | None = None) -> TxnResult:
        """InitProducerId with a transactional id. `producer_id/epoch` are the client's
        current ones (-1/-1 for a new producer; KIP-360's retry after a timeout otherwise)."""
        try:
            self._check_owned(transactional_id)
        except RaftlogError as exc:
            return _fail(exc)
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= self.config.max_timeout_ms:
            return _fail(InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is outside 1..{self.config.max_timeout_ms}"))
        if transactional_id in self._busy:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r}: a previous step is still being written"))
        m = self.txns.get(transactional_id)
        if m is None or m.state is TxnState.DEAD:
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            fresh = TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, TxnState.EMPTY, now_ms)
            return self._write(fresh)
        if producer_id != NO_PRODUCER_ID and (producer_id, producer_epoch) not in (
                (m.producer_id, m.producer_epoch), (m.last_producer_id, m.last_producer_epoch)):
            if producer_id == m.producer_id and producer_epoch < m.producer_epoch:
                return _fail(ProducerFencedError(f"epoch {producer_epoch} of {transactional_id!r} is fenced"))
            return _fail(InvalidProducerIdMappingError(
                f"{transactional_id!r} is held by producer id {m.producer_id} epoch {m.producer_epoch}"))
        if m.state.preparing:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r} is completing a transaction"))
        if m.state is TxnState.ONGOING:
            # Fence the zombie: bump the epoch and abort its transaction; the client retries.
            aborting = self._fenced(m, now_ms, TxnState.PREPARE_ABORT)
            return self._write(aborting, reply=ConcurrentTransactionsError(
                f"{transactional_id!r}: aborting the previous producer's transaction"))
        if producer_id != NO_PRODUCER_ID and (producer_id, producer_epoch) == (m.last_producer_id, m.last_producer_epoch):
            # A retry of the bump that already happened: the same answer again (KIP-360).
            return TxnResult(response={"producer_id": m.producer_id, "producer_epoch": m.producer_epoch})
        if m.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            bumped = m.moved(TxnState.EMPTY, now_ms, producer_id=new_producer_id, producer_epoch=0,
                             last_producer_id=m.producer_id, last_producer_epoch=m.producer_epoch,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        else:
            bumped = m.moved(TxnState.EMPTY, now_ms, producer_epoch=m.producer_epoch + 1,
                             last_producer_id=m.producer_id, last_producer_epoch=m.producer_epoch,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        return self._write(bumped)

    def _fenced(self, m: TxnMetadata, now_ms: int, state: TxnState) -> TxnMetadata:
        """`m` with its epoch bumped (when it can be) moving through PrepareEpochFence to
        `state` (PrepareAbort): the producer of the old epoch is fenced."""
        fence = m.moved(TxnState.PREPARE_EPOCH_FENCE, now_ms)
        epoch = m.producer_epoch + 1 if m.producer_epoch + 1 < MAX_PRODUCER_EPOCH else m.producer_epoch
        return fence.moved(state, now_ms, producer_epoch=epoch, last_producer_id=m.producer_id,
                           last_producer_epoch=m.producer_epoch)

    # ------------------------------------------------------------------ AddPartitions / AddOffsets

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int, *, verify_only: bool = False) -> TxnResult:
        """AddPartitionsToTxn. `verify_only` (the v4+ broker form): INVALID_TXN_STATE unless
        every partition is already in the ongoing transaction; nothing is written. A step being
        written meanwhile (AddOffsetsToTxn, more partitions) does not fail the verification:
        the partitions it checks were committed before the producer wrote to them (Kafka's
        coordinator does not check the pending state there either)."""
        try:
            m = self._current(transactional_id, producer_id, producer_epoch, busy_ok=verify_only)
        except RaftlogError as exc:
            return _fail(exc)
        wanted = frozenset(partitions)
        if verify_only:
            if m.state is TxnState.ONGOING and wanted <= m.partitions:
                return TxnResult(response={})
            return _fail(InvalidTxnStateError(f"{transactional_id!r}: a partition is not in the ongoing transaction"))
        if m.state.preparing:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r} is completing a transaction"))
        if m.state is TxnState.ONGOING and wanted <= m.partitions:
            return TxnResult(response={})
        merged = m.partitions | wanted if m.state is TxnState.ONGOING else wanted
        if len(merged) > MAX_TXN_PARTITIONS:
            return _fail(InvalidRequestError(f"a transaction touches at most {MAX_TXN_PARTITIONS} partitions"))
        start_ms = m.start_ms if m.state is TxnState.ONGOING else now_ms
        return self._write(m.moved(TxnState.ONGOING, now_ms, partitions=merged, start_ms=start_ms), reply={})

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                    now_ms: int) -> TxnResult:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        if not isinstance(group_id, str) or not group_id:
            return _fail(InvalidRequestError("group_id must be a non-empty string", field="group_id"))
        p = partition_for_group(group_id, self.config.offsets_partitions)
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, p)], now_ms)

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> TxnResult:
        try:
            self._check_owned(transactional_id)
        except RaftlogError as exc:
            return _fail(exc)
        m = self.txns.get(transactional_id)
        if m is None or m.state is TxnState.DEAD or m.producer_id != producer_id:
            return _fail(InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has no producer id {producer_id}"))
        if producer_epoch != m.producer_epoch:
            return _fail(ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id!r} is fenced by epoch {m.producer_epoch}"))
        if transactional_id in self._busy:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r}: a previous step is still being written"))
        if m.state is TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return self._write(m.moved(target, now_ms), reply={})
        done, preparing = ((TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) if commit
                           else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT))
        if m.state is done:
            return TxnResult(response={})  # a retry of the EndTxn that completed: success
        if m.state is preparing:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r} is {m.state.value}"))
        # Kafka's answer, and fatal to the client: logged so that an operator (or a fault run)
        # can tell which state a refused EndTxn met.
        verb = "commit" if commit else "abort"
        log.warning("EndTxn(%s) of %r refused: the transaction is %s", verb, transactional_id, m.state.value)
        return _fail(InvalidTxnStateError(f"{transactional_id!r} is {m.state.value}: cannot {verb}"))

    def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                   now_ms: int, new_producer_id: int | None = None) -> TxnResult:
        """EndTxn at Transactions V2 (KIP-890 part 2, EndTxn v5): the prepare bumps the epoch,
        the markers carry the bumped epoch (every batch of the old one is fenced) and the answer
        is the producer id and epoch of the next transaction. A retry with the epoch before
        the bump is answered as the first call was (or CONCURRENT_TRANSACTIONS while the
        markers are written); an abort with nothing ongoing still bumps the epoch. When the
        epoch cannot grow, the id moves to `new_producer_id` (NEED_PRODUCER_ID asks for it)
        and the markers go out under the old id at MAX_PRODUCER_EPOCH (Kafka's), which the
        state keeps as its last epoch (no Transactions V1 state reaches that epoch)."""
        try:
            self._check_owned(transactional_id)
        except RaftlogError as exc:
            return _fail(exc)
        m = self.txns.get(transactional_id)
        if m is None or m.state is TxnState.DEAD:
            return _fail(InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has no producer id"))
        last = (m.last_producer_id, min(m.last_producer_epoch, MAX_PRODUCER_EPOCH - 1))
        retry = (producer_id, producer_epoch) == last and (
            m.state.preparing or m.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))
        if not retry and m.producer_id != producer_id:
            return _fail(InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer id {producer_id}"))
        if not retry and producer_epoch != m.producer_epoch:
            return _fail(ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id!r} is fenced by epoch {m.producer_epoch}"))
        if transactional_id in self._busy:
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r}: a previous step is still being written"))
        current = {"producer_id": m.producer_id, "producer_epoch": m.producer_epoch}
        wrong = InvalidTxnStateError(f"{transactional_id!r} is {m.state.value}: cannot {'commit' if commit else 'abort'}")
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if retry:
            if m.state is done:
                return TxnResult(response=current)
            if m.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
                return _fail(ConcurrentTransactionsError(f"{transactional_id!r} is completing the transaction"))
            return _fail(wrong)
        if m.state.preparing:
            same = m.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            return _fail(ConcurrentTransactionsError(f"{transactional_id!r} is completing a transaction")
                         if same else wrong)
        if m.state is not TxnState.ONGOING and commit:
            return _fail(wrong)
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        parts = m.partitions if m.state is TxnState.ONGOING else frozenset()
        if m.producer_epoch + 1 < MAX_PRODUCER_EPOCH:
            bumped = m.moved(target, now_ms, producer_epoch=m.producer_epoch + 1, last_producer_id=m.producer_id,
                             last_producer_epoch=m.producer_epoch, partitions=parts)
        elif new_producer_id is None:
            return TxnResult(response=NEED_PRODUCER_ID)
        else:
            bumped = m.moved(target, now_ms, producer_id=new_producer_id, producer_epoch=0,
                             last_producer_id=m.producer_id, last_producer_epoch=MAX_PRODUCER_EPOCH, partitions=parts)
        return self._write(bumped)

    # ------------------------------------------------------------------ completions

    def on_written(self, write: Write, now_ms: int) -> TxnResult:
        """`write` is committed: it is the state now. Returns the reply to its request and,
        for a prepare, the markers to write."""
        m = write.metadata
        tid = m.transactional_id
        self._busy.discard(tid)
        if self.partitions.get(write.partition) != ACTIVE:
            return _fail(NotCoordinatorError(f"__transaction_state-{write.partition} moved"))
        self.txns[tid] = m
        reply = write.reply if write.reply is not None else {
            "producer_id": m.producer_id, "producer_epoch": m.producer_epoch}
        if m.state.preparing:
            self._busy.add(tid)
            return TxnResult(response=reply, markers=self._markers(m))
        return TxnResult(response=reply)

    def on_write_failed(self, write: Write, error: RaftlogError) -> TxnResult:
        self._busy.discard(write.metadata.transactional_id)
        return _fail(error)

    def _markers(self, m: TxnMetadata) -> Markers:
        pid, epoch = m.producer_id, m.producer_epoch
        if m.last_producer_epoch == MAX_PRODUCER_EPOCH:  # end_txn_v2 moved the id: the old one's, at its last epoch
            pid, epoch = m.last_producer_id, m.last_producer_epoch
        return Markers(m.transactional_id, pid, epoch, m.state is TxnState.PREPARE_COMMIT, m.partitions)

    def on_markers_written(self, transactional_id: str, now_ms: int) -> TxnResult:
        """Every marker of the prepared transaction is written: write its Complete state."""
        self._busy.discard(transactional_id)
        m = self.txns.get(transactional_id)
        if m is None or not m.state.preparing or self.partitions.get(self.partition_for(transactional_id)) != ACTIVE:
            return TxnResult()
        done = TxnState.COMPLETE_COMMIT if m.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._write(m.moved(done, now_ms, partitions=frozenset(), start_ms=-1), reply={})

    def on_markers_failed(self, transactional_id: str) -> None:
        """The markers could not all be written: the shell retries later (`pending_markers`)."""
        self._busy.discard(transactional_id)

    def pending_markers(self) -> list[Markers]:
        """Prepared transactions whose markers are not in flight (to send again)."""
        return [self._markers(m) for tid, m in self.txns.items()
                if m.state.preparing and tid not in self._busy and self._owns(tid)]

    def claim_markers(self, transactional_id: str) -> None:
        self._busy.add(transactional_id)

    def _owns(self, transactional_id: str) -> bool:
        return self.partitions.get(self.partition_for(transactional_id)) == ACTIVE

    # ------------------------------------------------------------------ timeouts

    def tick(self, now_ms: int) -> list[TxnResult]:
        """Abort (with an epoch bump, fencing the producer) every ongoing transaction older
        than its timeout."""
        out = []
        for tid, m in list(self.txns.items()):
            if (m.state is TxnState.ONGOING and tid not in self._busy and self._owns(tid)
                    and m.start_ms + m.timeout_ms <= now_ms):
                log.info("transaction %r of producer %d timed out after %d ms: aborting", tid, m.producer_id,
                         now_ms - m.start_ms)
                out.append(self._write(self._fenced(m, now_ms, TxnState.PREPARE_ABORT), reply={}))
        return out

    def next_deadline_ms(self) -> int | None:
        due = [m.start_ms + m.timeout_ms for tid, m in self.txns.items()
               if m.state is TxnState.ONGOING and tid not in self._busy and self._owns(tid)]
        return min(due) if due else None

    # ------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> dict[str, Any]:
        """DescribeTransactions for one id. Raises TRANSACTIONAL_ID_NOT_FOUND / NOT_COORDINATOR."""
        self._check_owned(transactional_id)
        m = self.txns.get(transactional_id)
        if m is None or m.state is TxnState.DEAD:
            raise TransactionalIdNotFoundError(f"transactional id {transactional_id!r} is not known")
        return {"transactional_id": m.transactional_id, "state": m.state.value, "producer_id": m.producer_id,
                "producer_epoch": m.producer_epoch, "timeout_ms": m.timeout_ms, "start_ms": m.start_ms,
                "partitions": sorted(m.partitions)}

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1,
             now_ms: int = 0) -> list[dict[str, Any]]:
        """ListTransactions over the ids coordinated here (Kafka's filters: any of `states`,
        any of `producer_ids`, running at least `min_duration_ms`; empty = no filter)."""
        states, pids = set(states), set(producer_ids)
        out = []
        for tid, m in sorted(self.txns.items()):
            if m.state is TxnState.DEAD or not self._owns(tid):
                continue
            if (states and m.state.value not in states) or (pids and m.producer_id not in pids):
                continue
            if min_duration_ms >= 0 and (m.start_ms < 0 or now_ms - m.start_ms < min_duration_ms):
                continue
            out.append({"transactional_id": tid, "producer_id": m.producer_id, "state": m.state.value})
        return out

    def health(self) -> dict[str, Any]:
        by_state: dict[str, int] = {}
        for m in self.txns.values():
            by_state[m.state.value] = by_state.get(m.state.value, 0) + 1
        return {"txn_partitions": sorted(p for p, s in self.partitions.items() if s == ACTIVE),
                "transactions": by_state}

    def busy_partitions(self) -> dict[int, RaftlogError]:
        """The `__transaction_state` partitions led here that a replica move must not take
        now (metadata/reassignment.py "Busy coordinators"), with the reason: being loaded
        (COORDINATOR_LOAD_IN_PROGRESS), or a transaction's state write or markers in flight
        (CONCURRENT_TRANSACTIONS: the new leader would replay it and send them again)."""
        out: dict[int, RaftlogError] = {p: CoordinatorLoadInProgressError(
            f"the transaction coordinator is loading __transaction_state-{p}")
            for p, s in sorted(self.partitions.items()) if s == LOADING}
        preparing = {tid for tid, m in self.txns.items() if m.state.preparing}
        for tid in sorted(self._busy | preparing):
            p = self.partition_for(tid)
            if p not in out and self.partitions.get(p) == ACTIVE:
                what = "its markers" if tid in preparing else "a state write"
                out[p] = ConcurrentTransactionsError(
                    f"transaction {tid!r} of __transaction_state-{p} has {what} in flight")
        return out

    # ------------------------------------------------------------------ ownership

    def begin_load(self, partition: int) -> None:
        if type(partition) is not int or not 0 <= partition < self.config.partitions:
            raise InvalidRequestError(f"partition {partition!r} of __transaction_state", field="partition")
        self.unload(partition)
        self.partitions[partition] = LOADING
        self._loads[partition] = _Load()

    def load(self, partition: int, records: Iterable[tuple[int, bytes, bytes | None]]) -> int:
        """Replay one chunk of the partition's log (offsets ascending; a record seen before is
        skipped; a bad one, or one of an id hashed elsewhere, is skipped and counted)."""
        buf = self._loads.get(partition)
        if buf is None:
            raise RuntimeError(f"__transaction_state-{partition} is not loading")
        applied = 0
        for offset, key, value in records:
            if offset <= buf.last_offset:
                continue
            buf.last_offset = offset
            try:
                tid = decode_txn_key(key)
                m = decode_txn_value(tid, value)
            except InvalidGroupRecordError as exc:
                buf.errors += 1
                log.warning("__transaction_state-%d offset %d: skipping a bad record: %s", partition, offset, exc)
                continue
            if self.partition_for(tid) != partition:
                buf.errors += 1
                continue
            buf.txns[tid] = m
            applied += 1
        return applied

    def finish_load(self, partition: int, now_ms: int) -> list[Markers]:
        """Serve the replayed ids; returns the markers of prepared transactions to send again."""
        buf = self._loads.pop(partition, None)
        if buf is None or self.partitions.get(partition) != LOADING:
            raise RuntimeError(f"__transaction_state-{partition} is not loading")
        for tid, m in buf.txns.items():
            if m is not None:
                self.txns[tid] = m
        self.partitions[partition] = ACTIVE
        out = []
        for tid, m in buf.txns.items():
            if m is not None and m.state.preparing:
                self._busy.add(tid)
                out.append(self._markers(m))
        return out

    def unload(self, partition: int) -> None:
        """This node no longer leads `partition`: forget its ids (writes in flight fail with
        NOT_COORDINATOR in `on_written`)."""
        self.partitions.pop(partition, None)
        self._loads.pop(partition, None)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]
            self._busy.discard(tid)


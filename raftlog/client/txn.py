"""Transactions, client side, sans I/O: the state of one transactional Producer (`TxnState`)
and its procedures (`init_transactions`, `send_offsets`, `end_transaction`), which both
producer shells (blocking.py, aio.py) run with group_session's driver.

A procedure is a generator that yields effects and is resumed with their results:

    TxnCall(request, route)   -> the ok answer of `request`, sent by the producer's core
                                 (ClientCore.submit: routed to a partition's leader, retried
                                 on retriable errors until request_timeout_ms)
    Flush()                   -> None once every queued batch is acknowledged or failed

Routing: the transaction coordinator of an id is the leader of its `__transaction_state`
partition, a group's coordinator the leader of its `__consumer_offsets` partition, so a call
is routed to (topic, partition) like any partition request (NOT_COORDINATOR refreshes the
metadata). `find_txn_coordinator` is still asked once: it creates `__transaction_state` on
first use.

States (Kafka's TransactionManager): uninitialized -> ready (init_transactions) ->
in_transaction (begin_transaction) -> ready (commit/abort). An error of the transaction
(a batch or an add that failed) makes it abortable: commit raises it, abort clears it. A
fence (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH: a newer producer holds the id) is fatal:
every later call raises ProducerFencedError; the producer can only be closed.

Ordering: a batch of a partition leaves only after AddPartitionsToTxn put that partition in
the ongoing transaction (the core's drain skips it before); commit flushes first, so EndTxn
follows every batch's acknowledgement; offsets (TxnOffsetCommit) are sent after
AddOffsetsToTxn, and land in `__consumer_offsets` with the COMMIT marker only.
Concurrency: not thread-safe; the shells hold the producer's lock / run in its trio thread.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, NamedTuple

from raftlog.base.errors import (
    InvalidProducerEpochError,
    ProducerFencedError,
    RaftlogError,
    error_from_wire,
)
from raftlog.base.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, partition_for_group
from raftlog.client.core import Call
from raftlog.client.group import GroupMetadata
from raftlog.client.errors import TransactionStateError

__all__ = [
    "TxnCall",
    "Flush",
    "TxnState",
    "init_transactions",
    "send_offsets",
    "end_transaction",
    "group_fields",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
]

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms
MAX_ADD_PARTITIONS = 10_000  # per add_partitions_to_txn request (the coordinator's limit)

UNINITIALIZED, READY, IN_TRANSACTION, FENCED = "uninitialized", "ready", "in_transaction", "fenced"


class TxnCall(NamedTuple):
    """Effect: send `request` (routed to `route`'s leader, or any broker if None); resume with its ok answer."""

    request: dict
    route: tuple[str, int] | None = None


class Flush(NamedTuple):
    """Effect: flush the producer (every queued batch acknowledged or failed)."""


Procedure = Generator[Any, Any, Any]


def fenced_error(exc: BaseException) -> ProducerFencedError | None:
    """The fence `exc` means for a transactional producer, or None."""
    if isinstance(exc, ProducerFencedError):
        return exc
    if isinstance(exc, InvalidProducerEpochError):
        return ProducerFencedError(f"a newer producer epoch holds the transactional id ({exc.message})")
    return None


class TxnState:
    """What one transactional producer knows of its transaction (see the module docstring)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS):
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        if not 1 <= transaction_timeout_ms <= 2**31 - 1:
            raise ValueError(f"transaction_timeout_ms must be in [1, 2**31-1], got {transaction_timeout_ms}")
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.state = UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.route = (TRANSACTION_STATE_TOPIC, -1)  # its coordinator's partition, once found
        self.added: set[tuple[str, int]] = set()  # partitions in the ongoing transaction
        self.to_add: set[tuple[str, int]] = set()  # partitions with records, not yet added
        self.add_call: Call | None = None
        self.add_asked: list[tuple[str, int]] = []
        self.offsets_added = False  # AddOffsetsToTxn sent in this transaction
        self.error: RaftlogError | None = None  # abortable (or the fence, when FENCED)

    # ---- checks (the shells call them before acting) ----

    def check_usable(self) -> None:
        if self.state == FENCED:
            assert self.error is not None
            raise self.error
        if self.state == UNINITIALIZED:
            raise TransactionStateError("call init_transactions() first")

    def check_sendable(self) -> None:
        """Raises unless a record may be sent now (in a transaction without an error)."""
        self.check_usable()
        if self.state != IN_TRANSACTION:
            raise TransactionStateError("a transactional producer sends only inside begin_transaction()")
        if self.error is not None:
            raise TransactionStateError(f"the transaction must be aborted: {self.error}")

    def begin(self) -> None:
        self.check_usable()
        if self.state != READY:
            raise TransactionStateError("a transaction is already in progress")
        self.state = IN_TRANSACTION
        self.added.clear()
        self.to_add.clear()
        self.offsets_added = False
        self.error = None

    # ---- the core's hooks ----

    def note_partition(self, topic: str, partition: int) -> None:
        """A record went to (topic, partition): add it to the transaction before it leaves."""
        tp = (topic, partition)
        if tp not in self.added:
            self.to_add.add(tp)

    def may_send(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.added

    def failed(self, error: BaseException) -> None:
        """A batch or an add of this transaction failed for good: abort is the way out."""
        fence = fenced_error(error)
        if fence is not None:
            self.fence(fence)
        elif self.error is None and self.state == IN_TRANSACTION:
            self.error = error if isinstance(error, RaftlogError) else RaftlogError(str(error))

    def fence(self, error: ProducerFencedError) -> None:
        self.state = FENCED
        self.error = error

    def add_request(self) -> dict | None:
        """The add_partitions_to_txn request to send now, or None (nothing to add, one in flight)."""
        if self.add_call is not None or not self.to_add or self.state != IN_TRANSACTION or self.error:
            return None
        self.add_asked = sorted(self.to_add)[:MAX_ADD_PARTITIONS]
        return {"op": "add_partitions_to_txn", **self._ids(),
                "partitions": [{"topic": t, "partition": p} for t, p in self.add_asked]}

    def add_done(self) -> BaseException | None:
        """Take the finished add call's outcome: its partitions join the transaction, or its
        error (returned, for the core to fail their batches with) makes the transaction abortable."""
        call, self.add_call = self.add_call, None
        assert call is not None and call.done
        try:
            answer = call.value()
            unknown = answer.get("unknown") or ()
            if unknown:
                error: BaseException = error_from_wire(
                    {"code": "UNKNOWN_TOPIC_OR_PARTITION",
                     "message": f"add_partitions_to_txn: unknown partitions {unknown}"})
                raise error
        except RaftlogError as exc:
            self.failed(exc)
            return exc
        self.added.update(self.add_asked)
        self.to_add.difference_update(self.add_asked)
        return None

    def _ids(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch}


def group_fields(group: str | GroupMetadata) -> dict[str, Any]:
    """send_offsets' group arguments from a group id or a Consumer's `group_metadata()`."""
    if isinstance(group, str):
        return {"group_id": group}
    if isinstance(group, GroupMetadata):
        return {"group_id": group.group_id, "member_id": group.member_id,
                "generation_id": group.generation_id, "group_instance_id": group.group_instance_id}
    raise TypeError(f"group must be a group id or a Consumer's group_metadata(), got {type(group).__name__}")


# ---------------------------------------------------------------- procedures


def _guarded(txn: TxnState, effect: TxnCall) -> Procedure:
    """Perform one call; a fence answer fences the producer and raises ProducerFencedError."""
    try:
        return (yield effect)
    except RaftlogError as exc:
        fence = fenced_error(exc)
        if fence is not None:
            txn.fence(fence)
            raise fence from exc
        raise


def init_transactions(txn: TxnState) -> Procedure:
    """Find the coordinator, get the id's producer id with a bumped epoch (fencing any older
    producer of the id and aborting its open transaction); returns (producer_id, epoch)."""
    if txn.state == FENCED:
        txn.check_usable()
    if txn.state == IN_TRANSACTION:
        raise TransactionStateError("init_transactions() during a transaction")
    found = yield TxnCall({"op": "find_txn_coordinator", "transactional_id": txn.transactional_id})
    partition = found.get("partition")
    if not isinstance(partition, int):
        raise TransactionStateError(f"find_txn_coordinator answered no partition: {found}")
    txn.route = (TRANSACTION_STATE_TOPIC, partition)
    answer = yield from _guarded(txn, TxnCall(
        {"op": "init_txn_producer_id", "transactional_id": txn.transactional_id,
         "transaction_timeout_ms": txn.timeout_ms, "producer_id": -1, "producer_epoch": -1}, txn.route))
    txn.producer_id, txn.producer_epoch = answer["producer_id"], answer["producer_epoch"]
    txn.state = READY
    txn.error = None
    return txn.producer_id, txn.producer_epoch


def send_offsets(txn: TxnState, offsets: Mapping[tuple[str, int], int], group_id: str, *,
                 member_id: str = "", generation_id: int = -1, group_instance_id: str | None = None,
                 metadata: str = "") -> Procedure:
    """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator: `offsets` (the next
    offset to consume per partition) are committed for `group_id` with the transaction."""
    txn.check_sendable()
    if not isinstance(group_id, str) or not group_id:
        raise ValueError("group_id must be a non-empty string")
    if not txn.offsets_added:
        yield from _guarded(txn, TxnCall({"op": "add_offsets_to_txn", **txn._ids(), "group_id": group_id},
                                         txn.route))
        txn.offsets_added = True
    answer = yield from _guarded(txn, TxnCall(
        {"op": "txn_offset_commit", **txn._ids(), "group_id": group_id, "member_id": member_id,
         "generation_id": generation_id, "group_instance_id": group_instance_id,
         "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": metadata}
                     for (t, p), o in sorted(offsets.items())]},
        (OFFSETS_TOPIC, partition_for_group(group_id))))
    for r in answer.get("partitions") or ():
        if isinstance(r, dict) and r.get("error") is not None:
            exc = error_from_wire(r["error"])
            txn.failed(exc)
            raise exc


def end_transaction(txn: TxnState, commit: bool) -> Procedure:
    """Commit (flush first; a failed batch raises and leaves the transaction to abort) or
    abort the ongoing transaction; the producer is ready for the next one after."""
    txn.check_usable()
    if txn.state != IN_TRANSACTION:
        raise TransactionStateError("no transaction in progress (begin_transaction() first)")
    if commit and txn.error is not None:
        raise TransactionStateError(f"cannot commit, the transaction must be aborted: {txn.error}")
    try:
        yield Flush()
    except RaftlogError:
        if commit:
            raise
    txn.check_usable()  # fenced while flushing: ProducerFencedError
    if commit and txn.error is not None:
        raise TransactionStateError(f"cannot commit, the transaction must be aborted: {txn.error}")
    if txn.added or txn.offsets_added or txn.add_call is not None:
        yield from _guarded(txn, TxnCall({"op": "end_txn", **txn._ids(), "commit": commit}, txn.route))
    txn.state = READY
    txn.added.clear()
    txn.to_add.clear()
    txn.offsets_added = False
    txn.error = None

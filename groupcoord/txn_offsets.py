"""TxnOffsetCommit in the group coordinator's shell (issue 42): a transactional producer's
offsets for a group are appended to the group's `__consumer_offsets` partition as a
transactional batch of the producer (its id and epoch on the batch, as Kafka's
GroupMetadataManager writes them), and take effect only when the marker of its transaction
reaches that partition (the transaction coordinator writes markers there too, as Kafka's
does, because AddOffsetsToTxn added it): COMMIT applies them, ABORT drops them.

    TxnOffsets(core, answer, clock_ms)    answer: a core Result -> its ok fields (or raises)
    await txn_offsets.commit(request)   TxnOffsetCommit (txn_port.py; the transaction port's
                                        txn_offset_commit; `add_to_txn`: KIP-890 part 2)
    await txn_offsets.on_marker(topic, partition, producer_id, commit)
    txn_offsets.pending_partitions(group_id)   held, not yet applied: OffsetFetch's UNSTABLE_OFFSET_COMMIT

Invariants and limits: the pending offsets are in the log, so a coordinator failover between
TxnOffsetCommit and the marker loses none: the new leader's replay holds them until the
marker (groupcoord/replay.py), and a marker committed while the partition loads is read by
that replay. The core holds at most offsets.MAX_TXN_PRODUCERS producers and
MAX_TXN_OFFSETS offsets each (more: COORDINATOR_NOT_AVAILABLE, retriable). A later
TxnOffsetCommit for the same group and partition replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from groupcoord.context import CommitOffset, Result
from groupcoord.coordinator import GroupCoordinator
from groupcoord.txn_port import TxnOffsetCommit
from partition.port import TxnVerifierPort
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotEnoughReplicasError,
    error_from_wire,
)
from raftlog.base.topics import OFFSETS_TOPIC

__all__ = ["TxnOffsets"]

Answer = Callable[[Result], Awaitable[dict[str, Any]]]


class TxnOffsets:
    """See the module docstring. Concurrency: the node's trio thread."""

    def __init__(self, core: GroupCoordinator, answer: Answer, clock_ms: Callable[[], int]) -> None:
        self.core = core
        self._answer = answer
        self._clock_ms = clock_ms
        self.txn_verifier: TxnVerifierPort | None = None  # set by the node (raftlog/node/txn_link.py)

    async def commit(self, request: TxnOffsetCommit) -> None:
        """Append `request`'s offsets to the group's partition as the producer's transactional
        batch; they take effect at its transaction's marker. Raises the commit's validation
        error (the group's generation, member, ...) or the failed append's."""
        if request.producer_id < 0:
            raise InvalidRequestError("producer_id must be at least 0", field="producer_id")
        if not 0 <= request.producer_epoch <= 32767:
            raise InvalidRequestError("producer_epoch must be in 0..32767", field="producer_epoch")
        offsets = list(request.offsets)
        for c in offsets:
            if c.partition < 0:
                raise InvalidRequestError("partition must be at least 0", field="offsets")
        partition = self.core.partition_for(request.group_id)
        if self.core.is_active(partition):  # else the core answers the routing error at once
            await self._verify(request, partition)
        answer = await self._answer(self.core.txn_offset_commit(
            group_id=request.group_id, offsets=offsets, now_ms=self._clock_ms(), producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, member_id=request.member_id,
            generation_id=request.generation_id, group_instance_id=request.group_instance_id))
        for part in answer.get("partitions") or ():
            if part.get("error"):  # the append failed (or a metadata too large): nothing to count on
                raise error_from_wire(part["error"])

    async def _verify(self, request: TxnOffsetCommit, partition: int) -> None:
        """The group's `__consumer_offsets` partition must be in the producer's ongoing
        transaction before its offsets are appended there (else no marker would ever close them),
        as Kafka's group coordinator verifies (KIP-890 part 1): the transaction coordinator is
        asked, and with `add_to_txn` (Transactions V2, TxnOffsetCommit v5: no AddOffsetsToTxn
        before it) the partition joins the transaction. Raises its error (INVALID_TXN_STATE when
        not added, INVALID_PRODUCER_EPOCH for a fenced producer; "not now" as
        COORDINATOR_NOT_AVAILABLE, which clients retry, as Kafka converts it for offset commits)."""
        if self.txn_verifier is None:
            raise CoordinatorNotAvailableError("no transaction coordinator link on this node")
        try:
            await self.txn_verifier.verify_txn(request.transactional_id, OFFSETS_TOPIC, partition,
                                               request.producer_id, request.producer_epoch, add=request.add_to_txn)
        except NotEnoughReplicasError as exc:
            raise CoordinatorNotAvailableError(str(exc)) from None

    async def on_marker(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """The marker of `producer_id`'s transaction is committed in `topic`-`partition`: the
        offsets of the groups of that `__consumer_offsets` partition apply (commit) or are
        dropped (abort). The marker in the log is what decides; this keeps the cache in step."""
        if topic != OFFSETS_TOPIC:
            return
        await self._answer(self.core.complete_txn(partition, producer_id, commit, self._clock_ms()))

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The (topic, partition)s of `group_id` with offsets of a transaction whose marker has
        not reached the group yet (OffsetFetch's require_stable answers them as unstable)."""
        return self.core.pending_txn_partitions(group_id)

    def health(self) -> Mapping[str, int]:
        return {"txn_offset_producers": self.core.txn_offset_producers()}

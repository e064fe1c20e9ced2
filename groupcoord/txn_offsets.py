"""TxnOffsetCommit in the group coordinator's shell (issue 42): a transactional producer's
offsets for a group are held pending here, per producer id, until the marker of its
transaction reaches the group's `__consumer_offsets` partition (the transaction coordinator
writes markers there too, as Kafka's does, because AddOffsetsToTxn added it): a COMMIT
writes them as an ordinary offset commit before the marker is acknowledged, so the
transaction completes only once they are in; an ABORT drops them.

    TxnOffsets(core, answer, clock_ms)    answer: a core Result -> its ok fields (or raises)
    await txn_offsets.commit(request)   TxnOffsetCommit (txn_port.py; the transaction port's
                                        txn_offset_commit; `add_to_txn`: KIP-890 part 2)
    await txn_offsets.on_marker(topic, partition, producer_id, commit)
    txn_offsets.pending_partitions(group_id)   held, not yet applied: OffsetFetch's UNSTABLE_OFFSET_COMMIT

Invariants and limits: pending offsets are in memory only (a coordinator failover between
TxnOffsetCommit and the marker loses them: the group then resumes from its previous commit,
as after an abort: records are processed again, never lost; docs/transactions.md). At most
MAX_PRODUCERS producers and MAX_OFFSETS offsets each are held (more: COORDINATOR_NOT_AVAILABLE,
retriable). A later TxnOffsetCommit for the same group and partition replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from groupcoord.context import CommitOffset, Result
from groupcoord.coordinator import GroupCoordinator
from groupcoord.txn_port import TxnOffsetCommit
from partition.port import TxnVerifierPort
from raftlog.base.errors import CoordinatorNotAvailableError, InvalidRequestError
from raftlog.base.topics import OFFSETS_TOPIC

__all__ = ["TxnOffsets"]

MAX_PRODUCERS: Final = 10_000
MAX_OFFSETS: Final = 100_000

Answer = Callable[[Result], Awaitable[dict[str, Any]]]


class TxnOffsets:
    """See the module docstring. Concurrency: the node's trio thread."""

    def __init__(self, core: GroupCoordinator, answer: Answer, clock_ms: Callable[[], int]) -> None:
        self.core = core
        self._answer = answer
        self._clock_ms = clock_ms
        # producer id -> group id -> (topic, partition) -> offset
        self.pending: dict[int, dict[str, dict[tuple[str, int], CommitOffset]]] = {}
        self.txn_verifier: TxnVerifierPort | None = None  # set by the node (raftlog/node/txn_link.py)

    async def commit(self, request: TxnOffsetCommit) -> None:
        """Hold `request`'s offsets until its transaction's marker (raises the commit's
        validation error: the group's generation, member, ...)."""
        group_id, producer_id = request.group_id, request.producer_id
        if producer_id < 0:
            raise InvalidRequestError("producer_id must be at least 0", field="producer_id")
        offsets = list(request.offsets)
        for c in offsets:
            if c.partition < 0:
                raise InvalidRequestError("partition must be at least 0", field="offsets")
        if request.add_to_txn:
            await self._add_to_txn(request)
        await self._answer(self.core.txn_offset_commit(
            group_id=group_id, offsets=offsets, now_ms=self._clock_ms(), validate_only=True,
            member_id=request.member_id, generation_id=request.generation_id,
            group_instance_id=request.group_instance_id))
        groups = self.pending.get(producer_id)
        if groups is None:
            if len(self.pending) >= MAX_PRODUCERS:
                raise CoordinatorNotAvailableError(f"{MAX_PRODUCERS} producers hold pending offsets here")
            groups = self.pending[producer_id] = {}
        held = groups.setdefault(group_id, {})
        if sum(len(g) for g in groups.values()) + len(offsets) > MAX_OFFSETS:
            raise InvalidRequestError(f"at most {MAX_OFFSETS} pending offsets per producer", field="offsets")
        for c in offsets:
            held[(c.topic, c.partition)] = c

    async def _add_to_txn(self, request: TxnOffsetCommit) -> None:
        """Transactions V2 (KIP-890 part 2, TxnOffsetCommit v5: no AddOffsetsToTxn before it):
        the group's `__consumer_offsets` partition joins the producer's transaction through its
        coordinator, as Kafka's group coordinator does. Raises its error (INVALID_PRODUCER_EPOCH
        for a fenced producer)."""
        if self.txn_verifier is None:
            raise CoordinatorNotAvailableError("no transaction coordinator link on this node")
        await self.txn_verifier.verify_txn(request.transactional_id, OFFSETS_TOPIC,
                                           self.core.partition_for(request.group_id), request.producer_id,
                                           request.producer_epoch, add=True)

    async def on_marker(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """The marker of `producer_id`'s transaction is committed in `topic`-`partition`: the
        offsets of the groups of that `__consumer_offsets` partition are written (commit) or
        dropped (abort). Raises the offset commit's error (the marker is then written again)."""
        if topic != OFFSETS_TOPIC:
            return
        groups = self.pending.get(producer_id)
        if not groups:
            return
        here = [g for g in groups if self.core.partition_for(g) == partition]
        for group_id in here:
            if commit:
                await self._answer(self.core.txn_offset_commit(
                    group_id=group_id, offsets=list(groups[group_id].values()), now_ms=self._clock_ms(),
                    validate_only=False))
            del groups[group_id]
        if not groups:
            self.pending.pop(producer_id, None)

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The (topic, partition)s of `group_id` with offsets of a transaction whose marker has
        not reached the group yet (OffsetFetch's require_stable answers them as unstable)."""
        return {tp for groups in self.pending.values() for tp in groups.get(group_id, ())}

    def health(self) -> Mapping[str, int]:
        return {"txn_offset_producers": len(self.pending)}

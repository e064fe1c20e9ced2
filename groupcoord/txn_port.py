"""The transaction coordinator's typed port (issue 48): what both front doors call for the
transaction ops, protocol-neutral. The native adapter (raftlog/node/native_txn.py) and the Kafka
listener (raftlog/node/kafka/txn.py) decode their wire into these dataclasses, call the port
behind the one ACL guard (raftlog/node/guarded_txn.py `GuardedTxn`: Kafka's rules on the
TransactionalId resource) and encode what it answers. Served by groupcoord/txn_service.py
`TxnCoordinatorService` (TxnOffsetCommit by the group coordinator's `TxnOffsets`, through it).

A whole-request failure (NOT_COORDINATOR, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, a refusal
of the guard, ...) is raised: an exception of the one registry (raftlog/base/errors.py). A
per-item failure (one id of a describe) is that item's `error`, in the order asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from groupcoord.context import CommitOffset
from groupcoord.port import Coordinator, PartitionOutcome
from raftlog.base.errors import RaftlogError

__all__ = [
    "AddOffsetsToTxn", "AddPartitionsToTxn", "DescribedTxn", "EndTxn", "InitTxnProducerId", "ListTransactions",
    "ListedTxn", "ProducerEpoch", "TxnListing", "TxnOffsetCommit", "TxnPartitionsAdded", "TxnPort",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class InitTxnProducerId:
    """InitProducerId with a transactional id; `producer_id`/`producer_epoch` -1: none known
    (InitProducerId v3+ sends the current ones to bump the epoch after a timeout)."""

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ProducerEpoch:
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxn:
    """`verify_only` (KIP-890 part 1): only whether the partitions are in the ongoing
    transaction of that producer id and epoch; nothing is added."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: Sequence[TopicPartition]
    verify_only: bool = False


@dataclass(frozen=True, slots=True)
class TxnPartitionsAdded:
    """`unknown`: the partitions the coordinator does not know; then nothing was added (Kafka
    answers them UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED)."""

    unknown: Sequence[TopicPartition] = ()


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class EndTxn:
    """`bump_epoch`: Transactions V2 (KIP-890 part 2, EndTxn v5): the coordinator bumps the
    epoch and answers the producer id and epoch of the next transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    bump_epoch: bool = False


@dataclass(frozen=True, slots=True)
class TxnOffsetCommit:
    """Offsets held until the transaction's COMMIT marker reaches the group's partition.
    `add_to_txn`: Transactions V2 (TxnOffsetCommit v5), the group's partition joins the
    transaction first (no AddOffsetsToTxn)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: Sequence[CommitOffset]
    add_to_txn: bool = False
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedTxn:
    transactional_id: str
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: Sequence[TopicPartition] = ()
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class ListTransactions:
    """Kafka's filters: any of `states`, any of `producer_ids` (None: no filter), running at
    least `min_duration_ms` (-1: no filter)."""

    states: Sequence[str] | None = None
    producer_ids: Sequence[int] | None = None
    min_duration_ms: int = -1


@dataclass(frozen=True, slots=True)
class ListedTxn:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnListing:
    """The ids this node coordinates (clients ask every broker)."""

    node_id: int
    transactions: Sequence[ListedTxn] = ()


class TxnPort(Protocol):
    """The transaction ops (Kafka's InitProducerId with a transactional id, AddPartitionsToTxn
    .. ListTransactions, FindCoordinator of a transaction key); the native ops of the same names."""

    node_id: int

    async def find_txn_coordinator(self, transactional_id: str) -> Coordinator: ...

    async def init_txn_producer_id(self, request: InitTxnProducerId) -> ProducerEpoch: ...

    async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded: ...

    async def add_offsets_to_txn(self, request: AddOffsetsToTxn) -> None: ...

    async def end_txn(self, request: EndTxn) -> ProducerEpoch: ...

    async def txn_offset_commit(self, request: TxnOffsetCommit) -> list[PartitionOutcome]: ...

    async def describe_transactions(self, transactional_ids: Sequence[str]) -> list[DescribedTxn]: ...

    async def list_transactions(self, request: ListTransactions) -> TxnListing: ...

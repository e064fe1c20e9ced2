"""The partition service port: what the listeners (native, Kafka, and the ones to come) may
ask of the partitions, protocol-neutral and typed. Dataclasses in, dataclasses out; a
partition's failure is an exception of the one registry (raftlog/base/errors.py) in its
result's `error`, never a wire dict; a whole-request failure is raised.

    port.append(parts, acks=..., client=...) -> Appended     (then `await appended.wait(deadline)`)
    await port.fetch(FetchRequest(...))       -> [FetchResult]
    await port.list_offsets([OffsetQuery])    -> [OffsetResult]
    port.epoch_end_offsets([EpochQuery])      -> [EpochEndResult]
    await port.delete_records([DeletePart], deadline) -> [DeleteResult]
    await port.init_producer_id(...)          -> ProducerIdentity
    await port.recover_partition(topic, partition, unclean=...)
    port.log_dirs(wanted) -> [ReplicaSize];  port.producers(topic, partition) -> [ProducerInfo]

Results come back one per asked part, in the order asked. A NotLeaderError in a result
carries the hint once for every listener: `leader_id`, `leader` (its native address) and
`epoch` (the leader epoch the image knows for it, for Kafka's KIP-951 CurrentLeader).

Transactions (issue 42): `transactional_id` on produce (transactional batches are verified
with the coordinator; with `add_to_txn` the coordinator adds the partition, KIP-890 part 2), `isolation_level` on fetch and list offsets (READ_COMMITTED reads up
to the last stable offset; a fetch result names the aborted transactions in its range),
`write_txn_marker` (the coordinators' WriteTxnMarkers). Room for what comes next (DESIGN §10):
new ops (share-group acquisition, replica moves) are added here once, not per listener.

Leader epochs (KIP-320): a fetched part, an offset query and an epoch query may carry the
client's `current_leader_epoch` (from its metadata; -1: not checked). Older than the replica's
leader epoch: FENCED_LEADER_EPOCH; newer: UNKNOWN_LEADER_EPOCH (this replica is behind the
client's metadata; retriable), as Kafka's brokers answer. An offset result carries the leader
epoch of the offset it names (Kafka's ListOffsets v4+ `leader_epoch`).

Which implementation: partition/service.py (`PartitionService`, over the replica manager's
replicas); raftlog/node/authorize.py puts the one ACL guard in front of it
(`GuardedPartitions`). The listeners import this module, never `partition.replica` or
`partition.log` (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Protocol, TypeAlias

from partition.producer_txn import AbortedTxn
from partition.segment import FileSlice
from raftlog.base.errors import RaftlogError

__all__ = [
    "IsolationLevel", "ClientInfo", "ProducePart", "ProduceResult", "Appended", "FetchPart",
    "FetchRequest", "FetchResult", "RecordsSlice", "OffsetQuery", "OffsetResult", "EpochQuery",
    "EpochEndResult", "DeletePart", "DeleteResult", "ProducerIdentity", "ReplicaSize",
    "ProducerInfo", "PartitionKey", "TxnMarker", "AbortedTxn", "PartitionPort", "TxnVerifierPort", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP",
]

EARLIEST_TIMESTAMP: Final = -2  # list offsets: the log start offset
LATEST_TIMESTAMP: Final = -1  # list offsets: the high watermark
MAX_TIMESTAMP: Final = -3  # list offsets: the batch with the largest timestamp (KIP-734)


class IsolationLevel(IntEnum):
    """Kafka's values: READ_COMMITTED reads up to the last stable offset."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who sent a request, for the log lines of what the port refuses (never for decisions)."""

    listener: str
    peer: str | None = None
    principal: str | None = None
    client_id: str | None = None

    def fields(self) -> dict[str, str]:
        return {k: v for k, v in (("listener", self.listener), ("peer", self.peer),
                                  ("principal", self.principal), ("client_id", self.client_id))
                if v is not None}


# ------------------------------------------------------------------------------ produce


@dataclass(frozen=True, slots=True)
class ProducePart:
    """`checked`: `records` passed validator.py's checks that need no topic (header, CRC-32C,
    counts, each record; max timestamps fixed), run by the node process that decoded the
    request (a Kafka network worker: raftlog/node/kafka/network_worker.py), so the leader
    checks only the topic's rules (batch size, timestamps) and neither the validator nor the
    log computes those CRCs again."""

    topic: str
    partition: int
    records: bytes
    checked: bool = False


@dataclass(slots=True)
class ProduceResult:
    """One part's answer: offsets, or `error` (then the offsets are -1)."""

    topic: str
    partition: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error: RaftlogError | None = None

    def fail(self, error: RaftlogError) -> None:
        self.base_offset = self.log_append_time_ms = self.log_start_offset = -1
        self.error = error


class Appended(Protocol):
    """The appends of one produce, done (in the leaders' logs, in order) when `append`
    returned; `wait` is the acks=all half."""

    @property
    def results(self) -> list[ProduceResult]: ...

    @property
    def waiting(self) -> bool:
        """Whether `wait` has anything to wait for (acks=all parts that appended)."""
        ...

    async def wait(self, deadline: float) -> list[ProduceResult]:
        """Until each acks=all part is committed or `deadline` (trio time) passes (that part's
        error: REQUEST_TIMED_OUT, the records may still be committed). Returns `results`."""
        ...


# ------------------------------------------------------------------------------ fetch


@dataclass(frozen=True, slots=True)
class FetchPart:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # KIP-320 (-1: not checked; module docstring)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    parts: Sequence[FetchPart]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    zero_copy: bool = False  # records as RecordsSlice (the caller closes them), else bytes
    # KIP-392: the consumer's client.rack (Fetch v11+ rack_id). With one, a follower serves the
    # fetch up to its high watermark, and the leader names an in-sync replica in that rack
    # (FetchResult.preferred_read_replica).
    client_rack: str | None = None


# A range of a segment file (fd, offset, length; `close()` by its holder) that a listener
# sends with sendfile: the zero-copy fetch's records.
RecordsSlice: TypeAlias = FileSlice


@dataclass(slots=True)
class FetchResult:
    topic: str
    partition: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | RecordsSlice | None = None
    error: RaftlogError | None = None
    preferred_read_replica: int = -1  # KIP-392: fetch from this broker instead (-1: here)
    # read_committed: the aborted transactions with records in the range answered (None:
    # read_uncommitted); clients drop their records (partition/producer_txn.py).
    aborted_transactions: list[AbortedTxn] | None = None


# ------------------------------------------------------------------------------ offsets


@dataclass(frozen=True, slots=True)
class OffsetQuery:
    """`timestamp`: EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, or a time in ms."""

    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = -1  # KIP-320 (-1: not checked; module docstring)


@dataclass(slots=True)
class OffsetResult:
    """`leader_epoch`: the epoch of the batch holding `offset` (the leader's current epoch for
    the latest offset, as Kafka answers); -1 with no offset."""

    topic: str
    partition: int
    offset: int = -1
    timestamp: int = -1
    error: RaftlogError | None = None
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochQuery:
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = -1  # KIP-320 (-1: not checked; module docstring)


@dataclass(slots=True)
class EpochEndResult:
    """KIP-320: the largest epoch <= the asked one and where it ends, on the leader."""

    topic: str
    partition: int
    current_epoch: int = -1
    leader_epoch: int = -1
    end_offset: int = -1
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class DeletePart:
    """`offset`: the new log start offset; -1 for the high watermark."""

    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class DeleteResult:
    topic: str
    partition: int
    low_watermark: int = -1
    error: RaftlogError | None = None


# ------------------------------------------------------------------------------ producers, status


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaSize:
    """A replica open here: its segments' bytes and how far its log end is behind the high
    watermark it knows (never below 0)."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    current_txn_start_offset: int = -1  # the first offset of its transaction open here, else -1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One COMMIT/ABORT marker of Kafka's WriteTxnMarkers, for one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PartitionKey:
    topic: str
    partition: int


class TxnVerifierPort(Protocol):
    """KIP-890 part 1: asks the transaction coordinator of `transactional_id` whether this
    partition is in the ongoing transaction of (producer_id, producer_epoch); raises its error
    (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, ...) if not. With `add` (part 2, Transactions
    V2) the coordinator adds the partition to the transaction instead. Returns what
    `marker_offset()` (the producer's last marker offset here) was when the question its answer
    holds for was sent: the verification guard the caller checks at append
    (raftlog/node/txn_link.py)."""

    async def verify_txn(self, transactional_id: str, topic: str, partition: int,
                         producer_id: int, producer_epoch: int, marker_offset: Callable[[], int] | None = None,
                         *, add: bool = False) -> int: ...


class PartitionPort(Protocol):
    """The partition service as every listener sees it (module docstring)."""

    async def append(self, parts: Sequence[ProducePart], *, acks: int, client: ClientInfo,
                     transactional_id: str | None = None, add_to_txn: bool = False) -> Appended:
        """Check each part as Kafka's log validator does and append it on its leader, in order
        (module docstring). `acks` is 0, 1 or -1 (the caller checked). `add_to_txn`
        (Transactions V2, KIP-890 part 2): the first transactional batch of a producer's
        transaction in a partition adds that partition to the transaction, instead of being
        refused unless the producer added it."""
        ...

    async def fetch(self, request: FetchRequest) -> list[FetchResult]: ...

    async def list_offsets(self, queries: Sequence[OffsetQuery], *,
                           isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                           ) -> list[OffsetResult]: ...

    def epoch_end_offsets(self, queries: Sequence[EpochQuery]) -> list[EpochEndResult]: ...

    async def delete_records(self, parts: Sequence[DeletePart], deadline: float) -> list[DeleteResult]: ...

    async def init_producer_id(self, *, transactional_id: str | None = None) -> ProducerIdentity: ...

    async def write_txn_marker(self, marker: TxnMarker, deadline: float) -> None:
        """Append the marker on the partition's leader and wait for its commit (raises the
        partition's error: NotLeaderError with the hint, RequestTimedOutError, ...)."""
        ...

    async def recover_partition(self, topic: str, partition: int, *, unclean: bool) -> None: ...

    def log_dirs(self, wanted: set[PartitionKey] | None = None) -> list[ReplicaSize]: ...

    def producers(self, topic: str, partition: int) -> list[ProducerInfo]:
        """The leader's active producers; raises NotLeaderError / UnknownTopicOrPartitionError."""
        ...


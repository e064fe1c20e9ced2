"""The group coordinator's typed port (issue 48): what both front doors call for the group
ops (classic and KIP-848), protocol-neutral. The native adapter (raftlog/node/native_groups.py) and the
Kafka listener (raftlog/node/kafka/groups.py, consumer_groups.py) decode their wire into these dataclasses, call
the port behind the one ACL guard (raftlog/node/guarded_groups.py `GuardedGroups`) and encode
what it answers. Served by groupcoord/service.py `GroupCoordinatorService`.

A whole-request failure (NOT_COORDINATOR, UNKNOWN_MEMBER_ID, a refusal of the guard, ...) is
raised: an exception of the one registry (raftlog/base/errors.py). A per-item failure (one
partition of a commit, one group of a describe) is that item's `error`, in the order asked.

Every wait (`timeout_ms`) is the caller's whole budget; the coordinator caps it below the
node's request timeout and answers REQUEST_TIMED_OUT past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from groupcoord.context import CommitOffset
from raftlog.base.errors import RaftlogError

__all__ = [
    "ConsumerGroupDescription", "ConsumerHeartbeat", "ConsumerHeartbeatAnswer", "ConsumerMember", "TopicPartitions",
    "CommitOffset", "Coordinator", "DescribedGroup", "DescribedMember", "GroupOutcome", "GroupPort",
    "GroupListing", "Heartbeat", "JoinGroup", "Joined", "JoinedMember", "LeaveGroup", "LeavingMember",
    "MemberLeft", "OffsetCommit", "OffsetDelete", "OffsetFetch", "PartitionOutcome", "CommittedOffset",
    "ResetDone", "ResetOffsets", "ResetRow", "SyncGroup", "Synced",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Coordinator:
    """Where a group's coordinator is: the leader of its `__consumer_offsets` partition, at
    its native client address (the Kafka listener answers that broker's Kafka address)."""

    node_id: int
    host: str
    port: int
    partition: int


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]  # (name, metadata), the member's preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class Joined:
    generation_id: int
    member_id: str
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    members: Sequence[JoinedMember] = ()  # the leader's answer only


@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    member_id: str
    generation_id: int
    assignments: dict[str, bytes] | None  # the leader's plan; followers send none
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Synced:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    group_id: str
    members: Sequence[LeavingMember]


@dataclass(frozen=True, slots=True)
class MemberLeft:
    member_id: str
    group_instance_id: str | None
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    offsets: Sequence[CommitOffset]
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One partition of a commit, an offset delete: done, or its error."""

    topic: str
    partition: int
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    group_id: str
    partitions: Sequence[TopicPartition] | None  # None: every committed partition
    member_id: str = ""  # a KIP-848 member (OffsetFetch v9): its epoch is checked
    member_epoch: int = -1
    # KIP-447 (OffsetFetch v7+): a partition whose offsets an open transaction has committed
    # answers UNSTABLE_OFFSET_COMMIT (retriable) until its marker applies them.
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """-1 offset and epoch: nothing committed. `error`: the partition's own (a refused topic)."""

    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    type: str = "classic"  # or "consumer" (KIP-848)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """A group that does not exist is state Dead, no members; a KIP-848 group has type
    "consumer" and no classic members."""

    group_id: str
    state: str = ""
    protocol_type: str = ""
    protocol: str = ""
    members: Sequence[DescribedMember] = ()
    type: str = "classic"
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    group_id: str
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class OffsetDelete:
    group_id: str
    partitions: Sequence[TopicPartition]
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ResetOffsets:
    group_id: str
    offsets: dict[TopicPartition, int]
    dry_run: bool = False
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ResetRow:
    topic: str
    partition: int
    previous_offset: int
    offset: int


@dataclass(frozen=True, slots=True)
class ResetDone:
    dry_run: bool
    partitions: Sequence[ResetRow] = field(default_factory=list)


# --- KIP-848 consumer groups (consumer_group_service.py) -------------------------------------


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: Sequence[int]


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A KIP-848 member's heartbeat: member_epoch 0 joins, -1 leaves, -2 leaves for now (a
    static member); `owned` None: unchanged since the last one."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1  # -1: unchanged
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Sequence[TopicPartitions] | None = None
    client_id: str = ""
    client_host: str = ""
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Sequence[TopicPartitions] | None = None  # None: unchanged; by topic name, sorted


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    state: str
    client_id: str
    client_host: str
    subscribed_topic_names: Sequence[str]
    subscribed_topic_regex: str | None
    assignment: Sequence[TopicPartitions]
    pending_revocation: Sequence[TopicPartitions]
    target_assignment: Sequence[TopicPartitions]
    classic: bool = False  # a classic member (JoinGroup/SyncGroup) inside the consumer group


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: Sequence[ConsumerMember] = ()
    error: RaftlogError | None = None


class GroupPort(Protocol):
    """The group ops: classic (Kafka's JoinGroup .. OffsetDelete) and KIP-848's; the native
    ops of the same names."""

    node_id: int

    async def find_coordinator(self, group_id: str) -> Coordinator: ...

    async def join_group(self, request: JoinGroup) -> Joined: ...

    async def sync_group(self, request: SyncGroup) -> Synced: ...

    async def heartbeat(self, request: Heartbeat) -> None: ...

    async def leave_group(self, request: LeaveGroup) -> list[MemberLeft]: ...

    async def offset_commit(self, request: OffsetCommit) -> list[PartitionOutcome]: ...

    async def offset_fetch(self, request: OffsetFetch) -> list[CommittedOffset]: ...

    async def list_groups(self, states: Sequence[str] | None = None) -> list[GroupListing]: ...

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]: ...

    async def delete_groups(self, group_ids: Sequence[str], timeout_ms: int | None = None) -> list[GroupOutcome]: ...

    async def offset_delete(self, request: OffsetDelete) -> list[PartitionOutcome]: ...

    async def reset_offsets(self, request: ResetOffsets) -> ResetDone: ...

    async def consumer_group_heartbeat(self, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer: ...

    async def consumer_group_describe(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]: ...

"""The share groups' typed port (KIP-932; issue 48): what both front doors call for the share
ops, protocol-neutral. The native adapter (raftlog/node/native_share.py) and the Kafka listener
(raftlog/node/kafka/share_groups.py) decode their wire into these dataclasses, call the port
behind the one ACL guard (raftlog/node/guarded_share.py `GuardedShare`: Kafka's rules, declared
as `ShareRule`s in raftlog/node/authorize.py) and encode what it answers. Served by
groupcoord/share_service.py `ShareService`.

A whole-request failure (NOT_COORDINATOR, UNKNOWN_MEMBER_ID, NOT_LEADER_OR_FOLLOWER, a refusal
of the guard, ...) is raised: an exception of the one registry (raftlog/base/errors.py). A
per-item failure (one group of a describe) is that item's `error`, in the order asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from groupcoord.port import TopicPartitions
from raftlog.base.errors import RaftlogError

__all__ = [
    "AcquiredRecords", "InFlightRecords", "ShareAck", "ShareAcknowledge", "ShareFetch", "ShareFetched",
    "ShareGroupDescription", "ShareGroupListing", "ShareHeartbeat", "ShareHeartbeatAnswer", "ShareMember",
    "SharePartitionOffsets", "SharePort", "ShareReset",
]


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """member_epoch 0 joins (member_id "": one is made), -1 leaves; `subscribed_topic_names`
    None: unchanged (required on join)."""

    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: Sequence[str] | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Sequence[TopicPartitions] | None = None  # None: unchanged; by topic name, sorted


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: Sequence[str]
    assignment: Sequence[TopicPartitions]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: Sequence[ShareMember] = ()
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupListing:
    group_id: str
    state: str
    members: int


@dataclass(frozen=True, slots=True)
class ShareAck:
    """Offsets first..last acknowledged as `type`: 0 gap, 1 accept, 2 release, 3 reject."""

    first_offset: int
    last_offset: int
    type: int


@dataclass(frozen=True, slots=True)
class ShareFetch:
    """On the partition's leader: `acknowledgements` applied first (all or none), then records
    acquired for the member; `auto_offset_reset` ("latest" / "earliest"): where a share
    partition without state starts."""

    group_id: str
    member_id: str
    topic: str
    partition: int
    max_records: int
    max_bytes: int = 1 << 20
    auto_offset_reset: str = "latest"
    acknowledgements: Sequence[ShareAck] = ()


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """`records`: whole batches (they may hold records not acquired: the member keeps only
    those of `acquired`); `acknowledge_error`: the refused acknowledgements' error (none of
    them applied; the fetch went on)."""

    records: bytes
    acquired: Sequence[AcquiredRecords]
    start_offset: int
    high_watermark: int
    acknowledge_error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class ShareAcknowledge:
    group_id: str
    member_id: str
    topic: str
    partition: int
    acknowledgements: Sequence[ShareAck]


@dataclass(frozen=True, slots=True)
class InFlightRecords:
    first_offset: int
    last_offset: int
    state: str
    delivery_count: int
    member_id: str | None


@dataclass(frozen=True, slots=True)
class SharePartitionOffsets:
    """`start_offset` None: no state; `lag` None: not known (no state, or no leader now)."""

    start_offset: int | None
    in_flight: Sequence[InFlightRecords] = ()
    lag: int | None = None


@dataclass(frozen=True, slots=True)
class ShareReset:
    """The share partition starts at `offset` (the group must be empty)."""

    group_id: str
    topic: str
    partition: int
    offset: int


class SharePort(Protocol):
    """The share-group ops (Kafka's ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
    ShareAcknowledge, Describe/Alter/DeleteShareGroupOffsets, ListGroups' share groups,
    DeleteGroups of a share group); the native ops of the same names."""

    node_id: int

    async def share_group_heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatAnswer: ...

    async def share_group_describe(self, group_ids: Sequence[str]) -> list[ShareGroupDescription]: ...

    async def share_groups_list(self) -> list[ShareGroupListing]: ...

    async def share_group_delete(self, group_id: str) -> None: ...

    async def share_fetch(self, request: ShareFetch) -> ShareFetched: ...

    async def share_acknowledge(self, request: ShareAcknowledge) -> int: ...

    async def share_group_offsets(self, group_id: str, topic: str, partition: int) -> SharePartitionOffsets: ...

    async def share_group_reset(self, request: ShareReset) -> None: ...

    async def share_group_delete_offsets(self, group_id: str, topic: str) -> None: ...

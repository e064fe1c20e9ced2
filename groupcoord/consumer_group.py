"""One KIP-848 consumer group's state (pure data and pure rules; no clock, no I/O).

    ConsumerGroup: group_epoch, assignment_epoch, members, target assignment, the partition
                   counts the target was computed for, static members
    ConsumerMember: subscription, member_epoch / previous_member_epoch, state, the partitions
                   it owns (`assigned`) and must give up (`pending_revocation`)
    reconcile(group, member, owned, now_ms): Kafka's CurrentAssignmentBuilder

Epochs (KIP-848): the group epoch moves when a member joins or leaves, a subscription changes
or a subscribed topic's partition count changes; the target assignment is then recomputed
and stamped with the group epoch (`assignment_epoch`). Each member converges on its target
on its own heartbeats and takes the assignment epoch as its member epoch when it gets there.

Reconciliation, the one rule that keeps a partition with one owner at a time: a partition
the target takes from a member is first moved to the member's `pending_revocation` (its
epoch stays: state `unrevoked_partitions`); only when the member's heartbeat lists its owned
partitions without them (it stopped consuming them and committed) are they dropped. A
partition the target gives a member is added only when no other member holds it (in
`assigned` or `pending_revocation`); until then the member is `unreleased_partitions`.

Invariants (`check()`, called by the unit tests after every step):
* no partition is in two members' `assigned | pending_revocation`;
* `assigned` and `pending_revocation` of one member are disjoint; `pending_revocation` is
  empty unless the state is `unrevoked_partitions`;
* `static_members` indexes exactly the members with an instance id;
* a member's epoch is at most the assignment epoch, which is at most the group epoch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from groupcoord.consumer_assignor import TopicPartition
from groupcoord.consumer_group_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    Assignment,
    ConsumerGroupKey,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetMemberValue,
    TargetMetadataValue,
)

__all__ = ["ConsumerGroup", "ConsumerMember", "reconcile", "to_wire", "from_wire",
           "STABLE", "UNREVOKED", "UNRELEASED"]  # fmt: skip

STABLE: Final = "stable"
UNREVOKED: Final = "unrevoked_partitions"
UNRELEASED: Final = "unreleased_partitions"
LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2

Partitions = frozenset[TopicPartition]


def to_wire(tps: Partitions) -> Assignment:
    """((topic, (partition, ...)), ...), sorted: the record form of a set of partitions."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))


def from_wire(assignment: Assignment) -> Partitions:
    return frozenset((t, p) for t, ps in assignment for p in ps)


@dataclass
class ConsumerMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    instance_id: str | None = None
    rack_id: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: str = STABLE
    assigned: Partitions = frozenset()
    pending_revocation: Partitions = frozenset()
    # A classic member (JoinGroup/SyncGroup/Heartbeat) inside this consumer group (Kafka 4's
    # online upgrade): its session timeout and protocols; None for a KIP-848 member.
    classic_session_timeout_ms: int | None = None
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None
    # Transient (not stored; rebuilt as "now + timeout" on load).
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    sent: Partitions | None = None   # the assignment last sent to the member (None: never)

    def subscribed(self, topic_names: Any) -> frozenset[str]:
        """The topics this member subscribes to among `topic_names` (names and regex)."""
        out = {t for t in self.subscribed_topic_names}
        if self.subscribed_topic_regex:
            pattern = re.compile(self.subscribed_topic_regex)
            out.update(t for t in topic_names if pattern.fullmatch(t))
        return frozenset(out)

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.client_id, self.client_host, self.rebalance_timeout_ms, tuple(self.subscribed_topic_names),
            self.subscribed_topic_regex, self.server_assignor, self.instance_id, self.rack_id,
            self.classic_session_timeout_ms, self.classic_protocols)

    @property
    def is_classic(self) -> bool:
        return self.classic_protocols is not None

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state,
                                      to_wire(self.assigned), to_wire(self.pending_revocation))


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    subscribed_metadata: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    static_members: dict[str, str] = field(default_factory=dict)      # instance id -> member id
    # The last value written (or replayed) per key: the next append writes only what differs.
    written: dict[ConsumerGroupKey, Any] = field(default_factory=dict)

    def state(self) -> str:
        """Kafka's ConsumerGroupState: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember:
        member = self.members.pop(member_id)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def owners(self, but: str | None = None) -> dict[TopicPartition, str]:
        """Partition -> the member holding it (assigned or pending revocation)."""
        out: dict[TopicPartition, str] = {}
        for mid, m in self.members.items():
            if mid != but:
                for tp in m.assigned | m.pending_revocation:
                    out[tp] = mid
        return out

    def subscriptions(self, topic_names: Any) -> dict[str, frozenset[str]]:
        return {mid: m.subscribed(topic_names) for mid, m in self.members.items()}

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members name (ties: the smaller name), else `default`."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return min(votes, key=lambda a: (-votes[a], a))

    def records(self) -> dict[ConsumerGroupKey, Any]:
        """Every record that describes this group now (what the log must hold)."""
        g = self.group_id
        out: dict[ConsumerGroupKey, Any] = {
            ConsumerGroupKey(GROUP_METADATA, g): GroupMetadataValue(self.group_epoch),
            ConsumerGroupKey(PARTITION_METADATA, g): PartitionMetadataValue(tuple(sorted(self.subscribed_metadata.items()))),
            ConsumerGroupKey(TARGET_METADATA, g): TargetMetadataValue(self.assignment_epoch),
        }
        for mid, m in self.members.items():
            out[ConsumerGroupKey(MEMBER_METADATA, g, mid)] = m.metadata_value()
            out[ConsumerGroupKey(CURRENT_ASSIGNMENT, g, mid)] = m.assignment_value()
        for mid, tps in self.target.items():
            out[ConsumerGroupKey(TARGET_MEMBER, g, mid)] = TargetMemberValue(to_wire(tps))
        return out

    def changes(self) -> list[tuple[ConsumerGroupKey, Any]]:
        """The records to append so the log matches `records()` (tombstones for keys gone);
        `written` is moved to the new state."""
        now = self.records()
        out: list[tuple[ConsumerGroupKey, Any]] = [(k, v) for k, v in now.items() if self.written.get(k) != v]
        out.extend((k, None) for k in self.written if k not in now)
        self.written = now
        return sorted(out, key=lambda kv: (kv[0].kind, kv[0].member_id))

    def tombstones(self) -> list[tuple[ConsumerGroupKey, None]]:
        """Tombstones for every key written for this group (conversion back, deletion)."""
        keys = set(self.written) | set(self.records())
        self.written = {}
        return [(k, None) for k in sorted(keys, key=lambda k: (k.kind, k.member_id))]

    def check(self) -> None:
        seen: dict[TopicPartition, str] = {}
        for mid, m in self.members.items():
            assert m.member_id == mid
            assert not (m.assigned & m.pending_revocation), (mid, m.assigned, m.pending_revocation)
            assert m.state == UNREVOKED or not m.pending_revocation, (mid, m.state)
            assert m.member_epoch <= self.assignment_epoch, (mid, m.member_epoch, self.assignment_epoch)
            for tp in m.assigned | m.pending_revocation:
                assert tp not in seen, f"{tp} owned by {seen.get(tp)} and {mid}"
                seen[tp] = mid
        assert self.assignment_epoch <= self.group_epoch
        expected = {m.instance_id: mid for mid, m in self.members.items() if m.instance_id is not None}
        assert self.static_members == expected, (self.static_members, expected)


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None, now_ms: int) -> None:
    """Move `member` towards its target (Kafka's CurrentAssignmentBuilder). `owned` is what
    the member's heartbeat says it owns (None: not sent)."""
    if member.state == UNREVOKED:
        if owned is None or owned & member.pending_revocation:
            return  # still revoking: the member has not acknowledged yet
        member.pending_revocation = frozenset()
        member.revocation_deadline_ms = None
        member.state = STABLE
    target = group.target.get(member.member_id, frozenset())
    if member.member_epoch == group.assignment_epoch and member.state == STABLE and member.assigned == target:
        return
    revoke = member.assigned - target
    if revoke:
        member.assigned = member.assigned & target
        member.pending_revocation = revoke
        member.state = UNREVOKED
        member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        return
    others = group.owners(but=member.member_id)
    wanted = target - member.assigned
    free = frozenset(tp for tp in wanted if tp not in others)
    member.assigned = member.assigned | free
    if member.member_epoch != group.assignment_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
    member.state = UNRELEASED if wanted - free else STABLE


def deadlines(group: ConsumerGroup) -> list[int]:
    """The times at which `tick` has work for this group."""
    out: list[int] = []
    for m in group.members.values():
        out.append(m.session_deadline_ms)
        if m.revocation_deadline_ms is not None:
            out.append(m.revocation_deadline_ms)
    return out


def topic_counts(topics: Mapping[str, int], subscribed: Any) -> dict[str, int]:
    """{topic: partition count} of the subscribed topics that exist."""
    return {t: topics[t] for t in sorted(subscribed) if t in topics}

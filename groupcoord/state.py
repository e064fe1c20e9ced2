"""One consumer group's state machine and members (pure data; no clock, no I/O).

States and the transitions allowed into each (Kafka's classic GroupMetadata):

    Empty               ← PreparingRebalance (the rebalance ended with no member)
    PreparingRebalance  ← Empty, Stable, CompletingRebalance
    CompletingRebalance ← PreparingRebalance (every known member rejoined or timed out)
    Stable              ← CompletingRebalance (the leader's assignment was stored)
    Dead                ← any (deleted, or its partition moved away)

Invariants (checked by `check()`, which the tests call after every step):
* `leader_id` is a member id or None; None iff there are no members.
* Every static member is indexed in `static_members` (group_instance_id → member_id) and
  nothing else is.
* `num_awaiting_join` equals the number of members with `awaiting_join`.
* Empty and Dead groups have no members; a Stable / CompletingRebalance group has a
  `protocol_name` and `generation_id` > 0.
* `generation_id` never decreases while the group lives.

A member's protocols are its ordered preferences `(name, metadata)`; the group's protocol is
chosen by vote among the protocols every member supports (`select_protocol`): each member votes
for its first supported choice; most votes wins; a tie goes to the leader's preference order
(Kafka breaks ties arbitrarily; we want a deterministic core).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from groupcoord.records import GroupKey, GroupValue, MemberValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A bug in the coordinator: it asked for a transition the state machine does not allow."""


@dataclass
class OffsetEntry:
    """A committed offset in the cache, with the log offset of the record it came from
    (`log_offset`): the cache only ever takes a record that is later in the log than the one
    it holds, so replay order and completion order cannot move an offset back."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int | None
    expire_timestamp: int | None
    log_offset: int


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    group_instance_id: str | None = None
    assignment: bytes = b""
    # Join/sync bookkeeping. `awaiting_*` says the member has asked and waits; `*_key` is the
    # pending request to answer (None when the shell abandoned it: the member still counts).
    awaiting_join: bool = False
    join_key: int | None = None
    awaiting_sync: bool = False
    sync_key: int | None = None
    is_new: bool = False
    heartbeat_deadline_ms: int = 0

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateTransition(f"member {self.member_id} supports none of {sorted(candidates)}")

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion order = join order
    pending_members: dict[str, int] = field(default_factory=dict)  # member_id -> expiry ms
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member_id
    offsets: dict[tuple[str, int], OffsetEntry] = field(default_factory=dict)
    num_awaiting_join: int = 0
    state_timestamp_ms: int = 0
    # Rebalance timers (absolute ms). `rebalance_deadline_ms`: the join phase ends then at the
    # latest. `initial_delay_deadline_ms`: an initial delayed join (Empty → first generation)
    # waits until then for more members, extended while new members keep arriving.
    rebalance_deadline_ms: int | None = None
    initial_delay_deadline_ms: int | None = None
    new_member_added: bool = False
    # Log offset of the last group record committed for this group (-1: none seen).
    group_log_offset: int = -1
    # The generation whose leader assignment is being appended (a second SyncGroup from the
    # leader of that generation must not append it again).
    assignment_generation: int | None = None

    # --- queries ----------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        names: set[str] | None = None
        for m in self.members.values():
            own = set(m.protocol_names())
            names = own if names is None else names & own
        return names or set()

    def supports_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's supportsProtocols: an Empty group takes any non-empty type and list; else
        the type must match and one of `names` must be supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(n in candidates for n in names)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalStateTransition(f"group {self.group_id}: no protocol common to all members")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        tied = {name for name, n in votes.items() if n == best}
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocol_names():
            if name in tied:
                return name
        return min(tied)  # unreachable: the leader votes for a candidate; kept total

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[str]:
        return [mid for mid, m in self.members.items() if not m.awaiting_join]

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """True when `group_instance_id` is held by a different member id (KIP-345)."""
        if group_instance_id is None:
            return False
        holder = self.static_members.get(group_instance_id)
        return holder is not None and holder != member_id

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # --- changes ----------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.awaiting_join:
            self.num_awaiting_join += 1

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if member.awaiting_join:
            self.num_awaiting_join -= 1
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def set_awaiting_join(self, member: Member, awaiting: bool) -> None:
        if awaiting and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif not awaiting and member.awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = awaiting

    def maybe_elect_joined_leader(self) -> None:
        """At the end of a join phase: if the leader did not rejoin, the first member that did
        becomes leader (Kafka's maybeElectNewJoinedLeader)."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return
        for mid, m in self.members.items():
            if m.awaiting_join:
                self.leader_id = mid
                return

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Move the member held by `group_instance_id` to `new_member_id`, keeping its place,
        assignment and leadership. The caller answers the old id's pending requests."""
        old = self.members[old_member_id]
        rebuilt: dict[str, Member] = {}
        for mid, m in self.members.items():
            rebuilt[new_member_id if mid == old_member_id else mid] = m
        self.members = rebuilt
        old.member_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return old

    def init_next_generation(self, now_ms: int) -> None:
        """End of a join phase: bump the generation; CompletingRebalance with a protocol
        if members remain, else Empty without one."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.rebalance_deadline_ms = None
        self.initial_delay_deadline_ms = None
        self.new_member_added = False

    def check(self) -> None:
        """Assert the invariants in the module docstring (tests call this after every step)."""
        assert (self.leader_id is None) == (not self.members), (self.leader_id, list(self.members))
        assert self.leader_id is None or self.leader_id in self.members
        expected = {m.group_instance_id: mid for mid, m in self.members.items() if m.group_instance_id}
        assert self.static_members == expected, (self.static_members, expected)
        assert self.num_awaiting_join == sum(m.awaiting_join for m in self.members.values())
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            assert not self.members
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert self.protocol_name is not None and self.generation_id > 0
        for mid, m in self.members.items():
            assert m.member_id == mid


def group_record(group: Group) -> tuple[GroupKey, GroupValue]:
    """The group's classic record (kind 2): members with their selected protocol's metadata."""
    protocol = group.protocol_name or ""
    members = tuple(
        MemberValue(
            member_id=m.member_id,
            client_id=m.client_id,
            client_host=m.client_host,
            session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscription=m.metadata(protocol),
            assignment=m.assignment,
            group_instance_id=m.group_instance_id,
        )
        for m in group.members.values()
    )
    value = GroupValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        members=members,
        protocol=group.protocol_name if members else None,
        leader=group.leader_id if members else None,
        current_state_timestamp=group.state_timestamp_ms,
        state=group.state.value,
    )
    return GroupKey(group.group_id), value

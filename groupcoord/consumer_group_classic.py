"""Kafka 4's online upgrade and downgrade between a classic group and a KIP-848 consumer group
(pure conversions; no clock, no I/O): `group.consumer.migration.policy`, a classic group's
members turned into classic members of a consumer group, and back.

    to_consumer_group(group)        a Stable classic group of protocol type "consumer" as a
                                    ConsumerGroup: each member keeps its id, its subscription
                                    (its JoinGroup ConsumerProtocolSubscription), its current
                                    assignment (its SyncGroup ConsumerProtocolAssignment), its
                                    session timeout and protocols (`classic_*`); member epoch,
                                    group epoch and assignment epoch are the generation, and the
                                    target is what each member holds (Kafka's fromClassicGroup)
    to_classic_members(cg, group)   the other way, once no KIP-848 member is left: the group's
                                    classic members become the classic group's, with their
                                    assignments as ConsumerProtocolAssignment bytes, generation
                                    = group epoch; the caller starts a rebalance (Kafka's
                                    convertToClassicGroup + prepareRebalance)
    subscription_of(protocols)      (topics, owned partitions) from a JoinGroup's first protocol

Bad bytes (not Kafka's ConsumerProtocol) refuse the upgrade with GROUP_ID_NOT_FOUND, as Kafka's
"Cannot upgrade the classic group" does; the group stays classic and keeps serving.
    convert_from_classic(ctx, g)    the first KIP-848 heartbeat's conversion (Empty or upgrade)
    maybe_downgrade(ctx, cg, g, t)  after a member left: back to classic when only classic
                                    members are left (the policy allowing)

May import: raftlog.base, and groupcoord's consumer_group, context, records and state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from groupcoord.consumer_group import STABLE, ConsumerGroup, ConsumerMember, Partitions
from groupcoord.context import CoordinatorContext
from groupcoord.records import GroupKey
from groupcoord.state import Group, GroupState, Member, group_record
from raftlog.base.consumer_protocol import Assignment, decode_assignment, decode_subscription, encode_assignment
from raftlog.base.errors import CorruptMessageError, GroupIdNotFoundError, RebalanceInProgressError

__all__ = ["MIGRATION_POLICIES", "upgrade_allowed", "downgrade_allowed", "to_consumer_group",
           "to_classic_members", "subscription_of", "common_protocol", "convert_from_classic", "maybe_downgrade"]  # fmt: skip

# group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy).
MIGRATION_POLICIES: Final = ("bidirectional", "upgrade", "downgrade", "disabled")
PROTOCOL_TYPE: Final = "consumer"


def upgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "upgrade")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "downgrade")


def subscription_of(protocols: Sequence[tuple[str, bytes]]) -> tuple[tuple[str, ...], Partitions]:
    """(subscribed topics, owned partitions) of a classic member: its first protocol's
    ConsumerProtocolSubscription. Raises CorruptMessageError."""
    sub = decode_subscription(protocols[0][1])
    return tuple(sorted(set(sub.topics))), frozenset(sub.owned_partitions)


def common_protocol(members: Sequence[ConsumerMember]) -> str | None:
    """The first protocol of the first member that every classic member supports."""
    names: set[str] | None = None
    for m in members:
        own = {n for n, _ in m.classic_protocols or ()}
        names = own if names is None else names & own
    for m in members:
        for n, _ in m.classic_protocols or ():
            if names and n in names:
                return n
    return None


def to_consumer_group(group: Group) -> ConsumerGroup:
    """The consumer group a Stable classic group becomes (the module docstring says how).
    Raises GroupIdNotFoundError when a member's bytes are not Kafka's ConsumerProtocol."""
    epoch = group.generation_id
    cg = ConsumerGroup(group.group_id, group_epoch=epoch, assignment_epoch=epoch)
    protocol = group.protocol_name or ""
    for m in group.members.values():
        try:
            topics = decode_subscription(m.metadata(protocol)).topics
            assigned = frozenset(decode_assignment(m.assignment).partitions)
        except CorruptMessageError as e:
            raise GroupIdNotFoundError(
                f"cannot upgrade classic group {group.group_id!r}: member {m.member_id!r}: {e}") from None
        member = ConsumerMember(
            m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms, tuple(sorted(set(topics))),
            instance_id=m.group_instance_id, member_epoch=epoch, previous_member_epoch=epoch, state=STABLE,
            assigned=assigned, classic_session_timeout_ms=m.session_timeout_ms, classic_protocols=m.protocols,
            session_deadline_ms=m.heartbeat_deadline_ms, sent=assigned)
        cg.add(member)
        cg.target[m.member_id] = assigned
    return cg


def to_classic_members(cg: ConsumerGroup, group: Group, now_ms: int) -> None:
    """Fill the (memberless) classic `group` with `cg`'s classic members, generation = group
    epoch, protocol = one they all support, each with its current assignment as bytes. The
    caller checked that every member of `cg` is classic; the group is left Empty here and the
    caller moves it to PreparingRebalance."""
    members = list(cg.members.values())
    assert members and all(m.is_classic for m in members)
    group.generation_id = max(group.generation_id + 1, cg.group_epoch)
    group.protocol_type = PROTOCOL_TYPE
    group.leader_id = None
    for m in members:
        assert m.classic_protocols is not None and m.classic_session_timeout_ms is not None
        group.add(Member(
            member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
            session_timeout_ms=m.classic_session_timeout_ms, rebalance_timeout_ms=m.rebalance_timeout_ms,
            protocol_type=PROTOCOL_TYPE, protocols=m.classic_protocols, group_instance_id=m.instance_id,
            assignment=encode_assignment(Assignment(tuple(sorted(m.assigned)))),
            heartbeat_deadline_ms=now_ms + m.classic_session_timeout_ms))
    group.protocol_name = common_protocol(members)
    group.state = GroupState.EMPTY


def convert_from_classic(ctx: CoordinatorContext, group: Group) -> tuple[ConsumerGroup, list[tuple[Any, Any]]]:
    """The first KIP-848 heartbeat for classic `group`: an Empty one becomes an empty consumer
    group; one with members is upgraded online (to_consumer_group) when the policy allows it,
    the group is Stable and of protocol type "consumer", else GROUP_ID_NOT_FOUND (the member
    retries; the classic group keeps serving). Returns the group and the records to append
    first (the classic record's tombstone); offsets stay in `group`."""
    gid = group.group_id
    if group.members or not group.is_(GroupState.EMPTY):
        if not upgrade_allowed(ctx.config.group_consumer_migration_policy):
            raise GroupIdNotFoundError(f"group {gid!r} is a classic group with members and "
                                       f"group.consumer.migration.policy does not allow an upgrade")
        if group.protocol_type != PROTOCOL_TYPE or not group.is_(GroupState.STABLE):
            raise GroupIdNotFoundError(f"group {gid!r} is a classic group that cannot be upgraded now "
                                       f"(protocol type {group.protocol_type!r}, {group.state.value})")
        if len(group.members) > ctx.config.group_max_size:
            raise GroupIdNotFoundError(f"group {gid!r} has more members than group_max_size")
        cg = to_consumer_group(group)
        for m in group.members.values():
            ctx.complete(m.join_key, RebalanceInProgressError("the group was upgraded to a consumer group"))
            ctx.complete(m.sync_key, RebalanceInProgressError("the group was upgraded to a consumer group"))
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        group.num_awaiting_join, group.leader_id, group.protocol_name = 0, None, None
        group.state = GroupState.EMPTY
    else:
        cg = ConsumerGroup(gid, group_epoch=0)
    ctx.consumer_groups[gid] = cg
    group.protocol_type = PROTOCOL_TYPE
    items: list[tuple[Any, Any]] = []
    if group.group_log_offset >= 0:
        items.append((GroupKey(gid), None))  # the classic record goes: Kafka's upgrade
    return cg, items


def maybe_downgrade(ctx: CoordinatorContext, cg: ConsumerGroup, group: Group, now_ms: int) -> list[tuple[Any, Any]] | None:
    """After a member left `cg`: if members are left and all of them are classic, and the
    policy allows it, `cg` becomes a classic group again (Kafka's convertToClassicGroup): its
    records are tombstoned, the classic record written, and a rebalance starts that every
    member joins again. Returns the records to append, or None (nothing changed)."""
    members = list(cg.members.values())
    if not members or not all(m.is_classic for m in members):
        return None
    if not downgrade_allowed(ctx.config.group_consumer_migration_policy) or len(members) > ctx.config.group_max_size:
        return None
    if common_protocol(members) is None:
        return None
    items: list[tuple[Any, Any]] = list(cg.tombstones())
    del ctx.consumer_groups[cg.group_id]
    to_classic_members(cg, group, now_ms)
    group.initial_delay_deadline_ms = None
    group.rebalance_deadline_ms = now_ms + group.rebalance_timeout_ms()
    group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
    ctx.touch(group)
    items.append(group_record(group))
    return items

"""Classic members inside a KIP-848 consumer group (Kafka 4's mixed groups during a rolling
upgrade or downgrade): JoinGroup, SyncGroup, Heartbeat and LeaveGroup of the classic protocol,
served by the consumer group's server-side assignor.

Kafka semantics kept (GroupMetadataManager.classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup):
* JoinGroup: protocol type "consumer" and a protocol every classic member supports, else
  INCONSISTENT_GROUP_PROTOCOL; an unknown dynamic member gets MEMBER_ID_REQUIRED; the member's
  subscription is its first protocol's ConsumerProtocolSubscription (a change bumps the group
  epoch), its owned partitions are what it says it still holds; the target is recomputed and
  the member reconciled with them (partitions it no longer owns are released at once). The
  answer (after the records commit) carries generation = member epoch, the member's first
  protocol, no leader and no member list: the client assigns nothing.
* SyncGroup: UNKNOWN_MEMBER_ID for a member that is not classic, ILLEGAL_GENERATION for a
  generation other than its epoch, INCONSISTENT_GROUP_PROTOCOL for another protocol,
  REBALANCE_IN_PROGRESS when the group epoch moved on since its join (unless it is revoking:
  then it must first learn what it keeps); else its assigned partitions as
  ConsumerProtocolAssignment bytes (never one that another member still holds).
* Heartbeat: the same member checks; REBALANCE_IN_PROGRESS when its epoch is below the group
  epoch, it must revoke partitions, or the partitions it waits for are all free: it joins
  again, and that join moves it on.
* LeaveGroup: the members go (by member id or instance id); when no KIP-848 member is left,
  the group converts back to classic (consumer_group_classic.maybe_downgrade).
Deviations: a static classic member whose instance id rejoins under a new member id replaces
the old one as a new member (a rebalance, where Kafka keeps its assignment); the SyncGroup
answer does not wait for an append; a member that joined and never syncs is removed by its
session timeout (Kafka has a sync timeout of the rebalance timeout).

Functions over a `CoordinatorContext`. Pure.
May import: raftlog.base, and groupcoord's consumer_group*, context and state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from groupcoord import consumer_group_classic
from groupcoord.consumer_group import UNRELEASED, UNREVOKED, ConsumerGroup, ConsumerMember, reconcile
from groupcoord.consumer_group_classic import PROTOCOL_TYPE
from groupcoord.consumer_group_ops import remove_member, retarget, update_subscription, write
from groupcoord.context import CoordinatorContext, Pending, Response
from raftlog.base.consumer_protocol import Assignment, encode_assignment
from raftlog.base.errors import (
    CorruptMessageError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = ["join", "sync", "heartbeat", "leave"]


def _supports(cg: ConsumerGroup, protocol_type: str, names: Sequence[str]) -> bool:
    """Kafka's supportsClassicProtocols: type "consumer", and one of `names` that every
    classic member of the group supports (any, when there is none)."""
    if protocol_type != PROTOCOL_TYPE or not names:
        return False
    classic = [m for m in cg.members.values() if m.is_classic]
    return any(all(n in {p for p, _ in m.classic_protocols or ()} for m in classic) for n in names)


def join(ctx: CoordinatorContext, cg: ConsumerGroup, *, member_id: str, protocol_type: str,
         protocols: tuple[tuple[str, bytes], ...], session_timeout_ms: int, rebalance_timeout_ms: int,
         instance_id: str | None, client_id: str, client_host: str, topics: Mapping[str, int] | None,
         now_ms: int) -> Response | Pending:
    group = ctx.groups[cg.group_id]
    ctx.touch(group)
    if not _supports(cg, protocol_type, [n for n, _ in protocols]):
        raise InconsistentGroupProtocolError(
            f"group {cg.group_id!r} is a consumer group: its classic members need protocol type "
            f"{PROTOCOL_TYPE!r} and a protocol they all support")
    try:
        subscribed, owned = consumer_group_classic.subscription_of(protocols)
    except CorruptMessageError as e:
        raise InconsistentGroupProtocolError(f"the subscription is not Kafka's ConsumerProtocol: {e}") from None
    if not member_id and instance_id is None:
        raise MemberIdRequiredError("rejoin with the member_id given", member_id=ctx.new_member_id(client_id))
    ctx.check_append_room()
    topics = topics if topics is not None else cg.subscribed_metadata
    member = cg.members.get(member_id) if member_id else None
    if member is not None and not member.is_classic:
        raise UnknownMemberIdError(f"member {member_id!r} uses the consumer protocol: it heartbeats")
    if member is None:
        if instance_id is not None and instance_id in cg.static_members:
            remove_member(ctx, cg, cg.static_members[instance_id], topics)
        if len(cg.members) >= ctx.config.group_max_size:
            raise GroupMaxSizeReachedError(f"group {cg.group_id!r} has {len(cg.members)} members, the limit")
        member = ConsumerMember(member_id or ctx.new_member_id(instance_id or client_id), instance_id=instance_id)
        cg.add(member)
        cg.group_epoch += 1
    member.classic_session_timeout_ms, member.classic_protocols = session_timeout_ms, protocols
    if update_subscription(member, rebalance_timeout_ms, subscribed, None, None, None, client_id, client_host):
        cg.group_epoch += 1
    member.session_deadline_ms = now_ms + session_timeout_ms
    retarget(ctx, cg, topics)
    reconcile(cg, member, owned, now_ms)
    if member.state == UNREVOKED and not owned & member.pending_revocation:
        reconcile(cg, member, owned, now_ms)  # it holds none of them any more: released at once
    response = {"member_id": member.member_id, "generation_id": member.member_epoch,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": protocols[0][0], "leader": "", "members": []}
    return write(ctx, group, cg, ctx.partition_for(cg.group_id), [], response)


def _classic_member(cg: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol +
    throwIfGenerationIdUnmatched."""
    if instance_id is not None:
        holder = cg.static_members.get(instance_id)
        if holder is None:
            raise UnknownMemberIdError(f"instance {instance_id!r} is not in group {cg.group_id!r}")
        if holder != member_id:
            raise FencedInstanceIdError(f"instance {instance_id!r} is held by another member")
    member = cg.members.get(member_id)
    if member is None or not member.is_classic:
        raise UnknownMemberIdError(f"member {member_id!r} is not a classic member of group {cg.group_id!r}")
    if generation_id != member.member_epoch:
        raise IllegalGenerationError(f"generation {generation_id}; member {member_id!r} is at {member.member_epoch}")
    return member


def sync(ctx: CoordinatorContext, cg: ConsumerGroup, *, member_id: str, generation_id: int,
         instance_id: str | None, protocol_type: str | None, protocol_name: str | None, now_ms: int) -> Response:
    member = _classic_member(cg, member_id, instance_id, generation_id)
    names = [n for n, _ in member.classic_protocols or ()]
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name not in names):
        raise InconsistentGroupProtocolError("protocol type or name differs from the member's")
    if cg.group_epoch > member.member_epoch and member.state != UNREVOKED:
        raise RebalanceInProgressError("the group epoch moved on: rejoin")
    member.session_deadline_ms = now_ms + (member.classic_session_timeout_ms or 0)
    member.sent = member.assigned
    ctx.touch(ctx.groups[cg.group_id])
    return {"protocol_type": PROTOCOL_TYPE, "protocol_name": protocol_name or names[0],
            "assignment": encode_assignment(Assignment(tuple(sorted(member.assigned))))}


def _waiting_on_unreleased(cg: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: some partition of its target is still held."""
    held = cg.owners(but=member.member_id)
    return any(tp in held for tp in cg.target.get(member.member_id, frozenset()) - member.assigned)


def heartbeat(ctx: CoordinatorContext, cg: ConsumerGroup, *, member_id: str, generation_id: int,
              instance_id: str | None, now_ms: int) -> Response:
    member = _classic_member(cg, member_id, instance_id, generation_id)
    member.session_deadline_ms = now_ms + (member.classic_session_timeout_ms or 0)
    ctx.touch(ctx.groups[cg.group_id])
    if (member.member_epoch < cg.group_epoch or member.state == UNREVOKED
            or (member.state == UNRELEASED and not _waiting_on_unreleased(cg, member))):
        raise RebalanceInProgressError("the assignment changed: rejoin")
    return {}


def leave(ctx: CoordinatorContext, cg: ConsumerGroup, members: Sequence[tuple[str, str | None]],
          now_ms: int) -> Response:
    group = ctx.groups[cg.group_id]
    ctx.touch(group)
    out: list[dict[str, Any]] = []
    gone = 0
    for mid, inst in members:
        entry: dict[str, Any] = {"member_id": mid, "group_instance_id": inst}
        err: RaftlogError | None = None
        if inst is not None:
            holder = cg.static_members.get(inst)
            if holder is None:
                err = UnknownMemberIdError(f"instance {inst!r} is not in the group")
            elif mid and mid != holder:
                err = FencedInstanceIdError(f"instance {inst!r} is held by another member")
            else:
                mid = holder
        if err is None and mid not in cg.members:
            err = UnknownMemberIdError(f"member {mid!r} is not in the group")
        if err is None:
            remove_member(ctx, cg, mid, None)
            gone += 1
        else:
            entry["error"] = {"code": err.code, "message": str(err)}
        out.append(entry)
    if gone:
        down = consumer_group_classic.maybe_downgrade(ctx, cg, group, now_ms)
        items = down if down is not None else cg.changes()
        if items:
            ctx.append(ctx.partition_for(cg.group_id), items)
    return {"members": out}

"""Membership in Kafka's classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
static members, and the rebalance they drive; `tick` expires silent members and ends join
phases whose rebalance timeout or initial delay passed.

Kafka semantics kept (GroupCoordinator.scala, KIP-345, KIP-394): MEMBER_ID_REQUIRED for a
dynamic member's first join; the join phase ends when every known member rejoined (and no
pending member is left) or the rebalance timeout passed (members that did not rejoin are
removed); an initial delayed join for an Empty group; the leader's SyncGroup stores the group
and answers everyone; heartbeats get REBALANCE_IN_PROGRESS while a rebalance is prepared;
static members (group_instance_id) replace their old member id without a rebalance when the
group is Stable and their subscription is unchanged, and the old id is fenced.
Deviations: a protocol-vote tie goes to the leader's preference order; a static rejoin
rebalances if the member's metadata for the selected protocol changed.

Functions over a `CoordinatorContext`, each the body of one public call of GroupCoordinator
(coordinator.py documents their responses and errors). Pure.
May import: raftlog.base, and groupcoord's context, records and state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupcoord import classic_member, consumer_group_ops
from groupcoord.context import (
    NO_GENERATION,
    CoordinatorContext,
    Pending,
    Response,
    check_int,
    check_str,
)
from groupcoord.records import MAX_BLOB_BYTES
from groupcoord.state import Group, GroupState, Member, group_record
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = ["join_group", "sync_group", "heartbeat", "leave_group", "tick"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _JoinArgs:
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int


def join_group(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    member_id: str,
    protocol_type: str,
    protocols: Sequence[tuple[str, bytes]],
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    now_ms: int,
    group_instance_id: str | None = None,
    client_id: str = "",
    client_host: str = "",
    topics: Mapping[str, int] | None = None,
) -> Response | Pending:
    protos = _check_protocols(protocols)
    check_str("member_id", member_id, 0)
    check_str("protocol_type", protocol_type, 0)
    check_str("client_id", client_id, 0)
    check_str("client_host", client_host, 0)
    if group_instance_id is not None:
        check_str("group_instance_id", group_instance_id, 1)
    check_int("rebalance_timeout_ms", rebalance_timeout_ms, 0)
    check_int("session_timeout_ms", session_timeout_ms, 0)
    ctx.route(group_id)
    if len(ctx.pending) >= ctx.config.max_pending:
        raise CoordinatorNotAvailableError(f"{len(ctx.pending)} requests pending, the limit")
    cfg = ctx.config
    if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
        raise InvalidSessionTimeoutError(
            f"session_timeout_ms {session_timeout_ms} outside "
            f"{cfg.group_min_session_timeout_ms}..{cfg.group_max_session_timeout_ms}"
        )
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None and cg.members:  # a classic member inside a consumer group (online upgrade)
        return classic_member.join(
            ctx, cg, member_id=member_id, protocol_type=protocol_type, protocols=protos,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            instance_id=group_instance_id, client_id=client_id, client_host=client_host, topics=topics, now_ms=now_ms)
    consumer_group_ops.classic_join_allowed(ctx, group_id)  # an Empty KIP-848 group converts back
    args = _JoinArgs(group_instance_id, client_id, client_host, protocol_type, protos,
                     session_timeout_ms, rebalance_timeout_ms)
    group = ctx.groups.get(group_id)
    created = False
    if group is None:
        if member_id:
            raise UnknownMemberIdError(f"group {group_id!r} does not exist")
        group = ctx.new_group(group_id, now_ms)
        created = True
    ctx.touch(group)
    try:
        if not member_id:
            return _join_unknown_member(ctx, group, args, now_ms)
        return _join_known_member(ctx, group, member_id, args, now_ms)
    finally:
        if created and not group.members and not group.pending_members and not group.offsets:
            del ctx.groups[group_id]


def _join_unknown_member(ctx: CoordinatorContext, group: Group, a: _JoinArgs, now_ms: int) -> Response | Pending:
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
    if not group.supports_protocols(a.protocol_type, tuple(n for n, _ in a.protocols)):
        raise InconsistentGroupProtocolError(
            f"protocol type {a.protocol_type!r} / protocols {[n for n, _ in a.protocols]} do not match the group's"
        )
    known_static = a.group_instance_id is not None and a.group_instance_id in group.static_members
    if not known_static and group.size() >= ctx.config.group_max_size:
        raise GroupMaxSizeReachedError(f"group {group.group_id!r} has {group.size()} members, the limit")
    new_id = ctx.new_member_id(a.group_instance_id if a.group_instance_id is not None else a.client_id)
    if a.group_instance_id is not None:
        if known_static:
            return _update_static_member_and_rebalance(ctx, group, new_id, a, now_ms)
        return _add_member_and_rebalance(ctx, group, new_id, a, now_ms)
    # KIP-394: park the member until it rejoins with its id, so a client that never gets
    # the answer cannot leave ghost members behind.
    group.pending_members[new_id] = now_ms + a.session_timeout_ms
    return MemberIdRequiredError("rejoin with the member_id given", member_id=new_id)


def _join_known_member(ctx: CoordinatorContext, group: Group, member_id: str, a: _JoinArgs, now_ms: int) -> Response | Pending:
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
    if not group.supports_protocols(a.protocol_type, tuple(n for n, _ in a.protocols)):
        raise InconsistentGroupProtocolError("protocols do not match the group's")
    if member_id in group.pending_members:
        if a.group_instance_id is not None:
            raise InvalidRequestError("a pending member id cannot carry a group_instance_id",
                                           field="group_instance_id")
        del group.pending_members[member_id]
        return _add_member_and_rebalance(ctx, group, member_id, a, now_ms)
    if group.is_static_member_fenced(member_id, a.group_instance_id):
        raise FencedInstanceIdError(f"instance {a.group_instance_id!r} is held by a newer member")
    member = group.members.get(member_id)
    if member is None or member.group_instance_id != a.group_instance_id:
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
    state = group.state
    if state is GroupState.PREPARING_REBALANCE:
        return _update_member_and_rebalance(ctx, group, member, a, now_ms)
    if state is GroupState.COMPLETING_REBALANCE:
        if member.same_protocols(a.protocols):
            # It missed our join answer: send it again (Kafka does the same).
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            return _join_response(group, member)
        return _update_member_and_rebalance(ctx, group, member, a, now_ms)
    if state is GroupState.STABLE:
        if member_id == group.leader_id or not member.same_protocols(a.protocols):
            return _update_member_and_rebalance(ctx, group, member, a, now_ms)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return _join_response(group, member)
    raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")


def _add_member_and_rebalance(ctx: CoordinatorContext, group: Group, member_id: str, a: _JoinArgs, now_ms: int) -> Pending:
    key = ctx.new_key(group.group_id)
    member = Member(
        member_id=member_id,
        client_id=a.client_id,
        client_host=a.client_host,
        session_timeout_ms=a.session_timeout_ms,
        rebalance_timeout_ms=a.rebalance_timeout_ms,
        protocol_type=a.protocol_type,
        protocols=a.protocols,
        group_instance_id=a.group_instance_id,
        awaiting_join=True,
        join_key=key,
        is_new=True,
        heartbeat_deadline_ms=now_ms + ctx.config.new_member_join_timeout_ms,
    )
    if group.is_(GroupState.PREPARING_REBALANCE) and group.initial_delay_deadline_ms is not None:
        group.new_member_added = True
    group.add(member)
    _maybe_prepare_rebalance(ctx, group, now_ms)
    _try_complete_join(ctx, group, now_ms)
    return Pending(key)


def _update_member_and_rebalance(ctx: CoordinatorContext, group: Group, member: Member, a: _JoinArgs, now_ms: int) -> Pending:
    key = ctx.new_key(group.group_id)
    ctx.complete(member.join_key, RebalanceInProgressError("superseded by a newer join of the same member"))
    member.protocols = a.protocols
    member.session_timeout_ms = a.session_timeout_ms
    member.rebalance_timeout_ms = a.rebalance_timeout_ms
    member.client_id, member.client_host = a.client_id, a.client_host
    member.join_key = key
    group.set_awaiting_join(member, True)
    _maybe_prepare_rebalance(ctx, group, now_ms)
    _try_complete_join(ctx, group, now_ms)
    return Pending(key)


def _update_static_member_and_rebalance(ctx: CoordinatorContext, group: Group, new_id: str, a: _JoinArgs, now_ms: int) -> Pending:
    assert a.group_instance_id is not None
    instance = a.group_instance_id
    old_id = group.static_members[instance]
    old = group.members[old_id]
    fenced = FencedInstanceIdError(f"instance {instance!r} rejoined as a new member")
    if group.is_(GroupState.STABLE):
        ctx.check_append_room()
    key = ctx.new_key(group.group_id)
    ctx.complete(old.join_key, fenced)
    ctx.complete(old.sync_key, fenced)
    old.join_key = old.sync_key = None
    saved = (old.protocols, old.session_timeout_ms, old.rebalance_timeout_ms, old.client_id, old.client_host)
    leader_before = group.leader_id
    selected_metadata = old.metadata(group.protocol_name) if group.protocol_name else None
    member = group.replace_static_member(instance, old_id, new_id)
    member.protocols = a.protocols
    member.session_timeout_ms, member.rebalance_timeout_ms = a.session_timeout_ms, a.rebalance_timeout_ms
    member.client_id, member.client_host = a.client_id, a.client_host
    member.heartbeat_deadline_ms = now_ms + a.session_timeout_ms
    unchanged = (
        group.is_(GroupState.STABLE)
        and group.select_protocol() == group.protocol_name
        and member.metadata(group.protocol_name or "") == selected_metadata
    )
    if unchanged:
        generation = group.generation_id

        def committed(now: int) -> None:
            ctx.complete(key, {
                "member_id": new_id,
                "generation_id": generation,
                "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name,
                # The old leader id, so a restarted leader does not run a trivial assignment
                # that a Stable group would never hand out (Kafka does the same).
                "leader": leader_before,
                "members": [],
            })

        def failed(err: RaftlogError, now: int) -> None:
            if ctx.groups.get(group.group_id) is group and group.members.get(new_id) is member:
                group.replace_static_member(instance, new_id, old_id)
                (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms,
                 member.client_id, member.client_host) = saved
                ctx.touch(group)
            ctx.complete(key, err)

        ctx.append(ctx.partition_for(group.group_id), [group_record(group)], committed, failed)
        return Pending(key)
    member.join_key = key
    group.set_awaiting_join(member, True)
    if group.is_(GroupState.COMPLETING_REBALANCE):
        # The leader may already be assigning to the old id: start over.
        _prepare_rebalance(ctx, group, now_ms)
    else:
        _maybe_prepare_rebalance(ctx, group, now_ms)
        _try_complete_join(ctx, group, now_ms)
    return Pending(key)


def _join_response(group: Group, member: Member) -> dict:
    is_leader = member.member_id == group.leader_id
    protocol = group.protocol_name or ""
    return {
        "member_id": member.member_id,
        "generation_id": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata(protocol)}
            for m in group.members.values()
        ] if is_leader else [],
    }


def _maybe_prepare_rebalance(ctx: CoordinatorContext, group: Group, now_ms: int) -> None:
    if group.can_rebalance():
        _prepare_rebalance(ctx, group, now_ms)


def _prepare_rebalance(ctx: CoordinatorContext, group: Group, now_ms: int) -> None:
    if group.is_(GroupState.COMPLETING_REBALANCE):
        _reset_and_propagate_assignment_error(ctx, 
            group, RebalanceInProgressError("the group is rebalancing again")
        )
    rebalance_timeout_ms = group.rebalance_timeout_ms()
    delay = min(ctx.config.group_initial_rebalance_delay_ms, rebalance_timeout_ms)
    if group.is_(GroupState.EMPTY) and delay > 0:
        group.initial_delay_deadline_ms = now_ms + delay
        group.new_member_added = False
    else:
        group.initial_delay_deadline_ms = None
    group.rebalance_deadline_ms = now_ms + rebalance_timeout_ms
    group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
    ctx.touch(group)
    _try_complete_join(ctx, group, now_ms)


def _try_complete_join(ctx: CoordinatorContext, group: Group, now_ms: int) -> None:
    if (
        group.is_(GroupState.PREPARING_REBALANCE)
        and group.initial_delay_deadline_ms is None
        and group.has_all_members_joined()
    ):
        _complete_join(ctx, group, now_ms)


def _complete_join(ctx: CoordinatorContext, group: Group, now_ms: int) -> None:
    """Kafka's onCompleteJoin: drop members that did not rejoin, start the next generation,
    answer every joined member (the leader with the member list)."""
    if not group.is_(GroupState.PREPARING_REBALANCE):
        return
    for mid in group.not_yet_rejoined():
        member = group.members[mid]
        log.info("group %s: member %s did not rejoin in time", group.group_id, mid)
        ctx.complete(member.sync_key, UnknownMemberIdError("removed: did not rejoin in time"))
        group.remove(mid)
    group.maybe_elect_joined_leader()
    group.init_next_generation(now_ms)
    ctx.touch(group)
    if group.is_(GroupState.EMPTY):
        ctx.append(ctx.partition_for(group.group_id), [group_record(group)])
        return
    for member in group.members.values():
        ctx.complete(member.join_key, _join_response(group, member))
        member.join_key = None
        group.set_awaiting_join(member, False)
        member.is_new = False
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms


def _reset_and_propagate_assignment_error(ctx: CoordinatorContext, group: Group, err: RaftlogError) -> None:
    for member in group.members.values():
        member.assignment = b""
        if member.awaiting_sync:
            ctx.complete(member.sync_key, err)
            member.sync_key = None
            member.awaiting_sync = False


def _remove_member_and_update_group(ctx: CoordinatorContext, group: Group, member: Member, now_ms: int) -> None:
    gone = UnknownMemberIdError(f"member {member.member_id} left or was removed")
    ctx.complete(member.join_key, gone)
    ctx.complete(member.sync_key, gone)
    member.join_key = member.sync_key = None
    group.remove(member.member_id)
    ctx.touch(group)
    if group.is_(GroupState.PREPARING_REBALANCE):
        _try_complete_join(ctx, group, now_ms)
    elif group.is_(GroupState.STABLE) or group.is_(GroupState.COMPLETING_REBALANCE):
        _prepare_rebalance(ctx, group, now_ms)


def sync_group(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    member_id: str,
    generation_id: int,
    now_ms: int,
    assignments: Mapping[str, bytes] | None = None,
    group_instance_id: str | None = None,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
) -> Response | Pending:
    check_str("member_id", member_id, 1)
    check_int("generation_id", generation_id, NO_GENERATION)
    plan = _check_assignments(assignments)
    ctx.route(group_id)
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None:
        return classic_member.sync(ctx, cg, member_id=member_id, generation_id=generation_id,
                                   instance_id=group_instance_id, protocol_type=protocol_type,
                                   protocol_name=protocol_name, now_ms=now_ms)
    group = ctx.groups.get(group_id)
    if group is None:
        raise UnknownMemberIdError(f"group {group_id!r} does not exist")
    ctx.touch(group)
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
    if group.is_static_member_fenced(member_id, group_instance_id):
        raise FencedInstanceIdError(f"instance {group_instance_id!r} is held by a newer member")
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
    if generation_id != group.generation_id:
        raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
    if (protocol_type is not None and protocol_type != group.protocol_type) or (
        protocol_name is not None and protocol_name != group.protocol_name
    ):
        raise InconsistentGroupProtocolError("protocol type or name differs from the group's")
    if group.is_(GroupState.PREPARING_REBALANCE):
        raise RebalanceInProgressError("the group is rebalancing: rejoin")
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
    if group.is_(GroupState.STABLE):
        return _sync_response(group, member)
    # CompletingRebalance
    store = member_id == group.leader_id and group.assignment_generation != group.generation_id
    if store:
        ctx.check_append_room()
    key = ctx.new_key(group_id)
    ctx.complete(member.sync_key, RebalanceInProgressError("superseded by a newer sync of the same member"))
    member.sync_key = key
    member.awaiting_sync = True
    if store:
        _store_assignment(ctx, group, plan or {}, now_ms)
    return Pending(key)


def _store_assignment(ctx: CoordinatorContext, group: Group, plan: Mapping[str, bytes], now_ms: int) -> None:
    generation = group.generation_id
    proposed = {mid: plan.get(mid, b"") for mid in group.members}
    saved = {mid: m.assignment for mid, m in group.members.items()}
    for mid, m in group.members.items():
        m.assignment = proposed[mid]
    record = group_record(group)
    for mid, m in group.members.items():
        m.assignment = saved[mid]

    def still_ours() -> bool:
        return (
            ctx.groups.get(group.group_id) is group
            and group.is_(GroupState.COMPLETING_REBALANCE)
            and group.generation_id == generation
        )

    def settled() -> None:
        if group.assignment_generation == generation:
            group.assignment_generation = None

    def committed(now: int) -> None:
        settled()
        if not still_ours():
            return  # a new rebalance began: its syncs were answered REBALANCE_IN_PROGRESS
        for mid, m in group.members.items():
            m.assignment = proposed.get(mid, b"")
        group.transition_to(GroupState.STABLE, now)
        ctx.touch(group)
        for m in group.members.values():
            if m.awaiting_sync:
                ctx.complete(m.sync_key, _sync_response(group, m))
                m.sync_key = None
                m.awaiting_sync = False
                m.heartbeat_deadline_ms = now + m.session_timeout_ms

    def failed(err: RaftlogError, now: int) -> None:
        settled()
        if not still_ours():
            return
        _reset_and_propagate_assignment_error(ctx, group, err)
        _prepare_rebalance(ctx, group, now)

    group.assignment_generation = generation
    ctx.append(ctx.partition_for(group.group_id), [record], committed, failed)


def _sync_response(group: Group, member: Member) -> dict:
    return {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name, "assignment": member.assignment}


def heartbeat(
    ctx: CoordinatorContext, *, group_id: str, member_id: str, generation_id: int, now_ms: int,
    group_instance_id: str | None = None,
) -> Response:
    check_str("member_id", member_id, 0)
    check_int("generation_id", generation_id, NO_GENERATION)
    ctx.route(group_id)
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None:
        return classic_member.heartbeat(ctx, cg, member_id=member_id, generation_id=generation_id,
                                        instance_id=group_instance_id, now_ms=now_ms)
    group = ctx.groups.get(group_id)
    if group is None:
        raise UnknownMemberIdError(f"group {group_id!r} does not exist")
    ctx.touch(group)
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
    if group.is_static_member_fenced(member_id, group_instance_id):
        raise FencedInstanceIdError(f"instance {group_instance_id!r} is held by a newer member")
    member = group.members.get(member_id)
    if member is None or group.is_(GroupState.EMPTY):
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
    if generation_id != group.generation_id:
        raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
    if group.is_(GroupState.PREPARING_REBALANCE):
        raise RebalanceInProgressError("the group is rebalancing: rejoin")
    return {}


def leave_group(ctx: CoordinatorContext, *, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int) -> Response:
    if not isinstance(members, Sequence) or not members:
        raise InvalidRequestError("members: a non-empty list", field="members")
    for item in members:
        if not isinstance(item, Sequence) or len(item) != 2:
            raise InvalidRequestError("members: (member_id, group_instance_id) pairs", field="members")
        mid, inst = item
        check_str("member_id", mid, 0)
        if inst is not None:
            check_str("group_instance_id", inst, 1)
    ctx.route(group_id)
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None:
        return classic_member.leave(ctx, cg, members, now_ms)
    group = ctx.groups.get(group_id)
    if group is not None and group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
    out = []
    for mid, inst in members:
        entry: dict[str, Any] = {"member_id": mid, "group_instance_id": inst}
        err = _leave_one(ctx, group, mid, inst, now_ms) if group is not None else UnknownMemberIdError(
            f"group {group_id!r} does not exist")
        if err is not None:
            entry["error"] = {"code": err.code, "message": str(err)}
        out.append(entry)
    return {"members": out}


def _leave_one(ctx: CoordinatorContext, group: Group, member_id: str, instance: str | None, now_ms: int) -> RaftlogError | None:
    ctx.touch(group)
    if instance is not None:
        holder = group.static_members.get(instance)
        if holder is None:
            return UnknownMemberIdError(f"instance {instance!r} is not in the group")
        if member_id and member_id != holder:
            return FencedInstanceIdError(f"instance {instance!r} is held by another member")
        member_id = holder
    if member_id in group.pending_members:
        del group.pending_members[member_id]
        _try_complete_join(ctx, group, now_ms)
        return None
    member = group.members.get(member_id)
    if member is None:
        return UnknownMemberIdError(f"member {member_id!r} is not in the group")
    _remove_member_and_update_group(ctx, group, member, now_ms)
    return None


def tick(ctx: CoordinatorContext, now_ms: int) -> None:
    for gid in ctx.due_groups(now_ms):
        group = ctx.groups.get(gid)
        if group is not None:
            _tick_group(ctx, group, now_ms)
            consumer_group_ops.tick_group(ctx, gid, now_ms)
            ctx.touch(group)


def _tick_group(ctx: CoordinatorContext, group: Group, now_ms: int) -> None:
    for mid, expiry in list(group.pending_members.items()):
        if expiry <= now_ms:
            del group.pending_members[mid]
    for mid, m in list(group.members.items()):
        if ctx.heartbeat_matters(m) and m.heartbeat_deadline_ms <= now_ms and mid in group.members:
            log.info("group %s: member %s session expired", group.group_id, mid)
            _remove_member_and_update_group(ctx, group, m, now_ms)
    if group.is_(GroupState.PREPARING_REBALANCE):
        if group.initial_delay_deadline_ms is not None:
            if group.initial_delay_deadline_ms <= now_ms:
                remaining = (group.rebalance_deadline_ms or now_ms) - now_ms
                if group.new_member_added and remaining > 0:
                    group.new_member_added = False
                    group.initial_delay_deadline_ms = now_ms + min(
                        ctx.config.group_initial_rebalance_delay_ms, remaining
                    )
                else:
                    _complete_join(ctx, group, now_ms)
        elif group.rebalance_deadline_ms is not None and group.rebalance_deadline_ms <= now_ms:
            _complete_join(ctx, group, now_ms)
        else:
            _try_complete_join(ctx, group, now_ms)


def _check_protocols(protocols: Any) -> tuple[tuple[str, bytes], ...]:
    if not isinstance(protocols, Sequence) or not protocols or len(protocols) > 64:
        raise InvalidRequestError("protocols: a list of 1..64 (name, metadata)", field="protocols")
    out = []
    for item in protocols:
        if not isinstance(item, Sequence) or len(item) != 2:
            raise InvalidRequestError("protocols: (name, metadata) pairs", field="protocols")
        name, meta = item
        check_str("protocols", name, 1)
        if type(meta) is not bytes or len(meta) > MAX_BLOB_BYTES:
            raise InvalidRequestError("protocols: metadata must be bytes", field="protocols")
        out.append((name, meta))
    if len({n for n, _ in out}) != len(out):
        raise InvalidRequestError("protocols: duplicate name", field="protocols")
    return tuple(out)


def _check_assignments(assignments: Any) -> dict[str, bytes] | None:
    if assignments is None:
        return None
    if not isinstance(assignments, Mapping):
        raise InvalidRequestError("assignments: a map member_id -> bytes", field="assignments")
    for mid, blob in assignments.items():
        check_str("assignments", mid, 1)
        if type(blob) is not bytes or len(blob) > MAX_BLOB_BYTES:
            raise InvalidRequestError("assignments: values must be bytes", field="assignments")
    return dict(assignments)

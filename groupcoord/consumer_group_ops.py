"""KIP-848 consumer groups in the group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe,
session and revocation timeouts, offset-commit fencing by member epoch, replay, and the
conversions between the classic and the consumer protocol (Kafka 4's online upgrade).

One coordinator, one `__consumer_offsets`: a consumer group is a classic `Group` (which holds
its committed offsets; Empty, no classic members) plus a `ConsumerGroup` in
`ctx.consumer_groups`. So offsets survive a conversion either way untouched.

Kafka semantics kept (GroupMetadataManager.consumerGroupHeartbeat, KIP-848):
* member epoch 0 joins (member id from the client; the coordinator makes one if it is
  empty, as v0 did), -1 leaves, -2 leaves for now (a static member keeps its assignment until
  its session ends or its instance id rejoins); any other epoch must be the member's, or its
  previous one with owned partitions inside its assignment (a lost response), else
  FENCED_MEMBER_EPOCH; an unknown member id: UNKNOWN_MEMBER_ID;
* a static member's instance id held by a member that did not leave with -2:
  UNRELEASED_INSTANCE_ID; an assignor the broker does not have: UNSUPPORTED_ASSIGNOR; a regex
  that does not compile: INVALID_REGULAR_EXPRESSION (Python `re` stands in for RE2/J; the
  common syntax is the same); a join without a subscription or rebalance timeout, or with
  owned partitions: INVALID_REQUEST;
* a classic group converts on the first consumer heartbeat: an Empty one always, one with
  members when it is Stable, of protocol type "consumer" and group.consumer.migration.policy
  allows an upgrade (its members become classic members: consumer_group_classic.py), else
  GROUP_ID_NOT_FOUND; its classic record is tombstoned, its offsets kept. A classic JoinGroup
  for a consumer group with members joins it as a classic member (classic_member.py); for an
  Empty one, the group converts back (its consumer records tombstoned); when the last KIP-848
  member leaves and classic members are left, it converts back too (the policy allowing);
* OffsetCommit from a member: UNKNOWN_MEMBER_ID for a member not in the group,
  STALE_MEMBER_EPOCH for an epoch that is not the member's (ILLEGAL_GENERATION for a classic
  member's generation); epoch -1 with no member id is
  an admin commit, accepted only when the group has no members.
Deviations: the group's state moves in memory when the heartbeat is handled and its records
are appended after (the answer waits for the commit); a failed append leaves the memory
ahead of the log until the partition is reloaded.

Functions over a `CoordinatorContext`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from groupcoord import consumer_assignor, consumer_group_classic
from groupcoord.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    UNREVOKED,
    ConsumerGroup,
    ConsumerMember,
    Partitions,
    from_wire,
    reconcile,
    topic_counts,
)
from groupcoord.consumer_group_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerGroupKey,
)
from groupcoord.context import CoordinatorContext, Pending, Response, check_int, check_str
from metadata import group_config
from groupcoord.state import Group, GroupState
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    RaftlogError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

__all__ = ["heartbeat", "describe", "tick_group", "validate_commit", "classic_join_allowed",
           "build_from_records", "list_state", "retarget", "remove_member", "write", "update_subscription"]  # fmt: skip

PROTOCOL_TYPE: Final = "consumer"
MAX_SUBSCRIBED_TOPICS: Final = 10_000


def _check_regex(regex: str | None) -> None:
    if regex is None or regex == "":
        return
    try:
        re.compile(regex)
    except re.error as e:
        raise InvalidRegularExpressionError(f"subscribed_topic_regex {regex!r} does not compile: {e}") from None


def retarget(ctx: CoordinatorContext, cg: ConsumerGroup, topics: Mapping[str, int]) -> None:
    """Bump the group epoch if the subscribed topics' partition counts changed; recompute the
    target if the group epoch moved past the assignment epoch."""
    subs = cg.subscriptions(topics.keys())
    counts = topic_counts(topics, frozenset().union(*subs.values()) if subs else frozenset())
    if counts != cg.subscribed_metadata:
        cg.subscribed_metadata = counts
        cg.group_epoch += 1
    if cg.group_epoch > cg.assignment_epoch:
        name = cg.preferred_assignor(ctx.config.group_consumer_assignor)
        cg.target = dict(consumer_assignor.assign(name, subs, counts, cg.target))
        cg.assignment_epoch = cg.group_epoch


def heartbeat(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    member_id: str,
    member_epoch: int,
    topics: Mapping[str, int],
    now_ms: int,
    instance_id: str | None = None,
    rack_id: str | None = None,
    rebalance_timeout_ms: int = -1,
    subscribed_topic_names: Sequence[str] | None = None,
    subscribed_topic_regex: str | None = None,
    server_assignor: str | None = None,
    owned: Partitions | None = None,
    client_id: str = "",
    client_host: str = "",
) -> Response | Pending:
    check_str("member_id", member_id, 0)
    check_int("member_epoch", member_epoch, STATIC_LEAVE_EPOCH, 2**31 - 1)
    check_int("rebalance_timeout_ms", rebalance_timeout_ms, -1, 2**31 - 1)
    if instance_id is not None:
        check_str("instance_id", instance_id, 1)
    if subscribed_topic_names is not None:
        if len(subscribed_topic_names) > MAX_SUBSCRIBED_TOPICS:
            raise InvalidRequestError(f"at most {MAX_SUBSCRIBED_TOPICS} subscribed topics", field="subscribed_topic_names")
        for t in subscribed_topic_names:
            check_str("subscribed_topic_names", t, 1, 249)
    _check_regex(subscribed_topic_regex)
    if server_assignor is not None and server_assignor not in consumer_assignor.ASSIGNORS:
        raise UnsupportedAssignorError(
            f"assignor {server_assignor!r}: this broker has {', '.join(consumer_assignor.ASSIGNORS)}")
    if member_epoch == 0:
        if subscribed_topic_names is None and subscribed_topic_regex is None:
            raise InvalidRequestError("a join names its subscribed topics or regex", field="subscribed_topic_names")
        if rebalance_timeout_ms == -1:
            raise InvalidRequestError("a join gives its rebalance timeout", field="rebalance_timeout_ms")
        if owned:
            raise InvalidRequestError("a joining member owns no partitions", field="topic_partitions")
    elif not member_id:
        raise UnknownMemberIdError("member_id is empty")
    partition = ctx.route(group_id)
    ctx.check_append_room()
    group = ctx.groups.get(group_id)
    items: list[tuple[Any, Any]] = []
    if group is not None and group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
    cg = ctx.consumer_groups.get(group_id)
    if cg is None:
        if member_epoch != 0:
            if group is not None and group.members:
                raise GroupIdNotFoundError(f"group {group_id!r} is not a consumer group")
            raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
        if group is None:
            group = ctx.new_group(group_id, now_ms)
            group.protocol_type = PROTOCOL_TYPE
            cg = ctx.consumer_groups[group_id] = ConsumerGroup(group_id)
        else:
            cg, items = consumer_group_classic.convert_from_classic(ctx, group)
    assert group is not None
    ctx.touch(group)
    if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        member = cg.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
        if member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # It keeps its assignment until its instance id rejoins or its session ends.
            member.previous_member_epoch, member.member_epoch = member.member_epoch, STATIC_LEAVE_EPOCH
        else:
            remove_member(ctx, cg, member_id, topics)
        left = {"member_id": member_id, "member_epoch": member_epoch, "heartbeat_interval_ms": 0, "assignment": None}
        down = consumer_group_classic.maybe_downgrade(ctx, cg, group, now_ms)
        if down is not None:
            return ctx.append_then_answer(partition, items + down, group_id, left)
        return write(ctx, group, cg, partition, items, left)
    if member_epoch == 0:
        member = _join(ctx, cg, member_id, instance_id, now_ms)
    else:
        member = cg.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
        _check_epoch(member, member_epoch, owned)
    changed = update_subscription(member, rebalance_timeout_ms, subscribed_topic_names, subscribed_topic_regex,
                                   server_assignor, rack_id, client_id, client_host)
    if changed:
        cg.group_epoch += 1
    configs = ctx.group_configs(group_id)
    member.session_deadline_ms = now_ms + int(group_config.value(
        configs, "consumer.session.timeout.ms", ctx.config.group_consumer_session_timeout_ms))
    retarget(ctx, cg, topics)
    reconcile(cg, member, owned, now_ms)
    response: dict[str, Any] = {
        "member_id": member.member_id,
        "member_epoch": member.member_epoch,
        "heartbeat_interval_ms": int(group_config.value(
            configs, "consumer.heartbeat.interval.ms", ctx.config.group_consumer_heartbeat_interval_ms)),
        "assignment": None,
    }
    if member.sent != member.assigned or (owned is not None and owned != member.assigned and member.state != UNREVOKED):
        response["assignment"] = sorted(member.assigned)
        member.sent = member.assigned
    return write(ctx, group, cg, partition, items, response)


def _join(ctx: CoordinatorContext, cg: ConsumerGroup, member_id: str, instance_id: str | None, now_ms: int) -> ConsumerMember:
    if not member_id:
        member_id = ctx.new_member_id("consumer")
    existing = cg.members.get(member_id)
    if existing is not None:
        # A member that rejoins with epoch 0 (it was fenced, or restarted with its id) lost
        # every partition: it starts over.
        existing.assigned = existing.pending_revocation = frozenset()
        existing.state, existing.member_epoch, existing.sent = "stable", 0, None
        existing.revocation_deadline_ms = None
        return existing
    if len(cg.members) >= ctx.config.group_max_size:
        raise GroupMaxSizeReachedError(f"group {cg.group_id!r} has {len(cg.members)} members, the limit")
    member = ConsumerMember(member_id, instance_id=instance_id)
    if instance_id is not None and instance_id in cg.static_members:
        old = cg.members[cg.static_members[instance_id]]
        if old.member_epoch != STATIC_LEAVE_EPOCH:
            raise UnreleasedInstanceIdError(
                f"instance id {instance_id!r} is held by member {old.member_id!r}, which has not left")
        # The static member is back under a new member id: it takes its place, its partitions
        # and its epoch, with no rebalance (KIP-848, KIP-345).
        target = cg.target.get(old.member_id)
        cg.remove(old.member_id)
        member.assigned, member.member_epoch = old.assigned, old.previous_member_epoch
        member.previous_member_epoch = old.previous_member_epoch
        member.subscribed_topic_names, member.subscribed_topic_regex = old.subscribed_topic_names, old.subscribed_topic_regex
        cg.add(member)
        if target is not None:
            cg.target[member_id] = target
        return member
    cg.add(member)
    cg.group_epoch += 1
    return member


def _check_epoch(member: ConsumerMember, epoch: int, owned: Partitions | None) -> None:
    if epoch == member.member_epoch:
        return
    if epoch < member.member_epoch and epoch == member.previous_member_epoch and (owned is None or owned <= member.assigned):
        member.sent = None  # the response that moved it on was lost: send the assignment again
        return
    raise FencedMemberEpochError(
        f"member {member.member_id!r} sent epoch {epoch}; its epoch is {member.member_epoch}: rejoin with epoch 0")


def update_subscription(member: ConsumerMember, rebalance_timeout_ms: int, names: Sequence[str] | None,
                         regex: str | None, assignor: str | None, rack_id: str | None, client_id: str,
                         client_host: str) -> bool:
    """Apply the non-null fields; True if the subscription (or assignor) changed."""
    changed = False
    if names is not None and tuple(sorted(set(names))) != member.subscribed_topic_names:
        member.subscribed_topic_names = tuple(sorted(set(names)))
        changed = True
    if regex is not None and (regex or None) != member.subscribed_topic_regex:
        member.subscribed_topic_regex = regex or None
        changed = True
    if assignor is not None and assignor != member.server_assignor:
        member.server_assignor = assignor
        changed = True
    if rebalance_timeout_ms >= 0:
        member.rebalance_timeout_ms = rebalance_timeout_ms
    if rack_id is not None:
        member.rack_id = rack_id
    member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
    return changed


def remove_member(ctx: CoordinatorContext, cg: ConsumerGroup, member_id: str, topics: Mapping[str, int] | None) -> None:
    cg.remove(member_id)
    cg.group_epoch += 1
    retarget(ctx, cg, topics if topics is not None else cg.subscribed_metadata)


def write(ctx: CoordinatorContext, group: Group, cg: ConsumerGroup, partition: int,
           items: list[tuple[Any, Any]], response: Response) -> Response | Pending:
    """Append what changed (after `items`); answer once it is committed."""
    items = items + cg.changes()
    if not items:
        return response
    return ctx.append_then_answer(partition, items, group.group_id, response)


# ---------------------------------------------------------------------------- timers


def tick_group(ctx: CoordinatorContext, group_id: str, now_ms: int) -> None:
    """Fence members whose session or revocation deadline passed (Kafka removes them)."""
    cg = ctx.consumer_groups.get(group_id)
    group = ctx.groups.get(group_id)
    if cg is None or group is None:
        return
    gone = [mid for mid, m in cg.members.items()
            if m.session_deadline_ms <= now_ms
            or (m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now_ms)]
    for mid in gone:
        remove_member(ctx, cg, mid, None)
    if gone:
        down = consumer_group_classic.maybe_downgrade(ctx, cg, group, now_ms)
        items = down if down is not None else cg.changes()
        if items:
            ctx.append(ctx.partition_for(group_id), items)


# ---------------------------------------------------------------------------- offsets


def validate_commit(ctx: CoordinatorContext, group_id: str, member_id: str, member_epoch: int) -> bool:
    """For a consumer group: check an OffsetCommit's member and epoch (raises); returns False
    when `group_id` is not a consumer group (the classic rules apply)."""
    cg = ctx.consumer_groups.get(group_id)
    if cg is None:
        return False
    if member_epoch < 0 and not member_id:
        if cg.members:
            raise UnknownMemberIdError(f"group {group_id!r} has members: commit as one of them")
        return True
    member = cg.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
    if member.is_classic and member_epoch != member.member_epoch:
        # A classic member commits with its generation: Kafka answers it as a classic group would.
        raise IllegalGenerationError(f"generation {member_epoch}; member {member_id!r} is at {member.member_epoch}")
    if member_epoch != member.member_epoch:
        raise StaleMemberEpochError(
            f"member {member_id!r} committed with epoch {member_epoch}; its epoch is {member.member_epoch}")
    return True


# ---------------------------------------------------------------------------- classic joins


def classic_join_allowed(ctx: CoordinatorContext, group_id: str) -> None:
    """Before a classic JoinGroup for a group that is not a consumer group with members
    (those take classic members: classic_member.join): an Empty consumer group converts back
    to classic (its consumer records tombstoned; Kafka's maybeDeleteEmptyConsumerGroup)."""
    cg = ctx.consumer_groups.get(group_id)
    if cg is None:
        return
    assert not cg.members
    ctx.check_append_room()
    del ctx.consumer_groups[group_id]
    group = ctx.groups.get(group_id)
    if group is not None:
        group.protocol_type = None
    ctx.append(ctx.partition_for(group_id), list(cg.tombstones()))


# ---------------------------------------------------------------------------- admin


def list_state(ctx: CoordinatorContext, group_id: str) -> tuple[str, str] | None:
    """(protocol type, state) of a consumer group; None for a classic one."""
    cg = ctx.consumer_groups.get(group_id)
    return None if cg is None else (PROTOCOL_TYPE, cg.state())


def _assignment_rows(tps: Partitions) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def describe(ctx: CoordinatorContext, group_ids: Sequence[str]) -> Response:
    """ConsumerGroupDescribe. Ok: {groups: [{group_id, state, group_epoch, assignment_epoch,
    assignor, members: [{member_id, instance_id, rack_id, member_epoch, state, client_id,
    client_host, subscribed_topic_names, subscribed_topic_regex, assignment,
    pending_revocation, target_assignment, classic}]} or {group_id, error}]}."""
    out: list[dict[str, Any]] = []
    for gid in group_ids:
        try:
            ctx.route(gid)
            cg = ctx.consumer_groups.get(gid)
            if cg is None:
                raise GroupIdNotFoundError(f"group {gid!r} is not a consumer group" if gid in ctx.groups
                                           else f"group {gid!r} does not exist")
        except RaftlogError as e:
            out.append({"group_id": gid, "error": {"code": e.code, "message": str(e)}})
            continue
        out.append({
            "group_id": gid, "state": cg.state(), "group_epoch": cg.group_epoch,
            "assignment_epoch": cg.assignment_epoch,
            "assignor": cg.preferred_assignor(ctx.config.group_consumer_assignor),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "state": m.state, "client_id": m.client_id,
                "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment_rows(m.assigned),
                "pending_revocation": _assignment_rows(m.pending_revocation),
                "target_assignment": _assignment_rows(cg.target.get(m.member_id, frozenset())),
                "classic": m.is_classic,
            } for m in cg.members.values()],
        })  # fmt: skip
    return {"groups": out}


# ---------------------------------------------------------------------------- replay


def build_from_records(group_id: str, records: Mapping[ConsumerGroupKey, Any], now_ms: int,
                       session_timeout_ms: int) -> ConsumerGroup | None:
    """A consumer group from its replayed records (latest value per key), or None when it has
    no group metadata record (it was converted back or deleted). Members must heartbeat
    within a session timeout from `now_ms`; one revoking gets its rebalance timeout again."""
    by_kind: dict[int, dict[str, Any]] = {}
    for k, v in records.items():
        by_kind.setdefault(k.kind, {})[k.member_id] = v
    meta = by_kind.get(GROUP_METADATA, {}).get("")
    if meta is None:
        return None
    cg = ConsumerGroup(group_id, group_epoch=meta.epoch)
    target_meta = by_kind.get(TARGET_METADATA, {}).get("")
    cg.assignment_epoch = target_meta.assignment_epoch if target_meta is not None else 0
    pm = by_kind.get(PARTITION_METADATA, {}).get("")
    cg.subscribed_metadata = dict(pm.topics) if pm is not None else {}
    for mid, mv in sorted(by_kind.get(MEMBER_METADATA, {}).items()):
        m = ConsumerMember(mid, mv.client_id, mv.client_host, mv.rebalance_timeout_ms,
                           mv.subscribed_topic_names, mv.subscribed_topic_regex, mv.server_assignor,
                           mv.instance_id, mv.rack_id, classic_session_timeout_ms=mv.classic_session_timeout_ms,
                           classic_protocols=mv.classic_protocols)
        cur = by_kind.get(CURRENT_ASSIGNMENT, {}).get(mid)
        if cur is not None:
            m.member_epoch, m.previous_member_epoch, m.state = cur.member_epoch, cur.previous_member_epoch, cur.state
            m.assigned, m.pending_revocation = from_wire(cur.assigned), from_wire(cur.pending_revocation)
            if m.state == UNREVOKED:
                m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
        m.session_deadline_ms = now_ms + (m.classic_session_timeout_ms or session_timeout_ms)
        cg.add(m)
    for mid, tv in by_kind.get(TARGET_MEMBER, {}).items():
        if mid in cg.members:
            cg.target[mid] = from_wire(tv.partitions)
    cg.written = dict(records)
    return cg

"""Group administration: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete and the offset
reset of an inactive group (`raftlog groups reset-offsets`; planning the offsets is the client's).

Functions over a `CoordinatorContext`, each the body of one public call of GroupCoordinator
(coordinator.py documents their responses and errors). Pure.
May import: raftlog.base, and groupcoord's context, records and state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from groupcoord import consumer_group_ops
from groupcoord.context import CoordinatorContext, Pending, Response, check_int, check_str
from groupcoord.records import GroupKey, Key, OffsetKey, OffsetValue, Value
from groupcoord.state import GroupState
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidRequestError,
    NonEmptyGroupError,
    RaftlogError,
)
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

__all__ = ["list_groups", "describe_groups", "delete_group", "delete_offsets", "reset_offsets"]


def list_groups(ctx: CoordinatorContext, states: Sequence[str] | None = None) -> Response:
    wanted = None if states is None else set(states)
    out = []
    for gid in sorted(ctx.groups):
        g = ctx.groups[gid]
        if g.is_(GroupState.DEAD) or not ctx.is_active(ctx.partition_for(gid)):
            continue
        protocol_type, state = consumer_group_ops.list_state(ctx, gid) or (g.protocol_type or "", g.state.value)
        if wanted is not None and state not in wanted:
            continue
        out.append({"group_id": gid, "protocol_type": protocol_type, "state": state,
                    "type": "consumer" if gid in ctx.consumer_groups else "classic"})
    return {"groups": out}


def describe_groups(ctx: CoordinatorContext, group_ids: Sequence[str]) -> Response:
    out = []
    for gid in group_ids:
        try:
            ctx.route(gid)
        except RaftlogError as e:
            out.append({"group_id": gid, "error": {"code": e.code, "message": str(e)}})
            continue
        g = ctx.groups.get(gid)
        if g is None:
            out.append({"group_id": gid, "state": "Dead", "protocol_type": "", "protocol": "", "members": []})
            continue
        consumer = consumer_group_ops.list_state(ctx, gid)
        if consumer is not None:  # Kafka 4: DescribeGroups shows a consumer group's type and state
            out.append({"group_id": gid, "state": consumer[1], "protocol_type": consumer[0], "protocol": "",
                        "members": [], "type": "consumer"})
            continue
        stable = g.is_(GroupState.STABLE)
        out.append({
            "group_id": gid,
            "state": g.state.value,
            "protocol_type": g.protocol_type or "",
            "protocol": (g.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "metadata": m.metadata(g.protocol_name or "") if stable else b"",
                    "assignment": m.assignment if stable else b"",
                }
                for m in g.members.values()
            ],
        })
    return {"groups": out}


def delete_group(ctx: CoordinatorContext, *, group_id: str, now_ms: int) -> Response | Pending:
    partition = ctx.route(group_id)
    group = ctx.groups.get(group_id)
    if group is None or group.is_(GroupState.DEAD):
        raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
    if not group.is_(GroupState.EMPTY):
        raise NonEmptyGroupError(f"group {group_id!r} is {group.state.value}, not Empty")
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None and cg.members:
        raise NonEmptyGroupError(f"consumer group {group_id!r} has {len(cg.members)} members")
    ctx.check_append_room()
    key = ctx.new_key(group_id)
    items: list[tuple[Key, Value | None]] = [
        (OffsetKey(group_id, t, p), None) for t, p in sorted(group.offsets)
    ]
    items.append((GroupKey(group_id), None))
    if cg is not None:
        del ctx.consumer_groups[group_id]
        items.extend(cg.tombstones())
    group.transition_to(GroupState.DEAD, now_ms)
    ctx.touch(group)

    def committed(now: int) -> None:
        if ctx.groups.get(group_id) is group:
            del ctx.groups[group_id]
        ctx.complete(key, {})

    def failed(err: RaftlogError, now: int) -> None:
        if ctx.groups.get(group_id) is group and group.is_(GroupState.DEAD):
            # Not a state-machine step: the delete did not happen, so the group is
            # what it was (Empty, no members).
            group.state = GroupState.EMPTY
        ctx.complete(key, err)

    ctx.append(partition, items, committed, failed)
    return Pending(key)


def delete_offsets(
    ctx: CoordinatorContext, *, group_id: str, partitions: Sequence[tuple[str, int]], now_ms: int,
) -> Response | Pending:
    """Kafka's OffsetDelete: tombstones for the group's committed offsets of `partitions`.
    A group with live members keeps every offset asked for (GROUP_SUBSCRIBED_TO_TOPIC per
    partition: Kafka refuses the topics the members subscribe to; the subscriptions are the
    clients' opaque metadata here, so every topic of a live group counts as subscribed).
    A partition without a committed offset is answered success, as Kafka does."""
    if not isinstance(partitions, Sequence) or len(partitions) > ctx.config.max_commit_partitions:
        raise InvalidRequestError("partitions: a list of (topic, partition)", field="partitions")
    for t, p in partitions:
        check_str("topic", t, 1, MAX_TOPIC_NAME_CHARS)
        check_int("partition", p, 0, 2**31 - 1)
    partition = ctx.route(group_id)
    group = ctx.groups.get(group_id)
    if group is None or group.is_(GroupState.DEAD):
        raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
    wanted = sorted(set(partitions))
    if not group.is_(GroupState.EMPTY):
        err = GroupSubscribedToTopicError(f"group {group_id!r} is {group.state.value}: its members consume the topic")
        return {"partitions": [{"topic": t, "partition": p, "error": {"code": err.code, "message": str(err)}}
                               for t, p in wanted]}
    response = {"partitions": [{"topic": t, "partition": p} for t, p in wanted]}
    items: list[tuple[Key, Value | None]] = [(OffsetKey(group_id, t, p), None) for t, p in wanted
                                             if (t, p) in group.offsets]
    if not items:
        return response
    ctx.check_append_room()
    return ctx.append_then_answer(partition, items, group_id, response)


def reset_offsets(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    offsets: Mapping[tuple[str, int], int],
    now_ms: int,
    dry_run: bool = False,
) -> Response | Pending:
    if not isinstance(offsets, Mapping) or len(offsets) > ctx.config.max_commit_partitions:
        raise InvalidRequestError("offsets: a map (topic, partition) -> offset", field="offsets")
    for (t, p), o in offsets.items():
        check_str("topic", t, 1, MAX_TOPIC_NAME_CHARS)
        check_int("partition", p, 0, 2**31 - 1)
        check_int("offset", o, 0)
    partition = ctx.route(group_id)
    group = ctx.groups.get(group_id)
    if group is not None and group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
    if group is not None and not group.is_(GroupState.EMPTY):
        raise NonEmptyGroupError(
            f"offsets can be reset only for an inactive group; {group_id!r} is {group.state.value}")
    cg = ctx.consumer_groups.get(group_id)
    if cg is not None and cg.members:
        raise NonEmptyGroupError(f"offsets can be reset only for an inactive group; {group_id!r} is {cg.state()}")
    stored = group.offsets if group is not None else {}
    rows = [
        {"topic": t, "partition": p, "previous_offset": stored[(t, p)].offset if (t, p) in stored else -1,
         "offset": o}
        for (t, p), o in sorted(offsets.items())
    ]
    response = {"dry_run": bool(dry_run), "partitions": rows}
    if dry_run or not rows:
        return response
    ctx.check_append_room()
    if group is None:
        ctx.check_group_room()
    items: list[tuple[Key, Value | None]] = [
        (OffsetKey(group_id, t, p), OffsetValue(o, "", now_ms)) for (t, p), o in sorted(offsets.items())
    ]
    return ctx.append_then_answer(partition, items, group_id, response)

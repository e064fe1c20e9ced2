"""The native protocol's classic group ops (PROTOCOL.md): an adapter over the group port
(groupcoord/port.py), as raftlog/node/kafka/groups.py is for the Kafka listener: CBOR fields in
(`field(...)` parsing, INVALID_REQUEST naming a bad field), the one ACL guard
(raftlog/node/guarded_groups.py `GuardedGroups`, from the request's principal), the port
call, CBOR fields out (an item's error as its `error` map).

    handlers = group_handlers(port, guard)   # {"join_group": ..., "offset_commit": ..., ...}

Ops: find_coordinator, join_group, sync_group, heartbeat, leave_group, offset_commit,
offset_fetch, list_groups, describe_groups, delete_groups, offset_delete, reset_offsets
(groupcoord/service.py), consumer_group_heartbeat, consumer_group_describe (KIP-848,
groupcoord/consumer_group_service.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from groupcoord.port import (
    CommitOffset,
    ConsumerHeartbeat,
    Coordinator,
    GroupPort,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeavingMember,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    PartitionOutcome,
    ResetOffsets,
    SyncGroup,
    TopicPartitions,
)
from raftlog.base.errors import RaftlogError
from raftlog.base.protocol import Request, field
from raftlog.node.authorize import Guard, guarded_at_port
from raftlog.node.guarded_groups import GuardedGroups

__all__ = ["coordinator_fields", "group_handlers"]

MAX_PROTOCOLS: Final = 64  # parsed at most one more: the coordinator refuses more than this

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _with_error(entry: dict[str, Any], error: RaftlogError | None) -> dict[str, Any]:
    if error is not None:
        entry["error"] = error.to_wire()
    return entry


def _outcomes(results: list[PartitionOutcome]) -> dict[str, Any]:
    return {"partitions": [_with_error({"topic": r.topic, "partition": r.partition}, r.error) for r in results]}


def _rows(tps: Sequence[TopicPartitions]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in tps]


def coordinator_fields(found: Coordinator) -> dict[str, Any]:
    """A coordinator's native answer (find_coordinator, find_txn_coordinator)."""
    return {"node_id": found.node_id, "host": found.host, "port": found.port, "partition": found.partition}


def _timeout_ms(request: Request) -> int | None:
    return field(request, "timeout_ms", int, default=None, nullable=True, min_value=0)


def _topic_partitions(request: Request, name: str = "partitions") -> list[tuple[str, int]]:
    return [(field(d, "topic", str, where=f"{name}[{i}]"), field(d, "partition", int, where=f"{name}[{i}]"))
            for i, d in enumerate(field(request, name, list, items=dict))]


def group_handlers(port: GroupPort, guard: Guard) -> dict[str, Handler]:
    """The native client handlers of the classic group ops, each calling the port behind `guard`."""

    def guarded(request: Request) -> GuardedGroups:
        return GuardedGroups(port, guard.access(request.principal, request.client_host))

    async def find_coordinator(request: Request) -> dict[str, Any]:
        return coordinator_fields(await guarded(request).find_coordinator(field(request, "group_id", str)))

    async def join_group(request: Request) -> dict[str, Any]:
        protocols = []
        for i, d in enumerate(field(request, "protocols", list, items=dict)[:MAX_PROTOCOLS + 1]):
            protocols.append((field(d, "name", str, where=f"protocols[{i}]"),
                              field(d, "metadata", bytes, where=f"protocols[{i}]")))
        joined = await guarded(request).join_group(JoinGroup(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str, default=""),
            protocol_type=field(request, "protocol_type", str, default="consumer"),
            protocols=protocols,
            session_timeout_ms=field(request, "session_timeout_ms", int),
            rebalance_timeout_ms=field(request, "rebalance_timeout_ms", int, min_value=1),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            client_id=field(request, "client_id", str, default=""),
            client_host=field(request, "client_host", str, default=""),
            timeout_ms=_timeout_ms(request),
        ))  # fmt: skip
        return {
            "member_id": joined.member_id, "generation_id": joined.generation_id,
            "protocol_type": joined.protocol_type, "protocol_name": joined.protocol_name, "leader": joined.leader,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                        for m in joined.members],
        }  # fmt: skip

    async def sync_group(request: Request) -> dict[str, Any]:
        raw = field(request, "assignments", list, items=dict, default=None, nullable=True)
        assignments = None if raw is None else {
            field(d, "member_id", str, where=f"assignments[{i}]"): field(d, "assignment", bytes, where=f"assignments[{i}]")
            for i, d in enumerate(raw)}  # fmt: skip
        synced = await guarded(request).sync_group(SyncGroup(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str),
            generation_id=field(request, "generation_id", int),
            assignments=assignments,
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            protocol_type=field(request, "protocol_type", str, default=None, nullable=True),
            protocol_name=field(request, "protocol_name", str, default=None, nullable=True),
            timeout_ms=_timeout_ms(request),
        ))  # fmt: skip
        return {"protocol_type": synced.protocol_type, "protocol_name": synced.protocol_name,
                "assignment": synced.assignment}

    async def heartbeat(request: Request) -> dict[str, Any]:
        await guarded(request).heartbeat(Heartbeat(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str),
            generation_id=field(request, "generation_id", int),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
        ))  # fmt: skip
        return {}

    async def leave_group(request: Request) -> dict[str, Any]:
        members = [LeavingMember(field(d, "member_id", str, default="", where=f"members[{i}]"),
                                 field(d, "group_instance_id", str, default=None, nullable=True, where=f"members[{i}]"))
                   for i, d in enumerate(field(request, "members", list, items=dict))]
        left = await guarded(request).leave_group(LeaveGroup(field(request, "group_id", str), members))
        return {"members": [_with_error({"member_id": m.member_id, "group_instance_id": m.group_instance_id}, m.error)
                            for m in left]}

    async def offset_commit(request: Request) -> dict[str, Any]:
        offsets = []
        for i, d in enumerate(field(request, "offsets", list, items=dict)):
            w = f"offsets[{i}]"
            offsets.append(CommitOffset(
                field(d, "topic", str, where=w), field(d, "partition", int, where=w),
                field(d, "offset", int, where=w),
                field(d, "leader_epoch", int, default=None, nullable=True, where=w),
                field(d, "metadata", str, default="", where=w),
            ))  # fmt: skip
        return _outcomes(await guarded(request).offset_commit(OffsetCommit(
            group_id=field(request, "group_id", str),
            offsets=offsets,
            member_id=field(request, "member_id", str, default=""),
            generation_id=field(request, "generation_id", int, default=-1),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            timeout_ms=_timeout_ms(request),
        )))  # fmt: skip

    async def offset_fetch(request: Request) -> dict[str, Any]:
        raw = field(request, "partitions", list, items=dict, default=None, nullable=True)
        found = await guarded(request).offset_fetch(OffsetFetch(
            group_id=field(request, "group_id", str),
            partitions=None if raw is None else _topic_partitions(request),
            member_id=field(request, "member_id", str, default=""),
            member_epoch=field(request, "member_epoch", int, default=-1),
        ))  # fmt: skip
        return {"partitions": [
            {"topic": c.topic, "partition": c.partition, "error": c.error.to_wire()} if c.error is not None else
            {"topic": c.topic, "partition": c.partition, "offset": c.offset, "leader_epoch": c.leader_epoch,
             "metadata": c.metadata}
            for c in found]}  # fmt: skip

    async def list_groups(request: Request) -> dict[str, Any]:
        states = field(request, "states", list, items=str, default=None, nullable=True)
        groups = guarded(request)
        return {"groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state, "type": g.type}
                           for g in await groups.list_groups(states)], "node_id": groups.node_id}

    async def describe_groups(request: Request) -> dict[str, Any]:
        out = []
        for g in await guarded(request).describe_groups(field(request, "group_ids", list, items=str)):
            if g.error is not None:
                out.append({"group_id": g.group_id, "error": g.error.to_wire()})
                continue
            entry: dict[str, Any] = {
                "group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type, "protocol": g.protocol,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host, "metadata": m.metadata,
                             "assignment": m.assignment} for m in g.members],
            }  # fmt: skip
            if g.type != "classic":
                entry["type"] = g.type
            out.append(entry)
        return {"groups": out}

    async def delete_groups(request: Request) -> dict[str, Any]:
        deleted = await guarded(request).delete_groups(field(request, "group_ids", list, items=str),
                                                       _timeout_ms(request))
        return {"groups": [_with_error({"group_id": g.group_id}, g.error) for g in deleted]}

    async def offset_delete(request: Request) -> dict[str, Any]:
        return _outcomes(await guarded(request).offset_delete(OffsetDelete(
            field(request, "group_id", str), _topic_partitions(request), _timeout_ms(request))))

    async def reset_offsets(request: Request) -> dict[str, Any]:
        offsets: dict[tuple[str, int], int] = {}
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            w = f"partitions[{i}]"
            offsets[(field(d, "topic", str, where=w), field(d, "partition", int, where=w))] = field(d, "offset", int, where=w)
        done = await guarded(request).reset_offsets(ResetOffsets(
            field(request, "group_id", str), offsets, field(request, "dry_run", bool, default=False),
            _timeout_ms(request)))
        return {"dry_run": done.dry_run, "partitions": [
            {"topic": r.topic, "partition": r.partition, "previous_offset": r.previous_offset, "offset": r.offset}
            for r in done.partitions]}  # fmt: skip

    async def consumer_group_heartbeat(request: Request) -> dict[str, Any]:
        raw = field(request, "topic_partitions", list, items=dict, default=None, nullable=True)
        owned = None if raw is None else [
            TopicPartitions(field(d, "topic", str, where=f"topic_partitions[{i}]"),
                            field(d, "partitions", list, items=int, where=f"topic_partitions[{i}]"))
            for i, d in enumerate(raw)]
        answer = await guarded(request).consumer_group_heartbeat(ConsumerHeartbeat(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str, default=""),
            member_epoch=field(request, "member_epoch", int),
            instance_id=field(request, "instance_id", str, default=None, nullable=True),
            rack_id=field(request, "rack_id", str, default=None, nullable=True),
            rebalance_timeout_ms=field(request, "rebalance_timeout_ms", int, default=-1),
            subscribed_topic_names=field(request, "subscribed_topic_names", list, items=str, default=None,
                                         nullable=True),
            subscribed_topic_regex=field(request, "subscribed_topic_regex", str, default=None, nullable=True),
            server_assignor=field(request, "server_assignor", str, default=None, nullable=True),
            owned=owned,
            client_id=field(request, "client_id", str, default=""),
            client_host=field(request, "client_host", str, default=""),
            timeout_ms=_timeout_ms(request),
        ))  # fmt: skip
        return {"member_id": answer.member_id, "member_epoch": answer.member_epoch,
                "heartbeat_interval_ms": answer.heartbeat_interval_ms,
                "assignment": None if answer.assignment is None else _rows(answer.assignment)}

    async def consumer_group_describe(request: Request) -> dict[str, Any]:
        out = []
        for g in await guarded(request).consumer_group_describe(field(request, "group_ids", list, items=str)):
            if g.error is not None:
                out.append({"group_id": g.group_id, "error": g.error.to_wire()})
                continue
            out.append({
                "group_id": g.group_id, "state": g.state, "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
                "members": [{
                    "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "state": m.state, "client_id": m.client_id,
                    "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex, "assignment": _rows(m.assignment),
                    "pending_revocation": _rows(m.pending_revocation),
                    "target_assignment": _rows(m.target_assignment), "classic": m.classic,
                } for m in g.members],
            })  # fmt: skip
        return {"groups": out}

    return guarded_at_port({
        "find_coordinator": find_coordinator,
        "join_group": join_group,
        "sync_group": sync_group,
        "heartbeat": heartbeat,
        "leave_group": leave_group,
        "offset_commit": offset_commit,
        "offset_fetch": offset_fetch,
        "list_groups": list_groups,
        "describe_groups": describe_groups,
        "delete_groups": delete_groups,
        "offset_delete": offset_delete,
        "reset_offsets": reset_offsets,
        "consumer_group_heartbeat": consumer_group_heartbeat,  # KIP-848
        "consumer_group_describe": consumer_group_describe,
    })

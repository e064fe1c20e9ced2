"""The native protocol's adapter of the share port (groupcoord/share_port.py, KIP-932): each
op's CBOR fields parsed into the port's dataclasses, the call behind the one ACL guard
(raftlog/node/guarded_share.py `GuardedShare`, the request's principal), CBOR fields out (an
item's error as its `error` map), as PROTOCOL.md describes them.

    handlers = share_handlers(port, guard)   # {"share_fetch": ..., "share_group_heartbeat": ..., ...}

Ops: share_group_heartbeat, share_group_describe, share_groups_list, share_group_delete,
share_fetch, share_acknowledge, share_group_offsets, share_group_reset,
share_group_delete_offsets. The share service's peer ops (share_partition_*, share_member_check)
stay the service's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from groupcoord.port import TopicPartitions
from groupcoord.share_port import ShareAck, ShareAcknowledge, ShareFetch, ShareHeartbeat, SharePort, ShareReset
from raftlog.base.errors import InvalidRequestError
from raftlog.base.protocol import Request, field
from raftlog.node.authorize import Guard, guarded_at_port
from raftlog.node.guarded_share import GuardedShare

__all__ = ["share_handlers"]

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _rows(tps: Sequence[TopicPartitions]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in tps]


def _acks(request: Request) -> list[ShareAck]:
    out = []
    for i, a in enumerate(field(request, "acknowledgements", list, items=list, default=[])):
        if len(a) != 3 or not all(type(x) is int for x in a):
            raise InvalidRequestError(f"acknowledgements[{i}] must be [first, last, type 0-3]", field="acknowledgements")
        out.append(ShareAck(a[0], a[1], a[2]))
    return out


def _partition(request: Request) -> tuple[str, str, int]:
    return field(request, "group_id", str), field(request, "topic", str), field(request, "partition", int)


def share_handlers(port: SharePort, guard: Guard) -> dict[str, Handler]:
    """The native client handlers of the share ops, each calling the port behind `guard`."""

    def guarded(request: Request) -> GuardedShare:
        return GuardedShare(port, guard.access(request.principal, request.client_host))

    async def share_group_heartbeat(request: Request) -> dict[str, Any]:
        beat = await guarded(request).share_group_heartbeat(ShareHeartbeat(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str, default=""),
            member_epoch=field(request, "member_epoch", int),
            subscribed_topic_names=field(request, "subscribed_topic_names", list, items=str, default=None,
                                         nullable=True),
            rack_id=field(request, "rack_id", str, default=None, nullable=True),
            client_id=field(request, "client_id", str, default=""),
            client_host=request.client_host or "",
        ))  # fmt: skip
        return {"member_id": beat.member_id, "member_epoch": beat.member_epoch,
                "heartbeat_interval_ms": beat.heartbeat_interval_ms,
                "assignment": None if beat.assignment is None else _rows(beat.assignment)}

    async def share_group_describe(request: Request) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        for g in await guarded(request).share_group_describe(field(request, "group_ids", list, items=str)):
            if g.error is not None:
                out.append({"group_id": g.group_id, "error": g.error.to_wire()})
                continue
            out.append({
                "group_id": g.group_id, "state": g.state, "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "assignment": _rows(m.assignment)} for m in g.members],
            })  # fmt: skip
        return {"groups": out}

    async def share_groups_list(request: Request) -> dict[str, Any]:
        return {"groups": [{"group_id": g.group_id, "state": g.state, "members": g.members}
                           for g in await guarded(request).share_groups_list()]}

    async def share_group_delete(request: Request) -> dict[str, Any]:
        await guarded(request).share_group_delete(field(request, "group_id", str))
        return {}

    async def share_fetch(request: Request) -> dict[str, Any]:
        group_id, topic, partition = _partition(request)
        done = await guarded(request).share_fetch(ShareFetch(
            group_id, field(request, "member_id", str), topic, partition, field(request, "max_records", int),
            field(request, "max_bytes", int, default=1 << 20),
            field(request, "auto_offset_reset", str, default="latest"), _acks(request)))
        return {"records": done.records,
                "acquired": [[a.first_offset, a.last_offset, a.delivery_count] for a in done.acquired],
                "start_offset": done.start_offset, "high_watermark": done.high_watermark,
                "acknowledge_error": None if done.acknowledge_error is None else done.acknowledge_error.to_wire()}

    async def share_acknowledge(request: Request) -> dict[str, Any]:
        group_id, topic, partition = _partition(request)
        start = await guarded(request).share_acknowledge(ShareAcknowledge(
            group_id, field(request, "member_id", str), topic, partition, _acks(request)))
        return {"start_offset": start}

    async def share_group_offsets(request: Request) -> dict[str, Any]:
        o = await guarded(request).share_group_offsets(*_partition(request))
        return {"start_offset": o.start_offset, "lag": o.lag, "in_flight": [
            {"first_offset": r.first_offset, "last_offset": r.last_offset, "state": r.state,
             "delivery_count": r.delivery_count, "member_id": r.member_id} for r in o.in_flight]}

    async def share_group_reset(request: Request) -> dict[str, Any]:
        await guarded(request).share_group_reset(ShareReset(*_partition(request), field(request, "offset", int)))
        return {}

    async def share_group_delete_offsets(request: Request) -> dict[str, Any]:
        await guarded(request).share_group_delete_offsets(field(request, "group_id", str), field(request, "topic", str))
        return {}

    return guarded_at_port({
        "share_group_heartbeat": share_group_heartbeat,
        "share_group_describe": share_group_describe,
        "share_groups_list": share_groups_list,
        "share_group_delete": share_group_delete,
        "share_fetch": share_fetch,
        "share_acknowledge": share_acknowledge,
        "share_group_offsets": share_group_offsets,
        "share_group_reset": share_group_reset,
        "share_group_delete_offsets": share_group_delete_offsets,
    })

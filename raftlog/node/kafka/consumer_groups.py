"""KIP-848 consumer-group APIs on the Kafka listener: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), versions 0-1 (what librdkafka 2.12+ and the Java client 4.x send;
v1 adds the subscription regex and Describe's member type).

Protocol translation only, wire -> port -> wire: each handler calls the group port
(groupcoord/port.py, behind the one ACL guard: `ctx.group_port()`; served by
groupcoord/consumer_group_service.py) on the coordinator of `__consumer_offsets`, so a
consumer-protocol group lives in the same coordinator, with the same offsets, as the classic
groups (groups.py). Kafka names topics by id in these APIs; the port by name: ids are
translated here with the node's image (an owned partition of a topic id the image does not
know is dropped: the topic is gone, the member cannot own it).

Errors: the coordinator's (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID,
UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, GROUP_ID_NOT_FOUND for a classic group, the
routing errors) go in the response's error_code with the message; member_epoch is then -1.
A heartbeat waits for its records' acks=all append, within the listener's request timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from groupcoord.port import ConsumerHeartbeat, TopicPartitions
from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.metadata import ZERO_UUID, names_by_uuid, topic_uuid
from raftlog.node.kafka.schemas import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse

__all__ = ["HANDLERS"]

CONSUMER_GROUP_HEARTBEAT_KEY: Final = 68
CONSUMER_GROUP_DESCRIBE_KEY: Final = 69
CONSUMER_MEMBER_TYPE: Final = 1   # Describe v1: 0 classic member, 1 consumer member
CLASSIC_MEMBER_TYPE: Final = 0    # a classic member inside a consumer group (online upgrade)
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # INT32_MIN: "not asked", as Kafka


def _client(call: Call) -> tuple[str, str]:
    host = call.connection.peer.rpartition(":")[0] or call.connection.peer
    return call.header.client_id or "", f"/{host.strip('[]')}"


def _topic_ids(ctx: KafkaContext) -> dict[str, Any]:
    return {name: topic_uuid(tid) for name, tid in ctx.metadata.image.topic_ids.items()}


async def handle_consumer_group_heartbeat(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    names = names_by_uuid(ctx)
    owned = None
    if request.topic_partitions is not None:
        owned = [TopicPartitions(names[t.topic_id], list(t.partitions or []))
                 for t in request.topic_partitions if t.topic_id in names]
    client_id, client_host = _client(call)
    beat = ConsumerHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id or "",
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        subscribed_topic_regex=request.subscribed_topic_regex if call.version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=client_id,
        client_host=client_host,
        timeout_ms=ctx.request_timeout_ms,
    )
    R = ConsumerGroupHeartbeatResponse

    async def answer() -> Reply:
        try:
            result = await ctx.group_port().consumer_group_heartbeat(beat)
        except RaftlogError as exc:
            code, message = errors.kafka_error(exc)
            return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
                     member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
        assignment = None
        if result.assignment is not None:
            ids = _topic_ids(ctx)
            assignment = R.Assignment(topic_partitions=[
                R.Assignment.TopicPartitions(topic_id=ids.get(a.topic, ZERO_UUID), partitions=list(a.partitions))
                for a in result.assignment])  # fmt: skip
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, member_id=result.member_id,
                 member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                 assignment=assignment)

    return Later(answer)


async def handle_consumer_group_describe(ctx: KafkaContext, call: Call) -> Reply:
    ids = list(call.request.group_ids or [])
    D = ConsumerGroupDescribeResponse.DescribedGroup
    M = D.Member
    A = M.Assignment

    def failed(gid: str, code: int, message: str | None) -> Any:
        return D(error_code=code, error_message=message, group_id=gid, group_state="", group_epoch=-1,
                 assignment_epoch=-1, assignor_name="", members=[],
                 authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    def assignment(rows: Sequence[TopicPartitions], topic_ids: dict[str, Any]) -> Any:
        return A(topic_partitions=[
            A.TopicPartitions(topic_id=topic_ids.get(r.topic, ZERO_UUID), topic_name=r.topic,
                              partitions=list(r.partitions)) for r in rows])  # fmt: skip

    try:
        described = await ctx.group_port().consumer_group_describe(ids)
    except RaftlogError as exc:
        code, message = errors.kafka_error(exc)
        return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[failed(g, code, message) for g in ids])
    topic_ids = _topic_ids(ctx)
    out = []
    for g in described:
        if g.error is not None:
            out.append(failed(g.group_id, errors.kafka_error_code(g.error.code), g.error.message))
            continue
        out.append(D(
            error_code=errors.NONE, error_message=None, group_id=g.group_id, group_state=g.state,
            group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name=g.assignor,
            members=[M(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                       member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                       subscribed_topic_names=list(m.subscribed_topic_names),
                       subscribed_topic_regex=m.subscribed_topic_regex,
                       assignment=assignment(m.assignment, topic_ids),
                       target_assignment=assignment(m.target_assignment, topic_ids),
                       member_type=CLASSIC_MEMBER_TYPE if m.classic else CONSUMER_MEMBER_TYPE)
                     for m in g.members],
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        ))  # fmt: skip
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)


HANDLERS: Final = {
    CONSUMER_GROUP_HEARTBEAT_KEY: handle_consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE_KEY: handle_consumer_group_describe,
}

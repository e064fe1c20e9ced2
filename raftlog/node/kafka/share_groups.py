"""KIP-932 share groups on the Kafka listener: ShareGroupHeartbeat (76) v1, ShareGroupDescribe
(77) v1, ShareFetch (78) v1-2, ShareAcknowledge (79) v1-2, DescribeShareGroupOffsets (90) v0-1,
AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0: the versions the Java
client and tools of Kafka 4.4 send (ApiKeys.latestVersion of kafka-clients 4.4.0).

Protocol translation only, wire -> port -> wire: each handler calls the share port
(groupcoord/share_port.py) through `ctx.share_port()`, behind the connection's ACL guard
(raftlog/node/guarded_share.py); Kafka names topics by id in 76-79, the port by name
(translated with the node's image).

Share sessions (KIP-932, like KIP-227's fetch sessions but per member): ShareFetch with epoch
0 opens one for (group, member) on this node with the partitions it names; later requests
(ShareFetch or ShareAcknowledge) carry the session's next epoch, add partitions and forget
others (ForgottenTopicsData); -1 closes it (its acknowledgements applied, nothing fetched).
A wrong epoch is INVALID_SHARE_SESSION_EPOCH, a missing session SHARE_SESSION_NOT_FOUND.
Each ShareFetch acquires from every partition of the session, acknowledgements first, and
waits up to MaxWaitMs (bounded) while nothing was acquired.

v2's AcknowledgeType RENEW (KIP-1222) and ShareAcquireMode are not served: a RENEW is
INVALID_REQUEST for its partition (the Java client sends it only when the application renews).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from groupcoord.share_port import ShareAck, ShareAcknowledge, ShareFetch, ShareFetched, ShareHeartbeat, ShareReset
from raftlog.base.errors import RaftlogError
from raftlog.node.config import NodeConfig
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.groups import _client
from raftlog.node.kafka.metadata import ZERO_UUID, names_by_uuid, topic_uuid
from raftlog.node.kafka.schemas import (
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)

__all__ = ["HANDLERS", "ShareSessions", "SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH"]

SHARE_GROUP_HEARTBEAT_KEY: Final = 76
SHARE_GROUP_DESCRIBE_KEY: Final = 77
SHARE_FETCH_KEY: Final = 78
SHARE_ACKNOWLEDGE_KEY: Final = 79
DESCRIBE_SHARE_GROUP_OFFSETS_KEY: Final = 90
ALTER_SHARE_GROUP_OFFSETS_KEY: Final = 91
DELETE_SHARE_GROUP_OFFSETS_KEY: Final = 92

SHARE_SESSION_NOT_FOUND: Final = 122
INVALID_SHARE_SESSION_EPOCH: Final = 123
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
MAX_SESSIONS: Final = 10_000  # per node; the least recently used goes first
MAX_SESSION_PARTITIONS: Final = 10_000
MAX_WAIT_MS: Final = 30_000
POLL_STEP_S: Final = (0.01, 0.2)  # while waiting for records: first and longest step
MAX_RECORDS_DEFAULT: Final = 500
MAX_FETCH_BYTES: Final = 8 << 20
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
RENEW: Final = 4  # KIP-1222's AcknowledgeType, not served

TopicPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class _Session:
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # ordered set


class ShareSessions:
    """The node's share sessions (pure; one per (group, member)), bounded by MAX_SESSIONS."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], _Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def fetch(self, group_id: str, member_id: str, epoch: int, listed: list[TopicPartition],
              forgotten: list[TopicPartition]) -> tuple[int, list[TopicPartition]]:
        """A ShareFetch's session step: (error code, the partitions to fetch from). Epoch 0
        opens (or replaces) the session, -1 closes it (nothing to fetch)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(key, None)
            while len(self._sessions) >= self.max_sessions:
                self._sessions.popitem(last=False)
            session = self._sessions[key] = _Session(_next(epoch))
            for tp in listed[:MAX_SESSION_PARTITIONS]:
                session.partitions[tp] = None
            return errors.NONE, list(session.partitions)
        code = self._check(key, epoch)
        if code != errors.NONE:
            return code, []
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return errors.NONE, []
        session = self._sessions[key]
        session.epoch = _next(epoch)
        self._sessions.move_to_end(key)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp in listed:
            if len(session.partitions) < MAX_SESSION_PARTITIONS:
                session.partitions[tp] = None
        return errors.NONE, list(session.partitions)

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> int:
        """A ShareAcknowledge's session step: its error code (0 opens nothing: it is refused)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            return INVALID_SHARE_SESSION_EPOCH
        code = self._check(key, epoch)
        if code == errors.NONE:
            if epoch == FINAL_EPOCH:
                del self._sessions[key]
            else:
                self._sessions[key].epoch = _next(epoch)
                self._sessions.move_to_end(key)
        return code

    def _check(self, key: tuple[str, str], epoch: int) -> int:
        session = self._sessions.get(key)
        if session is None:
            return SHARE_SESSION_NOT_FOUND
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return INVALID_SHARE_SESSION_EPOCH
        return errors.NONE


def _next(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 or epoch < 0 else epoch + 1


def _sessions(ctx: KafkaContext) -> ShareSessions:
    s = ctx.cache.get("share_sessions")
    if not isinstance(s, ShareSessions):
        s = ctx.cache["share_sessions"] = ShareSessions()
    return s


def _topic_ids(ctx: KafkaContext) -> dict[str, uuid.UUID]:
    return {name: topic_uuid(tid) for name, tid in ctx.metadata.image.topic_ids.items()}


def _leader(ctx: KafkaContext, topic: str, partition: int) -> tuple[int, int]:
    state = ctx.metadata.image.partition(topic, partition)
    return (-1, -1) if state is None else (state.leader, state.leader_epoch)


def _acks(batches: Any) -> tuple[list[list[int]], str | None]:
    """Kafka's AcknowledgementBatches as the service's [first, last, type] ranges; one type for
    the whole range, or one per offset (split into runs). (ranges, refusal or None)."""
    out: list[list[int]] = []
    for b in batches or ():
        types = list(b.acknowledge_types or [])
        if not types or b.last_offset < b.first_offset:
            return [], f"bad acknowledgement batch {b.first_offset}..{b.last_offset}"
        if len(types) == 1:
            types = types * (b.last_offset - b.first_offset + 1)
        elif len(types) != b.last_offset - b.first_offset + 1:
            return [], "one acknowledge type per offset, or one for the batch"
        if RENEW in types:
            return [], "RENEW acknowledgements (KIP-1222) are not served"
        for i, t in enumerate(types):
            off = b.first_offset + i
            if out and out[-1][2] == t and out[-1][1] == off - 1:
                out[-1][1] = off
            else:
                out.append([off, off, t])
    return out, None


# ------------------------------------------------------------------ membership (coordinator)


async def handle_share_group_heartbeat(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ShareGroupHeartbeatResponse
    client_id, client_host = _client(call)
    beat = ShareHeartbeat(
        group_id=request.group_id, member_id=request.member_id or "", member_epoch=request.member_epoch,
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        rack_id=request.rack_id, client_id=client_id, client_host=client_host)
    try:
        result = await ctx.share_port().share_group_heartbeat(beat)
    except RaftlogError as exc:
        code, message = errors.kafka_error(exc)
        return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=-1,
                 heartbeat_interval_ms=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        ids = _topic_ids(ctx)
        assignment = R.Assignment(topic_partitions=[
            R.Assignment.TopicPartitions(topic_id=ids.get(a.topic, ZERO_UUID), partitions=list(a.partitions))
            for a in result.assignment if a.topic in ids])  # fmt: skip
    return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, member_id=result.member_id,
             member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
             assignment=assignment)


async def handle_share_group_describe(ctx: KafkaContext, call: Call) -> Reply:
    ids = list(call.request.group_ids or [])
    R = ShareGroupDescribeResponse
    D = R.DescribedGroup

    def failed(gid: str, code: int, message: str | None) -> Any:
        return D(error_code=code, error_message=message, group_id=gid, group_state="", group_epoch=-1,
                 assignment_epoch=-1, assignor_name="", members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    try:
        described = await ctx.share_port().share_group_describe(ids)
    except RaftlogError as exc:
        code, message = errors.kafka_error(exc)
        return R(throttle_time_ms=0, groups=[failed(g, code, message) for g in ids])
    topic_ids = _topic_ids(ctx)
    out = []
    for g in described:
        if g.error is not None:
            out.append(failed(g.group_id, errors.kafka_error_code(g.error.code), g.error.message))
            continue
        out.append(D(
            error_code=errors.NONE, error_message=None, group_id=g.group_id, group_state=g.state,
            group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name=g.assignor,
            members=[D.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id or "", client_host=m.client_host or "",
                subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=D.Member.Assignment(topic_partitions=[
                    D.Member.Assignment.TopicPartitions(topic_id=topic_ids.get(a.topic, ZERO_UUID), topic_name=a.topic,
                                      partitions=list(a.partitions)) for a in m.assignment]))
                for m in g.members],
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))  # fmt: skip
    return R(throttle_time_ms=0, groups=out)


# ------------------------------------------------------------------ records (partition leaders)


async def _fetch_partition(ctx: KafkaContext, group_id: str, member_id: str, topic: str, partition: int,
                           acks: list[list[int]], max_records: int, max_bytes: int) -> ShareFetched | RaftlogError:
    """One partition's share fetch: the port's answer, or its error."""
    try:
        return await ctx.share_port().share_fetch(ShareFetch(
            group_id, member_id, topic, partition, max_records, max_bytes, acknowledgements=_share_acks(acks)))
    except RaftlogError as exc:
        return exc


def _share_acks(ranges: list[list[int]]) -> list[ShareAck]:
    return [ShareAck(first, last, kind) for first, last, kind in ranges]


def _acquired(r: ShareFetched | RaftlogError | int | None) -> bool:
    return isinstance(r, ShareFetched) and bool(r.acquired)


async def handle_share_fetch(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ShareFetchResponse
    T = R.ShareFetchableTopicResponse
    P = T.PartitionData
    group_id, member_id = request.group_id or "", request.member_id or ""
    names = names_by_uuid(ctx)
    acks: dict[TopicPartition, tuple[list[list[int]], str | None]] = {}
    listed: list[TopicPartition] = []
    for t in request.topics or ():
        for p in t.partitions or ():
            listed.append((t.topic_id, p.partition_index))
            if p.acknowledgement_batches:
                acks[(t.topic_id, p.partition_index)] = _acks(p.acknowledgement_batches)
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data or () for p in t.partitions or ()]
    code, parts = _sessions(ctx).fetch(group_id, member_id, request.share_session_epoch, listed, forgotten)
    lock_ms = _lock_duration_ms(ctx)
    if code != errors.NONE:
        return R(throttle_time_ms=0, error_code=code, error_message=None, acquisition_lock_timeout_ms=lock_ms,
                 responses=[], node_endpoints=[])
    if request.share_session_epoch == FINAL_EPOCH:  # acknowledgements only
        parts = [tp for tp in listed if tp in acks]
    max_records = max(1, min(request.max_records or MAX_RECORDS_DEFAULT, 10_000))
    max_bytes = max(1, min(request.max_bytes or MAX_FETCH_BYTES, MAX_FETCH_BYTES))
    max_wait_s = max(0, min(request.max_wait_ms, MAX_WAIT_MS, ctx.request_timeout_ms - 1000)) / 1000
    fetching = request.share_session_epoch != FINAL_EPOCH

    async def answer() -> Reply:
        # per partition: the port's answer, its error, or a Kafka error code (an unknown topic id)
        results: dict[TopicPartition, ShareFetched | RaftlogError | int] = {}
        ack_results: dict[TopicPartition, tuple[int, str | None]] = {}
        deadline = trio.current_time() + max_wait_s
        step = POLL_STEP_S[0]
        pending_acks = dict(acks)
        while True:
            for tp in parts:
                name = names.get(tp[0])
                ranges, refusal = pending_acks.pop(tp, ([], None))
                if refusal is not None:
                    ack_results[tp] = (errors.INVALID_REQUEST, refusal)
                if name is None:
                    results[tp] = errors.UNKNOWN_TOPIC_ID
                    continue
                if not fetching and not ranges:
                    continue
                r = await _fetch_partition(ctx, group_id, member_id, name, tp[1], ranges,
                                           max_records if fetching else 1, max_bytes)
                if ranges and tp not in ack_results:
                    if isinstance(r, RaftlogError):
                        ack_results[tp] = errors.kafka_error(r)
                    elif r.acknowledge_error is not None:
                        err = r.acknowledge_error
                        ack_results[tp] = (errors.kafka_error_code(err.code), err.message)
                    else:
                        ack_results[tp] = (errors.NONE, None)
                prev = results.get(tp)
                if prev is None or isinstance(prev, RaftlogError) or not _acquired(prev) or _acquired(r):
                    results[tp] = r
            got = any(_acquired(r) or isinstance(r, RaftlogError) for r in results.values())
            if got or not fetching or trio.current_time() >= deadline:
                break
            await trio.sleep(min(step, max(0.0, deadline - trio.current_time())))
            step = min(step * 2, POLL_STEP_S[1])
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for tp in parts:
            r = results.get(tp)
            name = names.get(tp[0])
            leader_id, leader_epoch = _leader(ctx, name, tp[1]) if name is not None else (-1, -1)
            ack_code, ack_message = ack_results.get(tp, (errors.NONE, None))
            if isinstance(r, RaftlogError):
                code, message = errors.kafka_error(r)
            else:
                code, message = r if isinstance(r, int) else errors.NONE, None
            fetched = r if isinstance(r, ShareFetched) else None
            acquired = [] if fetched is None else fetched.acquired
            by_topic.setdefault(tp[0], []).append(P(
                partition_index=tp[1], error_code=code, error_message=message, acknowledge_error_code=ack_code,
                acknowledge_error_message=ack_message,
                current_leader=P.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
                records=b"" if fetched is None else fetched.records,
                acquired_records=[P.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                    delivery_count=a.delivery_count) for a in acquired]))  # fmt: skip
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, acquisition_lock_timeout_ms=lock_ms,
                 responses=[T(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()], node_endpoints=[])

    return Later(answer)


def _lock_duration_ms(ctx: KafkaContext) -> int:
    """AcquisitionLockTimeoutMs: the node's group.share.record.lock.duration.ms (config.py)."""
    config = ctx.node_config
    if isinstance(config, NodeConfig):
        return config.group_share_record_lock_duration_ms
    return NodeConfig.group_share_record_lock_duration_ms  # a context without a node: the default


async def handle_share_acknowledge(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ShareAcknowledgeResponse
    T = R.ShareAcknowledgeTopicResponse
    P = T.PartitionData
    group_id, member_id = request.group_id or "", request.member_id or ""
    code = _sessions(ctx).acknowledge(group_id, member_id, request.share_session_epoch)
    lock_ms = _lock_duration_ms(ctx)
    if code != errors.NONE:
        return R(throttle_time_ms=0, error_code=code, error_message=None, acquisition_lock_timeout_ms=lock_ms,
                 responses=[], node_endpoints=[])
    names = names_by_uuid(ctx)

    async def one(topic_id: uuid.UUID, partition: int, batches: Any) -> Any:
        name = names.get(topic_id)
        leader_id, leader_epoch = _leader(ctx, name, partition) if name is not None else (-1, -1)
        ranges, refusal = _acks(batches)
        if name is None:
            c, m = errors.UNKNOWN_TOPIC_ID, None
        elif refusal is not None:
            c, m = errors.INVALID_REQUEST, refusal
        else:
            try:
                await ctx.share_port().share_acknowledge(ShareAcknowledge(group_id, member_id, name, partition,
                                                                          _share_acks(ranges)))
                c, m = errors.NONE, None
            except RaftlogError as exc:
                c, m = errors.kafka_error(exc)
        return P(partition_index=partition, error_code=c, error_message=m,
                 current_leader=P.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch))

    async def answer() -> Reply:
        out = []
        for t in request.topics or ():
            out.append(T(topic_id=t.topic_id,
                         partitions=[await one(t.topic_id, p.partition_index, p.acknowledgement_batches)
                                     for p in t.partitions or ()]))
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, acquisition_lock_timeout_ms=lock_ms,
                 responses=out, node_endpoints=[])

    return Later(answer)


# ------------------------------------------------------------------ offsets (admin)


async def _group_topics(ctx: KafkaContext, group_id: str) -> list[str]:
    """The topics a share group subscribes to (its members'), else every topic of the cluster."""
    try:
        groups = await ctx.share_port().share_group_describe([group_id])
        topics = sorted({t for g in groups if g.error is None for m in g.members for t in m.subscribed_topic_names})
    except RaftlogError:
        topics = []
    image = ctx.metadata.image
    return topics or sorted(n for n in image.topic_names(include_internal=False) if not n.startswith("__"))


async def handle_describe_share_group_offsets(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeShareGroupOffsetsResponse
    G = R.DescribeShareGroupOffsetsResponseGroup
    T = G.DescribeShareGroupOffsetsResponseTopic
    P = T.DescribeShareGroupOffsetsResponsePartition
    image = ctx.metadata.image
    ids = _topic_ids(ctx)

    async def partition_row(gid: str, topic: str, p: int, only_known: bool) -> Any | None:
        try:
            o = await ctx.share_port().share_group_offsets(gid, topic, p)
        except RaftlogError as exc:
            code, message = errors.kafka_error(exc)
            return P(partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1, error_code=code,
                     error_message=message)
        start = o.start_offset
        if start is None and only_known:
            return None
        lag = o.lag
        return P(partition_index=p, start_offset=-1 if start is None else start,
                 leader_epoch=_leader(ctx, topic, p)[1], lag=-1 if lag is None else lag, error_code=errors.NONE, error_message=None)

    async def group(g: Any) -> Any:
        gid = g.group_id
        if g.topics is None:
            wanted = [(t, None) for t in await _group_topics(ctx, gid)]
        else:
            wanted = [(t.topic_name, list(t.partitions or [])) for t in g.topics]
        topics = []
        for name, parts in wanted:
            info = image.topic(name)
            if info is None:
                topics.append(T(topic_name=name, topic_id=ZERO_UUID, partitions=[
                    P(partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                      error_code=errors.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"no topic {name}")
                    for p in parts or ()]))
                continue
            rows = [await partition_row(gid, name, p, parts is None)
                    for p in (parts if parts is not None else range(info.partition_count))]
            rows = [r for r in rows if r is not None]
            if rows or parts is not None:
                topics.append(T(topic_name=name, topic_id=ids.get(name, ZERO_UUID), partitions=rows))
        return G(group_id=gid, topics=topics, error_code=errors.NONE, error_message=None)

    async def answer() -> Reply:
        return R(throttle_time_ms=0, groups=[await group(g) for g in call.request.groups or ()])

    return Later(answer)


async def handle_alter_share_group_offsets(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = AlterShareGroupOffsetsResponse
    T = R.AlterShareGroupOffsetsResponseTopic
    P = T.AlterShareGroupOffsetsResponsePartition
    ids = _topic_ids(ctx)

    async def one(topic: str, p: Any) -> Any:
        try:
            await ctx.share_port().share_group_reset(ShareReset(request.group_id, topic, p.partition_index,
                                                                max(0, p.start_offset)))
            code, message = errors.NONE, None
        except RaftlogError as exc:
            code, message = errors.kafka_error(exc)
        return P(partition_index=p.partition_index, error_code=code, error_message=message)

    async def answer() -> Reply:
        out = []
        for t in request.topics or ():
            out.append(T(topic_name=t.topic_name, topic_id=ids.get(t.topic_name, ZERO_UUID),
                         partitions=[await one(t.topic_name, p) for p in t.partitions or ()]))
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, responses=out)

    return Later(answer)


async def handle_delete_share_group_offsets(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    ids = _topic_ids(ctx)

    async def one(topic: str) -> Any:
        try:
            await ctx.share_port().share_group_delete_offsets(request.group_id, topic)
            code, message = errors.NONE, None
        except RaftlogError as exc:
            code, message = errors.kafka_error(exc)
        return T(topic_name=topic, topic_id=ids.get(topic, ZERO_UUID), error_code=code, error_message=message)

    async def answer() -> Reply:
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None,
                 responses=[await one(t.topic_name) for t in request.topics or ()])

    return Later(answer)


HANDLERS: Final = {
    SHARE_GROUP_HEARTBEAT_KEY: handle_share_group_heartbeat,
    SHARE_GROUP_DESCRIBE_KEY: handle_share_group_describe,
    SHARE_FETCH_KEY: handle_share_fetch,
    SHARE_ACKNOWLEDGE_KEY: handle_share_acknowledge,
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY: handle_describe_share_group_offsets,
    ALTER_SHARE_GROUP_OFFSETS_KEY: handle_alter_share_group_offsets,
    DELETE_SHARE_GROUP_OFFSETS_KEY: handle_delete_share_group_offsets,
}

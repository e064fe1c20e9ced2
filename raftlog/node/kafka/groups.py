"""Consumer-group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), OffsetCommit (8), OffsetFetch (9), DescribeGroups (15), ListGroups (16),
DeleteGroups (42), OffsetDelete (47). The KIP-848 APIs are consumer_groups.py's.

Protocol translation only: each handler calls the group port (groupcoord/port.py, behind the
one ACL guard: `ctx.group_port()`), as the native adapter (raftlog/node/native_groups.py) does:
the same coordinator core, the same `__consumer_offsets`, so a Kafka consumer group and a
raftlog group with the same id are one group. The coordinator never looks inside subscriptions and assignments; members of both
protocols write Kafka's ConsumerProtocol bytes (raftlog/base/consumer_protocol.py).

Where Kafka and the native protocol differ, the difference is settled here:
* FindCoordinator answers the coordinator's Kafka listener (the native op gives its native
  address); v4+ batches keys. Group keys (key_type 0) go to the group coordinator's
  find_coordinator, transaction keys (key_type 1) to the transaction coordinator's
  find_txn_coordinator (groupcoord/txn_service.py; the first one has the controller create
  `__transaction_state`, and is answered COORDINATOR_NOT_AVAILABLE meanwhile, retriable).
  Any other key type: INVALID_REQUEST.
* JoinGroup below v4 predates KIP-394's MEMBER_ID_REQUIRED: the handler rejoins at once with
  the member id the coordinator handed out, as Kafka's broker does for those versions. v0 has
  no rebalance timeout: the session timeout stands in (Kafka's rule).
* client_id is the request header's, client_host the connection's peer ("/127.0.0.1", Kafka's
  form), both shown by DescribeGroups.
* Group-level errors go where the version has room for them: OffsetCommit has only
  per-partition codes (an error for the whole commit is repeated per partition), OffsetFetch
  v1 likewise, v2+ top-level; LeaveGroup below v3 answers the member's error top-level.
* DescribeGroups v6 answers GROUP_ID_NOT_FOUND for a group that does not exist or is a
  KIP-848 consumer group ("not a classic group", as Kafka 4; older versions: state Dead, no
  error); ListGroups v5 gives each group's type ("classic", "consumer" or "share") and filters by it,
  and a consumer group's state is its KIP-848 state (Empty, Assigning, Reconciling, Stable).

* OffsetDelete: a group that does not exist is GROUP_ID_NOT_FOUND top-level; a group with
  members keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC per partition); a topic that does not
  exist is UNKNOWN_TOPIC_OR_PARTITION per partition (groupcoord/admin.py `delete_offsets`).

Waits: JoinGroup, SyncGroup, OffsetCommit, DeleteGroups and OffsetDelete return `Later` (they wait for a
rebalance or an acks=all append); the coordinator answers within the listener's request
timeout (a join that waits longer gets REQUEST_TIMED_OUT and the client rejoins, which counts
as the same member). The others answer at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from kafka.protocol.admin.groups import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from groupcoord.port import (
    CommitOffset,
    CommittedOffset,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeavingMember,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
)
from raftlog.base.acl import ResourceType
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    MemberIdRequiredError,
    RaftlogError,
)
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

OFFSET_COMMIT_KEY: Final = 8
OFFSET_FETCH_KEY: Final = 9
FIND_COORDINATOR_KEY: Final = 10
JOIN_GROUP_KEY: Final = 11
HEARTBEAT_KEY: Final = 12
LEAVE_GROUP_KEY: Final = 13
SYNC_GROUP_KEY: Final = 14
DESCRIBE_GROUPS_KEY: Final = 15
LIST_GROUPS_KEY: Final = 16
DELETE_GROUPS_KEY: Final = 42
OFFSET_DELETE_KEY: Final = 47

GROUP_KEY_TYPE: Final = 0
TRANSACTION_KEY_TYPE: Final = 1
GROUP_ID_NOT_FOUND: Final = 69
AUTHORIZED_OPERATIONS_OMITTED: Final = None  # kafka-python: None encodes INT32_MIN, "not asked"


def _code(exc: BaseException) -> tuple[int, str]:
    return errors.kafka_error(exc)


def _item_code(error: RaftlogError | None) -> int:
    """The Kafka code of a port answer's per-item error (None: no error)."""
    return errors.NONE if error is None else errors.kafka_error_code(error.code)


def _client(call: Call) -> tuple[str, str]:
    """(client_id, client_host) as Kafka's DescribeGroups shows them."""
    host = call.connection.peer.rpartition(":")[0] or call.connection.peer
    return call.header.client_id or "", f"/{host.strip('[]')}"


# Beyond the rebalance timeout, and under the 5 s the Java client adds to it for its own wait.
JOIN_GRACE_MS: Final = 2_000


def _wait_ms(ctx: KafkaContext, asked_ms: int | None = None) -> int:
    # The coordinator caps this below its own deadline; ask for the whole request timeout.
    return ctx.request_timeout_ms if asked_ms is None or asked_ms < 0 else min(asked_ms, ctx.request_timeout_ms)


# --------------------------------------------------------------------------- FindCoordinator


async def handle_find_coordinator(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = FindCoordinatorResponse
    batched = call.version >= 4
    keys = list(request.coordinator_keys or []) if batched else [request.key]
    key_type = request.key_type if call.version >= 1 else GROUP_KEY_TYPE

    async def one(key: str) -> tuple[int, str | None, int, str, int]:
        """(error code, message, node id, host, port)."""
        try:
            if key_type == TRANSACTION_KEY_TYPE:
                node_id = (await ctx.txn_port().find_txn_coordinator(key)).node_id
            elif key_type == GROUP_KEY_TYPE:
                node_id = (await ctx.group_port().find_coordinator(key)).node_id
            else:
                raise InvalidRequestError(f"coordinator key type {key_type}: groups (0) and transactions (1) are served")
            address = ctx.metadata.kafka_address(node_id)
            if address is None:
                raise CoordinatorNotAvailableError(f"broker {node_id} has no Kafka listener")
        except RaftlogError as exc:
            code, message = _code(exc)
            return code, message, -1, "", -1
        return errors.NONE, None, node_id, address[0], address[1]

    async def answer() -> Reply:
        found = [(key, await one(key)) for key in keys]
        if batched:
            return R(throttle_time_ms=0, coordinators=[
                R.Coordinator(key=key, node_id=node, host=host, port=port, error_code=code,
                              error_message=message)
                for key, (code, message, node, host, port) in found])  # fmt: skip
        _, (code, message, node, host, port) = found[0]
        return R(throttle_time_ms=0, error_code=code, error_message=message, node_id=node, host=host,
                 port=port)

    return Later(answer)


# --------------------------------------------------------------------------- JoinGroup / SyncGroup


async def handle_join_group(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    version = call.version
    client_id, client_host = _client(call)
    session_timeout_ms = request.session_timeout_ms
    rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else session_timeout_ms
    join = JoinGroup(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if version >= 5 else None,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata or b"")) for p in request.protocols or []],
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        client_id=client_id,
        client_host=client_host,
        # The coordinator completes the join by the rebalance deadline (the first one delayed by
        # up to the whole rebalance timeout): wait a little longer, or the answer races the wait.
        timeout_ms=_wait_ms(ctx, rebalance_timeout_ms + JOIN_GRACE_MS),
    )
    R = JoinGroupResponse

    def failed(code: int, member_id: str) -> Any:
        return R(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
                 protocol_name=None if version >= 7 else "", leader="", skip_assignment=False,
                 member_id=member_id, members=[])

    async def answer() -> Reply:
        try:
            groups = ctx.group_port()
            try:
                result = await groups.join_group(join)
            except MemberIdRequiredError as exc:
                if version >= 4 or not exc.member_id:
                    raise
                # Before KIP-394 a client never sees MEMBER_ID_REQUIRED: join with the id now.
                result = await groups.join_group(replace(join, member_id=exc.member_id))
        except MemberIdRequiredError as exc:
            return failed(errors.kafka_error_code(exc.code), exc.member_id or "")
        except RaftlogError as exc:
            return failed(_code(exc)[0], join.member_id)
        return R(
            throttle_time_ms=0, error_code=errors.NONE, generation_id=result.generation_id,
            protocol_type=result.protocol_type, protocol_name=result.protocol_name or "",
            leader=result.leader, skip_assignment=False, member_id=result.member_id,
            members=[R.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                               metadata=m.metadata)
                     for m in result.members],
        )  # fmt: skip

    return Later(answer)


async def handle_sync_group(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    version = call.version
    sync = SyncGroup(
        group_id=request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
        # Followers send an empty list; the coordinator only stores the leader's plan.
        assignments={a.member_id: bytes(a.assignment or b"") for a in request.assignments or []},
        timeout_ms=_wait_ms(ctx),
    )
    R = SyncGroupResponse

    async def answer() -> Reply:
        try:
            result = await ctx.group_port().sync_group(sync)
        except RaftlogError as exc:
            return R(throttle_time_ms=0, error_code=_code(exc)[0], protocol_type=None, protocol_name=None,
                     assignment=b"")
        return R(throttle_time_ms=0, error_code=errors.NONE, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name, assignment=result.assignment)

    return Later(answer)


# --------------------------------------------------------------------------- Heartbeat / LeaveGroup


async def handle_heartbeat(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    beat = Heartbeat(group_id=request.group_id, member_id=request.member_id, generation_id=request.generation_id,
                     group_instance_id=request.group_instance_id if call.version >= 3 else None)
    try:
        await ctx.group_port().heartbeat(beat)
    except RaftlogError as exc:
        return HeartbeatResponse(throttle_time_ms=0, error_code=_code(exc)[0])
    return HeartbeatResponse(throttle_time_ms=0, error_code=errors.NONE)


async def handle_leave_group(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = LeaveGroupResponse
    if call.version >= 3:
        members = [LeavingMember(m.member_id or "", m.group_instance_id) for m in request.members or []]
    else:
        members = [LeavingMember(request.member_id, None)]
    try:
        answered = await ctx.group_port().leave_group(LeaveGroup(request.group_id, members))
    except RaftlogError as exc:
        return R(throttle_time_ms=0, error_code=_code(exc)[0], members=[])
    if call.version < 3:
        code = _item_code(answered[0].error) if answered else errors.NONE
        return R(throttle_time_ms=0, error_code=code)
    return R(throttle_time_ms=0, error_code=errors.NONE, members=[
        R.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=_item_code(m.error))
        for m in answered])  # fmt: skip


# --------------------------------------------------------------------------- offsets


async def handle_offset_commit(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    version = call.version
    offsets = []
    order: list[tuple[str, list[int]]] = []
    for t in request.topics or []:
        indexes = []
        for p in t.partitions or []:
            epoch = p.committed_leader_epoch if version >= 6 else -1
            offsets.append(CommitOffset(t.name, p.partition_index, p.committed_offset,
                                        epoch if epoch is not None and epoch >= 0 else None,
                                        p.committed_metadata or ""))
            indexes.append(p.partition_index)
        order.append((t.name, indexes))
    commit = OffsetCommit(
        group_id=request.group_id,
        member_id=request.member_id or "",
        generation_id=request.generation_id_or_member_epoch,
        group_instance_id=request.group_instance_id if version >= 7 else None,
        offsets=offsets,
        timeout_ms=_wait_ms(ctx),
    )
    R = OffsetCommitResponse
    T = R.OffsetCommitResponseTopic

    def response(code_of: Mapping[tuple[str, int], int], default: int) -> Any:
        return R(throttle_time_ms=0, topics=[
            T(name=name, partitions=[
                T.OffsetCommitResponsePartition(partition_index=p, error_code=code_of.get((name, p), default))
                for p in indexes])
            for name, indexes in order])  # fmt: skip

    async def answer() -> Reply:
        try:
            result = await ctx.group_port().offset_commit(commit)
        except RaftlogError as exc:  # the whole commit refused: every partition says why
            return response({}, _code(exc)[0])
        return response({(r.topic, r.partition): _item_code(r.error) for r in result}, errors.NONE)

    return Later(answer)


async def _fetch_offsets(ctx: KafkaContext, group_id: str,
                         topics: Iterable[tuple[str, Iterable[int]]] | None,
                         member: tuple[str, int] = ("", -1), require_stable: bool = False,
                         ) -> dict[str, list[CommittedOffset]]:
    """{topic: [committed offset]} in request order (every committed partition when `topics`
    is None). `member`: (member id, member epoch) of a KIP-848 member (v9), checked by the
    coordinator; `require_stable` (v7+): a transaction's pending offsets answer
    UNSTABLE_OFFSET_COMMIT. Raises the group's error."""
    partitions = None if topics is None else [(t, p) for t, parts in topics for p in parts]
    result = await ctx.group_port().offset_fetch(OffsetFetch(group_id, partitions, member[0], member[1],
                                                             require_stable))
    out: dict[str, list[CommittedOffset]] = {}
    for r in result:
        out.setdefault(r.topic, []).append(r)
    return out


def _committed(cls: Any, r: CommittedOffset) -> Any:
    """One OffsetFetch partition answer: the committed offset, or the partition's own error
    (TOPIC_AUTHORIZATION_FAILED for a topic the principal may not read) with no offset."""
    if r.error is not None:
        return cls(partition_index=r.partition, committed_offset=-1, committed_leader_epoch=-1,
                   metadata="", error_code=_item_code(r.error))
    return cls(partition_index=r.partition, committed_offset=r.offset,
               committed_leader_epoch=r.leader_epoch, metadata=r.metadata, error_code=errors.NONE)


async def handle_offset_fetch(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    version = call.version
    R = OffsetFetchResponse
    if version >= 8:
        G = R.OffsetFetchResponseGroup
        GT = G.OffsetFetchResponseTopics
        groups = []
        for g in request.groups or []:
            wanted = None if g.topics is None else [(t.name, t.partition_indexes or []) for t in g.topics]
            try:
                member = (g.member_id or "", g.member_epoch) if version >= 9 else ("", -1)
                found = await _fetch_offsets(ctx, g.group_id, wanted, member, bool(request.require_stable))
            except RaftlogError as exc:
                groups.append(G(group_id=g.group_id, topics=[], error_code=_code(exc)[0]))
                continue
            groups.append(G(group_id=g.group_id, error_code=errors.NONE, topics=[
                GT(name=name, partitions=[_committed(GT.OffsetFetchResponsePartitions, r) for r in rows])
                for name, rows in found.items()]))  # fmt: skip
        return R(throttle_time_ms=0, groups=groups)
    T = R.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    wanted = None if request.topics is None else [(t.name, t.partition_indexes or []) for t in request.topics]
    try:
        found = await _fetch_offsets(ctx, request.group_id, wanted,
                                     require_stable=version >= 7 and bool(request.require_stable))
    except RaftlogError as exc:
        code = _code(exc)[0]
        if version >= 2:
            return R(throttle_time_ms=0, error_code=code, topics=[])
        return R(throttle_time_ms=0, topics=[  # v1: no top-level error, each partition says it
            T(name=name, partitions=[P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                       metadata="", error_code=code) for p in parts])
            for name, parts in wanted or []])  # fmt: skip
    return R(throttle_time_ms=0, error_code=errors.NONE, topics=[
        T(name=name, partitions=[_committed(P, r) for r in rows])
        for name, rows in found.items()])  # fmt: skip


# --------------------------------------------------------------------------- admin


async def handle_describe_groups(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DescribeGroupsResponse
    D = R.DescribedGroup
    ids = list(request.groups or [])

    def failed(gid: str, code: int, message: str | None) -> Any:
        return D(error_code=code, error_message=message, group_id=gid, group_state="", protocol_type="",
                 protocol_data="", members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    try:
        described = await ctx.group_port().describe_groups(ids)
    except RaftlogError as exc:  # the request as a whole (e.g. too many ids): each group says it
        code, message = _code(exc)
        return R(throttle_time_ms=0, groups=[failed(gid, code, message) for gid in ids])
    out = []
    for g in described:
        if g.error is not None:
            out.append(failed(g.group_id, _item_code(g.error), g.error.message))
            continue
        if g.type == "consumer":  # Kafka 4: a KIP-848 group is not described here
            if call.version >= 6:
                out.append(failed(g.group_id, GROUP_ID_NOT_FOUND, f"group {g.group_id!r} is not a classic group"))
            else:
                out.append(D(error_code=errors.NONE, error_message=None, group_id=g.group_id, group_state="Dead",
                             protocol_type="", protocol_data="", members=[],
                             authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        if call.version >= 6 and g.state == "Dead":
            out.append(failed(g.group_id, GROUP_ID_NOT_FOUND, f"group {g.group_id!r} does not exist"))
            continue
        out.append(D(
            error_code=errors.NONE, error_message=None, group_id=g.group_id, group_state=g.state,
            protocol_type=g.protocol_type, protocol_data=g.protocol,
            members=[D.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in g.members],
            authorized_operations=ctx.authorized_operations(
                ResourceType.GROUP, g.group_id, bool(getattr(request, "include_authorized_operations", False))),
        ))  # fmt: skip
    return R(throttle_time_ms=0, groups=out)


async def handle_list_groups(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ListGroupsResponse
    states = list(request.states_filter) if call.version >= 4 and request.states_filter else None
    types = [t.lower() for t in request.types_filter] if call.version >= 5 and request.types_filter else None
    try:
        listed = await ctx.group_port().list_groups(states)
    except RaftlogError as exc:
        return R(throttle_time_ms=0, error_code=_code(exc)[0], groups=[])
    groups = [(g.group_id, g.protocol_type, g.state, g.type) for g in listed]
    if types is None or "share" in types:  # KIP-932: this coordinator's share groups
        try:
            shares = await ctx.share_port().share_groups_list()
        except RaftlogError:  # e.g. no DESCRIBE on the cluster: the other kinds still listed
            shares = []
        groups += [(g.group_id, "share", g.state, "share") for g in shares if states is None or g.state in states]
    return R(throttle_time_ms=0, error_code=errors.NONE, groups=[
        R.ListedGroup(group_id=g, protocol_type=protocol_type, group_state=state, group_type=kind)
        for g, protocol_type, state, kind in groups if types is None or kind in types])  # fmt: skip


async def handle_delete_groups(ctx: KafkaContext, call: Call) -> Reply:
    ids = list(call.request.groups_names or [])
    R = DeleteGroupsResponse

    async def answer() -> Reply:
        try:
            deleted = await ctx.group_port().delete_groups(ids, _wait_ms(ctx))
        except RaftlogError as exc:
            code = _code(exc)[0]
            return R(throttle_time_ms=0, results=[R.DeletableGroupResult(group_id=g, error_code=code) for g in ids])
        return R(throttle_time_ms=0, results=[
            R.DeletableGroupResult(group_id=g.group_id, error_code=_item_code(g.error)) for g in deleted])

    return Later(answer)


async def handle_offset_delete(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    order = [(t.name, [p.partition_index for p in t.partitions or []]) for t in request.topics or []]
    delete = OffsetDelete(request.group_id, [(name, p) for name, ps in order for p in ps], _wait_ms(ctx))
    R = OffsetDeleteResponse
    T = R.OffsetDeleteResponseTopic

    def response(code: int, code_of: Mapping[tuple[str, int], int]) -> Any:
        return R(error_code=code, throttle_time_ms=0, topics=[
            T(name=name, partitions=[
                T.OffsetDeleteResponsePartition(partition_index=p, error_code=code_of.get((name, p), errors.NONE))
                for p in ps])
            for name, ps in order])  # fmt: skip

    async def answer() -> Reply:
        try:
            result = await ctx.group_port().offset_delete(delete)
        except RaftlogError as exc:  # the whole request refused (no such group, not coordinator)
            return response(_code(exc)[0], {})
        return response(errors.NONE, {(r.topic, r.partition): _item_code(r.error) for r in result})

    return Later(answer)


HANDLERS: Final = {
    OFFSET_COMMIT_KEY: handle_offset_commit,
    OFFSET_FETCH_KEY: handle_offset_fetch,
    FIND_COORDINATOR_KEY: handle_find_coordinator,
    JOIN_GROUP_KEY: handle_join_group,
    HEARTBEAT_KEY: handle_heartbeat,
    LEAVE_GROUP_KEY: handle_leave_group,
    SYNC_GROUP_KEY: handle_sync_group,
    DESCRIBE_GROUPS_KEY: handle_describe_groups,
    LIST_GROUPS_KEY: handle_list_groups,
    DELETE_GROUPS_KEY: handle_delete_groups,
    OFFSET_DELETE_KEY: handle_offset_delete,
}

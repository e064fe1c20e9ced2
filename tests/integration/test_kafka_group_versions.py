"""Every advertised version of the Kafka group APIs, spoken raw (kafka-python's generated message classes over a socket) to a real cluster: a member's whole life (find the coordinator, join, sync, heartbeat, commit, fetch, describe, list, leave, delete) answers with the fields and error codes Kafka gives at that version, old-version quirks included (no MEMBER_ID_REQUIRED before JoinGroup v4, top-level LeaveGroup errors before v3, OffsetFetch errors per partition at v1, GROUP_ID_NOT_FOUND from DescribeGroups v6)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, Iterator

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from raftlog.base.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from raftlog.node.kafka.codec import RESPONSE_CLASSES
from raftlog.node.kafka.versions import SUPPORTED_VERSIONS

import node_harness as harness
from test_kafka_groups import create, wait_coordinators

NONE, NOT_COORDINATOR, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 0, 16, 22, 25
INVALID_REQUEST, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 42, 69, 79
COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14
CLIENT_ID = "versions"
TOPIC = "vt"


class Conn:
    """One Kafka connection: framed requests with header v1/v2, responses decoded at the
    request's version."""

    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def call(self, cls: Any, version: int, **fields: Any) -> Any:
        lo, hi = SUPPORTED_VERSIONS[cls.API_KEY]
        assert lo <= version <= hi, (cls.__name__, version)
        self.correlation_id += 1
        request = cls[version](**fields)
        request.with_header(correlation_id=self.correlation_id, client_id=CLIENT_ID)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        response = RESPONSE_CLASSES[cls.API_KEY].decode(body, version=version, header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the listener closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-group-versions"), size=3) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        wait_coordinators(c)
        create(c, TOPIC, 3)  # Kafka refuses a commit for a topic that does not exist
        yield c


def at(key: int, i: int) -> int:
    """Version `i` of API `key`, clamped into the advertised range."""
    lo, hi = SUPPORTED_VERSIONS[key]
    return max(lo, min(i, hi))


def find_coordinator(conn: Conn, group: str, version: int) -> tuple[int, str]:
    if version >= 4:
        r = conn.call(FindCoordinatorRequest, version, key_type=0, coordinator_keys=[group])
        (c,) = r.coordinators
        assert (c.key, c.error_code) == (group, NONE)
        return c.node_id, f"{c.host}:{c.port}"
    r = conn.call(FindCoordinatorRequest, version, key=group, key_type=0)
    assert r.error_code == NONE
    return r.node_id, f"{r.host}:{r.port}"


MAX_VERSION = max(hi for _, hi in SUPPORTED_VERSIONS.values())


@pytest.mark.parametrize("i", range(10))
def test_a_members_life_at_every_version(cluster, i):
    group = f"versions-{i}"
    boot = Conn(cluster.kafka(1))
    node_id, address = find_coordinator(boot, group, at(10, i))
    assert address == cluster.kafka(node_id), "FindCoordinator names the coordinator's Kafka listener"
    if at(10, i) >= 1:
        r = (boot.call(FindCoordinatorRequest, at(10, i), key_type=1, coordinator_keys=["tx"]).coordinators[0]
             if at(10, i) >= 4 else boot.call(FindCoordinatorRequest, at(10, i), key="tx", key_type=1))
        # served since issue 42: the transaction coordinator, or COORDINATOR_NOT_AVAILABLE
        # (retriable) while `__transaction_state` is created on first use
        assert r.error_code in (NONE, COORDINATOR_NOT_AVAILABLE), r
    other = next(n for n in (1, 2, 3) if n != node_id)
    elsewhere = Conn(cluster.kafka(other))
    conn = Conn(address)
    try:
        # ---- JoinGroup: MEMBER_ID_REQUIRED only from v4 (KIP-394)
        sub = encode_subscription(Subscription((TOPIC,)))
        join = dict(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=10_000, member_id="",
                    protocol_type="consumer",
                    protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=sub)])
        v = at(11, i)
        deadline = time.monotonic() + 30
        while (r := conn.call(JoinGroupRequest, v, **join)).error_code == COORDINATOR_LOAD_IN_PROGRESS:
            assert time.monotonic() < deadline, "the coordinator never finished loading"
            time.sleep(0.1)  # a young cluster replays __consumer_offsets: Kafka clients retry too
        if v >= 4:
            assert r.error_code == MEMBER_ID_REQUIRED and r.member_id
            r = conn.call(JoinGroupRequest, v, **{**join, "member_id": r.member_id})
        assert r.error_code == NONE, r
        member_id, generation = r.member_id, r.generation_id
        assert member_id and generation >= 1 and r.leader == member_id and r.protocol_name == "range"
        assert [(m.member_id, bytes(m.metadata)) for m in r.members] == [(member_id, sub)]
        if v >= 7:
            assert r.protocol_type == "consumer"
        # ---- SyncGroup: the leader's plan comes back
        plan = encode_assignment(Assignment(((TOPIC, 0), (TOPIC, 1))))
        v = at(14, i)
        extra = {"protocol_type": "consumer", "protocol_name": "range"} if v >= 5 else {}
        r = conn.call(SyncGroupRequest, v, group_id=group, generation_id=generation, member_id=member_id,
                      assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id,
                                                                               assignment=plan)], **extra)
        assert r.error_code == NONE and bytes(r.assignment) == plan
        if v >= 5:
            assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
        # ---- Heartbeat
        v = at(12, i)
        assert conn.call(HeartbeatRequest, v, group_id=group, generation_id=generation,
                         member_id=member_id).error_code == NONE
        assert conn.call(HeartbeatRequest, v, group_id=group, generation_id=generation + 7,
                         member_id=member_id).error_code == ILLEGAL_GENERATION
        # ---- OffsetCommit: per-partition codes; the wrong node says NOT_COORDINATOR per partition
        v = at(8, i)
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        topics = [T(name=TOPIC, partitions=[
            T.OffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_metadata="m"),
            T.OffsetCommitRequestPartition(partition_index=1, committed_offset=7, committed_metadata=None)])]
        commit = dict(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, topics=topics)
        r = conn.call(OffsetCommitRequest, v, **commit)
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
            (TOPIC, [(0, NONE), (1, NONE)])]
        r = elsewhere.call(OffsetCommitRequest, v, **commit)
        assert [p.error_code for p in r.topics[0].partitions] == [NOT_COORDINATOR] * 2
        # ---- OffsetFetch
        v = at(9, i)
        fetched = _offset_fetch(conn, v, group, [(TOPIC, [0, 1, 2])])
        assert fetched == (NONE, {(TOPIC, 0): (42, "m"), (TOPIC, 1): (7, ""), (TOPIC, 2): (-1, "")})
        if v >= 2:
            assert _offset_fetch(conn, v, group, None) == (NONE, {(TOPIC, 0): (42, "m"), (TOPIC, 1): (7, "")})
        code, rows = _offset_fetch(elsewhere, v, group, [(TOPIC, [0])])
        if v < 2:  # no top-level error field: each partition says it
            assert (code, rows) == (NONE, {(TOPIC, 0): NOT_COORDINATOR})
        else:
            assert (code, rows) == (NOT_COORDINATOR, {})
        # ---- DescribeGroups / ListGroups
        v = at(15, i)
        r = conn.call(DescribeGroupsRequest, v, groups=[group, "no-such-group"], include_authorized_operations=False)
        mine, unknown = r.groups
        assert (mine.error_code, mine.group_id, mine.group_state, mine.protocol_type, mine.protocol_data) == (
            NONE, group, "Stable", "consumer", "range")
        (m,) = mine.members
        assert (m.member_id, m.client_id, m.client_host) == (member_id, CLIENT_ID, "/127.0.0.1")
        assert decode_assignment(bytes(m.member_assignment)).partitions == ((TOPIC, 0), (TOPIC, 1))
        if unknown.error_code == NONE:  # the unknown group's coordinator may be elsewhere
            assert v < 6 and unknown.group_state == "Dead"
        else:
            assert unknown.error_code in (GROUP_ID_NOT_FOUND, NOT_COORDINATOR)
            assert unknown.error_code == NOT_COORDINATOR or v >= 6
        v = at(16, i)
        listed = {g.group_id: g for g in conn.call(ListGroupsRequest, v, **(
            {"states_filter": []} if v >= 4 else {})).groups}
        assert listed[group].protocol_type == "consumer"
        if v >= 4:
            assert listed[group].group_state == "Stable"
            assert group not in {g.group_id for g in conn.call(ListGroupsRequest, v, states_filter=["Empty"]).groups}
        if v >= 5:
            assert listed[group].group_type == "classic"
            assert conn.call(ListGroupsRequest, v, types_filter=["consumer"]).groups == []
        # ---- LeaveGroup: per-member codes from v3, top-level before
        v = at(13, i)
        for expected in (NONE, UNKNOWN_MEMBER_ID):
            if v >= 3:
                r = conn.call(LeaveGroupRequest, v, group_id=group, members=[
                    LeaveGroupRequest.MemberIdentity(member_id=member_id)])
                assert r.error_code == NONE and [(x.member_id, x.error_code) for x in r.members] == [
                    (member_id, expected)]
            else:
                assert conn.call(LeaveGroupRequest, v, group_id=group, member_id=member_id).error_code == expected
        # ---- DeleteGroups: the group and its offsets go
        v = at(42, i)
        r = conn.call(DeleteGroupsRequest, v, groups_names=[group])
        assert [(x.group_id, x.error_code) for x in r.results] == [(group, NONE)]
        assert _offset_fetch(conn, at(9, i), group, [(TOPIC, [0])]) == (NONE, {(TOPIC, 0): (-1, "")})
        r = conn.call(DeleteGroupsRequest, v, groups_names=[group])
        assert [x.error_code for x in r.results] == [GROUP_ID_NOT_FOUND]
    finally:
        for c in (boot, elsewhere, conn):
            c.close()


def _offset_fetch(conn: Conn, version: int, group: str,
                  topics: list[tuple[str, list[int]]] | None) -> tuple[int, dict[tuple[str, int], Any]]:
    """(error code, {(topic, partition): (offset, metadata) or error code})."""
    R = OffsetFetchRequest
    if version >= 8:
        wanted = None if topics is None else [
            R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics]
        r = conn.call(R, version, groups=[R.OffsetFetchRequestGroup(group_id=group, topics=wanted)])
        (g,) = r.groups
        assert g.group_id == group
        code, found = g.error_code, g.topics
    else:
        wanted = None if topics is None else [R.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                               for t, ps in topics]
        r = conn.call(R, version, group_id=group, topics=wanted)
        code, found = (r.error_code if version >= 2 else NONE), r.topics
    rows: dict[tuple[str, int], Any] = {}
    for t in found:
        for p in t.partitions:
            rows[(t.name, p.partition_index)] = (
                (p.committed_offset, p.metadata or "") if p.error_code == NONE else p.error_code)
    return code, rows

"""On a secure node (SASL_SSL, ACLs on), a user with no ACLs is refused, as Kafka's authorizer refuses, by every Kafka API that reads or changes groups or topics beyond Metadata (the group APIs, DeleteRecords, CreatePartitions, OffsetForLeaderEpoch, ListOffsets, Fetch/Produce/DeleteTopics naming topics by id, and issue 41's broker DescribeConfigs, issue 43's group configs, DescribeLogDirs, DescribeQuorum, DescribeProducers and DescribeTopicPartitions), while the admin (a super user) gets past the same check with the same request."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import struct
import uuid
from collections.abc import Callable
from typing import Any, Iterator

import pytest
from kafka.protocol.admin.cluster import DescribeLogDirsRequest, DescribeQuorumRequest
from kafka.protocol.admin.configs import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeTopicPartitionsRequest,
)
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from partition.batch import BatchBuilder
from raftlog.base.sasl import ScramClient
from raftlog.base.tls import client_context
from raftlog.base.topics import OFFSETS_TOPIC
from raftlog.cli.secure import SecureMaterial
from raftlog.client import Admin
from raftlog.node.kafka.codec import RESPONSE_CLASSES

import node_harness as harness

ADMIN_PASSWORD = "acl-apis-admin-Pw-" + "9c2e11"
NOBODY_PASSWORD = "acl-apis-nobody-Pw-" + "51d0aa"
TOPIC, GROUP = "acl-t", "acl-g"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("kafka-acl-apis")
    material, _ = SecureMaterial.ensure(root, [1], ["127.0.0.1"], admin_password=ADMIN_PASSWORD)
    with harness.NodeCluster(root, size=1, security=material.admin_security()) as cluster:
        cluster.configs[1] = dataclasses.replace(cluster.configs[1], **material.node_settings(1))
        cluster.material = material
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        with Admin(cluster.bootstrap(), request_timeout_ms=15_000, security=material.admin_security()) as admin:
            admin.upsert_user("nobody", NOBODY_PASSWORD)
            for name in (TOPIC, "acl-doomed-nobody", "acl-doomed-admin"):
                admin.create_topic(name, 1, 1)
            cluster.wait_for(lambda: all(
                p.leader is not None for t in (TOPIC, OFFSETS_TOPIC, "acl-doomed-nobody", "acl-doomed-admin")
                for p in admin.describe_topics([t])[t].partitions), 60, "leaders")
        admin_conn = Conn.login(cluster, "admin", ADMIN_PASSWORD)
        try:
            # A group with a committed offset (listed and described from then on).
            T = OffsetCommitRequest.OffsetCommitRequestTopic

            def commit() -> Any:
                r = admin_conn.call(OffsetCommitRequest, 8, group_id=GROUP, generation_id_or_member_epoch=-1,
                                    member_id="", group_instance_id=None, topics=[T(name=TOPIC, partitions=[
                                        T.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata=None)])])
                codes = [p.error_code for t in r.topics for p in t.partitions]
                # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while the new group coordinator loads
                assert codes in ([0], [14], [16]), r
                return codes == [0]

            cluster.wait_for(commit, 60, "the group's first commit")
            cluster.topic_ids = {}
            for name in (TOPIC, "acl-doomed-nobody", "acl-doomed-admin"):
                md = admin_conn.call(MetadataRequest, 12, topics=[
                    MetadataRequest.MetadataRequestTopic(name=name, topic_id=None)],
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False)
                cluster.topic_ids[name] = md.topics[0].topic_id
        finally:
            admin_conn.close()
        yield cluster


class Conn:
    """One Kafka connection over TLS, logged in with SCRAM-SHA-512 (raw frames, chosen versions)."""

    def __init__(self, sock: ssl.SSLSocket):
        self.sock = sock
        self.correlation_id = 0

    @classmethod
    def login(cls, cluster: Any, user: str, password: str) -> "Conn":
        host, _, port = cluster.kafka(1).rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=30)
        context = client_context(ca_file=str(cluster.material.ca_file))
        conn = cls(context.wrap_socket(raw, server_hostname=host))
        assert conn.call(SaslHandshakeRequest, 1, mechanism="SCRAM-SHA-512").error_code == 0
        scram = ScramClient("SCRAM-SHA-512", user, password)
        first = conn.call(SaslAuthenticateRequest, 1, auth_bytes=scram.first_message())
        assert first.error_code == 0, first
        final = conn.call(SaslAuthenticateRequest, 1, auth_bytes=scram.final_message(bytes(first.auth_bytes)))
        assert final.error_code == 0, final
        scram.verify_server_final(bytes(final.auth_bytes))
        return conn

    def call(self, cls: Any, version: int, **fields: Any) -> Any:
        self.correlation_id += 1
        request = cls[version](**fields)
        request.with_header(correlation_id=self.correlation_id, client_id="acl-apis")
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        size = struct.unpack(">i", self._read(4))[0]
        response = RESPONSE_CLASSES[cls.API_KEY].decode(self._read(size), version=version, header=True)
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


def _batch() -> bytes:
    b = BatchBuilder()
    b.append(b"acl", timestamp_ms=1_000)
    return b.build()


# Each case: (conn, cluster, user) -> the error codes the answer carries (top level and per
# item); the refusal expected of a user without ACLs.
def find_coordinator(c: Conn, s: Any, user: str) -> list[int]:
    return [c.call(FindCoordinatorRequest, 3, key=GROUP, key_type=0).error_code]


def join_group(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(JoinGroupRequest, 5, group_id=GROUP, session_timeout_ms=6000, rebalance_timeout_ms=10_000,
               member_id="", group_instance_id=None, protocol_type="consumer",
               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    return [r.error_code]


def sync_group(c: Conn, s: Any, user: str) -> list[int]:
    return [c.call(SyncGroupRequest, 3, group_id=GROUP, generation_id=1, member_id="m-1", group_instance_id=None,
                   assignments=[]).error_code]


def heartbeat(c: Conn, s: Any, user: str) -> list[int]:
    return [c.call(HeartbeatRequest, 3, group_id=GROUP, generation_id=1, member_id="m-1",
                   group_instance_id=None).error_code]


def leave_group(c: Conn, s: Any, user: str) -> list[int]:
    return [c.call(LeaveGroupRequest, 3, group_id=GROUP, members=[
        LeaveGroupRequest.MemberIdentity(member_id="m-1", group_instance_id=None)]).error_code]


def offset_commit(c: Conn, s: Any, user: str) -> list[int]:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    r = c.call(OffsetCommitRequest, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
               group_instance_id=None, topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
                   partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=None)])])
    return [p.error_code for t in r.topics for p in t.partitions]


def offset_fetch(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(OffsetFetchRequest, 7, group_id=GROUP, require_stable=False,
               topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    return [r.error_code]


def describe_groups(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(DescribeGroupsRequest, 5, groups=[GROUP], include_authorized_operations=False)
    return [g.error_code for g in r.groups]


def list_groups(c: Conn, s: Any, user: str) -> list[int]:
    # Not an error: the groups the user may not DESCRIBE are left out (counted as refused
    # here; the admin's view shows that the group is there).
    r = c.call(ListGroupsRequest, 4, states_filter=[])
    assert r.error_code == 0
    return [0 if GROUP in {g.group_id for g in r.groups} else GROUP_AUTHORIZATION_FAILED]


def delete_groups(c: Conn, s: Any, user: str) -> list[int]:
    # The admin's control deletes another (unknown) group: only its ACL check is of interest.
    name = GROUP if user == "nobody" else "acl-no-such-group"
    return [x.error_code for x in c.call(DeleteGroupsRequest, 2, groups_names=[name]).results]


def delete_records(c: Conn, s: Any, user: str) -> list[int]:
    T = DeleteRecordsRequest.DeleteRecordsTopic
    r = c.call(DeleteRecordsRequest, 2, timeout_ms=10_000, topics=[T(name=TOPIC, partitions=[
        T.DeleteRecordsPartition(partition_index=0, offset=0)])])
    return [p.error_code for t in r.topics for p in t.partitions]


def create_partitions(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(CreatePartitionsRequest, 3, timeout_ms=10_000, validate_only=True, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=TOPIC, count=2, assignments=None)])
    return [t.error_code for t in r.results]


def offset_for_leader_epoch(c: Conn, s: Any, user: str) -> list[int]:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    r = c.call(OffsetForLeaderEpochRequest, 4, replica_id=-1, topics=[T(topic=TOPIC, partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=1)])])
    return [p.error_code for t in r.topics for p in t.partitions]


def list_offsets(c: Conn, s: Any, user: str) -> list[int]:
    T = ListOffsetsRequest.ListOffsetsTopic
    r = c.call(ListOffsetsRequest, 7, replica_id=-1, isolation_level=0, topics=[T(name=TOPIC, partitions=[
        T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    return [p.error_code for t in r.topics for p in t.partitions]


def fetch_by_id(c: Conn, s: Any, user: str) -> list[int]:
    F = FetchRequest.FetchTopic
    r = c.call(FetchRequest, 16, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
               session_epoch=-1, topics=[F(topic_id=s.topic_ids[TOPIC], partitions=[F.FetchPartition(
                   partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                   log_start_offset=-1, partition_max_bytes=1 << 20)])],
               forgotten_topics_data=[], rack_id="")
    return [p.error_code for t in r.responses for p in t.partitions]


def produce_by_id(c: Conn, s: Any, user: str) -> list[int]:
    T = ProduceRequest.TopicProduceData
    r = c.call(ProduceRequest, 13, transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name=None, topic_id=s.topic_ids[TOPIC], partition_data=[T.PartitionProduceData(index=0, records=_batch())])])
    return [p.error_code for t in r.responses for p in t.partition_responses]


def delete_topic_by_id(c: Conn, s: Any, user: str) -> list[int]:
    name = f"acl-doomed-{user}"
    r = c.call(DeleteTopicsRequest, 6, timeout_ms=10_000, topics=[
        DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=s.topic_ids[name])])
    return [x.error_code for x in r.responses]


def broker_configs(c: Conn, s: Any, user: str) -> list[int]:
    R = DescribeConfigsRequest.DescribeConfigsResource
    r = c.call(DescribeConfigsRequest, 4, include_synonyms=False, include_documentation=False, resources=[
        R(resource_type=4, resource_name="1", configuration_keys=None)])
    return [x.error_code for x in r.results]


def group_configs(c: Conn, s: Any, user: str) -> list[int]:
    """Kafka 4's group configs: DESCRIBE_CONFIGS on the group."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    r = c.call(DescribeConfigsRequest, 4, include_synonyms=False, include_documentation=False, resources=[
        R(resource_type=32, resource_name=f"acl-group-{user}", configuration_keys=None)])
    return [x.error_code for x in r.results]


def alter_group_configs(c: Conn, s: Any, user: str) -> list[int]:
    """ALTER_CONFIGS on the group."""
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    r = c.call(IncrementalAlterConfigsRequest, 1, validate_only=False, resources=[
        R(resource_type=32, resource_name=f"acl-group-{user}", configs=[R.AlterableConfig(
            name="share.auto.offset.reset", config_operation=0, value="earliest")])])
    return [x.error_code for x in r.responses]


def describe_log_dirs(c: Conn, s: Any, user: str) -> list[int]:
    return [c.call(DescribeLogDirsRequest, 4, topics=None).error_code]


def describe_quorum(c: Conn, s: Any, user: str) -> list[int]:
    T = DescribeQuorumRequest.TopicData
    return [c.call(DescribeQuorumRequest, 2, topics=[T(topic_name="__cluster_metadata", partitions=[
        T.PartitionData(partition_index=0)])]).error_code]


def describe_producers(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(DescribeProducersRequest, 0, topics=[
        DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[0])])
    return [p.error_code for t in r.topics for p in t.partitions]


def describe_topic_partitions(c: Conn, s: Any, user: str) -> list[int]:
    r = c.call(DescribeTopicPartitionsRequest, 0, topics=[DescribeTopicPartitionsRequest.TopicRequest(name=TOPIC)],
               response_partition_limit=10, cursor=None)
    return [t.error_code for t in r.topics]


G, T_, C = GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED
CASES: list[tuple[Callable[[Conn, Any, str], list[int]], int]] = [
    (find_coordinator, G), (join_group, G), (sync_group, G), (heartbeat, G), (leave_group, G),
    (offset_commit, G), (offset_fetch, G), (describe_groups, G), (list_groups, G), (delete_groups, G),
    (delete_records, T_), (create_partitions, T_), (offset_for_leader_epoch, T_), (list_offsets, T_),
    (fetch_by_id, T_), (produce_by_id, T_), (delete_topic_by_id, T_),
    (broker_configs, C), (group_configs, G), (alter_group_configs, G), (describe_log_dirs, C), (describe_quorum, C), (describe_producers, T_),
    (describe_topic_partitions, T_),
]


@pytest.mark.parametrize("user", ["nobody", "admin"])
@pytest.mark.parametrize(("case", "refusal"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_a_user_without_acls_is_refused(secure, case, refusal, user):
    conn = Conn.login(secure, user, NOBODY_PASSWORD if user == "nobody" else ADMIN_PASSWORD)
    try:
        codes = case(conn, secure, user)
    finally:
        conn.close()
    assert codes, "the answer named nothing"
    if user == "nobody":
        assert codes == [refusal] * len(codes), codes
    else:  # the super user passes the same check (whatever the request's own outcome)
        assert refusal not in codes, codes


def test_metadata_by_id_for_a_topic_the_user_may_not_describe_names_no_topic(secure):
    # Issue 39: Kafka answers an unauthorized id with a null name; an unknown id likewise.
    unknown = uuid.uuid4()
    conn = Conn.login(secure, "nobody", NOBODY_PASSWORD)
    try:
        r = conn.call(MetadataRequest, 12, topics=[
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=secure.topic_ids[TOPIC]),
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    finally:
        conn.close()
    answers = {t.topic_id: t for t in r.topics}
    assert set(answers) == {secure.topic_ids[TOPIC], unknown}, r
    refused = answers[secure.topic_ids[TOPIC]]
    assert (refused.error_code, refused.name, refused.partitions) == (TOPIC_AUTHORIZATION_FAILED, None, [])
    assert (answers[unknown].error_code, answers[unknown].name) == (100, None)  # UNKNOWN_TOPIC_ID
    assert TOPIC not in repr(r)


def test_offset_fetch_of_an_allowed_group_answers_each_unreadable_partition(secure):
    # Issue 39: the handler crashed (KeyError: 'offset') on the authorizer's per-partition refusal.
    from raftlog.base.acl import AclBinding

    group = "acl-reader-g"
    with Admin(secure.bootstrap(), request_timeout_ms=15_000, security=secure.material.admin_security()) as admin:
        admin.upsert_user("reader", NOBODY_PASSWORD)
        admin.create_acls([AclBinding("group", group, "literal", "User:reader", "*", "read", "allow")])
    G8 = OffsetFetchRequest.OffsetFetchRequestGroup

    def fetch(version: int) -> Any:
        conn = Conn.login(secure, "reader", NOBODY_PASSWORD)
        try:
            if version >= 8:
                r = conn.call(OffsetFetchRequest, 8, require_stable=False, groups=[G8(group_id=group, topics=[
                    G8.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])])
                return r if r.groups and r.groups[0].error_code != GROUP_AUTHORIZATION_FAILED else None
            r = conn.call(OffsetFetchRequest, 7, group_id=group, require_stable=False, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
            return r if r.error_code != GROUP_AUTHORIZATION_FAILED else None  # the ACL not applied yet
        finally:
            conn.close()

    old = secure.wait_for(lambda: fetch(7), 30, "OffsetFetch v7 past the group's ACL")
    new = secure.wait_for(lambda: fetch(8), 30, "OffsetFetch v8 past the group's ACL")
    assert old.error_code == 0
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in old.topics for p in t.partitions] \
        == [(TOPIC, 0, -1, TOPIC_AUTHORIZATION_FAILED)]
    (g,) = new.groups
    assert g.error_code == 0
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in g.topics for p in t.partitions] \
        == [(TOPIC, 0, -1, TOPIC_AUTHORIZATION_FAILED)]


def test_describe_topic_partitions_of_every_topic_leaves_out_what_the_user_may_not_describe(secure):
    names = {}
    for user, password in (("nobody", NOBODY_PASSWORD), ("admin", ADMIN_PASSWORD)):
        conn = Conn.login(secure, user, password)
        try:
            r = conn.call(DescribeTopicPartitionsRequest, 0, topics=[], response_partition_limit=100, cursor=None)
        finally:
            conn.close()
        names[user] = [t.name for t in r.topics]
    assert names["nobody"] == [] and TOPIC in names["admin"], names

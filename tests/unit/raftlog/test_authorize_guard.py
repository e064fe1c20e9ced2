"""The listeners' one ACL guard checks every op before it runs: refused partitions are answered in place and never reach the partition or group port, denied produce on one topic leaves another allowed, listings hide what may not be described, ops without a policy fail closed."""

import pathlib
from types import MappingProxyType

import pytest

from groupcoord.port import (
    CommitOffset,
    CommittedOffset,
    DescribedGroup,
    GroupListing,
    JoinGroup,
    OffsetCommit,
    OffsetFetch,
    PartitionOutcome,
    ResetOffsets,
)
from metadata.authorizer import Authorizer
from partition.port import (
    ClientInfo,
    FetchPart,
    FetchRequest,
    FetchResult,
    ProducePart,
    ProduceResult,
    ProducerIdentity,
)
from raftlog.base.acl import AclBinding, Operation, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from raftlog.base.protocol import Request
from raftlog.node.authorize import PORT_RULES, POLICIES, Guard, GuardedPartitions, guard_handlers
from raftlog.node.guarded_groups import GuardedGroups
from raftlog.node.kafka.context import bit_field

ALICE = "User:alice"


def acl(rt, name, op, perm="allow", principal=ALICE, pt="literal"):
    return AclBinding(rt, name, pt, principal, "*", op, perm)


class Recorder:
    """Fake handlers that record what reached them and echo a plausible answer."""

    def __init__(self):
        self.seen = []

    def handlers(self):
        async def partitions(request):
            self.seen.append((request.op, dict(request.fields)))
            key = "offsets" if request.op == "offset_commit" else "partitions"
            return {"partitions": [{"topic": p["topic"], "partition": p["partition"], "base_offset": 0}
                                   for p in request.fields[key]]}

        async def metadata(request):
            self.seen.append((request.op, dict(request.fields)))
            names = request.fields.get("topics") or ["public", "secret", "other"]
            return {"cluster_id": "c", "brokers": [], "topics": [{"name": n, "partitions": []} for n in names]}

        async def plain(request):
            self.seen.append((request.op, dict(request.fields)))
            return {"groups": [{"group_id": g} for g in request.fields.get("group_ids", ["g1", "g2"])]}

        ops = {op: plain for op, policy in POLICIES.items() if not isinstance(policy, PORT_RULES)}
        ops.update({"produce": partitions, "fetch": partitions, "list_offsets": partitions,
                    "metadata": metadata, "brand_new_op": plain})
        return ops


def guarded(acls, super_users=()):
    recorder = Recorder()
    authorizer = Authorizer(acls, super_users=super_users)
    return recorder, guard_handlers(recorder.handlers(), authorizer_of=lambda: authorizer)


def req(op, principal=ALICE, **fields):
    return Request(1, op, MappingProxyType(fields), principal, "10.0.0.1")


def parts(*topics):
    return [{"topic": t, "partition": 0, "records": b"x"} for t in topics]


class FakePort:
    """A partition port that records what reached it and answers every part with offset 0."""

    def __init__(self):
        self.seen = []

    async def append(self, parts, *, acks, client, transactional_id=None, add_to_txn=False):
        self.seen.append(("append", [p.topic for p in parts]))
        results = [ProduceResult(p.topic, p.partition, base_offset=0) for p in parts]

        class Done:
            waiting = True

            async def wait(self, deadline):
                return results
        done = Done()
        done.results = results
        return done

    async def fetch(self, request):
        self.seen.append(("fetch", [p.topic for p in request.parts]))
        return [FetchResult(p.topic, p.partition, high_watermark=0, records=b"") for p in request.parts]

    async def init_producer_id(self, *, transactional_id=None):
        self.seen.append(("init_producer_id", []))
        return ProducerIdentity(7, 0)

    async def recover_partition(self, topic, partition, *, unclean):
        self.seen.append(("recover_partition", [topic]))


def port_for(acls, principal=ALICE, super_users=()):
    port = FakePort()
    authorizer = Authorizer(acls, super_users=super_users)
    return port, GuardedPartitions(port, Guard(lambda: authorizer).access(principal, "10.0.0.1"))


async def test_produce_denied_on_one_topic_allowed_on_another():
    port, guarded_port = port_for([acl("topic", "*", "write"), acl("topic", "secret", "write", "deny")])
    appended = await guarded_port.append([ProducePart(t, 0, b"x") for t in ("public", "secret", "public")],
                                         acks=-1, client=ClientInfo("test"))
    assert appended.waiting  # the allowed parts' acks=all wait is still to come
    results = await appended.wait(0)
    assert [(r.topic, r.base_offset, type(r.error)) for r in results] == [
        ("public", 0, type(None)), ("secret", -1, TopicAuthorizationFailedError), ("public", 0, type(None))]
    assert port.seen == [("append", ["public", "public"])]  # secret never reached the port


async def test_all_refused_never_reaches_the_port():
    port, guarded_port = port_for([])
    results = await guarded_port.fetch(FetchRequest([FetchPart(t, 0, 0, 100) for t in ("a", "b")],
                                                    max_wait_ms=0, min_bytes=0, max_bytes=100))
    assert [r.error.code for r in results] == ["TOPIC_AUTHORIZATION_FAILED"] * 2
    appended = await guarded_port.append([ProducePart("a", 0, b"x")], acks=0, client=ClientInfo("test"))
    assert not appended.waiting and appended.results[0].error.code == "TOPIC_AUTHORIZATION_FAILED"
    assert port.seen == []


async def test_no_principal_or_no_acls_checks_nothing():
    port = FakePort()
    for access in (Guard(None).access(ALICE, "h"), Guard(lambda: Authorizer([])).access(None, None)):
        results = await GuardedPartitions(port, access).fetch(
            FetchRequest([FetchPart("a", 0, 0, 100)], max_wait_ms=0, min_bytes=0, max_bytes=100))
        assert results[0].error is None
    assert Guard(lambda: Authorizer([])).nobody().allowed(Operation.READ, ResourceType.TOPIC, "a") is False


async def test_recover_partition_needs_alter_on_the_cluster():
    port, guarded_port = port_for([acl("topic", "*", "all")])
    with pytest.raises(ClusterAuthorizationFailedError):
        await guarded_port.recover_partition("t", 0, unclean=True)
    assert port.seen == []


async def test_whole_request_refusals_raise_the_right_class():
    _, handlers = guarded([acl("topic", "t", "describe")])
    with pytest.raises(TopicAuthorizationFailedError):
        await handlers["delete_topic"](req("delete_topic", name="t"))
    with pytest.raises(TopicAuthorizationFailedError):
        await handlers["create_topic"](req("create_topic", name="t", partitions=1))
    with pytest.raises(GroupAuthorizationFailedError):
        await group_port_for([acl("topic", "t", "describe")])[1].join_group(
            JoinGroup("g", "", "consumer", [], 10_000, 10_000))
    with pytest.raises(ClusterAuthorizationFailedError):
        await handlers["create_acls"](req("create_acls", acls=[]))
    with pytest.raises(ClusterAuthorizationFailedError):
        await handlers["cluster_status"](req("cluster_status"))


async def test_create_topic_by_cluster_or_topic_acl():
    _, by_cluster = guarded([acl("cluster", "kafka-cluster", "create")])
    assert await by_cluster["create_topic"](req("create_topic", name="any"))
    _, by_prefix = guarded([acl("topic", "team-", "create", pt="prefixed")])
    assert await by_prefix["create_topic"](req("create_topic", name="team-x"))
    with pytest.raises(TopicAuthorizationFailedError):
        await by_prefix["create_topic"](req("create_topic", name="other"))


async def test_metadata_hides_topics_and_answers_named_ones():
    recorder, handlers = guarded([acl("topic", "public", "read")])
    listing = await handlers["metadata"](req("metadata", topics=None))
    assert [t["name"] for t in listing["topics"]] == ["public"]
    named = await handlers["metadata"](req("metadata", topics=["public", "secret"]))
    assert named["topics"] == [{"name": "public", "partitions": []},
                               {"name": "secret", "error": "TOPIC_AUTHORIZATION_FAILED"}]
    assert recorder.seen[-1][1]["topics"] == ["public"]


class FakeGroupPort:
    """A group port that records what reached it and answers every item as done."""

    node_id = 1

    def __init__(self):
        self.seen = []

    async def join_group(self, request):
        self.seen.append(request)

    async def offset_commit(self, request):
        self.seen.append(request)
        return [PartitionOutcome(c.topic, c.partition) for c in request.offsets]

    async def offset_fetch(self, request):
        self.seen.append(request)
        return [CommittedOffset(t, p, 5) for t, p in request.partitions or [("t1", 0), ("t2", 0)]]

    async def describe_groups(self, group_ids):
        self.seen.append(list(group_ids))
        return [DescribedGroup(g, "Stable") for g in group_ids]

    async def list_groups(self, states=None):
        return [GroupListing("g1", "consumer", "Stable"), GroupListing("g2", "consumer", "Stable")]

    async def reset_offsets(self, request):
        self.seen.append(request)


def group_port_for(acls):
    port = FakeGroupPort()
    return port, GuardedGroups(port, Guard(lambda: Authorizer(acls)).access(ALICE, "10.0.0.1"))


async def test_groups_and_offsets_are_checked_in_front_of_the_group_port():
    port, groups = group_port_for([acl("group", "g1", "read"), acl("topic", "t1", "read")])
    committed = await groups.offset_commit(OffsetCommit("g1", [CommitOffset("t1", 0, 5), CommitOffset("t2", 0, 5)]))
    assert {c.topic: c.error and c.error.code for c in committed} == {"t1": None, "t2": "TOPIC_AUTHORIZATION_FAILED"}
    assert [c.topic for c in port.seen[-1].offsets] == ["t1"]  # the refused partition never reached the port
    with pytest.raises(GroupAuthorizationFailedError):
        await groups.offset_commit(OffsetCommit("g2", []))
    with pytest.raises(TopicAuthorizationFailedError):  # reset: every topic or nothing
        await groups.reset_offsets(ResetOffsets("g1", {("t1", 0): 1, ("t2", 0): 1}))
    assert not isinstance(port.seen[-1], ResetOffsets)
    with pytest.raises(GroupAuthorizationFailedError):  # fetch needs DESCRIBE on the group (READ implies it)
        await groups.offset_fetch(OffsetFetch("g2", None))


async def test_group_listings_and_describes_leave_out_or_refuse_in_place():
    port, groups = group_port_for([acl("group", "g1", "describe"), acl("topic", "t1", "describe")])
    described = await groups.describe_groups(["g1", "g2"])
    assert described[0] == DescribedGroup("g1", "Stable") and port.seen[-1] == ["g1"]
    assert described[1].error is not None and described[1].error.code == "GROUP_AUTHORIZATION_FAILED"
    assert [g.group_id for g in await groups.list_groups()] == ["g1"]
    every = await groups.offset_fetch(OffsetFetch("g1", None))
    assert [c.topic for c in every] == ["t1"]  # the topics it may not describe are left out


def test_an_op_guarded_at_its_port_needs_an_adapter_that_calls_the_guarded_port():
    async def plain(request):
        return {}

    with pytest.raises(ValueError, match="guarded at its port"):
        guard_handlers({"join_group": plain}, authorizer_of=lambda: Authorizer([]))


async def test_idempotent_producers_need_cluster_idempotent_write_or_some_topic_write():
    _, none = port_for([acl("topic", "t", "read")])
    with pytest.raises(ClusterAuthorizationFailedError):
        await none.init_producer_id()
    _, writer = port_for([acl("topic", "t", "write")])
    assert (await writer.init_producer_id()).producer_id == 7


async def test_super_users_and_unknown_ops():
    recorder, handlers = guarded([], super_users={"User:admin"})
    with pytest.raises(ClusterAuthorizationFailedError, match="no ACL policy"):
        await handlers["brand_new_op"](req("brand_new_op"))
    assert await handlers["brand_new_op"](req("brand_new_op", principal="User:admin"))
    assert await handlers["delete_topic"](req("delete_topic", principal="User:admin", name="t"))


async def test_no_principal_means_no_security_on_this_listener():
    recorder, handlers = guarded([])
    assert await handlers["delete_topic"](Request(1, "delete_topic", MappingProxyType({"name": "t"})))


def test_every_documented_op_has_a_policy():

    protocol = (pathlib.Path(__file__).resolve().parents[3] / "raftlog" / "PROTOCOL.md").read_text()
    table = protocol.split("### Authorization", 1)[1].split("Forwarded admin ops", 1)[0]
    documented = {row.split("|")[1].strip() for row in table.splitlines() if row.startswith("| `")}
    ops = {op.strip(" `") for cell in documented for op in cell.split(",") for op in op.split("/")}
    assert len(ops) > 20 and ops <= set(POLICIES), ops - set(POLICIES)


async def test_an_inline_handler_stays_inline_behind_its_policy():
    from raftlog.base.protocol import inline_handler_under_deadline

    @inline_handler_under_deadline
    async def produce(request):
        return {"partitions": []}

    authorizer = Authorizer([acl("topic", "public", "write")])
    guard = guard_handlers({"produce": produce}, authorizer_of=lambda: authorizer)["produce"]
    assert guard.inline and guard.inline_deadline  # in the reader (appends keep their order), under the deadline


def test_authorized_operations_is_kafkas_bit_field_of_what_the_principal_may_do():
    """KIP-430 (Metadata, DescribeCluster, DescribeGroups, DescribeTopicPartitions): bit n per
    allowed operation of Kafka code n; READ implies DESCRIBE; no authorizer allows all."""
    read = AclBinding("topic", "orders", "literal", "User:alice", "*", "read", "allow")
    access = Guard(lambda: Authorizer([read])).access("User:alice", "10.0.0.1")
    assert access.authorized_operations(ResourceType.TOPIC, "orders") == {3, 8}  # READ, DESCRIBE
    assert access.authorized_operations(ResourceType.TOPIC, "payments") == set()
    every_topic_op = {3, 4, 5, 6, 7, 8, 10, 11}  # librdkafka 0081 expects these 8
    assert Guard(None).access("User:alice", "").authorized_operations(ResourceType.TOPIC, "x") == every_topic_op
    assert bit_field(every_topic_op) == 3576 and bit_field(None) == -(2**31)
    every_cluster_op = {5, 7, 8, 9, 10, 11, 12}
    assert Guard(None).access(None, None).authorized_operations(ResourceType.CLUSTER, "kafka-cluster") == every_cluster_op

"""The listener's ACL guard checks every op before its handler runs: refused partitions are answered in place and never reach the handler, denied produce on one topic leaves another allowed, listings hide what may not be described, ops without a policy fail closed."""

import pathlib
from types import MappingProxyType

import pytest

from metadata.authorizer import Authorizer
from raftlog.base.acl import AclBinding
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from raftlog.base.protocol import Request
from raftlog.node.authorize import POLICIES, guard_handlers

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

        ops = {op: plain for op in POLICIES}
        ops.update({"produce": partitions, "fetch": partitions, "list_offsets": partitions,
                    "offset_commit": partitions, "metadata": metadata, "brand_new_op": plain})
        return ops


def guarded(acls, super_users=()):
    recorder = Recorder()
    authorizer = Authorizer(acls, super_users=super_users)
    return recorder, guard_handlers(recorder.handlers(), authorizer_of=lambda: authorizer)


def req(op, principal=ALICE, **fields):
    return Request(1, op, MappingProxyType(fields), principal, "10.0.0.1")


def parts(*topics):
    return [{"topic": t, "partition": 0, "records": b"x"} for t in topics]


async def test_produce_denied_on_one_topic_allowed_on_another():
    recorder, handlers = guarded([acl("topic", "*", "write"), acl("topic", "secret", "write", "deny")])
    answer = await handlers["produce"](req("produce", acks=-1, partitions=parts("public", "secret")))
    by_topic = {p["topic"]: p for p in answer["partitions"]}
    assert by_topic["public"]["base_offset"] == 0
    assert by_topic["secret"]["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert recorder.seen == [("produce", {"acks": -1, "partitions": parts("public")})]  # secret never reached it


async def test_all_refused_never_reaches_the_handler():
    recorder, handlers = guarded([])
    answer = await handlers["fetch"](req("fetch", partitions=parts("a", "b")))
    assert [p["error"]["code"] for p in answer["partitions"]] == ["TOPIC_AUTHORIZATION_FAILED"] * 2
    assert await handlers["produce"](req("produce", acks=0, partitions=parts("a"))) is None
    assert recorder.seen == []


async def test_whole_request_refusals_raise_the_right_class():
    _, handlers = guarded([acl("topic", "t", "describe")])
    with pytest.raises(TopicAuthorizationFailedError):
        await handlers["delete_topic"](req("delete_topic", name="t"))
    with pytest.raises(TopicAuthorizationFailedError):
        await handlers["create_topic"](req("create_topic", name="t", partitions=1))
    with pytest.raises(GroupAuthorizationFailedError):
        await handlers["join_group"](req("join_group", group_id="g"))
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


async def test_groups_and_offsets():
    acls = [acl("group", "g1", "read"), acl("topic", "t1", "read")]
    recorder, handlers = guarded(acls)
    committed = await handlers["offset_commit"](req("offset_commit", group_id="g1",
                                                    offsets=[{"topic": "t1", "partition": 0, "offset": 5},
                                                             {"topic": "t2", "partition": 0, "offset": 5}]))
    codes = {p["topic"]: p.get("error", {}).get("code") for p in committed["partitions"]}
    assert codes == {"t1": None, "t2": "TOPIC_AUTHORIZATION_FAILED"}
    with pytest.raises(GroupAuthorizationFailedError):
        await handlers["offset_commit"](req("offset_commit", group_id="g2", offsets=[]))
    described = await handlers["describe_groups"](req("describe_groups", group_ids=["g1", "g2"]))
    assert described["groups"][0] == {"group_id": "g1"}
    assert described["groups"][1]["error"]["code"] == "GROUP_AUTHORIZATION_FAILED"
    listed = await handlers["list_groups"](req("list_groups"))
    assert listed["groups"] == [{"group_id": "g1"}]


async def test_idempotent_producers_need_cluster_idempotent_write_or_some_topic_write():
    _, none = guarded([acl("topic", "t", "read")])
    with pytest.raises(ClusterAuthorizationFailedError):
        await none["init_producer_id"](req("init_producer_id"))
    _, writer = guarded([acl("topic", "t", "write")])
    assert await writer["init_producer_id"](req("init_producer_id"))


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


async def test_an_inline_produce_stays_inline_and_its_later_answer_gets_the_refusals():
    from raftlog.base.protocol import Later, inline_handler_under_deadline

    @inline_handler_under_deadline
    async def produce(request):  # appends at once, answers after acks=all (Later)
        async def answer():
            return {"partitions": [{"topic": p["topic"], "partition": p["partition"], "base_offset": 0}
                                   for p in request.fields["partitions"]]}
        return Later(answer)

    authorizer = Authorizer([acl("topic", "public", "write")])
    guard = guard_handlers({"produce": produce}, authorizer_of=lambda: authorizer)["produce"]
    assert guard.inline and guard.inline_deadline  # in the reader (appends keep their order), under the deadline
    later = await guard(req("produce", acks=-1, partitions=[{"topic": "public", "partition": 0},
                                                             {"topic": "secret", "partition": 0}]))
    assert type(later) is Later
    answer = await later.wait()
    assert [(p["topic"], "error" in p) for p in answer["partitions"]] == [("public", False), ("secret", True)]

"""The metadata port's guard (raftlog/node/guarded_metadata.py) checks every topic, config,
quota and feature op before the port: a refused topic is answered in its place and never
reaches the port, a listing leaves out what may not be described, a refused whole request
raises its refusal and changes nothing."""

import pytest

from metadata.authorizer import Authorizer
from metadata.port import ConfigEntry, FeatureUpdate, NewPartitions, NewTopic, TopicCreated, TopicDeleted, TopicDescription
from raftlog.base.acl import AclBinding
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from raftlog.node.authorize import Guard
from raftlog.node.guarded_metadata import GuardedMetadata

ALICE = "User:alice"


def acl(rt, name, op, pt="literal"):
    return AclBinding(rt, name, pt, ALICE, "*", op, "allow")


class RecordingPort:
    """Answers every call and records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    async def create_topics(self, topics):
        self.seen.append(("create_topics", [t.name for t in topics]))
        return [TopicCreated(t.name, "id-" + t.name, [[1]]) for t in topics]

    async def delete_topics(self, names):
        self.seen.append(("delete_topics", list(names)))
        return [TopicDeleted(n, "id-" + n) for n in names]

    async def create_partitions(self, changes, *, validate_only):
        self.seen.append(("create_partitions", [c.name for c in changes]))
        return [None for _ in changes]

    async def describe_topics(self, names, *, listing):
        self.seen.append(("describe_topics", list(names)))
        return [TopicDescription(n) for n in names]

    async def describe_topic_configs(self, name):
        self.seen.append(("describe_topic_configs", name))
        return [ConfigEntry("retention_ms", "1", False, "long", "")]

    async def alter_topic_configs(self, name, set_, delete):
        self.seen.append(("alter_topic_configs", name))

    def broker_configs(self):
        self.seen.append(("broker_configs", None))
        return {}

    async def update_features(self, updates, *, validate_only):
        self.seen.append(("update_features", None))

    def group_configs(self, group_id):
        self.seen.append(("group_configs", group_id))
        return {}

    async def alter_group_configs(self, group_id, set_, delete):
        self.seen.append(("alter_group_configs", group_id))


def guarded(acls):
    port = RecordingPort()
    return port, GuardedMetadata(port, Guard(lambda: Authorizer(acls)).access(ALICE, "10.0.0.1"))


async def test_per_topic_ops_answer_refused_topics_in_place_and_never_pass_them_on():
    port, admin = guarded([acl("topic", "team-", "create", "prefixed"), acl("topic", "team-", "delete", "prefixed"),
                           acl("topic", "team-a", "alter")])
    created = await admin.create_topics([NewTopic("other"), NewTopic("team-a")])
    assert [(c.name, type(c.error)) for c in created] == [("other", TopicAuthorizationFailedError),
                                                          ("team-a", type(None))]
    assert created[1].topic_id == "id-team-a"
    deleted = await admin.delete_topics(["team-b", "other"])
    assert [type(d.error) for d in deleted] == [type(None), TopicAuthorizationFailedError]
    grown = await admin.create_partitions([NewPartitions("team-b", 3), NewPartitions("team-a", 3)],
                                          validate_only=False)
    assert [type(e) for e in grown] == [TopicAuthorizationFailedError, type(None)]
    assert port.seen == [("create_topics", ["team-a"]), ("delete_topics", ["team-b"]),
                         ("create_partitions", ["team-a"])]


async def test_create_on_the_cluster_allows_every_topic():
    port, admin = guarded([acl("cluster", "kafka-cluster", "create")])
    assert [c.error for c in await admin.create_topics([NewTopic("x"), NewTopic("y")])] == [None, None]
    assert port.seen == [("create_topics", ["x", "y"])]


async def test_describe_topics_refuses_named_and_hides_listed():
    port, admin = guarded([acl("topic", "public", "describe")])
    named = await admin.describe_topics(["public", "secret"], listing=False)
    assert [(d.name, type(d.error)) for d in named] == [("public", type(None)),
                                                        ("secret", TopicAuthorizationFailedError)]
    listed = await admin.describe_topics(["public", "secret"], listing=True)
    assert [d.name for d in listed] == ["public"]
    assert port.seen == [("describe_topics", ["public"])] * 2


async def test_config_and_cluster_ops_raise_their_refusal_before_the_port():
    port, admin = guarded([acl("topic", "t", "describe_configs")])
    assert (await admin.describe_topic_configs("t"))[0].name == "retention_ms"
    with pytest.raises(TopicAuthorizationFailedError):
        await admin.alter_topic_configs("t", {"retention_ms": "2"}, [])
    with pytest.raises(ClusterAuthorizationFailedError):
        admin.broker_configs()
    with pytest.raises(ClusterAuthorizationFailedError):
        await admin.update_features([FeatureUpdate("metadata.version", 1, 1)], validate_only=True)
    with pytest.raises(ClusterAuthorizationFailedError):
        admin.authorize_cluster_describe()
    assert port.seen == [("describe_topic_configs", "t")]


async def test_group_configs_need_describe_configs_or_alter_configs_on_the_group():
    port, admin = guarded([acl("group", "jobs", "describe_configs"), acl("group", "team-", "alter_configs", "prefixed")])
    assert admin.group_configs("jobs") == {}
    assert admin.group_configs("team-a") == {}  # ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's rule)
    with pytest.raises(GroupAuthorizationFailedError):
        admin.group_configs("other")
    await admin.alter_group_configs("team-a", {"share.auto.offset.reset": "earliest"}, [])
    with pytest.raises(GroupAuthorizationFailedError):
        await admin.alter_group_configs("jobs", {"share.auto.offset.reset": "earliest"}, [])
    assert port.seen == [("group_configs", "jobs"), ("group_configs", "team-a"), ("alter_group_configs", "team-a")]
    with pytest.raises(GroupAuthorizationFailedError):
        admin.group_configs("kafka-cluster")  # a group may have the cluster resource's name

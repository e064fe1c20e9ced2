"""The share port behind the one ACL guard (raftlog/node/guarded_share.py): KIP-932's rules as
Kafka's, for the native and the Kafka listener alike; a refused request never reaches the port,
a refused group of a describe is answered in its place, the native adapter answers the refusal
the guard raised."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from groupcoord.share_port import (
    ShareAck,
    ShareAcknowledge,
    ShareFetch,
    ShareFetched,
    ShareGroupDescription,
    ShareGroupListing,
    ShareHeartbeat,
    ShareHeartbeatAnswer,
    SharePartitionOffsets,
    ShareReset,
)
from metadata.authorizer import Authorizer
from raftlog.base.acl import AclBinding, Operation, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
)
from raftlog.base.protocol import Request
from raftlog.node.authorize import Guard, guard_handlers
from raftlog.node.guarded_share import GuardedShare
from raftlog.node.native_share import share_handlers

pytestmark = pytest.mark.unit

ALICE = "User:alice"
T, G = ResourceType.TOPIC, ResourceType.GROUP


def acl(rt: ResourceType, name: str, op: Operation) -> AclBinding:
    return AclBinding(rt, name, "literal", ALICE, "*", op, "allow")


ACLS = [acl(G, "g", Operation.READ), acl(G, "g", Operation.DESCRIBE), acl(T, "t", Operation.READ)]


class FakeSharePort:
    """Records the ops that reached it."""

    node_id = 1

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def share_group_heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatAnswer:
        self.seen.append(("share_group_heartbeat", request.group_id))
        return ShareHeartbeatAnswer("m", 1, 5000, None)

    async def share_group_describe(self, group_ids: list[str]) -> list[ShareGroupDescription]:
        self.seen.append(("share_group_describe", list(group_ids)))
        return [ShareGroupDescription(g, "Empty") for g in group_ids]

    async def share_groups_list(self) -> list[ShareGroupListing]:
        self.seen.append(("share_groups_list", None))
        return [ShareGroupListing("g", "Empty", 0)]

    async def share_fetch(self, request: ShareFetch) -> ShareFetched:
        self.seen.append(("share_fetch", request.topic))
        return ShareFetched(b"", [], 0, 0)

    async def share_acknowledge(self, request: ShareAcknowledge) -> int:
        self.seen.append(("share_acknowledge", list(request.acknowledgements)))
        return 3

    async def share_group_offsets(self, group_id: str, topic: str, partition: int) -> SharePartitionOffsets:
        self.seen.append(("share_group_offsets", group_id))
        return SharePartitionOffsets(None)

    async def share_group_reset(self, request: ShareReset) -> None:
        self.seen.append(("share_group_reset", request.offset))

    async def share_group_delete_offsets(self, group_id: str, topic: str) -> None:
        self.seen.append(("share_group_delete_offsets", group_id))


def guarded(acls: list[AclBinding]) -> tuple[FakeSharePort, GuardedShare]:
    port = FakeSharePort()
    authorizer = Authorizer(acls, super_users=frozenset())
    return port, GuardedShare(port, Guard(lambda: authorizer).access(ALICE, "10.0.0.1"))


async def test_share_ops_follow_kafkas_rules_and_refusals_never_reach_the_port():
    port, share = guarded(ACLS)
    await share.share_group_heartbeat(ShareHeartbeat("g", "", 0, ["t"]))
    with pytest.raises(GroupAuthorizationFailedError):
        await share.share_group_heartbeat(ShareHeartbeat("other", "", 0, ["t"]))
    await share.share_fetch(ShareFetch("g", "m", "t", 0, 10))
    with pytest.raises(TopicAuthorizationFailedError):  # READ on the topic, too
        await share.share_fetch(ShareFetch("g", "m", "secret", 0, 10))
    with pytest.raises(TopicAuthorizationFailedError):
        await share.share_acknowledge(ShareAcknowledge("g", "m", "secret", 0, [ShareAck(0, 0, 1)]))
    described = await share.share_group_describe(["g", "other"])
    assert [(d.group_id, type(d.error)) for d in described] == [
        ("g", type(None)), ("other", GroupAuthorizationFailedError)]
    with pytest.raises(ClusterAuthorizationFailedError):  # the listing: DESCRIBE on the cluster
        await share.share_groups_list()
    with pytest.raises(GroupAuthorizationFailedError):  # DELETE on the group
        await share.share_group_delete_offsets("g", "t")
    await share.share_group_reset(ShareReset("g", "t", 0, 5))
    assert port.seen == [("share_group_heartbeat", "g"), ("share_fetch", "t"), ("share_group_describe", ["g"]),
                         ("share_group_reset", 5)]


async def test_the_native_adapter_is_guarded_at_the_port_and_parses_acknowledgements():
    port = FakeSharePort()
    authorizer = Authorizer(ACLS, super_users=frozenset())
    handlers = guard_handlers(share_handlers(port, Guard(lambda: authorizer)), authorizer_of=lambda: authorizer)

    def req(op: str, **fields: Any) -> Request:
        return Request(1, op, MappingProxyType(fields), ALICE, "10.0.0.1")

    answer = await handlers["share_acknowledge"](req("share_acknowledge", group_id="g", member_id="m", topic="t",
                                                     partition=0, acknowledgements=[[0, 4, 1], [5, 5, 2]]))
    assert answer == {"start_offset": 3}
    assert port.seen[-1] == ("share_acknowledge", [ShareAck(0, 4, 1), ShareAck(5, 5, 2)])
    with pytest.raises(InvalidRequestError):
        await handlers["share_acknowledge"](req("share_acknowledge", group_id="g", member_id="m", topic="t",
                                                partition=0, acknowledgements=[[0, 4]]))
    with pytest.raises(ClusterAuthorizationFailedError):
        await handlers["share_groups_list"](req("share_groups_list"))
    answer = await handlers["share_group_describe"](req("share_group_describe", group_ids=["g", "other"]))
    assert [(g["group_id"], g.get("error", {}).get("code")) for g in answer["groups"]] == [
        ("g", None), ("other", GroupAuthorizationFailedError.code)]

"""The share port (groupcoord/share_port.py) behind one principal's ACLs, for both listeners:
the share ops' rules (KIP-932's, as Kafka's) are declared once in raftlog/node/authorize.py
`POLICIES` (`PortRule`s; the listing's a `ResourceRule`; listed in
docs/reference/native-protocol.md) and checked here before the port is called, so a refused
request has no effect:

    share = GuardedShare(share_port, guard.access(principal, host))

* a whole-request rule (the group; also the topic of a fetch or acknowledgement; the cluster
  for the listing) raises its refusal (GROUP_ / TOPIC_ / CLUSTER_AUTHORIZATION_FAILED);
* a refused group of a describe never reaches the port and is answered
  GROUP_AUTHORIZATION_FAILED in its place (after the allowed ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from groupcoord.share_port import (
    ShareAcknowledge,
    ShareFetch,
    ShareFetched,
    ShareGroupDescription,
    ShareGroupListing,
    ShareHeartbeat,
    ShareHeartbeatAnswer,
    SharePartitionOffsets,
    SharePort,
    ShareReset,
)
from raftlog.base.acl import ResourceType
from raftlog.node.authorize import POLICIES, Access, PortRule, ResourceRule, refusal

__all__ = ["GuardedShare"]

T, G = ResourceType.TOPIC, ResourceType.GROUP


def _rule(op: str) -> PortRule:
    rule = POLICIES[op]
    assert isinstance(rule, PortRule), op
    return rule


class GuardedShare:
    """See the module docstring. Implements `SharePort`."""

    def __init__(self, port: SharePort, access: Access) -> None:
        self._port = port
        self._access = access

    @property
    def node_id(self) -> int:
        return self._port.node_id

    def _require(self, op: str, group_id: str, topic: str | None = None) -> None:
        rule = _rule(op)
        self._access.require(rule.group, G, group_id)
        if rule.topics is not None and topic is not None:
            self._access.require(rule.topics, T, topic)

    async def share_group_heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatAnswer:
        self._require("share_group_heartbeat", request.group_id)
        return await self._port.share_group_heartbeat(request)

    async def share_group_describe(self, group_ids: Sequence[str]) -> list[ShareGroupDescription]:
        operation = _rule("share_group_describe").group
        allowed = [g for g in group_ids if self._access.allowed(operation, G, g)]
        refused = [ShareGroupDescription(g, error=refusal(operation, G, g)) for g in group_ids if g not in allowed]
        answered = await self._port.share_group_describe(allowed) if allowed else []
        return [*answered, *refused]

    async def share_groups_list(self) -> list[ShareGroupListing]:
        rule = POLICIES["share_groups_list"]
        assert isinstance(rule, ResourceRule)
        rule.require(self._access)
        return await self._port.share_groups_list()

    async def share_group_delete(self, group_id: str) -> None:
        self._require("share_group_delete", group_id)
        await self._port.share_group_delete(group_id)

    async def share_fetch(self, request: ShareFetch) -> ShareFetched:
        self._require("share_fetch", request.group_id, request.topic)
        return await self._port.share_fetch(request)

    async def share_acknowledge(self, request: ShareAcknowledge) -> int:
        self._require("share_acknowledge", request.group_id, request.topic)
        return await self._port.share_acknowledge(request)

    async def share_group_offsets(self, group_id: str, topic: str, partition: int) -> SharePartitionOffsets:
        self._require("share_group_offsets", group_id)
        return await self._port.share_group_offsets(group_id, topic, partition)

    async def share_group_reset(self, request: ShareReset) -> None:
        self._require("share_group_reset", request.group_id)
        await self._port.share_group_reset(request)

    async def share_group_delete_offsets(self, group_id: str, topic: str) -> None:
        self._require("share_group_delete_offsets", group_id)
        await self._port.share_group_delete_offsets(group_id, topic)

"""The group port (groupcoord/port.py) behind one principal's ACLs, for both listeners: the
classic group ops' rules are declared once, as `PortRule`s in raftlog/node/authorize.py
`POLICIES` (listed in docs/reference/native-protocol.md), and checked here before the port
is called, so a refused request has no effect:

    groups = GuardedGroups(group_port, guard.access(principal, host))

* a whole-request rule (the group, or every topic of `whole`) raises its refusal
  (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED);
* a refused partition of a commit, fetch or offset delete, and a refused group of a
  describe or delete, never reaches the port and is answered TOPIC_ / GROUP_AUTHORIZATION_FAILED
  in its place (after the allowed ones, as Kafka lists them);
* list_groups leaves out the groups the principal may not DESCRIBE (unless it may DESCRIBE the
  cluster); offset_fetch of every committed partition leaves out the topics it may not DESCRIBE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from groupcoord.port import (
    CommittedOffset,
    ConsumerGroupDescription,
    ConsumerHeartbeat,
    ConsumerHeartbeatAnswer,
    Coordinator,
    DescribedGroup,
    GroupListing,
    GroupOutcome,
    GroupPort,
    Heartbeat,
    Joined,
    JoinGroup,
    LeaveGroup,
    MemberLeft,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    PartitionOutcome,
    ResetDone,
    ResetOffsets,
    Synced,
    SyncGroup,
)
from raftlog.base.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.base.errors import RaftlogError
from raftlog.node.authorize import POLICIES, Access, PortRule, refusal

__all__ = ["GuardedGroups"]

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_I = TypeVar("_I")
_R = TypeVar("_R")


def _rule(op: str) -> PortRule:
    rule = POLICIES[op]
    assert isinstance(rule, PortRule), op
    return rule


class GuardedGroups:
    """See the module docstring. Implements `GroupPort`."""

    def __init__(self, port: GroupPort, access: Access) -> None:
        self._port = port
        self._access = access

    @property
    def node_id(self) -> int:
        return self._port.node_id

    def _group(self, op: str, group_id: str) -> PortRule:
        rule = _rule(op)
        self._access.require(rule.group, G, group_id)
        return rule

    def _split(self, op: str, rule: PortRule, items: Sequence[_I], topic_of: Callable[[_I], str],
               ) -> tuple[list[_I], list[tuple[_I, RaftlogError]]]:
        """(allowed items, [(refused item, its refusal)]) by the rule's topic operation."""
        operation = rule.topics
        assert operation is not None
        allowed, refused = self._access.split_topics(operation, items, topic_of, op)
        return allowed, [(items[i], error) for i, error in refused.items()]

    # ------------------------------------------------------------------ whole-request rules

    async def find_coordinator(self, group_id: str) -> Coordinator:
        self._group("find_coordinator", group_id)
        return await self._port.find_coordinator(group_id)

    async def join_group(self, request: JoinGroup) -> Joined:
        self._group("join_group", request.group_id)
        return await self._port.join_group(request)

    async def sync_group(self, request: SyncGroup) -> Synced:
        self._group("sync_group", request.group_id)
        return await self._port.sync_group(request)

    async def heartbeat(self, request: Heartbeat) -> None:
        self._group("heartbeat", request.group_id)
        await self._port.heartbeat(request)

    async def leave_group(self, request: LeaveGroup) -> list[MemberLeft]:
        self._group("leave_group", request.group_id)
        return await self._port.leave_group(request)

    async def consumer_group_heartbeat(self, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer:
        self._group("consumer_group_heartbeat", request.group_id)
        return await self._port.consumer_group_heartbeat(request)

    async def reset_offsets(self, request: ResetOffsets) -> ResetDone:
        rule = self._group("reset_offsets", request.group_id)
        assert rule.topics is not None and rule.whole
        for topic, _ in request.offsets:
            self._access.require(rule.topics, T, topic)
        return await self._port.reset_offsets(request)

    # ------------------------------------------------------------------ per-partition rules

    async def _partitions(self, op: str, group_id: str, items: Sequence[_I], topic_of: Callable[[_I], str],
                          call: Callable[[list[_I]], object], answer: Callable[[_I, RaftlogError], _R]) -> list[_R]:
        rule = self._group(op, group_id)
        allowed, refused = self._split(op, rule, items, topic_of)
        answered: list[_R] = await call(allowed) if allowed or not refused else []  # type: ignore[misc]
        return [*answered, *(answer(item, error) for item, error in refused)]

    async def offset_commit(self, request: OffsetCommit) -> list[PartitionOutcome]:
        return await self._partitions(
            "offset_commit", request.group_id, request.offsets, lambda c: c.topic,
            lambda kept: self._port.offset_commit(replace(request, offsets=kept)),
            lambda c, error: PartitionOutcome(c.topic, c.partition, error))

    async def offset_delete(self, request: OffsetDelete) -> list[PartitionOutcome]:
        return await self._partitions(
            "offset_delete", request.group_id, request.partitions, lambda tp: tp[0],
            lambda kept: self._port.offset_delete(replace(request, partitions=kept)),
            lambda tp, error: PartitionOutcome(tp[0], tp[1], error))

    async def offset_fetch(self, request: OffsetFetch) -> list[CommittedOffset]:
        if request.partitions is not None:
            return await self._partitions(
                "offset_fetch", request.group_id, request.partitions, lambda tp: tp[0],
                lambda kept: self._port.offset_fetch(replace(request, partitions=kept)),
                lambda tp, error: CommittedOffset(tp[0], tp[1], error=error))
        rule = self._group("offset_fetch", request.group_id)
        assert rule.topics is not None
        operation = rule.topics
        return [c for c in await self._port.offset_fetch(request) if self._access.allowed(operation, T, c.topic)]

    # ------------------------------------------------------------------ per-group rules

    async def list_groups(self, states: Sequence[str] | None = None) -> list[GroupListing]:
        rule = _rule("list_groups")
        listed = await self._port.list_groups(states)
        if self._access.allowed(Operation.DESCRIBE, C, CLUSTER_NAME):
            return listed
        return [g for g in listed if self._access.allowed(rule.group, G, g.group_id)]

    def _each(self, op: str, group_ids: Sequence[str]) -> tuple[list[str], list[tuple[str, RaftlogError]]]:
        rule = _rule(op)
        assert rule.each
        refused = [(g, refusal(rule.group, G, g)) for g in group_ids if not self._access.allowed(rule.group, G, g)]
        no = {g for g, _ in refused}
        return [g for g in group_ids if g not in no], refused

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        kept, refused = self._each("describe_groups", group_ids)
        described = await self._port.describe_groups(kept) if kept else []
        return [*described, *(DescribedGroup(g, error=e) for g, e in refused)]

    async def delete_groups(self, group_ids: Sequence[str], timeout_ms: int | None = None) -> list[GroupOutcome]:
        kept, refused = self._each("delete_groups", group_ids)
        deleted = await self._port.delete_groups(kept, timeout_ms) if kept else []
        return [*deleted, *(GroupOutcome(g, e) for g, e in refused)]

    async def consumer_group_describe(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]:
        kept, refused = self._each("consumer_group_describe", group_ids)
        described = await self._port.consumer_group_describe(kept) if kept else []
        return [*described, *(ConsumerGroupDescription(g, error=e) for g, e in refused)]

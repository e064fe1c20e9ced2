"""The metadata port (metadata/port.py) behind one principal's ACLs, for the listeners that
call it typed (the Kafka listener's topic, config, quota, feature, ACL and SCRAM APIs,
ElectLeaders, DescribeQuorum, DescribeCluster): each op's rule is the one the native op of the
same name declares in raftlog/node/authorize.py `POLICIES` (a `ResourceRule`: DESCRIBE on the
cluster to describe, ALTER to change, ALTER on the cluster to elect leaders, `cluster_status`'s
DESCRIBE on the cluster for the quorum and the cluster, DESCRIBE_CONFIGS / ALTER_CONFIGS on the
topic, the group or the cluster for configs and quotas; listed in docs/reference/native-protocol.md),
checked before the port is called, so a refused request has no effect and raises its refusal
(CLUSTER_ / TOPIC_AUTHORIZATION_FAILED).

Per-topic ops answer a refused topic in its place, and never pass it to the port: CreateTopics
needs CREATE on the cluster or the topic, DeleteTopics DELETE on it, CreatePartitions ALTER on
it (Kafka's rules); describe_topics answers TOPIC_AUTHORIZATION_FAILED for a topic named without
DESCRIBE, and leaves it out of a listing.

    admin = GuardedMetadata(metadata_service, guard.access(principal, host))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from metadata.port import (
    ClusterView,
    ConfigEntry,
    DeletedAcls,
    ElectionResult,
    FeatureUpdate,
    MetadataPort,
    NewPartitions,
    NewTopic,
    QuotaAlteration,
    QuotaAltered,
    QuotaEntry,
    QuotaFilter,
    Reassignment,
    ScramDeletion,
    ScramUpsertion,
    ScramUser,
    TopicCreated,
    TopicDeleted,
    TopicDescription,
    TopicView,
    UserAltered,
)
from raftlog.base.acl import CLUSTER_NAME, AclBinding, AclFilter, Operation, ResourceType
from raftlog.base.errors import RaftlogError
from raftlog.node.authorize import POLICIES, Access, ResourceRule, refusal

T = ResourceType.TOPIC
_I = TypeVar("_I")
_R = TypeVar("_R")

__all__ = ["GuardedMetadata"]


class GuardedMetadata:
    """See the module docstring. Implements `MetadataPort`."""

    def __init__(self, port: MetadataPort, access: Access) -> None:
        self._port = port
        self._access = access

    def _require(self, op: str, name: str | None = None) -> None:
        """The rule of `op` on the resource `name` (None: an op on the cluster)."""
        rule = POLICIES[op]
        assert isinstance(rule, ResourceRule) and (rule.field is None) == (name is None), op
        rule.require(self._access, CLUSTER_NAME if name is None else name)

    def _topic_operation(self, op: str) -> Operation:
        rule = POLICIES[op]
        assert isinstance(rule, ResourceRule) and rule.rt is T and rule.field is not None, op
        return rule.operation

    async def _per_topic(self, operation: Operation, items: Sequence[_I], topic_of: Callable[[_I], str],
                         call: Callable[[list[_I]], Awaitable[list[_R]]],
                         answer: Callable[[_I, RaftlogError], _R]) -> list[_R]:
        """The port's answers for the allowed items and the refusals, in the order asked."""
        allowed, refused = self._access.split_topics(operation, items, topic_of)
        found = iter(await call(allowed) if allowed else [])
        return [answer(item, refused[i]) if i in refused else next(found) for i, item in enumerate(items)]

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Sequence[NewTopic]) -> list[TopicCreated]:
        access = self._access
        # Kafka's rule (the native create_topic's): CREATE on the cluster, else on the topic.
        if access.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            return await self._port.create_topics(topics)
        return await self._per_topic(Operation.CREATE, topics, lambda t: t.name, self._port.create_topics,
                                     lambda t, error: TopicCreated(t.name, error=error))

    async def wait_leaders(self, names: Sequence[str], timeout_s: float) -> bool:
        """A wait on this node's image only (the caller just created `names`): no check."""
        return await self._port.wait_leaders(names, timeout_s)

    async def delete_topics(self, names: Sequence[str]) -> list[TopicDeleted]:
        return await self._per_topic(self._topic_operation("delete_topic"), names, str, self._port.delete_topics,
                                     lambda name, error: TopicDeleted(name, error=error))

    async def create_partitions(self, changes: Sequence[NewPartitions], *,
                                validate_only: bool) -> list[RaftlogError | None]:
        async def call(kept: list[NewPartitions]) -> list[RaftlogError | None]:
            return await self._port.create_partitions(kept, validate_only=validate_only)

        return await self._per_topic(self._topic_operation("create_partitions"), changes, lambda c: c.name, call,
                                     lambda c, error: error)

    async def cluster_metadata(self, names: Sequence[str] | None, *, include_internal: bool) -> ClusterView:
        """The native `metadata` op's rule: DESCRIBE on each topic; a named one refused is
        answered TOPIC_AUTHORIZATION_FAILED after the others, a listing leaves it out."""
        access = self._access
        if access.authorizer is None:
            return await self._port.cluster_metadata(names, include_internal=include_internal)
        refused: list[str] = []
        kept: list[str] | None = None
        if names is not None:
            refused = [n for n in names if not access.allowed(Operation.DESCRIBE, T, n)]
            kept = [n for n in names if n not in refused]
        view = await self._port.cluster_metadata(kept, include_internal=include_internal)
        topics = [t for t in view.topics if (kept is None or t.name in kept)
                  and (t.error is not None or access.allowed(Operation.DESCRIBE, T, t.name))]
        topics += [TopicView(n, error=refusal(Operation.DESCRIBE, T, n)) for n in refused]
        return replace(view, topics=topics)

    async def describe_topics(self, names: Sequence[str], *, listing: bool) -> list[TopicDescription]:
        allowed, refused = self._access.split_topics(Operation.DESCRIBE, names, str)
        found = iter(await self._port.describe_topics(allowed, listing=listing) if allowed else [])
        if listing:
            return list(found)  # Kafka leaves out what the principal may not describe
        return [TopicDescription(name, error=refused[i]) if i in refused else next(found)
                for i, name in enumerate(names)]

    # ------------------------------------------------------------------ configs, quotas, features

    async def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        self._require("describe_configs", name)
        return await self._port.describe_topic_configs(name)

    async def alter_topic_configs(self, name: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        self._require("alter_configs", name)
        await self._port.alter_topic_configs(name, set_, delete)

    def broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        self._require("describe_broker_configs")
        return self._port.broker_configs()

    async def alter_broker_configs(self, resource: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        self._require("alter_broker_configs")
        await self._port.alter_broker_configs(resource, set_, delete)

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        self._require("describe_group_configs", group_id)
        return self._port.group_configs(group_id)

    async def alter_group_configs(self, group_id: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        self._require("alter_group_configs", group_id)
        await self._port.alter_group_configs(group_id, set_, delete)

    async def describe_client_quotas(self, filters: Sequence[QuotaFilter], *, strict: bool) -> list[QuotaEntry]:
        self._require("describe_client_quotas")
        return await self._port.describe_client_quotas(filters, strict=strict)

    async def alter_client_quotas(self, alterations: Sequence[QuotaAlteration], *,
                                  validate_only: bool) -> list[QuotaAltered]:
        self._require("alter_client_quotas")
        return await self._port.alter_client_quotas(alterations, validate_only=validate_only)

    async def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> None:
        self._require("update_features")
        await self._port.update_features(updates, validate_only=validate_only)

    # ------------------------------------------------------------------ the cluster

    def authorize_cluster_describe(self) -> None:
        """Raises the refusal unless the principal may describe the cluster (Kafka's
        DescribeCluster rule, the native cluster_status's)."""
        self._require("cluster_status")

    def authorize_elections(self) -> None:
        """Raises the refusal unless the principal may elect leaders (ALTER on the cluster):
        the unclean kind recovers partitions one by one, and a refused request must learn
        nothing of them."""
        self._require("elect_leaders")

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectionResult]:
        self._require("elect_leaders")
        return await self._port.elect_leaders(partitions)

    async def alter_reassignments(self, moves: Sequence[tuple[str, int, Sequence[int] | None]],
                                  ) -> list[RaftlogError | None]:
        self._require("alter_partition_reassignments")
        return await self._port.alter_reassignments(moves)

    async def list_reassignments(self, partitions: Sequence[tuple[str, int]] | None) -> list[Reassignment]:
        self._require("list_partition_reassignments")
        return await self._port.list_reassignments(partitions)

    def quorum_status(self) -> Mapping[str, Any] | None:
        self._require("cluster_status")  # DESCRIBE on the cluster, as Kafka's DescribeQuorum
        return self._port.quorum_status()

    async def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        self._require("describe_acls")
        return await self._port.describe_acls(acl_filter)

    async def create_acls(self, acls: Sequence[AclBinding]) -> list[RaftlogError | None]:
        self._require("create_acls")
        return await self._port.create_acls(acls)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeletedAcls]:
        self._require("delete_acls")
        return await self._port.delete_acls(filters)

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramUser]:
        self._require("describe_user_scram_credentials")
        return await self._port.describe_scram_users(users)

    async def alter_scram_users(self, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramDeletion]) -> list[UserAltered]:
        self._require("alter_user_scram_credentials")
        return await self._port.alter_scram_users(upsertions, deletions)

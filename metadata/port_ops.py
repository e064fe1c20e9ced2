"""The metadata port's ops (metadata/port.py `MetadataPort`) as `MetadataService` serves them
(a base class of it, kept apart for size): typed requests in, the admin op of the same meaning
run (forwarded to the active controller by the service's `_client_admin`, as every admin op)
or the node's image read, typed answers out. A whole-request failure is raised; a per-item one
is that item's `error`, in the order asked.
May import: raftlog.base and metadata's other modules (not service.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from metadata import features, quota_ops, security_ops
from metadata.image import MetadataImage, TopicImage
from metadata.port import (
    ConfigEntry,
    DeletedAcls,
    ElectionResult,
    FeatureUpdate,
    NewPartitions,
    NewTopic,
    QuotaAlteration,
    QuotaAltered,
    QuotaEntry,
    QuotaFilter,
    Reassignment,
    ScramCredential,
    ScramDeletion,
    ScramUpsertion,
    ScramUser,
    TopicCreated,
    TopicDeleted,
    TopicDescription,
    UserAltered,
)
from metadata.settings import MetadataSettings
from metadata.topic_config import describe_configs
from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import (
    RaftlogError,
    RequestTimedOutError,
    SecurityDisabledError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.base.protocol import Request

APPLIED_WAIT_S: Final = 5.0

__all__ = ["MetadataPortOps", "complete_topic"]


def _bindings(image: MetadataImage) -> set[AclBinding]:
    return {b for _, b in image.acl_bindings()}


def _shown(op: str, fields: Mapping[str, Any], answer: Mapping[str, Any]) -> Callable[[MetadataImage], bool] | None:
    """For an admin op that changes what a describe on any node reads from its own image
    (feature levels, ACLs), a predicate true once an image shows the change the controller
    answered; None for the other ops."""
    if op == "update_features" and not fields.get("validate_only"):
        wanted = {u["feature"]: u["level"] for u in fields.get("updates") or ()}
        return lambda image: all(features.finalized(image).get(name) == level for name, level in wanted.items())
    if op == "create_acls":
        made = {AclBinding.from_obj(a) for a, r in zip(fields.get("acls") or (), answer.get("results") or ())
                if _item_error(r) is None}
        return lambda image: made <= _bindings(image)
    if op == "delete_acls":
        gone = {AclBinding.from_obj(a) for r in answer.get("results") or () for a in r.get("acls") or ()}
        return lambda image: not gone & _bindings(image)
    return None


def complete_topic(image: MetadataImage, name: str) -> TopicImage | None:
    """The topic when all its partitions are known (clients see only complete topics), else None."""
    topic = image.topic(name)
    return topic if topic is not None and topic.complete else None


def _all_led(names: Sequence[str]) -> Callable[[MetadataImage], bool]:
    """A predicate for `wait_for`: every partition of each topic in `names` has a leader that
    reported leading (a new partition's record names its first leader at epoch 0 before
    its Raft group runs: partition/raft.py "First term"; its report brings epoch 1). It
    keeps, per topic, the first partition not seen led, so each image change costs the
    partitions that changed since, not a walk of them all (10,000-partition topics)."""
    pending = dict.fromkeys(names, 0)

    def check(image: MetadataImage) -> bool:
        for name, first in list(pending.items()):
            topic = image.topic(name)
            if topic is None or not topic.complete:
                return False
            parts = topic.partitions
            while first < len(parts) and parts[first].leader >= 0 and parts[first].leader_epoch > 0:
                first += 1
            if first < len(parts):
                pending[name] = first
                return False
            del pending[name]
        return True

    return check


class MetadataPortOps:
    """See the module docstring. The service provides `settings`, `image` and `_client_admin`."""

    settings: MetadataSettings

    @property
    def image(self) -> MetadataImage:
        raise NotImplementedError

    async def _client_admin(self, request: Request) -> dict[str, Any]:
        raise NotImplementedError

    async def wait_for(self, predicate: Callable[[MetadataImage], Any], timeout_s: float) -> Any:
        raise NotImplementedError

    async def _admin(self, op: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        return await self._client_admin(Request(0, op, fields))

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Sequence[NewTopic]) -> list[TopicCreated]:
        out = []
        for t in topics:
            fields: dict[str, Any] = {"name": t.name, "configs": dict(t.configs)}
            if t.partitions is not None:
                fields["partitions"] = t.partitions
            if t.replication_factor is not None:
                fields["replication_factor"] = t.replication_factor
            if t.assignments is not None:
                fields["assignments"] = [list(a) for a in t.assignments]
            try:
                answer = await self._admin("create_topic", fields)
            except RaftlogError as exc:
                out.append(TopicCreated(t.name, error=exc))
                continue
            out.append(TopicCreated(t.name, answer.get("topic_id"),
                                    [list(p["replicas"]) for p in answer.get("partitions") or ()]))
        return out

    async def wait_leaders(self, names: Sequence[str], timeout_s: float) -> bool:
        if timeout_s <= 0:
            return not names
        try:
            await self.wait_for(_all_led(names), timeout_s)
        except RequestTimedOutError:
            return False
        return True

    async def delete_topics(self, names: Sequence[str]) -> list[TopicDeleted]:
        out = []
        for name in names:
            try:
                answer = await self._admin("delete_topic", {"name": name})
            except RaftlogError as exc:
                out.append(TopicDeleted(name, error=exc))
                continue
            out.append(TopicDeleted(name, answer.get("topic_id")))
        return out

    async def create_partitions(self, changes: Sequence[NewPartitions], *,
                                validate_only: bool) -> list[RaftlogError | None]:
        out: list[RaftlogError | None] = []
        for c in changes:
            fields: dict[str, Any] = {"name": c.name, "partitions": c.total, "validate_only": validate_only}
            if c.assignments is not None:
                fields["assignments"] = [list(a) for a in c.assignments]
            try:
                await self._admin("create_partitions", fields)
                out.append(None)
            except RaftlogError as exc:
                out.append(exc)
        return out

    async def describe_topics(self, names: Sequence[str], *, listing: bool) -> list[TopicDescription]:
        image = self.image
        return [TopicDescription(name, image.topic(name)) for name in names]

    # ------------------------------------------------------------------ configs, quotas, features

    async def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        topic = complete_topic(self.image, name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return [ConfigEntry(e.name, e.value, e.is_default, e.type, e.doc) for e in describe_configs(topic.configs)]

    async def alter_topic_configs(self, name: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        await self._admin("alter_configs", {"name": name, "set": dict(set_), "delete": list(delete)})

    def broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        return self.image.broker_configs

    async def alter_broker_configs(self, resource: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        await self._admin("alter_broker_configs", {"resource": resource, "set": dict(set_), "delete": list(delete)})

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        return self.image.group_configs.get(group_id, {})

    async def alter_group_configs(self, group_id: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        await self._admin("alter_group_configs", {"group_id": group_id, "set": dict(set_), "delete": list(delete)})

    async def describe_client_quotas(self, filters: Sequence[QuotaFilter], *, strict: bool) -> list[QuotaEntry]:
        fields = {"components": [{"entity_type": f.entity_type, "match_type": f.match_type, "match": f.match}
                                 for f in filters], "strict": strict}
        answer = quota_ops.describe(self.image, fields)
        return [QuotaEntry(e["entity"], e["values"]) for e in answer.get("entries") or ()]

    async def alter_client_quotas(self, alterations: Sequence[QuotaAlteration], *,
                                  validate_only: bool) -> list[QuotaAltered]:
        fields = {"entries": [{"entity": dict(a.entity),
                               "ops": [{"key": o.key, "value": o.value, "remove": o.remove} for o in a.ops]}
                              for a in alterations], "validate_only": validate_only}
        answer = await self._admin("alter_client_quotas", fields)
        return [QuotaAltered(r.get("entity") or {}, _item_error(r)) for r in answer.get("results") or ()]

    async def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> None:
        await self._admin("update_features", {
            "updates": [{"feature": u.feature, "level": u.level, "upgrade_type": u.upgrade_type} for u in updates],
            "validate_only": validate_only})

    # ------------------------------------------------------------------ elections, moves, ACLs, SCRAM

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectionResult]:
        fields = {} if partitions is None else {"partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        answer = await self._client_admin(Request(0, "elect_leaders", fields))
        return [ElectionResult(r["topic"], r["partition"], _item_error(r)) for r in answer.get("results") or ()]

    async def alter_reassignments(self, moves: Sequence[tuple[str, int, Sequence[int] | None]],
                                  ) -> list[RaftlogError | None]:
        fields = {"partitions": [{"topic": t, "partition": p, "replicas": None if r is None else list(r)}
                                 for t, p, r in moves]}
        answer = await self._client_admin(Request(0, "alter_partition_reassignments", fields))
        return [_item_error(r) for r in answer.get("results") or ()]

    async def list_reassignments(self, partitions: Sequence[tuple[str, int]] | None) -> list[Reassignment]:
        fields = {} if partitions is None else {"partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        answer = await self._client_admin(Request(0, "list_partition_reassignments", fields))
        return [Reassignment(m["topic"], m["partition"], m["replicas"], m["adding_replicas"], m["removing_replicas"])
                for m in answer.get("reassignments") or ()]

    async def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        if not self.settings.authorizer_enabled:
            raise SecurityDisabledError("ACLs are not enabled on this cluster (acls_enabled)")
        return [b for _, b in self.image.acl_bindings() if acl_filter.matches(b)]

    async def create_acls(self, acls: Sequence[AclBinding]) -> list[RaftlogError | None]:
        answer = await self._client_admin(Request(0, "create_acls", {"acls": [b.to_obj() for b in acls]}))
        return [_item_error(r) for r in answer.get("results") or ()]

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeletedAcls]:
        answer = await self._client_admin(Request(0, "delete_acls", {"filters": [f.to_obj() for f in filters]}))
        return [DeletedAcls([AclBinding.from_obj(a) for a in r.get("acls") or ()], _item_error(r))
                for r in answer.get("results") or ()]

    async def _applied_here(self, request: Request, answer: Mapping[str, Any]) -> None:
        """After the controller answered an admin op (the service's `_client_admin`, for native
        and Kafka clients alike): wait, at most APPLIED_WAIT_S, until this node's image shows
        the change when a describe here reads it (ACLs, feature levels). The controller answers
        at the commit and this image applies it a moment later, so a describe sent here right
        after (kafka-python's and KafkaJS's ACL tests, `raftlog features upgrade` then
        `describe`) would miss it. Past the bound the change stands; the answer waits no longer."""
        done = _shown(request.op, request.fields, answer)
        if done is None:
            return
        try:
            await self.wait_for(done, APPLIED_WAIT_S)
        except RequestTimedOutError:
            pass

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramUser]:
        found = security_ops.describe_scram_credentials(self.image, None if users is None else list(users))
        return [ScramUser(u["user"], [ScramCredential(c["mechanism"], c["iterations"]) for c in u.get("credentials") or ()],
                          _item_error(u)) for u in found]

    async def alter_scram_users(self, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramDeletion]) -> list[UserAltered]:
        fields = {
            "upsertions": [{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations, "salt": u.salt,
                            "salted_password": u.salted_password} for u in upsertions],
            "deletions": [{"name": d.name, "mechanism": d.mechanism} for d in deletions],
        }  # fmt: skip
        answer = await self._client_admin(Request(0, "alter_user_scram_credentials", fields))
        return [UserAltered(r["user"], _item_error(r)) for r in answer.get("results") or ()]


def _item_error(entry: Mapping[str, Any]) -> RaftlogError | None:
    error = entry.get("error") if isinstance(entry, Mapping) else None
    return None if error is None else error_from_wire(error)

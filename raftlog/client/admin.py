"""Sans-I/O admin core (`AdminCore`) and the admin ops both shells' Admins run.

Admin ops are `Call`s to any broker (the node forwards them to the controller); routed
calls (list_offsets) go to a partition's leader. Each op is an `AdminOp`: the request and
how to read its ok answer, so a shell's method is one line (`_op(create_topic_op(...))`).
No I/O, no clock, no threads.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Iterable, NamedTuple

from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import UnknownTopicOrPartitionError, error_from_wire
from raftlog.base.sasl import DEFAULT_ITERATIONS, SCRAM_MECHANISMS, salted_password
from raftlog.client.core import Call, ClientCore
from raftlog.client.request import (
    ClusterStatus,
    TopicInfo,
    alter_broker_configs_request,
    alter_group_configs_request,
    alter_configs_request,
    cluster_status_request,
    create_partitions_request,
    create_topic_request,
    delete_topic_request,
    metadata_request,
    parse_cluster_status,
    parse_metadata,
    parse_topic,
)

__all__ = [
    "AdminCore",
    "AdminOp",
    "describe_features_op",
    "describe_broker_configs_op",
    "update_features_op",
    "create_topic_op",
    "create_partitions_op",
    "delete_topic_op",
    "describe_topics_op",
    "list_topics_op",
    "alter_configs_op",
    "alter_broker_configs_op",
    "alter_group_configs_op",
    "describe_group_configs_op",
    "cluster_status_op",
    "create_acls_op",
    "describe_acls_op",
    "delete_acls_op",
    "describe_users_op",
    "upsert_user_op",
    "delete_user_op",
]


class AdminCore(ClientCore):
    """Admin ops are Calls to any broker (the node forwards them to the controller).

    An admin op (a call with no route) answered UNKNOWN_TOPIC_OR_PARTITION fails at once:
    the controller that answered it is the authority on which topics exist, so waiting for
    metadata to catch up (why produce retries it) only delays the answer to the deadline.
    Routed calls (list_offsets, fetch to a partition's leader) keep retrying it, since the
    leader's metadata may lag a create made a moment ago.
    """

    def _needs_metadata(self) -> bool:
        return bool(self._wanted_topics)

    def _retry_call(self, c: Call, exc: BaseException, now_ms: int) -> None:
        if c.route is None and isinstance(exc, UnknownTopicOrPartitionError):
            c.error = exc
            c.done = True
            return
        super()._retry_call(c, exc, now_ms)


# ---------------------------------------------------------------- admin ops


class AdminOp(NamedTuple):
    """One admin request (to any broker) and how to read its ok answer."""

    request: dict
    parse: Callable[[dict], Any]


def create_topic_op(name: str, partitions: int, replication_factor: int,
                    configs: dict[str, str] | None = None) -> AdminOp:
    """-> TopicInfo of the new topic."""
    def parse(r: dict) -> TopicInfo:
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})
    return AdminOp(create_topic_request(name, partitions, replication_factor, configs), parse)


def create_partitions_op(name: str, partitions: int, validate_only: bool = False) -> AdminOp:
    """-> TopicInfo of the topic after it grew to `partitions` partitions."""
    def parse(r: dict) -> TopicInfo:
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})
    return AdminOp(create_partitions_request(name, partitions, validate_only), parse)


def delete_topic_op(name: str) -> AdminOp:
    """-> None."""
    return AdminOp(delete_topic_request(name), lambda r: None)


def describe_topics_op(names: Iterable[str] | None = None) -> AdminOp:
    """-> {name: TopicInfo}; raises the error of the first requested topic that has one."""
    def parse(r: dict) -> dict[str, TopicInfo]:
        md = parse_metadata(r)
        for err in md.topic_errors.values():
            raise err
        return md.topics
    return AdminOp(metadata_request(None if names is None else list(names)), parse)


def list_topics_op(internal: bool = False) -> AdminOp:
    """-> sorted topic names (internal ones too if `internal`)."""
    def parse(r: dict) -> list[str]:
        md = parse_metadata(r)
        return sorted(name for name, t in md.topics.items() if internal or not t.internal)
    return AdminOp(metadata_request(None, internal=internal), parse)


def alter_configs_op(name: str, set_configs: dict[str, str] | None = None,
                     delete_configs: Iterable[str] = ()) -> AdminOp:
    """-> the topic's configs after the change."""
    return AdminOp(alter_configs_request(name, set_configs, delete_configs),
                   lambda r: dict(r.get("configs") or {}))


def alter_broker_configs_op(resource: str, set_configs: dict[str, str] | None = None,
                            delete_configs: Iterable[str] = ()) -> AdminOp:
    """-> the dynamic configs of broker `resource` ("" the cluster default) after the change."""
    return AdminOp(alter_broker_configs_request(resource, set_configs, delete_configs),
                   lambda r: dict(r.get("configs") or {}))


def alter_group_configs_op(group_id: str, set_configs: dict[str, str] | None = None,
                           delete_configs: Iterable[str] = ()) -> AdminOp:
    """-> the configs set on group `group_id` after the change (Kafka 4's group configs)."""
    return AdminOp(alter_group_configs_request(group_id, set_configs, delete_configs),
                   lambda r: dict(r.get("configs") or {}))


def describe_group_configs_op(group_id: str) -> AdminOp:
    """-> the configs set on group `group_id` (the rest are the broker's defaults)."""
    return AdminOp({"op": "describe_group_configs", "group_id": group_id}, lambda r: dict(r.get("configs") or {}))


def cluster_status_op() -> AdminOp:
    """-> ClusterStatus."""
    parse: Callable[[dict], ClusterStatus] = parse_cluster_status
    return AdminOp(cluster_status_request(), parse)


# ---------------------------------------------------------------- ACLs and SCRAM users


def _raise_first_error(results: Any) -> list[dict]:
    results = list(results or ())
    for r in results:
        if isinstance(r, dict) and r.get("error") is not None:
            raise error_from_wire(r["error"])
    return results


def create_acls_op(acls: Iterable[AclBinding]) -> AdminOp:
    """-> None; raises the first ACL's error (the others may have been created: it is
    idempotent, so send them again)."""
    request = {"op": "create_acls", "acls": [a.to_obj() for a in acls]}
    return AdminOp(request, lambda r: _raise_first_error(r.get("results")) and None)


def describe_acls_op(acl_filter: AclFilter | None = None) -> AdminOp:
    """-> [AclBinding] matching the filter (default: every ACL)."""
    request = {"op": "describe_acls", "filter": (acl_filter or AclFilter()).to_obj()}
    return AdminOp(request, lambda r: [AclBinding.from_obj(a) for a in r.get("acls") or ()])


def delete_acls_op(filters: Iterable[AclFilter]) -> AdminOp:
    """-> [AclBinding] deleted (by every filter); raises the first filter's error."""
    request = {"op": "delete_acls", "filters": [f.to_obj() for f in filters]}

    def parse(r: dict) -> list[AclBinding]:
        return [AclBinding.from_obj(a) for res in _raise_first_error(r.get("results")) for a in res.get("acls") or ()]

    return AdminOp(request, parse)


def describe_users_op(users: Iterable[str] | None = None) -> AdminOp:
    """-> {user: {mechanism: iterations}} of the users that have SCRAM credentials (all of
    them when `users` is None; a named user without any raises ResourceNotFoundError)."""
    request = {"op": "describe_user_scram_credentials", "users": None if users is None else list(users)}

    def parse(r: dict) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for u in r.get("users") or ():
            if u.get("error") is not None:
                raise error_from_wire(u["error"])
            out[u["user"]] = {c["mechanism"]: c["iterations"] for c in u.get("credentials") or ()}
        return out

    return AdminOp(request, parse)


def upsert_user_op(user: str, password: str, mechanisms: Iterable[str] = tuple(SCRAM_MECHANISMS),
                   iterations: int = DEFAULT_ITERATIONS) -> AdminOp:
    """-> None: set `user`'s SCRAM credentials for each mechanism. The password never leaves
    the client: what is sent is the salted password (PBKDF2 with a fresh salt, as Kafka's
    AlterUserScramCredentials), and the node keeps only keys derived from it. It still lets
    its holder log in: send it over TLS only."""
    upsertions = []
    for mechanism in mechanisms:
        salt = secrets.token_bytes(32)
        upsertions.append({"name": user, "mechanism": mechanism, "iterations": iterations, "salt": salt,
                           "salted_password": salted_password(mechanism, password, salt, iterations)})
    request = {"op": "alter_user_scram_credentials", "upsertions": upsertions, "deletions": []}
    return AdminOp(request, lambda r: _raise_first_error(r.get("results")) and None)


def delete_user_op(user: str, mechanisms: Iterable[str]) -> AdminOp:
    """-> None: remove `user`'s SCRAM credentials of these mechanisms (all or none: one the
    user lacks raises ResourceNotFoundError and nothing is removed; `describe_users_op`
    says which it has). Its open connections fail their next request."""
    request = {"op": "alter_user_scram_credentials", "upsertions": [],
               "deletions": [{"name": user, "mechanism": m} for m in mechanisms]}
    return AdminOp(request, lambda r: _raise_first_error(r.get("results")) and None)


def describe_quotas_op(components: Iterable[dict[str, Any]] = (), strict: bool = False) -> AdminOp:
    """-> [{"entity": {"user"/"client-id": name or None (the default)}, "values": {quota: bound}}]
    of the client quotas matching Kafka's filter components ({"entity_type", "match_type":
    0 exact / 1 default / 2 any, "match"}); every quota with none."""
    request = {"op": "describe_client_quotas", "components": list(components), "strict": strict}
    return AdminOp(request, lambda r: list(r.get("entries") or ()))


def describe_broker_configs_op() -> AdminOp:
    """-> [{"name", "type", "doc", "cluster": value or None, "brokers": {id: value}}]: each
    dynamic broker config and what the metadata log sets for it (cluster-wide, per broker)."""
    return AdminOp({"op": "describe_broker_configs"}, lambda r: list(r.get("configs") or ()))


def describe_features_op() -> AdminOp:
    """-> {"supported": {feature: [min, max]}, "finalized": {feature: level}, "epoch"}: the
    cluster's feature levels (Kafka's DescribeFeatures; level 0 features are not finalized)."""
    return AdminOp({"op": "describe_features"}, dict)


def update_features_op(levels: dict[str, int], upgrade_type: int = 1, validate_only: bool = False) -> AdminOp:
    """-> None: set finalized feature levels (Kafka's UpdateFeatures; `upgrade_type` 1 upgrade,
    2 safe downgrade, 3 unsafe downgrade); raises InvalidUpdateVersionError if one is refused
    (then none changes)."""
    updates = [{"feature": f, "level": int(lv), "upgrade_type": upgrade_type} for f, lv in levels.items()]
    return AdminOp({"op": "update_features", "updates": updates, "validate_only": validate_only}, lambda r: None)


def alter_quotas_op(entity: dict[str, str | None], set_values: dict[str, float],
                    remove: Iterable[str] = (), validate_only: bool = False) -> AdminOp:
    """-> None: set and remove quota values of one entity ({"user"/"client-id": name, or None
    for the default entity}); raises the entry's error (INVALID_REQUEST, INVALID_CONFIG)."""
    ops = [{"key": k, "value": float(v), "remove": False} for k, v in set_values.items()]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in remove]
    request = {"op": "alter_client_quotas", "entries": [{"entity": dict(entity), "ops": ops}],
               "validate_only": validate_only}
    return AdminOp(request, lambda r: _raise_first_error(r.get("results")) and None)

"""ACL enforcement for the native client listener: every op's handler is wrapped by its policy,
which checks the request's principal against the ACLs before the handler runs (so a refused
request has no effect), and answers refusals the way Kafka does (PROTOCOL.md "Authorization").

    guarded = guard_handlers(client_handlers, authorizer_of=lambda: authorizers.current())

Policies (one per op, in POLICIES; an op without one is allowed to super users only, so a new
op fails closed until it states what it needs):
* whole-request ops check one resource (the topic in `name`, the group in `group_id`, or the
  cluster) and raise the resource type's *_AUTHORIZATION_FAILED;
* partition-list ops (produce, fetch, list_offsets, offset_commit, offset_fetch) pass the
  allowed partitions to the handler and answer each refused one with
  TOPIC_AUTHORIZATION_FAILED in its place (the handler is not called when none is allowed;
  acks=0 produce gets no answer, as ever);
* listing ops (metadata, list_groups, offset_fetch of all partitions) leave out what the
  principal may not DESCRIBE; a topic asked for by name is answered with its error instead.

The principal and host come from the connection (Request.principal, Request.client_host);
a request without a principal (a listener without security) is not checked at all.

Pure apart from awaiting the wrapped handler; `authorizer_of()` is called once per request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final

from metadata.authorizer import Authorizer
from metadata.image import MetadataImage
from raftlog.base.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    RaftlogError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Later, Request

__all__ = ["AuthorizerCache", "POLICIES", "guard_handlers"]

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
X = ResourceType.TRANSACTIONAL_ID
O = Operation


class AuthorizerCache:
    """One Authorizer per distinct ACL set: rebuilt only when the image's ACLs change."""

    def __init__(self, image_of: Callable[[], MetadataImage], *, super_users: frozenset[str],
                 allow_if_no_acls: bool = False) -> None:
        self._image_of = image_of
        self.super_users = super_users
        self.allow_if_no_acls = allow_if_no_acls
        self._acls: Any = None
        self._authorizer = Authorizer((), super_users=super_users, allow_if_no_acls=allow_if_no_acls)

    def current(self) -> Authorizer:
        acls = self._image_of().acls
        if acls is not self._acls:
            self._authorizer = Authorizer(acls.values(), super_users=self.super_users,
                                          allow_if_no_acls=self.allow_if_no_acls)
            self._acls = acls
        return self._authorizer


@dataclass(frozen=True)
class _Check:
    authorizer: Authorizer
    principal: str
    host: str

    def allowed(self, operation: Operation, rt: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, rt, name)

    def require(self, operation: Operation, rt: ResourceType, name: str) -> None:
        if not self.allowed(operation, rt, name):
            raise _refusal(operation, rt, name)


def _refusal(operation: Operation, rt: ResourceType, name: str) -> RaftlogError:
    what = {T: "topic", G: "group", C: "the cluster", X: "transactional id"}[rt]
    where = what if rt is C else f"{what} {name!r:.80}"
    message = f"not authorized to {operation.value} {where}"
    cls = {T: TopicAuthorizationFailedError, G: GroupAuthorizationFailedError,
           C: ClusterAuthorizationFailedError, X: TransactionalIdAuthorizationFailedError}[rt]
    return cls(message)


Policy = Callable[[Request, _Check, Handler], Awaitable[Mapping[str, Any] | None]]


def _str_field(request: Request, name: str) -> str:
    value = request.fields.get(name)
    if type(value) is not str:
        raise InvalidRequestError(f"field {name!r} must be a string", field=name)
    return value


def _list_field(request: Request, name: str, *, nullable: bool = False) -> list[Any] | None:
    value = request.fields.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, list):
        raise InvalidRequestError(f"field {name!r} must be a list", field=name)
    return value


def _topic_of(entry: Any, field: str) -> str:
    topic = entry.get("topic") if isinstance(entry, Mapping) else None
    if type(topic) is not str:
        raise InvalidRequestError(f"every entry of {field!r} names a topic", field=field)
    return topic


def _with(request: Request, **fields: Any) -> Request:
    return replace(request, fields=MappingProxyType({**request.fields, **fields}))


# --- policy builders ----------------------------------------------------------------------------


def _resource(operation: Operation, rt: ResourceType, field: str | None = None) -> Policy:
    """One resource: the cluster, or the one named by `field`."""

    async def policy(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
        check.require(operation, rt, CLUSTER_NAME if field is None else _str_field(request, field))
        return await handler(request)

    return policy


def _partitions(operation: Operation, field: str = "partitions", answer_field: str = "partitions",
                group_operation: Operation | None = None) -> Policy:
    """Per-partition checks; refused partitions answered in place with the error."""

    async def policy(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
        if group_operation is not None:
            check.require(group_operation, G, _str_field(request, "group_id"))
        entries = _list_field(request, field, nullable=group_operation is not None)
        if entries is None:  # offset_fetch of every committed partition: filter the answer
            def keep_allowed(response: Mapping[str, Any]) -> Mapping[str, Any]:
                kept = [p for p in response.get(answer_field, [])
                        if not isinstance(p, Mapping) or check.allowed(operation, T, str(p.get("topic")))]
                return {**response, answer_field: kept}

            return _then(await handler(request), keep_allowed)
        verdicts: dict[str, bool] = {}
        allowed, refused = [], []
        for entry in entries:
            topic = _topic_of(entry, field)
            if topic not in verdicts:
                verdicts[topic] = check.allowed(operation, T, topic)
            (allowed if verdicts[topic] else refused).append(entry)
        errors = [
            {"topic": e["topic"], "partition": e.get("partition"), "error": _refusal(operation, T, e["topic"]).to_wire()}
            for e in refused
        ]
        if not refused:
            return await handler(request)
        log_event(logger, "acl_refused", level=logging.DEBUG, principal=check.principal, op=request.op,
                  topics=",".join(sorted(t for t, ok in verdicts.items() if not ok))[:200])
        if not allowed:
            if request.op == "produce" and request.fields.get("acks") == 0:
                return None
            return {answer_field: errors}
        return _then(await handler(_with(request, **{field: allowed})),
                     lambda response: {**response, answer_field: [*response.get(answer_field, []), *errors]})

    return policy


def _then(response: Any, change: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Any:
    """`change` applied to a handler's answer: at once, or to what its `Later` (an inline
    handler's rest, e.g. produce's acks=all wait) answers; None (no answer) stays None."""
    if type(response) is Later:
        async def wait() -> Any:
            return _then(await response.wait(), change)

        return Later(wait)
    return None if response is None else change(response)


async def _metadata(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    names = _list_field(request, "topics", nullable=True)
    refused: list[str] = []
    kept: list[str] | None = None
    if names is not None:
        if any(type(n) is not str for n in names):
            raise InvalidRequestError("topics must be strings", field="topics")
        refused = [n for n in names if not check.allowed(O.DESCRIBE, T, n)]
        kept = [n for n in names if n not in refused]
        if refused:
            request = _with(request, topics=kept)
    response = await handler(request)
    if response is None:
        return None
    topics = [
        t for t in response.get("topics", [])
        if isinstance(t, Mapping) and (kept is None or t.get("name") in kept)
        and ("error" in t or check.allowed(O.DESCRIBE, T, str(t.get("name"))))
    ]  # fmt: skip
    topics += [{"name": n, "error": TopicAuthorizationFailedError.code} for n in refused]
    return {**response, "topics": topics}


async def _create_topic(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    name = _str_field(request, "name")
    if not (check.allowed(O.CREATE, C, CLUSTER_NAME) or check.allowed(O.CREATE, T, name)):
        raise _refusal(O.CREATE, T, name)
    return await handler(request)


async def _init_producer_id(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    # Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    if not (check.allowed(O.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
            or check.authorizer.allows_some(check.principal, check.host, O.WRITE, T)):
        raise _refusal(O.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
    return await handler(request)


async def _reset_offsets(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    check.require(O.READ, G, _str_field(request, "group_id"))
    for entry in _list_field(request, "partitions") or []:
        check.require(O.READ, T, _topic_of(entry, "partitions"))
    return await handler(request)


def _each(operation: Operation, rt: ResourceType = G, ids_field: str = "group_ids", answer_field: str = "groups",
          key: str = "group_id") -> Policy:
    """One resource per id of `ids_field`: refused ids are answered in `answer_field` with
    their refusal, the others go to the handler."""

    async def policy(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
        ids = _list_field(request, ids_field) or []
        refused = [i for i in ids if type(i) is str and not check.allowed(operation, rt, i)]
        errors = [{key: i, "error": _refusal(operation, rt, i).to_wire()} for i in refused]
        kept = [i for i in ids if i not in refused]
        if not kept:
            return {answer_field: errors}
        response = await handler(_with(request, **{ids_field: kept}) if refused else request)
        if response is None:
            return None
        return {**response, answer_field: [*response.get(answer_field, []), *errors]}

    return policy


async def _list_groups(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    response = await handler(request)
    if response is None or check.allowed(O.DESCRIBE, C, CLUSTER_NAME):
        return response
    groups = [g for g in response.get("groups", [])
              if isinstance(g, Mapping) and check.allowed(O.DESCRIBE, G, str(g.get("group_id")))]
    return {**response, "groups": groups}


async def _add_partitions_to_txn(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    # Kafka: WRITE on the transactional id and on every topic of the request.
    check.require(O.WRITE, X, _str_field(request, "transactional_id"))
    for entry in _list_field(request, "partitions") or []:
        check.require(O.WRITE, T, _topic_of(entry, "partitions"))
    return await handler(request)


async def _add_offsets_to_txn(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    check.require(O.WRITE, X, _str_field(request, "transactional_id"))
    check.require(O.READ, G, _str_field(request, "group_id"))
    return await handler(request)


async def _list_transactions(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    response = await handler(request)
    if response is None:
        return None
    kept = [t for t in response.get("transactions", [])
            if isinstance(t, Mapping) and check.allowed(O.DESCRIBE, X, str(t.get("transactional_id")))]
    return {**response, "transactions": kept}


async def _super_users_only(request: Request, check: _Check, handler: Handler) -> Mapping[str, Any] | None:
    if check.principal not in check.authorizer.super_users:
        log_event(logger, "acl_no_policy", level=logging.WARNING, op=request.op[:40])
        raise ClusterAuthorizationFailedError(f"op {request.op!r:.40} has no ACL policy: super users only")
    return await handler(request)


POLICIES: Final[Mapping[str, Policy]] = {
    "metadata": _metadata,
    "produce": _partitions(O.WRITE),
    "fetch": _partitions(O.READ),
    "list_offsets": _partitions(O.DESCRIBE),
    "delete_records": _partitions(O.DELETE),  # Kafka's DeleteRecords rule: DELETE on the topic
    "init_producer_id": _init_producer_id,
    "create_topic": _create_topic,
    "delete_topic": _resource(O.DELETE, T, "name"),
    "create_partitions": _resource(O.ALTER, T, "name"),  # Kafka's CreatePartitions rule
    "alter_configs": _resource(O.ALTER_CONFIGS, T, "name"),
    "describe_configs": _resource(O.DESCRIBE_CONFIGS, T, "name"),
    "cluster_status": _resource(O.DESCRIBE, C),
    "recover_partition": _resource(O.ALTER, C),
    "find_coordinator": _resource(O.DESCRIBE, G, "group_id"),
    "join_group": _resource(O.READ, G, "group_id"),
    "sync_group": _resource(O.READ, G, "group_id"),
    "heartbeat": _resource(O.READ, G, "group_id"),
    "leave_group": _resource(O.READ, G, "group_id"),
    "offset_commit": _partitions(O.READ, "offsets", "partitions", group_operation=O.READ),
    "offset_fetch": _partitions(O.DESCRIBE, "partitions", "partitions", group_operation=O.DESCRIBE),
    "reset_offsets": _reset_offsets,
    "list_groups": _list_groups,
    "describe_groups": _each(O.DESCRIBE),
    "delete_groups": _each(O.DELETE),
    "describe_acls": _resource(O.DESCRIBE, C),
    "describe_user_scram_credentials": _resource(O.DESCRIBE, C),
    "create_acls": _resource(O.ALTER, C),
    "delete_acls": _resource(O.ALTER, C),
    "alter_user_scram_credentials": _resource(O.ALTER, C),
    # Transactions: Kafka's rules on the TransactionalId resource.
    "find_txn_coordinator": _resource(O.DESCRIBE, X, "transactional_id"),
    "init_txn_producer_id": _resource(O.WRITE, X, "transactional_id"),
    "add_partitions_to_txn": _add_partitions_to_txn,
    "add_offsets_to_txn": _add_offsets_to_txn,
    "end_txn": _resource(O.WRITE, X, "transactional_id"),
    "describe_transactions": _each(O.DESCRIBE, X, "transactional_ids", "transactions", "transactional_id"),
    "list_transactions": _list_transactions,
}


def guard_handlers(handlers: Mapping[str, Handler], *, authorizer_of: Callable[[], Authorizer]) -> dict[str, Handler]:
    """Each handler behind its op's policy (super users only for an op without one)."""

    def guarded(op: str, handler: Handler) -> Handler:
        policy = POLICIES.get(op, _super_users_only)

        async def run(request: Request) -> Mapping[str, Any] | None:
            if request.principal is None:
                return await handler(request)
            check = _Check(authorizer_of(), request.principal, request.client_host or "")
            return await policy(request, check, handler)

        # An inline handler stays inline behind its policy (policies await nothing else).
        for mark in ("inline", "inline_deadline"):
            setattr(run, mark, getattr(handler, mark, False))
        return run

    return {op: guarded(op, handler) for op, handler in handlers.items()}

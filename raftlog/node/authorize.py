"""The node's one ACL guard, for the native and the Kafka listener alike: it checks a request's
principal against the ACLs before anything runs (so a refused request has no effect), and
answers refusals the way Kafka does (PROTOCOL.md "Authorization").

    guard = Guard(authorizer_of)                      # authorizer_of None: no ACLs
    port = GuardedPartitions(partition_port, guard.access(principal, host))
    guarded = guard_handlers(client_handlers, authorizer_of=lambda: authorizers.current())

Policies (one per op, in POLICIES; an op without one is allowed to super users only, so a new
op fails closed until it states what it needs):
* whole-request ops check one resource (the topic in `name`, the group in `group_id`, or the
  cluster) and raise the resource type's *_AUTHORIZATION_FAILED;
* the partition ops (produce, fetch, list_offsets, delete_records, init_producer_id,
  recover_partition) are checked in front of the partition port by `GuardedPartitions`, for
  the native and the Kafka listener alike: a refused partition never reaches the port and is
  answered TOPIC_AUTHORIZATION_FAILED in its place;
* the classic group ops are checked in front of the group port (groupcoord/port.py) by
  `GuardedGroups` (raftlog/node/guarded_groups.py), for both listeners, by the `PortRule` each
  declares here: refused partitions of offset_commit / offset_fetch / offset_delete and refused
  groups of describe_groups / delete_groups are answered in place, list_groups leaves out what
  the principal may not DESCRIBE;
* the share-group ops (KIP-932) are checked in front of the share port (groupcoord/share_port.py)
  by `GuardedShare` (raftlog/node/guarded_share.py), by the `PortRule` each declares here;
* the transaction ops are checked in front of the transaction port (groupcoord/txn_port.py)
  by `GuardedTxn` (raftlog/node/guarded_txn.py), for both listeners, by the `TxnRule` each
  declares here (Kafka's rules on the TransactionalId resource);
* listing ops (metadata) leave out what the principal may not DESCRIBE; a topic asked for by
  name is answered with its error instead.

The principal and host come from the connection (Request.principal, Request.client_host;
the Kafka listener's ConnectionState): `Guard.access` makes the one `Access` of a request; a
request without a principal (a listener without security) is not checked at all.

Pure apart from awaiting the wrapped handler; `authorizer_of()` is called once per request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar

from metadata.authorizer import Authorizer
from metadata.image import MetadataImage
from partition.port import (
    Appended,
    ClientInfo,
    DeletePart,
    DeleteResult,
    EpochEndResult,
    EpochQuery,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetQuery,
    OffsetResult,
    PartitionKey,
    PartitionPort,
    ProducePart,
    ProduceResult,
    ProducerIdentity,
    ProducerInfo,
    ReplicaSize,
    TxnMarker,
)
from raftlog.base.acl import ANONYMOUS, CLUSTER_NAME, KAFKA_CODES, VALID_OPERATIONS, Operation, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    RaftlogError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Request

__all__ = [
    "Access", "AuthorizerCache", "Guard", "GuardedPartitions", "NOBODY", "OPEN", "POLICIES", "PORT_RULES", "PortRule",
    "ResourceRule", "TxnRule", "guarded_at_port",
    "guard_handlers",
    "refusal",
]

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
X = ResourceType.TRANSACTIONAL_ID
O = Operation


class _Part(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


_P = TypeVar("_P", bound=_Part)
_R = TypeVar("_R")
_I = TypeVar("_I")


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
class Access:
    """What one principal (from one host) may do: the one check every listener makes, through
    the policies below (native ops) and `GuardedPartitions` (the partition port).
    `authorizer` None: everything is allowed (no ACLs, or a listener without security)."""

    authorizer: Authorizer | None
    principal: str
    host: str

    def allowed(self, operation: Operation, rt: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, rt, name)

    def authorized_operations(self, rt: ResourceType, name: str) -> set[int]:
        """KIP-430's authorized operations: Kafka's wire code of each operation of the resource
        type this principal may perform on the resource (bit n of the answers' bit field);
        every one without an authorizer, as Kafka answers without one."""
        return {KAFKA_CODES[Operation][op] for op in VALID_OPERATIONS[rt]
                if op is not Operation.ALL and self.allowed(op, rt, name)}

    def allows_some(self, operation: Operation, rt: ResourceType) -> bool:
        """Whether some resource of the type allows the operation (Kafka's rule for
        InitProducerId: WRITE on some topic)."""
        return self.authorizer is None or self.authorizer.allows_some(self.principal, self.host, operation, rt)

    @property
    def super_user(self) -> bool:
        return self.authorizer is None or self.principal in self.authorizer.super_users

    def require(self, operation: Operation, rt: ResourceType, name: str) -> None:
        if not self.allowed(operation, rt, name):
            raise _refusal(operation, rt, name)

    def split_topics(self, operation: Operation, items: Sequence[_I], topic_of: Callable[[_I], str],
                     op: str | None = None) -> tuple[list[_I], dict[int, RaftlogError]]:
        """(the items whose topic allows `operation`, {index asked: refusal} of the others),
        each topic checked once; refused topics are logged together (under `op`, default
        the operation). The one per-topic split of every typed port's guard."""
        if self.authorizer is None:
            return list(items), {}
        verdicts: dict[str, bool] = {}
        allowed: list[_I] = []
        refused: dict[int, RaftlogError] = {}
        for i, item in enumerate(items):
            topic = topic_of(item)
            ok = verdicts.get(topic)
            if ok is None:
                ok = verdicts[topic] = self.allowed(operation, T, topic)
            if ok:
                allowed.append(item)
            else:
                refused[i] = _refusal(operation, T, topic)
        if refused:
            log_event(logger, "acl_refused", level=logging.DEBUG, principal=self.principal,
                      op=op or operation.value,
                      topics=",".join(sorted(t for t, ok in verdicts.items() if not ok))[:200])
        return allowed, refused


OPEN: Final = Access(None, ANONYMOUS, "")  # no ACLs on this node, or a listener without security
NOBODY: Final = Access(Authorizer((), super_users=frozenset()), ANONYMOUS, "")  # allowed nothing


class Guard:
    """The node's one authorization guard: an `Access` per request, from its connection's
    principal and host. `authorizer_of` None: the node has no ACLs (everything is allowed).
    Fails closed: with ACLs, a request without a known principal may do nothing."""

    def __init__(self, authorizer_of: Callable[[], Authorizer] | None) -> None:
        self._authorizer_of = authorizer_of

    @property
    def enabled(self) -> bool:
        return self._authorizer_of is not None

    def access(self, principal: str | None, host: str | None) -> Access:
        """`principal` None: a listener without security (native), not checked at all."""
        if self._authorizer_of is None or principal is None:
            return OPEN
        return Access(self._authorizer_of(), principal, host or "")

    def nobody(self) -> Access:
        """For a request whose principal is unknown (no current connection): nothing allowed
        with ACLs on, everything without."""
        return OPEN if self._authorizer_of is None else NOBODY


def refusal(operation: Operation, rt: ResourceType, name: str) -> RaftlogError:
    """The refusal Kafka answers for `operation` on the resource (its *_AUTHORIZATION_FAILED)."""
    return _refusal(operation, rt, name)


def _refusal(operation: Operation, rt: ResourceType, name: str) -> RaftlogError:
    what = {T: "topic", G: "group", C: "the cluster", X: "transactional id"}[rt]
    where = what if rt is C else f"{what} {name!r:.80}"
    message = f"not authorized to {operation.value} {where}"
    cls = {T: TopicAuthorizationFailedError, G: GroupAuthorizationFailedError,
           C: ClusterAuthorizationFailedError, X: TransactionalIdAuthorizationFailedError}[rt]
    return cls(message)


Policy = Callable[[Request, Access, Handler], Awaitable[Mapping[str, Any] | None]]


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


def _with(request: Request, **fields: Any) -> Request:
    return replace(request, fields=MappingProxyType({**request.fields, **fields}))


# --- policy builders ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceRule:
    """One resource: the cluster, or the one the request names in `field`. A native policy
    (called with the request) and, for a typed port's guard (guarded_metadata.py), `require`."""

    operation: Operation
    rt: ResourceType
    field: str | None = None

    async def __call__(self, request: Request, check: Access, handler: Handler) -> Mapping[str, Any] | None:
        check.require(self.operation, self.rt, CLUSTER_NAME if self.field is None else _str_field(request, self.field))
        return await handler(request)

    def require(self, check: Access, name: str = CLUSTER_NAME) -> None:
        check.require(self.operation, self.rt, name)


def _resource(operation: Operation, rt: ResourceType, field: str | None = None) -> ResourceRule:
    """One resource: the cluster, or the one named by `field`."""
    return ResourceRule(operation, rt, field)


async def _metadata(request: Request, check: Access, handler: Handler) -> Mapping[str, Any] | None:
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


async def _create_topic(request: Request, check: Access, handler: Handler) -> Mapping[str, Any] | None:
    name = _str_field(request, "name")
    if not (check.allowed(O.CREATE, C, CLUSTER_NAME) or check.allowed(O.CREATE, T, name)):
        raise _refusal(O.CREATE, T, name)
    return await handler(request)


async def _at_port(request: Request, check: Access, handler: Handler) -> Mapping[str, Any] | None:
    """The partition ops: checked by `GuardedPartitions` in front of the partition port,
    which the native adapter (raftlog/node/native_partition.py) calls as the Kafka
    listener does; nothing to check twice here."""
    return await handler(request)


async def _super_users_only(request: Request, check: Access, handler: Handler) -> Mapping[str, Any] | None:
    if not check.super_user:
        log_event(logger, "acl_no_policy", level=logging.WARNING, op=request.op[:40])
        raise ClusterAuthorizationFailedError(f"op {request.op!r:.40} has no ACL policy: super users only")
    return await handler(request)


# --- rules checked in front of a typed port --------------------------------------------------------


@dataclass(frozen=True)
class PortRule:
    """An op's ACL rule, checked in front of its typed port for both listeners (the group port:
    raftlog/node/guarded_groups.py `GuardedGroups`; the share port: guarded_share.py
    `GuardedShare`), not by `guard_handlers`:
    * `group`: the operation on the request's group (on each group asked, `each`; a group's
      listing needs it unless the principal may DESCRIBE the cluster, `listing`);
    * `topics`: the operation on each partition's topic; a refused partition is answered
      TOPIC_AUTHORIZATION_FAILED in its place (`whole`: the whole request is refused)."""

    group: Operation
    topics: Operation | None = None
    each: bool = False
    listing: bool = False
    whole: bool = False


@dataclass(frozen=True)
class TxnRule:
    """A transaction op's ACL rule (Kafka's, on the TransactionalId resource), checked in front
    of the transaction port for both listeners (raftlog/node/guarded_txn.py `GuardedTxn`):
    * `txn`: the operation on the request's transactional id (on each id asked, `each`; a
      listing leaves out the ids without it, `listing`);
    * `group`: also this operation on the request's group;
    * `topics`: also this operation on every partition's topic (a refused one refuses all)."""

    txn: Operation
    group: Operation | None = None
    topics: Operation | None = None
    each: bool = False
    listing: bool = False


def _on_txn(operation: Operation, *, group: Operation | None = None, topics: Operation | None = None) -> TxnRule:
    return TxnRule(operation, group, topics)


def _on_each_txn(operation: Operation) -> TxnRule:
    return TxnRule(operation, each=True)


def _listed_txns(operation: Operation) -> TxnRule:
    return TxnRule(operation, listing=True)


PORT_RULES: Final = (PortRule, TxnRule)  # rules checked at a typed port, not by guard_handlers


def _on_group(operation: Operation) -> PortRule:
    return PortRule(operation)


def _on_group_and_topics(group: Operation, topics: Operation, *, whole: bool = False) -> PortRule:
    return PortRule(group, topics, whole=whole)


def _on_each_group(operation: Operation) -> PortRule:
    return PortRule(operation, each=True)


def _listed_groups(operation: Operation) -> PortRule:
    return PortRule(operation, listing=True)


POLICIES: Final[Mapping[str, Policy | PortRule]] = {
    "metadata": _metadata,
    "produce": _at_port,
    "fetch": _at_port,
    "list_offsets": _at_port,
    "delete_records": _at_port,
    "init_producer_id": _at_port,
    "describe_producers": _at_port,
    "create_topic": _create_topic,
    "delete_topic": _resource(O.DELETE, T, "name"),
    "create_partitions": _resource(O.ALTER, T, "name"),  # Kafka's CreatePartitions rule
    "alter_configs": _resource(O.ALTER_CONFIGS, T, "name"),
    "describe_configs": _resource(O.DESCRIBE_CONFIGS, T, "name"),
    "alter_broker_configs": _resource(O.ALTER_CONFIGS, C),  # Kafka's rule for BROKER resources
    "alter_group_configs": _resource(O.ALTER_CONFIGS, G, "group_id"),  # Kafka's rule for GROUP resources
    "describe_group_configs": _resource(O.DESCRIBE_CONFIGS, G, "group_id"),
    "elect_leaders": _resource(O.ALTER, C),  # Kafka's ElectLeaders rule
    "cluster_status": _resource(O.DESCRIBE, C),
    "alter_partition_reassignments": _resource(O.ALTER, C),  # Kafka's AlterPartitionReassignments rule
    "list_partition_reassignments": _resource(O.DESCRIBE, C),
    "decommission_broker": _resource(O.ALTER, C),  # moves replicas, as a reassignment does
    "recommission_broker": _resource(O.ALTER, C),
    "balance": _resource(O.ALTER, C),  # dry_run included: it is the plan of a cluster-wide change
    "add_controller": _resource(O.ALTER, C),  # Kafka's AddRaftVoter rule
    "remove_controller": _resource(O.ALTER, C),  # Kafka's RemoveRaftVoter rule
    "recover_partition": _at_port,
    # The classic group ops: checked in front of the group port (guarded_groups.py GuardedGroups).
    "find_coordinator": _on_group(O.DESCRIBE),
    "join_group": _on_group(O.READ),
    "sync_group": _on_group(O.READ),
    "heartbeat": _on_group(O.READ),
    "leave_group": _on_group(O.READ),
    "consumer_group_heartbeat": _on_group(O.READ),  # KIP-848, Kafka's rule
    "consumer_group_describe": _on_each_group(O.DESCRIBE),
    # KIP-932 share groups, Kafka's rules: checked in front of the share port (guarded_share.py GuardedShare).
    "share_group_heartbeat": _on_group(O.READ),
    "share_group_describe": _on_each_group(O.DESCRIBE),
    "share_groups_list": _resource(O.DESCRIBE, C),
    "share_group_delete": _on_group(O.DELETE),
    "share_fetch": _on_group_and_topics(O.READ, O.READ, whole=True),
    "share_acknowledge": _on_group_and_topics(O.READ, O.READ, whole=True),
    "share_group_offsets": _on_group(O.DESCRIBE),
    "share_group_reset": _on_group(O.READ),
    "share_group_delete_offsets": _on_group(O.DELETE),
    "offset_commit": _on_group_and_topics(O.READ, O.READ),
    "offset_fetch": _on_group_and_topics(O.DESCRIBE, O.DESCRIBE),
    "reset_offsets": _on_group_and_topics(O.READ, O.READ, whole=True),
    # Kafka's OffsetDelete rule: DELETE on the group, READ on each topic.
    "offset_delete": _on_group_and_topics(O.DELETE, O.READ),
    "list_groups": _listed_groups(O.DESCRIBE),
    "describe_groups": _on_each_group(O.DESCRIBE),
    "delete_groups": _on_each_group(O.DELETE),
    "describe_acls": _resource(O.DESCRIBE, C),
    "describe_user_scram_credentials": _resource(O.DESCRIBE, C),
    "create_acls": _resource(O.ALTER, C),
    "delete_acls": _resource(O.ALTER, C),
    "alter_user_scram_credentials": _resource(O.ALTER, C),
    # Transactions: Kafka's rules on the TransactionalId resource, checked in front of the
    # transaction port (guarded_txn.py GuardedTxn).
    "find_txn_coordinator": _on_txn(O.DESCRIBE),
    "init_txn_producer_id": _on_txn(O.WRITE),
    "add_partitions_to_txn": _on_txn(O.WRITE, topics=O.WRITE),
    # Kafka's AddPartitionsToTxn v4 (the brokers' batched form): CLUSTER_ACTION, then each
    # transaction by the rule above. A Kafka API, no native op.
    "add_partitions_to_txns": _resource(O.CLUSTER_ACTION, C),
    "add_offsets_to_txn": _on_txn(O.WRITE, group=O.READ),
    "txn_offset_commit": _on_txn(O.WRITE, group=O.READ),
    "end_txn": _on_txn(O.WRITE),
    "describe_transactions": _on_each_txn(O.DESCRIBE),
    "list_transactions": _listed_txns(O.DESCRIBE),
    "alter_client_quotas": _resource(O.ALTER_CONFIGS, C),  # Kafka's AlterClientQuotas rule
    "describe_client_quotas": _resource(O.DESCRIBE_CONFIGS, C),
    "update_features": _resource(O.ALTER, C),  # Kafka's UpdateFeatures rule
    "describe_features": _resource(O.DESCRIBE, C),
    "describe_broker_configs": _resource(O.DESCRIBE_CONFIGS, C),  # Kafka's rule for broker configs
}


def guarded_at_port(handlers: dict[str, Handler]) -> dict[str, Handler]:
    """Mark a typed port's native adapter (native_groups.py, native_txn.py, native_share.py):
    each handler calls the port behind its guard, so `guard_handlers` leaves it as it is."""
    for handler in handlers.values():
        setattr(handler, "guarded_at_port", True)
    return handlers


def guard_handlers(handlers: Mapping[str, Handler], *, authorizer_of: Callable[[], Authorizer]) -> dict[str, Handler]:
    """Each handler behind its op's policy (super users only for an op without one)."""

    def guarded(op: str, handler: Handler) -> Handler:
        policy = POLICIES.get(op, _super_users_only)
        at_port = getattr(handler, "guarded_at_port", False)
        if isinstance(policy, PORT_RULES):  # its adapter calls the port behind the guard
            if not at_port:
                raise ValueError(f"op {op!r} is guarded at its port, but its handler does not call the guarded port")
            return handler
        if at_port and isinstance(policy, ResourceRule):  # one resource, required by the port's guard
            return handler

        async def run(request: Request) -> Mapping[str, Any] | None:
            if request.principal is None:
                return await handler(request)
            check = Access(authorizer_of(), request.principal, request.client_host or "")
            return await policy(request, check, handler)

        # An inline handler stays inline behind its policy (policies await nothing else).
        for mark in ("inline", "inline_deadline"):
            setattr(run, mark, getattr(handler, mark, False))
        return run

    return {op: guarded(op, handler) for op, handler in handlers.items()}


# --- the partition port, guarded --------------------------------------------------------------


class _GuardedAppend:
    """Produce results in the order asked: the inner port's, refused parts in their places."""

    def __init__(self, inner: Appended | None, results: list[ProduceResult]) -> None:
        self._inner = inner
        self.results = results

    @property
    def waiting(self) -> bool:
        return self._inner is not None and self._inner.waiting

    async def wait(self, deadline: float) -> list[ProduceResult]:
        if self._inner is not None:
            await self._inner.wait(deadline)  # fills the shared result objects in place
        return self.results


def _part_topic(part: _Part) -> str:
    return part.topic


class GuardedPartitions:
    """The partition port (partition/port.py) behind one principal's ACLs, for every listener:
    a part whose topic the principal may not touch never reaches the port and is answered in
    its place with TOPIC_AUTHORIZATION_FAILED (Kafka's rules: WRITE to produce, READ to fetch,
    DESCRIBE to list offsets and epoch ends, DELETE to delete records, READ to describe
    producers); the whole-request ops raise their refusal (IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic for a producer id, ALTER on the cluster to recover a partition,
    DESCRIBE on the cluster for the log dirs)."""

    def __init__(self, port: PartitionPort, access: Access) -> None:
        self._port = port
        self._access = access

    def _split(self, operation: Operation, parts: Sequence[_P]) -> tuple[list[_P], dict[int, RaftlogError]]:
        return self._access.split_topics(operation, parts, _part_topic)

    @staticmethod
    def _merge(parts: Sequence[Any], answered: list[_R], refused: dict[int, RaftlogError],
               make: Callable[[str, int, RaftlogError], _R]) -> list[_R]:
        if not refused:
            return answered
        found = iter(answered)
        return [make(p.topic, p.partition, refused[i]) if i in refused else next(found)
                for i, p in enumerate(parts)]

    async def append(self, parts: Sequence[ProducePart], *, acks: int, client: ClientInfo,
                     transactional_id: str | None = None, add_to_txn: bool = False) -> Appended:
        if transactional_id is not None and self._access.authorizer is not None \
                and not self._access.allowed(O.WRITE, X, transactional_id):
            # Kafka: WRITE on the transactional id, else every part is refused.
            error = _refusal(O.WRITE, X, transactional_id)
            return _GuardedAppend(None, [ProduceResult(p.topic, p.partition, error=error) for p in parts])
        allowed, refused = self._split(O.WRITE, parts)
        inner = await self._port.append(allowed, acks=acks, client=client, transactional_id=transactional_id,
                                        add_to_txn=add_to_txn) if allowed else None
        results = self._merge(parts, [] if inner is None else inner.results, refused,
                              lambda t, p, e: ProduceResult(t, p, error=e))
        return _GuardedAppend(inner, results)

    async def fetch(self, request: FetchRequest) -> list[FetchResult]:
        allowed, refused = self._split(O.READ, request.parts)
        if refused:
            answered = await self._port.fetch(replace(request, parts=allowed)) if allowed else []
        else:
            answered = await self._port.fetch(request)
        return self._merge(request.parts, answered, refused, lambda t, p, e: FetchResult(t, p, error=e))

    async def list_offsets(self, queries: Sequence[OffsetQuery], *,
                           isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                           ) -> list[OffsetResult]:
        allowed, refused = self._split(O.DESCRIBE, queries)
        answered = await self._port.list_offsets(allowed, isolation_level=isolation_level) if allowed else []
        return self._merge(queries, answered, refused, lambda t, p, e: OffsetResult(t, p, error=e))

    def epoch_end_offsets(self, queries: Sequence[EpochQuery]) -> list[EpochEndResult]:
        allowed, refused = self._split(O.DESCRIBE, queries)
        answered = self._port.epoch_end_offsets(allowed) if allowed else []
        return self._merge(queries, answered, refused, lambda t, p, e: EpochEndResult(t, p, error=e))

    async def delete_records(self, parts: Sequence[DeletePart], deadline: float) -> list[DeleteResult]:
        allowed, refused = self._split(O.DELETE, parts)  # Kafka's DeleteRecords rule
        answered = await self._port.delete_records(allowed, deadline) if allowed else []
        return self._merge(parts, answered, refused, lambda t, p, e: DeleteResult(t, p, error=e))

    async def init_producer_id(self, *, transactional_id: str | None = None) -> ProducerIdentity:
        # Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
        access = self._access
        if not (access.allowed(O.IDEMPOTENT_WRITE, C, CLUSTER_NAME) or access.allows_some(O.WRITE, T)):
            raise _refusal(O.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
        return await self._port.init_producer_id(transactional_id=transactional_id)

    async def write_txn_marker(self, marker: TxnMarker, deadline: float) -> None:
        self._access.require(O.CLUSTER_ACTION, C, CLUSTER_NAME)  # Kafka's WriteTxnMarkers rule
        await self._port.write_txn_marker(marker, deadline)

    async def recover_partition(self, topic: str, partition: int, *, unclean: bool) -> None:
        self._access.require(O.ALTER, C, CLUSTER_NAME)
        await self._port.recover_partition(topic, partition, unclean=unclean)

    def log_dirs(self, wanted: set[PartitionKey] | None = None) -> list[ReplicaSize]:
        self._access.require(O.DESCRIBE, C, CLUSTER_NAME)  # Kafka's DescribeLogDirs rule
        return self._port.log_dirs(wanted)

    def producers(self, topic: str, partition: int) -> list[ProducerInfo]:
        self._access.require(O.READ, T, topic)  # Kafka's DescribeProducers rule
        return self._port.producers(topic, partition)

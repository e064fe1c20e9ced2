"""What Kafka API handlers get: the node's services (`KafkaContext`), one request (`Call`)
and its connection's state (`ConnectionState`), and what they may return (`Reply`).

Handlers are protocol translation only: wire decode -> the one ACL guard -> a port call ->
wire encode. The partition ops (produce, fetch, list offsets, epoch ends, delete records,
producer ids, log dirs, producers) call the partition port (partition/port.py) through
`ctx.port()`, which is that port behind the current connection's ACLs
(raftlog/node/authorize.py `GuardedPartitions`); the classic group ops call the group port
(groupcoord/port.py) through `ctx.group_port()`, behind the same guard
(raftlog/node/guarded_groups.py `GuardedGroups`); Metadata, the topic, config, quota, feature,
ACL, SCRAM, election and reassignment ops call the metadata port (metadata/port.py) through
`ctx.admin()` (raftlog/node/guarded_metadata.py `GuardedMetadata`); the transaction ops the
transaction port (groupcoord/txn_port.py) through `ctx.txn_port()` (guarded_txn.py
`GuardedTxn`); the share-group ops (KIP-932) the share port (groupcoord/share_port.py) through
`ctx.share_port()` (guarded_share.py `GuardedShare`). Handlers check no ACL themselves and
run no native handler.

A handler returns one of:
* a response message (kafka-python ApiMessage of the response class): encoded at the
  request's version; Produce answers with fast_encode.py's light `ProduceAnswer` instead,
  which the codec encodes by hand;
* `Encoded(chunks)`: a response already encoded (zero-copy fetch);
* `Later(fn)`: `await fn()` gives one of the above; run in its own task so that the next
  request of the connection starts meanwhile (long polls, acks=all waits, admin ops);
* None: no response (Produce with acks=0).
Handlers are called one at a time per connection, in request order, so what a handler does
before returning (e.g. Produce's appends) happens in request order; responses are written
in request order too (Kafka's guarantee), whatever order the `Later`s finish in.

Security (issue 16): each connection's `ConnectionState` holds its authentication session
(raftlog/node/auth.py: SASL, or the mTLS/anonymous principal) and is the *current connection*
of everything its requests run (a context variable the listener sets for the connection's
task; the `Later`s it starts inherit it). The ports (`ctx.port()`, `ctx.group_port()`,
`ctx.admin()`, `ctx.txn_port()`, `ctx.share_port()`) and `ctx.access()` apply the node's one
guard (`Guard`, raftlog/node/authorize.py) to that connection's principal and host. Without a
current connection on a node with ACLs, they fail closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import trio

from metadata.authorizer import Authorizer
from groupcoord.port import GroupPort
from groupcoord.share_port import SharePort
from groupcoord.txn_port import TxnPort
from partition.port import PartitionPort
from raftlog.base.acl import ANONYMOUS, ResourceType
from raftlog.base.errors import (
    NotCoordinatorError,
    NotLeaderError,
)
from raftlog.node.auth import Session
from raftlog.node.authorize import Access, Guard, GuardedPartitions
from raftlog.node.guarded_groups import GuardedGroups
from raftlog.node.guarded_metadata import GuardedMetadata
from raftlog.node.guarded_share import GuardedShare
from raftlog.node.guarded_txn import GuardedTxn
from raftlog.node.kafka.fetch_sessions import FetchSessionCache
from raftlog.node.quotas import QuotaManager
from raftlog.node.kafka.wire import Chunk, Header

if TYPE_CHECKING:  # kafka-python loads on the first Kafka request, not with the node
    from kafka.protocol.api_message import ApiMessage

    from raftlog.node.kafka.fast_encode import ProduceAnswer

DISK_THREADS = 4

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED", "bit_field", "KafkaContext", "ConnectionState", "Call", "Encoded", "Later", "Reply", "Handler",
    "current_connection",
]

AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # INT32_MIN: "not asked for", as Kafka answers


def bit_field(codes: set[int] | None) -> int:
    """An int32 authorized-operations field (KIP-430): bit n per operation code n; INT32_MIN for None."""
    return AUTHORIZED_OPERATIONS_OMITTED if codes is None else sum(1 << c for c in codes)

# The connection whose request is running (set by the listener for the connection's task).
_CONNECTION: ContextVar["ConnectionState | None"] = ContextVar("kafka_connection", default=None)


def current_connection() -> "ConnectionState | None":
    return _CONNECTION.get()


@dataclass
class KafkaContext:
    """The node's services as the Kafka handlers see them (built once per listener)."""

    node_id: int
    cluster_id: str
    metadata: Any  # metadata.service.MetadataService: image, controller_id, kafka_address()
    replicas: PartitionPort | None  # the partition port (None on a controller-only node)
    groups: GroupPort | None = None  # the group port (groupcoord/port.py; None on a controller-only node)
    txn: TxnPort | None = None  # the transaction port (groupcoord/txn_port.py; None on a controller-only node)
    share: SharePort | None = None  # the share port (groupcoord/share_port.py; None on a controller-only node)
    auto_create_topics: bool = True
    default_partitions: int = 1
    default_replication_factor: int = 1
    request_timeout_ms: int = 30_000
    node_config: Any | None = None  # raftlog.node.config.NodeConfig: broker configs (read-only)
    # With ACLs on: the node's current authorizer (the guard below is made from it when not given).
    authorizer_of: Callable[[], Authorizer] | None = None
    cache: dict[str, Any] = field(default_factory=dict)  # derived from an image, keyed by use
    # Blocking disk work of the listener (sending zero-copy fetch ranges) runs
    # in worker threads, at most this many at once.
    disk_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(DISK_THREADS))
    # The node's one ACL guard (raftlog/node/authorize.py), shared with the native listener;
    # made from `authorizer_of` when not given.
    guard: Guard | None = None
    # The broker's KIP-227 fetch sessions (fetch_sessions.py); None: every fetch sessionless.
    fetch_sessions: FetchSessionCache | None = None
    # Client quotas' rates (raftlog/node/quotas.py; bounds from the image); None: not enforced.
    quotas: QuotaManager | None = None

    def __post_init__(self) -> None:
        if self.guard is None:
            self.guard = Guard(self.authorizer_of)

    def access(self) -> Access:
        """What the current connection's principal may do (everything, without ACLs;
        nothing, with ACLs but no current connection)."""
        guard = self.guard
        assert guard is not None  # __post_init__
        connection = _CONNECTION.get()
        if connection is None:
            return guard.nobody()
        return guard.access(connection.principal, connection.host)

    def authorized_operations(self, rt: ResourceType, name: str, asked: bool = True) -> set[int] | None:
        """KIP-430: the operations (Kafka's codes) the connection's principal may do on the
        resource, as kafka-python's `bitfield` fields take them; None (INT32_MIN on the wire,
        Kafka's "not asked") when the request did not ask. `bit_field` makes an int32 field's."""
        return self.access().authorized_operations(rt, name) if asked else None

    def port(self) -> GuardedPartitions:
        """The partition port behind the current connection's ACLs. Raises NotLeaderError
        on a node that hosts no partitions (a controller-only node)."""
        if self.replicas is None:
            raise NotLeaderError(f"node {self.node_id} is not a broker")
        return GuardedPartitions(self.replicas, self.access())

    def admin(self) -> GuardedMetadata:
        """The metadata port (metadata/port.py: Metadata, topics, configs, quotas, features,
        ACLs, SCRAM users, elections, reassignments, the quorum) behind the current
        connection's ACLs."""
        return GuardedMetadata(self.metadata, self.access())

    def group_port(self) -> GuardedGroups:
        """The group port behind the current connection's ACLs. Raises NotCoordinatorError
        on a node without a group coordinator (a controller-only node): the client asks
        FindCoordinator again."""
        if self.groups is None:
            raise NotCoordinatorError(f"node {self.node_id} has no group coordinator")
        return GuardedGroups(self.groups, self.access())

    def txn_port(self) -> GuardedTxn:
        """The transaction port behind the current connection's ACLs. Raises
        NotCoordinatorError on a node without a transaction coordinator."""
        if self.txn is None:
            raise NotCoordinatorError(f"node {self.node_id} has no transaction coordinator")
        return GuardedTxn(self.txn, self.access())

    def share_port(self) -> GuardedShare:
        """The share port (KIP-932) behind the current connection's ACLs. Raises
        NotCoordinatorError on a node without share groups (a controller-only node)."""
        if self.share is None:
            raise NotCoordinatorError(f"node {self.node_id} has no share-group coordinator")
        return GuardedShare(self.share, self.access())


@dataclass
class ConnectionState:
    """Per-connection state. `session` (raftlog/node/auth.py; None on a listener without
    security) says who the connection is: complete at once for PLAINTEXT/SSL (the client
    certificate's principal, or User:ANONYMOUS), after SaslHandshake + SaslAuthenticate for
    SASL (sasl.py). Until then the listener runs only ApiVersions and those two.
    `close_reason`, when a handler sets it, closes the connection after that response."""

    peer: str
    session: Session | None = None
    api_versions_seen: bool = False
    client_software: tuple[str, str] | None = None
    close_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Set by the listener: record(quota type, client id, value) -> the throttle time in ms of
    # a client over its quota (raftlog/node/quotas.py); the connection is muted that long.
    record_quota: Callable[[str, str, float], int] | None = None

    @property
    def host(self) -> str:
        return self.peer.rsplit(":", 1)[0]

    @property
    def principal(self) -> str:
        return ANONYMOUS if self.session is None else self.session.principal

    @property
    def authenticated(self) -> bool:
        return self.session is None or self.session.complete

    def authenticate(self) -> bool:
        """Whether requests other than the authentication ones may run."""
        return self.authenticated

    def enter(self) -> None:
        """Make this the current connection of the calling task (and the tasks it starts)."""
        _CONNECTION.set(self)


@dataclass(frozen=True, slots=True)
class Call:
    header: Header
    request: ApiMessage
    connection: ConnectionState

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class Encoded:
    chunks: list[Chunk]


@dataclass(frozen=True, slots=True)
class Later:
    fn: Callable[[], Awaitable["ApiMessage | ProduceAnswer | Encoded | None"]]


Reply: TypeAlias = "ApiMessage | ProduceAnswer | Encoded | Later | None"
Handler = Callable[[KafkaContext, Call], Awaitable[Reply]]

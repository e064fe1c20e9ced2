"""What Kafka API handlers get: the node's services (`KafkaContext`), one request (`Call`)
and its connection's state (`ConnectionState`), and what they may return (`Reply`).

Handlers are protocol translation only: they turn a decoded Kafka request into calls of the
same service code the native protocol uses (`ctx.call(op, fields)` runs the native client
handler of that op; `ctx.replicas` / `ctx.metadata` for the few paths that need more, e.g.
zero-copy fetch), and the answers into the Kafka response.

A handler returns one of:
* a response message (kafka-python ApiMessage of the response class): encoded at the
  request's version;
* `Encoded(chunks)`: a response already encoded (zero-copy fetch);
* `Later(fn)`: `await fn()` gives one of the above; run in its own task so that the next
  request of the connection starts meanwhile (long polls, acks=all waits, admin ops);
* None: no response (Produce with acks=0).
Handlers are called one at a time per connection, in request order, so what a handler does
before returning (e.g. Produce's appends) happens in request order; responses are written
in request order too (Kafka's guarantee), whatever order the `Later`s finish in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import trio

from raftlog.base.errors import InvalidRequestError
from raftlog.base.protocol import Request
from raftlog.node.kafka.wire import Chunk, Header

if TYPE_CHECKING:  # kafka-python loads on the first Kafka request, not with the node
    from kafka.protocol.api_message import ApiMessage

DISK_THREADS = 4

__all__ = ["KafkaContext", "ConnectionState", "Call", "Encoded", "Later", "Reply", "Handler"]

NativeHandler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


@dataclass
class KafkaContext:
    """The node's services as the Kafka handlers see them (built once per listener)."""

    node_id: int
    cluster_id: str
    client_handlers: Mapping[str, NativeHandler]
    metadata: Any  # metadata.service.MetadataService: image, controller_id, kafka_address()
    replicas: Any | None  # partition.manager.ReplicaManager (None on a controller-only node)
    auto_create_topics: bool = True
    default_partitions: int = 1
    default_replication_factor: int = 1
    request_timeout_ms: int = 30_000
    cache: dict[str, Any] = field(default_factory=dict)  # derived from an image, keyed by use
    # Blocking disk work of the listener (sending zero-copy fetch ranges) runs
    # in worker threads, at most this many at once.
    disk_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(DISK_THREADS))
    _next_id: int = 0

    async def call(self, op: str, fields: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Run the native client handler of `op` with `fields`; raises what it raises
        (RaftlogError subclasses for definite and unknown-outcome failures)."""
        handler = self.client_handlers.get(op)
        if handler is None:
            raise InvalidRequestError(f"this node does not serve {op}")
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        return await handler(Request(self._next_id, op, fields))


@dataclass
class ConnectionState:
    """Per-connection state. `principal` is who the connection authenticated as: today every
    connection is anonymous (`authenticate()` is a no-op that accepts); the security work
    fills in SASL (SaslHandshake/SaslAuthenticate handlers set `principal`, and the listener
    refuses other requests until `authenticated`)."""

    peer: str
    principal: str = "User:ANONYMOUS"
    authenticated: bool = True
    api_versions_seen: bool = False
    client_software: tuple[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def authenticate(self) -> bool:
        """Whether requests other than the authentication ones may run. No-op today."""
        return self.authenticated


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
    fn: Callable[[], Awaitable["ApiMessage | Encoded | None"]]


Reply: TypeAlias = "ApiMessage | Encoded | Later | None"
Handler = Callable[[KafkaContext, Call], Awaitable[Reply]]

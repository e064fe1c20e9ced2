"""The REST proxy's access to the cluster, behind one small Protocol (`BrokerPort`), and its
implementation over the node's native client handlers (`NodeBroker`): the one place to repoint
at the partition port.

Produce, fetch and list offsets run the same native client handler the native listener runs
(so ACLs, limits and validation are the ones every client meets), on the node that leads the
partition: here when this node leads it, else on the leader through the peer op `proxy_call`
(which runs that node's handler with the caller's principal). Group ops go to the group's
coordinator the same way; admin ops run here (the node forwards them to the controller).
`NodeBroker` is also a NodeService so the peer op is served; main.py gives it the node's merged
(and, with ACLs, guarded) client handlers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import trio

from metadata.image import MetadataImage
from raftlog.base.errors import (
    CoordinatorLoadInProgressError, CoordinatorNotAvailableError, InvalidRequestError, NotCoordinatorError,
    NotLeaderError, PeerUnavailableError, RaftlogError, error_from_wire,
)
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Later, Request

__all__ = ["BrokerPort", "NodeBroker", "PROXIED_OPS"]

PEER_TIMEOUT_S: Final = 35.0  # above the ops' own 30 s deadlines
LEADER_WAIT_S: Final = 10.0
RETRY_BACKOFF_S: Final = 0.1
# What `proxy_call` runs for another node's proxy: partition and group ops (admin ops are
# forwarded to the controller by the node itself).
PARTITION_OPS: Final = frozenset({"produce", "fetch", "list_offsets"})
GROUP_OPS: Final = frozenset({"offset_commit", "offset_fetch", "describe_groups", "delete_groups"})
PROXIED_OPS: Final = PARTITION_OPS | GROUP_OPS | {"list_groups"}

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


class BrokerPort(Protocol):
    """What the REST proxy needs from the cluster. Every method raises RaftlogError subclasses
    (the native codes: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED, ...)."""

    cluster_id: str

    def image(self) -> Any:
        """The node's metadata image (topics, partitions, brokers)."""
        ...

    async def produce(self, topic: str, partition: int, batch: bytes, principal: str | None,
                      host: str | None) -> Mapping[str, Any]:
        """Append one record batch with acks=all; its partition answer (`base_offset`)."""
        ...

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, principal: str | None,
                    host: str | None) -> Mapping[str, Any]:
        """Committed record batches from `offset`; the partition answer (`records`, `high_watermark`)."""
        ...

    async def list_offsets(self, topic: str, partition: int, timestamp: int, principal: str | None,
                           host: str | None) -> int:
        """The offset for `timestamp` (-2 earliest, -1 latest)."""
        ...

    async def call(self, op: str, fields: Mapping[str, Any], principal: str | None, host: str | None,
                   group_id: str | None = None) -> Mapping[str, Any]:
        """Any other native client op (admin ops here; with `group_id`, on its coordinator;
        `list_groups` on every broker, merged)."""
        ...


class NodeBroker:
    """BrokerPort over this node's client handlers and its peers (see the module docstring)."""

    name = "rest_proxy"

    def __init__(self, node_id: int, cluster_id: str, image_of: Callable[[], MetadataImage], peers: PeerPool) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._image_of = image_of
        self.peers = peers
        self.handlers: Mapping[str, Handler] = {}  # set by main.py once every service's are merged
        self.client_handlers: Mapping[str, Handler] = {}
        self.peer_handlers: Mapping[str, Handler] = {"proxy_call": self._peer_call}
        self._next_id = 0

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    def on_image(self, image: MetadataImage) -> None:
        return None

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    async def drain(self) -> None:
        return None

    # ------------------------------------------------------------------ BrokerPort

    def image(self) -> MetadataImage:
        return self._image_of()

    async def _local(self, op: str, fields: Mapping[str, Any], principal: str | None, host: str | None) -> Mapping[str, Any]:
        handler = self.handlers.get(op)
        if handler is None:
            raise InvalidRequestError(f"this node does not serve {op}")
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        answer = await handler(Request(self._next_id, op, dict(fields), principal, host))
        if isinstance(answer, Later):  # an inline handler's part that waits (acks=all, a long poll)
            answer = await answer.wait()
        return answer or {}

    async def _on(self, node: int | None, op: str, fields: Mapping[str, Any], principal: str | None,
                  host: str | None) -> Mapping[str, Any]:
        if node is None or node == self.node_id:
            return await self._local(op, fields, principal, host)
        broker = self._image_of().broker(node)
        if broker is None:
            raise NotLeaderError(f"node {node} is not known")
        return await self.peers.call(f"{broker.peer_host}:{broker.peer_port}", "proxy_call",
                                     {"proxied_op": op, "fields": dict(fields), "principal": principal, "host": host},
                                     timeout_s=PEER_TIMEOUT_S)

    def _leader(self, topic: str, partition: int) -> int | None:
        state = self._image_of().partition(topic, partition)
        return None if state is None or state.reported_leader < 0 else state.leader

    async def _partition_op(self, op: str, topic: str, partition: int, fields: dict[str, Any],
                            principal: str | None, host: str | None) -> Mapping[str, Any]:
        """Run `op` on the partition's leader; while it has none, or the one asked is not it
        (an election, a topic just created), ask again for up to LEADER_WAIT_S, as a Kafka
        client does. Only refusals that mean "nothing done" are retried (never a timeout)."""
        deadline = trio.current_time() + LEADER_WAIT_S
        while True:
            try:
                leader = self._leader(topic, partition)
                if leader is None:
                    raise NotLeaderError(f"{topic}-{partition} has no leader")
                answer = await self._on(leader, op, fields, principal, host)
                parts = answer.get("partitions") or []
                if not parts:
                    raise InvalidRequestError(f"{op} got no answer for {topic}-{partition}")
                part = parts[0]
                if part.get("error"):
                    raise error_from_wire(part["error"])
                return part
            except (NotLeaderError, PeerUnavailableError) as exc:
                if trio.current_time() > deadline:
                    raise NotLeaderError(str(exc.message or exc)) from None
                await trio.sleep(RETRY_BACKOFF_S)

    async def produce(self, topic: str, partition: int, batch: bytes, principal: str | None,
                      host: str | None) -> Mapping[str, Any]:
        return await self._partition_op("produce", topic, partition, {
            "acks": -1, "timeout_ms": 30_000,
            "partitions": [{"topic": topic, "partition": partition, "records": batch}]}, principal, host)

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, principal: str | None,
                    host: str | None) -> Mapping[str, Any]:
        return await self._partition_op("fetch", topic, partition, {
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes,
            "partitions": [{"topic": topic, "partition": partition, "fetch_offset": offset, "max_bytes": max_bytes}],
        }, principal, host)

    async def list_offsets(self, topic: str, partition: int, timestamp: int, principal: str | None,
                           host: str | None) -> int:
        part = await self._partition_op("list_offsets", topic, partition, {
            "partitions": [{"topic": topic, "partition": partition, "timestamp": timestamp}]}, principal, host)
        return int(part["offset"])

    async def call(self, op: str, fields: Mapping[str, Any], principal: str | None, host: str | None,
                   group_id: str | None = None) -> Mapping[str, Any]:
        if op == "list_groups":
            groups: list[Any] = []
            for node in sorted(self._image_of().brokers):
                try:
                    groups += (await self._on(node, op, fields, principal, host)).get("groups", [])
                except RaftlogError:
                    continue  # a broker down: its groups are missing from the list, as Kafka's tools
            return {"groups": groups}
        if group_id is None:
            return await self._local(op, fields, principal, host)
        # The group's coordinator: while there is none yet (`__consumer_offsets` being created,
        # its partition loading or moving), ask again for up to LEADER_WAIT_S, as a Kafka client
        # does. These refusals mean nothing was done, so a retry cannot do anything twice.
        deadline = trio.current_time() + LEADER_WAIT_S
        while True:
            try:
                coordinator = await self._local("find_coordinator", {"group_id": group_id}, principal, host)
                return await self._on(int(coordinator["node_id"]), op, fields, principal, host)
            except (CoordinatorNotAvailableError, CoordinatorLoadInProgressError, NotCoordinatorError,
                    PeerUnavailableError):
                if trio.current_time() > deadline:
                    raise
                await trio.sleep(RETRY_BACKOFF_S)

    # ------------------------------------------------------------------ peer op

    async def _peer_call(self, request: Request) -> Mapping[str, Any]:
        f = request.fields
        op = f.get("proxied_op")
        if op not in PROXIED_OPS or not isinstance(f.get("fields"), dict):
            raise InvalidRequestError(f"proxy_call does not run {str(op)[:40]}")
        principal = f.get("principal") if isinstance(f.get("principal"), str) else None
        host = f.get("host") if isinstance(f.get("host"), str) else None
        return await self._local(op, f["fields"], principal, host)

"""The metadata service (a NodeService): every node's view of the metadata log, the active
controller on the quorum leader, the local broker's registration and heartbeats, and the
client ops answered from the image. It composes the pieces below and is the only one other
services talk to.

    MetadataService(settings, cluster_id, peers, quorum_factory=..., registry=..., clock_ms=..., rng=...)

Where the log comes from:
* Voters run the metadata quorum (metadata/quorum.py's port; the node injects PySyncObj's,
  raftlog/node/metadata_quorum.py). Each committed envelope arrives via `on_commit(index,
  bytes)` in index order and is applied by the loader (loader.py), which keeps the envelopes
  so broker-only nodes can fetch them.
* Broker-only nodes long-poll a voter's peer op `metadata_fetch` (log_fetch.py).
Either way each new image goes, in order and on the trio thread, first to the active
controller, then to every subscriber (`subscribe(callback)`; the node subscribes every other
service's `on_image`). An envelope that does not decode is fatal (the node stops).

The pieces, each owning its state:
* loader.py             `MetadataLoader`: image, applied index, envelopes, listeners;
* active_controller.py  `ActiveController` (voters): activation, the tick loop (fencing, internal
                        topics, preferred leaders), proposals, controller and admin ops;
* log_fetch.py          `MetadataFetcher` (broker-only nodes) and the voters' `answer_fetch`;
* broker_lifecycle.py   `BrokerLifecycle` (brokers): register, heartbeat, controlled shutdown.
This module owns the routing between them: a controller call runs here when this node is the
controller, else goes to the controller's peer listener (`_controller_call`); and the client
ops below.

Client ops: metadata (answered from the local image), create_topic, create_partitions, delete_topic,
alter_configs, alter_broker_configs, alter_group_configs, elect_leaders (controller; forwarded to it with the peer op `controller_forward` when this
node is not it), describe_configs and describe_group_configs (local image), cluster_status (the controller's view when it
can be reached within a second or two, else this node's own).
Peer ops: the controller ops (broker_register, broker_heartbeat, broker_shutdown,
report_partition_leader, report_partition_leaders, allocate_producer_ids, controller_forward),
metadata_fetch (voters).

To other services: `image`, `node_id`, `controller_id`, `applied_index`,
`await report_partition_leader(...)`, `await report_partition_leaders([LeaderReport])`,
`await allocate_producer_ids()`, `peer_address(id)`,
`client_address(id)`, `await wait_for(predicate, timeout_s)`, `controller_problem()`.

Truth under failure (issue 20): `controller_problem()` says why this node cannot vouch for
its image right now ("no quorum: ..." on a voter whose quorum has no leader, "controller
unreachable: ..." when its broker's heartbeats have gone unanswered for session_timeout_ms);
`metadata` answers carry it, and mark each partition `offline` with a reason when its leader
is none or a fenced broker by the image, when this node's own replica of it knows no leader
(`partition_view`, injected by the node: the partition's Raft group is the authority), or,
with a controller problem, when no replica here can vouch for it. A partition whose replica
here knows a leader of a newer epoch than the image's is answered with that leader and epoch
(`partition_now`): the group elected it, and the image has not heard yet (issue 19: when the
controller's node dies with the leaders, the report waits for a new controller).
`cluster_status` answered without the controller says so (`view`: "local",
`controller_problem`).

Clock: one, trio's. `clock_ms` (default: trio's clock in ms) is the `now_ms` of the
Controller's decisions, which compares it only with itself (heartbeat ages, session
timeouts); deadlines and waits are trio's. So a test on `trio.testing.MockClock` drives the
heartbeat and fencing timers without injecting anything else.
Concurrency: everything runs on the node's trio thread.
May import: raftlog.base and metadata's other modules.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import trio

from metadata import broker_config, features, quota_ops, security_ops
from metadata.active_controller import (
    ADMIN_OPS,
    CONTROLLER_OPS,
    ActiveController,
)
from metadata.broker_lifecycle import BrokerLifecycle
from metadata.controller import Controller, LeaderReport, validate_topic_name
from metadata.image import MetadataImage, PartitionState
from metadata.loader import MetadataLoader, hostport
from metadata.log_fetch import MetadataFetcher, answer_fetch
from metadata.port import ClusterView, PartitionView, TopicView
from metadata.port_ops import MetadataPortOps, complete_topic
from metadata.quorum import Quorum, QuorumFactory
from metadata.records import UserScramCredential
from metadata.settings import MetadataSettings
from raftlog.base.errors import (
    InvalidTopicError,
    NotControllerError,
    PeerUnavailableError,
    RaftlogError,
    RequestTimedOutError,
    SecurityDisabledError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import Metric, MetricsRegistry, counter_family, gauge_family
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field

__all__ = ["MetadataService", "ADMIN_OPS"]

logger = logging.getLogger(__name__)

MISSING_TOPIC_WAIT_S: Final = 0.5  # read-your-writes grace for a topic created a moment ago
STATUS_FORWARD_S: Final = 2.0

Handler = Callable[[Request], Awaitable[Mapping | None]]


def _trio_ms() -> int:
    return int(trio.current_time() * 1000)


class MetadataService(MetadataPortOps):
    """One per node (voter or not). See the module docstring."""

    name = "metadata"

    def __init__(
        self,
        settings: MetadataSettings,
        cluster_id: str,
        peers: PeerPool,
        *,
        quorum_factory: QuorumFactory | None = None,
        registry: MetricsRegistry | None = None,
        clock_ms: Callable[[], int] = _trio_ms,
        rng: random.Random | None = None,
        bootstrap_credentials: tuple[UserScramCredential, ...] = (),
        incarnation: tuple[str | None, str] | None = None,
    ) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.cluster_id = cluster_id
        self.peers = peers
        self._clock_ms = clock_ms
        rng = rng if rng is not None else random.Random()
        registry = registry if registry is not None else MetricsRegistry()
        self._voter_peers = dict(settings.voter_peers)
        self._voter_quorum = dict(settings.voter_quorum)
        self._loader = MetadataLoader(keep_envelopes=settings.is_controller)
        # (topic, partition) -> (a replica is open here, the leader it knows or None, its
        # epoch); set by the node to its ReplicaManager's `local_leader` on brokers.
        self.partition_view: Callable[[str, int], tuple[bool, int | None, int]] | None = None
        # [[topic, partition, bytes]] of the partitions this broker leads; set by the node to
        # its ReplicaManager's `leader_partition_bytes`; sent with each heartbeat (balancer).
        self.partition_bytes: Callable[[], list[list[Any]]] | None = None
        # The internal partitions whose coordinator is busy here (the coordinator services'
        # `busy_partitions`, set by the node); sent with each heartbeat: the controller does
        # not move them meanwhile (metadata/reassignment.py "Busy coordinators").
        self.busy_partitions: Callable[[], list[dict[str, Any]]] | None = None
        self._broker = BrokerLifecycle(settings, self._controller_call, rng, clock_ms,
                                       incarnation=incarnation) if settings.is_broker else None
        if self._broker is not None:
            self._broker.partition_bytes = lambda: self.partition_bytes() if self.partition_bytes else []
            self._broker.busy_partitions = lambda: self.busy_partitions() if self.busy_partitions else []
        self._quorum: Quorum | None = None
        self._active: ActiveController | None = None
        self._fetcher: MetadataFetcher | None = None
        if settings.is_controller:
            if quorum_factory is None:
                raise ValueError("a controller needs a quorum_factory (the node passes PySyncObj's)")
            self._quorum = quorum_factory(on_commit=self._loader.apply, on_leader_change=self._on_leader_change)
            self._active = ActiveController(
                settings, self._quorum, self._loader, peers, voter_count=len(self._voter_quorum),
                clock_ms=clock_ms, rng=rng, registry=registry, status=self._cluster_status,
                on_ready=self._wake_broker, bootstrap_credentials=bootstrap_credentials,
            )  # fmt: skip
            self._loader.listen(self._active.on_image)
        else:
            self._fetcher = MetadataFetcher(self._loader, peers, self._voter_peers, rng, self._wake_broker)
        self.client_handlers: Mapping[str, Handler] = {
            "metadata": self._client_metadata,
            "create_topic": self._client_admin,
            "create_partitions": self._client_admin,
            "delete_topic": self._client_admin,
            "alter_configs": self._client_admin,
            "alter_broker_configs": self._client_admin,
            "alter_group_configs": self._client_admin,
            "elect_leaders": self._client_admin,
            "alter_partition_reassignments": self._client_admin,
            "list_partition_reassignments": self._client_admin,
            "decommission_broker": self._client_admin,
            "balance": self._client_admin,
            "add_controller": self._client_admin,
            "remove_controller": self._client_admin,
            "recommission_broker": self._client_admin,
            "describe_configs": self._client_describe_configs,
            "cluster_status": self._client_cluster_status,
            "alter_client_quotas": self._client_admin,
            "describe_client_quotas": self._client_describe_quotas,
            "update_features": self._client_admin,
            "describe_features": self._client_describe_features,
            "describe_broker_configs": self._client_describe_broker_configs,
            "describe_group_configs": self._client_describe_group_configs,
        } | {op: self._client_admin for op in security_ops.ADMIN_SECURITY_OPS} | {
            op: self._client_security_describe for op in security_ops.DESCRIBE_SECURITY_OPS
        }
        self.peer_handlers: Mapping[str, Handler] = {
            op: self._peer_controller_op for op in CONTROLLER_OPS
        } | {"metadata_fetch": self._peer_metadata_fetch}
        registry.gauge(
            "raftlog_metadata_applied_index", "Metadata log entries replayed into this node's image."
        ).set_function(lambda: self.applied_index)
        registry.gauge(
            "raftlog_metadata_active_controller", "1 while this node is the ready active controller."
        ).set_function(lambda: 1 if self.is_active_controller else 0)
        registry.gauge(
            "raftlog_metadata_broker_fenced", "1 while this node's broker is fenced (or unregistered)."
        ).set_function(lambda: 1 if self.fenced else 0)
        self._quorum_leader_changes = registry.counter(
            "raftlog_controller_quorum_leader_changes_total",
            "Metadata quorum leader changes this voter saw (Kafka: raft-metrics election counts).")
        registry.collector(self._collect_metrics)

    # ------------------------------------------------------------------ public API

    @property
    def image(self) -> MetadataImage:
        return self._loader.image

    @property
    def applied_index(self) -> int:
        return self._loader.applied_index

    @property
    def controller_id(self) -> int | None:
        """The active controller's node id as this node knows it (None: unknown)."""
        if self._quorum is not None:
            return self._quorum.leader_id
        assert self._fetcher is not None
        return self._fetcher.controller_id

    @property
    def is_active_controller(self) -> bool:
        return self._active is not None and self._active.ready() is not None

    @property
    def registered(self) -> bool:
        """This node's broker is registered with the controller (False on a non-broker)."""
        return self._broker is not None and self._broker.registered

    @property
    def fenced(self) -> bool:
        """This node's broker is fenced, or unregistered (True on a non-broker)."""
        return self._broker is None or self._broker.fenced

    def _controller_peer(self, node_id: int) -> str | None:
        """A controller's peer listener: the configured one, or (a voter added on a running
        cluster, issue 44) the peer address its broker registered."""
        address = self._voter_peers.get(node_id)
        if address is None:
            broker = self.image.brokers.get(node_id)
            if broker is not None:
                address = f"{broker.peer_host}:{broker.peer_port}"
        return address

    def _quorum_voters(self) -> dict[int, str]:
        """The metadata quorum's voters: the running quorum's (they change, issue 44) on a
        voter, the configured ones elsewhere."""
        return self._quorum.voters if self._quorum is not None else dict(self._voter_quorum)

    def quorum_status(self) -> dict[str, Any] | None:
        """The metadata quorum's status on a voter (raftlog/node/metadata_quorum.py
        `status()`: term, leader_id, raft_commit_index, log_end_index, match_index, ...);
        None on a node that is not a voter."""
        return None if self._quorum is None else self._quorum.status()

    def controller_problem(self) -> str | None:
        """Why this node cannot vouch for its metadata now (module docstring), or None."""
        quorum_voters = self._quorum_voters()
        voters = ", ".join(map(str, sorted(quorum_voters)))
        majority = len(quorum_voters) // 2 + 1
        if self._quorum is not None:
            if self._quorum.leader_id is None:
                return (f"no quorum: the metadata quorum (voters {voters}) has no leader; {majority} of "
                        f"{len(quorum_voters)} voters must be up and reach each other")
            if not self._quorum.status().get("has_quorum", True):
                # PySyncObj keeps naming its last leader while it reaches no other voter.
                return (f"no quorum: node {self.node_id} reaches fewer than {majority} of the metadata "
                        f"quorum's voters ({voters})")
        if self._broker is not None:
            silent_ms = self._broker.silent_ms(self._clock_ms())
            if silent_ms is not None and silent_ms > self.settings.session_timeout_ms:
                return (f"controller unreachable: node {self.node_id}'s heartbeats got no answer for "
                        f"{silent_ms / 1000:.1f} s (controller {self.controller_id}, voters {voters})")
        if self.controller_id is None:
            return f"controller unreachable: node {self.node_id} knows no active controller (voters {voters})"
        return None

    def partition_now(self, topic: str, p: PartitionState) -> tuple[PartitionState, bool, bool]:
        """(partition `p` of `topic` with the leader this node's replica of it knows where that
        is newer than the image's, a replica is open here, that replica knows a leader).
        The partition's Raft group elects and the image learns it from the winner's leader
        report through the active controller, which a failover that kills the controller's
        node too delays by a controller election (1,000 partitions: the median partition
        waited 1.2-2.8 s against 0.7 s). A newer epoch from the group itself is what that
        report will say; an older or equal one never overrides the image."""
        hosted, leader, epoch = self.partition_view(topic, p.partition) if self.partition_view else (False, None, -1)
        if leader is not None and (epoch > p.leader_epoch or (epoch == p.leader_epoch and p.leader < 0)):
            p = replace(p, leader=leader, leader_epoch=epoch)
        return p, hosted, leader is not None

    def partition_problem(self, p: PartitionState, hosted: bool, knows_leader: bool,
                          controller_problem: str | None) -> str | None:
        """Why partition `p` (from `partition_now`) has no live leader as this node sees it,
        or None."""
        why = self._loader.image.leader_problem(p)
        if why is not None:
            return why
        if hosted and not knows_leader:
            return (f"no leader: node {self.node_id}'s replica sees none (an election, or most of "
                    "its replicas are down)")
        if controller_problem is not None and not hosted:
            return f"unknown: no replica on node {self.node_id} and {controller_problem}"
        return None

    def subscribe(self, callback: Callable[[MetadataImage], None]) -> None:
        """Call `callback(image)` on the trio thread after every replayed envelope, in order.
        It must not block; an exception from it stops the node (a subscriber that missed an
        image would be silently wrong)."""
        self._loader.listen(callback)

    def on_image(self, image: MetadataImage) -> None:
        """NodeService hook: this service is the source of images, so nothing to do."""

    def peer_address(self, broker_id: int) -> str | None:
        return self._loader.peer_address(broker_id)

    def client_address(self, broker_id: int) -> str | None:
        return self._loader.client_address(broker_id)

    def kafka_address(self, broker_id: int) -> tuple[str, int] | None:
        """The broker's advertised Kafka listener (None: unknown broker, or none registered)."""
        reg = self._loader.image.broker(broker_id)
        if reg is None or reg.kafka_host is None or reg.kafka_port is None:
            return None
        return reg.kafka_host, reg.kafka_port

    async def wait_for(self, predicate: Callable[[MetadataImage], Any], timeout_s: float) -> Any:
        """Wait until `predicate(image)` is truthy and return its value; raises
        RequestTimedOutError after `timeout_s`."""
        return await self._loader.wait_for(predicate, timeout_s)

    async def report_partition_leader(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int, *, timeout_s: float = 5.0
    ) -> bool:
        """Tell the active controller who leads a partition (a PartitionChange if newer).
        Returns True when a change was recorded. Raises NotControllerError, RequestTimedOutError,
        PeerUnavailableError, or the controller's error (e.g. UNKNOWN_TOPIC_OR_PARTITION)."""
        fields = {"topic": topic, "partition": partition, "leader_id": leader_id,
                  "leader_epoch": leader_epoch}
        result = await self._controller_call("report_partition_leader", fields, timeout_s)
        return bool(result.get("changed"))

    async def report_partition_leaders(
        self, reports: list[LeaderReport], *, timeout_s: float = 5.0
    ) -> list[dict[str, Any]]:
        """Tell the active controller who leads many partitions, in one call (at most
        MAX_LEADER_REPORTS): one result per report, in order, {"changed": bool} or {"error":
        wire error}. Raises NotControllerError, RequestTimedOutError, PeerUnavailableError
        for the whole call."""
        fields = {"reports": [r.to_obj() for r in reports]}
        result = await self._controller_call("report_partition_leaders", fields, timeout_s)
        results = result.get("results")
        if not isinstance(results, list) or len(results) != len(reports):
            raise UnknownServerError("report_partition_leaders: the answer does not match the reports")
        return results

    async def report_partition_membership(
        self, topic: str, partition: int, voters: tuple[int, ...], learners: tuple[int, ...],
        *, timeout_s: float = 5.0,
    ) -> bool:
        """Tell the active controller a partition's committed Raft membership (its leader
        does, while the partition moves): ends the move when it is the target. Returns True
        when that was recorded. Raises like `report_partition_leader`."""
        fields = {"topic": topic, "partition": partition, "voters": list(voters), "learners": list(learners)}
        result = await self._controller_call("report_partition_membership", fields, timeout_s)
        return bool(result.get("changed"))

    async def allocate_producer_ids(self, *, timeout_s: float = 5.0) -> tuple[int, int]:
        """A fresh block of producer ids for this broker: (first_producer_id, size)."""
        result = await self._controller_call(
            "allocate_producer_ids", {"broker_id": self.node_id}, timeout_s
        )
        return result["first_producer_id"], result["size"]

    async def create_topic(self, name: str, *, partitions: int, replication_factor: int,
                           configs: Mapping[str, str], timeout_ms: int) -> None:
        """Have the active controller create a topic (an internal one a service needs, e.g.
        `__share_group_state`); raises what the create_topic op raises (TOPIC_ALREADY_EXISTS...)."""
        await self._client_admin(Request(0, "create_topic", {
            "name": name, "partitions": partitions, "replication_factor": replication_factor,
            "configs": dict(configs), "timeout_ms": timeout_ms}))

    async def ensure_transaction_state_topic(self, *, timeout_s: float = 5.0) -> bool:
        """Ask the controller to create `__transaction_state` if it does not exist yet (the
        first transactional FindCoordinator does); True when this call created it."""
        result = await self._controller_call("ensure_transaction_state", {}, timeout_s)
        return bool(result.get("created"))

    def health(self) -> dict[str, Any]:
        controller_id = self.controller_id
        report: dict[str, Any] = {
            "applied_index": self.applied_index,
            "controller_id": controller_id,
            "active_controller": self.is_active_controller,
        }
        ok = controller_id is not None
        if self._quorum is not None:
            status = self._quorum.status()
            report["quorum"] = {k: status[k] for k in ("term", "leader_id", "has_quorum", "commit_index", "voters")}
        if self._broker is not None:
            report["broker"] = {"registered": self._broker.registered, "fenced": self._broker.fenced,
                                "incarnation_id": self._broker.incarnation_id}
            ok = ok and self._broker.registered and not self._broker.fenced
        report["ok"] = ok
        return report

    def _collect_metrics(self) -> list[Metric]:
        """The controller's families (Kafka's KafkaController MBeans): as in Kafka, only the
        active controller reports offline partitions and broker counts (others report 0), so
        a sum over the cluster counts each once; alert on sum(active_controller_count) != 1."""
        active = self.is_active_controller
        image = self._loader.image
        offline = len(image.offline_partitions()) if active else 0
        fenced = len(image.fenced_broker_ids()) if active else 0
        unfenced = len(image.unfenced_broker_ids()) if active else 0
        guard: dict[str, Any] = {} if self._quorum is None else self._quorum.status()
        return [
            counter_family("raftlog_quorum_refused_connections_total",
                           "Connections the metadata quorum port closed before or instead of "
                           "trusting them (issue 39), by reason (voters only).", ("reason",),
                           {(r,): n for r, n in guard.get("refused_connections", {}).items()}),
            counter_family("raftlog_quorum_unpickle_rejections_total",
                           "Authenticated quorum messages refused by the unpickling whitelist.",
                           (), {(): guard["unpickle_rejections"]} if "unpickle_rejections" in guard else {}),
            gauge_family("raftlog_controller_active_controller_count",
                         "1 on the active controller, else 0. Kafka: ActiveControllerCount; "
                         "Redpanda: redpanda_cluster_controller_is_leader.", (), {(): 1 if active else 0}),
            gauge_family("raftlog_controller_offline_partitions_count",
                         "Partitions with no live leader (none, or a fenced broker); active "
                         "controller only. Kafka: OfflinePartitionsCount; Redpanda: "
                         "redpanda_cluster_unavailable_partitions.", (), {(): offline}),
            gauge_family("raftlog_controller_fenced_broker_count",
                         "Registered brokers that are fenced; active controller only. Kafka: "
                         "FencedBrokerCount.", (), {(): fenced}),
            gauge_family("raftlog_controller_active_broker_count",
                         "Registered brokers that are not fenced; active controller only. Kafka: "
                         "ActiveBrokerCount; Redpanda: redpanda_cluster_brokers.", (), {(): unfenced}),
        ]

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the quorum and the controller role (voters) or the metadata fetch loop
        (broker-only nodes), and the broker; report started once the quorum port is bound."""
        async with trio.open_nursery() as nursery:
            if self._quorum is not None:
                assert self._active is not None
                await nursery.start(self._quorum.run)
                nursery.start_soon(self._active.run)
            else:
                assert self._fetcher is not None
                nursery.start_soon(self._fetcher.run)
            if self._broker is not None:
                nursery.start_soon(self._broker.run)
            task_status.started()

    async def drain(self) -> None:
        """Before shutdown (SIGTERM): a controlled shutdown of the local broker."""
        if self._broker is not None:
            await self._broker.drain()

    def _on_leader_change(self, leader_id: int | None, term: int) -> None:
        log_event(logger, "quorum_leader", leader_id=leader_id, term=term)
        self._quorum_leader_changes.inc()
        assert self._active is not None
        self._active.on_leader_change()
        self._wake_broker()  # a new controller: heartbeat it now

    def _wake_broker(self) -> None:
        if self._broker is not None:
            self._broker.wake()

    # ------------------------------------------------------------------ routing to the controller

    async def _controller_call(self, op: str, fields: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run a controller op here when this node is the ready controller (or becoming it),
        else send it to the controller's peer listener."""
        deadline = trio.current_time() + timeout_s
        if self._active is not None and (self._active.ready() is not None or self._active.is_quorum_leader()):
            return await self._active.run_op(op, fields, deadline)
        controller_id = self.controller_id
        address = None if controller_id is None else self._controller_peer(controller_id)
        if address is None:
            raise NotControllerError("no active controller known", controller_id=None, controller=None)
        try:
            return await self.peers.call(address, op, {**fields, "timeout_ms": int(timeout_s * 1000)},
                                         timeout_s=timeout_s)
        except NotControllerError as exc:
            if self._fetcher is not None:
                self._fetcher.controller_id = exc.controller_id if exc.controller_id != controller_id else None
            raise

    def _not_controller(self, controller_id: int | None, message: str = "") -> NotControllerError:
        address = None if controller_id is None else self._loader.client_address(controller_id)
        return NotControllerError(message, controller_id=controller_id, controller=address)

    # ------------------------------------------------------------------ peer ops

    async def _peer_controller_op(self, request: Request) -> dict[str, Any]:
        if self._active is None:
            raise self._not_controller(self.controller_id)
        return await self._active.run_op(request.op, request.fields, self._deadline(request))

    async def _peer_metadata_fetch(self, request: Request) -> dict[str, Any]:
        quorum = self._quorum
        if quorum is None:
            raise self._not_controller(self.controller_id,
                                       "this node is not a voter: it has no metadata log to serve")
        return await answer_fetch(self._loader, request, lambda: (quorum.leader_id, quorum.term))

    # ------------------------------------------------------------------ client ops

    def _deadline(self, request: Request) -> float:
        """Our own deadline sits before the server's so our answer wins the race."""
        timeout_ms = request.fields.get("timeout_ms")
        budget_ms = self.settings.request_timeout_ms - 250
        if type(timeout_ms) is int and timeout_ms >= 0:
            budget_ms = min(budget_ms, timeout_ms)
        return trio.current_time() + max(0, budget_ms) / 1000

    async def _client_admin(self, request: Request) -> dict[str, Any]:
        """An admin op, run by the active controller (here or forwarded); answered once this
        node's image shows what a describe here would read of it (`_applied_here`)."""
        answer = await self._controller_admin(request)
        await self._applied_here(request, answer)
        return answer

    async def _controller_admin(self, request: Request) -> dict[str, Any]:
        deadline = self._deadline(request)
        if self._active is not None and (self._active.ready() is not None or self._active.is_quorum_leader()):
            return await self._active.admin(request.op, request.fields, deadline)
        controller_id = self.controller_id
        address = None if controller_id is None else self._controller_peer(controller_id)
        if address is None:
            raise NotControllerError("no active controller known yet", controller_id=None, controller=None)
        remaining = deadline - trio.current_time()
        fields = {k: v for k, v in request.fields.items() if k != "timeout_ms"}
        try:
            return await self.peers.call(
                address, "controller_forward",
                {"admin_op": request.op, "fields": fields, "timeout_ms": max(0, int(remaining * 1000))},
                timeout_s=max(0.0, remaining),
            )  # fmt: skip
        except PeerUnavailableError:
            raise self._not_controller(controller_id) from None

    async def _client_describe_quotas(self, request: Request) -> dict[str, Any]:
        return quota_ops.describe(self._loader.image, request.fields)

    async def _client_describe_broker_configs(self, request: Request) -> dict[str, Any]:
        return {"configs": broker_config.describe(self._loader.image.broker_configs)}

    async def _client_describe_group_configs(self, request: Request) -> dict[str, Any]:
        group_id = field(request, "group_id", str)
        return {"group_id": group_id, "configs": dict(self._loader.image.group_configs.get(group_id, {}))}

    async def _client_describe_features(self, request: Request) -> dict[str, Any]:
        return features.describe(self._loader.image) | {"epoch": self.applied_index}

    async def _client_security_describe(self, request: Request) -> dict[str, Any]:
        if request.op == "describe_acls" and not self.settings.authorizer_enabled:
            raise SecurityDisabledError("ACLs are not enabled on this cluster (acls_enabled)")
        return security_ops.describe(self._loader.image, request.op, request.fields)

    async def _client_metadata(self, request: Request) -> dict[str, Any]:
        names = field(request, "topics", list, items=str, nullable=True, default=None)
        view = await self.cluster_metadata(names, include_internal=field(request, "internal", bool, default=False))
        return {
            "cluster_id": view.cluster_id,
            "controller_id": view.controller_id,
            "controller_problem": view.controller_problem,
            "max_request_bytes": view.max_request_bytes,
            "brokers": list(view.brokers),
            "topics": [_topic_obj(t) for t in view.topics],
        }

    async def cluster_metadata(self, names: Sequence[str] | None, *, include_internal: bool) -> ClusterView:
        if names:
            def all_known(image: MetadataImage) -> bool:
                return all(complete_topic(image, n) is not None for n in names if _valid_topic_name(n))
            try:
                await self.wait_for(all_known, MISSING_TOPIC_WAIT_S)
            except RequestTimedOutError:
                pass  # answer with what we have: the missing ones get an error entry
        image = self._loader.image
        problem = self.controller_problem()
        topics: list[TopicView] = []
        wanted = names if names is not None else [
            n for n in image.topic_names(include_internal=include_internal) if image.topic(n).complete
        ]
        for name in dict.fromkeys(wanted):
            topic = complete_topic(image, name)
            if topic is None:  # Kafka: a name no topic may have is INVALID_TOPIC_EXCEPTION
                topics.append(TopicView(name, error=UnknownTopicOrPartitionError(f"unknown topic {name!r:.80}")
                                        if _valid_topic_name(name) else InvalidTopicError(f"invalid name {name!r:.80}")))
                continue
            partitions = []
            for p in topic.partitions:
                p, hosted, knows_leader = self.partition_now(topic.name, p)
                partitions.append(PartitionView(p.partition, p.leader, p.leader_epoch, list(p.replicas),
                                                p.preferred_leader, self.partition_problem(p, hosted, knows_leader, problem)))
            topics.append(TopicView(topic.name, topic.topic_id, topic.internal, dict(topic.configs), partitions))
        return ClusterView(
            self.cluster_id, None if problem is not None else self.controller_id, problem,
            self.settings.max_frame_bytes,
            [{"id": b.broker_id, "host": b.host, "port": b.port, "fenced": b.fenced}
             for _, b in sorted(image.brokers.items())],
            topics,
        )  # fmt: skip

    async def _client_describe_configs(self, request: Request) -> dict[str, Any]:
        name = field(request, "name", str)
        return {
            "name": name,
            "configs": [
                {"name": e.name, "value": e.value, "is_default": e.is_default, "type": e.type, "doc": e.doc}
                for e in await self.describe_topic_configs(name)
            ],
        }

    async def _client_cluster_status(self, request: Request) -> dict[str, Any]:
        deadline = self._deadline(request)
        active = self._active
        if active is not None and active.is_quorum_leader():
            with trio.move_on_after(min(STATUS_FORWARD_S, max(0.0, deadline - trio.current_time()))):
                await active.wait_ready()
        if active is not None and (ctl := active.ready()) is not None:
            return self._cluster_status(ctl)
        controller_id = self.controller_id
        address = None if controller_id is None else self._controller_peer(controller_id)
        problem = self.controller_problem()
        if address is not None and problem is None:
            timeout_s = min(STATUS_FORWARD_S, max(0.0, deadline - trio.current_time()))
            try:
                return await self.peers.call(
                    address, "controller_forward",
                    {"admin_op": "cluster_status", "fields": {}, "timeout_ms": int(timeout_s * 1000)},
                    timeout_s=timeout_s,
                )  # fmt: skip
            except RaftlogError as exc:
                log_event(logger, "status_forward_failed", level=logging.DEBUG, reason=str(exc))
                problem = f"controller unreachable: node {self.node_id} could not reach controller {controller_id} ({exc})"
        status = self._cluster_status(None)
        status["controller_problem"] = problem or (
            f"controller unreachable: node {self.node_id} knows no active controller")
        status["controller_id"] = None
        return status

    def _cluster_status(self, ctl: Controller | None) -> dict[str, Any]:
        image = self._loader.image
        now_ms = self._clock_ms()
        controller_id = self.node_id if ctl is not None else self.controller_id
        epoch = ctl.controller_epoch if ctl is not None else image.controller_epoch
        brokers = []
        replicas = image.replica_counts()
        leaders = Counter(p.leader for name in image.topic_names()
                          for p in image.topic(name).partitions)  # type: ignore[union-attr]
        for broker_id, reg in sorted(image.brokers.items()):
            brokers.append({
                "id": broker_id, "host": reg.host, "port": reg.port, "fenced": reg.fenced,
                "rack": reg.rack, "state": image.broker_state(broker_id), "replicas": replicas.get(broker_id, 0),
                "leaders": leaders.get(broker_id, 0),
                "kafka": None if reg.kafka_host is None else hostport(reg.kafka_host, reg.kafka_port),
                "last_heartbeat_age_ms": None if ctl is None else ctl.last_heartbeat_age_ms(broker_id, now_ms),
            })  # fmt: skip
        return {
            "cluster_id": self.cluster_id,
            "controller_id": controller_id,
            "controller_epoch": epoch,
            "commit_index": self.applied_index,
            "answered_by": self.node_id,
            # "controller": brokers' states as the controller keeps them; "local": this
            # node's last image (the controller could not be asked: see controller_problem).
            "view": "controller" if ctl is not None else "local",
            "controller_problem": None,
            "voters": [
                {"id": v, "address": a, "peer": self._controller_peer(v), "leader": v == controller_id}
                for v, a in sorted(self._quorum_voters().items())
            ],
            "brokers": brokers,
            "topics": len(image.topic_names(include_internal=True)),
            # internal partitions not moved now: their coordinator is busy (metadata/reassignment.py)
            "busy_partitions": [] if ctl is None else [
                {"topic": t, "partition": p, "error": e.to_wire()}
                for (t, p), e in sorted(ctl.busy_partitions(now_ms).items())],
        }


def _topic_obj(topic: TopicView) -> dict[str, Any]:
    """A topic as the native `metadata` op answers it (docs/reference/native-protocol.md)."""
    if topic.error is not None:
        return {"name": topic.name, "error": topic.error.code}
    partitions = []
    for p in topic.partitions:
        entry = {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                 "replicas": list(p.replicas), "preferred_leader": p.preferred_leader,
                 "offline": p.offline_reason is not None}
        if p.offline_reason is not None:
            entry["offline_reason"] = p.offline_reason
        partitions.append(entry)
    return {"name": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
            "configs": dict(topic.configs), "partitions": partitions}


def _valid_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return False
    return True

"""The metadata service (a NodeService): replays the metadata log into an image on every
node, runs the active controller on the quorum leader, and registers/heartbeats the local
broker. The thin shell around the pure core (records, image, delta, controller).

Where the log comes from:
* Voters run the metadata quorum (metadata/quorum.py's port; the node injects PySyncObj's, raftlog/node/bridge.py). Each committed envelope arrives via
  `on_commit(index, bytes)` in index order; it is replayed (delta.replay_envelope) and kept in
  memory (the bridge keeps the whole list in RAM too) so broker-only nodes can fetch it.
* Broker-only nodes long-poll a voter's peer op `metadata_fetch {after_index, max_wait_ms}`
  and replay what comes back; the same dense index 1, 2, 3, ... is identical on every voter.
Either way each new image goes, in order and on the trio thread, to every subscriber
(`subscribe(callback)`; the node subscribes every other service's `on_image`).
An envelope that does not decode is fatal (the node stops): skipping it would let images
diverge.

Controller life cycle (controller.py's docstring): when this voter becomes the quorum leader
in term T it builds `Controller(image, T, ...)` and proposes a NoOp; only once that NoOp is in
the image (so the image holds everything committed before it) does it answer controller ops.
Every decision returns ControllerResult(envelopes, response): the envelopes are proposed in
order (the same bytes re-sent after an unknown outcome, so a retry applies at most once) and
the caller is answered once each envelope's outcome is in the image. A tick loop fences
silent brokers, completes split topic creations, creates `__consumer_offsets` (RF
min(3, brokers known)), and asks partition leaders to move leadership to preferred leaders.
Losing leadership drops the Controller.

Errors on the wire (PROTOCOL.md): bridge NotControllerError / QuorumNotRunning -> NOT_CONTROLLER
with the controller's id and client address; ProposalOutcomeUnknown/ProposalTimedOut, or no
answer by the deadline -> REQUEST_TIMED_OUT; CommandTooLarge -> MESSAGE_TOO_LARGE; a rejected
envelope -> its outcome's code (e.g. TOPIC_ALREADY_EXISTS).

Client ops: metadata (answered from the local image), create_topic, delete_topic,
alter_configs (controller; forwarded to it with the peer op `controller_forward` when this
node is not it), describe_configs (local image), cluster_status (the controller's view when it
can be reached within a second or two, else this node's own).
Peer ops: broker_register, broker_heartbeat, broker_shutdown, report_partition_leader,
allocate_producer_ids, controller_forward (controller only; never forwarded again, so no
loops), metadata_fetch (voters).

To other services: `image`, `node_id`, `controller_id`, `applied_index`,
`await report_partition_leader(...)`, `await allocate_producer_ids()`, `peer_address(id)`,
`client_address(id)`, `await wait_for(predicate, timeout_s)`.

Concurrency: everything runs on the node's trio thread. The Controller is only called
between awaits, so each decision sees one image and its pending marks are set before any
other task can decide.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from metadata.controller import Controller, ControllerResult
from metadata.delta import replay_envelope
from metadata.image import MetadataImage, TopicImage
from metadata.quorum import (
    NotQuorumLeaderError,
    ProposalOutcomeUnknownError,
    ProposalRejectedError,
    Quorum,
    QuorumFactory,
    QuorumNotRunningError,
)
from metadata import security_ops
from metadata.records import UserScramCredential, encode_envelope
from metadata.topic_config import describe_configs
from raftlog.base.errors import (
    SecurityDisabledError,
    BrokerIdNotRegisteredError,
    InvalidRequestError,
    MessageTooLargeError,
    NotControllerError,
    PeerUnavailableError,
    RaftlogError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field

__all__ = ["MetadataService", "ADMIN_OPS"]

logger = logging.getLogger(__name__)

ADMIN_OPS: Final = frozenset({"create_topic", "delete_topic", "alter_configs", "cluster_status"}) | (
    security_ops.ADMIN_SECURITY_OPS
)
PROPOSAL_ATTEMPT_S: Final = 5.0
PROPOSAL_BACKOFF_S: Final = 0.05
FETCH_MAX_WAIT_MS: Final = 1000
FETCH_MAX_ENVELOPES: Final = 1000
FETCH_MAX_WAIT_MS_LIMIT: Final = 10_000
MISSING_TOPIC_WAIT_S: Final = 0.5  # read-your-writes grace for a topic created a moment ago
STATUS_FORWARD_S: Final = 2.0
TRANSFER_TIMEOUT_S: Final = 2.0
SHUTDOWN_CALL_S: Final = 3.0
MAX_SUBSCRIBERS: Final = 64
MAX_TRANSFERS_IN_FLIGHT: Final = 32


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MetadataService:
    """One per node (voter or not). See the module docstring."""

    name = "metadata"

    def __init__(
        self,
        config: Any,
        cluster_id: str,
        peers: PeerPool,
        *,
        quorum_factory: QuorumFactory | None = None,
        registry: MetricsRegistry | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        rng: random.Random | None = None,
        bootstrap_credentials: tuple[UserScramCredential, ...] = (),
    ) -> None:
        self.config = config
        self._bootstrap_credentials = bootstrap_credentials  # seeded by the controller (security_ops)
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.peers = peers
        self._clock_ms = clock_ms
        self._rng = rng if rng is not None else random.Random()
        self._voter_peers = {v: str(a) for v, a in config.controller_peer_addresses().items()}
        self._voter_quorum = {v: str(a) for v, a in config.controller_quorum_voters.items()}
        self.image = MetadataImage.empty()
        self.applied_index = 0
        self._log: list[bytes] = []  # voters: every committed envelope (index i at [i-1])
        self._changed = trio.Event()
        self._subscribers: list[Callable[[MetadataImage], None]] = []
        self._quorum: Quorum | None = None
        if config.is_controller:
            if quorum_factory is None:
                raise ValueError("a controller needs a quorum_factory (the node passes the bridge's)")
            self._quorum = quorum_factory(on_commit=self._on_commit, on_leader_change=self._on_leader_change)
        self._leader_changed = trio.Event()
        # Active controller (quorum leader only): set at activation, ready once its NoOp applied.
        self._controller: Controller | None = None
        self._controller_ready = trio.Event()
        # Broker-only nodes learn the controller from metadata_fetch answers and error hints.
        self._remote_controller_id: int | None = None
        # Local broker.
        self.incarnation_id = secrets.token_urlsafe(12)
        self.registered = False
        self.fenced = True
        self._shutting_down = False
        self._broker_wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._transfers = trio.Semaphore(MAX_TRANSFERS_IN_FLIGHT)
        self.client_handlers: Mapping[str, Callable[[Request], Awaitable[Mapping | None]]] = {
            "metadata": self._client_metadata,
            "create_topic": self._client_admin,
            "delete_topic": self._client_admin,
            "alter_configs": self._client_admin,
            "describe_configs": self._client_describe_configs,
            "cluster_status": self._client_cluster_status,
        } | {op: self._client_admin for op in security_ops.ADMIN_SECURITY_OPS} | {
            op: self._client_security_describe for op in security_ops.DESCRIBE_SECURITY_OPS
        }
        self.peer_handlers: Mapping[str, Callable[[Request], Awaitable[Mapping | None]]] = {
            op: self._peer_controller_op for op in _CONTROLLER_OPS
        } | {"metadata_fetch": self._peer_metadata_fetch}
        self._metrics(registry if registry is not None else MetricsRegistry())

    def _metrics(self, registry: MetricsRegistry) -> None:
        registry.gauge(
            "raftlog_metadata_applied_index", "Metadata log entries replayed into this node's image."
        ).set_function(lambda: self.applied_index)
        registry.gauge(
            "raftlog_metadata_active_controller", "1 while this node is the ready active controller."
        ).set_function(lambda: 1 if self._ready_controller() is not None else 0)
        registry.gauge(
            "raftlog_metadata_broker_fenced", "1 while this node's broker is fenced (or unregistered)."
        ).set_function(lambda: 1 if self.fenced else 0)
        self._proposals = registry.counter(
            "raftlog_metadata_proposals_total", "Envelope proposals by result.", ("result",)
        )

    # ------------------------------------------------------------------ public API

    @property
    def controller_id(self) -> int | None:
        """The active controller's node id as this node knows it (None: unknown)."""
        if self._quorum is not None:
            return self._quorum.leader_id
        return self._remote_controller_id

    @property
    def is_active_controller(self) -> bool:
        return self._ready_controller() is not None

    def subscribe(self, callback: Callable[[MetadataImage], None]) -> None:
        """Call `callback(image)` on the trio thread after every replayed envelope, in order.
        It must not block; an exception from it stops the node (a subscriber that missed an
        image would be silently wrong)."""
        if len(self._subscribers) >= MAX_SUBSCRIBERS:
            raise ValueError("too many image subscribers")
        self._subscribers.append(callback)

    def on_image(self, image: MetadataImage) -> None:
        """NodeService hook: this service is the source of images, so nothing to do."""

    def peer_address(self, broker_id: int) -> str | None:
        reg = self.image.broker(broker_id)
        return None if reg is None else _hostport(reg.peer_host, reg.peer_port)

    def client_address(self, broker_id: int) -> str | None:
        reg = self.image.broker(broker_id)
        return None if reg is None else _hostport(reg.host, reg.port)

    def kafka_address(self, broker_id: int) -> tuple[str, int] | None:
        """The broker's advertised Kafka listener (None: unknown broker, or none registered)."""
        reg = self.image.broker(broker_id)
        if reg is None or reg.kafka_host is None or reg.kafka_port is None:
            return None
        return reg.kafka_host, reg.kafka_port

    async def wait_for(self, predicate: Callable[[MetadataImage], Any], timeout_s: float) -> Any:
        """Wait until `predicate(image)` is truthy and return its value; raises
        RequestTimedOutError after `timeout_s`."""
        with trio.move_on_after(timeout_s):
            while not (value := predicate(self.image)):
                await self._changed.wait()
            return value
        raise RequestTimedOutError(f"metadata condition not met within {timeout_s} s")

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

    async def allocate_producer_ids(self, *, timeout_s: float = 5.0) -> tuple[int, int]:
        """A fresh block of producer ids for this broker: (first_producer_id, size)."""
        result = await self._controller_call(
            "allocate_producer_ids", {"broker_id": self.node_id}, timeout_s
        )
        return result["first_producer_id"], result["size"]

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
            report["quorum"] = {k: status[k] for k in ("term", "leader_id", "has_quorum", "commit_index")}
        if self.config.is_broker:
            report["broker"] = {"registered": self.registered, "fenced": self.fenced,
                                "incarnation_id": self.incarnation_id}
            ok = ok and self.registered and not self.fenced
        report["ok"] = ok
        return report

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the quorum (voters) or the metadata fetch loop (broker-only nodes), the
        controller loop and the broker loop; report started once the quorum port is bound."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._quorum is not None:
                await nursery.start(self._quorum.run)
                nursery.start_soon(self._controller_loop)
            else:
                nursery.start_soon(self._fetch_loop)
            if self.config.is_broker:
                nursery.start_soon(self._broker_loop)
            task_status.started()

    async def drain(self) -> None:
        """Before shutdown (SIGTERM): a controlled shutdown of the local broker, so the
        controller fences it at once and its next incarnation may register at once."""
        self._shutting_down = True
        self._broker_wakeup.set()
        if not (self.config.is_broker and self.registered):
            return
        try:
            await self._controller_call(
                "broker_shutdown",
                {"broker_id": self.node_id, "incarnation_id": self.incarnation_id},
                SHUTDOWN_CALL_S,
            )
            log_event(logger, "controlled_shutdown_done", broker_id=self.node_id)
        except RaftlogError as exc:
            log_event(logger, "controlled_shutdown_failed", level=logging.WARNING, reason=str(exc))

    # ------------------------------------------------------------------ replay

    def _on_commit(self, index: int, command: bytes) -> None:
        """Bridge callback (trio thread), in index order."""
        self._log.append(command)
        self._apply(index, command)

    def _apply(self, index: int, command: bytes) -> None:
        if index != self.applied_index + 1:
            raise RuntimeError(f"metadata entry {index} after {self.applied_index}: gap")
        self.image = replay_envelope(self.image, command)  # InvalidRecordError: fatal
        self.applied_index = index
        if self._controller is not None:
            self._controller.update_image(self.image, self._clock_ms())
        for callback in self._subscribers:
            callback(self.image)
        self._changed.set()
        self._changed = trio.Event()

    def _on_leader_change(self, leader_id: int | None, term: int) -> None:
        log_event(logger, "quorum_leader", leader_id=leader_id, term=term)
        self._leader_changed.set()
        self._broker_wakeup.set()  # a new controller: heartbeat it now

    # ------------------------------------------------------------------ broker-only: fetch

    async def _fetch_loop(self) -> None:
        voters = sorted(self._voter_peers)
        turn = self._rng.randrange(len(voters))
        while True:
            controller = self._remote_controller_id
            voter = controller if controller in self._voter_peers else voters[turn % len(voters)]
            address = self._voter_peers[voter]
            try:
                result = await self.peers.call(
                    address, "metadata_fetch",
                    {"after_index": self.applied_index, "max_wait_ms": FETCH_MAX_WAIT_MS,
                     "max_envelopes": FETCH_MAX_ENVELOPES},
                    timeout_s=FETCH_MAX_WAIT_MS / 1000 + 3.0,
                )  # fmt: skip
                self._take_fetch(result)
            except RaftlogError as exc:
                log_event(logger, "metadata_fetch_failed", level=logging.DEBUG,
                          voter=voter, reason=str(exc))
                if voter == self._remote_controller_id:
                    self._remote_controller_id = None
                turn += 1
                await trio.sleep(0.1 + 0.1 * self._rng.random())

    def _take_fetch(self, result: Mapping[str, Any]) -> None:
        first = result.get("first_index")
        envelopes = result.get("envelopes")
        if type(first) is not int or not isinstance(envelopes, list):
            raise InvalidRequestError("malformed metadata_fetch answer")
        if envelopes and first != self.applied_index + 1:
            raise InvalidRequestError(f"metadata_fetch answered from {first}, wanted {self.applied_index + 1}")
        for offset, command in enumerate(envelopes):
            if not isinstance(command, bytes):
                raise InvalidRequestError("metadata_fetch envelope is not bytes")
            self._apply(first + offset, command)
        controller_id = result.get("controller_id")
        if controller_id != self._remote_controller_id and (controller_id is None or type(controller_id) is int):
            self._remote_controller_id = controller_id
            self._broker_wakeup.set()

    async def _peer_metadata_fetch(self, request: Request) -> dict[str, Any]:
        if self._quorum is None:
            raise NotControllerError("this node is not a voter: it has no metadata log to serve",
                                controller_id=self.controller_id,
                                controller=self._controller_client_address())
        after = field(request, "after_index", int, min_value=0)
        max_wait_ms = field(request, "max_wait_ms", int, default=0, min_value=0,
                            max_value=FETCH_MAX_WAIT_MS_LIMIT)
        limit = field(request, "max_envelopes", int, default=FETCH_MAX_ENVELOPES, min_value=1,
                      max_value=FETCH_MAX_ENVELOPES)
        with trio.move_on_after(max_wait_ms / 1000):
            while len(self._log) <= after:
                await self._changed.wait()
        return {
            "first_index": after + 1,
            "envelopes": self._log[after : after + limit],
            "commit_index": len(self._log),
            "controller_id": self.controller_id,
            "controller_epoch": self._quorum.term,
        }

    # ------------------------------------------------------------------ controller

    def _ready_controller(self) -> Controller | None:
        if self._controller is not None and self._controller_ready.is_set():
            return self._controller
        return None

    def _is_quorum_leader(self) -> bool:
        return (self._quorum is not None and self._quorum.is_leader
                and self._quorum.leader_id == self.node_id)

    def _offsets_replication_factor(self) -> int:
        return max(1, min(3, max(len(self.image.brokers), len(self._voter_quorum))))

    async def _controller_loop(self) -> None:
        assert self._quorum is not None
        interval_s = max(0.05, min(self.config.heartbeat_ms, 500) / 1000)
        while True:
            self._leader_changed = trio.Event()
            term = self._quorum.term
            if self._is_quorum_leader():
                if self._controller is None or self._controller.controller_epoch != term:
                    await self._activate(term)
            elif self._controller is not None:
                self._deactivate("lost quorum leadership")
            ctl = self._ready_controller()
            if ctl is not None:
                await self._controller_tick(ctl)
            with trio.move_on_after(interval_s):
                await self._leader_changed.wait()

    def _deactivate(self, reason: str) -> None:
        if self._controller is not None:
            log_event(logger, "controller_resigned", epoch=self._controller.controller_epoch,
                      reason=reason)
        self._controller = None
        if self._controller_ready.is_set():
            self._controller_ready = trio.Event()

    async def _activate(self, term: int) -> None:
        self._deactivate("new term")
        now_ms = self._clock_ms()
        try:
            ctl = Controller(
                self.image, term, now_ms, random.Random(self._rng.getrandbits(64)),
                session_timeout_ms=self.config.session_timeout_ms,
                offsets_replication_factor=self._offsets_replication_factor(),
            )  # fmt: skip
        except NotControllerError as exc:
            log_event(logger, "controller_activation_refused", level=logging.WARNING, reason=str(exc))
            return
        self._controller = ctl
        log_event(logger, "controller_activating", epoch=term)
        while self._controller is ctl and self._is_quorum_leader() and self._quorum.term == term:
            try:
                await self._propose(ctl.noop(), trio.current_time() + PROPOSAL_ATTEMPT_S)
            except (RaftlogError, RaftlogError) as exc:
                log_event(logger, "controller_noop_failed", level=logging.INFO, reason=str(exc))
                await trio.sleep(PROPOSAL_BACKOFF_S * 4)
                continue
            self._controller_ready.set()
            self._broker_wakeup.set()
            log_event(logger, "controller_active", epoch=term, applied_index=self.applied_index)
            return
        if self._controller is ctl:
            self._deactivate("leadership lost during activation")

    async def _controller_tick(self, ctl: Controller) -> None:
        deadline = trio.current_time() + PROPOSAL_ATTEMPT_S
        try:
            now_ms = self._clock_ms()
            await self._propose(ctl.tick(now_ms), deadline)
            ctl.offsets_replication_factor = self._offsets_replication_factor()
            await self._propose(ctl.ensure_internal_topics(self._clock_ms()), deadline)
            await self._propose(ctl.ensure_bootstrap_credentials(self._bootstrap_credentials,
                                                                 now_ms=self._clock_ms()), deadline)
            for move in ctl.preferred_leader_moves(self._clock_ms()):
                address = self.peer_address(move.leader)
                if address is not None and self._nursery is not None:
                    try:
                        self._transfers.acquire_nowait()
                    except trio.WouldBlock:
                        break
                    self._nursery.start_soon(
                        self._send_transfer, address, move.topic, move.partition, move.preferred_leader
                    )
        except NotControllerError as exc:  # a newer controller wrote: we are deposed
            self._deactivate(str(exc))
        except NotControllerError:
            self._deactivate("quorum says not leader")
        except RaftlogError as exc:
            log_event(logger, "controller_tick_failed", level=logging.INFO, reason=str(exc))

    async def _send_transfer(self, address: str, topic: str, partition: int, target: int) -> None:
        try:
            await self.peers.call(
                address, "transfer_leadership",
                {"topic": topic, "partition": partition, "target": target},
                timeout_s=TRANSFER_TIMEOUT_S,
            )  # fmt: skip
            log_event(logger, "leader_transfer_requested", topic=topic, partition=partition, target=target)
        except RaftlogError as exc:  # no broker serves it yet, or the leader moved: retried later
            log_event(logger, "leader_transfer_failed", level=logging.DEBUG, topic=topic,
                      partition=partition, target=target, reason=str(exc))
        finally:
            self._transfers.release()

    async def _propose(self, result: ControllerResult[Any], deadline: float) -> Any:
        """Propose each envelope in order and answer with `result.response` once all applied;
        raise the first rejection's error. See the module docstring for error mapping."""
        for envelope in result.envelopes:
            try:
                data = encode_envelope(envelope)
            except RaftlogError as exc:  # EnvelopeTooLargeError
                raise MessageTooLargeError(str(exc)) from None
            await self._propose_bytes(data, envelope.request_id, deadline)
            outcome = self.image.request_outcome(envelope.request_id)
            if outcome is None:
                raise RequestTimedOutError(f"outcome of {envelope.request_id} is unknown")
            if not outcome.ok:
                self._proposals.labels(result=outcome.code).inc()
                error = outcome.error()
                assert error is not None
                raise error
            self._proposals.labels(result="OK").inc()
        return result.response

    async def _propose_bytes(self, data: bytes, request_id: str, deadline: float) -> None:
        assert self._quorum is not None
        unknown = False
        while True:
            remaining = deadline - trio.current_time()
            if self.image.request_outcome(request_id) is not None:
                return  # an earlier attempt committed after all
            if remaining <= 0:
                self._proposals.labels(result="TIMED_OUT").inc()
                raise RequestTimedOutError(
                    f"proposal {request_id} not committed before the deadline"
                    + ("; it may still take effect" if unknown else "")
                )
            try:
                await self._quorum.propose(data, timeout_s=min(remaining, PROPOSAL_ATTEMPT_S))
                return
            except NotQuorumLeaderError as exc:
                raise self._not_controller(exc.leader_id) from None
            except QuorumNotRunningError:
                raise self._not_controller(None) from None
            except ProposalOutcomeUnknownError as exc:
                unknown = True  # re-send the same bytes: replay applies a request id once
                log_event(logger, "proposal_unknown", level=logging.INFO, request_id=request_id,
                          reason=exc.reason)
            except ProposalRejectedError as exc:
                log_event(logger, "proposal_rejected", level=logging.INFO, request_id=request_id,
                          reason=exc.reason)
                await trio.sleep(min(PROPOSAL_BACKOFF_S, max(0.0, remaining)))

    def _not_controller(self, controller_id: int | None) -> NotControllerError:
        if controller_id == self.node_id:
            controller_id = None  # we are the leader but not ready yet: no useful hint
        return NotControllerError(controller_id=controller_id,
                             controller=self._controller_client_address(controller_id))

    def _controller_client_address(self, controller_id: int | None = -1) -> str | None:
        if controller_id == -1:
            controller_id = self.controller_id
        return None if controller_id is None else self.client_address(controller_id)

    async def _require_controller(self, deadline: float) -> Controller:
        """The ready local controller; waits while this node is the leader and activating.
        Raises NotControllerError (with a hint) otherwise."""
        while True:
            ctl = self._ready_controller()
            if ctl is not None:
                return ctl
            if not self._is_quorum_leader():
                raise self._not_controller(self.controller_id)
            with trio.move_on_at(deadline) as scope:
                await self._controller_ready.wait()
            if scope.cancelled_caught:
                raise RequestTimedOutError("the controller is still activating")

    async def _controller_call(self, op: str, fields: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run a controller op here when this node is the ready controller, else send it to
        the controller's peer listener."""
        deadline = trio.current_time() + timeout_s
        if self._ready_controller() is not None or self._is_quorum_leader():
            return await self._run_controller_op(op, fields, deadline)
        controller_id = self.controller_id
        address = None if controller_id is None else self._voter_peers.get(controller_id)
        if address is None:
            raise NotControllerError("no active controller known", controller_id=None, controller=None)
        try:
            return await self.peers.call(address, op, {**fields, "timeout_ms": int(timeout_s * 1000)},
                                         timeout_s=timeout_s)
        except NotControllerError as exc:
            if self._quorum is None:
                self._remote_controller_id = exc.controller_id if exc.controller_id != controller_id else None
            raise

    # ------------------------------------------------------------------ controller ops

    async def _peer_controller_op(self, request: Request) -> dict[str, Any]:
        return await self._run_controller_op(request.op, request.fields, self._deadline(request))

    async def _run_controller_op(self, op: str, fields: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        ctl = await self._require_controller(deadline)
        try:
            return await _CONTROLLER_OPS[op](self, ctl, fields, deadline)
        except NotControllerError:
            self._deactivate("deposed by a newer controller epoch")
            raise self._not_controller(None) from None
        except RaftlogError as exc:  # local callers get the same errors as remote ones
            wire = as_wire_error(exc)
            if wire is None:
                raise
            raise wire from None

    async def _op_broker_register(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        result = ctl.register_broker(
            field(fields, "broker_id", int), field(fields, "incarnation_id", str),
            field(fields, "host", str), field(fields, "port", int),
            field(fields, "peer_host", str), field(fields, "peer_port", int),
            field(fields, "rack", str, default=None, nullable=True), now_ms=self._clock_ms(),
            kafka_host=field(fields, "kafka_host", str, default=None, nullable=True),
            kafka_port=field(fields, "kafka_port", int, default=None, nullable=True),
        )  # fmt: skip
        response = await self._propose(result, deadline)
        return {"broker_id": response.broker_id, "incarnation_id": response.incarnation_id}

    async def _op_broker_heartbeat(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        result = ctl.heartbeat(field(fields, "broker_id", int), field(fields, "incarnation_id", str),
                               now_ms=self._clock_ms())
        response = await self._propose(result, deadline)
        # `fenced` is as of the committed image; after an UnfenceBroker applied, say so now.
        reg = self.image.broker(field(fields, "broker_id", int))
        fenced = response.fenced if reg is None else reg.fenced
        return {"fenced": fenced, "shutting_down": response.shutting_down,
                "controller_epoch": response.controller_epoch}

    async def _op_broker_shutdown(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        result = ctl.controlled_shutdown(field(fields, "broker_id", int),
                                         field(fields, "incarnation_id", str), now_ms=self._clock_ms())
        await self._propose(result, deadline)
        return {}

    async def _op_report_partition_leader(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        result = ctl.partition_leader_report(
            field(fields, "topic", str), field(fields, "partition", int),
            field(fields, "leader_id", int), field(fields, "leader_epoch", int),
            now_ms=self._clock_ms(), topic_id=field(fields, "topic_id", str, default=None, nullable=True),
        )  # fmt: skip
        return {"changed": bool(await self._propose(result, deadline))}

    async def _op_allocate_producer_ids(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        block = await self._propose(
            ctl.allocate_producer_ids(field(fields, "broker_id", int), now_ms=self._clock_ms()), deadline
        )
        return {"first_producer_id": block.first_producer_id, "size": block.size}

    async def _op_controller_forward(self, ctl: Controller, fields: Mapping[str, Any], deadline: float) -> dict:
        op = field(fields, "admin_op", str)
        inner = field(fields, "fields", dict)
        if op not in ADMIN_OPS:
            raise InvalidRequestError(f"op {op!r:.40} cannot be forwarded", field="admin_op")
        return await self._admin_here(op, inner, deadline)

    async def _admin_here(self, op: str, fields: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        """An admin op on this node, which must be the active controller."""
        ctl = await self._require_controller(deadline)
        now_ms = self._clock_ms()
        try:
            if op == "create_topic":
                name = field(fields, "name", str)
                configs = dict(self.config.topic_defaults)
                configs.update(field(fields, "configs", dict, default={}))
                result = ctl.create_topic(
                    name,
                    field(fields, "partitions", int, default=self.config.default_partitions),
                    field(fields, "replication_factor", int,
                          default=self.config.default_replication_factor),
                    configs, now_ms=now_ms,
                )  # fmt: skip
                response = await self._propose(result, deadline)
                topic = self.image.topic(response.name)
                return {"name": response.name, "topic_id": response.topic_id,
                        "partitions": _partitions(topic) if topic is not None else []}
            if op == "delete_topic":
                topic_id = await self._propose(ctl.delete_topic(field(fields, "name", str), now_ms=now_ms),
                                               deadline)
                return {"topic_id": topic_id}
            if op == "alter_configs":
                result = ctl.alter_configs(
                    field(fields, "name", str), field(fields, "set", dict, default={}),
                    list(field(fields, "delete", list, items=str, default=[])), now_ms=now_ms,
                )  # fmt: skip
                return {"configs": await self._propose(result, deadline)}
            if op == "cluster_status":
                return self._cluster_status(ctl)
            if op in security_ops.ADMIN_SECURITY_OPS:
                if op != "alter_user_scram_credentials" and not getattr(self.config, "authorizer_enabled", False):
                    raise SecurityDisabledError("ACLs are not enabled on this cluster (acls_enabled)")
                return await self._propose(security_ops.decide(ctl, op, fields, now_ms=now_ms), deadline)
        except NotControllerError:
            self._deactivate("deposed by a newer controller epoch")
            raise self._not_controller(None) from None
        raise InvalidRequestError(f"unknown admin op {op!r:.40}", field="op")

    # ------------------------------------------------------------------ client ops

    def _deadline(self, request: Request) -> float:
        """Our own deadline sits before the server's so our answer wins the race."""
        timeout_ms = request.fields.get("timeout_ms")
        budget_ms = self.config.request_timeout_ms - 250
        if type(timeout_ms) is int and timeout_ms >= 0:
            budget_ms = min(budget_ms, timeout_ms)
        return trio.current_time() + max(0, budget_ms) / 1000

    async def _client_admin(self, request: Request) -> dict[str, Any]:
        deadline = self._deadline(request)
        if self._ready_controller() is not None or self._is_quorum_leader():
            return await self._admin_here(request.op, request.fields, deadline)
        controller_id = self.controller_id
        address = None if controller_id is None else self._voter_peers.get(controller_id)
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

    async def _client_security_describe(self, request: Request) -> dict[str, Any]:
        if request.op == "describe_acls" and not getattr(self.config, "authorizer_enabled", False):
            raise SecurityDisabledError("ACLs are not enabled on this cluster (acls_enabled)")
        return security_ops.describe(self.image, request.op, request.fields)

    async def _client_metadata(self, request: Request) -> dict[str, Any]:
        names = field(request, "topics", list, items=str, nullable=True, default=None)
        internal = field(request, "internal", bool, default=False)
        if names:
            def all_known(image: MetadataImage) -> bool:
                return all(_complete(image, n) is not None for n in names)
            try:
                await self.wait_for(all_known, MISSING_TOPIC_WAIT_S)
            except RequestTimedOutError:
                pass  # answer with what we have: the missing ones get an error entry
        image = self.image
        topics: list[dict[str, Any]] = []
        wanted = names if names is not None else [
            n for n in image.topic_names(include_internal=internal) if image.topic(n).complete
        ]
        for name in dict.fromkeys(wanted):
            topic = _complete(image, name)
            if topic is None:
                topics.append({"name": name, "error": UnknownTopicOrPartitionError.code})
            else:
                topics.append(_topic_entry(topic))
        return {
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "brokers": [
                {"id": b.broker_id, "host": b.host, "port": b.port, "fenced": b.fenced}
                for _, b in sorted(image.brokers.items())
            ],
            "topics": topics,
        }

    async def _client_describe_configs(self, request: Request) -> dict[str, Any]:
        name = field(request, "name", str)
        topic = _complete(self.image, name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return {
            "name": name,
            "configs": [
                {"name": e.name, "value": e.value, "is_default": e.is_default, "type": e.type, "doc": e.doc}
                for e in describe_configs(topic.configs)
            ],
        }

    async def _client_cluster_status(self, request: Request) -> dict[str, Any]:
        deadline = self._deadline(request)
        ctl = self._ready_controller()
        if ctl is not None:
            return self._cluster_status(ctl)
        if self._is_quorum_leader():
            with trio.move_on_after(min(STATUS_FORWARD_S, max(0.0, deadline - trio.current_time()))):
                await self._controller_ready.wait()
            if (ctl := self._ready_controller()) is not None:
                return self._cluster_status(ctl)
        controller_id = self.controller_id
        address = None if controller_id is None else self._voter_peers.get(controller_id)
        if address is not None:
            timeout_s = min(STATUS_FORWARD_S, max(0.0, deadline - trio.current_time()))
            try:
                return await self.peers.call(
                    address, "controller_forward",
                    {"admin_op": "cluster_status", "fields": {}, "timeout_ms": int(timeout_s * 1000)},
                    timeout_s=timeout_s,
                )  # fmt: skip
            except RaftlogError as exc:
                log_event(logger, "status_forward_failed", level=logging.DEBUG, reason=str(exc))
        return self._cluster_status(None)

    def _cluster_status(self, ctl: Controller | None) -> dict[str, Any]:
        image = self.image
        now_ms = self._clock_ms()
        controller_id = self.node_id if ctl is not None else self.controller_id
        epoch = ctl.controller_epoch if ctl is not None else image.controller_epoch
        brokers = []
        for broker_id, reg in sorted(image.brokers.items()):
            brokers.append({
                "id": broker_id, "host": reg.host, "port": reg.port, "fenced": reg.fenced,
                "kafka": None if reg.kafka_host is None else _hostport(reg.kafka_host, reg.kafka_port),
                "last_heartbeat_age_ms": None if ctl is None else ctl.last_heartbeat_age_ms(broker_id, now_ms),
            })  # fmt: skip
        return {
            "cluster_id": self.cluster_id,
            "controller_id": controller_id,
            "controller_epoch": epoch,
            "commit_index": self.applied_index,
            "answered_by": self.node_id,
            "voters": [
                {"id": v, "address": a, "peer": self._voter_peers.get(v), "leader": v == controller_id}
                for v, a in sorted(self._voter_quorum.items())
            ],
            "brokers": brokers,
            "topics": len(image.topic_names(include_internal=True)),
        }

    # ------------------------------------------------------------------ local broker

    async def _broker_loop(self) -> None:
        heartbeat_s = self.config.heartbeat_ms / 1000
        client = self.config.advertised("client")
        peer = self.config.advertised("peer")
        registration = {
            "broker_id": self.node_id, "incarnation_id": self.incarnation_id,
            "host": client.host, "port": client.port, "peer_host": peer.host, "peer_port": peer.port,
        }  # fmt: skip
        kafka = self.config.advertised("kafka") if getattr(self.config.listeners, "kafka", None) else None
        if kafka is not None:
            registration |= {"kafka_host": kafka.host, "kafka_port": kafka.port}
        failures = 0
        while not self._shutting_down:
            self._broker_wakeup = trio.Event()
            call_timeout_s = max(1.0, min(heartbeat_s * 2, 5.0))
            try:
                if not self.registered:
                    await self._controller_call("broker_register", registration, call_timeout_s)
                    self.registered = True
                    log_event(logger, "broker_registered", broker_id=self.node_id,
                              incarnation_id=self.incarnation_id)
                result = await self._controller_call(
                    "broker_heartbeat",
                    {"broker_id": self.node_id, "incarnation_id": self.incarnation_id},
                    call_timeout_s,
                )  # fmt: skip
                fenced = bool(result.get("fenced", True))
                if fenced != self.fenced:
                    log_event(logger, "broker_fenced" if fenced else "broker_unfenced", broker_id=self.node_id)
                self.fenced = fenced
                failures = 0
            except RaftlogError as exc:
                failures += 1
                if isinstance(exc, (BrokerIdNotRegisteredError, StaleBrokerEpochError)):
                    self.registered = False
                level = logging.INFO if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG
                log_event(logger, "broker_heartbeat_failed", level=level, code=exc.code,
                          reason=exc.message, failures=failures)
            # Fenced or failing: come back sooner (startup and failover speed), with jitter.
            if self.registered and not self.fenced and failures == 0:
                wait_s = heartbeat_s
            else:
                wait_s = min(heartbeat_s, 0.1 * min(failures + 1, 5))
            with trio.move_on_after(wait_s * (0.9 + 0.2 * self._rng.random())):
                await self._broker_wakeup.wait()


_CONTROLLER_OPS: Final[dict[str, Callable[..., Awaitable[dict[str, Any]]]]] = {
    "broker_register": MetadataService._op_broker_register,
    "broker_heartbeat": MetadataService._op_broker_heartbeat,
    "broker_shutdown": MetadataService._op_broker_shutdown,
    "report_partition_leader": MetadataService._op_report_partition_leader,
    "allocate_producer_ids": MetadataService._op_allocate_producer_ids,
    "controller_forward": MetadataService._op_controller_forward,
}


def _complete(image: MetadataImage, name: str) -> TopicImage | None:
    topic = image.topic(name)
    return topic if topic is not None and topic.complete else None


def _partitions(topic: TopicImage) -> list[dict[str, Any]]:
    return [
        {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
         "replicas": list(p.replicas), "preferred_leader": p.preferred_leader}
        for p in topic.partitions
    ]


def _topic_entry(topic: TopicImage) -> dict[str, Any]:
    return {"name": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
            "configs": dict(topic.configs), "partitions": _partitions(topic)}


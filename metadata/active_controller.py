"""The active controller: the role a voter takes while it leads the metadata quorum. It wraps
the pure `Controller` (controller.py) with activation, a tick loop, proposals and the
controller ops that brokers and admin clients send.

Life cycle (controller.py's docstring): when this voter becomes the quorum leader in term T it
builds `Controller(image, T, ...)` and proposes a NoOp; only once that NoOp is in the image (so
the image holds everything committed before it) is it ready (`ready()`) and answers controller
ops. Every decision returns ControllerResult(envelopes, response): the envelopes are proposed
in order (the same bytes re-sent after an unknown outcome, so a retry applies at most once)
and the caller is answered once each envelope's outcome is in the image. The tick loop (every
heartbeat_ms, at most 0.5 s) fences silent brokers, completes split topic creations, creates
`__consumer_offsets` (RF min(3, brokers known)), and asks partition leaders to move
leadership to preferred leaders (at most MAX_TRANSFERS_IN_FLIGHT requests at once). Losing
leadership, or a NOT_CONTROLLER from a newer epoch, drops the Controller.

Errors (PROTOCOL.md): the quorum's NotQuorumLeaderError / QuorumNotRunningError ->
NOT_CONTROLLER with the controller's id and client address; ProposalOutcomeUnknownError (re-sent)
or no answer by the deadline -> REQUEST_TIMED_OUT; EnvelopeTooLargeError -> MESSAGE_TOO_LARGE; a
rejected envelope -> its outcome's code (e.g. TOPIC_ALREADY_EXISTS).

Ops, dispatched through the tables at the end of this module: peer ops `broker_register`,
`broker_heartbeat`, `broker_shutdown`, `report_partition_leader` (one; kept for older
brokers), `report_partition_leaders` (a batch: one result, few proposals), `allocate_producer_ids`,
`controller_forward` (an admin op forwarded by another node; never forwarded again, so no
loops), and the admin ops `create_topic`, `create_partitions`, `delete_topic`,
`alter_configs`, `alter_broker_configs`, `alter_group_configs`, `elect_leaders`, `cluster_status`.

Clock: `clock_ms` gives `now_ms` for the Controller's decisions; deadlines are trio's.
Concurrency: trio thread only. The Controller is only called between awaits, so each decision
sees one image and its pending marks are set before any other task can decide.
May import: raftlog.base and metadata's controller, records, image, quorum and loader.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from metadata import broker_config, election, features, quota_ops, security_ops
from metadata.controller import MAX_LEADER_REPORTS, Controller, ControllerResult
from metadata.balancer import DEFAULT_MAX_MOVES, DEFAULT_TOLERANCE
from metadata.reassignment import ReassignmentItem
from metadata.image import TopicImage
from metadata.loader import MetadataLoader
from metadata.quorum import (
    NotQuorumLeaderError,
    ProposalOutcomeUnknownError,
    ProposalRejectedError,
    Quorum,
    QuorumNotRunningError,
)
from metadata.records import UserScramCredential, encode_envelope
from metadata.settings import MetadataSettings
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    RaftlogError,
    RejectedError,
    RequestTimedOutError,
    SecurityDisabledError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import field

__all__ = ["ActiveController", "ADMIN_OPS", "CONTROLLER_OPS"]

logger = logging.getLogger(__name__)

PROPOSAL_ATTEMPT_S: Final = 5.0
PROPOSAL_BACKOFF_S: Final = 0.05
TRANSFER_TIMEOUT_S: Final = 2.0
MAX_ELECTIONS: Final = 10_000  # partitions one ElectLeaders names at most
MAX_TRANSFERS_IN_FLIGHT: Final = 32

Fields = Mapping[str, Any]


class ActiveController:
    """The controller role of one voter. `status(ctl)` builds the cluster_status answer (the
    service owns it: it also answers without a controller); `on_ready()` runs when a new
    controller becomes ready (the local broker heartbeats it at once)."""

    def __init__(
        self,
        settings: MetadataSettings,
        quorum: Quorum,
        loader: MetadataLoader,
        peers: PeerPool,
        *,
        voter_count: int,
        clock_ms: Callable[[], int],
        rng: random.Random,
        registry: MetricsRegistry,
        status: Callable[[Controller | None], dict[str, Any]],
        on_ready: Callable[[], None],
        bootstrap_credentials: tuple[UserScramCredential, ...] = (),
    ) -> None:
        self._bootstrap_credentials = bootstrap_credentials  # seeded by the controller (security_ops)
        self.node_id = settings.node_id
        self._config = settings
        self._quorum = quorum
        self._loader = loader
        self._peers = peers
        self._voter_count = voter_count
        self._clock_ms = clock_ms
        self._rng = rng
        self._status = status
        self._on_ready = on_ready
        self._controller: Controller | None = None   # set at activation
        self._controller_ready = trio.Event()        # set once its NoOp applied
        self._leader_changed = trio.Event()
        self._transfers = trio.Semaphore(MAX_TRANSFERS_IN_FLIGHT)
        self._nursery: trio.Nursery | None = None
        self._proposals = registry.counter(
            "raftlog_metadata_proposals_total", "Envelope proposals by result.", ("result",)
        )

    # ------------------------------------------------------------------ state

    def ready(self) -> Controller | None:
        """The ready Controller, or None."""
        if self._controller is not None and self._controller_ready.is_set():
            return self._controller
        return None

    def is_quorum_leader(self) -> bool:
        return self._quorum.is_leader and self._quorum.leader_id == self.node_id

    def on_image(self, image: Any) -> None:
        """Loader listener: the Controller follows every image."""
        if self._controller is not None:
            self._controller.update_image(image, self._clock_ms())

    def on_leader_change(self) -> None:
        self._leader_changed.set()

    def not_controller(self, controller_id: int | None) -> NotControllerError:
        """NOT_CONTROLLER with a hint: the controller's id and client address."""
        if controller_id == self.node_id:
            controller_id = None  # we are the leader but not ready yet: no useful hint
        address = None if controller_id is None else self._loader.client_address(controller_id)
        return NotControllerError(controller_id=controller_id, controller=address)

    # ------------------------------------------------------------------ life cycle

    async def run(self) -> None:
        """Follow quorum leadership: activate, tick, resign. Runs until cancelled."""
        interval_s = max(0.05, min(self._config.heartbeat_ms, 500) / 1000)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                self._leader_changed = trio.Event()
                term = self._quorum.term
                if self.is_quorum_leader():
                    if self._controller is None or self._controller.controller_epoch != term:
                        await self._activate(term)
                elif self._controller is not None:
                    self._deactivate("lost quorum leadership")
                ctl = self.ready()
                if ctl is not None:
                    await self._tick(ctl)
                with trio.move_on_after(interval_s):
                    await self._leader_changed.wait()

    def _deactivate(self, reason: str) -> None:
        if self._controller is not None:
            log_event(logger, "controller_resigned", epoch=self._controller.controller_epoch,
                      reason=reason)
        self._controller = None
        if self._controller_ready.is_set():
            self._controller_ready = trio.Event()

    def _offsets_replication_factor(self) -> int:
        return max(1, min(3, max(len(self._loader.image.brokers), self._voter_count)))

    async def _activate(self, term: int) -> None:
        self._deactivate("new term")
        try:
            ctl = Controller(
                self._loader.image, term, self._clock_ms(), random.Random(self._rng.getrandbits(64)),
                session_timeout_ms=self._config.session_timeout_ms,
                autobalancing_mode=self._config.partition_autobalancing_mode,
                node_availability_timeout_ms=self._config.partition_autobalancing_node_availability_timeout_ms,
                min_gap_bytes=self._config.partition_autobalancing_min_gap_bytes,
                offsets_replication_factor=self._offsets_replication_factor(),
                random_bytes=secrets.token_bytes,  # ids from the OS's CSPRNG, not the seeded rng
            )  # fmt: skip
        except NotControllerError as exc:
            log_event(logger, "controller_activation_refused", level=logging.WARNING, reason=str(exc))
            return
        self._controller = ctl
        log_event(logger, "controller_activating", epoch=term)
        while self._controller is ctl and self.is_quorum_leader() and self._quorum.term == term:
            try:
                await self.propose(ctl.noop(), trio.current_time() + PROPOSAL_ATTEMPT_S)
            except RaftlogError as exc:
                log_event(logger, "controller_noop_failed", level=logging.INFO, reason=str(exc))
                await trio.sleep(PROPOSAL_BACKOFF_S * 4)
                continue
            self._controller_ready.set()
            self._on_ready()
            log_event(logger, "controller_active", epoch=term, applied_index=self._loader.applied_index)
            return
        if self._controller is ctl:
            self._deactivate("leadership lost during activation")

    async def _tick(self, ctl: Controller) -> None:
        deadline = trio.current_time() + PROPOSAL_ATTEMPT_S
        try:
            await self.propose(ctl.tick(self._clock_ms()), deadline)
            ctl.offsets_replication_factor = self._offsets_replication_factor()
            await self.propose(ctl.ensure_internal_topics(self._clock_ms()), deadline)
            await self.propose(ctl.ensure_bootstrap_credentials(self._bootstrap_credentials,
                                                                now_ms=self._clock_ms()), deadline)
            for move in ctl.preferred_leader_moves(self._clock_ms()):
                address = self._loader.peer_address(move.leader)
                if address is not None and self._nursery is not None:
                    try:
                        self._transfers.acquire_nowait()
                    except trio.WouldBlock:
                        break
                    self._nursery.start_soon(
                        self._send_transfer, address, move.topic, move.partition, move.preferred_leader
                    )
        except NotControllerError as exc:  # a newer controller wrote, or the quorum moved on
            self._deactivate(str(exc))
        except RaftlogError as exc:
            log_event(logger, "controller_tick_failed", level=logging.INFO, reason=str(exc))

    async def _send_transfer(self, address: str, topic: str, partition: int, target: int) -> None:
        try:
            await self._peers.call(
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

    # ------------------------------------------------------------------ proposals

    async def propose(self, result: ControllerResult[Any], deadline: float) -> Any:
        """Propose each envelope in order and answer with `result.response` once all applied;
        raise the first rejection's error. See the module docstring for error mapping."""
        for envelope in result.envelopes:
            try:
                data = encode_envelope(envelope)
            except RaftlogError as exc:  # EnvelopeTooLargeError
                raise MessageTooLargeError(str(exc)) from None
            await self._propose_bytes(data, envelope.request_id, deadline)
            outcome = self._loader.image.request_outcome(envelope.request_id)
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
        unknown = False
        while True:
            remaining = deadline - trio.current_time()
            if self._loader.image.request_outcome(request_id) is not None:
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
                raise self.not_controller(exc.leader_id) from None
            except QuorumNotRunningError:
                raise self.not_controller(None) from None
            except ProposalOutcomeUnknownError as exc:
                unknown = True  # re-send the same bytes: replay applies a request id once
                log_event(logger, "proposal_unknown", level=logging.INFO, request_id=request_id,
                          reason=exc.reason)
            except ProposalRejectedError as exc:
                log_event(logger, "proposal_rejected", level=logging.INFO, request_id=request_id,
                          reason=exc.reason)
                await trio.sleep(min(PROPOSAL_BACKOFF_S, max(0.0, remaining)))

    async def wait_ready(self) -> None:
        """Return once a Controller is ready (the caller bounds the wait)."""
        while self.ready() is None:
            await self._controller_ready.wait()

    async def require(self, deadline: float) -> Controller:
        """The ready local Controller; waits while this node is the leader and activating.
        Raises NotControllerError (with a hint) otherwise, RequestTimedOutError at `deadline`."""
        while True:
            ctl = self.ready()
            if ctl is not None:
                return ctl
            if not self.is_quorum_leader():
                raise self.not_controller(self._quorum.leader_id)
            with trio.move_on_at(deadline) as scope:
                await self._controller_ready.wait()
            if scope.cancelled_caught:
                raise RequestTimedOutError("the controller is still activating")

    # ------------------------------------------------------------------ ops

    async def run_op(self, op: str, fields: Fields, deadline: float) -> dict[str, Any]:
        """A peer op of CONTROLLER_OPS on this node, which must be the active controller."""
        handler = CONTROLLER_OPS.get(op)
        if handler is None:
            raise InvalidRequestError(f"unknown controller op {op!r:.40}", field="op")
        return await self._guarded(handler, fields, deadline)

    async def admin(self, op: str, fields: Fields, deadline: float) -> dict[str, Any]:
        """An admin op of ADMIN_OPS on this node, which must be the active controller."""
        handler = _ADMIN_HANDLERS.get(op)
        if handler is None:
            raise InvalidRequestError(f"unknown admin op {op!r:.40}", field="op")
        return await self._guarded(handler, fields, deadline)

    async def _guarded(self, handler: _OpHandler, fields: Fields, deadline: float) -> dict[str, Any]:
        ctl = await self.require(deadline)
        try:
            return await handler(self, ctl, fields, deadline)
        except NotControllerError:
            self._deactivate("deposed by a newer controller epoch")
            raise self.not_controller(None) from None

    async def _broker_register(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.register_broker(
            field(fields, "broker_id", int), field(fields, "incarnation_id", str),
            field(fields, "host", str), field(fields, "port", int),
            field(fields, "peer_host", str), field(fields, "peer_port", int),
            field(fields, "rack", str, default=None, nullable=True), now_ms=self._clock_ms(),
            kafka_host=field(fields, "kafka_host", str, default=None, nullable=True),
            kafka_port=field(fields, "kafka_port", int, default=None, nullable=True),
            previous_incarnation_id=field(fields, "previous_incarnation_id", str, default=None, nullable=True),
            capabilities=field(fields, "capabilities", list, default=[]),
        )  # fmt: skip
        response = await self.propose(result, deadline)
        return {"broker_id": response.broker_id, "incarnation_id": response.incarnation_id}

    async def _broker_heartbeat(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.heartbeat(field(fields, "broker_id", int), field(fields, "incarnation_id", str),
                               now_ms=self._clock_ms(), capabilities=field(fields, "capabilities", list, default=[]))
        ctl.record_partition_bytes(field(fields, "partition_bytes", list, default=[]))
        ctl.record_busy_partitions(field(fields, "broker_id", int), field(fields, "busy_partitions", list, default=[]),
                                   now_ms=self._clock_ms())
        response = await self.propose(result, deadline)
        # `fenced` is as of the committed image; after an UnfenceBroker applied, say so now.
        reg = self._loader.image.broker(field(fields, "broker_id", int))
        fenced = response.fenced if reg is None else reg.fenced
        return {"fenced": fenced, "shutting_down": response.shutting_down,
                "controller_epoch": response.controller_epoch}

    async def _broker_shutdown(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.controlled_shutdown(field(fields, "broker_id", int),
                                         field(fields, "incarnation_id", str), now_ms=self._clock_ms())
        await self.propose(result, deadline)
        return {}

    async def _report_partition_leader(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.partition_leader_report(
            field(fields, "topic", str), field(fields, "partition", int),
            field(fields, "leader_id", int), field(fields, "leader_epoch", int),
            now_ms=self._clock_ms(), topic_id=field(fields, "topic_id", str, default=None, nullable=True),
        )  # fmt: skip
        return {"changed": bool(await self.propose(result, deadline))}

    async def _report_partition_leaders(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        reports = field(fields, "reports", list)
        return {"results": await self.propose(ctl.partition_leader_reports(reports, now_ms=self._clock_ms()), deadline)}

    async def _report_partition_membership(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.membership_report(
            field(fields, "topic", str), field(fields, "partition", int, min_value=0),
            tuple(field(fields, "voters", list, items=int)), tuple(field(fields, "learners", list, items=int)),
            now_ms=self._clock_ms(),
        )  # fmt: skip
        return {"changed": bool(await self.propose(result, deadline))}

    async def _alter_partition_reassignments(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        items = []
        partitions = field(fields, "partitions", list)
        if len(partitions) > MAX_LEADER_REPORTS:
            raise InvalidRequestError(f"at most {MAX_LEADER_REPORTS} partitions per request", field="partitions")
        for i, item in enumerate(partitions):
            where = f"partitions[{i}]"
            if not isinstance(item, Mapping):
                raise InvalidRequestError(f"{where} must be a map", field=where)
            replicas = field(item, "replicas", list, items=int, nullable=True, where=where)
            items.append(ReassignmentItem(field(item, "topic", str, where=where),
                                          field(item, "partition", int, min_value=0, where=where),
                                          None if replicas is None else tuple(replicas)))
        results = await self.propose(ctl.alter_partition_reassignments(items, now_ms=self._clock_ms()), deadline)
        return {"results": [{} if e is None else {"error": e.to_wire()} for e in results]}

    async def _decommission_broker(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.decommission_broker(field(fields, "broker_id", int, min_value=0), now_ms=self._clock_ms())
        return {"state": await self.propose(result, deadline)}

    async def _recommission_broker(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.recommission_broker(field(fields, "broker_id", int, min_value=0), now_ms=self._clock_ms())
        return {"state": await self.propose(result, deadline)}

    async def _change_controller(self, op: str, fields: Fields, deadline: float) -> dict:
        """add_controller / remove_controller (issue 44): one voter of the metadata quorum."""
        node_id = field(fields, "voter_id", int, min_value=0)
        address = field(fields, "quorum_address", str, nullable=True, default=None) if op == "add" else None
        timeout_s = max(0.1, deadline - trio.current_time())
        voters = await self._quorum.change_voters(op, node_id, address, timeout_s=timeout_s)
        return {"voters": {str(k): v for k, v in sorted(voters.items())}}

    async def _add_controller(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        return await self._change_controller("add", fields, deadline)

    async def _remove_controller(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        return await self._change_controller("remove", fields, deadline)

    async def _balance(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        tolerance = fields.get("tolerance", DEFAULT_TOLERANCE)
        if type(tolerance) not in (int, float):
            raise InvalidRequestError("tolerance must be a number", field="tolerance")
        result = ctl.balance(dry_run=field(fields, "dry_run", bool, default=False), tolerance=tolerance,
                             max_moves=field(fields, "max_moves", int, default=DEFAULT_MAX_MOVES, min_value=1),
                             now_ms=self._clock_ms())
        rows = await self.propose(result, deadline)
        return {"moves": [row | {"error": row["error"].to_wire()} if "error" in row else row for row in rows]}

    async def _list_partition_reassignments(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        wanted = field(fields, "partitions", list, nullable=True, default=None)
        parts = None if wanted is None else [
            (field(p, "topic", str, where="partitions[]"), field(p, "partition", int, where="partitions[]"))
            for p in wanted if isinstance(p, Mapping)]
        return {"reassignments": [
            {"topic": s.topic, "partition": s.partition, "replicas": list(s.replicas),
             "adding_replicas": list(s.adding_replicas), "removing_replicas": list(s.removing_replicas)}
            for s in ctl.list_partition_reassignments(parts)]}

    async def _allocate_producer_ids(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        block = await self.propose(
            ctl.allocate_producer_ids(field(fields, "broker_id", int), now_ms=self._clock_ms()), deadline
        )
        return {"first_producer_id": block.first_producer_id, "size": block.size}

    async def _ensure_transaction_state(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        ctl.offsets_replication_factor = self._offsets_replication_factor()
        created = await self.propose(ctl.ensure_transaction_state_topic(self._clock_ms()), deadline)
        return {"created": created is not None}

    async def _controller_forward(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        op = field(fields, "admin_op", str)
        handler = _ADMIN_HANDLERS.get(op)
        if handler is None:
            raise InvalidRequestError(f"op {op!r:.40} cannot be forwarded", field="admin_op")
        return await handler(self, ctl, field(fields, "fields", dict), deadline)

    async def _create_topic(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        config = self._config
        name = field(fields, "name", str)
        configs = dict(config.topic_defaults)
        configs.update(field(fields, "configs", dict, default={}))
        # Dynamic num.partitions / default.replication.factor (this node's, else the cluster's) first.
        dynamic = broker_config.effective(self._loader.image.broker_configs, self.node_id)
        partitions = dynamic.get("num.partitions", (config.default_partitions,))[0]
        replication_factor = dynamic.get("default.replication.factor", (config.default_replication_factor,))[0]
        result = ctl.create_topic(
            name,
            field(fields, "partitions", int, default=partitions),
            field(fields, "replication_factor", int, default=replication_factor),
            configs, now_ms=self._clock_ms(),
            assignments=field(fields, "assignments", list, default=None, nullable=True),
        )  # fmt: skip
        response = await self.propose(result, deadline)
        topic = self._loader.image.topic(response.name)
        return {"name": response.name, "topic_id": response.topic_id,
                "partitions": partition_entries(topic) if topic is not None else []}

    async def _create_partitions(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.create_partitions(
            field(fields, "name", str), field(fields, "partitions", int),
            validate_only=field(fields, "validate_only", bool, default=False), now_ms=self._clock_ms(),
            assignments=field(fields, "assignments", list, default=None, nullable=True),
        )  # fmt: skip
        response = await self.propose(result, deadline)
        topic = self._loader.image.topic(response.name)
        return {"name": response.name, "topic_id": response.topic_id,
                "partitions": partition_entries(topic) if topic is not None else []}

    async def _delete_topic(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.delete_topic(field(fields, "name", str), now_ms=self._clock_ms())
        return {"topic_id": await self.propose(result, deadline)}

    async def _alter_configs(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.alter_configs(
            field(fields, "name", str), field(fields, "set", dict, default={}),
            list(field(fields, "delete", list, items=str, default=[])), now_ms=self._clock_ms(),
        )  # fmt: skip
        return {"configs": await self.propose(result, deadline)}

    async def _alter_broker_configs(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.alter_broker_configs(
            field(fields, "resource", str), field(fields, "set", dict, default={}),
            list(field(fields, "delete", list, items=str, default=[])), now_ms=self._clock_ms(),
        )  # fmt: skip
        return {"configs": await self.propose(result, deadline)}

    async def _alter_group_configs(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        result = ctl.alter_group_configs(
            field(fields, "group_id", str), field(fields, "set", dict, default={}),
            list(field(fields, "delete", list, items=str, default=[])), now_ms=self._clock_ms(),
        )  # fmt: skip
        return {"configs": await self.propose(result, deadline)}

    async def _elect_leaders(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        """ElectLeaders PREFERRED: for each partition (all off their preferred replica when
        `partitions` is absent), ask its leader to hand over to the preferred replica; the
        result says whether the leader accepted (the image follows with its next report)."""
        image = self._loader.image
        wanted = field(fields, "partitions", list, default=None, nullable=True)
        if wanted is None:
            keys = election.partitions_off_preferred(image)
        else:
            if len(wanted) > MAX_ELECTIONS:
                raise InvalidRequestError(f"at most {MAX_ELECTIONS} partitions per election", field="partitions")
            if not all(isinstance(item, dict) for item in wanted):
                raise InvalidRequestError("partitions: each item is {topic, partition}", field="partitions")
            keys = [(field(item, "topic", str, where="partitions"),
                     field(item, "partition", int, min_value=0, where="partitions")) for item in wanted]
        results: list[dict[str, Any]] = [{"topic": topic, "partition": p} for topic, p in keys]

        async def one(result: dict[str, Any]) -> None:
            try:
                move = election.preferred_election(image, result["topic"], result["partition"])
                address = self._loader.peer_address(move.leader)
                if address is None:
                    raise PreferredLeaderNotAvailableError(f"no address for the leader, broker {move.leader}")
                with trio.fail_after(max(0.0, deadline - trio.current_time())):
                    await self._peers.call(address, "transfer_leadership", {
                        "topic": move.topic, "partition": move.partition, "target": move.preferred_leader},
                        timeout_s=TRANSFER_TIMEOUT_S)
            except trio.TooSlowError:
                result["error"] = {"code": "REQUEST_TIMED_OUT", "message": "the leader did not answer in time"}
            except RaftlogError as exc:
                code = exc.code if isinstance(exc, RejectedError) else "PREFERRED_LEADER_NOT_AVAILABLE"
                result["error"] = {"code": code, "message": str(exc)}

        limiter = trio.CapacityLimiter(MAX_TRANSFERS_IN_FLIGHT)

        async def limited(result: dict[str, Any]) -> None:
            async with limiter:
                await one(result)

        async with trio.open_nursery() as nursery:
            for result in results:
                nursery.start_soon(limited, result)
        return {"results": results}

    async def _cluster_status(self, ctl: Controller, fields: Fields, deadline: float) -> dict:
        return self._status(ctl)

    async def _security_op(self, op: str, ctl: Controller, fields: Fields, deadline: float) -> dict:
        if op != "alter_user_scram_credentials" and not self._config.authorizer_enabled:
            raise SecurityDisabledError("ACLs are not enabled on this cluster (acls_enabled)")
        return await self.propose(security_ops.decide(ctl, op, fields, now_ms=self._clock_ms()), deadline)


async def _alter_client_quotas(self: ActiveController, ctl: Controller, fields: Fields, deadline: float) -> dict:
    records, results = quota_ops.plan_alter(fields)
    await self.propose(ctl.write_records(records, None), deadline)
    return {"results": results}


async def _update_features(self: ActiveController, ctl: Controller, fields: Fields, deadline: float) -> dict:
    records = features.plan_update(ctl.image, fields)
    if records:
        await self.propose(ctl.write_records(list(records), None), deadline)
    return {}


def partition_entries(topic: TopicImage) -> list[dict[str, Any]]:
    """A topic's partitions as the metadata and create_topic answers list them."""
    return [
        {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
         "replicas": list(p.replicas), "preferred_leader": p.preferred_leader}
        for p in topic.partitions
    ]


_OpHandler = Callable[[ActiveController, Controller, Fields, float], Awaitable[dict[str, Any]]]

CONTROLLER_OPS: Final[Mapping[str, _OpHandler]] = {
    "broker_register": ActiveController._broker_register,
    "broker_heartbeat": ActiveController._broker_heartbeat,
    "broker_shutdown": ActiveController._broker_shutdown,
    "report_partition_leader": ActiveController._report_partition_leader,
    "report_partition_leaders": ActiveController._report_partition_leaders,
    "report_partition_membership": ActiveController._report_partition_membership,
    "allocate_producer_ids": ActiveController._allocate_producer_ids,
    "ensure_transaction_state": ActiveController._ensure_transaction_state,
    "controller_forward": ActiveController._controller_forward,
}

def _security_handler(op: str) -> _OpHandler:
    async def handler(self: ActiveController, ctl: Controller, fields: Fields, deadline: float) -> dict:
        return await self._security_op(op, ctl, fields, deadline)

    return handler


_ADMIN_HANDLERS: Final[Mapping[str, _OpHandler]] = {
    "create_topic": ActiveController._create_topic,
    "create_partitions": ActiveController._create_partitions,
    "delete_topic": ActiveController._delete_topic,
    "alter_configs": ActiveController._alter_configs,
    "alter_broker_configs": ActiveController._alter_broker_configs,
    "alter_group_configs": ActiveController._alter_group_configs,
    "elect_leaders": ActiveController._elect_leaders,
    "cluster_status": ActiveController._cluster_status,
    "alter_partition_reassignments": ActiveController._alter_partition_reassignments,
    "list_partition_reassignments": ActiveController._list_partition_reassignments,
    "decommission_broker": ActiveController._decommission_broker,
    "balance": ActiveController._balance,
    "add_controller": ActiveController._add_controller,
    "remove_controller": ActiveController._remove_controller,
    "recommission_broker": ActiveController._recommission_broker,
    "alter_client_quotas": _alter_client_quotas,
    "update_features": _update_features,
} | {op: _security_handler(op) for op in security_ops.ADMIN_SECURITY_OPS}

ADMIN_OPS: Final = frozenset(_ADMIN_HANDLERS)

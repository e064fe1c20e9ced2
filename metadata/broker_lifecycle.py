"""The local broker's side of broker lifecycle: register with the active controller, heartbeat
it, learn whether this broker is fenced, and on shutdown ask for a controlled shutdown.

The controller fences a broker that has not heartbeat within `session_timeout_ms` and unfences
it on a heartbeat after registration (controller.py). Here: a registered, unfenced broker
heartbeats every `heartbeat_ms`; while it is fenced, unregistered or failing it comes back
sooner (0.1 s growing to 0.5 s, never above heartbeat_ms), with ±10 % jitter, for startup and
failover speed. BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH (the controller forgot this
incarnation) registers again. `wake()` makes it heartbeat now (a new controller is known).

Clock: waits only (trio's clock). May import: raftlog.base.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from metadata.features import BROKER_CAPABILITIES
from metadata.settings import MetadataSettings
from raftlog.base.errors import BrokerIdNotRegisteredError, RaftlogError, StaleBrokerEpochError
from raftlog.base.eventlog import log_event

__all__ = ["BrokerLifecycle"]

logger = logging.getLogger(__name__)

SHUTDOWN_CALL_S: Final = 3.0

ControllerCall = Callable[[str, Mapping[str, Any], float], Awaitable[dict[str, Any]]]


class BrokerLifecycle:
    """One per broker node. `controller_call(op, fields, timeout_s)` reaches the active
    controller, here or over the peer pool."""

    def __init__(self, settings: MetadataSettings, controller_call: ControllerCall, rng: random.Random,
                 clock_ms: Callable[[], int], *,
                 incarnation: tuple[str | None, str] | None = None) -> None:
        """`incarnation`: (the incarnation that last ran on this node's data dir or None,
        this process's), as the node keeps them (Controller.register_broker); default: a
        new id and no predecessor."""
        self.node_id = settings.node_id
        self._clock_ms = clock_ms
        self._config = settings
        self._controller_call = controller_call
        self._rng = rng
        self.previous_incarnation_id, self.incarnation_id = (
            incarnation if incarnation is not None else (None, secrets.token_urlsafe(12)))
        self.registered = False
        self.fenced = True
        self._shutting_down = False
        self._wakeup = trio.Event()
        # [[topic, partition, bytes]] of the partitions it leads, sent with each heartbeat
        self.partition_bytes: Callable[[], list[list[Any]]] = list
        # the internal partitions whose coordinator is busy here (raftlog/base/topics.py busy_row)
        self.busy_partitions: Callable[[], list[dict[str, Any]]] = list
        self._last_ok_ms: int | None = None  # clock_ms of the last answered heartbeat
        self._started_ms: int | None = None

    def wake(self) -> None:
        self._wakeup.set()

    def silent_ms(self, now_ms: int) -> int | None:
        """How long the controller has not answered a heartbeat (since the last answer, or
        since this broker started); None before `run` starts."""
        since = self._last_ok_ms if self._last_ok_ms is not None else self._started_ms
        return None if since is None else now_ms - since

    async def run(self) -> None:
        """Register and heartbeat until `drain()`."""
        heartbeat_s = self._config.heartbeat_ms / 1000
        client_host, client_port = self._config.advertised_client
        peer_host, peer_port = self._config.advertised_peer
        registration = {
            "broker_id": self.node_id, "incarnation_id": self.incarnation_id,
            "host": client_host, "port": client_port, "peer_host": peer_host, "peer_port": peer_port,
            "capabilities": list(BROKER_CAPABILITIES),  # metadata/features.py "Broker capabilities"
        }  # fmt: skip
        if self._config.advertised_kafka is not None:
            kafka_host, kafka_port = self._config.advertised_kafka
            registration |= {"kafka_host": kafka_host, "kafka_port": kafka_port}
        if self._config.broker_rack is not None:
            registration["rack"] = self._config.broker_rack
        if self.previous_incarnation_id is not None:
            registration["previous_incarnation_id"] = self.previous_incarnation_id
        failures = 0
        self._started_ms = self._clock_ms()
        while not self._shutting_down:
            self._wakeup = trio.Event()
            call_timeout_s = max(1.0, min(heartbeat_s * 2, 5.0))
            try:
                if not self.registered:
                    await self._controller_call("broker_register", registration, call_timeout_s)
                    self.registered = True
                    log_event(logger, "broker_registered", broker_id=self.node_id,
                              incarnation_id=self.incarnation_id)
                result = await self._controller_call(
                    "broker_heartbeat",
                    {"broker_id": self.node_id, "incarnation_id": self.incarnation_id,
                     "partition_bytes": self.partition_bytes(), "busy_partitions": self.busy_partitions(),
                     "capabilities": list(BROKER_CAPABILITIES)},
                    call_timeout_s,
                )  # fmt: skip
                fenced = bool(result.get("fenced", True))
                if fenced != self.fenced:
                    log_event(logger, "broker_fenced" if fenced else "broker_unfenced", broker_id=self.node_id)
                self.fenced = fenced
                self._last_ok_ms = self._clock_ms()
                failures = 0
            except RaftlogError as exc:
                failures += 1
                if isinstance(exc, (BrokerIdNotRegisteredError, StaleBrokerEpochError)):
                    self.registered = False
                level = logging.INFO if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG
                log_event(logger, "broker_heartbeat_failed", level=level, code=exc.code,
                          reason=exc.message, failures=failures)
            if self.registered and not self.fenced and failures == 0:
                wait_s = heartbeat_s
            else:
                wait_s = min(heartbeat_s, 0.1 * min(failures + 1, 5))
            with trio.move_on_after(wait_s * (0.9 + 0.2 * self._rng.random())):
                await self._wakeup.wait()

    async def drain(self) -> None:
        """Stop heartbeating and ask for a controlled shutdown, so the controller fences this
        broker at once and its next incarnation may register at once."""
        self._shutting_down = True
        self._wakeup.set()
        if not self.registered:
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

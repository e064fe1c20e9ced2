"""Blocking shell for consumer groups: the group half of `raftlog.client.Consumer`. What it
does is group_session.py's (shared with the trio shell); this module only performs it.

    c = Consumer("127.0.0.1:9093", group_id="g", enable_auto_commit=False,
                 session_timeout_ms=3000, partition_assignment_strategy="cooperative-sticky")
    c.subscribe(["events"], on_revoked=..., on_assigned=...)
    for r in c.poll(1000): ...; c.commit()

Threads (as Kafka's consumer): the caller's thread runs joins, syncs, rebalance callbacks
and commits inside `poll()` / `commit()`; one heartbeat thread ("raftlog-heartbeat") sends
heartbeats every `heartbeat_interval_ms` while the member is Stable, and flags a rejoin that
the next `poll()` performs. Both drive one GroupCore (own connections to the coordinator)
under one RLock; the heartbeat thread never waits for the lock longer than a heartbeat
interval (while a join holds it the member is alive by definition).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import RaftlogError
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.consumer import ConsumerCore
from raftlog.client.group import TopicPartition
from raftlog.client.group_session import (
    BrokerRequest,
    Callback,
    CoordRequest,
    Effect,
    GroupSession,
    Procedure,
    UserCallback,
    drive,
)
from raftlog.client.network_blocking import Network, step

__all__ = ["BlockingGroup"]

log = logging.getLogger(__name__)


class BlockingGroup(GroupSession):
    """Group membership for one blocking Consumer (its ConsumerCore is `consumer_core`)."""

    def __init__(self, consumer_core: ConsumerCore, bootstrap: str | Iterable[str], *,
                 request_timeout_ms: int = 30_000, clock: Clock = SYSTEM_CLOCK,
                 security: ClientSecurity | None = None, **options: Any):
        """`options`: new_group's (group.py), defaults included; `security`: the Consumer's."""
        super().__init__(consumer_core, bootstrap, clock=clock, request_timeout_ms=request_timeout_ms,
                         **options)
        self._net = Network(self.core, clock=clock, connect_timeout_ms=min(request_timeout_ms, 10_000),
                            send_timeout_ms=request_timeout_ms, security=security)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- performing a procedure's effects (lock held) ----

    def _drive(self, procedure: Procedure) -> Any:
        with self._lock:
            return drive(procedure, self._perform)

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, UserCallback):
            return effect.fn(effect.partitions)
        now = self.clock.monotonic_ms()
        if isinstance(effect, CoordRequest):
            call = self.core.coord_call(effect.request, now, effect.timeout_ms, retry_commit=effect.retry_commit)
        else:
            assert isinstance(effect, BrokerRequest), effect
            call = self.core.submit(effect.request, now, timeout_ms=effect.timeout_ms)
        while not call.done:
            step(self.core, self._net, call.deadline_ms)
        return call.value()

    # ---- API (the Consumer's) ----

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  on_revoked: Callback = None, on_assigned: Callback = None) -> None:
        with self._lock:
            super().subscribe(topics, pattern, on_revoked, on_assigned)
            if self._thread is None:
                self._thread = threading.Thread(target=self._heartbeat_loop, name="raftlog-heartbeat",
                                                daemon=True)
                self._thread.start()

    def before_poll(self) -> None:
        """Rejoin if needed (runs callbacks), auto-commit if due. Raises a fatal group error
        (FENCED_INSTANCE_ID, ...) found by the heartbeat thread."""
        if not self.subscribed or self.joining:
            return  # not in a group, or poll() called from inside a rebalance callback
        with self._lock:
            self.raise_error()
            self.reap_async_commits()
            self._drive(self.match_pattern())
            if self.join_due():
                self._drive(self.join_rounds())
            self.auto_commit()

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *, sync: bool = True) -> None:
        """Commit `offsets` (default: the positions of the assigned partitions). Sync waits
        for the acks=all append and raises its error; async queues it and returns (the answer
        is checked at the next poll, a failure logged; it is sent with the next heartbeat or
        poll, whichever steps the coordinator's connection first)."""
        with self._lock:
            if sync:
                self._drive(self.commit_offsets(offsets))
            else:
                self.commit_async(offsets)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._drive(self.fetch_committed(partitions))

    # ---- heartbeat thread ----

    def _heartbeat_loop(self) -> None:
        m = self.membership
        while not self._stop.is_set():
            with self._lock:
                wait_ms = self.heartbeat_wait_ms()
            if self._stop.wait(wait_ms / 1000):
                return
            if not self._lock.acquire(timeout=m.heartbeat_interval_ms / 1000):
                continue  # a join or commit runs: the member is alive meanwhile
            try:
                if not self._stop.is_set():
                    self._drive(self.heartbeat_round())
            except (OSError, RaftlogError) as exc:
                log.warning("group %s: heartbeat failed: %s", m.group_id, exc)
            finally:
                self._lock.release()

    # ---- close ----

    def close(self, *, leave: bool = True) -> None:
        """Stop the heartbeat thread, commit (auto commit), leave the group (dynamic members)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._drive(self.leave_group(leave))
        finally:
            self._net.close()

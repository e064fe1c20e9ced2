"""Trio shell for consumer groups: the group half of `raftlog.aio.Consumer`. What it does is
group_session.py's (shared with the blocking shell); this module only performs it.

    async with aio.Consumer("127.0.0.1:9093", group_id="g", enable_auto_commit=False,
                            session_timeout_ms=3000) as c:
        c.subscribe(["events"], on_revoked=..., on_assigned=...)   # plain or async callbacks
        for r in await c.poll(1000): ...
        await c.commit()

Tasks (all in the Consumer's nursery, none a thread): one driver task owns the GroupCore's
connections (its own, apart from the fetch connections): it polls the core, sends, and
dispatches answers, then wakes every task waiting on a call (as the Producer's sender does).
One heartbeat task sends heartbeats every `heartbeat_interval_ms` while the member is Stable
and flags a rejoin that the next `poll()` performs. Joins, syncs, rebalance callbacks and
commits run in the task that calls `poll()` / `commit()`.

Invariants: a join and a heartbeat round trip never overlap (one trio.Lock), so a late
heartbeat answer cannot undo a join; a heartbeat answer from an older generation is
ignored. Commits do not take that lock, so a rebalance callback may `await commit()`.
Closing stops heartbeats, commits (auto commit), then leaves (dynamic members), so the
others rebalance at once. Time: the consumer's clock (by default trio's), nothing else.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from raftlog.base.client_properties import ClientSecurity
from raftlog.client.clock import Clock
from raftlog.client.consumer import ConsumerCore
from raftlog.client.core import Call
from raftlog.client.errors import ClientClosedError
from raftlog.client.group import TopicPartition
from raftlog.client.group_session import (
    BrokerRequest,
    Callback,
    CoordRequest,
    Effect,
    GroupSession,
    Procedure,
    UserCallback,
    drive_async,
)
from raftlog.client.network_aio import TRIO_CLOCK, Connect, Network, step

__all__ = ["TrioGroup", "call_back"]

log = logging.getLogger(__name__)


async def call_back(fn: Callback, partitions: list[TopicPartition]) -> Any:
    """Run a rebalance callback that may be a plain or an async function (its errors propagate
    to the caller of poll, as in the blocking shell)."""
    if fn is None:
        return None
    result = fn(partitions)
    if inspect.isawaitable(result):
        return await result
    return result


class TrioGroup(GroupSession):
    """Group membership for one trio Consumer (its ConsumerCore is `consumer_core`).

    Options and defaults as BlockingGroup. Call `await start(nursery)` once (the Consumer does
    it on `async with`), `await aclose()` once to commit, leave and stop.
    """

    def __init__(self, consumer_core: ConsumerCore, bootstrap: str | Iterable[str], *,
                 request_timeout_ms: int = 30_000, clock: Clock = TRIO_CLOCK,
                 connect: Connect | None = None, security: ClientSecurity | None = None, **options: Any):
        """`options`: new_group's (group.py), defaults included; `security`: the Consumer's."""
        super().__init__(consumer_core, bootstrap, clock=clock, request_timeout_ms=request_timeout_ms,
                         **options)
        self._connect = connect
        self._security = security
        self._net: Network | None = None  # made in start()
        self._lock = trio.Lock()  # join/sync vs heartbeat round trips
        self._changed = trio.Event()  # set (and replaced) after every driver step
        self._driver_running = False
        self._driver_scope = trio.CancelScope()
        self._heartbeat_scope = trio.CancelScope()

    # ---- tasks ----

    async def start(self, nursery: trio.Nursery) -> None:
        """Open the group's network in `nursery` and start the driver and heartbeat tasks."""
        self._net = Network(self.core, nursery, clock=self.clock, connect=self._connect,
                            connect_timeout_ms=min(self.request_timeout_ms, 10_000),
                            send_timeout_ms=self.request_timeout_ms, security=self._security)
        await nursery.start(self._drive_network)
        nursery.start_soon(self._heartbeat_loop)

    async def _drive_network(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._driver_running = True
        try:
            with self._driver_scope:
                task_status.started()
                while True:
                    await step(self.core, self._net, None)
                    self.reap_async_commits()
                    self._notify()
        finally:
            self._driver_running = False
            self._notify()  # waiters see the driver gone and give up

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ---- performing a procedure's effects ----

    async def _drive(self, procedure: Procedure) -> Any:
        """`group_session.drive`, awaiting each effect."""
        return await drive_async(procedure, self._perform)

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, UserCallback):
            return await call_back(effect.fn, effect.partitions)
        if isinstance(effect, CoordRequest):
            return await self._run(effect.request, effect.timeout_ms, retry_commit=effect.retry_commit)
        assert isinstance(effect, BrokerRequest), effect
        return await self._any(effect.request, effect.timeout_ms)

    async def _wait(self, call: Call) -> dict:
        """The call's ok answer (raises its error). Raises ClientClosedError if the driver stopped."""
        if self._net is not None:
            self._net.kick()
        while not call.done:
            if not self._driver_running:
                raise ClientClosedError(f"group {self.membership.group_id}: consumer closed")
            await self._changed.wait()
        return call.value()

    async def _run(self, request: dict, timeout_ms: int | None = None, *, retry_commit: bool = False) -> dict:
        """The coordinator's ok answer to `request` (raises its error)."""
        return await self._wait(self.core.coord_call(request, self.clock.monotonic_ms(), timeout_ms,
                                                     retry_commit=retry_commit))

    async def _any(self, request: dict, timeout_ms: int | None = None) -> dict:
        """Any broker's ok answer to `request` (raises its error)."""
        return await self._wait(self.core.submit(request, self.clock.monotonic_ms(), timeout_ms=timeout_ms))

    # ---- API (the Consumer's) ----

    async def before_poll(self) -> None:
        """Rejoin if needed (runs callbacks), auto-commit if due. Raises a fatal group error
        (FENCED_INSTANCE_ID, ...) found by the heartbeat task."""
        if not self.subscribed or self.joining:
            return  # not in a group, or poll() called from inside a rebalance callback
        self.raise_error()
        await self._drive(self.match_pattern())
        if self.join_due():
            async with self._lock:
                await self._drive(self.join_rounds())
        if self.auto_commit() and self._net is not None:
            self._net.kick()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: the positions of the assigned partitions), wait for the
        acks=all append and raise its error (ILLEGAL_GENERATION etc. after a rebalance)."""
        await self._drive(self.commit_offsets(offsets))

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> bool:
        """Send a commit and return at once; its outcome is logged (warning on failure)."""
        queued = super().commit_async(offsets)
        if queued and self._net is not None:
            self._net.kick()
        return queued

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return await self._drive(self.fetch_committed(partitions))

    # ---- heartbeat task ----

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        with self._heartbeat_scope:
            while True:
                # A timer, not synchronisation: the heartbeat is due on the clock.
                await trio.sleep(self.heartbeat_wait_ms() / 1000)
                if not self.heartbeat_due():
                    continue
                # Wait a heartbeat interval at most for the lock: while a join holds it the
                # member is alive by definition. The round trip itself runs to its deadline.
                acquired = False
                with trio.move_on_after(m.heartbeat_interval_ms / 1000):
                    await self._lock.acquire()
                    acquired = True
                if not acquired:
                    continue
                try:
                    await self._drive(self.heartbeat_round())
                except OSError as exc:
                    log.warning("group %s: heartbeat failed: %s", m.group_id, exc)
                finally:
                    self._lock.release()

    # ---- close ----

    async def aclose(self, *, leave: bool = True) -> None:
        """Stop heartbeats, commit (auto commit), leave the group (dynamic members), stop the
        driver. Failures are logged: a member that cannot leave expires after its session."""
        if self.closed:
            return
        self._heartbeat_scope.cancel()
        try:
            with trio.move_on_after(self.request_timeout_ms / 1000):
                await self._drive(self.leave_group(leave))
        finally:
            self.closed = True
            self.membership.reset()
            self._driver_scope.cancel()
            if self._net is not None:
                await self._net.aclose()
                self._net.inbox_send.close()  # readers still ending must not block on a full inbox

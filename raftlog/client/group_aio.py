"""Trio shell for consumer groups: the group half of `raftlog.aio.Consumer` (the twin of
group_blocking.py, driving the same sans-I/O GroupCore + GroupMembership of group.py).

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
Ordering: offsets are committed (auto commit) before partitions are revoked; a partition is
handed to the Consumer only after SyncGroup confirmed it, and its position starts at the
group's committed offset (else `auto_offset_reset`). Closing commits (auto commit), stops
heartbeats, then leaves (dynamic members), so the others rebalance at once.
Limits: every call has a deadline (coord_call), at most MAX_JOIN_ROUNDS join/sync rounds
per poll, pending async commits bounded by group.MAX_COORD_CALLS.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from raftlog.client.core import Call, check_response, metadata_request, parse_metadata
from raftlog.client.errors import ClientClosedError
from raftlog.client.group import (
    MAX_JOIN_ROUNDS,
    TopicPartition,
    check_commit,
    offset_fetch_request,
    known_positions,
    new_group,
    parse_offset_fetch,
    reap_async_commits,
    seek_committed,
)
from raftlog.base.errors import FencedInstanceIdError, RaftlogError, RequestTimedOutError
from raftlog.client.network_aio import Network, mono_ms, step

__all__ = ["TrioGroup", "call_back"]

log = logging.getLogger(__name__)

LEAVE_TIMEOUT_MS = 5_000  # as the blocking shell: a leave is a courtesy, the session expires anyway

Callback = Callable[[list[TopicPartition]], Any] | None



async def call_back(fn: Callback, partitions: list[TopicPartition]) -> None:
    """Run a rebalance callback that may be a plain or an async function (its errors propagate
    to the caller of poll, as in the blocking shell)."""
    if fn is None:
        return
    result = fn(partitions)
    if inspect.isawaitable(result):
        await result


class TrioGroup:
    """Group membership for one trio Consumer (`consumer` gives `_core`, the ConsumerCore).

    Options and defaults as BlockingGroup. Call `await start(nursery)` once (the Consumer does
    it on `async with`), `await aclose()` once to commit, leave and stop.
    """

    def __init__(self, consumer: Any, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 **options: Any):
        """`options`: new_group's (group.py), defaults included."""
        self._consumer = consumer
        self.membership, self.core = new_group(bootstrap, request_timeout_ms=request_timeout_ms, **options)
        self._request_timeout_ms = request_timeout_ms
        self._net: Any = None  # aio._TrioNetwork, made in start()
        self._lock = trio.Lock()  # join/sync vs heartbeat round trips
        self._changed = trio.Event()  # set (and replaced) after every driver step
        self._driver_running = False
        self._driver_scope = trio.CancelScope()
        self._heartbeat_scope = trio.CancelScope()
        self._on_revoked: Callback = None
        self._on_assigned: Callback = None
        self._subscribed = False
        self._joining = False
        self._closed = False
        self._error: BaseException | None = None
        self._async_commits: list[Call] = []
        # Partitions assigned whose committed offsets were not yet fetched (an interrupted join).
        self._unpositioned: set[TopicPartition] = set()

    # ---- tasks ----

    async def start(self, nursery: trio.Nursery) -> None:
        """Open the group's network in `nursery` and start the driver and heartbeat tasks."""
        self._net = Network(self.core, nursery, connect_timeout_ms=min(self._request_timeout_ms, 10_000),
                                 send_timeout_ms=self._request_timeout_ms)
        await nursery.start(self._drive)
        nursery.start_soon(self._heartbeat_loop)

    async def _drive(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._driver_running = True
        try:
            with self._driver_scope:
                task_status.started()
                while True:
                    await step(self.core, self._net, None)
                    self._reap_async_commits()
                    self._notify()
        finally:
            self._driver_running = False
            self._notify()  # waiters see the driver gone and give up

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait(self, call: Call) -> dict:
        """The call's ok answer (raises its error). Raises ClientClosedError if the driver stopped."""
        if self._net is not None:
            self._net.kick()
        while not call.done:
            if not self._driver_running:
                raise ClientClosedError(f"group {self.membership.group_id}: consumer closed")
            await self._changed.wait()
        return call.value()

    async def _run(self, request: dict, timeout_ms: int | None = None) -> dict:
        return await self._wait(self.core.coord_call(request, mono_ms(), timeout_ms))

    async def _any(self, request: dict, timeout_ms: int | None = None) -> dict:
        return await self._wait(self.core.submit(request, mono_ms(), timeout_ms=timeout_ms))

    # ---- subscription ----

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  on_revoked: Callback = None, on_assigned: Callback = None) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if isinstance(topics, str):
            topics = [topics]
        self.membership.subscribe(topics, pattern)
        self._on_revoked, self._on_assigned = on_revoked, on_assigned
        self._subscribed = True

    def subscription(self) -> tuple[str, ...]:
        return self.membership.topics

    # ---- poll hooks (caller's task) ----

    async def before_poll(self, deadline_ms: int) -> None:
        """Rejoin if needed (runs callbacks), auto-commit if due. Raises a fatal group error
        (FENCED_INSTANCE_ID, ...) found by the heartbeat task."""
        if not self._subscribed or self._joining:
            return  # not in a group, or poll() called from inside a rebalance callback
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        m = self.membership
        if m.pattern is not None and (m.rejoin_needed or not m.topics):
            md = parse_metadata(await self._any(metadata_request(None)))
            m.match_topics(md.topics)
        if m.rejoin_needed:
            async with self._lock:
                self._joining = True
                try:
                    await self._join(deadline_ms)
                finally:
                    self._joining = False
        now = mono_ms()
        if m.auto_commit_due(now):
            self.commit_async()
            m.auto_committed(now)

    async def _join(self, deadline_ms: int) -> None:
        m = self.membership
        consumer_core = self._consumer._core
        if not m.cooperative and m.assignment:
            await self._revoke(m.assignment)
            m.revoke_all()
            consumer_core.assign([])
        for _ in range(MAX_JOIN_ROUNDS):
            try:
                m.on_join_ok(await self._run(m.join_request(), m.rebalance_timeout_ms + 10_000))
            except RaftlogError as exc:
                m.on_join_error(exc)
                continue
            plan = None
            if m.is_leader:
                topics = sorted(m.subscribed_topics_of_group())
                counts: dict[str, int] = {}
                if topics:
                    md = parse_metadata(await self._any(metadata_request(topics)))
                    counts = {name: len(t.partitions) for name, t in md.topics.items()}
                plan = m.assign(counts)
            try:
                resp = await self._run(m.sync_request(plan), m.rebalance_timeout_ms + 10_000)
            except RaftlogError as exc:
                m.on_sync_error(exc)
                continue
            added, revoked = m.on_sync_ok(resp, mono_ms())
            owned = set(m.assignment)
            self._unpositioned = {tp for tp in self._unpositioned if tp in owned} | set(added)
            newly = sorted(self._unpositioned)  # what on_assigned has not announced yet
            try:
                if revoked:
                    await self._revoke(revoked)
                consumer_core.assign(m.assignment)
                if self._unpositioned:
                    await self._start_positions(sorted(self._unpositioned))
                    self._unpositioned = set()
            except BaseException:
                # Cancelled or failed before the Consumer had its new partitions at their
                # committed offsets: join again at the next poll, and fetch those offsets then
                # (not auto_offset_reset where a committed offset exists).
                m.rejoin_needed = True
                raise
            log.info("group %s generation %d: member %s owns %s", m.group_id, m.generation_id,
                     m.member_id, list(m.assignment))
            await call_back(self._on_assigned, list(m.assignment) if not m.cooperative else newly)
            if not m.rejoin_needed:
                return
        raise RequestTimedOutError(f"group {m.group_id}: no stable membership after {MAX_JOIN_ROUNDS} rounds")

    async def _revoke(self, partitions: Iterable[TopicPartition]) -> None:
        parts = list(partitions)
        if self.membership.enable_auto_commit:
            try:
                await self._commit_positions(sync=True, only=parts)
            except RaftlogError as exc:
                log.warning("group %s: commit before revoking failed: %s", self.membership.group_id, exc)
        await call_back(self._on_revoked, parts)

    async def _start_positions(self, partitions: list[TopicPartition]) -> None:
        committed = parse_offset_fetch(await self._run(offset_fetch_request(self.membership.group_id, partitions)))
        seek_committed(self._consumer._core, committed)

    # ---- commits ----

    def positions(self, only: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """{partition: position} of the assigned partitions whose position is known."""
        return known_positions(self._consumer._core, self.membership.assignment if only is None else only)

    async def _commit_positions(self, *, sync: bool, only: Iterable[TopicPartition] | None = None) -> None:
        offsets = self.positions(only)
        if not offsets:
            return
        if sync:
            await self.commit(offsets)
        else:
            self.commit_async(offsets)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: the positions of the assigned partitions), wait for the
        acks=all append and raise its error (ILLEGAL_GENERATION etc. after a rebalance)."""
        if offsets is None:
            offsets = self.positions()
        if not offsets:
            return
        check_commit(await self._run(self.membership.commit_request(dict(offsets))))

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Send a commit and return at once; its outcome is logged (warning on failure)."""
        if offsets is None:
            offsets = self.positions()
        if not offsets or self._closed:
            return
        try:
            call = self.core.coord_call(self.membership.commit_request(dict(offsets)), mono_ms())
        except RaftlogError as exc:  # too many calls pending: the coordinator is unreachable
            log.warning("group %s: async commit not sent: %s", self.membership.group_id, exc)
            return
        self._async_commits.append(call)
        if self._net is not None:
            self._net.kick()

    def _reap_async_commits(self) -> None:
        self._async_commits = reap_async_commits(self._async_commits, self.membership.group_id)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return parse_offset_fetch(await self._run(offset_fetch_request(self.membership.group_id, list(partitions))))

    # ---- heartbeat task ----

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        with self._heartbeat_scope:
            while True:
                wait_ms = max(10, m.next_heartbeat_ms() - mono_ms()) if m.stable else m.heartbeat_interval_ms
                # A timer, not synchronisation: the heartbeat is due on the clock.
                await trio.sleep(min(wait_ms, m.heartbeat_interval_ms) / 1000)
                if not m.heartbeat_due(mono_ms()):
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
                    await self._heartbeat_once()
                finally:
                    self._lock.release()

    async def _heartbeat_once(self) -> None:
        m = self.membership
        if not m.heartbeat_due(mono_ms()):
            return
        generation = m.generation_id
        call = self.core.coord_call(m.heartbeat_request(), mono_ms(), m.session_timeout_ms // 2)
        try:
            check_response(await self._wait(call))
        except FencedInstanceIdError as exc:
            self._error = exc
            m.reset()
        except ClientClosedError:
            return
        except RaftlogError as exc:
            if m.generation_id == generation:
                m.on_heartbeat_error(exc, mono_ms())
        except OSError as exc:
            log.warning("group %s: heartbeat failed: %s", m.group_id, exc)
        else:
            if m.generation_id == generation:
                m.on_heartbeat_ok(mono_ms())

    # ---- close ----

    async def aclose(self, *, leave: bool = True) -> None:
        """Commit (auto commit), stop heartbeats, leave the group (dynamic members), stop the
        driver. Failures are logged: a member that cannot leave expires after its session."""
        if self._closed:
            return
        self._closed = True
        self._heartbeat_scope.cancel()
        m = self.membership
        try:
            with trio.move_on_after(self._request_timeout_ms / 1000):
                if self._subscribed and m.stable and m.enable_auto_commit:
                    await self._commit_positions(sync=True)
                if leave and m.member_id and m.group_instance_id is None:
                    await self._run(m.leave_request(), LEAVE_TIMEOUT_MS)
        except (RaftlogError, OSError) as exc:
            log.info("group %s: leaving failed: %s", m.group_id, exc)
        finally:
            m.reset()
            self._driver_scope.cancel()
            if self._net is not None:
                await self._net.aclose()
                self._net.inbox_send.close()  # readers still ending must not block on a full inbox

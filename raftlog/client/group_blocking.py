"""Blocking shell for consumer groups: the group half of `raftlog.client.Consumer`.

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

Ordering: offsets are committed (auto commit) before partitions are revoked; a partition is
handed to the Consumer only after SyncGroup confirmed it, and its position starts at the
group's committed offset (else `auto_offset_reset`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raftlog.base.errors import (
    FencedInstanceIdError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.client.core import Call, check_response, metadata_request, parse_metadata
from raftlog.client.group import (
    MAX_JOIN_ROUNDS,
    TopicPartition,
    check_commit,
    known_positions,
    new_group,
    offset_fetch_request,
    parse_offset_fetch,
    reap_async_commits,
    seek_committed,
)
from raftlog.client.network_blocking import Network, mono_ms, step

__all__ = ["BlockingGroup"]

log = logging.getLogger(__name__)

Callback = Callable[[list[TopicPartition]], Any] | None



class BlockingGroup:
    """Group membership for one blocking Consumer (`consumer` gives `_core`, the ConsumerCore,
    and `_request_timeout_ms`)."""

    def __init__(self, consumer: Any, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 **options: Any):
        """`options`: new_group's (group.py), defaults included."""
        self._consumer = consumer
        self.membership, self.core = new_group(bootstrap, request_timeout_ms=request_timeout_ms, **options)
        self._net = Network(self.core, connect_timeout_ms=min(request_timeout_ms, 10_000),
                             send_timeout_ms=request_timeout_ms)
        self._request_timeout_ms = request_timeout_ms
        self._lock = threading.RLock()
        self._on_revoked: Callback = None
        self._on_assigned: Callback = None
        self._subscribed = False
        self._closed = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._async_commits: list[Call] = []  # checked (failures logged) before each poll

    # ---- driving the core (lock held) ----

    def _run(self, request: dict, timeout_ms: int | None = None) -> dict:
        with self._lock:
            call = self.core.coord_call(request, mono_ms(), timeout_ms)
            while not call.done:
                step(self.core, self._net, call.deadline_ms)
            return call.value()

    def _any(self, request: dict, timeout_ms: int | None = None) -> dict:
        with self._lock:
            call = self.core.submit(request, mono_ms(), timeout_ms=timeout_ms)
            while not call.done:
                step(self.core, self._net, call.deadline_ms)
            return call.value()

    # ---- subscription ----

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  on_revoked: Callback = None, on_assigned: Callback = None) -> None:
        with self._lock:
            if isinstance(topics, str):
                topics = [topics]
            self.membership.subscribe(topics, pattern)
            self._on_revoked, self._on_assigned = on_revoked, on_assigned
            self._subscribed = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._heartbeat_loop, name="raftlog-heartbeat",
                                                daemon=True)
                self._thread.start()

    def subscription(self) -> tuple[str, ...]:
        return self.membership.topics

    # ---- poll hooks (caller's thread) ----

    def before_poll(self, deadline_ms: int) -> None:
        """Rejoin if needed (runs callbacks), auto-commit if due. Raises a fatal group error
        (FENCED_INSTANCE_ID, ...) found by the heartbeat thread."""
        if not self._subscribed:
            return
        with self._lock:
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            self._reap_async_commits()
            m = self.membership
            if m.pattern is not None and (m.rejoin_needed or not m.topics):
                md = parse_metadata(self._any(metadata_request(None)))
                m.match_topics(md.topics)
            if m.rejoin_needed:
                self._join(deadline_ms)
            now = mono_ms()
            if m.auto_commit_due(now):
                self._commit_positions(sync=False)
                m.auto_committed(now)

    def _join(self, deadline_ms: int) -> None:
        m = self.membership
        consumer_core = self._consumer._core
        if not m.cooperative and m.assignment:
            self._revoke(m.assignment)
            m.revoke_all()
            consumer_core.assign([])
        for _ in range(MAX_JOIN_ROUNDS):
            try:
                m.on_join_ok(self._run(m.join_request(), m.rebalance_timeout_ms + 10_000))
            except RaftlogError as exc:
                m.on_join_error(exc)
                continue
            plan = None
            if m.is_leader:
                topics = sorted(m.subscribed_topics_of_group())
                counts: dict[str, int] = {}
                if topics:
                    md = parse_metadata(self._any(metadata_request(topics)))
                    counts = {name: len(t.partitions) for name, t in md.topics.items()}
                plan = m.assign(counts)
            try:
                resp = self._run(m.sync_request(plan), m.rebalance_timeout_ms + 10_000)
            except RaftlogError as exc:
                m.on_sync_error(exc)
                continue
            added, revoked = m.on_sync_ok(resp, mono_ms())
            try:
                if revoked:
                    self._revoke(revoked)
                consumer_core.assign(m.assignment)
                if added:
                    self._start_positions(added)
            except BaseException:
                # The new partitions are not at their committed offsets yet: the next poll
                # joins again rather than read them from auto_offset_reset.
                m.rejoin_needed = True
                raise
            log.info("group %s generation %d: member %s owns %s", m.group_id, m.generation_id,
                     m.member_id, list(m.assignment))
            if self._on_assigned is not None:
                self._on_assigned(list(m.assignment) if not m.cooperative else added)
            if not m.rejoin_needed:
                return
        raise RequestTimedOutError(f"group {m.group_id}: no stable membership after {MAX_JOIN_ROUNDS} rounds")

    def _revoke(self, partitions: Iterable[TopicPartition]) -> None:
        parts = list(partitions)
        if self.membership.enable_auto_commit:
            try:
                self._commit_positions(sync=True, only=parts)
            except RaftlogError as exc:
                log.warning("group %s: commit before revoking failed: %s", self.membership.group_id, exc)
        if self._on_revoked is not None:
            self._on_revoked(parts)

    def _start_positions(self, partitions: list[TopicPartition]) -> None:
        committed = parse_offset_fetch(self._run(offset_fetch_request(self.membership.group_id, partitions)))
        seek_committed(self._consumer._core, committed)

    # ---- commits ----

    def _positions(self, only: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """{partition: position} of the assigned partitions whose position is known."""
        return known_positions(self._consumer._core, self.membership.assignment if only is None else only)

    def _commit_positions(self, *, sync: bool, only: Iterable[TopicPartition] | None = None) -> None:
        offsets = self._positions(only)
        if offsets:
            self.commit(offsets, sync=sync)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *, sync: bool = True) -> None:
        """Commit `offsets` (default: the positions of the assigned partitions). Sync waits
        for the acks=all append and raises its error; async sends and returns (the answer is
        checked at the next poll, a failure logged)."""
        with self._lock:
            if offsets is None:
                offsets = self._positions()
            if not offsets:
                return
            req = self.membership.commit_request(dict(offsets))
            if sync:
                check_commit(self._run(req))
                return
            self._async_commits.append(self.core.coord_call(req, mono_ms()))

    def _reap_async_commits(self) -> None:
        self._async_commits = reap_async_commits(self._async_commits, self.membership.group_id)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return parse_offset_fetch(self._run(offset_fetch_request(self.membership.group_id, list(partitions))))

    # ---- heartbeat thread ----

    def _heartbeat_loop(self) -> None:
        m = self.membership
        while not self._closed.is_set():
            with self._lock:
                wait_ms = max(10, m.next_heartbeat_ms() - mono_ms()) if m.stable else m.heartbeat_interval_ms
            if self._closed.wait(min(wait_ms, m.heartbeat_interval_ms) / 1000):
                return
            if not self._lock.acquire(timeout=m.heartbeat_interval_ms / 1000):
                continue  # a join or commit runs: the member is alive meanwhile
            try:
                if self._closed.is_set() or not m.heartbeat_due(mono_ms()):
                    continue
                generation = m.generation_id
                call = self.core.coord_call(m.heartbeat_request(), mono_ms(), m.session_timeout_ms // 2)
                while not call.done:
                    step(self.core, self._net, call.deadline_ms)
                if m.generation_id != generation:
                    continue
                try:
                    check_response(call.value())
                    m.on_heartbeat_ok(mono_ms())
                except FencedInstanceIdError as exc:
                    self._error = exc
                    m.reset()
                except RaftlogError as exc:
                    m.on_heartbeat_error(exc, mono_ms())
            except (OSError, RaftlogError) as exc:
                log.warning("group %s: heartbeat failed: %s", m.group_id, exc)
            finally:
                self._lock.release()

    # ---- close ----

    def close(self, *, leave: bool = True) -> None:
        """Commit (auto commit), leave the group (dynamic members), stop the heartbeat thread."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        m = self.membership
        try:
            with self._lock:
                if self._subscribed and m.stable and m.enable_auto_commit:
                    self._commit_positions(sync=True)
                if leave and m.member_id and m.group_instance_id is None:
                    self._run(m.leave_request(), 5_000)
        except RaftlogError as exc:
            log.info("group %s: leaving failed: %s", m.group_id, exc)
        finally:
            m.reset()
            self._net.close()

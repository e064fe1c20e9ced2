"""Blocking shell for consumer groups: the group half of `raftlog.client.Consumer`.

    c = Consumer("127.0.0.1:9092", group_id="g", enable_auto_commit=False,
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
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raftlog.client.core import Call, check_response, metadata_request, parse_metadata
from raftlog.client.group import (
    MAX_JOIN_ROUNDS,
    GroupCore,
    TopicPartition,
    check_commit,
    offset_fetch_request,
    known_positions,
    new_group,
    parse_offset_fetch,
    reap_async_commits,
    seek_committed,
)
from raftlog.errors import FencedInstanceId, RaftlogError, RequestTimedOut

__all__ = ["BlockingGroup", "GroupAdmin"]

log = logging.getLogger(__name__)

Callback = Callable[[list[TopicPartition]], Any] | None


def _mono_ms() -> int:
    return int(time.monotonic() * 1000)


class BlockingGroup:
    """Group membership for one blocking Consumer (`consumer` gives `_core`, the ConsumerCore,
    and `_request_timeout_ms`)."""

    def __init__(self, consumer: Any, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 **options: Any):
        """`options`: new_group's (group.py), defaults included."""
        from raftlog.client.blocking import _Network  # the blocking module imports this one

        self._consumer = consumer
        self.membership, self.core = new_group(bootstrap, request_timeout_ms=request_timeout_ms, **options)
        self._net = _Network(self.core, connect_timeout_ms=min(request_timeout_ms, 10_000),
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
        from raftlog.client.blocking import _step

        with self._lock:
            call = self.core.coord_call(request, _mono_ms(), timeout_ms)
            while not call.done:
                _step(self.core, self._net, call.deadline_ms)
            return call.value()

    def _any(self, request: dict, timeout_ms: int | None = None) -> dict:
        from raftlog.client.blocking import _step

        with self._lock:
            call = self.core.submit(request, _mono_ms(), timeout_ms=timeout_ms)
            while not call.done:
                _step(self.core, self._net, call.deadline_ms)
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
            now = _mono_ms()
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
            added, revoked = m.on_sync_ok(resp, _mono_ms())
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
        raise RequestTimedOut(f"group {m.group_id}: no stable membership after {MAX_JOIN_ROUNDS} rounds")

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
            self._async_commits.append(self.core.coord_call(req, _mono_ms()))

    def _reap_async_commits(self) -> None:
        self._async_commits = reap_async_commits(self._async_commits, self.membership.group_id)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return parse_offset_fetch(self._run(offset_fetch_request(self.membership.group_id, list(partitions))))

    # ---- heartbeat thread ----

    def _heartbeat_loop(self) -> None:
        from raftlog.client.blocking import _step

        m = self.membership
        while not self._closed.is_set():
            with self._lock:
                wait_ms = max(10, m.next_heartbeat_ms() - _mono_ms()) if m.stable else m.heartbeat_interval_ms
            if self._closed.wait(min(wait_ms, m.heartbeat_interval_ms) / 1000):
                return
            if not self._lock.acquire(timeout=m.heartbeat_interval_ms / 1000):
                continue  # a join or commit runs: the member is alive meanwhile
            try:
                if self._closed.is_set() or not m.heartbeat_due(_mono_ms()):
                    continue
                generation = m.generation_id
                call = self.core.coord_call(m.heartbeat_request(), _mono_ms(), m.session_timeout_ms // 2)
                while not call.done:
                    _step(self.core, self._net, call.deadline_ms)
                if m.generation_id != generation:
                    continue
                try:
                    check_response(call.value())
                    m.on_heartbeat_ok(_mono_ms())
                except FencedInstanceId as exc:
                    self._error = exc
                    m.reset()
                except RaftlogError as exc:
                    m.on_heartbeat_error(exc, _mono_ms())
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


# ---------------------------------------------------------------- group admin


class GroupAdmin:
    """Blocking admin of consumer groups (the CLI's `raftlog groups ...`):

        list_groups() -> [{group_id, protocol_type, state, coordinator}]   (every broker asked)
        describe_group(group_id) -> {group_id, state, protocol, members: [...],
                                     partitions: [{topic, partition, committed_offset,
                                                   log_end_offset, lag, member_id, client_id}]}
        delete_group(group_id) -> None
        reset_offsets(group_id, topics, strategy, value=None, dry_run=False)
            -> {dry_run, partitions: [{topic, partition, previous_offset, offset}]}
        committed(group_id) -> {(topic, partition): offset}
    """

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None):
        from raftlog.client.blocking import Admin, _Network

        self._bootstrap = bootstrap
        self._rng = rng or random.Random()
        self._timeout_ms = request_timeout_ms
        self.admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, rng=self._rng)
        self._cores: dict[str, tuple[GroupCore, Any]] = {}
        self._network_cls = _Network

    def _coord(self, group_id: str, request: dict) -> dict:
        from raftlog.client.blocking import _step

        if group_id not in self._cores:
            if len(self._cores) >= 64:
                _, (old_core, old_net) = self._cores.popitem()
                old_net.close()
            core = GroupCore(self._bootstrap, group_id, rng=self._rng, request_timeout_ms=self._timeout_ms)
            net = self._network_cls(core, connect_timeout_ms=min(self._timeout_ms, 10_000),
                                    send_timeout_ms=self._timeout_ms)
            self._cores[group_id] = (core, net)
        core, net = self._cores[group_id]
        call = core.coord_call({**request, "group_id": group_id}, _mono_ms())
        while not call.done:
            _step(core, net, call.deadline_ms)
        return check_response(call.value())

    def list_groups(self) -> list[dict]:
        from groupcoord.records import DEFAULT_PARTITIONS
        from metadata.controller import OFFSETS_TOPIC

        answers = self.admin.request_many(
            [({"op": "list_groups"}, (OFFSETS_TOPIC, p)) for p in range(DEFAULT_PARTITIONS)])
        seen: dict[str, dict] = {}
        for a in answers:
            for g in a.get("groups") or ():
                seen[g["group_id"]] = {**g, "coordinator": a.get("node_id")}
        return [seen[k] for k in sorted(seen)]

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        got = parse_offset_fetch(self._coord(group_id, {"op": "offset_fetch", "partitions": None}))
        return {tp: o for tp, o in got.items() if o is not None}

    def _bounds(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        from raftlog.client.core import list_offsets_request

        tps = sorted(set(tps))
        reqs = []
        for t, p in tps:
            reqs.append((list_offsets_request([(t, p, -2)]), (t, p)))
            reqs.append((list_offsets_request([(t, p, -1)]), (t, p)))
        answers = self.admin.request_many(reqs)
        out = {}
        for i, tp in enumerate(tps):
            start = answers[2 * i]["partitions"][0]
            end = answers[2 * i + 1]["partitions"][0]
            if start.get("error") or end.get("error"):
                from raftlog.errors import error_from_wire
                raise error_from_wire(start.get("error") or end.get("error"))
            out[tp] = (start["offset"], end["offset"])
        return out

    def describe_group(self, group_id: str) -> dict:
        from groupcoord.assignor import decode_assignment

        d = self._coord(group_id, {"op": "describe_groups", "group_ids": [group_id]})["groups"][0]
        if d.get("error"):
            from raftlog.errors import error_from_wire
            raise error_from_wire(d["error"])
        owners: dict[TopicPartition, dict] = {}
        members = []
        for m in d.get("members") or ():
            parts = sorted(decode_assignment(m.get("assignment") or b"").partitions)
            members.append({"member_id": m["member_id"], "client_id": m.get("client_id", ""),
                            "group_instance_id": m.get("group_instance_id"), "partitions": parts})
            for tp in parts:
                owners[tp] = m
        committed = self.committed(group_id)
        tps = sorted(set(committed) | set(owners))
        bounds = self._bounds(tps) if tps else {}
        rows = []
        for tp in tps:
            end = bounds[tp][1]
            c = committed.get(tp)
            owner = owners.get(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "committed_offset": c,
                         "log_end_offset": end, "lag": None if c is None else max(0, end - c),
                         "member_id": owner["member_id"] if owner else None,
                         "client_id": owner.get("client_id") if owner else None})
        return {"group_id": group_id, "state": d.get("state"), "protocol": d.get("protocol"),
                "members": members, "partitions": rows}

    def delete_group(self, group_id: str) -> None:
        r = self._coord(group_id, {"op": "delete_groups", "group_ids": [group_id]})["groups"][0]
        if r.get("error"):
            from raftlog.errors import error_from_wire
            raise error_from_wire(r["error"])

    def reset_offsets(self, group_id: str, topics: Iterable[str], strategy: str, value: int | None = None,
                      *, dry_run: bool = False) -> dict:
        """Plan (groupcoord.coordinator.plan_offset_reset over list_offsets bounds) and write
        the group's offsets for every partition of `topics`; the group must be inactive."""
        from groupcoord.coordinator import ResetSpec, plan_offset_reset
        from raftlog.client.core import list_offsets_request

        spec = ResetSpec(strategy, value)
        infos = self.admin.describe_topics(list(topics))
        tps = [(t, p.partition) for t, info in infos.items() for p in info.partitions]
        bounds = self._bounds(tps)
        ts_offsets = None
        if strategy == "timestamp":
            answers = self.admin.request_many(
                [(list_offsets_request([(t, p, value)]), (t, p)) for t, p in sorted(bounds)])
            ts_offsets = {}
            for tp, a in zip(sorted(bounds), answers):
                off = a["partitions"][0].get("offset", -1)
                ts_offsets[tp] = off if off >= 0 else None
        plan = plan_offset_reset(spec, bounds, ts_offsets)
        return self._coord(group_id, {
            "op": "reset_offsets", "dry_run": dry_run, "timeout_ms": 10_000,
            "partitions": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(plan.items())],
        })

    def close(self) -> None:
        for _core, net in self._cores.values():
            net.close()
        self._cores.clear()
        self.admin.close()

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

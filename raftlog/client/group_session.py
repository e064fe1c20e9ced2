"""One Consumer's session in its group, sans I/O: what both group shells (group_blocking.py,
group_aio.py) do, written once as procedures that yield the I/O they need.

A procedure is a generator. It yields an effect and is resumed with its result (or has the
effect's error thrown in at the yield):

    CoordRequest(request, timeout_ms)   -> the ok answer of the group's coordinator
    BrokerRequest(request, timeout_ms)  -> the ok answer of any broker (metadata)
    UserCallback(fn, partitions)        -> what the user's rebalance callback returned

and returns its value with `return`. A shell runs one with a small driver (`drive` here for
the blocking shell, `TrioGroup._drive` for trio) that performs each effect its own way:
blocking steps the group's network on the caller's thread; trio awaits the driver task and
may await an async callback. Procedures: `match_pattern`, `join_rounds` (join/sync rounds,
revokes, positions, callbacks), `commit_offsets`, `fetch_committed`, `heartbeat_round`,
`leave_group`.

`GroupSession` holds what both shells keep beside the member's state machine
(`group.GroupMembership`) and the coordinator core (`group.GroupCore`): the subscription's
callbacks, a fatal error for the next poll, pending async commits, and the partitions whose
committed offsets were not fetched yet (a join interrupted after its sync).

Ordering: offsets are committed (auto commit) before partitions are revoked; a partition is
handed to the Consumer only after SyncGroup confirmed it, and it starts at the group's
committed offset (else `auto_offset_reset`); an interrupted join is redone at the next poll,
positions included. Limits: at most MAX_JOIN_ROUNDS join/sync rounds per poll; every call
has a deadline (GroupCore.coord_call); pending async commits are bounded by MAX_COORD_CALLS.
Concurrency: not thread-safe; the blocking shell holds its lock around every procedure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, NamedTuple

from raftlog.base.errors import FencedInstanceIdError, RaftlogError, RequestTimedOutError
from raftlog.client.clock import Clock
from raftlog.client.consumer import ConsumerCore
from raftlog.client.core import Call
from raftlog.client.errors import ClientClosedError
from raftlog.client.group import (
    TopicPartition,
    check_commit,
    new_group,
    offset_fetch_request,
    parse_offset_fetch,
)
from raftlog.client.request import metadata_request, parse_metadata

__all__ = [
    "MAX_JOIN_ROUNDS",
    "LEAVE_TIMEOUT_MS",
    "CoordRequest",
    "BrokerRequest",
    "UserCallback",
    "Procedure",
    "GroupSession",
    "drive",
    "drive_async",
]

log = logging.getLogger(__name__)

MAX_JOIN_ROUNDS = 100  # join/sync rounds per poll before giving up (each bounded by its call)
LEAVE_TIMEOUT_MS = 5_000  # a leave is a courtesy: the session expires anyway
JOIN_SLACK_MS = 10_000  # a join/sync may wait rebalance_timeout_ms on the coordinator, plus the trip

Callback = Callable[[list[TopicPartition]], Any] | None


class CoordRequest(NamedTuple):
    """Effect: send `request` to the group's coordinator; resume with its ok answer.
    `retry_commit`: a sync commit (GroupCore.coord_call)."""

    request: dict
    timeout_ms: int | None = None
    retry_commit: bool = False


class BrokerRequest(NamedTuple):
    """Effect: send `request` to any broker; resume with its ok answer."""

    request: dict
    timeout_ms: int | None = None


class UserCallback(NamedTuple):
    """Effect: call the user's rebalance callback `fn(partitions)` (not None)."""

    fn: Callable[[list[TopicPartition]], Any]
    partitions: list[TopicPartition]


Effect = CoordRequest | BrokerRequest | UserCallback
Procedure = Generator[Effect, Any, Any]


def drive(procedure: Procedure, perform: Callable[[Effect], Any]) -> Any:
    """Run `procedure` to its end, performing each effect with `perform` (blocking); returns
    the procedure's value. An effect's error, `BaseException`s included, is thrown into the
    procedure at its yield, so its cleanup runs and it decides what propagates."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = procedure.send(result) if error is None else procedure.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            result, error = perform(effect), None
        except BaseException as exc:  # noqa: BLE001 - thrown into the procedure, which re-raises
            result, error = None, exc


async def drive_async(procedure: Procedure, perform: Callable[[Any], Any]) -> Any:
    """`drive` for the trio shells: `perform(effect)` is awaited."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = procedure.send(result) if error is None else procedure.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            result, error = await perform(effect), None
        except BaseException as exc:  # noqa: BLE001 - thrown into the procedure, which re-raises
            result, error = None, exc


class GroupSession:
    """See the module docstring. A shell subclasses it and adds the I/O."""

    def __init__(self, consumer_core: ConsumerCore, bootstrap: str | Iterable[str], *, clock: Clock,
                 request_timeout_ms: int = 30_000, **options: Any):
        """`options`: new_group's (group.py), defaults included."""
        self.consumer_core = consumer_core
        self.membership, self.core = new_group(bootstrap, request_timeout_ms=request_timeout_ms, **options)
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms
        self.on_revoked: Callback = None
        self.on_assigned: Callback = None
        self.subscribed = False
        self.joining = False  # a join runs (a callback calling poll() must not start another)
        self.closed = False
        self.error: BaseException | None = None  # fatal, found by a heartbeat; raised by the next poll
        self.async_commits: list[Call] = []  # fire-and-forget commits, checked by reap_async_commits
        # Partitions assigned whose committed offsets were not fetched yet (an interrupted join).
        self.unpositioned: set[TopicPartition] = set()

    # ---- subscription ----

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None,
                  on_revoked: Callback = None, on_assigned: Callback = None) -> None:
        if self.closed:
            raise ClientClosedError("consumer is closed")
        if isinstance(topics, str):
            topics = [topics]
        self.membership.subscribe(topics, pattern)
        self.on_revoked, self.on_assigned = on_revoked, on_assigned
        self.subscribed = True

    def subscription(self) -> tuple[str, ...]:
        return self.membership.topics

    def raise_error(self) -> None:
        """Raise (once) the fatal group error a heartbeat found (FENCED_INSTANCE_ID, ...)."""
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def join_due(self) -> bool:
        """Does the next poll have to (re)join? Never from inside a join's callback."""
        return self.subscribed and not self.joining and self.membership.rejoin_needed

    # ---- procedures: join ----

    def match_pattern(self) -> Procedure:
        """With a pattern subscription: find the matching topics (a rejoin if they changed)."""
        m = self.membership
        if m.pattern is not None and (m.rejoin_needed or not m.topics):
            md = parse_metadata((yield BrokerRequest(metadata_request(None))))
            m.match_topics(md.topics)

    def join_rounds(self) -> Procedure:
        """Join/sync rounds until the member is stable (the leader assigns), with revokes,
        positions and callbacks in their order. Raises what the user must see
        (membership.on_join_error), or RequestTimedOutError after MAX_JOIN_ROUNDS."""
        m = self.membership
        self.joining = True
        try:
            if not m.cooperative and m.assignment:
                yield from self._revoke(m.assignment)
                m.revoke_all()
                self.consumer_core.assign([])
            for _ in range(MAX_JOIN_ROUNDS):
                try:
                    m.on_join_ok((yield CoordRequest(m.join_request(), m.rebalance_timeout_ms + JOIN_SLACK_MS)))
                except RaftlogError as exc:
                    m.on_join_error(exc)
                    continue
                plan = None
                if m.is_leader:
                    topics = sorted(m.subscribed_topics_of_group())
                    counts: dict[str, int] = {}
                    if topics:
                        md = parse_metadata((yield BrokerRequest(metadata_request(topics))))
                        counts = {name: len(t.partitions) for name, t in md.topics.items()}
                    plan = m.assign(counts)
                try:
                    resp = yield CoordRequest(m.sync_request(plan), m.rebalance_timeout_ms + JOIN_SLACK_MS)
                except RaftlogError as exc:
                    m.on_sync_error(exc)
                    continue
                added, revoked = m.on_sync_ok(resp, self.clock.monotonic_ms())
                owned = set(m.assignment)
                self.unpositioned = {tp for tp in self.unpositioned if tp in owned} | set(added)
                newly = sorted(self.unpositioned)  # what on_assigned has not announced yet
                try:
                    if revoked:
                        yield from self._revoke(revoked)
                    self.consumer_core.assign(m.assignment)
                    if self.unpositioned:
                        yield from self._start_positions(sorted(self.unpositioned))
                        self.unpositioned = set()
                except BaseException:
                    # Cancelled or failed before the Consumer had its new partitions at their
                    # committed offsets: join again at the next poll, and fetch those offsets
                    # then (not auto_offset_reset where a committed offset exists).
                    m.rejoin_needed = True
                    raise
                log.info("group %s generation %d: member %s owns %s", m.group_id, m.generation_id,
                         m.member_id, list(m.assignment))
                if self.on_assigned is not None:
                    yield UserCallback(self.on_assigned, list(m.assignment) if not m.cooperative else newly)
                if not m.rejoin_needed:
                    return
            raise RequestTimedOutError(f"group {m.group_id}: no stable membership after {MAX_JOIN_ROUNDS} rounds")
        finally:
            self.joining = False

    def _revoke(self, partitions: Iterable[TopicPartition]) -> Procedure:
        parts = list(partitions)
        if self.membership.enable_auto_commit:
            try:
                yield from self.commit_offsets(self.positions(parts))
            except RaftlogError as exc:
                log.warning("group %s: commit before revoking failed: %s", self.membership.group_id, exc)
        if self.on_revoked is not None:
            yield UserCallback(self.on_revoked, parts)

    def _start_positions(self, partitions: list[TopicPartition]) -> Procedure:
        """Start each partition at the group's committed offset; one with none keeps the
        consumer core's auto_offset_reset."""
        committed = parse_offset_fetch((yield CoordRequest(offset_fetch_request(self.membership.group_id, partitions))))
        for (topic, partition), off in committed.items():
            if off is not None:
                self.consumer_core.seek(topic, partition, off)

    # ---- commits ----

    def positions(self, only: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """{partition: position} of the assigned partitions whose position is known."""
        return self.consumer_core.known_positions(self.membership.assignment if only is None else only)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int] | None = None) -> Procedure:
        """Commit `offsets` (default: the positions of the assigned partitions) and raise the
        error of the acks=all append (ILLEGAL_GENERATION etc. after a rebalance)."""
        if offsets is None:
            offsets = self.positions()
        if offsets:
            check_commit((yield CoordRequest(self.membership.commit_request(dict(offsets)), retry_commit=True)))

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> bool:
        """Queue a commit and return at once (True if one was queued); `reap_async_commits`
        logs its failure. Nothing is queued once closed, or with nothing to commit."""
        if offsets is None:
            offsets = self.positions()
        if not offsets or self.closed:
            return False
        request = self.membership.commit_request(dict(offsets))
        try:
            call = self.core.coord_call(request, self.clock.monotonic_ms())
        except RaftlogError as exc:  # too many calls pending: the coordinator is unreachable
            log.warning("group %s: async commit not sent: %s", self.membership.group_id, exc)
            return False
        self.async_commits.append(call)
        return True

    def auto_commit(self) -> bool:
        """Queue the auto commit if it is due; True if one was queued."""
        m = self.membership
        now = self.clock.monotonic_ms()
        if not m.auto_commit_due(now):
            return False
        m.auto_committed(now)
        return self.commit_async()

    def reap_async_commits(self) -> None:
        """Log the failures of finished async commits; keep those still pending."""
        pending = []
        for call in self.async_commits:
            if not call.done:
                pending.append(call)
                continue
            try:
                check_commit(call.value())
            except RaftlogError as exc:
                log.warning("group %s: async commit failed: %s", self.membership.group_id, exc)
        self.async_commits = pending

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> Procedure:
        """The group's committed offset of each partition (None: none)."""
        request = offset_fetch_request(self.membership.group_id, list(partitions))
        return parse_offset_fetch((yield CoordRequest(request)))

    # ---- heartbeat and leave ----

    def heartbeat_wait_ms(self) -> int:
        """How long the heartbeat loop sleeps before it looks again."""
        m = self.membership
        now = self.clock.monotonic_ms()
        wait_ms = max(10, m.next_heartbeat_ms() - now) if m.stable else m.heartbeat_interval_ms
        return min(wait_ms, m.heartbeat_interval_ms)

    def heartbeat_due(self) -> bool:
        return self.membership.heartbeat_due(self.clock.monotonic_ms())

    def heartbeat_round(self) -> Procedure:
        """One heartbeat if due. An answer to an older generation changes nothing; a fenced
        instance is kept for the next poll to raise; other errors ask for a rejoin."""
        m = self.membership
        if not self.heartbeat_due():
            return
        generation = m.generation_id
        try:
            yield CoordRequest(m.heartbeat_request(), m.session_timeout_ms // 2)
        except FencedInstanceIdError as exc:
            self.error = exc
            m.reset()
        except ClientClosedError:
            return
        except RaftlogError as exc:
            if m.generation_id == generation:
                m.on_heartbeat_error(exc, self.clock.monotonic_ms())
        else:
            if m.generation_id == generation:
                m.on_heartbeat_ok(self.clock.monotonic_ms())

    def leave_group(self, leave: bool = True) -> Procedure:
        """Closing: commit (auto commit), then leave the group (dynamic members), so the
        others rebalance at once. Failures are logged: a member that cannot leave expires
        after its session. The membership is reset in any case."""
        m = self.membership
        self.closed = True
        try:
            if self.subscribed and m.stable and m.enable_auto_commit:
                yield from self.commit_offsets()
            if leave and m.member_id and m.group_instance_id is None:
                yield CoordRequest(m.leave_request(), LEAVE_TIMEOUT_MS)
        except (RaftlogError, OSError) as exc:
            log.info("group %s: leaving failed: %s", m.group_id, exc)
        finally:
            m.reset()

"""The group coordinator's pure core: Kafka's classic group protocol and offset storage for
the groups whose `__consumer_offsets` partition this node leads.

No I/O, no clock, no threads: every call takes `now_ms`, ids come from an injected
`random.Random`, and every call returns a `Result` that tells the shell what to do.

The contract with the shell (service.py)
----------------------------------------
    result = coordinator.join_group(..., now_ms=now)        # or any other handler / tick
    Result(response, appends, completions, next_deadline_ms)

* `response`: the answer to *this* request: a dict of ok fields, a `RaftlogError` instance (send
  it as the error), or `Pending(key)`: the answer comes later as a completion for `key`.
  Register the waiter for `key` right after the call returns (the core never completes a key
  within the call that created it: such an answer is returned directly as `response`).
* `appends`: `Append(append_id, partition, records)`: append `records` (key bytes, value
  bytes or None = tombstone) to `__consumer_offsets` partition `partition`, as one batch,
  with acks=all, in the order given (several appends to one partition: in the order given).
  When the append is committed call `on_append_committed(append_id, base_offset, now_ms)`;
  when it failed (or its outcome is unknown) call `on_append_failed(append_id, error, now_ms)`.
  The cache (offsets, stored group) changes only on `on_append_committed`: a commit answered
  ok is durable, and an offset read back is always one the log holds.
* `completions`: `(key, response)` pairs answering earlier `Pending` requests. A key the shell
  no longer waits for is simply dropped by it (and `abandon(key)` tells the core to forget it).
* `next_deadline_ms`: the earliest time at which `tick(now_ms)` has work (session expiry,
  rebalance timeout, initial rebalance delay); None = no timer. Keep one timer at the value of
  the latest Result; an early or spurious tick is harmless.

Ordering: the shell reports `on_append_committed` for one partition in log order (Raft commits
in order). Even so, the cache takes an offset record only if its log offset is later than the
one it holds, so no late report or replay can move a committed offset back.

Partition ownership (failover):
    begin_load(p) → load(p, [(log_offset, key, value), ...])* → finish_load(p, now_ms)
    unload(p)   when this node stops leading p
While p loads, its groups' requests answer COORDINATOR_LOAD_IN_PROGRESS; for a partition not
led here, NOT_COORDINATOR. `unload` answers every pending request of p's groups with
NOT_COORDINATOR and forgets p's appends in flight (their outcome is settled by the next
leader's replay). Replay: records apply in log order, the later record for a key wins (so a
deliberate commit of a lower offset, e.g. a reset, stands), a tombstone deletes; a chunk fed
twice is ignored (log offsets must grow). Reloaded groups with members are Stable (members
must heartbeat within their session timeout from `finish_load`), others Empty.

Bounds: `group_max_size` members (incl. pending members) per group, `max_groups` groups
(new ones; replay is never refused), `max_pending` pending requests, `max_pending_appends`
appends in flight (over them: COORDINATOR_NOT_AVAILABLE, retriable).

Kafka semantics kept (GroupCoordinator.scala, KIP-345, KIP-394): MEMBER_ID_REQUIRED for a
dynamic member's first join; the join phase ends when every known member rejoined (and no
pending member is left) or the rebalance timeout passed (members that did not rejoin are
removed); an initial delayed join for an Empty group; the leader's SyncGroup stores the group
and answers everyone; heartbeats get REBALANCE_IN_PROGRESS while a rebalance is prepared;
commits are fenced by member id and generation, accepted in PreparingRebalance, refused in
CompletingRebalance; generation -1 commits from anyone only for an Empty group; static
members (group_instance_id) replace their old member id without a rebalance when the group
is Stable and their subscription is unchanged, and the old id is fenced.
Deviations: a protocol-vote tie goes to the leader's preference order; a commit refused as a
whole (fencing) answers one top-level error instead of the same error per partition; a
static rejoin rebalances if the member's metadata for the selected protocol changed.
"""

from __future__ import annotations

import heapq
import logging
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedLeaderEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    KafkaStorageError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderError,
    OffsetMetadataTooLargeError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from groupcoord.errors import InvalidGroupRecordError
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS, partition_for_group
from groupcoord.records import (
    MAX_BLOB_BYTES,
    MAX_GROUP_ID_CHARS,
    MAX_ID_CHARS,
    GroupKey,
    GroupValue,
    Key,
    MemberValue,
    OffsetKey,
    OffsetValue,
    Value,
    decode_record,
    encode_key,
    encode_value,
)
from groupcoord.state import Group, GroupState, Member, OffsetEntry

log = logging.getLogger(__name__)

__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "Result",
    "Append",
    "Pending",
    "CommitOffset",
]

NO_GENERATION = -1


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's broker settings of the same names (group.*, offsets.*), in our units."""

    partitions: int = 16                           # offsets.topic.num.partitions (ours: 16)
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 1_000
    new_member_join_timeout_ms: int = 300_000      # KIP-394: a new member's join may wait this long
    offset_metadata_max_bytes: int = 4_096
    max_groups: int = 100_000
    max_pending: int = 100_000
    max_pending_appends: int = 10_000
    max_commit_partitions: int = 10_000


class Pending(NamedTuple):
    """The answer to this request comes later, as a completion for `key`."""

    key: int


Response = Union[dict, RaftlogError]


@dataclass(frozen=True)
class Append:
    append_id: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]


@dataclass(frozen=True)
class Result:
    response: Response | Pending | None = None
    appends: tuple[Append, ...] = ()
    completions: tuple[tuple[int, Response], ...] = ()
    next_deadline_ms: int | None = None


class CommitOffset(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass
class _Effects:
    appends: list[Append] = field(default_factory=list)
    completions: list[tuple[int, Response]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)


@dataclass
class _AppendCtx:
    partition: int
    items: list[tuple[Key, Value | None]]
    on_commit: Callable[[int], None] | None
    on_fail: Callable[[RaftlogError, int], None] | None


@dataclass
class _LoadBuffer:
    last_log_offset: int = -1
    offsets: dict[tuple[str, str, int], OffsetEntry] = field(default_factory=dict)
    groups: dict[str, tuple[GroupValue, int]] = field(default_factory=dict)
    errors: int = 0


_LOADING = "loading"
_ACTIVE = "active"
_NOT_COORDINATOR_ERRORS = (NotLeaderError, NotCoordinatorError, KafkaStorageError, FencedLeaderEpochError)


def append_error(cause: RaftlogError) -> RaftlogError:
    """Kafka's mapping of an append failure to the group error a client sees: leadership or
    storage loss → NOT_COORDINATOR (find the coordinator again), anything else (timeouts,
    not enough replicas, unknown outcome) → COORDINATOR_NOT_AVAILABLE (retry)."""
    if isinstance(cause, _NOT_COORDINATOR_ERRORS):
        return NotCoordinatorError(f"append to __consumer_offsets failed: {cause}")
    return CoordinatorNotAvailableError(f"append to __consumer_offsets failed: {cause}")


class GroupCoordinator:
    """Groups and offsets of the `__consumer_offsets` partitions this node leads. Not
    thread-safe: the shell calls it from one trio task at a time."""

    def __init__(self, config: CoordinatorConfig | None = None, rng: random.Random | None = None):
        self.config = config or CoordinatorConfig()
        self._rng = rng or random.Random(0)
        self._partitions: dict[int, str] = {}
        self._loads: dict[int, _LoadBuffer] = {}
        self._groups: dict[str, Group] = {}
        self._pending: dict[int, str] = {}         # key -> group id
        self._next_key = 1
        self._appends: dict[int, _AppendCtx] = {}
        self._next_append_id = 1
        self._timers: list[tuple[int, str]] = []   # heap of (deadline_ms, group id)
        self._scheduled: dict[str, int] = {}       # group id -> deadline in the heap that counts
        self._fx: _Effects | None = None

    # ==== queries for the shell and tests ==============================================

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.partitions)

    def group(self, group_id: str) -> Group | None:
        """The live group (tests inspect it; the shell must not mutate it)."""
        return self._groups.get(group_id)

    def is_loading(self, partition: int) -> bool:
        return self._partitions.get(partition) == _LOADING

    def is_active(self, partition: int) -> bool:
        return self._partitions.get(partition) == _ACTIVE

    def pending_count(self) -> int:
        return len(self._pending)

    def appends_in_flight(self) -> int:
        return len(self._appends)

    def committed_partitions(self, group_id: str) -> list[tuple[str, int]]:
        group = self._groups.get(group_id)
        return sorted(group.offsets) if group else []

    def next_deadline_ms(self) -> int | None:
        while self._timers:
            deadline, gid = self._timers[0]
            if self._scheduled.get(gid) == deadline:
                return deadline
            heapq.heappop(self._timers)  # stale entry: the group was rescheduled or is gone
        return None

    def health(self) -> dict[str, Any]:
        return {
            "partitions_active": sorted(p for p, s in self._partitions.items() if s == _ACTIVE),
            "partitions_loading": sorted(p for p, s in self._partitions.items() if s == _LOADING),
            "groups": len(self._groups),
            "pending": len(self._pending),
            "appends_in_flight": len(self._appends),
        }

    # ==== plumbing =======================================================================

    def _run(self, body: Callable[[], Response | Pending | None]) -> Result:
        if self._fx is not None:
            raise RuntimeError("GroupCoordinator is not re-entrant")
        fx = self._fx = _Effects()
        try:
            try:
                response = body()
            except RaftlogError as e:
                response = e
            for gid in fx.touched:
                self._reschedule(gid)
        finally:
            self._fx = None
        completions = fx.completions
        if isinstance(response, Pending):
            own = [c for c in completions if c[0] == response.key]
            if own:
                response = own[-1][1]
                completions = [c for c in completions if c[0] != own[-1][0]]
        return Result(response, tuple(fx.appends), tuple(completions), self.next_deadline_ms())

    @property
    def fx(self) -> _Effects:
        assert self._fx is not None, "effects used outside a call"
        return self._fx

    def _new_key(self, group_id: str) -> int:
        if len(self._pending) >= self.config.max_pending:
            raise CoordinatorNotAvailableError(f"{len(self._pending)} requests pending, the limit")
        key = self._next_key
        self._next_key += 1
        self._pending[key] = group_id
        return key

    def _complete(self, key: int | None, response: Response) -> None:
        if key is not None and self._pending.pop(key, None) is not None:
            self.fx.completions.append((key, response))

    def _check_append_room(self) -> None:
        if len(self._appends) >= self.config.max_pending_appends:
            raise CoordinatorNotAvailableError(f"{len(self._appends)} appends in flight, the limit")

    def _append(
        self,
        partition: int,
        items: list[tuple[Key, Value | None]],
        on_commit: Callable[[int], None] | None = None,
        on_fail: Callable[[RaftlogError, int], None] | None = None,
    ) -> int:
        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = _AppendCtx(partition, items, on_commit, on_fail)
        records = tuple((encode_key(k), None if v is None else encode_value(v)) for k, v in items)
        self.fx.appends.append(Append(append_id, partition, records))
        return append_id

    def _route(self, group_id: Any) -> int:
        if type(group_id) is not str or not 1 <= len(group_id) <= MAX_GROUP_ID_CHARS:
            raise InvalidGroupIdError(f"group id must be 1..{MAX_GROUP_ID_CHARS} characters")
        partition = self.partition_for(group_id)
        status = self._partitions.get(partition)
        if status is None:
            raise NotCoordinatorError(f"not the coordinator of {group_id!r} (partition {partition})")
        if status == _LOADING:
            raise CoordinatorLoadInProgressError(f"partition {partition} of __consumer_offsets is loading")
        return partition

    def _check_group_room(self) -> None:
        if len(self._groups) >= self.config.max_groups:
            raise CoordinatorNotAvailableError(f"{len(self._groups)} groups on this coordinator, the limit")

    def _new_group(self, group_id: str, now_ms: int) -> Group:
        self._check_group_room()
        group = Group(group_id, state_timestamp_ms=now_ms)
        self._groups[group_id] = group
        return group

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    # ---- timers ----

    def _group_deadline(self, group: Group) -> int | None:
        candidates: list[int] = list(group.pending_members.values())
        if group.is_(GroupState.PREPARING_REBALANCE):
            if group.initial_delay_deadline_ms is not None:
                candidates.append(group.initial_delay_deadline_ms)
            elif group.rebalance_deadline_ms is not None:
                candidates.append(group.rebalance_deadline_ms)
        for m in group.members.values():
            if self._heartbeat_matters(m):
                candidates.append(m.heartbeat_deadline_ms)
        return min(candidates, default=None)

    @staticmethod
    def _heartbeat_matters(member: Member) -> bool:
        # Kafka's hasSatisfiedHeartbeat: a known member waiting in a join or a sync is alive
        # by definition; a new member waiting in its first join still has a deadline (KIP-394).
        if member.is_new:
            return True
        return not (member.awaiting_join or member.awaiting_sync)

    def _reschedule(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        deadline = None if group is None else self._group_deadline(group)
        if deadline is None:
            self._scheduled.pop(group_id, None)
            return
        current = self._scheduled.get(group_id)
        if current is not None and current <= deadline:
            return  # the earlier timer fires first and reschedules then
        self._scheduled[group_id] = deadline
        heapq.heappush(self._timers, (deadline, group_id))
        if len(self._timers) > 4 * len(self._scheduled) + 64:
            # Drop stale entries so the heap stays proportional to the groups that have timers.
            self._timers = [(d, g) for g, d in self._scheduled.items()]
            heapq.heapify(self._timers)

    def _touch(self, group: Group) -> None:
        self.fx.touched.add(group.group_id)

    # ==== partition ownership ============================================================

    def begin_load(self, partition: int) -> Result:
        """This node became leader of `partition`: its groups answer COORDINATOR_LOAD_IN_PROGRESS
        until `finish_load`. If it was already loaded, its old state is dropped first."""

        def body() -> None:
            self._check_partition(partition)
            if partition in self._partitions:
                self._drop_partition(partition)
            self._partitions[partition] = _LOADING
            self._loads[partition] = _LoadBuffer()

        return self._run(body)

    def load(self, partition: int, records: Iterable[tuple[int, bytes, bytes | None]]) -> int:
        """Replay records `(log_offset, key, value)` of `partition` in log order (may be called
        once per chunk). Returns how many were applied. Records at or before the last log
        offset seen are skipped (a chunk fed twice changes nothing). A record that does not
        decode is skipped and counted (logged): one bad record must not keep a coordinator
        down."""
        buf = self._loads.get(partition)
        if buf is None or self._partitions.get(partition) != _LOADING:
            raise RuntimeError(f"partition {partition} is not loading")
        applied = 0
        for log_offset, key_bytes, value_bytes in records:
            if log_offset <= buf.last_log_offset:
                continue
            buf.last_log_offset = log_offset
            try:
                key, value = decode_record(key_bytes, value_bytes)
            except InvalidGroupRecordError as e:
                buf.errors += 1
                log.warning("__consumer_offsets-%d offset %d: skipping a bad record: %s", partition, log_offset, e)
                continue
            if partition_for_group(key.group, self.config.partitions) != partition:
                buf.errors += 1
                log.warning("__consumer_offsets-%d offset %d: group %r belongs elsewhere", partition, log_offset, key.group)
                continue
            applied += 1
            if isinstance(key, OffsetKey):
                k3 = (key.group, key.topic, key.partition)
                if value is None:
                    buf.offsets.pop(k3, None)
                else:
                    assert isinstance(value, OffsetValue)
                    buf.offsets[k3] = _entry(value, log_offset)
            elif value is None:
                buf.groups.pop(key.group, None)
            else:
                assert isinstance(value, GroupValue)
                buf.groups[key.group] = (value, log_offset)
        return applied

    def finish_load(self, partition: int, now_ms: int) -> Result:
        """The replay reached the log end: build the groups and serve them."""

        def body() -> dict:
            buf = self._loads.pop(partition, None)
            if buf is None or self._partitions.get(partition) != _LOADING:
                raise RuntimeError(f"partition {partition} is not loading")
            for gid, (value, log_offset) in buf.groups.items():
                group = _group_from_value(gid, value, log_offset, now_ms)
                self._groups[gid] = group
                self._touch(group)
            for (gid, topic, p), entry in buf.offsets.items():
                group = self._groups.get(gid)
                if group is None:
                    group = self._groups[gid] = Group(gid, state_timestamp_ms=now_ms)
                group.offsets[(topic, p)] = entry
            self._partitions[partition] = _ACTIVE
            return {"groups": len(buf.groups), "offsets": len(buf.offsets), "errors": buf.errors}

        return self._run(body)

    def unload(self, partition: int) -> Result:
        """This node no longer leads `partition`: drop its groups; their pending requests are
        answered NOT_COORDINATOR."""

        def body() -> None:
            self._drop_partition(partition)

        return self._run(body)

    def _check_partition(self, partition: int) -> None:
        if type(partition) is not int or not 0 <= partition < self.config.partitions:
            raise InvalidRequestError(f"partition {partition!r} of __consumer_offsets", field="partition")

    def _drop_partition(self, partition: int) -> None:
        self._partitions.pop(partition, None)
        self._loads.pop(partition, None)
        gone = NotCoordinatorError(f"partition {partition} of __consumer_offsets moved")
        # Groups first: the failure callbacks of the appends below then find their group gone
        # and only answer their requests (no rebalance, no new append, on a partition we left).
        for gid in [g for g in self._groups if self.partition_for(g) == partition]:
            group = self._groups.pop(gid)
            group.state = GroupState.DEAD  # not a state-machine step: the group leaves this node
            for m in group.members.values():
                self._complete(m.join_key, gone)
                self._complete(m.sync_key, gone)
            self._scheduled.pop(gid, None)
        for append_id in [a for a, ctx in self._appends.items() if ctx.partition == partition]:
            ctx = self._appends.pop(append_id)
            if ctx.on_fail is not None:
                ctx.on_fail(gone, -1)
        for key in [k for k, gid in self._pending.items() if self.partition_for(gid) == partition]:
            self._complete(key, gone)

    # ==== appends ========================================================================

    def on_append_committed(self, append_id: int, base_offset: int, now_ms: int) -> Result:
        """The append `append_id` is committed (acks=all) at log offsets base_offset, +1, ...:
        apply it to the cache and answer whoever waited for it. Unknown ids are ignored (the
        partition was unloaded meanwhile)."""

        def body() -> None:
            ctx = self._appends.pop(append_id, None)
            if ctx is None:
                return
            for i, (key, value) in enumerate(ctx.items):
                self._apply_committed(key, value, base_offset + i, now_ms)
            if ctx.on_commit is not None:
                ctx.on_commit(now_ms)

        return self._run(body)

    def on_append_failed(self, append_id: int, error: RaftlogError, now_ms: int) -> Result:
        """The append failed or its outcome is unknown (`error`: why). The cache is left as
        it was (a later replay settles an unknown outcome)."""

        def body() -> None:
            ctx = self._appends.pop(append_id, None)
            if ctx is not None and ctx.on_fail is not None:
                ctx.on_fail(append_error(error), now_ms)

        return self._run(body)

    def _apply_committed(self, key: Key, value: Value | None, log_offset: int, now_ms: int) -> None:
        group = self._groups.get(key.group)
        if isinstance(key, GroupKey):
            if group is not None:
                group.group_log_offset = max(group.group_log_offset, log_offset)
            return
        if group is None:
            if value is None:
                return
            group = self._groups[key.group] = Group(key.group, state_timestamp_ms=now_ms)
        tp = (key.topic, key.partition)
        current = group.offsets.get(tp)
        if current is not None and current.log_offset >= log_offset:
            return  # the cache already holds a later record for this key: never go back
        if value is None:
            group.offsets.pop(tp, None)
        else:
            assert isinstance(value, OffsetValue)
            group.offsets[tp] = _entry(value, log_offset)

    # ==== tick ===========================================================================

    def tick(self, now_ms: int) -> Result:
        """Expire silent members and pending members, end join phases whose rebalance timeout
        or initial delay passed."""

        def body() -> None:
            due: list[str] = []
            while self._timers and self._timers[0][0] <= now_ms:
                deadline, gid = heapq.heappop(self._timers)
                if self._scheduled.get(gid) == deadline:
                    del self._scheduled[gid]
                    due.append(gid)
            for gid in due:
                group = self._groups.get(gid)
                if group is not None:
                    self._tick_group(group, now_ms)
                    self._touch(group)

        return self._run(body)

    def _tick_group(self, group: Group, now_ms: int) -> None:
        for mid, expiry in list(group.pending_members.items()):
            if expiry <= now_ms:
                del group.pending_members[mid]
        for mid, m in list(group.members.items()):
            if self._heartbeat_matters(m) and m.heartbeat_deadline_ms <= now_ms and mid in group.members:
                log.info("group %s: member %s session expired", group.group_id, mid)
                self._remove_member_and_update_group(group, m, now_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            if group.initial_delay_deadline_ms is not None:
                if group.initial_delay_deadline_ms <= now_ms:
                    remaining = (group.rebalance_deadline_ms or now_ms) - now_ms
                    if group.new_member_added and remaining > 0:
                        group.new_member_added = False
                        group.initial_delay_deadline_ms = now_ms + min(
                            self.config.group_initial_rebalance_delay_ms, remaining
                        )
                    else:
                        self._complete_join(group, now_ms)
            elif group.rebalance_deadline_ms is not None and group.rebalance_deadline_ms <= now_ms:
                self._complete_join(group, now_ms)
            else:
                self._try_complete_join(group, now_ms)

    # ==== JoinGroup ======================================================================

    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
    ) -> Result:
        """JoinGroup. Ok response: {member_id, generation_id, protocol_type, protocol_name,
        leader, members: [{member_id, group_instance_id, metadata}] (the leader only, else [])}.
        Errors: MEMBER_ID_REQUIRED (member_id detail), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED,
        COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS (a newer join of the same member
        superseded this one), and the routing errors."""

        def body() -> Response | Pending:
            protos = _check_protocols(protocols)
            _check_str("member_id", member_id, 0)
            _check_str("protocol_type", protocol_type, 0)
            _check_str("client_id", client_id, 0)
            _check_str("client_host", client_host, 0)
            if group_instance_id is not None:
                _check_str("group_instance_id", group_instance_id, 1)
            _check_int("rebalance_timeout_ms", rebalance_timeout_ms, 1)
            _check_int("session_timeout_ms", session_timeout_ms, 0)
            self._route(group_id)
            if len(self._pending) >= self.config.max_pending:
                raise CoordinatorNotAvailableError(f"{len(self._pending)} requests pending, the limit")
            cfg = self.config
            if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
                raise InvalidSessionTimeoutError(
                    f"session_timeout_ms {session_timeout_ms} outside "
                    f"{cfg.group_min_session_timeout_ms}..{cfg.group_max_session_timeout_ms}"
                )
            args = _JoinArgs(group_instance_id, client_id, client_host, protocol_type, protos,
                             session_timeout_ms, rebalance_timeout_ms)
            group = self._groups.get(group_id)
            created = False
            if group is None:
                if member_id:
                    raise UnknownMemberIdError(f"group {group_id!r} does not exist")
                group = self._new_group(group_id, now_ms)
                created = True
            self._touch(group)
            try:
                if not member_id:
                    return self._join_unknown_member(group, args, now_ms)
                return self._join_known_member(group, member_id, args, now_ms)
            finally:
                if created and not group.members and not group.pending_members and not group.offsets:
                    del self._groups[group_id]

        return self._run(body)

    def _join_unknown_member(self, group: Group, a: "_JoinArgs", now_ms: int) -> Response | Pending:
        if group.is_(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
        if not group.supports_protocols(a.protocol_type, tuple(n for n, _ in a.protocols)):
            raise InconsistentGroupProtocolError(
                f"protocol type {a.protocol_type!r} / protocols {[n for n, _ in a.protocols]} do not match the group's"
            )
        known_static = a.group_instance_id is not None and a.group_instance_id in group.static_members
        if not known_static and group.size() >= self.config.group_max_size:
            raise GroupMaxSizeReachedError(f"group {group.group_id!r} has {group.size()} members, the limit")
        new_id = self._new_member_id(a.group_instance_id if a.group_instance_id is not None else a.client_id)
        if a.group_instance_id is not None:
            if known_static:
                return self._update_static_member_and_rebalance(group, new_id, a, now_ms)
            return self._add_member_and_rebalance(group, new_id, a, now_ms)
        # KIP-394: park the member until it rejoins with its id, so a client that never gets
        # the answer cannot leave ghost members behind.
        group.pending_members[new_id] = now_ms + a.session_timeout_ms
        return MemberIdRequiredError("rejoin with the member_id given", member_id=new_id)

    def _join_known_member(self, group: Group, member_id: str, a: "_JoinArgs", now_ms: int) -> Response | Pending:
        if group.is_(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
        if not group.supports_protocols(a.protocol_type, tuple(n for n, _ in a.protocols)):
            raise InconsistentGroupProtocolError("protocols do not match the group's")
        if member_id in group.pending_members:
            if a.group_instance_id is not None:
                raise InvalidRequestError("a pending member id cannot carry a group_instance_id",
                                               field="group_instance_id")
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, member_id, a, now_ms)
        if group.is_static_member_fenced(member_id, a.group_instance_id):
            raise FencedInstanceIdError(f"instance {a.group_instance_id!r} is held by a newer member")
        member = group.members.get(member_id)
        if member is None or member.group_instance_id != a.group_instance_id:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, a, now_ms)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.same_protocols(a.protocols):
                # It missed our join answer: send it again (Kafka does the same).
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                return self._join_response(group, member)
            return self._update_member_and_rebalance(group, member, a, now_ms)
        if state is GroupState.STABLE:
            if member_id == group.leader_id or not member.same_protocols(a.protocols):
                return self._update_member_and_rebalance(group, member, a, now_ms)
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            return self._join_response(group, member)
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")

    def _add_member_and_rebalance(self, group: Group, member_id: str, a: "_JoinArgs", now_ms: int) -> Pending:
        key = self._new_key(group.group_id)
        member = Member(
            member_id=member_id,
            client_id=a.client_id,
            client_host=a.client_host,
            session_timeout_ms=a.session_timeout_ms,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            protocol_type=a.protocol_type,
            protocols=a.protocols,
            group_instance_id=a.group_instance_id,
            awaiting_join=True,
            join_key=key,
            is_new=True,
            heartbeat_deadline_ms=now_ms + self.config.new_member_join_timeout_ms,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.initial_delay_deadline_ms is not None:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms)
        self._try_complete_join(group, now_ms)
        return Pending(key)

    def _update_member_and_rebalance(self, group: Group, member: Member, a: "_JoinArgs", now_ms: int) -> Pending:
        key = self._new_key(group.group_id)
        self._complete(member.join_key, RebalanceInProgressError("superseded by a newer join of the same member"))
        member.protocols = a.protocols
        member.session_timeout_ms = a.session_timeout_ms
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.client_id, member.client_host = a.client_id, a.client_host
        member.join_key = key
        group.set_awaiting_join(member, True)
        self._maybe_prepare_rebalance(group, now_ms)
        self._try_complete_join(group, now_ms)
        return Pending(key)

    def _update_static_member_and_rebalance(self, group: Group, new_id: str, a: "_JoinArgs", now_ms: int) -> Pending:
        assert a.group_instance_id is not None
        instance = a.group_instance_id
        old_id = group.static_members[instance]
        old = group.members[old_id]
        fenced = FencedInstanceIdError(f"instance {instance!r} rejoined as a new member")
        if group.is_(GroupState.STABLE):
            self._check_append_room()
        key = self._new_key(group.group_id)
        self._complete(old.join_key, fenced)
        self._complete(old.sync_key, fenced)
        old.join_key = old.sync_key = None
        saved = (old.protocols, old.session_timeout_ms, old.rebalance_timeout_ms, old.client_id, old.client_host)
        leader_before = group.leader_id
        selected_metadata = old.metadata(group.protocol_name) if group.protocol_name else None
        member = group.replace_static_member(instance, old_id, new_id)
        member.protocols = a.protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = a.session_timeout_ms, a.rebalance_timeout_ms
        member.client_id, member.client_host = a.client_id, a.client_host
        member.heartbeat_deadline_ms = now_ms + a.session_timeout_ms
        unchanged = (
            group.is_(GroupState.STABLE)
            and group.select_protocol() == group.protocol_name
            and member.metadata(group.protocol_name or "") == selected_metadata
        )
        if unchanged:
            generation = group.generation_id

            def committed(now: int) -> None:
                self._complete(key, {
                    "member_id": new_id,
                    "generation_id": generation,
                    "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name,
                    # The old leader id, so a restarted leader does not run a trivial assignment
                    # that a Stable group would never hand out (Kafka does the same).
                    "leader": leader_before,
                    "members": [],
                })

            def failed(err: RaftlogError, now: int) -> None:
                if self._groups.get(group.group_id) is group and group.members.get(new_id) is member:
                    group.replace_static_member(instance, new_id, old_id)
                    (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms,
                     member.client_id, member.client_host) = saved
                    self._touch(group)
                self._complete(key, err)

            self._append(self.partition_for(group.group_id), [self._group_record(group)], committed, failed)
            return Pending(key)
        member.join_key = key
        group.set_awaiting_join(member, True)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old id: start over.
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_prepare_rebalance(group, now_ms)
            self._try_complete_join(group, now_ms)
        return Pending(key)

    def _join_response(self, group: Group, member: Member) -> dict:
        is_leader = member.member_id == group.leader_id
        protocol = group.protocol_name or ""
        return {
            "member_id": member.member_id,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata(protocol)}
                for m in group.members.values()
            ] if is_leader else [],
        }

    # ---- the rebalance ----

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(
                group, RebalanceInProgressError("the group is rebalancing again")
            )
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        delay = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout_ms)
        if group.is_(GroupState.EMPTY) and delay > 0:
            group.initial_delay_deadline_ms = now_ms + delay
            group.new_member_added = False
        else:
            group.initial_delay_deadline_ms = None
        group.rebalance_deadline_ms = now_ms + rebalance_timeout_ms
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        self._touch(group)
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: Group, now_ms: int) -> None:
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and group.initial_delay_deadline_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        """Kafka's onCompleteJoin: drop members that did not rejoin, start the next generation,
        answer every joined member (the leader with the member list)."""
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        for mid in group.not_yet_rejoined():
            member = group.members[mid]
            log.info("group %s: member %s did not rejoin in time", group.group_id, mid)
            self._complete(member.sync_key, UnknownMemberIdError("removed: did not rejoin in time"))
            group.remove(mid)
        group.maybe_elect_joined_leader()
        group.init_next_generation(now_ms)
        self._touch(group)
        if group.is_(GroupState.EMPTY):
            self._append(self.partition_for(group.group_id), [self._group_record(group)])
            return
        for member in group.members.values():
            self._complete(member.join_key, self._join_response(group, member))
            member.join_key = None
            group.set_awaiting_join(member, False)
            member.is_new = False
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _reset_and_propagate_assignment_error(self, group: Group, err: RaftlogError) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                self._complete(member.sync_key, err)
                member.sync_key = None
                member.awaiting_sync = False

    def _remove_member_and_update_group(self, group: Group, member: Member, now_ms: int) -> None:
        gone = UnknownMemberIdError(f"member {member.member_id} left or was removed")
        self._complete(member.join_key, gone)
        self._complete(member.sync_key, gone)
        member.join_key = member.sync_key = None
        group.remove(member.member_id)
        self._touch(group)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)
        elif group.is_(GroupState.STABLE) or group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)

    def _group_record(self, group: Group) -> tuple[Key, Value]:
        protocol = group.protocol_name or ""
        members = tuple(
            MemberValue(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=m.assignment,
                group_instance_id=m.group_instance_id,
            )
            for m in group.members.values()
        )
        value = GroupValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            members=members,
            protocol=group.protocol_name if members else None,
            leader=group.leader_id if members else None,
            current_state_timestamp=group.state_timestamp_ms,
            state=group.state.value,
        )
        return GroupKey(group.group_id), value

    # ==== SyncGroup ======================================================================

    def sync_group(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        now_ms: int,
        assignments: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Result:
        """SyncGroup. The leader sends `assignments` (member id → bytes; members left out get
        b""); followers send none and wait for it. Ok response: {protocol_type, protocol_name,
        assignment}. Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
        INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, routing."""

        def body() -> Response | Pending:
            _check_str("member_id", member_id, 1)
            _check_int("generation_id", generation_id, NO_GENERATION)
            plan = _check_assignments(assignments)
            self._route(group_id)
            group = self._groups.get(group_id)
            if group is None:
                raise UnknownMemberIdError(f"group {group_id!r} does not exist")
            self._touch(group)
            if group.is_(GroupState.DEAD):
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            if group.is_static_member_fenced(member_id, group_instance_id):
                raise FencedInstanceIdError(f"instance {group_instance_id!r} is held by a newer member")
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
            if generation_id != group.generation_id:
                raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                raise InconsistentGroupProtocolError("protocol type or name differs from the group's")
            if group.is_(GroupState.PREPARING_REBALANCE):
                raise RebalanceInProgressError("the group is rebalancing: rejoin")
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if group.is_(GroupState.STABLE):
                return self._sync_response(group, member)
            # CompletingRebalance
            store = member_id == group.leader_id and group.assignment_generation != group.generation_id
            if store:
                self._check_append_room()
            key = self._new_key(group_id)
            self._complete(member.sync_key, RebalanceInProgressError("superseded by a newer sync of the same member"))
            member.sync_key = key
            member.awaiting_sync = True
            if store:
                self._store_assignment(group, plan or {}, now_ms)
            return Pending(key)

        return self._run(body)

    def _store_assignment(self, group: Group, plan: Mapping[str, bytes], now_ms: int) -> None:
        generation = group.generation_id
        proposed = {mid: plan.get(mid, b"") for mid in group.members}
        saved = {mid: m.assignment for mid, m in group.members.items()}
        for mid, m in group.members.items():
            m.assignment = proposed[mid]
        record = self._group_record(group)
        for mid, m in group.members.items():
            m.assignment = saved[mid]

        def still_ours() -> bool:
            return (
                self._groups.get(group.group_id) is group
                and group.is_(GroupState.COMPLETING_REBALANCE)
                and group.generation_id == generation
            )

        def settled() -> None:
            if group.assignment_generation == generation:
                group.assignment_generation = None

        def committed(now: int) -> None:
            settled()
            if not still_ours():
                return  # a new rebalance began: its syncs were answered REBALANCE_IN_PROGRESS
            for mid, m in group.members.items():
                m.assignment = proposed.get(mid, b"")
            group.transition_to(GroupState.STABLE, now)
            self._touch(group)
            for m in group.members.values():
                if m.awaiting_sync:
                    self._complete(m.sync_key, self._sync_response(group, m))
                    m.sync_key = None
                    m.awaiting_sync = False
                    m.heartbeat_deadline_ms = now + m.session_timeout_ms

        def failed(err: RaftlogError, now: int) -> None:
            settled()
            if not still_ours():
                return
            self._reset_and_propagate_assignment_error(group, err)
            self._prepare_rebalance(group, now)

        group.assignment_generation = generation
        self._append(self.partition_for(group.group_id), [record], committed, failed)

    @staticmethod
    def _sync_response(group: Group, member: Member) -> dict:
        return {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name, "assignment": member.assignment}

    # ==== Heartbeat ======================================================================

    def heartbeat(
        self, *, group_id: str, member_id: str, generation_id: int, now_ms: int, group_instance_id: str | None = None
    ) -> Result:
        """Heartbeat. Ok response: {}. Errors: REBALANCE_IN_PROGRESS (rejoin), UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, routing."""

        def body() -> Response:
            _check_str("member_id", member_id, 0)
            _check_int("generation_id", generation_id, NO_GENERATION)
            self._route(group_id)
            group = self._groups.get(group_id)
            if group is None:
                raise UnknownMemberIdError(f"group {group_id!r} does not exist")
            self._touch(group)
            if group.is_(GroupState.DEAD):
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            if group.is_static_member_fenced(member_id, group_instance_id):
                raise FencedInstanceIdError(f"instance {group_instance_id!r} is held by a newer member")
            member = group.members.get(member_id)
            if member is None or group.is_(GroupState.EMPTY):
                raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
            if generation_id != group.generation_id:
                raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if group.is_(GroupState.PREPARING_REBALANCE):
                raise RebalanceInProgressError("the group is rebalancing: rejoin")
            return {}

        return self._run(body)

    # ==== LeaveGroup =====================================================================

    def leave_group(self, *, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int) -> Result:
        """LeaveGroup for (member_id, group_instance_id) pairs (a static member may leave by
        instance id with member_id ""). Ok response: {members: [{member_id, group_instance_id}
        or with `error`: {code, message}]}. Top-level errors: COORDINATOR_NOT_AVAILABLE, routing."""

        def body() -> Response:
            if not isinstance(members, Sequence) or not members:
                raise InvalidRequestError("members: a non-empty list", field="members")
            for item in members:
                if not isinstance(item, Sequence) or len(item) != 2:
                    raise InvalidRequestError("members: (member_id, group_instance_id) pairs", field="members")
                mid, inst = item
                _check_str("member_id", mid, 0)
                if inst is not None:
                    _check_str("group_instance_id", inst, 1)
            self._route(group_id)
            group = self._groups.get(group_id)
            if group is not None and group.is_(GroupState.DEAD):
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            out = []
            for mid, inst in members:
                entry: dict[str, Any] = {"member_id": mid, "group_instance_id": inst}
                err = self._leave_one(group, mid, inst, now_ms) if group is not None else UnknownMemberIdError(
                    f"group {group_id!r} does not exist")
                if err is not None:
                    entry["error"] = {"code": err.code, "message": str(err)}
                out.append(entry)
            return {"members": out}

        return self._run(body)

    def _leave_one(self, group: Group, member_id: str, instance: str | None, now_ms: int) -> RaftlogError | None:
        self._touch(group)
        if instance is not None:
            holder = group.static_members.get(instance)
            if holder is None:
                return UnknownMemberIdError(f"instance {instance!r} is not in the group")
            if member_id and member_id != holder:
                return FencedInstanceIdError(f"instance {instance!r} is held by another member")
            member_id = holder
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._try_complete_join(group, now_ms)
            return None
        member = group.members.get(member_id)
        if member is None:
            return UnknownMemberIdError(f"member {member_id!r} is not in the group")
        self._remove_member_and_update_group(group, member, now_ms)
        return None

    # ==== OffsetCommit ===================================================================

    def offset_commit(
        self,
        *,
        group_id: str,
        offsets: Sequence[CommitOffset],
        now_ms: int,
        member_id: str = "",
        generation_id: int = NO_GENERATION,
        group_instance_id: str | None = None,
    ) -> Result:
        """OffsetCommit. Ok response (after the acks=all append): {partitions: [{topic,
        partition} or with `error`: {code, message}]} (per-partition errors:
        OFFSET_METADATA_TOO_LARGE, INVALID_REQUEST). A commit refused as a whole raises one
        error: COORDINATOR_NOT_AVAILABLE (group Dead or append failed), NOT_COORDINATOR (leadership
        lost), FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (CompletingRebalance), UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, routing."""

        def body() -> Response | Pending:
            _check_str("member_id", member_id, 0)
            _check_int("generation_id", generation_id, NO_GENERATION)
            if not isinstance(offsets, Sequence) or len(offsets) > self.config.max_commit_partitions:
                raise InvalidRequestError(
                    f"offsets: a list of at most {self.config.max_commit_partitions}", field="offsets")
            try:
                commits = [CommitOffset(*o) for o in offsets]
            except TypeError:
                raise InvalidRequestError("offsets: (topic, partition, offset, leader_epoch, metadata)",
                                               field="offsets") from None
            for c in commits:
                _check_str("topic", c.topic, 1, MAX_TOPIC_NAME_CHARS)
                _check_int("partition", c.partition, 0, 2**31 - 1)
                _check_int("offset", c.offset)
                if c.leader_epoch is not None:
                    _check_int("leader_epoch", c.leader_epoch, -1, 2**31 - 1)
                if type(c.metadata) is not str:
                    raise InvalidRequestError("metadata: expected str", field="metadata")
            partition = self._route(group_id)
            group = self._groups.get(group_id)
            if group is None:
                if generation_id >= 0:
                    raise IllegalGenerationError(f"group {group_id!r} does not exist at generation {generation_id}")
                self._check_group_room()
                # The group appears in the cache when the first offset is committed.
            else:
                self._validate_commit(group, member_id, generation_id, group_instance_id, now_ms)
                self._touch(group)
            self._check_append_room()
            return self._do_commit(group_id, partition, commits, now_ms)

        return self._run(body)

    def _validate_commit(self, group: Group, member_id: str, generation_id: int, instance: str | None, now_ms: int) -> None:
        # Kafka's order of checks (GroupCoordinator.handleCommitOffsets).
        if group.is_(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
        if group.is_static_member_fenced(member_id, instance):
            raise FencedInstanceIdError(f"instance {instance!r} is held by a newer member")
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return  # the group only stores offsets (assign() consumers, admin tools)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            raise RebalanceInProgressError("the group is completing a rebalance: commit after SyncGroup")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
        if generation_id != group.generation_id:
            raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
        # Stable, or PreparingRebalance with the generation that is ending: accepted, and it
        # counts as a heartbeat.
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _do_commit(self, group_id: str, partition: int, commits: list[CommitOffset], now_ms: int) -> Response | Pending:
        results: list[dict[str, Any]] = []
        items: list[tuple[Key, Value | None]] = []
        for c in commits:
            entry: dict[str, Any] = {"topic": c.topic, "partition": c.partition}
            if len(c.metadata.encode()) > self.config.offset_metadata_max_bytes:
                err: RaftlogError = OffsetMetadataTooLargeError(
                    f"metadata over {self.config.offset_metadata_max_bytes} bytes")
                entry["error"] = {"code": err.code, "message": str(err)}
            elif c.offset < 0:
                err = InvalidRequestError("offset must be >= 0", field="offset")
                entry["error"] = {"code": err.code, "message": str(err)}
            else:
                epoch = c.leader_epoch if c.leader_epoch is not None and c.leader_epoch >= 0 else None
                items.append((OffsetKey(group_id, c.topic, c.partition),
                              OffsetValue(c.offset, c.metadata, now_ms, epoch)))
            results.append(entry)
        if not items:
            return {"partitions": results}
        key = self._new_key(group_id)

        def committed(now: int) -> None:
            self._complete(key, {"partitions": results})

        def failed(err: RaftlogError, now: int) -> None:
            self._complete(key, {"partitions": [
                r if "error" in r else {**r, "error": {"code": err.code, "message": str(err)}} for r in results
            ]})

        self._append(partition, items, committed, failed)
        return Pending(key)

    # ==== OffsetFetch ====================================================================

    def offset_fetch(self, *, group_id: str, partitions: Sequence[tuple[str, int]] | None = None) -> Result:
        """OffsetFetch: committed offsets of `partitions`, or of every partition the group has
        committed when None. Ok response: {partitions: [{topic, partition, offset (-1 none),
        leader_epoch (-1 none), metadata}]}. Errors: routing."""

        def body() -> Response:
            if partitions is not None:
                for t, p in partitions:
                    _check_str("topic", t, 1, MAX_TOPIC_NAME_CHARS)
                    _check_int("partition", p, 0, 2**31 - 1)
            self._route(group_id)
            group = self._groups.get(group_id)
            stored = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
            wanted = sorted(stored) if partitions is None else [(t, p) for t, p in partitions]
            out = []
            for t, p in wanted:
                e = stored.get((t, p))
                out.append({
                    "topic": t,
                    "partition": p,
                    "offset": -1 if e is None else e.offset,
                    "leader_epoch": -1 if e is None or e.leader_epoch is None else e.leader_epoch,
                    "metadata": "" if e is None else e.metadata,
                })
            return {"partitions": out}

        return self._run(body)

    # ==== ListGroups / DescribeGroups ====================================================

    def list_groups(self, states: Sequence[str] | None = None) -> Result:
        """ListGroups of the partitions served here (loaded ones). Ok response: {groups:
        [{group_id, protocol_type, state}]}, sorted by id, Dead groups left out."""

        def body() -> Response:
            wanted = None if states is None else set(states)
            out = []
            for gid in sorted(self._groups):
                g = self._groups[gid]
                if g.is_(GroupState.DEAD) or not self.is_active(self.partition_for(gid)):
                    continue
                if wanted is not None and g.state.value not in wanted:
                    continue
                out.append({"group_id": gid, "protocol_type": g.protocol_type or "", "state": g.state.value})
            return {"groups": out}

        return self._run(body)

    def describe_groups(self, group_ids: Sequence[str]) -> Result:
        """DescribeGroups. Ok response: {groups: [{group_id, state, protocol_type, protocol,
        members: [{member_id, group_instance_id, client_id, client_host, metadata,
        assignment}]} or {group_id, error}]}. Metadata and assignment are given only for a
        Stable group (as Kafka); an unknown group is described as Dead with no members."""

        def body() -> Response:
            out = []
            for gid in group_ids:
                try:
                    self._route(gid)
                except RaftlogError as e:
                    out.append({"group_id": gid, "error": {"code": e.code, "message": str(e)}})
                    continue
                g = self._groups.get(gid)
                if g is None:
                    out.append({"group_id": gid, "state": "Dead", "protocol_type": "", "protocol": "", "members": []})
                    continue
                stable = g.is_(GroupState.STABLE)
                out.append({
                    "group_id": gid,
                    "state": g.state.value,
                    "protocol_type": g.protocol_type or "",
                    "protocol": (g.protocol_name or "") if stable else "",
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "metadata": m.metadata(g.protocol_name or "") if stable else b"",
                            "assignment": m.assignment if stable else b"",
                        }
                        for m in g.members.values()
                    ],
                })
            return {"groups": out}

        return self._run(body)

    # ==== DeleteGroups ===================================================================

    def delete_group(self, *, group_id: str, now_ms: int) -> Result:
        """Delete an Empty group and its offsets (tombstones, acks=all). Ok response: {} after
        the append. Errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, routing, append errors. The
        group is Dead while the tombstones are in flight (joins and commits get
        COORDINATOR_NOT_AVAILABLE); if the append fails it is Empty again."""

        def body() -> Response | Pending:
            partition = self._route(group_id)
            group = self._groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            if not group.is_(GroupState.EMPTY):
                raise NonEmptyGroupError(f"group {group_id!r} is {group.state.value}, not Empty")
            self._check_append_room()
            key = self._new_key(group_id)
            items: list[tuple[Key, Value | None]] = [
                (OffsetKey(group_id, t, p), None) for t, p in sorted(group.offsets)
            ]
            items.append((GroupKey(group_id), None))
            group.transition_to(GroupState.DEAD, now_ms)
            self._touch(group)

            def committed(now: int) -> None:
                if self._groups.get(group_id) is group:
                    del self._groups[group_id]
                self._complete(key, {})

            def failed(err: RaftlogError, now: int) -> None:
                if self._groups.get(group_id) is group and group.is_(GroupState.DEAD):
                    # Not a state-machine step: the delete did not happen, so the group is
                    # what it was (Empty, no members).
                    group.state = GroupState.EMPTY
                self._complete(key, err)

            self._append(partition, items, committed, failed)
            return Pending(key)

        return self._run(body)

    # ==== offset reset ===================================================================

    def reset_offsets(
        self,
        *,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        now_ms: int,
        dry_run: bool = False,
    ) -> Result:
        """Set the committed offsets of an inactive group (Empty or unknown) to `offsets`
        (planned by `plan_offset_reset`). Ok response: {dry_run, partitions: [{topic,
        partition, previous_offset (-1 none), offset}]}; with dry_run nothing is written.
        Errors: NON_EMPTY_GROUP, COORDINATOR_NOT_AVAILABLE (Dead), INVALID_REQUEST, routing."""

        def body() -> Response | Pending:
            if not isinstance(offsets, Mapping) or len(offsets) > self.config.max_commit_partitions:
                raise InvalidRequestError("offsets: a map (topic, partition) -> offset", field="offsets")
            for (t, p), o in offsets.items():
                _check_str("topic", t, 1, MAX_TOPIC_NAME_CHARS)
                _check_int("partition", p, 0, 2**31 - 1)
                _check_int("offset", o, 0)
            partition = self._route(group_id)
            group = self._groups.get(group_id)
            if group is not None and group.is_(GroupState.DEAD):
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            if group is not None and not group.is_(GroupState.EMPTY):
                raise NonEmptyGroupError(
                    f"offsets can be reset only for an inactive group; {group_id!r} is {group.state.value}")
            stored = group.offsets if group is not None else {}
            rows = [
                {"topic": t, "partition": p, "previous_offset": stored[(t, p)].offset if (t, p) in stored else -1,
                 "offset": o}
                for (t, p), o in sorted(offsets.items())
            ]
            response = {"dry_run": bool(dry_run), "partitions": rows}
            if dry_run or not rows:
                return response
            self._check_append_room()
            if group is None:
                self._check_group_room()
            key = self._new_key(group_id)
            items: list[tuple[Key, Value | None]] = [
                (OffsetKey(group_id, t, p), OffsetValue(o, "", now_ms)) for (t, p), o in sorted(offsets.items())
            ]

            def committed(now: int) -> None:
                self._complete(key, response)

            def failed(err: RaftlogError, now: int) -> None:
                self._complete(key, err)

            self._append(partition, items, committed, failed)
            return Pending(key)

        return self._run(body)

    # ==== the shell gave up on a request =================================================

    def abandon(self, key: int) -> None:
        """The shell stopped waiting for `key` (its deadline passed or the client went away).
        The core forgets the key; the request itself stands (a member that joined still counts
        as joined, as in Kafka when the connection of a waiting JoinGroup drops)."""
        self._pending.pop(key, None)


@dataclass(frozen=True)
class _JoinArgs:
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int


def _entry(value: OffsetValue, log_offset: int) -> OffsetEntry:
    return OffsetEntry(value.offset, value.metadata, value.commit_timestamp, value.leader_epoch,
                       value.expire_timestamp, log_offset)


def _group_from_value(group_id: str, value: GroupValue, log_offset: int, now_ms: int) -> Group:
    group = Group(group_id, generation_id=value.generation, protocol_type=value.protocol_type or None,
                  state_timestamp_ms=value.current_state_timestamp or now_ms, group_log_offset=log_offset)
    for mv in value.members:
        assert value.protocol is not None
        group.add(Member(
            member_id=mv.member_id,
            client_id=mv.client_id,
            client_host=mv.client_host,
            session_timeout_ms=mv.session_timeout_ms,
            rebalance_timeout_ms=mv.rebalance_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=((value.protocol, mv.subscription),),
            group_instance_id=mv.group_instance_id,
            assignment=mv.assignment,
            heartbeat_deadline_ms=now_ms + mv.session_timeout_ms,
        ))
    if value.members:
        group.leader_id = value.leader
        group.protocol_name = value.protocol
        # A stored group with members finished a rebalance: it resumes Stable (Kafka's load).
        group.state = GroupState.STABLE
    return group


def _check_str(name: str, value: Any, min_chars: int = 0, max_chars: int = MAX_ID_CHARS) -> str:
    if type(value) is not str or not min_chars <= len(value) <= max_chars:
        raise InvalidRequestError(f"{name}: expected a string of {min_chars}..{max_chars} characters", field=name)
    return value


def _check_int(name: str, value: Any, lo: int = -(2**63), hi: int = 2**63 - 1) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidRequestError(f"{name}: expected an int in {lo}..{hi}", field=name)
    return value


def _check_protocols(protocols: Any) -> tuple[tuple[str, bytes], ...]:
    if not isinstance(protocols, Sequence) or not protocols or len(protocols) > 64:
        raise InvalidRequestError("protocols: a list of 1..64 (name, metadata)", field="protocols")
    out = []
    for item in protocols:
        if not isinstance(item, Sequence) or len(item) != 2:
            raise InvalidRequestError("protocols: (name, metadata) pairs", field="protocols")
        name, meta = item
        _check_str("protocols", name, 1)
        if type(meta) is not bytes or len(meta) > MAX_BLOB_BYTES:
            raise InvalidRequestError("protocols: metadata must be bytes", field="protocols")
        out.append((name, meta))
    if len({n for n, _ in out}) != len(out):
        raise InvalidRequestError("protocols: duplicate name", field="protocols")
    return tuple(out)


def _check_assignments(assignments: Any) -> dict[str, bytes] | None:
    if assignments is None:
        return None
    if not isinstance(assignments, Mapping):
        raise InvalidRequestError("assignments: a map member_id -> bytes", field="assignments")
    for mid, blob in assignments.items():
        _check_str("assignments", mid, 1)
        if type(blob) is not bytes or len(blob) > MAX_BLOB_BYTES:
            raise InvalidRequestError("assignments: values must be bytes", field="assignments")
    return dict(assignments)

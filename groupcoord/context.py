"""What the group coordinator's handlers share: the contract types the shell sees (`Result`,
`Append`, `Pending`, `CommitOffset`, `CoordinatorConfig`) and `CoordinatorContext`, which holds
every group, partition status, pending request, append in flight and timer of one
`GroupCoordinator`, and records the effects of the call in progress.

Owns: the effect plumbing (`run` wraps one public call; inside it, `complete`, `append` and
`touch` record completions, appends and groups whose timer must move), request routing
(`route`: which partition, loaded or not), the bounds (`max_pending`, `max_pending_appends`,
`max_groups`), the timer heap, and the offset cache's one rule: an offset enters the cache
only when its append committed (`apply_committed`), never going back to an older log offset.

The handler modules (membership.py, offsets.py, admin.py, replay.py) are functions over a
context; coordinator.py is the public API that runs them. Pure: no I/O, no clock, no threads.
May import: raftlog.base, and groupcoord's records and state.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

from groupcoord import consumer_group
from groupcoord.consumer_group_records import ConsumerGroupKey, encode_key, encode_value
from groupcoord.records import (
    MAX_GROUP_ID_CHARS,
    MAX_ID_CHARS,
    GroupKey,
    GroupValue,
    Key,
    OffsetKey,
    OffsetValue,
    Value,
)
from groupcoord.state import Group, GroupState, Member, OffsetEntry
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    InvalidGroupIdError,
    InvalidRequestError,
    KafkaStorageError,
    NotCoordinatorError,
    NotLeaderError,
    RaftlogError,
)
from raftlog.base.topics import OFFSETS_TOPIC, partition_for_group

__all__ = [
    "CoordinatorConfig",
    "CoordinatorContext",
    "Result",
    "Append",
    "Pending",
    "Response",
    "CommitOffset",
    "NO_GENERATION",
    "append_error",
    "check_str",
    "check_int",
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
    # KIP-848 consumer groups (consumer_group_ops.py): Kafka's group.consumer.* settings.
    group_consumer_assignor: str = "uniform"
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    # group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled (Kafka 4's
    # online upgrade/downgrade between the protocols; consumer_group_classic.py).
    group_consumer_migration_policy: str = "bidirectional"


class Pending(NamedTuple):
    """The answer to this request comes later, as a completion for `key`."""

    key: int


Response = Union[dict, RaftlogError]


@dataclass(frozen=True)
class Append:
    append_id: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    # A transactional append (TxnOffsetCommit, issue 42): the batch carries the producer's id
    # and epoch with the transactional bit, and counts only once its COMMIT marker follows.
    producer_id: int = -1
    producer_epoch: int = -1


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
class Effects:
    """What one public call asks of the shell, collected while it runs."""

    appends: list[Append] = field(default_factory=list)
    completions: list[tuple[int, Response]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)


@dataclass
class AppendInFlight:
    """An append the shell was asked for: its items, and what to do when it commits or fails
    (`on_commit(now_ms)`, `on_fail(error, now_ms)`)."""

    partition: int
    items: list[tuple[Key, Value | None]]
    on_commit: Callable[[int], None] | None
    on_fail: Callable[[RaftlogError, int], None] | None
    producer_id: int = -1  # >= 0: a transactional append (its offsets wait for the marker)


@dataclass
class LoadBuffer:
    """A partition's replay so far (replay.py): the latest record per key, by log order."""

    last_log_offset: int = -1
    offsets: dict[tuple[str, str, int], OffsetEntry] = field(default_factory=dict)
    groups: dict[str, tuple[GroupValue, int]] = field(default_factory=dict)
    consumer: dict[str, dict[ConsumerGroupKey, Any]] = field(default_factory=dict)  # KIP-848 records
    # transactional offsets whose marker the replay has not reached: producer id -> key -> entry
    txn: dict[int, dict[tuple[str, str, int], OffsetEntry]] = field(default_factory=dict)
    errors: int = 0


LOADING = "loading"
ACTIVE = "active"
_NOT_COORDINATOR_ERRORS = (NotLeaderError, NotCoordinatorError, KafkaStorageError, FencedLeaderEpochError)


def append_error(cause: RaftlogError, topic: str = OFFSETS_TOPIC) -> RaftlogError:
    """Kafka's mapping of an append failure (to a coordinator's internal `topic`) to the error a
    client sees: leadership or storage loss → NOT_COORDINATOR (find the coordinator again),
    anything else (timeouts, not enough replicas, unknown outcome) → COORDINATOR_NOT_AVAILABLE
    (retry). The group and the transaction coordinator both answer so."""
    if isinstance(cause, _NOT_COORDINATOR_ERRORS):
        return NotCoordinatorError(f"append to {topic} failed: {cause}")
    return CoordinatorNotAvailableError(f"append to {topic} failed: {cause}")


def offset_entry(value: OffsetValue, log_offset: int) -> OffsetEntry:
    return OffsetEntry(value.offset, value.metadata, value.commit_timestamp, value.leader_epoch,
                       value.expire_timestamp, log_offset)


def check_str(name: str, value: Any, min_chars: int = 0, max_chars: int = MAX_ID_CHARS) -> str:
    if type(value) is not str or not min_chars <= len(value) <= max_chars:
        raise InvalidRequestError(f"{name}: expected a string of {min_chars}..{max_chars} characters", field=name)
    return value


def check_int(name: str, value: Any, lo: int = -(2**63), hi: int = 2**63 - 1) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidRequestError(f"{name}: expected an int in {lo}..{hi}", field=name)
    return value


class CoordinatorContext:
    """The state of one coordinator and the effects of its call in progress. Not thread-safe,
    not re-entrant: one public call at a time (`run`)."""

    def __init__(self, config: CoordinatorConfig, rng: random.Random):
        self.config = config
        self.rng = rng
        # A group's own configs (Kafka 4's group configs, metadata/group_config.py), as the
        # shell reads them from the metadata image; none unless the shell sets this.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}
        self.partitions: dict[int, str] = {}       # partition -> LOADING / ACTIVE
        self.loads: dict[int, LoadBuffer] = {}
        self.groups: dict[str, Group] = {}
        # KIP-848 groups: each also has its `Group` in `groups` (its offsets; Empty, no classic members).
        self.consumer_groups: dict[str, consumer_group.ConsumerGroup] = {}
        self.pending: dict[int, str] = {}          # key -> group id
        self.appends: dict[int, AppendInFlight] = {}
        # TxnOffsetCommit's offsets, committed to the log in a transactional batch whose
        # marker has not come yet: producer id -> group id -> (topic, partition) -> entry
        self.txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetEntry]]] = {}
        self._next_key = 1
        self._next_append_id = 1
        self._timers: list[tuple[int, str]] = []   # heap of (deadline_ms, group id)
        self._scheduled: dict[str, int] = {}       # group id -> deadline in the heap that counts
        self._fx: Effects | None = None

    # ---- one public call ----

    def run(self, body: Callable[[], Response | Pending | None]) -> Result:
        """Run `body` as one public call: a RaftlogError it raises is its response; the effects
        it recorded become the Result. A Pending answered within the call is answered
        directly (the shell never sees a completion for a key it has not registered yet)."""
        if self._fx is not None:
            raise RuntimeError("GroupCoordinator is not re-entrant")
        fx = self._fx = Effects()
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
    def fx(self) -> Effects:
        assert self._fx is not None, "effects used outside a call"
        return self._fx

    # ---- pending requests ----

    def new_key(self, group_id: str) -> int:
        if len(self.pending) >= self.config.max_pending:
            raise CoordinatorNotAvailableError(f"{len(self.pending)} requests pending, the limit")
        key = self._next_key
        self._next_key += 1
        self.pending[key] = group_id
        return key

    def complete(self, key: int | None, response: Response) -> None:
        """Answer the pending request `key` (None or already answered: nothing)."""
        if key is not None and self.pending.pop(key, None) is not None:
            self.fx.completions.append((key, response))

    # ---- appends ----

    def check_append_room(self) -> None:
        if len(self.appends) >= self.config.max_pending_appends:
            raise CoordinatorNotAvailableError(f"{len(self.appends)} appends in flight, the limit")

    def append(
        self,
        partition: int,
        items: list[tuple[Key, Value | None]],
        on_commit: Callable[[int], None] | None = None,
        on_fail: Callable[[RaftlogError, int], None] | None = None,
        producer: tuple[int, int] | None = None,
    ) -> int:
        """Ask the shell to append `items` to `partition`; with `producer` (id, epoch) as a
        transactional batch of that producer, whose offsets wait in `txn_offsets` for its
        transaction's marker (`complete_txn`)."""
        append_id = self._next_append_id
        self._next_append_id += 1
        pid, epoch = producer if producer is not None else (-1, -1)
        self.appends[append_id] = AppendInFlight(partition, items, on_commit, on_fail, pid)
        records = tuple((encode_key(k), None if v is None else encode_value(v)) for k, v in items)
        self.fx.appends.append(Append(append_id, partition, records, pid, epoch))
        return append_id

    def append_then_answer(self, partition: int, items: list[tuple[Any, Any]], group_id: str,
                           response: Response) -> Pending:
        """Append `items` and answer a new pending request of `group_id` with `response` once
        they are committed, or with the append's error if it fails."""
        key = self.new_key(group_id)

        def committed(now: int) -> None:
            self.complete(key, response)

        def failed(err: RaftlogError, now: int) -> None:
            self.complete(key, err)

        self.append(partition, items, committed, failed)
        return Pending(key)

    def append_committed(self, append_id: int, base_offset: int, now_ms: int) -> None:
        inflight = self.appends.pop(append_id, None)
        if inflight is None:
            return  # the partition was unloaded meanwhile
        for i, (key, value) in enumerate(inflight.items):
            if inflight.producer_id >= 0:
                if isinstance(key, OffsetKey) and isinstance(value, OffsetValue):
                    held = self.txn_offsets.setdefault(inflight.producer_id, {}).setdefault(key.group, {})
                    held[(key.topic, key.partition)] = offset_entry(value, base_offset + i)
                continue
            self.apply_committed(key, value, base_offset + i, now_ms)
        if inflight.on_commit is not None:
            inflight.on_commit(now_ms)

    def append_failed(self, append_id: int, error: RaftlogError, now_ms: int) -> None:
        inflight = self.appends.pop(append_id, None)
        if inflight is not None and inflight.on_fail is not None:
            inflight.on_fail(append_error(error), now_ms)

    def apply_committed(self, key: Key, value: Value | None, log_offset: int, now_ms: int) -> None:
        """A committed record enters the cache, unless the cache holds a later one for its key."""
        if isinstance(key, ConsumerGroupKey):
            return  # a consumer group's state moved when its records were made (consumer_group_ops.py)
        group = self.groups.get(key.group)
        if isinstance(key, GroupKey):
            if group is not None:
                group.group_log_offset = max(group.group_log_offset, log_offset)
            return
        if group is None:
            if value is None:
                return
            group = self.groups[key.group] = Group(key.group, state_timestamp_ms=now_ms)
        tp = (key.topic, key.partition)
        current = group.offsets.get(tp)
        if current is not None and current.log_offset >= log_offset:
            return  # the cache already holds a later record for this key: never go back
        if value is None:
            group.offsets.pop(tp, None)
        else:
            assert isinstance(value, OffsetValue)
            group.offsets[tp] = offset_entry(value, log_offset)

    def complete_txn(self, partition: int, producer_id: int, commit: bool, now_ms: int) -> None:
        """The marker of `producer_id`'s transaction is committed in `partition`: its offsets
        for the groups of that partition take effect (COMMIT; a later record of a key still
        wins, as Kafka's olderThan) or are dropped (ABORT)."""
        groups = self.txn_offsets.get(producer_id)
        if not groups:
            return
        for gid in [g for g in groups if self.partition_for(g) == partition]:
            held = groups.pop(gid)
            if not commit:
                continue
            group = self.groups.get(gid)
            if group is None:
                group = self.groups[gid] = Group(gid, state_timestamp_ms=now_ms)
            for tp, entry in held.items():
                current = group.offsets.get(tp)
                if current is None or current.log_offset < entry.log_offset:
                    group.offsets[tp] = entry
        if not groups:
            del self.txn_offsets[producer_id]

    def txn_offset_count(self, producer_id: int) -> int:
        return sum(len(g) for g in self.txn_offsets.get(producer_id, {}).values())

    # ---- routing and groups ----

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.partitions)

    def is_active(self, partition: int) -> bool:
        return self.partitions.get(partition) == ACTIVE

    def route(self, group_id: Any) -> int:
        """The `__consumer_offsets` partition of `group_id`, if it is loaded here; raises
        INVALID_GROUP_ID, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        if type(group_id) is not str or not 1 <= len(group_id) <= MAX_GROUP_ID_CHARS:
            raise InvalidGroupIdError(f"group id must be 1..{MAX_GROUP_ID_CHARS} characters")
        partition = self.partition_for(group_id)
        status = self.partitions.get(partition)
        if status is None:
            raise NotCoordinatorError(f"not the coordinator of {group_id!r} (partition {partition})")
        if status == LOADING:
            raise CoordinatorLoadInProgressError(f"partition {partition} of __consumer_offsets is loading")
        return partition

    def check_group_room(self) -> None:
        if len(self.groups) >= self.config.max_groups:
            raise CoordinatorNotAvailableError(f"{len(self.groups)} groups on this coordinator, the limit")

    def new_group(self, group_id: str, now_ms: int) -> Group:
        self.check_group_room()
        group = Group(group_id, state_timestamp_ms=now_ms)
        self.groups[group_id] = group
        return group

    def new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    # ---- timers ----

    def touch(self, group: Group) -> None:
        """The group's timer may have moved: recompute it when the call ends."""
        self.fx.touched.add(group.group_id)

    def unschedule(self, group_id: str) -> None:
        self._scheduled.pop(group_id, None)

    def due_groups(self, now_ms: int) -> list[str]:
        """Pop the groups whose timer is at or before `now_ms`."""
        due: list[str] = []
        while self._timers and self._timers[0][0] <= now_ms:
            deadline, gid = heapq.heappop(self._timers)
            if self._scheduled.get(gid) == deadline:
                del self._scheduled[gid]
                due.append(gid)
        return due

    def next_deadline_ms(self) -> int | None:
        while self._timers:
            deadline, gid = self._timers[0]
            if self._scheduled.get(gid) == deadline:
                return deadline
            heapq.heappop(self._timers)  # stale entry: the group was rescheduled or is gone
        return None

    @staticmethod
    def heartbeat_matters(member: Member) -> bool:
        # Kafka's hasSatisfiedHeartbeat: a known member waiting in a join or a sync is alive
        # by definition; a new member waiting in its first join still has a deadline (KIP-394).
        if member.is_new:
            return True
        return not (member.awaiting_join or member.awaiting_sync)

    def _group_deadline(self, group: Group) -> int | None:
        candidates: list[int] = list(group.pending_members.values())
        if group.is_(GroupState.PREPARING_REBALANCE):
            if group.initial_delay_deadline_ms is not None:
                candidates.append(group.initial_delay_deadline_ms)
            elif group.rebalance_deadline_ms is not None:
                candidates.append(group.rebalance_deadline_ms)
        for m in group.members.values():
            if self.heartbeat_matters(m):
                candidates.append(m.heartbeat_deadline_ms)
        cg = self.consumer_groups.get(group.group_id)
        if cg is not None:
            candidates.extend(consumer_group.deadlines(cg))
        return min(candidates, default=None)

    def _reschedule(self, group_id: str) -> None:
        group = self.groups.get(group_id)
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

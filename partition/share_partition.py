"""The in-flight state of one share partition (KIP-932), as the partition leader keeps it: a
pure state machine (no I/O, no clock: `now_ms` is an argument), driven by the leader's share
shell and persisted through the share coordinator (`__share_group_state`).

A share partition is one (group, topic, partition). Its window of in-flight records runs
from the share-partition start offset (SPSO, `start_offset`) to the share-partition end offset
(SPEO, `end_offset`, exclusive: the next offset never yet acquired). Below SPSO every record is
done (acknowledged or archived); inside the window each offset has a state:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--> ACKNOWLEDGED
        ^                    |  |---REJECT--> ARCHIVED
        |   RELEASE / lock   |  `--RELEASE / lock expiry, delivery_count >= limit--> ARCHIVED
        `---- expiry --------'

(Kafka's `RecordState` values, Kafka's `AcknowledgeType` values for the acks.)

Invariants (checked by `check()`, kept by every method):
* start_offset <= end_offset; end_offset - start_offset <= max_record_locks, except after a
  restore of a bigger window (then nothing new is acquired until it shrinks).
* Every offset in [start_offset, end_offset) has a state; the record at start_offset, if the
  window is not empty, is not ACKNOWLEDGED or ARCHIVED (SPSO advances over finished records).
* An ACQUIRED record has exactly one holder and a lock expiry; no other state has either.
* A record is acquired only if it is AVAILABLE (never two holders, an acknowledged or archived
  record never again), and each acquisition adds one to its delivery count, which never
  exceeds `delivery_count_limit`.

Persistence (`snapshot()` / `restore()`): the durable state is SPSO, a state epoch and the
window's records with their state and delivery count, ACQUIRED written as AVAILABLE (a lock
does not survive the leader: after failover the record is available again, with its delivery
count kept). Ordering: the shell persists the snapshot before it answers an acknowledgement
(so an acknowledged record is never redelivered) and before it hands out acquired records
(so a delivery count is never lost and the limit holds across failovers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from raftlog.base.errors import InvalidRecordStateError, InvalidRequestError

__all__ = [
    "RecordState", "AckType", "Acquired", "Acknowledgement", "ShareSettings", "SharePartition",
    "DEFAULT_RECORD_LOCK_DURATION_MS", "DEFAULT_DELIVERY_COUNT_LIMIT", "DEFAULT_MAX_RECORD_LOCKS",
]

DEFAULT_RECORD_LOCK_DURATION_MS: Final = 30_000  # Kafka's group.share.record.lock.duration.ms
DEFAULT_DELIVERY_COUNT_LIMIT: Final = 5  # Kafka's group.share.delivery.count.limit
DEFAULT_MAX_RECORD_LOCKS: Final = 2000  # Kafka's group.share.partition.max.record.locks
MAX_ACK_RANGES: Final = 10_000  # ranges in one acknowledgement


class RecordState(IntEnum):
    """Kafka's values (they are what `__share_group_state` stores)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """Kafka's AcknowledgeType values (ShareAcknowledge's AcknowledgeTypes). GAP marks offsets
    the log does not hold (compacted away, control records): they are archived."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


_DONE: Final = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


@dataclass(frozen=True, slots=True)
class ShareSettings:
    record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS

    def __post_init__(self) -> None:
        for name in ("record_lock_duration_ms", "delivery_count_limit", "max_record_locks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of consecutive offsets acquired by one member, all with the same delivery count
    (Kafka's AcquiredRecords: first_offset, last_offset inclusive, delivery_count)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """first_offset..last_offset (inclusive), one ack type for all of them."""

    first_offset: int
    last_offset: int
    ack_type: AckType


@dataclass(slots=True)
class _Record:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_expiry_ms: int | None = None


class SharePartition:
    """One share partition's window. Not thread-safe: the leader's shell calls it from one
    task. Every method that changes durable state bumps `version` (the shell persists when it
    moved)."""

    def __init__(self, start_offset: int, settings: ShareSettings | None = None, *, state_epoch: int = 0) -> None:
        if start_offset < 0:
            raise ValueError("start_offset must be >= 0")
        self.settings = settings or ShareSettings()
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.state_epoch = state_epoch
        self.version = 0
        self._records: dict[int, _Record] = {}

    # ---- reading ----

    def state_of(self, offset: int) -> RecordState | None:
        """The state of `offset` in the window; below it ACKNOWLEDGED-or-ARCHIVED is reported
        as ARCHIVED (the difference is not kept), beyond it None."""
        if offset < self.start_offset:
            return RecordState.ARCHIVED
        r = self._records.get(offset)
        return None if r is None else r.state

    def holder(self, offset: int) -> str | None:
        r = self._records.get(offset)
        return None if r is None else r.member_id

    def delivery_count(self, offset: int) -> int:
        r = self._records.get(offset)
        return 0 if r is None else r.delivery_count

    def in_flight(self) -> list[dict[str, Any]]:
        """The window, one row per run of equal (state, delivery_count, member) (for describe)."""
        rows: list[dict[str, Any]] = []
        for off in range(self.start_offset, self.end_offset):
            r = self._records[off]
            last = rows[-1] if rows else None
            if (last is not None and last["last_offset"] == off - 1 and last["state"] == r.state.name
                    and last["delivery_count"] == r.delivery_count and last["member_id"] == r.member_id):
                last["last_offset"] = off
            else:
                rows.append({"first_offset": off, "last_offset": off, "state": r.state.name,
                             "delivery_count": r.delivery_count, "member_id": r.member_id})
        return rows

    def next_fetch_offset(self) -> int:
        """Where the shell reads from for the next acquisition: the lowest AVAILABLE offset in
        the window, else SPEO."""
        for off in range(self.start_offset, self.end_offset):
            if self._records[off].state is RecordState.AVAILABLE:
                return off
        return self.end_offset

    def acquired_count(self) -> int:
        return sum(1 for r in self._records.values() if r.state is RecordState.ACQUIRED)

    def next_lock_expiry_ms(self) -> int | None:
        """When the earliest lock runs out (the shell's timer), or None."""
        expiries = [r.lock_expiry_ms for r in self._records.values() if r.lock_expiry_ms is not None]
        return min(expiries) if expiries else None

    # ---- changing ----

    def acquire(self, member_id: str, *, high_watermark: int, max_records: int, now_ms: int) -> list[Acquired]:
        """Acquire up to `max_records` records below `high_watermark` for `member_id`, lowest
        offsets first: AVAILABLE ones in the window (redeliveries), then new ones from SPEO
        while the window holds fewer than `max_record_locks` records. The shell passes the
        end of the batches it read as `high_watermark`, so it acquires only what it sends. Expired locks are
        released first. Returns the runs acquired (possibly none); each record's delivery
        count is one more than before. Offsets the log turns out not to hold are given back
        with `acknowledge(..., GAP)` by the shell."""
        if not member_id:
            raise InvalidRequestError("a share fetch needs a member id", field="member_id")
        if max_records < 1:
            return []
        self.expire(now_ms)
        expiry = now_ms + self.settings.record_lock_duration_ms
        taken: list[int] = []
        for off in range(self.start_offset, min(self.end_offset, high_watermark)):
            if len(taken) >= max_records:
                break
            r = self._records[off]
            if r.state is RecordState.AVAILABLE:
                taken.append(off)
        while (len(taken) < max_records and self.end_offset < high_watermark
               and self.end_offset - self.start_offset < self.settings.max_record_locks):
            self._records[self.end_offset] = _Record(RecordState.AVAILABLE, 0)
            taken.append(self.end_offset)
            self.end_offset += 1
        for off in taken:
            r = self._records[off]
            r.state, r.member_id, r.lock_expiry_ms = RecordState.ACQUIRED, member_id, expiry
            r.delivery_count += 1
        if taken:
            self.version += 1
        return self._runs(taken)

    def acknowledge(self, member_id: str, acks: Sequence[Acknowledgement], *, now_ms: int) -> None:
        """Apply `acks` for records `member_id` holds, all or nothing. Expired locks are
        released first, so an ack after the lock ran out fails.

        Raises InvalidRequestError for malformed ranges (first > last, overlapping, too many),
        InvalidRecordStateError if any offset is not ACQUIRED by `member_id` (nothing applied)."""
        if len(acks) > MAX_ACK_RANGES:
            raise InvalidRequestError(f"at most {MAX_ACK_RANGES} acknowledgement ranges", field="acknowledgements")
        self.expire(now_ms)
        seen: set[int] = set()
        for a in acks:
            if a.first_offset > a.last_offset or a.first_offset < 0:
                raise InvalidRequestError(f"bad range {a.first_offset}..{a.last_offset}", field="acknowledgements")
            if a.first_offset < self.start_offset or a.last_offset >= self.end_offset:
                raise InvalidRecordStateError(f"offsets {a.first_offset}..{a.last_offset} are not all held")
            for off in range(a.first_offset, a.last_offset + 1):
                if off in seen:
                    raise InvalidRequestError(f"offset {off} acknowledged twice", field="acknowledgements")
                seen.add(off)
                r = self._records.get(off)
                if r is None or r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                    raise InvalidRecordStateError(f"offset {off} is not held by member {member_id}")
        for a in acks:
            for off in range(a.first_offset, a.last_offset + 1):
                r = self._records[off]
                if a.ack_type is AckType.ACCEPT:
                    self._finish(r, RecordState.ACKNOWLEDGED)
                elif a.ack_type is AckType.RELEASE:
                    self._release(r)
                else:  # REJECT, GAP
                    self._finish(r, RecordState.ARCHIVED)
        if acks:
            self.version += 1
            self._advance()

    def expire(self, now_ms: int) -> int:
        """Release every record whose lock ran out at `now_ms`; returns how many."""
        n = 0
        for r in self._records.values():
            if r.lock_expiry_ms is not None and r.lock_expiry_ms <= now_ms:
                self._release(r)
                n += 1
        if n:
            self.version += 1
            self._advance()
        return n

    def release_member(self, member_id: str) -> int:
        """A member left or was fenced: release what it holds (as RELEASE does); returns how many."""
        n = 0
        for r in self._records.values():
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                n += 1
        if n:
            self.version += 1
            self._advance()
        return n

    def move_start(self, offset: int) -> None:
        """Move SPSO forward to `offset` (the log's start moved past it, or an operator reset
        the group's offset forward): records below are archived, whoever held them."""
        if offset <= self.start_offset:
            return
        for off in range(self.start_offset, min(offset, self.end_offset)):
            del self._records[off]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.version += 1
        self._advance()

    def reset(self, offset: int) -> None:
        """AlterShareGroupOffsets: start again at `offset` with an empty window (backwards too).
        Only while no record is acquired (the group has no members).

        Raises InvalidRecordStateError while records are held."""
        if offset < 0:
            raise InvalidRequestError("offset must be >= 0", field="offset")
        if self.acquired_count():
            raise InvalidRecordStateError("records are acquired: the share group is not empty")
        self._records.clear()
        self.start_offset = self.end_offset = offset
        self.state_epoch += 1
        self.version += 1

    # ---- persistence ----

    def snapshot(self) -> dict[str, Any]:
        """The durable state (CBOR-plain): {state_epoch, start_offset, state_batches:
        [{first_offset, last_offset, delivery_state, delivery_count}]}, runs of equal records,
        ACQUIRED written as AVAILABLE (Kafka's ShareSnapshot value)."""
        batches: list[dict[str, int]] = []
        for off in range(self.start_offset, self.end_offset):
            r = self._records[off]
            state = RecordState.AVAILABLE if r.state is RecordState.ACQUIRED else r.state
            last = batches[-1] if batches else None
            if last is not None and last["delivery_state"] == state and last["delivery_count"] == r.delivery_count:
                last["last_offset"] = off
            else:
                batches.append({"first_offset": off, "last_offset": off, "delivery_state": int(state),
                                "delivery_count": r.delivery_count})
        return {"state_epoch": self.state_epoch, "start_offset": self.start_offset, "state_batches": batches}

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], settings: ShareSettings | None = None) -> SharePartition:
        """A share partition from `snapshot()`'s value (a new leader's start). A record that
        has had its last delivery comes back ARCHIVED (no lock can expire any more).

        Raises ValueError for a snapshot that breaks the invariants."""
        sp = cls(int(snapshot["start_offset"]), settings, state_epoch=int(snapshot.get("state_epoch", 0)))
        expect = sp.start_offset
        for b in snapshot.get("state_batches") or ():
            first, last = int(b["first_offset"]), int(b["last_offset"])
            state, count = RecordState(int(b["delivery_state"])), int(b["delivery_count"])
            if first != expect or last < first or state is RecordState.ACQUIRED or count < 0:
                raise ValueError(f"bad share state batch {dict(b)!r}")
            if state is RecordState.AVAILABLE and count >= sp.settings.delivery_count_limit:
                state = RecordState.ARCHIVED
            for off in range(first, last + 1):
                sp._records[off] = _Record(state, count)
            expect = last + 1
        sp.end_offset = expect
        sp._advance()
        return sp

    def check(self) -> None:
        """Assert the invariants (tests; cheap enough for a debug build)."""
        assert self.start_offset <= self.end_offset
        assert set(self._records) == set(range(self.start_offset, self.end_offset))
        if self._records:
            assert self._records[self.start_offset].state not in _DONE
        for r in self._records.values():
            held = r.state is RecordState.ACQUIRED
            assert held == (r.member_id is not None) == (r.lock_expiry_ms is not None)
            assert 0 <= r.delivery_count <= self.settings.delivery_count_limit
            assert r.state is not RecordState.AVAILABLE or r.delivery_count < self.settings.delivery_count_limit

    # ---- inside ----

    def _release(self, r: _Record) -> None:
        if r.delivery_count >= self.settings.delivery_count_limit:
            self._finish(r, RecordState.ARCHIVED)
        else:
            r.state, r.member_id, r.lock_expiry_ms = RecordState.AVAILABLE, None, None

    @staticmethod
    def _finish(r: _Record, state: RecordState) -> None:
        r.state, r.member_id, r.lock_expiry_ms = state, None, None

    def _advance(self) -> None:
        while self.start_offset < self.end_offset and self._records[self.start_offset].state in _DONE:
            del self._records[self.start_offset]
            self.start_offset += 1

    def _runs(self, offsets: Iterable[int]) -> list[Acquired]:
        runs: list[Acquired] = []
        for off in offsets:
            count = self._records[off].delivery_count
            last = runs[-1] if runs else None
            if last is not None and last.last_offset == off - 1 and last.delivery_count == count:
                runs[-1] = Acquired(last.first_offset, off, count)
            else:
                runs.append(Acquired(off, off, count))
        return runs

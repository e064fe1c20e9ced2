"""Sans-I/O consumer core (`ConsumerCore`): assignment, positions, offset resets
(list_offsets), fetch scheduling, and fetched batches turned into `ConsumerRecord`s.
No groups here (group.py and group_session.py add them); no I/O, no clock, no threads.
`ConsumerMethods` holds the Consumer methods both shells share that do no I/O.

Invariants:
* `fetch_position` is the next offset to fetch; buffered records not yet handed out keep
  `position()` at the first of them (Kafka's meaning of position).
* Records below the fetch position are dropped (a fetch may begin mid-batch), control batches
  are skipped but advance the position, and an answer to a fetch sent before a seek is
  discarded (each partition's `version` is bumped by a seek).
* Prefetch is bounded: no fetch is sent while `max_poll_records` records wait to be taken.
"""

from __future__ import annotations

import bisect
import random
from typing import Any, Iterable, NamedTuple

from partition.batch import CONTROL_ABORT, Header, control_type, decode_batches_into, iter_headers
from raftlog.base.errors import (
    CorruptMessageError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
    error_from_wire,
)
from raftlog.client.core import Call, ClientCore, Pending
from raftlog.client.request import (
    EARLIEST,
    LATEST,
    fetch_request,
    list_offsets_request,
    parse_list_offsets,
)

__all__ = ["ConsumerRecord", "ConsumerCore", "ConsumerMethods", "ISOLATION_LEVELS", "aborted_batches",
           "append_fetched", "drop_aborted", "intact_prefix_end"]

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


class _Assigned:
    __slots__ = ("topic", "partition", "fetch_position", "reset", "version", "buf", "buf_i",
                 "high_watermark", "log_start_offset", "reset_in_flight", "reset_retry_at_ms",
                 "reset_attempts", "fetch_retry_at_ms", "fetch_attempts")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.fetch_position: int | None = None  # next offset to fetch
        self.reset: int | None = None  # pending list_offsets spec (-2, -1, or a timestamp)
        self.version = 0  # bumped by seek: answers to older fetches are dropped
        self.buf: list[ConsumerRecord] = []
        self.buf_i = 0
        self.high_watermark = -1
        self.log_start_offset = -1
        self.reset_in_flight = False
        self.reset_retry_at_ms = 0
        self.reset_attempts = 0
        # After a partition error (storage, corrupt batch): no fetch of it before this.
        self.fetch_retry_at_ms = 0
        self.fetch_attempts = 0

    @property
    def position(self) -> int | None:
        """Offset of the next record poll() returns."""
        if self.buf_i < len(self.buf):
            return self.buf[self.buf_i].offset
        return self.fetch_position

    def clear(self) -> None:
        self.buf = []
        self.buf_i = 0
        self.version += 1


class ConsumerCore(ClientCore):
    """Assignment, positions, fetch scheduling, record trimming. No groups (assign only).

    Positions: `fetch_position` is the next offset to fetch; buffered records not yet
    returned keep `position()` at the first of them (Kafka's meaning of position).
    """

    def __init__(
        self,
        bootstrap: Iterable[str] | str,
        *,
        rng: random.Random,
        auto_offset_reset: str = "latest",
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        isolation_level: str = "read_uncommitted",
        **kw: Any,
    ):
        super().__init__(bootstrap, rng=rng, **kw)
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {isolation_level!r}")
        # read_committed: fetches stop at the last stable offset and aborted records are dropped.
        self.read_committed = isolation_level == "read_committed"
        self.auto_offset_reset = auto_offset_reset
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self._assigned: dict[tuple[str, int], _Assigned] = {}
        self._fetching: set[int] = set()  # brokers with a fetch in flight
        self._errors: list[RaftlogError] = []
        self._rr_next = 0
        self.fetch_wait_ms = max_wait_ms  # the shell lowers it for short polls

    # ---- assignment and positions ----

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        new: dict[tuple[str, int], _Assigned] = {}
        for topic, partition in partitions:
            key = (topic, int(partition))
            new[key] = self._assigned.get(key) or _Assigned(topic, int(partition))
            self.want_topic(topic)
        self._assigned = new

    def assignment(self) -> list[tuple[str, int]]:
        return list(self._assigned)

    def _state(self, topic: str, partition: int) -> _Assigned:
        s = self._assigned.get((topic, partition))
        if s is None:
            raise ValueError(f"{topic}-{partition} is not assigned")
        return s

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        s = self._state(topic, partition)
        s.clear()
        s.fetch_position = offset
        s.reset = None

    def seek_to(self, partitions: Iterable[tuple[str, int]] | None, spec: int) -> None:
        """Reset to EARLIEST (-2), LATEST (-1) or a timestamp, resolved by list_offsets."""
        for key in (self._assigned if partitions is None else partitions):
            s = self._state(*key)
            s.clear()
            s.fetch_position = None
            s.reset = spec
            s.reset_in_flight = False
            s.reset_retry_at_ms = 0

    def position(self, topic: str, partition: int) -> int | None:
        """The next offset poll() returns for the partition; None until it is resolved
        (the shell polls until it is)."""
        s = self._state(topic, partition)
        if s.position is None and s.reset is None:
            s.reset = self._default_reset()
        return s.position

    def resolve_position(self, topic: str, partition: int, now_ms: int, deadline_ms: int) -> int | None:
        """`position`, for a shell waiting for it: None while a reset is still resolving;
        raises a pending fetch/reset error, or RequestTimedOutError once `deadline_ms` passed."""
        pos = self.position(topic, partition)
        if pos is not None:
            return pos
        self.raise_pending_error()
        if now_ms >= deadline_ms:
            raise RequestTimedOutError(f"position of {topic}-{partition} not resolved in time")
        return None

    def known_positions(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """{partition: position} of those `partitions` assigned here with a known position
        (what a commit of "where we are" sends); never starts a reset."""
        out = {}
        for tp in partitions:
            s = self._assigned.get(tp)
            if s is not None and s.position is not None:
                out[tp] = s.position
        return out

    def high_watermark(self, topic: str, partition: int) -> int:
        return self._state(topic, partition).high_watermark

    def _default_reset(self) -> int:
        if self.auto_offset_reset == "earliest":
            return EARLIEST
        if self.auto_offset_reset == "latest":
            return LATEST
        raise OffsetOutOfRangeError("no position and auto_offset_reset='none'")

    # ---- offsets for times (list_offsets calls the core routes and retries) ----

    def submit_offsets_for_times(self, timestamps: dict[tuple[str, int], int], now_ms: int,
                                 timeout_ms: int | None = None) -> dict[tuple[str, int], Call]:
        """One routed list_offsets call per partition; the shell steps until all are done,
        then hands them to `offsets_for_times_result`."""
        return {
            tp: self.submit(list_offsets_request([(tp[0], tp[1], ts)]), now_ms, route=tuple(tp),
                            timeout_ms=timeout_ms)
            for tp, ts in timestamps.items()
        }

    @staticmethod
    def offsets_for_times_result(calls: dict[tuple[str, int], Call]) -> dict[tuple[str, int], tuple[int, int] | None]:
        """{(topic, partition): (offset, timestamp)} of the first record at or after each
        timestamp (None where there is none); raises the first failed call's error."""
        out: dict[tuple[str, int], tuple[int, int] | None] = {}
        for tp, c in calls.items():
            off, ts = parse_list_offsets(c.value()).get(tuple(tp), (-1, -1))
            out[tp] = (off, ts) if off >= 0 else None
        return out

    # ---- records ----

    def begin_poll(self, timeout_ms: int, now_ms: int) -> int:
        """A shell's poll starts: a fetch sent now long-polls no longer than the poll may
        wait. Returns the poll's deadline."""
        self.fetch_wait_ms = max(0, min(self.max_wait_ms, timeout_ms))
        return now_ms + timeout_ms

    def take_records(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """Buffered records, up to max_records (default max_poll_records), fair across
        partitions; raises the first pending fetch error instead if there is one."""
        if self._errors:
            raise self._errors.pop(0)
        limit = max_records or self.max_poll_records
        out: list[ConsumerRecord] = []
        states = list(self._assigned.values())
        n = len(states)
        for i in range(n):
            s = states[(self._rr_next + i) % n]
            if s.buf_i >= len(s.buf):
                continue
            take = min(limit - len(out), len(s.buf) - s.buf_i)
            out.extend(s.buf[s.buf_i:s.buf_i + take])
            s.buf_i += take
            if s.buf_i >= len(s.buf):
                s.buf, s.buf_i = [], 0
            if len(out) >= limit:
                self._rr_next = (self._rr_next + i + 1) % max(n, 1)
                break
        return out

    def _on_auth_failed(self, error: RaftlogError, now_ms: int) -> None:
        if not any(e is error for e in self._errors):
            self._errors.append(error)  # poll() raises it

    def raise_pending_error(self) -> None:
        """Raise the oldest fetch/reset error not yet handed to the user, if any."""
        if self._errors:
            raise self._errors.pop(0)

    def buffered_count(self) -> int:
        return sum(len(s.buf) - s.buf_i for s in self._assigned.values())

    # ---- poll ----

    def _poll_more(self, now_ms: int, out: list) -> None:
        by_broker: dict[int, list[_Assigned]] = {}
        resets: dict[int, list[_Assigned]] = {}
        for s in self._assigned.values():
            if s.fetch_position is None and s.reset is None:
                try:
                    s.reset = self._default_reset()
                except OffsetOutOfRangeError as exc:
                    self._errors.append(exc)
                    continue
            leader = self.metadata.leader(s.topic, s.partition)
            if leader is None or not self.broker_up(leader, now_ms):
                self._metadata_due = True
                continue
            if s.reset is not None:
                if not s.reset_in_flight and now_ms >= s.reset_retry_at_ms:
                    resets.setdefault(leader, []).append(s)
            elif (leader not in self._fetching and s.buf_i >= len(s.buf)
                  and now_ms >= s.fetch_retry_at_ms):
                by_broker.setdefault(leader, []).append(s)
        for broker, states in resets.items():
            for s in states:
                s.reset_in_flight = True
            req = list_offsets_request((s.topic, s.partition, s.reset) for s in states)
            ctx = [(s, s.version) for s in states]
            out.append(self._send(broker, req, "reset", now_ms, ctx, self.request_timeout_ms))
        if self.buffered_count() >= self.max_poll_records:
            return  # bounded prefetch: hand out what we have first
        for broker, states in by_broker.items():
            self._fetching.add(broker)
            parts = [(s.topic, s.partition, s.fetch_position, self.max_partition_fetch_bytes)
                     for s in states]
            req = fetch_request(self.fetch_wait_ms, self.min_bytes, self.fetch_max_bytes, parts)
            if self.read_committed:
                req["isolation_level"] = 1
            ctx = [(s, s.version, s.fetch_position) for s in states]
            out.append(self._send(broker, req, "fetch", now_ms, ctx,
                                  self.request_timeout_ms + self.fetch_wait_ms))

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        ts = [s.reset_retry_at_ms for s in self._assigned.values()
              if s.reset is not None and not s.reset_in_flight]
        ts += [s.fetch_retry_at_ms for s in self._assigned.values() if s.fetch_retry_at_ms > now_ms]
        return min(ts) if ts else None

    def _on_reset_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        ctx = p.ctx
        err = msg.get("error")
        results: dict[tuple[str, int], dict] = {}
        if err is None:
            for r in msg.get("partitions") or ():
                if isinstance(r, dict):
                    results[(r.get("topic"), r.get("partition"))] = r
        for s, version in ctx:
            s.reset_in_flight = False
            if s.version != version or s.reset is None:
                continue
            r = results.get((s.topic, s.partition))
            if err is not None or r is None or r.get("error") is not None:
                exc = error_from_wire(err if err is not None else (r or {}).get("error", {"code": "UNKNOWN_SERVER_ERROR"}))
                self._note_routing_error(exc, (s.topic, s.partition))
                s.reset_attempts += 1
                s.reset_retry_at_ms = now_ms + self.retry.backoff(s.reset_attempts)
                if not getattr(exc, "retriable", False):
                    self._errors.append(exc)
                continue
            off = r.get("offset")
            if not isinstance(off, int) or off < 0:
                # No record at or after that timestamp: the end of the log (Kafka's rule).
                s.reset = LATEST
                continue
            s.fetch_position = off
            s.reset = None
            s.reset_attempts = 0

    def _on_reset_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        for s, _version in p.ctx:
            s.reset_in_flight = False
            s.reset_attempts += 1
            s.reset_retry_at_ms = now_ms + self.retry.backoff(s.reset_attempts)

    def _on_fetch_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        self._fetching.discard(p.broker_id)
        err = msg.get("error")
        if err is not None:
            exc = error_from_wire(err)
            for s, _v, _o in p.ctx:
                self._note_routing_error(exc, (s.topic, s.partition))
            if not getattr(exc, "retriable", False):
                self._errors.append(exc)
            return
        results: dict[tuple[str, int], dict] = {}
        for r in msg.get("partitions") or ():
            if isinstance(r, dict):
                results[(r.get("topic"), r.get("partition"))] = r
        for s, version, offset in p.ctx:
            r = results.get((s.topic, s.partition))
            if r is None or s.version != version or s.fetch_position != offset:
                continue  # seeked since, or reassigned: this answer is stale
            if (s.topic, s.partition) not in self._assigned:
                continue
            if r.get("error") is not None:
                self._fetch_partition_error(s, error_from_wire(r["error"]), now_ms)
                continue
            hw = r.get("high_watermark")
            if isinstance(hw, int):
                s.high_watermark = hw
            lso = r.get("log_start_offset")
            if isinstance(lso, int):
                s.log_start_offset = lso
            records = r.get("records")
            if records:
                got: list[ConsumerRecord] = []
                try:
                    s.fetch_position = append_fetched(s.topic, s.partition, records, offset, got)
                except RaftlogError as exc:
                    # Deliver the intact batches before the bad one (once), stop at it, say
                    # where, and fetch from there again later, from whoever then leads: the
                    # bytes may have been damaged on the way or on that replica's disk.
                    good_end = intact_prefix_end(records, offset)
                    s.buf.extend(rec for rec in got if rec.offset < good_end)
                    s.fetch_position = good_end
                    self._fetch_partition_error(s, CorruptMessageError(
                        f"{s.topic}-{s.partition}: corrupt batch at offset {good_end}: {exc}",
                        topic=s.topic, partition=s.partition, offset=good_end), now_ms)
                else:
                    if self.read_committed and r.get("aborted_transactions"):
                        got = drop_aborted(records, r["aborted_transactions"], got)
                    s.buf.extend(got)
                    s.fetch_attempts = 0

    def _fetch_partition_error(self, s: _Assigned, exc: RaftlogError, now_ms: int) -> None:
        if isinstance(exc, OffsetOutOfRangeError):
            if self.auto_offset_reset == "none":
                self._errors.append(exc)
            else:
                s.clear()
                s.fetch_position = None
                s.reset = self._default_reset()
            return
        self._note_routing_error(exc, (s.topic, s.partition))
        if not (isinstance(exc, NotLeaderError) and exc.leader_id is not None):
            # Back off this partition before the next fetch of it (the others go on); a
            # NOT_LEADER naming the leader is followed at once.
            s.fetch_attempts += 1
            s.fetch_retry_at_ms = now_ms + self.retry.backoff(s.fetch_attempts)
        if isinstance(exc, CorruptMessageError):
            # Raised once per bad answer, with partition and offset; nothing before it is
            # delivered twice and nothing after it is skipped (Kafka's CorruptRecordException).
            if "offset" not in exc.details:
                exc = CorruptMessageError(f"{s.topic}-{s.partition} at offset {s.fetch_position}:"
                                          f" {exc.message}", topic=s.topic, partition=s.partition,
                                          offset=s.fetch_position)
            self._errors.append(exc)
        elif not exc.retriable:
            self._errors.append(exc)

    def _on_fetch_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        self._fetching.discard(p.broker_id)

    RESPONSE_HANDLERS = {
        **ClientCore.RESPONSE_HANDLERS,
        "reset": _on_reset_response,
        "fetch": _on_fetch_response,
    }
    FAILURE_HANDLERS = {
        **ClientCore.FAILURE_HANDLERS,
        "reset": _on_reset_failure,
        "fetch": _on_fetch_failure,
    }



def append_fetched(topic: str, partition: int, records: bytes, fetch_offset: int,
                   out: list[ConsumerRecord]) -> int:
    """Decode a fetch answer's batches into `out`, trimming records below `fetch_offset`
    and skipping control batches; returns the next fetch position.

    The position moves to the end of every batch seen (control batches and compaction gaps
    included), so the next fetch never asks for the same batch again. Raises
    CorruptRecordError (a RaftlogError) on bad bytes, after appending the good batches.
    """
    # One tight loop per batch straight into ConsumerRecord tuples: no Record objects, no
    # NamedTuple __new__ frame (partition/batch.py `decode_batches_into`).
    return decode_batches_into(records, out, topic, partition, ConsumerRecord, fetch_offset)


def aborted_batches(records: bytes, aborted: list) -> list[tuple[int, Header]]:
    """(position, header) of the data batches of `records` that belong to aborted
    transactions, as Kafka's consumer finds them: `aborted` is the fetch answer's
    [[producer_id, first_offset]]; a producer's transactional batches count as aborted from
    its first_offset up to its ABORT marker in `records` (whole batches)."""
    pending = sorted((first, pid) for pid, first in aborted if isinstance(pid, int) and isinstance(first, int))
    active: set[int] = set()
    dropped: list[tuple[int, Header]] = []
    i = 0
    for pos, h in iter_headers(records, verify=False):
        while i < len(pending) and pending[i][0] <= h.last_offset:
            active.add(pending[i][1])
            i += 1
        if not h.is_transactional or h.producer_id not in active:
            continue
        if h.is_control:
            if control_type(records, pos) == CONTROL_ABORT:
                active.discard(h.producer_id)
        else:
            dropped.append((pos, h))
    return dropped


def drop_aborted(records: bytes, aborted: list, got: list[ConsumerRecord]) -> list[ConsumerRecord]:
    """`got` (decoded from `records`, CRCs checked) without the records of aborted
    transactions (`aborted_batches`)."""
    dropped = [(h.base_offset, h.last_offset) for _pos, h in aborted_batches(records, aborted)]
    if not dropped:
        return got
    starts = [lo for lo, _ in dropped]

    def kept(offset: int) -> bool:
        j = bisect.bisect_right(starts, offset) - 1
        return j < 0 or offset > dropped[j][1]

    return [rec for rec in got if kept(rec.offset)]


def intact_prefix_end(records: bytes, fetch_offset: int) -> int:
    """The fetch position after the batches of `records` that are whole and pass their CRC
    (`fetch_offset` if the first one does not): where to fetch again after a corrupt batch."""
    end = fetch_offset
    try:
        for _, h in iter_headers(records, verify=True):
            end = max(end, h.next_offset)
    except RaftlogError:
        return end  # the first bad batch ends the prefix
    return end


class ConsumerMethods:
    """The Consumer methods that do no I/O, written once for both shells' Consumers (which
    set `_core`, a ConsumerCore, and `_group`, their GroupSession or None without a
    group_id). Partitions are (topic, partition) tuples, as everywhere in the client."""

    _core: ConsumerCore
    _group: Any  # group_session.GroupSession | None

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read these partitions (no group); each starts by auto_offset_reset unless `seek`ed."""
        self._core.assign(partitions)

    def assignment(self) -> list[tuple[str, int]]:
        return self._core.assignment()

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._core.seek(partition[0], partition[1], offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Every given partition (default: all assigned) restarts at its log start offset."""
        self._core.seek_to(partitions or None, EARLIEST)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Every given partition (default: all assigned) restarts at its log end offset."""
        self._core.seek_to(partitions or None, LATEST)

    def high_watermark(self, partition: tuple[str, int]) -> int:
        """The last high watermark a fetch reported (-1 before any)."""
        return self._core.high_watermark(*partition)

    # ---- consumer groups (the group half lives in group_session.py and its shells) ----

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  on_revoked=None, on_assigned=None) -> None:
        """Join the consumer's group (group_id=...) for `topics` or a regex `pattern`;
        partitions come and go at rebalances inside poll(), announced by
        on_revoked(partitions) / on_assigned(partitions) (the trio shell also takes async
        functions)."""
        if self._group is None:
            raise ValueError("subscribe needs a group_id (Consumer(..., group_id=...))")
        self._group.subscribe(topics, pattern, on_revoked, on_assigned)

    def group_metadata(self):
        """This member's group.GroupMetadata (group id, generation, member id, instance id and
        assignment) as of the last completed rebalance; None without a group_id."""
        return self._group.membership.metadata() if self._group is not None else None

    def subscription(self) -> tuple[str, ...]:
        """The topics subscribed to (a pattern's matches once resolved); () without a group."""
        return self._group.subscription() if self._group is not None else ()

    def _require_group(self):
        if self._group is None:
            raise ValueError("no group_id: this consumer has no group to commit to")
        return self._group

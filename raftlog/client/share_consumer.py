"""A share-group consumer (KIP-932, "queues"): many consumers read the same partitions, each
record handed to one of them at a time under a lock, and acknowledged (ACCEPT), released for
redelivery (RELEASE) or rejected (REJECT).

    with ShareConsumer("127.0.0.1:9093", "jobs") as c:          # implicit acknowledgement
        c.subscribe(["orders"])
        for r in c.poll(timeout_ms=1000):   # the previous poll's records are accepted now
            handle(r)                       # r.delivery_count: 1 on the first delivery

    c = ShareConsumer(..., acknowledgement_mode="explicit")
    for r in c.poll(): c.acknowledge(r, "accept" | "release" | "reject")
    c.commit_sync()                         # send the acknowledgements now (else: with the next poll)

The native ops (groupcoord/share_service.py): `share_group_heartbeat` to the group's
coordinator (the leader of its `__consumer_offsets` partition), `share_fetch` (carrying the
pending acknowledgements) and `share_acknowledge` to each partition's leader.

`ShareAcks` is the pure part: which records of which poll are held, which acknowledgements
are pending, per partition as offset ranges. The shell is blocking and runs on the caller's
thread (heartbeats happen inside `poll`: poll at least every heartbeat interval, and well
within the record lock duration, 30 s by default).

Explicit mode: a record not acknowledged by the next `poll` is an error (Kafka's
IllegalStateException); `close` releases what was not acknowledged. Implicit mode: `poll`
and `close` accept everything the previous poll returned.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

from partition.batch import decode_batches
from raftlog.base.errors import (
    FencedMemberEpochError,
    InvalidRequestError,
    RaftlogError,
    UnknownMemberIdError,
    error_from_wire,
)
from raftlog.base.topics import OFFSETS_TOPIC, partition_for_group
from raftlog.client.blocking import Admin
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.security import SecurityOption

__all__ = ["ShareConsumer", "ShareRecord", "ShareAcks", "ACK_TYPES"]

ACK_TYPES: Final = {"accept": 1, "release": 2, "reject": 3}
MAX_POLL_RECORDS: Final = 500
MAX_KEPT_ERRORS: Final = 100


class ShareRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    delivery_count: int = 1


class ShareAcks:
    """Held records and pending acknowledgements, per (topic, partition). Pure."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], set[int]] = {}
        self.pending: dict[tuple[str, int], dict[int, int]] = {}

    def hold(self, tp: tuple[str, int], offset: int) -> None:
        self.held.setdefault(tp, set()).add(offset)

    def ack(self, tp: tuple[str, int], offset: int, ack_type: int) -> None:
        """Raises InvalidRequestError for a record this consumer does not hold."""
        if offset not in self.held.get(tp, ()):
            raise InvalidRequestError(f"{tp[0]}-{tp[1]}@{offset} is not held by this consumer", field="offset")
        self.held[tp].discard(offset)
        self.pending.setdefault(tp, {})[offset] = ack_type

    def ack_all(self, ack_type: int) -> None:
        for tp, offsets in list(self.held.items()):
            for off in sorted(offsets):
                self.ack(tp, off, ack_type)

    def unacknowledged(self) -> int:
        return sum(len(s) for s in self.held.values())

    def take(self, tp: tuple[str, int]) -> list[list[int]]:
        """The pending acknowledgements of `tp` as [[first, last, type]] runs; cleared."""
        runs: list[list[int]] = []
        for off, t in sorted(self.pending.pop(tp, {}).items()):
            if runs and runs[-1][1] == off - 1 and runs[-1][2] == t:
                runs[-1][1] = off
            else:
                runs.append([off, off, t])
        return runs

    def forget(self, tp: tuple[str, int]) -> None:
        """The partition was unassigned or its locks are gone: nothing of it is held."""
        self.held.pop(tp, None)
        self.pending.pop(tp, None)


class ShareConsumer:
    """See the module docstring. Not thread-safe."""

    def __init__(self, bootstrap: str | Iterable[str], group_id: str, *, acknowledgement_mode: str = "implicit",
                 max_poll_records: int = MAX_POLL_RECORDS, auto_offset_reset: str = "latest", client_id: str = "",
                 max_partition_fetch_bytes: int = 1 << 20, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = SYSTEM_CLOCK, security: SecurityOption = None):
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("acknowledgement_mode is implicit or explicit")
        if auto_offset_reset not in ("latest", "earliest"):
            raise ValueError("auto_offset_reset is latest or earliest")
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.max_poll_records = max_poll_records
        self.auto_offset_reset = auto_offset_reset
        self.client_id = client_id
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self._clock = clock
        self._admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, rng=rng, clock=clock,
                            security=security)
        self._coordinator = (OFFSETS_TOPIC, partition_for_group(group_id))
        self._topics: list[str] = []
        self.member_id = ""
        self.member_epoch = 0
        self._heartbeat_due_ms = 0
        self._interval_ms = 5000
        self.assignment: list[tuple[str, int]] = []
        self._acks = ShareAcks()
        self._next = 0  # round-robin start over the assignment
        self._closed = False
        # Acknowledgements a leader refused (a lock ran out first): the records come back to
        # some member; (partition, error), the latest MAX_KEPT_ERRORS.
        self.acknowledge_errors: list[tuple[tuple[str, int], RaftlogError]] = []

    def subscribe(self, topics: Sequence[str]) -> None:
        self._topics = sorted(set(topics))
        self._heartbeat_due_ms = 0

    # ---- acknowledgements ----

    def acknowledge(self, record: ShareRecord, ack_type: str = "accept") -> None:
        """Mark `record` accepted, released or rejected; sent with the next poll or commit."""
        if ack_type not in ACK_TYPES:
            raise ValueError(f"ack_type is one of {sorted(ACK_TYPES)}")
        self._acks.ack((record.topic, record.partition), record.offset, ACK_TYPES[ack_type])

    def commit_sync(self) -> dict[tuple[str, int], RaftlogError | None]:
        """Send every pending acknowledgement now; per partition None or its error."""
        out: dict[tuple[str, int], RaftlogError | None] = {}
        for tp in sorted(self._acks.pending):
            runs = self._acks.take(tp)
            if not runs:
                continue
            try:
                self._admin.request({"op": "share_acknowledge", "group_id": self.group_id,
                                     "member_id": self.member_id, "topic": tp[0], "partition": tp[1],
                                     "acknowledgements": runs}, route=tp)
                out[tp] = None
            except RaftlogError as exc:
                out[tp] = exc
        return out

    # ---- poll ----

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ShareRecord]:
        """Heartbeat when due, then fetch from the assigned partitions (with the pending
        acknowledgements) until records come or `timeout_ms` passes."""
        if self._closed:
            raise RuntimeError("this ShareConsumer is closed")
        if self.explicit and self._acks.unacknowledged():
            raise RuntimeError(f"{self._acks.unacknowledged()} records of the last poll are not acknowledged")
        self._acks.ack_all(ACK_TYPES["accept"])  # implicit mode (explicit: nothing is left held)
        limit = min(max_records or self.max_poll_records, self.max_poll_records)
        deadline = self._clock.monotonic_ms() + timeout_ms
        while True:
            self._heartbeat_if_due()
            got = self._fetch_round(limit)
            if got or self._clock.monotonic_ms() >= deadline:
                return got
            # Nothing yet: wait a little before asking again (share fetches do not long-poll yet).
            time.sleep(min(100, max(1, deadline - self._clock.monotonic_ms())) / 1000)

    def _heartbeat_if_due(self, leave: bool = False) -> None:
        now = self._clock.monotonic_ms()
        if not leave and (now < self._heartbeat_due_ms or not self._topics):
            return
        request: dict[str, Any] = {"op": "share_group_heartbeat", "group_id": self.group_id,
                                   "member_id": self.member_id, "member_epoch": -1 if leave else self.member_epoch,
                                   "client_id": self.client_id}
        if self.member_epoch == 0 and not leave:
            request["subscribed_topic_names"] = self._topics
        try:
            answer = self._admin.request(request, route=self._coordinator)
        except (UnknownMemberIdError, FencedMemberEpochError):
            if leave:
                return
            self.member_epoch, self.assignment = 0, []  # rejoin at once
            self._heartbeat_due_ms = 0
            return self._heartbeat_if_due()
        if leave:
            return
        self.member_id, self.member_epoch = answer["member_id"], answer["member_epoch"]
        self._interval_ms = answer.get("heartbeat_interval_ms") or self._interval_ms
        self._heartbeat_due_ms = now + self._interval_ms
        if answer.get("assignment") is not None:
            new = sorted((a["topic"], p) for a in answer["assignment"] for p in a["partitions"])
            for tp in set(self.assignment) - set(new):
                self._acks.forget(tp)
            self.assignment = new

    def _fetch_round(self, limit: int) -> list[ShareRecord]:
        if not self.assignment:
            return []
        n = len(self.assignment)
        order = [self.assignment[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        per = max(1, -(-limit // n))
        requests = [({"op": "share_fetch", "group_id": self.group_id, "member_id": self.member_id,
                      "topic": tp[0], "partition": tp[1], "max_records": per,
                      "max_bytes": self.max_partition_fetch_bytes, "auto_offset_reset": self.auto_offset_reset,
                      "acknowledgements": self._acks.take(tp)}, tp) for tp in order]
        out: list[ShareRecord] = []
        for (req, tp) in requests:  # one at a time: a failed partition must not lose the others' records
            try:
                answer = self._admin.request(req, route=tp)
            except (UnknownMemberIdError, FencedMemberEpochError):
                self.member_epoch, self._heartbeat_due_ms = 0, 0
                self._acks.forget(tp)
                continue
            except RaftlogError:
                self._acks.forget(tp)  # acks not applied: the records come back after their locks
                continue
            if answer.get("acknowledge_error") is not None:
                self.acknowledge_errors.append((tp, error_from_wire(answer["acknowledge_error"])))
                del self.acknowledge_errors[:-MAX_KEPT_ERRORS]
            out.extend(self._records(tp, answer))
        return out

    def _records(self, tp: tuple[str, int], answer: dict) -> list[ShareRecord]:
        counts: dict[int, int] = {}
        for first, last, count in answer.get("acquired") or ():
            for off in range(first, last + 1):
                counts[off] = count
        out = []
        for h, recs in decode_batches(answer.get("records") or b""):
            if h.is_control:
                continue
            for r in recs:
                if r.offset in counts:
                    out.append(ShareRecord(tp[0], tp[1], r.offset, r.timestamp, r.key, r.value, r.headers,
                                           counts.pop(r.offset)))
                    self._acks.hold(tp, r.offset)
        # Acquired offsets the batches do not hold (compacted away): give them back as GAP.
        for off in sorted(counts):
            self._acks.pending.setdefault(tp, {})[off] = 0
        return out

    def close(self) -> None:
        """Send the acknowledgements (implicit: accept the last poll; explicit: release what
        was not acknowledged), leave the group, close the connections."""
        if self._closed:
            return
        self._closed = True
        try:
            self._acks.ack_all(ACK_TYPES["release" if self.explicit else "accept"])
            if self.member_id:
                self.commit_sync()
                self._heartbeat_if_due(leave=True)
        except RaftlogError:
            pass  # the locks run out on the leaders; the coordinator's session expires the member
        finally:
            self._admin.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

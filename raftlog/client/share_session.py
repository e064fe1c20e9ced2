"""A share-group member's session (KIP-932), sans I/O: what both share-consumer shells
(share_consumer.py blocking, share_aio.py trio) do, written once as procedures that yield the
requests they need.

A procedure is a generator. It yields `Routed(request, route)` and is resumed with the ok
answer of that request sent along `route` ((topic, partition): that partition's leader; the
group's coordinator is the leader of its `__consumer_offsets` partition), or has the
request's RaftlogError thrown in; it returns its value. Procedures: `heartbeat`
(join/heartbeat/leave), `fetch_round` (one share_fetch per assigned partition, carrying the
pending acknowledgements), `commit` (share_acknowledge now).

`ShareAcks` is the ledger: which records this member holds and which acknowledgements are
pending, per partition. Explicit mode: a record not acknowledged by the next poll is an error
(Kafka's IllegalStateException); close releases what was not acknowledged. Implicit mode:
poll and close accept everything the previous poll returned.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
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

__all__ = ["ShareSession", "ShareRecord", "ShareAcks", "Routed", "ACK_TYPES", "MAX_POLL_RECORDS"]

ACK_TYPES: Final = {"accept": 1, "release": 2, "reject": 3}
MAX_POLL_RECORDS: Final = 500
MAX_KEPT_ERRORS: Final = 100
EMPTY_POLL_WAIT_MS: Final = 100  # share fetches do not long-poll yet: the shells wait this long


class Routed(NamedTuple):
    request: dict
    route: tuple[str, int]


Procedure = Generator[Routed, Any, Any]

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


class ShareSession:
    """The member's state both shells keep. Not thread-safe."""

    def __init__(self, group_id: str, *, acknowledgement_mode: str = "implicit",
                 max_poll_records: int = MAX_POLL_RECORDS, auto_offset_reset: str = "latest", client_id: str = "",
                 max_partition_fetch_bytes: int = 1 << 20):
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
        self.coordinator = (OFFSETS_TOPIC, partition_for_group(group_id))
        self.topics: list[str] = []
        self.member_id = ""
        self.member_epoch = 0
        self.heartbeat_due_ms = 0
        self.interval_ms = 5000
        self.assignment: list[tuple[str, int]] = []
        self.acks = ShareAcks()
        self._next = 0  # round-robin start over the assignment
        # Acknowledgements a leader refused (a lock ran out first): the records come back to
        # some member; (partition, error), the latest MAX_KEPT_ERRORS.
        self.acknowledge_errors: list[tuple[tuple[str, int], RaftlogError]] = []

    def subscribe(self, topics: Sequence[str]) -> None:
        self.topics = sorted(set(topics))
        self.heartbeat_due_ms = 0

    def acknowledge(self, record: ShareRecord, ack_type: str = "accept") -> None:
        if ack_type not in ACK_TYPES:
            raise ValueError(f"ack_type is one of {sorted(ACK_TYPES)}")
        self.acks.ack((record.topic, record.partition), record.offset, ACK_TYPES[ack_type])

    def start_poll(self, max_records: int | None) -> int:
        """Before a poll: implicit mode accepts the last poll's records; the poll's limit.
        Raises RuntimeError in explicit mode when records of the last poll are not acknowledged."""
        if self.explicit and self.acks.unacknowledged():
            raise RuntimeError(f"{self.acks.unacknowledged()} records of the last poll are not acknowledged")
        self.acks.ack_all(ACK_TYPES["accept"])
        return min(max_records or self.max_poll_records, self.max_poll_records)

    def heartbeat(self, now_ms: int, leave: bool = False) -> Procedure:
        """Join, heartbeat when due, or leave; a fenced or unknown member rejoins at once."""
        if not leave and (now_ms < self.heartbeat_due_ms or not self.topics):
            return
        for _ in range(2):  # the heartbeat, then at most one rejoin
            request: dict[str, Any] = {"op": "share_group_heartbeat", "group_id": self.group_id,
                                       "member_id": self.member_id, "client_id": self.client_id,
                                       "member_epoch": -1 if leave else self.member_epoch}
            if self.member_epoch == 0 and not leave:
                request["subscribed_topic_names"] = self.topics
            try:
                answer = yield Routed(request, self.coordinator)
            except (UnknownMemberIdError, FencedMemberEpochError):
                if leave:
                    return
                self.member_epoch, self.assignment = 0, []
                continue
            if leave:
                return
            self.member_id, self.member_epoch = answer["member_id"], answer["member_epoch"]
            self.interval_ms = answer.get("heartbeat_interval_ms") or self.interval_ms
            self.heartbeat_due_ms = now_ms + self.interval_ms
            if answer.get("assignment") is not None:
                new = sorted((a["topic"], p) for a in answer["assignment"] for p in a["partitions"])
                for tp in set(self.assignment) - set(new):
                    self.acks.forget(tp)
                self.assignment = new
            return

    def fetch_round(self, limit: int) -> Procedure:
        """One share_fetch per assigned partition (round robin start); the records acquired."""
        if not self.assignment:
            return []
        n = len(self.assignment)
        order = [self.assignment[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        per = max(1, -(-limit // n))
        out: list[ShareRecord] = []
        for tp in order:  # one at a time: a failed partition must not lose the others' records
            request = {"op": "share_fetch", "group_id": self.group_id, "member_id": self.member_id,
                       "topic": tp[0], "partition": tp[1], "max_records": per,
                       "max_bytes": self.max_partition_fetch_bytes, "auto_offset_reset": self.auto_offset_reset,
                       "acknowledgements": self.acks.take(tp)}
            try:
                answer = yield Routed(request, tp)
            except (UnknownMemberIdError, FencedMemberEpochError):
                self.member_epoch, self.heartbeat_due_ms = 0, 0
                self.acks.forget(tp)
                continue
            except RaftlogError:
                self.acks.forget(tp)  # acks not applied: the records come back after their locks
                continue
            if answer.get("acknowledge_error") is not None:
                self.acknowledge_errors.append((tp, error_from_wire(answer["acknowledge_error"])))
                del self.acknowledge_errors[:-MAX_KEPT_ERRORS]
            out.extend(self._records(tp, answer))
        return out

    def commit(self) -> Procedure:
        """Send every pending acknowledgement now; per partition None or its error."""
        out: dict[tuple[str, int], RaftlogError | None] = {}
        for tp in sorted(self.acks.pending):
            runs = self.acks.take(tp)
            if not runs:
                continue
            try:
                yield Routed({"op": "share_acknowledge", "group_id": self.group_id, "member_id": self.member_id,
                              "topic": tp[0], "partition": tp[1], "acknowledgements": runs}, tp)
                out[tp] = None
            except RaftlogError as exc:
                out[tp] = exc
        return out

    def close(self, now_ms: int) -> Procedure:
        """Acknowledge (implicit: accept the last poll; explicit: release what was not
        acknowledged), then leave the group."""
        self.acks.ack_all(ACK_TYPES["release" if self.explicit else "accept"])
        if self.member_id:
            yield from self.commit()
            yield from self.heartbeat(now_ms, leave=True)

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
                    self.acks.hold(tp, r.offset)
        # Acquired offsets the batches do not hold (compacted away): give them back as GAP.
        for off in sorted(counts):
            self.acks.pending.setdefault(tp, {})[off] = 0
        return out

"""Consumer groups, client side, sans-I/O: coordinator discovery and calls (`GroupCore`), and
the member's state machine (`GroupMembership`): join → sync → heartbeat, rebalances, the
leader's assignment (raftlog/client/assignor.py), offset commit/fetch, auto-commit timing.

No sockets, no clock, no threads: the shells (group_blocking.py, group_aio.py) drive both
through group_session.py's procedures, with `now_ms` from their clock. Offset resets for
the admin (`ResetSpec`, `plan_offset_reset`) are planned here too, as pure functions.

GroupCore (a ClientCore): `coord_call(request, now_ms, timeout_ms) -> Call` sends `request`
to the group's coordinator, found with `find_coordinator` (asked of any broker). It retries
with backoff until the call's deadline on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
a lost connection (the coordinator is looked up again) and on COORDINATOR_LOAD_IN_PROGRESS or
REQUEST_TIMED_OUT (same coordinator). Any other error ends the call (the membership decides).
A sync commit (`retry_commit`) is retried the same way when its answer's partitions failed
only with those errors (`commit_retry_error`).
Every group op is safe to resend: a join or sync sent twice is answered as one, a heartbeat
or a commit of the same offsets changes nothing more.

GroupMembership: the classic protocol as Kafka's ConsumerCoordinator runs it.
* `join_request()` / `on_join_ok(resp)` / `on_join_error(exc)` → "rejoin" or raises
  (MEMBER_ID_REQUIRED adopts the id given; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION reset to
  a fresh member; REBALANCE_IN_PROGRESS rejoins). FENCED_INSTANCE_ID and non-retriable
  errors are raised to the user.
* The leader (`is_leader`) assigns with the protocol the coordinator selected
  (`assign(partitions_per_topic)`), others send no assignment.
* `on_sync_ok(resp)` → the new assignment; eager protocols revoked everything before the
  join; cooperative-sticky (KIP-429) revokes only what it lost and then rejoins at once.
* Heartbeats every `heartbeat_interval_ms` while Stable; REBALANCE_IN_PROGRESS sets
  `rejoin_needed`; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION also drop the member id/generation.
* Auto commit: `auto_commit_due(now_ms)` every `auto_commit_interval_ms`.
Invariant: `assignment` changes only through `on_sync_ok` / `revoke_all` / `reset`, so a
partition is owned by this member only within a generation the coordinator confirmed.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidRequestError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RaftlogError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
    error_from_wire,
)
from raftlog.client.assignor import (
    ASSIGNORS,
    Subscription,
    assign,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from raftlog.client.core import Call, ClientCore, Pending
from raftlog.client.request import check_response

__all__ = [
    "GroupCore",
    "GroupMembership",
    "GroupMetadata",
    "GROUP_OPTIONS",
    "new_group",
    "TopicPartition",
    "PROTOCOL_TYPE",
    "find_coordinator_request",
    "offset_commit_request",
    "offset_fetch_request",
    "parse_offset_fetch",
]

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
MAX_COORD_CALLS = 1024
TopicPartition = tuple[str, int]

# Consumer options that belong to the group (both shells' Consumers hand these to new_group).
GROUP_OPTIONS = frozenset({
    "group_id", "group_instance_id", "session_timeout_ms", "heartbeat_interval_ms",
    "rebalance_timeout_ms", "max_poll_interval_ms", "partition_assignment_strategy",
    "enable_auto_commit", "auto_commit_interval_ms", "client_id",
})


def new_group(bootstrap: str | Iterable[str], *, group_id: str, group_instance_id: str | None = None,
              session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 3_000,
              rebalance_timeout_ms: int | None = None, max_poll_interval_ms: int = 300_000,
              partition_assignment_strategy: str | Iterable[str] = ("range",),
              enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5_000,
              client_id: str = "raftlog-python", request_timeout_ms: int = 30_000,
              rng: random.Random | None = None) -> tuple["GroupMembership", "GroupCore"]:
    """The member state machine and the coordinator core of one Consumer's group, with the
    defaults both shells share (Kafka's: session 10 s, heartbeat 3 s, rebalance timeout =
    max.poll.interval.ms 5 min, range assignor, auto commit every 5 s)."""
    membership = GroupMembership(
        group_id, assignors=partition_assignment_strategy, session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms or max_poll_interval_ms,
        heartbeat_interval_ms=heartbeat_interval_ms, group_instance_id=group_instance_id,
        client_id=client_id, enable_auto_commit=enable_auto_commit,
        auto_commit_interval_ms=auto_commit_interval_ms,
    )  # fmt: skip
    core = GroupCore(bootstrap, group_id, rng=rng or random.Random(), request_timeout_ms=request_timeout_ms)
    return membership, core


class GroupMetadata(NamedTuple):
    """A member's view of its group (Kafka's ConsumerGroupMetadata, plus what it owns):
    generation_id -1 and member_id "" until the first join completes."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignment: tuple[TopicPartition, ...]
_REFIND = (NotCoordinatorError, CoordinatorNotAvailableError)
_RETRY_SAME = (CoordinatorLoadInProgressError, RequestTimedOutError)


class CoordCall(Call):
    """A call to the coordinator. With `retry_commit`, a commit answer whose partitions all
    failed retriably (the append did not land: the coordinator moved, or the append timed
    out) is retried like a coordinator error, until the call's deadline: Kafka's commitSync.
    Async commits are not (an older commit sent again could land after a newer one)."""

    __slots__ = ("retry_commit",)


def commit_retry_error(msg: dict) -> dict | None:
    """The error to retry a commit answer on: the first per-partition error, if every failed
    partition failed with a coordinator error (`_REFIND` or `_RETRY_SAME`); else None."""
    errors = [r["error"] for r in msg.get("partitions") or () if r.get("error") is not None]
    if errors and all(isinstance(error_from_wire(e), _REFIND + _RETRY_SAME) for e in errors):
        return errors[0]
    return None


def find_coordinator_request(group_id: str) -> dict:
    return {"op": "find_coordinator", "group_id": group_id}


def offset_commit_request(group_id: str, offsets: Mapping[TopicPartition, int], *, member_id: str = "",
                          generation_id: int = -1, group_instance_id: str | None = None,
                          metadata: str = "") -> dict:
    return {
        "op": "offset_commit", "group_id": group_id, "member_id": member_id,
        "generation_id": generation_id, "group_instance_id": group_instance_id,
        "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": metadata}
                    for (t, p), o in sorted(offsets.items())],
    }  # fmt: skip


def offset_fetch_request(group_id: str, partitions: Iterable[TopicPartition] | None = None) -> dict:
    return {"op": "offset_fetch", "group_id": group_id,
            "partitions": None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions]}


def parse_offset_fetch(msg: dict) -> dict[TopicPartition, int | None]:
    """{(topic, partition): committed offset or None}."""
    msg = check_response(msg)
    return {(r["topic"], r["partition"]): (r["offset"] if r.get("offset", -1) >= 0 else None)
            for r in msg.get("partitions") or ()}


def check_commit(msg: dict) -> None:
    """Raise the first per-partition error of an offset_commit answer."""
    for r in check_response(msg).get("partitions") or ():
        if r.get("error") is not None:
            raise error_from_wire(r["error"])


class GroupCore(ClientCore):
    """Calls to one group's coordinator (see the module docstring). Not thread-safe."""

    def __init__(self, bootstrap: Iterable[str] | str, group_id: str, **kw: Any):
        super().__init__(bootstrap, **kw)
        self.group_id = group_id
        self.coordinator_id: int | None = None
        self._coordinator_address: tuple[str, int] | None = None
        self._coord_calls: list[Call] = []
        self._find_in_flight = False
        self._find_attempts = 0
        self._find_retry_at_ms = 0

    def address(self, broker_id: int) -> tuple[str, int] | None:
        if broker_id == self.coordinator_id and self._coordinator_address is not None:
            return self._coordinator_address
        return super().address(broker_id)

    def coord_call(self, request: dict, now_ms: int, timeout_ms: int | None = None, *,
                   retry_commit: bool = False) -> Call:
        if len(self._coord_calls) >= MAX_COORD_CALLS:
            raise RaftlogError(f"more than {MAX_COORD_CALLS} coordinator calls pending")
        call = CoordCall(request, None, now_ms + (timeout_ms or self.request_timeout_ms))
        call.retry_commit = retry_commit
        self._coord_calls.append(call)
        return call

    def coordinator_lost(self) -> None:
        self.coordinator_id = None
        self._coordinator_address = None

    def _needs_metadata(self) -> bool:
        return bool(self._wanted_topics)

    def _poll_more(self, now_ms: int, out: list) -> None:
        self._coord_calls = self._prune_calls(self._coord_calls, now_ms)
        waiting = [c for c in self._coord_calls if not c.in_flight and c.retry_at_ms <= now_ms]
        if not waiting:
            return
        if self.coordinator_id is None:
            if not self._find_in_flight and now_ms >= self._find_retry_at_ms:
                broker = self.pick_broker(now_ms)
                if broker is not None:
                    self._find_in_flight = True
                    out.append(self._send(broker, find_coordinator_request(self.group_id), "find", now_ms,
                                          None, self.request_timeout_ms))
            return
        if not self.broker_up(self.coordinator_id, now_ms):
            return
        for c in waiting:
            c.in_flight = True
            c.attempts += 1
            remaining = c.deadline_ms - now_ms
            req = dict(c.request)
            req.setdefault("timeout_ms", max(0, remaining))
            wait = max(remaining, req["timeout_ms"])
            out.append(self._send(self.coordinator_id, req, "coord", now_ms, c, wait))

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        ts = [c.retry_at_ms for c in self._coord_calls if not c.in_flight and c.retry_at_ms > now_ms]
        ts += [c.deadline_ms for c in self._coord_calls]
        if self.coordinator_id is None and self._coord_calls and not self._find_in_flight:
            ts.append(max(self._find_retry_at_ms, now_ms + 1))
        return min(ts) if ts else None

    def _on_find_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        self._find_in_flight = False
        err = msg.get("error")
        if err is None and isinstance(msg.get("node_id"), int) and isinstance(msg.get("host"), str):
            self.coordinator_id = msg["node_id"]
            self._coordinator_address = (msg["host"], msg["port"])
            self._find_attempts = 0
            return
        self._find_failed(now_ms)
        if err is not None:
            exc = error_from_wire(err)
            if not exc.retriable:
                for c in self._coord_calls:
                    if not c.in_flight:
                        c.done, c.error = True, exc

    def _on_find_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        self._find_in_flight = False
        self._find_failed(now_ms)

    def _find_failed(self, now_ms: int) -> None:
        self._find_attempts += 1
        self._find_retry_at_ms = now_ms + self.retry.backoff(self._find_attempts)

    def _on_coord_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        c: CoordCall = p.ctx
        c.in_flight = False
        err = msg.get("error")
        if err is None and c.retry_commit:
            err = commit_retry_error(msg)
        if err is None:
            c.done, c.result, c.error = True, msg, None
            return
        exc = error_from_wire(err)
        if isinstance(exc, _REFIND) and self.coordinator_id == p.broker_id:
            self.coordinator_lost()
        if isinstance(exc, _REFIND + _RETRY_SAME):
            self._retry_coord(c, exc, now_ms)
            return
        c.done, c.error = True, exc

    def _on_coord_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        c: Call = p.ctx
        c.in_flight = False
        if self.coordinator_id == p.broker_id:
            self.coordinator_lost()
        self._retry_coord(c, exc, now_ms)

    def _retry_coord(self, c: Call, exc: BaseException, now_ms: int) -> None:
        c.error = exc
        t = self.retry.next_attempt_ms(c.attempts, now_ms, c.deadline_ms)
        if t is None:
            c.done = True
            return
        c.retry_at_ms = t

    RESPONSE_HANDLERS = {
        **ClientCore.RESPONSE_HANDLERS,
        "find": _on_find_response,
        "coord": _on_coord_response,
    }
    FAILURE_HANDLERS = {
        **ClientCore.FAILURE_HANDLERS,
        "find": _on_find_failure,
        "coord": _on_coord_failure,
    }


class GroupMembership:
    """One member's view of its group (see the module docstring). Not thread-safe."""

    def __init__(
        self,
        group_id: str,
        *,
        assignors: Iterable[str] = ("range",),
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int = 3_000,
        group_instance_id: str | None = None,
        client_id: str = "raftlog-python",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
    ):
        names = [assignors] if isinstance(assignors, str) else list(assignors)
        for n in names:
            if n not in ASSIGNORS:
                raise ValueError(f"unknown partition_assignment_strategy {n!r}; known: {sorted(ASSIGNORS)}")
        if not names:
            raise ValueError("partition_assignment_strategy: at least one assignor")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.group_id = group_id
        self.assignors = names
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.topics: tuple[str, ...] = ()
        self.pattern: re.Pattern[str] | None = None
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, tuple[str | None, bytes]] = {}
        self.assignment: tuple[TopicPartition, ...] = ()
        self.rejoin_needed = True
        self.stable = False
        self.last_heartbeat_ms = 0
        self.next_auto_commit_ms: int | None = None

    # ---- subscription ----

    def metadata(self) -> GroupMetadata:
        return GroupMetadata(self.group_id, self.generation_id, self.member_id,
                             self.group_instance_id, self.assignment)

    def subscribe(self, topics: Iterable[str] | None = None, pattern: str | None = None) -> bool:
        """Set the subscription; returns True when it changed (a rejoin is then needed)."""
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to a list of topics or to a pattern, not both")
        new_topics = tuple(sorted(set(topics))) if topics is not None else self.topics
        new_pattern = re.compile(pattern) if pattern is not None else None
        changed = new_topics != self.topics or (new_pattern and new_pattern.pattern) != (
            self.pattern and self.pattern.pattern)
        self.topics, self.pattern = new_topics, new_pattern
        if changed:
            self.rejoin_needed = True
        return bool(changed)

    def match_topics(self, all_topics: Iterable[str]) -> bool:
        """With a pattern: take the matching topics; True when the set changed."""
        if self.pattern is None:
            return False
        matched = tuple(sorted(t for t in all_topics if self.pattern.fullmatch(t)))
        if matched != self.topics:
            self.topics = matched
            self.rejoin_needed = True
            return True
        return False

    @property
    def cooperative(self) -> bool:
        return (self.protocol_name or self.assignors[0]) == "cooperative-sticky"

    # ---- join / sync ----

    def join_request(self) -> dict:
        owned = self.assignment if self.cooperative or "sticky" in self.assignors[0] else ()
        sub = Subscription(self.topics, tuple(owned), self.generation_id)
        meta = encode_subscription(sub)
        return {
            "op": "join_group", "group_id": self.group_id, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": n, "metadata": meta} for n in self.assignors],
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms, "client_id": self.client_id,
            "timeout_ms": self.rebalance_timeout_ms + 5_000,
        }  # fmt: skip

    def on_join_ok(self, resp: dict) -> None:
        self.member_id = resp["member_id"]
        self.generation_id = resp["generation_id"]
        self.protocol_name = resp.get("protocol_name")
        self.leader_id = resp.get("leader")
        self.members = {m["member_id"]: (m.get("group_instance_id"), m["metadata"])
                        for m in resp.get("members") or ()}

    def on_join_error(self, exc: BaseException) -> str:
        """"rejoin" (try again) or raises what the user must see."""
        if isinstance(exc, MemberIdRequiredError):
            self.member_id = getattr(exc, "member_id", None) or exc.details.get("member_id", "")
            return "rejoin"
        if isinstance(exc, (UnknownMemberIdError, IllegalGenerationError)):
            self.reset()
            return "rejoin"
        if isinstance(exc, RebalanceInProgressError) or getattr(exc, "retriable", False):
            return "rejoin"
        raise exc

    @property
    def is_leader(self) -> bool:
        return self.leader_id is not None and self.leader_id == self.member_id

    def subscribed_topics_of_group(self) -> set[str]:
        """Every topic any member subscribes to (the leader needs their partition counts)."""
        out: set[str] = set()
        for inst, blob in self.members.values():
            out.update(decode_subscription(blob, inst).topics)
        return out

    def assign(self, partitions_per_topic: Mapping[str, int]) -> dict[str, bytes]:
        """The leader's plan {member_id: assignment bytes} with the selected protocol."""
        return assign(self.protocol_name or self.assignors[0], partitions_per_topic, self.members)

    def sync_request(self, assignments: Mapping[str, bytes] | None) -> dict:
        return {
            "op": "sync_group", "group_id": self.group_id, "member_id": self.member_id,
            "generation_id": self.generation_id, "group_instance_id": self.group_instance_id,
            "protocol_type": PROTOCOL_TYPE, "protocol_name": self.protocol_name,
            "assignments": None if assignments is None else [
                {"member_id": m, "assignment": a} for m, a in sorted(assignments.items())],
            "timeout_ms": self.rebalance_timeout_ms + 5_000,
        }  # fmt: skip

    def on_sync_ok(self, resp: dict, now_ms: int) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Take the assignment; returns (added, revoked) against the previous one. With the
        cooperative protocol a non-empty `revoked` leaves `rejoin_needed` set (KIP-429)."""
        new = tuple(sorted(decode_assignment(resp.get("assignment") or b"").partitions))
        old = set(self.assignment)
        added = sorted(set(new) - old)
        revoked = sorted(old - set(new))
        self.assignment = new
        self.stable = True
        self.rejoin_needed = bool(revoked) and self.cooperative
        self.last_heartbeat_ms = now_ms
        if self.enable_auto_commit and self.next_auto_commit_ms is None:
            self.next_auto_commit_ms = now_ms + self.auto_commit_interval_ms
        return added, revoked

    def on_sync_error(self, exc: BaseException) -> str:
        self.stable = False
        return self.on_join_error(exc)

    def revoke_all(self) -> list[TopicPartition]:
        """Before an eager rejoin: everything owned is given up (returned)."""
        gone = list(self.assignment)
        self.assignment = ()
        return gone

    def reset(self) -> None:
        """Forget the membership (fenced, or left): the next join starts afresh."""
        self.member_id = ""
        self.generation_id = -1
        self.stable = False
        self.rejoin_needed = True

    # ---- heartbeat ----

    def heartbeat_due(self, now_ms: int) -> bool:
        return self.stable and not self.rejoin_needed and now_ms - self.last_heartbeat_ms >= self.heartbeat_interval_ms

    def next_heartbeat_ms(self) -> int:
        return self.last_heartbeat_ms + self.heartbeat_interval_ms

    def heartbeat_request(self) -> dict:
        return {"op": "heartbeat", "group_id": self.group_id, "member_id": self.member_id,
                "generation_id": self.generation_id, "group_instance_id": self.group_instance_id,
                "timeout_ms": min(self.session_timeout_ms, 5_000)}

    def on_heartbeat_ok(self, now_ms: int) -> None:
        self.last_heartbeat_ms = now_ms

    def on_heartbeat_error(self, exc: BaseException, now_ms: int) -> None:
        """Any group error means "rejoin"; a lost member also drops its id."""
        if isinstance(exc, (UnknownMemberIdError, IllegalGenerationError)):
            self.member_id = "" if isinstance(exc, UnknownMemberIdError) else self.member_id
            self.generation_id = -1 if isinstance(exc, UnknownMemberIdError) else self.generation_id
            self.stable = False
            self.rejoin_needed = True
        elif isinstance(exc, RebalanceInProgressError):
            self.rejoin_needed = True
            self.last_heartbeat_ms = now_ms
        elif getattr(exc, "retriable", False):
            # Try again soon (the coordinator moved or was busy), not at the next interval.
            self.last_heartbeat_ms = now_ms - self.heartbeat_interval_ms + min(200, self.heartbeat_interval_ms)
        else:
            self.stable = False
            self.rejoin_needed = True

    # ---- commits ----

    def commit_request(self, offsets: Mapping[TopicPartition, int], metadata: str = "") -> dict:
        """A commit fenced by this member's generation (when it is in one)."""
        member, generation = (self.member_id, self.generation_id) if self.generation_id >= 0 else ("", -1)
        req = offset_commit_request(self.group_id, offsets, member_id=member, generation_id=generation,
                                    group_instance_id=self.group_instance_id, metadata=metadata)
        req["timeout_ms"] = 10_000
        return req

    def auto_commit_due(self, now_ms: int) -> bool:
        return (self.enable_auto_commit and self.next_auto_commit_ms is not None
                and now_ms >= self.next_auto_commit_ms)

    def auto_committed(self, now_ms: int) -> None:
        self.next_auto_commit_ms = now_ms + self.auto_commit_interval_ms

    def leave_request(self) -> dict:
        return {"op": "leave_group", "group_id": self.group_id,
                "members": [{"member_id": self.member_id, "group_instance_id": self.group_instance_id}],
                "timeout_ms": 5_000}


# --- offset reset (the admin's kafka-consumer-groups --reset-offsets) -----------------


@dataclass(frozen=True)
class ResetSpec:
    """How to reset: "earliest", "latest", "offset" (`value` = the offset, clamped into the
    log), or "timestamp" (`value` = ms; the first offset at or after it, else the log end)."""

    strategy: str
    value: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("earliest", "latest", "offset", "timestamp"):
            raise InvalidRequestError(f"unknown reset strategy {self.strategy!r}", field="strategy")
        if self.strategy in ("offset", "timestamp") and type(self.value) is not int:
            raise InvalidRequestError(f"reset to {self.strategy} needs an int value", field="value")


def plan_offset_reset(
    spec: ResetSpec,
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    timestamp_offsets: Mapping[tuple[str, int], int | None] | None = None,
) -> dict[tuple[str, int], int]:
    """Target offsets for each partition in `bounds` ((topic, partition) → (log_start_offset,
    log_end_offset)), as Kafka's kafka-consumer-groups --reset-offsets computes them. For
    "timestamp", `timestamp_offsets` holds what list_offsets answered for `spec.value` (None
    when no record is that late: the log end, as Kafka's tool does). Pure; raises
    InvalidRequestError."""
    plan: dict[tuple[str, int], int] = {}
    for tp, (start, end) in sorted(bounds.items()):
        if spec.strategy == "earliest":
            plan[tp] = start
        elif spec.strategy == "latest":
            plan[tp] = end
        elif spec.strategy == "offset":
            plan[tp] = min(max(spec.value, start), end)  # type: ignore[type-var]
        else:
            if timestamp_offsets is None or tp not in timestamp_offsets:
                raise InvalidRequestError(f"no offset looked up for {tp} at the timestamp", field="timestamp_offsets")
            found = timestamp_offsets[tp]
            plan[tp] = end if found is None else min(max(found, start), end)
    return plan

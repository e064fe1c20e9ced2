"""Sans-I/O client core: the request engine every client core is built on (`ClientCore`).

It owns request ids and deadlines, broker choice and reconnect backoff, the metadata refresh
(the cache is `metadata_cache.MetadataCache`), and `Call`s: requests it routes and retries
for the caller (admin ops, list_offsets). The producer, consumer, admin and group cores
(`producer.py`, `consumer.py`, `admin.py`, `group.py`) subclass it with their own request
kinds. Nothing here opens a socket, reads a clock or sleeps. A shell drives a core with four
calls:

    actions = core.poll(now_ms)            # Send(broker_id, request) / Close(broker_id)
    core.on_response(broker_id, msg, now_ms)
    core.on_disconnect(broker_id, now_ms)  # connect failed or connection lost
    core.on_auth_failure(broker_id, error, now_ms)  # the node refused our credentials (TLS/SASL)
    core.next_wakeup_ms(now_ms)            # when poll has something to do without I/O

and asks `core.address(broker_id)` where to connect. Request ids are unique across the core
(so per connection too); a response whose id is not pending (it came after its request timed
out) is dropped. Bootstrap addresses get negative broker ids (-1, -2, ...) as in Kafka.

Invariants:
* Every request has a deadline (`request_timeout_ms`); a pending request past it is treated
  as an unknown outcome and its connection is closed (a late answer cannot be matched).
* Every retry waits a bounded exponential backoff with jitter (`RetryPolicy`, injected
  Random) and stops at the operation's total deadline.
* A NOT_LEADER hint is applied to the cache at once (and a refresh is scheduled); an
  UNKNOWN_TOPIC_OR_PARTITION or a lost connection schedules a metadata refresh.
* Answers and failures reach their handlers through `RESPONSE_HANDLERS` and
  `FAILURE_HANDLERS`, tables keyed by the request's kind.
* An authentication failure (`on_auth_failure`: wrong password, certificate refused) is
  definite and the same on every retry: what waits on it fails with that error at once
  (Kafka's AuthenticationException), rather than retrying to the deadline. Later requests
  try again after the reconnect backoff (the credentials may be fixed meanwhile).
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable, ClassVar, Iterable, NamedTuple

from raftlog.base.errors import (
    CorruptMessageError,
    KafkaStorageError,
    NotCoordinatorError,
    NotLeaderError,
    RaftlogError,
    RequestTimedOutError,
    UnknownOutcomeError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.client.errors import ConnectionLostError, NoBrokerAvailableError
from raftlog.client.metadata_cache import MetadataCache
from raftlog.client.request import PROTOCOL_VERSION, metadata_request, parse_metadata
from raftlog.client.retry import RetryPolicy

__all__ = ["Send", "Close", "Call", "Pending", "ClientCore"]

log = logging.getLogger(__name__)

_ID_LIMIT = 1 << 31
# A broker address that answered another protocol (HTTP, TLS, Kafka's) is retried this rarely.
FOREIGN_BACKOFF_MS = 10_000
HELLO = "\r\n\r\n"
SILENT_CLOSES_FOREIGN = 3


class Send(NamedTuple):
    """Shell: send `request` (a full frame map, id included) on the connection to `broker_id`."""

    broker_id: int
    request: dict


class Close(NamedTuple):
    """Shell: close the connection to `broker_id` (then report it with on_disconnect)."""

    broker_id: int


class Call:
    """One request/answer exchange the core retries for the caller (admin ops, list_offsets).

    route: None = any broker; (topic, partition) = that partition's leader.
    When `done`, either `result` (the ok response map) or `error` is set.
    """

    __slots__ = (
        "request", "route", "deadline_ms", "attempts", "retry_at_ms", "in_flight", "done",
        "result", "error", "maybe_applied", "sent_to",
    )

    def __init__(self, request: dict, route: tuple[str, int] | None, deadline_ms: int):
        self.request = request
        self.route = route
        self.deadline_ms = deadline_ms
        self.attempts = 0
        self.retry_at_ms = 0
        self.in_flight = False
        self.done = False
        self.result: dict | None = None
        self.error: BaseException | None = None
        self.maybe_applied = False
        self.sent_to: int | None = None

    def value(self) -> dict:
        """The ok response; raises the call's error. Only once `done`."""
        if not self.done:
            raise RuntimeError("call not done")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class Pending:
    """A request the core sent and awaits: who, which kind (its handlers), until when, and
    what the handlers need (`ctx`)."""

    __slots__ = ("broker_id", "kind", "deadline_ms", "ctx")

    def __init__(self, broker_id: int, kind: str, deadline_ms: int, ctx: Any):
        self.broker_id = broker_id
        self.kind = kind
        self.deadline_ms = deadline_ms
        self.ctx = ctx


ResponseHandler = Callable[["ClientCore", Pending, dict, int], None]
FailureHandler = Callable[["ClientCore", Pending, BaseException, int], None]


class ClientCore:
    """Request ids, deadlines, broker choice and reconnect backoff, metadata refresh, calls.

    Every request the core sends has a kind; `RESPONSE_HANDLERS[kind]` gets its answer and
    `FAILURE_HANDLERS[kind]` its failure (lost connection, request timeout). A subclass adds
    its kinds by extending both tables.
    Concurrency: not thread-safe; one shell drives it (holding a lock if it has threads).
    """

    def __init__(
        self,
        bootstrap: Iterable[str] | str,
        *,
        rng: random.Random,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        metadata_max_age_ms: int = 300_000,
        max_pending_calls: int = 1024,
    ):
        if isinstance(bootstrap, str):
            bootstrap = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.metadata = MetadataCache(bootstrap)
        self.rng = rng
        self.request_timeout_ms = request_timeout_ms
        self.retry = RetryPolicy(rng, retry_backoff_ms, retry_backoff_max_ms)
        self.reconnect = RetryPolicy(rng, reconnect_backoff_ms, reconnect_backoff_max_ms)
        self.metadata_max_age_ms = metadata_max_age_ms
        self.max_pending_calls = max_pending_calls
        self._next_id = 1
        self._pending: dict[int, Pending] = {}
        self._down_until_ms: dict[int, int] = {}
        self._failures: dict[int, int] = {}
        self._closes: list[int] = []
        self._rr = 0
        # Metadata refresh: topics of interest, whether a refresh is due, backoff.
        self._wanted_topics: set[str] = set()
        self._metadata_due = True
        self._metadata_in_flight = False
        self._metadata_attempts = 0
        self._metadata_retry_at_ms = 0
        self._calls: list[Call] = []
        # The last authentication failure, until a broker answers again.
        self.auth_error: RaftlogError | None = None
        self._foreign: dict[int, str] = {}  # broker id -> what answered there instead of raftlog
        self._answered: set[int] = set()  # bootstrap ids that answered at least once
        self._silent_closes: dict[int, int] = {}  # bootstrap id -> closed with requests, no answer
        self._connected: set[int] = set()  # connected since the last loss (on_connected)
        self._refusals: dict[int, RaftlogError] = {}  # broker id -> why it refused a frame (id 0)

    # ---- shell interface ----

    def address(self, broker_id: int) -> tuple[str, int] | None:
        return self.metadata.address(broker_id)

    def poll(self, now_ms: int) -> list[Send | Close]:
        out: list[Send | Close] = []
        self._expire_pending(now_ms)
        if self._closes:
            out.extend(Close(b) for b in self._closes)
            self._closes.clear()
        self._poll_metadata(now_ms, out)
        self._poll_calls(now_ms, out)
        self._poll_more(now_ms, out)
        return out

    def on_response(self, broker_id: int, msg: Any, now_ms: int) -> None:
        if not isinstance(msg, dict):
            log.warning("broker %s sent a non-map response; ignored", broker_id)
            return
        rid = msg.get("id")
        p = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if p is None:
            if rid == 0 and msg.get("error") is not None:
                # The server refused a frame it could not read and will close: say why, and
                # give the reason to the request that connection loses (on_disconnect).
                refusal = error_from_wire(msg["error"])
                log.warning("broker %s refused a frame: %s", broker_id, refusal)
                self._refusals[broker_id] = refusal
            return  # late answer to a request we gave up on
        self._failures.pop(broker_id, None)
        self._down_until_ms.pop(broker_id, None)
        self.auth_error = None
        self._foreign.pop(broker_id, None)
        self._answered.add(broker_id)
        self.RESPONSE_HANDLERS[p.kind](self, p, msg, now_ms)

    def on_connected(self, broker_id: int) -> None:
        """Shell: a connection to broker_id is open (a later loss is a close, not a refusal)."""
        self._connected.add(broker_id)

    def note_foreign(self, broker_id: int, what: str, *, message: str | None = None) -> None:
        """Shell: the server at broker_id's address answered `what` ("HTTP", ...) instead of
        the raftlog protocol (base/protocol.py foreign_protocol); report the connection lost
        next, as usual. Said once in the log; while every address answers like that, calls
        fail at once saying so (a wrong --bootstrap port) instead of retrying to their deadline."""
        addr = self.address(broker_id)
        where = f"{addr[0]}:{addr[1]}" if addr is not None else f"broker {broker_id}"
        message = f"{where} {message}" if message else f"{where} answered {what}, not the raftlog protocol"
        if broker_id not in self._foreign:
            log.warning("%s", message)
        self._foreign[broker_id] = message

    def unreachable_reason(self) -> str | None:
        """Why no broker can be asked, when every known address answered another protocol
        (for error messages); None otherwise."""
        ids = list(self.metadata.brokers) or list(self.metadata.bootstrap)
        if ids and all(b in self._foreign for b in ids):
            return "; ".join(self._foreign[b] for b in ids)
        return None

    def on_disconnect(self, broker_id: int, now_ms: int) -> None:
        """The connection to broker_id failed or closed: fail its pending requests (unknown
        outcome), back off reconnecting, refresh metadata."""
        n = self._failures.get(broker_id, 0) + 1
        self._failures[broker_id] = n
        backoff = FOREIGN_BACKOFF_MS if broker_id in self._foreign else self.reconnect.backoff(n)
        self._down_until_ms[broker_id] = now_ms + backoff
        lost = [rid for rid, p in self._pending.items() if p.broker_id == broker_id]
        was_connected = broker_id in self._connected
        self._connected.discard(broker_id)
        if lost and was_connected and broker_id < 0 and broker_id not in self._answered:
            # A bootstrap address that keeps closing on our requests without a word is not
            # a raftlog client listener (e.g. a Kafka listener refusing our framing).
            closes = self._silent_closes[broker_id] = self._silent_closes.get(broker_id, 0) + 1
            if closes >= SILENT_CLOSES_FOREIGN and broker_id not in self._foreign:
                self.note_foreign(broker_id, "", message=(
                    f"closed the connection {closes} times without answering: not the raftlog protocol"))
                self._down_until_ms[broker_id] = now_ms + FOREIGN_BACKOFF_MS
        refusal = self._refusals.pop(broker_id, None)
        for rid in lost:
            p = self._pending.pop(rid)
            if refusal is not None and len(lost) == 1:
                # The one request in flight is the frame the server refused unread: a definite
                # failure (e.g. MESSAGE_TOO_LARGE over the node's max_frame_bytes).
                exc: BaseException = refusal
            else:
                exc = ConnectionLostError(f"connection to broker {broker_id} lost with the request in flight"
                                          + (f" (it refused a frame: {refusal})" if refusal else ""))
            self.FAILURE_HANDLERS[p.kind](self, p, exc, now_ms)
        if broker_id >= 0:
            self.metadata.invalidate_broker(broker_id)
        self._metadata_due = True

    def on_auth_failure(self, broker_id: int, error: RaftlogError, now_ms: int) -> None:
        """The node refused this client's credentials on a new connection to broker_id (SASL
        or TLS). Definite and not retriable: every request registered for that broker, every
        call not in flight, and what the subclass keeps waiting (`_on_auth_failed`) fail
        with `error` now; the broker is backed off like a failed connect."""
        self.auth_error = error
        n = self._failures.get(broker_id, 0) + 1
        self._failures[broker_id] = n
        self._down_until_ms[broker_id] = now_ms + self.reconnect.backoff(n)
        for rid in [rid for rid, p in self._pending.items() if p.broker_id == broker_id]:
            p = self._pending.pop(rid)
            self.FAILURE_HANDLERS[p.kind](self, p, error, now_ms)
        for c in self._calls:
            if not c.done and not c.in_flight:
                c.done, c.error = True, error
        self._on_auth_failed(error, now_ms)

    def on_input(self, responses: Iterable[tuple[int, Any]], lost: Iterable[int], now_ms: int,
                 refused: Iterable[tuple[int, RaftlogError]] = ()) -> None:
        """What a shell read in one wait: answers (broker_id, msg), then lost connections,
        then connections whose login was refused (broker_id, error)."""
        for broker_id, msg in responses:
            self.on_response(broker_id, msg, now_ms)
        for broker_id in lost:
            self.on_disconnect(broker_id, now_ms)
        for broker_id, error in refused:
            self.on_auth_failure(broker_id, error, now_ms)

    def wait_ms(self, now_ms: int, deadline_ms: int | None, max_wait_ms: int = 1000) -> int:
        """How long a shell may wait for input before it polls again: until the next timed
        work, the caller's `deadline_ms`, or `max_wait_ms` at most; never negative."""
        until = now_ms + max_wait_ms
        for t in (self.next_wakeup_ms(now_ms), deadline_ms):
            if t is not None and t < until:
                until = t
        return max(0, until - now_ms)

    def next_wakeup_ms(self, now_ms: int) -> int | None:
        """The next time poll() has timed work (deadlines, backoffs, linger); None if none."""
        best: int | None = None

        def consider(t: int | None) -> None:
            # Only future times: work due now that poll() did not do is waiting for an
            # answer or for metadata, not for the clock (else the shell would spin).
            nonlocal best
            if t is not None and t > now_ms and (best is None or t < best):
                best = t

        for p in self._pending.values():
            consider(p.deadline_ms)
        if self._metadata_due and not self._metadata_in_flight:
            consider(max(self._metadata_retry_at_ms, self._earliest_up_ms(now_ms)))
        elif self.metadata.updated_ms is not None:
            consider(self.metadata.updated_ms + self.metadata_max_age_ms)
        for c in self._calls:
            if not c.in_flight:
                consider(max(c.retry_at_ms, self._earliest_up_ms(now_ms)))
            consider(c.deadline_ms)
        consider(self._more_wakeup_ms(now_ms))
        return best

    # ---- calls (admin ops, list_offsets) ----

    def submit(self, request: dict, now_ms: int, *, route: tuple[str, int] | None = None,
               timeout_ms: int | None = None) -> Call:
        """Queue one request the core sends, routes and retries until `timeout_ms` (default
        request_timeout_ms). Poll until `call.done`."""
        if len(self._calls) >= self.max_pending_calls:
            raise RaftlogError(f"more than {self.max_pending_calls} calls pending")
        call = Call(request, route, now_ms + (timeout_ms or self.request_timeout_ms))
        if route is not None:
            self.want_topic(route[0])
        self._calls.append(call)
        return call

    def _prune_calls(self, calls: list[Call], now_ms: int) -> list[Call]:
        """The calls still to answer: done ones dropped, unsent ones past their deadline
        finished (timed out)."""
        keep = []
        for c in calls:
            if c.done:
                continue
            if not c.in_flight and now_ms >= c.deadline_ms:
                self._finish_call_timeout(c)
                continue
            keep.append(c)
        return keep

    def _poll_calls(self, now_ms: int, out: list) -> None:
        if not self._calls:
            return
        self._calls = self._prune_calls(self._calls, now_ms)
        for c in self._calls:
            if c.in_flight or c.retry_at_ms > now_ms:
                continue
            if c.route is None:
                broker = self.pick_broker(now_ms)
                if broker is None and (why := self.unreachable_reason()) is not None:
                    c.done, c.error = True, NoBrokerAvailableError(f"{c.request['op']}: {why}")
                    continue
            else:
                broker = self.metadata.leader(*c.route)
                if broker is not None and not self.broker_up(broker, now_ms):
                    broker = None
                if broker is None:
                    self._metadata_due = True
            if broker is None:
                continue
            c.in_flight = True
            c.attempts += 1
            c.sent_to = broker
            remaining = c.deadline_ms - now_ms
            req = dict(c.request)
            if "timeout_ms" not in req and req["op"] != "metadata":
                req["timeout_ms"] = min(remaining, self.request_timeout_ms)
            out.append(self._send(broker, req, "call", now_ms, c, min(remaining, self.request_timeout_ms)))

    def _finish_call_timeout(self, c: Call) -> None:
        c.done = True
        if c.error is None or c.maybe_applied:
            if c.maybe_applied:
                c.error = RequestTimedOutError(
                    f"{c.request['op']}: no answer before the deadline; it may have taken effect"
                )
            else:
                why = self.unreachable_reason()
                c.error = NoBrokerAvailableError(
                    f"{c.request['op']}: no broker answered before the deadline" + (f" ({why})" if why else "")
                )

    def _on_call_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        c: Call = p.ctx
        c.in_flight = False
        err = msg.get("error")
        if err is None:
            c.done, c.result, c.error = True, msg, None
            return
        exc = error_from_wire(err)
        self._note_routing_error(exc, c.route)
        self._retry_call(c, exc, now_ms)

    def _on_call_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        c: Call = p.ctx
        c.in_flight = False
        c.maybe_applied = True
        self._retry_call(c, exc, now_ms)

    def _retry_call(self, c: Call, exc: BaseException, now_ms: int) -> None:
        c.error = exc
        if not getattr(exc, "retriable", False):
            c.done = True
            return
        t = self.retry.next_attempt_ms(c.attempts, now_ms, c.deadline_ms)
        if t is None:
            c.done = True
            if c.maybe_applied and not isinstance(exc, UnknownOutcomeError):
                c.error = RequestTimedOutError(
                    f"{c.request['op']}: gave up after {c.attempts} attempts ({exc}); "
                    "an earlier attempt may have taken effect"
                )
            return
        c.retry_at_ms = t

    # ---- metadata ----

    def want_topic(self, topic: str) -> None:
        """Ask for `topic`'s metadata in the next refresh (now, if the cache lacks it)."""
        if topic not in self._wanted_topics:
            self._wanted_topics.add(topic)
            if self.metadata.partition_count(topic) is None:
                self._metadata_due = True

    def request_metadata_refresh(self) -> None:
        self._metadata_due = True

    def _poll_metadata(self, now_ms: int, out: list) -> None:
        if self.metadata.updated_ms is not None and (
            now_ms - self.metadata.updated_ms >= self.metadata_max_age_ms
        ):
            self._metadata_due = True
        if not self._metadata_due or self._metadata_in_flight or now_ms < self._metadata_retry_at_ms:
            return
        if not self._needs_metadata():
            self._metadata_due = False
            return
        broker = self.pick_broker(now_ms)
        if broker is None:
            return
        self._metadata_in_flight = True
        req = metadata_request(sorted(self._wanted_topics))
        out.append(self._send(broker, req, "metadata", now_ms, None, self.request_timeout_ms))

    def _needs_metadata(self) -> bool:
        # A core with no topics of interest still needs brokers to route anything.
        return bool(self._wanted_topics) or not self.metadata.brokers

    def _on_metadata_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        self._metadata_in_flight = False
        try:
            md = parse_metadata(msg)
        except RaftlogError as exc:
            self._metadata_failed(exc, now_ms)
            return
        self.metadata.update(md, now_ms)
        self._metadata_attempts = 0
        # Still due if a wanted topic has no leader for some partition: elections run.
        self._metadata_due = any(
            self.metadata.partition_count(t) is None
            or len(self.metadata.available_partitions(t)) < self.metadata.partition_count(t)
            for t in self._wanted_topics
        )
        if self._metadata_due:
            self._metadata_retry_at_ms = now_ms + self.retry.backoff(1)
        self._after_metadata(now_ms)

    def _on_metadata_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        self._metadata_in_flight = False
        self._metadata_failed(exc, now_ms)

    def _metadata_failed(self, exc: BaseException, now_ms: int) -> None:
        self._metadata_attempts += 1
        self._metadata_due = True
        self._metadata_retry_at_ms = now_ms + self.retry.backoff(self._metadata_attempts)
        log.info("metadata refresh failed (%s); retrying", exc)

    def _after_metadata(self, now_ms: int) -> None:
        """Hook for subclasses (e.g. fail sends to topics that do not exist)."""

    def _note_routing_error(self, exc: BaseException, route: tuple[str, int] | None) -> None:
        """Every answer that says "not served here" refreshes metadata before the retry, as
        Kafka's client does for NOT_LEADER, UNKNOWN_TOPIC_OR_PARTITION and
        KAFKA_STORAGE_ERROR (a replica offline or repairing damage: the partition's
        leadership is moving elsewhere), and CORRUPT_MESSAGE (read from another replica or
        after the leader changed), and NOT_COORDINATOR (a coordinator's partition moved)."""
        if isinstance(exc, NotLeaderError):
            if route is not None:
                self.metadata.apply_leader_hint(route[0], route[1], exc.leader_id, exc.leader)
            self._metadata_due = True
        elif isinstance(exc, (UnknownTopicOrPartitionError, KafkaStorageError, CorruptMessageError,
                              NotCoordinatorError)):
            self._metadata_due = True

    # ---- brokers ----

    def broker_up(self, broker_id: int, now_ms: int) -> bool:
        return self._down_until_ms.get(broker_id, 0) <= now_ms

    def _earliest_up_ms(self, now_ms: int) -> int:
        ids = list(self.metadata.brokers) or list(self.metadata.bootstrap)
        return min((self._down_until_ms.get(b, 0) for b in ids), default=now_ms)

    def pick_broker(self, now_ms: int) -> int | None:
        """A broker to ask (metadata, admin): a known unfenced broker not in reconnect
        backoff, rotating; the bootstrap list when no known broker is up."""
        for pool in (
            [b.id for b in self.metadata.brokers.values() if not b.fenced],
            list(self.metadata.bootstrap),
        ):
            up = [b for b in sorted(pool) if self.broker_up(b, now_ms)]
            if up:
                self._rr += 1
                return up[self._rr % len(up)]
        return None

    def _send(self, broker_id: int, req: dict, kind: str, now_ms: int, ctx: Any,
              timeout_ms: int) -> Send:
        rid = self._next_id
        self._next_id = rid + 1 if rid + 1 < _ID_LIMIT else 1
        req["v"] = PROTOCOL_VERSION
        req["id"] = rid
        if broker_id < 0:
            # A bootstrap address may be a wrong port: the blank line ends an HTTP request
            # head, so an HTTP server answers at once (and note_foreign says so); raftlog
            # nodes ignore the field (PROTOCOL.md).
            req["hello"] = HELLO
        # The answer may take the server-side timeout plus the trip: allow a little more.
        self._pending[rid] = Pending(broker_id, kind, now_ms + timeout_ms + 1000, ctx)
        return Send(broker_id, req)

    def _send_no_response(self, broker_id: int, req: dict) -> Send:
        rid = self._next_id
        self._next_id = rid + 1 if rid + 1 < _ID_LIMIT else 1
        req["v"] = PROTOCOL_VERSION
        req["id"] = rid
        return Send(broker_id, req)

    def _expire_pending(self, now_ms: int) -> None:
        expired = [rid for rid, p in self._pending.items() if p.deadline_ms <= now_ms]
        for rid in expired:
            p = self._pending.pop(rid)
            if p.broker_id not in self._closes:
                # A late answer can no longer be matched, and the connection may be dead:
                # start afresh, as Kafka's NetworkClient does on a request timeout.
                self._closes.append(p.broker_id)
            addr = self.address(p.broker_id)
            who = f"{addr[0]}:{addr[1]}" if addr is not None else "?"
            who = f"bootstrap address {who}" if p.broker_id < 0 else f"broker {p.broker_id} ({who})"
            exc = RequestTimedOutError(f"no answer from {who} within the request timeout")
            log.info("%s request %d: %s; the connection is closed", p.kind, rid, exc.message)
            self.FAILURE_HANDLERS[p.kind](self, p, exc, now_ms)

    # ---- subclass hooks ----

    def _poll_more(self, now_ms: int, out: list) -> None:
        pass

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        return None

    def _on_auth_failed(self, error: RaftlogError, now_ms: int) -> None:
        """Fail the subclass's own waiting work with an authentication error."""

    # ---- dispatch by request kind (subclasses extend both tables) ----

    RESPONSE_HANDLERS: ClassVar[dict[str, ResponseHandler]] = {
        "metadata": _on_metadata_response,
        "call": _on_call_response,
    }
    FAILURE_HANDLERS: ClassVar[dict[str, FailureHandler]] = {
        "metadata": _on_metadata_failure,
        "call": _on_call_failure,
    }

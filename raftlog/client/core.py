"""Sans-I/O client core: metadata cache, routing, retries, request builders/parsers, producer and consumer state.

Nothing here opens a socket, reads a clock or sleeps. A shell drives a core with four calls:

    actions = core.poll(now_ms)            # Send(broker_id, request) / Close(broker_id)
    core.on_response(broker_id, msg, now_ms)
    core.on_disconnect(broker_id, now_ms)  # connect failed or connection lost
    core.next_wakeup_ms(now_ms)            # when poll has something to do without I/O

and asks `core.address(broker_id)` where to connect. Request ids are unique across the core
(so per connection too); a response whose id is not pending (it came after its request timed
out) is dropped. Bootstrap addresses get negative broker ids (-1, -2, ...) as in Kafka.

Invariants:
* Every request has a deadline (`request_timeout_ms`); a pending request past it is treated
  as an unknown outcome and its connection is closed (a late answer cannot be matched).
* Every retry waits a bounded exponential backoff with jitter (`RetryPolicy`, injected
  Random) and stops at the operation's total deadline (`delivery_timeout_ms` for produce).
* A NOT_LEADER hint is applied to the cache at once (and a refresh is scheduled); an
  UNKNOWN_TOPIC_OR_PARTITION or a lost connection schedules a metadata refresh.
* The cache never moves a partition to an older leader epoch than the one it holds.
* Consumer: records below the fetch position are dropped (a fetch may begin mid-batch),
  control batches are skipped but advance the position, and an answer to a fetch sent before
  a seek is discarded.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from partition.batch import Compression, decode_batches_into, iter_headers
from raftlog.base.errors import (
    CorruptMessageError,
    KafkaStorageError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
    UnknownOutcomeError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.client.accumulator import FULL, NEW_BATCH, Accumulator, ProducerBatch
from raftlog.client.errors import (
    ConnectionLostError,
    DeliveryTimedOutError,
    NoBrokerAvailableError,
)
from raftlog.client.partitioner import StickyPartitioner, partition_for_key

__all__ = [
    "PROTOCOL_VERSION",
    "ACKS_ALL",
    "Send",
    "Close",
    "BrokerInfo",
    "PartitionInfo",
    "TopicInfo",
    "ClusterMetadata",
    "ClusterStatus",
    "ConsumerRecord",
    "parse_address",
    "MetadataCache",
    "RetryPolicy",
    "Call",
    "ClientCore",
    "ProducerCore",
    "ConsumerCore",
    "AdminCore",
    "metadata_request",
    "produce_request",
    "fetch_request",
    "list_offsets_request",
    "init_producer_id_request",
    "create_topic_request",
    "delete_topic_request",
    "alter_configs_request",
    "cluster_status_request",
    "parse_metadata",
    "parse_cluster_status",
    "check_response",
]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
ACKS_ALL = -1
EARLIEST = -2  # list_offsets timestamp specs (PROTOCOL.md)
LATEST = -1
_ID_LIMIT = 1 << 31


# ---------------------------------------------------------------- actions and plain data


class Send(NamedTuple):
    """Shell: send `request` (a full frame map, id included) on the connection to `broker_id`."""

    broker_id: int
    request: dict


class Close(NamedTuple):
    """Shell: close the connection to `broker_id` (then report it with on_disconnect)."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int | None  # None: no leader right now
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    preferred_leader: int | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool = False
    configs: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int | None
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]
    topic_errors: dict[str, RaftlogError]  # requested topics the broker answered with an error


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str | None
    controller_id: int | None
    controller_epoch: int | None
    commit_index: int | None
    voters: tuple[dict, ...]
    brokers: tuple[dict, ...]


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port). Raises ValueError on anything else."""
    if not isinstance(address, str):
        raise ValueError(f"address must be 'host:port', got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address must be 'host:port', got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


# ---------------------------------------------------------------- request builders


def metadata_request(topics: Iterable[str] | None, internal: bool = False) -> dict:
    req: dict[str, Any] = {"op": "metadata", "topics": None if topics is None else sorted(topics)}
    if internal:
        req["internal"] = True
    return req


def produce_request(acks: int, timeout_ms: int, batches: Iterable[ProducerBatch]) -> dict:
    return {
        "op": "produce",
        "acks": acks,
        "timeout_ms": timeout_ms,
        "partitions": [
            {"topic": b.topic, "partition": b.partition, "records": b.payload} for b in batches
        ],
    }


def fetch_request(
    max_wait_ms: int, min_bytes: int, max_bytes: int, partitions: Iterable[tuple[str, int, int, int]]
) -> dict:
    """`partitions`: (topic, partition, fetch_offset, max_bytes) tuples."""
    return {
        "op": "fetch",
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "partitions": [
            {"topic": t, "partition": p, "fetch_offset": o, "max_bytes": m}
            for t, p, o, m in partitions
        ],
    }


def list_offsets_request(partitions: Iterable[tuple[str, int, int]]) -> dict:
    """`partitions`: (topic, partition, timestamp) with -2 earliest, -1 latest, else ms."""
    return {
        "op": "list_offsets",
        "partitions": [{"topic": t, "partition": p, "timestamp": ts} for t, p, ts in partitions],
    }


def init_producer_id_request() -> dict:
    return {"op": "init_producer_id"}


def create_topic_request(
    name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None = None
) -> dict:
    return {
        "op": "create_topic",
        "name": name,
        "partitions": partitions,
        "replication_factor": replication_factor,
        "configs": {str(k): str(v) for k, v in (configs or {}).items()},
    }


def delete_topic_request(name: str) -> dict:
    return {"op": "delete_topic", "name": name}


def alter_configs_request(
    name: str, set_configs: dict[str, str] | None = None, delete: Iterable[str] = ()
) -> dict:
    return {
        "op": "alter_configs",
        "name": name,
        "set": {str(k): str(v) for k, v in (set_configs or {}).items()},
        "delete": [str(k) for k in delete],
    }


def cluster_status_request() -> dict:
    return {"op": "cluster_status"}


# ---------------------------------------------------------------- response parsers


def check_response(msg: Any) -> dict:
    """The response map if it is ok; raises the server's error (error_from_wire) if not.

    A response that is not a map at all raises UnknownServerError.
    """
    if not isinstance(msg, dict):
        raise UnknownServerError(f"response is not a map: {msg!r:.200}")
    err = msg.get("error")
    if err is not None:
        raise error_from_wire(err)
    return msg


def _leader_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and v >= 0 else None


def _parse_partitions(topic: str, parts: Iterable[dict]) -> tuple[PartitionInfo, ...]:
    out = [
        PartitionInfo(
            topic=topic,
            partition=p["partition"],
            leader=_leader_or_none(p.get("leader")),
            leader_epoch=p.get("leader_epoch", -1) if p.get("leader_epoch") is not None else -1,
            replicas=tuple(p.get("replicas") or ()),
            preferred_leader=_leader_or_none(p.get("preferred_leader")),
        )
        for p in parts
    ]
    out.sort(key=lambda p: p.partition)
    return tuple(out)


def parse_topic(t: dict) -> TopicInfo:
    return TopicInfo(
        name=t["name"],
        partitions=_parse_partitions(t["name"], t.get("partitions") or ()),
        internal=bool(t.get("internal", False)),
        configs=dict(t.get("configs") or {}),
    )


def parse_metadata(msg: dict) -> ClusterMetadata:
    """Parse an ok `metadata` response. Raises the server error if it is not ok."""
    msg = check_response(msg)
    try:
        brokers = {
            b["id"]: BrokerInfo(b["id"], b["host"], b["port"], bool(b.get("fenced", False)))
            for b in msg.get("brokers") or ()
        }
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, RaftlogError] = {}
        for t in msg.get("topics") or ():
            if t.get("error") is not None:
                e = t["error"]
                errors[t["name"]] = error_from_wire(e if isinstance(e, dict) else {"code": e})
            else:
                topics[t["name"]] = parse_topic(t)
    except (KeyError, TypeError) as exc:
        raise UnknownServerError(f"malformed metadata response: {exc!r}") from None
    return ClusterMetadata(
        cluster_id=msg.get("cluster_id"),
        controller_id=_leader_or_none(msg.get("controller_id")),
        brokers=brokers,
        topics=topics,
        topic_errors=errors,
    )


def parse_cluster_status(msg: dict) -> ClusterStatus:
    msg = check_response(msg)
    return ClusterStatus(
        cluster_id=msg.get("cluster_id"),
        controller_id=msg.get("controller_id"),
        controller_epoch=msg.get("controller_epoch"),
        commit_index=msg.get("commit_index"),
        voters=tuple(msg.get("voters") or ()),
        brokers=tuple(msg.get("brokers") or ()),
    )


# ---------------------------------------------------------------- metadata cache


class MetadataCache:
    """Topics → partitions → leader, brokers → address. Pure; the core owns one.

    `leader(topic, partition)` is on the producer's drain path: two dict/list lookups.
    """

    def __init__(self, bootstrap: Iterable[str]):
        self.bootstrap: dict[int, tuple[str, int]] = {}
        for i, addr in enumerate(bootstrap):
            self.bootstrap[-1 - i] = parse_address(addr)
        if not self.bootstrap:
            raise ValueError("bootstrap needs at least one 'host:port'")
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_errors: dict[str, RaftlogError] = {}
        self.cluster_id: str | None = None
        self.controller_id: int | None = None
        self._leaders: dict[str, list[int | None]] = {}
        self._epochs: dict[str, list[int]] = {}
        self._available: dict[str, tuple[int, ...]] = {}
        self.updated_ms: int | None = None

    def address(self, broker_id: int) -> tuple[str, int] | None:
        b = self.brokers.get(broker_id)
        if b is not None:
            return b.host, b.port
        return self.bootstrap.get(broker_id)

    def update(self, md: ClusterMetadata, now_ms: int) -> None:
        """Merge a metadata answer: brokers replaced, answered topics replaced (a topic the
        broker says does not exist is dropped), a partition's older leader epoch ignored."""
        self.cluster_id = md.cluster_id
        self.controller_id = md.controller_id
        if md.brokers:
            self.brokers = dict(md.brokers)
        for name, err in md.topic_errors.items():
            self._drop(name)
            self.topic_errors[name] = err
        for name, t in md.topics.items():
            self.topic_errors.pop(name, None)
            old_epochs = self._epochs.get(name)
            leaders: list[int | None] = [None] * len(t.partitions)
            epochs = [-1] * len(t.partitions)
            for p in t.partitions:
                if not 0 <= p.partition < len(t.partitions):
                    continue  # partitions must be 0..n-1; ignore a stray entry
                if old_epochs is not None and p.partition < len(old_epochs) and (
                    old_epochs[p.partition] > p.leader_epoch
                ):
                    # Stale answer (a broker behind on metadata): keep what we know.
                    leaders[p.partition] = self._leaders[name][p.partition]
                    epochs[p.partition] = old_epochs[p.partition]
                else:
                    leaders[p.partition] = p.leader
                    epochs[p.partition] = p.leader_epoch
            self.topics[name] = t
            self._leaders[name] = leaders
            self._epochs[name] = epochs
            self._available[name] = tuple(i for i, ld in enumerate(leaders) if ld is not None)
        self.updated_ms = now_ms

    def _drop(self, name: str) -> None:
        self.topics.pop(name, None)
        self._leaders.pop(name, None)
        self._epochs.pop(name, None)
        self._available.pop(name, None)

    def partition_count(self, topic: str) -> int | None:
        leaders = self._leaders.get(topic)
        return None if leaders is None else len(leaders)

    def leader(self, topic: str, partition: int) -> int | None:
        leaders = self._leaders.get(topic)
        if leaders is None or partition >= len(leaders):
            return None
        return leaders[partition]

    def leader_epoch(self, topic: str, partition: int) -> int:
        epochs = self._epochs.get(topic)
        return -1 if epochs is None or partition >= len(epochs) else epochs[partition]

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        return self._available.get(topic, ())

    def apply_leader_hint(
        self, topic: str, partition: int, leader_id: int | None, leader: str | None
    ) -> bool:
        """Use a NOT_LEADER answer's hint now. Returns True if the cache changed."""
        leaders = self._leaders.get(topic)
        if leaders is None or not 0 <= partition < len(leaders):
            return False
        if isinstance(leader_id, int) and leader_id >= 0:
            if leader_id not in self.brokers and isinstance(leader, str):
                try:
                    host, port = parse_address(leader)
                except ValueError:
                    host = None
                if host is not None:
                    self.brokers[leader_id] = BrokerInfo(leader_id, host, port)
            if leader_id not in self.brokers:
                leaders[partition] = None
            else:
                leaders[partition] = leader_id
        else:
            leaders[partition] = None  # an election is running: wait for a refresh
        self._available[topic] = tuple(i for i, ld in enumerate(leaders) if ld is not None)
        return True

    def invalidate_broker(self, broker_id: int) -> None:
        """Forget `broker_id` as a leader (its connection died); a refresh will say more."""
        for topic, leaders in self._leaders.items():
            if broker_id in leaders:
                for i, ld in enumerate(leaders):
                    if ld == broker_id:
                        leaders[i] = None
                self._available[topic] = tuple(i for i, ld in enumerate(leaders) if ld is not None)


# ---------------------------------------------------------------- retry policy


class RetryPolicy:
    """Bounded exponential backoff with jitter, and a total deadline.

    Attempt n (1-based) waits min(backoff_max_ms, backoff_ms * 2**(n-1)) scaled by a
    uniform factor in [1 - jitter, 1 + jitter], then capped at backoff_max_ms again, so no
    wait ever exceeds backoff_max_ms. Randomness comes from the injected Random only.
    """

    def __init__(
        self, rng: random.Random, backoff_ms: int = 100, backoff_max_ms: int = 1000, jitter: float = 0.2
    ):
        if backoff_ms <= 0 or backoff_max_ms < backoff_ms or not 0 <= jitter < 1:
            raise ValueError("need 0 < backoff_ms <= backoff_max_ms and 0 <= jitter < 1")
        self.rng = rng
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.jitter = jitter

    def backoff(self, attempt: int) -> int:
        base = min(self.backoff_max_ms, self.backoff_ms * (1 << min(max(attempt, 1) - 1, 30)))
        scaled = base * (1 + self.jitter * (2 * self.rng.random() - 1))
        return max(1, min(self.backoff_max_ms, int(scaled)))

    def next_attempt_ms(self, attempt: int, now_ms: int, deadline_ms: int) -> int | None:
        """When to try again after `attempt` failed, or None when that passes the deadline."""
        t = now_ms + self.backoff(attempt)
        return t if t < deadline_ms else None


# ---------------------------------------------------------------- generic request engine


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


class _Pending:
    __slots__ = ("broker_id", "kind", "deadline_ms", "ctx")

    def __init__(self, broker_id: int, kind: str, deadline_ms: int, ctx: Any):
        self.broker_id = broker_id
        self.kind = kind
        self.deadline_ms = deadline_ms
        self.ctx = ctx


class ClientCore:
    """Request ids, deadlines, broker choice and reconnect backoff, metadata refresh, calls.

    Subclasses add their own request kinds via `_on_<kind>_response/_failure` methods.
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
        self._pending: dict[int, _Pending] = {}
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
                # The server refused a frame it could not read and will close: say why.
                log.warning("broker %s refused a frame: %s", broker_id, error_from_wire(msg["error"]))
            return  # late answer to a request we gave up on
        self._failures.pop(broker_id, None)
        self._down_until_ms.pop(broker_id, None)
        getattr(self, f"_on_{p.kind}_response")(p, msg, now_ms)

    def on_disconnect(self, broker_id: int, now_ms: int) -> None:
        """The connection to broker_id failed or closed: fail its pending requests (unknown
        outcome), back off reconnecting, refresh metadata."""
        n = self._failures.get(broker_id, 0) + 1
        self._failures[broker_id] = n
        self._down_until_ms[broker_id] = now_ms + self.reconnect.backoff(n)
        lost = [rid for rid, p in self._pending.items() if p.broker_id == broker_id]
        for rid in lost:
            p = self._pending.pop(rid)
            exc = ConnectionLostError(f"connection to broker {broker_id} lost with the request in flight")
            getattr(self, f"_on_{p.kind}_failure")(p, exc, now_ms)
        if broker_id >= 0:
            self.metadata.invalidate_broker(broker_id)
        self._metadata_due = True

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

    def _poll_calls(self, now_ms: int, out: list) -> None:
        if not self._calls:
            return
        keep = []
        for c in self._calls:
            if c.done:
                continue
            if not c.in_flight and now_ms >= c.deadline_ms:
                self._finish_call_timeout(c)
                continue
            keep.append(c)
            if c.in_flight or c.retry_at_ms > now_ms:
                continue
            if c.route is None:
                broker = self.pick_broker(now_ms)
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
        self._calls = keep

    def _finish_call_timeout(self, c: Call) -> None:
        c.done = True
        if c.error is None or c.maybe_applied:
            if c.maybe_applied:
                c.error = RequestTimedOutError(
                    f"{c.request['op']}: no answer before the deadline; it may have taken effect"
                )
            else:
                c.error = NoBrokerAvailableError(
                    f"{c.request['op']}: no broker answered before the deadline"
                )

    def _on_call_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
        c: Call = p.ctx
        c.in_flight = False
        err = msg.get("error")
        if err is None:
            c.done, c.result, c.error = True, msg, None
            return
        exc = error_from_wire(err)
        self._note_routing_error(exc, c.route)
        self._retry_call(c, exc, now_ms)

    def _on_call_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
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

    def _on_metadata_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
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

    def _on_metadata_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
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
        after the leader changed)."""
        if isinstance(exc, NotLeaderError):
            if route is not None:
                self.metadata.apply_leader_hint(route[0], route[1], exc.leader_id, exc.leader)
            self._metadata_due = True
        elif isinstance(exc, (UnknownTopicOrPartitionError, KafkaStorageError, CorruptMessageError)):
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
        # The answer may take the server-side timeout plus the trip: allow a little more.
        self._pending[rid] = _Pending(broker_id, kind, now_ms + timeout_ms + 1000, ctx)
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
            exc = RequestTimedOutError(f"no answer from broker {p.broker_id} within the request timeout")
            getattr(self, f"_on_{p.kind}_failure")(p, exc, now_ms)

    # ---- subclass hooks ----

    def _poll_more(self, now_ms: int, out: list) -> None:
        pass

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        return None


# ---------------------------------------------------------------- producer


class ProducerCore(ClientCore):
    """Producer decisions: partitioning, batching (Accumulator), idempotence, routing, retries.

    `send` is the hot path: it resolves the partition and appends; everything else happens
    in `poll`. Results go to each batch's future (`set_result(base_offset)` /
    `set_exception(err)`); `record_result(batch, index)` turns that into (partition, offset).
    """

    def __init__(
        self,
        bootstrap: Iterable[str] | str,
        *,
        rng: random.Random,
        future_factory: Callable[[], Any],
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_bytes: int | None = None,
        buffer_bytes: int | None = None,
        max_request_bytes: int | None = None,
        compression: Compression | int | str | None = None,
        enable_idempotence: bool = True,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight_per_partition: int = 5,
        **kw: Any,
    ):
        super().__init__(bootstrap, rng=rng, request_timeout_ms=request_timeout_ms, **kw)
        acks_n = {"all": ACKS_ALL, -1: ACKS_ALL, 0: 0, 1: 1, "0": 0, "1": 1, "-1": ACKS_ALL}.get(acks)
        if acks_n is None:
            raise ValueError(f"acks must be 0, 1 or 'all' (-1), got {acks!r}")
        if enable_idempotence and acks_n != ACKS_ALL:
            # Kafka's rule: idempotence needs acks=all (a duplicate check on a write that a
            # new leader may not have is no guarantee).
            raise ValueError("enable_idempotence=True needs acks='all'")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be >= linger_ms + request_timeout_ms (as in Kafka)")
        self.acks = acks_n
        self.idempotent = enable_idempotence
        self.delivery_timeout_ms = delivery_timeout_ms
        kwargs: dict[str, Any] = {}
        if batch_bytes is not None:
            kwargs["batch_bytes"] = batch_bytes
        if buffer_bytes is not None:
            kwargs["buffer_bytes"] = buffer_bytes
        if max_request_bytes is not None:
            kwargs["max_request_bytes"] = max_request_bytes
        self.accumulator = Accumulator(
            future_factory=future_factory,
            linger_ms=linger_ms,
            compression=_compression(compression),
            idempotent=enable_idempotence,
            max_in_flight_per_partition=max_in_flight_per_partition,
            **kwargs,
        )
        self.sticky = StickyPartitioner(rng)
        self._sticky_batch: dict[str, ProducerBatch] = {}  # topic -> batch of the last keyless send
        self._pid_in_flight = False
        self._pid_attempts = 0
        self._pid_retry_at_ms = 0
        self._pid_needed = enable_idempotence

    # ---- hot path ----

    def partition_count(self, topic: str) -> int | None:
        """Partitions of `topic` if its metadata is known; else None (and a refresh is asked)."""
        n = self.metadata.partition_count(topic)
        if n is None:
            self.want_topic(topic)
            self._metadata_due = True
        return n

    def topic_error(self, topic: str) -> RaftlogError | None:
        """The error the last metadata answer gave for `topic` (e.g. it does not exist)."""
        return self.metadata.topic_errors.get(topic)

    def send_sticky(self, topic: str, value, timestamp_ms: int) -> ProducerBatch | None:
        """The hot path of `send` for a keyless, headerless record with no partition given:
        append it to the batch the last such record of `topic` went to and return that
        batch, or None when that batch cannot take it (none yet, full, sent, buffer used up,
        or the topic's metadata is gone): then call `send`. Never opens a batch, so the
        returned batch already held records and its linger deadline is not new.
        """
        last = self._sticky_batch.get(topic)
        if last is not None and topic in self.metadata._leaders and (
            self.accumulator.append_to(last, value, timestamp_ms)
        ):
            return last
        return None

    def send(self, topic: str, value, key, headers, partition: int | None, timestamp_ms: int,
             now_ms: int, num_partitions: int):
        """Append one record; returns its ProducerBatch (index = record_count - 1) or FULL.

        `num_partitions` is `partition_count(topic)`, which the shell checked is not None.
        Raises ValueError for a partition out of range, RecordTooLarge for a huge record.
        """
        if partition is None:
            if key is None:
                if not headers:
                    # Sticky fast path: the batch the last keyless record went to, as long
                    # as it takes more (most records of a batch skip partitioner and queues).
                    last = self._sticky_batch.get(topic)
                    if last is not None and self.accumulator.append_to(last, value, timestamp_ms):
                        return last
                available = self.metadata.available_partitions(topic)
                partition = self.sticky.partition(topic, num_partitions, available)
                b = self.accumulator.append(topic, partition, value, key, headers, timestamp_ms,
                                            now_ms, True)
                if b is not NEW_BATCH:
                    if b is not FULL:
                        self._sticky_batch[topic] = b
                    return b
                partition = self.sticky.on_new_batch(topic, partition, num_partitions, available)
                b = self.accumulator.append(topic, partition, value, key, headers, timestamp_ms,
                                            now_ms)
                if b is not FULL:
                    self._sticky_batch[topic] = b
                return b
            else:
                partition = partition_for_key(key, num_partitions)
        elif not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} out of range: {topic} has {num_partitions}")
        return self.accumulator.append(topic, partition, value, key, headers, timestamp_ms, now_ms)

    @staticmethod
    def record_result(batch: ProducerBatch, index: int) -> tuple[int, int]:
        """(partition, offset) of record `index` of an acknowledged batch (offset -1 if unknown)."""
        base = batch.base_offset
        return batch.partition, (base + index if base >= 0 else -1)

    # ---- flush / close ----

    def begin_flush(self) -> None:
        self.accumulator.begin_flush()

    def end_flush(self) -> None:
        self.accumulator.end_flush()

    def has_pending(self) -> bool:
        return self.accumulator.has_pending()

    def abort(self, error: BaseException) -> None:
        """Fail every batch not yet in flight with `error` (close without flush)."""
        for b in self.accumulator.abort_all():
            b.future.set_exception(error)

    # ---- poll ----

    def _needs_metadata(self) -> bool:
        return True

    def _poll_more(self, now_ms: int, out: list) -> None:
        acc = self.accumulator
        for b in acc.expire(now_ms, self.delivery_timeout_ms):
            b.future.set_exception(self._final_error(b, None))
        if self._pid_needed:
            if not self._pid_in_flight and now_ms >= self._pid_retry_at_ms:
                broker = self.pick_broker(now_ms)
                if broker is not None:
                    self._pid_in_flight = True
                    out.append(self._send(broker, init_producer_id_request(), "pid", now_ms, None,
                                          self.request_timeout_ms))
            return  # nothing is sealed without a producer id: sequences need it
        for pending in acc.pending_partitions():
            if self.metadata.leader(*pending) is None:
                self._metadata_due = True
                break
        ready = acc.drain(now_ms, self.metadata.leader, lambda b: self.broker_up(b, now_ms))
        for broker_id, batches in ready.items():
            remaining = min(self.request_timeout_ms,
                            max(1, min(b.created_ms + self.delivery_timeout_ms - now_ms for b in batches)))
            req = produce_request(self.acks, remaining, batches)
            if self.acks == 0:
                out.append(self._send_no_response(broker_id, req))
                for b in batches:
                    acc.complete(b, -1)
            else:
                out.append(self._send(broker_id, req, "produce", now_ms, batches, remaining))

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        if self._pid_needed:
            return None if self._pid_in_flight else self._pid_retry_at_ms
        t = self.accumulator.next_ready_ms(now_ms)
        oldest = self._oldest_waiting_ms()
        if oldest is not None:
            exp = oldest + self.delivery_timeout_ms
            t = exp if t is None else min(t, exp)
        return t

    def _oldest_waiting_ms(self) -> int | None:
        best = None
        for parts in self.accumulator._queues.values():
            for q in parts.values():
                if q.waiting and (best is None or q.waiting[0].created_ms < best):
                    best = q.waiting[0].created_ms
        return best

    # ---- producer id ----

    def _on_pid_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
        self._pid_in_flight = False
        try:
            msg = check_response(msg)
            pid, epoch = msg["producer_id"], msg["producer_epoch"]
            if not isinstance(pid, int) or not isinstance(epoch, int):
                raise KeyError("producer_id")
        except (RaftlogError, KeyError) as exc:
            self._pid_attempts += 1
            self._pid_retry_at_ms = now_ms + self.retry.backoff(self._pid_attempts)
            log.info("init_producer_id failed (%s); retrying", exc)
            return
        self._pid_needed = False
        self._pid_attempts = 0
        self.accumulator.set_producer(pid, epoch)

    def _on_pid_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
        self._pid_in_flight = False
        self._pid_attempts += 1
        self._pid_retry_at_ms = now_ms + self.retry.backoff(self._pid_attempts)

    def _reset_producer_id(self) -> None:
        """Sequence state is broken on the broker: get a new producer id, restart sequences
        (Kafka bumps the epoch; a fresh id is the same for a non-transactional producer)."""
        if self.idempotent:
            self._pid_needed = True

    # ---- produce answers ----

    def _on_produce_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
        batches: list[ProducerBatch] = p.ctx
        err = msg.get("error")
        if err is not None:
            exc = error_from_wire(err)
            for b in batches:
                self._batch_error(b, exc, now_ms)
            return
        results: dict[tuple[str, int], dict] = {}
        for r in msg.get("partitions") or ():
            if isinstance(r, dict):
                results[(r.get("topic"), r.get("partition"))] = r
        for b in batches:
            r = results.get((b.topic, b.partition))
            if r is None:
                self._batch_error(b, UnknownServerError("produce response lacks this partition"), now_ms)
            elif r.get("error") is not None:
                self._batch_error(b, error_from_wire(r["error"]), now_ms)
            else:
                base = r.get("base_offset")
                self.accumulator.complete(b, base if isinstance(base, int) else -1)

    def _on_produce_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
        for b in p.ctx:
            self._batch_error(b, exc, now_ms)

    def _batch_error(self, b: ProducerBatch, exc: RaftlogError | BaseException, now_ms: int) -> None:
        acc = self.accumulator
        if b.done or not b.in_flight:
            return
        b.last_error = exc
        code = getattr(exc, "code", None)
        if isinstance(exc, UnknownOutcomeError):
            b.maybe_written = True
        if code == "DUPLICATE_SEQUENCE_NUMBER":
            acc.complete(b, -1)  # already written by an earlier attempt; its offset is lost
            return
        if code == "OUT_OF_ORDER_SEQUENCE_NUMBER" and acc.has_earlier_unacked(b):
            # An earlier batch of this partition failed first; this one is retried after it
            # (Kafka's Sender does the same), immediately, since nothing is wrong with it.
            acc.retry(b, now_ms)
            return
        if code in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_EPOCH"):
            self._reset_producer_id()
            acc.fail(b, exc)
            return
        self._note_routing_error(exc, (b.topic, b.partition))
        if getattr(exc, "retriable", False):
            deadline = b.created_ms + self.delivery_timeout_ms
            t = self.retry.next_attempt_ms(b.attempts, now_ms, deadline)
            if t is not None:
                acc.retry(b, t)
                return
        acc.fail(b, self._final_error(b, exc))

    @staticmethod
    def _final_error(b: ProducerBatch, exc: BaseException | None) -> BaseException:
        if b.maybe_written:
            if isinstance(exc, UnknownOutcomeError):
                return exc
            return RequestTimedOutError(
                f"{b.topic}-{b.partition}: gave up after {b.attempts} attempts "
                f"(last: {exc or b.last_error}); an earlier attempt may have been written"
            )
        if exc is None:
            if b.attempts:
                return b.last_error or DeliveryTimedOutError(f"{b.topic}-{b.partition}: delivery timed out")
            return DeliveryTimedOutError(
                f"{b.topic}-{b.partition}: {b.record_count} record(s) not sent within delivery_timeout_ms"
            )
        return exc

    def _after_metadata(self, now_ms: int) -> None:
        # Records for a topic that does not exist cannot wait forever: fail them now.
        errs = self.metadata.topic_errors
        if not errs:
            return
        for topic, parts in list(self.accumulator._queues.items()):
            err = errs.get(topic)
            if err is None:
                continue
            for q in parts.values():
                for b in list(q.waiting):
                    if not b.attempts:
                        self.accumulator.fail(b, err)


def _compression(c: Compression | int | str | None) -> Compression:
    if c is None:
        return Compression.NONE
    if isinstance(c, str):
        try:
            return Compression[c.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {c!r}") from None
    return Compression(c)


# ---------------------------------------------------------------- consumer


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
        **kw: Any,
    ):
        super().__init__(bootstrap, rng=rng, **kw)
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
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

    def high_watermark(self, topic: str, partition: int) -> int:
        return self._state(topic, partition).high_watermark

    def _default_reset(self) -> int:
        if self.auto_offset_reset == "earliest":
            return EARLIEST
        if self.auto_offset_reset == "latest":
            return LATEST
        raise OffsetOutOfRangeError("no position and auto_offset_reset='none'")

    # ---- records ----

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

    def raise_pending_error(self) -> None:
        """Raise the oldest fetch/reset error not yet handed to the user, if any."""
        if self._errors:
            raise self._errors.pop(0)

    def buffered_count(self) -> int:
        return sum(len(s.buf) - s.buf_i for s in self._assigned.values())

    def has_records(self) -> bool:
        return bool(self._errors) or any(s.buf_i < len(s.buf) for s in self._assigned.values())

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
            ctx = [(s, s.version, s.fetch_position) for s in states]
            out.append(self._send(broker, req, "fetch", now_ms, ctx,
                                  self.request_timeout_ms + self.fetch_wait_ms))

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        ts = [s.reset_retry_at_ms for s in self._assigned.values()
              if s.reset is not None and not s.reset_in_flight]
        ts += [s.fetch_retry_at_ms for s in self._assigned.values() if s.fetch_retry_at_ms > now_ms]
        return min(ts) if ts else None

    def _on_reset_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
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

    def _on_reset_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
        for s, _version in p.ctx:
            s.reset_in_flight = False
            s.reset_attempts += 1
            s.reset_retry_at_ms = now_ms + self.retry.backoff(s.reset_attempts)

    def _on_fetch_response(self, p: _Pending, msg: dict, now_ms: int) -> None:
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

    def _on_fetch_failure(self, p: _Pending, exc: BaseException, now_ms: int) -> None:
        self._fetching.discard(p.broker_id)


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


# ---------------------------------------------------------------- admin


class AdminCore(ClientCore):
    """Admin ops are Calls to any broker (the node forwards them to the controller).

    An admin op (a call with no route) answered UNKNOWN_TOPIC_OR_PARTITION fails at once:
    the controller that answered it is the authority on which topics exist, so waiting for
    metadata to catch up (why produce retries it) only delays the answer to the deadline.
    Routed calls (list_offsets, fetch to a partition's leader) keep retrying it, since the
    leader's metadata may lag a create made a moment ago.
    """

    def _needs_metadata(self) -> bool:
        return bool(self._wanted_topics)

    def _retry_call(self, c: Call, exc: BaseException, now_ms: int) -> None:
        if c.route is None and isinstance(exc, UnknownTopicOrPartitionError):
            c.error = exc
            c.done = True
            return
        super()._retry_call(c, exc, now_ms)


def parse_list_offsets(msg: dict) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (offset, timestamp)}; raises the first partition error."""
    msg = check_response(msg)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for r in msg.get("partitions") or ():
        if r.get("error") is not None:
            raise error_from_wire(r["error"])
        out[(r["topic"], r["partition"])] = (r.get("offset", -1), r.get("timestamp", -1))
    return out


__all__ += ["parse_list_offsets", "parse_topic", "append_fetched", "EARLIEST", "LATEST"]

"""The console's shell toward the cluster: pooled blocking clients and the reads and
changes the pages need. Every function here blocks; views.py runs them on worker threads
(`trio.to_thread.run_sync` under one CapacityLimiter), never on the trio loop.

    pool = ClientPool(bootstrap, request_timeout_ms=5000)
    with pool.lease(config) as cs:           # one user's clients (GroupAdmin + its Admin)
        overview = read_overview(cs)
        bounds = partition_bounds(cs, [("demo", 0), ...])

Clients: `raftlog.client.blocking` is not thread-safe, so a ClientSet is used by one thread
at a time: the pool keeps up to `per_user` sets per client config (one config per logged-in
user, or one shared anonymous config on a plaintext cluster) and at most `max_users` configs
(the least recently used one is closed first). A lease waits up to `lease_timeout_s` for a
free set, then fails with RequestTimedOutError ("the console is busy").

Reads that cover many partitions send one request per leader broker (list_offsets, fetch),
so a page costs a few round trips whatever the partition count; a partition without a live
leader is not asked at all (it would only wait out the timeout) and shows as offline.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from partition.batch import BatchBuilder
from raftlog.client.consumer import ConsumerRecord, append_fetched
from raftlog.client.request import ClusterStatus, TopicInfo, fetch_request, list_offsets_request
from raftlog.client.group_admin import GroupAdmin
from raftlog.client.partitioner import partition_for_key
from raftlog.console.auth import client_options, config_key
from raftlog.console.errors import (
    BadInputError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)

__all__ = [
    "ClientSet",
    "ClientPool",
    "Overview",
    "PartitionRow",
    "read_overview",
    "classify_partitions",
    "partition_bounds",
    "offsets_for_timestamp",
    "fetch_positions",
    "read_record",
    "produce_one",
    "describe_configs",
    "fetch_node_http",
    "node_health",
    "nodes_health",
]

log = logging.getLogger(__name__)

FETCH_PARTITION_BYTES: Final = 1 << 20
FETCH_TOTAL_BYTES: Final = 8 << 20
NODE_HTTP_TIMEOUT_S: Final = 1.5
MAX_NODE_HTTP_BYTES: Final = 8 << 20


class ClientSet:
    """One user's clients: a GroupAdmin (groups) and its Admin (everything else)."""

    def __init__(self, bootstrap: list[str], options: Mapping[str, Any], request_timeout_ms: int) -> None:
        # options: {"security": Kafka's client keys} on a secure cluster (the client does TLS
        # and the SASL login; a bad CA file or a refused login raises a RaftlogError).
        self.groups = GroupAdmin(bootstrap, request_timeout_ms=request_timeout_ms, **dict(options))
        self.admin = self.groups.admin
        self.bootstrap = bootstrap
        self.options = dict(options)
        self.request_timeout_ms = request_timeout_ms

    def close(self) -> None:
        self.groups.close()


class ClientPool:
    """ClientSets per client config, leased to one thread at a time. Thread-safe."""

    def __init__(self, bootstrap: list[str], *, request_timeout_ms: int = 5000, per_user: int = 3,
                 max_users: int = 64, lease_timeout_s: float = 10.0) -> None:
        self.bootstrap = list(bootstrap)
        self.request_timeout_ms = request_timeout_ms
        self.per_user = per_user
        self.max_users = max_users
        self.lease_timeout_s = lease_timeout_s
        self._lock = threading.Condition()
        self._idle: OrderedDict[tuple, list[ClientSet]] = OrderedDict()
        self._count: dict[tuple, int] = {}
        self._closed = False

    @contextlib.contextmanager
    def lease(self, config: Mapping[str, str]) -> Iterator[ClientSet]:
        key = config_key(config)
        cs = self._take(key, config)
        ok = False
        try:
            yield cs
            ok = True
        finally:
            self._give(key, cs, ok)

    def _take(self, key: tuple, config: Mapping[str, str]) -> ClientSet:
        deadline = time.monotonic() + self.lease_timeout_s
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError("client pool closed")
                idle = self._idle.get(key)
                if idle:
                    self._idle.move_to_end(key)
                    return idle.pop()
                if self._count.get(key, 0) < self.per_user:
                    self._count[key] = self._count.get(key, 0) + 1
                    self._evict_users()
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError("the console is busy with this user's other requests; try again")
                self._lock.wait(left)
        try:
            return ClientSet(self.bootstrap, client_options(config), self.request_timeout_ms)
        except BaseException:
            with self._lock:
                self._count[key] -= 1
                self._lock.notify_all()
            raise

    def _give(self, key: tuple, cs: ClientSet, ok: bool) -> None:
        with self._lock:
            if ok and not self._closed:
                self._idle.setdefault(key, []).append(cs)
                self._idle.move_to_end(key)
                cs = None  # type: ignore[assignment]
            else:
                self._count[key] -= 1
            self._lock.notify_all()
        if cs is not None:
            cs.close()  # a failed call may leave a half-read connection: start afresh

    def _evict_users(self) -> None:
        # Caller holds the lock. Close the idle sets of the least recently used configs.
        while len(self._count) > self.max_users:
            victim = next((k for k in self._idle if self._idle[k]), None)
            if victim is None:
                return
            for cs in self._idle.pop(victim):
                cs.close()
                self._count[victim] -= 1
            if self._count[victim] == 0:
                del self._count[victim]

    def drop_user(self, config: Mapping[str, str]) -> None:
        """Close the idle clients of one config (a user logged out)."""
        key = config_key(config)
        with self._lock:
            idle = self._idle.pop(key, [])
            if key in self._count:
                self._count[key] -= len(idle)
                if self._count[key] <= 0:
                    del self._count[key]
        for cs in idle:
            cs.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sets = [cs for idle in self._idle.values() for cs in idle]
            self._idle.clear()
            self._lock.notify_all()
        for cs in sets:
            cs.close()


# ---------------------------------------------------------------- overview


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    preferred_leader: int | None
    state: str                   # "online" | "under-replicated" | "offline"
    reason: str = ""
    log_start_offset: int | None = None
    high_watermark: int | None = None
    error: str | None = None
    replica_lag: dict[int, int | None] = field(default_factory=dict)   # broker -> HW - its log end


def classify_partitions(topics: Iterable[TopicInfo], live: Mapping[int, bool]) -> list[PartitionRow]:
    """Pure: every partition's state from its leader and replicas and which brokers are live
    (unfenced in the metadata and answering). Offline: no leader, or the leader is not live.
    Under-replicated: some replica is not live."""
    rows = []
    for t in topics:
        for p in t.partitions:
            dead = [r for r in p.replicas if not live.get(r, False)]
            if p.leader is None:
                state, reason = "offline", "no leader"
            elif not live.get(p.leader, False):
                state, reason = "offline", f"leader broker {p.leader} is down"
            elif dead:
                state, reason = "under-replicated", "replica" + ("s" if len(dead) > 1 else "") + \
                    " on broker " + ", ".join(map(str, dead)) + " down"
            else:
                state, reason = "online", ""
            rows.append(PartitionRow(t.name, p.partition, p.leader, p.leader_epoch, tuple(p.replicas),
                                     p.preferred_leader, state, reason))
    return rows


@dataclass(frozen=True)
class Overview:
    status: ClusterStatus
    topics: dict[str, TopicInfo]


def read_overview(cs: ClientSet) -> Overview:
    status = cs.admin.cluster_status()
    names = cs.admin.list_topics(internal=True)
    topics = cs.admin.describe_topics(names) if names else {}
    return Overview(status, topics)


def describe_topic(cs: ClientSet, name: str) -> TopicInfo:
    """Raises UnknownTopicOrPartitionError for a topic that does not exist."""
    try:
        return cs.admin.describe_topics([name])[name]
    except UnknownTopicOrPartitionError:
        raise UnknownTopicOrPartitionError(f"unknown topic: {name}") from None


def describe_configs(cs: ClientSet, name: str) -> list[dict]:
    """Every known config key of topic `name`: [{name, value, is_default, type, doc}]."""
    return list(cs.admin.request({"op": "describe_configs", "name": name}).get("configs") or ())


# ---------------------------------------------------------------- offsets and records


def _by_leader(topics: Mapping[str, TopicInfo], tps: Iterable[tuple[str, int]],
               live: Mapping[int, bool] | None) -> tuple[dict[int, list[tuple[str, int]]], dict[tuple[str, int], str]]:
    groups: dict[int, list[tuple[str, int]]] = {}
    skipped: dict[tuple[str, int], str] = {}
    for t, p in tps:
        info = topics.get(t)
        part = next((x for x in info.partitions if x.partition == p), None) if info else None
        if part is None:
            skipped[(t, p)] = "unknown partition"
        elif part.leader is None:
            skipped[(t, p)] = "no leader"
        elif live is not None and not live.get(part.leader, False):
            skipped[(t, p)] = f"leader broker {part.leader} is down"
        else:
            groups.setdefault(part.leader, []).append((t, p))
    return groups, skipped


def _error_text(err: Any) -> str:
    e = error_from_wire(err if isinstance(err, dict) else {"code": str(err)})
    return str(e)


def partition_bounds(cs: ClientSet, topics: Mapping[str, TopicInfo], tps: Iterable[tuple[str, int]],
                     live: Mapping[int, bool] | None = None) -> tuple[dict[tuple[str, int], tuple[int, int]],
                                                                        dict[tuple[str, int], str]]:
    """({(topic, partition): (log_start_offset, high_watermark)}, {(topic, partition): why
    not}) with one list_offsets request per leader broker, all in flight at once."""
    groups, errors = _by_leader(topics, tps, live)
    requests = []
    for _leader, members in sorted(groups.items()):
        entries = [(t, p, ts) for t, p in members for ts in (-2, -1)]
        requests.append((list_offsets_request(entries), members[0]))
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    if not requests:
        return bounds, errors
    answers = _request_each(cs, requests)
    for (req, _route), answer in zip(requests, answers):
        if isinstance(answer, BaseException):
            for e in req["partitions"]:
                errors[(e["topic"], e["partition"])] = str(answer)
            continue
        got: dict[tuple[str, int], dict[int, int]] = {}
        for r in answer.get("partitions") or ():
            tp = (r.get("topic"), r.get("partition"))
            if r.get("error") is not None:
                errors[tp] = _error_text(r["error"])
                continue
            got.setdefault(tp, {})
            # Answers come in request order: the first per partition is -2, the second -1.
            got[tp][-2 if -2 not in got[tp] else -1] = int(r.get("offset", -1))
        for tp, pair in got.items():
            if tp not in errors and -2 in pair and -1 in pair:
                bounds[tp] = (pair[-2], pair[-1])
    return bounds, errors


def _request_each(cs: ClientSet, requests: list[tuple[dict, tuple[str, int]]]) -> list[Any]:
    """Every request in flight at once; the answers in order, an exception in place of a
    request that failed as a whole (the others still count)."""
    try:
        return list(cs.admin.request_many(requests))
    except RaftlogError:
        if len(requests) == 1:
            raise
    out: list[Any] = []
    for req, route in requests:  # find which one failed; the rest are answered again
        try:
            out.append(cs.admin.request(req, route=route))
        except RaftlogError as exc:
            out.append(exc)
    return out


def offsets_for_timestamp(cs: ClientSet, topic: str, partitions: Iterable[int], timestamp_ms: int) -> dict[int, int | None]:
    """{partition: first offset whose timestamp is >= timestamp_ms, or None if none is}."""
    parts = list(partitions)
    answers = cs.admin.request_many([(list_offsets_request([(topic, p, timestamp_ms)]), (topic, p)) for p in parts])
    out: dict[int, int | None] = {}
    for p, a in zip(parts, answers):
        r = (a.get("partitions") or [{}])[0]
        if r.get("error") is not None:
            raise error_from_wire(r["error"])
        off = int(r.get("offset", -1))
        out[p] = off if off >= 0 else None
    return out


def fetch_positions(cs: ClientSet, topic: TopicInfo, positions: Mapping[int, int],
                    partition_bytes: int = FETCH_PARTITION_BYTES) -> dict[int, tuple[list[ConsumerRecord], int, int]]:
    """{partition: (records at or after the position, next position, bytes read)} with one
    fetch per leader broker (no waiting: max_wait_ms 0). Raises a partition's error."""
    groups, skipped = _by_leader({topic.name: topic}, [(topic.name, p) for p in positions], None)
    for (_, p), why in skipped.items():
        raise UnknownTopicOrPartitionError(f"{topic.name}-{p}: {why}")
    requests = []
    for _leader, members in sorted(groups.items()):
        parts = [(t, p, positions[p], partition_bytes) for t, p in members]
        requests.append((fetch_request(0, 0, FETCH_TOTAL_BYTES, parts), members[0]))
    out: dict[int, tuple[list[ConsumerRecord], int, int]] = {}
    for answer in cs.admin.request_many(requests):
        for r in answer.get("partitions") or ():
            p = r.get("partition")
            if r.get("error") is not None:
                raise error_from_wire(r["error"])
            data = r.get("records") or b""
            records: list[ConsumerRecord] = []
            start = positions[p]
            next_pos = append_fetched(topic.name, p, data, start, records) if data else start
            out[p] = (records, next_pos, len(data))
    return out


def read_record(cs: ClientSet, topic: TopicInfo, partition: int, offset: int) -> ConsumerRecord | None:
    """The record at `offset` (None: no record there, e.g. compacted away or past the end)."""
    try:
        got = fetch_positions(cs, topic, {partition: offset}, partition_bytes=FETCH_PARTITION_BYTES)
    except OffsetOutOfRangeError:
        return None
    for r in got.get(partition, ([], 0, 0))[0]:
        if r.offset == offset:
            return r
        if r.offset > offset:
            break
    return None


def produce_one(cs: ClientSet, topic: TopicInfo, partition: int | None, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]], *, max_request_bytes: int = 1 << 20) -> tuple[int, int]:
    """Append one record with acks=all; returns (partition, offset). The partition is the
    given one, else the key's (murmur2, as the producer does), else partition 0."""
    n = len(topic.partitions)
    if partition is None:
        partition = partition_for_key(key, n) if key is not None else 0
    size = len(key or b"") + len(value or b"") + sum(len(h) + len(v or b"") for h, v in headers)
    if size > max_request_bytes:
        raise MessageTooLargeError(f"record of {size} bytes exceeds the client's max_request_bytes {max_request_bytes} "
                              "(the cluster refuses it; raise the limits on the nodes and topic to send it)")
    builder = BatchBuilder()
    builder.append(value, key=key, headers=headers, timestamp_ms=int(time.time() * 1000))
    req = {"op": "produce", "acks": -1, "timeout_ms": cs.request_timeout_ms,
           "partitions": [{"topic": topic.name, "partition": partition, "records": builder.build()}]}
    answer = cs.admin.request(req, route=(topic.name, partition))
    r = (answer.get("partitions") or [{}])[0]
    if r.get("error") is not None:
        raise error_from_wire(r["error"])
    return partition, int(r["base_offset"])


# ---------------------------------------------------------------- node HTTP (health, metrics)


def fetch_node_http(address: str, path: str, token: str | None = None,
                    timeout_s: float = NODE_HTTP_TIMEOUT_S) -> tuple[int, bytes] | None:
    """GET http://address/path -> (status, body), or None when the node does not answer.
    `token`: the nodes' http_token (sent as a bearer token), which /metrics and the details of
    /health need on a node that has one."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"http://{address}{path}", headers=headers),
                                    timeout=timeout_s) as response:
            return response.status, response.read(MAX_NODE_HTTP_BYTES)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, exc.read(MAX_NODE_HTTP_BYTES)
        finally:
            exc.close()
    except (OSError, ValueError):
        return None


def node_health(address: str, token: str | None = None) -> dict | None:
    got = fetch_node_http(address, "/health", token)
    if got is None:
        return None
    try:
        body = json.loads(got[1])
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def nodes_health(addresses: Iterable[str], token: str | None = None) -> list[dict | None]:
    """Every node's /health at once (one short-lived thread per node, at most 16), in order."""
    addresses = list(addresses)[:16]
    if not addresses:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(addresses), thread_name_prefix="console-health") as pool:
        return list(pool.map(lambda address: node_health(address, token), addresses))

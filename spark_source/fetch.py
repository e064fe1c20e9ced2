"""The I/O side of the Spark source: a `Provider` (what the source needs from a cluster), the
blocking `ClusterProvider` over raftlog's client core, its per-process cache, and
`read_range`, the fetch loop behind `read()`.

A Provider answers five questions: which partitions exist (and who leads them), their
earliest and latest offsets, the first offset at or after a timestamp, and "give me batches
from offset N". Tests inject their own (an in-memory one for the Spark plumbing); the real
one is `ClusterProvider`. Consumer-group calls (committed offsets, simple commits) sit
behind the same interface.

Invariants:
* Nothing here opens a socket at import or when a reader is built: providers are made by
  `provider_for` on first use inside the process that needs one (driver planner or
  executor), and kept in a small module-level cache keyed by factory and bootstrap, so a
  reused Python worker reuses its connections across micro-batches.
* `read_range` reads exactly [start, end) of one partition: records below start (a fetch
  may begin mid-batch) and at or past end (more may have arrived) are dropped, control
  batches are skipped, and the loop stops at end.
* Leader changes: NOT_LEADER / lost connections / timeouts are retriable; the provider
  re-routes (the client core applies the leader hint and refreshes metadata) and the loop
  tries again with a bounded backoff until `read_timeout_ms` passes without progress.
* Records below the log start offset (retention) are a DataLoss decision (failOnDataLoss):
  raise, or log a warning and continue from the log start offset.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from raftlog.base.errors import (

    NotLeaderError,

    OffsetOutOfRangeError,

    RaftlogError,

    error_from_wire,

)
from spark_source.arrow import ColumnBuilder
from spark_source.options import (
    PROVIDER_PREFIX,
    ReadTimedOut,
    SourceOptions,
    TopicPartition,
)
from spark_source.planning import PartitionMeta, RaftlogInputPartition, on_data_loss

__all__ = [
    "FetchAnswer",
    "Provider",
    "ClusterProvider",
    "provider_for",
    "clear_provider_cache",
    "release_provider",
    "read_range",
]

log = logging.getLogger(__name__)

_MAX_CACHED_PROVIDERS = 8
_MIN_YIELD_ROWS = 8192  # Spark's Arrow batches default to 10,000 rows; one fetch is ~1-4 MiB
_BACKOFF_MS = (20, 50, 100, 200, 500, 1000)


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """One partition's fetch answer: whole batches (the first may begin before the offset
    asked), the leader's high watermark and log start offset."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    # read_committed: the offset after the last batch fetched, aborted ones included (their
    # bytes are left out of `records`); -1 when `records` holds every batch fetched.
    next_offset: int = -1


class Provider(Protocol):
    """What the Spark source needs from a cluster. Every method may block; none is called
    at construction of a reader. Errors: raftlog errors (`retriable` ones are retried by
    the caller), OffsetOutOfRangeError with `log_start_offset` from `fetch`."""

    def list_partitions(self, topics: Sequence[str] | None) -> list[PartitionMeta]:
        """Partitions of `topics` (a topic that does not exist has none), or of every
        non-internal topic when None."""

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offsets."""

    def latest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks (the offset after the last readable record)."""

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given ms; None when there is none."""

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, *,
              leader_id: int | None = None, max_wait_ms: int = 0) -> FetchAnswer:
        """Batches from `offset`; `leader_id` is the planner's hint. Raises
        OffsetOutOfRangeError (log_start_offset, log_end_offset) outside the log."""

    def committed_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """A group's committed offsets (None: nothing committed)."""

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        """Commit `offsets` (the next offsets to read) for `group_id`."""

    def check_groups(self) -> None:
        """Raise NotAvailableYet unless group calls work (called before any I/O)."""

    def close(self) -> None:
        ...


# ---------------------------------------------------------------- the fetch loop


def read_range(
    provider: Provider,
    part: RaftlogInputPartition,
    *,
    include_headers: bool = False,
    fetch_max_bytes: int = 4 * 1024 * 1024,
    read_timeout_ms: int = 120_000,
    fail_on_data_loss: bool = True,
    max_wait_ms: int = 500,
    min_yield_rows: int = _MIN_YIELD_ROWS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow RecordBatches of the records of [part.start, part.end), in offset order.

    Raises DataLoss (failOnDataLoss and records gone), ReadTimedOut (no progress for
    read_timeout_ms: the leader stays unreachable or behind the planned end), the
    provider's non-retriable errors, CorruptRecordError on bad bytes.
    """
    builder = ColumnBuilder(part.topic, part.partition, include_headers=include_headers)
    position, end = part.start, part.end
    last_progress = clock()
    attempts = 0
    warnings: list[str] = []

    def stalled(why: str) -> None:
        nonlocal attempts
        waited_ms = (clock() - last_progress) * 1000
        if waited_ms >= read_timeout_ms:
            raise ReadTimedOut(f"{part.topic}-{part.partition}: no progress at offset "
                               f"{position} (planned end {end}) for {waited_ms:.0f} ms: {why}")
        delay_ms = _BACKOFF_MS[min(attempts, len(_BACKOFF_MS) - 1)]
        attempts += 1
        sleep(min(delay_ms, max(1.0, read_timeout_ms - waited_ms)) / 1000)

    while position < end:
        try:
            ans = provider.fetch(part.topic, part.partition, position, fetch_max_bytes,
                                 leader_id=part.leader_id, max_wait_ms=max_wait_ms)
        except OffsetOutOfRangeError as exc:
            lso = exc.details.get("log_start_offset")
            if isinstance(lso, int) and position < lso:
                on_data_loss(f"cannot read {part.topic}-{part.partition} from offset {position}:"
                             f" the log starts at {lso}", fail_on_data_loss, warnings)
                for w in warnings:
                    log.warning(w)
                warnings.clear()
                position = min(lso, end)
                last_progress = clock()
                continue
            # Past the log end: a new leader that has not caught up, or a truncated log.
            stalled(str(exc))
            continue
        except RaftlogError as exc:
            if not exc.retriable:
                raise
            stalled(str(exc))
            continue
        if ans.records or ans.next_offset > position:
            nxt = builder.add(ans.records, position, end) if ans.records else position
            nxt = max(nxt, ans.next_offset)
            if nxt > position:
                position = nxt
                last_progress = clock()
                attempts = 0
                if len(builder) >= min_yield_rows or position >= end:
                    if len(builder):
                        yield builder.take()
                continue
        if ans.high_watermark > position and not ans.records:
            # The leader has offsets past ours but no batch holds them: compaction removed
            # the rest of the range. Nothing more to read.
            break
        stalled(f"high watermark {ans.high_watermark} is behind the planned end {end}")
    if len(builder):
        yield builder.take()


# ---------------------------------------------------------------- the real cluster


class ClusterProvider:
    """A Provider over raftlog's client core and blocking sockets (one thread drives it).

    Concurrency: thread-safe (one lock; Spark runs one task per Python worker at a time,
    the lock only guards against a user's threads).
    """

    def __init__(self, bootstrap: str, *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, read_committed: bool = False):
        # Imported here: the client shell is not needed to plan or pickle anything.
        from raftlog.client import Admin

        self._admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms,
                            rng=rng or random.Random())
        self._lock = threading.Lock()
        self._request_timeout_ms = request_timeout_ms
        self._bootstrap = bootstrap
        self._read_committed = read_committed  # latest = the last stable offset; fetches skip aborted records
        self._groups: dict = {}  # group id -> a blocking Consumer of that group (never joins)

    @classmethod
    def from_options(cls, options: SourceOptions) -> ClusterProvider:
        return cls(options.bootstrap, request_timeout_ms=options.request_timeout_ms,
                   read_committed=options.read_committed)

    def _run(self, requests: list[tuple[dict, TopicPartition | None]],
             timeout_ms: int | None = None) -> list[dict]:
        """Send every request (routed to its partition's leader, or any broker), drive the
        sockets until all are answered (`Admin.request_many`); the ok responses in order,
        or raise the first error."""
        with self._lock:
            return self._admin.request_many(requests, timeout_ms=timeout_ms)

    def list_partitions(self, topics: Sequence[str] | None) -> list[PartitionMeta]:
        from raftlog.client.request import metadata_request, parse_metadata

        (msg,) = self._run([(metadata_request(topics), None)])
        md = parse_metadata(msg)
        self._admin.metadata.update(md, _mono_ms())  # routing learns the leaders now
        out = []
        for name, t in md.topics.items():
            for p in t.partitions:
                b = md.brokers.get(p.leader) if p.leader is not None else None
                out.append(PartitionMeta(name, p.partition, p.leader,
                                         None if b is None else f"{b.host}:{b.port}",
                                         t.internal))
        return sorted(out, key=lambda m: (m.topic, m.partition))

    def _list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        from raftlog.client.request import list_offsets_request, parse_list_offsets

        tps = sorted(specs)
        out: dict[TopicPartition, int | None] = {}
        for i in range(0, len(tps), 512):  # the core bounds pending calls (1024)
            chunk = tps[i:i + 512]
            requests = [list_offsets_request([(t, p, specs[(t, p)])]) for t, p in chunk]
            if self._read_committed:
                for req in requests:
                    req["isolation_level"] = 1
            answers = self._run([(req, tp) for req, tp in zip(requests, chunk)])
            for tp, msg in zip(chunk, answers):
                off, _ts = parse_list_offsets(msg).get(tp, (-1, -1))
                out[tp] = off if isinstance(off, int) and off >= 0 else None
        return out

    def earliest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        got = self._list_offsets({tp: -2 for tp in partitions})
        return {tp: (0 if off is None else off) for tp, off in got.items()}

    def latest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        got = self._list_offsets({tp: -1 for tp in partitions})
        return {tp: (0 if off is None else off) for tp, off in got.items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        return self._list_offsets(dict(timestamps))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, *,
              leader_id: int | None = None, max_wait_ms: int = 0) -> FetchAnswer:
        from raftlog.client.request import fetch_request

        req = fetch_request(max_wait_ms, 1, max_bytes, [(topic, partition, offset, max_bytes)])
        if self._read_committed:
            req["isolation_level"] = 1
        (msg,) = self._run([(req, (topic, partition))],
                           timeout_ms=self._request_timeout_ms + max_wait_ms)
        for r in msg.get("partitions") or ():
            if r.get("topic") != topic or r.get("partition") != partition:
                continue
            if r.get("error") is not None:
                exc = error_from_wire(r["error"])
                if isinstance(exc, NotLeaderError):
                    # A partition-level NOT_LEADER inside an ok answer: route by the hint
                    # next time, and let the loop retry.
                    self._admin.metadata.apply_leader_hint(topic, partition, exc.leader_id,
                                                           exc.leader)
                    self._admin.request_metadata_refresh()
                elif exc.retriable:
                    self._admin.request_metadata_refresh()
                raise exc
            records = bytes(r.get("records") or b"")
            # read_committed: the last stable offset stands for the high watermark (what may be read).
            hw = int(r.get("last_stable_offset", r.get("high_watermark", -1)) if self._read_committed
                     else r.get("high_watermark", -1))
            if self._read_committed and r.get("aborted_transactions") and records:
                return _without_aborted(records, r["aborted_transactions"], hw, int(r.get("log_start_offset", -1)))
            return FetchAnswer(records, hw, int(r.get("log_start_offset", -1)))
        raise error_from_wire({"code": "UNKNOWN_SERVER_ERROR",
                               "message": f"fetch answer lacks {topic}-{partition}"})

    def _group(self, group_id: str):
        # A Consumer that never subscribes is not a member: its commits are Kafka's
        # "simple" commits (generation -1), accepted while the group has no members.
        from raftlog.client import Consumer

        c = self._groups.get(group_id)
        if c is None:
            if len(self._groups) >= _MAX_CACHED_PROVIDERS:
                self._groups.pop(next(iter(self._groups))).close()
            c = Consumer(self._bootstrap, group_id=group_id, enable_auto_commit=False,
                         request_timeout_ms=self._request_timeout_ms)
            self._groups[group_id] = c
        return c

    def committed_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        with self._lock:
            got = self._group(group_id).committed(list(partitions))
        return {tp: got.get(tp) for tp in partitions}

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        with self._lock:
            self._group(group_id).commit(dict(offsets))

    def check_groups(self) -> None:
        pass  # raftlog has consumer groups

    def close(self) -> None:
        with self._lock:
            for c in self._groups.values():
                c.close()
            self._groups.clear()
            self._admin.close()


def _mono_ms() -> int:
    return int(time.monotonic() * 1000)


# ---------------------------------------------------------------- per-process cache

ProviderFactory = Callable[[SourceOptions], Provider]
_cache: dict[tuple, Provider] = {}
_cache_lock = threading.Lock()


def _without_aborted(records: bytes, aborted: list, high_watermark: int, log_start_offset: int) -> FetchAnswer:
    """A read_committed answer without the batches of aborted transactions (Kafka's
    consumer rule, `raftlog.client.consumer.aborted_batches`); `next_offset` still moves
    past them."""
    from partition.batch import iter_headers
    from raftlog.client.consumer import aborted_batches

    dropped = {pos for pos, _h in aborted_batches(records, aborted)}
    kept, next_offset = [], -1
    for pos, h in iter_headers(records, verify=False):
        if pos not in dropped:
            kept.append(records[pos:pos + h.size])
        next_offset = h.next_offset
    return FetchAnswer(b"".join(kept), high_watermark, log_start_offset, next_offset)


def _cache_key(factory: ProviderFactory, options: SourceOptions) -> tuple:
    # raftlog.provider.* options configure a custom provider: a different value is a
    # different provider (Python workers outlive queries).
    custom = tuple(sorted((k, v) for k, v in options.raw.items() if k.startswith(PROVIDER_PREFIX)))
    return (getattr(factory, "__module__", ""), getattr(factory, "__qualname__", repr(factory)),
            options.bootstrap, options.request_timeout_ms, options.read_committed, custom)


def provider_for(factory: ProviderFactory, options: SourceOptions) -> Provider:
    """The cached provider for (factory, bootstrap, timeout, raftlog.provider.* options),
    made on first use.

    Keyed by the factory's qualified name, not its identity: a factory pickled by value
    arrives as a new object in every task, and must still hit the cache. At most 8 are
    kept; the oldest is closed when a ninth is needed.
    """
    key = _cache_key(factory, options)
    with _cache_lock:
        p = _cache.get(key)
        if p is None:
            if len(_cache) >= _MAX_CACHED_PROVIDERS:
                old_key = next(iter(_cache))
                _close_quietly(_cache.pop(old_key))
            p = factory(options)
            _cache[key] = p
        return p


def clear_provider_cache() -> None:
    """Close and forget every cached provider (tests; a worker shutting down)."""
    with _cache_lock:
        while _cache:
            _close_quietly(_cache.pop(next(iter(_cache))))


def _close_quietly(p: Provider) -> None:
    try:
        p.close()
    except OSError as exc:  # a dead socket while closing: nothing left to do with it
        log.info("closing a cached provider: %s", exc)


def release_provider(factory: ProviderFactory, options: SourceOptions) -> None:
    """Close and forget the cached provider of (factory, options), if there is one."""
    with _cache_lock:
        p = _cache.pop(_cache_key(factory, options), None)
    if p is not None:
        _close_quietly(p)

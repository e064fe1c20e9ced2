"""Blocking client shell: Producer, Consumer, Admin over plain sockets. Every decision is core's.

Design (say which, as asked): the Producer runs one background I/O thread (like Kafka's
Sender), so `send()` only appends under a lock and returns a future at once; the Consumer and
the Admin are poll-driven on the caller's thread (no thread: `poll()` / each admin call
drives the sockets until its answer or deadline).

Connections: one TCP connection per broker id, many requests in flight on it, answers matched
by id (in the core). Sends use `sendall` on a socket with a timeout; reads use a selector, so
the one thread that drives a core waits on all its connections at once.

Concurrency: Producer methods are thread-safe (one RLock around the core; futures complete
on the I/O thread, so a done-callback must not block on the producer). Consumer and Admin
are not thread-safe (as Kafka's consumer).
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import threading
import time
from typing import Any, Iterable, Iterator

from raftlog.client.accumulator import FULL, ProducerBatch
from raftlog.client.admin import AdminCore
from raftlog.client.consumer import ConsumerCore, ConsumerRecord
from raftlog.client.metadata_cache import MetadataCache
from raftlog.client.producer import ProducerCore
from raftlog.client.request import (
    EARLIEST,
    LATEST,
    ClusterStatus,
    TopicInfo,
    alter_configs_request,
    cluster_status_request,
    create_topic_request,
    delete_topic_request,
    list_offsets_request,
    metadata_request,
    parse_cluster_status,
    parse_list_offsets,
    parse_metadata,
    parse_topic,
)
from raftlog.client.network_blocking import Network, dispatch, mono_ms, step
from raftlog.client.errors import BufferFullError, ClientClosedError
from raftlog.client.group import GROUP_OPTIONS, GroupMetadata
from raftlog.client.group_blocking import BlockingGroup
from raftlog.base.errors import (
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

__all__ = ["Producer", "Consumer", "Admin", "RecordFuture"]

log = logging.getLogger(__name__)

_time = time.time  # a module global: the per-record path reads it without an attribute lookup

# ---------------------------------------------------------------- producer


class RecordFuture:
    """The future of one sent record: `result()` -> (partition, offset).

    One concurrent.futures.Future per batch backs every record of it; this object is the
    record's index into that batch (what keeps `send` cheap).
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int):
        self._batch = batch
        self._index = index

    @property
    def index(self) -> int:
        """This record's place in its batch (0: it opened the batch). Records of one batch
        share one outcome: a tool timing acks needs one callback per batch, not per record."""
        return self._index

    @property
    def batch_record_count(self) -> int:
        """Records in this record's batch so far (final once the batch was sent)."""
        return self._batch.record_count

    def result(self, timeout: float | None = None) -> tuple[int, int]:
        """(partition, offset); raises the delivery error, or TimeoutError after `timeout` s."""
        self._batch.future.result(timeout)
        return ProducerCore.record_result(self._batch, self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.future.exception(timeout)

    def done(self) -> bool:
        return self._batch.future.done()

    def add_done_callback(self, fn) -> None:
        """Call fn(self) when done (on the producer's I/O thread; keep it short)."""
        self._batch.future.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        return f"RecordFuture({self._batch.topic}-{self._batch.partition}#{self._index})"


class Producer:
    """Blocking producer. `send()` returns a RecordFuture; `flush()` waits for every record sent.

    Options as Kafka's producer: acks 0/1/'all' (default 'all'), linger_ms (5), batch_bytes
    (64 KiB), buffer_bytes (32 MiB), compression (None/'gzip'/'snappy'/'lz4'/'zstd'),
    enable_idempotence (True), delivery_timeout_ms (120 s), request_timeout_ms (30 s),
    max_block_ms (60 s: how long send waits for metadata or buffer space).
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_bytes: int | None = None,
        buffer_bytes: int | None = None,
        compression: str | int | None = None,
        enable_idempotence: bool = True,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_block_ms: int = 60_000,
        max_in_flight_per_partition: int = 5,
        rng: random.Random | None = None,
        **options: Any,
    ):
        self._core = ProducerCore(
            bootstrap,
            rng=rng or random.Random(),
            future_factory=concurrent.futures.Future,
            acks=acks,
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            buffer_bytes=buffer_bytes,
            compression=compression,
            enable_idempotence=enable_idempotence,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight_per_partition=max_in_flight_per_partition,
            **options,
        )
        self._max_block_ms = max_block_ms
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._net = Network(self._core, connect_timeout_ms=min(request_timeout_ms, 10_000),
                             send_timeout_ms=request_timeout_ms, wakeup=True)
        self._closing = False
        self._closed = False
        self._flushers = 0
        self._thread = threading.Thread(target=self._run, name="raftlog-producer-io", daemon=True)
        self._thread.start()

    # ---- API ----

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Iterable[tuple[str, bytes | None]] | None = None,
             partition: int | None = None, timestamp: int | None = None) -> RecordFuture:
        """Queue one record; returns its RecordFuture at once (unless waiting for metadata or
        buffer space, at most max_block_ms). Raises BufferFullError, UnknownTopicOrPartitionError (topic
        unknown after max_block_ms), ClientClosedError, MessageTooLargeError, ValueError."""
        ts = int(_time() * 1000) if timestamp is None else timestamp
        core = self._core
        if key is None and not headers and partition is None:
            # Hot path: most keyless records join the sticky batch of their topic.
            with self._lock:
                if self._closing:
                    raise ClientClosedError("producer is closed")
                b = core.send_sticky(topic, value, ts)
                if b is not None:
                    return RecordFuture(b, b.record_count - 1)
        if headers is not None and not isinstance(headers, (list, tuple)):
            headers = list(headers)
        with self._lock:
            if self._closing:
                raise ClientClosedError("producer is closed")
            now = mono_ms()
            n = core.metadata.partition_count(topic)
            if n is None:
                n = self._wait_metadata(topic, now)
            b = core.send(topic, value, key, headers, partition, ts, now, n)
            if b is FULL:
                b = self._wait_space(topic, value, key, headers, partition, ts, n)
            index = b.record_count - 1
            if index == 0 or b.full:
                self._net.wake()  # a new batch: its linger deadline is new to the I/O thread
        return RecordFuture(b, index)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until each batch is acked or failed.
        Raises TimeoutError if `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushers += 1
            self._core.begin_flush()
            self._net.wake()
            try:
                while self._core.has_pending():
                    if self._closed:
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError("flush timed out")
                    self._changed.wait(left if left is not None else 1.0)
            finally:
                self._flushers -= 1
                if not self._flushers:
                    self._core.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to `timeout` s), then stop; batches still unsent fail with ClientClosedError."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except TimeoutError:
            log.warning("producer close: flush timed out; failing what is left")
        finally:
            with self._lock:
                self._closing = True
                self._core.abort(ClientClosedError("producer closed before the record was sent"))
                self._net.wake()
            self._thread.join(timeout=max(1.0, (self._core.request_timeout_ms / 1000)))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def partitions_for(self, topic: str) -> list[int]:
        with self._lock:
            n = self._core.metadata.partition_count(topic)
            if n is None:
                n = self._wait_metadata(topic, mono_ms())
            return list(range(n))

    # ---- waits (caller's thread, lock held) ----

    def _wait_metadata(self, topic: str, now: int) -> int:
        deadline = now + self._max_block_ms
        while True:
            n = self._core.partition_count(topic)  # asks for a refresh when unknown
            if n is not None:
                return n
            self._net.wake()
            left = deadline - mono_ms()
            if left <= 0:
                err = self._core.topic_error(topic)
                raise err if err is not None else UnknownTopicOrPartitionError(
                    f"no metadata for topic {topic!r} after {self._max_block_ms} ms"
                )
            if self._closing:
                raise ClientClosedError("producer is closed")
            self._changed.wait(min(left, 100) / 1000)

    def _wait_space(self, topic, value, key, headers, partition, ts, n) -> ProducerBatch:
        deadline = mono_ms() + self._max_block_ms
        while True:
            self._net.wake()
            left = deadline - mono_ms()
            if left <= 0:
                raise BufferFullError(
                    f"buffer_bytes {self._core.accumulator.buffer_bytes} used up for {self._max_block_ms} ms"
                )
            self._changed.wait(min(left, 100) / 1000)
            if self._closing:
                raise ClientClosedError("producer is closed")
            b = self._core.send(topic, value, key, headers, partition, ts, mono_ms(), n)
            if b is not FULL:
                return b

    # ---- I/O thread ----

    def _run(self) -> None:
        core, net = self._core, self._net
        try:
            while True:
                with self._lock:
                    now = mono_ms()
                    actions = core.poll(now)
                    if self._closing and not actions and not core.has_pending():
                        break
                    wake = core.next_wakeup_ms(now)
                failed = net.perform(actions)
                timeout_ms = 1000 if wake is None else max(0, min(1000, wake - mono_ms()))
                if failed:
                    timeout_ms = 0
                responses, lost = net.wait(timeout_ms / 1000)
                with self._lock:
                    now = mono_ms()
                    for b in failed:
                        core.on_disconnect(b, now)
                    dispatch(core, responses, lost, now)
                    self._changed.notify_all()
        except BaseException:
            log.exception("producer I/O thread failed")
            raise
        finally:
            with self._lock:
                self._closing = True
                self._closed = True
                core.abort(ClientClosedError("producer I/O thread stopped"))
                self._changed.notify_all()
            net.close()


# ---------------------------------------------------------------- consumer


class Consumer:
    """Blocking consumer over manually assigned partitions (no group).

    `poll(timeout_ms)` returns the records fetched so far (long-poll fetch: max_wait_ms,
    min_bytes); iteration yields records one by one (forever, or until consumer_timeout_ms
    passes with none). auto_offset_reset ('latest' as in Kafka, 'earliest', 'none') decides
    where a partition with no position starts.
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        auto_offset_reset: str = "latest",
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        consumer_timeout_ms: int | None = None,
        rng: random.Random | None = None,
        **options: Any,
    ):
        # Consumer groups (group_blocking.py): group options are the group's, not the core's.
        group_options = {k: options.pop(k) for k in list(options) if k in GROUP_OPTIONS}
        self._core = ConsumerCore(
            bootstrap, rng=rng or random.Random(), auto_offset_reset=auto_offset_reset,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records, request_timeout_ms=request_timeout_ms, **options,
        )
        self._net = Network(self._core, connect_timeout_ms=min(request_timeout_ms, 10_000),
                             send_timeout_ms=request_timeout_ms)
        self._max_wait_ms = max_wait_ms
        self._request_timeout_ms = request_timeout_ms
        self._consumer_timeout_ms = consumer_timeout_ms
        self._closed = False
        self._group: BlockingGroup | None = None
        if group_options.get("group_id") is not None:
            self._group = BlockingGroup(self, bootstrap, request_timeout_ms=request_timeout_ms,
                                        **group_options)

    # ---- consumer groups (the group half lives in group_blocking.py) ----

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  on_revoked=None, on_assigned=None) -> None:
        """Join the consumer's group (group_id=...) for `topics` or a regex `pattern`;
        partitions come and go at rebalances inside poll(), announced by
        on_revoked(partitions) / on_assigned(partitions)."""
        if self._group is None:
            raise ValueError("subscribe needs a group_id (Consumer(..., group_id=...))")
        self._group.subscribe(topics, pattern, on_revoked, on_assigned)

    def group_metadata(self) -> GroupMetadata | None:
        """This member's group id, generation, member id, instance id and assignment as of
        the last completed rebalance; None without a group_id."""
        return self._group.membership.metadata() if self._group is not None else None

    def subscription(self) -> tuple[str, ...]:
        """The topics subscribed to (a pattern's matches once resolved); () without a group."""
        return self._group.subscription() if self._group is not None else ()

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commit offsets (default: the position of every assigned partition) and wait."""
        self._require_group().commit(offsets, sync=True)

    def commit_async(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self._require_group().commit(offsets, sync=False)

    def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The group's committed offset of each partition (None: none)."""
        return self._require_group().committed(partitions)

    def _require_group(self) -> BlockingGroup:
        if self._group is None:
            raise ValueError("no group_id: this consumer has no group to commit to")
        return self._group

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._core.assign(partitions)

    def assignment(self) -> list[tuple[str, int]]:
        return self._core.assignment()

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._core.seek(partition[0], partition[1], offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        self._core.seek_to(partitions or None, EARLIEST)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        self._core.seek_to(partitions or None, LATEST)

    def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() returns (resolving resets if needed).
        Raises RequestTimedOutError if it cannot be resolved in time."""
        deadline = mono_ms() + (timeout_ms or self._request_timeout_ms)
        while True:
            pos = self._core.position(*partition)
            if pos is not None:
                return pos
            self._core.raise_pending_error()
            if mono_ms() >= deadline:
                raise RequestTimedOutError(f"position of {partition} not resolved in time")
            step(self._core, self._net, deadline)

    def offsets_for_times(self, timestamps: dict[tuple[str, int], int],
                          timeout_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int] | None]:
        """{(topic, partition): (offset, timestamp)} of the first record at or after each
        timestamp (None where there is none)."""
        now = mono_ms()
        calls = {
            tp: self._core.submit(list_offsets_request([(tp[0], tp[1], ts)]), now, route=tuple(tp),
                                  timeout_ms=timeout_ms)
            for tp, ts in timestamps.items()
        }
        while not all(c.done for c in calls.values()):
            step(self._core, self._net, None)
        out: dict[tuple[str, int], tuple[int, int] | None] = {}
        for tp, c in calls.items():
            off, ts = parse_list_offsets(c.value()).get(tuple(tp), (-1, -1))
            out[tp] = (off, ts) if off >= 0 else None
        return out

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to timeout_ms for some.
        Raises fetch errors that are not retriable (e.g. OffsetOutOfRangeError with 'none')."""
        if self._closed:
            raise ClientClosedError("consumer is closed")
        core = self._core
        core.fetch_wait_ms = max(0, min(self._max_wait_ms, timeout_ms))
        deadline = mono_ms() + timeout_ms
        if self._group is not None:
            self._group.before_poll(deadline)
        while True:
            records = core.take_records(max_records)
            if records:
                return records
            if mono_ms() >= deadline:
                return []
            step(core, self._net, deadline)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        idle_since = mono_ms()
        while not self._closed:
            records = self.poll(1000 if self._consumer_timeout_ms is None
                                else min(1000, self._consumer_timeout_ms))
            if records:
                yield from records
                idle_since = mono_ms()
            elif self._consumer_timeout_ms is not None and (
                mono_ms() - idle_since >= self._consumer_timeout_ms
            ):
                return

    def high_watermark(self, partition: tuple[str, int]) -> int:
        """The last high watermark a fetch reported (-1 before any)."""
        return self._core.high_watermark(*partition)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._group is not None:
                self._group.close()  # commits (auto commit) and leaves the group
            self._net.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


# ---------------------------------------------------------------- admin


class Admin:
    """Blocking admin client: each call goes to any broker (the node forwards it to the
    controller) and is retried on connection loss until request_timeout_ms."""

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, **options: Any):
        self._core = AdminCore(bootstrap, rng=rng or random.Random(),
                               request_timeout_ms=request_timeout_ms, **options)
        self._net = Network(self._core, connect_timeout_ms=min(request_timeout_ms, 10_000),
                             send_timeout_ms=request_timeout_ms)

    def _call(self, request: dict, timeout_ms: int | None = None) -> dict:
        return self.request(request, timeout_ms=timeout_ms)

    # ---- raw requests (for tools built on the client: the Spark source, the CLI) ----

    def request(self, request: dict, *, route: tuple[str, int] | None = None,
                timeout_ms: int | None = None) -> dict:
        """Send one protocol request (a map with `op` and its fields; `v`/`id` are added)
        to the right broker and return the ok response map.

        route None: any broker (admin ops are forwarded to the controller by the node);
        (topic, partition): that partition's leader, found and followed through metadata.
        Retriable errors and lost connections are retried with backoff until `timeout_ms`
        (default request_timeout_ms); raises the server's error (a RaftlogError) otherwise.
        An ok response may still carry per-partition errors: those are the caller's.
        """
        return self.request_many([(request, route)], timeout_ms=timeout_ms)[0]

    def request_many(self, requests: Iterable[tuple[dict, tuple[str, int] | None]], *,
                     timeout_ms: int | None = None) -> list[dict]:
        """`request` for several (request, route) pairs at once, all in flight together;
        the ok responses in order, or raises the first failed one's error (in order)."""
        now = mono_ms()
        calls = [self._core.submit(dict(req), now, route=route, timeout_ms=timeout_ms)
                 for req, route in requests]
        while True:
            pending = [c.deadline_ms for c in calls if not c.done]
            if not pending:
                break
            step(self._core, self._net, min(pending))
        return [c.value() for c in calls]

    @property
    def metadata(self) -> MetadataCache:
        """The routing cache (leaders by partition, broker addresses). `request` keeps it
        fresh; a caller that learns more (a metadata answer, a NOT_LEADER hint inside an ok
        response) may feed it: `metadata.update(parse_metadata(msg), now_ms)` with
        `now_ms = int(time.monotonic() * 1000)`, `metadata.apply_leader_hint(...)`."""
        return self._core.metadata

    def request_metadata_refresh(self) -> None:
        """Refresh the routing cache before the next routed request."""
        self._core.request_metadata_refresh()

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None, *, timeout_ms: int | None = None) -> TopicInfo:
        r = self._call(create_topic_request(name, partitions, replication_factor, configs), timeout_ms)
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})

    def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        self._call(delete_topic_request(name), timeout_ms)

    def describe_topics(self, names: Iterable[str] | None = None, *,
                        timeout_ms: int | None = None) -> dict[str, TopicInfo]:
        """{name: TopicInfo}; raises the error of the first requested topic that has one."""
        md = parse_metadata(self._call(metadata_request(None if names is None else list(names)), timeout_ms))
        for err in md.topic_errors.values():
            raise err
        return md.topics

    def list_topics(self, internal: bool = False, *, timeout_ms: int | None = None) -> list[str]:
        md = parse_metadata(self._call(metadata_request(None, internal=internal), timeout_ms))
        return sorted(name for name, t in md.topics.items() if internal or not t.internal)

    def alter_configs(self, name: str, set_configs: dict[str, str] | None = None,
                      delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete topic configs; returns the topic's configs after the change."""
        r = self._call(alter_configs_request(name, set_configs, delete_configs), timeout_ms)
        return dict(r.get("configs") or {})

    def cluster_status(self, *, timeout_ms: int | None = None) -> ClusterStatus:
        return parse_cluster_status(self._call(cluster_status_request(), timeout_ms))

    def close(self) -> None:
        self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

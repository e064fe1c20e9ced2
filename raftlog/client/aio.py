"""Trio client shell: Producer, Consumer, Admin. Same behaviour as the blocking shell; every decision is core's.

Each client is an async context manager owning a nursery: one reader task per broker
connection (frames → a bounded inbox channel), and for the Producer one sender task that
polls the core, writes requests, and dispatches answers (Kafka's Sender). Consumer and
Admin drive the core from the calling task (poll-driven, no background sender); a Consumer
with a `group_id` also runs its group's driver and heartbeat tasks (group_aio.py).

    async with aio.Producer("127.0.0.1:9093") as p:
        handle = await p.send("t", b"v")      # queued; returns a handle at once
        partition, offset = await handle      # acknowledged
        await p.flush()

Concurrency: all methods run in the owning trio thread. Cancel-safety: cancelling `send`
while it waits for buffer space or metadata leaves nothing queued; cancelling a wait on a
handle does not cancel the record.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, AsyncIterator, Iterable

import trio

from raftlog.client.accumulator import FULL, ProducerBatch
from raftlog.client.core import (
    EARLIEST,
    LATEST,
    AdminCore,
    ClientCore,
    ClusterStatus,
    ConsumerCore,
    ConsumerRecord,
    ProducerCore,
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
from raftlog.client.network_aio import Network, mono_ms, step, wall_ms
from raftlog.client.errors import BufferFullError, ClientClosedError
from raftlog.client.group import GROUP_OPTIONS, GroupMetadata
from raftlog.client.group_aio import TrioGroup
from raftlog.base.errors import (
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

__all__ = ["Producer", "Consumer", "Admin", "RecordHandle"]

log = logging.getLogger(__name__)







class _BatchFuture:
    """One per batch: the core sets it; record handles await it. Trio-thread only."""

    __slots__ = ("event", "base_offset", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.base_offset = -1
        self.error: BaseException | None = None

    def set_result(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.event.set()

    def set_exception(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class RecordHandle:
    """`await handle` -> (partition, offset) of the acknowledged record; raises its error."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int):
        self._batch = batch
        self._index = index

    async def wait(self) -> tuple[int, int]:
        fut: _BatchFuture = self._batch.future
        await fut.event.wait()
        if fut.error is not None:
            raise fut.error
        return ProducerCore.record_result(self._batch, self._index)

    def __await__(self):
        return self.wait().__await__()

    def done(self) -> bool:
        return self._batch.future.event.is_set()


class _AsyncClient:
    """Owns the nursery and the network of one client."""

    _core: ClientCore

    def __init__(self, request_timeout_ms: int):
        self._request_timeout_ms = request_timeout_ms
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._net: Network | None = None
        self._closed = False

    async def __aenter__(self):
        stack = contextlib.AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        stack.push_async_callback(self._final)  # runs before the nursery exits (LIFO)
        self._stack = stack
        self._net = Network(self._core, self._nursery,
                                 connect_timeout_ms=min(self._request_timeout_ms, 10_000),
                                 send_timeout_ms=self._request_timeout_ms)
        await self._started(self._nursery)
        return self

    async def _started(self, nursery: trio.Nursery) -> None:
        pass

    async def __aexit__(self, *exc_info: Any):
        if exc_info[0] is None:
            try:
                await self.aclose()  # graceful: the producer flushes here
            except BaseException:
                await self._stack.aclose()
                raise
        return await self._stack.__aexit__(*exc_info)

    async def _final(self) -> None:
        with trio.CancelScope(shield=True):
            await self._shutdown()
        self._nursery.cancel_scope.cancel()  # reader tasks and the sender stop here

    async def _shutdown(self) -> None:
        self._closed = True
        if self._net is not None:
            await self._net.aclose()
            self._net.inbox_send.close()

    async def aclose(self) -> None:
        await self._shutdown()

    def _check_open(self) -> Network:
        if self._closed or self._net is None:
            raise ClientClosedError(f"{type(self).__name__} is closed or not entered (use 'async with')")
        return self._net


# ---------------------------------------------------------------- producer


class Producer(_AsyncClient):
    """Trio producer; options as the blocking `raftlog.client.Producer`."""

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
        super().__init__(request_timeout_ms)
        self._core = ProducerCore(
            bootstrap, rng=rng or random.Random(), future_factory=_BatchFuture, acks=acks,
            linger_ms=linger_ms, batch_bytes=batch_bytes, buffer_bytes=buffer_bytes,
            compression=compression, enable_idempotence=enable_idempotence,
            delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms,
            max_in_flight_per_partition=max_in_flight_per_partition, **options,
        )
        self._max_block_ms = max_block_ms
        self._changed = trio.Event()
        self._sender_done = trio.Event()
        self._flushers = 0

    async def _started(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._sender)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   headers: Iterable[tuple[str, bytes | None]] | None = None,
                   partition: int | None = None, timestamp: int | None = None) -> RecordHandle:
        """Queue one record and return its handle (waits only for metadata or buffer space,
        at most max_block_ms). Raises like the blocking send."""
        net = self._check_open()
        if headers is not None and not isinstance(headers, (list, tuple)):
            headers = list(headers)
        core = self._core
        ts = wall_ms() if timestamp is None else timestamp
        n = core.metadata.partition_count(topic)
        if n is None:
            n = await self._wait_metadata(topic)
        b = core.send(topic, value, key, headers, partition, ts, mono_ms(), n)
        if b is FULL:
            b = await self._wait_space(topic, value, key, headers, partition, ts, n)
        index = b.record_count - 1
        if index == 0:
            net.kick()
            # Let the sender run once per batch (a loop of sends never blocks otherwise);
            # shielded, so a cancel cannot lose the handle of a record already queued.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return RecordHandle(b, index)

    async def _wait_metadata(self, topic: str) -> int:
        with trio.move_on_after(self._max_block_ms / 1000):
            while True:
                n = self._core.partition_count(topic)
                if n is not None:
                    return n
                self._check_open().kick()
                await self._changed.wait()
        err = self._core.topic_error(topic)
        raise err if err is not None else UnknownTopicOrPartitionError(
            f"no metadata for topic {topic!r} after {self._max_block_ms} ms"
        )

    async def _wait_space(self, topic, value, key, headers, partition, ts, n) -> ProducerBatch:
        with trio.move_on_after(self._max_block_ms / 1000):
            while True:
                self._check_open().kick()
                await self._changed.wait()
                b = self._core.send(topic, value, key, headers, partition, ts, mono_ms(), n)
                if b is not FULL:
                    return b
        raise BufferFullError(
            f"buffer_bytes {self._core.accumulator.buffer_bytes} used up for {self._max_block_ms} ms"
        )

    async def flush(self) -> None:
        """Send everything queued and wait until each batch is acked or failed."""
        net = self._check_open()
        self._flushers += 1
        self._core.begin_flush()
        net.kick()
        try:
            while self._core.has_pending() and not self._sender_done.is_set():
                await self._changed.wait()
        finally:
            self._flushers -= 1
            if not self._flushers:
                self._core.end_flush()

    async def aclose(self) -> None:
        """Flush, then stop (what cannot be sent fails with ClientClosedError)."""
        if self._closed:
            return
        try:
            with trio.move_on_after(self._core.delivery_timeout_ms / 1000):
                await self.flush()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        self._core.abort(ClientClosedError("producer closed before the record was sent"))
        self._closed = True
        if self._net is not None:
            self._net.kick()
        await super()._shutdown()

    async def _sender(self) -> None:
        core, net = self._core, self._net
        try:
            while not self._closed:
                await step(core, net, None)
                self._notify()
        finally:
            self._sender_done.set()
            self._notify()


# ---------------------------------------------------------------- consumer


class Consumer(_AsyncClient):
    """Trio consumer; options as the blocking Consumer.

    Without `group_id` it reads manually assigned partitions (`assign`). With `group_id` it
    can `subscribe` and take part in a consumer group (group_aio.py): partitions come and go
    at rebalances inside `poll()`, heartbeats run in a task of the consumer's nursery, and
    leaving the `async with` block commits (auto commit) and leaves the group.
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
        group_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int | None = None,
        partition_assignment_strategy: str | Iterable[str] = ("range",),
        group_instance_id: str | None = None,
        rng: random.Random | None = None,
        **options: Any,
    ):
        super().__init__(request_timeout_ms)
        # Consumer groups (group_aio.py): group options are the group's, not the core's.
        group_options = {k: options.pop(k) for k in list(options) if k in GROUP_OPTIONS}
        rng = rng or random.Random()
        self._core = ConsumerCore(
            bootstrap, rng=rng, auto_offset_reset=auto_offset_reset,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records, request_timeout_ms=request_timeout_ms, **options,
        )
        self._max_wait_ms = max_wait_ms
        self._group: TrioGroup | None = None
        if group_id is not None:
            self._group = TrioGroup(
                self, bootstrap, group_id=group_id, enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms, session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                partition_assignment_strategy=partition_assignment_strategy,
                group_instance_id=group_instance_id, request_timeout_ms=request_timeout_ms,
                rng=rng, **group_options,
            )  # fmt: skip

    async def _started(self, nursery: trio.Nursery) -> None:
        if self._group is not None:
            await self._group.start(nursery)

    async def _shutdown(self) -> None:
        if self._group is not None:
            await self._group.aclose()  # commits (auto commit) and leaves the group
        await super()._shutdown()

    # ---- consumer groups (the group half lives in group_aio.py) ----

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  on_revoked=None, on_assigned=None) -> None:
        """Join the consumer's group (group_id=...) for `topics` or a regex `pattern`;
        partitions come and go at rebalances inside poll(), announced by
        on_revoked(partitions) / on_assigned(partitions) (plain or async functions)."""
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

    async def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commit offsets (default: the position of every assigned partition) and wait."""
        self._check_open()
        await self._require_group().commit(offsets)

    def commit_async(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Send a commit and return at once (fire and forget: a failure is logged)."""
        self._check_open()
        self._require_group().commit_async(offsets)

    async def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The group's committed offset of each partition (None: none)."""
        self._check_open()
        return await self._require_group().committed(partitions)

    def _require_group(self) -> TrioGroup:
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

    async def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int:
        net = self._check_open()
        deadline = mono_ms() + (timeout_ms or self._request_timeout_ms)
        while True:
            pos = self._core.position(*partition)
            if pos is not None:
                return pos
            self._core.raise_pending_error()
            if mono_ms() >= deadline:
                raise RequestTimedOutError(f"position of {partition} not resolved in time")
            await step(self._core, net, deadline)

    async def offsets_for_times(self, timestamps: dict[tuple[str, int], int],
                                timeout_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int] | None]:
        net = self._check_open()
        now = mono_ms()
        calls = {
            tp: self._core.submit(list_offsets_request([(tp[0], tp[1], ts)]), now, route=tuple(tp),
                                  timeout_ms=timeout_ms)
            for tp, ts in timestamps.items()
        }
        while not all(c.done for c in calls.values()):
            await step(self._core, net, None)
        out: dict[tuple[str, int], tuple[int, int] | None] = {}
        for tp, c in calls.items():
            off, ts = parse_list_offsets(c.value()).get(tuple(tp), (-1, -1))
            out[tp] = (off, ts) if off >= 0 else None
        return out

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to timeout_ms for some. In a group
        it first rejoins if needed (running the rebalance callbacks) and auto-commits if due.
        Raises fetch errors that are not retriable, and fatal group errors."""
        net = self._check_open()
        core = self._core
        core.fetch_wait_ms = max(0, min(self._max_wait_ms, timeout_ms))
        deadline = mono_ms() + timeout_ms
        if self._group is not None:
            await self._group.before_poll(deadline)
        while True:
            records = core.take_records(max_records)
            if records:
                return records
            if mono_ms() >= deadline:
                return []
            await step(core, net, deadline)

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for r in await self.poll(1000):
                yield r

    def high_watermark(self, partition: tuple[str, int]) -> int:
        return self._core.high_watermark(*partition)


# ---------------------------------------------------------------- admin


class Admin(_AsyncClient):
    """Trio admin client; same calls as the blocking Admin, awaited."""

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, **options: Any):
        super().__init__(request_timeout_ms)
        self._core = AdminCore(bootstrap, rng=rng or random.Random(),
                               request_timeout_ms=request_timeout_ms, **options)

    async def _call(self, request: dict, timeout_ms: int | None = None) -> dict:
        net = self._check_open()
        call = self._core.submit(request, mono_ms(), timeout_ms=timeout_ms)
        while not call.done:
            await step(self._core, net, call.deadline_ms)
        return call.value()

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str] | None = None, *,
                           timeout_ms: int | None = None) -> TopicInfo:
        r = await self._call(create_topic_request(name, partitions, replication_factor, configs), timeout_ms)
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})

    async def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        await self._call(delete_topic_request(name), timeout_ms)

    async def describe_topics(self, names: Iterable[str] | None = None, *,
                              timeout_ms: int | None = None) -> dict[str, TopicInfo]:
        md = parse_metadata(await self._call(metadata_request(None if names is None else list(names)), timeout_ms))
        for err in md.topic_errors.values():
            raise err
        return md.topics

    async def list_topics(self, internal: bool = False, *, timeout_ms: int | None = None) -> list[str]:
        md = parse_metadata(await self._call(metadata_request(None, internal=internal), timeout_ms))
        return sorted(name for name, t in md.topics.items() if internal or not t.internal)

    async def alter_configs(self, name: str, set_configs: dict[str, str] | None = None,
                            delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        r = await self._call(alter_configs_request(name, set_configs, delete_configs), timeout_ms)
        return dict(r.get("configs") or {})

    async def cluster_status(self, *, timeout_ms: int | None = None) -> ClusterStatus:
        return parse_cluster_status(await self._call(cluster_status_request(), timeout_ms))


"""Trio client shell: Producer, Consumer, Admin. Same behaviour as the blocking shell; every
decision is a core's (producer.py, consumer.py, admin.py, group_session.py); this module
moves bytes.

Each client is an async context manager owning a nursery: one reader task per broker
connection (frames → a bounded inbox channel), and for the Producer one sender task that
polls the core, writes requests, and dispatches answers (Kafka's Sender). Consumer and
Admin drive the core from the calling task (poll-driven, no background sender); a Consumer
with a `group_id` also runs its group's driver and heartbeat tasks (group_aio.py).

    async with aio.Producer("127.0.0.1:9093") as p:
        handle = await p.send("t", b"v")      # queued; returns a handle at once
        partition, offset = await handle      # acknowledged
        await p.flush()

Time: each client reads one clock, its `clock` option (clock.py), by default
`network_aio.TRIO_CLOCK` (trio's clock for deadlines, the wall clock for timestamps): under
`trio.testing.MockClock` the cores' deadlines and trio's timeouts move together. Streams:
the `connect` option (`async (host, port) -> trio.abc.Stream`, default trio.open_tcp_stream)
opens every connection; a test hands in one that returns in-memory streams. Security: the
`security` option as in the blocking shell (Kafka's client keys as a dict, a properties path,
or a ClientSecurity): TLS on trio's SSLStream, then the SASL login (network_aio.py).

Concurrency: all methods run in the owning trio thread. Cancel-safety: cancelling `send`
while it waits for buffer space or metadata leaves nothing queued; cancelling a wait on a
handle does not cancel the record."""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

import trio

from raftlog.client.accumulator import FULL, ProducerBatch
from raftlog.client.admin import (
    AdminCore,
    AdminOp,
    alter_broker_configs_op,
    alter_group_configs_op,
    describe_group_configs_op,
    alter_configs_op,
    cluster_status_op,
    create_acls_op,
    create_partitions_op,
    create_topic_op,
    delete_acls_op,
    delete_topic_op,
    delete_user_op,
    describe_acls_op,
    describe_topics_op,
    describe_users_op,
    describe_quotas_op,
    alter_quotas_op,
    describe_features_op,
    describe_broker_configs_op,
    update_features_op,
    list_topics_op,
    upsert_user_op,
)
from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.sasl import DEFAULT_ITERATIONS, SCRAM_MECHANISMS
from raftlog.client.clock import Clock
from raftlog.client.consumer import ConsumerCore, ConsumerMethods, ConsumerRecord
from raftlog.client.core import ClientCore
from raftlog.client.errors import ClientClosedError, TransactionStateError
from raftlog.client.group import GROUP_OPTIONS
from raftlog.client.group_aio import TrioGroup
from raftlog.client.group_session import drive_async
from raftlog.client.txn import Flush, TxnCall, TxnState, group_fields
from raftlog.client.txn import end_transaction as txn_end
from raftlog.client.txn import init_transactions as txn_init
from raftlog.client.txn import send_offsets as txn_send_offsets
from raftlog.client.network_aio import TRIO_CLOCK, Connect, Network, step
from raftlog.client.producer import NO_METADATA, ProducerCore
from raftlog.client.request import ClusterStatus, TopicInfo
from raftlog.client.security import SecurityOption, client_security

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
    """Owns the nursery, the network and the clock of one client."""

    _core: ClientCore

    def __init__(self, request_timeout_ms: int, clock: Clock, connect: Connect | None,
                 security: SecurityOption = None):
        self._security = client_security(security)
        self._request_timeout_ms = request_timeout_ms
        self._clock = clock
        self._connect = connect
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._net: Network | None = None
        self._closed = False

    async def __aenter__(self):
        stack = contextlib.AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        stack.push_async_callback(self._final)  # runs before the nursery exits (LIFO)
        self._stack = stack
        self._net = Network(self._core, self._nursery, clock=self._clock, connect=self._connect,
                            connect_timeout_ms=min(self._request_timeout_ms, 10_000),
                            send_timeout_ms=self._request_timeout_ms, security=self._security)
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
    """Trio producer; options as the blocking `raftlog.client.Producer`, plus `connect`.
    Transactions as there: `await init_transactions()`, `begin_transaction()`,
    `await send_offsets_to_transaction(...)`, `await commit_transaction()` / `abort_transaction()`."""

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
        clock: Clock = TRIO_CLOCK,
        connect: Connect | None = None,
        security: SecurityOption = None,
        **options: Any,
    ):
        super().__init__(request_timeout_ms, clock, connect, security)
        self._core = ProducerCore(
            bootstrap, rng=rng or random.Random(), future_factory=_BatchFuture, acks=acks,
            linger_ms=linger_ms, batch_bytes=batch_bytes, buffer_bytes=buffer_bytes,
            compression=compression, enable_idempotence=enable_idempotence,
            delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms,
            max_in_flight_per_partition=max_in_flight_per_partition, **options,
        )
        self._max_block_ms = max_block_ms
        self._wall_s = clock.wall_s  # the per-record timestamp: one call, no method frame
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
        core = self._core
        if core.txn is not None:
            core.txn.check_sendable()
        ts = int(self._wall_s() * 1000) if timestamp is None else timestamp
        if key is None and not headers and partition is None:
            # Hot path: most keyless records join the sticky batch of their topic.
            b = core.send_sticky(topic, value, ts)
            if b is not None:
                return RecordHandle(b, b.record_count - 1)

        def attempt():
            return core.append(topic, value, key, headers, partition, ts, self._clock.monotonic_ms())

        b = attempt()
        if b is FULL or b is NO_METADATA:
            b = await self._wait(attempt, b, topic)
        index = b.record_count - 1
        if index == 0:
            net.kick()
            # Let the sender run once per batch (a loop of sends never blocks otherwise);
            # shielded, so a cancel cannot lose the handle of a record already queued.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return RecordHandle(b, index)

    # ---- transactions (txn.py; as the blocking Producer's) ----

    async def init_transactions(self) -> tuple[int, int]:
        pid, epoch = await drive_async(txn_init(self._txn()), self._perform)
        self._core.set_transactional_producer(pid, epoch)
        return pid, epoch

    def begin_transaction(self) -> None:
        self._txn().begin()

    async def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int], group: Any) -> None:
        await drive_async(txn_send_offsets(self._txn(), offsets, **group_fields(group)), self._perform)

    async def commit_transaction(self) -> None:
        await drive_async(txn_end(self._txn(), True), self._perform)

    async def abort_transaction(self) -> None:
        await drive_async(txn_end(self._txn(), False), self._perform)

    def _txn(self) -> TxnState:
        txn = self._core.txn
        if txn is None:
            raise TransactionStateError("not a transactional producer (no transactional_id)")
        return txn

    async def _perform(self, effect: TxnCall | Flush) -> Any:
        if isinstance(effect, Flush):
            await self.flush()
            return None
        net = self._check_open()
        call = self._core.submit(effect.request, self._clock.monotonic_ms(), route=effect.route)
        net.kick()
        while not call.done:
            if self._sender_done.is_set():
                raise ClientClosedError("producer closed")
            await self._changed.wait()
        return call.value()

    async def partitions_for(self, topic: str) -> list[int]:
        """The partitions of `topic` (waits for its metadata, at most max_block_ms)."""
        def attempt():
            n = self._core.partition_count(topic)
            return NO_METADATA if n is None else n

        n = attempt()
        if n is NO_METADATA:
            n = await self._wait(attempt, n, topic)
        return list(range(n))

    async def _wait(self, attempt: Callable[[], Any], outcome: Any, topic: str) -> Any:
        """attempt() after each sender step until it answers neither FULL nor NO_METADATA,
        at most max_block_ms; raises the core's blocked_error then."""
        with trio.move_on_after(self._max_block_ms / 1000):
            while True:
                self._check_open().kick()
                await self._changed.wait()
                outcome = attempt()
                if outcome is not FULL and outcome is not NO_METADATA:
                    return outcome
        raise self._core.blocked_error(outcome, topic, self._max_block_ms)

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


class Consumer(_AsyncClient, ConsumerMethods):
    """Trio consumer; options as the blocking Consumer, plus `connect`.

    Without `group_id` it reads manually assigned partitions (`assign`). With `group_id` it
    can `subscribe` and take part in a consumer group (group_aio.py): partitions come and go
    at rebalances inside `poll()`, heartbeats run in a task of the consumer's nursery, and
    leaving the `async with` block commits (auto commit) and leaves the group. assign, seek,
    seek_to_*, subscribe, subscription, group_metadata, high_watermark:
    consumer.ConsumerMethods (rebalance callbacks may be async functions here).
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
        clock: Clock = TRIO_CLOCK,
        connect: Connect | None = None,
        security: SecurityOption = None,
        **options: Any,
    ):
        super().__init__(request_timeout_ms, clock, connect, security)
        # Consumer groups (group_aio.py): group options are the group's, not the core's.
        group_options = {k: options.pop(k) for k in list(options) if k in GROUP_OPTIONS}
        rng = rng or random.Random()
        self._core = ConsumerCore(
            bootstrap, rng=rng, auto_offset_reset=auto_offset_reset,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records, request_timeout_ms=request_timeout_ms, **options,
        )
        self._group: TrioGroup | None = None
        if group_id is not None:
            self._group = TrioGroup(
                self._core, bootstrap, group_id=group_id, enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms, session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                partition_assignment_strategy=partition_assignment_strategy,
                group_instance_id=group_instance_id, request_timeout_ms=request_timeout_ms,
                rng=rng, clock=clock, connect=connect, security=self._security, **group_options,
            )  # fmt: skip

    async def _started(self, nursery: trio.Nursery) -> None:
        if self._group is not None:
            await self._group.start(nursery)

    async def _shutdown(self) -> None:
        if self._group is not None:
            await self._group.aclose()  # commits (auto commit) and leaves the group
        await super()._shutdown()

    # ---- consumer groups (the group half lives in group_aio.py) ----

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

    # ---- positions and records ----

    async def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() returns (resolving resets if needed).
        Raises RequestTimedOutError if it cannot be resolved in time."""
        net, core, clock = self._check_open(), self._core, self._clock
        deadline = clock.monotonic_ms() + (timeout_ms or self._request_timeout_ms)
        while (pos := core.resolve_position(*partition, clock.monotonic_ms(), deadline)) is None:
            await step(core, net, deadline)
        return pos

    async def offsets_for_times(self, timestamps: dict[tuple[str, int], int],
                                timeout_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int] | None]:
        """{(topic, partition): (offset, timestamp)} of the first record at or after each
        timestamp (None where there is none)."""
        net = self._check_open()
        calls = self._core.submit_offsets_for_times(timestamps, self._clock.monotonic_ms(), timeout_ms)
        while not all(c.done for c in calls.values()):
            await step(self._core, net, None)
        return self._core.offsets_for_times_result(calls)

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to timeout_ms for some. In a group
        it first rejoins if needed (running the rebalance callbacks) and auto-commits if due.
        Raises fetch errors that are not retriable, and fatal group errors."""
        net, core, clock = self._check_open(), self._core, self._clock
        deadline = core.begin_poll(timeout_ms, clock.monotonic_ms())
        if self._group is not None:
            await self._group.before_poll()
        while not (records := core.take_records(max_records)) and clock.monotonic_ms() < deadline:
            await step(core, net, deadline)
        return records

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for r in await self.poll(1000):
                yield r


# ---------------------------------------------------------------- admin


class Admin(_AsyncClient):
    """Trio admin client; the blocking Admin's calls (admin.py's ops, `request`,
    `request_many`), awaited."""

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = TRIO_CLOCK,
                 connect: Connect | None = None, security: SecurityOption = None, **options: Any):
        super().__init__(request_timeout_ms, clock, connect, security)
        self._core = AdminCore(bootstrap, rng=rng or random.Random(),
                               request_timeout_ms=request_timeout_ms, **options)

    async def _op(self, op: AdminOp, timeout_ms: int | None) -> Any:
        return op.parse(await self.request(op.request, timeout_ms=timeout_ms))

    # ---- raw requests ----

    async def request(self, request: dict, *, route: tuple[str, int] | None = None,
                      timeout_ms: int | None = None) -> dict:
        """As the blocking Admin.request: one protocol request, routed and retried."""
        return (await self.request_many([(request, route)], timeout_ms=timeout_ms))[0]

    async def request_many(self, requests: Iterable[tuple[dict, tuple[str, int] | None]], *,
                           timeout_ms: int | None = None) -> list[dict]:
        """As the blocking Admin.request_many: all in flight together, answers in order."""
        net = self._check_open()
        now = self._clock.monotonic_ms()
        calls = [self._core.submit(dict(req), now, route=route, timeout_ms=timeout_ms)
                 for req, route in requests]
        while pending := [c.deadline_ms for c in calls if not c.done]:
            await step(self._core, net, min(pending))
        return [c.value() for c in calls]

    # ---- admin ops ----

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str] | None = None, *,
                           timeout_ms: int | None = None) -> TopicInfo:
        return await self._op(create_topic_op(name, partitions, replication_factor, configs), timeout_ms)

    async def create_partitions(self, name: str, partitions: int, *, validate_only: bool = False,
                                timeout_ms: int | None = None) -> TopicInfo:
        return await self._op(create_partitions_op(name, partitions, validate_only), timeout_ms)

    async def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        await self._op(delete_topic_op(name), timeout_ms)

    async def describe_topics(self, names: Iterable[str] | None = None, *,
                              timeout_ms: int | None = None) -> dict[str, TopicInfo]:
        """{name: TopicInfo}; raises the error of the first requested topic that has one."""
        return await self._op(describe_topics_op(names), timeout_ms)

    async def list_topics(self, internal: bool = False, *, timeout_ms: int | None = None) -> list[str]:
        return await self._op(list_topics_op(internal), timeout_ms)

    async def alter_configs(self, name: str, set_configs: dict[str, str] | None = None,
                            delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete topic configs; returns the topic's configs after the change."""
        return await self._op(alter_configs_op(name, set_configs, delete_configs), timeout_ms)

    async def alter_broker_configs(self, resource: str, set_configs: dict[str, str] | None = None,
                                   delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete dynamic configs of broker `resource` ("" the cluster default);
        returns its dynamic configs after the change."""
        return await self._op(alter_broker_configs_op(resource, set_configs, delete_configs), timeout_ms)

    async def alter_group_configs(self, group_id: str, set_configs: dict[str, str] | None = None,
                                  delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete a group's configs (Kafka 4's `consumer.*` / `share.*` group configs);
        returns the configs set on it after the change."""
        return await self._op(alter_group_configs_op(group_id, set_configs, delete_configs), timeout_ms)

    async def describe_group_configs(self, group_id: str, *, timeout_ms: int | None = None) -> dict:
        """The configs set on a group (the others are the broker's defaults)."""
        return await self._op(describe_group_configs_op(group_id), timeout_ms)

    async def cluster_status(self, *, timeout_ms: int | None = None) -> ClusterStatus:
        return await self._op(cluster_status_op(), timeout_ms)

    # ---- ACLs and SCRAM users (Kafka's kafka-acls / kafka-configs --entity-type users) ----

    async def create_acls(self, acls: Iterable[AclBinding], *, timeout_ms: int | None = None) -> None:
        """Create ACLs (an existing one counts as created); raises the first one's error."""
        await self._op(create_acls_op(acls), timeout_ms)

    async def describe_acls(self, acl_filter: AclFilter | None = None, *,
                      timeout_ms: int | None = None) -> list[AclBinding]:
        """The ACLs matching `acl_filter` (default: all)."""
        return await self._op(describe_acls_op(acl_filter), timeout_ms)

    async def delete_acls(self, filters: Iterable[AclFilter], *, timeout_ms: int | None = None) -> list[AclBinding]:
        """Delete every ACL matching any filter; returns those deleted."""
        return await self._op(delete_acls_op(filters), timeout_ms)

    async def describe_users(self, users: Iterable[str] | None = None, *,
                       timeout_ms: int | None = None) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} of SCRAM users (all when `users` is None)."""
        return await self._op(describe_users_op(users), timeout_ms)

    async def upsert_user(self, user: str, password: str, *, mechanisms: Iterable[str] = tuple(SCRAM_MECHANISMS),
                    iterations: int = DEFAULT_ITERATIONS, timeout_ms: int | None = None) -> None:
        """Create or change `user`'s SCRAM credentials. Only a salted password is sent (never
        the password), but it lets its holder log in: use a TLS connection."""
        await self._op(upsert_user_op(user, password, mechanisms, iterations), timeout_ms)

    async def describe_quotas(self, components: Iterable[dict[str, Any]] = (), *, strict: bool = False,
                        timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """Kafka's DescribeClientQuotas: the quotas matching the filter components (all by default)."""
        return await self._op(describe_quotas_op(components, strict), timeout_ms)

    async def alter_quotas(self, entity: dict[str, str | None], set_values: dict[str, float],
                     remove: Iterable[str] = (), *, validate_only: bool = False,
                     timeout_ms: int | None = None) -> None:
        """Kafka's AlterClientQuotas for one entity ("user" and/or "client-id"; None: the default)."""
        await self._op(alter_quotas_op(entity, set_values, remove, validate_only), timeout_ms)

    async def describe_broker_configs(self, *, timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """The dynamic broker configs and their values in the metadata log (cluster-wide, per broker)."""
        return await self._op(describe_broker_configs_op(), timeout_ms)

    async def describe_features(self, *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Kafka's DescribeFeatures: {"supported": {feature: [min, max]}, "finalized": {feature: level}}."""
        return await self._op(describe_features_op(), timeout_ms)

    async def update_features(self, levels: dict[str, int], *, upgrade_type: int = 1, validate_only: bool = False,
                        timeout_ms: int | None = None) -> None:
        """Kafka's UpdateFeatures (upgrade_type 1 upgrade, 2 safe / 3 unsafe downgrade): all or none."""
        await self._op(update_features_op(levels, upgrade_type, validate_only), timeout_ms)

    async def delete_user(self, user: str, *, timeout_ms: int | None = None) -> None:
        """Remove every SCRAM credential of `user`; raises ResourceNotFoundError if it has none."""
        mechanisms = (await self.describe_users([user], timeout_ms=timeout_ms)).get(user, {})
        await self._op(delete_user_op(user, sorted(mechanisms)), timeout_ms)

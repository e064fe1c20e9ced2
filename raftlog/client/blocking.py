"""Blocking client shell: Producer, Consumer, Admin over plain sockets. Every decision is a
core's (producer.py, consumer.py, admin.py, group_session.py); this module moves bytes.

Design: the Producer runs one background I/O thread (like Kafka's Sender), so `send()` only
appends under a lock and returns a future at once; the Consumer and the Admin are
poll-driven on the caller's thread (`poll()` / each admin call drives the sockets until its
answer or deadline); a Consumer in a group adds one heartbeat thread (group_blocking.py).

Connections: one TCP connection per broker id, many requests in flight on it, answers matched
by id (in the core). Every client takes `security=`: a dict of Kafka's client keys
(`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
...), a client.properties path, or a ClientSecurity (raftlog/client/security.py); each new
connection then does TLS and the SASL login first. Sends use `sendall` on a socket with a timeout; reads use a selector, so
the one thread that drives a core waits on all its connections at once.

Time: each client reads one clock, its `clock` option (clock.py; default the system's
monotonic and wall clocks), and nothing else; waits on sockets and conditions are durations
computed from it.

Concurrency: Producer methods are thread-safe (one RLock around the core; futures complete
on the I/O thread, so a done-callback must not block on the producer). Consumer and Admin
are not thread-safe (as Kafka's consumer)."""

from __future__ import annotations

import concurrent.futures
import logging
import random
import threading
from typing import Any, Iterable, Iterator, Mapping

from raftlog.base.errors import RaftlogError, error_from_wire
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
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.consumer import ConsumerCore, ConsumerMethods, ConsumerRecord
from raftlog.client.errors import ClientClosedError, TransactionStateError
from raftlog.client.group import GROUP_OPTIONS
from raftlog.client.group_blocking import BlockingGroup
from raftlog.client.group_session import drive
from raftlog.client.txn import Flush, TxnCall, TxnState, group_fields
from raftlog.client.txn import end_transaction as txn_end
from raftlog.client.txn import init_transactions as txn_init
from raftlog.client.txn import send_offsets as txn_send_offsets
from raftlog.client.metadata_cache import MetadataCache
from raftlog.client.network_blocking import Network, step
from raftlog.client.producer import NO_METADATA, ProducerCore
from raftlog.client.request import ClusterStatus, TopicInfo, delete_records_request
from raftlog.client.security import SecurityOption, client_security

DELETE_RECORDS_ROUNDS = 10  # a leader move per round at most: bounded retries

__all__ = ["Producer", "Consumer", "Admin", "RecordFuture"]

log = logging.getLogger(__name__)

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
    def topic(self) -> str:
        return self._batch.topic

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

    Options as Kafka's producer: acks 0/1/'all' (default 'all'), linger_ms (5; None: a batch
    leaves only when full or flushed, so the same records always make the same batches), batch_bytes
    (64 KiB), buffer_bytes (32 MiB), compression (None/'gzip'/'snappy'/'lz4'/'zstd'),
    enable_idempotence (True), delivery_timeout_ms (120 s), request_timeout_ms (30 s),
    max_block_ms (60 s: how long send waits for metadata and buffer space, in all);
    `clock` (clock.py; default the system's) is the one clock the producer reads.
    `producer_identity=(producer_id, epoch)` fixes the idempotent identity (see
    ProducerCore: the Spark sink's exactly-once writes).

    Transactions (txn.py, docs/transactions.md): with `transactional_id` (and
    `transaction_timeout_ms`, 60 s), call `init_transactions()` once, then per transaction
    `begin_transaction()`, `send(...)`s, optionally `send_offsets_to_transaction(offsets,
    group)`, and `commit_transaction()` or `abort_transaction()`. A newer producer with the
    same id fences this one: its calls raise ProducerFencedError.
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        acks: int | str = "all",
        linger_ms: int | None = 5,
        batch_bytes: int | None = None,
        buffer_bytes: int | None = None,
        compression: str | int | None = None,
        enable_idempotence: bool = True,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_block_ms: int = 60_000,
        max_in_flight_per_partition: int = 5,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
        security: SecurityOption = None,
        **options: Any,
    ):
        security = client_security(security)  # first: a bad setting fails before any thread starts
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
        self._clock = clock
        self._wall_s = clock.wall_s  # the per-record timestamp: one C call, no method frame
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._net = Network(self._core, clock=clock, connect_timeout_ms=min(request_timeout_ms, 10_000),
                            send_timeout_ms=request_timeout_ms, wakeup=True, security=security)
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
        ts = int(self._wall_s() * 1000) if timestamp is None else timestamp
        if self._core.txn is not None:
            with self._lock:
                self._core.txn.check_sendable()
        if key is None and not headers and partition is None:
            # Hot path: most keyless records join the sticky batch of their topic.
            with self._lock:
                if self._closing:
                    raise ClientClosedError("producer is closed")
                b = self._core.send_sticky(topic, value, ts)
                if b is not None:
                    return RecordFuture(b, b.record_count - 1)
        with self._lock:
            b = self._append(topic, value, key, headers, partition, ts)
            index = b.record_count - 1
            if index == 0 or b.full:
                self._net.wake()  # a new batch: its linger deadline is new to the I/O thread
        return RecordFuture(b, index)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until each batch is acked or failed.
        Raises TimeoutError if `timeout` seconds pass first."""
        clock = self._clock
        deadline = None if timeout is None else clock.monotonic_s() + timeout
        with self._lock:
            self._flushers += 1
            self._core.begin_flush()
            self._net.wake()
            try:
                while self._core.has_pending():
                    if self._closed:
                        break
                    left = None if deadline is None else deadline - clock.monotonic_s()
                    if left is not None and left <= 0:
                        raise TimeoutError("flush timed out")
                    self._changed.wait(left if left is not None else 1.0)
            finally:
                self._flushers -= 1
                if not self._flushers:
                    self._core.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to `timeout` s), then stop; batches still unsent fail with ClientClosedError.
        `timeout=0` flushes nothing (as Kafka's close(Duration.ZERO)): open batches are not
        sealed and sent on the way out, they fail."""
        if self._closed:
            return
        try:
            if timeout is None or timeout > 0:
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

    # ---- transactions (txn.py) ----

    def init_transactions(self) -> tuple[int, int]:
        """Get the transactional id's producer id and a new epoch: an older producer of the
        id is fenced and its open transaction aborted. Returns (producer_id, epoch)."""
        txn = self._txn()
        pid, epoch = self._drive(txn_init(txn))
        with self._lock:
            self._core.set_transactional_producer(pid, epoch)
        return pid, epoch

    def begin_transaction(self) -> None:
        with self._lock:
            self._txn().begin()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int], group: Any) -> None:
        """Commit `offsets` ({(topic, partition): next offset}) for `group` (a group id, or a
        Consumer's `group_metadata()`, whose generation and member id are checked) with the
        transaction: they land in `__consumer_offsets` only when it commits."""
        self._drive(txn_send_offsets(self._txn(), offsets, **group_fields(group)))

    def commit_transaction(self) -> None:
        """Flush, then commit. A failed record raises (TransactionStateError naming it), and the
        transaction must be aborted. The markers follow the answer: read_committed readers
        see the records once each partition has its COMMIT marker."""
        self._drive(txn_end(self._txn(), True))

    def abort_transaction(self) -> None:
        """Abort: what this transaction wrote is never seen by read_committed readers."""
        self._drive(txn_end(self._txn(), False))

    def _txn(self) -> TxnState:
        txn = self._core.txn
        if txn is None:
            raise TransactionStateError("not a transactional producer (no transactional_id)")
        return txn

    def _drive(self, procedure: Any) -> Any:
        # Under the lock: the procedure changes the TxnState the I/O thread reads (waits on
        # the condition release it).
        with self._lock:
            return drive(procedure, self._perform)

    def _perform(self, effect: TxnCall | Flush) -> Any:
        if isinstance(effect, Flush):
            self.flush()
            return None
        with self._lock:
            if self._closing:
                raise ClientClosedError("producer is closed")
            call = self._core.submit(effect.request, self._clock.monotonic_ms(), route=effect.route)
            self._net.wake()
            while not call.done:
                if self._closed:
                    raise ClientClosedError("producer I/O thread stopped")
                self._changed.wait(1.0)
            return call.value()

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of `topic` (waits for its metadata, at most max_block_ms)."""
        def attempt():
            n = self._core.partition_count(topic)
            return NO_METADATA if n is None else n

        with self._lock:
            return list(range(self._wait(attempt, topic)))

    # ---- waits (caller's thread, lock held) ----

    def _append(self, topic, value, key, headers, partition, ts) -> ProducerBatch:
        core = self._core
        return self._wait(
            lambda: core.append(topic, value, key, headers, partition, ts, self._clock.monotonic_ms()), topic)

    def _wait(self, attempt, topic: str):
        """attempt() until it answers neither FULL nor NO_METADATA, waking the I/O thread and
        waiting for its news in between, at most max_block_ms; raises blocked_error then."""
        deadline = None
        while True:
            if self._closing:
                raise ClientClosedError("producer is closed")
            outcome = attempt()
            if outcome is not FULL and outcome is not NO_METADATA:
                return outcome
            now = self._clock.monotonic_ms()
            if deadline is None:
                deadline = now + self._max_block_ms
            elif now >= deadline:
                raise self._core.blocked_error(outcome, topic, self._max_block_ms)
            self._net.wake()
            self._changed.wait(min(deadline - now, 100) / 1000)

    # ---- I/O thread ----

    def _run(self) -> None:
        core, net, clock = self._core, self._net, self._clock
        try:
            while True:
                with self._lock:
                    now = clock.monotonic_ms()
                    actions = core.poll(now)
                    if self._closing and not actions and not core.has_pending():
                        break
                    wait_ms = core.wait_ms(now, None)
                failed = net.perform(actions)
                refused = net.take_refused()
                wait_ms = 0 if failed or refused else max(0, wait_ms - (clock.monotonic_ms() - now))
                responses, lost = net.wait(wait_ms / 1000)
                with self._lock:
                    core.on_input(responses, [*failed, *lost], clock.monotonic_ms(), refused)
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


class Consumer(ConsumerMethods):
    """Blocking consumer over manually assigned partitions, or subscribed in a group.

    `poll(timeout_ms)` returns the records fetched so far (long-poll fetch: max_wait_ms,
    min_bytes); iteration yields records one by one (forever, or until consumer_timeout_ms
    passes with none). auto_offset_reset ('latest' as in Kafka, 'earliest', 'none') decides
    where a partition with no position starts. With `group_id` (and the group options of
    group.new_group) it can `subscribe`: group_blocking.py runs the group half. `clock`
    (clock.py; default the system's) is the one clock it reads. assign, seek, seek_to_*,
    subscribe, subscription, group_metadata, high_watermark: consumer.ConsumerMethods.
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
        clock: Clock = SYSTEM_CLOCK,
        security: SecurityOption = None,
        **options: Any,
    ):
        security = client_security(security)
        # Consumer groups (group_blocking.py): group options are the group's, not the core's.
        group_options = {k: options.pop(k) for k in list(options) if k in GROUP_OPTIONS}
        self._core = ConsumerCore(
            bootstrap, rng=rng or random.Random(), auto_offset_reset=auto_offset_reset,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records, request_timeout_ms=request_timeout_ms, **options,
        )
        self._clock = clock
        self._net = Network(self._core, clock=clock, connect_timeout_ms=min(request_timeout_ms, 10_000),
                            send_timeout_ms=request_timeout_ms, security=security)
        self._request_timeout_ms = request_timeout_ms
        self._consumer_timeout_ms = consumer_timeout_ms
        self._closed = False
        self._group: BlockingGroup | None = None
        if group_options.get("group_id") is not None:
            self._group = BlockingGroup(self._core, bootstrap, request_timeout_ms=request_timeout_ms,
                                        clock=clock, security=security, **group_options)

    def _step_until(self, deadline_ms: int | None) -> None:
        step(self._core, self._net, deadline_ms)

    # ---- consumer groups (the group half lives in group_blocking.py) ----

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commit offsets (default: the position of every assigned partition) and wait."""
        self._require_group().commit(offsets, sync=True)

    def commit_async(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Queue a commit and return at once (its failure is logged at a later poll)."""
        self._require_group().commit(offsets, sync=False)

    def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The group's committed offset of each partition (None: none)."""
        return self._require_group().committed(partitions)

    # ---- positions and records ----

    def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() returns (resolving resets if needed).
        Raises RequestTimedOutError if it cannot be resolved in time."""
        core, clock = self._core, self._clock
        deadline = clock.monotonic_ms() + (timeout_ms or self._request_timeout_ms)
        while (pos := core.resolve_position(*partition, clock.monotonic_ms(), deadline)) is None:
            self._step_until(deadline)
        return pos

    def offsets_for_times(self, timestamps: dict[tuple[str, int], int],
                          timeout_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int] | None]:
        """{(topic, partition): (offset, timestamp)} of the first record at or after each
        timestamp (None where there is none)."""
        calls = self._core.submit_offsets_for_times(timestamps, self._clock.monotonic_ms(), timeout_ms)
        while not all(c.done for c in calls.values()):
            self._step_until(None)
        return self._core.offsets_for_times_result(calls)

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to timeout_ms for some. In a group
        it first rejoins if needed (running the rebalance callbacks) and auto-commits if due.
        Raises fetch errors that are not retriable (e.g. OffsetOutOfRangeError with 'none'),
        and fatal group errors."""
        if self._closed:
            raise ClientClosedError("consumer is closed")
        core, clock = self._core, self._clock
        deadline = core.begin_poll(timeout_ms, clock.monotonic_ms())
        if self._group is not None:
            self._group.before_poll()
        while not (records := core.take_records(max_records)) and clock.monotonic_ms() < deadline:
            self._step_until(deadline)
        return records

    def __iter__(self) -> Iterator[ConsumerRecord]:
        clock = self._clock
        idle_since = clock.monotonic_ms()
        while not self._closed:
            records = self.poll(1000 if self._consumer_timeout_ms is None
                                else min(1000, self._consumer_timeout_ms))
            if records:
                yield from records
                idle_since = clock.monotonic_ms()
            elif self._consumer_timeout_ms is not None and (
                clock.monotonic_ms() - idle_since >= self._consumer_timeout_ms
            ):
                return

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
    controller) and is retried on connection loss until request_timeout_ms. The ops are
    admin.py's; `request` / `request_many` send any protocol request (tools built on the
    client: the Spark source, the CLI)."""

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = SYSTEM_CLOCK,
                 security: SecurityOption = None, **options: Any):
        security = client_security(security)
        self._core = AdminCore(bootstrap, rng=rng or random.Random(),
                               request_timeout_ms=request_timeout_ms, **options)
        self._clock = clock
        self._net = Network(self._core, clock=clock, connect_timeout_ms=min(request_timeout_ms, 10_000),
                            send_timeout_ms=request_timeout_ms, security=security)

    def _op(self, op: AdminOp, timeout_ms: int | None) -> Any:
        return op.parse(self.request(op.request, timeout_ms=timeout_ms))

    # ---- raw requests ----

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
        now = self._clock.monotonic_ms()
        calls = [self._core.submit(dict(req), now, route=route, timeout_ms=timeout_ms)
                 for req, route in requests]
        while pending := [c.deadline_ms for c in calls if not c.done]:
            step(self._core, self._net, min(pending))
        return [c.value() for c in calls]

    @property
    def metadata(self) -> MetadataCache:
        """The routing cache (leaders by partition, broker addresses). `request` keeps it
        fresh; a caller that learns more (a metadata answer, a NOT_LEADER hint inside an ok
        response) may feed it: `metadata.update(parse_metadata(msg), now_ms)` with `now_ms`
        from this Admin's clock (default: time.monotonic in ms), `metadata.apply_leader_hint(...)`."""
        return self._core.metadata

    def request_metadata_refresh(self) -> None:
        """Refresh the routing cache before the next routed request."""
        self._core.request_metadata_refresh()

    # ---- admin ops ----

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None, *, timeout_ms: int | None = None) -> TopicInfo:
        return self._op(create_topic_op(name, partitions, replication_factor, configs), timeout_ms)

    def create_partitions(self, name: str, partitions: int, *, validate_only: bool = False,
                          timeout_ms: int | None = None) -> TopicInfo:
        """Grow topic `name` to `partitions` partitions (the new total; Kafka's
        CreatePartitions). Returns the topic as the controller saw it after the change.
        Raises InvalidPartitionsError (not more than now), UnknownTopicOrPartitionError,
        InvalidReplicationFactorError (fewer live brokers than the topic's RF)."""
        return self._op(create_partitions_op(name, partitions, validate_only), timeout_ms)

    def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        self._op(delete_topic_op(name), timeout_ms)

    def describe_topics(self, names: Iterable[str] | None = None, *,
                        timeout_ms: int | None = None) -> dict[str, TopicInfo]:
        """{name: TopicInfo}; raises the error of the first requested topic that has one."""
        return self._op(describe_topics_op(names), timeout_ms)

    def list_topics(self, internal: bool = False, *, timeout_ms: int | None = None) -> list[str]:
        return self._op(list_topics_op(internal), timeout_ms)

    def alter_configs(self, name: str, set_configs: dict[str, str] | None = None,
                      delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete topic configs; returns the topic's configs after the change."""
        return self._op(alter_configs_op(name, set_configs, delete_configs), timeout_ms)

    def alter_broker_configs(self, resource: str, set_configs: dict[str, str] | None = None,
                             delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete dynamic configs of broker `resource` ("" the cluster default);
        returns its dynamic configs after the change."""
        return self._op(alter_broker_configs_op(resource, set_configs, delete_configs), timeout_ms)

    def alter_group_configs(self, group_id: str, set_configs: dict[str, str] | None = None,
                            delete_configs: Iterable[str] = (), *, timeout_ms: int | None = None) -> dict:
        """Set and delete a group's configs (Kafka 4's `consumer.*` / `share.*` group configs);
        returns the configs set on it after the change."""
        return self._op(alter_group_configs_op(group_id, set_configs, delete_configs), timeout_ms)

    def describe_group_configs(self, group_id: str, *, timeout_ms: int | None = None) -> dict:
        """The configs set on a group (the others are the broker's defaults)."""
        return self._op(describe_group_configs_op(group_id), timeout_ms)

    def cluster_status(self, *, timeout_ms: int | None = None) -> ClusterStatus:
        return self._op(cluster_status_op(), timeout_ms)

    # ---- ACLs and SCRAM users (Kafka's kafka-acls / kafka-configs --entity-type users) ----

    def create_acls(self, acls: Iterable[AclBinding], *, timeout_ms: int | None = None) -> None:
        """Create ACLs (an existing one counts as created); raises the first one's error."""
        self._op(create_acls_op(acls), timeout_ms)

    def describe_acls(self, acl_filter: AclFilter | None = None, *,
                      timeout_ms: int | None = None) -> list[AclBinding]:
        """The ACLs matching `acl_filter` (default: all)."""
        return self._op(describe_acls_op(acl_filter), timeout_ms)

    def delete_acls(self, filters: Iterable[AclFilter], *, timeout_ms: int | None = None) -> list[AclBinding]:
        """Delete every ACL matching any filter; returns those deleted."""
        return self._op(delete_acls_op(filters), timeout_ms)

    def describe_users(self, users: Iterable[str] | None = None, *,
                       timeout_ms: int | None = None) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} of SCRAM users (all when `users` is None)."""
        return self._op(describe_users_op(users), timeout_ms)

    def upsert_user(self, user: str, password: str, *, mechanisms: Iterable[str] = tuple(SCRAM_MECHANISMS),
                    iterations: int = DEFAULT_ITERATIONS, timeout_ms: int | None = None) -> None:
        """Create or change `user`'s SCRAM credentials. Only a salted password is sent (never
        the password), but it lets its holder log in: use a TLS connection."""
        self._op(upsert_user_op(user, password, mechanisms, iterations), timeout_ms)

    def describe_quotas(self, components: Iterable[dict[str, Any]] = (), *, strict: bool = False,
                        timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """Kafka's DescribeClientQuotas: the quotas matching the filter components (all by default)."""
        return self._op(describe_quotas_op(components, strict), timeout_ms)

    def alter_quotas(self, entity: dict[str, str | None], set_values: dict[str, float],
                     remove: Iterable[str] = (), *, validate_only: bool = False,
                     timeout_ms: int | None = None) -> None:
        """Kafka's AlterClientQuotas for one entity ("user" and/or "client-id"; None: the default)."""
        self._op(alter_quotas_op(entity, set_values, remove, validate_only), timeout_ms)

    def describe_broker_configs(self, *, timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """The dynamic broker configs and their values in the metadata log (cluster-wide, per broker)."""
        return self._op(describe_broker_configs_op(), timeout_ms)

    def describe_features(self, *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Kafka's DescribeFeatures: {"supported": {feature: [min, max]}, "finalized": {feature: level}}."""
        return self._op(describe_features_op(), timeout_ms)

    def update_features(self, levels: dict[str, int], *, upgrade_type: int = 1, validate_only: bool = False,
                        timeout_ms: int | None = None) -> None:
        """Kafka's UpdateFeatures (upgrade_type 1 upgrade, 2 safe / 3 unsafe downgrade): all or none."""
        self._op(update_features_op(levels, upgrade_type, validate_only), timeout_ms)

    def delete_user(self, user: str, *, timeout_ms: int | None = None) -> None:
        """Remove every SCRAM credential of `user`; raises ResourceNotFoundError if it has none."""
        mechanisms = (self.describe_users([user], timeout_ms=timeout_ms)).get(user, {})
        self._op(delete_user_op(user, sorted(mechanisms)), timeout_ms)

    def delete_records(self, offsets: dict[tuple[str, int], int], *,
                       timeout_ms: int | None = None) -> dict[tuple[str, int], int]:
        """Kafka's DeleteRecords: for each (topic, partition), delete every record below the
        offset (-1: below the high watermark) on every replica. Returns each low watermark
        (the log start a majority now holds). Raises the first partition's error:
        OffsetOutOfRangeError (past the high watermark), UnknownTopicOrPartitionError,
        RequestTimedOutError (the deletion may still happen), ... A partition whose leader
        moved (NOT_LEADER) is sent again to the new one, up to DELETE_RECORDS_ROUNDS times."""
        deadline_ms = self._clock.monotonic_ms() + (timeout_ms or self._core.request_timeout_ms)
        pending = dict(offsets)
        out: dict[tuple[str, int], int] = {}
        last: RaftlogError | None = None
        for _ in range(DELETE_RECORDS_ROUNDS):
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            answers = self.request_many(
                [(delete_records_request([(t, p, o)]), (t, p)) for (t, p), o in pending.items()],
                timeout_ms=max(1, remaining_ms))
            retry: dict[tuple[str, int], int] = {}
            for (tp, offset), answer in zip(list(pending.items()), answers):
                [entry] = answer["partitions"]
                if entry.get("error") is None:
                    out[tp] = entry["low_watermark"]
                    continue
                exc = error_from_wire(entry["error"])
                if not exc.retriable or self._clock.monotonic_ms() >= deadline_ms:
                    raise exc
                self._core.metadata.apply_leader_hint(tp[0], tp[1], getattr(exc, "leader_id", None),
                                                      getattr(exc, "leader", None))
                retry[tp] = offset
                last = exc
            if not retry:
                return out
            pending = retry
        assert last is not None
        raise last

    def close(self) -> None:
        self._net.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

"""Producer record accumulator: per-partition batches, linger, byte bounds, in-flight limits, idempotent sequences.

Pure: no I/O, no clock (`now_ms` is an argument), no threads (the shell holds a lock around
it if it has several threads). The producer core (`producer.ProducerCore`) decides where and when; this
module only keeps batches.

Life of a batch: *open* (last of its partition's queue, records still appended) → *full*
(the next record did not fit, or `flush`/`close` asked for it) → *drained* (sealed: built,
stamped with producer id / epoch / base sequence, handed to the core for a broker) →
*acked* (future gets the base offset) or *failed* (future gets the error) or back to the
queue for a *retry* with the very same bytes.

Invariants:
* Bytes held (`buffered_bytes`: an upper bound of every pending record's encoded size) never
  exceed `buffer_bytes`; `append` returns `FULL` instead of growing (the shell then blocks or
  raises BufferFullError).
* Per partition, batches leave in append order, at most `max_in_flight_per_partition` are
  unacknowledged at once, and a batch being retried is sent alone (no other batch of its
  partition in flight), so a retry cannot overtake or be overtaken.
* With idempotence, a batch's base sequence is assigned when it is drained for the first time
  (Kafka assigns at drain too: an expired never-sent batch then leaves no gap), sequences of
  a partition are contiguous, and a retried batch is re-sent byte-identical (same producer
  id, epoch, base sequence), which is what lets the leader drop the duplicate.
* A batch holds at most `batch_bytes` of records, except a single record bigger than that,
  which gets a batch of its own (as in Kafka); no record may exceed `max_request_bytes`.
* Each batch owns one future (from the injected `future_factory`); a record's result is
  (partition, base_offset + its index), or offset -1 when acks=0 / unknown.
* `linger_ms=None`: no batch is ever sealed by time. A batch leaves only when full (the next
  record did not fit) or flushed, so where batches begin and end is a function of the
  records appended and the flushes asked for alone: a producer that appends the same
  records again cuts the same batches, with the same sequences (the Spark sink's
  exactly-once rests on it, docs/spark-exactly-once.md). The delivery clock of such a
  batch starts when it became full or was first drained, not when it opened; an open one
  never expires.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from partition.batch import BatchBuilder, Compression, decode_batch
from raftlog.base.errors import MessageTooLargeError

__all__ = [
    "FULL",
    "NEW_BATCH",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "ProducerBatch",
    "Accumulator",
    "RecordTooLarge",
    "record_size_bound",
]

# Kafka's batch.size is 16 KiB, tuned for a JVM where per-batch cost is small. Here every
# batch costs a Python round of build + CRC + CBOR + a response parse, so bigger batches are
# what reaches 200k records/s; 64 KiB of 100-byte records is ~500 records per batch, and a
# batch is still far below the 1 MiB request bound, the frame limit and the server's memory.
DEFAULT_BATCH_BYTES = 64 * 1024
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024  # Kafka's buffer.memory
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024  # Kafka's max.request.size
REQUEST_OVERHEAD_BYTES = 4096  # a produce request's frame around its batches (CBOR, names), at most
_RAISE_HINT = (" (raise with the producer's max_request_bytes / raftlog produce --max-request-bytes; "
               "the topic's max_message_bytes and the node's --max-request-bytes must allow it too)")

# Upper bound of a record's framing overhead in a v2 batch: length (5) + attributes (1) +
# timestamp delta (10) + offset delta (5) + key length (5) + value length (5) + header
# count (5). Using a bound, not the exact size, lets `append` refuse a record before encoding it.
_RECORD_OVERHEAD_BOUND = 36
_BATCH_HEADER_BYTES = 61


class _Full:
    __slots__ = ()

    def __repr__(self) -> str:
        return "FULL"


FULL = _Full()
"""`Accumulator.append`'s answer when the record would push buffered bytes past buffer_bytes."""


class _NewBatch:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEW_BATCH"


NEW_BATCH = _NewBatch()
"""`append(..., abort_on_new_batch=True)`'s answer when the record would open a new batch."""


class RecordTooLarge(MessageTooLargeError):
    """A record that can never be sent: bigger than max_request_bytes or buffer_bytes."""


def record_size_bound(value: bytes | None, key: bytes | None, headers) -> int:
    """An upper bound of the bytes this record adds to a batch (exact up to varint widths)."""
    n = _RECORD_OVERHEAD_BOUND
    if value is not None:
        n += len(value)
    if key is not None:
        n += len(key)
    if headers:
        for hk, hv in headers:
            n += 10 + len(hk) * 4 + (len(hv) if hv is not None else 0)
    return n


class ProducerBatch:
    """One batch of one partition, from first record to ack. Fields are the accumulator's."""

    __slots__ = (
        "topic", "partition", "builder", "record_count", "reserved_bytes", "created_ms",
        "full", "payload", "producer_id", "producer_epoch", "base_sequence", "attempts",
        "retry_at_ms", "in_flight", "future", "base_offset", "done", "maybe_written",
        "last_error", "skipped",
    )

    def __init__(self, topic: str, partition: int, builder: BatchBuilder, created_ms: int, future):
        self.topic = topic
        self.partition = partition
        self.builder: BatchBuilder | None = builder
        self.record_count = 0
        self.reserved_bytes = _BATCH_HEADER_BYTES
        self.created_ms = created_ms
        self.full = False
        self.payload: bytes | None = None  # set when drained; never changes after
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.attempts = 0  # times sent
        self.retry_at_ms = 0
        self.in_flight = False
        self.future = future
        self.base_offset = -1
        self.done = False
        self.maybe_written = False  # some attempt ended with an unknown outcome
        self.last_error: BaseException | None = None
        self.skipped = 0  # leading records the leader had already (see Accumulator.recut)

    @property
    def sealed(self) -> bool:
        return self.payload is not None

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.topic}-{self.partition}, records={self.record_count}, "
            f"seq={self.base_sequence}, attempts={self.attempts}, in_flight={self.in_flight})"
        )


class _PartitionQueue:
    __slots__ = ("waiting", "in_flight", "next_sequence", "acked_sequence")

    def __init__(self) -> None:
        self.waiting: deque[ProducerBatch] = deque()  # sealed retries + unsent; last may be open
        self.in_flight: list[ProducerBatch] = []  # in sequence order
        self.next_sequence = 0
        # The sequence after the last batch acknowledged in order under the current producer
        # id (what its leader expects next), or -1 before any.
        self.acked_sequence = -1


class Accumulator:
    """Batches records per partition. Not thread-safe. See the module docstring for invariants."""

    def __init__(
        self,
        *,
        future_factory: Callable[[], object],
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        linger_ms: int | None = 5,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        compression: Compression | int = Compression.NONE,
        idempotent: bool = True,
        max_in_flight_per_partition: int = 5,
        transactional: bool = False,
    ):
        if batch_bytes < 128:
            raise ValueError(f"batch_bytes must be >= 128, got {batch_bytes}")
        if buffer_bytes < batch_bytes:
            raise ValueError(f"buffer_bytes {buffer_bytes} < batch_bytes {batch_bytes}")
        if linger_ms is not None and linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0 or None, got {linger_ms}")
        if not 1 <= max_in_flight_per_partition <= (5 if idempotent else 1000):
            # The leader remembers the last 5 batches per producer (DESIGN §4): a 6th in
            # flight could be a duplicate it can no longer recognise.
            raise ValueError(
                f"max_in_flight_per_partition must be in [1, {5 if idempotent else 1000}]"
                f"{' with idempotence' if idempotent else ''}, got {max_in_flight_per_partition}"
            )
        self._future_factory = future_factory
        self.batch_bytes = batch_bytes
        self.linger_ms = linger_ms
        self.buffer_bytes = buffer_bytes
        self.max_request_bytes = max_request_bytes
        # The nodes' limit on a request (their max_frame_bytes, from metadata answers); None
        # until known. A record that cannot fit under it fails at once (RecordTooLarge).
        self.node_max_request_bytes: int | None = None
        self.compression = Compression(compression)
        self.idempotent = idempotent
        self.max_in_flight_per_partition = max_in_flight_per_partition
        # Batches carry the transactional attribute (bit 4) of a transactional producer.
        self.transactional = transactional
        # Called with (batch, error) each time a batch fails for good (a transaction must abort).
        self.on_fail: Callable[[ProducerBatch, BaseException], None] | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.buffered_bytes = 0
        self._queues: dict[str, dict[int, _PartitionQueue]] = {}
        self._flush_all = False  # flush/close: every batch is ready now, linger or not

    def _request_cap(self) -> int:
        node = self.node_max_request_bytes
        if node is None:
            return self.max_request_bytes
        return max(1, min(self.max_request_bytes, node - REQUEST_OVERHEAD_BYTES))

    # ---- appending (hot path) ----

    def append(self, topic: str, partition: int, value, key, headers, timestamp_ms: int,
               now_ms: int, abort_on_new_batch: bool = False):
        """Add one record to (topic, partition)'s open batch (opening one if needed).

        Returns the ProducerBatch that holds it (the record's index is `record_count - 1`),
        FULL when buffered bytes would pass buffer_bytes, or NEW_BATCH when the record would
        open a new batch and `abort_on_new_batch` is set (in both cases nothing was added;
        the sticky partitioner uses NEW_BATCH to move on, as Kafka's abortOnNewBatch).
        Raises RecordTooLarge for a record that no buffer could ever take.
        """
        size = _RECORD_OVERHEAD_BOUND
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            size = record_size_bound(value, key, headers)
        if self.buffered_bytes + size > self.buffer_bytes:
            if size + _BATCH_HEADER_BYTES > min(self.max_request_bytes, self.buffer_bytes):
                raise RecordTooLarge(
                    f"record of up to {size} bytes exceeds max_request_bytes "
                    f"{self.max_request_bytes} / buffer_bytes {self.buffer_bytes}{_RAISE_HINT}"
                )
            return FULL
        parts = self._queues.get(topic)
        if parts is None:
            parts = self._queues[topic] = {}
        q = parts.get(partition)
        if q is None:
            q = parts[partition] = _PartitionQueue()
        waiting = q.waiting
        b = waiting[-1] if waiting else None
        if b is None or b.full or b.builder is None or (
            b.reserved_bytes + size > self.batch_bytes and b.record_count
        ):
            if abort_on_new_batch:
                return NEW_BATCH
            if size + _BATCH_HEADER_BYTES > self.max_request_bytes:
                raise RecordTooLarge(
                    f"record of up to {size} bytes exceeds max_request_bytes {self.max_request_bytes}{_RAISE_HINT}"
                )
            node_limit = self.node_max_request_bytes
            if node_limit is not None and size + _BATCH_HEADER_BYTES + REQUEST_OVERHEAD_BYTES > node_limit:
                raise RecordTooLarge(
                    f"record of up to {size} bytes exceeds the node's limit on a request ({node_limit} "
                    "bytes): raise it with raftlog node start --max-request-bytes (max_frame_bytes)"
                )
            if b is not None:
                b.full = True
                if self.linger_ms is None:
                    b.created_ms = now_ms  # its delivery clock starts now (module docstring)
            b = ProducerBatch(
                topic, partition, BatchBuilder(compression=self.compression, is_transactional=self.transactional), now_ms,
                self._future_factory(),
            )
            waiting.append(b)
            self.buffered_bytes += _BATCH_HEADER_BYTES
        if key is None and not headers:
            b.builder.append_value(value, timestamp_ms)
        else:
            b.builder.append(value, key, headers or (), timestamp_ms=timestamp_ms)
        b.record_count += 1
        b.reserved_bytes += size
        self.buffered_bytes += size
        return b

    def append_to(self, b: ProducerBatch, value, timestamp_ms: int) -> bool:
        """Fast path of `append` for a keyless, headerless record into `b`, the batch the
        caller appended to last: True if it went in; False if `b` cannot take it any more
        (sealed, full, no room, or the buffer is used up): then call `append`.

        `b` is still the open batch of its partition whenever it has a builder and is not
        full (a batch opened behind it marks it full first), so no queue lookup is needed.
        """
        builder = b.builder
        if builder is None or b.full:
            return False
        size = _RECORD_OVERHEAD_BOUND if value is None else _RECORD_OVERHEAD_BOUND + len(value)
        if b.reserved_bytes + size > self.batch_bytes or self.buffered_bytes + size > self.buffer_bytes:
            return False
        builder.append_value(value, timestamp_ms)
        b.record_count += 1
        b.reserved_bytes += size
        self.buffered_bytes += size
        return True

    # ---- draining ----

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id/epoch: batches drained from now on carry it, sequences restart at 0.

        Batches already sealed keep their bytes (their retries stay duplicates of themselves).
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        for parts in self._queues.values():
            for q in parts.values():
                q.next_sequence = 0
                q.acked_sequence = -1

    def begin_flush(self) -> None:
        """Make every batch ready regardless of linger (flush/close)."""
        self._flush_all = True

    def end_flush(self) -> None:
        self._flush_all = False

    def has_pending(self) -> bool:
        """True while any batch is unsent, in flight or waiting for a retry."""
        for parts in self._queues.values():
            for q in parts.values():
                if q.waiting or q.in_flight:
                    return True
        return False

    def oldest_waiting_ms(self) -> int | None:
        """`created_ms` of the oldest batch not in flight (when delivery may expire next)."""
        best = None
        for parts in self._queues.values():
            for q in parts.values():
                if q.waiting and (best is None or q.waiting[0].created_ms < best):
                    best = q.waiting[0].created_ms
        return best

    def never_sent(self, topic: str) -> list[ProducerBatch]:
        """`topic`'s batches that no attempt has sent yet."""
        return [b for q in self._queues.get(topic, {}).values() for b in q.waiting if not b.attempts]

    def pending_partitions(self) -> Iterable[tuple[str, int]]:
        """(topic, partition) pairs that hold a batch not yet sent (for metadata lookups)."""
        for topic, parts in self._queues.items():
            for p, q in parts.items():
                if q.waiting:
                    yield topic, p

    def _head_ready(self, q: _PartitionQueue, now_ms: int) -> ProducerBatch | None:
        if not q.waiting:
            return None
        b = q.waiting[0]
        if b.attempts:
            # A retry goes alone so it cannot be reordered with its partition's other batches.
            if q.in_flight or b.retry_at_ms > now_ms:
                return None
            return b
        if len(q.in_flight) >= self.max_in_flight_per_partition:
            return None
        if q.in_flight and q.in_flight[-1].attempts > 1:
            return None  # a retry is in flight: wait for it before sending the next ones
        if b.full or self._flush_all or len(q.waiting) > 1:
            return b
        if self.linger_ms is not None and now_ms - b.created_ms >= self.linger_ms:
            return b
        return None

    def drain(
        self,
        now_ms: int,
        leader_of: Callable[[str, int], int | None],
        sendable: Callable[[int], bool] = lambda broker_id: True,
    ) -> dict[int, list[ProducerBatch]]:
        """Seal and take the batches ready to go, grouped per leader broker id.

        A partition contributes at most one batch per call (one per request, as in Kafka);
        a broker's list stops before max_request_bytes (but always holds at least one batch).
        Partitions whose leader is unknown, or whose leader is not `sendable` (e.g. in
        reconnect backoff), are skipped. Drained batches are marked in flight.
        """
        out: dict[int, list[ProducerBatch]] = {}
        out_bytes: dict[int, int] = {}
        for topic, parts in self._queues.items():
            for partition, q in parts.items():
                b = self._head_ready(q, now_ms)
                if b is None:
                    continue
                leader = leader_of(topic, partition)
                if leader is None or not sendable(leader):
                    continue
                if b.payload is None:
                    if self.linger_ms is None and not b.full:
                        b.created_ms = now_ms  # flushed while open: the clock starts now
                    self._seal(b, q)
                used = out_bytes.get(leader, 0)
                if used and used + len(b.payload) > self._request_cap():
                    continue
                q.waiting.popleft()
                b.in_flight = True
                b.attempts += 1
                q.in_flight.append(b)
                out.setdefault(leader, []).append(b)
                out_bytes[leader] = used + len(b.payload)
        return out

    def _seal(self, b: ProducerBatch, q: _PartitionQueue) -> None:
        if self.idempotent and self.producer_id >= 0:
            b.producer_id = self.producer_id
            b.producer_epoch = self.producer_epoch
            b.base_sequence = q.next_sequence
            # Sequences are int32 and wrap like Kafka's (DefaultRecordBatch.incrementSequence).
            q.next_sequence = (q.next_sequence + b.record_count) & 0x7FFFFFFF
            b.builder.set_producer_state(b.producer_id, b.producer_epoch, b.base_sequence)
        payload = b.builder.build()
        b.payload = payload
        b.builder = None
        b.full = True
        # Swap the record-size bound held so far for the batch's real size.
        self.buffered_bytes += len(payload) - b.reserved_bytes
        b.reserved_bytes = len(payload)

    def next_ready_ms(self, now_ms: int) -> int | None:
        """Earliest time a waiting batch becomes ready by linger or backoff (None: nothing waits).

        Readiness blocked by in-flight limits or unknown leaders is not a time: the shell is
        woken by the response or the metadata instead.
        """
        best: int | None = None
        for parts in self._queues.values():
            for q in parts.values():
                if not q.waiting:
                    continue
                b = q.waiting[0]
                if b.attempts:
                    t = b.retry_at_ms
                elif b.full or self._flush_all or len(q.waiting) > 1:
                    t = now_ms
                elif self.linger_ms is None:
                    continue  # open until full or flushed: no time makes it ready
                else:
                    t = b.created_ms + self.linger_ms
                if best is None or t < best:
                    best = t
        return best

    # ---- outcomes ----

    def _queue(self, b: ProducerBatch) -> _PartitionQueue:
        return self._queues[b.topic][b.partition]

    def complete(self, b: ProducerBatch, base_offset: int) -> None:
        """The broker acknowledged `b` at `base_offset` (-1 when acks=0 or unknown)."""
        q = self._queue(b)
        if b.base_sequence >= 0 and b.producer_id == self.producer_id and _oldest_unacked(q, b):
            q.acked_sequence = (b.base_sequence + b.record_count - b.skipped) & 0x7FFFFFFF
        q.in_flight.remove(b)
        b.in_flight = False
        b.base_offset = base_offset
        self._finish(b)
        b.future.set_result(base_offset)

    def fail(self, b: ProducerBatch, error: BaseException) -> None:
        """`b` failed for good: its future gets `error`."""
        q = self._queue(b)
        if b.in_flight:
            q.in_flight.remove(b)
            b.in_flight = False
        elif b in q.waiting:
            q.waiting.remove(b)
        self._finish(b)
        b.future.set_exception(error)
        if self.on_fail is not None:
            self.on_fail(b, error)

    def retry(self, b: ProducerBatch, retry_at_ms: int) -> None:
        """Put in-flight `b` back at its place (sequence order) at the front of its queue."""
        q = self._queue(b)
        q.in_flight.remove(b)
        b.in_flight = False
        b.retry_at_ms = retry_at_ms
        # Batches re-queued by retries stay in the order they were first sent.
        i = 0
        for w in q.waiting:
            if not w.attempts or _seq_before(b, w):
                break
            i += 1
        q.waiting.insert(i, b)

    def recut(self, b: ProducerBatch, first_sequence: int) -> bool:
        """Cut off the head of sealed batch `b` that its leader already holds: rebuild it with
        only the records numbered `first_sequence` and later, re-numbered from there (same
        producer, epoch, timestamps). For a producer with a fixed identity that re-sends
        records numbered as an earlier run numbered them, but cut into batches elsewhere
        (OUT_OF_ORDER_SEQUENCE_NUMBER with `expected_sequence` inside `b`). Returns False,
        changing nothing, unless base_sequence < first_sequence <= b's last sequence.
        """
        skip = first_sequence - b.base_sequence
        if b.payload is None or b.base_sequence < 0 or not 0 < skip < b.record_count - b.skipped:
            return False
        _h, records = decode_batch(b.payload)
        builder = BatchBuilder(compression=self.compression, is_transactional=self.transactional)
        for r in records[skip:]:
            builder.append(r.value, r.key, r.headers, timestamp_ms=r.timestamp)
        builder.set_producer_state(b.producer_id, b.producer_epoch, first_sequence)
        payload = builder.build()
        self.buffered_bytes += len(payload) - b.reserved_bytes
        b.reserved_bytes = len(payload)
        b.payload = payload
        b.base_sequence = first_sequence
        b.skipped += skip
        return True

    def has_earlier_unacked(self, b: ProducerBatch) -> bool:
        """True if a batch of b's partition sealed before b is still unacknowledged."""
        q = self._queue(b)
        for other in q.in_flight:
            if other is not b and _seq_before(other, b):
                return True
        for other in q.waiting:
            if other is not b and other.attempts and _seq_before(other, b):
                return True
        return False

    def is_next_sequence(self, b: ProducerBatch) -> bool:
        """True if every batch of b's partition sealed before b is acknowledged, so its
        leader expects b's sequence next (Kafka's TransactionManager.isNextSequence)."""
        return b.base_sequence >= 0 and b.base_sequence == self._queue(b).acked_sequence

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Remove and return not-in-flight batches older than delivery_timeout_ms.

        The caller fails them (DeliveryTimedOutError if never sent, else an unknown outcome).
        """
        expired: list[ProducerBatch] = []
        limit = now_ms - delivery_timeout_ms
        no_linger = self.linger_ms is None
        for parts in self._queues.values():
            for q in parts.values():
                if q.waiting and q.waiting[0].created_ms <= limit:
                    keep: deque[ProducerBatch] = deque()
                    for b in q.waiting:
                        if no_linger and not b.full:
                            keep.append(b)  # open with linger_ms=None: not due yet
                        else:
                            (expired if b.created_ms <= limit else keep).append(b)
                    q.waiting = keep
        for b in expired:
            self._finish(b)
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every batch not in flight (close without flush)."""
        out: list[ProducerBatch] = []
        for parts in self._queues.values():
            for q in parts.values():
                out.extend(q.waiting)
                q.waiting.clear()
        for b in out:
            self._finish(b)
        return out

    def _finish(self, b: ProducerBatch) -> None:
        b.done = True
        b.builder = None
        self.buffered_bytes -= b.reserved_bytes
        b.reserved_bytes = 0


def _oldest_unacked(q: _PartitionQueue, b: ProducerBatch) -> bool:
    """No batch of b's partition sealed before b is unacknowledged: b is the first in flight
    and no retry waiting (retries wait at the front of the queue) comes before it."""
    if q.in_flight[0] is not b:
        return False
    for w in q.waiting:
        if not w.attempts:
            return True
        if _seq_before(w, b):
            return False
    return True


def _seq_before(a: ProducerBatch, b: ProducerBatch) -> bool:
    """a was sealed before b (same partition); by sequence when both have one."""
    if a.base_sequence >= 0 and b.base_sequence >= 0 and a.producer_id == b.producer_id:
        return a.base_sequence < b.base_sequence
    return a.created_ms < b.created_ms

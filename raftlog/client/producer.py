"""Sans-I/O producer core (`ProducerCore`): partitioning, batching (the Accumulator),
idempotence (producer id, sequences), routing to leaders, retries and final errors.

`send` is the hot path: it resolves the partition and appends; everything else happens in
`poll` (a `ClientCore`). No I/O, no clock, no threads.

Invariants:
* Every batch ends exactly once: acked (its future gets the base offset) or failed.
* A batch that gives up after any attempt whose outcome was unknown fails with an unknown
  outcome (`RequestTimedOutError` or the unknown error itself), never a definite error.
* With idempotence, nothing is sealed before a producer id is known, and a broken sequence
  (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH) gets a new one.
* Records for a topic the broker says does not exist fail at the next metadata answer.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable, Iterable

from partition.batch import Compression
from raftlog.base.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    RaftlogError,
    RequestTimedOutError,
    UnknownOutcomeError,
    UnknownProducerIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.client.accumulator import FULL, NEW_BATCH, Accumulator, ProducerBatch
from raftlog.client.core import ClientCore, Pending
from raftlog.client.errors import BufferFullError, DeliveryTimedOutError
from raftlog.client.partitioner import StickyPartitioner, partition_for_key
from raftlog.client.request import check_response, init_producer_id_request, produce_request
from raftlog.client.txn import DEFAULT_TRANSACTION_TIMEOUT_MS, TxnState

__all__ = ["ACKS_ALL", "FULL", "NO_METADATA", "ProducerCore"]

log = logging.getLogger(__name__)

ACKS_ALL = -1
TXN_ADD_POLL_MS = 5


class _NoMetadata:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_METADATA"


NO_METADATA = _NoMetadata()
"""`ProducerCore.append`'s answer while the topic's partition count is unknown."""
# The broker lost this producer's sequence state: a new producer id restarts the sequences.
_SEQUENCE_BROKEN = (OutOfOrderSequenceNumberError, UnknownProducerIdError, InvalidProducerEpochError)


class ProducerCore(ClientCore):
    """Producer decisions: partitioning, batching (Accumulator), idempotence, routing, retries.

    `send` is the hot path: it resolves the partition and appends; everything else happens
    in `poll`. Results go to each batch's future (`set_result(base_offset)` /
    `set_exception(err)`); `record_result(batch, index)` turns that into (partition, offset).

    `producer_identity=(producer_id, epoch)` fixes the idempotent identity instead of asking
    a broker for one (`init_producer_id`): a writer that re-sends the same records as the
    same producer, with `linger_ms=None` so they usually fall into the same batches, has its
    earlier batches dropped by the leader as duplicates (the Spark sink's exactly-once,
    docs/spark-exactly-once.md). A sequence error then fails the batch and keeps the
    identity (a new one would write the records again).
    """

    def __init__(
        self,
        bootstrap: Iterable[str] | str,
        *,
        rng: random.Random,
        future_factory: Callable[[], Any],
        acks: int | str = "all",
        linger_ms: int | None = 5,
        batch_bytes: int | None = None,
        buffer_bytes: int | None = None,
        max_request_bytes: int | None = None,
        compression: Compression | int | str | None = None,
        enable_idempotence: bool = True,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight_per_partition: int = 5,
        producer_identity: tuple[int, int] | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
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
        if producer_identity is not None:
            pid, epoch = producer_identity
            if not enable_idempotence:
                raise ValueError("producer_identity needs enable_idempotence=True")
            if not (0 <= pid < 1 << 63 and 0 <= epoch < 1 << 15):
                raise ValueError(f"producer_identity {producer_identity!r}: the id must be an "
                                 "int64 >= 0 and the epoch an int16 >= 0")
        if transactional_id is not None and (not enable_idempotence or producer_identity is not None):
            raise ValueError("transactional_id needs enable_idempotence=True and no producer_identity")
        if delivery_timeout_ms < (linger_ms or 0) + request_timeout_ms:
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
            transactional=transactional_id is not None,
            **kwargs,
        )
        # A transactional producer (txn.py): its id comes from init_transactions, its batches
        # leave only for partitions added to the ongoing transaction.
        self.txn = None if transactional_id is None else TxnState(transactional_id, transaction_timeout_ms)
        if self.txn is not None:
            self.accumulator.on_fail = lambda _b, error: self.txn.failed(error)
        self.sticky = StickyPartitioner(rng)
        self._sticky_batch: dict[str, ProducerBatch] = {}  # topic -> batch of the last keyless send
        self._pid_in_flight = False
        self._pid_attempts = 0
        self._pid_retry_at_ms = 0
        self._pid_needed = enable_idempotence and producer_identity is None and transactional_id is None
        self._pid_error: BaseException | None = None  # why the last init_producer_id failed
        self.fixed_identity = producer_identity is not None
        if producer_identity is not None:
            self.accumulator.set_producer(*producer_identity)

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

    def append(self, topic: str, value, key, headers, partition: int | None, timestamp_ms: int,
               now_ms: int):
        """`send` for a shell: returns the record's ProducerBatch (the record is its last),
        FULL (no buffer space yet) or NO_METADATA (the topic's partitions are not known yet;
        a refresh is asked). A shell waits for a change and calls again, at most max_block_ms
        in all, then raises `blocked_error`. Raises ValueError, MessageTooLargeError."""
        n = self.partition_count(topic)
        if n is None:
            if self.auth_error is not None:
                raise self.auth_error  # no metadata will come with these credentials
            error = self.topic_error(topic)
            if error is not None and not error.retriable:
                # e.g. TOPIC_AUTHORIZATION_FAILED: waiting will not change it. Raised once per
                # metadata answer (as Kafka's producer does), so a later ACL change is seen.
                self.metadata.topic_errors.pop(topic, None)
                raise error
            return NO_METADATA
        if headers is not None and not isinstance(headers, (list, tuple)):
            headers = list(headers)
        b = self.send(topic, value, key, headers, partition, timestamp_ms, now_ms, n)
        if self.txn is not None and b is not FULL:
            self.txn.note_partition(b.topic, b.partition)
        return b

    def blocked_error(self, outcome, topic: str, max_block_ms: int) -> RaftlogError:
        """The error of a send that `append` still answers FULL or NO_METADATA after
        max_block_ms: the topic's own error (it does not exist), UnknownTopicOrPartitionError
        or BufferFullError."""
        if outcome is NO_METADATA:
            return self.topic_error(topic) or UnknownTopicOrPartitionError(
                f"no metadata for topic {topic!r} after {max_block_ms} ms")
        return BufferFullError(f"buffer_bytes {self.accumulator.buffer_bytes} used up for {max_block_ms} ms")

    def send_sticky(self, topic: str, value, timestamp_ms: int) -> ProducerBatch | None:
        """The hot path of `send` for a keyless, headerless record with no partition given:
        append it to the batch the last such record of `topic` went to and return that
        batch, or None when that batch cannot take it (none yet, full, sent, buffer used up,
        or the topic's metadata is gone): then call `send`. Never opens a batch, so the
        returned batch already held records and its linger deadline is not new.
        """
        last = self._sticky_batch.get(topic)
        if last is not None and topic in self.metadata.leaders and (
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
        """(partition, offset) of record `index` of an acknowledged batch (offset -1 if
        unknown, or if the record was written before by an earlier run: `Accumulator.recut`)."""
        base = batch.base_offset
        index -= batch.skipped
        return batch.partition, (base + index if base >= 0 and index >= 0 else -1)

    # ---- flush / close ----

    def begin_flush(self) -> None:
        self.accumulator.begin_flush()

    def end_flush(self) -> None:
        self.accumulator.end_flush()

    def has_pending(self) -> bool:
        return self.accumulator.has_pending()

    def abort(self, error: BaseException) -> None:
        """Fail every batch not yet in flight with `error` (close without flush), adding why
        each was still waiting (`waiting_reason`) to a raftlog error's message."""
        for b in self.accumulator.abort_all():
            reason = self.waiting_reason(b.topic, b.partition)
            if isinstance(error, RaftlogError) and reason:
                b.future.set_exception(type(error)(f"{error.message}: {reason}", **error.details))
            else:
                b.future.set_exception(error)

    def waiting_reason(self, topic: str, partition: int) -> str | None:
        """Why records for `topic`-`partition` are not sent yet, in words: no producer id (and
        why), or no leader (the partition's offline reason, the cluster's controller problem),
        or None when nothing is known to hold them."""
        if self._pid_needed:
            why = f"no producer id yet (init_producer_id: {self._pid_error})" if self._pid_error else \
                "no producer id yet"
            problem = self.metadata.controller_problem
            return f"{why}; {problem}" if problem and problem not in why else why
        if self.metadata.leader(topic, partition) is None:
            return self.metadata.why_no_leader(topic, partition)
        return None

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
        leader_of = self.metadata.leader
        txn = self.txn
        if txn is not None:
            self._poll_txn(txn, now_ms, out)
            leader_of = lambda t, p: self.metadata.leader(t, p) if txn.may_send(t, p) else None  # noqa: E731
        ready = acc.drain(now_ms, leader_of, lambda b: self.broker_up(b, now_ms))
        for broker_id, batches in ready.items():
            remaining = min(self.request_timeout_ms,
                            max(1, min(b.created_ms + self.delivery_timeout_ms - now_ms for b in batches)))
            req = produce_request(self.acks, remaining, batches)
            if txn is not None:
                req["transactional_id"] = txn.transactional_id
            if self.acks == 0:
                out.append(self._send_no_response(broker_id, req))
                for b in batches:
                    acc.complete(b, -1)
            else:
                out.append(self._send(broker_id, req, "produce", now_ms, batches, remaining))

    def _poll_txn(self, txn: TxnState, now_ms: int, out: list) -> None:
        """Add the partitions that got records to the ongoing transaction (one call at a
        time); when an add fails, the batches waiting for it fail with its error."""
        if txn.add_call is not None and txn.add_call.done:
            error = txn.add_done()
            if error is not None:
                asked = set(txn.add_asked)
                for topic in {t for t, _ in asked}:
                    for b in self.accumulator.never_sent(topic):
                        if (b.topic, b.partition) in asked:
                            self.accumulator.fail(b, error)
        req = txn.add_request()
        if req is not None:
            txn.add_call = self.submit(req, now_ms, route=txn.route)
            self._poll_calls(now_ms, out)

    def set_transactional_producer(self, producer_id: int, producer_epoch: int) -> None:
        """init_transactions' answer: batches sealed from now carry this id and epoch."""
        self.accumulator.set_producer(producer_id, producer_epoch)

    def _more_wakeup_ms(self, now_ms: int) -> int | None:
        if self._pid_needed:
            return None if self._pid_in_flight else self._pid_retry_at_ms
        t = self.accumulator.next_ready_ms(now_ms)
        if t is not None and self.txn is not None and self.txn.add_call is not None:
            # Batches waiting for their partition's add look ready: the add's answer wakes
            # the shell, so do not spin until then (at most TXN_ADD_POLL_MS late for others).
            t = max(t, now_ms + TXN_ADD_POLL_MS)
        oldest = self.accumulator.oldest_waiting_ms()
        if oldest is not None:
            exp = oldest + self.delivery_timeout_ms
            t = exp if t is None else min(t, exp)
        return t

    # ---- producer id ----

    def _on_pid_response(self, p: Pending, msg: dict, now_ms: int) -> None:
        self._pid_in_flight = False
        try:
            msg = check_response(msg)
            pid, epoch = msg["producer_id"], msg["producer_epoch"]
            if not isinstance(pid, int) or not isinstance(epoch, int):
                raise KeyError("producer_id")
        except (RaftlogError, KeyError) as exc:
            self._pid_attempts += 1
            self._pid_error = exc
            self._pid_retry_at_ms = now_ms + self.retry.backoff(self._pid_attempts)
            log.info("init_producer_id failed (%s); retrying", exc)
            if isinstance(exc, RaftlogError) and not exc.retriable:
                # e.g. CLUSTER_AUTHORIZATION_FAILED (no IDEMPOTENT_WRITE, no WRITE anywhere):
                # nothing is sent without a producer id, so what waits fails with the reason.
                self._fail_unsent(exc)
            return
        self._pid_needed = False
        self._pid_error = None
        self._pid_attempts = 0
        self.accumulator.set_producer(pid, epoch)

    def _on_pid_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        self._pid_in_flight = False
        self._pid_error = exc
        self._pid_attempts += 1
        self._pid_retry_at_ms = now_ms + self.retry.backoff(self._pid_attempts)

    def _reset_producer_id(self) -> None:
        """Sequence state is broken on the broker: get a new producer id, restart sequences
        (Kafka bumps the epoch; a fresh id is the same for a non-transactional producer).
        A fixed `producer_identity` is kept: the failed batch fails, and that is all."""
        if self.idempotent and not self.fixed_identity and self.txn is None:
            self._pid_needed = True

    # ---- produce answers ----

    def _on_produce_response(self, p: Pending, msg: dict, now_ms: int) -> None:
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

    def _on_produce_failure(self, p: Pending, exc: BaseException, now_ms: int) -> None:
        for b in p.ctx:
            self._batch_error(b, exc, now_ms)

    def _batch_error(self, b: ProducerBatch, exc: RaftlogError | BaseException, now_ms: int) -> None:
        acc = self.accumulator
        if b.done or not b.in_flight:
            return
        b.last_error = exc
        if isinstance(exc, UnknownOutcomeError):
            b.maybe_written = True
        if isinstance(exc, DuplicateSequenceNumberError):
            acc.complete(b, -1)  # already written by an earlier attempt; its offset is lost
            return
        if isinstance(exc, OutOfOrderSequenceNumberError) and acc.has_earlier_unacked(b):
            # An earlier batch of this partition failed first; this one is retried after it
            # (Kafka's Sender does the same), immediately, since nothing is wrong with it.
            acc.retry(b, now_ms)
            return
        if isinstance(exc, OutOfOrderSequenceNumberError) and _overtaken(exc, b) and acc.is_next_sequence(b):
            # b reached its leader before an earlier batch it was sent after, and that batch
            # is acknowledged now: the leader expects b. Retried (Kafka's Sender retries the
            # next sequence: TransactionManager.canRetry), within the delivery timeout.
            t = self.retry.next_attempt_ms(b.attempts, now_ms, b.created_ms + self.delivery_timeout_ms)
            if t is not None:
                acc.retry(b, t)
                return
        if isinstance(exc, OutOfOrderSequenceNumberError) and self.fixed_identity:
            # The leader holds this batch's head already (an earlier run of this identity cut
            # its records elsewhere): re-send only the tail, at once and alone.
            expected = exc.details.get("expected_sequence")
            if isinstance(expected, int) and acc.recut(b, expected):
                acc.retry(b, now_ms)
                return
        if isinstance(exc, _SEQUENCE_BROKEN):
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

    def _final_error(self, b: ProducerBatch, exc: BaseException | None) -> BaseException:
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
                + (f" ({why})" if (why := self.waiting_reason(b.topic, b.partition)) else "")
            )
        return exc

    def _on_auth_failed(self, error: RaftlogError, now_ms: int) -> None:
        self._fail_unsent(error)

    def _fail_unsent(self, error: RaftlogError) -> None:
        # Batches no attempt has sent were definitely not written: fail them with the reason.
        for topic in {t for t, _ in self.accumulator.pending_partitions()}:
            for b in self.accumulator.never_sent(topic):
                self.accumulator.fail(b, error)

    def _after_metadata(self, now_ms: int) -> None:
        self.accumulator.node_max_request_bytes = self.metadata.max_request_bytes
        # Records for a topic that does not exist cannot wait forever: fail them now.
        errs = self.metadata.topic_errors
        if not errs:
            return
        for topic, err in errs.items():
            for b in self.accumulator.never_sent(topic):
                self.accumulator.fail(b, err)

    RESPONSE_HANDLERS = {
        **ClientCore.RESPONSE_HANDLERS,
        "pid": _on_pid_response,
        "produce": _on_produce_response,
    }
    FAILURE_HANDLERS = {
        **ClientCore.FAILURE_HANDLERS,
        "pid": _on_pid_failure,
        "produce": _on_produce_failure,
    }


def _overtaken(exc: OutOfOrderSequenceNumberError, b: ProducerBatch) -> bool:
    """The leader refused b while still expecting an earlier sequence of the same producer
    (`expected_sequence` behind b's, modulo 2**31): an earlier batch had not arrived yet."""
    expected = exc.details.get("expected_sequence")
    return isinstance(expected, int) and 0 < (b.base_sequence - expected) % (1 << 31) < 1 << 30


def _compression(c: Compression | int | str | None) -> Compression:
    if c is None:
        return Compression.NONE
    if isinstance(c, str):
        try:
            return Compression[c.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {c!r}") from None
    return Compression(c)

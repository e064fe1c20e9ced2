"""The sink's shell: Spark's Arrow writers for `df.write` and `df.writeStream` over the
client's blocking Producer (`raftlog.client.Producer`).

Spark's process model for writers (measured, PySpark 4.x): the driver's planner builds a
writer per write (per micro-batch for a stream) and pickles it to the executors, where
`write(iterator of Arrow batches)` runs once per task; `commit(messages[, batchId])` runs
in another driver-side process after every task succeeded. So a writer holds only plain
values, and each task makes its own Producer and closes it before returning.

A task's write is done when every batch it sent is acknowledged (acks=all by default): any
batch that failed fails the task, and Spark retries it. Streaming writes are exactly-once
by default (docs/spark-exactly-once.md, docs/transactions.md): the task reads the query id
and batch id from Spark's local properties and writes its rows in one transaction of
transactional id `sink_transactional_id(query, batch, partition)`, left open; the driver's
`commit(messages, batchId)` commits every task's transaction (EndTxn with the producer id
and epoch the task reports), its `abort` aborts them. So a read_committed reader sees a
micro-batch's rows only once Spark committed it, never part of a failed task: a failed task
aborts its transaction, a retried one fences the attempt before it (InitProducerId aborts
its open transaction), and a batch replayed after its commit finds its transaction committed
(DescribeTransactions) and writes nothing again. Batch writes, and streams with
exactlyOnce=false, are at-least-once.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

try:  # PySpark >= 4.1: Arrow batches for streaming writes too.
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pragma: no cover - PySpark 4.0: see RaftlogDataSource.streamWriter
    DataSourceStreamArrowWriter = None  # type: ignore[assignment,misc]

from spark_source.options import InvalidOption, SourceError
from spark_source.sink import (
    InvalidRowError,
    KeylessSpreader,
    SinkOptions,
    SinkSchema,
    columns_of,
    sink_transactional_id,
    sorted_by_key,
)

__all__ = [
    "SinkCommitMessage",
    "RaftlogBatchWriter",
    "RaftlogStreamWriter",
    "write_task",
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
]

log = logging.getLogger(__name__)

# Spark's local properties of a micro-batch's jobs (MicroBatchExecution.BATCH_ID_KEY and
# StreamExecution.QUERY_ID_KEY); tasks see them through TaskContext.getLocalProperty.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

ProducerFactory = Callable[..., Any]


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task did: its rows and, per "topic-partition", how many went there."""

    task_partition: int
    attempt: int
    rows: int
    producer_id: int | None = None
    records: dict[str, int] = field(default_factory=dict)
    # Exactly-once: the task's open transaction, for the driver to commit or abort; `committed`
    # when an earlier run of this micro-batch had it committed already (nothing was written).
    transactional_id: str | None = None
    producer_epoch: int | None = None
    committed: bool = False


def _default_producer(bootstrap: str, **kwargs: Any):
    from raftlog.client import Producer

    return Producer(bootstrap, **kwargs)


def write_task(options: SinkOptions, schema: SinkSchema, batches: Iterator[pa.RecordBatch], *,
               task_partition: int, attempt: int = 0, transactional_id: str | None = None,
               producer_factory: ProducerFactory = _default_producer) -> SinkCommitMessage:
    """Send every row of `batches`, wait until all are acknowledged, return the counts.

    With `transactional_id` (exactly-once) the rows go in one transaction left open for the
    driver (module docstring), and keyless rows without a partition go where KeylessSpreader
    says; else the producer's sticky partitioner picks. Raises the first failed batch's
    error, InvalidRowError for bad data, the producer's errors (a failed task aborts its
    transaction on the way out).
    """
    if transactional_id is not None and transaction_committed(options, transactional_id):
        log.info("raftlog sink: %s was committed by an earlier run of this micro-batch", transactional_id)
        return SinkCommitMessage(task_partition, attempt, 0, transactional_id=transactional_id, committed=True)
    if options.row_order == "key":
        batches = iter(sorted_by_key(batches, schema, options.max_task_bytes))
    kwargs = options.producer_kwargs()
    if transactional_id is not None:
        kwargs.update(transactional_id=transactional_id, transaction_timeout_ms=options.transaction_timeout_ms)
    producer = producer_factory(options.bootstrap, **kwargs)
    ok = False
    txn: tuple[int, int] | None = None
    try:
        if transactional_id is not None:
            txn = producer.init_transactions()  # fences and aborts an earlier attempt's
            producer.begin_transaction()
        spreader = KeylessSpreader(task_partition) if transactional_id is not None else None
        partition_counts: dict[str, int] = {}
        counts: dict[tuple[str, int], int] = {}
        unsettled: deque = deque()  # the first record's future of every batch not yet done
        rows = 0
        send = producer.send

        def partitions_of(topic: str) -> int:
            n = partition_counts.get(topic)
            if n is None:
                n = partition_counts[topic] = len(producer.partitions_for(topic))
            return n

        for batch in batches:
            if not batch.num_rows:
                continue
            cols = columns_of(batch, schema, options.topic)
            ts = int(time.time() * 1000)
            topics, keys, parts, headers = cols.topics, cols.keys, cols.partitions, cols.headers
            one_topic = topics if isinstance(topics, str) else None
            for i, value in enumerate(cols.values):
                topic = one_topic or topics[i]
                key = None if keys is None else keys[i]
                partition = None if parts is None else parts[i]
                if partition is None and key is None and spreader is not None:
                    partition = spreader.next(topic, partitions_of(topic))
                elif partition is not None and not 0 <= partition < partitions_of(topic):
                    raise InvalidRowError(f"partition {partition} of a row is out of range: "
                                     f"{topic} has {partitions_of(topic)} partitions")
                fut = send(topic, value, key, None if headers is None else headers[i],
                           partition, ts)
                if fut.index == 0:
                    unsettled.append(fut)
            rows += batch.num_rows
            while unsettled and unsettled[0].done():
                _settle(unsettled.popleft(), counts)
        producer.flush(options.delivery_timeout_ms / 1000 + 30)
        while unsettled:
            _settle(unsettled.popleft(), counts)
        ok = True
        return SinkCommitMessage(task_partition, attempt, rows,
                                 None if txn is None else txn[0],
                                 {f"{t}-{p}": n for (t, p), n in sorted(counts.items())},
                                 transactional_id=transactional_id,
                                 producer_epoch=None if txn is None else txn[1])
    finally:
        if not ok and txn is not None:
            _abort_quietly(producer, transactional_id)
        # A failed task does not wait for what is still queued: Spark retries it.
        producer.close(options.delivery_timeout_ms / 1000 if ok else 0)


def _abort_quietly(producer: Any, transactional_id: str | None) -> None:
    """A failed task's transaction is aborted at once (else it holds back read_committed
    readers until its timeout or the next attempt); a failure to abort is only logged."""
    try:
        producer.abort_transaction()
    except Exception as exc:  # noqa: BLE001 - the task's own error is what propagates
        log.warning("raftlog sink: could not abort %s (%s); it ends at the next attempt or its timeout",
                    transactional_id, exc)


def _coordinator_call(options: SinkOptions, transactional_id: str, request: dict) -> dict:
    """One request to `transactional_id`'s transaction coordinator (the leader of its
    `__transaction_state` partition), retried on retriable errors. FindCoordinator first:
    it has the controller create `__transaction_state` on a cluster's first use."""
    from raftlog.base.topics import TRANSACTION_STATE_TOPIC
    from raftlog.client import Admin

    with Admin(options.bootstrap, request_timeout_ms=options.request_timeout_ms) as admin:
        found = admin.request({"op": "find_txn_coordinator", "transactional_id": transactional_id})
        return admin.request(request, route=(TRANSACTION_STATE_TOPIC, found["partition"]))


def transaction_committed(options: SinkOptions, transactional_id: str) -> bool:
    """True when `transactional_id`'s last transaction was committed (an earlier run of this
    micro-batch): DescribeTransactions says PrepareCommit or CompleteCommit."""
    answer = _coordinator_call(options, transactional_id,
                               {"op": "describe_transactions", "transactional_ids": [transactional_id]})
    for t in answer.get("transactions") or ():
        if t.get("transactional_id") == transactional_id and t.get("error") is None:
            return t.get("state") in ("PrepareCommit", "CompleteCommit")
    return False


def end_transactions(options: SinkOptions, messages: list, commit: bool) -> int:
    """The driver's half: EndTxn for every task's open transaction; returns how many.
    Raises the first error when committing (the micro-batch is then not committed);
    aborting only logs one."""
    n = 0
    for m in messages:
        if not isinstance(m, SinkCommitMessage) or m.transactional_id is None or m.committed:
            continue
        request = {"op": "end_txn", "transactional_id": m.transactional_id, "producer_id": m.producer_id,
                   "producer_epoch": m.producer_epoch, "commit": commit}
        try:
            _coordinator_call(options, m.transactional_id, request)
        except Exception as exc:  # noqa: BLE001 - re-raised on commit
            if commit:
                raise
            log.warning("raftlog sink: could not abort %s (%s)", m.transactional_id, exc)
        n += 1
    return n


def _settle(fut, counts: dict[tuple[str, int], int]) -> None:
    """Raise the error of a failed batch; else count its records."""
    partition, _offset = fut.result(0)  # raises the batch's error
    key = (fut.topic, partition)
    counts[key] = counts.get(key, 0) + fut.batch_record_count


def _task_context() -> tuple[Any, int, int]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise SourceError("the raftlog sink's write() must run in a Spark task")
    return tc, tc.partitionId(), tc.attemptNumber()


class RaftlogBatchWriter(DataSourceArrowWriter):
    """`df.write.format("raftlog")`: at-least-once (a retried task writes its rows again)."""

    def __init__(self, options: SinkOptions, schema: SinkSchema,
                 producer_factory: ProducerFactory = _default_producer):
        self._options = options
        self._schema = schema
        self._producer_factory = producer_factory

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        _tc, partition, attempt = _task_context()
        return write_task(self._options, self._schema, iterator, task_partition=partition,
                          attempt=attempt, producer_factory=self._producer_factory)

    def commit(self, messages: list) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.info("raftlog sink: %d rows written by %d tasks", sum(m.rows for m in done), len(done))

    def abort(self, messages: list) -> None:
        log.warning("raftlog sink: the write failed; rows of tasks that finished stay written "
                    "(%d tasks)", sum(1 for m in messages if m is not None))


class RaftlogStreamWriter(DataSourceStreamArrowWriter or object):  # type: ignore[misc]
    """`df.writeStream.format("raftlog")`: every trigger kind; exactly-once unless
    exactlyOnce=false (module docstring)."""

    def __init__(self, options: SinkOptions, schema: SinkSchema,
                 producer_factory: ProducerFactory = _default_producer):
        self._options = options
        self._schema = schema
        self._producer_factory = producer_factory

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        tc, partition, attempt = _task_context()
        transactional_id = None
        if self._options.exactly_once:
            batch_id = tc.getLocalProperty(BATCH_ID_PROPERTY)
            query_id = tc.getLocalProperty(QUERY_ID_PROPERTY)
            if not batch_id or not query_id or not batch_id.isdigit():
                raise SourceError(
                    f"exactly-once writes need the micro-batch id and query id from Spark "
                    f"(local properties {BATCH_ID_PROPERTY}={batch_id!r}, "
                    f"{QUERY_ID_PROPERTY}={query_id!r}); set exactlyOnce=false to write "
                    "at-least-once")
            transactional_id = sink_transactional_id(query_id, int(batch_id), partition)
        return write_task(self._options, self._schema, iterator, task_partition=partition,
                          attempt=attempt, transactional_id=transactional_id,
                          producer_factory=self._producer_factory)

    def commit(self, messages: list, batchId: int) -> None:
        # Every task waited for its acknowledgements; its transaction (exactly-once) is
        # committed here, so read_committed readers see the micro-batch whole.
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        n = end_transactions(self._options, done, commit=True)
        log.info("raftlog sink: batch %d: %d rows written by %d tasks (%d transactions committed)", batchId,
                 sum(m.rows for m in done), len(done), n)

    def abort(self, messages: list, batchId: int) -> None:
        n = end_transactions(self._options, [m for m in messages if m is not None], commit=False)
        log.warning("raftlog sink: batch %d failed; it is written again when it is retried%s", batchId,
                    f" (exactly once: {n} transactions aborted)" if self._options.exactly_once else "")


def check_writable(options: SinkOptions, overwrite: bool) -> None:
    """Driver-side checks before any task runs. Raises InvalidOption."""
    if options.streaming and DataSourceStreamArrowWriter is None:
        raise InvalidOption("streaming writes need PySpark >= 4.1 (DataSourceStreamArrowWriter)")
    if overwrite and not options.streaming:
        raise InvalidOption("save mode overwrite is not allowed: raftlog topics are "
                            "append-only; use mode('append')")

"""The sink's shell: Spark's Arrow writers for `df.write` and `df.writeStream` over the
client's blocking Producer (`raftlog.client.Producer`).

Spark's process model for writers (measured, PySpark 4.x): the driver's planner builds a
writer per write (per micro-batch for a stream) and pickles it to the executors, where
`write(iterator of Arrow batches)` runs once per task; `commit(messages[, batchId])` runs
in another driver-side process after every task succeeded. So a writer holds only plain
values, and each task makes its own Producer and closes it before returning.

A task's write is done when every batch it sent is acknowledged (acks=all by default): any
batch that failed fails the task, and Spark retries it. Streaming writes are exactly-once
by default (docs/spark-exactly-once.md): the task reads the query id and batch id from
Spark's local properties and writes as `derived_producer_id(query, batch, partition)` with
`linger_ms=None`. Batch writes, and streams with exactlyOnce=false, are at-least-once.
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
    derived_producer_id,
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


def _default_producer(bootstrap: str, **kwargs: Any):
    from raftlog.client import Producer

    return Producer(bootstrap, **kwargs)


def write_task(options: SinkOptions, schema: SinkSchema, batches: Iterator[pa.RecordBatch], *,
               task_partition: int, attempt: int = 0, identity: tuple[int, int] | None = None,
               producer_factory: ProducerFactory = _default_producer) -> SinkCommitMessage:
    """Send every row of `batches`, wait until all are acknowledged, return the counts.

    `identity` fixes the producer (exactly-once); keyless rows without a partition then go
    where KeylessSpreader says, else the producer's sticky partitioner picks. Raises the
    first failed batch's error, InvalidRowError for bad data, the producer's errors.
    """
    if options.row_order == "key":
        batches = iter(sorted_by_key(batches, schema, options.max_task_bytes))
    producer = producer_factory(options.bootstrap, producer_identity=identity,
                                **options.producer_kwargs())
    ok = False
    try:
        spreader = KeylessSpreader(task_partition) if identity is not None else None
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
                                 None if identity is None else identity[0],
                                 {f"{t}-{p}": n for (t, p), n in sorted(counts.items())})
    finally:
        # A failed task does not wait for what is still queued: Spark retries it.
        producer.close(options.delivery_timeout_ms / 1000 if ok else 0)


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
        identity = None
        if self._options.exactly_once:
            batch_id = tc.getLocalProperty(BATCH_ID_PROPERTY)
            query_id = tc.getLocalProperty(QUERY_ID_PROPERTY)
            if not batch_id or not query_id or not batch_id.isdigit():
                raise SourceError(
                    f"exactly-once writes need the micro-batch id and query id from Spark "
                    f"(local properties {BATCH_ID_PROPERTY}={batch_id!r}, "
                    f"{QUERY_ID_PROPERTY}={query_id!r}); set exactlyOnce=false to write "
                    "at-least-once")
            identity = (derived_producer_id(query_id, int(batch_id), partition), 0)
        return write_task(self._options, self._schema, iterator, task_partition=partition,
                          attempt=attempt, identity=identity,
                          producer_factory=self._producer_factory)

    def commit(self, messages: list, batchId: int) -> None:
        # Every task already waited for its acknowledgements: nothing is left to publish.
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.info("raftlog sink: batch %d: %d rows written by %d tasks", batchId,
                 sum(m.rows for m in done), len(done))

    def abort(self, messages: list, batchId: int) -> None:
        log.warning("raftlog sink: batch %d failed; it is written again when it is retried%s",
                    batchId, " (exactly once)" if self._options.exactly_once else "")


def check_writable(options: SinkOptions, overwrite: bool) -> None:
    """Driver-side checks before any task runs. Raises InvalidOption."""
    if options.streaming and DataSourceStreamArrowWriter is None:
        raise InvalidOption("streaming writes need PySpark >= 4.1 (DataSourceStreamArrowWriter)")
    if overwrite and not options.streaming:
        raise InvalidOption("save mode overwrite is not allowed: raftlog topics are "
                            "append-only; use mode('append')")

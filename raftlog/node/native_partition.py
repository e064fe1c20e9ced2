"""The native protocol's partition ops (PROTOCOL.md): an adapter over the partition port
(partition/port.py), as the Kafka listener's produce/fetch/admin modules are: CBOR fields in
(`field(...)` parsing, with INVALID_REQUEST naming a bad field), the one ACL guard
(raftlog/node/authorize.py `GuardedPartitions`, from the request's principal), the port call,
CBOR fields out (a partition's error as its `error` map).

    handlers = partition_handlers(port, guard)   # {"produce": ..., "fetch": ..., ...}

Ops: `produce` (acks 0/1/-1; per-partition errors; a request that cannot reach a majority in
`timeout_ms` gets REQUEST_TIMED_OUT per partition), `fetch` (long poll with min_bytes /
max_wait_ms, max_bytes per partition and per request), `list_offsets` (-2 log start, -1 high
watermark, -3 max timestamp, else the first batch with max timestamp >= ts), `delete_records`
(offset -1: the high watermark), `init_producer_id`, `describe_producers` (Kafka's
DescribeProducers: a partition's producers and the first offset of each one's open
transaction, from its leader), `recover_partition` (operator: unclean
recovery, refused unless `unclean` is true). What each does: partition/service.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from partition.port import (
    ClientInfo,
    DeletePart,
    FetchPart,
    FetchRequest,
    IsolationLevel,
    OffsetQuery,
    PartitionPort,
    ProducePart,
    ProduceResult,
)
from raftlog.base.errors import InvalidRequestError, RaftlogError
from raftlog.base.protocol import Later, Request, field, inline_handler_under_deadline
from raftlog.node.authorize import Guard, GuardedPartitions

__all__ = ["partition_handlers"]

DEFAULT_PRODUCE_TIMEOUT_MS: Final = 30_000
MAX_DELETE_PARTITIONS: Final = 10_000  # one waiting task each
MAX_DESCRIBE_PARTITIONS: Final = 10_000
DEFAULT_FETCH_MAX_WAIT_MS: Final = 500
MAX_FETCH_WAIT_MS: Final = 60_000
DEFAULT_FETCH_MAX_BYTES: Final = 50 << 20
DEFAULT_PARTITION_MAX_BYTES: Final = 1 << 20

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | Later | None]]


def _entry(topic: str, partition: int, error: RaftlogError | None, **values: Any) -> dict[str, Any]:
    if error is not None:
        return {"topic": topic, "partition": partition, "error": error.to_wire()}
    return {"topic": topic, "partition": partition, **values}


def _produced(results: list[ProduceResult]) -> dict[str, Any]:
    return {"partitions": [
        _entry(r.topic, r.partition, r.error, base_offset=r.base_offset, log_append_time=r.log_append_time_ms,
               log_start_offset=r.log_start_offset) for r in results]}


def partition_handlers(port: PartitionPort, guard: Guard) -> dict[str, Handler]:
    """The native client handlers of the partition ops, each behind `guard`."""

    def guarded(request: Request) -> GuardedPartitions:
        return GuardedPartitions(port, guard.access(request.principal, request.client_host))

    @inline_handler_under_deadline
    async def produce(request: Request) -> dict[str, Any] | Later | None:
        """Run in the listener's reader (protocol.inline_handler), so a connection's produce
        requests append in request order, as the Kafka listener's do: an idempotent producer
        pipelines up to 5 batches per partition, and request tasks start in any order, so a
        later batch could reach the leader first and be refused OUT_OF_ORDER_SEQUENCE_NUMBER
        (issue 39). The append waits on the replica's lock: under the request's deadline.
        The acks=all wait runs in the request's own task (`Later`)."""
        acks = field(request, "acks", int)
        if acks not in (0, 1, -1):
            raise InvalidRequestError("acks must be 0, 1 or -1", field="acks", request_id=request.id)
        timeout_ms = field(request, "timeout_ms", int, default=DEFAULT_PRODUCE_TIMEOUT_MS, min_value=0)
        parts = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            parts.append(ProducePart(field(d, "topic", str, where=where),
                                     field(d, "partition", int, min_value=0, where=where),
                                     field(d, "records", bytes, where=where)))
        deadline = trio.current_time() + timeout_ms / 1000
        client = ClientInfo("native", peer=request.client_host, principal=request.principal)
        tid = field(request, "transactional_id", str, default=None, nullable=True)
        appended = await guarded(request).append(parts, acks=acks, client=client, transactional_id=tid)
        if acks == 0:
            return None
        if not appended.waiting:
            return _produced(appended.results)

        async def finish() -> dict[str, Any]:
            return _produced(await appended.wait(deadline))

        return Later(finish)

    async def fetch(request: Request) -> dict[str, Any]:
        max_wait_ms = field(request, "max_wait_ms", int, default=DEFAULT_FETCH_MAX_WAIT_MS,
                            min_value=0, max_value=MAX_FETCH_WAIT_MS)
        min_bytes = field(request, "min_bytes", int, default=1, min_value=0)
        max_bytes = field(request, "max_bytes", int, default=DEFAULT_FETCH_MAX_BYTES, min_value=1)
        parts = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            parts.append(FetchPart(
                field(d, "topic", str, where=where),
                field(d, "partition", int, min_value=0, where=where),
                field(d, "fetch_offset", int, where=where),
                field(d, "max_bytes", int, default=DEFAULT_PARTITION_MAX_BYTES, min_value=1, where=where),
            ))  # fmt: skip
        isolation = _isolation(request)
        results = await guarded(request).fetch(FetchRequest(parts, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                                            max_bytes=max_bytes, isolation_level=isolation))
        if isolation == IsolationLevel.READ_COMMITTED:
            return {"partitions": [
                _entry(r.topic, r.partition, r.error, high_watermark=r.high_watermark,
                       log_start_offset=r.log_start_offset, records=r.records,
                       last_stable_offset=r.last_stable_offset,
                       aborted_transactions=[[a.producer_id, a.first_offset] for a in r.aborted_transactions or ()])
                for r in results]}
        return {"partitions": [
            _entry(r.topic, r.partition, r.error, high_watermark=r.high_watermark,
                   log_start_offset=r.log_start_offset, records=r.records) for r in results]}

    async def list_offsets(request: Request) -> dict[str, Any]:
        queries = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            queries.append(OffsetQuery(field(d, "topic", str, where=where),
                                       field(d, "partition", int, min_value=0, where=where),
                                       field(d, "timestamp", int, where=where)))
        results = await guarded(request).list_offsets(queries, isolation_level=_isolation(request))
        return {"partitions": [_entry(r.topic, r.partition, r.error, offset=r.offset, timestamp=r.timestamp)
                               for r in results]}

    def _isolation(request: Request) -> IsolationLevel:
        level = field(request, "isolation_level", int, default=0, min_value=0, max_value=1)
        return IsolationLevel(level)

    async def delete_records(request: Request) -> dict[str, Any]:
        timeout_ms = field(request, "timeout_ms", int, default=DEFAULT_PRODUCE_TIMEOUT_MS, min_value=0)
        entries = field(request, "partitions", list, items=dict)
        if len(entries) > MAX_DELETE_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_DELETE_PARTITIONS} partitions per delete_records",
                                      field="partitions", request_id=request.id)
        parts = []
        for i, d in enumerate(entries):
            where = f"partitions[{i}]"
            parts.append(DeletePart(field(d, "topic", str, where=where),
                                    field(d, "partition", int, min_value=0, where=where),
                                    field(d, "offset", int, min_value=-1, where=where)))
        deadline = trio.current_time() + timeout_ms / 1000
        results = await guarded(request).delete_records(parts, deadline)
        return {"partitions": [_entry(r.topic, r.partition, r.error, low_watermark=r.low_watermark)
                               for r in results]}

    async def init_producer_id(request: Request) -> dict[str, Any]:
        identity = await guarded(request).init_producer_id()
        return {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch}

    async def describe_producers(request: Request) -> dict[str, Any]:
        """Kafka's DescribeProducers: each partition's active producers, from its leader."""
        entries = field(request, "partitions", list, items=dict)
        if len(entries) > MAX_DESCRIBE_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_DESCRIBE_PARTITIONS} partitions per describe_producers",
                                      field="partitions", request_id=request.id)
        port = guarded(request)
        out = []
        for i, d in enumerate(entries):
            where = f"partitions[{i}]"
            topic, partition = field(d, "topic", str, where=where), field(d, "partition", int, min_value=0, where=where)
            try:
                found = port.producers(topic, partition)
            except RaftlogError as exc:
                out.append(_entry(topic, partition, exc))
                continue
            out.append(_entry(topic, partition, None, producers=[
                {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "last_sequence": p.last_sequence,
                 "current_txn_start_offset": p.current_txn_start_offset} for p in found]))
        return {"partitions": out}

    async def recover_partition(request: Request) -> dict[str, Any]:
        topic = field(request, "topic", str)
        partition = field(request, "partition", int, min_value=0)
        unclean = field(request, "unclean", bool, default=False)
        await guarded(request).recover_partition(topic, partition, unclean=unclean)
        return {}

    return {
        "produce": produce,
        "fetch": fetch,
        "list_offsets": list_offsets,
        "delete_records": delete_records,
        "init_producer_id": init_producer_id,
        "describe_producers": describe_producers,
        "recover_partition": recover_partition,
    }

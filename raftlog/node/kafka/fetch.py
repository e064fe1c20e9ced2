"""Fetch (key 1) and ListOffsets (key 2).

Fetch runs `ReplicaManager.fetch_partitions` (the native fetch's code: leader only, up to the
high watermark, long poll on min_bytes / max_wait_ms, per-partition and per-request byte
limits, at least one whole batch) with `zero_copy`: each partition's records are a slice of
the segment file, and the response is encoded around placeholders (codec.encode_response)
so the writer sends the header bytes, then the file range with os.sendfile. Isolation level
read_uncommitted and read_committed read the same (no transactions: the last stable offset
is the high watermark). Fetch sessions (KIP-227) are not kept: every answer has session id
0, which tells the client to send full requests. Raft's control batches are in the stream
as Kafka's are; clients skip them.

ACLs: READ on each fetched topic, DESCRIBE on each topic of ListOffsets (checked before the
replicas are asked; a refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED).

ListOffsets: earliest (-2: log start offset), latest (-1: high watermark), max timestamp
(-3, v7+: batch granularity), else the first batch whose max timestamp is at or after the
given one (offset -1 when none), from the partition leader.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse

from raftlog.base.acl import Operation, ResourceType
from raftlog.node.kafka import errors
from raftlog.node.kafka.codec import encode_response, placeholder
from raftlog.node.kafka.context import Call, Encoded, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

FETCH_KEY: Final = 1
LIST_OFFSETS_KEY: Final = 2
MAX_FETCH_WAIT_MS: Final = 60_000
DEFAULT_MAX_BYTES: Final = 50 << 20


def _allowed(ctx: KafkaContext, operation: Operation, names: list[str]) -> dict[str, bool]:
    return {name: ctx.allowed(operation, ResourceType.TOPIC, name) for name in dict.fromkeys(names)}


async def handle_fetch(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = FetchResponse
    allowed = _allowed(ctx, Operation.READ, [t.topic for t in request.topics])
    refused = [{"topic": t.topic, "partition": p.partition, "error": {"code": "TOPIC_AUTHORIZATION_FAILED"}}
               for t in request.topics if not allowed[t.topic] for p in t.partitions]
    parts = [(t.topic, p.partition, p.fetch_offset, max(1, p.partition_max_bytes))
             for t in request.topics if allowed[t.topic] for p in t.partitions]
    max_bytes = getattr(request, "max_bytes", DEFAULT_MAX_BYTES) or DEFAULT_MAX_BYTES
    max_wait_ms = max(0, min(request.max_wait_ms, MAX_FETCH_WAIT_MS, ctx.request_timeout_ms - 1000))

    async def answer() -> Reply:
        if ctx.replicas is None:
            results = [{"topic": t, "partition": p, "error": {"code": "NOT_LEADER"}} for t, p, _, _ in parts]
        elif parts:
            results = await ctx.replicas.fetch_partitions(
                parts, max_wait_ms=max_wait_ms, min_bytes=max(0, request.min_bytes),
                max_bytes=max(1, max_bytes), zero_copy=True,
            )  # fmt: skip
        else:
            results = []
        results = [*results, *refused]
        splices: dict[bytes, Any] = {}
        topics: dict[str, list[Any]] = {}
        try:
            for entry in results:
                error = entry.get("error")
                if error is not None:
                    data = R.FetchableTopicResponse.PartitionData(
                        partition_index=entry["partition"],
                        error_code=errors.kafka_error_code(error.get("code")),
                        high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                        aborted_transactions=None, preferred_read_replica=-1, records=b"",  # empty, not null: librdkafka refuses -1
                    )  # fmt: skip
                else:
                    records = entry["records"]
                    value = b""
                    if records is not None:
                        value = placeholder(len(splices))
                        splices[value] = records
                    data = R.FetchableTopicResponse.PartitionData(
                        partition_index=entry["partition"], error_code=errors.NONE,
                        high_watermark=entry["high_watermark"],
                        last_stable_offset=entry["high_watermark"],
                        log_start_offset=entry["log_start_offset"], aborted_transactions=None,
                        preferred_read_replica=-1, records=value,
                    )  # fmt: skip
                topics.setdefault(entry["topic"], []).append(data)
            response = R(
                throttle_time_ms=0, error_code=errors.NONE, session_id=0,
                responses=[R.FetchableTopicResponse(topic=name, partitions=ps) for name, ps in topics.items()],
            )  # fmt: skip
            return Encoded(encode_response(call.header, response, splices=splices))
        except BaseException:
            for s in splices.values():
                s.close()
            raise

    return Later(answer)


async def handle_list_offsets(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ListOffsetsResponse
    allowed = _allowed(ctx, Operation.DESCRIBE, [t.name for t in request.topics])
    refused = [{"topic": t.name, "partition": p.partition_index, "error": {"code": "TOPIC_AUTHORIZATION_FAILED"}}
               for t in request.topics if not allowed[t.name] for p in t.partitions]
    parts = [(t.name, p.partition_index, p.timestamp) for t in request.topics if allowed[t.name]
             for p in t.partitions]

    async def answer() -> Reply:
        if ctx.replicas is None:
            results = [{"topic": t, "partition": p, "error": {"code": "NOT_LEADER"}} for t, p, _ in parts]
        elif parts:
            results = await ctx.replicas.list_offsets(parts)
        else:
            results = []
        results = [*results, *refused]
        topics: dict[str, list[Any]] = {}
        for entry in results:
            error = entry.get("error")
            if error is not None:
                data = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                    partition_index=entry["partition"], error_code=errors.kafka_error_code(error.get("code")),
                    timestamp=-1, offset=-1, leader_epoch=-1,
                )  # fmt: skip
            else:
                data = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                    partition_index=entry["partition"], error_code=errors.NONE,
                    timestamp=entry["timestamp"], offset=entry["offset"], leader_epoch=-1,
                )  # fmt: skip
            topics.setdefault(entry["topic"], []).append(data)
        return R(throttle_time_ms=0, topics=[
            R.ListOffsetsTopicResponse(name=name, partitions=ps) for name, ps in topics.items()])

    return Later(answer)


HANDLERS: Final = {FETCH_KEY: handle_fetch, LIST_OFFSETS_KEY: handle_list_offsets}

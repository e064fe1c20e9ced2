"""Produce (key 0) and InitProducerId (key 22).

Produce: each partition's `records` field is RecordBatch v2 bytes and goes unchanged to the
partition leader's Raft append (`ReplicaManager.append_partitions`, the same code as the
native produce; no record decoding: the replica checks headers and CRCs). The appends happen
before the handler returns, so a connection's produce requests append in request order (an
idempotent producer's pipelined batches stay in sequence); the acks=all wait runs in a
`Later`. acks=0 gets no response. Idempotent producers use our producer ids (InitProducerId
below), epochs and sequences: a retried batch gets its first append's offset, a gap
OUT_OF_ORDER_SEQUENCE_NUMBER.

Versions 0-2 (message formats v0/v1) are advertised (librdkafka's compression check, see
versions.py) and answered UNSUPPORTED_VERSION per partition. Transactions are not supported:
a transactional produce gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED per partition (what Kafka
answers to a producer that may not use transactions).

ACLs: WRITE on each topic (checked before anything is appended; a refused topic's partitions
answer TOPIC_AUTHORIZATION_FAILED). InitProducerId runs the native op, so its rule is the
native one (IDEMPOTENT_WRITE on the cluster or WRITE on some topic).

InitProducerId: a new producer id (epoch 0) from the node's block, the native op's code. A
transactional id is refused the same way; a request to bump an existing producer's epoch
(v3+ with producer_id >= 0) gets a fresh id (the old one is abandoned, as after a restart).
"""

from __future__ import annotations

from typing import Any, Final

import trio
from kafka.protocol.producer.produce import ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdResponse

from raftlog.base.acl import Operation, ResourceType
from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.versions import PRODUCE_MIN_USABLE

__all__ = ["HANDLERS"]

PRODUCE_KEY: Final = 0
INIT_PRODUCER_ID_KEY: Final = 22
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
TOPIC_AUTHORIZATION_FAILED: Final = errors.KAFKA_ERROR_CODES["TOPIC_AUTHORIZATION_FAILED"]


def _partition_response(index: int, code: int, base_offset: int = -1, message: str | None = None) -> Any:
    P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    return P(index=index, error_code=code, base_offset=base_offset, log_append_time_ms=-1,
             log_start_offset=-1, record_errors=[], error_message=message)


def _all_failed(call: Call, code: int, message: str) -> ProduceResponse:
    T = ProduceResponse.TopicProduceResponse
    return ProduceResponse(responses=[
        T(name=t.name, partition_responses=[
            _partition_response(p.index, code, message=message) for p in t.partition_data])
        for t in call.request.topic_data
    ], throttle_time_ms=0)  # fmt: skip


async def handle_produce(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    if call.version < PRODUCE_MIN_USABLE:
        return _all_failed(call, errors.UNSUPPORTED_VERSION,
                           "message formats v0/v1 are not supported: use Produce v3+")
    if request.transactional_id is not None:
        return _all_failed(call, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "transactions are not supported")
    acks = request.acks
    if acks not in (0, 1, -1):
        return _all_failed(call, errors.INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1 (all)")
    if ctx.replicas is None:
        return _all_failed(call, errors.NOT_LEADER_OR_FOLLOWER, "this node is not a broker")
    parts: list[tuple[str, int, bytes]] = []
    bad: dict[tuple[str, int], tuple[int, str]] = {}
    for t in request.topic_data:
        if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name):  # ACLs: before any effect
            for p in t.partition_data:
                bad[(t.name, p.index)] = (TOPIC_AUTHORIZATION_FAILED, f"not authorized to write topic {t.name!r:.80}")
            continue
        for p in t.partition_data:
            if p.records is None or len(p.records) == 0:
                bad[(t.name, p.index)] = (errors.CORRUPT_MESSAGE, "no records")
            else:
                parts.append((t.name, p.index, bytes(p.records)))
    timeout_ms = max(0, min(request.timeout_ms, ctx.request_timeout_ms))
    deadline = trio.current_time() + timeout_ms / 1000
    results, waits = await ctx.replicas.append_partitions(parts, acks=acks) if parts else ([], [])
    if acks == 0:
        return None

    async def finish() -> ProduceResponse:
        await ctx.replicas.wait_appends(waits, deadline)
        return _response(request, results, bad)

    if not waits:
        return _response(request, results, bad)
    return Later(finish)


def _response(request: Any, results: list[dict[str, Any]],
              bad: dict[tuple[str, int], tuple[int, str]]) -> ProduceResponse:
    by_key = {(r["topic"], r["partition"]): r for r in results}
    T = ProduceResponse.TopicProduceResponse
    topics = []
    for t in request.topic_data:
        partitions = []
        for p in t.partition_data:
            failed = bad.get((t.name, p.index))
            if failed is not None:
                partitions.append(_partition_response(p.index, failed[0], message=failed[1]))
                continue
            r = by_key[(t.name, p.index)]
            error = r.get("error")
            if error is None:
                partitions.append(_partition_response(p.index, errors.NONE, r["base_offset"]))
            else:
                partitions.append(_partition_response(
                    p.index, errors.kafka_error_code(error.get("code")), message=error.get("message")))
        topics.append(T(name=t.name, partition_responses=partitions))
    return ProduceResponse(responses=topics, throttle_time_ms=0)


async def handle_init_producer_id(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = InitProducerIdResponse
    if request.transactional_id is not None:
        return R(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                 producer_id=-1, producer_epoch=-1)

    async def answer() -> InitProducerIdResponse:
        try:
            result = await ctx.call("init_producer_id", {})
        except RaftlogError as exc:
            return R(throttle_time_ms=0, error_code=errors.kafka_error_code(exc.code),
                     producer_id=-1, producer_epoch=-1)
        assert result is not None
        return R(throttle_time_ms=0, error_code=errors.NONE, producer_id=result["producer_id"],
                 producer_epoch=result["producer_epoch"])

    return Later(answer)


HANDLERS: Final = {PRODUCE_KEY: handle_produce, INIT_PRODUCER_ID_KEY: handle_init_producer_id}

"""Produce (key 0) and InitProducerId (key 22).

Produce: each partition's `records` field is RecordBatch v2 bytes and goes to the partition
port's `append` (partition/port.py; the native produce calls the same), which first checks every batch against its records as Kafka's log validator does
(partition/validator.py: a lying batch gets INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP
or TRANSACTIONAL_ID_AUTHORIZATION_FAILED for its partition, logged with this connection's
client id and address; the request's other partitions go on). The appends happen
before the handler returns, so a connection's produce requests append in request order (an
idempotent producer's pipelined batches stay in sequence); the acks=all wait runs in a
`Later`. acks=0 gets no response. Idempotent producers use our producer ids (InitProducerId
below), epochs and sequences: a retried batch gets its first append's offset, a gap
OUT_OF_ORDER_SEQUENCE_NUMBER.

Versions 0-2 (message formats v0/v1) are advertised (librdkafka's compression check, see
versions.py) and answered UNSUPPORTED_VERSION per partition. A transactional produce
(`transactional_id`) goes to the port with its id: WRITE on the transactional id, and each
transactional batch of a producer with no transaction of its epoch open in that partition is
verified with its coordinator (KIP-890 part 1; INVALID_TXN_STATE or INVALID_PRODUCER_EPOCH if
it is not in the ongoing transaction); from Produce v12 (Transactions V2, KIP-890 part 2: the
Java client at transaction.version 2 sends no AddPartitionsToTxn) the coordinator adds the
partition to the transaction instead, as Kafka decides by the request version. Transactional batches without a transactional id:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka.

ACLs (the port's guard, raftlog/node/authorize.py GuardedPartitions, as for the native
produce): WRITE on each topic (checked before anything is appended; a refused topic's
partitions answer TOPIC_AUTHORIZATION_FAILED). InitProducerId: IDEMPOTENT_WRITE on the
cluster or WRITE on some topic.

InitProducerId: a new producer id (epoch 0) from the node's block (the port's); a
request to bump an existing producer's epoch (v3+ with producer_id >= 0) gets a fresh id (the
old one is abandoned, as after a restart). With a transactional id it goes to the
transaction coordinator (txn.py): epoch bump and zombie fencing, Kafka's way.
"""

from __future__ import annotations

from typing import Any, Final

import trio
from kafka.protocol.producer.transaction import InitProducerIdResponse

from partition.port import ClientInfo, ProducePart, ProduceResult
from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.fast_encode import (
    Endpoint,
    LeaderHint,
    PartitionAnswer,
    ProduceAnswer,
    RecordError,
    TopicAnswer,
)
from raftlog.node.kafka.txn import init_txn_producer_id
from raftlog.node.kafka.metadata import ZERO_UUID, leader_hint, names_by_uuid, node_endpoints
from raftlog.node.kafka.versions import PRODUCE_MIN_USABLE

__all__ = ["HANDLERS"]

PRODUCE_KEY: Final = 0
INIT_PRODUCER_ID_KEY: Final = 22
TOPIC_IDS_VERSION: Final = 13  # KIP-516: Produce v13 names topics by id
TV2_PRODUCE_VERSION: Final = 12  # KIP-890 part 2: a transactional produce adds its partitions itself


def _partition_response(index: int, code: int, base_offset: int = -1, message: str | None = None,
                        log_start_offset: int = -1, log_append_time_ms: int = -1) -> PartitionAnswer:
    # The answers are fast_encode.py's light classes, not kafka-python's (whose constructor
    # costs more than the encoding); the codec writes them as kafka-python would.
    return PartitionAnswer(index, code, base_offset, log_append_time_ms, log_start_offset, message)


def _topic_names(ctx: KafkaContext, call: Call) -> list[str | None]:
    """Each topic_data entry's topic name (v13 names topics by id: None for an unknown id)."""
    if call.version < TOPIC_IDS_VERSION:
        return [t.name for t in call.request.topic_data]
    names = names_by_uuid(ctx)
    return [names.get(t.topic_id) for t in call.request.topic_data]


def _topic_response(t: Any, name: str | None, partitions: list[PartitionAnswer]) -> TopicAnswer:
    return TopicAnswer(name or "", getattr(t, "topic_id", None) or ZERO_UUID, partitions)


def _all_failed(call: Call, code: int, message: str) -> ProduceAnswer:
    return ProduceAnswer(responses=[
        _topic_response(t, getattr(t, "name", None), [
            _partition_response(p.index, code, message=message) for p in t.partition_data])
        for t in call.request.topic_data
    ], throttle_time_ms=0)  # fmt: skip


async def handle_produce(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    if call.version < PRODUCE_MIN_USABLE:
        return _all_failed(call, errors.UNSUPPORTED_VERSION,
                           "message formats v0/v1 are not supported: use Produce v3+")
    acks = request.acks
    if acks not in (0, 1, -1):
        return _all_failed(call, errors.INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1 (all)")
    if ctx.replicas is None:
        return _all_failed(call, errors.NOT_LEADER_OR_FOLLOWER, "this node is not a broker")
    parts: list[ProducePart] = []
    bad: dict[tuple[int, int], tuple[int, str]] = {}  # (topic entry index, partition)
    names = _topic_names(ctx, call)
    for i, (t, name) in enumerate(zip(request.topic_data, names)):
        for p in t.partition_data:
            if name is None:
                bad[(i, p.index)] = (errors.UNKNOWN_TOPIC_ID, "unknown topic id")
            else:  # a topic named by id is checked by its name (the port's guard), as Kafka does
                parts.append(ProducePart(name, p.index, b"" if p.records is None else bytes(p.records),
                                         checked=getattr(p, "checked", False)))  # a worker's call
    timeout_ms = max(0, min(request.timeout_ms, ctx.request_timeout_ms))
    deadline = trio.current_time() + timeout_ms / 1000
    client = ClientInfo("kafka", peer=call.connection.peer, principal=call.connection.principal,
                        client_id=call.header.client_id)
    appended = await ctx.port().append(parts, acks=acks, client=client, transactional_id=request.transactional_id,
                                       add_to_txn=call.version >= TV2_PRODUCE_VERSION) if parts else None
    if acks == 0:
        return None
    results = [] if appended is None else appended.results
    if appended is None or not appended.waiting:
        return _response(ctx, request, names, results, bad)

    async def finish() -> ProduceAnswer:
        return _response(ctx, request, names, await appended.wait(deadline), bad)

    return Later(finish)


def _response(ctx: KafkaContext, request: Any, names: list[str | None], results: list[ProduceResult],
              bad: dict[tuple[int, int], tuple[int, str]]) -> ProduceAnswer:
    by_key = {(r.topic, r.partition): r for r in results}
    topics = []
    endpoints: set[int] = set()
    for i, (t, name) in enumerate(zip(request.topic_data, names)):
        partitions = []
        for p in t.partition_data:
            failed = bad.get((i, p.index))
            if failed is not None:
                partitions.append(_partition_response(p.index, failed[0], message=failed[1]))
                continue
            r = by_key[(name, p.index)]
            if r.error is None:
                partitions.append(_partition_response(p.index, errors.NONE, r.base_offset,
                                                      log_start_offset=r.log_start_offset,
                                                      log_append_time_ms=r.log_append_time_ms))
                continue
            code = errors.kafka_error_code(r.error.code)
            out = _partition_response(p.index, code, message=r.error.message)
            for index, text in r.error.details.get("record_errors", ()):  # LogValidator's, by record
                out.record_errors.append(RecordError(index, text))
            hint = leader_hint(r.error)
            if hint is not None:  # KIP-951 (v10+): the new leader, no metadata round trip
                out.current_leader = LeaderHint(hint[0], hint[1])
                endpoints.add(hint[0])
            partitions.append(out)
        topics.append(_topic_response(t, name, partitions))
    return ProduceAnswer(topics, 0, node_endpoints(ctx, endpoints, Endpoint) if endpoints else [])


async def handle_init_producer_id(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = InitProducerIdResponse
    if request.transactional_id is not None:
        return await init_txn_producer_id(ctx, call)

    async def answer() -> InitProducerIdResponse:
        try:
            identity = await ctx.port().init_producer_id()
        except RaftlogError as exc:
            return R(throttle_time_ms=0, error_code=errors.kafka_error_code(exc.code),
                     producer_id=-1, producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=errors.NONE, producer_id=identity.producer_id,
                 producer_epoch=identity.producer_epoch)

    return Later(answer)


HANDLERS: Final = {PRODUCE_KEY: handle_produce, INIT_PRODUCER_ID_KEY: handle_init_producer_id}

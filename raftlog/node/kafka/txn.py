"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28),
DescribeTransactions (65), ListTransactions (66); InitProducerId with a transactional id and
FindCoordinator for transaction keys call `init_txn` / `find_txn_coordinator` here.

Protocol translation only: each handler calls the transaction port (groupcoord/txn_port.py)
through `ctx.txn_port()`, behind the one ACL guard (raftlog/node/guarded_txn.py: Kafka's rules
on the TransactionalId resource; CLUSTER_ACTION for the batched AddPartitionsToTxn v4 and for
WriteTxnMarkers, the partition port's). Versions: Transactions V1 (librdkafka, kafka-python, aiokafka, the
Java client below `transaction.version=2`) adds partitions explicitly and keeps its epoch across
transactions; Transactions V2 (KIP-890 part 2, the Java client 4.x at transaction.version 2,
which raftlog finalizes) sends EndTxn v5 (the coordinator bumps the epoch, the answer carries
it), TxnOffsetCommit v5 (the group's partition is added there, no AddOffsetsToTxn) and
Produce v12 (produce.py: partitions added on produce). Kafka decides by the request version;
so does raftlog.

Where Kafka and the native protocol differ, the difference is settled here:
* PRODUCER_FENCED is newer than the old versions: below InitProducerId 4, AddPartitionsToTxn 2,
  AddOffsetsToTxn 2 and EndTxn 2 it is answered INVALID_PRODUCER_EPOCH, as Kafka does.
* AddPartitionsToTxn answers per partition: a whole-request error in every partition; a
  partition Kafka does not know UNKNOWN_TOPIC_OR_PARTITION, the others then
  OPERATION_NOT_ATTEMPTED (nothing is added). v4 is the broker-to-broker batched form
  (CLUSTER_ACTION on the cluster, as Kafka).
"""

from __future__ import annotations

from typing import Any, Final

import trio

from kafka.protocol.admin.transactions import DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from groupcoord.port import CommitOffset
from groupcoord.txn_port import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    EndTxn,
    InitTxnProducerId,
    ListTransactions,
    TxnOffsetCommit,
    TxnPartitionsAdded,
)
from partition.port import TxnMarker
from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS", "init_txn_producer_id", "TXN_STATES"]

ADD_PARTITIONS_TO_TXN_KEY: Final = 24
ADD_OFFSETS_TO_TXN_KEY: Final = 25
END_TXN_KEY: Final = 26
WRITE_TXN_MARKERS_KEY: Final = 27
TXN_OFFSET_COMMIT_KEY: Final = 28
MARKER_TIMEOUT_S: Final = 10.0
DESCRIBE_TRANSACTIONS_KEY: Final = 65
LIST_TRANSACTIONS_KEY: Final = 66
TV2_END_TXN_VERSION: Final = 5          # KIP-890 part 2: EndTxn v5+ bumps the epoch per transaction
TV2_TXN_OFFSET_COMMIT_VERSION: Final = 5  # TxnOffsetCommit v5+ adds the group's partition itself

PRODUCER_FENCED: Final = errors.KAFKA_ERROR_CODES["PRODUCER_FENCED"]
INVALID_PRODUCER_EPOCH: Final = errors.KAFKA_ERROR_CODES["INVALID_PRODUCER_EPOCH"]
UNKNOWN_TOPIC_OR_PARTITION: Final = errors.UNKNOWN_TOPIC_OR_PARTITION
OPERATION_NOT_ATTEMPTED: Final = 55
TXN_STATES: Final = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                               "CompleteAbort", "PrepareEpochFence", "Dead"})
# The first version of each API that knows PRODUCER_FENCED (Kafka's KIP-588 bumps).
_FENCED_FROM: Final = {22: 4, ADD_PARTITIONS_TO_TXN_KEY: 2, ADD_OFFSETS_TO_TXN_KEY: 2, END_TXN_KEY: 2}


def _code(exc: RaftlogError, call: Call) -> int:
    code = errors.kafka_error(exc)[0]
    if code == PRODUCER_FENCED and call.version < _FENCED_FROM.get(call.header.api_key, 0):
        return INVALID_PRODUCER_EPOCH
    return code


async def init_txn_producer_id(ctx: KafkaContext, call: Call) -> Reply:
    """InitProducerId (22) with a transactional id (produce.py sends those here)."""
    request = call.request
    R = InitProducerIdResponse
    asked = InitTxnProducerId(
        request.transactional_id, request.transaction_timeout_ms,
        request.producer_id if call.version >= 3 else -1, request.producer_epoch if call.version >= 3 else -1)

    async def answer() -> Any:
        try:
            done = await ctx.txn_port().init_txn_producer_id(asked)
        except RaftlogError as exc:
            return R(throttle_time_ms=0, error_code=_code(exc, call), producer_id=-1, producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=errors.NONE, producer_id=done.producer_id,
                 producer_epoch=done.producer_epoch)

    return Later(answer)


# --------------------------------------------------------------------------- AddPartitionsToTxn


def _add_request(tid: str, pid: int, epoch: int, topics: Any, verify_only: bool) -> AddPartitionsToTxn:
    return AddPartitionsToTxn(tid, pid, epoch, [(t.name, p) for t in topics or [] for p in t.partitions or []],
                              verify_only)


def _topic_results(call: Call, topics: Any, answer: TxnPartitionsAdded | RaftlogError) -> list[Any]:
    """The topic results of one transaction."""
    T = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    P = T.AddPartitionsToTxnPartitionResult
    asked = [(t.name, list(t.partitions or [])) for t in topics or []]

    def result(code_of: Any) -> list[Any]:
        return [T(name=name, results_by_partition=[P(partition_index=p, partition_error_code=code_of(name, p))
                                                   for p in parts]) for name, parts in asked]

    if isinstance(answer, RaftlogError):
        code = _code(answer, call)
        return result(lambda name, p: code)
    unknown = set(answer.unknown)
    if unknown:
        return result(lambda name, p: UNKNOWN_TOPIC_OR_PARTITION if (name, p) in unknown else OPERATION_NOT_ATTEMPTED)
    return result(lambda name, p: errors.NONE)


async def handle_add_partitions_to_txn(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = AddPartitionsToTxnResponse
    if call.version < 4:
        async def answer_v3() -> Any:
            asked = _add_request(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                 request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
            answer: TxnPartitionsAdded | RaftlogError
            try:
                answer = await ctx.txn_port().add_partitions_to_txn(asked)
            except RaftlogError as exc:
                answer = exc
            return R(throttle_time_ms=0,
                     results_by_topic_v3_and_below=_topic_results(call, request.v3_and_below_topics, answer))

        return Later(answer_v3)
    transactions = list(request.transactions or [])
    asked = [_add_request(t.transactional_id, t.producer_id, t.producer_epoch, t.topics, bool(t.verify_only))
             for t in transactions]

    async def answer_v4() -> Any:
        try:  # the brokers' batched form: CLUSTER_ACTION first (the guard refuses before any runs)
            answers = await ctx.txn_port().add_partitions_to_txns(asked)
        except RaftlogError as exc:
            return R(throttle_time_ms=0, error_code=_code(exc, call), results_by_transaction=[])
        return R(throttle_time_ms=0, error_code=errors.NONE, results_by_transaction=[
            R.AddPartitionsToTxnResult(transactional_id=t.transactional_id,
                                       topic_results=_topic_results(call, t.topics, a))
            for t, a in zip(transactions, answers, strict=True)])  # fmt: skip

    return Later(answer_v4)


# --------------------------------------------------------------------------- AddOffsetsToTxn / EndTxn


async def handle_add_offsets_to_txn(ctx: KafkaContext, call: Call) -> Reply:
    r = call.request
    asked = AddOffsetsToTxn(r.transactional_id, r.producer_id, r.producer_epoch, r.group_id)

    async def answer() -> Any:
        try:
            await ctx.txn_port().add_offsets_to_txn(asked)
        except RaftlogError as exc:
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_code(exc, call))
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=errors.NONE)

    return Later(answer)


async def handle_end_txn(ctx: KafkaContext, call: Call) -> Reply:
    """EndTxn (26). v5 is Transactions V2 (KIP-890 part 2, as Kafka decides by the request
    version): the coordinator bumps the epoch and the answer carries the next producer id and
    epoch, which the Java client (transaction.version 2) uses for its next transaction."""
    r = call.request
    tv2 = call.version >= TV2_END_TXN_VERSION
    asked = EndTxn(r.transactional_id, r.producer_id, r.producer_epoch, bool(r.committed), tv2)

    async def answer() -> Any:
        try:
            done = await ctx.txn_port().end_txn(asked)
        except RaftlogError as exc:
            return EndTxnResponse(throttle_time_ms=0, error_code=_code(exc, call), producer_id=-1, producer_epoch=-1)
        return EndTxnResponse(throttle_time_ms=0, error_code=errors.NONE, producer_id=done.producer_id,
                              producer_epoch=done.producer_epoch)

    return Later(answer)


# --------------------------------------------------------------------------- TxnOffsetCommit, WriteTxnMarkers


async def handle_txn_offset_commit(ctx: KafkaContext, call: Call) -> Reply:
    """TxnOffsetCommit (28): the offsets are held by the group coordinator until the
    transaction commits (groupcoord/txn_offsets.py); a whole-request error in every partition."""
    r = call.request
    R = TxnOffsetCommitResponse
    T, P = R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition
    asked = [(t.name, [(p.partition_index, p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1), p.committed_metadata) for p in t.partitions or []])
             for t in r.topics or []]
    commit = TxnOffsetCommit(
        transactional_id=r.transactional_id, group_id=r.group_id, producer_id=r.producer_id,
        producer_epoch=r.producer_epoch,
        offsets=[CommitOffset(name, p, offset, None if epoch is None or epoch < 0 else epoch, meta or "")
                 for name, parts in asked for p, offset, epoch, meta in parts],
        add_to_txn=call.version >= TV2_TXN_OFFSET_COMMIT_VERSION,
        member_id=r.member_id if call.version >= 3 else "",
        generation_id=r.generation_id if call.version >= 3 else -1,
        group_instance_id=r.group_instance_id if call.version >= 3 else None,
    )  # fmt: skip

    def result(code: int) -> Any:
        return R(throttle_time_ms=0, topics=[T(name=name, partitions=[P(partition_index=p, error_code=code)
                                                                       for p, *_ in parts]) for name, parts in asked])

    async def answer() -> Any:
        try:
            await ctx.txn_port().txn_offset_commit(commit)
        except RaftlogError as exc:
            return result(_code(exc, call))
        return result(errors.NONE)

    return Later(answer)


async def handle_write_txn_markers(ctx: KafkaContext, call: Call) -> Reply:
    """WriteTxnMarkers (27; Kafka's broker-to-broker API, CLUSTER_ACTION on the cluster): each
    marker is appended on this broker's leader replicas (partition port `write_txn_marker`);
    a partition led elsewhere answers NOT_LEADER_OR_FOLLOWER, as Kafka's."""
    R = WriteTxnMarkersResponse
    M = R.WritableTxnMarkerResult
    T = M.WritableTxnMarkerTopicResult
    P = T.WritableTxnMarkerPartitionResult

    async def answer() -> Any:
        out = []
        for m in call.request.markers or []:
            topics = []
            for t in m.topics or []:
                parts = []
                for index in t.partition_indexes or []:
                    marker = TxnMarker(t.name, index, m.producer_id, m.producer_epoch, bool(m.transaction_result),
                                       m.coordinator_epoch)
                    try:
                        await ctx.port().write_txn_marker(marker, trio.current_time() + MARKER_TIMEOUT_S)
                        code = errors.NONE
                    except RaftlogError as exc:
                        code = errors.kafka_error(exc)[0]
                    parts.append(P(partition_index=index, error_code=code))
                topics.append(T(name=t.name, partitions=parts))
            out.append(M(producer_id=m.producer_id, topics=topics))
        return R(markers=out)

    return Later(answer)


# --------------------------------------------------------------------------- Describe / List


async def handle_describe_transactions(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeTransactionsResponse
    S = R.TransactionState
    ids = list(call.request.transactional_ids or [])

    def failed(tid: str, code: int) -> Any:
        return S(error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                 transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])

    try:
        described = await ctx.txn_port().describe_transactions(ids)
    except RaftlogError as exc:
        code = _code(exc, call)
        return R(throttle_time_ms=0, transaction_states=[failed(t, code) for t in ids])
    out = []
    for t in described:
        if t.error is not None:
            out.append(failed(t.transactional_id, errors.kafka_error_code(t.error.code)))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in t.partitions:
            by_topic.setdefault(topic, []).append(p)
        out.append(S(error_code=errors.NONE, transactional_id=t.transactional_id, transaction_state=t.state,
                     transaction_timeout_ms=t.timeout_ms, transaction_start_time_ms=t.start_ms,
                     producer_id=t.producer_id, producer_epoch=t.producer_epoch,
                     topics=[S.TopicData(topic=name, partitions=parts) for name, parts in by_topic.items()]))
    return R(throttle_time_ms=0, transaction_states=out)


async def handle_list_transactions(ctx: KafkaContext, call: Call) -> Reply:
    R = ListTransactionsResponse
    request = call.request
    states = list(request.state_filters or [])
    unknown = [s for s in states if s not in TXN_STATES]
    asked = ListTransactions([s for s in states if s in TXN_STATES] or None,
                             list(request.producer_id_filters or []) or None,
                             request.duration_filter if call.version >= 1 else -1)
    if states and not asked.states:
        return R(throttle_time_ms=0, error_code=errors.NONE, unknown_state_filters=unknown, transaction_states=[])
    try:
        listing = await ctx.txn_port().list_transactions(asked)
    except RaftlogError as exc:
        return R(throttle_time_ms=0, error_code=_code(exc, call), unknown_state_filters=unknown, transaction_states=[])
    return R(throttle_time_ms=0, error_code=errors.NONE, unknown_state_filters=unknown, transaction_states=[
        R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                           transaction_state=t.state)
        for t in listing.transactions])  # fmt: skip


HANDLERS: Final = {
    WRITE_TXN_MARKERS_KEY: handle_write_txn_markers,
    TXN_OFFSET_COMMIT_KEY: handle_txn_offset_commit,
    ADD_PARTITIONS_TO_TXN_KEY: handle_add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN_KEY: handle_add_offsets_to_txn,
    END_TXN_KEY: handle_end_txn,
    DESCRIBE_TRANSACTIONS_KEY: handle_describe_transactions,
    LIST_TRANSACTIONS_KEY: handle_list_transactions,
}

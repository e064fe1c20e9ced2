"""Fetch (key 1), ListOffsets (key 2) and OffsetForLeaderEpoch (key 23).

Fetch runs the partition port's `fetch` (partition/port.py; the native fetch calls the same: leader only, up to the
high watermark, long poll on min_bytes / max_wait_ms, per-partition and per-request byte
limits, at least one whole batch) with `zero_copy`: each partition's records are a slice of
the segment file, and the response is encoded around placeholders (codec.encode_response)
so the writer sends the header bytes, then the file range with os.sendfile (the native
listener's writer, raftlog/node/writer.py: on the trio thread, as the replica read or warmed
the range into the page cache). The ranges are checked as every read is
(partition/log.py "Integrity": `read_slice` checks each batch's header and CRC-32C before it
makes a slice, once per byte, in a worker thread when the bytes are cold), so no damaged byte
is sent: the partition answers KAFKA_STORAGE_ERROR while its replica repairs from a peer, or
CORRUPT_MESSAGE when it has none (raftlog/PROTOCOL.md "Damaged storage"). Isolation level
read_uncommitted and read_committed read the same (no transactions: the last stable offset
is the high watermark). Fetch sessions (KIP-227; fetch_sessions.py, the node's
`ctx.fetch_sessions` cache): a full fetch at epoch 0 creates a session, incremental ones name
only what changed and are answered only the partitions that changed. Raft's control batches are in the stream
as Kafka's are; clients skip them.

ACLs (the port's guard, raftlog/node/authorize.py GuardedPartitions): READ on each fetched
topic, DESCRIBE on each topic of ListOffsets and OffsetForLeaderEpoch (checked before the
replicas are asked; a refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED). A topic
named by id is checked by its name, as Kafka does.

Leader epochs (KIP-320): a partition's `current_leader_epoch` (Fetch v9+, ListOffsets v4+,
OffsetForLeaderEpoch v2+; -1 skips the check) older than the replica's leader epoch is answered
FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, as Kafka does (the port's check). ListOffsets
v4+ answers the leader epoch of the offset it names (the current one for the latest).

ListOffsets: earliest (-2: log start offset; -4, earliest local, the same: no tiered
storage), latest (-1: high watermark), max timestamp (-3, v7+: the first record carrying it, as Kafka 3.8+), latest
tiered (-5) and earliest pending upload (-6): offset -1 (no tiered storage, as Kafka answers
without it), else the first batch whose max timestamp is at or after the given one (offset
-1 when none), from the partition leader.

Follower fetching (KIP-392): a Fetch v11+ naming the consumer's rack (client.rack) is
served by a follower of the partition up to its high watermark; the leader answers one
from another rack with no records and `preferred_read_replica`, an in-sync voter of that
rack (partition/service.py `_read_replica`).

Fetch v13+ names topics by id (KIP-516): ids map to names through the node's image; an
unknown id gets UNKNOWN_TOPIC_ID. A NOT_LEADER_OR_FOLLOWER answer carries CurrentLeader
(v12+) and, from v16, the leader's address in NodeEndpoints (KIP-951), as Produce's does.
"""

from __future__ import annotations

import time
from typing import Any, Final

from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse, OffsetForLeaderEpochResponse

from partition.port import (
    EpochEndResult,
    EpochQuery,
    FetchPart,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetQuery,
)
from raftlog.base.errors import NotLeaderError
from raftlog.node.kafka import errors
from raftlog.node.kafka.codec import FileRange, encode_response, placeholder
from raftlog.node.kafka.context import Call, Encoded, KafkaContext, Later, Reply
from raftlog.node.kafka.fetch_sessions import FINAL_EPOCH, FetchSessionCache, SessionPart
from raftlog.node.kafka.metadata import ZERO_UUID, leader_hint, names_by_uuid, node_endpoints
from raftlog.node.quotas import CONSUMER_BYTE_RATE

__all__ = ["HANDLERS"]


FETCH_KEY: Final = 1
EARLIEST: Final = -2
EARLIEST_LOCAL: Final = -4  # ListOffsets v8+ (KIP-405)
NO_TIERED_STORAGE: Final = frozenset({-5, -6})  # latest tiered (v9+), earliest pending upload (v11+)
TOPIC_IDS_VERSION: Final = 13  # KIP-516: topics by id from Fetch v13 on
LIST_OFFSETS_KEY: Final = 2
OFFSET_FOR_LEADER_EPOCH_KEY: Final = 23
MAX_FETCH_WAIT_MS: Final = 60_000
DEFAULT_MAX_BYTES: Final = 50 << 20


async def handle_fetch(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = FetchResponse
    by_id = call.version >= TOPIC_IDS_VERSION
    names = names_by_uuid(ctx) if by_id else {}
    # Each named partition: its session key (topic id or name, partition) and fetch state.
    asked = [((t.topic_id if by_id else t.topic, p.partition),
              SessionPart(p.fetch_offset, max(1, p.partition_max_bytes), getattr(p, "current_leader_epoch", -1)))
             for t in request.topics for p in t.partitions]
    sessions = ctx.fetch_sessions if ctx.fetch_sessions is not None else _SESSIONLESS
    forgotten = [(t.topic_id if by_id else t.topic, p)
                 for t in getattr(request, "forgotten_topics_data", None) or () for p in t.partitions]
    plan = sessions.begin(
        getattr(request, "session_id", 0), getattr(request, "session_epoch", FINAL_EPOCH), asked, forgotten, uses_topic_ids=by_id, now_ms=_now_ms())
    if plan.error:  # KIP-227: the error alone, no session, no partitions
        return R(throttle_time_ms=0, error_code=plan.error, session_id=0, responses=[], node_endpoints=[])
    # (name or None for an unknown id, topic id, partition, fetch state)
    wanted = [(names.get(key) if by_id else key, key if by_id else None, partition, part)
              for (key, partition), part in plan.parts]
    parts = [FetchPart(n, p, s.fetch_offset, s.max_bytes, s.leader_epoch) for n, _, p, s in wanted if n is not None]
    max_bytes = getattr(request, "max_bytes", DEFAULT_MAX_BYTES) or DEFAULT_MAX_BYTES
    max_wait_ms = max(0, min(request.max_wait_ms, MAX_FETCH_WAIT_MS, ctx.request_timeout_ms - 1000))
    fetch = FetchRequest(parts, max_wait_ms=max_wait_ms, min_bytes=max(0, request.min_bytes),
                         max_bytes=max(1, max_bytes), isolation_level=_isolation(request), zero_copy=True,
                         client_rack=getattr(request, "rack_id", None) or None)  # v11+: KIP-392

    async def answer() -> Reply:
        results = await ctx.port().fetch(fetch) if parts else []
        found = iter(results)
        entries = [None if name is None else next(found) for name, *_ in wanted]
        splices: dict[bytes, Any] = {}
        try:
            session_id, include = sessions.finish(
                plan, [_outcome(e) for e in entries], now_ms=_now_ms())
            topics: dict[tuple[str | None, Any], list[Any]] = {}
            endpoints: set[int] = set()
            for (name, topic_id, partition, _), entry, included in zip(wanted, entries, include):
                if not included:  # incremental: nothing new for this partition
                    if entry is not None and entry.records is not None and not isinstance(entry.records, bytes):
                        entry.records.close()
                    continue
                if entry is None or entry.error is not None:
                    code = errors.UNKNOWN_TOPIC_ID if entry is None else errors.kafka_error_code(entry.error.code)
                    data = R.FetchableTopicResponse.PartitionData(
                        partition_index=partition, error_code=code, high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                        preferred_read_replica=-1, records=b"",  # never null: librdkafka refuses a size of -1
                    )  # fmt: skip
                    hint = None if entry is None else leader_hint(entry.error)
                    if hint is not None:  # KIP-951: where to go, without a metadata round trip
                        data.current_leader = R.FetchableTopicResponse.PartitionData.LeaderIdAndEpoch(
                            leader_id=hint[0], leader_epoch=hint[1])
                        endpoints.add(hint[0])
                else:
                    records = entry.records
                    value = b""
                    if records is not None:
                        value = placeholder(len(splices))
                        splices[value] = records
                    data = R.FetchableTopicResponse.PartitionData(
                        partition_index=partition, error_code=errors.NONE,
                        high_watermark=entry.high_watermark,
                        last_stable_offset=entry.last_stable_offset,
                        log_start_offset=entry.log_start_offset,
                        aborted_transactions=None if entry.aborted_transactions is None else [
                            R.FetchableTopicResponse.PartitionData.AbortedTransaction(
                                producer_id=a.producer_id, first_offset=a.first_offset)
                            for a in entry.aborted_transactions],
                        preferred_read_replica=entry.preferred_read_replica, records=value,
                    )  # fmt: skip
                topics.setdefault((name, topic_id), []).append(data)
            response = R(
                throttle_time_ms=_consumer_throttle_ms(call, splices.values()), error_code=errors.NONE,
                session_id=session_id,
                responses=[R.FetchableTopicResponse(topic=name or "", topic_id=topic_id or ZERO_UUID, partitions=ps)
                           for (name, topic_id), ps in topics.items()],
                node_endpoints=node_endpoints(ctx, endpoints, R.NodeEndpoint),
            )  # fmt: skip
            return Encoded(encode_response(call.header, response, splices=splices))
        except BaseException:
            for s in splices.values():
                s.close()
            raise

    return Later(answer)


# A node without a session cache fetches sessionless (a full fetch at epoch 0 gets session id
# 0, and any other id is unknown); a client below Fetch v7 sends no session: epoch -1.
_SESSIONLESS: Final = FetchSessionCache(0)


def _consumer_throttle_ms(call: Call, records: Any) -> int:
    """The fetch's record bytes counted against the client's consumer_byte_rate (Kafka's fetch
    quota): the throttle time to report; the listener mutes the connection that long."""
    record = call.connection.record_quota
    if record is None:
        return 0
    size = sum(r.length if isinstance(r, FileRange) else len(r) for r in records)
    return record(CONSUMER_BYTE_RATE, call.header.client_id or "", size)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _outcome(entry: FetchResult | None) -> tuple[int, int, int, bool, bool]:
    """What the session cache compares with what the client was last told."""
    if entry is None or entry.error is not None:
        return -1, -1, -1, False, True
    records = entry.records
    size = 0 if records is None else len(records) if isinstance(records, bytes) else records.length
    return entry.high_watermark, entry.last_stable_offset, entry.log_start_offset, size > 0, False


def _isolation(request: Any) -> IsolationLevel:
    return IsolationLevel.READ_COMMITTED if getattr(request, "isolation_level", 0) == 1 else IsolationLevel.READ_UNCOMMITTED


async def handle_list_offsets(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = ListOffsetsResponse
    asked = [(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1))
             for t in request.topics for p in t.partitions]
    # No tiered storage: the earliest local offset (-4) is the earliest; the latest tiered
    # (-5) and earliest pending upload (-6) offsets do not exist (Kafka answers -1 then, after
    # the ACL check: those are asked of the port too, as the earliest, and answered -1).
    queries = [OffsetQuery(t, p, EARLIEST if ts == EARLIEST_LOCAL or ts in NO_TIERED_STORAGE else ts, current)
               for t, p, ts, current in asked]

    async def answer() -> Reply:
        found = await ctx.port().list_offsets(queries, isolation_level=_isolation(request)) if queries else []
        topics: dict[str, list[Any]] = {}
        for (_, _, ts, _), entry in zip(asked, found):
            P = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
            if entry.error is not None:
                data = P(partition_index=entry.partition, error_code=errors.kafka_error_code(entry.error.code),
                         timestamp=-1, offset=-1, leader_epoch=-1)
            elif ts in NO_TIERED_STORAGE:
                data = P(partition_index=entry.partition, error_code=errors.NONE, timestamp=-1, offset=-1,
                         leader_epoch=-1)
            else:
                data = P(partition_index=entry.partition, error_code=errors.NONE,
                         timestamp=entry.timestamp, offset=entry.offset, leader_epoch=entry.leader_epoch)
            topics.setdefault(entry.topic, []).append(data)
        return R(throttle_time_ms=0, topics=[
            R.ListOffsetsTopicResponse(name=name, partitions=ps) for name, ps in topics.items()])

    return Later(answer)


async def handle_offset_for_leader_epoch(ctx: KafkaContext, call: Call) -> Reply:
    """KIP-320: where each asked epoch ends on the leader, so a consumer that read up to some
    offset in that epoch can tell whether the log was truncated under it (after an unclean
    recovery). `current_leader_epoch` (-1: not checked) older than the leader's is
    FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (the client refreshes metadata): the
    port's check (partition/port.py "Leader epochs"), as for Fetch and ListOffsets."""
    request = call.request
    R = OffsetForLeaderEpochResponse
    asked = [(t.topic, p.partition, getattr(p, "current_leader_epoch", -1), p.leader_epoch)
             for t in request.topics for p in t.partitions]
    try:
        found = ctx.port().epoch_end_offsets([EpochQuery(t, p, e, current) for t, p, current, e in asked]) if asked else []
    except NotLeaderError as exc:  # not a broker
        found = [EpochEndResult(t, p, error=exc) for t, p, _, _ in asked]
    topics: dict[str, list[Any]] = {}
    for (topic, partition, _, _), entry in zip(asked, found):
        code = errors.kafka_error_code(None if entry.error is None else entry.error.code)
        ok = code == errors.NONE
        topics.setdefault(topic, []).append(R.OffsetForLeaderTopicResult.EpochEndOffset(
            error_code=code, partition=partition, leader_epoch=entry.leader_epoch if ok else -1,
            end_offset=entry.end_offset if ok else -1,
        ))  # fmt: skip
    return R(throttle_time_ms=0, topics=[
        R.OffsetForLeaderTopicResult(topic=name, partitions=ps) for name, ps in topics.items()])


HANDLERS: Final = {
    FETCH_KEY: handle_fetch,
    LIST_OFFSETS_KEY: handle_list_offsets,
    OFFSET_FOR_LEADER_EPOCH_KEY: handle_offset_for_leader_epoch,
}

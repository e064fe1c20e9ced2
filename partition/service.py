"""PartitionService: the partition port (partition/port.py) over the replicas this broker
hosts (partition/manager.py hosts them; this module serves requests with them).

    PartitionService(host: ReplicaHost, metadata: ProducerIdSource & LeaderAddresses)

* produce (`append`): each part is checked as Kafka's log validator does
  (partition/validator.py; a refused part is logged with the client's fields and nothing of
  it is stored) and appended on its leader replica, in order; the acks=all wait is
  `Appended.wait`. Ordering: the appends are in the leaders' logs when `append` returns, so
  a connection that calls it for one request after another keeps its requests' order (an
  idempotent producer's pipelined batches stay in sequence).
* fetch: leader only, up to the high watermark, long poll (answers once `min_bytes` are
  there, on any error, or at `max_wait_ms`), per-partition and per-request byte limits.
  With `zero_copy` the records are FileSlices (the caller closes them; slices of a pass
  that waits again are closed here).
* list offsets: -2 log start, -1 high watermark, -3 the batch with the largest timestamp
  (KIP-734), else the first batch with max timestamp >= ts below the high watermark (-1 if
  none). epoch end offsets: KIP-320, from the leader's in-memory epoch cache.
  Read-your-acks: an acks=1 (or 0) produce is answered at the leader's append, and under
  `flush.policy=always` the high watermark moves only at the fsync (a majority's on RF 3), so
  a client's ListOffsets right after its answer could miss its own record (Kafka's RF-1 high
  watermark moves at the append). Every query but -2 first waits, at most
  LIST_OFFSETS_HW_WAIT_MS for the whole request, until the high watermark reaches the log
  end as the request found it; the high watermark keeps its meaning (fsynced on a majority)
  and acks=all keeps fsync-before-ack. Past the wait it answers the high watermark it has.
* delete records: leader only; every replica's log start moves up, answered at a majority
  (or the deadline: REQUEST_TIMED_OUT, the deletion may still happen).
* init producer id: ids from blocks the controller allocates; without a reachable
  controller COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka answers when its block is
  not ready), where NOT_CONTROLLER would fail the producer's records.
* recover partition (operator): unclean recovery of this broker's replica (raft.py
  "Damaged storage"), refused unless `unclean`.
* Named leaders: a request (produce, fetch, list offsets, delete records, a transaction
  marker) for a partition whose record names this broker its first leader while the replica
  here has not opened or led yet (partition/manager.py "Named leaders") is held until it
  leads, at most NAMED_LEADER_HOLD_MS (or the request's own deadline, if sooner), then served,
  or answered NOT_LEADER as before. Metadata answers name that leader from the moment the
  topic exists, and clients send their first request at once (Kafka's broker, told of its
  leadership by the controller before any client is, never sees such a request).
* A request for a partition whose local replica is offline, when the image names another
  leader, is answered NOT_LEADER with that hint (nothing was tried here). The NOT_LEADER hint
  (leader id, its native address, the leader epoch the image knows) is made once, here.

Concurrency: trio thread only; per-replica serialisation lives in partition/replica.py.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

import trio

from metadata.image import MetadataImage
from metadata.topic_config import INT64_MAX, TopicConfig
from partition.batch import (
    COMPRESSION_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_BYTES,
    LOG_OVERHEAD,
    CheckedBatches,
    Compression,
    iter_headers,
)
from partition.epoch_cache import LeaderEpochCache
from partition.errors import CorruptRecordError
from partition.port import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ClientInfo,
    DeletePart,
    DeleteResult,
    EpochEndResult,
    EpochQuery,
    FetchPart,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetQuery,
    OffsetResult,
    PartitionKey,
    ProducePart,
    ProduceResult,
    ProducerIdentity,
    ProducerInfo,
    RecordsSlice,
    ReplicaSize,
    TxnMarker,
    TxnVerifierPort,
)
from partition.replica import AckWaiter, Replica
from partition.recompress import recompress
from partition.telemetry import TopicTraffic, batch_records, slice_records
from partition.validator import TimestampPolicy, batch_too_large, validate_client_batches
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotControllerError,
    NotLeaderError,
    PeerUnavailableError,
    RaftlogError,
    RejectedError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event

__all__ = ["PartitionService", "ReplicaHost", "BrokerDirectory", "TxnVerifierPort"]

logger = logging.getLogger(__name__)

# Produce validation (partition/validator.py): uncompressed records are walked on the trio
# thread (a batch is at most max_message_bytes: a few ms); records holding a compressed batch
# are decompressed (at most this many bytes a batch: what a consumer decodes by default) and
# walked in a worker thread, one at a time, so a small batch that inflates to 64 MiB neither
# stalls the event loop for seconds nor runs twice at once.
VALIDATE_MAX_DECOMPRESSED_BYTES: Final = DEFAULT_MAX_DECOMPRESSED_BYTES
VALIDATE_THREADS: Final = 1


class ReplicaHost(Protocol):
    """What the service needs of the replica manager (partition/manager.py)."""

    node_id: int

    def replica(self, topic: str, partition: int) -> Replica | None: ...

    def replicas(self) -> list[Replica]: ...

    def image_now(self) -> MetadataImage: ...

    async def wait_named_leader(self, topic: str, partition: int, deadline: float) -> None:
        """Return once the partition is not "named here, not yet led" (manager.py "Named
        leaders"), or at `deadline` (trio time)."""

    @property
    def traffic(self) -> TopicTraffic: ...


class BrokerDirectory(Protocol):
    """What the service needs of the metadata service."""

    def client_address(self, broker_id: int) -> str | None: ...

    async def allocate_producer_ids(self) -> tuple[int, int]: ...


@dataclass(slots=True)
class _Appended:
    results: list[ProduceResult]
    waits: list[tuple[ProduceResult, AckWaiter]]

    @property
    def waiting(self) -> bool:
        return bool(self.waits)

    async def wait(self, deadline: float) -> list[ProduceResult]:
        for result, waiter in self.waits:
            try:
                await waiter.wait(deadline)
            except RaftlogError as exc:
                result.fail(exc)
        self.waits = []
        return self.results


# compression.type -> the codec the leader stores batches in ("producer": the batch's own)
_CODECS: Final = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                  "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def _validated_in(check: Callable[[], CheckedBatches], codec: Compression) -> CheckedBatches:
    """Validated records, then recompressed into `codec` where a batch is in another (the
    recompressed batches' headers are read again: their CRC-32Cs are the ones just computed)."""
    checked = check()
    data = recompress(checked.data, codec, max_decompressed_bytes=VALIDATE_MAX_DECOMPRESSED_BYTES)
    return checked if data is checked.data else CheckedBatches(data, list(iter_headers(data, verify=False)))


# ListOffsets' bounded wait for the high watermark to reach the log end (module docstring):
# a few fsyncs at a loaded machine's pace; a log end the high watermark cannot reach (a
# majority down) costs a request this much, once.
LIST_OFFSETS_HW_WAIT_MS: Final = 500

# The longest a request waits for a replica named its first leader here to lead (module
# docstring "Named leaders"): a new replica opens within a second or two on a loaded machine;
# at 10,000 new partitions a node opens ~125 a second, and a client may as well retry.
NAMED_LEADER_HOLD_MS: Final = 5000


def _hold_until(deadline: float | None = None) -> float:
    """The trio time a named leader's request is held until (NAMED_LEADER_HOLD_MS, or the
    request's own `deadline` if sooner)."""
    cap = trio.current_time() + NAMED_LEADER_HOLD_MS / 1000
    return cap if deadline is None else min(cap, deadline)


def _timestamp_policy(config: TopicConfig, now_ms: int) -> TimestampPolicy | None:
    """The topic's timestamp rules for one produce (validator.py TimestampPolicy), None for
    the defaults (nothing to check or rewrite: no cost for most topics)."""
    before = min(config.message_timestamp_before_max_ms, config.message_timestamp_difference_max_ms)
    after = min(config.message_timestamp_after_max_ms, config.message_timestamp_difference_max_ms)
    log_append_time = config.message_timestamp_type == "LogAppendTime"
    if before == INT64_MAX and after == INT64_MAX and not log_append_time:
        return None
    return TimestampPolicy(now_ms, before, after, log_append_time)


class PartitionService:
    """See the module docstring. Implements partition.port.PartitionPort."""

    def __init__(self, host: ReplicaHost, metadata: BrokerDirectory) -> None:
        # The broker's compression.type (Kafka's): a topic at `producer` follows it; set by the
        # node from its config and the dynamic broker configs (raftlog/node/dynamic_config.py).
        self.compression_type = "producer"
        self._host = host
        self._metadata = metadata
        self._validate_limiter = trio.CapacityLimiter(VALIDATE_THREADS)
        self._pid_next = 0
        self._pid_end = 0
        self._pid_lock = trio.Lock()
        # Set by the node once the transaction coordinator exists (KIP-890 verification), and
        # told of each marker written here (the group coordinator's pending offsets).
        self.txn_verifier: TxnVerifierPort | None = None
        self.on_marker: Callable[[TxnMarker], Awaitable[None]] | None = None

    # ------------------------------------------------------------------ lookups

    def not_leader(self, topic: str, partition: int, hint: int | None) -> NotLeaderError:
        """The one NOT_LEADER answer: the leader `hint` (or the image's, when the hint is
        none or this broker), its native address and the epoch the image knows for it."""
        node_id = self._host.node_id
        p = self._host.image_now().partition(topic, partition)
        if hint is None or hint == node_id:
            hint = p.leader if p is not None and p.leader >= 0 and p.leader != node_id else None
        address = self._metadata.client_address(hint) if hint is not None else None
        epoch = p.leader_epoch if p is not None and hint is not None and p.leader == hint else None
        return NotLeaderError(leader_id=hint, leader=address, epoch=epoch)

    def leader_replica(self, topic: str, partition: int) -> Replica:
        r = self._host.replica(topic, partition)
        if r is None:
            if self._host.image_now().partition(topic, partition) is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist here")
            raise self.not_leader(topic, partition, None)
        if r.offline_reason is not None:
            # Nothing will be tried here: if another broker leads, say so (module docstring).
            p = self._host.image_now().partition(topic, partition)
            if p is not None and p.leader >= 0 and p.leader != self._host.node_id:
                raise self.not_leader(topic, partition, p.leader)
        return r

    def _error(self, exc: BaseException, topic: str, partition: int) -> RaftlogError:
        if isinstance(exc, NotLeaderError):
            return self.not_leader(topic, partition, exc.leader_id)
        wire = as_wire_error(exc)
        if wire is None:
            log_event(logger, "partition_op_failed", level=logging.ERROR, exc_info=exc,
                      topic=topic, partition=partition)
            wire = UnknownServerError(f"{type(exc).__name__} on {topic}-{partition}")
        return wire

    # ------------------------------------------------------------------ produce

    async def append(self, parts: Sequence[ProducePart], *, acks: int, client: ClientInfo,
                     transactional_id: str | None = None, add_to_txn: bool = False) -> _Appended:
        appended = _Appended([], [])
        traffic = self._host.traffic
        hold_until = _hold_until()
        for part in parts:
            topic, partition = part.topic, part.partition
            result = ProduceResult(topic, partition)
            try:
                await self._host.wait_named_leader(topic, partition, hold_until)
                replica = self.leader_replica(topic, partition)
                if not part.records:
                    raise CorruptRecordError("no records")
                timestamps = _timestamp_policy(replica.topic_config, int(time.time() * 1000))
                records = self._prechecked(replica, part.records, client, timestamps) if part.checked else None
                if records is None:
                    records = await self._validated(replica, part.records, client, timestamps,
                                                    transactional=transactional_id is not None)
                verify = None
                if transactional_id is not None and self.txn_verifier is not None:
                    verify = partial(self.txn_verifier.verify_txn, transactional_id, topic, partition,
                                     add=add_to_txn)
                res = await replica.append_as_leader(records, acks=acks, verify_txn=verify)
                if not res.duplicate:
                    traffic.produced(topic, len(records), res.last_offset - res.first_offset + 1)
                result.base_offset = res.first_offset
                if timestamps is not None and timestamps.log_append_time:
                    result.log_append_time_ms = timestamps.now_ms  # Kafka answers it for LogAppendTime
                result.log_start_offset = replica.log.log_start_offset  # Kafka's answer carries it
                if res.waiter is not None:
                    appended.waits.append((result, res.waiter))
            except RaftlogError as exc:
                result.error = self._error(exc, topic, partition)
            appended.results.append(result)
        return appended

    def _prechecked(self, replica: Replica, records: bytes, client: ClientInfo,
                    timestamps: TimestampPolicy | None) -> CheckedBatches | None:
        """`records` with the batch headers that passed the topic-free checks elsewhere
        (ProducePart.checked), once the topic's rules hold: each batch within
        max.message.bytes (MESSAGE_TOO_LARGE) and its timestamps within the topic's bounds
        (INVALID_TIMESTAMP), as the validator checks them. None where the topic needs more
        than that (keys on a compacted topic, LogAppendTime, recompression): then the full
        validation runs, as for any produce."""
        config = replica.topic_config
        if ((timestamps is not None and timestamps.log_append_time) or "compact" in config.cleanup_policy
                or _CODECS.get(config.compression_type if config.compression_type != "producer"
                               else self.compression_type) is not None):
            return None
        headers = list(iter_headers(records, verify=False))
        try:
            for pos, h in headers:
                if h.size > config.max_message_bytes:
                    raise batch_too_large(h.size, config.max_message_bytes, replica.topic)
                if timestamps is not None:
                    timestamps.check(h.base_timestamp, h.max_timestamp, pos)
        except RejectedError as exc:
            log_event(logger, "produce_refused", level=logging.WARNING, topic=replica.topic,
                      partition=replica.partition, code=exc.code, reason=exc.message, **client.fields())
            raise
        return CheckedBatches(records, headers)

    async def _validated(self, replica: Replica, records: bytes, client: ClientInfo,
                         timestamps: TimestampPolicy | None, *, transactional: bool = False) -> CheckedBatches:
        """`records` as validate_client_batches returns them (the bytes to append with the
        headers it read and CRC-checked, which the append then takes as they are): inline
        when uncompressed, in a worker thread (VALIDATE_THREADS) when a batch must be
        decompressed first. Logs a refusal (`produce_refused`, naming the client and the
        reason) and raises it."""
        config = replica.topic_config
        compression = config.compression_type
        codec = _CODECS.get(compression if compression != "producer" else self.compression_type)
        kwargs = dict(max_message_bytes=config.max_message_bytes, max_decompressed_bytes=VALIDATE_MAX_DECOMPRESSED_BYTES,
                      topic=replica.topic, transactional=transactional, require_keys="compact" in config.cleanup_policy,
                      partition=replica.partition, timestamps=timestamps)
        try:
            if codec is None and not _any_compressed(records):
                return validate_client_batches(records, **kwargs)
            check = partial(validate_client_batches, records, **kwargs)
            if codec is not None:  # the topic's (else the broker's) compression.type: Kafka recompresses
                check = partial(_validated_in, check, codec)
            return await trio.to_thread.run_sync(check, limiter=self._validate_limiter)
        except RejectedError as exc:
            log_event(logger, "produce_refused", level=logging.WARNING, topic=replica.topic,
                      partition=replica.partition, code=exc.code, reason=exc.message, **client.fields())
            raise

    # ------------------------------------------------------------------ fetch

    async def fetch(self, request: FetchRequest) -> list[FetchResult]:
        """Concurrency: trio thread; cancel-safe (slices are closed on the way out)."""
        hold_until = _hold_until()
        for part in request.parts:  # a named leader not leading yet (module docstring)
            await self._host.wait_named_leader(part.topic, part.partition, hold_until)
        deadline = trio.current_time() + request.max_wait_ms / 1000
        while True:
            results, total, errors, watched = await self._read_partitions(request)
            if total >= request.min_bytes or errors or trio.current_time() >= deadline or not watched:
                if total:
                    self._count_fetched(request.parts, results)
                return results
            _close_slices(results)
            wake = trio.Event()
            for r in watched:
                r.watch(wake)
            try:
                with trio.move_on_at(deadline):
                    await wake.wait()
            finally:
                for r in watched:
                    r.unwatch(wake)

    def _count_fetched(self, parts: Sequence[FetchPart], results: list[FetchResult]) -> None:
        """Bytes and records out per topic (/metrics), from the batch headers answered."""
        traffic = self._host.traffic
        for part, result in zip(parts, results):
            records = result.records
            if not records:
                continue
            if isinstance(records, (bytes, bytearray, memoryview)):
                traffic.fetched(part.topic, len(records), batch_records(records, part.fetch_offset))
            else:  # a FileSlice: its headers are in the page cache (the cached tail, or warmed
                # by the worker thread that made the slice), as sendfile expects the bytes to be
                traffic.fetched(part.topic, records.length,
                                slice_records(records.fd, records.offset, records.length, part.fetch_offset))

    def _read_replica(self, topic: str, partition: int, client_rack: str | None) -> tuple[Replica, bool, int]:
        """Where a consumer fetch is served (KIP-392): (the replica, whether as a follower,
        the preferred read replica or -1). Without `client_rack`, or with this broker's own
        rack, the leader serves. A follower of the group serves a client naming a rack; the
        leader names an in-sync voter of the client's rack when it is not in that rack itself."""
        if not client_rack:
            return self.leader_replica(topic, partition), False, -1
        r = self._host.replica(topic, partition)
        if r is not None and r.offline_reason is None and r.core is not None and not r.is_leader \
                and r.replica_id in r.voters:
            self._host.traffic.follower_fetches[topic] = self._host.traffic.follower_fetches.get(topic, 0) + 1
            return r, True, -1
        r = self.leader_replica(topic, partition)
        image = self._host.image_now()
        own = image.broker(self._host.node_id)
        if own is not None and own.rack == client_rack:
            return r, False, -1
        states = r.core.follower_states() if r.core is not None else {}
        for broker_id, (fetch_offset, in_sync) in sorted(states.items()):
            reg = image.broker(broker_id)
            if in_sync and reg is not None and not reg.fenced and reg.rack == client_rack \
                    and fetch_offset >= r.high_watermark:
                return r, False, broker_id
        return r, False, -1

    async def _read_partitions(self, request: FetchRequest) -> tuple[list[FetchResult], int, int, list[Replica]]:
        """One pass of a fetch over its partitions. Reads may run in worker threads
        (Replica._read); with `zero_copy`, the slices made so far are closed if the pass
        ends by an exception or a cancellation."""
        results: list[FetchResult] = []
        total = 0
        errors = 0
        watched = []
        try:
            for part in request.parts:
                topic, partition = part.topic, part.partition
                try:
                    r, as_follower, preferred = self._read_replica(topic, partition, request.client_rack)
                    _check_current_epoch(r, part.current_leader_epoch)
                    if preferred >= 0:  # KIP-392: the client goes there; nothing read here, answer now
                        errors += 1
                        results.append(FetchResult(topic, partition, high_watermark=r.high_watermark,
                                                   last_stable_offset=r.high_watermark,
                                                   log_start_offset=r.log.log_start_offset,
                                                   preferred_read_replica=preferred))
                        continue
                    budget = min(part.max_bytes, request.max_bytes - total)
                    lso, upto = _stable_end(r, request.isolation_level)
                    records: bytes | RecordsSlice | None
                    if request.zero_copy:
                        records = await r.read_committed_slice(part.fetch_offset, budget, as_follower=as_follower,
                                                               upto=upto) if budget > 0 else None
                        total += 0 if records is None else records.length
                    else:
                        data = await r.read_committed(part.fetch_offset, budget, upto=upto) if budget > 0 else b""
                        total += len(data)
                        records = data
                    watched.append(r)
                    aborted = None
                    if upto is not None:
                        aborted = r.producers.txns.aborted_between(part.fetch_offset, upto) if records else []
                    results.append(FetchResult(topic, partition, high_watermark=r.high_watermark,
                                               last_stable_offset=lso, log_start_offset=r.log.log_start_offset,
                                               records=records, aborted_transactions=aborted))
                except RaftlogError as exc:
                    errors += 1
                    results.append(FetchResult(topic, partition, error=self._error(exc, topic, partition)))
        except BaseException:
            _close_slices(results)
            raise
        return results, total, errors, watched

    # ------------------------------------------------------------------ offsets

    def epoch_end_offsets(self, queries: Sequence[EpochQuery]) -> list[EpochEndResult]:
        results = []
        for q in queries:
            try:
                r = self.leader_replica(q.topic, q.partition)
                r.check_leader()
                _check_current_epoch(r, q.current_leader_epoch)
                found, end = r.log.end_offset_for_epoch(q.leader_epoch)
                results.append(EpochEndResult(q.topic, q.partition, current_epoch=r.leader_epoch,
                                              leader_epoch=found, end_offset=end))
            except RaftlogError as exc:
                results.append(EpochEndResult(q.topic, q.partition, error=self._error(exc, q.topic, q.partition)))
        return results

    async def list_offsets(self, queries: Sequence[OffsetQuery], *,
                           isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                           ) -> list[OffsetResult]:
        results = []
        # Read-your-acks (module docstring): the log end as this request found it, per partition.
        hold_until = _hold_until()
        for q in queries:  # a named leader not leading yet (module docstring)
            await self._host.wait_named_leader(q.topic, q.partition, hold_until)
        deadline = trio.current_time() + LIST_OFFSETS_HW_WAIT_MS / 1000
        for q in queries:
            try:
                r = self.leader_replica(q.topic, q.partition)
                r.check_leader()
                _check_current_epoch(r, q.current_leader_epoch)
                if q.timestamp != EARLIEST_TIMESTAMP:
                    await r.wait_high_watermark(r.log.log_end_offset, deadline)
                    r.check_leader()
                hw = r.high_watermark
                if isolation_level == IsolationLevel.READ_COMMITTED:
                    hw = r.last_stable_offset  # Kafka: read_committed's latest is the LSO
                if q.timestamp == EARLIEST_TIMESTAMP:
                    offset, found_ts = r.log.log_start_offset, -1
                elif q.timestamp == LATEST_TIMESTAMP:
                    offset, found_ts = hw, -1
                elif q.timestamp == MAX_TIMESTAMP:
                    offset, found_ts = await r.max_timestamp_offset(hw)
                else:
                    found = await r.offset_for_timestamp(q.timestamp)
                    offset, found_ts = found if found is not None and found[0] < hw else (-1, -1)
                # Kafka's ListOffsets v4+ leader_epoch: the current one for the latest offset,
                # else the epoch of the batch holding the offset found.
                epoch = r.leader_epoch if q.timestamp == LATEST_TIMESTAMP else (
                    LeaderEpochCache(r.log.epochs()).epoch_at(offset) if offset >= 0 else -1)
                results.append(OffsetResult(q.topic, q.partition, offset=offset, timestamp=found_ts,
                                            leader_epoch=epoch))
            except RaftlogError as exc:
                results.append(OffsetResult(q.topic, q.partition, error=self._error(exc, q.topic, q.partition)))
        return results

    async def delete_records(self, parts: Sequence[DeletePart], deadline: float) -> list[DeleteResult]:
        results = [DeleteResult(p.topic, p.partition) for p in parts]

        async def one(result: DeleteResult, offset: int) -> None:
            try:
                await self._host.wait_named_leader(result.topic, result.partition, _hold_until(deadline))
                r = self.leader_replica(result.topic, result.partition)
                result.low_watermark = await r.delete_records(offset, deadline)
            except RaftlogError as exc:
                result.error = self._error(exc, result.topic, result.partition)

        async with trio.open_nursery() as nursery:
            for result, part in zip(results, parts):
                nursery.start_soon(one, result, part.offset)
        return results

    # ------------------------------------------------------------------ transactions

    async def write_txn_marker(self, marker: TxnMarker, deadline: float) -> None:
        """Append the COMMIT/ABORT marker of `marker.producer_id` on the leader of its
        partition and wait for its commit (Kafka's WriteTxnMarkers, one partition). Raises
        NotLeaderError (with the hint), UnknownTopicOrPartitionError, InvalidProducerEpochError,
        RequestTimedOutError (unknown outcome: the coordinator writes it again),
        KafkaStorageError."""
        await self._host.wait_named_leader(marker.topic, marker.partition, _hold_until(deadline))
        r = self.leader_replica(marker.topic, marker.partition)
        try:
            waiter = await r.append_marker(marker.producer_id, marker.producer_epoch, commit=marker.commit,
                                           coordinator_epoch=marker.coordinator_epoch)
            await waiter.wait(deadline)
        except NotLeaderError as exc:
            raise self.not_leader(marker.topic, marker.partition, exc.leader_id) from None
        if self.on_marker is not None:
            await self.on_marker(marker)

    # ------------------------------------------------------------------ producers

    async def init_producer_id(self, *, transactional_id: str | None = None) -> ProducerIdentity:
        """A producer id from this broker's block; a new block comes from the controller
        (module docstring)."""
        if transactional_id is not None:
            raise TransactionalIdAuthorizationFailedError("transactions are not supported")
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    first, size = await self._metadata.allocate_producer_ids()
                except (NotControllerError, PeerUnavailableError, RequestTimedOutError) as exc:
                    raise CoordinatorLoadInProgressError(
                        f"no producer id block yet: the controller is not reachable ({exc})") from None
                self._pid_next, self._pid_end = first, first + size
            pid = self._pid_next
            self._pid_next += 1
        return ProducerIdentity(pid, 0)

    def producers(self, topic: str, partition: int) -> list[ProducerInfo]:
        r = self._host.replica(topic, partition)
        if self._host.image_now().partition(topic, partition) is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if r is None or not r.is_leader:
            raise NotLeaderError(f"node {self._host.node_id} does not lead {topic}-{partition}")
        open_txns = r.producers.txns.open
        return [ProducerInfo(pid, e.producer_epoch, e.last_sequence, open_txns.get(pid, -1))
                for pid, e in r.producers.active()]

    def log_dirs(self, wanted: set[PartitionKey] | None = None) -> list[ReplicaSize]:
        out = []
        for r in self._host.replicas():
            if wanted is not None and PartitionKey(r.topic, r.partition) not in wanted:
                continue
            log, core = r.log, r.core
            if log is None or core is None:
                continue
            s = core.status()
            out.append(ReplicaSize(r.topic, r.partition, log.size_bytes(),
                                   max(0, s["high_watermark"] - s["log_end_offset"])))
        return out

    # ------------------------------------------------------------------ operator

    async def recover_partition(self, topic: str, partition: int, *, unclean: bool) -> None:
        """Unclean recovery of the local replica (raft.py "Damaged storage"): clear its
        needs_catch_up and run for election. Refused (INVALID_REQUEST, the reason in the
        message) without `unclean`, when this broker hosts no replica of it, when the
        replica is not flagged, or when the partition has a live leader (the replica's core
        knows one and it is this broker or an unfenced one)."""
        name = f"{topic}-{partition}"
        node_id = self._host.node_id
        if unclean is not True:
            raise InvalidRequestError(
                f"recovering {name} is unclean: records acknowledged but missing from this"
                " replica's log are lost for good; send unclean: true to accept that", field="unclean")
        r = self._host.replica(topic, partition)
        if r is None:
            p = self._host.image_now().partition(topic, partition)
            if p is None:
                raise UnknownTopicOrPartitionError(f"{name} does not exist")
            raise InvalidRequestError(
                f"broker {node_id} hosts no open replica of {name} (replicas:"
                f" {', '.join(map(str, p.replicas))}); send it to one of those")
        r.check_online()
        if not r.core.needs_catch_up:
            raise InvalidRequestError(
                f"the replica of {name} on broker {node_id} is not flagged needs_catch_up: nothing to recover")
        leader = r.core.leader_id
        if leader is not None:
            reg = self._host.image_now().broker(leader)
            if leader == node_id or (reg is not None and not reg.fenced):
                raise InvalidRequestError(
                    f"{name} has a live leader (broker {leader}, epoch {r.core.epoch}):"
                    " the flagged replica catches up from it; nothing to recover")
        if not await r.clear_catch_up():
            raise InvalidRequestError(
                f"the replica of {name} on broker {node_id} caught up meanwhile: nothing to recover")
        log_event(logger, "partition_recovered_unclean", level=logging.WARNING, topic=topic,
                  partition=partition, epoch=r.core.epoch, log_end_offset=r.core.log_end_offset)


def _any_compressed(records: bytes) -> bool:
    """Whether any batch of `records` is compressed: its attributes' codec bits, read in
    place batch by batch (no Header made); bytes whose headers do not read count as
    uncompressed (the validator refuses them without decompressing)."""
    pos, total = 0, len(records)
    while pos + HEADER_BYTES <= total:
        if records[pos + _CODEC_BYTE_AT] & COMPRESSION_MASK:
            return True
        length = _BATCH_LENGTH.unpack_from(records, pos + _BATCH_LENGTH_AT)[0]
        if length < 0:
            return False
        pos += LOG_OVERHEAD + length
    return False


_CODEC_BYTE_AT: Final = 22  # the attributes' low byte (int16 at 21, big-endian)
_BATCH_LENGTH_AT: Final = 8
_BATCH_LENGTH: Final = struct.Struct(">i")


# The fault suite's control, never for a real cluster: nodes started with
# RAFTLOG_UNSAFE_READ_PAST_LSO=1 answer read_committed fetches as read_uncommitted ones (open and
# aborted transactions' records, the high watermark as LSO), which jepsen_style_tests'
# txn checker must find out (docs/how-to/fault-testing-transactions.md).
_UNSAFE_READ_PAST_LSO: Final = os.environ.get("RAFTLOG_UNSAFE_READ_PAST_LSO") == "1"


def _stable_end(r: Replica, isolation_level: IsolationLevel) -> tuple[int, int | None]:
    """The LSO a fetch answers, and where its read stops (None: read_uncommitted, to the HW)."""
    if _UNSAFE_READ_PAST_LSO:
        return r.high_watermark, None
    lso = r.last_stable_offset
    return lso, (lso if isolation_level == IsolationLevel.READ_COMMITTED else None)


def _check_current_epoch(r: Replica, current: int) -> None:
    """KIP-320 (partition/port.py "Leader epochs"): the client's `current_leader_epoch` against
    the replica's leader epoch; -1 is not checked. Raises FencedLeaderEpochError (the client's
    is older) or UnknownLeaderEpochError (newer)."""
    if current < 0 or current == r.leader_epoch:
        return
    if current < r.leader_epoch:
        raise FencedLeaderEpochError(
            f"{r.name}: the request's leader epoch {current} is older than the leader's {r.leader_epoch}")
    raise UnknownLeaderEpochError(
        f"{r.name}: the request's leader epoch {current} is newer than this replica's {r.leader_epoch}")


def _close_slices(results: list[FetchResult]) -> None:
    for result in results:
        records = result.records
        if records is not None and not isinstance(records, bytes):
            records.close()

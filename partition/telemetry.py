"""What an operator alerts on from a broker's replicas, made at scrape time.

    telemetry = ReplicaTelemetry(manager)          # the ReplicaManager builds one
    registry.collector(telemetry.collect)          # every family below, at every scrape
    telemetry.traffic.produced(topic, nbytes, nrecords)   # on the produce path: two dict adds

Families (names follow Kafka's MBeans, e.g. kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions -> raftlog_replica_manager_under_replicated_partitions, and
the per-topic BrokerTopicMetrics; Redpanda's equivalents are named in each HELP text):
* per broker: raftlog_replica_manager_under_replicated_partitions (led here, some follower
  not in sync), raftlog_replica_manager_leader_count, raftlog_replica_manager_partition_count;
* per topic: raftlog_topic_bytes_in_total, raftlog_topic_records_in_total (records appended
  as leader), raftlog_topic_bytes_out_total, raftlog_topic_records_out_total (sent to
  consumers, both listeners), raftlog_topic_follower_fetches_total (served as a follower);
* per partition (replicas hosted here): raftlog_partition_log_start_offset,
  raftlog_partition_log_end_offset, raftlog_partition_high_watermark,
  raftlog_partition_log_size_bytes, raftlog_partition_replica_lag{replica} (on the leader: its
  log end minus each follower's fetch offset), raftlog_partition_leader (1 where led here);
* Raft: raftlog_raft_elections_total (candidacies started by replicas here),
  raftlog_raft_leader_changes_total (leaders the replicas here saw change),
  raftlog_log_fsync_seconds (histogram of log flushes), raftlog_produce_commit_seconds
  (histogram, on the leader: from an acks=all append to the high watermark passing it, the
  wait for the majority's fsyncs; Kafka: Produce RemoteTimeMs; issue 46).

Cost: nothing per partition between scrapes. The produce and fetch paths add to two dicts
per topic; everything else is read from the replicas when Prometheus asks. Counters summed
over replicas (elections, leader changes, fsyncs) restart from fewer when a replica is
closed (a topic deleted): Prometheus' rate() treats that as a counter reset.

Concurrency: `collect` runs on the trio thread (the HTTP listener); `LatencyBuckets.observe`
may run in a worker thread (flushes), so it takes a lock.
May import: raftlog.base (and nothing of partition: it reads the replicas by duck typing).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from partition.batch import BATCH_PREFIX, HEADER_BYTES, LAST_OFFSET_DELTA_AT, LOG_OVERHEAD
from raftlog.base.metrics import Metric, counter_family, gauge_family

__all__ = ["LatencyBuckets", "TopicTraffic", "ReplicaTelemetry", "batch_records", "slice_records",
           "FSYNC_BUCKETS_S", "COMMIT_BUCKETS_S", "histogram_family"]

FSYNC_BUCKETS_S: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# An acks=all commit waits for fsyncs on a majority, a network round trip and two event loops.
COMMIT_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_DELTA: Final = struct.Struct(">i")  # lastOffsetDelta at LAST_OFFSET_DELTA_AT
_PREFIX_BYTES: Final = LAST_OFFSET_DELTA_AT + 4  # the header up to lastOffsetDelta
MAX_SLICE_BATCHES: Final = 4096  # headers read per file slice at most (then: bytes only)


class LatencyBuckets:
    """A histogram's numbers (seconds), cheap to update from any thread; `add` sums another's
    snapshot (a broker's replicas into one family)."""

    __slots__ = ("bounds", "counts", "total", "count", "_lock")

    def __init__(self, bounds: tuple[float, ...] = FSYNC_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket; the last is +Inf
        self.total = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self.total += seconds
            self.count += 1

    def snapshot(self) -> tuple[list[int], float, int]:
        with self._lock:
            return list(self.counts), self.total, self.count

    def add(self, other: "LatencyBuckets") -> None:
        counts, total, count = other.snapshot()
        with self._lock:
            self.counts = [a + b for a, b in zip(self.counts, counts)]
            self.total += total
            self.count += count


def histogram_family(name: str, documentation: str, *, buckets: LatencyBuckets) -> HistogramMetricFamily:
    """`buckets` as a Prometheus histogram family without labels (cumulative, ending in +Inf)."""
    counts, total, count = buckets.snapshot()
    family = HistogramMetricFamily(name, documentation)
    cumulative, series = 0, []
    for bound, n in zip(buckets.bounds, counts):
        cumulative += n
        series.append((floatToGoString(bound), cumulative))
    series.append(("+Inf", count))
    family.add_metric([], series, total)
    return family


class TopicTraffic:
    """Bytes and records in and out per topic (cumulative, for counters)."""

    def __init__(self) -> None:
        self.bytes_in: dict[str, int] = {}
        self.records_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.records_out: dict[str, int] = {}
        self.follower_fetches: dict[str, int] = {}  # consumer fetches served as a follower (KIP-392)

    def produced(self, topic: str, nbytes: int, nrecords: int) -> None:
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + nbytes
        self.records_in[topic] = self.records_in.get(topic, 0) + nrecords

    def fetched(self, topic: str, nbytes: int, nrecords: int) -> None:
        if nbytes:
            self.bytes_out[topic] = self.bytes_out.get(topic, 0) + nbytes
            self.records_out[topic] = self.records_out.get(topic, 0) + nrecords

    def forget(self, topics: Iterable[str]) -> None:
        """Drop topics that are gone (bounded by the live topics)."""
        for topic in topics:
            for table in (self.bytes_in, self.records_in, self.bytes_out, self.records_out,
                          self.follower_fetches):
                table.pop(topic, None)


def batch_records(data: bytes | bytearray | memoryview, fetch_offset: int) -> int:
    """Records at or after `fetch_offset` in whole RecordBatch v2 bytes (offsets, so a
    compacted batch counts its gaps too), from the batch headers only."""
    view = memoryview(data)
    pos, count, end = 0, 0, len(view)
    while pos + HEADER_BYTES <= end:
        base, length = BATCH_PREFIX.unpack_from(view, pos)
        last = base + _DELTA.unpack_from(view, pos + LAST_OFFSET_DELTA_AT)[0]
        if last >= fetch_offset:
            count += last - max(base, fetch_offset) + 1
        pos += LOG_OVERHEAD + length
    return count


def slice_records(fd: int, position: int, length: int, fetch_offset: int) -> int:
    """`batch_records` for `length` bytes of a segment file from `position` (a zero-copy
    fetch): reads the batch headers only, at most MAX_SLICE_BATCHES of them."""
    pos, count, end = position, 0, position + length
    for _ in range(MAX_SLICE_BATCHES):
        if pos + HEADER_BYTES > end:
            break
        head = os.pread(fd, _PREFIX_BYTES, pos)
        if len(head) < _PREFIX_BYTES:
            break
        base, batch_length = BATCH_PREFIX.unpack_from(head, 0)
        last = base + _DELTA.unpack_from(head, LAST_OFFSET_DELTA_AT)[0]
        if last >= fetch_offset:
            count += last - max(base, fetch_offset) + 1
        pos += LOG_OVERHEAD + batch_length
    return count


class ReplicaTelemetry:
    """The collector over one ReplicaManager (module docstring). `manager` needs
    `replicas()` (open replicas: `.topic`, `.partition`, `.core`, `.log`) and
    `metadata.image` (deleted topics' traffic is forgotten)."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self.traffic = TopicTraffic()

    def collect(self) -> list[Metric]:
        replicas = [r for r in self._manager.replicas() if r.core is not None]
        leaders = under = 0
        start: dict[tuple[str, int], int] = {}
        end: dict[tuple[str, int], int] = {}
        hw: dict[tuple[str, int], int] = {}
        size: dict[tuple[str, int], int] = {}
        led: dict[tuple[str, int], int] = {}
        lag: dict[tuple[str, int, int], int] = {}
        elections = changes = quiescent = 0
        fsync, commit = LatencyBuckets(FSYNC_BUCKETS_S), LatencyBuckets(COMMIT_BUCKETS_S)
        for r in replicas:
            core = r.core
            key = (r.topic, r.partition)
            end[key] = core.log_end_offset
            hw[key] = core.high_watermark
            elections += core.elections_started
            changes += core.leader_changes
            if core.quiescent:
                quiescent += 1
            log = r.log
            if log is not None:
                start[key] = log.log_start_offset
                size[key] = log.size_bytes()
                fsync.add(log.fsync_seconds)
            commit.add(r.commit_seconds)
            followers = core.follower_states()
            is_leader = core.role.value == "leader"
            led[key] = 1 if is_leader else 0
            if is_leader:
                leaders += 1
                if any(not in_sync for _, in_sync in followers.values()):
                    under += 1
                for follower, (fetch_offset, _) in followers.items():
                    lag[(r.topic, r.partition, follower)] = max(0, core.log_end_offset - max(0, fetch_offset))
        traffic = self.traffic
        live = set(self._manager.metadata.image.topic_names(include_internal=True))
        traffic.forget([t for t in list(traffic.bytes_in) + list(traffic.bytes_out) if t not in live])
        tp = ("topic", "partition")
        return [
            gauge_family("raftlog_replica_manager_under_replicated_partitions",
                         "Partitions led here with a follower out of sync (no fetch within the "
                         "check-quorum period). Kafka: UnderReplicatedPartitions; Redpanda: "
                         "redpanda_kafka_under_replicated_replicas.", (), {(): under}),
            gauge_family("raftlog_replica_manager_leader_count",
                         "Partitions whose leader is this broker. Kafka: LeaderCount.", (), {(): leaders}),
            gauge_family("raftlog_replica_manager_partition_count",
                         "Partition replicas open on this broker. Kafka: PartitionCount.", (),
                         {(): len(replicas)}),
            gauge_family("raftlog_replica_manager_quiescent_partitions",
                         "Partition replicas here whose Raft group is idle and quiescent: their "
                         "fetches are held, nothing ticks (issue 19).", (), {(): quiescent}),
            counter_family("raftlog_topic_bytes_in_total",
                           "Record-batch bytes appended as leader, by topic. Kafka: BytesInPerSec; "
                           "Redpanda: redpanda_kafka_request_bytes_total{request=produce}.",
                           ("topic",), {(t,): v for t, v in traffic.bytes_in.items()}),
            counter_family("raftlog_topic_records_in_total",
                           "Records appended as leader, by topic. Kafka: MessagesInPerSec; "
                           "Redpanda: redpanda_kafka_records_produced_total.",
                           ("topic",), {(t,): v for t, v in traffic.records_in.items()}),
            counter_family("raftlog_topic_bytes_out_total",
                           "Record-batch bytes sent to consumers, by topic. Kafka: BytesOutPerSec.",
                           ("topic",), {(t,): v for t, v in traffic.bytes_out.items()}),
            counter_family("raftlog_topic_records_out_total",
                           "Records sent to consumers, by topic. Redpanda: "
                           "redpanda_kafka_records_fetched_total.",
                           ("topic",), {(t,): v for t, v in traffic.records_out.items()}),
            counter_family("raftlog_topic_follower_fetches_total",
                           "Consumer fetches served here as a follower of the partition, by topic "
                           "(KIP-392 follower fetching: the consumer's client.rack is this broker's).",
                           ("topic",), {(t,): v for t, v in traffic.follower_fetches.items()}),
            gauge_family("raftlog_partition_log_start_offset", "First offset in the log. Kafka: LogStartOffset.",
                         tp, start),
            gauge_family("raftlog_partition_log_end_offset",
                         "Offset after the last record in this replica's log. Kafka: LogEndOffset.", tp, end),
            gauge_family("raftlog_partition_high_watermark",
                         "Offsets below this are committed (readable). Kafka: HighWatermark.", tp, hw),
            gauge_family("raftlog_partition_log_size_bytes", "Bytes in the log's segment files. Kafka: Size.",
                         tp, size),
            gauge_family("raftlog_partition_leader", "1 where this broker leads the partition.", tp, led),
            gauge_family("raftlog_partition_replica_lag",
                         "On the leader: its log end offset minus a follower's fetch offset. Kafka: "
                         "ReplicaFetcherManager MaxLag / kafka_server_fetcherlagmetrics_consumerlag.",
                         ("topic", "partition", "replica"), lag),
            counter_family("raftlog_raft_elections_total",
                           "Elections (candidacies) started by partition replicas on this broker.",
                           (), {(): elections}),
            counter_family("raftlog_raft_leader_changes_total",
                           "Leader changes seen by partition replicas on this broker. Redpanda: "
                           "vectorized_raft_leadership_changes.", (), {(): changes}),
            histogram_family("raftlog_log_fsync_seconds",
                             "Time of each partition log flush (fsync of its segments); Redpanda: "
                             "vectorized_storage_log_flush... / Kafka: LogFlushRateAndTimeMs.", buckets=fsync),
            histogram_family("raftlog_produce_commit_seconds",
                             "On the partition leader: time from an acks=all produce's append to the "
                             "high watermark passing it (fsynced on a majority). Kafka: Produce "
                             "RemoteTimeMs.", buckets=commit),
        ]

"""The replica manager's storage-health metrics (partition/manager.py "Scrubber" and
"Offline replicas"): raftlog_scrub_bytes_total, raftlog_scrub_segments_total,
raftlog_storage_damage_total{found_by,what}, raftlog_replica_repairs_total,
raftlog_replica_repair_dropped_bytes_total, raftlog_index_rebuilds_total,
raftlog_replica_offline_total{kind}, raftlog_replica_reopens_total{outcome}, and the gauges
raftlog_replicas_offline{kind} and raftlog_data_dir_free_bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from partition.log import RepairReport
from partition.replica import Replica, ReplicaObserver
from raftlog.base.metrics import MetricsRegistry

__all__ = ["StorageMetrics"]


class StorageMetrics(ReplicaObserver):
    """The replicas' storage events as metrics (module docstring), and the gauges over
    `replicas()` (the hosted replicas) and `free_bytes()` (the data dir's file system)."""

    def __init__(self, registry: MetricsRegistry, replicas: Callable[[], Iterable[Replica]],
                 free_bytes: Callable[[], int | None],
                 on_offline: Callable[[Replica], None] | None = None):
        self._on_offline = on_offline  # the replica manager's index of offline replicas
        self._scrub_bytes = registry.counter(
            "raftlog_scrub_bytes_total", "Bytes of sealed segments the scrubber re-read.")
        self._scrub_segments = registry.counter(
            "raftlog_scrub_segments_total", "Sealed segments the scrubber checked whole.")
        self._damage = registry.counter(
            "raftlog_storage_damage_total",
            "Damaged bytes at rest found (never served), by the path that found them.",
            ("found_by", "what"))
        self._repairs = registry.counter(
            "raftlog_replica_repairs_total", "Logs cut at damage to refetch the rest from a peer.")
        self._repair_bytes = registry.counter(
            "raftlog_replica_repair_dropped_bytes_total", "Bytes repairs dropped (refetched).")
        self._index_rebuilds = registry.counter(
            "raftlog_index_rebuilds_total", "Segment indexes rebuilt after they disagreed.")
        self._offline = registry.counter(
            "raftlog_replica_offline_total", "Replicas that went offline, by kind.", ("kind",))
        self._reopens = registry.counter(
            "raftlog_replica_reopens_total", "Attempts to bring an offline replica back.",
            ("outcome",))
        offline_now = registry.gauge(
            "raftlog_replicas_offline", "Replicas offline now, by kind.", ("kind",))
        for kind in ("disk_full", "io_error", "state_error"):
            offline_now.labels(kind=kind).set_function(
                lambda kind=kind: sum(1 for r in list(replicas())
                                      if r.offline_reason is not None and r.offline_kind == kind))
        registry.gauge("raftlog_data_dir_free_bytes",
                       "Free bytes on the data directory's file system.").set_function(
            lambda: free_bytes() or 0)

    def scrubbed(self, n: int) -> None:
        self._scrub_bytes.inc(n)

    def scrubbed_segment(self) -> None:
        self._scrub_segments.inc()

    def damage_found(self, replica: Replica, found_by: str, what: str) -> None:
        self._damage.labels(found_by=found_by, what=what).inc()

    def index_rebuilt(self, replica: Replica) -> None:
        self._index_rebuilds.inc()

    def repaired(self, replica: Replica, report: RepairReport) -> None:
        self._repairs.inc()
        self._repair_bytes.inc(report.bytes_dropped)

    def went_offline(self, replica: Replica, kind: str) -> None:
        self._offline.labels(kind=kind).inc()
        if self._on_offline is not None:
            self._on_offline(replica)

    def reopened(self, replica: Replica, ok: bool) -> None:
        self._reopens.labels(outcome="ok" if ok else "failed").inc()


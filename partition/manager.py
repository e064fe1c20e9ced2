"""The ReplicaManager (a NodeService, raftlog/node/main.py's NodeService): hosts the partition replicas the
metadata image assigns to this broker and serves produce / fetch / list_offsets /
init_producer_id, plus the replication peer ops.

    ReplicaManager(config: NodeConfig, metadata: MetadataService, peers: PeerPool)

What it uses of `metadata`: `image`, `peer_address(id)`, `client_address(id)`,
`await report_partition_leaders([LeaderReport])` (per-report results),
`await allocate_producer_ids()`.

* Replicas: `on_image` only records the image; a reconcile task (debounced: images replayed
  at start arrive in bursts, and acting on an intermediate one could wipe a live replica)
  opens replicas newly assigned here (`<data_dir>/partitions/<topic>-<partition>/`, opened in
  a worker thread) and closes and deletes those whose topic is gone (or was recreated: the
  directory's `partition.metadata` names the topic id). A new, empty partition's preferred
  leader runs for election at once instead of after an election timeout. Opening: at most
  OPEN_THREADS replicas whose directory was there at start open at once (`run` lists them,
  so no stat runs on the trio thread). Their open is mostly Python (the recovery scan and
  the producer walk, over a warm page cache); eight at once (the DiskWork pool) left a node
  restarted with 1,000 replicas after a load so busy (short of the GIL, most likely) that
  its links to the leaders fell silent, and the followers opened so far ran pre-votes
  against live leaders while the rest waited (450-3,000 leader changes logged during the
  open instead of ~320). A new replica's open mostly waits on fsyncs: it takes the
  DiskWork pool (with two threads, creating 1,000 partitions took 30% longer).
* Ticks: every core's `tick()` every `tick_ms` (50) from one task, except quiescent ones
  (partition/raft.py "Quiescence": an idle group holds its followers' fetches and its ticks
  do nothing): a replica leaves the tick set when a tick finds `needs_tick()` false and
  rejoins it at the event that makes it true (`on_ticking`), so 1,000 idle partitions cost
  no tick at all. With none to tick, the task sleeps until one needs ticks again or the links
  could have news (`next_news_at`; an idle node woke 20 times a second before). The same task
  watches the replication links (partition/replication.py `watch`) and tells the replicas:
  a silent leader broker -> `leader_unreachable` to its followers, a silent follower broker
  -> `follower_silent` to the leaders here (and to each new leader while it stays silent),
  heard again -> `follower_heard`; a broken link to a leader -> `wake` to its quiescent
  followers.
* Leadership: a replica that becomes leader queues a report of (leader, epoch) for the
  controller; one task sends what is queued in batches (`report_partition_leaders`, up to
  MAX_REPORTS_PER_CALL, one call in flight) with bounded retries; a slow check re-reports
  when the image still disagrees. Never on the data path.
* Maintenance: retention and compaction, one replica at a time, every MAINTAIN_INTERVAL_S,
  below each replica's high watermark, in worker threads (`Replica.maintain`; the node's
  `DiskWork` limiters bound every kind of disk work its replicas do).
* Scrubber: every `scrub_interval_ms` (config) a pass re-reads every sealed, fsynced segment
  of every replica with the full check (partition/segment.py SegmentVerifier: CRCs, offsets,
  epochs, and the indexes against the batches), paced to `scrub_bytes_per_s` (0: off); what
  it finds goes to `Replica.report_damage`. Metrics: raftlog_scrub_bytes_total,
  raftlog_scrub_segments_total, raftlog_storage_damage_total{found_by,what},
  raftlog_replica_repairs_total.
* Offline replicas (a failed disk, a full one, a broken Raft contract) are opened again from
  disk with backoff (REOPEN_BACKOFF_S doubling to REOPEN_BACKOFF_MAX_S): `Replica.reopen`,
  or the whole open for one that never opened. While the data dir's file system has less
  than MIN_FREE_BYTES free, a replica that went offline for a full disk is not retried.
  /health shows each offline replica's reason, kind and since when, and "disk_full";
  /metrics raftlog_replicas_offline{kind}, raftlog_data_dir_free_bytes,
  raftlog_replica_offline_total{kind}, raftlog_replica_reopens_total{outcome}.
* A client request for a partition whose local replica is offline, when the image names
  another leader, is answered NOT_LEADER with that hint (nothing was tried here), so
  producers and consumers move on at once instead of retrying a storage error here.

Client ops (PROTOCOL.md): `delete_records` (leader only: the log start of every replica moves
up, answered at a majority; partition/raft.py "Log start"), `produce` (leader only; acks
0/1/-1; per-partition errors; a
request that cannot reach a majority in `timeout_ms` gets REQUEST_TIMED_OUT), `fetch` (leader
only, up to the high watermark, long poll with min_bytes/max_wait_ms, max_bytes per
partition and per request, OFFSET_OUT_OF_RANGE outside [log_start_offset, log_end_offset]),
`list_offsets` (-2 log start, -1 high watermark, else the first batch with max timestamp >=
ts below the high watermark; offset -1 if none), `init_producer_id` (ids from blocks the
controller allocates), `recover_partition` (operator: unclean recovery of this broker's
replica when it is flagged needs_catch_up and the partition has no live leader; refused
unless `unclean` is true). Peer ops: partition/replication.py's, and `transfer_leadership`.

Size (issue 13's ~800-line rule): over it since the scrubber, the offline reopen and the
storage metrics (`_StorageMetrics`) joined the Kafka listener's fetch and produce halves; that
storage-health part (~200 lines) is the seam to cut along.

Concurrency: trio-thread only; per-replica serialisation lives in partition/replica.py.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import cbor2
import trio

from metadata.controller import LeaderReport
from metadata.image import MetadataImage, PartitionState, TopicImage
from metadata.topic_config import TopicConfig
from partition.batch import DEFAULT_MAX_DECOMPRESSED_BYTES, iter_headers
from partition.errors import CorruptRecordError, StorageDamageError
from partition.log import RepairReport
from partition.replica import (
    PARTITION_METADATA_FILE,
    DiskWork,
    offline_kind as offline_kind_of,
    Replica,
    ReplicaObserver,
    ReplicaSettings,
    fetch_wait_ticks,
    log_config_for,
)
from partition.replication import SESSION_MAX_WAIT_MS, ReplicationLinks
from partition.segment import DEFAULT_MAX_OPEN_SEGMENTS, FILE_CACHE, SegmentVerifier
from partition.telemetry import ReplicaTelemetry, batch_records, slice_records
from partition.validator import validate_client_records
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    NotControllerError,
    NotLeaderError,
    PeerUnavailableError,
    RaftlogError,
    RejectedError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Later, Request, field, inline_handler_under_deadline

__all__ = ["ReplicaManager", "PARTITIONS_DIR"]

logger = logging.getLogger(__name__)

PARTITIONS_DIR: Final = "partitions"
RECONCILE_QUIET_S: Final = 0.05
RECONCILE_MAX_DELAY_S: Final = 0.5
MAINTAIN_INTERVAL_S: Final = 5.0
REPORT_CHECK_S: Final = 2.0
REPORT_ATTEMPTS: Final = 20
REPORT_BACKOFF_S: Final = (0.05, 2.0)
REPORT_CONTROLLER_POLL_S: Final = 0.05  # during a backoff: has another controller become known?
MAX_REPORTS_PER_CALL: Final = 500  # leader reports in one report_partition_leaders call (one in flight)
TICK_YIELD_EVERY: Final = 100  # the tick loop lets other tasks run after this many replicas
DEFAULT_PRODUCE_TIMEOUT_MS: Final = 30_000
MAX_DELETE_PARTITIONS: Final = 10_000  # one waiting task each
DEFAULT_FETCH_MAX_WAIT_MS: Final = 500
MAX_FETCH_WAIT_MS: Final = 60_000
DEFAULT_FETCH_MAX_BYTES: Final = 50 << 20
DEFAULT_PARTITION_MAX_BYTES: Final = 1 << 20
DRAIN_WAIT_S: Final = 0.5
NEW_PARTITION_ELECTION_TRIES: Final = 5
HEALTH_DETAIL_MAX_REPLICAS: Final = 64  # /health lists each replica up to this many
REOPEN_CHECK_S: Final = 0.5
REOPEN_BACKOFF_S: Final = 1.0
REOPEN_BACKOFF_MAX_S: Final = 30.0
MIN_FREE_BYTES: Final = 4 << 20  # below this, a replica offline for a full disk waits
DEFAULT_SCRUB_BYTES_PER_S: Final = 4 << 20
DEFAULT_SCRUB_INTERVAL_MS: Final = 3_600_000
SCRUB_STEP_BYTES: Final = 1 << 20  # one worker-thread read of the scrubber
OPEN_THREADS: Final = 2  # replicas opened at once (module docstring, "Opening")
SCRUB_IDLE_S: Final = 5.0  # nothing to scrub yet: look again after this
# Produce validation (partition/validator.py): uncompressed records are walked on the trio
# thread (a batch is at most max_message_bytes: a few ms); records holding a compressed batch
# are decompressed (at most this many bytes a batch: what a consumer decodes by default) and
# walked in a worker thread, one at a time, so a small batch that inflates to 64 MiB neither
# stalls the event loop for seconds nor runs twice at once.
VALIDATE_MAX_DECOMPRESSED_BYTES: Final = DEFAULT_MAX_DECOMPRESSED_BYTES
VALIDATE_THREADS: Final = 1

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    """See the module docstring."""

    name = "replicas"

    def __init__(
        self,
        config: Any,
        metadata: Any,
        peers: PeerPool,
        *,
        settings: ReplicaSettings | None = None,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
        registry: MetricsRegistry | None = None,
    ):
        self.node_id: int = config.node_id
        self.data_dir = Path(config.data_dir) / PARTITIONS_DIR
        self.metadata = metadata
        self.peers = peers
        self.settings = settings or ReplicaSettings(
            tick_ms=getattr(config, "tick_ms", 50),
            election_timeout_ms=getattr(config, "election_timeout_ms", 1000),
        )
        self._rng = rng if rng is not None else random.Random()
        self._clock_ms = clock_ms
        # A link is silent after an election timeout (and a parked fetch's wait) without a
        # replica_fetch; an idle session's long poll comes back well within that.
        silence_ms = self.settings.election_timeout_ms + self.settings.fetch_max_wait_ms
        self.links = ReplicationLinks(
            self.node_id, peers, metadata.peer_address, self.replica,
            session_max_wait_ms=min(SESSION_MAX_WAIT_MS, silence_ms // 2), silence_ms=silence_ms,
            on_unreachable=self._leader_unreachable, on_broken=self._leader_link_broken,
            on_news=self._wake_ticks,
        )  # fmt: skip
        self._replicas: dict[tuple[str, int], Replica] = {}
        self._ticking: dict[tuple[str, int], Replica] = {}  # the tick loop's replicas
        self._ticks_wanted = trio.Event()  # set when an idle tick loop has work again
        self.tick_passes = 0  # of the tick loop (/health): an idle node makes few
        self._leadership_listeners: list[Callable[[Replica], None]] = []
        self._deleting: dict[Path, trio.Event] = {}
        self._image: MetadataImage | None = None
        self._image_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._reporting: dict[tuple[str, int], int] = {}  # key -> epoch being reported
        self._report_queue: dict[tuple[str, int], tuple[Replica, int, int]] = {}  # key -> (replica, epoch, attempts)
        self._report_wake = trio.Event()
        self._pid_next = 0
        self._pid_end = 0
        self._pid_lock = trio.Lock()
        self.telemetry = ReplicaTelemetry(self)  # /metrics: partitions, topics, Raft (telemetry.py)
        if registry is not None:
            registry.collector(self.telemetry.collect)
        self.disk = DiskWork()
        self._scrub_limiter = trio.CapacityLimiter(1)
        self._open_limiter = trio.CapacityLimiter(OPEN_THREADS)
        self._validate_limiter = trio.CapacityLimiter(VALIDATE_THREADS)
        self._on_disk_at_start: set[str] = set()  # replica directories found by `run`
        self.scrub_bytes_per_s: int = getattr(config, "scrub_bytes_per_s", DEFAULT_SCRUB_BYTES_PER_S)
        self.scrub_interval_ms: int = getattr(config, "scrub_interval_ms", DEFAULT_SCRUB_INTERVAL_MS)
        FILE_CACHE.set_max_open(getattr(config, "log_open_files_max", DEFAULT_MAX_OPEN_SEGMENTS))
        self.scrub_passes = 0
        self._reopen_at: dict[tuple[str, int], float] = {}
        self._open_failed: dict[tuple[str, int], Replica] = {}
        self._metrics = _StorageMetrics(registry if registry is not None else MetricsRegistry(), self)
        self.client_handlers: Mapping[str, Handler] = {
            "produce": self._produce,
            "fetch": self._fetch,
            "list_offsets": self._list_offsets,
            "delete_records": self._delete_records,
            "init_producer_id": self._init_producer_id,
            "recover_partition": self._recover_partition,
        }
        self.peer_handlers: Mapping[str, Handler] = {
            **self.links.peer_handlers,
            "transfer_leadership": self._transfer_leadership,
        }

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        def prepare() -> set[str]:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            return set(os.listdir(self.data_dir))

        self._on_disk_at_start = await trio.to_thread.run_sync(prepare)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.links.run)
                nursery.start_soon(self._reconcile_loop)
                nursery.start_soon(self._tick_loop)
                nursery.start_soon(self._maintain_loop)
                nursery.start_soon(self._report_loop)
                nursery.start_soon(self._report_check_loop)
                nursery.start_soon(self._reopen_loop)
                nursery.start_soon(self._scrub_loop)
                if self._image is not None:
                    self._image_changed.set()
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                for replica in list(self._replicas.values()):
                    await replica.close()
                self._replicas.clear()
                self._ticking.clear()

    def on_image(self, image: MetadataImage) -> None:
        self._image = image
        self._image_changed.set()

    async def drain(self) -> None:
        """Before a clean stop: resign every leadership so the followers elect at once."""
        for replica in list(self._replicas.values()):
            if replica.attached and replica.is_leader:
                await replica.resign()
        with trio.move_on_after(DRAIN_WAIT_S):
            while any(s["queued_messages"] for s in self.links.status().values()):
                await trio.sleep(0.01)

    def health(self) -> dict[str, Any]:
        offline = sorted(r.name for r in self._replicas.values() if r.offline_reason is not None)
        kinds = {r.offline_kind for r in self._replicas.values() if r.offline_reason is not None}
        report: dict[str, Any] = {
            "ok": not offline,
            "replicas": len(self._replicas),
            "leaders": sum(1 for r in self._replicas.values() if r.is_leader),
            "ticking": len(self._ticking),
            "tick_passes": self.tick_passes,
            "offline": offline,
            "storage": {
                "disk_full": "disk_full" in kinds,
                "data_dir_free_bytes": self.free_bytes(),
                "offline": {r.name: {"kind": r.offline_kind, "reason": r.offline_reason,
                                     "since_ms": r.offline_since_ms,
                                     "reopen_failures": r.reopen_failures}
                            for r in self._replicas.values() if r.offline_reason is not None},
                "damaged": sorted(r.name for r in self._replicas.values() if r.damaged is not None),
                "repairs": sum(r.repairs for r in self._replicas.values()),
                "scrub": {"bytes_per_s": self.scrub_bytes_per_s, "passes": self.scrub_passes},
            },
            "links": self.links.status(),
        }
        if len(self._replicas) <= HEALTH_DETAIL_MAX_REPLICAS:
            report["partitions"] = {r.name: r.status() for r in self._replicas.values()}
        return report

    # ------------------------------------------------------------------ lookups

    def replica(self, topic: str, partition: int) -> Replica | None:
        """The local replica if it is open and serving."""
        r = self._replicas.get((topic, partition))
        return r if r is not None and r.attached else None

    def replicas(self) -> list[Replica]:
        return [r for r in self._replicas.values() if r.attached]

    def local_leader(self, topic: str, partition: int) -> tuple[bool, int | None, int]:
        """(a replica of it is open here, the leader that replica knows or None, the epoch
        it knows): the partition's Raft group's own word, for the metadata answers
        (metadata/service.py)."""
        r = self.replica(topic, partition)
        if r is None or r.core is None or not r.online:
            return False, None, -1
        return True, r.core.leader_id, r.core.epoch

    def _image_now(self) -> MetadataImage:
        image = getattr(self.metadata, "image", None)
        return image if image is not None else (self._image or MetadataImage.empty())

    def _not_leader(self, topic: str, partition: int, hint: int | None) -> NotLeaderError:
        if hint is None or hint == self.node_id:
            p = self._image_now().partition(topic, partition)
            hint = p.leader if p is not None and p.leader >= 0 and p.leader != self.node_id else None
        address = self.metadata.client_address(hint) if hint is not None else None
        return NotLeaderError(leader_id=hint, leader=address)

    def _leader_replica(self, topic: str, partition: int) -> Replica:
        r = self.replica(topic, partition)
        if r is None:
            if self._image_now().partition(topic, partition) is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist here")
            raise self._not_leader(topic, partition, None)
        if r.offline_reason is not None:
            # Nothing will be tried here: if another broker leads, say so (module docstring).
            p = self._image_now().partition(topic, partition)
            if p is not None and p.leader >= 0 and p.leader != self.node_id:
                raise self._not_leader(topic, partition, p.leader)
        return r

    def _error(self, exc: BaseException, topic: str, partition: int) -> dict[str, Any]:
        if isinstance(exc, NotLeaderError):
            return self._not_leader(topic, partition, exc.leader_id).to_wire()
        wire = as_wire_error(exc)
        if wire is None:
            log_event(logger, "partition_op_failed", level=logging.ERROR, exc_info=exc,
                      topic=topic, partition=partition)
            wire = UnknownServerError(f"{type(exc).__name__} on {topic}-{partition}")
        return wire.to_wire()

    # ------------------------------------------------------------------ client ops

    @inline_handler_under_deadline
    async def _produce(self, request: Request) -> dict[str, Any] | Later | None:
        """Run in the listener's reader (protocol.inline_handler), so a connection's produce
        requests append in request order, as the Kafka listener's do: an idempotent producer
        pipelines up to 5 batches per partition, and request tasks start in any order (trio
        runs a batch of new tasks in either order), so a later batch could reach the leader
        first and be refused OUT_OF_ORDER_SEQUENCE_NUMBER (issue 39: records failed under
        load). The append waits on the replica's lock: under the request's deadline. The
        acks=all wait runs in the request's own task (`Later`)."""
        acks = field(request, "acks", int)
        if acks not in (0, 1, -1):
            raise InvalidRequestError("acks must be 0, 1 or -1", field="acks", request_id=request.id)
        timeout_ms = field(request, "timeout_ms", int, default=DEFAULT_PRODUCE_TIMEOUT_MS,
                           min_value=0)
        parts = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            parts.append((field(d, "topic", str, where=where),
                          field(d, "partition", int, min_value=0, where=where),
                          field(d, "records", bytes, where=where)))
        deadline = trio.current_time() + timeout_ms / 1000
        client = {"listener": "native", "peer": request.client_host, "principal": request.principal}
        results, waits = await self.append_partitions(parts, acks=acks, client=client)
        if acks == 0:
            return None
        if not waits:
            return {"partitions": results}

        async def finish() -> dict[str, Any]:
            await self.wait_appends(waits, deadline)
            return {"partitions": results}

        return Later(finish)

    async def append_partitions(
        self, parts: list[tuple[str, int, bytes]], *, acks: int, client: Mapping[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], Any]]]:
        """The append half of a produce (shared by the native and the Kafka listener): check
        each (topic, partition, records) as Kafka's log validator does (partition/validator.py;
        a refused part is logged with `client`, the fields naming who sent it, and nothing of
        it is stored) and append it on its leader replica, in order. Returns one entry per
        part ({topic, partition, base_offset, log_append_time, log_start_offset} or {..., error}) and the
        acks=all waits to pass to `wait_appends`. Ordering: the appends are done (in the
        leader's log, in this order) when it returns, so a connection that calls it for one
        request after another keeps its requests' order."""
        results: list[dict[str, Any]] = []
        waits = []
        for topic, partition, records in parts:
            entry: dict[str, Any] = {"topic": topic, "partition": partition}
            try:
                replica = self._leader_replica(topic, partition)
                records = await self._validated(replica, records, client)
                res = await replica.append_as_leader(records, acks=acks)
                if not res.duplicate:
                    self.telemetry.traffic.produced(topic, len(records), res.last_offset - res.first_offset + 1)
                entry["base_offset"] = res.first_offset
                entry["log_append_time"] = -1
                entry["log_start_offset"] = replica.log.log_start_offset  # Kafka's answer carries it
                if res.waiter is not None:
                    waits.append((entry, res.waiter))
            except RaftlogError as exc:
                entry["error"] = self._error(exc, topic, partition)
            results.append(entry)
        return results, waits

    async def _validated(self, replica: Replica, records: bytes, client: Mapping[str, Any] | None) -> bytes | bytearray:
        """`records` as validate_client_records returns them: inline when uncompressed, in a
        worker thread (VALIDATE_THREADS) when a batch must be decompressed first. Logs a
        refusal (`produce_refused`, naming the client and the reason) and raises it."""
        check = partial(validate_client_records, records,
                        max_message_bytes=replica.topic_config.max_message_bytes,
                        max_decompressed_bytes=VALIDATE_MAX_DECOMPRESSED_BYTES, topic=replica.topic)
        try:
            if not _any_compressed(records):
                return check()
            return await trio.to_thread.run_sync(check, limiter=self._validate_limiter)
        except RejectedError as exc:
            log_event(logger, "produce_refused", level=logging.WARNING, topic=replica.topic,
                      partition=replica.partition, code=exc.code, reason=exc.message, **(client or {}))
            raise

    @staticmethod
    async def wait_appends(waits: list[tuple[dict[str, Any], Any]], deadline: float) -> None:
        """The acks=all half: wait until each batch is committed or `deadline` (trio time)
        passes; an entry that fails gets its `error` in place of its offsets."""
        for entry, waiter in waits:
            try:
                await waiter.wait(deadline)
            except RaftlogError as exc:
                del entry["base_offset"], entry["log_append_time"], entry["log_start_offset"]
                entry["error"] = exc.to_wire()

    async def _fetch(self, request: Request) -> dict[str, Any]:
        max_wait_ms = field(request, "max_wait_ms", int, default=DEFAULT_FETCH_MAX_WAIT_MS,
                            min_value=0, max_value=MAX_FETCH_WAIT_MS)
        min_bytes = field(request, "min_bytes", int, default=1, min_value=0)
        max_bytes = field(request, "max_bytes", int, default=DEFAULT_FETCH_MAX_BYTES, min_value=1)
        parts = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            parts.append((
                field(d, "topic", str, where=where),
                field(d, "partition", int, min_value=0, where=where),
                field(d, "fetch_offset", int, where=where),
                field(d, "max_bytes", int, default=DEFAULT_PARTITION_MAX_BYTES, min_value=1,
                      where=where),
            ))  # fmt: skip
        return {"partitions": await self.fetch_partitions(
            parts, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes)}

    async def fetch_partitions(
        self, parts: list[tuple[str, int, int, int]], *, max_wait_ms: int, min_bytes: int,
        max_bytes: int, zero_copy: bool = False,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The fetch of both listeners: (topic, partition, fetch_offset, partition_max_bytes)
        each -> {topic, partition, high_watermark, log_start_offset, records} or {..., error}.
        Long poll: answers once `min_bytes` are there, on any error, or at `max_wait_ms`.
        `records` is bytes, or with `zero_copy` a FileSlice or None (the caller closes the
        slices; slices of an iteration that waits again are closed here).
        Concurrency: trio thread; cancel-safe (slices are closed on the way out)."""
        deadline = trio.current_time() + max_wait_ms / 1000
        while True:
            results, total, errors, watched = await self._read_partitions(parts, max_bytes, zero_copy)
            if total >= min_bytes or errors or trio.current_time() >= deadline or not watched:
                if total:
                    self._count_fetched(parts, results)
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

    def _count_fetched(self, parts: list[tuple[str, int, int, int]], results: list[dict[str, Any]]) -> None:
        """Bytes and records out per topic (/metrics), from the batch headers answered."""
        traffic = self.telemetry.traffic
        for (topic, _, offset, _), entry in zip(parts, results):
            records = entry.get("records")
            if not records:
                continue
            if isinstance(records, (bytes, bytearray, memoryview)):
                traffic.fetched(topic, len(records), batch_records(records, offset))
            else:  # a FileSlice: its headers are in the page cache (the cached tail, or warmed
                # by the worker thread that made the slice), as sendfile expects the bytes to be
                traffic.fetched(topic, records.length,
                                slice_records(records.fd, records.offset, records.length, offset))

    async def _read_partitions(self, parts, max_bytes: int, zero_copy: bool = False):
        """One pass of a fetch over its partitions. Reads may run in worker threads
        (Replica._read); with `zero_copy`, the slices made so far are closed if the pass
        ends by an exception or a cancellation."""
        results = []
        total = 0
        errors = 0
        watched = []
        try:
            for topic, partition, offset, part_max in parts:
                try:
                    r = self._leader_replica(topic, partition)
                    budget = min(part_max, max_bytes - total)
                    if zero_copy:
                        records = await r.read_committed_slice(offset, budget) if budget > 0 else None
                        total += 0 if records is None else records.length
                    else:
                        records = await r.read_committed(offset, budget) if budget > 0 else b""
                        total += len(records)
                    watched.append(r)
                    results.append({
                        "topic": topic, "partition": partition, "high_watermark": r.high_watermark,
                        "log_start_offset": r.log.log_start_offset, "records": records,
                    })  # fmt: skip
                except RaftlogError as exc:
                    errors += 1
                    results.append({"topic": topic, "partition": partition,
                                    "error": self._error(exc, topic, partition)})
        except BaseException:
            _close_slices(results)
            raise
        return results, total, errors, watched

    def epoch_end_offsets(self, parts: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
        """KIP-320's OffsetsForLeaderEpoch on the leader: (topic, partition, leader_epoch) ->
        {topic, partition, current_epoch (the leader's), leader_epoch, end_offset} where
        (leader_epoch, end_offset) is the largest epoch <= the asked one in the leader's
        epoch cache and where it ends (the log end for the latest), (-1, -1) below every
        epoch; or {..., error}. Reads the in-memory epoch cache only."""
        results = []
        for topic, partition, epoch in parts:
            try:
                r = self._leader_replica(topic, partition)
                r.check_leader()
                found, end = r.log.end_offset_for_epoch(epoch)
                results.append({"topic": topic, "partition": partition, "current_epoch": r.leader_epoch,
                                "leader_epoch": found, "end_offset": end})
            except RaftlogError as exc:
                results.append({"topic": topic, "partition": partition,
                                "error": self._error(exc, topic, partition)})
        return results

    async def list_offsets(self, parts: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
        """(topic, partition, timestamp) -> {topic, partition, offset, timestamp} or {...,
        error}; timestamp -2 earliest, -1 latest (the high watermark), -3 the batch with the
        largest timestamp (KIP-734), else the first batch with max timestamp >= it."""
        return (await self._list_offsets(Request(0, "list_offsets", {"partitions": [
            {"topic": t, "partition": p, "timestamp": ts} for t, p, ts in parts]})))["partitions"]

    async def _list_offsets(self, request: Request) -> dict[str, Any]:
        results = []
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            where = f"partitions[{i}]"
            topic = field(d, "topic", str, where=where)
            partition = field(d, "partition", int, min_value=0, where=where)
            ts = field(d, "timestamp", int, where=where)
            try:
                r = self._leader_replica(topic, partition)
                r.check_leader()
                hw = r.high_watermark
                if ts == -2:
                    offset, found_ts = r.log.log_start_offset, -1
                elif ts == -1:
                    offset, found_ts = hw, -1
                elif ts == -3:
                    offset, found_ts = await r.max_timestamp_offset(hw)
                else:
                    found = await r.offset_for_timestamp(ts)
                    offset, found_ts = found if found is not None and found[0] < hw else (-1, -1)
                results.append({"topic": topic, "partition": partition, "offset": offset,
                                "timestamp": found_ts})
            except (RaftlogError, RaftlogError) as exc:
                results.append({"topic": topic, "partition": partition,
                                "error": self._error(exc, topic, partition)})
        return {"partitions": results}

    async def delete_records(self, parts: list[tuple[str, int, int]], deadline: float) -> list[dict[str, Any]]:
        """DeleteRecords of both listeners: (topic, partition, offset; -1 = high watermark)
        each -> {topic, partition, low_watermark} or {..., error}, all partitions at once,
        each answered when a majority of its replicas holds the new log start (or `deadline`,
        trio time: REQUEST_TIMED_OUT, the deletion may still happen)."""
        results: list[dict[str, Any]] = [{"topic": t, "partition": p} for t, p, _ in parts]

        async def one(entry: dict[str, Any], offset: int) -> None:
            topic, partition = entry["topic"], entry["partition"]
            try:
                r = self._leader_replica(topic, partition)
                entry["low_watermark"] = await r.delete_records(offset, deadline)
            except RaftlogError as exc:
                entry["error"] = self._error(exc, topic, partition)

        async with trio.open_nursery() as nursery:
            for entry, (_, _, offset) in zip(results, parts):
                nursery.start_soon(one, entry, offset)
        return results

    async def _delete_records(self, request: Request) -> dict[str, Any]:
        timeout_ms = field(request, "timeout_ms", int, default=DEFAULT_PRODUCE_TIMEOUT_MS, min_value=0)
        parts = []
        entries = field(request, "partitions", list, items=dict)
        if len(entries) > MAX_DELETE_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_DELETE_PARTITIONS} partitions per delete_records",
                                      field="partitions", request_id=request.id)
        for i, d in enumerate(entries):
            where = f"partitions[{i}]"
            parts.append((field(d, "topic", str, where=where),
                          field(d, "partition", int, min_value=0, where=where),
                          field(d, "offset", int, min_value=-1, where=where)))
        deadline = trio.current_time() + timeout_ms / 1000
        return {"partitions": await self.delete_records(parts, deadline)}

    async def _init_producer_id(self, request: Request) -> dict[str, Any]:
        """A producer id from this broker's block; a new block comes from the controller.
        Without a reachable controller (failing over, or its node down) the answer is
        COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka answers when its producer id block
        is not ready: the producer asks again, where NOT_CONTROLLER (or the peer link's own
        PEER_UNAVAILABLE) would fail its records."""
        return {"producer_id": await self.next_producer_id(request.id), "producer_epoch": 0}

    async def next_producer_id(self, request_id: int | None = None) -> int:
        """A producer id from this broker's block (the transaction coordinator takes its ids
        here too). Raises CoordinatorLoadInProgressError without a reachable controller."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    first, size = await self.metadata.allocate_producer_ids()
                except (NotControllerError, PeerUnavailableError, RequestTimedOutError) as exc:
                    raise CoordinatorLoadInProgressError(
                        f"no producer id block yet: the controller is not reachable ({exc})",
                        request_id=request_id) from None
                self._pid_next, self._pid_end = first, first + size
            pid = self._pid_next
            self._pid_next += 1
        return pid

    async def _recover_partition(self, request: Request) -> dict[str, Any]:
        """Unclean recovery of the local replica (raft.py "Damaged storage"): clear its
        needs_catch_up and run for election. Refused (INVALID_REQUEST, the reason in the
        message) without `unclean`: true, when this broker hosts no replica of it, when the
        replica is not flagged, or when the partition has a live leader (the replica's core
        knows one and it is this broker or an unfenced one)."""
        topic = field(request, "topic", str)
        partition = field(request, "partition", int, min_value=0)
        unclean = field(request, "unclean", bool, default=False)
        name = f"{topic}-{partition}"
        if unclean is not True:
            raise InvalidRequestError(
                f"recovering {name} is unclean: records acknowledged but missing from this"
                " replica's log are lost for good; send unclean: true to accept that",
                field="unclean", request_id=request.id,
            )
        r = self.replica(topic, partition)
        if r is None:
            p = self._image_now().partition(topic, partition)
            if p is None:
                raise UnknownTopicOrPartitionError(f"{name} does not exist")
            raise InvalidRequestError(
                f"broker {self.node_id} hosts no open replica of {name} (replicas:"
                f" {', '.join(map(str, p.replicas))}); send it to one of those",
                request_id=request.id,
            )
        r.check_online()
        if not r.core.needs_catch_up:
            raise InvalidRequestError(
                f"the replica of {name} on broker {self.node_id} is not flagged"
                " needs_catch_up: nothing to recover", request_id=request.id,
            )
        leader = r.core.leader_id
        if leader is not None:
            reg = self._image_now().broker(leader)
            if leader == self.node_id or (reg is not None and not reg.fenced):
                raise InvalidRequestError(
                    f"{name} has a live leader (broker {leader}, epoch {r.core.epoch}):"
                    " the flagged replica catches up from it; nothing to recover",
                    request_id=request.id,
                )
        if not await r.clear_catch_up():
            raise InvalidRequestError(
                f"the replica of {name} on broker {self.node_id} caught up meanwhile:"
                " nothing to recover", request_id=request.id,
            )
        log_event(logger, "partition_recovered_unclean", level=logging.WARNING, topic=topic,
                  partition=partition, epoch=r.core.epoch,
                  log_end_offset=r.core.log_end_offset)
        return {}

    # ------------------------------------------------------------------ peer ops

    async def _transfer_leadership(self, request: Request) -> dict[str, Any]:
        topic = field(request, "topic", str)
        partition = field(request, "partition", int, min_value=0)
        target = field(request, "target", int)
        r = self._leader_replica(topic, partition)
        try:
            await r.transfer_leadership(target)
        except NotLeaderError as exc:
            raise self._not_leader(topic, partition, exc.leader_id) from None
        except ValueError as exc:
            raise InvalidRequestError(str(exc), field="target", request_id=request.id) from None
        return {}

    # ------------------------------------------------------------------ replicas

    async def _reconcile_loop(self) -> None:
        while True:
            await self._image_changed.wait()
            self._image_changed = trio.Event()
            # Debounce: wait for a quiet moment (bounded) so a burst acts on its last image.
            give_up = trio.current_time() + RECONCILE_MAX_DELAY_S
            while trio.current_time() < give_up:
                with trio.move_on_after(RECONCILE_QUIET_S):
                    await self._image_changed.wait()
                if not self._image_changed.is_set():
                    break
                self._image_changed = trio.Event()
            if self._image is not None:
                self._reconcile(self._image)

    def _reconcile(self, image: MetadataImage) -> None:
        wanted: dict[tuple[str, int], tuple[TopicImage, PartitionState, TopicConfig]] = {}
        for topic in image.topics.values():
            # Parsed once per topic, not per replica (13 us a parse: at 1,000 replicas, 13 ms
            # of every image change, and a failover's leader moves make dozens of those).
            config = None
            for p in topic.partitions:
                if self.node_id in p.replicas:
                    if config is None:
                        config = topic.effective_config()
                    wanted[(topic.name, p.partition)] = (topic, p, config)
        assert self._nursery is not None
        for key, r in list(self._replicas.items()):
            w = wanted.get(key)
            if w is None or w[0].topic_id != r.topic_id:
                del self._replicas[key]
                self._ticking.pop(key, None)
                done = self._deleting.setdefault(r.directory, trio.Event())
                self._nursery.start_soon(self._remove_replica, r, done)
                continue
            config = w[2]
            if config != r.topic_config:
                r.topic_config = config
                if r.log is not None and r.online:
                    r.log.set_config(log_config_for(config))
        for key, (topic, p, config) in wanted.items():
            if key in self._replicas:
                continue
            r = Replica(
                topic=topic.name, partition=p.partition, topic_id=topic.topic_id,
                replica_id=self.node_id, voters=p.replicas,
                directory=self.data_dir / f"{topic.name}-{p.partition}",
                topic_config=config, transport=self.links,
                settings=self.settings, rng=random.Random(self._rng.getrandbits(64)),
                clock_ms=self._clock_ms, on_leadership=self._on_leadership,
                on_ticking=self._on_ticking, disk=self.disk, observer=self._metrics,
            )  # fmt: skip
            self._replicas[key] = r
            self._ticking[key] = r
            self._ticks_wanted.set()
            self._nursery.start_soon(self._open_replica, r, p)

    async def _open_replica(self, r: Replica, p: PartitionState) -> None:
        pending = self._deleting.get(r.directory)
        if pending is not None:
            await pending.wait()
        try:
            # A replica with data recovers it (mostly Python); a new one mostly waits on fsyncs.
            found = r.directory.name in self._on_disk_at_start
            self._on_disk_at_start.discard(r.directory.name)
            limiter = self._open_limiter if found else self.disk.io
            await trio.to_thread.run_sync(self._prepare_and_open, r, limiter=limiter)
        except (OSError, RaftlogError) as exc:
            r.offline_reason = f"open failed: {type(exc).__name__}: {exc}"
            r.offline_kind = offline_kind_of(exc)
            r.offline_since_ms = r.offline_since_ms or self._clock_ms()
            r.reopen_failures += 1
            self._open_failed[(r.topic, r.partition)] = r  # the reopen loop tries again
            log_event(logger, "replica_open_failed", level=logging.ERROR, topic=r.topic,
                      partition=r.partition, reason=r.offline_reason, kind=r.offline_kind)
            return
        self._open_failed.pop((r.topic, r.partition), None)
        r.offline_reason = r.offline_kind = r.offline_since_ms = None
        r.reopen_failures = 0
        assert self._nursery is not None
        r.attach(self._nursery)
        if self._replicas.get((r.topic, r.partition)) is not r:
            await r.close()  # removed while opening
            return
        log_event(logger, "replica_opened", topic=r.topic, partition=r.partition,
                  log_end_offset=r.log.log_end_offset, epoch=r.core.epoch, role=r.core.role.value)
        if r.new_log and p.preferred_leader == self.node_id:
            # A new partition: run now rather than after an election timeout. The other
            # replicas may still be opening (their pre-votes are then lost), so try again a
            # few times until a leader is known.
            for _ in range(NEW_PARTITION_ELECTION_TRIES):
                if r.leader_id is not None or not r.online:
                    break
                await r.start_election()
                await trio.sleep(self.settings.tick_ms * 4 / 1000)

    @staticmethod
    def _prepare_and_open(r: Replica) -> None:
        meta_path = r.directory / PARTITION_METADATA_FILE
        try:
            meta = cbor2.loads(meta_path.read_bytes())
        except FileNotFoundError:
            meta = None
        except (cbor2.CBORDecodeError, ValueError):
            meta = {}
        if meta is not None and (not isinstance(meta, dict) or meta.get("topic_id") != r.topic_id):
            # A directory left by an earlier topic of the same name: not ours.
            log_event(logger, "replica_dir_replaced", level=logging.WARNING, topic=r.topic,
                      partition=r.partition)
            shutil.rmtree(r.directory)
        r.open()

    async def _remove_replica(self, r: Replica, done: trio.Event) -> None:
        try:
            await r.close()
            await trio.to_thread.run_sync(shutil.rmtree, r.directory, True)
            log_event(logger, "replica_removed", topic=r.topic, partition=r.partition)
        finally:
            if self._deleting.get(r.directory) is done:
                del self._deleting[r.directory]
            done.set()

    async def _tick_loop(self) -> None:
        tick_s = self.settings.tick_ms / 1000
        next_at = trio.current_time()
        answer_every = fetch_wait_ticks(self.settings)
        ticks = 0
        while True:
            if not self._ticking:
                await self._wait_for_ticks()
                next_at = trio.current_time()  # a full tick from now: no core's timer runs early
            next_at += tick_s
            now = trio.current_time()
            if next_at < now - tick_s:
                next_at = now  # fell behind (a loaded machine): do not burst to catch up
            await trio.sleep_until(next_at)
            ticks += 1
            self.tick_passes += 1
            answer = ticks % answer_every == 0  # parked fetches together (RaftCore.tick)
            for i, (key, r) in enumerate(list(self._ticking.items())):
                if r.attached:
                    # Does not yield when the tick does nothing (Replica._event).
                    await r.tick(answer_parked=answer)
                    if not r.needs_tick() and self._ticking.get(key) is r:
                        r.ticking = False  # quiescent (or offline): until on_ticking
                        del self._ticking[key]
                if i % TICK_YIELD_EVERY == TICK_YIELD_EVERY - 1:
                    await trio.lowlevel.checkpoint()
            await self._watch_links()

    async def _wait_for_ticks(self) -> None:
        """No replica needs ticks: sleep until one does (`_on_ticking`), the links could have
        news (`ReplicationLinks.next_news_at`), or a follower broker is heard again."""
        wanted = self._ticks_wanted = trio.Event()
        with trio.move_on_at(self.links.next_news_at(trio.current_time())):
            await wanted.wait()

    def _wake_ticks(self) -> None:
        self._ticks_wanted.set()

    def _on_ticking(self, r: Replica) -> None:
        """A replica needs ticks again (Replica._check_ticking)."""
        key = (r.topic, r.partition)
        if self._replicas.get(key) is r:
            self._ticking[key] = r
            self._ticks_wanted.set()

    async def _watch_links(self) -> None:
        """Act on the replication links' news (module docstring "Ticks")."""
        leaders, silent, heard = self.links.watch(trio.current_time())
        for b in leaders:
            log_event(logger, "replica_link_silent", level=logging.INFO, broker_id=b, side="leader")
            await self._leader_unreachable(b, refused=False)
        for b in silent:  # often only a broker that follows nothing led here: debug
            log_event(logger, "replica_link_silent", level=logging.DEBUG, broker_id=b, side="follower")
        for b in heard:
            log_event(logger, "replica_link_heard", level=logging.DEBUG, broker_id=b)
        if silent or heard:
            for r in list(self._replicas.values()):
                if r.attached and r.is_leader:
                    for b in silent:
                        await r.follower_silent(b)
                    for b in heard:
                        await r.follower_heard(b)

    async def _leader_link_broken(self, broker_id: int) -> None:
        """A replica_fetch to `broker_id` failed: its quiescent followers here fetch now."""
        for r in list(self._replicas.values()):
            if r.attached and r.quiescent_on(broker_id):
                await r.wake(broker_id)

    async def _silence_new_leader(self, r: Replica, brokers: list[int]) -> None:
        for b in brokers:
            await r.follower_silent(b)

    def free_bytes(self) -> int | None:
        """Bytes free for us on the data dir's file system (None if it cannot be read)."""
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    async def _reopen_loop(self) -> None:
        """Bring offline replicas back (module docstring): retry with backoff, and not while
        a full disk is still full."""
        while True:
            await trio.sleep(REOPEN_CHECK_S)
            now = trio.current_time()
            for key, r in list(self._replicas.items()):
                if r.closed or r.offline_reason is None or now < self._reopen_at.get(key, 0.0):
                    continue
                free = await trio.to_thread.run_sync(self.free_bytes, limiter=self.disk.io)
                if r.offline_kind == "disk_full" and free is not None and free < MIN_FREE_BYTES:
                    self._reopen_at[key] = now + REOPEN_BACKOFF_S
                    continue
                if key in self._open_failed:
                    p = self._image_now().partition(r.topic, r.partition)
                    if p is None:
                        continue
                    await self._open_replica(r, p)
                    ok = self._open_failed.get(key) is not r
                    self._metrics.reopened(r, ok)
                else:
                    ok = await r.reopen()
                if ok:
                    self._reopen_at.pop(key, None)
                else:
                    delay = min(REOPEN_BACKOFF_MAX_S, REOPEN_BACKOFF_S * 2 ** min(r.reopen_failures, 8))
                    self._reopen_at[key] = trio.current_time() + delay * (0.5 + self._rng.random())

    async def _scrub_loop(self) -> None:
        """Passes of the scrubber (module docstring), one segment at a time, paced."""
        if self.scrub_bytes_per_s <= 0:
            return
        while True:
            started = trio.current_time()
            scrubbed = 0
            for r in list(self._replicas.values()):
                if not (r.attached and r.online) or r.log is None:
                    continue
                for base, _size in r.log.scrub_candidates():
                    if not (r.online and not r.closed):
                        break
                    scrubbed += await self._scrub_segment(r, base)
            if scrubbed:
                self.scrub_passes += 1
                log_event(logger, "scrub_pass_done", level=logging.DEBUG, bytes=scrubbed,
                          seconds=round(trio.current_time() - started, 3))
                await trio.sleep_until(started + self.scrub_interval_ms / 1000)
            else:
                await trio.sleep(min(SCRUB_IDLE_S, self.scrub_interval_ms / 1000))

    async def _scrub_segment(self, r: Replica, base: int) -> int:
        """Check one segment in paced steps in a worker thread; returns the bytes read."""
        log = r.log
        read = 0
        with log.pinned_segment(base) as found:
            if found is None:
                return 0
            seg, nxt = found
            check = SegmentVerifier(seg, max_offset=nxt, check_index=True)
            while not check.done:
                if r.log is not log or not r.online:
                    return read
                n = await trio.to_thread.run_sync(check.step, SCRUB_STEP_BYTES,
                                                  limiter=self._scrub_limiter)
                read += n
                self._metrics.scrubbed(n)
                await trio.sleep(n / self.scrub_bytes_per_s)
        self._metrics.scrubbed_segment()
        if check.damage is not None:
            r.report_damage(StorageDamageError(check.damage, segment=base, position=check.valid_bytes,
                                               offset=check.damage_offset), found_by="scrub")
        elif check.index_problem is not None or log.index_files_match(base) is False:
            r.report_damage(StorageDamageError(
                check.index_problem or f"segment {seg.name}: index files differ from its indexes",
                segment=base, position=0, offset=base, what="index"), found_by="scrub")
        return read

    async def _maintain_loop(self) -> None:
        while True:
            await trio.sleep(MAINTAIN_INTERVAL_S)
            for r in list(self._replicas.values()):
                if r.attached:
                    await r.maintain()
                    await trio.sleep(0)

    async def _leader_unreachable(self, broker_id: int, *, refused: bool = True) -> None:
        """A fetch to `broker_id` was refused: its followers here run soon (raft.py
        `leader_unreachable`). `refused=False`: its link went silent while it held fetches of
        ours; only the quiescent followers hear of it (the others' own fetches time out as
        they always did: under a heavy load a slow link is no dead leader)."""
        for r in list(self._replicas.values()):
            if r.attached and not r.is_leader and r.leader_id == broker_id and (
                    refused or r.quiescent_on(broker_id)):
                await r.leader_unreachable(broker_id, refused=refused)

    # ------------------------------------------------------------------ leadership reports

    def add_leadership_listener(self, listener: Callable[[Replica], None]) -> None:
        """Call `listener(replica)` (no await, on the trio thread) whenever a local replica
        gains or loses leadership, or leads in a new epoch."""
        self._leadership_listeners.append(listener)

    def _on_leadership(self, r: Replica) -> None:
        for listener in self._leadership_listeners:
            listener(r)
        if r.is_leader and self._nursery is not None:
            self._start_report(r)
            silent = self.links.silent_followers()
            if silent:  # a new leader learns which voters' brokers are silent now
                self._nursery.start_soon(self._silence_new_leader, r, silent)

    def _start_report(self, r: Replica) -> None:
        key = (r.topic, r.partition)
        epoch = r.leader_epoch
        if self._reporting.get(key, -1) >= epoch:
            return
        self._reporting[key] = epoch
        self._report_queue[key] = (r, epoch, 0)  # one per replica: bounded by the replicas
        self._report_wake.set()

    async def _report_loop(self) -> None:
        """Send queued leader reports to the controller, up to MAX_REPORTS_PER_CALL in each
        `report_partition_leaders` call, one call at a time: reports that arrive while a call
        is in flight go together in the next (after a node dies this broker wins hundreds of
        elections within a second or two; one proposal each queued them behind the metadata
        quorum's commit latency). A report whose call or item fails is retried with backoff,
        at most REPORT_ATTEMPTS times, while its replica still leads in that epoch."""
        delay = REPORT_BACKOFF_S[0]
        while True:
            await self._report_wake.wait()
            self._report_wake = trio.Event()
            while self._report_queue:
                batch: list[tuple[Replica, int, int]] = []
                while self._report_queue and len(batch) < MAX_REPORTS_PER_CALL:
                    key = next(iter(self._report_queue))
                    r, epoch, attempts = self._report_queue.pop(key)
                    if r.is_leader and r.leader_epoch == epoch and not r.closed:
                        batch.append((r, epoch, attempts))
                    else:
                        self._report_done(key, epoch)
                if not batch:
                    break
                t0 = trio.current_time()
                controller_id = getattr(self.metadata, "controller_id", None)
                try:
                    results = await self.metadata.report_partition_leaders(
                        [LeaderReport(r.topic, r.partition, self.node_id, epoch) for r, epoch, _ in batch])
                except RaftlogError as exc:
                    log_event(logger, "leader_reports_failed", level=logging.INFO, reports=len(batch),
                              reason=str(exc))
                    results = [{"error": exc.to_wire()}] * len(batch)
                failed = 0
                for (r, epoch, attempts), result in zip(batch, results):
                    key = (r.topic, r.partition)
                    if "error" not in result:
                        self._report_done(key, epoch)
                        continue
                    failed += 1
                    log_event(logger, "leader_report_failed", level=logging.DEBUG, topic=r.topic,
                              partition=r.partition, epoch=epoch, reason=str(result["error"]))
                    if attempts + 1 >= REPORT_ATTEMPTS or self._reporting.get(key) != epoch \
                            or key in self._report_queue:
                        self._report_done(key, epoch)  # given up (the check loop tries again) or superseded
                    else:
                        self._report_queue[key] = (r, epoch, attempts + 1)
                log_event(logger, "leader_reports_sent", reports=len(batch), failed=failed,
                          took_ms=int((trio.current_time() - t0) * 1000))
                if failed:
                    await self._report_backoff(delay * (0.5 + self._rng.random()), controller_id)
                    delay = min(delay * 2, REPORT_BACKOFF_S[1])
                else:
                    delay = REPORT_BACKOFF_S[0]

    async def _report_backoff(self, seconds: float, controller_id: int | None) -> None:
        """Wait out a failed report call's backoff, or only until another active controller is
        known than the one it went to: when the controller's node died with the leader's, the
        reports failed until a new controller was active, and the backoff (up to 2 s) then kept
        hundreds of new leaders out of the metadata for longer than the failover itself."""
        with trio.move_on_after(seconds):
            while True:
                await trio.sleep(REPORT_CONTROLLER_POLL_S)
                now = getattr(self.metadata, "controller_id", None)
                if now is not None and now != controller_id:
                    return

    def _report_done(self, key: tuple[str, int], epoch: int) -> None:
        if self._reporting.get(key) == epoch:
            del self._reporting[key]

    async def _report_check_loop(self) -> None:
        """Re-report leaderships the image still does not show (a lost report, a controller
        change, a report given up after REPORT_ATTEMPTS)."""
        while True:
            await trio.sleep(REPORT_CHECK_S)
            image = self._image_now()
            for r in list(self._replicas.values()):
                if not (r.attached and r.is_leader):
                    continue
                p = image.partition(r.topic, r.partition)
                if p is not None and (p.leader, p.leader_epoch) != (self.node_id, r.leader_epoch):
                    if p.leader_epoch <= r.leader_epoch:
                        self._start_report(r)


class _StorageMetrics(ReplicaObserver):
    """The replicas' storage events as metrics (module docstring), and the gauges."""

    def __init__(self, registry: MetricsRegistry, manager: ReplicaManager):
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
                lambda kind=kind: sum(1 for r in list(manager._replicas.values())
                                      if r.offline_reason is not None and r.offline_kind == kind))
        registry.gauge("raftlog_data_dir_free_bytes",
                       "Free bytes on the data directory's file system.").set_function(
            lambda: manager.free_bytes() or 0)

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

    def reopened(self, replica: Replica, ok: bool) -> None:
        self._reopens.labels(outcome="ok" if ok else "failed").inc()


def _any_compressed(records: bytes) -> bool:
    """Whether any batch of `records` is compressed (headers only; bytes whose headers do
    not read count as uncompressed: the validator refuses them without decompressing)."""
    try:
        return any(h.compression for _, h in iter_headers(records, verify=False))
    except CorruptRecordError:
        return False


def _close_slices(results: list[dict[str, Any]]) -> None:
    for entry in results:
        records = entry.get("records")
        if records is not None and not isinstance(records, bytes):
            records.close()

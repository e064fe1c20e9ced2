"""The ReplicaManager (a NodeService, raftlog/node/main.py's NodeService): hosts the partition
replicas the metadata image assigns to this broker, plus the replication peer ops. Requests
are served by its `port` (partition/service.py PartitionService, the partition port of
partition/port.py): the listeners call that, never the replicas.

    ReplicaManager(settings: PartitionSettings, metadata: BrokerMetadata, peers: PeerPool)

What it uses of `metadata` (`BrokerMetadata`): `image`, `controller_id`, `peer_address(id)`,
`client_address(id)`, `await report_partition_leaders([LeaderReport])` (per-report
results), `await allocate_producer_ids()`.

* Replicas: `on_image` only records the image; a reconcile task (debounced: images replayed at
  start arrive in bursts, and acting on an intermediate one could wipe a live replica) opens
  replicas newly assigned here (`<data_dir>/partitions/<topic>-<partition>/`, opened in a worker
  thread) and closes and deletes those whose topic is gone (or was recreated: the directory's
  `partition.metadata` names the topic id). A new, empty replica starts in the first term its
  partition's record names (partition/raft.py "First term": the named leader leads, the others
  follow, no election); a record naming none (an older controller's) has the preferred leader run
  for election at once (`wait_named_leader`, named_leader.py, holds requests for a named leader
  here till it leads). Opening, new replicas and those whose directory was there at start (`run`
  lists them, so no stat runs on the trio thread) alike: in batches, each in a worker thread with
  one durability barrier for its fsyncs (partition/fresh_open.py; fsyncs were most of a creation's
  and of a 10,000-replica restart's time, issue 46), OPEN_THREADS batches of existing ones at
  once. The rest of an open is Python (recovery scan, producer walk); eight at once (the DiskWork
  pool) left a node restarted with 1,000 replicas after a load so busy (short of the GIL, most
  likely) that its links to the leaders fell silent, and the followers opened so far ran pre-votes
  against live leaders while the rest waited (450-3,000 leader changes logged during the open
  instead of ~320).
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
  followers (a pass more than STALL_S late blames no link: replication.py "Silence"). A
  broker fenced by the controller -> `leader_unreachable` to all its followers (`_on_fenced`).
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
Peer ops: partition/replication.py's, and `transfer_leadership`.
Size: just over 800 lines; the leader reports (`_start_report` to `_report_check_loop`, ~110
lines) are the seam to cut along.

Concurrency: trio-thread only; per-replica serialisation lives in partition/replica.py.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import cbor2
import trio

from metadata.controller import LeaderReport
from metadata.image import MetadataImage, PartitionState, TopicImage
from metadata.topic_config import TopicConfig
from partition.fresh_open import MAX_EXISTING_BATCH, BatchedOpens, open_existing_batch
from partition.mover import Mover
from partition.named_leader import NamedLeaderHolds
from partition.replica import (
    PARTITION_METADATA_FILE,
    DiskWork,
    offline_kind as offline_kind_of,
    Replica,
    fetch_wait_ticks,
    log_config_for,
)
from partition.replication import SESSION_MAX_WAIT_MS, ReplicationLinks
from partition.scrubber import scrub_segment
from partition.service import BrokerDirectory, PartitionService
from partition.settings import PartitionSettings
from partition.storage_metrics import StorageMetrics
from partition.telemetry import ReplicaTelemetry, TopicTraffic
from partition.throttle import Throttle
from raftlog.base.errors import (
    InvalidRequestError,
    NotLeaderError,
    RaftlogError,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field

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
DRAIN_WAIT_S: Final = 0.5
NEW_PARTITION_ELECTION_TRIES: Final = 5
HEALTH_DETAIL_MAX_REPLICAS: Final = 64  # /health lists each replica up to this many
REOPEN_CHECK_S: Final = 0.5
REOPEN_BACKOFF_S: Final = 1.0
REOPEN_BACKOFF_MAX_S: Final = 30.0
MIN_FREE_BYTES: Final = 4 << 20  # below this, a replica offline for a full disk waits
OPEN_THREADS: Final = 2  # batches of replicas with data opened at once (module docstring, "Opening")
SCRUB_IDLE_S: Final = 5.0  # nothing to scrub yet: look again after this
PARTITION_BYTES_REFRESH_S: Final = 30.0  # leader_partition_bytes: the balancer's disk goal is slow
class BrokerMetadata(BrokerDirectory, Protocol):
    """What the manager (and its port, partition/service.py) uses of the metadata service
    (metadata/service.py MetadataService)."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller_id(self) -> int | None: ...

    def peer_address(self, broker_id: int) -> str | None: ...

    async def report_partition_leaders(self, reports: list[LeaderReport]) -> list[dict[str, Any]]: ...


Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    """See the module docstring."""

    name = "replicas"

    def __init__(
        self,
        settings: PartitionSettings,
        metadata: BrokerMetadata,
        peers: PeerPool,
        *,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
        registry: MetricsRegistry | None = None,
    ):
        self.node_id = settings.node_id
        self.data_dir = Path(settings.data_dir) / PARTITIONS_DIR
        self.metadata = metadata
        self.peers = peers
        self.settings = settings.replica
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
            throttle=Throttle(settings.follower_replication_throttled_rate),
            leader_throttle=Throttle(settings.leader_replication_throttled_rate),
        )  # fmt: skip
        self._replicas: dict[tuple[str, int], Replica] = {}
        self._ticking: dict[tuple[str, int], Replica] = {}  # the tick loop's replicas
        self._ticks_wanted = trio.Event()  # set when an idle tick loop has work again
        self.tick_passes = 0  # of the tick loop (/health): an idle node makes few
        self._leadership_listeners: list[Callable[[Replica], None]] = []
        self._deleting: dict[Path, trio.Event] = {}
        self._image: MetadataImage | None = None
        self._image_changed = trio.Event()
        self._fenced: set[int] | None = None  # brokers fenced in the last image (`on_image`)
        self._nursery: trio.Nursery | None = None
        self._reporting: dict[tuple[str, int], int] = {}  # key -> epoch being reported
        self._report_queue: dict[tuple[str, int], tuple[Replica, int, int]] = {}  # key -> (replica, epoch, attempts)
        self._report_wake = trio.Event()
        self.telemetry = ReplicaTelemetry(self)  # /metrics: partitions, topics, Raft (telemetry.py)
        if registry is not None:
            registry.collector(self.telemetry.collect)
        self.disk = DiskWork()
        self._scrub_limiter = trio.CapacityLimiter(1)
        self._open_limiter = trio.CapacityLimiter(OPEN_THREADS)
        self._fresh_opens = BatchedOpens(self.disk.io, self._prepare_and_open)
        self._existing_opens = BatchedOpens(self._open_limiter, self._prepare_and_open,
                                            batch=open_existing_batch, max_batch=MAX_EXISTING_BATCH,
                                            parallel=OPEN_THREADS)
        self._on_disk_at_start: set[str] = set()  # replica directories found by `run`
        self.scrub_bytes_per_s = settings.scrub_bytes_per_s
        self.scrub_interval_ms = settings.scrub_interval_ms
        self.disk.files.set_max_open(settings.log_open_files_max)
        self.scrub_passes = 0
        self._reopen_at: dict[tuple[str, int], float] = {}
        self._open_failed: dict[tuple[str, int], Replica] = {}
        # Indexes for the periodic passes (issue 46: at 10,000 replicas a pass over all of
        # them every 0.5-2 s was most of an idle node's CPU): the leaders here (`_on_leadership`)
        # and the replicas that went offline or failed to open (the reopen loop's work).
        self._leaders: dict[tuple[str, int], Replica] = {}
        self._offline: dict[tuple[str, int], Replica] = {}
        self._reconciled: dict[str, TopicImage] = {}  # topic id -> its image at the last reconcile
        self._named = NamedLeaderHolds(self.node_id, self._replicas.get, self.image_now)  # "Named leaders"
        self.wait_named_leader = self._named.wait  # the port's hold (partition/service.py ReplicaHost)
        self._partition_bytes: tuple[float, list[list[Any]]] | None = None  # (when, the list)
        self._metrics = StorageMetrics(registry if registry is not None else MetricsRegistry(),
                                       lambda: self._replicas.values(), self.free_bytes,
                                       on_offline=lambda r: self._offline.__setitem__((r.topic, r.partition), r))
        # The partition port (partition/port.py): the listeners' way in. Its native ops are
        # raftlog/node/native_partition.py's, behind the node's ACL guard.
        self.port = PartitionService(self, metadata)
        self.client_handlers: Mapping[str, Handler] = {}
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
                nursery.start_soon(self._fresh_opens.run)
                nursery.start_soon(self._existing_opens.run)
                nursery.start_soon(self._reconcile_loop)
                nursery.start_soon(self._tick_loop)
                nursery.start_soon(self._maintain_loop)
                nursery.start_soon(self._report_loop)
                nursery.start_soon(self._report_check_loop)
                nursery.start_soon(self._reopen_loop)
                nursery.start_soon(self._scrub_loop)
                mover = Mover(self.leaders, lambda: self._image, self.metadata)
                self.add_leadership_listener(mover.leadership_changed)
                nursery.start_soon(mover.run)
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
        fenced = set(image.fenced_broker_ids())
        newly = fenced - self._fenced if self._fenced is not None else set()
        self._fenced = fenced
        if self._nursery is not None:
            for b in sorted(newly - {self.node_id}):
                self._nursery.start_soon(self._on_fenced, b)
        self._named.wake_all()  # the held requests look again

    async def drain(self) -> None:
        """Before a clean stop: resign every leadership so the followers elect at once."""
        for replica in self.leaders():
            await replica.resign()
        with trio.move_on_after(DRAIN_WAIT_S):
            while any(s["queued_messages"] for s in self.links.status().values()):
                await trio.sleep(0.01)

    # The replication throttles' rates, set by dynamic broker configs (raftlog/node/dynamic_config.py).
    @property
    def leader_replication_throttled_rate(self) -> int:
        return self.links.leader_throttle.rate_bytes_per_s if self.links.leader_throttle else 0

    @leader_replication_throttled_rate.setter
    def leader_replication_throttled_rate(self, rate: int) -> None:
        if self.links.leader_throttle is not None:
            self.links.leader_throttle.rate_bytes_per_s = int(rate)

    @property
    def follower_replication_throttled_rate(self) -> int:
        return self.links.throttle.rate_bytes_per_s if self.links.throttle else 0

    @follower_replication_throttled_rate.setter
    def follower_replication_throttled_rate(self, rate: int) -> None:
        if self.links.throttle is not None:
            self.links.throttle.rate_bytes_per_s = int(rate)

    def leader_partition_bytes(self, limit: int = 10_000) -> list[list[Any]]:
        """[[topic, partition, bytes on disk]] of the partitions this broker leads (at most
        `limit`): what its heartbeat tells the controller's balancer (issue 44). Computed at
        most every PARTITION_BYTES_REFRESH_S (the heartbeats in between send the same list)."""
        now = trio.current_time()
        if self._partition_bytes is not None and now - self._partition_bytes[0] < PARTITION_BYTES_REFRESH_S:
            return self._partition_bytes[1]
        out = [[r.topic, r.partition, r.log.size_bytes()] for r in self.leaders() if r.log is not None][:limit]
        self._partition_bytes = (now, out)
        return out

    def health(self) -> dict[str, Any]:
        offline = sorted(r.name for r in self._replicas.values() if r.offline_reason is not None)
        kinds = {r.offline_kind for r in self._replicas.values() if r.offline_reason is not None}
        report: dict[str, Any] = {
            "ok": not offline,
            "replicas": len(self._replicas),
            "leaders": len(self.leaders()),
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

    def leaders(self) -> list[Replica]:
        """The replicas that lead here now (open, serving)."""
        return [r for r in self._leaders.values() if r.is_leader and r.attached]

    def local_leader(self, topic: str, partition: int) -> tuple[bool, int | None, int]:
        """(a replica of it is open here, the leader that replica knows or None, the epoch
        it knows): the partition's Raft group's own word, for the metadata answers
        (metadata/service.py)."""
        r = self.replica(topic, partition)
        if r is None or r.core is None or not r.online:
            return False, None, -1
        return True, r.core.leader_id, r.core.epoch

    def image_now(self) -> MetadataImage:
        """The metadata service's image (the last one seen before it has one)."""
        image = self.metadata.image
        return image if image is not None else (self._image or MetadataImage.empty())

    @property
    def traffic(self) -> TopicTraffic:
        """Bytes and records in and out per topic (/metrics)."""
        return self.telemetry.traffic

    # ------------------------------------------------------------------ peer ops

    async def _transfer_leadership(self, request: Request) -> dict[str, Any]:
        topic = field(request, "topic", str)
        partition = field(request, "partition", int, min_value=0)
        target = field(request, "target", int)
        r = self.port.leader_replica(topic, partition)
        try:
            await r.transfer_leadership(target)
        except NotLeaderError as exc:
            raise self.port.not_leader(topic, partition, exc.leader_id) from None
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
        # Only the topics whose (immutable) image changed since the last pass other than in
        # leaders (reports and moves, most changes at scale), or are gone: at 10,000
        # partitions such walks took half an idle node's loop (issue 46, py-spy).
        seen = self._reconciled
        changed = [t for tid, t in image.topics.items()
                   if seen.get(tid) is not t and not t.only_leaders_moved_since(seen.get(tid))]
        affected = {t.topic_id for t in changed} | (seen.keys() - image.topics.keys())
        self._reconciled = dict(image.topics)
        if not affected:
            return
        wanted: dict[tuple[str, int], tuple[TopicImage, PartitionState, TopicConfig]] = {}
        for topic in changed:
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
            if r.topic_id not in affected and key not in wanted:
                continue
            w = wanted.get(key)
            if w is None or w[0].topic_id != r.topic_id:
                del self._replicas[key]
                self._ticking.pop(key, None)
                self._leaders.pop(key, None)
                self._named.wake(key)
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
                replica_id=self.node_id, voters=p.original_replicas, learners=p.adding_replicas,
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
            if found:  # in a batch too, its recovery's fsyncs in one barrier (fresh_open.py)
                await self._existing_opens.open(r)
            else:  # a new one: in a batch with the others (partition/fresh_open.py)
                await self._fresh_opens.open(r)
        except (OSError, RaftlogError) as exc:
            r.offline_reason = f"open failed: {type(exc).__name__}: {exc}"
            r.offline_kind = offline_kind_of(exc)
            r.offline_since_ms = r.offline_since_ms or self._clock_ms()
            r.reopen_failures += 1
            self._open_failed[(r.topic, r.partition)] = self._offline[(r.topic, r.partition)] = r  # the reopen loop tries again
            log_event(logger, "replica_open_failed", level=logging.ERROR, topic=r.topic,
                      partition=r.partition, reason=r.offline_reason, kind=r.offline_kind)
            self._named.wake((r.topic, r.partition))
            return
        self._open_failed.pop((r.topic, r.partition), None)
        r.offline_reason = r.offline_kind = r.offline_since_ms = None
        r.reopen_failures = 0
        assert self._nursery is not None
        r.attach(self._nursery)
        if self._replicas.get((r.topic, r.partition)) is not r:
            await r.close()  # removed while opening
            return
        if r.online:
            # The log opened (in a thread) with the topic's config of then; a change that came
            # meanwhile reached only r.topic_config (the reconcile sets a log's once it is online).
            r.log.set_config(log_config_for(r.topic_config))
        # A new one says so at debug: 10,000 lines at a creation cost the loop ~0.5 s.
        log_event(logger, "replica_opened", level=logging.INFO if found else logging.DEBUG,
                  topic=r.topic, partition=r.partition,
                  log_end_offset=r.log.log_end_offset, epoch=r.core.epoch, role=r.core.role.value)
        if not r.new_log:
            return
        now = self._image.partition(r.topic, r.partition) if self._image is not None else None
        now = now if now is not None and self._image.topics.get(r.topic_id) is not None else p
        if now.leader >= 0:  # the record names the leader (raft.py "First term"): no election
            await r.begin_first_term(now.leader, now.leader_epoch)
        elif p.preferred_leader == self.node_id:
            # Run now rather than after an election timeout; the other replicas may still
            # be opening (their pre-votes are then lost): again a few times until led.
            for _ in range(NEW_PARTITION_ELECTION_TRIES):
                if r.leader_id is not None or not r.online:
                    break
                await r.start_election()
                await trio.sleep(self.settings.tick_ms * 4 / 1000)

    @staticmethod
    def _prepare_and_open(r: Replica, defer_sync: bool = False) -> None:
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
        r.open(defer_sync=defer_sync)

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
            await self._watch_links(due=next_at)

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

    async def _watch_links(self, due: float | None = None) -> None:
        """Act on the replication links' news (module docstring "Ticks")."""
        leaders, silent, heard = self.links.watch(trio.current_time(), due=due)
        for b in leaders:
            log_event(logger, "replica_link_silent", level=logging.INFO, broker_id=b, side="leader")
            await self._leader_unreachable(b, refused=False)
        for b in silent:  # often only a broker that follows nothing led here: debug
            log_event(logger, "replica_link_silent", level=logging.DEBUG, broker_id=b, side="follower")
        for b in heard:
            log_event(logger, "replica_link_heard", level=logging.DEBUG, broker_id=b)
        if silent or heard:
            for r in self.leaders():
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
            for key, r in list(self._offline.items()):
                if r.closed or r.offline_reason is None or self._replicas.get(key) is not r:
                    del self._offline[key]  # back, or gone
                    continue
                if now < self._reopen_at.get(key, 0.0):
                    continue
                free = await trio.to_thread.run_sync(self.free_bytes, limiter=self.disk.io)
                if r.offline_kind == "disk_full" and free is not None and free < MIN_FREE_BYTES:
                    self._reopen_at[key] = now + REOPEN_BACKOFF_S
                    continue
                if key in self._open_failed:
                    p = self.image_now().partition(r.topic, r.partition)
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
                    scrubbed += await scrub_segment(r, base, self._scrub_limiter, self._metrics, self.scrub_bytes_per_s)
            if scrubbed:
                self.scrub_passes += 1
                log_event(logger, "scrub_pass_done", level=logging.DEBUG, bytes=scrubbed,
                          seconds=round(trio.current_time() - started, 3))
                await trio.sleep_until(started + self.scrub_interval_ms / 1000)
            else:
                await trio.sleep(min(SCRUB_IDLE_S, self.scrub_interval_ms / 1000))

    async def _maintain_loop(self) -> None:
        while True:
            await trio.sleep(MAINTAIN_INTERVAL_S)
            for r in list(self._replicas.values()):
                # Never written: nothing to roll, retain, compact or checkpoint (issue 46: 9% of idle)
                if r.attached and r.log is not None and r.log.log_end_offset > 0:
                    await r.maintain()
                    await trio.sleep(0)

    async def _leader_unreachable(self, broker_id: int, *, refused: bool = True, every: bool = False) -> None:
        """A fetch to `broker_id` was refused: its followers here run soon (raft.py
        `leader_unreachable`). `refused=False`: its link went silent while it held fetches of
        ours; only the quiescent followers hear of it (the others' own fetches time out as
        they always did: under a heavy load a slow link is no dead leader), unless `every`
        (the controller fenced it: `_on_fenced`)."""
        for r in list(self._replicas.values()):
            if r.attached and not r.is_leader and r.leader_id == broker_id and (
                    refused or every or r.quiescent_on(broker_id)):
                await r.leader_unreachable(broker_id, refused=refused)

    async def _on_fenced(self, broker_id: int) -> None:
        """The controller fenced `broker_id`: its followers here run soon, with a pre-vote
        (a fenced broker may still run; the other followers saw the same image and grant it)."""
        log_event(logger, "leader_broker_fenced", level=logging.INFO, broker_id=broker_id)
        await self._leader_unreachable(broker_id, refused=False, every=True)

    # ------------------------------------------------------------------ leadership reports

    def add_leadership_listener(self, listener: Callable[[Replica], None]) -> None:
        """Call `listener(replica)` (no await, on the trio thread) whenever a local replica
        gains or loses leadership, or leads in a new epoch."""
        self._leadership_listeners.append(listener)

    def _on_leadership(self, r: Replica) -> None:
        key = (r.topic, r.partition)
        if r.is_leader and self._replicas.get(key) is r:
            self._leaders[key] = r
        else:
            self._leaders.pop(key, None)
        self._named.wake(key)
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
                controller_id = self.metadata.controller_id
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
                now = self.metadata.controller_id
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
            image = self.image_now()
            for r in self.leaders():
                p = image.partition(r.topic, r.partition)
                if p is not None and (p.leader, p.leader_epoch) != (self.node_id, r.leader_epoch):
                    if p.leader_epoch <= r.leader_epoch:
                        self._start_report(r)

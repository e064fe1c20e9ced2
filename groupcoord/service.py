"""The group coordinator's trio shell (a NodeService, raftlog/node/main.py's NodeService): one pure
`GroupCoordinator` core (coordinator.py) driven on the node's trio thread, with its offsets
and group records in `__consumer_offsets` through the local ReplicaManager.

    GroupCoordinatorService(settings, metadata, topics)

`settings` (settings.py) is built by the node from its config; `metadata` is a `MetadataView`
and `topics` the node's `InternalTopics` (internal_topic.py: the partition seam, implemented by
partition/internal_topic.py), None on a node that is not a broker.

What the shell does for the core (the contract in coordinator.py's docstring):
* Calls: every core call is synchronous and made between trio checkpoints, so calls never
  overlap (the core is not re-entrant and needs no lock: a trio task cannot be preempted
  inside a synchronous call). Each Result is applied at once by `_apply`: the waiter of a
  `Pending` response is registered first, then appends are queued, then completions wake
  their waiters, then the timer is moved to `next_deadline_ms`.
* Waiters: one trio.Event + slot per pending key (bounded by the core's `max_pending`). A
  handler waits at most the request's `timeout_ms` (capped below the server deadline); on
  timeout or cancellation it tells the core `abandon(key)` and answers REQUEST_TIMED_OUT.
* Appends: `Append(append_id, partition, records)` becomes one RecordBatch v2 (BatchBuilder,
  key/value bytes from the core) appended with acks=all to the local leader partition of
  `__consumer_offsets-<partition>` (`InternalPartition.append`). Appends go through one bounded channel to one writer task,
  so appends are made in the order the core issued them; each commit waits in its own task
  (bounded by COMMIT_TIMEOUT_S, Kafka's offsets.commit.timeout.ms) and reports
  `on_append_committed(append_id, base_offset)` or `on_append_failed(append_id, error)`. A full
  channel fails the append at once (COORDINATOR_NOT_AVAILABLE for the client: retriable).
* Ownership: a watcher looks at the local replicas of `__consumer_offsets` whenever one of
  them gains or loses leadership (`InternalTopics.add_leadership_listener`), and every
  LEADERSHIP_CHECK_S besides (a failed load's retry; a 50 ms poll before woke an idle node 20
  times a second). A partition newly led here (or led in a new epoch) is `begin_load`ed, then
  replayed in a task: first it waits until the high watermark reaches the log end seen
  when leadership was noticed (so every record of earlier leaders is committed), then it reads
  from the log start to the high watermark (groupcoord/partition_load.py, shared with the
  transaction coordinator: `read_committed` + `partition.keyed.logged_records`, transactional
  offsets held until their marker, other control batches skipped) into `load`, then `finish_load`. Meanwhile the partition's groups answer
  COORDINATOR_LOAD_IN_PROGRESS; groups of partitions not led here answer NOT_COORDINATOR. Losing leadership `unload`s (pending requests answered
  NOT_COORDINATOR). A load that fails is dropped and retried by the watcher. A partition
  with an empty log (a new one: nothing any leader could have committed) is loaded at once,
  in the same call, as Kafka's coordinator loads an empty partition.
* Waiting for the load (issue 46): FindCoordinator answers from the image, which names a new
  partition's first leader before its replica leads (partition/raft.py "First term"), so a
  client's first group request can reach a coordinator that is about to load. A group op
  whose partition is loading here, or is named led here (epoch 0) but not yet owned, waits for
  the load (one Event for every such waiter, set at each ownership change), at most
  LOAD_WAIT_MS and its own budget, then is answered by the core as before.
* Timer: one task sleeps until the latest `next_deadline_ms` (or until it changes) and calls
  `tick(now_ms)`.

Clock: one, injected: `clock_ms` (default wall-clock ms, since commit timestamps are stored
in the log as Kafka's are) is every `now` of this shell: the core's `now_ms`, the timer's
delay, the load retry back-off and the load time. Waits are trio's (`trio.sleep`,
`move_on_after` for the durations so computed, and the commit wait's deadline), so a test runs
the shell on `trio.testing.MockClock` by passing `clock_ms` = trio's clock in ms.

The port (groupcoord/port.py `GroupPort`, typed; both listeners adapt their wire to it):
find_coordinator (answered by any node from its image: the leader of
`partition_for_group(group_id)`), join_group, sync_group, heartbeat, leave_group,
offset_commit, offset_fetch, list_groups (this node's groups only: clients ask every broker),
describe_groups, delete_groups, offset_delete, reset_offsets (explicit offsets; planning is
the client's), and KIP-848's consumer_group_heartbeat, consumer_group_describe
(consumer_group_service.py).

Settings (settings.py, from the node config): request_timeout_ms, and the core's
group_min_session_timeout_ms, group_max_session_timeout_ms, group_initial_rebalance_delay_ms.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from groupcoord.consumer_group_service import ConsumerGroupHandlers
from groupcoord.coordinator import (
    Append,
    GroupCoordinator,
    Pending,
    Result,
)
from groupcoord.internal_topic import Appended, InternalPartition, InternalTopics, MetadataView
from groupcoord.partition_load import follow_leadership, replay_partition
from groupcoord.port import (
    CommittedOffset,
    Coordinator,
    DescribedGroup,
    DescribedMember,
    GroupListing,
    GroupOutcome,
    Heartbeat,
    Joined,
    JoinedMember,
    JoinGroup,
    LeaveGroup,
    MemberLeft,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    PartitionOutcome,
    ResetDone,
    ResetOffsets,
    ResetRow,
    Synced,
    SyncGroup,
)
from groupcoord.settings import GroupCoordinatorSettings
from groupcoord.txn_offsets import TxnOffsets
from metadata.image import MetadataImage
from partition.batch import BatchBuilder
from partition.keyed import logged_records
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InvalidRequestError,
    NotCoordinatorError,
    RaftlogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
    error_from_wire,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import Metric, gauge_family
from raftlog.base.protocol import Request
from raftlog.base.topics import (
    OFFSETS_TOPIC,
    busy_row,
    partition_for_group,
)

__all__ = ["GroupCoordinatorService", "OFFSETS_TOPIC"]

logger = logging.getLogger(__name__)

LEADERSHIP_CHECK_S: Final = 0.5  # besides each leadership change: a failed load's retry
LOAD_RETRY_MS: Final = 500
COMMIT_TIMEOUT_S: Final = 5.0          # Kafka's offsets.commit.timeout.ms
APPEND_QUEUE: Final = 4096
DEFAULT_WAIT_MS: Final = 30_000
WAIT_MARGIN_MS: Final = 250            # answer before the server's own deadline fires
MAX_GROUP_IDS: Final = 1000            # per describe_groups / delete_groups request
LOAD_WAIT_MS: Final = 5000             # a group op waits this long at most for its partition's load

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Waiter:
    key: int
    event: trio.Event
    response: Any = None


class ShareGroupDeleter(Protocol):
    """What DeleteGroups needs of the share service (groupcoord/share_service.py)."""

    async def delete_share_group(self, group_id: str) -> bool:
        """Delete an empty share group: True; False when no share group has that id. Raises
        NonEmptyGroupError, NotCoordinatorError or a store error (nothing deleted)."""


class GroupCoordinatorService(ConsumerGroupHandlers):
    """See the module docstring. `topics` is None on a node that is not a broker: then only
    find_coordinator is useful."""

    name = "groups"

    def __init__(
        self,
        settings: GroupCoordinatorSettings,
        metadata: MetadataView,
        topics: InternalTopics | None,
        *,
        clock_ms: Callable[[], int] = _wall_ms,
        rng: random.Random | None = None,
    ):
        self.node_id = settings.node_id
        self.metadata = metadata
        self.topics = topics
        self._clock_ms = clock_ms
        self._request_timeout_ms = settings.request_timeout_ms
        self.core = GroupCoordinator(settings.coordinator, rng or random.Random())
        self.core.use_group_configs(lambda group_id: metadata.image.group_configs.get(group_id, {}))
        self._waiters: dict[int, _Waiter] = {}
        self._deadline_ms: int | None = None
        self._timer_changed = trio.Event()
        self._owned: dict[int, int] = {}       # partition -> leader epoch loaded / loading
        self._load_failed_at_ms: dict[int, int] = {}
        self._loading: set[int] = set()        # partitions begun but not finished loading
        self._ownership_changed = trio.Event()  # set (and replaced) at each load, finish, unload
        self._append_send, self._append_recv = trio.open_memory_channel[Append](APPEND_QUEUE)
        self._nursery: trio.Nursery | None = None
        # TxnOffsetCommit's pending offsets (txn_offsets.py); the node calls its on_marker.
        self.txn_offsets = TxnOffsets(self.core, lambda result: self._answer(self._apply(result), DEFAULT_WAIT_MS),
                                      clock_ms)
        # The group ops are this service's typed port (groupcoord/port.py `GroupPort`; their native
        # adapter is raftlog/node/native_groups.py); TxnOffsetCommit is the transaction port's
        # (groupcoord/txn_port.py), served by `txn_offsets`.
        self.client_handlers: Mapping[str, Handler] = {}
        self.peer_handlers: Mapping[str, Handler] = {}
        # DeleteGroups of a share group (KIP-932: one DeleteGroups for every kind): the node
        # sets the share service here (it knows this service, not the other way round).
        self.share_groups: ShareGroupDeleter | None = None

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._timer_loop)
                if self.topics is not None:
                    nursery.start_soon(self._writer_loop)
                    nursery.start_soon(follow_leadership, self.topics, OFFSETS_TOPIC,
                                       self._check_leadership, LEADERSHIP_CHECK_S)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for p in list(self._owned):
                del self._owned[p]
                self._unload(p)

    def on_image(self, image: MetadataImage) -> None:
        """Nothing to do: ownership follows the local replicas, find_coordinator reads the
        metadata service's image when asked."""

    def health(self) -> dict[str, Any]:
        return {"ok": True, **self.core.health(), "waiters": len(self._waiters)}

    def busy_partitions(self) -> list[dict[str, Any]]:
        """The `__consumer_offsets` partitions a replica move must not take now (their
        coordinator is loading them), as the broker heartbeat carries them
        (metadata/reassignment.py "Busy coordinators")."""
        return [busy_row(OFFSETS_TOPIC, p, CoordinatorLoadInProgressError(
                    f"the group coordinator is loading {OFFSETS_TOPIC}-{p}"))
                for p in self.core.health()["partitions_loading"]]

    def collect_metrics(self) -> list[Metric]:
        """Per group coordinated here (the node registers this as a /metrics collector):
        consumer lag, members, state. Lag of a committed partition = its high watermark as
        the local replica knows it (leader or follower) minus the committed offset; a
        partition with no replica on this broker is left out of the sums. Redpanda:
        redpanda_kafka_consumer_group_lag_sum / _lag_max / _consumers."""
        lag_sum: dict[tuple[str], int] = {}
        lag_max: dict[tuple[str], int] = {}
        members: dict[tuple[str], int] = {}
        states: dict[tuple[str, str], int] = {}
        for g in self.core.groups():
            key = (g.group_id,)
            cg = self.core.consumer_group(g.group_id)
            members[key] = len(g.members) if cg is None else len(cg.members)
            states[(g.group_id, g.state.value if cg is None else cg.state())] = 1
            total = worst = 0
            for (topic, partition), entry in g.offsets.items():
                hw = self.topics.high_watermark(topic, partition) if self.topics is not None else None
                if hw is None:
                    continue
                lag = max(0, hw - entry.offset)
                total += lag
                worst = max(worst, lag)
            lag_sum[key] = total
            lag_max[key] = worst
        return [
            gauge_family("raftlog_group_lag_sum", "Consumer lag of a group summed over its committed "
                         "partitions (records). Redpanda: redpanda_kafka_consumer_group_lag_sum.",
                         ("group",), lag_sum),
            gauge_family("raftlog_group_lag_max", "The largest consumer lag of a group's partitions. "
                         "Redpanda: redpanda_kafka_consumer_group_lag_max.", ("group",), lag_max),
            gauge_family("raftlog_group_members", "Members of a group. Redpanda: "
                         "redpanda_kafka_consumer_group_consumers.", ("group",), members),
            gauge_family("raftlog_group_state", "1 for a group's current state (Empty, "
                         "PreparingRebalance, CompletingRebalance, Stable, Dead; KIP-848: Empty, Assigning, "
                         "Reconciling, Stable).", ("group", "state"), states),
            *self.consumer_group_metrics(),
        ]

    async def drain(self) -> None:
        """Nothing to hand over: the groups follow `__consumer_offsets` leadership, which the
        replicas hand over in their own drain."""

    # ------------------------------------------------------------------ applying results

    def _apply(self, result: Result) -> Any:
        """Carry out one Result; returns its response (a `_Waiter` for Pending)."""
        response: Any = result.response
        if isinstance(response, Pending):
            waiter = _Waiter(response.key, trio.Event())
            self._waiters[response.key] = waiter
            response = waiter
        for append in result.appends:
            self._queue_append(append)
        for key, answer in result.completions:
            w = self._waiters.pop(key, None)
            if w is not None:
                w.response = answer
                w.event.set()
        if result.next_deadline_ms != self._deadline_ms:
            self._deadline_ms = result.next_deadline_ms
            self._timer_changed.set()
        return response

    def _queue_append(self, append: Append) -> None:
        if self._nursery is None or self.topics is None:
            self._apply(self.core.on_append_failed(append.append_id, CoordinatorNotAvailableError("append queue full or stopped"), self._clock_ms()))
            return
        try:
            self._append_send.send_nowait(append)
        except trio.WouldBlock:
            self._apply(self.core.on_append_failed(append.append_id, CoordinatorNotAvailableError("append queue full or stopped"), self._clock_ms()))

    async def _answer(self, response: Any, wait_ms: int) -> dict[str, Any]:
        """The ok fields of a core response; raises its error. Waits for a Pending one."""
        if isinstance(response, _Waiter):
            key = response.key
            try:
                with trio.move_on_after(max(0, wait_ms) / 1000):
                    await response.event.wait()
            finally:
                if not response.event.is_set():
                    self._waiters.pop(key, None)
                    self.core.abandon(key)
            if not response.event.is_set():
                raise RequestTimedOutError(f"no answer from the group coordinator within {wait_ms} ms")
            response = response.response
        if isinstance(response, RaftlogError):
            raise response
        if response is None:
            return {}
        return dict(response)

    def _budget_ms(self, asked: int | None, floor_ms: int = 0) -> int:
        cap = self._request_timeout_ms - WAIT_MARGIN_MS
        want = DEFAULT_WAIT_MS if asked is None else asked
        return max(0, min(max(want, floor_ms), cap))

    # ------------------------------------------------------------------ timer

    async def _timer_loop(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            deadline = self._deadline_ms
            if deadline is None:
                await self._timer_changed.wait()
                continue
            delay_s = (deadline - self._clock_ms()) / 1000
            if delay_s > 0:
                with trio.move_on_after(delay_s):
                    await self._timer_changed.wait()
                continue
            self._apply(self.core.tick(self._clock_ms()))
            if self._deadline_ms is not None and self._deadline_ms <= deadline:
                await trio.sleep(0.001)  # never spin on a deadline the core did not move
            await trio.sleep(0)

    # ------------------------------------------------------------------ appends

    async def _writer_loop(self) -> None:
        assert self._nursery is not None
        async for append in self._append_recv:
            await self._write(append)

    async def _write(self, append: Append) -> None:
        assert self.topics is not None
        part = self.topics.partition(OFFSETS_TOPIC, append.partition)
        if part is None or not part.is_leader:
            self._apply(self.core.on_append_failed(append.append_id, NotCoordinatorError("not the leader of the partition"), self._clock_ms()))
            return
        now = self._clock_ms()
        if append.producer_id >= 0:  # TxnOffsetCommit: a batch of the producer's transaction
            builder = BatchBuilder(producer_id=append.producer_id, producer_epoch=append.producer_epoch,
                                   is_transactional=True)
        else:
            builder = BatchBuilder()
        for key, value in append.records:
            builder.append(value, key, timestamp_ms=now)
        try:
            res = await part.append(builder.build())
        except RaftlogError as exc:
            self._apply(self.core.on_append_failed(append.append_id, exc, self._clock_ms()))
            return
        assert self._nursery is not None
        self._nursery.start_soon(self._await_commit, append.append_id, res)

    async def _await_commit(self, append_id: int, res: Appended) -> None:
        try:
            await res.wait_committed(trio.current_time() + COMMIT_TIMEOUT_S)
        except RaftlogError as exc:
            self._apply(self.core.on_append_failed(append_id, exc, self._clock_ms()))
            return
        self._apply(self.core.on_append_committed(append_id, res.first_offset, self._clock_ms()))

    # ------------------------------------------------------------------ ownership

    def _check_leadership(self) -> None:
        now_ms = self._clock_ms()
        assert self.topics is not None
        for p in range(self.core.config.partitions):
            r = self.topics.partition(OFFSETS_TOPIC, p)
            leading = r is not None and r.is_leader
            current = self._owned.get(p)
            if leading:
                if current == r.leader_epoch:
                    continue
                failed_at_ms = self._load_failed_at_ms.get(p)
                if failed_at_ms is not None and now_ms - failed_at_ms < LOAD_RETRY_MS:
                    continue
                self._owned[p] = r.leader_epoch
                self._apply(self.core.begin_load(p))
                self._loading.add(p)
                self._changed_ownership()
                if r.log_end_offset == 0:  # a new partition: nothing to load (module docstring)
                    self._finish_load(p, r.leader_epoch, 0, 0, now_ms)
                    continue
                log_event(logger, "group_partition_loading", partition=p, epoch=r.leader_epoch)
                assert self._nursery is not None
                self._nursery.start_soon(self._load, p, r, r.leader_epoch)
            elif current is not None:
                del self._owned[p]
                self._unload(p)
                log_event(logger, "group_partition_unloaded", partition=p)

    def _changed_ownership(self) -> None:
        self._ownership_changed.set()
        self._ownership_changed = trio.Event()

    def _finish_load(self, p: int, epoch: int, applied: int, offset: int, started_ms: int) -> None:
        self._apply(self.core.finish_load(p, self._clock_ms()))
        self._loading.discard(p)
        self._changed_ownership()
        log_event(logger, "group_partition_loaded", partition=p, epoch=epoch, records=applied,
                  end_offset=offset, load_ms=self._clock_ms() - started_ms)

    def _unload(self, p: int) -> None:
        self._apply(self.core.unload(p))
        self._loading.discard(p)
        self._changed_ownership()

    def _loaded_or_elsewhere(self, p: int) -> bool:
        """Whether partition `p`'s groups can be answered now: not loading here, and not named
        led here (epoch 0, partition/raft.py "First term") without being owned yet."""
        if p in self._loading:
            return False
        if p in self._owned:
            return True
        state = self.metadata.image.partition(OFFSETS_TOPIC, p)
        return state is None or state.leader != self.node_id or state.leader_epoch != 0

    async def _wait_loaded(self, group_ids: Sequence[str], budget_ms: int) -> None:
        """Wait until the partitions of `group_ids` are loaded here or not named here (module
        docstring "Waiting for the load"), at most min(budget_ms, LOAD_WAIT_MS)."""
        if self.topics is None:
            return
        count = self.core.config.partitions
        waiting = {partition_for_group(g, count) for g in group_ids}
        deadline = trio.current_time() + min(budget_ms, LOAD_WAIT_MS) / 1000
        while trio.current_time() < deadline:
            waiting = {p for p in waiting if not self._loaded_or_elsewhere(p)}
            if not waiting:
                return
            with trio.move_on_at(deadline):
                await self._ownership_changed.wait()

    async def _load(self, p: int, r: InternalPartition, epoch: int) -> None:
        def ours() -> bool:
            return self._owned.get(p) == epoch and r.is_leader and r.leader_epoch == epoch

        started_ms = self._clock_ms()
        try:
            applied, offset = await replay_partition(r, ours, lambda records: self.core.load(p, records),
                                                     decode=logged_records)
            if not ours():
                return
            self._finish_load(p, epoch, applied, offset, started_ms)
        except RaftlogError as exc:
            log_event(logger, "group_partition_load_failed", level=logging.WARNING, partition=p,
                      epoch=epoch, reason=str(exc))
            if self._owned.get(p) == epoch:
                del self._owned[p]
                self._load_failed_at_ms[p] = self._clock_ms()
                self._unload(p)

    # ------------------------------------------------------------------ client ops

    async def find_coordinator(self, group_id: str) -> Coordinator:
        image = self.metadata.image
        topic = image.topic(OFFSETS_TOPIC)
        if topic is None or not topic.complete:
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} does not exist yet")
        p = partition_for_group(group_id, topic.partition_count)
        state = image.partition(OFFSETS_TOPIC, p)
        address = None
        if state is not None and state.leader >= 0:
            address = self.metadata.client_address(state.leader)
        if address is None:
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{p} has no leader now")
        host, _, port = address.rpartition(":")
        return Coordinator(state.leader, host, int(port), p)

    async def join_group(self, request: JoinGroup) -> Joined:
        if request.rebalance_timeout_ms < 0:  # 0 is Kafka's too: the rebalance completes with who joined
            raise InvalidRequestError("rebalance_timeout_ms must be at least 0", field="rebalance_timeout_ms")
        await self._wait_loaded([request.group_id], self._budget_ms(request.timeout_ms))
        result = self.core.join_group(
            group_id=request.group_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            now_ms=self._clock_ms(),
            # A classic member joining a consumer group needs them (classic_member.py).
            topics=self._topic_counts() if self.core.consumer_group(request.group_id) is not None else None,
        )
        a = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        return Joined(a["generation_id"], a["member_id"], a.get("protocol_type"), a.get("protocol_name"),
                      a.get("leader") or "", [JoinedMember(m["member_id"], m.get("group_instance_id"), m["metadata"])
                                              for m in a.get("members") or ()])

    async def sync_group(self, request: SyncGroup) -> Synced:
        await self._wait_loaded([request.group_id], self._budget_ms(request.timeout_ms))
        result = self.core.sync_group(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            assignments=request.assignments,
            group_instance_id=request.group_instance_id,
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            now_ms=self._clock_ms(),
        )
        a = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        return Synced(a.get("protocol_type"), a.get("protocol_name"), a.get("assignment") or b"")

    async def heartbeat(self, request: Heartbeat) -> None:
        await self._wait_loaded([request.group_id], self._budget_ms(None))
        result = self.core.heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=request.group_instance_id,
            now_ms=self._clock_ms(),
        )
        await self._answer(self._apply(result), 0)

    async def leave_group(self, request: LeaveGroup) -> list[MemberLeft]:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
        await self._wait_loaded([request.group_id], self._budget_ms(None))
        result = self.core.leave_group(group_id=request.group_id, members=members, now_ms=self._clock_ms())
        a = await self._answer(self._apply(result), 0)
        return [MemberLeft(m["member_id"], m.get("group_instance_id"), _error(m))
                for m in a.get("members") or ()]

    async def offset_commit(self, request: OffsetCommit) -> list[PartitionOutcome]:
        await self._wait_loaded([request.group_id], self._budget_ms(request.timeout_ms))
        offsets = list(request.offsets)
        # Kafka (KafkaApis.handleOffsetCommitRequest) answers a partition its metadata does not
        # hold with UNKNOWN_TOPIC_OR_PARTITION and commits the others.
        image = self.metadata.image
        unknown = [PartitionOutcome(c.topic, c.partition,
                                    UnknownTopicOrPartitionError(f"{c.topic}-{c.partition} does not exist"))
                   for c in offsets if image.partition(c.topic, c.partition) is None]
        if unknown:
            offsets = [c for c in offsets if image.partition(c.topic, c.partition) is not None]
            if not offsets:
                return unknown
        result = self.core.offset_commit(
            group_id=request.group_id,
            offsets=offsets,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=request.group_instance_id,
            now_ms=self._clock_ms(),
        )
        a = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        return [*_outcomes(a), *unknown]

    async def offset_fetch(self, request: OffsetFetch) -> list[CommittedOffset]:
        await self._wait_loaded([request.group_id], self._budget_ms(None))
        parts = None if request.partitions is None else list(request.partitions)
        result = self.core.offset_fetch(group_id=request.group_id, partitions=parts,
                                        member_id=request.member_id, member_epoch=request.member_epoch)
        a = await self._answer(self._apply(result), 0)
        pending = self.txn_offsets.pending_partitions(request.group_id) if request.require_stable else set()
        return [CommittedOffset(r["topic"], r["partition"], error=UnstableOffsetCommitError(
                    f"a transaction's offsets for {r['topic']}-{r['partition']} are not applied yet"))
                if (r["topic"], r["partition"]) in pending else
                CommittedOffset(r["topic"], r["partition"], r["offset"], r["leader_epoch"], r["metadata"])
                for r in a.get("partitions") or ()]  # fmt: skip

    async def list_groups(self, states: Sequence[str] | None = None) -> list[GroupListing]:
        a = await self._answer(self._apply(self.core.list_groups(None if states is None else list(states))), 0)
        return [GroupListing(g["group_id"], g["protocol_type"], g["state"], g["type"]) for g in a.get("groups") or ()]

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        if len(group_ids) > MAX_GROUP_IDS:
            raise InvalidRequestError(f"at most {MAX_GROUP_IDS} group ids", field="group_ids")
        await self._wait_loaded(group_ids, self._budget_ms(None))
        a = await self._answer(self._apply(self.core.describe_groups(list(group_ids))), 0)
        out = []
        for g in a.get("groups") or ():
            if g.get("error") is not None:
                out.append(DescribedGroup(g["group_id"], error=error_from_wire(g["error"])))
                continue
            out.append(DescribedGroup(
                g["group_id"], g["state"], g["protocol_type"], g["protocol"],
                [DescribedMember(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                                 m["metadata"], m["assignment"]) for m in g["members"]],
                g.get("type", "classic")))  # fmt: skip
        return out

    async def delete_groups(self, group_ids: Sequence[str], timeout_ms: int | None = None) -> list[GroupOutcome]:
        if len(group_ids) > MAX_GROUP_IDS:
            raise InvalidRequestError(f"at most {MAX_GROUP_IDS} group ids", field="group_ids")
        wait_ms = self._budget_ms(timeout_ms)
        await self._wait_loaded(group_ids, wait_ms)
        out = []
        for gid in group_ids:
            try:
                try:
                    result = self.core.delete_group(group_id=gid, now_ms=self._clock_ms())
                    await self._answer(self._apply(result), wait_ms)
                except GroupIdNotFoundError:  # not a classic or consumer group: a share group?
                    if self.share_groups is None or not await self.share_groups.delete_share_group(gid):
                        raise
                out.append(GroupOutcome(gid))
            except RaftlogError as exc:
                out.append(GroupOutcome(gid, exc))
        return out

    async def offset_delete(self, request: OffsetDelete) -> list[PartitionOutcome]:
        await self._wait_loaded([request.group_id], self._budget_ms(request.timeout_ms))
        # As for a commit, Kafka answers a partition its metadata does not hold with
        # UNKNOWN_TOPIC_OR_PARTITION and deletes the others.
        image = self.metadata.image
        unknown = [PartitionOutcome(t, p, UnknownTopicOrPartitionError(f"{t}-{p} does not exist"))
                   for t, p in request.partitions if image.partition(t, p) is None]
        known = [(t, p) for t, p in request.partitions if image.partition(t, p) is not None]
        result = self.core.delete_offsets(group_id=request.group_id, partitions=known, now_ms=self._clock_ms())
        a = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        return [*_outcomes(a), *unknown]

    async def reset_offsets(self, request: ResetOffsets) -> ResetDone:
        await self._wait_loaded([request.group_id], self._budget_ms(request.timeout_ms))
        result = self.core.reset_offsets(group_id=request.group_id, offsets=dict(request.offsets),
                                         dry_run=request.dry_run, now_ms=self._clock_ms())
        a = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        return ResetDone(bool(a.get("dry_run")), [ResetRow(r["topic"], r["partition"], r["previous_offset"], r["offset"])
                                                  for r in a.get("partitions") or ()])


def _error(entry: Mapping[str, Any]) -> RaftlogError | None:
    """The exception of a core answer's per-item `error` map (None: no error)."""
    error = entry.get("error")
    return None if error is None else error_from_wire(error)


def _outcomes(answer: Mapping[str, Any]) -> list[PartitionOutcome]:
    return [PartitionOutcome(r["topic"], r["partition"], _error(r)) for r in answer.get("partitions") or ()]

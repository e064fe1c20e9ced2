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
  transaction coordinator: `read_committed` + `partition.keyed.keyed_records`, control batches
  skipped) into `load`, then `finish_load`. Meanwhile the partition's groups answer
  COORDINATOR_LOAD_IN_PROGRESS; groups of partitions not led here answer NOT_COORDINATOR. Losing leadership `unload`s (pending requests answered
  NOT_COORDINATOR). A load that fails is dropped and retried by the watcher.
* Timer: one task sleeps until the latest `next_deadline_ms` (or until it changes) and calls
  `tick(now_ms)`.

Clock: one, injected: `clock_ms` (default wall-clock ms, since commit timestamps are stored
in the log as Kafka's are) is every `now` of this shell: the core's `now_ms`, the timer's
delay, the load retry back-off and the load time. Waits are trio's (`trio.sleep`,
`move_on_after` for the durations so computed, and the commit wait's deadline), so a test runs
the shell on `trio.testing.MockClock` by passing `clock_ms` = trio's clock in ms.

Client ops (PROTOCOL.md): find_coordinator (answered by any node from its image: the leader of
`partition_for_group(group_id)`), join_group, sync_group, heartbeat, leave_group,
offset_commit, offset_fetch, list_groups (this node's groups only: clients ask every broker),
describe_groups, delete_groups, reset_offsets (explicit offsets; planning is the client's).

Settings (settings.py, from the node config): request_timeout_ms, and the core's
group_min_session_timeout_ms, group_max_session_timeout_ms, group_initial_rebalance_delay_ms.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import trio

from groupcoord.consumer_group_service import ConsumerGroupHandlers
from groupcoord.coordinator import (
    Append,
    CommitOffset,
    GroupCoordinator,
    Pending,
    Result,
)
from groupcoord.internal_topic import Appended, InternalPartition, InternalTopics, MetadataView
from groupcoord.partition_load import follow_leadership, replay_partition
from groupcoord.settings import GroupCoordinatorSettings
from groupcoord.txn_offsets import TxnOffsets
from metadata.image import MetadataImage
from partition.batch import BatchBuilder
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotCoordinatorError,
    RaftlogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import Metric, gauge_family
from raftlog.base.protocol import Request, field
from raftlog.base.topics import (
    OFFSETS_TOPIC,
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
MAX_PROTOCOLS: Final = 64

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Waiter:
    key: int
    event: trio.Event
    response: Any = None


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
        self._waiters: dict[int, _Waiter] = {}
        self._deadline_ms: int | None = None
        self._timer_changed = trio.Event()
        self._owned: dict[int, int] = {}       # partition -> leader epoch loaded / loading
        self._load_failed_at_ms: dict[int, int] = {}
        self._append_send, self._append_recv = trio.open_memory_channel[Append](APPEND_QUEUE)
        self._nursery: trio.Nursery | None = None
        # TxnOffsetCommit's pending offsets (txn_offsets.py); the node calls its on_marker.
        self.txn_offsets = TxnOffsets(self.core, lambda result: self._answer(self._apply(result), DEFAULT_WAIT_MS),
                                      clock_ms)
        self.client_handlers: Mapping[str, Handler] = {
            "txn_offset_commit": self.txn_offsets.commit,
            "find_coordinator": self._find_coordinator,
            "join_group": self._join_group,
            "sync_group": self._sync_group,
            "heartbeat": self._heartbeat,
            "leave_group": self._leave_group,
            "offset_commit": self._offset_commit,
            "offset_fetch": self._offset_fetch,
            "list_groups": self._list_groups,
            "describe_groups": self._describe_groups,
            "delete_groups": self._delete_groups,
            "reset_offsets": self._reset_offsets,
            "consumer_group_heartbeat": self._consumer_group_heartbeat,  # KIP-848: consumer_group_service.py
            "consumer_group_describe": self._consumer_group_describe,
            "offset_delete": self._offset_delete,
        }
        self.peer_handlers: Mapping[str, Handler] = {}

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
                self._apply(self.core.unload(p))

    def on_image(self, image: MetadataImage) -> None:
        """Nothing to do: ownership follows the local replicas, find_coordinator reads the
        metadata service's image when asked."""

    def health(self) -> dict[str, Any]:
        return {"ok": True, **self.core.health(), "waiters": len(self._waiters)}

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

    def _wait_ms(self, request: Request, floor_ms: int = 0) -> int:
        asked = field(request, "timeout_ms", int, default=None, nullable=True, min_value=0)
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
                log_event(logger, "group_partition_loading", partition=p, epoch=r.leader_epoch)
                assert self._nursery is not None
                self._nursery.start_soon(self._load, p, r, r.leader_epoch)
            elif current is not None:
                del self._owned[p]
                self._apply(self.core.unload(p))
                log_event(logger, "group_partition_unloaded", partition=p)

    async def _load(self, p: int, r: InternalPartition, epoch: int) -> None:
        def ours() -> bool:
            return self._owned.get(p) == epoch and r.is_leader and r.leader_epoch == epoch

        started_ms = self._clock_ms()
        try:
            applied, offset = await replay_partition(r, ours, lambda records: self.core.load(p, records))
            if not ours():
                return
            self._apply(self.core.finish_load(p, self._clock_ms()))
            log_event(logger, "group_partition_loaded", partition=p, epoch=epoch, records=applied,
                      end_offset=offset, load_ms=self._clock_ms() - started_ms)
        except RaftlogError as exc:
            log_event(logger, "group_partition_load_failed", level=logging.WARNING, partition=p,
                      epoch=epoch, reason=str(exc))
            if self._owned.get(p) == epoch:
                del self._owned[p]
                self._load_failed_at_ms[p] = self._clock_ms()
                self._apply(self.core.unload(p))

    # ------------------------------------------------------------------ client ops

    async def _find_coordinator(self, request: Request) -> dict[str, Any]:
        group_id = field(request, "group_id", str)
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
        return {"node_id": state.leader, "host": host, "port": int(port), "partition": p}

    async def _join_group(self, request: Request) -> dict[str, Any]:
        protocols = []
        for i, d in enumerate(field(request, "protocols", list, items=dict)[:MAX_PROTOCOLS + 1]):
            protocols.append((field(d, "name", str, where=f"protocols[{i}]"),
                              field(d, "metadata", bytes, where=f"protocols[{i}]")))
        rebalance_timeout_ms = field(request, "rebalance_timeout_ms", int, min_value=1)
        result = self.core.join_group(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str, default=""),
            protocol_type=field(request, "protocol_type", str, default="consumer"),
            protocols=protocols,
            session_timeout_ms=field(request, "session_timeout_ms", int),
            rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            client_id=field(request, "client_id", str, default=""),
            client_host=field(request, "client_host", str, default=""),
            now_ms=self._clock_ms(),
        )
        return await self._answer(self._apply(result), self._wait_ms(request))

    async def _sync_group(self, request: Request) -> dict[str, Any]:
        raw = field(request, "assignments", list, items=dict, default=None, nullable=True)
        assignments = None
        if raw is not None:
            assignments = {
                field(d, "member_id", str, where=f"assignments[{i}]"):
                    field(d, "assignment", bytes, where=f"assignments[{i}]")
                for i, d in enumerate(raw)
            }
        result = self.core.sync_group(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str),
            generation_id=field(request, "generation_id", int),
            assignments=assignments,
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            protocol_type=field(request, "protocol_type", str, default=None, nullable=True),
            protocol_name=field(request, "protocol_name", str, default=None, nullable=True),
            now_ms=self._clock_ms(),
        )
        return await self._answer(self._apply(result), self._wait_ms(request))

    async def _heartbeat(self, request: Request) -> dict[str, Any]:
        result = self.core.heartbeat(
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str),
            generation_id=field(request, "generation_id", int),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            now_ms=self._clock_ms(),
        )
        return await self._answer(self._apply(result), 0)

    async def _leave_group(self, request: Request) -> dict[str, Any]:
        members = []
        for i, d in enumerate(field(request, "members", list, items=dict)):
            members.append((field(d, "member_id", str, default="", where=f"members[{i}]"),
                            field(d, "group_instance_id", str, default=None, nullable=True,
                                  where=f"members[{i}]")))
        result = self.core.leave_group(group_id=field(request, "group_id", str), members=members,
                                       now_ms=self._clock_ms())
        return await self._answer(self._apply(result), 0)

    async def _offset_commit(self, request: Request) -> dict[str, Any]:
        offsets = []
        for i, d in enumerate(field(request, "offsets", list, items=dict)):
            w = f"offsets[{i}]"
            offsets.append(CommitOffset(
                field(d, "topic", str, where=w), field(d, "partition", int, where=w),
                field(d, "offset", int, where=w),
                field(d, "leader_epoch", int, default=None, nullable=True, where=w),
                field(d, "metadata", str, default="", where=w),
            ))  # fmt: skip
        # Kafka (KafkaApis.handleOffsetCommitRequest) answers a partition its metadata does not
        # hold with UNKNOWN_TOPIC_OR_PARTITION and commits the others.
        image = self.metadata.image
        unknown = [{"topic": c.topic, "partition": c.partition,
                    "error": UnknownTopicOrPartitionError(f"{c.topic}-{c.partition} does not exist").to_wire()}
                   for c in offsets if image.partition(c.topic, c.partition) is None]
        if unknown:
            offsets = [c for c in offsets if image.partition(c.topic, c.partition) is not None]
            if not offsets:
                return {"partitions": unknown}
        result = self.core.offset_commit(
            group_id=field(request, "group_id", str),
            offsets=offsets,
            member_id=field(request, "member_id", str, default=""),
            generation_id=field(request, "generation_id", int, default=-1),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
            now_ms=self._clock_ms(),
        )
        answer = await self._answer(self._apply(result), self._wait_ms(request))
        return {**answer, "partitions": [*answer.get("partitions", []), *unknown]} if unknown else answer

    async def _offset_fetch(self, request: Request) -> dict[str, Any]:
        raw = field(request, "partitions", list, items=dict, default=None, nullable=True)
        parts = None if raw is None else [
            (field(d, "topic", str, where=f"partitions[{i}]"),
             field(d, "partition", int, where=f"partitions[{i}]"))
            for i, d in enumerate(raw)
        ]
        result = self.core.offset_fetch(group_id=field(request, "group_id", str), partitions=parts,
                                        member_id=field(request, "member_id", str, default=""),
                                        member_epoch=field(request, "member_epoch", int, default=-1))
        return await self._answer(self._apply(result), 0)

    async def _list_groups(self, request: Request) -> dict[str, Any]:
        states = field(request, "states", list, items=str, default=None, nullable=True)
        out = await self._answer(self._apply(self.core.list_groups(states)), 0)
        out["node_id"] = self.node_id
        return out

    async def _describe_groups(self, request: Request) -> dict[str, Any]:
        ids = field(request, "group_ids", list, items=str)
        if len(ids) > MAX_GROUP_IDS:
            raise InvalidRequestError(f"at most {MAX_GROUP_IDS} group ids", field="group_ids")
        return await self._answer(self._apply(self.core.describe_groups(ids)), 0)

    async def _delete_groups(self, request: Request) -> dict[str, Any]:
        ids = field(request, "group_ids", list, items=str)
        if len(ids) > MAX_GROUP_IDS:
            raise InvalidRequestError(f"at most {MAX_GROUP_IDS} group ids", field="group_ids")
        wait_ms = self._wait_ms(request)
        out = []
        for gid in ids:
            try:
                result = self.core.delete_group(group_id=gid, now_ms=self._clock_ms())
                await self._answer(self._apply(result), wait_ms)
                out.append({"group_id": gid})
            except RaftlogError as exc:
                wire = as_wire_error(exc)
                assert wire is not None
                out.append({"group_id": gid, "error": wire.to_wire()})
        return {"groups": out}

    async def _offset_delete(self, request: Request) -> dict[str, Any]:
        asked = [(field(d, "topic", str, where=f"partitions[{i}]"), field(d, "partition", int, where=f"partitions[{i}]"))
                 for i, d in enumerate(field(request, "partitions", list, items=dict))]
        # As for a commit, Kafka answers a partition its metadata does not hold with
        # UNKNOWN_TOPIC_OR_PARTITION and deletes the others.
        image = self.metadata.image
        unknown = [{"topic": t, "partition": p,
                    "error": UnknownTopicOrPartitionError(f"{t}-{p} does not exist").to_wire()}
                   for t, p in asked if image.partition(t, p) is None]
        known = [(t, p) for t, p in asked if image.partition(t, p) is not None]
        result = self.core.delete_offsets(group_id=field(request, "group_id", str), partitions=known,
                                          now_ms=self._clock_ms())
        answer = await self._answer(self._apply(result), self._wait_ms(request))
        return {**answer, "partitions": [*answer.get("partitions", []), *unknown]}

    async def _reset_offsets(self, request: Request) -> dict[str, Any]:
        offsets: dict[tuple[str, int], int] = {}
        for i, d in enumerate(field(request, "partitions", list, items=dict)):
            w = f"partitions[{i}]"
            offsets[(field(d, "topic", str, where=w), field(d, "partition", int, where=w))] = \
                field(d, "offset", int, where=w)
        result = self.core.reset_offsets(
            group_id=field(request, "group_id", str), offsets=offsets,
            dry_run=field(request, "dry_run", bool, default=False), now_ms=self._clock_ms(),
        )
        return await self._answer(self._apply(result), self._wait_ms(request))


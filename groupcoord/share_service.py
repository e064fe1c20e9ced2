"""Share groups (KIP-932) on a node: the share-group coordinator (membership, share_group.py)
and the share-partition leader (the in-flight windows, partition/share_partition.py), with
their durable state in `__share_group_state` (share_store.py).

The port (share_port.py `SharePort`; both listeners call it behind the ACL guard,
raftlog/node/guarded_share.py; the native ops below are its adapter, raftlog/node/native_share.py,
in PROTOCOL.md shapes):

    share_group_heartbeat {group_id, member_id, member_epoch, subscribed_topic_names?, rack_id?,
        client_id?}  -> {member_id, member_epoch, heartbeat_interval_ms, assignment: [{topic, partitions}] | null}
        on the group's coordinator (the leader of its `__consumer_offsets` partition, as
        find_coordinator says); elsewhere NOT_COORDINATOR.
    share_group_describe {group_ids} -> {groups}      share_groups_list {} -> {groups}  (this coordinator's)
    share_group_delete {group_id} -> {}   (also Kafka's DeleteGroups, through the group service's
        `share_groups` hook: an empty group, its share partitions' state deleted first)
    share_fetch {group_id, member_id, topic, partition, max_records, max_bytes?, auto_offset_reset?,
        acknowledgements? [[first_offset, last_offset, ack_type]]}
      -> {records: bytes (whole batches), acquired: [[first_offset, last_offset, delivery_count]],
          start_offset, high_watermark, acknowledge_error: error | null}
        on the partition's leader: applies the acknowledgements (all or none: a refused set is
        answered in `acknowledge_error`, as Kafka's AcknowledgeErrorCode, and the fetch goes on),
        then acquires records for the member; the member keeps only the records of `acquired`
        (the batches may hold others).
    share_acknowledge {group_id, member_id, topic, partition, acknowledgements} -> {start_offset}
    share_group_offsets {group_id, topic, partition} -> {start_offset | null, in_flight: [...], lag | null}
        (answered by the partition's leader: forwarded there from any node)
    share_group_reset {group_id, topic, partition, offset} -> {}   (the group must be empty; on
        any node: forwarded to the partition's leader)
    share_group_delete_offsets {group_id, topic} -> {}   (on the group's coordinator; the group
        must have no members: each partition's state is deleted on its leader)

Rules: a share fetch needs a member the coordinator knows with the partition assigned
(else UNKNOWN_MEMBER_ID / INVALID_REQUEST; a positive answer is remembered for MEMBER_CACHE_MS);
an acknowledgement of a record the member does not hold is INVALID_RECORD_STATE and changes
nothing; a group id a classic or consumer group holds is GROUP_ID_NOT_FOUND; a coordinator op
that finds no leader of its `__share_group_state` partition (its first use, a failover) is
COORDINATOR_LOAD_IN_PROGRESS, which clients retry (NOT_LEADER_OR_FOLLOWER is fatal in a heartbeat).

Ordering (persist before answering): every change of a share partition's window (acquire,
acknowledge, expired locks) is written to `__share_group_state` and committed before the
answer leaves, so an acknowledged record is never redelivered and a delivery count is never
lost, across leader failovers. A failed write answers the request with its error and drops
the in-memory window, which is rebuilt from the last durable state on next use.

Group configs (Kafka 4's; metadata/group_config.py, in the metadata image) take the place of
the broker's settings for their group, read at each use so a change applies from the next
heartbeat or acquisition: `share.session.timeout.ms` and `share.heartbeat.interval.ms` (the
membership), `share.record.lock.duration.ms`, `share.delivery.count.limit` and
`share.partition.max.record.locks` (the window), `share.auto.offset.reset` (latest or
earliest: where a share partition without state starts; absent, what the fetch names,
`auto_offset_reset`; by_duration:<d> is stored and starts at the latest offset here, as
raftlog's share leader has no timestamp lookup).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from dataclasses import replace

import trio

from groupcoord.internal_topic import Coordinated, InternalPartition, InternalTopics, ShareMetadataView
from groupcoord.records import MAX_GROUP_ID_CHARS
from groupcoord.settings import ShareServiceSettings
from groupcoord.port import TopicPartitions
from groupcoord.share_group import ShareGroupConfig, ShareGroups
from groupcoord.share_port import (
    AcquiredRecords,
    InFlightRecords,
    ShareAck,
    ShareAcknowledge,
    ShareFetch,
    ShareFetched,
    ShareGroupDescription,
    ShareGroupListing,
    ShareHeartbeat,
    ShareHeartbeatAnswer,
    ShareMember,
    SharePartitionOffsets,
    ShareReset,
)
from groupcoord.share_state import MembersKey, ShareKey, encode_members, encode_value
from groupcoord.share_store import ShareStateStore
from partition.batch import iter_headers
from metadata import group_config
from partition.share_partition import Acknowledgement, AckType, SharePartition, ShareSettings
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    InvalidRecordStateError,
    InvalidRequestError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderError,
    RaftlogError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS, OFFSETS_TOPIC, partition_for_group

__all__ = ["ShareService"]

MEMBER_CACHE_MS: Final = 5_000
MAX_FETCH_BYTES: Final = 8 << 20
MAX_RECORDS: Final = 10_000
MAX_GROUP_IDS: Final = 1000
PEER_TIMEOUT_S: Final = 5.0
# A control for the fault tests only (jepsen_style_tests, the share workload): nodes started
# with RAFTLOG_UNSAFE_SHARE_REDELIVER_ACCEPTED=1 apply every ACCEPT as a RELEASE, so accepted
# records come back; the share checker must find it out. Never set it anywhere else.
_UNSAFE_REDELIVER_ACCEPTED: Final = os.environ.get("RAFTLOG_UNSAFE_SHARE_REDELIVER_ACCEPTED") == "1"


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ShareService:
    """See the module docstring. Implements `SharePort` (share_port.py). `topics` is the node's partitions through the coordinators'
    seam (internal_topic.py; None on a node that is not a broker); `groups` is the node's
    GroupCoordinatorService (which `__consumer_offsets` partitions this node coordinates, and
    the other protocols' groups)."""

    name = "share"

    def __init__(self, settings: ShareServiceSettings, metadata: ShareMetadataView, topics: InternalTopics | None,
                 peers: PeerPool, groups: Coordinated, *,
                 clock_ms: Callable[[], int] = _wall_ms, rng: random.Random | None = None) -> None:
        self.node_id: int = settings.node_id
        self.metadata, self.topics, self.peers, self.groups = metadata, topics, peers, groups
        self._clock_ms = clock_ms
        self.settings = settings.partitions
        self.members = ShareGroups(settings.groups, rng)
        self.members.config_of = self._group_membership_config
        self.store = ShareStateStore(self.node_id, metadata, topics, peers)
        self._windows: dict[ShareKey, tuple[int, SharePartition]] = {}  # key -> (leader epoch, window)
        self._locks: dict[ShareKey, trio.Lock] = {}
        self._member_ok: dict[tuple[str, str, str], int] = {}  # (group, member, topic) -> until ms
        self._loaded: set[str] = set()  # groups whose persisted membership this coordinator has read
        self._membership = trio.Lock()  # a membership change and its write, one at a time
        # The client ops are the port's (share_port.py SharePort): their native adapter is
        # raftlog/node/native_share.py.
        self.client_handlers: Mapping[str, Any] = {}
        self.peer_handlers = {**self.store.peer_handlers, "share_member_check": self._member_check,
                              "share_partition_reset": self._peer_reset,
                              "share_partition_delete": self._peer_delete_partition,
                              "share_partition_offsets": self._peer_offsets}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:  # session expiry of share members (their locks run out on the leaders)
            async with self._membership:
                befores = {g: self.members.snapshot(g) for g in self.members.groups}
                gone = self.members.expire(self._clock_ms(), self._topics())
                for group_id in sorted({g for g, _ in gone}):
                    try:
                        await self._save(group_id, befores.get(group_id))
                    except RaftlogError:  # written with the group's next change
                        pass
            self._forget_moved_groups()
            await trio.sleep(1.0)

    def _forget_moved_groups(self) -> None:
        """Drop the groups whose `__consumer_offsets` partition this node no longer leads: the
        new coordinator has them now (it reads their membership from `__share_group_state`)."""
        for gid in [g for g in self.members.groups if not self.groups.core.is_active(partition_for_group(g))]:
            del self.members.groups[gid]
        self._loaded = {g for g in self._loaded if self.groups.core.is_active(partition_for_group(g))}

    async def _load(self, group_id: str) -> None:
        """Take a group over from its persisted membership, once per coordinator term (a
        group this coordinator already holds, or has looked for, is left as it is)."""
        if group_id in self.members.groups or group_id in self._loaded:
            return
        try:
            snapshot = await self.store.read(MembersKey(group_id))
        except NotLeaderError as exc:  # the state partition's leader moved: the client retries
            raise CoordinatorLoadInProgressError(f"share group {group_id}: {exc.message}") from exc
        if len(self._loaded) > 100_000:
            self._loaded.clear()
        self._loaded.add(group_id)
        if snapshot is not None and group_id not in self.members.groups:
            self.members.restore(group_id, snapshot, now_ms=self._clock_ms(), topics=self._topics())

    async def _save(self, group_id: str, before: dict[str, Any] | None) -> None:
        """Persist the group's membership if it changed since `before` (committed on return)."""
        after = self.members.snapshot(group_id)
        if after == before:
            return
        try:
            await self.store.write({MembersKey(group_id): None if after is None else encode_members(after)})
        except BaseException as exc:  # memory is ahead of the log: read the group again on next use
            self.members.groups.pop(group_id, None)
            self._loaded.discard(group_id)
            if isinstance(exc, NotLeaderError):  # of the state partition: the client retries
                raise CoordinatorLoadInProgressError(f"share group {group_id}: {exc.message}") from exc
            raise

    def on_image(self, image: Any) -> None:
        """Nothing: leadership is read from the replicas when a request comes."""

    def health(self) -> dict[str, Any]:
        return {"ok": True, "share_groups": len(self.members.groups), "share_partitions": len(self._windows)}

    def busy_partitions(self) -> list[dict[str, Any]]:
        return self.store.busy_partitions()

    async def drain(self) -> None:
        return None

    # ---- the coordinator ----

    def _topics(self) -> dict[str, int]:
        image = self.metadata.image
        out: dict[str, int] = {}
        for name in image.topic_names(include_internal=False):
            t = image.topic(name)
            if t is not None and t.complete and not name.startswith("__"):
                out[name] = t.partition_count
        return out

    def _check_coordinator(self, group_id: str) -> None:
        if not self.groups.core.is_active(partition_for_group(group_id)):
            raise NotCoordinatorError(f"node {self.node_id} does not coordinate group {group_id}")

    async def share_group_heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatAnswer:
        group_id = request.group_id
        self._check_coordinator(group_id)
        await self._load(group_id)
        core = self.groups.core
        async with self._membership:
            before = self.members.snapshot(group_id)
            beat = self.members.heartbeat(
                group_id=group_id, member_id=request.member_id, member_epoch=request.member_epoch,
                now_ms=self._clock_ms(), topics=self._topics(), subscribed_topic_names=request.subscribed_topic_names,
                rack_id=request.rack_id, client_id=request.client_id, client_host=request.client_host,
                other_protocol=core.group(group_id) is not None or core.consumer_group(group_id) is not None)
            await self._save(group_id, before)
        return ShareHeartbeatAnswer(beat.member_id, beat.member_epoch, beat.heartbeat_interval_ms,
                                    None if beat.assignment is None else _topic_partitions(beat.assignment))

    async def share_group_describe(self, group_ids: Sequence[str]) -> list[ShareGroupDescription]:
        if len(group_ids) > MAX_GROUP_IDS:
            raise InvalidRequestError(f"at most {MAX_GROUP_IDS} group ids", field="group_ids")
        for gid in group_ids:
            self._check_coordinator(gid)
            await self._load(gid)
        out = []
        for g in self.members.describe(group_ids):
            if g.get("error") is not None:
                out.append(ShareGroupDescription(g["group_id"], error=error_from_wire(g["error"])))
                continue
            out.append(ShareGroupDescription(
                g["group_id"], g["state"], g["group_epoch"], g["assignment_epoch"], g["assignor"],
                [ShareMember(m["member_id"], m["rack_id"], m["member_epoch"], m["client_id"], m["client_host"],
                             list(m["subscribed_topic_names"]), _topic_partitions(m["assignment"]))
                 for m in g["members"]]))
        return out

    async def share_groups_list(self) -> list[ShareGroupListing]:
        """This coordinator's share groups, with those it took over and was not asked for yet
        (read from `__share_group_state`: a leadership move does not hide a group)."""
        self._forget_moved_groups()
        try:
            for gid in await self.store.member_groups():
                if self.groups.core.is_active(partition_for_group(gid)):
                    await self._load(gid)
        except RaftlogError:  # a state partition electing: the groups this coordinator holds
            pass
        return [ShareGroupListing(g["group_id"], g["state"], g["members"]) for g in self.members.list()]

    async def share_group_delete(self, group_id: str) -> None:
        if not await self.delete_share_group(group_id):
            raise GroupIdNotFoundError(f"no share group {group_id}")

    async def delete_share_group(self, group_id: str) -> bool:
        """DeleteGroups of a share group (and the native share_group_delete): forget an empty
        share group, committed before the answer. False when no share group has that id.
        Raises NonEmptyGroupError, NotCoordinatorError, CoordinatorLoadInProgressError."""
        self._check_coordinator(group_id)
        await self._load(group_id)
        async with self._membership:
            g = self.members.groups.get(group_id)
            if g is None:
                return False
            if g.members:
                raise NonEmptyGroupError(f"share group {group_id} has {len(g.members)} members")
            # Its share partitions' state first (on their leaders), as Kafka's delete of the
            # share-group state: a group of the same id starts again from share.auto.offset.reset.
            try:
                for key in await self.store.group_keys(group_id):
                    if self.metadata.image.partition(key.topic, key.partition) is None:  # topic deleted
                        await self.store.write({key: None})
                    else:
                        await self._delete_partition(key)
            except NotLeaderError as exc:  # a leader moved meanwhile: the client retries
                raise CoordinatorLoadInProgressError(f"share group {group_id}: {exc.message}") from exc
            before = self.members.snapshot(group_id)
            self.members.delete(group_id)
            await self._save(group_id, before)
        return True

    async def _member_check(self, request: Request) -> dict[str, Any]:
        group_id = field(request, "group_id", str)
        self._check_coordinator(group_id)
        await self._load(group_id)
        return {"member": self.members.is_member(group_id, field(request, "member_id", str)),
                "assigned": self.members.may_fetch(group_id, field(request, "member_id", str),
                                                   field(request, "topic", str), field(request, "partition", int))}

    async def _require_member(self, group_id: str, member_id: str, topic: str, partition: int) -> None:
        """Raises UnknownMemberIdError / InvalidRequestError (not assigned) / NotCoordinatorError."""
        now_ms = self._clock_ms()
        if self._member_ok.get((group_id, member_id, topic), 0) > now_ms:
            return
        p = partition_for_group(group_id)
        fields = {"group_id": group_id, "member_id": member_id, "topic": topic, "partition": partition}
        if self.groups.core.is_active(p):
            answer: Mapping[str, Any] = await self._member_check(Request(0, "share_member_check", fields))
        else:
            state = self.metadata.image.partition(OFFSETS_TOPIC, p)
            address = None if state is None or state.reported_leader < 0 else self.metadata.peer_address(state.leader)
            if address is None:
                raise NotCoordinatorError(f"no coordinator of group {group_id} known")
            answer = await self.peers.call(address, "share_member_check", fields, timeout_s=PEER_TIMEOUT_S) or {}
        if not answer.get("member"):
            raise UnknownMemberIdError(f"member {member_id} is not in share group {group_id}")
        if not answer.get("assigned"):
            raise InvalidRequestError(f"{topic}-{partition} is not assigned to member {member_id}", field="partition")
        if len(self._member_ok) > 100_000:
            self._member_ok.clear()
        self._member_ok[(group_id, member_id, topic)] = now_ms + MEMBER_CACHE_MS

    # ---- the share-partition leader ----

    def _replica(self, topic: str, partition: int) -> InternalPartition:
        r = None if self.topics is None else self.topics.partition(topic, partition)
        if r is None or not r.is_leader:
            raise NotLeaderError(f"node {self.node_id} does not lead {topic}-{partition}")
        return r

    def _group_configs(self, group_id: str) -> Mapping[str, str]:
        return self.metadata.image.group_configs.get(group_id, {})

    def _group_membership_config(self, group_id: str) -> ShareGroupConfig:
        base, configs = self.members.config, self._group_configs(group_id)
        if not configs:
            return base
        return replace(base, session_timeout_ms=int(group_config.value(
            configs, "share.session.timeout.ms", base.session_timeout_ms)), heartbeat_interval_ms=int(
            group_config.value(configs, "share.heartbeat.interval.ms", base.heartbeat_interval_ms)))

    def _window_settings(self, group_id: str) -> ShareSettings:
        """The broker's share-partition settings with the group's own values over them."""
        base, configs = self.settings, self._group_configs(group_id)
        if not configs:
            return base
        return replace(
            base,
            record_lock_duration_ms=int(group_config.value(
                configs, "share.record.lock.duration.ms", base.record_lock_duration_ms)),
            delivery_count_limit=int(group_config.value(
                configs, "share.delivery.count.limit", base.delivery_count_limit)),
            max_record_locks=int(group_config.value(
                configs, "share.partition.max.record.locks", base.max_record_locks)))

    def _auto_offset_reset(self, group_id: str, asked: str) -> str:
        reset = str(group_config.value(self._group_configs(group_id), "share.auto.offset.reset", asked))
        return "latest" if reset.startswith("by_duration:") else reset

    async def _window(self, key: ShareKey, r: InternalPartition, reset: str) -> SharePartition:
        """The window of `key` on this leader, loaded from `__share_group_state` on first use
        in this leader epoch (or started per `reset`, else the group's share.auto.offset.reset,
        when there is no state), with the group's settings of now."""
        have = self._windows.get(key)
        if have is not None and have[0] == r.leader_epoch:
            have[1].settings = self._window_settings(key.group)
            return have[1]
        reset = self._auto_offset_reset(key.group, reset)
        epoch = int(r.leader_epoch)
        snapshot = await self.store.read(key, leader_epoch=epoch)  # older leaders are fenced from now on
        if snapshot is not None:
            sp = SharePartition.restore(snapshot, self._window_settings(key.group))
        else:
            start = r.log_start_offset if reset == "earliest" else r.high_watermark
            sp = SharePartition(start, self._window_settings(key.group))
        sp.move_start(r.log_start_offset)  # retention may have moved past it
        self._windows[key] = (epoch, sp)
        return sp

    async def _persist(self, key: ShareKey, sp: SharePartition, version: int) -> None:
        if sp.version == version:
            return
        epoch = self._windows[key][0]  # the epoch `_window` loaded `sp` in, under the same key lock
        try:
            await self.store.write({key: encode_value(sp.snapshot() | {"leader_epoch": epoch})}, leader_epoch=epoch)
        except BaseException:
            self._windows.pop(key, None)  # rebuilt from the last durable state on next use
            raise

    @staticmethod
    def _acks(acks: Sequence[ShareAck]) -> list[Acknowledgement]:
        out = []
        for i, a in enumerate(acks):
            if a.type not in (0, 1, 2, 3):
                raise InvalidRequestError(f"acknowledgements[{i}] must be [first, last, type 0-3]",
                                          field="acknowledgements")
            kind = AckType(a.type)
            if _UNSAFE_REDELIVER_ACCEPTED and kind is AckType.ACCEPT:
                kind = AckType.RELEASE
            out.append(Acknowledgement(a.first_offset, a.last_offset, kind))
        return out

    @staticmethod
    def _key(group: str, topic: str, partition: int) -> ShareKey:
        """(group, topic, partition), checked as `__share_group_state` keys are (a key its
        replay would refuse must never be written). Raises InvalidRequestError."""
        if not 1 <= len(group) <= MAX_GROUP_ID_CHARS:
            raise InvalidRequestError(f"group id must be 1-{MAX_GROUP_ID_CHARS} characters", field="group_id")
        if not 1 <= len(topic) <= MAX_TOPIC_NAME_CHARS:
            raise InvalidRequestError(f"topic must be 1-{MAX_TOPIC_NAME_CHARS} characters", field="topic")
        if not 0 <= partition <= 2**31 - 1:
            raise InvalidRequestError("partition must be 0 to 2**31 - 1", field="partition")
        return ShareKey(group, topic, partition)

    @classmethod
    def _share_key(cls, request: Request) -> ShareKey:
        """A peer request's (group, topic, partition), checked as `_key`."""
        return cls._key(field(request, "group_id", str), field(request, "topic", str),
                        field(request, "partition", int))

    async def share_fetch(self, request: ShareFetch) -> ShareFetched:
        key, member_id = self._key(request.group_id, request.topic, request.partition), request.member_id
        max_records, max_bytes, reset = request.max_records, request.max_bytes, request.auto_offset_reset
        if not 1 <= max_records <= MAX_RECORDS:
            raise InvalidRequestError(f"max_records must be 1-{MAX_RECORDS}", field="max_records")
        if not 1 <= max_bytes <= MAX_FETCH_BYTES:
            raise InvalidRequestError(f"max_bytes must be 1-{MAX_FETCH_BYTES}", field="max_bytes")
        if reset not in ("latest", "earliest"):
            raise InvalidRequestError("auto_offset_reset is latest or earliest", field="auto_offset_reset")
        acks = self._acks(request.acknowledgements)
        r = self._replica(key.topic, key.partition)
        await self._require_member(key.group, member_id, key.topic, key.partition)
        async with self._locks.setdefault(key, trio.Lock()):
            sp = await self._window(key, r, reset)
            version = sp.version
            now_ms = self._clock_ms()
            ack_error: RaftlogError | None = None
            if acks:  # as Kafka: a refused acknowledgement is answered beside the fetch's records
                try:
                    sp.acknowledge(member_id, acks, now_ms=now_ms)
                except (InvalidRecordStateError, InvalidRequestError) as exc:
                    ack_error = exc
            sp.expire(now_ms)
            sp.move_start(r.log_start_offset)  # retention or delete_records moved the log start
            offset = sp.next_fetch_offset()
            data, end = b"", offset
            if offset < r.high_watermark:
                data = await r.read_committed(offset, max_bytes)
                for _, h in iter_headers(data, verify=False):
                    end = h.next_offset
            runs = sp.acquire(member_id, high_watermark=min(end, r.high_watermark), max_records=max_records,
                              now_ms=now_ms)
            await self._persist(key, sp, version)
            return ShareFetched(bytes(data) if runs else b"",
                                [AcquiredRecords(a.first_offset, a.last_offset, a.delivery_count) for a in runs],
                                sp.start_offset, r.high_watermark, ack_error)

    async def share_acknowledge(self, request: ShareAcknowledge) -> int:
        """The share partition's start offset once the acknowledgements are durable."""
        key, member_id = self._key(request.group_id, request.topic, request.partition), request.member_id
        acks = self._acks(request.acknowledgements)
        r = self._replica(key.topic, key.partition)
        async with self._locks.setdefault(key, trio.Lock()):
            sp = await self._window(key, r, "latest")
            version = sp.version
            sp.acknowledge(member_id, acks, now_ms=self._clock_ms())
            await self._persist(key, sp, version)
            return sp.start_offset

    async def share_group_offsets(self, group_id: str, topic: str, partition: int) -> SharePartitionOffsets:
        """On the partition's leader (forwarded there from any node): the share partition's
        start offset, its window, and its lag (records from the start offset to the high
        watermark not yet acknowledged or archived; None without state)."""
        key = self._key(group_id, topic, partition)
        if not self._leads(key) and self.metadata.image.partition(key.topic, key.partition) is not None:
            try:
                o = await self._forward(key, "share_partition_offsets", _key_fields(key))
                return SharePartitionOffsets(o.get("start_offset"), _in_flight(o.get("in_flight") or ()), o.get("lag"))
            except NotLeaderError:
                pass  # no leader now: the durable start offset, without lag
        r = self.topics.partition(key.topic, key.partition) if self.topics is not None and self._leads(key) else None
        have = self._windows.get(key)
        if have is not None and r is not None and have[0] == r.leader_epoch:
            start, in_flight = have[1].start_offset, have[1].in_flight()
        else:
            snapshot = await self.store.read(key)
            start, in_flight = (None, []) if snapshot is None else (snapshot["start_offset"], [])
        lag = None
        if start is not None and r is not None:
            done = sum(row["last_offset"] - row["first_offset"] + 1 for row in in_flight
                       if row["state"] in ("ACKNOWLEDGED", "ARCHIVED"))
            lag = max(0, r.high_watermark - start - done)
        return SharePartitionOffsets(start, _in_flight(in_flight), lag)

    async def _peer_offsets(self, request: Request) -> dict[str, Any]:
        """Peer op share_partition_offsets: `share_group_offsets` on the partition's leader."""
        key = self._share_key(request)
        o = await self.share_group_offsets(key.group, key.topic, key.partition)
        return {"start_offset": o.start_offset, "lag": o.lag, "in_flight": [
            {"first_offset": r.first_offset, "last_offset": r.last_offset, "state": r.state,
             "delivery_count": r.delivery_count, "member_id": r.member_id} for r in o.in_flight]}

    async def share_group_reset(self, request: ShareReset) -> None:
        key, offset = self._key(request.group_id, request.topic, request.partition), request.offset
        if offset < 0:
            raise InvalidRequestError("offset must be at least 0", field="offset")
        if not self._leads(key):
            await self._forward(key, "share_partition_reset", {**_key_fields(key), "offset": offset})
            return
        r = self._replica(key.topic, key.partition)
        async with self._locks.setdefault(key, trio.Lock()):
            sp = await self._window(key, r, "latest")
            version = sp.version
            sp.reset(min(max(offset, r.log_start_offset), r.high_watermark))
            await self._persist(key, sp, version)

    async def _peer_reset(self, request: Request) -> dict[str, Any]:
        """Peer op share_partition_reset: `share_group_reset` on the partition's leader."""
        key = self._share_key(request)
        await self.share_group_reset(ShareReset(key.group, key.topic, key.partition, field(request, "offset", int)))
        return {}

    async def _peer_delete_partition(self, request: Request) -> dict[str, Any]:
        """Peer op share_partition_delete: `_delete_partition` on the partition's leader."""
        await self._delete_partition(self._share_key(request))
        return {}

    async def _delete_partition(self, key: ShareKey) -> None:
        """Forget a share partition's state (DeleteShareGroupOffsets), on its leader; refused
        (INVALID_RECORD_STATE) while records are acquired."""
        if not self._leads(key):
            await self._forward(key, "share_partition_delete", _key_fields(key))
            return
        self._replica(key.topic, key.partition)
        async with self._locks.setdefault(key, trio.Lock()):
            have = self._windows.get(key)
            if have is not None and have[1].acquired_count():
                raise InvalidRecordStateError("records are acquired: the share group is not empty")
            await self.store.write({key: None})
            self._windows.pop(key, None)

    async def share_group_delete_offsets(self, group_id: str, topic: str) -> None:
        """DeleteShareGroupOffsets of one topic: on the group's coordinator, the group must have
        no members; each partition's state is forgotten on its leader."""
        self._check_coordinator(group_id)
        await self._load(group_id)
        g = self.members.groups.get(group_id)
        if g is not None and g.members:
            raise NonEmptyGroupError(f"share group {group_id} has {len(g.members)} members")
        t = self.metadata.image.topic(topic)
        if t is None:
            raise UnknownTopicOrPartitionError(f"no topic {topic}")
        for p in range(t.partition_count):
            await self._delete_partition(self._key(group_id, topic, p))

    def _leads(self, key: ShareKey) -> bool:
        r = None if self.topics is None else self.topics.partition(key.topic, key.partition)
        return r is not None and r.is_leader

    async def _forward(self, key: ShareKey, op: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Run a share-partition op on the partition's leader (peer ops share_partition_*)."""
        state = self.metadata.image.partition(key.topic, key.partition)
        address = None if state is None or state.reported_leader < 0 else self.metadata.peer_address(state.leader)
        if address is None or state is None or state.leader == self.node_id:
            raise NotLeaderError(f"no leader of {key.topic}-{key.partition} known")
        return dict(await self.peers.call(address, op, dict(fields), timeout_s=PEER_TIMEOUT_S) or {})


def _key_fields(key: ShareKey) -> dict[str, Any]:
    return {"group_id": key.group, "topic": key.topic, "partition": key.partition}


def _topic_partitions(rows: Sequence[Mapping[str, Any]]) -> list[TopicPartitions]:
    return [TopicPartitions(a["topic"], list(a["partitions"])) for a in rows]


def _in_flight(rows: Sequence[Mapping[str, Any]]) -> list[InFlightRecords]:
    return [InFlightRecords(r["first_offset"], r["last_offset"], r["state"], r["delivery_count"], r["member_id"])
            for r in rows]


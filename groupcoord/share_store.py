"""The share coordinator's shell (KIP-932): the durable state of share partitions in the
compacted, Raft-replicated internal topic `__share_group_state` (records: share_state.py).

A share-partition leader (share_service.py) reads a share partition's state when it starts
serving it (`read`) and writes every change before it answers (`write`); both go to the
leader of the `__share_group_state` partition that holds the key: locally when this node
leads it, else over the peer ops `share_state_read` / `share_state_write`, which this class
serves on that leader (`peer_handlers`). The leader keeps the replayed image of each state
partition it leads and replays what was appended since on each read, so a new leader of a
state partition rebuilds from the log (failover).

Ordering: `write` returns when the records are committed (acks=all): only then does the
share-partition leader answer an acknowledgement or hand out acquired records.

Fencing (Kafka's leaderEpoch of Read/WriteShareGroupState): a share-partition leader reads and
writes with its replica's leader epoch. A read with a newer epoch than the stored value's
writes the value again under the new epoch before answering, so from then on a write from an
older leader (one that was paused or cut off and still believes it leads: its queued requests
run when it resumes) is refused with FENCED_LEADER_EPOCH instead of putting back a window the
new leader has moved past (records accepted there handed out again). The check and the append
happen under one lock per state partition, against the committed image and the epochs of the
writes appended since.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

import trio

from groupcoord.internal_topic import InternalPartition, InternalTopics, ShareMetadataView
from groupcoord.partition_load import wait_caught_up
from groupcoord.share_state import (
    SHARE_STATE_TOPIC,
    SHARE_STATE_TOPIC_PARTITIONS,
    ShareKey,
    ShareStateImage,
    StateKey,
    decode_key,
    encode_key,
    encode_value,
    partition_for_share,
)
from partition.batch import BatchBuilder
from partition.keyed import keyed_records
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderError,
    RaftlogError,
)
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field
from raftlog.base.topics import busy_row

__all__ = ["ShareStateStore", "SHARE_STATE_REPLICATION_FACTOR_MAX"]

SHARE_STATE_REPLICATION_FACTOR_MAX: Final = 3
READ_CHUNK_BYTES: Final = 1 << 20
COMMIT_TIMEOUT_S: Final = 10.0
PEER_TIMEOUT_S: Final = 10.0
LEADER_WAIT_S: Final = 5.0  # a state partition's election, within a client's request timeout
MAX_WRITE_RECORDS: Final = 10_000


class ShareStateStore:
    """See the module docstring. `metadata` is the node's metadata service (image,
    client_address, the `create_topic` handler), `replicas` its ReplicaManager, `peers` its
    PeerPool. Concurrency: trio-thread only; one lock per state partition orders replay."""

    def __init__(self, node_id: int, metadata: ShareMetadataView, topics: InternalTopics | None,
                 peers: PeerPool) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.topics = topics
        self.peers = peers
        self._images: dict[int, tuple[int, int, ShareStateImage]] = {}  # p -> (leader epoch, next offset, image)
        self._locks: dict[int, trio.Lock] = {}
        self._write_locks: dict[int, trio.Lock] = {}
        # p -> (its leader epoch here, {share key: the newest share-leader epoch read or written})
        self._fences: dict[int, tuple[int, dict[ShareKey, int]]] = {}
        self.peer_handlers = {"share_state_read": self._peer_read, "share_state_write": self._peer_write,
                              "share_state_group": self._peer_group, "share_state_groups": self._peer_groups}

    # ---- used by the share-partition leader ----

    async def ensure_topic(self) -> int:
        """Create `__share_group_state` (compacted) unless it exists; its partition count."""
        image = self.metadata.image
        t = image.topic(SHARE_STATE_TOPIC)
        if t is not None and t.complete:  # its leaders may be electing: _call waits for one
            return int(t.partition_count)
        rf = max(1, min(SHARE_STATE_REPLICATION_FACTOR_MAX, len(image.brokers)))
        try:
            await self.metadata.create_topic(SHARE_STATE_TOPIC, partitions=SHARE_STATE_TOPIC_PARTITIONS,
                                             replication_factor=rf, configs={"cleanup_policy": "compact"},
                                             timeout_ms=10_000)
        except RaftlogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
        with trio.move_on_after(COMMIT_TIMEOUT_S):
            while True:
                t = self.metadata.image.topic(SHARE_STATE_TOPIC)
                if t is not None and t.complete and all(self._leader(p) is not None for p in range(t.partition_count)):
                    return int(t.partition_count)
                await trio.sleep(0.05)  # polling the image: it has no change event to wait on
        raise CoordinatorLoadInProgressError(f"{SHARE_STATE_TOPIC} has no leaders yet")

    async def read(self, key: StateKey, leader_epoch: int | None = None) -> dict[str, Any] | None:
        """The latest persisted state of `key` (None: never written or deleted). With the
        reading share-partition leader's `leader_epoch`, older leaders are fenced from then on
        (the module docstring); raises FencedLeaderEpochError when a newer one read or wrote."""
        p = partition_for_share(key, await self.ensure_topic())
        if self._leads(p):
            return await self._read_fenced(p, key, leader_epoch)
        fields: dict[str, Any] = {"partition": p, "key": encode_key(key)}
        if leader_epoch is not None:
            fields["leader_epoch"] = leader_epoch
        answer = await self._call(p, "share_state_read", fields)
        state = answer.get("state")
        return None if state is None else dict(state)

    async def write(self, records: Mapping[StateKey, bytes | None], leader_epoch: int | None = None) -> None:
        """Persist `records` (encoded values; None deletes) and return once committed. With
        the writing share-partition leader's `leader_epoch`, refused (FencedLeaderEpochError,
        nothing written) when a newer leader has read or written one of the keys.
        Raises NotLeaderError / RequestTimedOutError / RaftlogError: the outcome is then
        unknown and the caller must not answer as if it were durable."""
        count = await self.ensure_topic()
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for key, value in records.items():
            by_partition.setdefault(partition_for_share(key, count), []).append((encode_key(key), value))
        for p, recs in sorted(by_partition.items()):
            if self._leads(p):
                await self._append(p, recs, leader_epoch)
            else:
                fields: dict[str, Any] = {"partition": p, "records": [[k, v] for k, v in recs]}
                if leader_epoch is not None:
                    fields["leader_epoch"] = leader_epoch
                await self._call(p, "share_state_write", fields)

    async def group_keys(self, group: str) -> list[ShareKey]:
        """Every share partition of `group` with persisted state (DeleteGroups of a share group
        forgets them): asked of each state partition's leader, in key order."""
        count = await self.ensure_topic()
        keys: set[ShareKey] = set()
        for p in range(count):
            if self._leads(p):
                keys |= set((await self._replayed(p)).group_states(group))
            else:
                answer = await self._call(p, "share_state_group", {"partition": p, "group": group})
                keys |= {ShareKey(group, str(t), int(n)) for t, n in answer.get("partitions") or ()}
        return sorted(keys, key=lambda k: (k.topic, k.partition))

    async def member_groups(self) -> list[str]:
        """The ids of every share group with persisted membership (a new coordinator lists the
        groups it took over before any is asked for): asked of each state partition's leader.
        Without the topic, none (a listing does not create it)."""
        t = self.metadata.image.topic(SHARE_STATE_TOPIC)
        if t is None or not t.complete:
            return []
        count = int(t.partition_count)
        ids: set[str] = set()
        for p in range(count):
            if self._leads(p):
                ids |= {k.group for k in (await self._replayed(p)).members}
            else:
                answer = await self._call(p, "share_state_groups", {"partition": p})
                ids |= {str(g) for g in answer.get("groups") or ()}
        return sorted(ids)

    # ---- served on the state partition's leader ----

    async def _peer_groups(self, request: Request) -> dict[str, Any]:
        p = field(request, "partition", int, min_value=0)
        if not self._leads(p):
            raise NotLeaderError(f"node {self.node_id} does not lead {SHARE_STATE_TOPIC}-{p}")
        return {"groups": sorted(k.group for k in (await self._replayed(p)).members)}

    async def _peer_group(self, request: Request) -> dict[str, Any]:
        p = field(request, "partition", int, min_value=0)
        group = field(request, "group", str)
        if not self._leads(p):
            raise NotLeaderError(f"node {self.node_id} does not lead {SHARE_STATE_TOPIC}-{p}")
        return {"partitions": [[k.topic, k.partition] for k in (await self._replayed(p)).group_states(group)]}

    async def _peer_read(self, request: Request) -> dict[str, Any]:
        p = field(request, "partition", int, min_value=0)
        key = decode_key(field(request, "key", bytes))
        leader_epoch = field(request, "leader_epoch", int, default=None, nullable=True, min_value=0)
        if not self._leads(p):
            raise NotLeaderError(f"node {self.node_id} does not lead {SHARE_STATE_TOPIC}-{p}")
        return {"state": await self._read_fenced(p, key, leader_epoch)}

    async def _peer_write(self, request: Request) -> dict[str, Any]:
        p = field(request, "partition", int, min_value=0)
        raw = field(request, "records", list, items=list)
        if not raw or len(raw) > MAX_WRITE_RECORDS:
            raise InvalidRequestError(f"1 to {MAX_WRITE_RECORDS} records", field="records")
        recs = []
        for i, r in enumerate(raw):
            if len(r) != 2 or not isinstance(r[0], bytes) or not (r[1] is None or isinstance(r[1], bytes)):
                raise InvalidRequestError(f"records[{i}] must be [key, value|null]", field="records")
            decode_key(r[0])
            recs.append((r[0], r[1]))
        await self._append(p, recs, field(request, "leader_epoch", int, default=None, nullable=True, min_value=0))
        return {}

    # ---- inside ----

    def busy_partitions(self) -> list[dict[str, Any]]:
        """The state partitions led here whose image is being built for a new leader epoch
        (replayed): a replica move must not take them now (metadata/reassignment.py "Busy
        coordinators"), as the broker heartbeat carries them."""
        out = []
        for p, lock in sorted(self._locks.items()):
            r = self._replica(p)
            cached = self._images.get(p)
            if lock.locked() and r is not None and r.is_leader and (cached is None or cached[0] != int(r.leader_epoch)):
                out.append(busy_row(SHARE_STATE_TOPIC, p, CoordinatorLoadInProgressError(
                    f"the share coordinator is replaying {SHARE_STATE_TOPIC}-{p}")))
        return out

    def _replica(self, p: int) -> InternalPartition | None:
        return None if self.topics is None else self.topics.partition(SHARE_STATE_TOPIC, p)

    def _leads(self, p: int) -> bool:
        r = self._replica(p)
        return r is not None and r.is_leader

    def _leader(self, p: int) -> int | None:
        state = self.metadata.image.partition(SHARE_STATE_TOPIC, p)
        return None if state is None or state.reported_leader < 0 else int(state.reported_leader)

    async def _call(self, p: int, op: str, fields: dict[str, Any]) -> Mapping[str, Any]:
        return await self.peers.call(await self._leader_address(p), op, fields, timeout_s=PEER_TIMEOUT_S) or {}

    async def _leader_address(self, p: int) -> str:
        """The peer address of state partition `p`'s leader, waiting up to LEADER_WAIT_S while
        it is elected (the topic was just created, or its leader failed). Raises
        CoordinatorLoadInProgressError, retriable: a client's heartbeat must not take it as
        fatal, as it takes NOT_LEADER_OR_FOLLOWER."""
        with trio.move_on_after(LEADER_WAIT_S):
            while True:
                leader = self._leader(p)
                address = None if leader is None else self.metadata.peer_address(leader)
                if address is not None:
                    return address
                await trio.sleep(0.05)  # polling the image: it has no change event to wait on
        raise CoordinatorLoadInProgressError(f"no leader of {SHARE_STATE_TOPIC}-{p} known")

    async def _read_fenced(self, p: int, key: StateKey, leader_epoch: int | None) -> dict[str, Any] | None:
        """`key`'s state on this leader of `p`; with `leader_epoch`, fence older share leaders
        (written again under it when the stored value names an older one)."""
        if leader_epoch is None or not isinstance(key, ShareKey):
            return (await self._replayed(p)).get(key)
        async with self._write_locks.setdefault(p, trio.Lock()):
            image = await self._replayed(p)
            state = image.get(key)
            fences = self._check_fence(p, image, [key], leader_epoch)
            if state is not None and state.get("leader_epoch", -1) < leader_epoch:
                state = {**state, "leader_epoch": leader_epoch}
                appended = await self._append_batch(p, [(encode_key(key), encode_value(state))])
            else:
                appended = None
            fences[key] = leader_epoch
        if appended is not None:
            await appended.wait_committed(trio.current_time() + COMMIT_TIMEOUT_S)
        return state

    def _check_fence(self, p: int, image: ShareStateImage, keys: Iterable[StateKey], leader_epoch: int,
                     ) -> dict[ShareKey, int]:
        """Raise FencedLeaderEpochError when a newer share leader read or wrote one of `keys`;
        the fences of `p` (this leader epoch of p's; rebuilt from the image on a new one)."""
        r = self._replica(p)
        epoch = -1 if r is None else int(r.leader_epoch)
        have = self._fences.get(p)
        if have is None or have[0] != epoch:
            have = self._fences[p] = (epoch, {})
        fences = have[1]
        for key in keys:
            if not isinstance(key, ShareKey):
                continue
            state = image.get(key)
            newest = max(fences.get(key, -1), -1 if state is None else state.get("leader_epoch", -1))
            if leader_epoch < newest:
                raise FencedLeaderEpochError(
                    f"share partition {key.topic}-{key.partition} of group {key.group!r}: leader epoch "
                    f"{leader_epoch} is older than {newest}, a newer leader's")
        return fences

    async def _append(self, p: int, records: list[tuple[bytes, bytes | None]], leader_epoch: int | None = None) -> None:
        if leader_epoch is None:
            appended = await self._append_batch(p, records)
        else:
            async with self._write_locks.setdefault(p, trio.Lock()):
                keys = [decode_key(k) for k, _ in records]
                fences = self._check_fence(p, await self._replayed(p), keys, leader_epoch)
                appended = await self._append_batch(p, records)
                for key in keys:
                    if isinstance(key, ShareKey):
                        fences[key] = leader_epoch
        await appended.wait_committed(trio.current_time() + COMMIT_TIMEOUT_S)

    async def _append_batch(self, p: int, records: list[tuple[bytes, bytes | None]]) -> Any:
        """Append `records` as one batch on this leader of `p` (not yet committed); the append to wait on."""
        r = self._replica(p)
        if r is None or not r.is_leader:
            raise NotLeaderError(f"node {self.node_id} does not lead {SHARE_STATE_TOPIC}-{p}")
        builder = BatchBuilder()
        now_ms = int(time.time() * 1000)  # the records' timestamps: wall time, as Kafka's
        for key, value in records:
            builder.append(value, key, timestamp_ms=now_ms)
        return await r.append(builder.build())

    async def _replayed(self, p: int) -> ShareStateImage:
        """The image of state partition `p` (led here) with every committed record replayed."""
        lock = self._locks.setdefault(p, trio.Lock())
        async with lock:
            r = self._replica(p)
            if r is None or not r.is_leader:
                raise NotLeaderError(f"node {self.node_id} does not lead {SHARE_STATE_TOPIC}-{p}")
            epoch = int(r.leader_epoch)
            cached = self._images.get(p)
            if cached is None or cached[0] != epoch:
                # A new leader of p: replay only once everything an earlier leader committed
                # is below the high watermark, else a share partition's state would read as
                # older (or absent: its records all delivered again from the start).
                caught_up = False
                with trio.move_on_after(COMMIT_TIMEOUT_S):
                    caught_up = await wait_caught_up(r, lambda: r.is_leader and int(r.leader_epoch) == epoch)
                if not caught_up:
                    raise CoordinatorNotAvailableError(f"{SHARE_STATE_TOPIC}-{p} is still loading on its new leader")
                cached = (epoch, 0, ShareStateImage())
            _, offset, image = cached
            while True:
                offset = max(offset, r.log_start_offset)
                if offset >= r.high_watermark:
                    break
                data = await r.read_committed(offset, READ_CHUNK_BYTES)
                if not data:
                    break
                recs, offset = keyed_records(data, offset)
                image.replay((k, v) for _, k, v in recs)
            self._images[p] = (epoch, offset, image)
            return image

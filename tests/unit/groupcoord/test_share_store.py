"""The share coordinator's store reads a share partition's state only once a new leader of its
`__share_group_state` partition has every record an earlier leader committed below its high
watermark. Before the fix, a node that became leader with a lagging high watermark (a restart
after power loss) replayed nothing and answered "no state": the share partition started over
and redelivered every accepted record (the share jepsen workload found it).

And it refuses a write from a share-partition leader older than one that read or wrote the key
(FENCED_LEADER_EPOCH): a paused leader that resumed put its old window back over the new
leader's, and accepted records were handed out again (the ten-minute share run found it)."""

from __future__ import annotations

import types

import pytest
import trio
import trio.testing

from groupcoord.share_state import SHARE_STATE_TOPIC, ShareKey, encode_value
from groupcoord.share_store import COMMIT_TIMEOUT_S, ShareStateStore
from partition.batch import read_header, stamp
from partition.share_partition import Acknowledgement, AckType, SharePartition
from raftlog.base.errors import CoordinatorNotAvailableError, FencedLeaderEpochError

pytestmark = pytest.mark.unit

KEY = ShareKey("g", "t", 0)
PARTITIONS = 4


class Committed:
    async def wait_committed(self, deadline: float) -> None:
        await trio.lowlevel.checkpoint()


class LaggingPartition:
    """A `__share_group_state` partition led here, in memory; `hw` holds its high watermark
    back (None: at the log end), as a new Raft leader's lags until its own epoch commits."""

    def __init__(self) -> None:
        self.is_leader, self.leader_epoch = True, 1
        self.batches: list[bytes] = []
        self.log_start_offset = self.log_end_offset = 0
        self.hw: int | None = None
        self.watchers: set[trio.Event] = set()

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset if self.hw is None else self.hw

    def release(self) -> None:
        self.hw = None
        for event in self.watchers:
            event.set()

    async def append(self, batch: bytes) -> Committed:
        buf = bytearray(batch)
        stamp(buf, 0, self.log_end_offset, self.leader_epoch)
        self.batches.append(bytes(buf))
        self.log_end_offset = read_header(buf).next_offset
        return Committed()

    async def read_committed(self, offset: int, max_bytes: int) -> bytes:
        return b"".join(b for b in self.batches if offset < read_header(b).next_offset <= self.high_watermark)

    def watch(self, event: trio.Event) -> None:
        self.watchers.add(event)

    def unwatch(self, event: trio.Event) -> None:
        self.watchers.discard(event)


class Topics:
    def __init__(self) -> None:
        self.partitions = {p: LaggingPartition() for p in range(PARTITIONS)}

    def partition(self, topic: str, partition: int) -> LaggingPartition | None:
        return self.partitions.get(partition) if topic == SHARE_STATE_TOPIC else None


class Metadata:
    """`__share_group_state` exists, complete."""

    def __init__(self) -> None:
        topic = types.SimpleNamespace(complete=True, partition_count=PARTITIONS)
        self.image = types.SimpleNamespace(topic=lambda name: topic if name == SHARE_STATE_TOPIC else None,
                                           brokers={1: None})


def _state() -> dict:
    sp = SharePartition(0)
    sp.acquire("m", high_watermark=10, max_records=10, now_ms=0)
    return sp.snapshot()


async def _store_with_new_lagging_leaders() -> tuple[ShareStateStore, Topics]:
    """KEY's state written; then every state partition gets a new leader epoch whose high
    watermark is back at 0 (the restart after a power loss)."""
    topics = Topics()
    store = ShareStateStore(1, Metadata(), topics, peers=None)
    await store.write({KEY: encode_value(_state())})
    assert await store.read(KEY) is not None
    for part in topics.partitions.values():
        part.leader_epoch, part.hw = 2, 0
    return store, topics


async def test_a_new_leader_reads_the_state_only_once_its_high_watermark_caught_up():
    store, topics = await _store_with_new_lagging_leaders()
    got: list = []

    async def read() -> None:
        got.append(await store.read(KEY))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # not "no state" while the committed records are not readable
        for part in topics.partitions.values():
            part.release()
    assert got[0] is not None and got[0]["state_batches"] == _state()["state_batches"]


async def test_a_new_leader_that_never_catches_up_answers_retriable(autojump_clock):
    store, _ = await _store_with_new_lagging_leaders()
    with trio.fail_after(COMMIT_TIMEOUT_S * 2):
        with pytest.raises(CoordinatorNotAvailableError):
            await store.read(KEY)


def _with_epoch(state: dict, epoch: int) -> bytes:
    return encode_value(state | {"leader_epoch": epoch})


async def test_a_write_from_an_older_share_leader_is_fenced():
    # Share leader A (epoch 3) wrote; B (epoch 4) took over and read; A, paused until now, runs
    # its queued acknowledgement and writes its old window: refused, B's state stands.
    store = ShareStateStore(1, Metadata(), Topics(), peers=None)
    await store.write({KEY: _with_epoch(_state(), 3)}, leader_epoch=3)
    assert (await store.read(KEY, leader_epoch=4))["leader_epoch"] == 4  # written again under 4
    accepted = SharePartition(0)
    accepted.acquire("m", high_watermark=10, max_records=10, now_ms=0)
    accepted.acknowledge("m", [Acknowledgement(0, 9, AckType.ACCEPT)], now_ms=0)
    with pytest.raises(FencedLeaderEpochError):
        await store.write({KEY: _with_epoch(_state(), 3)}, leader_epoch=3)
    await store.write({KEY: _with_epoch(accepted.snapshot(), 4)}, leader_epoch=4)
    with pytest.raises(FencedLeaderEpochError):
        await store.read(KEY, leader_epoch=3)
    got = await store.read(KEY)
    assert got is not None and got["start_offset"] == 10 and got["leader_epoch"] == 4


async def test_the_fence_holds_on_a_new_state_leader_and_before_any_state():
    topics = Topics()
    store = ShareStateStore(1, Metadata(), topics, peers=None)
    assert await store.read(KEY, leader_epoch=5) is None  # no state yet: fenced in memory
    with pytest.raises(FencedLeaderEpochError):
        await store.write({KEY: _with_epoch(_state(), 4)}, leader_epoch=4)
    await store.write({KEY: _with_epoch(_state(), 5)}, leader_epoch=5)
    for part in topics.partitions.values():
        part.leader_epoch += 1  # a new leader of the state partition: the stored epoch fences
    with pytest.raises(FencedLeaderEpochError):
        await store.write({KEY: _with_epoch(_state(), 4)}, leader_epoch=4)
    await store.write({KEY: None})  # a delete (no share leader's epoch) is not fenced
    assert await store.read(KEY) is None

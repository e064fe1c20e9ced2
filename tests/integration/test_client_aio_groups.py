"""Consumer groups in the trio shell on a real three-node cluster: two trio members split four partitions and read every record once, a fresh member resumes at committed offsets, a member that leaves hands its partitions over at once, and a trio and a blocking member share one group."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
import trio

from raftlog import aio
from raftlog.client import Admin, Consumer
from raftlog.client.group_admin import GroupAdmin

import node_harness as harness

PARTITIONS = 4
# A session longer than a takeover after a clean leave may take: a leave is seen by the
# others within a heartbeat or two, an expiry only after SESSION_MS.
SESSION_MS = 6000
GROUP_OPTS = dict(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, rebalance_timeout_ms=2 * SESSION_MS,
                  auto_offset_reset="earliest", max_wait_ms=200, request_timeout_ms=10_000)


def create(cluster: harness.NodeCluster, name: str) -> None:
    with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
        admin.create_topic(name, PARTITIONS, 3)
        cluster.wait_for(lambda: all(p.leader is not None for p in admin.describe_topics([name])[name].partitions),
                         20, f"leaders of {name}")


class Board:
    """Members report here after every poll; tests wait on it for a condition."""

    def __init__(self) -> None:
        self._changed = trio.Event()

    def touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float, what: str):
        with trio.move_on_after(timeout_s):
            while not (value := predicate()):
                await self._changed.wait()
            return value
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Member:
    """One group consumer: the records it read and every assignment it was given."""

    def __init__(self, name: str, board: Board):
        self.name = name
        self.board = board
        self.records: list[tuple[int, int, int]] = []  # (partition, offset, value)
        self.assignments: list[tuple[int, frozenset]] = []  # (generation, partitions)
        self.lock = threading.Lock()  # the blocking member appends from its thread
        self.stop_flag = threading.Event()
        self.closed = trio.Event()
        self.consumer: aio.Consumer | None = None

    def latest(self) -> tuple[int, frozenset] | None:
        with self.lock:
            return self.assignments[-1] if self.assignments else None

    def values(self) -> list[int]:
        with self.lock:
            return [v for _p, _o, v in self.records]

    def stop(self) -> None:
        self.stop_flag.set()

    async def run_trio(self, bootstrap: list[str], group: str, topic: str, *, async_callback: bool,
                       **opts) -> None:
        async with aio.Consumer(bootstrap, group_id=group, client_id=self.name, **{**GROUP_OPTS, **opts}) as c:
            self.consumer = c

            def assigned(parts):
                with self.lock:
                    self.assignments.append((c.group_metadata().generation_id, frozenset(parts)))

            async def assigned_async(parts):
                await trio.lowlevel.checkpoint()  # a real await inside the callback
                assigned(parts)

            c.subscribe([topic], on_assigned=assigned_async if async_callback else assigned)
            assert c.subscription() == (topic,)
            while not self.stop_flag.is_set():
                got = await c.poll(200)
                with self.lock:
                    self.records.extend((r.partition, r.offset, int(r.value)) for r in got)
                self.board.touch()
        self.closed.set()
        self.board.touch()

    def run_blocking(self, bootstrap: list[str], group: str, topic: str) -> None:
        """In a worker thread (trio.to_thread): the blocking shell's Consumer in the same group."""
        c = Consumer(bootstrap, group_id=group, client_id=self.name, **GROUP_OPTS)
        try:
            def assigned(parts):
                with self.lock:
                    self.assignments.append((c.group_metadata().generation_id, frozenset(parts)))

            c.subscribe([topic], on_assigned=assigned)
            while not self.stop_flag.is_set():
                got = c.poll(200)
                with self.lock:
                    self.records.extend((r.partition, r.offset, int(r.value)) for r in got)
                trio.from_thread.run_sync(self.board.touch)
        finally:
            c.close()


def split(members: list[Member], topic: str, sizes: list[int]):
    """The generation, when every member's latest assignment is of that one generation, the
    sizes are `sizes`, the sets are disjoint and they cover the topic; else None."""
    got = [m.latest() for m in members]
    if any(g is None for g in got) or len({g[0] for g in got}) != 1:
        return None
    parts = [g[1] for g in got]
    union = frozenset().union(*parts)
    if [len(p) for p in parts] != sizes or sum(sizes) != len(union):
        return None
    if union != {(topic, p) for p in range(PARTITIONS)}:
        return None
    return got[0][0]


async def produce(bootstrap: list[str], topic: str, values: range) -> dict[int, tuple[int, int]]:
    async with aio.Producer(bootstrap, acks="all", linger_ms=2) as p:
        handles = [(v, await p.send(topic, b"%d" % v, partition=v % PARTITIONS)) for v in values]
        await p.flush()
        return {v: await h for v, h in handles}


def assert_read_once(members: list[Member], values: range) -> None:
    counts = Counter(v for m in members for v in m.values())
    assert set(counts) == set(values), f"missing {sorted(set(values) - set(counts))[:10]}"
    dupes = [v for v, n in counts.items() if n > 1]
    assert not dupes, f"read twice: {dupes[:10]}"


async def test_two_trio_members_split_read_once_then_one_leaves_and_the_other_takes_all(cluster):
    topic, group = "ag-split", "ag-g1"
    await trio.to_thread.run_sync(create, cluster, topic)
    boot = cluster.bootstrap()
    board = Board()
    a, b = Member("a", board), Member("b", board)
    async with trio.open_nursery() as n:
        try:
            n.start_soon(lambda: a.run_trio(boot, group, topic, async_callback=True, auto_commit_interval_ms=500))
            n.start_soon(lambda: b.run_trio(boot, group, topic, async_callback=False, auto_commit_interval_ms=500))
            gen = await board.wait_until(lambda: split([a, b], topic, [2, 2]), 30, "two members with 2 each")
            await produce(boot, topic, range(200))
            await board.wait_until(lambda: len(a.values()) + len(b.values()) >= 200, 30, "all 200 read")
            assert_read_once([a, b], range(200))
            # Each member read only its own partitions.
            for m in (a, b):
                with m.lock:
                    mine = {tp[1] for tp in m.assignments[-1][1]}
                    assert {p for p, _o, _v in m.records} <= mine

            # Auto commit (every 500 ms) brings the group's offsets to the positions read.
            ends = {(topic, p): max(o for q, o, _v in a.records + b.records if q == p) + 1
                    for p in range(PARTITIONS)}

            async def auto_committed():
                got = await a.consumer.committed(list(ends))
                return all(got[tp] is not None and got[tp] >= ends[tp] for tp in ends)

            with trio.fail_after(15):
                while not await auto_committed():
                    await board._changed.wait()

            # b leaves (closing commits and leaves): a owns all four in a newer generation,
            # sooner than b's session could expire, and carries on from b's commits.
            b.stop()
            await board.wait_until(lambda: b.closed.is_set(), 15, "b closed")
            left_at = time.monotonic()
            later = await board.wait_until(lambda: split([a], topic, [4]), 15, "a owns all four")
            took_s = time.monotonic() - left_at
            assert later > gen
            assert took_s < SESSION_MS / 1000, f"takeover took {took_s:.1f} s: a leave, not an expiry"
            await produce(boot, topic, range(200, 400))
            await board.wait_until(lambda: len(a.values()) + len(b.values()) >= 400, 30, "all 400 read")
            assert_read_once([a, b], range(400))
        finally:
            a.stop()
            b.stop()


async def test_fresh_member_resumes_at_committed_offsets(cluster):
    topic, group = "ag-resume", "ag-g2"
    await trio.to_thread.run_sync(create, cluster, topic)
    boot = cluster.bootstrap()
    acked = await produce(boot, topic, range(120))
    read: list = []
    async with aio.Consumer(boot, group_id=group, enable_auto_commit=False, **GROUP_OPTS) as c:
        c.subscribe([topic])
        with trio.fail_after(30):
            while len(read) < 120:
                read.extend(await c.poll(300))
        assert sorted(c.assignment()) == [(topic, p) for p in range(PARTITIONS)]
        # Commit each partition at its 10th record: 0..9 of each count as consumed.
        by_part = {p: sorted(r.offset for r in read if r.partition == p) for p in range(PARTITIONS)}
        commit = {(topic, p): offs[10] for p, offs in by_part.items()}
        await c.commit(commit)
        assert await c.committed(list(commit)) == commit
    # Closing without auto commit kept the explicit commit (not the positions read).
    async with aio.Consumer(boot, group_id=group, enable_auto_commit=False, **GROUP_OPTS) as c2:
        c2.subscribe(topic)
        again: list = []
        expect = {(r.partition, r.offset) for r in read if r.offset >= commit[(topic, r.partition)]}
        assert len(expect) == 120 - 40
        with trio.fail_after(30):
            while len(again) < len(expect):
                again.extend(await c2.poll(300))
        got = [(r.partition, r.offset) for r in again]
        assert len(got) == len(set(got)), "a record read twice"
        assert set(got) == expect
        assert all(acked[int(r.value)] == (r.partition, r.offset) for r in again)
        # commit_async (fire and forget) of the positions reaches the coordinator.
        positions = {tp: await c2.position(tp) for tp in commit}
        c2.commit_async()
        with trio.fail_after(15):
            while await c2.committed(list(positions)) != positions:
                await trio.lowlevel.checkpoint()


async def test_blocking_and_trio_members_share_a_group(cluster):
    topic, group = "ag-mixed", "ag-g3"
    await trio.to_thread.run_sync(create, cluster, topic)
    boot = cluster.bootstrap()
    board = Board()
    t, blk = Member("trio", board), Member("blocking", board)
    async with trio.open_nursery() as n:
        try:
            n.start_soon(lambda: t.run_trio(boot, group, topic, async_callback=False))
            n.start_soon(lambda: trio.to_thread.run_sync(blk.run_blocking, boot, group, topic))
            await board.wait_until(lambda: split([t, blk], topic, [2, 2]), 30, "trio and blocking with 2 each")
            await produce(boot, topic, range(100))
            await board.wait_until(lambda: len(t.values()) + len(blk.values()) >= 100, 30, "all 100 read")
            assert_read_once([t, blk], range(100))
            assert t.values() and blk.values()
        finally:
            t.stop()
            blk.stop()


async def test_cancelled_member_closes_promptly_and_errors_leave_the_group(cluster):
    topic, group = "ag-cancel", "ag-g4"
    await trio.to_thread.run_sync(create, cluster, topic)
    boot = cluster.bootstrap()
    # Cancelled from outside while in the group: the exit does not wait out any timeout.
    with trio.move_on_after(30) as outer:
        async with aio.Consumer(boot, group_id=group, **GROUP_OPTS) as c:
            c.subscribe([topic])
            with trio.fail_after(20):
                while not c.assignment():
                    await c.poll(200)
            cancelled_at = time.monotonic()
            outer.cancel()
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert time.monotonic() - cancelled_at < 3
    # An error inside the block still closes the consumer (its close runs, then the error,
    # wrapped by the client's nursery).
    # (Another group: the cancelled member did not leave, so its group waits for its expiry.)
    with pytest.RaisesGroup(KeyError):
        async with aio.Consumer(boot, group_id=group + "-err", **GROUP_OPTS) as c:
            c.subscribe([topic])
            with trio.fail_after(20):
                while not c.assignment():
                    await c.poll(200)
            raise KeyError("boom")
    assert c._closed
    with GroupAdmin(boot) as admin:
        described = await trio.to_thread.run_sync(admin.describe_group, group + "-err")
    assert described["state"] == "Empty" and described["members"] == []

"""A replica restarted after a crash rebuilds, from its producer snapshot and the headers after it, exactly the producer state a walk of its whole log gives; damaged or stale snapshots fall back to that walk, cuts below the snapshot remove it first, and retries of batches from before and after it are still answered as duplicates."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import trio
from hypothesis import event, given, settings
from hypothesis import strategies as st

import partition.segment as segment_module
from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder, iter_headers, stamp
from partition.log import PRODUCER_SNAPSHOT_PREFIX, Log, LogConfig, producer_snapshot_name
from partition.producer_state import ProducerSnapshot, ProducerStateManager
from partition.raft import AdvanceLogStart, AppendReplicated, TruncateFully, TruncateTo
from partition.replica import Replica
from partition.replica_settings import ReplicaSettings

CONFIG = TopicConfig.from_configs({"segment_bytes": "4096"})  # a few batches per segment
MAX_PRODUCERS = 3


class _Quiet:
    file_slices = False

    def send(self, replica, to, message):
        pass

    def answering(self, broker_id):
        return False


def _replica(directory, voters=(1, 2, 3)):
    return Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=voters,
                   directory=directory, topic_config=CONFIG, transport=_Quiet(),
                   settings=ReplicaSettings(max_producers=MAX_PRODUCERS),
                   rng=random.Random(1), clock_ms=lambda: 1000)


def _batch(pid, epoch, seq, n, *, offset=None, leader_epoch=1):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(b"v" * 100, key=b"k%d" % i, timestamp_ms=1000)
    raw = bytearray(b.build())
    if offset is not None:
        stamp(raw, 0, offset, leader_epoch)
    return bytes(raw)


def _snapshots(directory):
    """The offsets of the producer snapshot files in `directory`, ascending."""
    return sorted(int(p.name[len(PRODUCER_SNAPSHOT_PREFIX):]) for p in directory.iterdir()
                  if p.name.startswith(PRODUCER_SNAPSHOT_PREFIX) and not p.name.endswith(".tmp"))


def _whole_walk(log):
    s = ProducerStateManager(max_producers=MAX_PRODUCERS)
    s.apply_headers(log.batch_headers())
    return s


def _dump(state, log_start=0):
    """The state as a walk from `log_start` would see it (batches wholly below it dropped)."""
    trimmed = ProducerStateManager(max_producers=MAX_PRODUCERS)
    trimmed.load(state.snapshot(1 << 62, -1), log_start_offset=log_start)
    return trimmed.snapshot(1 << 62, -1).producers


class Follower:
    """A follower replica driven by the effects its core would emit (no core decisions)."""

    def __init__(self, directory):
        self.r = _replica(directory)
        self.r.open()
        self.seq: dict[int, int] = {}
        self.epoch: dict[int, int] = {}

    @property
    def log(self):
        return self.r.log

    async def effect(self, eff):
        async with self.r._lock:
            await self.r._execute([eff])

    async def append(self, pid, n, bump=False):
        end = self.log.log_end_offset
        if pid < 0:
            records = _batch(-1, -1, -1, n, offset=end)
        else:
            if bump or pid not in self.epoch:
                self.epoch[pid] = self.epoch.get(pid, -1) + 1
                self.seq[pid] = 0
            records = _batch(100 + pid, self.epoch[pid], self.seq[pid], n, offset=end)
            self.seq[pid] += n
        await self.effect(AppendReplicated(records, end, end + n))


def _reopen(directory):
    r = _replica(directory)
    r.open()
    return r


APPEND = st.tuples(st.just("append"), st.integers(-1, 4), st.integers(1, 3), st.booleans())
OPS = st.lists(st.one_of(
    APPEND, APPEND, APPEND,
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("truncate"), st.integers(0, 8)),  # offsets cut off the end (a tail)
    st.tuples(st.just("delete"), st.floats(0, 0.5)),
    st.tuples(st.just("close"), st.booleans()),
), min_size=8, max_size=50)


@settings(max_examples=75, deadline=None)
@given(OPS)
def test_a_restart_after_a_crash_rebuilds_the_whole_walks_state(ops):
    """Reference: the producer state a walk of the reopened log's every batch header gives.
    Random replicated appends (4 producers and non-idempotent batches, epoch bumps, more
    producers than kept), checkpoints, truncations, DeleteRecords and clean restarts; then a
    crash. Meanwhile, whenever the live state says it is exact, it equals that walk too."""
    directory = Path(tempfile.mkdtemp(prefix="pstate-"))

    async def run():
        f = Follower(directory)
        for op in ops:
            log = f.log
            if op[0] == "append":
                await f.append(op[1], op[2], op[3])
            elif op[0] == "checkpoint":
                assert await f.r.checkpoint_recovery_point(min_bytes=0)
                if f.r.producers.exact and log.log_end_offset > log.log_start_offset:
                    assert log.producer_snapshot_offset == log.log_end_offset
            elif op[0] == "truncate":
                await f.effect(TruncateTo(max(log.log_start_offset, log.log_end_offset - op[1])))
            elif op[0] == "delete" and log.log_end_offset > log.log_start_offset:
                low = log.log_start_offset + 1
                await f.effect(AdvanceLogStart(low + int(op[1] * (log.log_end_offset - low))))
            elif op[0] == "close":
                if op[1]:
                    await f.r.close()  # a clean stop writes its snapshot
                else:
                    f.r.log._abandon()
                again = Follower(directory)
                again.seq, again.epoch = f.seq, f.epoch
                f = again
                assert _dump(f.r.producers) == _dump(_whole_walk(f.log))
            if f.r.producers.exact and not f.r._producers_dirty:
                assert _dump(f.r.producers, f.log.log_start_offset) == _dump(_whole_walk(f.log))
        durable = f.log.producer_snapshot_offset
        f.log._abandon()  # SIGKILL: nothing more is written
        r = _reopen(directory)
        try:
            assert _dump(r.producers) == _dump(_whole_walk(r.log))
            event(f"restart from a snapshot: {durable is not None}")
            if durable is not None:  # a snapshot that fits is used, not walked around
                assert r.producers_loaded.snapshot_offset == durable
                assert r.producers_loaded.batches_walked == sum(
                    1 for h in r.log.batch_headers() if h.base_offset >= durable)
        finally:
            r.log.close()

    try:
        trio.run(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _filled(directory, before=12, after=5):
    """A follower with `before` batches of several producers, a checkpoint, `after` more."""
    f = Follower(directory)
    for i in range(before):
        await f.append(i % 3, 2)
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    at = f.log.producer_snapshot_offset
    assert at == f.log.log_end_offset
    for i in range(after):
        await f.append(i % 3, 1)
    return f, at


async def test_a_restart_walks_only_the_batches_after_the_snapshot(tmp_path):
    f, at = await _filled(tmp_path / "p")
    expected = _dump(f.r.producers)
    f.log._abandon()
    r = _reopen(tmp_path / "p")
    assert r.producers_loaded.snapshot_offset == at and r.producers_loaded.batches_walked == 5
    assert _dump(r.producers) == expected == _dump(_whole_walk(r.log))
    r.log.close()


async def test_a_clean_close_leaves_a_snapshot_at_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr("partition.replica.RECOVERY_POINT_CLOSE_MIN_BYTES", 1)
    f, _ = await _filled(tmp_path / "p")
    end = f.log.log_end_offset
    await f.r.close()
    r = _reopen(tmp_path / "p")
    assert r.producers_loaded.snapshot_offset == end and r.producers_loaded.batches_walked == 0
    r.log.close()


def _corrupt(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


async def test_a_damaged_snapshot_falls_back_to_the_whole_walk_and_is_removed(tmp_path):
    f, at = await _filled(tmp_path / "p")
    f.log._abandon()
    path = tmp_path / "p" / producer_snapshot_name(at)
    _corrupt(path, len(path.read_bytes()) - 2)
    r = _reopen(tmp_path / "p")
    assert r.producers_loaded.snapshot_offset is None and "damaged" in r.producers_loaded.unused
    assert _dump(r.producers) == _dump(_whole_walk(r.log))
    assert _snapshots(tmp_path / "p") == [] and r.log.producer_snapshot_offset is None
    r.log.close()


def _rewrite_snapshot(directory, at, **changes):
    """The snapshot at `at` replaced by one with `changes` (under the name its offset gives)."""
    path = directory / producer_snapshot_name(at)
    snap = ProducerSnapshot.decode(path.read_bytes())
    fields = {"offset": snap.offset, "last_epoch": snap.last_epoch,
              "evicted_at": snap.evicted_at, "producers": snap.producers} | changes
    path.unlink()
    (directory / producer_snapshot_name(fields["offset"])).write_bytes(ProducerSnapshot(**fields).encode())


async def test_snapshots_of_another_log_fall_back_to_the_whole_walk(tmp_path):
    """Past the log end, of another leader epoch, inside a batch, below the log start."""
    f, at = await _filled(tmp_path / "p")
    f.log._abandon()
    pristine = tmp_path / "pristine"
    shutil.copytree(tmp_path / "p", pristine)
    copy = tmp_path / "copy"
    shutil.copytree(pristine, copy)
    log = Log.open(copy, LogConfig(), now_ms=0)
    headers = list(log.batch_headers())
    log.close()
    inside = next(h for h in headers if h.base_offset >= 6 and h.last_offset > h.base_offset)
    below = ProducerSnapshot.decode((tmp_path / "p" / producer_snapshot_name(at)).read_bytes())
    below = tuple((pid, epoch, kept) for pid, epoch, batches in below.producers
                  if (kept := tuple(b for b in batches if b.last_offset <= inside.base_offset)))
    cases = {
        "past the log end": {"offset": headers[-1].next_offset + 1},
        "leader epoch": {"last_epoch": 7},
        "inside the batch": {"offset": inside.base_offset + 1, "producers": below},
    }
    for reason, change in cases.items():
        d = tmp_path / reason.replace(" ", "-")
        shutil.copytree(pristine, d)
        _rewrite_snapshot(d, at, **change)
        r = _reopen(d)
        assert r.producers_loaded.snapshot_offset is None, reason
        assert reason in r.producers_loaded.unused, r.producers_loaded
        assert _dump(r.producers) == _dump(_whole_walk(r.log)), reason
        assert _snapshots(d) == [], reason
        r.log.close()
    # Below the log start: DeleteRecords past S removes it (durably, before the new start).
    d = tmp_path / "below"
    shutil.copytree(pristine, d)
    f = Follower(d)
    assert f.log.producer_snapshot_offset == at
    await f.effect(AdvanceLogStart(at + 2))
    assert f.log.producer_snapshot_offset is None and _snapshots(d) == []
    f.log.close()


async def test_a_truncation_below_the_snapshot_removes_it_before_the_cut(tmp_path, monkeypatch):
    f, at = await _filled(tmp_path / "p")
    d = tmp_path / "p"
    seen = []
    real = segment_module.Segment.truncate_to

    def watching(seg, offset, **kw):
        seen.append((offset, _snapshots(d)))
        return real(seg, offset, **kw)

    monkeypatch.setattr(segment_module.Segment, "truncate_to", watching)
    await f.effect(TruncateTo(at + 2))  # above S: the snapshot still describes the log below it
    assert seen == [(at + 2, [at])] and f.log.producer_snapshot_offset == at
    await f.effect(TruncateTo(at - 3))
    assert seen[-1] == (at - 3, [])  # gone before the segment was cut
    assert f.log.producer_snapshot_offset is None and _snapshots(d) == []
    await f.append(0, 4)  # the log grows past S again with other batches: nothing stale to load
    f.log._abandon()
    r = _reopen(tmp_path / "p")
    assert r.producers_loaded.snapshot_offset is None
    assert _dump(r.producers) == _dump(_whole_walk(r.log))
    r.log.close()


async def test_a_log_reset_removes_the_snapshot_before_the_segments(tmp_path, monkeypatch):
    f, _ = await _filled(tmp_path / "p")
    d = tmp_path / "p"
    seen = []
    real_unlink = os.unlink

    def watching(name, *a, **kw):
        if str(name).endswith(".log"):
            seen.append(_snapshots(d))
        return real_unlink(name, *a, **kw)

    monkeypatch.setattr(os, "unlink", watching)
    await f.effect(TruncateFully(500))
    assert seen and not any(seen)
    assert f.r.log.log_end_offset == 500 and len(f.r.producers) == 0
    f.r.log.close()


async def test_a_damaged_header_after_the_snapshot_is_still_repaired_at_open(tmp_path):
    f, at = await _filled(tmp_path / "p", after=40)
    log = f.log
    # The magic byte of a batch after S in a sealed segment (trusted by recovery: only the
    # producer-state walk reads it at open).
    seg = next(s for s in log._segments[:-1] if s.base_offset > at)
    pos = [p for p, _ in seg.walk(0, seg.size_bytes)][-1]
    log.close()
    _corrupt(seg.log_path, pos + 16)
    r = _reopen(tmp_path / "p")
    assert r.repairs == 1 and r.core.needs_catch_up
    assert r.log.log_end_offset < f.log.log_end_offset
    assert r.producers_loaded.snapshot_offset == at  # the cut was above S: it still serves
    assert _dump(r.producers) == _dump(_whole_walk(r.log))
    r.log.close()


async def _lead(r, nursery):
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    await r.start_election()
    with trio.fail_after(5):
        while not r.is_leader:  # a single voter elects itself once its vote is persisted
            await r.tick()
            await trio.sleep(0)


async def test_duplicates_are_detected_across_a_restart_before_and_after_the_snapshot(tmp_path, nursery):
    d = tmp_path / "p"
    r = _replica(d, voters=(1,))
    await _lead(r, nursery)
    first = [await r.append_as_leader(_batch(7, 0, 2 * i, 2), acks=1) for i in range(2)]
    other = await r.append_as_leader(_batch(8, 0, 0, 1), acks=1)
    assert await r.checkpoint_recovery_point(min_bytes=0)
    at = r.log.producer_snapshot_offset
    assert at == r.log.log_end_offset
    second = [await r.append_as_leader(_batch(7, 0, 4 + 2 * i, 2), acks=1) for i in range(2)]
    assert first[-1].last_offset < at <= second[0].first_offset
    r.log._abandon()
    r._go_offline(OSError("killed"))  # the old incarnation stops acting
    again = _replica(d, voters=(1,))
    await _lead(again, nursery)
    assert again.producers_loaded.snapshot_offset == at
    for i, res in enumerate(first + second):  # retries of batches before S and after S
        dup = await again.append_as_leader(_batch(7, 0, 2 * i, 2), acks=1)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (res.first_offset, res.last_offset)
    dup = await again.append_as_leader(_batch(8, 0, 0, 1), acks=1)
    assert dup.duplicate and dup.first_offset == other.first_offset
    fresh = await again.append_as_leader(_batch(7, 0, 8, 2), acks=1)
    assert not fresh.duplicate and fresh.first_offset == again.log.log_end_offset - 2
    await again.close()


def test_headers_of_the_log_match_the_batches_written(tmp_path):
    """The follower helper writes what it says (guards the tests above against a no-op)."""

    async def run():
        f = Follower(tmp_path / "p")
        await f.append(0, 2)
        await f.append(-1, 1)
        await f.append(0, 3, bump=True)
        hs = list(f.log.batch_headers())
        assert [(h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) for h in hs] == [
            (0, 100, 0, 0), (2, -1, -1, -1), (3, 100, 1, 0)]
        assert list(iter_headers(f.log.read(0, 1 << 20)))
        f.log.close()

    trio.run(run)


async def test_a_state_a_truncation_left_inexact_is_never_snapshotted(tmp_path):
    f = Follower(tmp_path / "p")
    for _ in range(7):
        await f.append(0, 1)  # producer 100's window holds its last 5 of 7 batches
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    await f.effect(TruncateTo(5))  # below S: the snapshot goes; the window keeps 3 batches
    assert f.log.producer_snapshot_offset is None and not f.r.producers.exact
    assert _dump(f.r.producers) != _dump(_whole_walk(f.log))  # the walk remembers 5
    await f.append(1, 1)
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    assert f.log.producer_snapshot_offset is None  # nothing exact to start again from
    f.log._abandon()
    r = _reopen(tmp_path / "p")
    assert r.producers_loaded.snapshot_offset is None and r.producers.exact
    assert _dump(r.producers) == _dump(_whole_walk(r.log))
    assert len(r.producers.entry(100).batches) == 5
    r.log.close()


async def test_an_inexact_state_is_rebuilt_from_the_snapshot_at_the_next_checkpoint(tmp_path):
    f = Follower(tmp_path / "p")
    for _ in range(3):
        await f.append(0, 1)
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    at = f.log.producer_snapshot_offset
    for _ in range(5):
        await f.append(0, 1)
    await f.effect(TruncateTo(at + 2))  # above S, but the full window loses 3 of its batches
    assert f.log.producer_snapshot_offset == at and not f.r.producers.exact
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    assert f.r.producers.exact and f.r.producers_loaded.snapshot_offset == at
    assert f.r.producers_loaded.batches_walked == 2
    assert _dump(f.r.producers) == _dump(_whole_walk(f.log))
    assert f.log.producer_snapshot_offset == f.log.log_end_offset == at + 2
    f.log.close()


async def test_a_single_voter_with_damage_found_at_open_writes_on_but_snapshots_nothing(tmp_path, nursery):
    d = tmp_path / "p"
    f = Follower(d)
    for i in range(30):
        await f.append(i % 3, 2)
    seg = f.log._segments[1]
    pos = [p for p, _ in seg.walk(0, seg.size_bytes)][1]
    f.log.close()
    _corrupt(seg.log_path, pos + 16)  # a header the walk cannot read, in a trusted segment
    r = _replica(d, voters=(1,))
    await _lead(r, nursery)
    assert r.damaged is not None and r.damaged["found_by"] == "open"
    assert not r.producers.exact
    res = await r.append_as_leader(_batch(9, 0, 0, 1), acks=1)  # nothing to repair from: serve
    assert not res.duplicate
    assert await r.checkpoint_recovery_point(min_bytes=0)
    assert r.log.producer_snapshot_offset is None
    await r.close()
    assert _snapshots(d) == []


async def test_a_new_leaders_cut_below_the_newest_snapshot_leaves_the_one_before(tmp_path):
    """The newest snapshot was taken at the log end, in a tail a new leader then cuts; the
    one before it serves the restart and the next checkpoint's rebuild."""
    f, first = await _filled(tmp_path / "p")
    for _ in range(6):
        await f.append(0, 1)  # producer 100's window is full
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    newest = f.log.producer_snapshot_offset
    assert _snapshots(tmp_path / "p") == [first, newest]
    await f.append(1, 1)
    assert await f.r.checkpoint_recovery_point(min_bytes=0)  # the oldest goes, two are kept
    assert _snapshots(tmp_path / "p") == [newest, f.log.log_end_offset]
    await f.effect(TruncateTo(newest))  # the tail a new leader never had
    assert _snapshots(tmp_path / "p") == [newest] == [f.log.producer_snapshot_offset]
    await f.effect(TruncateTo(newest - 4))  # again, below that one: a lossy cut of a full window
    assert _snapshots(tmp_path / "p") == [] and not f.r.producers.exact
    f.log._abandon()

    f, first = await _filled(tmp_path / "q")
    for _ in range(6):
        await f.append(0, 1)
    assert await f.r.checkpoint_recovery_point(min_bytes=0)
    newest = f.log.producer_snapshot_offset
    await f.effect(TruncateTo(newest - 3))  # between the two: only the newest goes
    assert _snapshots(tmp_path / "q") == [first] and not f.r.producers.exact
    assert await f.r.checkpoint_recovery_point(min_bytes=0)  # rebuilt from `first`, then snapshotted
    assert f.r.producers.exact and f.r.producers_loaded.snapshot_offset == first
    assert _snapshots(tmp_path / "q") == [first, newest - 3]
    await f.append(2, 1)
    f.log._abandon()
    r = _reopen(tmp_path / "q")
    assert r.producers_loaded.snapshot_offset == newest - 3 and r.producers_loaded.batches_walked == 1
    assert _dump(r.producers) == _dump(_whole_walk(r.log))
    r.log.close()

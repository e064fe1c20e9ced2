"""New replicas open in batches with one durability barrier (partition/fresh_open.py, issue 46):
a fresh log writes no checkpoint and fsyncs nothing, yet behaves and reopens as a log opened
the usual way; the batch falls back for a directory that exists, reports errors per replica,
and makes every new directory durable (one syncfs, or an fsync of each file and directory)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from partition import fresh_open
from partition import file_io
from partition.checkpoint import LOG_START_CHECKPOINT
from partition.fresh_open import BatchedOpens, open_existing_batch, open_fresh_batch
from partition.log import EPOCH_CHECKPOINT, Log, LogConfig
from tests.unit.partition.test_log import mk, offsets_of, read_all

pytestmark = pytest.mark.unit

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=100, retention_ms=-1)


def test_fresh_log_writes_no_checkpoint_and_fsyncs_nothing(tmp_path, monkeypatch):
    fsyncs = []
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    d = tmp_path / "t-0"
    d.mkdir()
    log = Log.open(d, CONFIG, now_ms=0, fresh=True)
    try:
        assert (log.log_start_offset, log.log_end_offset, log.flushed_offset) == (0, 0, 0)
        assert fsyncs == []
        assert sorted(os.listdir(d)) == [f"{0:020d}.log"]
    finally:
        monkeypatch.undo()
        log.close()


def test_fresh_log_appends_flushes_and_reopens_like_any(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = Log.open(d, CONFIG, now_ms=0, fresh=True)
    for _ in range(30):  # past a few segment rolls
        log.append(mk(3), leader_epoch=2, now_ms=0)
    assert log.flush() == 90
    before = read_all(log)
    log.close()
    assert (d / EPOCH_CHECKPOINT).exists()  # the new epoch's entry, durable before the rolls' recovery point
    again = Log.open(d, CONFIG, now_ms=0)
    try:
        assert again.log_end_offset == 90 and again.recovery.bytes_dropped == 0
        assert read_all(again) == before
        assert offsets_of(read_all(again)) == list(range(90))
        assert again.epochs() == log.epochs()
    finally:
        again.close()


def test_fresh_log_reopened_empty_derives_its_start_without_writing_checkpoints(tmp_path):
    # Issue 46: a restart with 10,000 replicas spent 4 of its 5 fsyncs per replica writing
    # checkpoints that hold what the directory already says (start = first segment's base;
    # epochs = what the scan past the recovery point finds).
    d = tmp_path / "t-0"
    d.mkdir()
    Log.open(d, CONFIG, now_ms=0, fresh=True).close()
    for _ in range(2):
        again = Log.open(d, CONFIG, now_ms=0)
        try:
            assert (again.log_start_offset, again.log_end_offset) == (0, 0)
            assert not (d / LOG_START_CHECKPOINT).exists()
            assert not (d / EPOCH_CHECKPOINT).exists()
        finally:
            again.close()


def test_fresh_refuses_a_directory_with_a_log(tmp_path):
    d = tmp_path / "t-0"
    Log.open(d, CONFIG, now_ms=0).close()
    with pytest.raises(FileExistsError):
        Log.open(d, CONFIG, now_ms=0, fresh=True)


class FakeReplica:
    """What open_fresh_batch uses of a Replica."""

    def __init__(self, directory: Path, fail: BaseException | None = None):
        self.directory = directory
        self.fail = fail
        self.log: Log | None = None
        self.core: object | None = None
        self.opened: list[bool] = []

    def open(self, fresh: bool = False, defer_sync: bool = False) -> None:
        if self.fail is not None:
            raise self.fail
        if fresh:
            self.directory.mkdir()  # FileExistsError when it is there, as Replica's _load
        self.log = Log.open(self.directory, CONFIG, now_ms=0, fresh=fresh, defer_sync=defer_sync)
        self.core = object()
        self.opened.append(fresh)


def test_batch_falls_back_reports_errors_and_makes_new_dirs_durable(tmp_path, monkeypatch):
    made_durable: list[list[Path]] = []
    monkeypatch.setattr(fresh_open, "make_new_dirs_durable", lambda dirs: made_durable.append(list(dirs)))
    (tmp_path / "t-1").mkdir()
    rs = [FakeReplica(tmp_path / "t-0"), FakeReplica(tmp_path / "t-1"),
          FakeReplica(tmp_path / "t-2", fail=OSError(28, "No space left on device"))]
    errors = open_fresh_batch(rs, lambda r: r.open())
    try:
        assert [type(e) for e in errors] == [type(None), type(None), OSError]
        assert rs[0].opened == [True] and rs[1].opened == [False]  # t-1 was there: the usual open
        assert made_durable == [[tmp_path / "t-0"]]
    finally:
        for r in rs[:2]:
            r.log.close()


def test_failed_barrier_fails_the_fresh_ones_and_closes_their_logs(tmp_path, monkeypatch):
    def fail(dirs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fresh_open, "make_new_dirs_durable", fail)
    rs = [FakeReplica(tmp_path / "t-0"), FakeReplica(tmp_path / "t-1")]
    errors = open_fresh_batch(rs, lambda r: r.open())
    assert all(isinstance(e, OSError) for e in errors)
    assert all(r.log is None and r.core is None for r in rs)


def test_new_dirs_durable_without_syncfs_fsyncs_each_file_dir_and_parent(tmp_path, monkeypatch):
    dirs = []
    for i in range(2):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        (d / "a").write_bytes(b"x")
        (d / "b").write_bytes(b"y")
        dirs.append(d)
    synced: list[Path] = []
    monkeypatch.setattr(file_io, "_syncfs_makes_durable", lambda directory, dev: False)
    monkeypatch.setattr(file_io, "fsync_path", lambda p: synced.append(p) or True)
    file_io.make_new_dirs_durable(dirs)
    assert sorted(synced) == sorted([*(d / n for d in dirs for n in "ab"), *dirs, tmp_path])


def test_new_dirs_durable_with_syncfs_is_one_call(tmp_path, monkeypatch):
    if file_io._SYNCFS is None:
        pytest.skip("no syncfs here")
    calls = []
    real = file_io._SYNCFS
    monkeypatch.setattr(file_io, "_syncfs_makes_durable", lambda directory, dev: True)
    monkeypatch.setattr(file_io, "_SYNCFS", lambda fd: calls.append(fd) or real(fd))
    dirs = [tmp_path / f"t-{i}" for i in range(file_io.SYNCFS_MIN_NEW_DIRS)]
    for d in dirs:
        d.mkdir()
    file_io.make_new_dirs_durable(dirs)
    assert len(calls) == 1
    synced: list[Path] = []  # a few new directories: each fsynced, no syncfs of the whole filesystem
    monkeypatch.setattr(file_io, "fsync_path", lambda p: synced.append(p) or True)
    file_io.make_new_dirs_durable(dirs[:2])
    assert len(calls) == 1 and sorted(synced) == sorted([*dirs[:2], tmp_path])


def test_opens_that_arrive_together_share_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(fresh_open, "make_new_dirs_durable", lambda dirs: None)
    rs = [FakeReplica(tmp_path / f"t-{i}") for i in range(5)] + [
        FakeReplica(tmp_path / "bad", fail=OSError(28, "No space left on device"))]
    opens = BatchedOpens(trio.CapacityLimiter(1), lambda r: r.open())
    failed: list[BaseException] = []

    async def one(r):
        try:
            await opens.open(r)
        except OSError as exc:
            failed.append(exc)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(opens.run)
            async with trio.open_nursery() as inner:
                for r in rs:
                    inner.start_soon(one, r)
            nursery.cancel_scope.cancel()

    trio.run(main)
    try:
        assert opens.batches == 1
        assert [r.opened for r in rs[:5]] == [[True]] * 5
        assert len(failed) == 1 and failed[0].errno == 28
    finally:
        for r in rs[:5]:
            r.log.close()


def _crashed_logs(tmp_path: Path, n: int) -> list[Path]:
    """Logs with a batch each, left as a SIGKILL leaves them (no close, no recovery point)."""
    dirs = []
    for i in range(n):
        d = tmp_path / f"t-{i}"
        log = Log.open(d, CONFIG, now_ms=0)
        log.append(mk(3), leader_epoch=1, now_ms=0)
        log.flush()
        log._abandon()
        dirs.append(d)
    return dirs


def test_a_restart_batch_leaves_recovery_fsyncs_to_one_barrier(tmp_path, monkeypatch):
    # Issue 46: the active segment's fsync at each recovery, one per replica, is one
    # barrier per batch; nothing is fsynced before it, and every log that left one is in it.
    dirs = _crashed_logs(tmp_path, 3)
    fsyncs: list[int] = []
    barriers: list[list[Path]] = []
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))
    monkeypatch.setattr(fresh_open, "make_new_dirs_durable", lambda ds: barriers.append(list(ds)))
    rs = [FakeReplica(d) for d in dirs] + [FakeReplica(tmp_path / "bad", fail=OSError(5, "Input/output error"))]
    errors = open_existing_batch(rs, lambda r, defer: r.open(defer_sync=defer))
    try:
        assert [type(e) for e in errors] == [type(None)] * 3 + [OSError]
        assert fsyncs == [] and barriers == [dirs]
        assert all(r.log.sync_pending is False for r in rs[:3])
        assert [r.log.log_end_offset for r in rs[:3]] == [3, 3, 3]
    finally:
        monkeypatch.undo()
        for r in rs[:3]:
            r.log._abandon()


def test_without_defer_recovery_fsyncs_itself_and_a_failed_barrier_fails_the_batch(tmp_path, monkeypatch):
    dirs = _crashed_logs(tmp_path, 2)
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    log = Log.open(dirs[0], CONFIG, now_ms=0)  # the usual open: fsyncs what it recovered
    assert len(fsyncs) == 1 and not log.sync_pending
    log._abandon()

    def fail(ds):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fresh_open, "make_new_dirs_durable", fail)
    rs = [FakeReplica(d) for d in dirs]
    errors = open_existing_batch(rs, lambda r, defer: r.open(defer_sync=defer))
    assert all(isinstance(e, OSError) for e in errors)
    assert all(r.log is None and r.core is None for r in rs)


def test_restart_batches_run_side_by_side(tmp_path):
    # What is left of an open is mostly waiting on cold reads: `parallel` batches overlap.
    # Each batch here waits for the other; one at a time would break the barrier.
    barrier = threading.Barrier(2, timeout=30)

    def batch(rs, fallback):
        barrier.wait()
        return [None] * len(rs)

    opens = BatchedOpens(trio.CapacityLimiter(2), None, batch=batch, max_batch=1, parallel=2)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(opens.run)
            async with trio.open_nursery() as inner:
                for i in range(2):
                    inner.start_soon(opens.open, FakeReplica(tmp_path / f"t-{i}"))
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert opens.batches == 2

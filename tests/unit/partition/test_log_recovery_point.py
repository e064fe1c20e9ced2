"""The offset-granular recovery point: a restart scans the active segment only from it, and recovers exactly what a whole scan recovers (torn tails, damaged or stale checkpoints, cuts after it)."""

import os
import shutil

import pytest

import partition.log as log_module
from partition.batch import BatchBuilder, iter_headers
from partition.log import ACTIVE_POINT_CHECKPOINT, Log, LogConfig

CFG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=300, retention_ms=-1)


def mk(n=3, ts=1000, value_bytes=40):
    b = BatchBuilder()
    for i in range(n):
        b.append(bytes([i]) * value_bytes, key=b"k%d" % i, timestamp_ms=ts + i)
    return b.build()


def read_all(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for _, h in iter_headers(data):
            offset = max(offset, h.next_offset)
        out.append(data)
    return b"".join(out)


def append(log, count, start_ts=1000, epoch=1):
    for i in range(count):
        log.append(mk(ts=start_ts + i), leader_epoch=epoch, now_ms=0)


def active_file(d):
    return sorted(p for p in d.iterdir() if p.suffix == ".log")[-1]


def state(log):
    """Everything recovery decides, for comparing two recoveries of the same files."""
    seg = log._segments[-1]
    return dict(end=log.log_end_offset, start=log.log_start_offset, epochs=log.epochs(),
                data=read_all(log), index=seg.index.to_bytes(), timeindex=seg.timeindex.to_bytes(),
                max_ts=(seg.max_timestamp, seg.offset_of_max_timestamp),
                since=seg.bytes_since_index, last_epoch=seg.last_epoch,
                by_time=[log.offset_for_timestamp(t) for t in (0, 1005, 1020, 10**6)],
                segments=[s.name for s in log._segments])


def copy_without_point(tmp_path, d):
    """A copy of `d` (taken before `d` is opened) without its recovery point."""
    ref = tmp_path / "reference"
    shutil.rmtree(ref, ignore_errors=True)
    shutil.copytree(d, ref)
    (ref / ACTIVE_POINT_CHECKPOINT).unlink(missing_ok=True)
    return ref


def reference(ref, config=CFG):
    """The whole-scan recovery of the copy."""
    log = Log.open(ref, config, now_ms=0)
    assert log.recovery.resumed_at is None
    return log


def crash_after_point(d, before=30, after=10):
    """Appends, a durable recovery point, more appends, then a crash (fds dropped)."""
    log = Log.open(d, CFG, now_ms=0)
    append(log, before)
    point = log.recovery_snapshot(0)
    assert point is not None and point.position == log._active.size_bytes
    assert log.write_recovery_point(point)
    assert log.flushed_offset >= point.next_offset  # the point's bytes were fsynced first
    append(log, after, start_ts=2000, epoch=2)
    log.flush()
    log._abandon()
    return point


def test_a_restart_scans_only_past_the_point_and_recovers_the_same(tmp_path):
    d = tmp_path / "log"
    point = crash_after_point(d)
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at == point.position
    assert log.recovery.bytes_dropped == 0
    ref = reference(ref)
    assert state(log) == state(ref)
    # Both go on identically: indexing continues from the point's state.
    for lg in (log, ref):
        append(lg, 20, start_ts=3000, epoch=3)
    assert state(log) == state(ref)
    log.close()
    ref.close()


@pytest.mark.parametrize("tear", ["cut_mid_batch", "garbage", "flipped_crc"])
def test_a_torn_tail_after_the_point_is_cut_exactly_as_a_whole_scan_cuts_it(tmp_path, tear):
    d = tmp_path / "log"
    point = crash_after_point(d)
    f = active_file(d)
    data = f.read_bytes()
    last = [h for _, h in iter_headers(data)][-1]
    if tear == "cut_mid_batch":
        f.write_bytes(data[: len(data) - last.size // 2])
    elif tear == "garbage":
        f.write_bytes(data + os.urandom(100))
    else:
        spoiled = bytearray(data)
        spoiled[len(data) - 5] ^= 0x10
        f.write_bytes(bytes(spoiled))
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at == point.position
    ref = reference(ref)
    for field in ("segment", "bytes_dropped", "offsets_lost"):
        assert getattr(log.recovery, field) == getattr(ref.recovery, field), field
    assert log.recovery.bytes_dropped > 0
    assert state(log) == state(ref)
    log.close()
    ref.close()


@pytest.mark.parametrize("damage", ["flip", "truncated", "empty", "garbage"])
def test_a_damaged_checkpoint_falls_back_to_scanning_all(tmp_path, damage):
    d = tmp_path / "log"
    crash_after_point(d)
    ck = d / ACTIVE_POINT_CHECKPOINT
    data = ck.read_bytes()
    if damage == "flip":
        spoiled = bytearray(data)
        spoiled[20] ^= 0x01
        ck.write_bytes(bytes(spoiled))
    elif damage == "truncated":
        ck.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        ck.write_bytes(b"")
    else:
        ck.write_bytes(os.urandom(len(data)))
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at is None
    assert state(log) == state(reference(ref))
    log.close()


def test_a_segment_file_shorter_than_the_point_is_scanned_whole(tmp_path):
    d = tmp_path / "log"
    point = crash_after_point(d)
    f = active_file(d)
    f.write_bytes(f.read_bytes()[: point.position - 7])  # what no crash of ours leaves
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at is None and log.recovery.bytes_dropped > 0
    assert state(log) == state(reference(ref))
    log.close()


def test_a_truncation_removes_the_point_before_it_cuts(tmp_path):
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0)
    append(log, 30)
    assert log.write_recovery_point(log.recovery_snapshot(0))
    stale = log.recovery_snapshot(0)
    assert stale is None  # nothing new past the point
    append(log, 5, start_ts=2000)
    stale = log.recovery_snapshot(0)
    log.truncate_to(10)
    assert not (d / ACTIVE_POINT_CHECKPOINT).exists()
    assert log.write_recovery_point(stale) is False  # taken before the cut: void
    assert not (d / ACTIVE_POINT_CHECKPOINT).exists()
    append(log, 40, start_ts=4000, epoch=2)  # the file grows past the old point's position
    log.flush()
    log._abandon()
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at is None
    assert state(log) == state(reference(ref))
    log.close()


def test_a_point_of_a_segment_that_rolled_since_is_not_used_for_the_new_one(tmp_path):
    d = tmp_path / "log"
    small = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=-1)
    log = Log.open(d, small, now_ms=0)
    append(log, 5)
    point = log.recovery_snapshot(0)
    assert log.write_recovery_point(point)
    append(log, 40, start_ts=2000)  # several rolls
    log.flush()
    assert log._active.base_offset != point.base
    log._abandon()
    log = Log.open(d, small, now_ms=0)
    assert log.recovery.resumed_at is None
    assert log.log_end_offset == 45 * 3
    log.close()


def test_a_clean_close_writes_the_point_and_the_next_open_scans_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "RECOVERY_POINT_CLOSE_MIN_BYTES", 0)
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0)
    append(log, 30)
    size = log._active.size_bytes
    log.close()
    ref = copy_without_point(tmp_path, d)
    log = Log.open(d, CFG, now_ms=0)
    assert log.recovery.resumed_at == size
    ref = reference(ref)
    assert state(log) == state(ref)
    log.close()
    ref.close()


def test_small_growth_writes_no_point(tmp_path):
    log = Log.open(tmp_path / "log", CFG, now_ms=0)
    append(log, 3)
    assert log.recovery_snapshot() is None  # under RECOVERY_POINT_MIN_BYTES: not worth fsyncs
    assert log.recovery_snapshot(0) is not None
    log.close()


class _NoTransport:
    file_slices = False

    def send(self, replica, to, message):
        raise AssertionError("nothing is sent in these tests")

    def answering(self, broker_id):
        return False


def _replica(directory):
    import random

    from metadata.topic_config import TopicConfig
    from partition.replica import Replica

    return Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1, 2, 3),
                   directory=directory, topic_config=TopicConfig.from_configs({}),
                   transport=_NoTransport(), rng=random.Random(1), clock_ms=lambda: 1000)


async def test_the_replicas_maintenance_writes_the_point_and_a_restart_resumes_from_it(
        tmp_path, monkeypatch):
    import partition.replica_storage as replica_module

    d = tmp_path / "t-0"
    r = _replica(d)
    r.open()
    append(r.log, 10)
    monkeypatch.setattr(replica_module, "RECOVERY_POINT_MIN_BYTES", 1 << 30)
    await r.maintain()
    assert not (d / ACTIVE_POINT_CHECKPOINT).exists()  # too few new bytes: no fsyncs spent
    monkeypatch.setattr(replica_module, "RECOVERY_POINT_MIN_BYTES", 0)
    await r.maintain()
    position = r.log._active.size_bytes
    assert (d / ACTIVE_POINT_CHECKPOINT).exists() and r.log.flushed_offset == r.log.log_end_offset
    append(r.log, 5, start_ts=2000)
    end = r.log.log_end_offset
    r.log._abandon()  # SIGKILL: the last appends were never fsynced, the page cache keeps them
    again = _replica(d)
    again.open()
    assert again.log.recovery.resumed_at == position
    assert again.log.log_end_offset == end and again.online
    again.log.close()


async def test_a_flush_writes_the_point_once_enough_bytes_passed_it(tmp_path, monkeypatch):
    import partition.replica_storage as replica_module

    d = tmp_path / "t-0"
    r = _replica(d)
    r.open()
    append(r.log, 10)
    monkeypatch.setattr(replica_module, "RECOVERY_POINT_FLUSH_BYTES", 1 << 30)
    await r._flush_task(report=False)
    assert not (d / ACTIVE_POINT_CHECKPOINT).exists()
    append(r.log, 3, start_ts=2000)
    monkeypatch.setattr(replica_module, "RECOVERY_POINT_FLUSH_BYTES", 0)
    await r._flush_task(report=False)
    assert r.log._active_point == (0, r.log._active.size_bytes)
    r.log._abandon()
    again = _replica(d)
    again.open()
    assert again.log.recovery.resumed_at is not None and again.log.log_end_offset == 13 * 3
    again.log.close()

"""Disk blocks ahead (partition/segment.py): an active segment past RESERVE_AHEAD_MIN has disk
blocks allocated past its end while its size stays the end of its data; a seal, a clean close
and a cut free them; a segment that cannot reserve just writes; a log reopened after a crash
with blocks still reserved reads and appends as before, and frees them at its next close."""

import os

from partition import segment as segment_module
from partition.batch import BatchBuilder
from partition.log import Log, LogConfig
from partition.segment import RESERVE_AHEAD_MIN

BATCH_BYTES = 64 << 10
SLACK = 64 << 10


def batch(i: int) -> bytes:
    b = BatchBuilder()
    b.append(bytes([i % 251]) * (BATCH_BYTES - 200), timestamp_ms=1000)
    return b.build()


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def released(path) -> bool:
    """No reserve left past the size: st_blocks may also count a few blocks of the file
    system's own (ext4 extent-tree blocks of a fragmented file); a reserve is >= 1 MiB."""
    return allocated(path) <= os.path.getsize(path) + SLACK


def config(segment_bytes: int = 64 << 20) -> LogConfig:
    return LogConfig(segment_bytes=segment_bytes, index_interval_bytes=4096, retention_ms=-1)


def fill(log: Log, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        log.append(batch(i), leader_epoch=1, now_ms=0)
    log.flush()


def test_blocks_are_reserved_ahead_of_a_growing_segment_and_freed_by_seal_close_and_cut(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    seg = log._segments[-1]
    fill(log, 8)  # 512 KiB: under the minimum, nothing reserved
    assert released(seg.log_path)
    fill(log, 40, first=8)  # ~3 MiB
    size = os.path.getsize(seg.log_path)
    assert size == seg.size_bytes > RESERVE_AHEAD_MIN
    # Reserved past the end, at most as much again as it held when it last reserved.
    assert size + BATCH_BYTES < allocated(seg.log_path) <= 2 * size + BATCH_BYTES
    # A cut frees what lies past it, reserved blocks included.
    log.truncate_to(30)
    assert released(seg.log_path)
    fill(log, 30, first=30)
    assert allocated(seg.log_path) > seg.size_bytes + BATCH_BYTES
    log.close()
    assert released(seg.log_path)


def test_a_roll_seals_the_old_segment_without_its_reserve_and_none_reaches_past_the_segment_size(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes=3 << 20), now_ms=0)
    fill(log, 80)  # 5 MiB: two segments
    old, active = log._segments[0], log._segments[-1]
    assert old is not active
    assert released(old.log_path)
    fill(log, 10, first=80)
    assert allocated(active.log_path) <= (3 << 20) + SLACK  # never past segment_bytes
    log.close()


def test_a_roll_by_age_frees_the_reserve_the_old_segment_still_had(tmp_path):
    cfg = LogConfig(segment_bytes=64 << 20, segment_ms=1000, index_interval_bytes=4096,
                    retention_ms=-1)
    log = Log.open(tmp_path, cfg, now_ms=0)
    fill(log, 40)  # ~2.6 MiB, blocks reserved well past it
    old = log._segments[-1]
    assert allocated(old.log_path) > old.size_bytes + RESERVE_AHEAD_MIN // 2
    log.append(batch(40), leader_epoch=1, now_ms=5000)  # past segment_ms: a roll first
    assert log._segments[-1] is not old
    assert released(old.log_path)
    log.close()


def test_without_fallocate_appends_still_land_and_read_back(tmp_path, monkeypatch):
    calls = []

    def refuse(fd, offset, length):
        calls.append(length)
        return False  # a full disk, or a file system without fallocate

    monkeypatch.setattr(segment_module, "reserve_blocks", refuse)
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 40)
    assert calls, "the segment tried to reserve"
    data = log.read(39, 1 << 20)
    assert data is not None and len(data) >= BATCH_BYTES - 200
    assert released(log._segments[-1].log_path)
    log.close()


def test_a_log_reopened_after_a_crash_with_blocks_reserved_reads_and_appends_as_before(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 40)
    path = log._segments[-1].log_path
    size = os.path.getsize(path)
    assert allocated(path) > size + BATCH_BYTES
    before = [bytes(log.read(i, BATCH_BYTES)) for i in range(40)]
    log._abandon()  # a crash: nothing released, nothing written at close
    again = Log.open(tmp_path, config(), now_ms=0)
    assert again.log_end_offset == 40 and os.path.getsize(path) == size
    assert [bytes(again.read(i, BATCH_BYTES)) for i in range(40)] == before
    fill(again, 5, first=40)
    assert again.log_end_offset == 45
    again.close()
    assert released(path)


def test_a_reserve_left_by_a_crash_is_freed_by_the_next_close_without_any_append(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 40)
    path = log._segments[-1].log_path
    assert allocated(path) > os.path.getsize(path) + BATCH_BYTES
    log._abandon()
    again = Log.open(tmp_path, config(), now_ms=0)
    again.close()
    assert released(path)
    untouched = Log.open(tmp_path, config(), now_ms=0)  # nothing past the size: nothing to free
    assert untouched._segments[-1]._reserved_to <= os.path.getsize(path) + SLACK
    untouched.close()

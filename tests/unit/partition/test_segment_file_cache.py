"""Sealed segments' files stay open only up to the file cache's cap (least recently used closed first, reopened on use) while reads, retention, compaction, truncation and recovery keep working; active segments stay open."""

import os

import pytest

from partition.batch import BatchBuilder, iter_headers
from partition.log import Log, LogConfig
from partition.segment import DEFAULT_MAX_OPEN_SEGMENTS, FileCache

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=-1)


@pytest.fixture
def files():
    """The file cache a node would own and hand to every log it hosts."""
    return FileCache(DEFAULT_MAX_OPEN_SEGMENTS)


def mk(i, n=3):
    b = BatchBuilder()
    for k in range(n):
        b.append(b"v" * 60, key=b"k%d" % ((i + k) % 7), timestamp_ms=1000 + i)
    return b.build()


def segment_fds(directory):
    """Open descriptors of this process on the log's segment files (deleted ones included)."""
    out = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)) and target.removesuffix(" (deleted)").endswith(".log"):
            out += 1
    return out


def read_all(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for _, h in iter_headers(data):
            offset = max(offset, h.next_offset)
        out.append(data)
    return b"".join(out)


def test_reads_over_many_sealed_segments_keep_at_most_the_cap_open(tmp_path, files):
    files.set_max_open(2)
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0, files=files)
    for i in range(200):
        log.append(mk(i), leader_epoch=1, now_ms=0)
    log.flush()
    assert log.segment_count() > 10
    assert segment_fds(d) <= 2 + 1  # the cap plus the active segment
    reopens = files.reopens
    first = read_all(log)
    assert files.reopens > reopens  # evicted files were reopened to read
    assert segment_fds(d) <= 3
    assert read_all(log) == first
    # Scrub-style checks of every sealed segment, then a truncation back into a sealed one:
    # it becomes the active segment again and stays open.
    for base, _ in log.scrub_candidates():
        assert log.check_segment(base).damage is None
    log.truncate_to(60)
    assert log.log_end_offset <= 60
    for i in range(100):
        log.append(mk(i), leader_epoch=2, now_ms=0)
    log.flush()
    data = read_all(log)
    log.close()
    assert segment_fds(d) == 0
    again = Log.open(d, CFG, now_ms=0, files=files)
    assert segment_fds(d) <= 3
    assert read_all(again) == data
    again.close()


def test_compaction_and_retention_with_a_cap_of_one(tmp_path, files):
    files.set_max_open(1)
    d = tmp_path / "log"
    cfg = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=-1,
                    cleanup_policy="compact,delete", retention_bytes=30_000)
    log = Log.open(d, cfg, now_ms=0, files=files)
    for i in range(300):
        log.append(mk(i), leader_epoch=1, now_ms=0)
    log.flush()
    done = log.maintain(0, high_watermark=log.log_end_offset)
    assert done["deleted_segments"] or done["compacted_segments"]
    assert segment_fds(d) <= 2
    data = read_all(log)
    log.close()
    again = Log.open(d, cfg, now_ms=0, files=files)
    assert read_all(again) == data
    again.close()


def test_logs_that_share_a_cache_share_its_cap_and_a_log_alone_has_its_own(tmp_path, files):
    """The node owns one cache and hands it to every log (replica_storage.DiskWork.files):
    the cap bounds the sealed files of all of them together, not of each."""
    files.set_max_open(2)
    logs = [Log.open(tmp_path / f"log{k}", CFG, now_ms=0, files=files) for k in range(2)]
    alone = Log.open(tmp_path / "alone", CFG, now_ms=0)
    try:
        for log in logs + [alone]:
            for i in range(120):
                log.append(mk(i), leader_epoch=1, now_ms=0)
            log.flush()
            assert log.segment_count() > 5
            read_all(log)
        shared = segment_fds(tmp_path / "log0") + segment_fds(tmp_path / "log1")
        assert shared <= 2 + 2  # the shared cap plus the two active segments
        assert segment_fds(tmp_path / "alone") == alone.segment_count()  # its own cap: 512
    finally:
        for log in logs + [alone]:
            log.close()

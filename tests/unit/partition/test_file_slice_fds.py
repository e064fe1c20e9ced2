"""Log slices (zero-copy reads) take no descriptor of their own (issue 46): any number of
slices of one segment hold its one descriptor open through a pin, the file cache neither
evicts nor closes it while one is out, the bytes stay readable after the log closed and its
files were deleted, and the last slice's close() releases the descriptor."""

import os

import pytest

from partition.batch import BatchBuilder
from partition.log import Log, LogConfig
from partition.segment import FileCache, FileSlice
from tests.unit.partition.test_segment_file_cache import segment_fds

pytestmark = pytest.mark.unit

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=-1)
SLICES = 300


def mk(i):
    b = BatchBuilder()
    for k in range(3):
        b.append(b"v%d" % i * 20, key=b"k%d" % k, timestamp_ms=1000 + i)
    return b.build()


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def pread(s):
    return os.pread(s.fd, s.length, s.offset)


def test_many_slices_of_a_segment_share_its_descriptor_and_outlive_its_close_and_deletion(tmp_path):
    files = FileCache(1)
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0, files=files)
    for i in range(120):
        log.append(mk(i), leader_epoch=1, now_ms=0)
    log.flush()
    assert log.segment_count() > 4
    first = log.read(0, 1 << 20)
    tail = log.read(log.log_end_offset - 1, 1 << 20)
    before = open_fds()
    slices = [log.read_slice(0, 1 << 20) for _ in range(SLICES)]
    slices += [log.read_slice(log.log_end_offset - 1, 1 << 20) for _ in range(SLICES)]
    # The first sealed segment and the active one: one descriptor each, however many slices.
    assert open_fds() <= before + 1
    assert segment_fds(d) <= 2 + files.max_open
    # Reads of other segments evict what the cache may close: never a pinned segment.
    evictions = files.evictions
    for offset in range(0, log.log_end_offset, 7):
        log.read(offset, 1 << 20)
    assert files.evictions > evictions
    assert all(pread(s) == first for s in slices[:SLICES])
    assert all(pread(s) == tail for s in slices[SLICES:])
    # Closed and deleted: the slices still read their bytes, through the segments' own fds.
    log.close()
    for name in os.listdir(d):
        os.unlink(d / name)
    assert segment_fds(d) == 2
    assert all(pread(s) == first for s in slices[:SLICES])
    assert all(pread(s) == tail for s in slices[SLICES:])
    for s in slices[1:]:
        s.close()
        s.close()  # idempotent: never a second unpin
    assert segment_fds(d) == 1
    assert pread(slices[0]) == first
    slices[0].close()
    assert segment_fds(d) == 0
    assert not slices[0].intact()


def test_a_slice_without_a_release_owns_its_descriptor(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    s = FileSlice(os.open(path, os.O_RDONLY), 2, 3)
    assert s.intact() and pread(s) == b"cde"
    fd = s.fd
    s.close()
    s.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert not s.intact()

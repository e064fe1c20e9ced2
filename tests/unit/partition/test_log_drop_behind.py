"""Drop-behind: after a flush, fsynced bytes more than cache_tail_bytes behind the end leave the page cache (checked with mincore(2)); the tail stays; reads still return every byte."""

import ctypes
import ctypes.util
import mmap
import os

import pytest

from partition.batch import BatchBuilder
from partition.log import Log, LogConfig

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(path) -> list[bool]:
    """Which pages of the file are in the page cache (mincore on a read-only shared map)."""
    size = os.path.getsize(path)
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [bool(b & 1) for b in vec.raw[:pages]]
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def batch(kib: int) -> bytes:
    b = BatchBuilder()
    for _ in range(kib * 10):
        b.append(os.urandom(90), timestamp_ms=1000)
    return b.build()


def mostly_dropped(pages: list[bool]) -> bool:
    """The kernel may keep a few pages it could not take at once (per-CPU LRU batches)."""
    return len(pages) > 0 and sum(pages) <= len(pages) // 10


def segment_path(log: Log) -> str:
    return segment_path_of(log.directory)


def segment_path_of(directory) -> str:
    (name,) = [n for n in os.listdir(directory) if n.endswith(".log")]
    return os.path.join(directory, name)


@pytest.mark.parametrize("tail_kib", [256, 1024])
def test_flush_drops_old_pages_and_keeps_the_tail(tmp_path, tail_kib):
    log = Log.open(tmp_path / "p0", LogConfig(cache_tail_bytes=tail_kib << 10), now_ms=0)
    try:
        for _ in range(32):
            log.append(batch(128), leader_epoch=0, now_ms=0)
        log.flush()
        path = segment_path(log)
        size = os.path.getsize(path)
        resident = resident_pages(path)
        behind = (size - (tail_kib << 10)) // PAGE  # pages wholly behind the kept tail
        assert mostly_dropped(resident[:behind]), "flushed pages behind the tail are still cached"
        assert all(resident[-(tail_kib << 10) // PAGE + 1 :]), "the tail was dropped"
        # Every byte still reads back (from disk now).
        with open(path, "rb") as f:
            assert log.read(0, size) == f.read()
    finally:
        log.close()


def test_unflushed_bytes_stay_cached_and_minus_one_disables(tmp_path):
    log = Log.open(tmp_path / "a", LogConfig(cache_tail_bytes=0), now_ms=0)
    keep = Log.open(tmp_path / "b", LogConfig(cache_tail_bytes=-1), now_ms=0)
    try:
        for lg in (log, keep):
            for _ in range(8):
                lg.append(batch(64), leader_epoch=0, now_ms=0)
            lg.flush()
        flushed_pages = os.path.getsize(segment_path(log)) // PAGE
        assert mostly_dropped(resident_pages(segment_path(log))[:flushed_pages])
        assert all(resident_pages(segment_path(keep)))
        log.append(batch(64), leader_epoch=0, now_ms=0)  # not flushed: its (dirty) pages are not advised
        assert all(resident_pages(segment_path(log))[flushed_pages + 1 :])
    finally:
        log.close()
        keep.close()


def test_truncation_below_the_dropped_range_is_dropped_again(tmp_path):
    log = Log.open(tmp_path / "p0", LogConfig(cache_tail_bytes=0), now_ms=0)
    try:
        for _ in range(8):
            log.append(batch(64), leader_epoch=0, now_ms=0)
        log.flush()
        log.truncate_to(2)  # back to one batch; the rest is written anew
        for _ in range(8):
            log.append(batch(64), leader_epoch=0, now_ms=0)
        log.flush()
        pages = os.path.getsize(segment_path(log)) // PAGE
        assert mostly_dropped(resident_pages(segment_path(log))[:pages])
    finally:
        log.close()


def test_negative_tail_below_minus_one_is_refused():
    with pytest.raises(ValueError, match="cache_tail_bytes"):
        LogConfig(cache_tail_bytes=-2)


def test_bytes_found_at_open_are_not_evicted(tmp_path):
    path = tmp_path / "p0"
    log = Log.open(path, LogConfig(cache_tail_bytes=-1), now_ms=0)
    for _ in range(8):
        log.append(batch(64), leader_epoch=0, now_ms=0)
    log.close()
    before = os.path.getsize(segment_path_of(path)) // PAGE
    log = Log.open(path, LogConfig(cache_tail_bytes=0), now_ms=0)
    try:
        assert all(resident_pages(segment_path_of(path))[:before])  # still cached from the writes
        for _ in range(8):
            log.append(batch(64), leader_epoch=0, now_ms=0)
        log.flush()
        resident = resident_pages(segment_path_of(path))
        assert all(resident[:before]), "pages that were there at open were dropped"
        assert mostly_dropped(resident[before + 1 : len(resident) - 1])
    finally:
        log.close()


"""File I/O under the partition log and the replica's state files: whole reads and writes
with os.pread / os.pwritev on raw fds, and durable replacement of small files (a temp file,
fsync, rename, fsync of the directory; or in place for one sector), one at a time or as a
group commit over syncfs(2). Segments (partition/segment.py), the checkpoint files
(partition/checkpoint.py), the cleaner and the quorum-state store (partition/quorum_state.py)
all write through here.

Durability rule: a file replaced here holds its old or its new contents after a crash, never
a mix; `*_many` keep that rule for each file and report one error per file.
"""

from __future__ import annotations

import ctypes
import os
from collections import deque
from pathlib import Path
from typing import Final

__all__ = [
    "pread_exact", "pwrite_all", "WRITE_CHUNK_BYTES", "TMP_SUFFIX", "write_durably",
    "write_durably_many", "reserve_blocks", "ATOMIC_OVERWRITE_BYTES", "overwrite_durably",
    "overwrite_durably_many", "write_whole_file", "make_new_dirs_durable", "read_or_none", "unlink_if_present",
    "fsync_path",
]


def pread_exact(fd: int, n: int, pos: int) -> bytes:
    """os.pread until `n` bytes or end of file (pread may return short)."""
    data = os.pread(fd, n, pos)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, pos + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


# One write call covers at most this much. A follower appends a whole replication round
# (1-3 MiB at 256 KiB batches) at once; on this machine (2-vCPU VM, Linux 6.18, ext4) perf
# put 15-26% of a follower's CPU in that one pwrite's copy into the page cache, against ~2%
# for the leader's 256 KiB writes of the same bytes. In 256 KiB calls the followers' system
# CPU per record fell 8-33% and RF=3 records/s rose 2.5-15% (`scripts/bench replication
# --sizes 256 --failovers 0`, 3 interleaved pairs).
WRITE_CHUNK_BYTES = 256 << 10
_FAST_IOV_MAX = 64  # buffers a single pwritev takes on the fast path (IOV_MAX is 1024 on Linux)


def pwrite_all(fd: int, data, pos: int) -> None:
    """Write `data` (a buffer, or a list of buffers written back to back) at `pos`, in calls
    of at most WRITE_CHUNK_BYTES."""
    parts = data if isinstance(data, list) else [data]
    written = 0
    if len(parts) <= _FAST_IOV_MAX:
        # One pwritev for what fits one call (a produce's append: its stamped header and the
        # rest of its batch), without the views and the chunking below.
        total = sum(map(len, parts))
        if total <= WRITE_CHUNK_BYTES:
            written = os.pwritev(fd, parts, pos) if total else 0
            if written == total:
                return
            pos += written
    views = deque(v for v in (memoryview(b).cast("B") for b in parts) if len(v))
    while written:  # what the first call wrote (a short write)
        if written >= len(views[0]):
            written -= len(views.popleft())
        else:
            views[0] = views[0][written:]
            written = 0
    while views:
        iov = []
        size = 0
        for v in views:
            if size >= WRITE_CHUNK_BYTES:
                break
            iov.append(v[: WRITE_CHUNK_BYTES - size])
            size += len(iov[-1])
        n = os.pwritev(fd, iov, pos)
        pos += n
        while n:
            if n >= len(views[0]):
                n -= len(views.popleft())
            else:
                views[0] = views[0][n:]
                n = 0


TMP_SUFFIX = ".tmp"


def write_durably(directory: Path, name: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Replace `directory/name` with `data` so that a crash leaves the old or the new contents:
    write a temp file, fsync it, rename it over, fsync the directory (`dir_fd` if the caller
    keeps one open)."""
    tmp = directory / (name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / name)
    if dir_fd is not None:
        os.fsync(dir_fd)
        return
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
_LIBC = ctypes.CDLL(None, use_errno=True)
_SYNCFS = getattr(_LIBC, "syncfs", None)  # Linux; elsewhere write_durably_many goes file by file
_STATFS = getattr(_LIBC, "statfs", None)


# Filesystems whose syncfs commits what fsync would (journal, log or transaction, then a
# device flush): ext2/3/4, XFS, Btrfs. Not FUSE (the kernel does not pass syncfs on to a FUSE
# server: the fault suite's power-loss filesystem sees fsyncs only, and lost votes when the
# quorum state was synced this way), not network filesystems: those get an fsync per file.
_SYNCFS_FILESYSTEMS = frozenset({0xEF53, 0x58465342, 0x9123683E})
_syncfs_ok: dict[int, bool] = {}  # st_dev -> syncfs makes it durable
_FALLOCATE = getattr(_LIBC, "fallocate", None)  # Linux
if _FALLOCATE is not None:
    _FALLOCATE.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_FALLOC_FL_KEEP_SIZE = 1


def reserve_blocks(fd: int, offset: int, length: int) -> bool:
    """Allocate disk blocks for [offset, offset + length) of `fd` without changing its size;
    False when that cannot be done here (no fallocate, a full disk, a file system without
    it)."""
    if _FALLOCATE is None or length <= 0:
        return False
    return _FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def _syncfs_makes_durable(directory: Path, dev: int) -> bool:
    ok = _syncfs_ok.get(dev)
    if ok is None:
        ok = False
        if _SYNCFS is not None and _STATFS is not None:
            buf = ctypes.create_string_buffer(256)  # struct statfs: f_type (a long) comes first
            if _STATFS(os.fsencode(directory), buf) == 0:
                ok = (ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF) in _SYNCFS_FILESYSTEMS
        _syncfs_ok[dev] = ok
    return ok


def write_durably_many(files: list[tuple[Path, str, bytes]]) -> list[OSError | None]:
    """`write_durably` for many files at once (group commit): every temp file written, one
    syncfs(2) of their filesystem, every rename, one more syncfs; so a crash leaves each file
    with its old or its new contents, as one by one would. Returns an OSError or None per
    file, in order: one file's failure (a missing directory, a full disk) fails only it; a
    failed syncfs fails every file it covered. On ext4 every fsync is a journal commit, one
    after another whichever threads ask: 333 files took 50-80 ms with two fsyncs each, in
    one thread or in 40, and 20-35 ms like this (this machine's disk, idle). syncfs also
    writes back every other dirty page of that filesystem: on a data disk of the node's own,
    its appends not yet flushed (few: each group commit flushes them). Files on a
    filesystem whose syncfs is not known to make them durable (_SYNCFS_FILESYSTEMS) are
    written with write_durably, one by one."""
    errors: list[OSError | None] = [None] * len(files)
    synced: dict[int, list[int]] = {}  # st_dev -> indexes of the files written for its syncfs
    for i, (directory, name, data) in enumerate(files):
        try:
            dev = os.stat(directory).st_dev
            if not _syncfs_makes_durable(directory, dev):
                write_durably(directory, name, data)
                continue
            fd = os.open(directory / (name + TMP_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                pwrite_all(fd, data, 0)
            finally:
                os.close(fd)
            synced.setdefault(dev, []).append(i)
        except OSError as exc:
            errors[i] = exc
    for dev, indexes in synced.items():
        _syncfs_all(files, indexes, errors, "the temp files")
        for i in indexes:
            if errors[i] is None:
                directory, name, _ = files[i]
                try:
                    os.replace(directory / (name + TMP_SUFFIX), directory / name)
                except OSError as exc:
                    errors[i] = exc
        _syncfs_all(files, indexes, errors, "the renames")
    return errors


# The most bytes at offset 0 of a file that a power loss writes all or none of: one sector of
# the disk. PostgreSQL keeps pg_control, which it overwrites in place, under the same 512.
ATOMIC_OVERWRITE_BYTES: Final = 512


def _open_for_overwrite(path: Path, data: bytes) -> tuple[int, int] | None:
    """(fd, st_dev) of `path` opened for writing if it can be overwritten in place by `data`
    (it exists and has exactly len(data) bytes), else None: it must be made by a rename."""
    if len(data) > ATOMIC_OVERWRITE_BYTES:
        raise ValueError(f"an overwrite in place is atomic up to {ATOMIC_OVERWRITE_BYTES} bytes, not {len(data)}")
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if st.st_size != len(data):
        os.close(fd)
        return None
    return fd, st.st_dev


def overwrite_durably(directory: Path, name: str, data: bytes) -> None:
    """Make `directory/name` hold `data` (at most ATOMIC_OVERWRITE_BYTES) durably, so that a
    crash leaves the old or the new contents. A file of exactly len(data) bytes is
    overwritten in place and fdatasynced: no new file, no rename, no directory fsync, only
    a one-sector write, which a power loss writes all or none of. Any other (missing, or of
    another size) goes through write_durably, once."""
    opened = _open_for_overwrite(directory / name, data)
    if opened is None:
        write_durably(directory, name, data)
        return
    fd, _ = opened
    try:
        pwrite_all(fd, data, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def overwrite_durably_many(files: list[tuple[Path, str, bytes]]) -> list[OSError | None]:
    """`overwrite_durably` for many files at once (group commit): every in-place write, then
    one syncfs of their filesystem where syncfs makes files durable (else an fdatasync each);
    the files that need a rename go through write_durably_many. An OSError or None per file,
    in order. Against write_durably_many's temp file and rename per file, an overwrite
    allocates nothing and touches no directory: 333 files took 5 ms instead of 67 ms on
    this machine's ext4, idle (the quorum-state writes of a node's elections after a kill)."""
    errors: list[OSError | None] = [None] * len(files)
    renamed: list[int] = []
    synced: dict[int, list[int]] = {}  # st_dev -> indexes overwritten, for its syncfs
    for i, (directory, name, data) in enumerate(files):
        try:
            opened = _open_for_overwrite(directory / name, data)
            if opened is None:
                renamed.append(i)
                continue
            fd, dev = opened
            try:
                pwrite_all(fd, data, 0)
                if _syncfs_makes_durable(directory, dev):
                    synced.setdefault(dev, []).append(i)
                else:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            errors[i] = exc
    for indexes in synced.values():
        _syncfs_all(files, indexes, errors, "the overwrites")
    for i, error in zip(renamed, write_durably_many([files[i] for i in renamed]), strict=True):
        errors[i] = error
    return errors


def _syncfs_all(files: list[tuple[Path, str, bytes]], indexes: list[int],
                errors: list[OSError | None], what: str) -> None:
    """syncfs of the filesystem holding files[indexes] (one of them is enough to name it);
    its failure becomes each of those files' error."""
    live = [i for i in indexes if errors[i] is None]
    if not live:
        return
    assert _SYNCFS is not None
    try:
        fd = os.open(files[live[0]][0], os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        err, why = exc.errno, f"open for syncfs of {what}: {exc.strerror}"
    else:
        try:
            if _SYNCFS(fd) == 0:
                return
            err = ctypes.get_errno()
            why = f"syncfs of {what}: {os.strerror(err)}"
        finally:
            os.close(fd)
    for i in live:
        errors[i] = OSError(err, why)


def write_whole_file(path: Path, data: bytes) -> None:
    """Replace the contents of `path` (no fsync; callers fsync when it must be durable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        pwrite_all(fd, data, 0)
    finally:
        os.close(fd)


def read_or_none(path: Path, max_bytes: int = -1) -> bytes | None:
    """The file's bytes (at most `max_bytes` of them if given), None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes)
    except FileNotFoundError:
        return None


def unlink_if_present(path: Path) -> bool:
    """Unlink `path`; False if it was not there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


# A syncfs writes out every dirty page of the filesystem, other processes' too: it pays for a
# batch of many new directories (a topic of hundreds of partitions), not for a few.
SYNCFS_MIN_NEW_DIRS: Final = 16


def make_new_dirs_durable(directories: list[Path]) -> None:
    """Make directories just created, every file in them and their entries in their parents
    durable: one syncfs(2) when there are at least SYNCFS_MIN_NEW_DIRS of them on a filesystem
    whose syncfs does that (_SYNCFS_FILESYSTEMS), else an fsync of each file, each directory
    and each parent. Blocking. Raises OSError."""
    if not directories:
        return
    dev = os.stat(directories[0]).st_dev
    if len(directories) >= SYNCFS_MIN_NEW_DIRS and _syncfs_makes_durable(directories[0], dev) and all(
            os.stat(d).st_dev == dev for d in directories[1:]):
        fd = os.open(directories[0], os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs of {len(directories)} new directories: {os.strerror(err)}")
        finally:
            os.close(fd)
        return
    parents = set()
    for d in directories:
        for name in os.listdir(d):
            fsync_path(d / name)
        fsync_path(d)
        parents.add(d.parent)
    for parent in parents:
        fsync_path(parent)


def fsync_path(path: Path) -> bool:
    """fsync a file by name (fsync flushes the inode, whichever fd asks); False if gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True

"""Group commit of quorum-state files: `write_durably_many` replaces every file it can and
fails only the ones it cannot; `overwrite_durably_many` overwrites in place the files that
have the size already and renames only the others; `QuorumStateCommits` writes concurrent
replicas' quorum states in shared batches, each readable afterwards, and hands each writer
its own error."""

from __future__ import annotations

import errno
import os

import pytest
import trio

from partition.raft import QuorumState
from partition.quorum_state import QUORUM_STATE_FILE, QuorumStateCommits, read_quorum_state
from partition import file_io
from partition.file_io import (
    ATOMIC_OVERWRITE_BYTES,
    TMP_SUFFIX,
    overwrite_durably,
    overwrite_durably_many,
    write_durably_many,
)


def test_write_durably_many_replaces_each_file_and_fails_only_the_bad_ones(tmp_path):
    dirs = [tmp_path / f"p{i}" for i in range(5)]
    for d in dirs:
        d.mkdir()
        (d / "f").write_bytes(b"old")
    missing = tmp_path / "gone"
    errors = write_durably_many([(d, "f", b"new %d" % i) for i, d in enumerate(dirs)] + [(missing, "f", b"x")])
    assert errors[:5] == [None] * 5
    assert isinstance(errors[5], OSError) and errors[5].errno == errno.ENOENT
    assert [(d / "f").read_bytes() for d in dirs] == [b"new %d" % i for i in range(5)]
    assert not list(tmp_path.rglob("*" + TMP_SUFFIX))
    assert write_durably_many([]) == []


async def test_concurrent_writes_share_batches_and_each_is_durable(tmp_path):
    commits = QuorumStateCommits()
    dirs = [tmp_path / f"t-{i}" for i in range(200)]
    for d in dirs:
        d.mkdir()
    failed: list[OSError] = []

    async def write(i: int, d) -> None:
        try:
            await commits.write(nursery, d, QuorumState(i + 1, 2, None))
        except OSError as exc:
            failed.append(exc)

    async with trio.open_nursery() as nursery:
        for i, d in enumerate(dirs):
            nursery.start_soon(write, i, d)
        nursery.start_soon(write, 0, tmp_path / "missing")
    assert [read_quorum_state(d) for d in dirs] == [QuorumState(i + 1, 2, None) for i in range(len(dirs))]
    assert len(failed) == 1 and failed[0].errno == errno.ENOENT  # only the write that could not be made
    assert commits.writes == len(dirs) + 1
    assert commits.batches < 10  # shared: one per file would be 201


async def test_a_cancelled_writer_still_waits_for_its_write(tmp_path):
    commits = QuorumStateCommits()
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            scope.cancel()  # cancelled before it even asks: the write is made all the same
            await commits.write(nursery, tmp_path, QuorumState(7, 1, 1))
        assert read_quorum_state(tmp_path) == QuorumState(7, 1, 1)


@pytest.mark.parametrize("n", [1, 3])
async def test_a_lone_write_is_its_own_batch(tmp_path, n):
    commits = QuorumStateCommits()
    async with trio.open_nursery() as nursery:
        for i in range(n):
            await commits.write(nursery, tmp_path, QuorumState(i, None, None))
    assert read_quorum_state(tmp_path) == QuorumState(n - 1, None, None)
    assert commits.batches == n


def _count_syncs(tmp_path, monkeypatch, trusted: bool) -> dict[str, list[int]]:
    """Record the syncfs (faked: `trusted` says whether tmp_path's filesystem is one whose
    syncfs makes files durable), fsync and fdatasync calls that follow."""
    calls: dict[str, list[int]] = {"syncfs": [], "fsync": [], "fdatasync": []}
    monkeypatch.setattr(file_io, "_SYNCFS", lambda fd: (calls["syncfs"].append(fd), 0)[1])
    monkeypatch.setattr(file_io, "_syncfs_ok", {tmp_path.stat().st_dev: trusted})
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real, name=name: (calls[name].append(fd), real(fd))[1])
    return calls


def _dirs(tmp_path, n: int, contents: bytes | None = None) -> list:
    dirs = [tmp_path / f"p{i}" for i in range(n)]
    for d in dirs:
        d.mkdir()
        if contents is not None:
            (d / "f").write_bytes(contents)
    return dirs


@pytest.mark.parametrize("trusted", [True, False])
def test_syncfs_only_where_it_makes_files_durable(tmp_path, monkeypatch, trusted):
    """A filesystem whose syncfs is not known to make files durable (FUSE: the kernel does
    not pass syncfs on to its server) gets write_durably's fsyncs, file by file."""
    calls = _count_syncs(tmp_path, monkeypatch, trusted)
    dirs = _dirs(tmp_path, 4)
    assert write_durably_many([(d, "f", b"v") for d in dirs]) == [None] * 4
    assert all((d / "f").read_bytes() == b"v" for d in dirs)
    if trusted:
        assert len(calls["syncfs"]) == 2 and calls["fsync"] == []  # temp files, then renames
    else:
        assert calls["syncfs"] == [] and len(calls["fsync"]) == 8  # each file and its directory


def test_overwrite_durably_many_writes_in_place_and_renames_only_what_it_must(tmp_path):
    same, other, absent = (tmp_path / name for name in ("same", "other", "absent"))
    for d in (same, other, absent):
        d.mkdir()
    (same / "f").write_bytes(b"old!")
    (other / "f").write_bytes(b"older")
    inode = (same / "f").stat().st_ino
    errors = overwrite_durably_many([(same, "f", b"new1"), (other, "f", b"new2"),
                                     (absent, "f", b"new3"), (tmp_path / "gone", "f", b"new4")])
    assert errors[:3] == [None] * 3
    assert isinstance(errors[3], OSError) and errors[3].errno == errno.ENOENT
    assert [(d / "f").read_bytes() for d in (same, other, absent)] == [b"new1", b"new2", b"new3"]
    assert (same / "f").stat().st_ino == inode  # in place: the same file
    assert not list(tmp_path.rglob("*" + TMP_SUFFIX))
    assert overwrite_durably_many([]) == []


def test_an_overwrite_larger_than_one_sector_is_refused(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * (ATOMIC_OVERWRITE_BYTES + 1))
    with pytest.raises(ValueError):
        overwrite_durably(tmp_path, "f", b"y" * (ATOMIC_OVERWRITE_BYTES + 1))
    with pytest.raises(ValueError):
        overwrite_durably_many([(tmp_path, "f", b"y" * (ATOMIC_OVERWRITE_BYTES + 1))])
    assert (tmp_path / "f").read_bytes() == b"x" * (ATOMIC_OVERWRITE_BYTES + 1)


@pytest.mark.parametrize("trusted", [True, False])
def test_overwrites_share_one_syncfs_only_where_it_makes_files_durable(tmp_path, monkeypatch, trusted):
    calls = _count_syncs(tmp_path, monkeypatch, trusted)
    dirs = _dirs(tmp_path, 4, b"u")
    assert overwrite_durably_many([(d, "f", b"v") for d in dirs]) == [None] * 4
    assert all((d / "f").read_bytes() == b"v" for d in dirs)
    assert calls["fsync"] == []  # no temp file, no directory
    if trusted:
        assert len(calls["syncfs"]) == 1 and calls["fdatasync"] == []
    else:
        assert calls["syncfs"] == [] and len(calls["fdatasync"]) == 4


def test_quorum_states_are_one_sector_overwritten_in_place(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    commits = QuorumStateCommits()

    async def write(state: QuorumState) -> None:
        async with trio.open_nursery() as nursery:
            await commits.write(nursery, d, state)

    trio.run(write, QuorumState(1, 1, None))
    path = d / QUORUM_STATE_FILE
    assert path.stat().st_size == ATOMIC_OVERWRITE_BYTES
    inode = path.stat().st_ino
    trio.run(write, QuorumState(2, None, 3, True))
    assert read_quorum_state(d) == QuorumState(2, None, 3, True)
    assert path.stat().st_ino == inode

"""The power-loss filesystem, mounted for real: after `lose` the backing directory holds exactly what was fsynced (file contents by file fsync, names by directory fsync), through the mount too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jepsen_style_tests.lazyfs import LazyFsError, LazyFsMount, LazyState, cannot_mount, is_mounted


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes, *, offset: int | None = None, sync: bool = False, mode: str = "r+b") -> None:
    with open(path, mode) as handle:
        if offset is not None:
            handle.seek(offset)
        handle.write(data)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())


@pytest.fixture
def fs(tmp_path):
    why = cannot_mount()
    if why is not None:
        pytest.skip(f"cannot mount a FUSE filesystem here: {why}")
    mount = LazyFsMount(tmp_path / "backing", tmp_path / "mnt", log_path=tmp_path / "lazyfs.log")
    try:
        mount.start()
    except LazyFsError as exc:
        pytest.skip(f"cannot mount a FUSE filesystem here: {exc}")
    try:
        yield mount
    finally:
        mount.close()
        assert not is_mounted(tmp_path / "mnt")


def test_write_fsync_write_lose_keeps_only_fsynced_bytes(fs):
    m = fs.mountpoint
    (m / "d").mkdir()
    _fsync(m)
    f = m / "d" / "seg.log"
    _write(f, b"A" * 5000, mode="wb", sync=True)
    _fsync(m / "d")
    _write(f, b"B" * 3000, mode="ab")  # an append past the durable size
    _write(f, b"C" * 10, offset=4090)  # an overwrite straddling a block boundary
    assert f.read_bytes() == b"A" * 4090 + b"C" * 10 + b"A" * 900 + b"B" * 3000
    answer = fs.lose()
    assert answer["rolled_back_files"] == 1 and answer["dropped_bytes"] >= 3000
    assert f.read_bytes() == b"A" * 5000  # through the mount
    assert (fs.backing / "d" / "seg.log").read_bytes() == b"A" * 5000  # and in the backing directory
    _write(f, b"D" * 100, offset=0, sync=True)
    _write(f, b"E" * 100, offset=50)
    fs.lose()
    assert f.read_bytes() == b"D" * 100 + b"A" * 4900


def test_a_file_whose_directory_was_never_fsynced_is_gone(fs):
    m = fs.mountpoint
    _write(m / "kept", b"k", mode="wb", sync=True)
    _fsync(m)
    _write(m / "lost", b"l", mode="wb", sync=True)  # the file is fsynced, its name is not
    (m / "newdir").mkdir()
    _write(m / "newdir" / "inner", b"i", mode="wb", sync=True)
    assert fs.stats()["pending_ops"] == 3
    fs.lose()
    assert sorted(os.listdir(m)) == ["kept"]
    assert (m / "kept").read_bytes() == b"k"


def test_a_directory_fsync_makes_the_journal_durable_up_to_its_last_change(fs):
    m = fs.mountpoint
    (m / "newdir").mkdir()
    _write(m / "newdir" / "inner", b"i", mode="wb", sync=True)
    _write(m / "later", b"l", mode="wb", sync=True)
    _fsync(m / "newdir")  # mkdir newdir and create inner come before: durable; create later: not
    assert fs.stats()["pending_ops"] == 1
    fs.lose()
    assert sorted(os.listdir(m)) == ["newdir"] and (m / "newdir" / "inner").read_bytes() == b"i"


def test_created_and_named_but_never_fsynced_file_is_empty(fs):
    m = fs.mountpoint
    _write(m / "f", b"data", mode="wb")
    _fsync(m)
    fs.lose()
    assert (m / "f").read_bytes() == b""


def test_rename_over_target_needs_the_directory_fsync(fs):
    m = fs.mountpoint
    _write(m / "meta", b"old", mode="wb", sync=True)
    _fsync(m)
    _write(m / "meta.tmp", b"new", mode="wb", sync=True)
    os.replace(m / "meta.tmp", m / "meta")
    assert (m / "meta").read_bytes() == b"new"
    fs.lose()  # the rename was not durable: the old file is back, the temp file is gone
    assert sorted(os.listdir(m)) == ["meta"] and (m / "meta").read_bytes() == b"old"
    _write(m / "meta.tmp", b"new", mode="wb", sync=True)
    os.replace(m / "meta.tmp", m / "meta")
    _fsync(m)
    fs.lose()
    assert sorted(os.listdir(m)) == ["meta"] and (m / "meta").read_bytes() == b"new"
    assert os.listdir(fs.backing.with_name("backing.attic")) == []  # the replaced file is really gone


def test_unlink_is_undone_until_the_directory_is_fsynced(fs):
    m = fs.mountpoint
    (m / "d").mkdir()
    _write(m / "d" / "a", b"a" * 100, mode="wb", sync=True)
    _fsync(m / "d")
    _fsync(m)
    with open(m / "d" / "a", "r+b") as handle:  # written and unlinked while open, never fsynced
        os.unlink(m / "d" / "a")
        handle.write(b"x" * 10)
        handle.flush()
    assert not (m / "d" / "a").exists()
    fs.lose()
    assert (m / "d" / "a").read_bytes() == b"a" * 100
    os.unlink(m / "d" / "a")
    _fsync(m / "d")
    fs.lose()
    assert os.listdir(m / "d") == []


def test_truncate_and_o_trunc_are_rolled_back(fs):
    m = fs.mountpoint
    data = bytes(range(256)) * 64  # 16 KiB: four blocks
    _write(m / "t", data, mode="wb", sync=True)
    _fsync(m)
    os.truncate(m / "t", 5000)
    _write(m / "t", b"z" * 20000, offset=6000)  # extended again past the durable size
    fs.lose()
    assert (m / "t").read_bytes() == data
    _write(m / "t", b"short", mode="wb")  # O_TRUNC
    fs.lose()
    assert (m / "t").read_bytes() == data
    os.truncate(m / "t", 100)
    _fsync(m / "t")
    fs.lose()
    assert (m / "t").read_bytes() == data[:100]


def test_sync_makes_everything_durable_and_bad_commands_are_refused(fs):
    m = fs.mountpoint
    (m / "d").mkdir()
    _write(m / "d" / "f", b"f", mode="wb")
    fs.sync()
    assert fs.lose()["undone_ops"] == 0
    assert (m / "d" / "f").read_bytes() == b"f"
    with pytest.raises(LazyFsError, match="unknown command"):
        fs.command("explode")
    assert fs.stats()["pending_ops"] == 0  # still serving


def test_state_rolls_back_without_a_mount(tmp_path):
    """The undo log itself, on a plain directory: what the filesystem calls, in order."""
    state = LazyState(tmp_path / "b")
    state.mkdir("/p", 0o755)
    fd = state.create("/p/x", 0o644, os.O_RDWR)
    state.write(fd, b"1234", 0)
    state.fsync(fd)
    state.fsyncdir("/p")
    state.fsyncdir("/")
    state.write(fd, b"56", 4)
    state.truncate(fd, 2)
    state.release(fd)
    state.rename("/p/x", "/p/y")
    assert state.lose() == {"undone_ops": 1, "rolled_back_files": 1, "dropped_bytes": 4,
                            "ops": ["rename /p/x -> /p/y"], "files": ["p/x (4 B)"]}
    assert os.listdir(tmp_path / "b" / "p") == ["x"] and (tmp_path / "b" / "p" / "x").read_bytes() == b"1234"

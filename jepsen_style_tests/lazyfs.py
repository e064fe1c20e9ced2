"""A FUSE pass-through filesystem that can lose power: every write not yet fsynced is dropped.

    python -m jepsen_style_tests.lazyfs BACKING MOUNTPOINT

mounts BACKING at MOUNTPOINT and serves it until stdin closes (or ``quit``). Like Jepsen's
LazyFS it models a disk whose volatile cache dies with the power; unlike LazyFS it does not
keep unsynced data in memory: every operation goes to BACKING at once and the filesystem
records how to undo it (an undo log), and ``lose`` rolls BACKING back to exactly what was made
durable. Control protocol (one JSON line answers each command line on stdin):

* ``lose``  -> ``{"ok": true, "undone_ops": n, "rolled_back_files": n, "dropped_bytes": n,
  "ops": [...], "files": [...]}`` rolls back every change not made durable (below), then
  forgets the log (``ops`` and ``files`` name the first few undone).
* ``sync``  -> ``{"ok": true}``: makes everything durable (as ``sync(2)``).
* ``stats`` -> ``{"ok": true, "pending_ops": n, "dirty_files": n}``.
* ``quit`` or EOF: unmount and exit 0.

On start it prints ``{"ready": true, "pid": n}`` once the mount answers (FUSE init).

The durability model (what survives ``lose``):

* File contents (writes, truncates, O_TRUNC) are per inode: an ``fsync`` / ``fdatasync`` of the
  file makes its current contents and size durable. Until then a write or truncate below the
  durable size saved the pre-image of each 4 KiB block it touched (once per block), so a
  rollback truncates the file to its durable size and writes the saved blocks back. A file
  created since is durable with no bytes.
* The namespace (create, mkdir, symlink, unlink, rmdir, rename) is one ordered journal, as a
  journalling filesystem keeps it: ``fsync`` of a directory makes durable every namespace
  change up to the last one that touched that directory (as source or target), i.e. a prefix
  of the journal; the rest is undone in reverse order by ``lose``. A rename is one atomic
  entry. Unlinked, removed and replaced files are kept in an attic beside BACKING
  (``<BACKING>.attic``) until their removal is durable, so that a rollback can restore them.
  Consequence: a file that was created and fsynced but whose directory never was is gone
  after ``lose`` (POSIX; ext4 would usually keep it): the strict reading finds a missing
  directory fsync, the prefix reading never produces a state a journalling filesystem could
  not.
* Not modelled: attributes (chmod, chown, times) are passed through and kept; hard links are
  refused (EPERM); torn writes within a block (a write is all or nothing). An fsync is
  passed on to the backing file or directory (after the point it makes durable), so that a
  node waits on it as long as on the real disk: the windows of unsynced data, the ones a
  power loss drops, keep their real length (a 4 KiB append + fsync, on a loaded machine:
  6-12 ms on the disk, 2.5 ms through lazyfs, 0.2 ms if lazyfs answered at once).

Kernel caches: the mount sets attribute, entry and negative timeouts to 0 and never keeps the
page cache across opens, so after ``lose`` (with no process holding a file open, as after a
SIGKILL) every lookup and read sees the rolled-back BACKING.

Concurrency: libfuse calls the operations from its worker threads; one lock serialises every
operation and the control commands, so ``lose`` sees no half-done operation.

Binding: mfusepy (ctypes over libfuse 3 or 2, maintained fork of fusepy, pure Python, no
compiler): pyfuse3 would need libfuse3-dev and a C build, llfuse is in maintenance mode, and
fusepy is unmaintained since 2018 and libfuse-2 only. The Debian package ``fuse3`` gives
libfuse3 and fusermount3 (scripts/test installs it).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import select
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["LazyState", "LazyFsError", "LazyFsMount", "BLOCK", "attic_for", "cannot_mount", "main"]

log = logging.getLogger(__name__)

BLOCK = 4096
LIST_AT_MOST = 20  # names of undone ops and rolled-back files a `lose` answer lists
ATTIC_SUFFIX = ".attic"
MOUNT_OPTIONS = {"attr_timeout": 0, "entry_timeout": 0, "negative_timeout": 0, "hard_remove": True}


def attic_for(backing: Path) -> Path:
    return backing.with_name(backing.name + ATTIC_SUFFIX)


@dataclasses.dataclass
class _Undo:
    """How to roll one inode's contents back to its last fsync."""

    durable_size: int
    blocks: dict[int, bytes] = dataclasses.field(default_factory=dict)

    def save(self, fd: int, start: int, end: int) -> None:
        """Saves the pre-image of every block of [start, end) below the durable size once."""
        end = min(end, self.durable_size)
        if start >= end:
            return
        for block in range(start // BLOCK, (end - 1) // BLOCK + 1):
            if block not in self.blocks:
                self.blocks[block] = os.pread(fd, BLOCK, block * BLOCK)

    def restore(self, fd: int) -> int:
        """Rolls the file open at `fd` back; returns the bytes dropped or rewritten."""
        size = os.fstat(fd).st_size
        os.ftruncate(fd, self.durable_size)
        changed = max(0, size - self.durable_size)
        for block, data in self.blocks.items():
            data = data[: max(0, self.durable_size - block * BLOCK)]
            if data:
                os.pwrite(fd, data, block * BLOCK)
                changed += len(data)
        return changed


@dataclasses.dataclass
class _Op:
    """One namespace change not yet durable. ``kind``: create | unlink | rename."""

    kind: str
    path: str  # create/unlink: the name; rename: the old name
    dirs: frozenset[int]  # inodes of the directories it changed
    new: str | None = None  # rename: the new name
    attic: str | None = None  # unlink, or rename over an existing name: where the old object is


class LazyState:
    """The undo log over `backing` (see the module docstring). Paths given to its methods are
    mount-relative (``/a/b``). Every method takes the one lock."""

    def __init__(self, backing: Path):
        self.backing = Path(backing)
        self.attic = attic_for(self.backing)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.attic.mkdir(exist_ok=True)
        for leftover in self.attic.iterdir():  # an earlier process's, whose removals it never undid
            _remove(leftover)
        self.lock = threading.RLock()
        self.files: dict[int, _Undo] = {}
        self.ops: list[_Op] = []
        self._attic_seq = 0
        self.fh_flags: dict[int, int] = {}

    # ------------------------------------------------------------------ paths

    def real(self, path: str) -> str:
        return str(self.backing) + path if path != "/" else str(self.backing)

    def _parent_ino(self, path: str) -> int:
        return os.lstat(os.path.dirname(self.real(path))).st_ino

    def _to_attic(self, path: str) -> str:
        self._attic_seq += 1
        name = f"{self._attic_seq}"
        os.rename(self.real(path), self.attic / name)
        return name

    # ------------------------------------------------------------------ contents

    def before_write(self, fd: int, start: int, end: int) -> None:
        """Call before changing [start, end) of the file open at `fd` (end=None: to its end)."""
        st = os.fstat(fd)
        undo = self.files.get(st.st_ino)
        if undo is None:
            undo = self.files[st.st_ino] = _Undo(st.st_size)
        undo.save(fd, start, end)

    def write(self, fd: int, data: bytes, offset: int) -> int:
        with self.lock:
            if self.fh_flags.get(fd, 0) & os.O_APPEND:
                offset = os.fstat(fd).st_size
            self.before_write(fd, offset, offset + len(data))
            return os.pwrite(fd, data, offset)

    def truncate(self, fd: int, length: int) -> None:
        with self.lock:
            self.before_write(fd, length, 1 << 62)
            os.ftruncate(fd, length)

    def fsync(self, fd: int, datasync: bool = False) -> None:
        """The file's contents are durable from here; then the backing file is fsynced too,
        outside the lock, so that the caller waits as long as on the real disk."""
        with self.lock:
            self.files.pop(os.fstat(fd).st_ino, None)
        if datasync:
            os.fdatasync(fd)
        else:
            os.fsync(fd)

    def created(self, path: str, fd: int | None = None) -> None:
        """Records a new name at `path` (a file, a directory or a symlink)."""
        st = os.fstat(fd) if fd is not None else os.lstat(self.real(path))
        if stat.S_ISREG(st.st_mode):
            self.files[st.st_ino] = _Undo(0)
        self.ops.append(_Op("create", path, frozenset({self._parent_ino(path)})))

    # ------------------------------------------------------------------ namespace

    def create(self, path: str, mode: int, flags: int) -> int:
        with self.lock:
            fd = os.open(self.real(path), _readable(flags) | os.O_CREAT | os.O_EXCL, mode)
            self.created(path, fd)
            self.fh_flags[fd] = flags
            return fd

    def open(self, path: str, flags: int) -> int:
        with self.lock:
            fd = os.open(self.real(path), _readable(flags) & ~os.O_TRUNC)
            if flags & os.O_TRUNC:
                self.before_write(fd, 0, 1 << 62)
                os.ftruncate(fd, 0)
            self.fh_flags[fd] = flags
            return fd

    def release(self, fd: int) -> None:
        with self.lock:
            self.fh_flags.pop(fd, None)
            os.close(fd)

    def mkdir(self, path: str, mode: int) -> None:
        with self.lock:
            os.mkdir(self.real(path), mode)
            self.created(path)

    def symlink(self, path: str, target: str) -> None:
        with self.lock:
            os.symlink(target, self.real(path))
            self.created(path)

    def unlink(self, path: str) -> None:
        with self.lock:
            if not os.path.lexists(self.real(path)):
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            dirs = frozenset({self._parent_ino(path)})
            self.ops.append(_Op("unlink", path, dirs, attic=self._to_attic(path)))

    def rmdir(self, path: str) -> None:
        with self.lock:
            if os.listdir(self.real(path)):
                raise OSError(errno.ENOTEMPTY, "directory not empty", path)
            self.unlink(path)

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            if not os.path.lexists(self.real(old)):
                raise FileNotFoundError(errno.ENOENT, "no such file", old)
            dirs = frozenset({self._parent_ino(old), self._parent_ino(new)})
            attic = None
            if os.path.lexists(self.real(new)):
                if os.path.isdir(self.real(new)) and os.listdir(self.real(new)):
                    raise OSError(errno.ENOTEMPTY, "directory not empty", new)
                attic = self._to_attic(new)
            try:
                os.rename(self.real(old), self.real(new))
            except OSError:
                if attic is not None:
                    os.rename(self.attic / attic, self.real(new))
                raise
            self.ops.append(_Op("rename", old, dirs, new=new, attic=attic))

    def fsyncdir(self, path: str) -> None:
        """Makes the journal durable up to the last change of the directory at `path`."""
        with self.lock:
            ino = os.lstat(self.real(path)).st_ino
            last = max((i for i, op in enumerate(self.ops) if ino in op.dirs), default=-1)
            self._commit(last + 1)
        fd = os.open(self.real(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _commit(self, count: int) -> None:
        durable, self.ops = self.ops[:count], self.ops[count:]
        for op in durable:
            if op.attic is not None:
                where = self.attic / op.attic
                try:
                    ino = os.lstat(where).st_ino
                except FileNotFoundError:
                    continue
                self.files.pop(ino, None)
                _remove(where)

    # ------------------------------------------------------------------ control

    def sync(self) -> None:
        """Everything is durable now (as sync(2))."""
        with self.lock:
            self._commit(len(self.ops))
            self.files.clear()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"pending_ops": len(self.ops), "dirty_files": len(self.files)}

    def lose(self) -> dict[str, Any]:
        """Power loss: BACKING becomes exactly what was made durable. Call with no file open
        (the processes that used the mount are dead): open handles keep pointing at files
        whose names may have been undone."""
        with self.lock:
            undone = len(self.ops)
            names = [f"{op.kind} {op.path}" + (f" -> {op.new}" if op.new else "") for op in self.ops]
            for op in reversed(self.ops):
                self._undo(op)
            self.ops = []
            rolled, dropped, paths = 0, 0, []
            for directory, _dirs, files in os.walk(self.backing):
                for name in files:
                    full = os.path.join(directory, name)
                    st = os.lstat(full)
                    undo = self.files.get(st.st_ino)
                    if undo is None or not stat.S_ISREG(st.st_mode):
                        continue
                    fd = os.open(full, os.O_RDWR)
                    try:
                        changed = undo.restore(fd)
                    finally:
                        os.close(fd)
                    dropped += changed
                    rolled += 1
                    paths.append(f"{os.path.relpath(full, self.backing)} ({changed} B)")
            self.files.clear()
            return {"undone_ops": undone, "rolled_back_files": rolled, "dropped_bytes": dropped,
                    "ops": names[:LIST_AT_MOST], "files": sorted(paths)[:LIST_AT_MOST]}  # fmt: skip

    def _undo(self, op: _Op) -> None:
        if op.kind == "create":
            _remove(Path(self.real(op.path)))
        elif op.kind == "unlink":
            os.rename(self.attic / str(op.attic), self.real(op.path))
        elif op.kind == "rename":
            os.rename(self.real(str(op.new)), self.real(op.path))
            if op.attic is not None:
                os.rename(self.attic / op.attic, self.real(str(op.new)))
        else:
            raise ValueError(f"unknown op {op.kind!r}")


def _readable(flags: int) -> int:
    """Open flags whose write-only access is read-write: saving a pre-image reads the file."""
    if flags & os.O_ACCMODE == os.O_WRONLY:
        return (flags & ~os.O_ACCMODE) | os.O_RDWR
    return flags


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


class LazyFsError(RuntimeError):
    """The filesystem process could not be started, or did not answer."""


def cannot_mount() -> str | None:
    """Why no lazyfs can be mounted here (None: it may be; `LazyFsMount.start` tells)."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None and os.geteuid() != 0:
        return "no fusermount3 (Debian: apt-get install fuse3) and not root"
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        return "the mfusepy package is missing (pip install raftlog[jepsen])"
    except OSError as exc:
        return f"no libfuse (Debian: apt-get install fuse3): {exc}"
    return None


def is_mounted(mountpoint: Path | str) -> bool:
    target = os.path.abspath(mountpoint)
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)


class LazyFsMount:
    """A lazyfs process serving `backing` at `mountpoint`, driven over its stdin/stdout.

    `start` mounts (raises LazyFsError with its stderr if it cannot); `lose`, `sync`, `stats`
    send one command each and wait for the answer under a deadline; `close` unmounts and
    stops the process by its PID (SIGTERM, then SIGKILL) and detaches a mount left behind.
    Blocking; one caller at a time."""

    def __init__(self, backing: Path | str, mountpoint: Path | str, *, log_path: Path | str | None = None):
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.log_path = Path(log_path) if log_path is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self, timeout_s: float = 20.0) -> LazyFsMount:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        stderr: Any = subprocess.PIPE
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            stderr = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jepsen_style_tests.lazyfs", str(self.backing), str(self.mountpoint)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        finally:
            if self.log_path is not None:
                stderr.close()
        try:
            ready = self._read_answer(timeout_s)
        except LazyFsError as exc:
            why = self._stderr_tail()
            self.close()
            raise LazyFsError(f"lazyfs did not mount {self.mountpoint}: {exc}; {why}") from None
        if not ready.get("ready"):
            self.close()
            raise LazyFsError(f"lazyfs answered {ready!r} instead of ready")
        return self

    def _stderr_tail(self) -> str:
        if self.log_path is not None:
            try:
                return self.log_path.read_text(errors="replace")[-2000:].strip()
            except OSError as exc:
                return repr(exc)
        process = self.process
        if process is not None and process.stderr is not None and process.poll() is not None:
            return process.stderr.read().decode(errors="replace")[-2000:].strip()
        return ""

    def _read_answer(self, timeout_s: float) -> dict[str, Any]:
        process = self.process
        if process is None or process.stdout is None:
            raise LazyFsError("not started")
        deadline = time.monotonic() + timeout_s
        fd = process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LazyFsError(f"no answer within {timeout_s} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise LazyFsError(f"lazyfs exited with {process.wait()}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def command(self, command: str, timeout_s: float = 60.0) -> dict[str, Any]:
        process = self.process
        if process is None or process.stdin is None or process.poll() is not None:
            raise LazyFsError("lazyfs is not running")
        try:
            process.stdin.write(command.encode() + b"\n")
            process.stdin.flush()
        except BrokenPipeError:
            raise LazyFsError("lazyfs is not running") from None
        answer = self._read_answer(timeout_s)
        if not answer.get("ok"):
            raise LazyFsError(f"{command}: {answer.get('error')}")
        return answer

    def lose(self) -> dict[str, Any]:
        """Power loss: drops every change not made durable (see the module docstring)."""
        return self.command("lose")

    def sync(self) -> dict[str, Any]:
        return self.command("sync")

    def stats(self) -> dict[str, Any]:
        return self.command("stats")

    def close(self, timeout_s: float = 10.0) -> int | None:
        """Unmounts and stops the process by its PID; its exit code. Idempotent."""
        process, self.process = self.process, None
        code = None
        if process is not None:
            if process.poll() is None and process.stdin is not None:
                try:
                    process.stdin.write(b"quit\n")
                    process.stdin.close()
                except BrokenPipeError:
                    log.debug("lazyfs %d already gone", process.pid)
            try:
                code = process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    code = process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        if is_mounted(self.mountpoint):
            _unmount(str(self.mountpoint))
        return code

    def __enter__(self) -> LazyFsMount:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _stat_dict(st: os.stat_result) -> dict[str, Any]:
    keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_blksize")
    out: dict[str, Any] = {k: getattr(st, k) for k in keys}
    out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return out


def _operations(state: LazyState, on_ready: Any) -> Any:
    import mfusepy

    def errors(fn: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            try:
                return fn(*args)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

        wrapped.__name__ = fn.__name__
        return wrapped

    class Ops(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def init(self, path: str) -> None:
            on_ready()

        @errors
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            if fh is not None:
                return _stat_dict(os.fstat(fh))
            return _stat_dict(os.lstat(state.real(path)))

        @errors
        def access(self, path: str, amode: int) -> int:
            if not os.access(state.real(path), amode):
                raise PermissionError(errno.EACCES, "access", path)
            return 0

        @errors
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(state.real(path))]

        @errors
        def readlink(self, path: str) -> str:
            return os.readlink(state.real(path))

        @errors
        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(state.real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax")  # fmt: skip
            return {k: getattr(sv, k) for k in keys}

        @errors
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(state.real(path), mode)
            return 0

        @errors
        def chown(self, path: str, uid: int, gid: int) -> int:
            os.lchown(state.real(path), uid, gid)
            return 0

        @errors
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            os.utime(state.real(path), ns=times, follow_symlinks=False)
            return 0

        @errors
        def create(self, path: str, mode: int, flags: int) -> int:
            return state.create(path, mode, flags)

        @errors
        def open(self, path: str, flags: int) -> int:
            return state.open(path, flags)

        @errors
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @errors
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return state.write(fh, data, offset)

        @errors
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            if fh is not None:
                state.truncate(fh, length)
                return 0
            fd = os.open(state.real(path), os.O_RDWR)
            try:
                state.truncate(fd, length)
            finally:
                os.close(fd)
            return 0

        @errors
        def flush(self, path: str, fh: int) -> int:
            return 0

        @errors
        def release(self, path: str, fh: int) -> int:
            state.release(fh)
            return 0

        @errors
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            state.fsync(fh, bool(datasync))
            return 0

        @errors
        def opendir(self, path: str) -> int:
            os.lstat(state.real(path))
            return 0

        @errors
        def releasedir(self, path: str, fh: int) -> int:
            return 0

        @errors
        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            state.fsyncdir(path)
            return 0

        @errors
        def mkdir(self, path: str, mode: int) -> int:
            state.mkdir(path, mode)
            return 0

        @errors
        def symlink(self, target: str, source: str) -> int:
            state.symlink(target, source)
            return 0

        @errors
        def link(self, target: str, source: str) -> int:
            raise PermissionError(errno.EPERM, "hard links are not modelled", target)

        @errors
        def unlink(self, path: str) -> int:
            state.unlink(path)
            return 0

        @errors
        def rmdir(self, path: str) -> int:
            state.rmdir(path)
            return 0

        @errors
        def rename(self, old: str, new: str) -> int:
            state.rename(old, new)
            return 0

    return Ops()


def _unmount(mountpoint: str) -> None:
    for command in (["fusermount3", "-u", mountpoint], ["fusermount", "-u", mountpoint], ["umount", "-l", mountpoint]):
        try:
            if subprocess.run(command, capture_output=True, check=False, timeout=30).returncode == 0:
                return
        except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
            log.debug("%s: %r", command[0], exc)


def _answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _control(state: LazyState, mountpoint: str) -> None:
    """Serves the control protocol on stdin until EOF or ``quit``, then unmounts."""
    for line in sys.stdin:
        command = line.strip()
        try:
            if command == "lose":
                _answer({"ok": True, **state.lose()})
            elif command == "sync":
                state.sync()
                _answer({"ok": True})
            elif command == "stats":
                _answer({"ok": True, **state.stats()})
            elif command == "quit":
                break
            elif command:
                _answer({"ok": False, "error": f"unknown command {command!r}"})
        except OSError as exc:
            log.exception("command %s failed", command)
            _answer({"ok": False, "error": repr(exc)})
    _unmount(mountpoint)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m jepsen_style_tests.lazyfs BACKING MOUNTPOINT\n")
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    backing, mountpoint = Path(args[0]).resolve(), os.path.abspath(args[1])
    try:
        import mfusepy
    except (ImportError, OSError) as exc:  # OSError: mfusepy found no libfuse
        sys.stderr.write(f"lazyfs: cannot load FUSE bindings: {exc}\n")
        return 3
    backing.mkdir(parents=True, exist_ok=True)
    state = LazyState(backing)
    started = threading.Event()

    def on_ready() -> None:
        if not started.is_set():
            started.set()
            _answer({"ready": True, "pid": os.getpid()})
            threading.Thread(target=_control, args=(state, mountpoint), daemon=True, name="control").start()

    try:
        mfusepy.FUSE(_operations(state, on_ready), mountpoint, foreground=True, fsname="lazyfs", **MOUNT_OPTIONS)
    except RuntimeError as exc:
        sys.stderr.write(f"lazyfs: mount failed: {exc}\n")
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())

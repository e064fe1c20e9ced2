"""Who runs on a data dir: pid files, and dying with a supervisor.

    holder = running_pid(path)            # the live raftlog process named in a pid file, or None
    claim(path)                           # write our pid there; ConfigError if one still runs
    release(path)                         # at a clean exit (a killed process leaves it: stale)
    die_with_parent(supervisor_pid)       # Linux: SIGTERM when the supervisor dies
    check_private(data_dir)               # ConfigError: others may write it, or not ours

Private data (issue 39): a node runs under umask 077 (`PRIVATE_UMASK`, set first thing in
raftlog/node/main.py and by `raftlog cluster up`), so every file and directory it makes is
0600/0700 whatever the user's umask, its libraries' files included (PySyncObj, logging), and
our own os.open/mkdir calls name those modes too. It refuses a data dir that group or other
may write (they could swap its files) or that another user owns.

A node writes `<data_dir>/node.pid` when it starts and removes it when it stops; `raftlog
cluster up` writes `<data-dir>/supervisor.pid`. A pid file left by a killed process is
stale: `running_pid` only believes a pid that is alive AND whose command line is a raftlog
process (so a reused pid of another program does not count).

Dying with the supervisor: `cluster up` starts each node with `--supervisor-pid`; the node
asks Linux for a parent-death signal (prctl PR_SET_PDEATHSIG, SIGTERM: a clean stop), checks
the supervisor is still its parent (it may have died before the prctl), and also polls its
parent pid (`parent_gone`) where prctl is missing, so a supervisor killed by SIGKILL or a
closed terminal leaves no node behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Final

from raftlog.base.errors import ConfigError

__all__ = ["NODE_PID_FILE", "SUPERVISOR_PID_FILE", "PRIVATE_UMASK", "running_pid", "claim", "release",
           "die_with_parent", "parent_gone", "is_raftlog_process", "check_private"]

NODE_PID_FILE: Final = "node.pid"
SUPERVISOR_PID_FILE: Final = "supervisor.pid"
_PR_SET_PDEATHSIG: Final = 1
PRIVATE_UMASK: Final = 0o077
_MARKERS: Final = (b"raftlog",)


def is_raftlog_process(pid: int) -> bool:
    """True when `pid` is alive and (where /proc tells) runs raftlog."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return _runs_raftlog(pid)  # alive, another user's
    return _runs_raftlog(pid)


def _runs_raftlog(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc/self").exists()  # no /proc here: trust the pid
    if not cmdline:
        return False  # a zombie: it exited, its parent has not reaped it yet
    return any(marker in cmdline for marker in _MARKERS)


def running_pid(path: Path) -> int | None:
    """The pid in `path` if that process is alive and a raftlog process; else None (no
    file, an unreadable one, or a stale one)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if pid != os.getpid() and is_raftlog_process(pid) else None


def claim(path: Path) -> None:
    """Write this process's pid to `path` (atomically). Raises ConfigError when a live
    raftlog process already holds it."""
    holder = running_pid(path)
    if holder is not None:
        raise ConfigError(f"{path.parent} is in use by pid {holder} ({path.name}); "
                          "stop that process first (two processes on one data dir would corrupt it)")
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(f"{os.getpid()}\n")
    os.replace(temp, path)


def release(path: Path) -> None:
    """Remove `path` if it still names this process."""
    try:
        if path.read_text().strip() == str(os.getpid()):
            path.unlink()
    except OSError:
        return  # already gone, or never written: nothing to release


def die_with_parent(supervisor_pid: int, signum: int = signal.SIGTERM) -> bool:
    """Ask for `signum` when the parent (the thread that started us) dies (Linux). Returns
    False when the parent is already not `supervisor_pid` (it died before we asked): the
    caller should exit."""
    if sys.platform.startswith("linux"):
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name, use_errno=True) if name else None
        except OSError:
            libc = None
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    return not parent_gone(supervisor_pid)


def parent_gone(supervisor_pid: int) -> bool:
    """True when our parent is no longer `supervisor_pid` (we were re-parented)."""
    return os.getppid() != supervisor_pid


def check_private(data_dir: Path) -> None:
    """Raise ConfigError when `data_dir` exists and group or other may write it, or another
    user owns it (the message names the path, its mode and the fix). A missing dir passes:
    the node makes it 0700."""
    try:
        st = os.stat(data_dir)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{data_dir}: cannot check the data dir: {exc.strerror}") from None
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise ConfigError(f"{data_dir}: data dir (mode {mode:04o}) is owned by uid {st.st_uid}, not by "
                          f"this user (uid {os.geteuid()}); run the node as its owner")
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"{data_dir}: data dir has mode {mode:04o}: other users may write it; "
                          f"`chmod 700 {data_dir}` first")

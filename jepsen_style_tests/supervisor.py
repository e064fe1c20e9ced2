"""The supervisor-kill fault: a SIGKILLed `raftlog cluster up` must leave nothing running.

    outcome = supervisor_kill(workdir, rng)    # blocking (processes, files): a worker thread

Each call starts its own small cluster with `raftlog cluster up` (its nodes and its web
console) under `workdir`, waits until it is up, SIGKILLs the supervisor, and then watches
every process the supervisor started: each must exit by itself (the nodes and the console
hold a parent-death signal, raftlog/node/pidfile.py) within `gone_timeout_s`, and their ports
must be free again. The outcome lists what was left (`left`, `ports_held`); anything left is
then stopped by its PID, so a failing check leaves no orphan either. The checker reports a
non-empty `left` as the ``orphaned-process`` anomaly (checker.py).

It runs beside the test's own cluster (it never touches it) so that the fault menu can
include it in any run: `--nemesis supervisor-kill`.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from raftlog.cli.cluster import PORT_STRIDE, port_in_use

from .history import HarnessError

__all__ = ["supervisor_kill", "SupervisorKillError"]

READY_LINE = re.compile(r"^stop: Ctrl-C")
CONSOLE_LINE = re.compile(r"^console: \S+ \(pid (\d+),")
LISTENERS = 5  # per node: kafka, client, peer, quorum, http


class SupervisorKillError(HarnessError):
    """The side cluster did not come up: nothing was checked (the op ends ``info``)."""

    code = "supervisor-kill-error"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; only its (killed) parent could have reaped it
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _free_base(rng: random.Random, nodes: int) -> int:
    for _ in range(200):
        # Below Linux's ephemeral ports (32768-60999): a client's outgoing connection may take
        # one of those between this check and the restart.
        base = rng.randrange(20000, 32768 - PORT_STRIDE * nodes, PORT_STRIDE)
        if not any(port_in_use("127.0.0.1", base + PORT_STRIDE * i + k) for i in range(nodes) for k in range(LISTENERS)):
            return base
    raise SupervisorKillError("no free port range for the side cluster")


def supervisor_kill(workdir: Path, rng: random.Random, *, nodes: int = 1, ready_timeout_s: float = 60.0,
                    gone_timeout_s: float = 30.0) -> dict[str, Any]:
    """Start, SIGKILL and watch a `cluster up` (module docstring). Returns {"supervisor": pid,
    "pids": {name: pid}, "left": [names], "ports_held": [ports]}. Raises SupervisorKillError
    when the side cluster did not come up."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / f"supervised-{time.time_ns()}"
    base = _free_base(rng, nodes)
    log_path = data_dir.with_suffix(".log")
    argv = [sys.executable, "-m", "raftlog.cli", "cluster", "up", "--nodes", str(nodes), "--data-dir",
            str(data_dir), "--base-port", str(base), "--no-restart", "--console-port", "0"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pids: dict[str, int] = {}
    pause = threading.Event()
    try:
        deadline = time.monotonic() + ready_timeout_s
        lines: list[str] = []
        while not any(READY_LINE.match(line) for line in lines):
            if proc.poll() is not None or time.monotonic() >= deadline:
                raise SupervisorKillError(f"cluster up did not come up (exit {proc.poll()}); see {log_path}")
            pause.wait(0.1)  # polling its output under a deadline
            lines = log_path.read_text(errors="replace").splitlines()
        for i in range(1, nodes + 1):
            pids[f"node-{i}"] = int((data_dir / f"node-{i}" / "node.pid").read_text())
        console = next((m for line in lines if (m := CONSOLE_LINE.match(line))), None)
        if console is not None:
            pids["console"] = int(console.group(1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + gone_timeout_s
        while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            pause.wait(0.1)  # polling under a deadline
        left = sorted(name for name, pid in pids.items() if _alive(pid))
        ports = [base + PORT_STRIDE * i + k for i in range(nodes) for k in range(LISTENERS)]
        held = [port for port in ports if port_in_use("127.0.0.1", port)]
        return {"supervisor": proc.pid, "pids": pids, "left": left, "ports_held": held}
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in pids.values():  # what the check found left (or never reached): by PID
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

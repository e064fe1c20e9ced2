"""Issue 20, no orphans and bootstrap from every node: the nodes (and web console) `raftlog cluster up` starts stop when their supervisor gets SIGHUP (a closed terminal) or SIGKILL, a second `cluster up` on a data dir whose processes still run names their PIDs, and the CLI's default bootstrap (./raftlog-data/bootstrap, every node) still works with node 1 down."""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from raftlog.cli.cluster import PORT_STRIDE, port_in_use

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
NODES = 3


def _free_base_port() -> int:
    rng = random.Random()
    for _ in range(200):
        # Below Linux's ephemeral ports (32768-60999): any process's outgoing connection may
        # take one of those while the cluster is down between the two runs.
        base = rng.randrange(20000, 32768 - PORT_STRIDE * NODES, PORT_STRIDE)
        if not any(port_in_use("127.0.0.1", base + PORT_STRIDE * i + k) for i in range(NODES) for k in range(5)):
            return base
    raise AssertionError("no free port range found")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAFTLOG_BOOTSTRAP", None)
    env.pop("RAFTLOG_DEBUG", None)
    return env


class Supervisor:
    """`raftlog cluster up` (default data dir ./raftlog-data) in `cwd`; stdout lines on a queue."""

    def __init__(self, cwd: Path, base_port: int) -> None:
        self.proc = subprocess.Popen(
            [*RAFTLOG, "cluster", "up", "--nodes", str(NODES), "--base-port", str(base_port), "--no-restart",
             "--console-port", "0"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
        )  # fmt: skip
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"cluster up exited ({self.proc.wait()}) before {pattern!r}: {self.lines}")
            self.lines.append(line)
            if re.search(pattern, line):
                return line

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code; past `timeout_s`, an AssertionError with every line it printed."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            while not self._queue.empty():
                self.lines.append(self._queue.get_nowait() or "")
            raise AssertionError(f"cluster up still running after {timeout_s} s: {self.lines}") from None


def _pids(data_dir: Path, sup: Supervisor) -> dict[int, int]:
    """Node id -> pid from the nodes' pid files, and 0 -> the web console's pid (its line)."""
    pids = {i: int((data_dir / f"node-{i}" / "node.pid").read_text()) for i in range(1, NODES + 1)}
    console = next(m for line in sup.lines if (m := re.match(r"^console: \S+ \(pid (\d+),", line)))
    return pids | {0: int(console.group(1))}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes (its parent, the killed supervisor, cannot reap it)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pids, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running after {timeout_s} s: {[p for p in pids if _alive(p)]}"
        pause.wait(0.1)  # polling under a deadline


def _cleanup(sup: Supervisor, pids) -> None:
    for pid in [sup.proc.pid, *pids]:  # only what the test started, by PID
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    sup.proc.wait(30)


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RAFTLOG, *args], cwd=cwd, capture_output=True, text=True, env=_env(), timeout=60)


def test_nodes_die_with_their_supervisor_and_a_busy_data_dir_names_its_pids(tmp_path):
    """Why: "When the terminal running scripts/quorum closes (SIGHUP) or its supervisor is
    SIGKILLed, all three node processes keep running ...; the next scripts/quorum refuses to
    start ("port 9092 is in use")", and "The default bootstrap is node 1 alone"."""
    data_dir = tmp_path / "raftlog-data"
    base = _free_base_port()

    # 1. A closed terminal (SIGHUP to the supervisor): everything stops cleanly.
    sup = Supervisor(tmp_path, base)
    pids: dict[int, int] = {}
    try:
        sup.wait_line(r"^stop: Ctrl-C", 90)
        pids = _pids(data_dir, sup)
        bootstrap = (data_dir / "bootstrap").read_text().strip().split(",")
        assert bootstrap == [f"127.0.0.1:{base + PORT_STRIDE * i + 1}" for i in range(NODES)]
        assert any(line.startswith("bootstrap: " + ",".join(bootstrap)) for line in sup.lines)
        os.kill(sup.proc.pid, signal.SIGHUP)
        assert sup.wait_exit(120) == 0  # one CI run at a load of 23 (2 cores) passed 60 s
        _wait_gone(pids.values(), 30)
        assert not list(data_dir.glob("node-*/node.pid")) and not (data_dir / "supervisor.pid").exists()
    finally:
        _cleanup(sup, pids.values())

    # 2. Restarted; a second `cluster up` names the PIDs holding the data dir.
    sup = Supervisor(tmp_path, base)
    pids = {}
    try:
        sup.wait_line(r"^stop: Ctrl-C", 90)
        pids = _pids(data_dir, sup)
        second = run(tmp_path, "cluster", "up", "--no-restart")
        assert second.returncode == 2, second
        message = second.stderr.strip()
        assert len(message.splitlines()) == 1 and "still in use" in message, message
        for pid in [sup.proc.pid, *(pid for i, pid in pids.items() if i)]:
            assert str(pid) in message, message

        # 3. Node 1 down: the CLI's default bootstrap (./raftlog-data/bootstrap) finds the others.
        os.kill(pids[1], signal.SIGKILL)
        _wait_gone([pids[1]], 10)
        listed = run(tmp_path, "topics", "list")
        assert listed.returncode == 0, listed

        # 4. The supervisor SIGKILLed: the other nodes and the web console stop by themselves.
        os.kill(sup.proc.pid, signal.SIGKILL)
        sup.proc.wait(10)
        _wait_gone([pids[2], pids[3], pids[0]], 30)
        for port in (base + PORT_STRIDE + 1, base + 2 * PORT_STRIDE + 1):
            assert not port_in_use("127.0.0.1", port)
    finally:
        _cleanup(sup, pids.values())


@pytest.mark.parametrize("cwd_has_file", [False, True])
def test_default_bootstrap_lists_every_node(tmp_path, cwd_has_file):
    from raftlog.cli.common import DEFAULT_BOOTSTRAP, bootstrap_list, default_bootstrap

    if cwd_has_file:
        (tmp_path / "raftlog-data").mkdir()
        (tmp_path / "raftlog-data" / "bootstrap").write_text("10.0.0.1:9093,10.0.0.2:9093\n")
        assert default_bootstrap(tmp_path) == "10.0.0.1:9093,10.0.0.2:9093"
    else:
        assert default_bootstrap(tmp_path) == DEFAULT_BOOTSTRAP
        assert len(bootstrap_list(DEFAULT_BOOTSTRAP)) == 3

"""The console as a child process (what `raftlog cluster up` starts beside its nodes).

    child = ConsoleChild(bootstrap, node_http, port=8080, log_path=data_dir / "console.log")
    url = child.start(timeout_s=20)      # None: it did not come up (the reason is in `problem`)
    ...
    child.stop()                         # SIGTERM by PID, SIGKILL after a grace period

Like the nodes, it runs in its own session (a Ctrl-C at the terminal reaches only the
supervisor) and is stopped only by its PID. Its stdout and stderr go to `log_path`; start()
polls that file for the console's ready line under a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from raftlog.console.server import READY_PREFIX

__all__ = ["ConsoleChild"]

STOP_GRACE_S = 10.0


class ConsoleChild:
    def __init__(self, bootstrap: Sequence[str], node_http: Sequence[str], *, port: int, log_path: Path,
                 host: str = "127.0.0.1") -> None:
        # --supervisor-pid: it stops when this process dies, as the nodes do (cli/cluster.py).
        self.argv = [sys.executable, "-m", "raftlog.cli", "console", "--bootstrap", ",".join(bootstrap),
                     "--node-http", ",".join(node_http), "--host", host, "--port", str(port),
                     "--supervisor-pid", str(os.getpid())]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.problem = ""

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout_s: float = 20.0) -> str | None:
        """Start it and wait for its ready line; returns its URL, or None (see `problem`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        pause = threading.Event()
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            for line in text.splitlines():
                if line.startswith(READY_PREFIX):
                    return line[len(READY_PREFIX):].split()[0]
            if self.proc.poll() is not None:
                self.problem = (text.strip().splitlines() or [f"exited with code {self.proc.returncode}"])[-1]
                return None
            pause.wait(0.05)  # the poll interval of a deadline-bounded wait
        self.problem = f"not ready within {timeout_s:.0f} s (see {self.log_path})"
        self.stop()
        return None

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM by PID, SIGKILL after `grace_s`; the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a no-op if it exited meanwhile (Popen checks)
            try:
                return self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

"""Reading a test's child process that reports events as JSON lines on stdout (a transaction
app, a Java group member): one daemon thread per child puts each JSON line into a bounded
queue, and ends when the child's stdout does (the child exited or was killed)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading

__all__ = ["read_json_lines"]


def read_json_lines(proc: subprocess.Popen, events: queue.Queue) -> threading.Thread:
    """Start (and return) the thread that puts every line of `proc`'s text stdout that opens
    with "{" into `events`, decoded; other lines (a JVM's warnings) are skipped."""

    def run() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                events.put(json.loads(line))

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    return reader

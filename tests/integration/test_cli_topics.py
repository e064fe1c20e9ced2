"""The real `raftlog` command: `cluster up` brings up three nodes and the web console (printing its URL) and stops them cleanly on SIGTERM; `topics create/describe/list/delete/alter` (configs and partitions) and `cluster status` work against it (human and --json), and user errors (no cluster, unknown topic, bad replication factor, bad arguments) are one clear line with exit code 1 and no traceback."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from raftlog.cli.cluster import PORT_STRIDE, free_ports, port_in_use

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
NODES = 3


def _free_base_port() -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000, PORT_STRIDE)
        if not any(port_in_use("127.0.0.1", base + PORT_STRIDE * i + k) for i in range(NODES) for k in range(5)):
            return base
    raise AssertionError("no free port range found")


class Supervisor:
    """`raftlog cluster up` in a subprocess; its stdout lines arrive on a queue."""

    def __init__(self, data_dir: Path, base_port: int) -> None:
        self.proc = subprocess.Popen(
            [*RAFTLOG, "cluster", "up", "--nodes", str(NODES), "--data-dir", str(data_dir),
             "--base-port", str(base_port), "--no-restart", "--console-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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

    def close(self) -> None:
        """After the process exited: let the reader reach EOF and close the pipe."""
        self._reader.join(10)

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

    def node_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines if (m := re.match(r"^\d+\s+\S+\s+\S+.*?\s(\d+)\s+/", line))]


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    data_dir = tmp_path_factory.mktemp("cli") / "raftlog-data"
    sup = Supervisor(data_dir, _free_base_port())
    try:
        sup.wait_line(r"^cluster \S+ is up$", 60)
        sup.wait_line(r"^stop: Ctrl-C", 30)
        yield sup
    finally:
        pids = sup.node_pids() + [int(m.group(1)) for l in sup.lines if (m := re.search(r"^console: .*\(pid (\d+),", l))]
        if sup.proc.poll() is None:
            os.kill(sup.proc.pid, signal.SIGTERM)
            try:
                sup.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(sup.proc.pid, signal.SIGKILL)
                sup.proc.wait()
        for pid in pids:  # only if the supervisor failed to stop them
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sup.close()


@pytest.fixture(scope="module")
def bootstrap(supervisor: Supervisor) -> str:
    line = next(l for l in supervisor.lines if l.startswith("bootstrap:"))
    match = re.search(r"^bootstrap: (\S+)", line)
    assert match and len(match.group(1).split(",")) == NODES, line
    return match.group(1)


def run(*args: str, bootstrap: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("RAFTLOG_DEBUG", None)
    if bootstrap is not None:
        env["RAFTLOG_BOOTSTRAP"] = bootstrap
    process = subprocess.run([*RAFTLOG, *args], capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert process.returncode == 0, (args, process.stdout, process.stderr)
    return process


def assert_one_line_error(process: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert process.returncode == 1, (process.stdout, process.stderr)
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in process.stderr, process.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_version_and_help():
    assert run("--version").stdout.startswith("raftlog, version ")
    help_text = run("topics", "create", "--help").stdout
    assert "--replication-factor" in help_text and "Example:" in help_text


def test_cluster_up_table_names_a_controller(supervisor):
    rows = [l for l in supervisor.lines if re.match(r"^\d+\s", l)]
    assert len(rows) == NODES
    assert sum("yes (epoch" in r for r in rows) == 1
    assert len(supervisor.node_pids()) == NODES


def test_create_describe_list_json(bootstrap):
    created = json.loads(run("topics", "create", "demo", "--partitions", "6", "--replication-factor", "3",
                             "--json", bootstrap=bootstrap).stdout)
    assert len(created["partitions"]) == 6
    # Shown once led (the first elections take moments), not as six offline partitions.
    assert all(p["leader"] is not None and not p["offline"] for p in created["partitions"])
    assert Counter(p["preferred_leader"] for p in created["partitions"]) == {1: 2, 2: 2, 3: 2}
    described = json.loads(run("topics", "describe", "demo", "--json", bootstrap=bootstrap).stdout)
    # Leaders may be elected between the two calls; placement must be identical.
    def placement(partitions):
        return [(p["partition"], p["replicas"], p["preferred_leader"]) for p in partitions]
    assert placement(described["demo"]["partitions"]) == placement(created["partitions"])
    human = run("topics", "describe", "demo", bootstrap=bootstrap).stdout
    assert "preferred leaders: broker 1: 2, broker 2: 2, broker 3: 2" in human
    assert json.loads(run("topics", "list", "--json", bootstrap=bootstrap).stdout) == ["demo"]
    listed = json.loads(run("topics", "list", "--internal", "--json", bootstrap=bootstrap).stdout)
    assert "demo" in listed


def test_alter_delete_and_status(bootstrap):
    created = run("topics", "create", "scratch", bootstrap=bootstrap).stdout
    assert "created topic scratch" in created and "OFFLINE" not in created, created
    altered = json.loads(run("topics", "alter", "scratch", "--set", "retention_ms=60000", "--json",
                             bootstrap=bootstrap).stdout)
    assert altered["configs"] == {"retention_ms": "60000"}
    assert "deleted topic scratch" in run("topics", "delete", "scratch", bootstrap=bootstrap).stdout
    status = json.loads(run("cluster", "status", "--json", bootstrap=bootstrap).stdout)
    assert status["controller_id"] in (1, 2, 3)
    assert [b["id"] for b in status["brokers"] if not b["fenced"]] == [1, 2, 3]
    assert all(b["last_heartbeat_age_ms"] is not None for b in status["brokers"])
    assert "controller  node" in run("cluster", "status", bootstrap=bootstrap).stdout


def test_alter_partitions_grows_a_topic_and_refuses_to_shrink_it(bootstrap):
    run("topics", "create", "grow", "--partitions", "2", "--replication-factor", "3", bootstrap=bootstrap)
    grown = json.loads(run("topics", "alter", "grow", "--partitions", "5", "--json", bootstrap=bootstrap).stdout)
    assert grown == {"name": "grow", "partitions": 5}
    described = json.loads(run("topics", "describe", "grow", "--json", bootstrap=bootstrap).stdout)
    assert [p["partition"] for p in described["grow"]["partitions"]] == [0, 1, 2, 3, 4]
    assert all(len(p["replicas"]) == 3 for p in described["grow"]["partitions"])
    assert_one_line_error(run("topics", "alter", "grow", "--partitions", "3", bootstrap=bootstrap, check=False),
                          "INVALID_PARTITIONS", "5 partitions")


def test_user_errors_are_one_line(bootstrap):
    assert_one_line_error(run("topics", "describe", "no-such-topic", bootstrap=bootstrap, check=False),
                          "unknown topic", "no-such-topic")
    assert_one_line_error(run("topics", "create", "big", "--replication-factor", "4", bootstrap=bootstrap,
                              check=False), "replication factor", "INVALID_REPLICATION_FACTOR")
    assert_one_line_error(run("topics", "delete", "no-such-topic", bootstrap=bootstrap, check=False),
                          "unknown topic")
    assert_one_line_error(run("topics", "create", "x", "--config", "nonsense", bootstrap=bootstrap,
                              check=False), "key=value")
    bad_args = run("topics", "create", bootstrap=bootstrap, check=False)
    assert bad_args.returncode == 2 and "Missing argument" in bad_args.stderr  # click's usage error


def test_no_cluster_reachable():
    (port,) = free_ports(1)
    process = run("topics", "list", bootstrap=f"127.0.0.1:{port}", check=False)
    assert_one_line_error(process, f"127.0.0.1:{port}", "scripts/quorum")


def _console(supervisor: Supervisor) -> tuple[str, int]:
    line = next(l for l in supervisor.lines if l.startswith("console: "))
    match = re.match(r"^console: (http://\S+) \(pid (\d+), log ", line)
    assert match, line
    return match.group(1), int(match.group(2))


def test_cluster_up_starts_the_web_console(supervisor):
    import urllib.request

    url, _pid = _console(supervisor)
    with urllib.request.urlopen(url + "/", timeout=30) as response:
        page = response.read().decode()
    assert response.status == 200 and 'id="brokers-live"' in page
    assert re.search(r'id="brokers-live">\s*3 / 3', page), page[:2000]


def test_cluster_up_stops_every_node_on_sigterm(supervisor):
    pids = supervisor.node_pids() + [_console(supervisor)[1]]
    os.kill(supervisor.proc.pid, signal.SIGTERM)
    assert supervisor.proc.wait(30) == 0
    supervisor.wait_line(r"^stopped \(node 1: exit 0, node 2: exit 0, node 3: exit 0\)$", 5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # signal 0: existence check only

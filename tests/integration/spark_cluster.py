"""A Spark standalone cluster (a master and two workers) and a Spark Connect server, started from
the pyspark package's own scripts (no download), for the tests that run the raftlog source and
sink on executors in other processes. Loaded by path, as spark_fixtures.

* `StandaloneCluster.start()`: `bin/spark-class org.apache.spark.deploy.master.Master` and two
  `...deploy.worker.Worker` processes on free loopback ports (spark-class execs the JVM, so
  the PID we hold is the JVM's), waiting until both workers are registered (the master's
  JSON status page). Each worker offers 2 cores and 3 GiB, so two applications (the test
  driver and the Connect server) fit side by side with one 1-core executor per worker each.
* `ConnectServer.start(master)`: `sbin/start-connect-server.sh` (it daemonizes and writes the
  JVM's PID to SPARK_PID_DIR, which we point at a temp dir), on a free port, its driver
  connected to the standalone master.
* `stop()` of each: SIGTERM by PID, SIGKILL after a grace period, then the same for every
  process left below it (executor JVMs and their Python workers), by PID.

Executors run `sys.executable` (this venv) as their Python, so they import this checkout's
raftlog and spark_source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
WORKERS = 2
WORKER_CORES = 2
WORKER_MEMORY = "3g"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_ports(n: int) -> list[int]:
    from raftlog.cli.cluster import free_ports as pick

    return pick(n)


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces; split after the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False


def stop_pids(pids: list[int], grace_s: float = 15.0) -> None:
    """SIGTERM each, wait up to grace_s for all, SIGKILL the rest (by PID)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_PID_DIR": str(root / "pids"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS,
    })
    env.pop("SPARK_NO_DAEMONIZE", None)  # start-connect-server.sh must daemonize (PID file)
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def _wait(predicate, timeout_s: float, what: str, procs: list[subprocess.Popen] = ()):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a process exited with {p.returncode}")
        try:
            value = predicate()
            if value:
                return value
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what} ({last!r})")


class StandaloneCluster:
    """A Spark standalone master and WORKERS workers on 127.0.0.1 (module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        for d in ("local", "logs", "pids", "work"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + WORKERS)
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.root / "logs" / f"{name}.log", "ab")
        try:
            p = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                 env=_env(self.root), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=self.root)
        finally:
            log.close()
        self.procs.append(p)
        return p

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
            return json.load(r)

    def start(self, timeout_s: float = 180) -> StandaloneCluster:
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.ui_port))
            _wait(self.status, timeout_s, "the Spark master", self.procs)
            for i in range(WORKERS):
                self._spawn(f"worker-{i + 1}", "org.apache.spark.deploy.worker.Worker",
                            "--host", "127.0.0.1", "--cores", str(WORKER_CORES),
                            "--memory", WORKER_MEMORY, "--webui-port",
                            str(self.worker_ui_ports[i]), "--work-dir",
                            str(self.root / "work" / f"worker-{i + 1}"), self.master_url)
            _wait(lambda: sum(w.get("state") == "ALIVE" for w in self.status()["workers"])
                  == WORKERS, timeout_s, "two registered Spark workers", self.procs)
        except BaseException:
            self.stop()
            raise
        return self

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs[1:]]

    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """Executor JVMs (children of the workers), of one application when given."""
        out = []
        for w in self.worker_pids():
            for c in children(w):
                line = cmdline(c)
                if "CoarseGrainedExecutorBackend" in line and (app_id is None or app_id in line):
                    out.append(c)
        return out

    def stop(self) -> None:
        below = [d for p in self.procs for d in descendants(p.pid)]
        stop_pids([p.pid for p in reversed(self.procs)])
        for p in self.procs:
            p.wait(timeout=5)
        stop_pids([d for d in below if alive(d)], grace_s=5)
        self.procs.clear()


class ConnectServer:
    """`sbin/start-connect-server.sh` with its driver on a standalone master (module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        for d in ("local", "logs", "pids"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        self.url = f"sc://127.0.0.1:{self.port}"
        self.pid: int | None = None

    def start(self, master: str, timeout_s: float = 120) -> ConnectServer:
        env = _env(self.root)
        confs = {
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": JVM_OPTS,
            "spark.executor.extraJavaOptions": JVM_OPTS,
            "spark.cores.max": "2",
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
        }
        args = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--master", master]
        for k, v in confs.items():
            args += ["--conf", f"{k}={v}"]
        subprocess.run(args, env=env, check=True, timeout=60, cwd=self.root,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pids = list((self.root / "pids").glob("*SparkConnectServer*.pid"))
        if not pids:
            raise RuntimeError("start-connect-server.sh wrote no PID file")
        self.pid = int(pids[0].read_text().strip())
        try:
            _wait(self._listening, timeout_s, "the Spark Connect server")
        except BaseException:
            self.stop()
            raise
        return self

    def _listening(self) -> bool:
        import socket

        if self.pid is None or not alive(self.pid):
            raise RuntimeError(f"the Spark Connect server exited; see {self.root / 'logs'}")
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.pid is None:
            return
        below = descendants(self.pid)
        stop_pids([self.pid])
        stop_pids([d for d in below if alive(d)], grace_s=5)
        self.pid = None

#!/usr/bin/env python
"""Scale benchmark (issue 19): many partitions x RF 3 on three local nodes.

    scripts/bench scale [--partitions 1000] [--runs 3] [--idle-s 30] [--settle-s 20]
        [--load-s 10] [--active-segment-mib 1024] [--keep DIR]

In one run against one 3-node cluster (real `raftlog node start` processes on free loopback
ports, data in a temp dir, every process stopped by PID at the end) it measures:

* baseline first (only a 3-partition RF 3 topic besides the internal ones): idle CPU per
  node and produce throughput, so the figures at scale print as ratios to it;
* creation time of `--partitions` partitions (10 topics, RF 3) until `metadata` names a
  leader for each;
* idle CPU per node (utime+stime from /proc/PID/stat over `--idle-s`, `--settle-s` after
  creation), RSS (/proc/PID/status VmRSS), both with the node's metadata quorum process
  added, and open files (/proc/PID/fd), medians of --runs windows;
* produce throughput over all partitions (one connection per leader, every request carries
  one small batch for each partition that node leads) and the elections that happened during
  that load without any fault (false elections: the candidacies the nodes' replicas started
  meanwhile, their `raftlog_raft_elections_total`, not the leader epochs in `metadata`, which
  follow the leaders' reports with a lag);
* before the kill/restart runs, `--active-segment-mib` (0: skipped) of 16 KiB batches from
  `--active-producers` idempotent producers (producer ids from `init_producer_id`, epochs and
  sequences set, so the producer state matters) into one more topic of 1 partition RF 3 whose
  `segment_bytes` keeps them all in one active segment, until every node's log of it holds
  them all: each restart below then opens a log with that active segment (recovery point,
  producer snapshot);
* --runs times: SIGKILL one node (each in turn), the time until `metadata` on a survivor
  names a live leader for every partition (and the median per partition of those that lost
  their leader; both as the controller records them, so a killed controller adds its own
  failover; and the candidacies the survivors' replicas started meanwhile per partition
  that lost its leader: above 1, split votes and retries), then restart it and time until
  it serves again (/health ok, the broker unfenced, and every replica open: counted from
  the node's `replica_opened` log events, since /health counts the replicas it knows, open
  or not), and the time until every leader is back on its preferred broker (the
  controller's batched leader moves), so the next kill finds a balanced cluster.

Targets print beside each figure: issue 19's at 1,000 partitions, issue 46's above that (10,000:
created and led < 60 s, idle CPU < 10% of a core and RSS < 1 GiB per node, all led again < 10 s).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import secrets
import shlex
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plots as bench_plot  # noqa: E402
from partition.batch import BatchBuilder  # noqa: E402
from partition.manager import PARTITIONS_DIR  # noqa: E402
from raftlog import Producer  # noqa: E402
from raftlog.base.errors import RaftlogError, error_from_wire  # noqa: E402
from raftlog.base.protocol import FrameDecoder, encode_frame  # noqa: E402
from raftlog.base.topics import INTERNAL_TOPICS  # noqa: E402
from raftlog.cli.cluster import (  # noqa: E402
    DEFAULT_HOST, NodePorts, NodeProcess, build_node_configs, free_ports, port_in_use, stop_all,
    write_node_config,
)
from raftlog.node.config import new_cluster_id  # noqa: E402

TOPICS = 10
RECORDS_PER_BATCH = 10
RECORD_BYTES = 100
ACTIVE_TOPIC = "scale-active"
ACTIVE_BATCH_BYTES = 16 << 10
ACTIVE_RECORD_BYTES = 4000  # four records (and their framing) fill one 16 KiB batch
ACTIVE_FILL_ROUNDS = 5  # sends of the records that failed, at most
INT32_MAX = (1 << 31) - 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.05
FAILOVER_POLL_S = 0.5  # the failover wait's metadata polls above 1,000 partitions


def poll_pause(started: float) -> float:
    """The pause after a poll that began at `started`: POLL_S, or as long as the poll took
    when that was longer (a `metadata` of 10,000 partitions takes the node a good part of a
    second at a high load: polled back to back, the bench would be most of its load)."""
    return max(POLL_S, time.monotonic() - started)


def failover_pause(started: float, partitions: int) -> float:
    """The pause between the failover wait's `metadata` polls (issue 46): POLL_S up to
    1,000 partitions, FAILOVER_POLL_S above (polled every 0.05-0.2 s, the survivors spent
    a fifth of their time answering 10,000 partitions' metadata: the bench was the load it
    measured), and never less than twice the poll itself. The wait asks only for the topics
    that still have a partition not led by a survivor. This pause is the resolution of the
    failover figures."""
    floor = POLL_S if partitions <= 1000 else FAILOVER_POLL_S
    return max(floor, 2 * (time.monotonic() - started))


@dataclass(frozen=True)
class Targets:
    """Issue 19's targets at 1,000 partitions, issue 46's at 10,000 (more than 1,000 here)."""

    idle_cpu: float  # of a core, per node
    all_led_s: float  # every partition led again after a SIGKILL
    create_s: float | None  # creation until every partition is led
    rss_mib: float | None

    @staticmethod
    def of(partitions: int) -> "Targets":
        if partitions > 1000:
            return Targets(0.10, 10.0, 60.0, 1024.0)
        return Targets(0.05, 5.0, None, None)


class Conn:
    def __init__(self, address: str, timeout_s: float = 30.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(1 << 30)
        self.next_id = 1

    def send(self, op: str, **fields: Any) -> int:
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(encode_frame({**fields, "v": 1, "id": rid, "op": op}))
        return rid

    def receive(self) -> dict:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def check_started(procs: Mapping[int, NodeProcess]) -> None:
    """End the bench with its log tail if a node started here exited (its port taken, say),
    instead of later as a refused connection or a timeout that names no cause."""
    for i, p in sorted(procs.items()):
        if not p.alive():
            raise SystemExit(f"node {i} exited with {p.returncode()}:\n{p.log_tail()}")


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # utime, stime (fields 14, 15)


def node_family(pid: int) -> list[int]:
    """`pid` and its live child processes (a voter's metadata quorum process, issue 46): a
    node's CPU and RSS are theirs together."""
    family = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                family.append(int(entry.name))
    return family


def cpu_seconds(pid: int) -> float:
    """CPU seconds of node `pid` so far, its children's included."""
    total = 0.0
    for member in node_family(pid):
        with contextlib.suppress(OSError):
            total += sum(cpu_times(member))
    return total


def rss_mib(pid: int) -> float:
    """The RSS of node `pid`, its children's included."""
    total = 0.0
    for member in node_family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total or float("nan")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def batch_bytes() -> bytes:
    b = BatchBuilder()
    ts = int(time.time() * 1000)
    for _ in range(RECORDS_PER_BATCH):
        b.append(b"x" * RECORD_BYTES, None, timestamp_ms=ts)
    return b.build()


def node_ports(base_port: int | None) -> dict[int, NodePorts]:
    """The three nodes' listener ports: free ones, or five per node from `base_port`. Those
    are refused at once when any is taken: a node that cannot bind exits, but the bench may
    already have reached whatever holds the port (seen: a second bench ran against the first
    one's cluster and failed with TOPIC_ALREADY_EXISTS, naming no port)."""
    if base_port is None:
        return {i: NodePorts(*free_ports(5)) for i in (1, 2, 3)}
    numbers = range(base_port, base_port + 15)
    taken = [port for port in numbers if port_in_use(DEFAULT_HOST, port)]
    if taken:
        raise SystemExit(f"port {taken[0]} is in use (another cluster or bench?): pick other "
                         f"ports with --base-port, or leave it out for free ones")
    return {i: NodePorts(*numbers[5 * (i - 1) : 5 * i]) for i in (1, 2, 3)}


class Cluster:
    def __init__(self, root: Path, settings: dict[str, Any], ports: dict[int, NodePorts]):
        self.root = root
        self.configs = build_node_configs(root, new_cluster_id(), secrets.token_urlsafe(24),
                                          ports, settings=settings)
        self.procs: dict[int, NodeProcess] = {}
        self.led_now = 0

    def start(self, i: int) -> None:
        cfg = self.configs[i]
        self.procs[i] = NodeProcess(i, write_node_config(cfg), cfg.data_dir / "node.log").start()

    def pid(self, i: int) -> int:
        pid = self.procs[i].pid
        assert pid is not None
        return pid

    def client(self, i: int) -> str:
        return str(self.configs[i].listeners.client)

    def live(self) -> list[int]:
        return [i for i, p in sorted(self.procs.items()) if p.alive()]

    def call(self, i: int, op: str, timeout_s: float = 30.0, **fields: Any) -> dict:
        conn = Conn(self.client(i), timeout_s)
        try:
            conn.send(op, **fields)
            resp = conn.receive()
        finally:
            conn.close()
        if "error" in resp:
            raise error_from_wire(resp["error"])
        return resp

    def wait(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        pause = threading.Event()
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, KeyError, TypeError, RaftlogError) as exc:
                last = exc  # not yet: the cluster is still settling
            pause.wait(poll_pause(started))
        raise SystemExit(f"timed out after {timeout_s} s waiting for {what}: {last!r} "
                         f"(partitions led: {self.led_now})")

    def ready(self) -> bool:
        """Every started node is up, unfenced, and a controller is named (a node that
        exited ends the bench: `check_started`)."""
        check_started(self.procs)
        st = self.call(self.live()[0], "cluster_status", 5.0)
        unfenced = {b["id"] for b in st["brokers"] if not b["fenced"]}
        return st.get("controller_id") is not None and set(self.live()) <= unfenced

    def partitions(self, via: int, topics: list[str]) -> dict[tuple[str, int], dict]:
        md = self.call(via, "metadata", 10.0, topics=topics)
        out = {}
        for t in md["topics"]:
            if "error" in t:
                raise KeyError(t["name"])
            for p in t["partitions"]:
                out[(t["name"], p["partition"])] = p
        return out

    def internal_partitions(self, via: int) -> dict[tuple[str, int], dict]:
        """The partitions of the internal topics that exist (__consumer_offsets is created
        at a group's first request)."""
        out = {}
        for name in sorted(INTERNAL_TOPICS):
            try:
                out.update(self.partitions(via, [name]))
            except KeyError:
                pass
        return out

    def all_led(self, via: int, topics: list[str], expected: int, live: set[int]) -> dict | None:
        parts = self.partitions(via, topics)
        # A leader the group confirmed (epoch > 0): a new partition's record names its first
        # leader at epoch 0 before its Raft group runs (partition/raft.py "First term").
        self.led_now = sum(1 for p in parts.values() if p["leader"] in live and p["leader_epoch"] > 0)
        if len(parts) == expected and self.led_now == expected:
            return parts
        return None

    def health(self, i: int) -> dict:
        listener = self.configs[i].listeners.http
        try:
            with urllib.request.urlopen(f"http://{listener.host}:{listener.port}/health", timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            exc.close()
            return body

    def stop(self) -> None:
        stop_all(self.procs.values(), 15)


def idle_cpu(cluster: Cluster, seconds: float) -> dict[int, float]:
    """Fraction of one core each node's process used over `seconds`."""
    before = {i: cpu_seconds(cluster.pid(i)) for i in cluster.live()}
    t0 = time.monotonic()
    threading.Event().wait(seconds)
    elapsed = time.monotonic() - t0
    return {i: (cpu_seconds(cluster.pid(i)) - c) / elapsed for i, c in before.items()}


def produce_load(cluster: Cluster, parts: dict[tuple[str, int], dict], seconds: float,
                 window: int = 2) -> dict[str, float]:
    """Every leader gets one connection keeping `window` requests in flight; each request
    carries one batch for every partition that node leads. Returns records/s and errors."""
    batch = batch_bytes()
    by_leader: dict[int, list[dict]] = {}
    for (topic, p), info in parts.items():
        by_leader.setdefault(info["leader"], []).append({"topic": topic, "partition": p, "records": batch})
    acked = [0]
    errors: collections.Counter[str] = collections.Counter()  # batches, by error code
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run(leader: int, partitions: list[dict]) -> None:
        conn = Conn(cluster.client(leader), 60)
        inflight = 0
        try:
            while True:
                while inflight < window and time.monotonic() < end:
                    conn.send("produce", acks=-1, timeout_ms=10_000, partitions=partitions)
                    inflight += 1
                if not inflight:
                    return
                resp = conn.receive()
                inflight -= 1
                if "error" in resp:  # the whole request
                    codes = [resp["error"].get("code", "?")] * len(partitions)
                else:
                    codes = [p["error"].get("code", "?") for p in resp["partitions"] if "error" in p]
                with lock:
                    acked[0] += len(partitions) - len(codes)
                    errors.update(codes)
        finally:
            conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=item) for item in by_leader.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    return {"records_per_s": acked[0] * RECORDS_PER_BATCH / elapsed, "batch_errors": sum(errors.values()),
            "error_codes": dict(errors)}


def segment_bytes_on(cluster: Cluster, i: int, topic: str) -> int:
    """Bytes in node `i`'s segment files of `topic`-0 (0 before it exists)."""
    d = cluster.configs[i].data_dir / PARTITIONS_DIR / f"{topic}-0"
    try:
        return sum(f.stat().st_size for f in d.iterdir() if f.suffix == ".log")
    except FileNotFoundError:
        return 0


def fill_active_segment(cluster: Cluster, mib: int, producers: int) -> tuple[float, dict[int, int]]:
    """Create ACTIVE_TOPIC (1 partition, RF 3, segment_bytes above `mib`) and write `mib` MiB
    to it through `producers` idempotent client producers at once (each its own producer id
    from init_producer_id, acks=all, 16 KiB batches, up to 5 in flight: one alone moves
    ~3 MiB/s here, since each acks=all round trip waits for the followers' next fetch), then
    wait until every node's log holds them. Returns (seconds, segment files of the partition
    per node)."""
    configs = {"segment_bytes": str(min(INT32_MAX, (mib + 256) << 20))}

    def create() -> bool:
        try:
            cluster.call(1, "create_topic", 60.0, name=ACTIVE_TOPIC, partitions=1, replication_factor=3,
                         configs=configs)
        except RaftlogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
        return True

    cluster.wait(create, 120, f"create_topic {ACTIVE_TOPIC}")
    cluster.wait(lambda: cluster.all_led(1, [ACTIVE_TOPIC], 1, {1, 2, 3}), 60, f"{ACTIVE_TOPIC} led")
    target = mib << 20
    value = os.urandom(ACTIVE_RECORD_BYTES)
    each = -(-target // ACTIVE_RECORD_BYTES // producers)
    failed: list[BaseException] = []

    def write() -> None:
        # Records that failed (an election that outlasted the delivery timeout, say) are sent
        # again, a few rounds at most: what counts is that the bytes end up in the log. A send
        # may block for minutes when the machine is loaded (load ~20: 60 s were not enough).
        try:
            with Producer([cluster.client(i) for i in (1, 2, 3)], acks="all", linger_ms=5,
                          batch_bytes=ACTIVE_BATCH_BYTES, enable_idempotence=True,
                          delivery_timeout_ms=300_000, max_block_ms=600_000) as producer:
                todo = each
                for _ in range(ACTIVE_FILL_ROUNDS):
                    futures = [producer.send(ACTIVE_TOPIC, value, partition=0) for _ in range(todo)]
                    producer.flush(timeout=900)
                    todo = sum(1 for f in futures if f.exception(0) is not None)
                    if not todo:
                        return
                raise RuntimeError(f"{todo} records still failing after {ACTIVE_FILL_ROUNDS} rounds: "
                                   f"{next(f.exception(0) for f in futures if f.exception(0))!r}")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failed.append(exc)

    t0 = time.monotonic()
    threads = [threading.Thread(target=write) for _ in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit(f"filling {ACTIVE_TOPIC} failed: {failed[0]!r}")
    deadline = time.monotonic() + 600
    while True:
        held = {i: segment_bytes_on(cluster, i, ACTIVE_TOPIC) for i in (1, 2, 3)}
        if all(b >= target for b in held.values()):
            return time.monotonic() - t0, held
        if time.monotonic() > deadline:
            raise SystemExit(f"not every node holds the {mib} MiB of {ACTIVE_TOPIC} 600 s after the "
                             f"producers were done (MiB: {fmt_nodes({i: b / 2**20 for i, b in held.items()}, '.0f')})")
        threading.Event().wait(POLL_S * 10)


def active_open_note(node_log: Path, log_from: int) -> str:
    """How the restarted node rebuilt ACTIVE_TOPIC's producer state, from its log: the
    `replica_producers_loaded` event (a replica logs it when it walked 1,000 headers or more,
    or could not use its snapshot)."""
    with open(node_log, "rb") as f:
        f.seek(log_from)
        lines = [ln for ln in f.read().decode(errors="replace").splitlines()
                 if "event=replica_producers_loaded" in ln and f"topic={ACTIVE_TOPIC} " in ln]
    if not lines:
        return f" ({ACTIVE_TOPIC}'s producer state: fewer than 1,000 headers walked)"
    fields = dict(kv.split("=", 1) for kv in shlex.split(lines[-1]) if "=" in kv)
    unused = "" if fields.get("snapshot_offset") != "null" else \
        f" (no snapshot: {fields.get('snapshot_unused')})"
    return (f" ({ACTIVE_TOPIC}'s producer state: snapshot at {fields.get('snapshot_offset')}{unused}, "
            f"{fields.get('batches_walked')} headers walked in {fields.get('duration_ms')} ms)")


def elections_started(cluster: Cluster, nodes: Iterable[int] | None = None) -> int:
    """Candidacies the replicas of `nodes` (default: every live node) have started so far
    (/metrics)."""
    total = 0
    for i in cluster.live() if nodes is None else nodes:
        listener = cluster.configs[i].listeners.http
        with urllib.request.urlopen(f"http://{listener.host}:{listener.port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("raftlog_raft_elections_total "):
                    total += int(float(line.split()[1]))
    return total


def fmt_nodes(values: dict[int, float], spec: str) -> str:
    return " ".join(f"n{i} {format(v, spec)}" for i, v in sorted(values.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000, help="in 10 topics, RF 3")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--settle-s", type=float, default=20.0)
    ap.add_argument("--load-s", type=float, default=10.0)
    ap.add_argument("--heartbeat-ms", type=int, default=1500)
    ap.add_argument("--session-timeout-ms", type=int, default=9000)
    ap.add_argument("--controller-quorum-fetch-timeout-ms", type=int, default=None,
                    help="the nodes' metadata quorum timeout (default: the node's own)")
    ap.add_argument("--rebalance-s", type=float, default=120.0,
                    help="after a restart, wait this long for every leader to be back on its preferred broker")
    ap.add_argument("--active-segment-mib", type=int, default=1024,
                    help="before the restarts, this many MiB in one active segment of one more "
                         "topic (1 partition, RF 3) from idempotent producers; 0 skips it")
    ap.add_argument("--active-producers", type=int, default=16,
                    help="idempotent producers writing the active segment at once")
    ap.add_argument("--keep", help="data directory to use and keep (default: a temp dir)")
    ap.add_argument("--base-port", type=int, default=None,
                    help="use the 15 ports from here (default: free ports the kernel does not hand out)")
    bench_plot.add_plot_option(ap, "scale")
    args = ap.parse_args()
    if args.partitions < TOPICS:
        ap.error(f"--partitions must be at least {TOPICS}, one per topic (got {args.partitions})")
    per_topic = args.partitions // TOPICS  # rounded down to a multiple of TOPICS
    total = per_topic * TOPICS
    targets = Targets.of(total)

    ports = node_ports(args.base_port)  # before the data directory: a taken port leaves nothing behind
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scale-bench-"))
    settings = {"heartbeat_ms": args.heartbeat_ms, "session_timeout_ms": args.session_timeout_ms}
    if args.controller_quorum_fetch_timeout_ms is not None:
        settings["controller_quorum_fetch_timeout_ms"] = args.controller_quorum_fetch_timeout_ms
    cluster = Cluster(root, settings, ports)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        cluster.wait(cluster.ready, 90, "a ready cluster")
        print(f"3 local nodes in {root}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}; "
              f"{total} partitions ({TOPICS} topics x {per_topic}) RF 3; runs {args.runs}", flush=True)

        # ---------------------------------------------------------------- baseline
        cluster.wait(lambda: cluster.call(1, "create_topic", name="base", partitions=3, replication_factor=3),
                     60, "create_topic base")
        base_parts = cluster.wait(lambda: cluster.all_led(1, ["base"], 3, {1, 2, 3}), 60, "base leaders")
        threading.Event().wait(min(args.settle_s, 5))
        base_cpu = [idle_cpu(cluster, args.idle_s) for _ in range(max(1, args.runs))]
        base_idle = {i: statistics.median(r[i] for r in base_cpu) for i in (1, 2, 3)}
        base_load = produce_load(cluster, base_parts, args.load_s)
        # the same bytes per request concentrated in 3 partitions
        print(f"baseline (3 partitions): idle CPU {fmt_nodes(base_idle, '.1%')}; "
              f"produce {base_load['records_per_s']:.0f} records/s "
              f"(one {RECORDS_PER_BATCH}-record batch per partition per request)", flush=True)

        # ---------------------------------------------------------------- creation
        topics = [f"scale-{t}" for t in range(TOPICS)]
        t0 = time.monotonic()
        for name in topics:
            def create(name: str = name) -> bool:
                try:
                    cluster.call(1, "create_topic", 60.0, name=name, partitions=per_topic, replication_factor=3)
                except RaftlogError as exc:
                    if exc.code != "TOPIC_ALREADY_EXISTS":
                        raise  # NOT_CONTROLLER etc.: the wait retries
                return True

            cluster.wait(create, 120, f"create_topic {name}")
        created = time.monotonic() - t0
        parts = cluster.wait(lambda: cluster.all_led(1, topics, total, {1, 2, 3}), 900, "every partition led")
        led = time.monotonic() - t0
        goal = f"target < {targets.create_s:g} s" if targets.create_s else "issue 19's baseline 19.2 s"
        print(f"create {total} partitions: {created:.1f} s; all led after {led:.1f} s "
              f"[{goal}]", flush=True)

        # ---------------------------------------------------------------- idle
        threading.Event().wait(args.settle_s)
        cpu_runs = [idle_cpu(cluster, args.idle_s) for _ in range(max(1, args.runs))]
        idle = {i: statistics.median(r[i] for r in cpu_runs) for i in (1, 2, 3)}
        rss = {i: rss_mib(cluster.pid(i)) for i in (1, 2, 3)}
        fds = {i: float(open_files(cluster.pid(i))) for i in (1, 2, 3)}
        print(f"idle CPU per node (median of {args.runs} x {args.idle_s:g} s): {fmt_nodes(idle, '.1%')} "
              f"[target < {targets.idle_cpu:.0%}; ratio to baseline {fmt_nodes({i: idle[i] / max(base_idle[i], 1e-6) for i in idle}, '.1f')}]")
        bench_plot.idle_cpu(args.plot, f"idle CPU per node, 3 local nodes: {total:,} partitions (RF 3) beside "
                            f"the 3-partition baseline, medians of {args.runs} x {args.idle_s:g} s",
                            {"baseline (3 partitions)": {f"node {i}": 100 * v for i, v in base_idle.items()},
                             f"{total:,} partitions": {f"node {i}": 100 * v for i, v in idle.items()}},
                            target=100 * targets.idle_cpu, note=bench_plot.command_note())
        print(f"RSS MiB: {fmt_nodes(rss, '.0f')}; open files: {fmt_nodes(fds, '.0f')} "
              f"[target{f' RSS < {targets.rss_mib:.0f} MiB;' if targets.rss_mib else ''} open files "
              f"bounded, not ~2 per partition]", flush=True)

        # ---------------------------------------------------------------- load
        # The leaders as they are now: the controller moved many to their preferred brokers
        # since creation (a load sent by the map of then got NOT_LEADER for those).
        parts = cluster.wait(lambda: cluster.all_led(1, topics, total, {1, 2, 3}), 60, "every partition led")
        before = elections_started(cluster)
        load = produce_load(cluster, parts, args.load_s)
        false_elections = elections_started(cluster) - before
        print(f"produce over {total} partitions: {load['records_per_s']:.0f} records/s "
              f"(ratio to 3 partitions {load['records_per_s'] / max(base_load['records_per_s'], 1):.2f}; "
              f"batch errors {load['batch_errors']}{' ' + str(load['error_codes']) if load['error_codes'] else ''}); "
              f"elections during load without faults: "
              f"{false_elections} [target 0]", flush=True)

        # ---------------------------------------------------------------- active segment
        active = ""
        if args.active_segment_mib > 0:
            took, held = fill_active_segment(cluster, args.active_segment_mib, args.active_producers)
            active = f" and a {args.active_segment_mib} MiB active segment"
            print(f"{ACTIVE_TOPIC}: 1 partition RF 3, {args.active_segment_mib} MiB of "
                  f"{ACTIVE_BATCH_BYTES >> 10} KiB batches from {args.active_producers} idempotent producers "
                  f"in {took:.1f} s "
                  f"({args.active_segment_mib / took:.1f} MiB/s); segment files per node (MiB): "
                  f"{fmt_nodes({i: b / 2**20 for i, b in held.items()}, '.0f')}", flush=True)

        # ---------------------------------------------------------------- kill / restart
        all_led_s: list[float] = []
        per_part_s: list[float] = []
        restart_s: list[float] = []
        rebalance_s: list[str] = []
        with_controller: list[bool] = []  # the victim hosted the active controller
        per_orphan: list[float] = []  # candidacies per partition that lost its leader
        for run in range(args.runs):
            victim = run % 3 + 1
            cluster.wait(cluster.ready, 120, "a ready cluster")
            parts = cluster.wait(lambda: cluster.all_led(1, topics, total, {1, 2, 3}), 120, "every partition led")
            orphans = {k for k, p in parts.items() if p["leader"] == victim}
            survivors = {1, 2, 3} - {victim}
            via = min(survivors)
            controller = cluster.health(via).get("metadata", {}).get("controller_id")
            with_controller.append(controller == victim)
            # Their replicas' candidacies count every partition led there, internal ones too.
            led_there = len(orphans) + sum(
                1 for p in cluster.internal_partitions(via).values() if p["leader"] == victim)
            candidacies = elections_started(cluster, survivors)
            t0 = time.monotonic()
            killed_at = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"  # to line up with node logs
            cluster.procs[victim].kill()
            first_led: dict[tuple[str, int], float] = {}
            deadline = t0 + 300
            waiting = list(topics)  # topics with a partition not yet led by a survivor
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    now_parts = cluster.partitions(via, waiting)
                except (OSError, RaftlogError):
                    threading.Event().wait(failover_pause(started, total))
                    continue
                now = time.monotonic() - t0
                for k, p in now_parts.items():
                    if k in orphans and k not in first_led and p["leader"] in survivors:
                        first_led[k] = now
                waiting = sorted({t for (t, _), p in now_parts.items() if p["leader"] not in survivors})
                if not waiting:
                    break
                threading.Event().wait(failover_pause(started, total))
            else:
                raise SystemExit(f"not every partition led 300 s after killing node {victim}")
            all_led_s.append(time.monotonic() - t0)
            per_part = statistics.median(first_led.values()) if first_led else 0.0
            candidacies = elections_started(cluster, survivors) - candidacies
            per_orphan.append(candidacies / led_there if led_there else 0.0)
            per_part_s.append(per_part)

            node_log = cluster.configs[victim].data_dir / "node.log"
            log_from = node_log.stat().st_size if node_log.exists() else 0
            cluster.start(victim)
            t1 = time.monotonic()
            expected = sum(1 for p in parts.values() if victim in p["replicas"])
            active_opened = f"event=replica_opened topic={ACTIVE_TOPIC} ".encode()

            def opened() -> bool:
                # /health counts the replicas it knows, open or not: count the opens it logged.
                with open(node_log, "rb") as f:
                    f.seek(log_from)
                    text = f.read()
                return text.count(b"event=replica_opened") >= expected and (
                    not active or active_opened in text)  # the large log among them

            def serving() -> bool:
                h = cluster.health(victim)
                rm = h.get("replicas", {})
                return h.get("ok") is True and rm.get("replicas", 0) >= expected and cluster.ready()

            cluster.wait(serving, 300, f"node {victim} serving")
            cluster.wait(opened, 300, f"node {victim}'s {expected} replicas open")
            restart_s.append(time.monotonic() - t1)
            active_note = active_open_note(node_log, log_from) if active else ""
            # Before the next kill, the controller moves leaders back (preferred leaders, in
            # batches): otherwise the next victim leads its own and the last victim's share.
            t2 = time.monotonic()
            home = 0
            while time.monotonic() < t2 + args.rebalance_s:
                try:
                    home = sum(1 for p in cluster.partitions(via, topics).values() if p["leader"] == p["preferred_leader"])
                except (OSError, RaftlogError):
                    home = 0  # the cluster is still settling
                if home == total:
                    break
                threading.Event().wait(POLL_S * 10)
            rebalance_s.append(f"{time.monotonic() - t2:.1f} s" if home == total else
                               f"not within {args.rebalance_s:g} s ({home} of {total} there)")
            hosted = ", the active controller among them" if with_controller[-1] else ""
            print(f"run {run + 1}: killed node {victim} at {killed_at} ({len(orphans)} partitions led there{hosted}): every "
                  f"partition led after {all_led_s[-1]:.2f} s, median per partition {per_part:.2f} s, "
                  f"{candidacies} candidacies ({per_orphan[-1]:.2f} per partition that lost its leader, "
                  f"{led_there} with the internal ones); "
                  f"restart to serving (unfenced, /health ok, every replica open{active and ', ' + ACTIVE_TOPIC + ' among them'}) "
                  f"{restart_s[-1]:.2f} s{active_note}; every leader back on its preferred "
                  f"broker after {rebalance_s[-1]}", flush=True)
        if args.runs:
            resolution = POLL_S if total <= 1000 else FAILOVER_POLL_S
            print(f"every partition led after a kill: median {statistics.median(all_led_s):.2f} s [target < {targets.all_led_s:g} s; "
                  f"polled every {resolution:g} s or twice the poll's own time, whichever is longer]")
            apart = [t for t, c in zip(per_part_s, with_controller) if not c]
            split = (f"; {statistics.median(apart):.2f} s in the {len(apart)} run(s) whose victim did not host "
                     f"the active controller (the others lost the controller too)") if apart and len(apart) < len(per_part_s) else ""
            print(f"partition failover (median per partition, median of runs): "
                  f"{statistics.median(per_part_s):.2f} s [target < 1 s]{split}")
            print(f"candidacies per partition that lost its leader (1.00: every election won at "
                  f"the first try; more: split votes, retries): median {statistics.median(per_orphan):.2f}")
            caveat = "" if args.active_segment_mib >= 1024 else (
                f"; here {args.active_segment_mib} MiB" if active else "; here small segments only")
            print(f"node restart to serving with {total} partitions{active}: median "
                  f"{statistics.median(restart_s):.2f} s [target < 5 s after SIGKILL with 1,000 "
                  f"partitions and a 1 GiB active segment{caveat}]")
        return 0
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

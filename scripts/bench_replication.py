#!/usr/bin/env python
"""Replication benchmark: 3 local `raftlog node` processes, RF=3 vs RF=1 in the same run,
acks=all, flush_policy=always, pre-built batches of 16 KiB and 256 KiB (100-byte records)
sent from a separate process; then partition-leader failover time.

    .venv/bin/python scripts/bench_replication.py [--runs 3] [--seconds 4] [--window 8]
        [--failovers 5] [--sizes 16,256] [--base-port PORT] [--keep DIR]

Per (replication factor, batch size) it prints batches/s, MB/s, records/s and p50/p99
produce latency (medians of --runs runs), the CPU per record of each node (user + system,
from /proc/PID/stat: the leader's and each follower's share), the RF=3 / RF=1 ratios, the
latency of one producer sending one 16 KiB batch at a time (window 1), and the median of
--failovers leader failovers (SIGKILL the partition leader, time until a produce to that
partition succeeds; the killed node is restarted and caught up before the next one).

RF=1 runs twice: as fast as --window lets it, and paced at the RF=3 run's batches/s ("rf1
paced"). CPU per record depends on the load (at twice the records/s, fsyncs and wake-ups are
shared by twice the batches), so the CPU ratio, RF=3's three nodes against the RF=1 leader,
is printed both at the same records/s (against the paced run) and at the same window.

The three runs are interleaved (RF=3, RF=1, RF=1 paced; --runs times), and each ratio is
the median of the runs' own ratios: this machine's background load drifts within a minute,
and a ratio of medians taken a minute apart moved with it.

Targets (issue 4): RF=3 256 KiB >= 300,000 records/s; RF=3 >= 0.5 x RF=1; window-1 16 KiB p50
< 3 ms; (issue 19) CPU per record of RF=3's three nodes <= 2 x the RF=1 leader's; failover
< 1 s.

The load generator is this script run with `--worker`: a blocking socket that keeps
`window` produce requests in flight to the partition leader and prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from partition.batch import BatchBuilder  # noqa: E402
from raftlog.cli.cluster import NodePorts, NodeProcess, build_node_configs, stop_all, write_node_config  # noqa: E402
from raftlog.node.config import new_cluster_id  # noqa: E402

from bench_scale import check_started, cpu_times, node_ports  # noqa: E402  (this directory, sys.path[0])
from raftlog.base.errors import RaftlogError, error_from_wire  # noqa: E402
from raftlog.base.protocol import FrameDecoder, encode_frame  # noqa: E402

RECORD_BYTES = 100
LABELS = ("rf3", "rf1", "rf1 paced")
SETTINGS = {"heartbeat_ms": 300, "session_timeout_ms": 2000}


# ----------------------------------------------------------------------------- the worker


def build_batch(target_bytes: int) -> tuple[bytes, int]:
    value = b"x" * RECORD_BYTES
    b = BatchBuilder()
    ts = int(time.time() * 1000)
    while b.size_bytes + RECORD_BYTES + 16 <= target_bytes:
        b.append(value, None, timestamp_ms=ts)
    return b.build(), b.record_count


class Conn:
    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(1 << 30)
        self.next_id = 1

    def send(self, op: str, **fields) -> int:
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(encode_frame({**fields, "v": 1, "id": rid, "op": op}))
        return rid

    def receive(self, timeout_s: float | None = None) -> dict | None:
        """The next frame; None if none came within `timeout_s` (None: wait up to 30 s)."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            # (a timeout of 0 would make the socket non-blocking: BlockingIOError)
            self.sock.settimeout(30 if timeout_s is None else max(timeout_s, 1e-4))
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                if timeout_s is None:
                    raise
                return None
            if not data:
                raise ConnectionError("closed")
            self.decoder.feed(data)

    def call(self, op: str, **fields) -> dict:
        self.send(op, **fields)
        return self.receive()

    def close(self) -> None:
        self.sock.close()


def worker(address: str, topic: str, batch_bytes: int, seconds: float, window: int,
           rate: float = 0.0) -> dict:
    """Keep up to `window` produce requests in flight for `seconds`; with `rate` (batches/s),
    send no faster than that: the next request goes out at start + sent / rate."""
    batch, records = build_batch(batch_bytes)
    conn = Conn(address)
    parts = [{"topic": topic, "partition": 0, "records": batch}]
    sent: dict[int, float] = {}
    latencies: list[float] = []
    errors = 0
    issued = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        now = time.perf_counter()
        due = start + issued / rate if rate else now
        while len(sent) < window and due <= now < end:
            rid = conn.send("produce", acks=-1, timeout_ms=10_000, partitions=parts)
            sent[rid] = now = time.perf_counter()
            issued += 1
            due = start + issued / rate if rate else now
        if not sent:
            if now >= end:
                break
            time.sleep(max(0.0, min(due, end) - now))  # paced: nothing in flight until due
            continue
        wait = None if len(sent) >= window or due >= end else max(0.0, due - now)
        resp = conn.receive(wait)
        if resp is None:
            continue
        t0 = sent.pop(resp["id"])
        p = resp.get("partitions", [{}])[0] if "error" not in resp else resp
        if "error" in p:
            errors += 1
        else:
            latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    conn.close()
    n = len(latencies)
    latencies.sort()
    return {
        "batches_per_s": n / elapsed,
        "mb_per_s": n * len(batch) / elapsed / 1e6,
        "records_per_s": n * records / elapsed,
        "p50_ms": latencies[n // 2] * 1000 if n else float("nan"),
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else float("nan"),
        "errors": errors,
        "batch_bytes": len(batch),
        "records_per_batch": records,
    }


# ----------------------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self, root: Path, ports: dict[int, NodePorts]):
        self.root = root
        self.ports = ports
        self.configs = build_node_configs(root, new_cluster_id(), secrets.token_urlsafe(24),
                                          self.ports, settings=SETTINGS)
        self.procs: dict[int, NodeProcess] = {}

    def start(self, i: int) -> None:
        cfg = self.configs[i]
        self.procs[i] = NodeProcess(i, write_node_config(cfg), cfg.data_dir / "node.log").start()

    def client(self, i: int) -> str:
        return str(self.configs[i].listeners.client)

    def call(self, i: int, op: str, **fields) -> dict:
        conn = Conn(self.client(i))
        try:
            resp = conn.call(op, **fields)
        finally:
            conn.close()
        if "error" in resp:
            raise error_from_wire(resp["error"])
        return resp

    def live(self) -> list[int]:
        return [i for i, p in sorted(self.procs.items()) if p.alive()]

    def wait(self, predicate, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, KeyError, TypeError, IndexError, RaftlogError) as exc:
                last = exc  # not yet: the cluster is still settling
            time.sleep(0.02)
        raise SystemExit(f"timed out waiting for {what}: {last!r}")

    def ready(self) -> bool:
        """Every started node is up, unfenced, and a controller is named. A node that exited
        (its port taken, say) ends the bench with its log (`check_started`)."""
        check_started(self.procs)
        st = self.call(self.live()[0], "cluster_status")
        unfenced = {b["id"] for b in st["brokers"] if not b["fenced"]}
        return st.get("controller_id") is not None and set(self.live()) <= unfenced

    def leader(self, topic: str) -> int | None:
        for i in self.live():
            try:
                r = self.call(i, "produce", acks=-1, timeout_ms=2000,
                              partitions=[{"topic": topic, "partition": 0,
                                           "records": build_batch(200)[0]}])
            except OSError:
                continue
            p = r["partitions"][0]
            if "error" not in p:
                return i
            hint = p["error"].get("leader_id")
            if p["error"]["code"] == "NOT_LEADER" and hint in self.live():
                continue
        return None

    def replica_status(self, i: int, topic: str) -> dict:
        listener = self.configs[i].listeners.http
        with urllib.request.urlopen(f"http://{listener.host}:{listener.port}/health", timeout=2) as r:
            health = json.loads(r.read())
        return health["replicas"]["partitions"][f"{topic}-0"]

    def caught_up(self, i: int, topic: str, leader: int) -> bool:
        """Replica `i` follows `leader` and holds (durably) the leader's high watermark: a
        full in-sync voter again, so the next kill is a single failure, not a double one."""
        mine, theirs = self.replica_status(i, topic), self.replica_status(leader, topic)
        return (mine.get("leader_id") == leader and not mine.get("needs_catch_up")
                and mine.get("flushed_offset", -1) >= theirs.get("high_watermark", 1 << 62))

    def stop(self) -> None:
        stop_all(self.procs.values(), 15)


def run_worker(address: str, topic: str, batch_bytes: int, seconds: float, window: int,
               rate: float = 0.0) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", address, topic, str(batch_bytes), str(seconds),
         str(window), str(rate)], capture_output=True, text=True, timeout=seconds + 60,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"the load worker failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def measured_run(cluster: "Cluster", address: str, topic: str, batch_bytes: int, seconds: float,
                 window: int, rate: float = 0.0) -> dict:
    """run_worker, plus `cpu_us_per_record`: the three nodes' CPU time over the run divided
    by the records acknowledged (the leader's and the followers' work together), and each
    node's user and system share of it (`user_us_n<id>`, `sys_us_n<id>`)."""
    pids = {i: p.pid for i, p in cluster.procs.items() if p.alive()}
    before = {i: cpu_times(pid) for i, pid in pids.items()}
    m = run_worker(address, topic, batch_bytes, seconds, window, rate)
    after = {i: cpu_times(pid) for i, pid in pids.items()}
    records = max(1.0, m["records_per_s"] * seconds)
    for i in pids:
        m[f"user_us_n{i}"] = (after[i][0] - before[i][0]) * 1e6 / records
        m[f"sys_us_n{i}"] = (after[i][1] - before[i][1]) * 1e6 / records
    m["cpu_us_per_record"] = sum(m[f"user_us_n{i}"] + m[f"sys_us_n{i}"] for i in pids)
    return m


def node_split(m: dict, leader: int, replicas: int) -> str:
    """Each node's CPU per record, the leader first: "leader 2 1.23 (0.80u+0.43s), ..."."""
    parts = []
    for i in sorted((1, 2, 3), key=lambda i: (i != leader, i)):
        if f"user_us_n{i}" not in m:
            continue
        role = "leader" if i == leader else ("follower" if replicas > 1 else "idle")
        parts.append(f"{role} {i} {node_cpu(m, i):.2f} ({m[f'user_us_n{i}']:.2f}u+{m[f'sys_us_n{i}']:.2f}s)")
    return ", ".join(parts)


def node_cpu(m: dict, i: int) -> float:
    """Node i's CPU us per record (user + system) in measured_run's result."""
    return m[f"user_us_n{i}"] + m[f"sys_us_n{i}"]


def median_of(results: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--window", type=int, default=8, help="produce requests in flight")
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--sizes", default="16,256", help="batch sizes in KiB, comma-separated")
    ap.add_argument("--base-port", type=int, default=None,
                    help="use the 15 ports from here (default: free ports the kernel does not hand out)")
    ap.add_argument("--keep", help="data directory to use and keep (default: a temp dir)")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        address, topic, size, seconds, window, rate = args.worker
        print(json.dumps(worker(address, topic, int(size), float(seconds), int(window),
                                float(rate))))
        return 0
    if args.runs < 1 or args.window < 1 or args.failovers < 0 or not args.seconds > 0:
        ap.error("--runs and --window must be at least 1, --seconds above 0, --failovers at least 0")
    try:
        sizes = [int(k) << 10 for k in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) <= 0 or max(sizes) > 1 << 20:
        ap.error(f"--sizes takes batch sizes in KiB from 1 to 1024, comma-separated (got {args.sizes!r})")

    ports = node_ports(args.base_port)  # before the data directory: a taken port leaves nothing behind
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-replication-"))
    cluster = Cluster(root, ports)
    try:
        for i in (1, 2, 3):
            cluster.start(i)
        cluster.wait(cluster.ready, 60, "a ready cluster")
        for name, rf in (("rf3", 3), ("rf1", 1)):
            cluster.call(1, "create_topic", name=name, partitions=1, replication_factor=rf,
                         configs={"flush_policy": "always", "max_message_bytes": str(1 << 20)})
        leaders = {t: cluster.wait(lambda t=t: cluster.leader(t), 30, f"a leader of {t}")
                   for t in ("rf3", "rf1")}
        print(f"nodes: 3 local processes; leaders: {leaders}; {os.cpu_count()} CPUs; "
              f"load {os.getloadavg()[0]:.2f}; "
              f"{args.runs} runs x {args.seconds:g} s, window {args.window}, "
              f"{RECORD_BYTES}-byte records, acks=all, flush_policy=always")
        per_run: dict[int, list[tuple[float, float, float]]] = {}
        for size in sizes:
            # Interleaved (module docstring): each run is RF=3, then RF=1 as fast as the window
            # lets it, then RF=1 paced at that RF=3 run's batches/s; each run's ratios are
            # taken within it, and their median is printed.
            runs: dict[str, list[dict]] = {label: [] for label in LABELS}
            for _ in range(args.runs):
                rf3 = measured_run(cluster, cluster.client(leaders["rf3"]), "rf3", size,
                                   args.seconds, args.window)
                rf1 = measured_run(cluster, cluster.client(leaders["rf1"]), "rf1", size,
                                   args.seconds, args.window)
                paced = measured_run(cluster, cluster.client(leaders["rf1"]), "rf1", size,
                                     args.seconds, args.window, rf3["batches_per_s"])
                for label, m in zip(LABELS, (rf3, rf1, paced)):
                    runs[label].append(m)
                per_run.setdefault(size, []).append((
                    rf3["records_per_s"] / rf1["records_per_s"],
                    rf3["cpu_us_per_record"] / node_cpu(paced, leaders["rf1"]),
                    rf3["cpu_us_per_record"] / node_cpu(rf1, leaders["rf1"])))
            for label, topic in zip(LABELS, ("rf3", "rf1", "rf1")):
                m = median_of(runs[label])
                print(f"{label:<9} {size >> 10:>3} KiB: {m['batches_per_s']:8.1f} batches/s "
                      f"{m['mb_per_s']:7.1f} MB/s {m['records_per_s']:10.0f} records/s "
                      f"p50 {m['p50_ms']:6.2f} ms p99 {m['p99_ms']:7.2f} ms "
                      f"CPU {m['cpu_us_per_record']:.2f} us/record (errors {m['errors']:.0f})")
                print(f"    CPU us/record per node: "
                      f"{node_split(m, leaders[topic], 3 if topic == 'rf3' else 1)}")
        for size in sizes:
            ratio, cpu, same_window = (statistics.median(r[k] for r in per_run[size]) for k in range(3))
            print(f"ratio RF3/RF1 {size >> 10} KiB: records/s {ratio:.2f} [target >= 0.5]")
            print(f"    CPU per record, RF=3's three nodes / the RF=1 leader: {cpu:.2f} at the same "
                  f"records/s, {same_window:.2f} at the same window (RF=1 at {1 / ratio:.1f}x the "
                  f"records/s) [target <= 2: followers cheaper than a second leader]")
            print("    each run's own ratio: " + ", ".join(f"{c:.2f}" for _, c, _ in per_run[size])
                  + " at the same records/s")
        print(f"load {os.getloadavg()[0]:.2f}")
        single = median_of([run_worker(cluster.client(leaders["rf3"]), "rf3", 16 << 10,
                                       args.seconds, 1) for _ in range(args.runs)])
        print(f"rf3 16 KiB one at a time (window 1): p50 {single['p50_ms']:.2f} ms "
              f"p99 {single['p99_ms']:.2f} ms, {single['batches_per_s']:.0f} batches/s")
        times = []
        for _ in range(args.failovers):
            victim = cluster.wait(lambda: cluster.leader("rf3"), 30, "a leader of rf3")
            t0 = time.monotonic()
            cluster.procs[victim].kill()
            new = cluster.wait(lambda: cluster.leader("rf3"), 30, "a new leader of rf3")
            times.append(time.monotonic() - t0)
            cluster.start(victim)
            cluster.wait(cluster.ready, 60, "the killed node back")
            # The restarted replica recovers its log (reading its tail from disk) and catches
            # up before the next kill: otherwise that kill leaves one voter serving, a double
            # failure, and what is timed is the restart, not the failover.
            cluster.wait(lambda: cluster.caught_up(victim, "rf3", new), 120, "the killed replica caught up")
            print(f"failover: killed {victim}, {new} took writes after {times[-1]:.2f} s")
        if times:
            print(f"failover median of {len(times)}: {statistics.median(times):.2f} s [target < 1 s]")
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

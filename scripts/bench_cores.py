"""Does one node use its cores? One node, RF=1, a producer load that saturates it, the node
allowed 1 core and then 2 (`taskset`, the whole process tree): records/s of each and the
ratio (issue 46: 2 cores >= 1.7x of 1 core).

    scripts/bench cores [--runs 3] [--duration-s 10] [--producers 4] [--pipeline 8]

The load is cheap, so that it does not eat the core the node is meant to use: --producers
processes, each one raw socket to the node's Kafka listener, sending one pre-encoded Produce v3
request (non-idempotent, acks=--acks, one fixed RecordBatch of --batch-records records of
--record-bytes B, reused: only the correlation id is patched) with --pipeline requests in
flight, counting the records of the answers with error code 0. Each producer writes its own
partition (--partitions, default one per producer). Each producer sends for --warmup-s, then
counts for --duration-s. Printed per run: records/s, the node's CPU (seconds of CPU per second
of wall time, its process tree, /proc) and the producers' CPU, so it shows whether the node was
saturated and what the load cost.

Every run starts a fresh node (a temp data dir, free loopback ports; the integration tests'
harness) under `taskset -c CPUS`, and the settings alternate run by run (1 core, 2 cores; then
2, 1; ...), so a change in the machine's load hits both. Figures are medians of --runs runs;
the machine's load average is printed. Every process, node and producers, is stopped by its
PID at the end, also on Ctrl-C or failure. `--profile PREFIX` records the node's process tree
with py-spy over each counted window (the GIL holder's stacks, collapsed, in PREFIX-cpus0.txt, PREFIX-cpus0_1.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_kafka import _load, load_harness

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "bench-cores"
PRODUCE_V = 3  # the last layout before the flexible versions that has no per-record errors in its answer
CONNECT_TIMEOUT_S = 10.0
RECV_TIMEOUT_S = 30.0
RATIO_TARGET = 1.7
SATURATED_CPU = 0.8  # the 1-core node's CPU below which the ratio measures the machine's load


# ------------------------------------------------------------------------ the producer child


def produce_request(topic: str, partition: int, batch: bytes, acks: int, timeout_ms: int) -> bytearray:
    """One framed Produce v3 request (header v1) carrying `batch` to `partition`; its
    correlation id (bytes 8..12) is patched per send."""
    t = topic.encode()
    body = (struct.pack(">hhih", 0, PRODUCE_V, 0, 5) + b"bench"
            + struct.pack(">hhii", -1, acks, timeout_ms, 1) + struct.pack(">h", len(t)) + t
            + struct.pack(">iii", 1, partition, len(batch)) + batch)
    return bytearray(struct.pack(">i", len(body)) + body)


def child_load(address: str, topic: str, partition: int, warmup_s: float, duration_s: float, pipeline: int,
               batch_records: int, record_bytes: int, acks: int) -> dict:
    """Send the one request with `pipeline` in flight for warmup_s + duration_s; count the
    records acknowledged (error 0) in the last duration_s. Returns counts and this process's CPU."""
    from partition.batch import BatchBuilder

    builder = BatchBuilder()
    value = os.urandom(record_bytes)
    now_ms = int(time.time() * 1000)
    for _ in range(batch_records):
        builder.append_value(value, now_ms)
    request = produce_request(topic, partition, builder.build(), acks, 30_000)
    # The answer: correlation id, 1 topic (its name), 1 partition: index, then the error code.
    error_at = 4 + 4 + 2 + len(topic.encode()) + 4 + 4
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(RECV_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    correlation = 0

    def send() -> None:
        nonlocal correlation
        correlation += 1
        struct.pack_into(">i", request, 8, correlation)
        sock.sendall(request)

    cpu0 = time.process_time()
    t0 = time.monotonic()
    start, end = t0 + warmup_s, t0 + warmup_s + duration_s
    acked = errors = answered = 0
    in_flight = 0
    buf = bytearray()
    codes: dict[int, int] = {}
    try:
        for _ in range(pipeline):
            send()
            in_flight += 1
        while in_flight:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{address} closed the connection")
            buf += data
            now = time.monotonic()
            while len(buf) >= 4:
                size = struct.unpack_from(">i", buf, 0)[0]
                if len(buf) < 4 + size:
                    break
                code = struct.unpack_from(">h", buf, 4 + error_at)[0]
                del buf[:4 + size]
                in_flight -= 1
                answered += 1
                if start <= now < end:
                    if code == 0:
                        acked += batch_records
                    else:
                        errors += 1
                        codes[code] = codes.get(code, 0) + 1
                if now < end:
                    send()
                    in_flight += 1
    finally:
        sock.close()
    return {"acked_records": acked, "errors": errors, "error_codes": codes, "answered": answered,
            "duration_s": duration_s, "cpu_s": time.process_time() - cpu0,
            "wall_s": time.monotonic() - t0}


# ------------------------------------------------------------------------------ the bench


def prime_kafka(address: str) -> None:
    """One ApiVersions v0 request, answered: the node loads its Kafka codec (kafka-python, a
    second or more) on the first Kafka request, before the counted window, not in it."""
    host, _, port = address.rpartition(":")
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as sock:
        sock.settimeout(RECV_TIMEOUT_S)
        sock.sendall(struct.pack(">i", len(body)) + body)
        got = b""
        while len(got) < 4 or len(got) < 4 + struct.unpack_from(">i", got)[0]:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{address} closed the connection without answering ApiVersions")
            got += data


def tree_cpu_s(pid: int, descendants: bool = True) -> float:
    """CPU seconds (user + system) of `pid`, its threads and (`descendants`) every live
    descendant: the Kafka network workers (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                if descendants:
                    todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total


# Where the GIL holder was, by the frames of its stack (first match wins): what would move to
# Kafka network processes (N), what stays with the services in the node's main process (S),
# and the main's side of the workers' produce calls (M: network_worker.py's fast path).
PROFILE_PARTS = (
    ("kafka codec import (once)", r"load_protocol"),
    ("S partition append (validate, log, raft)", r"PartitionService\.append"),
    ("S other service work (flush, mover, ticks)", r"\((partition|metadata|groupcoord)/"),
    ("M produce calls from workers (read, handler, answer)", r"_call_loop \(raftlog/node/kafka/listener"),
    ("N decode (kafka-python)", r"decode_header|decode_body"),
    ("N encode (kafka-python)", r"encode_response|_response \(raftlog/node/kafka/produce"),
    ("N socket receive", r"receive_some"),
    ("N socket send (writer)", r"_write_loop|raftlog/node/writer\.py|_send_chunks"),
    ("N connection task (dispatch, scopes, handler)", r"raftlog/node/(kafka/|listener|gate|authorize|auth|quotas)"),
    ("trio scheduler (run loop, epoll)", r"unrolled_run"),
)


def profile_split(path: Path, main: bool = True) -> dict[str, float]:
    """Share of the GIL holder's samples (py-spy --gil, raw format) per PROFILE_PARTS entry,
    the one-time codec import left out of the total: of the node's main process (`main`),
    else of its Kafka network workers (py-spy --subprocesses names each stack's process)."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if ("network_worker" in stack.split(";", 1)[0]) == main:
            continue
        part = next((name for name, rx in PROFILE_PARTS if re.search(rx, stack)), "other")
        counts[part] = counts.get(part, 0) + int(n)
    counts.pop(PROFILE_PARTS[0][0], None)
    total = sum(counts.values()) or 1
    return {part: n / total for part, n in counts.items()}


@dataclasses.dataclass
class RunResult:
    records_per_s: float
    node_cpu: float  # CPU seconds per wall second over the counted window
    main_cpu: float  # of which the node's main process (the rest: its Kafka network workers)
    load_cpu: float  # the producers' CPU seconds per wall second
    errors: int


def one_run(harness, tmp: Path, cpus: str, args: argparse.Namespace) -> RunResult:
    """A fresh node under `taskset -c cpus`; the producers saturate it; what they counted."""

    class PinnedCluster(harness.NodeCluster):
        def _process(self, node_id, config_path, log_path):
            process = super()._process(node_id, config_path, log_path)
            argv = process.argv

            process.argv = lambda: ["taskset", "-c", cpus, *argv()]
            return process

    settings = dict(args.settings)
    if args.network_processes is not None:
        settings["kafka_network_processes"] = args.network_processes
    cluster = PinnedCluster(tmp, size=1, settings=settings)
    producers: list[subprocess.Popen] = []
    try:
        cluster.start_all()
        cluster.wait_ready(timeout_s=90)
        cluster.wait_for(lambda: cluster.call(1, "create_topic", name=TOPIC, partitions=args.partitions,
                                              replication_factor=1, configs={}), 60, f"create_topic {TOPIC}")
        cluster.wait_for(lambda: all(p.get("leader") is not None for p in cluster.call(
            1, "metadata", topics=[TOPIC])["topics"][0].get("partitions", [])), 60, f"leaders of {TOPIC}")
        pid = cluster.processes[1].pid
        address = cluster.kafka(1)
        prime_kafka(address)
        for i in range(args.producers):
            producers.append(subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "_load", address, TOPIC, str(i % args.partitions),
                 str(args.warmup_s), str(args.duration_s), str(args.pipeline), str(args.batch_records),
                 str(args.record_bytes), str(args.acks)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT))
        # The node's CPU over the counted window (the producers' clocks start within a moment).
        time.sleep(args.warmup_s)  # a timed measurement window, not synchronisation
        if args.profile:
            out = Path(f"{args.profile}-cpus{cpus.replace(',', '_')}.txt")
            profile = out
            producers.append(subprocess.Popen(
                [args.py_spy, "record", "--pid", str(pid), "--subprocesses", "--format", "raw", "--rate", "200", "--gil",
                 "--duration", str(max(1, int(args.duration_s))), "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        else:
            profile = None
        cpu0, main0, t0 = tree_cpu_s(pid), tree_cpu_s(pid, descendants=False), time.monotonic()
        time.sleep(args.duration_s)
        wall = time.monotonic() - t0
        node_cpu = (tree_cpu_s(pid) - cpu0) / wall
        main_cpu = (tree_cpu_s(pid, descendants=False) - main0) / wall
        results = []
        for p in producers:
            if p.args[0] == args.py_spy:
                p.wait(timeout=args.duration_s + 60)
                continue
            out, err = p.communicate(timeout=args.warmup_s + args.duration_s + 120)
            if p.returncode != 0:
                raise RuntimeError(f"a producer failed ({p.returncode}): {err.strip()[-800:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        codes: dict[str, int] = {}
        for r in results:
            for code, n in r["error_codes"].items():
                codes[code] = codes.get(code, 0) + n
        if codes:
            print(f"    error codes answered: {codes}", flush=True)
        if profile is not None and profile.exists():
            split = profile_split(profile)
            print(f"    profile {profile} (main): " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(split.items())),
                  flush=True)
            moved = sum(v for k, v in split.items() if k.startswith("N "))
            print(f"    network side (N) {moved:.1%} of the main's GIL time, the rest {1 - moved:.1%}", flush=True)
            workers = profile_split(profile, main=False)
            if workers:
                print("    workers: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(workers.items())), flush=True)
        return RunResult(
            records_per_s=sum(r["acked_records"] / r["duration_s"] for r in results),
            node_cpu=node_cpu, main_cpu=main_cpu,
            load_cpu=sum(r["cpu_s"] for r in results) / max(r["wall_s"] for r in results),
            errors=sum(r["errors"] for r in results))
    finally:
        for p in producers:
            if p.poll() is None:
                p.kill()
                p.communicate()
        cluster.stop_all()


def parse_setting(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _processes(text: str) -> int:
    if text == "auto":
        return -1
    try:
        count = int(text)
    except ValueError:
        count = -2
    if not 0 <= count <= 64:
        raise argparse.ArgumentTypeError(f"expected auto or a count 0..64 (kafka_network_processes), got {text!r}")
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=10.0, help="the counted window of each run")
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--producers", type=int, default=4, help="producer processes, one connection each")
    ap.add_argument("--pipeline", type=int, default=8, help="requests in flight per connection")
    ap.add_argument("--batch-records", type=int, default=100)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, help="default: one per producer")
    ap.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    ap.add_argument("--one", default="0", help="the CPU list of the 1-core node (taskset -c)")
    ap.add_argument("--two", default="0,1", help="the CPU list of the 2-core node (taskset -c)")
    ap.add_argument("--set", dest="settings", action="append", type=parse_setting, default=[],
                    metavar="KEY=VALUE", help="a node setting for both nodes (NodeConfig field; repeatable)")
    ap.add_argument("--network-processes", type=_processes, metavar="N|auto",
                    help="the node's Kafka network worker processes (kafka_network_processes; auto: by "
                         "the CPUs it may use, so none on 1 core); default: the node's default")
    ap.add_argument("--profile", metavar="PREFIX",
                    help="py-spy the node's process tree over each counted window: PREFIX-cpus0.txt, ... "
                         "(collapsed stacks; the last run of each setting)")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    args = ap.parse_args()
    args.py_spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if args.profile and args.py_spy is None:
        ap.error("--profile needs py-spy (pip install py-spy)")
    if args.acks == 0:
        ap.error("acks=0 has no answers to count")
    args.partitions = args.partitions or args.producers
    if shutil.which("taskset") is None:
        ap.error("taskset (util-linux) is not on PATH")
    harness = load_harness()
    print(f"one node, RF=1, {args.partitions} partitions; {args.producers} producer(s) x {args.pipeline} in flight, "
          f"Produce v{PRODUCE_V} acks={args.acks}, {args.batch_records} x {args.record_bytes} B per request; "
          f"{args.runs} run(s) of {args.duration_s:g} s; cpus {os.cpu_count()}, load average {_load()}", flush=True)
    runs: dict[str, list[RunResult]] = {"one": [], "two": []}
    for run in range(args.runs):
        order = ("one", "two") if run % 2 == 0 else ("two", "one")
        for name in order:
            cpus = getattr(args, name)
            with tempfile.TemporaryDirectory(prefix="bench-cores-") as tmp:
                r = one_run(harness, Path(tmp), cpus, args)
            runs[name].append(r)
            print(f"  run {run + 1} cpus {cpus:<5}: {r.records_per_s:>11,.0f} records/s  node CPU "
                  f"{r.node_cpu:.2f} (main {r.main_cpu:.2f})  producers' CPU {r.load_cpu:.2f}  errors {r.errors}  (load {_load()})",
                  flush=True)
    med = {name: {f: statistics.median(getattr(r, f) for r in rs) for f in ("records_per_s", "node_cpu", "main_cpu", "load_cpu")}
           for name, rs in runs.items()}
    ratio = med["two"]["records_per_s"] / med["one"]["records_per_s"]
    print()
    print(f"load average at the end {_load()}; medians of {args.runs} run(s)")
    # The node's CPU per request: what a core buys, whatever share of the machine the node got.
    # The main process's CPU per request bounds the node: at most 1 / that requests/s however
    # many cores its Kafka network workers get.
    print(f"{'cpus':<8}{'records/s':>12}{'MB/s':>8}{'node CPU':>10}{'main CPU':>10}{'us CPU/request':>16}"
          f"{'main us/request':>17}{'producers CPU':>15}")
    for name in ("one", "two"):
        m = med[name]
        requests_per_s = max(m["records_per_s"] / args.batch_records, 1e-9)
        print(f"{getattr(args, name):<8}{m['records_per_s']:>12,.0f}{m['records_per_s'] * args.record_bytes / 1e6:>8.1f}"
              f"{m['node_cpu']:>10.2f}{m['main_cpu']:>10.2f}{m['node_cpu'] / requests_per_s * 1e6:>16,.0f}"
              f"{m['main_cpu'] / requests_per_s * 1e6:>17,.0f}{m['load_cpu']:>15.2f}")
    # The ratio says something only when the 1-core node was saturated: on a machine busy with
    # other work the node gets a share of each CPU it may use, and 2 CPUs are then 2 shares.
    saturated = med["one"]["node_cpu"] >= SATURATED_CPU
    verdict = ("MET " if ratio >= RATIO_TARGET else "MISS") if saturated else "NOT MEASURED"
    print(f"ratio {args.two} / {args.one}: {ratio:.2f}x  target {verdict} (>= {RATIO_TARGET})")
    if not saturated:
        print(f"  the 1-core node used {med['one']['node_cpu']:.2f} of its core (< {SATURATED_CPU}): the machine's "
              f"other work set the rates, not the node; run it on a quieter machine")
    if args.json:
        print(json.dumps({"one": med["one"], "two": med["two"], "ratio": ratio, "saturated": saturated},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_load":
        a = sys.argv[2:]
        print(json.dumps(child_load(a[0], a[1], int(a[2]), float(a[3]), float(a[4]), int(a[5]), int(a[6]),
                                    int(a[7]), int(a[8]))))
    else:
        sys.exit(main())

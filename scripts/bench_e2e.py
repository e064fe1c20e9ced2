"""End-to-end benchmark: a real three-node cluster on this machine and `raftlog perf`.

    python scripts/bench_e2e.py [--records 1000000] [--record-bytes 100] [--runs 3] [--json]
    scripts/bench e2e --small        # 100,000 records, one run, a 2 s latency run: a quick look

Writes bench-results/e2e.png (`--plot`): records/s beside RF=3 acks=all's, the latency
percentiles and their CDF (scripts/plots.py).

For each configuration (RF=3 acks=all, the target; RF=1 acks=all and RF=3 acks=1 beside it,
so the ratios show what replication and waiting for the quorum cost) and each run, on a
fresh topic: `raftlog perf produce` of N records as fast as possible, `raftlog perf consume`
of them from the beginning, and a latency run with `--throughput` at half the target produce
rate (send-to-ack latency percentiles). Every figure is the median over `--runs`. Each
produce run first sends --warmup-records records and waits for them, so its figures are of
the steady state, not of connecting and fetching metadata (without it, the first records'
wait for setup alone set the p99 of a 5 s latency run).

Targets (2-core machine, nodes and client on it): >= 200,000 records/s produced, >= 500,000
records/s consumed, p99 latency < 50 ms at 100,000 records/s (RF=3, acks=all).

The nodes are real processes on free loopback ports with a temp data dir (the integration
tests' harness); every process is stopped by its PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import baseline
import plots as bench_plot

ROOT = Path(__file__).resolve().parent.parent
TARGET_PRODUCE = 200_000
TARGET_CONSUME = 500_000
TARGET_P99_MS = 50.0
CONFIGS = (("RF=3 acks=all", 3, "all"), ("RF=1 acks=all", 1, "all"), ("RF=3 acks=1", 3, "1"))


def load_harness():
    path = ROOT / "tests" / "integration" / "node_harness.py"
    spec = importlib.util.spec_from_file_location("node_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_harness"] = module
    spec.loader.exec_module(module)
    return module


def perf(bootstrap: str, *args: str, timeout_s: float = 600) -> dict:
    cmd = [sys.executable, "-m", "raftlog.cli", "perf", *args, "--bootstrap", bootstrap, "--json", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:1])} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, help="records per produce run (default 1,000,000)")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--runs", type=int, help="runs per figure, the median reported (default 3)")
    ap.add_argument("--producers", type=int, default=1, help="producer processes per perf run")
    ap.add_argument("--latency-rate", type=float, default=TARGET_PRODUCE / 2,
                    help="records/s of the latency run (default: half the produce target)")
    ap.add_argument("--latency-seconds", type=float, help="length of the latency run (default 5)")
    ap.add_argument("--warmup-records", type=int, default=10_000,
                    help="records each produce run sends and waits for before its clock starts "
                         "(connections, metadata, producer id; Kafka's --warmup-records)")
    ap.add_argument("--configs", default="all", help="comma list of 1,2,3 (default all)")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    baseline.add_option(ap)
    ap.add_argument("--small", action="store_true",
                    help="100,000 records, one run, a 2 s latency run (each unless given)")
    bench_plot.add_plot_option(ap, "e2e")
    args = ap.parse_args(argv)
    baseline.fill_defaults(args, {"records": (1_000_000, 100_000), "runs": (3, 1),
                                        "latency_seconds": (5.0, 2.0)})
    return args


def main() -> int:
    args = parse_args()

    if args.baseline:
        return baseline.compare(args.baseline, "bench_e2e.py", args.runs)
    harness = load_harness()
    chosen = CONFIGS if args.configs == "all" else [CONFIGS[int(i) - 1] for i in args.configs.split(",")]
    lat_records = max(1000, int(args.latency_rate * args.latency_seconds))
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        # Kafka-like failure detection (the harness's test settings are tuned for fast failover).
        cluster = harness.NodeCluster(Path(tmp), size=3, settings={})
        try:
            cluster.start_all()
            cluster.wait_ready(timeout_s=90)
            bootstrap = ",".join(cluster.bootstrap())
            print(f"cluster up: {bootstrap} (pids {[p.pid for p in cluster.processes.values()]}); "
                  f"{args.records:,} records of {args.record_bytes} B, {args.partitions} partitions, "
                  f"{args.runs} run(s), cpus {os.cpu_count()}, load average {_load()}", flush=True)
            for name, rf, acks in chosen:
                runs: dict[str, list[float]] = {}
                for run in range(args.runs):
                    topic = f"bench-rf{rf}-acks{acks}-{run}"
                    cluster.call(cluster.live()[0], "create_topic", name=topic, partitions=args.partitions,
                                 replication_factor=rf, configs={})
                    cluster.wait_for(lambda: all(p.get("leader") is not None for p in cluster.call(
                        cluster.live()[0], "metadata", topics=[topic])["topics"][0].get("partitions", [])),
                        30, f"leaders of {topic}")
                    common = ["--acks", acks, "--record-bytes", str(args.record_bytes),
                              "--producers", str(args.producers),
                              "--warmup-records", str(args.warmup_records)]
                    pr = perf(bootstrap, "produce", "--topic", topic, "--records", str(args.records), *common)
                    co = perf(bootstrap, "consume", "--topic", topic, "--records", str(args.records))
                    la = perf(bootstrap, "produce", "--topic", topic, "--records", str(lat_records),
                              "--throughput", str(args.latency_rate), *common)
                    print(f"  {name} run {run + 1}: produce {pr['records_per_s']:,.0f} rec/s "
                          f"(p99 {pr['latency_p99_ms']:.0f} ms), consume {co['records_per_s']:,.0f} rec/s, "
                          f"at {args.latency_rate:,.0f}/s: achieved {la['records_per_s']:,.0f}/s "
                          f"p50 {la['latency_p50_ms']:.1f} p99 {la['latency_p99_ms']:.1f} ms", flush=True)
                    for key, value in (
                        ("produce_rps", pr["records_per_s"]), ("produce_mbps", pr["mb_per_s"]),
                        ("produce_p99_ms", pr["latency_p99_ms"]), ("consume_rps", co["records_per_s"]),
                        ("consume_mbps", co["mb_per_s"]), ("lat_rps", la["records_per_s"]),
                        ("lat_p50_ms", la["latency_p50_ms"]), ("lat_p99_ms", la["latency_p99_ms"]),
                        ("lat_p999_ms", la["latency_p999_ms"]), ("lat_max_ms", la["latency_max_ms"]),
                    ):
                        runs.setdefault(key, []).append(value)
                results[name] = {k: median(v) for k, v in runs.items()}
        finally:
            if os.environ.get("BENCH_E2E_DEBUG"):
                for n, p in cluster.processes.items():
                    print(f"--- node {n} alive={p.alive()}\n{p.log_tail(15)}")
            cluster.stop_all()

    print()
    # Other work on the machine moves every figure here: the load says how much there was.
    print(f"load average at the end {_load()}")
    print(f"medians of {args.runs} run(s); latency run at {args.latency_rate:,.0f} records/s for "
          f"{lat_records:,} records")
    header = (f"{'config':<15}{'produce rec/s':>15}{'MB/s':>8}{'consume rec/s':>15}{'MB/s':>8}"
              f"{'lat rec/s':>11}{'p50 ms':>8}{'p99 ms':>8}{'p99.9 ms':>9}{'max ms':>8}")
    print(header)
    base = results.get(CONFIGS[0][0])
    for name, r in results.items():
        print(f"{name:<15}{r['produce_rps']:>15,.0f}{r['produce_mbps']:>8.1f}{r['consume_rps']:>15,.0f}"
              f"{r['consume_mbps']:>8.1f}{r['lat_rps']:>11,.0f}{r['lat_p50_ms']:>8.1f}{r['lat_p99_ms']:>8.1f}"
              f"{r['lat_p999_ms']:>9.1f}{r['lat_max_ms']:>8.1f}")
    if base is not None and len(results) > 1:
        for name, r in results.items():
            if name != CONFIGS[0][0]:
                print(f"  {name} / {CONFIGS[0][0]}: produce x{r['produce_rps'] / base['produce_rps']:.2f}, "
                      f"consume x{r['consume_rps'] / base['consume_rps']:.2f}, "
                      f"p99 x{r['lat_p99_ms'] / max(base['lat_p99_ms'], 1e-9):.2f}")
    if base is not None:
        checks = (
            ("produce", base["produce_rps"] >= TARGET_PRODUCE, f"{base['produce_rps']:,.0f} >= {TARGET_PRODUCE:,}"),
            ("consume", base["consume_rps"] >= TARGET_CONSUME, f"{base['consume_rps']:,.0f} >= {TARGET_CONSUME:,}"),
            ("p99", base["lat_p99_ms"] < TARGET_P99_MS and base["lat_rps"] >= 0.95 * args.latency_rate,
             f"{base['lat_p99_ms']:.1f} ms < {TARGET_P99_MS:g} ms at {base['lat_rps']:,.0f}/s"),
        )
        for what, ok, text in checks:
            print(f"target {what:<8} {'MET ' if ok else 'MISS'} {text}")
    if args.json:
        print(json.dumps(results, sort_keys=True))
    bench_plot.throughput_latency(
        args.plot, f"scripts/bench e2e: 3 nodes and the client on one machine, {args.records:,} records of "
        f"{args.record_bytes} B, {args.partitions} partitions, medians of {args.runs}; latency run paced at "
        f"{args.latency_rate:,.0f} records/s", results, baseline=CONFIGS[0][0], note=bench_plot.command_note())
    return 0


if __name__ == "__main__":
    sys.exit(main())

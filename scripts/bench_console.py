"""Console benchmark: server time of every page on a big topic, beside the same pages on a tiny one.

    python scripts/bench_console.py [--records 10000000] [--partitions 3] [--runs 5] [--json]

A real three-node cluster (the integration tests' harness, free loopback ports, temp data
dir), a topic of --records records of 100 bytes (loaded with `raftlog perf produce`, acks=1,
RF=1, so loading does not dominate the run) and a tiny topic of 10 records; then a real
console process, and each page fetched --runs times per topic. The figure is the page's own
`Server-Timing: app;dur=` header (time until the response starts, what issue 18's "no page
slower than 300 ms server time on a topic of 10 million records" measures), median and max
over the runs, and the ratio of the big topic's median to the tiny one's (same run, same
load). Every process is stopped by its PID at the end, also on Ctrl-C or failure.
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
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 300.0


def load_harness():
    path = ROOT / "tests" / "integration" / "node_harness.py"
    spec = importlib.util.spec_from_file_location("node_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_harness"] = module
    spec.loader.exec_module(module)
    return module


def raftlog(bootstrap: str, *args: str, stdin: str | None = None, timeout_s: float = 3600) -> str:
    p = subprocess.run([sys.executable, "-m", "raftlog.cli", *args, "--bootstrap", bootstrap], input=stdin,
                       capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"raftlog {' '.join(args[:2])} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return p.stdout


def server_ms(url: str) -> float:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            r.read()
            header = r.headers["server-timing"]
            status = r.status
    except urllib.error.HTTPError as exc:
        with exc:
            raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read()[-300:]!r}") from None
    if status != 200:
        raise RuntimeError(f"{url}: HTTP {status}")
    return float(header.split("dur=")[1])


def pages(topic: str, mid_offset: int, mid_ts_ms: int) -> list[tuple[str, str]]:
    return [
        ("overview", "/"),
        ("topics", "/topics"),
        ("topic", f"/topics/{topic}"),
        ("messages (beginning, all partitions)", f"/topics/{topic}/messages"),
        ("messages (end)", f"/topics/{topic}/messages?seek=end&partition=0"),
        ("messages (offset in the middle)", f"/topics/{topic}/messages?seek=offset&partition=0&offset={mid_offset}"),
        ("messages (a time in the middle)", f"/topics/{topic}/messages?seek=timestamp&timestamp={mid_ts_ms}"),
        ("messages (value filter, no match)", f"/topics/{topic}/messages?partition=0&value=no-such-value"),
        ("messages (500 per page, hex)", f"/topics/{topic}/messages?partition=0&limit=500&format=hex"),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from raftlog.console.process import ConsoleChild

    harness = load_harness()
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp, harness.NodeCluster(Path(tmp), size=3) as cluster:
        cluster.start_all()
        cluster.wait_ready(60)
        bootstrap = ",".join(cluster.client(n) for n in sorted(cluster.configs))
        for name, n in (("big", args.records), ("tiny", 10)):
            raftlog(bootstrap, "topics", "create", name, "--partitions", str(args.partitions), "--replication-factor", "1")
        start_ms = int(time.time() * 1000)
        loaded = time.monotonic()
        raftlog(bootstrap, "perf", "produce", "--topic", "big", "--records", str(args.records), "--record-bytes", "100",
                "--acks", "1", "--quiet", "--json")
        load_s = time.monotonic() - loaded
        end_ms = int(time.time() * 1000)
        raftlog(bootstrap, "produce", "tiny", stdin="".join(f"r{i}\n" for i in range(10)))
        child = ConsoleChild(bootstrap.split(","), [cluster.http(n) for n in sorted(cluster.configs)], port=0,
                             log_path=Path(tmp) / "console.log")
        url = child.start(60)
        try:
            if url is None:
                raise RuntimeError(f"console did not start: {child.problem}")
            per_partition = args.records // args.partitions
            results = []
            for (label, big), (_, tiny) in zip(pages("big", per_partition // 2, (start_ms + end_ms) // 2),
                                               pages("tiny", 5, end_ms)):
                server_ms(url + big)  # warm: the console's clients connect and fetch metadata
                server_ms(url + tiny)
                b = [server_ms(url + big) for _ in range(args.runs)]
                t = [server_ms(url + tiny) for _ in range(args.runs)]
                results.append({"page": label, "big_median_ms": statistics.median(b), "big_max_ms": max(b),
                                "tiny_median_ms": statistics.median(t),
                                "ratio": statistics.median(b) / max(statistics.median(t), 0.01)})
        finally:
            child.stop()
    worst = max(r["big_max_ms"] for r in results)
    summary = {"records": args.records, "partitions": args.partitions, "runs": args.runs, "load_s": round(load_s, 1),
               "loadavg": os.getloadavg(), "pages": results, "worst_ms": worst, "target_ms": TARGET_MS}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"topic of {args.records:,} records ({args.partitions} partitions, loaded in {load_s:.0f} s); "
              f"{args.runs} runs per page; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'page':40} {'median ms':>10} {'max ms':>8} {'tiny ms':>8} {'ratio':>6}")
        for r in results:
            print(f"{r['page']:40} {r['big_median_ms']:10.1f} {r['big_max_ms']:8.1f} {r['tiny_median_ms']:8.1f} {r['ratio']:6.2f}")
        print(f"slowest page: {worst:.1f} ms (target < {TARGET_MS:.0f} ms): {'ok' if worst < TARGET_MS else 'OVER'}")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())

"""Secure vs plaintext: produce and consume records/s of a secure cluster beside a plaintext
one, measured in the same run, as a ratio (issue 16's target: secure >= 0.7 of plaintext).

    scripts/bench secure [--records 300000] [--record-bytes 100] [--runs 3] [--rf 3] [--json]

Two three-node clusters run side by side on this machine: a plaintext one and a secure one
(as `raftlog cluster up --secure` makes it: TLS + SASL/SCRAM-SHA-512 on the client listener,
mutual TLS between the nodes, ACLs on; the client logs in as the admin). Each run, on a fresh
topic of each cluster, alternating (so the machine's other load falls on both alike):
`raftlog perf produce` of N records (acks=all, after --warmup-records) and `raftlog perf
consume` of them from the beginning, with `--command-config client.properties` for the
secure one. Figures are medians over --runs; the ratios are secure / plaintext (of the
medians, and the median of each run's pair).

What TLS costs here: every byte of records crosses one more copy and AES-GCM each way
(client <-> leader, leader <-> followers), and fetched records are read into memory and
encrypted instead of going out with os.sendfile. SASL costs once per connection.

Every node is a real process on free loopback ports with a temp data dir (the integration
tests' harness), stopped by its PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.7


def load_harness():
    path = ROOT / "tests" / "integration" / "node_harness.py"
    spec = importlib.util.spec_from_file_location("node_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_harness"] = module
    spec.loader.exec_module(module)
    return module


def perf(bootstrap: str, config: Path | None, *args: str, timeout_s: float = 900) -> dict:
    extra = [] if config is None else ["--command-config", str(config)]
    cmd = [sys.executable, "-m", "raftlog.cli", "perf", *args, "--bootstrap", bootstrap, "--json", "--quiet", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:1])} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout)


def create_topic(cluster, node: int, topic: str, partitions: int, rf: int) -> None:
    """Create `topic`, again while the controller is moving (a loaded machine may elect anew)."""
    from raftlog.base.errors import RaftlogError, TopicAlreadyExistsError

    def attempt() -> bool:
        try:
            cluster.call(node, "create_topic", name=topic, partitions=partitions, replication_factor=rf, configs={})
        except TopicAlreadyExistsError:
            pass  # an earlier attempt went through
        except RaftlogError as exc:
            if not exc.retriable:
                raise RuntimeError(f"creating {topic}: {exc}") from exc
            raise
        return True

    cluster.wait_for(attempt, 120, f"topic {topic} created")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rf", type=int, default=3, choices=(1, 2, 3))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup-records", type=int, default=10_000)
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    args = ap.parse_args()

    harness = load_harness()
    from raftlog.cli.secure import SecureMaterial

    results: dict[str, dict[str, list[float]]] = {"plaintext": {}, "secure": {}}
    with tempfile.TemporaryDirectory(prefix="bench-secure-") as tmp:
        plain = harness.NodeCluster(Path(tmp) / "plain", size=3, settings={})
        material, _ = SecureMaterial.ensure(Path(tmp) / "secure", [1, 2, 3], ["127.0.0.1"])
        secure = harness.NodeCluster(Path(tmp) / "secure", size=3, settings={}, security=material.admin_security())
        for node_id in secure.configs:
            secure.configs[node_id] = dataclasses.replace(secure.configs[node_id], **material.node_settings(node_id))
        clusters = {"plaintext": (plain, None), "secure": (secure, material.client_properties)}
        try:
            for cluster, _ in clusters.values():
                cluster.start_all()
            for cluster, _ in clusters.values():
                cluster.wait_ready(timeout_s=90)
            print(f"two 3-node clusters up (plaintext, secure: SASL_SSL + mTLS peers + ACLs); "
                  f"{args.records:,} records of {args.record_bytes} B, {args.partitions} partitions, RF={args.rf}, "
                  f"acks=all, {args.runs} run(s), cpus {os.cpu_count()}, load average {_load()}", flush=True)
            for run in range(args.runs):
                for name, (cluster, config) in clusters.items():
                    topic = f"bench-{name}-{run}"
                    node = cluster.live()[0]
                    create_topic(cluster, node, topic, args.partitions, args.rf)
                    cluster.wait_for(lambda: all(p.get("leader") is not None for p in cluster.call(
                        node, "metadata", topics=[topic])["topics"][0].get("partitions", [])),
                        120, f"leaders of {topic}")
                    bootstrap = ",".join(cluster.bootstrap())
                    pr = perf(bootstrap, config, "produce", "--topic", topic, "--records", str(args.records),
                              "--acks", "all", "--record-bytes", str(args.record_bytes),
                              "--warmup-records", str(args.warmup_records))
                    co = perf(bootstrap, config, "consume", "--topic", topic, "--records", str(args.records))
                    print(f"  run {run + 1} {name:<9}: produce {pr['records_per_s']:>10,.0f} rec/s "
                          f"({pr['mb_per_s']:.1f} MB/s, p99 {pr['latency_p99_ms']:.0f} ms), consume "
                          f"{co['records_per_s']:>10,.0f} rec/s ({co['mb_per_s']:.1f} MB/s)", flush=True)
                    for key, value in (("produce_rps", pr["records_per_s"]), ("consume_rps", co["records_per_s"]),
                                       ("produce_p99_ms", pr["latency_p99_ms"])):
                        results[name].setdefault(key, []).append(value)
        finally:
            for cluster, _ in clusters.values():
                cluster.stop_all()

    medians = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in results.items()}
    print()
    print(f"load average at the end {_load()}")  # other work on the machine moves every figure
    print(f"medians of {args.runs} run(s)")
    print(f"{'cluster':<11}{'produce rec/s':>15}{'p99 ms':>8}{'consume rec/s':>15}")
    for name, m in medians.items():
        print(f"{name:<11}{m['produce_rps']:>15,.0f}{m['produce_p99_ms']:>8.0f}{m['consume_rps']:>15,.0f}")
    ratios = {k: medians["secure"][k] / medians["plaintext"][k] for k in ("produce_rps", "consume_rps")}
    # Each run's secure figure over the plaintext one measured just before it: the machine's
    # other load moves both alike, so these pairs vary less than the medians do.
    paired = {k: statistics.median(s / p for s, p in zip(results["secure"][k], results["plaintext"][k]))
              for k in ratios}
    for key, ratio in ratios.items():
        what = key.removesuffix("_rps")
        print(f"secure / plaintext {what:<8} x{ratio:.2f} (median of the runs' pairs x{paired[key]:.2f})  "
              f"target >= {TARGET_RATIO}: {'MET' if ratio >= TARGET_RATIO else 'MISS'}")
    if args.json:
        print(json.dumps({"medians": medians, "ratios": ratios, "paired_ratios": paired}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

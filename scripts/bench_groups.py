#!/usr/bin/env python3
"""Consumer-group failover time: how long after a member is SIGKILLed its partitions are
consumed again by the other members.

One three-node cluster (real `raftlog node start` processes, temp dirs) and a 6-partition
topic; per run, three group members (tests/integration/group_consumer.py subprocesses, session
timeout --session-ms) join a fresh group and settle at two partitions each; a producer then
writes one record per partition every --interval-ms. One member is SIGKILLed; the time runs
from the kill until a surviving member has returned a record from every partition the dead
one owned. Prints each run and the median (of --runs, default 5), with the session timeout as
the baseline the figure is bound by (detection = session expiry, then a rebalance).

    .venv/bin/python scripts/bench_groups.py [--runs 5] [--session-ms 3000] [--part all|failover|rebalance]

Then, on the same cluster, scripts/bench_groups_rebalance.py: one of 10 members joins a group
of 30 partitions under KIP-848 beside the classic eager and cooperative rebalances
(--rebalance-runs, default 3).

And scripts/bench_share.py (`--part share`): five share-group consumers beside a classic
group of five over the same preloaded records (--share-records, default 5000; medians of
--share-runs, default 3).

Every process is stopped by its PID at the end (also on failure or Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "integration" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


harness = _load("node_harness")
groups_test = _load("test_groups_cluster")
TOPIC = groups_test.TOPIC


def one_run(cluster, run: int, session_ms: int, interval_ms: int, logs: Path) -> float:
    from raftlog.client import Producer

    groups_test.SESSION_MS = session_ms
    group = f"bench-{run}"
    boot = cluster.bootstrap()
    members = [groups_test.ConsumerProc(boot, group, f"r{run}m{i}", logs) for i in range(3)]
    stop = threading.Event()
    try:
        cluster.wait_for(lambda: groups_test.balanced(members, [2, 2, 2]), 60, "three balanced members")

        def produce() -> None:
            with Producer(boot, linger_ms=0) as p:
                n = 0
                while not stop.is_set():
                    for part in range(6):
                        p.send(TOPIC, str(n).encode(), partition=part)
                        n += 1
                    p.flush(10)
                    stop.wait(interval_ms / 1000)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        victim = members[0]
        owned = {p for _t, p in victim.latest_assignment()[1]}
        victim.kill()
        killed = time.monotonic()
        survivors = members[1:]

        def resumed():
            seen = {e["p"] for c in survivors for e in c.snapshot() if e["ev"] == "rec" and e["t"] > killed}
            return owned <= seen

        cluster.wait_for(resumed, 60, "the dead member's partitions consumed again")
        return time.monotonic() - killed
    finally:
        stop.set()
        for c in members:
            c.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=3000)
    ap.add_argument("--interval-ms", type=int, default=20, help="producer pause between rounds of 6 records")
    ap.add_argument("--part", choices=("all", "failover", "rebalance", "share"), default="all")
    ap.add_argument("--share-records", type=int, default=5000)
    ap.add_argument("--share-runs", type=int, default=3)
    ap.add_argument("--rebalance-runs", type=int, default=3)
    args = ap.parse_args()
    import bench_groups_rebalance  # this script's folder is on sys.path

    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        root = Path(tmp)
        logs = root / "consumers"
        logs.mkdir()
        settings = {**harness.TEST_SETTINGS, "group_consumer_heartbeat_interval_ms": 500,
                    "group_consumer_session_timeout_ms": 6000}
        with harness.NodeCluster(root, size=3, settings=settings) as cluster:
            cluster.start_all()
            cluster.wait_ready(60)
            cluster.call(1, "create_topic", name=TOPIC, partitions=6, replication_factor=3, configs={})
            cluster.wait_for(lambda: cluster.call(1, "find_coordinator", group_id="bench-0"), 30, "coordinator")
            if args.part in ("all", "share"):
                import bench_share

                bench_share.run(cluster, TOPIC, 6, args.share_records, logs, groups_test, _load("test_share_cluster"),
                              args.share_runs)
            if args.part in ("all", "rebalance"):
                bench_groups_rebalance.run_all(cluster, args.rebalance_runs, 50)
            for run in range(args.runs if args.part in ("all", "failover") else 0):
                t = one_run(cluster, run, args.session_ms, args.interval_ms, logs)
                times.append(t)
                print(f"run {run + 1}: partitions consumed again {t * 1000:.0f} ms after SIGKILL", flush=True)
    if not times:
        return 0
    med = statistics.median(times)
    print(f"median {med * 1000:.0f} ms (session_timeout_ms {args.session_ms}: ratio {med * 1000 / args.session_ms:.2f}); "
          f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {len(times)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A rebalance when one of 10 members joins a group of 30 partitions: KIP-848
(`group.protocol=consumer`) beside the classic protocol's eager (`range`) and cooperative
(`cooperative-sticky`) rebalances, in the same run, on the same cluster.

One three-node cluster (real `raftlog node start` processes, temp dirs), one 30-partition
topic, a producer writing one record to every partition every --interval-ms. Per protocol and
run, a fresh group of nine confluent-kafka consumers (threads of this process, librdkafka
underneath) settles on the 30 partitions; then a tenth joins. Measured from its start:
* `first record`: until the new member has consumed a record;
* `kept revoked`: how many partitions the nine old members had revoked although they kept
  them after the rebalance (eager: all of them; cooperative and KIP-848: none);
* `max gap`: the longest pause in consuming of a partition an old member kept, over the
  rebalance (the producer's interval is the floor).
Prints each run and the medians, with KIP-848's figures as ratios to eager's.

    scripts/bench groups_rebalance [--runs 3] [--interval-ms 50]
    (also part of `scripts/bench groups`)

Every process is stopped by its PID at the end (also on failure or Ctrl-C); consumer threads
are closed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import node_harness as harness  # noqa: E402

TOPIC = "bench-rebalance"
PARTITIONS = 30
OLD_MEMBERS = 9
PROTOCOLS = {
    "classic eager (range)": {"partition.assignment.strategy": "range"},
    "classic cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "KIP-848 (consumer)": {"group.protocol": "consumer"},
}
SETTLE_S = 60
CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


class Member:
    """One confluent-kafka consumer polling in a thread; records its consumption times and
    its assign / revoke callbacks (time.monotonic())."""

    def __init__(self, bootstrap: str, group: str, name: str, settings: dict[str, Any]):
        from confluent_kafka import Consumer

        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "auto.offset.reset": "latest", "enable.auto.commit": True, **settings}
        if settings.get("group.protocol") != "consumer":
            config.update(CLASSIC)
        self.consumer = Consumer(config)
        self.name = name
        self.owned: set[int] = set()
        self.revoked: list[tuple[float, set[int]]] = []
        self.reads: dict[int, list[float]] = defaultdict(list)
        self.first_read: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _assigned(self, c: Any, parts: Any) -> None:
        with self._lock:
            self.owned |= {p.partition for p in parts}

    def _revoked(self, c: Any, parts: Any) -> None:
        with self._lock:
            gone = {p.partition for p in parts}
            self.owned -= gone
            self.revoked.append((time.monotonic(), gone))

    def start(self) -> "Member":
        self.consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self.consumer.poll(0.1)
            if m is None or m.error() is not None:
                continue
            now = time.monotonic()
            with self._lock:
                self.reads[m.partition()].append(now)
                if self.first_read is None:
                    self.first_read = now

    def snapshot_owned(self) -> set[int]:
        with self._lock:
            return set(self.owned)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def produce_forever(bootstrap: str, stop: threading.Event, interval_ms: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    while not stop.is_set():
        for part in range(PARTITIONS):
            p.produce(TOPIC, str(n).encode(), partition=part)
            n += 1
        p.poll(0)
        stop.wait(interval_ms / 1000)
    p.flush(10)


def wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def covered(members: list[Member], count: int) -> bool:
    owned = [m.snapshot_owned() for m in members]
    every = set().union(*owned)
    return len(every) == PARTITIONS and sum(map(len, owned)) == PARTITIONS and all(owned[:count])


def one_run(bootstrap: str, protocol: str, run: int) -> dict[str, float]:
    group = f"bench-rebalance-{run}-{protocol.split()[0].lower()}-{protocol.split()[-1].strip('()')}"
    members = [Member(bootstrap, group, f"m{i}", PROTOCOLS[protocol]).start() for i in range(OLD_MEMBERS)]
    try:
        wait(lambda: covered(members, OLD_MEMBERS), SETTLE_S, f"{protocol}: nine members on 30 partitions")
        time.sleep(2.0)  # consuming steadily before the join (a measured warm-up, not a sync)
        before = {m.name: m.snapshot_owned() for m in members}
        started = time.monotonic()
        newcomer = Member(bootstrap, group, "m-new", PROTOCOLS[protocol]).start()
        members.append(newcomer)
        wait(lambda: newcomer.first_read is not None, SETTLE_S, f"{protocol}: the new member's first record")
        first_record_s = newcomer.first_read - started  # type: ignore[operator]
        wait(lambda: covered(members, OLD_MEMBERS + 1), SETTLE_S, f"{protocol}: ten members on 30 partitions")
        time.sleep(1.0)
        ended = time.monotonic()
        kept_revoked = 0
        max_gap = 0.0
        for m in members[:-1]:
            kept = before[m.name] & m.snapshot_owned()
            kept_revoked += sum(len(parts & kept) for t, parts in m.revoked if t >= started)
            for p in kept:
                times = [t for t in m.reads[p] if started - 1 <= t <= ended]
                gaps = [b - a for a, b in zip(times, times[1:])]
                if times:
                    gaps.append(times[0] - (started - 1))
                max_gap = max([max_gap, *gaps])
        return {"first_record_ms": first_record_s * 1000, "kept_revoked": kept_revoked, "max_gap_ms": max_gap * 1000}
    finally:
        for m in members:
            m.stop()


def run_all(cluster: Any, runs: int, interval_ms: int) -> None:
    cluster.call(1, "create_topic", name=TOPIC, partitions=PARTITIONS, replication_factor=3, configs={})
    bootstrap = cluster.kafka_bootstrap()
    stop = threading.Event()
    producer = threading.Thread(target=produce_forever, args=(bootstrap, stop, interval_ms), daemon=True)
    producer.start()
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        for run in range(runs):
            for protocol in PROTOCOLS:
                r = one_run(bootstrap, protocol, run)
                results[protocol].append(r)
                print(f"run {run + 1} {protocol}: new member's first record {r['first_record_ms']:.0f} ms, "
                      f"kept partitions revoked {r['kept_revoked']:.0f}, max gap on a kept partition "
                      f"{r['max_gap_ms']:.0f} ms", flush=True)
    finally:
        stop.set()
        producer.join(30)
    med = {p: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for p, rs in results.items()}
    print(f"rebalance, one of 10 members joins, {PARTITIONS} partitions (medians of {runs}; producer "
          f"interval {interval_ms} ms):")
    for p, m in med.items():
        print(f"  {p:28s} first record {m['first_record_ms']:6.0f} ms   kept revoked {m['kept_revoked']:3.0f}   "
              f"max gap on kept {m['max_gap_ms']:6.0f} ms")
    eager, kip = med["classic eager (range)"], med["KIP-848 (consumer)"]
    print(f"  KIP-848 / eager: first record {kip['first_record_ms'] / max(eager['first_record_ms'], 1):.2f}, "
          f"max gap on kept {kip['max_gap_ms'] / max(eager['max_gap_ms'], 1):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--interval-ms", type=int, default=50, help="producer pause between rounds of 30 records")
    args = ap.parse_args()
    settings = {**harness.TEST_SETTINGS, "group_consumer_heartbeat_interval_ms": 500,
                "group_consumer_session_timeout_ms": 6000}
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
        with harness.NodeCluster(Path(tmp), size=3, settings=settings) as cluster:
            cluster.start_all()
            cluster.wait_ready(60)
            cluster.wait_for(lambda: cluster.call(1, "find_coordinator", group_id="bench-rebalance"), 30,
                             "coordinator")
            run_all(cluster, args.runs, args.interval_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())

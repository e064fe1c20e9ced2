"""Fetch sessions (KIP-227, issue 41): a consumer of 1,000 partitions at a low record rate, with
sessions and without, in the same run, on one real node.

    python scripts/bench_fetch_sessions.py [--partitions 1000] [--seconds 20] [--rate 20] [--runs 2]

A producer writes --rate records/s to random partitions throughout. Each run has two phases,
one kafka-python consumer each (it keeps sessions; librdkafka does not), assigned every
partition, reading from the start (5 s to catch up, not measured): `enable_incremental_fetch_sessions` False, then True. Per
phase, over --seconds once the consumer has caught up: Fetch request bytes/s and Fetch
requests/s (the node's raftlog_request_bytes_total and raftlog_requests_total for op Fetch)
and the node's CPU (user + system seconds of its process per second, /proc). Prints the
medians of --runs and the ratio sessions / without (target: request bytes at most 0.1).

The node is a real process on free loopback ports with a temp data dir (the integration tests'
harness), stopped by its PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench_kafka import _load, load_harness

TOPIC = "bench-fetch-sessions"
WARM_UP_S = 5.0


def fetch_totals(http: str) -> tuple[float, float]:
    """(request bytes, requests) of Fetch on the node's Kafka listener so far."""
    sent = count = 0.0
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if 'listener="kafka"' in line and 'op="Fetch"' in line:
                if line.startswith("raftlog_request_bytes_total{"):
                    sent += float(line.rsplit(" ", 1)[1])
                elif line.startswith("raftlog_requests_total{"):
                    count += float(line.rsplit(" ", 1)[1])
    return sent, count


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(bootstrap: str, http: str, pid: int, partitions: int, sessions: bool, seconds: float) -> dict:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_incremental_fetch_sessions=sessions,
                             auto_offset_reset="earliest", enable_auto_commit=False, request_timeout_ms=60_000)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
        warm = time.monotonic() + WARM_UP_S  # catch up with what is there, open the session
        while time.monotonic() < warm:
            consumer.poll(timeout_ms=200)
        sent0, count0 = fetch_totals(http)
        cpu0, t0 = cpu_s(pid), time.monotonic()
        records = 0
        while time.monotonic() - t0 < seconds:
            records += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        elapsed = time.monotonic() - t0
        sent1, count1 = fetch_totals(http)
        return {"bytes_per_s": (sent1 - sent0) / elapsed, "fetches_per_s": (count1 - count0) / elapsed,
                "cpu": (cpu_s(pid) - cpu0) / elapsed, "records_per_s": records / elapsed}
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=20.0, help="records/s produced")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if args.partitions < 1 or args.seconds <= 0 or args.rate <= 0 or args.runs < 1:
        parser.error("--partitions, --seconds, --rate and --runs must be positive")
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    harness = load_harness()
    with tempfile.TemporaryDirectory(prefix="bench-fetch-sessions-") as tmp, \
            harness.NodeCluster(Path(tmp), size=1) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=90)
        pid = cluster.processes[1].pid
        print(f"node 1: pid {pid}; load {_load()}", flush=True)
        bootstrap, http = cluster.kafka_bootstrap(), cluster.http(1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(timeout=300)
        stop = threading.Event()

        def produce() -> None:  # the low record rate, all through the run
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
            rng = random.Random(1)
            while not stop.wait(1 / args.rate):
                producer.produce(TOPIC, b"x" * 100, partition=rng.randrange(args.partitions))
                producer.poll(0)
            producer.flush(30)

        producing = threading.Thread(target=produce, daemon=True)
        producing.start()
        results: dict[bool, list[dict]] = {False: [], True: []}
        try:
            for run in range(args.runs):
                for sessions in (False, True):
                    r = phase(bootstrap, http, pid, args.partitions, sessions, args.seconds)
                    results[sessions].append(r)
                    print(f"run {run + 1} {'sessions' if sessions else 'full    '}: "
                          f"{r['bytes_per_s']:10.0f} request B/s {r['fetches_per_s']:6.1f} fetches/s "
                          f"cpu {r['cpu']:.2f} {r['records_per_s']:5.1f} records/s", flush=True)
        finally:
            stop.set()
            producing.join(60)

        def med(sessions: bool, key: str) -> float:
            return statistics.median(r[key] for r in results[sessions])

        print(f"\n{args.partitions} partitions, {args.rate:g} records/s, {args.seconds:g} s per phase, "
              f"median of {args.runs}; load {_load()}")
        for key, label in (("bytes_per_s", "request bytes/s"), ("fetches_per_s", "fetches/s"),
                           ("cpu", "node CPU (cores)")):
            full, incremental = med(False, key), med(True, key)
            ratio = incremental / full if full else float("nan")
            print(f"{label:18} without {full:12.2f}  sessions {incremental:12.2f}  ratio {ratio:.3f}")
        bytes_ratio = med(True, "bytes_per_s") / med(False, "bytes_per_s")
        per_fetch = (med(True, "bytes_per_s") / med(True, "fetches_per_s")) / (
            med(False, "bytes_per_s") / med(False, "fetches_per_s"))
        print(f"request bytes per fetch, sessions / without: {per_fetch:.3f}")
        print(f"target request bytes/s ratio <= 0.1: {'met' if bytes_ratio <= 0.1 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

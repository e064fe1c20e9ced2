"""raftlog beside Apache Kafka on this machine (issue 40): `scripts/bench vs-kafka`.

    scripts/bench vs-kafka [--records 1000000] [--consume-mib 1024] [--runs 3] [--small] [--json]

One cluster at a time, three nodes each (raftlog: combined nodes from the integration tests'
harness; Kafka: the reference 4.x of tests/reference/kafka_ref.py, combined broker+controller
JVMs with -Xmx --kafka-heap-mb), every topic RF=3 with 6 partitions, acks=all. For each:
* time to serving: from starting the node processes to the Kafka listener answering metadata
  with every broker (Kafka's storage format is done before, not counted);
* idle node: RSS and CPU of each node over --idle-s seconds with nothing to do (median node);
* produce --records 100 B records and --records/8 1 KiB records with confluent-kafka
  (bench_kafka's client), and --records 100 B records with kafka-producer-perf-test;
* consume a --consume-mib topic of 100 B records from the beginning with confluent-kafka and
  with kafka-consumer-perf-test;
* end-to-end latency (produce call to consume, one process, one clock) at a fixed
  --e2e-rate records/s for --e2e-s seconds, and at 50 % of that cluster's own maximum (its
  confluent-kafka 100 B produce rate measured earlier in the same run): p50, p99, p99.9;
  beside them, the median of the clients' own request round trips in that run (librdkafka's
  statistics, each broker's mean of every 1 s window; its percentiles drop round trips over
  500 ms): Produce (acks=all: to the commit) and Fetch (the consumer's, fetch.wait.max.ms 5),
  so a figure says which path the time is on;
* partition failover: SIGKILL a node (not the controller) that leads a partition, time until an
  acks=all produce to that partition succeeds through a producer that was already connected;
  the node is restarted and the cluster waited for;
* controller failover: SIGKILL the metadata quorum's leader (kafka-metadata-quorum describe
  --status names it), time until a CreateTopics sent to the survivors by a new client succeeds.
Every figure is the median of --runs runs; the table gives raftlog's beside Kafka's and the
ratio raftlog/Kafka (for times and latencies lower is better, for rates higher). Prints the
load average: other work on the machine moves every figure. Every process, nodes, JVMs and
clients, is stopped by its PID at the end, also on Ctrl-C or failure.

The same client calls measure both (confluent-kafka's AdminClient and Producer), so each
failover figure includes the client's metadata refresh, as a user's application sees it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_kafka import ROOT, _load, child_consume, kafka_child, load_harness, median
from bench_scale import cpu_seconds, rss_mib

sys.path.insert(0, str(ROOT / "tests" / "reference"))
import kafka_ref  # noqa: E402 - the reference harness lives with the tests

MIB = 1 << 20
PARTITIONS = 6
STATS_INTERVAL_MS = 1000  # librdkafka statistics windows of the e2e run (round trips)


# ------------------------------------------------------------------ clients


def wait_serving(bootstrap: str, brokers: int, t0: float, timeout_s: float = 180) -> float:
    """Seconds from `t0` (perf_counter) until metadata through the Kafka listener names `brokers`."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.perf_counter() - t0 < timeout_s:
        try:
            if len(admin.list_topics(timeout=2).brokers) >= brokers:
                return time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - not serving yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{bootstrap} did not serve in {timeout_s:.0f} s")


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    """CreateTopics through the Kafka listener (the same call on both), then wait for leaders."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: no leader for every partition in 60 s")


def child_e2e(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    """Produce at a fixed `rate` (acks=all) with the wall-clock ns of each produce call in the
    value; a consumer in the same process reads them; latency = consume time - produce time."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    produce_stats: list[str] = []
    fetch_stats: list[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
                  "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": fetch_stats.append})
    c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    total = int(rate * seconds)
    latencies: list[float] = []
    done = threading.Event()

    def consume() -> None:
        idle_since = time.monotonic()
        while len(latencies) < total and time.monotonic() - idle_since < 30:
            for m in c.consume(num_messages=5_000, timeout=0.2):
                if m.error() is None:
                    latencies.append((time.time_ns() - int(m.value()[:19])) / 1e6)
                    idle_since = time.monotonic()
        done.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(2)  # the consumer's assignment and first fetch are in place before the clock starts
    fetch_stats.clear()  # the windows of the run only
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                  "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": produce_stats.append})
    pad = b"x" * 81
    t0 = time.perf_counter()
    for i in range(total):
        due = t0 + i / rate
        while (now := time.perf_counter()) < due:
            if due - now > 0.002:
                p.poll(0)
                time.sleep(0.001)
        while True:  # a full queue is back-pressure: wait for deliveries, as an application does
            try:
                p.produce(topic, b"%019d" % time.time_ns() + pad)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    done.wait(90)
    c.close()
    if not latencies:
        raise RuntimeError("no record came back")
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {"records": len(latencies), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "produce_rtt_ms": round_trip_ms(produce_stats), "fetch_rtt_ms": round_trip_ms(fetch_stats)}


def round_trip_ms(stats: list[str]) -> float:
    """The median over librdkafka's statistics windows and brokers of the window's mean request
    round trip (ms; the mean counts every round trip, the window's percentiles only those up to
    500 ms, librdkafka's histogram range); windows with no request left out; NaN when none."""
    means = [b["rtt"]["avg"] / 1000 for js in stats for b in json.loads(js)["brokers"].values()
             if b.get("nodeid", -1) >= 0 and b["rtt"]["cnt"] > 0]
    return statistics.median(means) if means else float("nan")


def producer_perf_test(bootstrap: str, topic: str, records: int, record_bytes: int) -> dict:
    done = kafka_ref.kafka_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", str(records),
                                "--record-size", str(record_bytes), "--throughput", "-1", "--producer-props",
                                f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5", timeout_s=1800)
    match = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", done.stdout.strip().splitlines()[-1]
                      if done.stdout.strip() else "")
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"kafka-producer-perf-test failed ({done.returncode}): {done.stderr[-800:]}")
    return {"records_per_s": float(match.group(2)), "mb_per_s": float(match.group(3)) * MIB / 1e6}


def consumer_perf_test(bootstrap: str, topic: str, records: int) -> dict:
    done = kafka_ref.kafka_tool("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                                "--messages", str(records), "--timeout", "60000", timeout_s=1800)
    rows = [line for line in done.stdout.splitlines() if re.match(r"\d{4}-", line)]
    if done.returncode != 0 or not rows:
        raise RuntimeError(f"kafka-consumer-perf-test failed ({done.returncode}): {done.stderr[-800:]}")
    cols = [c.strip() for c in rows[-1].split(",")]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
    return {"records": int(cols[4]), "records_per_s": float(cols[5]), "mb_per_s": float(cols[3]) * MIB / 1e6}


def idle_usage(pids: list[int], seconds: float) -> dict:
    """Median node's RSS (MiB) at the end and CPU (% of one core) over `seconds` of idling,
    each node's child processes included (a raftlog voter's metadata quorum process)."""
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(seconds)
    cpu = [(cpu_seconds(pid) - before[pid]) / seconds * 100 for pid in pids]
    return {"rss_mib": statistics.median(rss_mib(pid) for pid in pids), "cpu_pct": statistics.median(cpu)}


def e2e(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    return kafka_child_self("_e2e", bootstrap, topic, str(rate), str(seconds), timeout_s=seconds + 300)


def kafka_child_self(*args: str, timeout_s: float) -> dict:
    from bench_kafka import run_json

    return run_json([sys.executable, str(Path(__file__).resolve()), *args], timeout_s)


# ------------------------------------------------------------------ failover


class Nodes:
    """One side's three node processes, by node id: SIGKILL and restart by PID."""

    def __init__(self, processes: dict[int, Any], addresses: dict[int, str], wait_serving: Any):
        self.processes = processes
        self.addresses = addresses  # node id -> its Kafka listener
        self._wait_serving = wait_serving  # (timeout_s) -> None, once every live node serves

    def kill(self, node_id: int) -> None:
        self.processes[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.processes[node_id].start()
        self._wait_serving(180)

    def bootstrap_without(self, node_id: int) -> str:
        return ",".join(a for n, a in sorted(self.addresses.items()) if n != node_id)


def controller_and_leaders(bootstrap: str, topic: str) -> tuple[int, dict[int, int]]:
    """The metadata quorum's leader (kafka-metadata-quorum describe --status: DescribeCluster
    names a random broker as "controller" on a KRaft Kafka) and each partition's leader."""
    from confluent_kafka.admin import AdminClient

    done = kafka_ref.kafka_tool("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status",
                                timeout_s=120)
    match = re.search(r"LeaderId:\s+(\d+)", done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"kafka-metadata-quorum describe failed ({done.returncode}): {done.stderr[-800:]}")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return int(match.group(1)), {p: part.leader for p, part in md.partitions.items()}


def poll_until(what: str, attempt: Any, timeout_s: float = 120.0) -> float:
    """Call `attempt()` (True when it succeeded) until it does; seconds it took."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if attempt():
            return time.perf_counter() - t0
    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s")


def partition_failover(bootstrap: str, nodes: Nodes, topic: str) -> float:
    """SIGKILL a non-controller node leading a partition of `topic`; seconds until an acks=all
    produce to that partition succeeds through a producer connected before the kill."""
    from confluent_kafka import Producer

    controller, leaders = controller_and_leaders(bootstrap, topic)
    partition, victim = next((p, n) for p, n in sorted(leaders.items()) if n != controller)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0,
                  "message.timeout.ms": 5_000, "topic.metadata.refresh.interval.ms": 1_000})
    acked: list[bool] = []

    def produce_one() -> bool:
        acked.clear()
        p.produce(topic, b"failover", partition=partition,
                  on_delivery=lambda err, _msg: acked.append(err is None))
        p.flush(10)
        return bool(acked) and acked[0]

    if not produce_one():
        raise RuntimeError(f"{topic}[{partition}]: produce failed before the kill")
    nodes.kill(victim)
    took = poll_until(f"produce to {topic}[{partition}] after killing node {victim}", produce_one)
    p.flush(10)
    nodes.restart(victim)
    return took


def controller_failover(bootstrap: str, nodes: Nodes, run: int, side: str) -> float:
    """SIGKILL the active controller; seconds until CreateTopics through the survivors succeeds.
    Each attempt is a new client with a 2 s request timeout (its own metadata: no client-side
    cache of the dead controller is timed)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    controller, _ = controller_and_leaders(bootstrap, "vs-consume")
    survivors = nodes.bootstrap_without(controller)
    names = iter(f"vs-{side}-{run}-after-failover-{i}" for i in range(100_000))

    def create() -> bool:
        admin = AdminClient({"bootstrap.servers": survivors, "log_level": 0})
        try:
            name = next(names)
            admin.create_topics([NewTopic(name, 1, 3)], request_timeout=2)[name].result(3)
            return True
        except Exception:  # noqa: BLE001 - no controller yet: try again
            time.sleep(0.05)
            return False

    nodes.kill(controller)
    return poll_until(f"CreateTopics after killing controller {controller}", create)


# ------------------------------------------------------------------ one cluster


def workload(side: str, bootstrap: str, args: argparse.Namespace, run: int, out: dict[str, list[float]]) -> None:
    def note(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    kib_records = max(1, args.records // 8)
    for label, size, n in (("produce 100 B", 100, args.records), ("produce 1 KiB", 1024, kib_records)):
        topic = f"vs-{side}-{run}-{size}"
        create_topic(bootstrap, topic)
        r = kafka_child("_produce", bootstrap, topic, str(n), str(size), str(args.warmup_records))
        if r.get("errors"):
            raise RuntimeError(f"{side} {label}: {r['errors']} records not acknowledged")
        note(f"{label} (confluent-kafka) rec/s", r["records_per_s"])
        note(f"{label} (confluent-kafka) MB/s", r["mb_per_s"])
        print(f"  {side:>7} run {run + 1} {label}: {r['records_per_s']:>10,.0f} rec/s {r['mb_per_s']:6.1f} MB/s", flush=True)
    topic = f"vs-{side}-{run}-perftest"
    create_topic(bootstrap, topic)
    r = producer_perf_test(bootstrap, topic, args.records, 100)
    note("produce 100 B (kafka-producer-perf-test) rec/s", r["records_per_s"])
    print(f"  {side:>7} run {run + 1} producer-perf-test: {r['records_per_s']:>10,.0f} rec/s", flush=True)
    r = child_consume(bootstrap, "vs-consume", PARTITIONS, args.consume_records)
    if r["records"] < args.consume_records:
        raise RuntimeError(f"{side} consume read {r['records']} of {args.consume_records}")
    note("consume 100 B (confluent-kafka) rec/s", r["records_per_s"])
    note("consume 100 B (confluent-kafka) MB/s", r["mb_per_s"])
    print(f"  {side:>7} run {run + 1} consume: {r['records_per_s']:>10,.0f} rec/s {r['mb_per_s']:6.1f} MB/s", flush=True)
    r = consumer_perf_test(bootstrap, "vs-consume", args.consume_records)
    note("consume 100 B (kafka-consumer-perf-test) rec/s", r["records_per_s"])
    print(f"  {side:>7} run {run + 1} consumer-perf-test: {r['records_per_s']:>10,.0f} rec/s", flush=True)
    # Latency at a fixed rate, then at half of this cluster's own maximum measured above.
    half = int(out["produce 100 B (confluent-kafka) rec/s"][-1] / 2)
    note("e2e rate at 50 % of max (rec/s)", half)
    for rate, label in ((args.e2e_rate, f"{args.e2e_rate:,} rec/s"), (half, "50 % of max")):
        topic = f"vs-{side}-{run}-e2e-{rate}"
        create_topic(bootstrap, topic)
        r = e2e(bootstrap, topic, rate, args.e2e_s)
        for q in ("p50", "p99", "p999"):
            note(f"e2e latency {q.replace('p999', 'p99.9')} at {label} (ms)", r[f"{q}_ms"])
        note(f"e2e Produce round trip at {label} (ms)", r["produce_rtt_ms"])
        note(f"e2e Fetch round trip at {label} (ms)", r["fetch_rtt_ms"])
        print(f"  {side:>7} run {run + 1} e2e at {rate:,}/s: p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f} "
              f"p99.9 {r['p999_ms']:.1f} ms ({r['records']} records; load {_load()}); round trips "
              f"(mean): Produce {r['produce_rtt_ms']:.1f} ms, Fetch {r['fetch_rtt_ms']:.1f} ms", flush=True)


def measure(side: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Start `side`'s cluster --runs times for the start-up figures; run the workload on each."""
    out: dict[str, list[float]] = {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix=f"bench-vs-{side}-") as tmp:
            if side == "raftlog":
                cluster = load_harness().NodeCluster(Path(tmp), size=3, settings={})
                stop = cluster.stop_all
                try:
                    t0 = time.perf_counter()
                    cluster.start_all()
                    bootstrap = cluster.kafka_bootstrap()
                    serving_s = wait_serving(bootstrap, 3, t0)
                    cluster.wait_ready(timeout_s=90)
                    pids = [p.pid for p in cluster.processes.values()]
                    out.setdefault("time to serving (s)", []).append(serving_s)
                    nodes = Nodes(cluster.processes, {n: cluster.kafka(n) for n in cluster.processes},
                                  lambda timeout_s: cluster.wait_ready(timeout_s=timeout_s))
                    run_cluster(side, bootstrap, pids, nodes, args, run, out)
                finally:
                    stop()
            else:
                cluster = kafka_ref.KafkaCluster(Path(tmp), size=3, heap_mb=args.kafka_heap_mb)
                try:
                    cluster.format()
                    t0 = time.perf_counter()
                    cluster.launch()
                    cluster.wait_serving(180)
                    out.setdefault("time to serving (s)", []).append(time.perf_counter() - t0)
                    pids = [p for p in cluster.pids().values() if p is not None]
                    nodes = Nodes(cluster.processes, {n: cluster.kafka(n) for n in cluster.processes},
                                  cluster.wait_serving)
                    run_cluster(side, cluster.bootstrap, pids, nodes, args, run, out)
                finally:
                    cluster.stop()
    return out


def run_cluster(side: str, bootstrap: str, pids: list[int], nodes: Nodes, args: argparse.Namespace, run: int,
                out: dict[str, list[float]]) -> None:
    print(f"{side} up: bootstrap {bootstrap}, node pids {pids}, load {_load()}", flush=True)
    create_topic(bootstrap, "vs-consume")
    w = kafka_child("_produce", bootstrap, "vs-consume", str(args.consume_records), "100", "0", timeout_s=7200)
    if w.get("errors"):
        raise RuntimeError(f"{side}: the consume topic lost {w['errors']} records")
    time.sleep(args.settle_s)  # let the write above settle before the idle reading
    idle = idle_usage(pids, args.idle_s)
    out.setdefault("idle node RSS (MiB)", []).append(idle["rss_mib"])
    out.setdefault("idle node CPU (% of a core)", []).append(idle["cpu_pct"])
    workload(side, bootstrap, args, run, out)
    took = partition_failover(bootstrap, nodes, "vs-consume")
    out.setdefault("partition failover after SIGKILL (s)", []).append(took)
    print(f"  {side:>7} run {run + 1} partition failover: produce again after {took:.2f} s", flush=True)
    took = controller_failover(bootstrap, nodes, run, side)
    out.setdefault("controller failover after SIGKILL (s)", []).append(took)
    print(f"  {side:>7} run {run + 1} controller failover: CreateTopics again after {took:.2f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="100 B records per produce run")
    ap.add_argument("--consume-mib", type=int, default=1024, help="size of the topic read back")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup-records", type=int, default=10_000)
    ap.add_argument("--e2e-rate", type=int, default=20_000, help="records/s of the latency run")
    ap.add_argument("--e2e-s", type=float, default=10.0, help="seconds of the latency run")
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--kafka-heap-mb", type=int, default=512, help="-Xmx of each Kafka node")
    ap.add_argument("--small", action="store_true", help="a quick run: 200,000 records, a 64 MiB topic, 5 s latency")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    args = ap.parse_args()
    if args.small:
        args.records = min(args.records, 200_000)
        args.consume_mib = min(args.consume_mib, 64)
        args.e2e_s = min(args.e2e_s, 5.0)
    args.consume_records = args.consume_mib * MIB // 100
    try:
        kafka_ref.ensure_jars()
    except kafka_ref.ReferenceUnavailable as e:
        print(f"bench vs-kafka: the reference Kafka is not available here: {e}", file=sys.stderr)
        return 1
    load_start = _load()
    print(f"raftlog vs Apache Kafka {kafka_ref.kafka_version()}: 3 nodes each, RF=3, acks=all, {PARTITIONS} "
          f"partitions, {args.runs} run(s); cpus {os.cpu_count()}, load average {load_start}", flush=True)
    results = {side: measure(side, args) for side in ("raftlog", "kafka")}
    table = render_table(results, args, load_start)
    print()
    print(table)
    if args.json:
        print(json.dumps({s: {k: median(v) for k, v in r.items()} for s, r in results.items()}, sort_keys=True))
    return 0


def render_table(results: dict[str, dict[str, list[float]]], args: argparse.Namespace, load_start: str) -> str:
    rows = [f"Medians of {args.runs} run(s); load average at start {load_start}, at end {_load()} "
            f"(/proc/loadavg); Apache Kafka {kafka_ref.kafka_version()} -Xmx{args.kafka_heap_mb}m per node.", "",
            "| figure | raftlog | Kafka | raftlog / Kafka |", "| --- | ---: | ---: | ---: |"]
    for key in results["kafka"]:
        r, k = median(results["raftlog"].get(key, [])), median(results["kafka"][key])
        fmt = "{:,.0f}" if abs(k) >= 100 else "{:,.2f}"
        ratio = r / k if k else float("nan")
        rows.append(f"| {key} | {fmt.format(r)} | {fmt.format(k)} | {ratio:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_e2e":
        b, t, rate, secs = sys.argv[2:6]
        print(json.dumps(child_e2e(b, t, int(rate), float(secs))))
    else:
        sys.exit(main())

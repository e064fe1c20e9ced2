"""The Kafka listener beside the native protocol on a real three-node cluster (issue 15).

    python scripts/bench_kafka.py [--records 1000000] [--consume-gib 1] [--runs 3] [--small]

Produce: confluent-kafka's producer (librdkafka: batching in C) against the Kafka listeners
and `raftlog perf produce` against the native ones, in the same run, on fresh topics of the
same shape: 100-byte records, acks=all, RF=3, 6 partitions. Each side runs in its own process,
sends --warmup-records first and waits for them (connections, metadata, producer id), then
times --records records from the first send to the last acknowledgement.
Consume: one topic of --consume-gib GiB (100-byte records; --small: 64 MiB) written once, then
read from the beginning by confluent-kafka's consumer (Kafka listener) and by `raftlog perf
consume` (native), alternating; records/s and MB/s of record values.
Every figure is the median of --runs runs; the ratios are Kafka / native (target: produce
>= 1, the broker must not be the bottleneck). Prints the machine's load average: other work on
the machine moves every figure.

The nodes are real processes on free loopback ports with a temp data dir (the integration
tests' harness); every process, nodes and clients, is stopped by its PID at the end, also on
Ctrl-C or failure. Profiling a node meanwhile: `py-spy record --pid <pid>` (pids are printed).
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
from pathlib import Path

import baseline

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MIB = 1 << 20


def load_harness():
    path = ROOT / "tests" / "integration" / "node_harness.py"
    spec = importlib.util.spec_from_file_location("node_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_harness"] = module
    spec.loader.exec_module(module)
    return module


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run_json(cmd: list[str], timeout_s: float) -> dict:
    """Run a client process to completion (killed by PID on timeout) and parse its JSON line."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise RuntimeError(f"{cmd[2:4]} timed out after {timeout_s:.0f} s") from None
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:4])} failed ({p.returncode}): {err.strip()[-800:]}")
    return json.loads(out.strip().splitlines()[-1])


def perf(bootstrap: str, *args: str, timeout_s: float = 1800) -> dict:
    return run_json([sys.executable, "-m", "raftlog.cli", "perf", *args, "--bootstrap", bootstrap,
                     "--json", "--quiet"], timeout_s)


def kafka_child(*args: str, timeout_s: float = 1800) -> dict:
    return run_json([sys.executable, str(Path(__file__).resolve()), *args], timeout_s)


# ------------------------------------------------------------------ the Kafka-side clients


def child_produce(bootstrap: str, topic: str, records: int, record_bytes: int, warmup: int) -> dict:
    """confluent-kafka producer: acks=all, its defaults otherwise (linger 5 ms, batches of up
    to 1 MB, no compression); payloads are distinct but cheap to make."""
    from confluent_kafka import Producer

    errors = [0]

    def on_delivery(err, msg):
        if err is not None:
            errors[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20})
    payload = os.urandom(record_bytes * 2)

    def send(n: int) -> None:
        produce = p.produce
        for i in range(n):
            start = i % record_bytes
            while True:
                try:
                    produce(topic, payload[start:start + record_bytes], on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    p.poll(0.01)
            if i % 10_000 == 0:
                p.poll(0)

    send(warmup)
    if p.flush(120) != 0:
        raise RuntimeError("warm-up records not acknowledged")
    errors[0] = 0
    t0 = time.perf_counter()
    send(records)
    left = p.flush(600)
    elapsed = time.perf_counter() - t0
    return {"records": records - left - errors[0], "errors": errors[0] + left, "elapsed_s": elapsed,
            "records_per_s": (records - left - errors[0]) / elapsed,
            "mb_per_s": (records - left - errors[0]) * record_bytes / elapsed / 1e6}


def child_consume(bootstrap: str, topic: str, partitions: int, records: int,
                  isolation_level: str | None = None) -> dict:
    """confluent-kafka consumer: assign every partition at the beginning, read `records`
    (`isolation_level`: librdkafka's default, read_committed, unless given)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8 * MIB,
                  "queued.max.messages.kbytes": 262_144,
                  **({"isolation.level": isolation_level} if isolation_level else {})})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = nbytes = 0
        t0 = time.perf_counter()
        first = None
        last_record = t0
        while got < records:
            batch = c.consume(num_messages=10_000, timeout=0.5)
            now = time.perf_counter()
            if not batch:
                if now - last_record > 30:
                    break
                continue
            if first is None:
                first = now - t0
            last_record = now
            for m in batch:
                if m.error() is None:
                    got += 1
                    nbytes += len(m.value())
        elapsed = time.perf_counter() - t0
    finally:
        c.close()
    return {"records": got, "bytes": nbytes, "elapsed_s": elapsed, "records_per_s": got / elapsed,
            "mb_per_s": nbytes / elapsed / 1e6, "first_record_s": first}


# ------------------------------------------------------------------------------ the bench


def create_topic(cluster, topic: str, partitions: int) -> None:
    cluster.call(cluster.live()[0], "create_topic", name=topic, partitions=partitions,
                 replication_factor=3, configs={})
    cluster.wait_for(lambda: all(p.get("leader") is not None for p in cluster.call(
        cluster.live()[0], "metadata", topics=[topic])["topics"][0].get("partitions", [])),
        30, f"leaders of {topic}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup-records", type=int, default=10_000)
    ap.add_argument("--consume-gib", type=float, default=1.0, help="size of the topic read back")
    ap.add_argument("--small", action="store_true", help="a quick run: 200,000 produced, 64 MiB read")
    ap.add_argument("--skip", choices=("produce", "consume"), help="leave one half out")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    baseline.add_option(ap)
    args = ap.parse_args()
    if args.small:
        args.records = min(args.records, 200_000)
        args.consume_gib = min(args.consume_gib, 64 / 1024)
    consume_records = int(args.consume_gib * GIB / args.record_bytes)
    if args.baseline:
        return baseline.compare(args.baseline, "bench_kafka.py", args.runs)

    harness = load_harness()
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        cluster = harness.NodeCluster(Path(tmp), size=3, settings={})
        try:
            cluster.start_all()
            cluster.wait_ready(timeout_s=90)
            native = ",".join(cluster.bootstrap())
            kafka = cluster.kafka_bootstrap()
            print(f"cluster up: native {native}, kafka {kafka} (node pids "
                  f"{[p.pid for p in cluster.processes.values()]}); {args.record_bytes} B records, "
                  f"acks=all, RF=3, {args.partitions} partitions, {args.runs} run(s); cpus "
                  f"{os.cpu_count()}, load average {_load()}", flush=True)
            if args.skip != "produce":
                for run in range(args.runs):
                    # Alternate which side goes first, so neither always meets a warmer cluster.
                    order = ("native", "kafka") if run % 2 == 0 else ("kafka", "native")
                    for side in order:
                        topic = f"bench-{side}-{run}"
                        create_topic(cluster, topic, args.partitions)
                        if side == "native":
                            r = perf(native, "produce", "--topic", topic, "--records", str(args.records),
                                     "--acks", "all", "--record-bytes", str(args.record_bytes),
                                     "--warmup-records", str(args.warmup_records))
                        else:
                            r = kafka_child("_produce", kafka, topic, str(args.records),
                                            str(args.record_bytes), str(args.warmup_records))
                        if r.get("errors"):
                            raise RuntimeError(f"{side} produce: {r['errors']} records not acknowledged")
                        runs.setdefault(f"produce_{side}_rps", []).append(r["records_per_s"])
                        runs.setdefault(f"produce_{side}_mbps", []).append(r["mb_per_s"])
                        print(f"  produce run {run + 1} {side:>6}: {r['records_per_s']:>12,.0f} records/s "
                              f"{r['mb_per_s']:7.1f} MB/s (load {_load()})", flush=True)
            if args.skip != "consume":
                topic = "bench-consume"
                create_topic(cluster, topic, args.partitions)
                t0 = time.perf_counter()
                w = kafka_child("_produce", kafka, topic, str(consume_records), str(args.record_bytes), "0",
                                timeout_s=7200)
                print(f"  wrote {consume_records:,} records ({consume_records * args.record_bytes / GIB:.2f} GiB) "
                      f"to {topic} in {time.perf_counter() - t0:.0f} s", flush=True)
                if w.get("errors"):
                    raise RuntimeError(f"the consume topic lost {w['errors']} records")
                for run in range(args.runs):
                    order = ("native", "kafka") if run % 2 == 0 else ("kafka", "native")
                    for side in order:
                        if side == "native":
                            r = perf(native, "consume", "--topic", topic, "--records", str(consume_records),
                                     timeout_s=7200)
                        else:
                            r = kafka_child("_consume", kafka, topic, str(args.partitions), str(consume_records),
                                            timeout_s=7200)
                        if r["records"] < consume_records:
                            raise RuntimeError(f"{side} consume read {r['records']} of {consume_records}")
                        runs.setdefault(f"consume_{side}_rps", []).append(r["records_per_s"])
                        runs.setdefault(f"consume_{side}_mbps", []).append(r["mb_per_s"])
                        print(f"  consume run {run + 1} {side:>6}: {r['records_per_s']:>12,.0f} records/s "
                              f"{r['mb_per_s']:7.1f} MB/s (load {_load()})", flush=True)
        finally:
            cluster.stop_all()

    med = {k: median(v) for k, v in runs.items()}
    print()
    print(f"load average at the end {_load()}; medians of {args.runs} run(s)")
    print(f"{'':<10}{'native rec/s':>14}{'MB/s':>8}{'kafka rec/s':>14}{'MB/s':>8}{'kafka/native':>14}")
    for what in ("produce", "consume"):
        n, k = med.get(f"{what}_native_rps"), med.get(f"{what}_kafka_rps")
        if n is None or k is None:
            continue
        print(f"{what:<10}{n:>14,.0f}{med[f'{what}_native_mbps']:>8.1f}{k:>14,.0f}"
              f"{med[f'{what}_kafka_mbps']:>8.1f}{k / n:>13.2f}x")
    if "produce_native_rps" in med and "produce_kafka_rps" in med:
        ok = med["produce_kafka_rps"] >= med["produce_native_rps"]
        print(f"target produce {'MET ' if ok else 'MISS'} kafka {med['produce_kafka_rps']:,.0f} >= "
              f"native {med['produce_native_rps']:,.0f} records/s")
    if args.json:
        print(json.dumps(med, sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_produce":
        b, t, n, size, warm = sys.argv[2:7]
        print(json.dumps(child_produce(b, t, int(n), int(size), int(warm))))
    elif len(sys.argv) > 1 and sys.argv[1] == "_consume":
        b, t, parts, n = sys.argv[2:6]
        print(json.dumps(child_consume(b, t, int(parts), int(n))))
    else:
        sys.exit(main())

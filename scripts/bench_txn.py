"""Kafka transactions against plain produce and read_committed against read_uncommitted (issue 42).

    scripts/bench txn [--records 200000] [--runs 3] [--txn-ms 100] [--small]

Produce: confluent-kafka's transactional producer (``transactional.id``, a transaction every
--txn-ms ms: begin, produce, commit) against the same producer without transactions
(idempotent, as a transactional one is), in the same run, on fresh topics of the same shape:
100-byte records spread over 6 partitions, acks=all, RF=3, linger 5 ms. Each side runs in its
own process, sends --warmup-records first (connections, metadata, producer id, and for the
transactional side ``init_transactions``) and times --records records from the first send to
the last acknowledgement (the last commit). Target: transactional >= 0.8 x plain.
Consume: the transactionally written topic of the last produce run (records between commit
markers, a fifth of its transactions aborted when --abort-every 5) read from the beginning by a
read_committed consumer and by a read_uncommitted one, alternating. records/s counts the
records each returns (read_uncommitted also returns the aborted ones, so the figure compares
the work of fetching); target read_committed >= 0.9 x read_uncommitted.
Every figure is the median of --runs runs; the ratios are printed. Node and client processes are
stopped by their PIDs at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_kafka import _load, child_consume, create_topic, load_harness, median, run_json


def child(*args: str, timeout_s: float = 1800) -> dict:
    return run_json([sys.executable, str(Path(__file__).resolve()), *args], timeout_s)


def child_produce_txn(bootstrap: str, topic: str, records: int, record_bytes: int, warmup: int,
                      partitions: int, txn_ms: float, abort_every: int) -> dict:
    """Produces `records` records round-robin over `partitions`; transactional when `txn_ms` > 0
    (a commit every `txn_ms` ms; every `abort_every`-th transaction aborted, 0 for none)."""
    from confluent_kafka import Producer

    transactional = txn_ms > 0
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
              "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20}
    if transactional:
        config["transactional.id"] = f"bench-txn-{os.getpid()}"
    p = Producer(config)
    errors = [0]

    def on_delivery(err, msg):
        if err is not None:
            errors[0] += 1

    payload = os.urandom(record_bytes * 2)
    txns = {"committed": 0, "aborted": 0, "aborted_records": 0}

    def send(n: int) -> None:
        produce = p.produce
        in_txn = 0
        txn_start = time.perf_counter()
        if transactional:
            p.begin_transaction()
        for i in range(n):
            start = i % record_bytes
            while True:
                try:
                    produce(topic, payload[start:start + record_bytes], partition=i % partitions,
                            on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    p.poll(0.01)
            in_txn += 1
            if i % 1000 == 0:
                p.poll(0)
            if transactional and (time.perf_counter() - txn_start) * 1000 >= txn_ms:
                end_txn(in_txn)
                in_txn, txn_start = 0, time.perf_counter()
                p.begin_transaction()
        if transactional:
            end_txn(in_txn)

    def end_txn(count: int) -> None:
        done = txns["committed"] + txns["aborted"]
        if abort_every and done % abort_every == abort_every - 1:
            p.abort_transaction(60)
            txns["aborted"] += 1
            txns["aborted_records"] += count
        else:
            p.commit_transaction(60)
            txns["committed"] += 1

    if transactional:
        p.init_transactions(60)
    send(warmup)
    if p.flush(120) != 0:
        raise RuntimeError("warm-up records not acknowledged")
    errors[0] = 0
    txns.update(committed=0, aborted=0)  # aborted_records counts the warm-up's too (the consume side)
    t0 = time.perf_counter()
    send(records)
    left = p.flush(600)
    elapsed = time.perf_counter() - t0
    done = records - left - errors[0]
    return {"records": done, "errors": errors[0] + left, "elapsed_s": elapsed, "records_per_s": done / elapsed,
            "mb_per_s": done * record_bytes / elapsed / 1e6, **txns}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per produce run")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--txn-ms", type=float, default=100.0, help="length of one transaction")
    ap.add_argument("--abort-every", type=int, default=0,
                    help="abort every n-th transaction of the produce runs (default 0: none)")
    ap.add_argument("--warmup-records", type=int, default=5_000)
    ap.add_argument("--small", action="store_true", help="a quick run: 50,000 records")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON too")
    args = ap.parse_args()
    if args.small:
        args.records = min(args.records, 50_000)

    harness = load_harness()
    runs: dict[str, list[float]] = {}
    consume_topic, consume_records = None, {}
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        cluster = harness.NodeCluster(Path(tmp), size=3, settings={})
        try:
            cluster.start_all()
            cluster.wait_ready(timeout_s=90)
            kafka = cluster.kafka_bootstrap()
            print(f"cluster up: kafka {kafka} (node pids {[p.pid for p in cluster.processes.values()]}); "
                  f"{args.record_bytes} B records, acks=all, RF=3, {args.partitions} partitions, "
                  f"{args.txn_ms:.0f} ms transactions, {args.runs} run(s); cpus {os.cpu_count()}, "
                  f"load average {_load()}", flush=True)
            for run in range(args.runs):
                # Alternate which side goes first, so neither always meets a warmer cluster.
                order = ("plain", "txn") if run % 2 == 0 else ("txn", "plain")
                for side in order:
                    topic = f"bench-{side}-{run}"
                    create_topic(cluster, topic, args.partitions)
                    txn_ms = args.txn_ms if side == "txn" else 0
                    r = child("_produce_txn", kafka, topic, str(args.records), str(args.record_bytes),
                                    str(args.warmup_records), str(args.partitions), str(txn_ms),
                                    str(args.abort_every))
                    if r.get("errors"):
                        raise RuntimeError(f"{side} produce: {r['errors']} records not acknowledged")
                    runs.setdefault(f"produce_{side}_rps", []).append(r["records_per_s"])
                    extra = (f" ({r['committed']} committed, {r['aborted']} aborted transactions)"
                             if side == "txn" else "")
                    print(f"  produce run {run + 1} {side:>5}: {r['records_per_s']:>10,.0f} records/s "
                          f"{r['mb_per_s']:6.1f} MB/s{extra} (load {_load()})", flush=True)
                    if side == "txn":
                        consume_topic = topic
                        # read_uncommitted returns the aborted records too; read_committed not
                        consume_records = {"read_uncommitted": args.warmup_records + args.records,
                                           "read_committed": args.warmup_records + args.records - r["aborted_records"]}
            for run in range(args.runs):
                order = ("read_uncommitted", "read_committed") if run % 2 == 0 else (
                    "read_committed", "read_uncommitted")
                for isolation in order:
                    r = child("_consume", kafka, consume_topic, str(args.partitions), str(consume_records[isolation]),
                                    isolation, timeout_s=1800)
                    runs.setdefault(f"consume_{isolation}_rps", []).append(r["records_per_s"])
                    print(f"  consume run {run + 1} {isolation:>16}: {r['records_per_s']:>10,.0f} records/s "
                          f"({r['records']:,} records) (load {_load()})", flush=True)
        finally:
            cluster.stop_all()

    med = {k: median(v) for k, v in runs.items()}
    print()
    print(f"load average at the end {_load()}; medians of {args.runs} run(s)")
    produce = med["produce_txn_rps"] / med["produce_plain_rps"]
    consume = med["consume_read_committed_rps"] / med["consume_read_uncommitted_rps"]
    print(f"produce  transactional {med['produce_txn_rps']:>10,.0f}  plain {med['produce_plain_rps']:>10,.0f} "
          f"records/s  ratio {produce:.2f} (target >= 0.8: {'MET' if produce >= 0.8 else 'MISS'})")
    print(f"consume  read_committed {med['consume_read_committed_rps']:>9,.0f}  read_uncommitted "
          f"{med['consume_read_uncommitted_rps']:>9,.0f} records/s  ratio {consume:.2f} "
          f"(target >= 0.9: {'MET' if consume >= 0.9 else 'MISS'})")
    if args.json:
        print(json.dumps({**med, "produce_ratio": produce, "consume_ratio": consume}, sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_produce_txn":
        b, t, n, size, warm, parts, txn_ms, abort_every = sys.argv[2:10]
        print(json.dumps(child_produce_txn(b, t, int(n), int(size), int(warm), int(parts), float(txn_ms),
                                           int(abort_every))))
    elif len(sys.argv) > 1 and sys.argv[1] == "_consume":
        b, t, parts, n, isolation = sys.argv[2:7]
        print(json.dumps(child_consume(b, t, int(parts), int(n), isolation)))
    else:
        sys.exit(main())

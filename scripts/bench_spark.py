#!/usr/bin/env python
"""Spark ingestion benchmark: format("raftlog") micro-batches beside the blocking client alone.

    .venv/bin/python scripts/bench_spark.py [--runs 3] [--records 1000000] [--partitions 4]
        [--keep DIR]

Starts 3 local `raftlog node` processes (stopped by PID at the end, also on failure),
creates one topic (RF=3), produces --records records of 100 bytes with the client Producer
in big batches (acks=all, 1 MiB batches), then per run, in the same cluster:

* client alone: a blocking Consumer assigned every partition reads all the records;
* Spark stream: one AvailableNow micro-batch (fresh checkpoint, startingOffsets=earliest)
  reading all the records into a foreachBatch sink that runs `count()`; rows/s over the
  micro-batch's `triggerExecution` time (and over the query's wall time from start());
* Spark batch: `spark.read.format("raftlog").load().count()`, wall time;
* fixed overhead: one more record, the same query resumed from its checkpoint: the
  `triggerExecution` time of a micro-batch of ~0 rows;
* read() alone: `read_range` (fetch + Arrow columns) in the bench process, no Spark.

One full batch read warms the session up first (Python workers, JIT), not measured.
BENCH_SPARK_VERBOSE=1 prints Spark's durationMs of each measured micro-batch.

Prints medians of --runs. Targets (issue 7): Spark stream >= 300,000 rows/s and >= 0.5 x the
client alone. SparkSession: local[2], UI off, `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC`.

`--parts` (default all three):
* source: the above, in local[2];
* sink (issue 17): beside `raftlog perf produce` of --records 100-byte records (RF=3,
  acks=all, 6 partitions) in the same run: `df.write.format("raftlog")` of as many rows from
  `spark.range` (wall time; target >= 0.5 x perf produce), and an exactly-once streaming copy
  of the source topic into 6 partitions (one AvailableNow micro-batch, triggerExecution time;
  the source's read is in the same tasks);
* standalone: the source measurements again on a Spark standalone cluster (master and two
  workers from the pyspark package, one 1-core executor per worker), beside local[2].
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raftlog.cli.cluster import NodePorts, NodeProcess, build_node_configs, free_ports, stop_all, write_node_config  # noqa: E402
from raftlog.node.config import new_cluster_id  # noqa: E402
from raftlog.base.errors import RaftlogError  # noqa: E402

RECORD_BYTES = 100
TOPIC = "bench-spark"
SETTINGS = {"heartbeat_ms": 300, "session_timeout_ms": 2000}


class Cluster:
    def __init__(self, root: Path):
        self.ports = {i: NodePorts(*free_ports(5)) for i in (1, 2, 3)}
        self.configs = build_node_configs(root, new_cluster_id(), secrets.token_urlsafe(24),
                                          self.ports, settings=SETTINGS)
        self.procs: dict[int, NodeProcess] = {}

    def start_all(self) -> None:
        for i, cfg in self.configs.items():
            self.procs[i] = NodeProcess(i, write_node_config(cfg), cfg.data_dir / "node.log").start()

    def bootstrap(self) -> str:
        return ",".join(str(cfg.listeners.client) for cfg in self.configs.values())

    def wait(self, predicate, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if not all(p.alive() for p in self.procs.values()):
                raise SystemExit(f"a node exited while waiting for {what}")
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, KeyError, TypeError, RaftlogError) as exc:
                last = exc  # not yet: the cluster is still settling
            time.sleep(0.05)
        raise SystemExit(f"timed out waiting for {what}: {last!r}")

    def stop(self) -> None:
        stop_all(self.procs.values(), 15)


def produce(bootstrap: str, partitions: int, records: int) -> float:
    from raftlog.client import Producer

    value = b"x" * RECORD_BYTES
    t0 = time.perf_counter()
    with Producer(bootstrap, acks="all", linger_ms=50, batch_bytes=1 << 20,
                  buffer_bytes=256 << 20, delivery_timeout_ms=300_000) as producer:
        per = records // partitions
        for p in range(partitions):
            n = per + (1 if p < records % partitions else 0)
            send = producer.send
            for _ in range(n):
                send(TOPIC, value, partition=p)
        producer.flush(300)
    return time.perf_counter() - t0


def client_alone(bootstrap: str, partitions: int, records: int) -> float:
    """Rows/s of a blocking Consumer reading every record from the beginning."""
    from raftlog.client import Consumer

    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=100_000,
                  max_partition_fetch_bytes=4 << 20) as consumer:
        consumer.assign([(TOPIC, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        t0 = time.perf_counter()
        got = 0
        while got < records:
            got += len(consumer.poll(timeout_ms=1000))
        return got / (time.perf_counter() - t0)


def read_alone(bootstrap: str, partitions: int) -> float:
    """Rows/s of the source's read path (`read_range`: fetch + Arrow columns) in this one
    process, partition after partition, no Spark: the per-core ceiling of a read task."""
    from spark_source.fetch import ClusterProvider, read_range
    from spark_source.planning import RaftlogInputPartition

    provider = ClusterProvider(bootstrap)
    try:
        tps = [(TOPIC, p) for p in range(partitions)]
        ends = provider.latest_offsets(tps)
        t0 = time.perf_counter()
        rows = 0
        for (topic, p), end in ends.items():
            for batch in read_range(provider, RaftlogInputPartition(topic, p, 0, end)):
                rows += batch.num_rows
        return rows / (time.perf_counter() - t0)
    finally:
        provider.close()


def spark_session():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return (SparkSession.builder.master("local[2]").appName("bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate())


def stream_once(spark, bootstrap: str, checkpoint: Path) -> tuple[int, float, float]:
    """One AvailableNow run from the checkpoint: (rows, triggerExecution s of the batch with
    the most rows, wall s from start() to termination)."""
    counted: dict[int, int] = {}

    def sink(df, batch_id):
        counted[batch_id] = df.count()

    t0 = time.perf_counter()
    q = (spark.readStream.format("raftlog").option("bootstrap", bootstrap)
         .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    if not q.awaitTermination(600):
        q.stop()
        raise SystemExit("the micro-batch did not finish in 600 s")
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    batches = [p for p in q.recentProgress if p.numInputRows > 0] or list(q.recentProgress)
    if not batches:
        raise SystemExit("the query made no progress")
    biggest = max(batches, key=lambda p: p.numInputRows)
    if os.environ.get("BENCH_SPARK_VERBOSE"):
        print(f"  batch {biggest.batchId}: {biggest.numInputRows} rows, durationMs "
              f"{dict(biggest.durationMs)}")
    return sum(counted.values()), biggest.durationMs["triggerExecution"] / 1000, wall


def source_part(spark, bootstrap: str, total: int, partitions: int, runs: int,
                root: Path, label: str) -> tuple[dict[str, float], int]:
    """The source measurements of the module docstring, in `spark`, over the `total`
    records of TOPIC; medians by name, and the records in TOPIC after (each run's overhead
    probe adds one)."""
    from raftlog.client import Producer

    t0 = time.perf_counter()
    (spark.read.format("raftlog").option("bootstrap", bootstrap).option("subscribe", TOPIC)
     .load().count())
    print(f"[{label}] warm-up (one full batch read, not measured): {time.perf_counter() - t0:.1f} s")
    client, stream_tx, stream_wall, batch, overhead, alone = [], [], [], [], [], []
    for run in range(runs):
        client.append(client_alone(bootstrap, partitions, total))
        alone.append(read_alone(bootstrap, partitions))
        checkpoint = root / f"checkpoint-{label}-{run}"
        rows, trigger_s, wall_s = stream_once(spark, bootstrap, checkpoint)
        if rows != total:
            raise SystemExit(f"the micro-batch counted {rows} rows, not {total}")
        stream_tx.append(rows / trigger_s)
        stream_wall.append(rows / wall_s)
        t0 = time.perf_counter()
        n = (spark.read.format("raftlog").option("bootstrap", bootstrap)
             .option("subscribe", TOPIC).load().count())
        batch_s = time.perf_counter() - t0
        if n != total:
            raise SystemExit(f"the batch read counted {n} rows, not {total}")
        batch.append(n / batch_s)
        with Producer(bootstrap, acks="all") as producer:
            producer.send(TOPIC, b"x" * RECORD_BYTES, partition=0).result(30)
        total += 1
        one, small_s, _ = stream_once(spark, bootstrap, checkpoint)
        overhead.append(small_s)
        print(f"[{label}] run {run + 1}: client {client[-1]:,.0f} rows/s; read() alone "
              f"{alone[-1]:,.0f} rows/s; stream micro-batch "
              f"{stream_tx[-1]:,.0f} rows/s ({trigger_s:.2f} s; wall {stream_wall[-1]:,.0f}"
              f" rows/s); batch count() {batch[-1]:,.0f} rows/s; {one}-row micro-batch "
              f"{small_s * 1000:.0f} ms")
    med = statistics.median
    ratio = med(stream_tx) / med(client)
    print(f"[{label}] median client alone:        {med(client):12,.0f} rows/s")
    print(f"[{label}] median read() path alone:   {med(alone):12,.0f} rows/s  (one process, no Spark)")
    print(f"[{label}] median Spark micro-batch:   {med(stream_tx):12,.0f} rows/s  "
          f"(target >= 300,000: {'met' if med(stream_tx) >= 300_000 else 'NOT met'})")
    print(f"[{label}] median Spark stream wall:   {med(stream_wall):12,.0f} rows/s  (query start to end)")
    print(f"[{label}] median Spark batch count(): {med(batch):12,.0f} rows/s")
    print(f"[{label}] ratio micro-batch / client: {ratio:.2f}  "
          f"(target >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
    print(f"[{label}] fixed per-micro-batch overhead (~0 rows): {med(overhead) * 1000:.0f} ms")
    return {"client": med(client), "stream": med(stream_tx), "batch": med(batch),
            "overhead_ms": med(overhead) * 1000}, total


SINK_PARTITIONS = 6


def perf_produce(bootstrap: str, topic: str, records: int) -> float:
    """records/s of `raftlog perf produce` (RF=3 acks=all, the CLI's defaults)."""
    raftlog = Path(sys.executable).with_name("raftlog")
    p = subprocess.run([str(raftlog), "perf", "produce", "--topic", topic, "--records",
                        str(records), "--record-bytes", str(RECORD_BYTES), "--acks", "all",
                        "--warmup-records", "10000", "--json", "--quiet", "--bootstrap",
                        bootstrap], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"raftlog perf produce failed: {p.stderr.strip()[-500:]}")
    return float(json.loads(p.stdout)["records_per_s"])


def sink_part(spark, bootstrap: str, records: int, runs: int, root: Path) -> None:
    """Sink rows/s beside `raftlog perf produce` into 6 partitions, RF=3, acks=all."""
    from pyspark.sql import functions as F

    from raftlog.client import Admin

    topics = ["bench-sink-perf", "bench-sink-batch", "bench-sink-eo"]
    with Admin(bootstrap, request_timeout_ms=10_000) as admin:
        for t in topics:
            admin.create_topic(t, SINK_PARTITIONS, 3)
    value = b"x" * RECORD_BYTES
    df = spark.range(records, numPartitions=2).select(F.lit(value).alias("value"))
    # Warm-up (not measured): Python workers, Arrow, the JIT of the write path.
    (spark.range(50_000, numPartitions=2).select(F.lit(value).alias("value")).write
     .format("raftlog").option("bootstrap", bootstrap).option("topic", "bench-sink-batch")
     .mode("append").save())
    perf, batch, eo = [], [], []
    for run in range(runs):
        perf.append(perf_produce(bootstrap, "bench-sink-perf", records))
        t0 = time.perf_counter()
        (df.write.format("raftlog").option("bootstrap", bootstrap)
         .option("topic", "bench-sink-batch").mode("append").save())
        batch.append(records / (time.perf_counter() - t0))
        # Exactly-once stream: one AvailableNow micro-batch copying the source topic (1 M
        # rows of 100 bytes, read by the source in the same tasks) into 6 partitions.
        counted = []
        q = (spark.readStream.format("raftlog").option("bootstrap", bootstrap)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
             .select("value").writeStream.format("raftlog").option("bootstrap", bootstrap)
             .option("topic", "bench-sink-eo")
             .option("checkpointLocation", str(root / f"checkpoint-sink-{run}"))
             .trigger(availableNow=True).start())
        if not q.awaitTermination(900):
            q.stop()
            raise SystemExit("the exactly-once copy did not finish in 900 s")
        if q.exception() is not None:
            raise SystemExit(f"the exactly-once copy failed: {q.exception()}")
        for prog in q.recentProgress:
            if prog.numInputRows:
                counted.append((prog.numInputRows, prog.durationMs["triggerExecution"] / 1000))
        rows = sum(n for n, _ in counted)
        eo.append(rows / sum(s for _, s in counted))
        print(f"[sink] run {run + 1}: raftlog perf produce {perf[-1]:,.0f} records/s; sink "
              f"batch write {batch[-1]:,.0f} rows/s ({batch[-1] / perf[-1]:.2f}x); exactly-once "
              f"stream copy {eo[-1]:,.0f} rows/s ({eo[-1] / perf[-1]:.2f}x, {rows:,} rows read "
              "and written)")
    med = statistics.median
    ratio = med(batch) / med(perf)
    print(f"[sink] median raftlog perf produce:  {med(perf):12,.0f} records/s (RF=3 acks=all, "
          f"{SINK_PARTITIONS} partitions, {RECORD_BYTES}-byte values)")
    print(f"[sink] median sink batch write:     {med(batch):12,.0f} rows/s  ratio {ratio:.2f} "
          f"(target >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
    print(f"[sink] median exactly-once copy:    {med(eo):12,.0f} rows/s  ratio "
          f"{med(eo) / med(perf):.2f} (source read + exactly-once write in the same tasks)")


def standalone_session(master: str):
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName("bench-spark-standalone")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.cores.max", "2").config("spark.executor.cores", "1")
            .config("spark.executor.memory", "2g")
            .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.pyspark.python", sys.executable)
            .getOrCreate())


def load_spark_cluster():
    path = Path(__file__).resolve().parents[1] / "tests" / "integration" / "spark_cluster.py"
    spec = importlib.util.spec_from_file_location("spark_cluster", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["spark_cluster"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--parts", default="source,sink,standalone",
                    help="comma-separated: source (local[2]), sink, standalone (the source on a "
                         "standalone cluster)")
    ap.add_argument("--keep", help="data directory to use and keep (default: a temp dir)")
    args = ap.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"source", "sink", "standalone"}
    if unknown:
        ap.error(f"unknown parts: {', '.join(sorted(unknown))}")

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-spark-"))
    cluster = Cluster(root)
    spark = None
    standalone = None
    try:
        from raftlog.client import Admin

        cluster.start_all()
        bootstrap = cluster.bootstrap()
        with Admin(bootstrap, request_timeout_ms=10_000) as admin:
            cluster.wait(lambda: (lambda s: s.controller_id is not None and len(
                [b for b in s.brokers if not b["fenced"]]) == 3)(admin.cluster_status()),
                60, "a ready cluster")
            admin.create_topic(TOPIC, args.partitions, 3, {"max_message_bytes": str(2 << 20)})
            cluster.wait(lambda: all(p.leader is not None for p in
                                     admin.describe_topics([TOPIC])[TOPIC].partitions),
                         30, "partition leaders")
        produce_s = produce(bootstrap, args.partitions, args.records)
        print(f"nodes: 3 local processes, RF=3, {args.partitions} partitions; {os.cpu_count()} "
              f"CPUs; {args.records:,} records of {RECORD_BYTES} bytes produced in "
              f"{produce_s:.1f} s ({args.records / produce_s:,.0f} records/s); {args.runs} runs")

        from spark_source import register

        t0 = time.perf_counter()
        spark = spark_session()
        register(spark)
        print(f"SparkSession local[2] started in {time.perf_counter() - t0:.1f} s")
        local = None
        total = args.records
        if "source" in parts:
            local, total = source_part(spark, bootstrap, total, args.partitions, args.runs, root,
                                       "local[2]")
        if "sink" in parts:
            sink_part(spark, bootstrap, args.records, args.runs, root)
        if "standalone" in parts:
            spark.stop()
            spark = None
            spark_cluster = load_spark_cluster()
            t0 = time.perf_counter()
            standalone = spark_cluster.StandaloneCluster(root / "spark-standalone").start()
            spark = standalone_session(standalone.master_url)
            register(spark)
            jsc = spark.sparkContext._jsc.sc()
            cluster.wait(lambda: jsc.getExecutorMemoryStatus().size() >= 3, 120,
                         "two executors")
            print(f"standalone cluster (master + 2 workers, one 1-core executor each) and a "
                  f"session on it in {time.perf_counter() - t0:.1f} s")
            on_cluster, total = source_part(spark, bootstrap, total, args.partitions,
                                            args.runs, root, "standalone")
            if local is not None:
                print(f"standalone / local[2]: micro-batch {on_cluster['stream'] / local['stream']:.2f}x, "
                      f"batch count() {on_cluster['batch'] / local['batch']:.2f}x, per-batch "
                      f"overhead {on_cluster['overhead_ms']:.0f} ms vs {local['overhead_ms']:.0f} ms")
    finally:
        if spark is not None:
            spark.stop()
        if standalone is not None:
            standalone.stop()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

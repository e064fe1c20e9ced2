#!/usr/bin/env python3
"""An elastic cluster's figures (issue 44), on real node processes on loopback:

1. Moving a partition to a new broker: a 4-node cluster (1-3 voters, 4 a new empty broker),
   a partition filled with `--size-mb` (default 1024 MiB) on brokers 1, 2, 3, moved to 2, 3, 4
   while an acks=all producer writes to another topic. Prints the time until the move is done
   (broker 4 in sync, broker 1 gone), the producer's records/s during the move against before
   it (target >= 0.7 with the default throttle: follower_replication_throttled_rate, 10 MiB/s),
   and the new broker's catch-up byte rate (its log's size in /metrics) against the throttle
   (`--throttle-mb`, both leader and follower sides by default; the target: within 10 %).
2. Growing 3 -> 5 brokers with `--partitions` (default 300, RF 3): brokers 4 and 5 start
   empty, then `cluster balance` is asked until its plan is empty and nothing moves; prints the
   time until balanced and the replica counts per broker.

    scripts/bench elastic                       # 1 GiB, default throttle (10 MiB/s), 300 partitions
    scripts/bench elastic --size-mb 256 --throttle-mb 20
    scripts/bench elastic --skip-grow           # only the move

Every node is a `raftlog node start` process with its data in a temp dir (kept with --keep),
stopped by PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_failover import call, wait_for
from raftlog.cli.cluster import NodePorts, NodeProcess, build_node_configs, free_ports, stop_all, write_node_config
from raftlog.node.config import DEFAULT_FOLLOWER_REPLICATION_THROTTLED_RATE, new_cluster_id

FILL_RECORD_BYTES = 4 * 1024
FILL_BATCH_BYTES = 1 << 20
LOAD_RECORD_BYTES = 1024
MIB = 1 << 20
SAMPLE_S = 0.25


class Cluster:
    """Nodes 1..n (voters 1-3; the others broker-only), started on demand, stopped by PID."""

    def __init__(self, root: Path, nodes: int, settings: dict[str, Any]):
        ports = {i: NodePorts(*free_ports(6)) for i in range(1, nodes + 1)}
        self.configs = build_node_configs(root, new_cluster_id(), secrets.token_urlsafe(24), ports,
                                          voters=[1, 2, 3], settings=settings)
        self.processes: dict[int, NodeProcess] = {}

    def start(self, *nodes: int) -> None:
        for n in nodes:
            path = write_node_config(self.configs[n])
            self.processes[n] = NodeProcess(n, path, self.configs[n].data_dir / "node.log").start()

    def client(self, n: int) -> str:
        return str(self.configs[n].listeners.client)

    def op(self, op: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
        """`op`'s answer from the first node that gives one. A controller election under way
        (NOT_CONTROLLER: nothing was done) is waited out, up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            error: Any = "no node answered"
            for n in sorted(self.processes):
                try:
                    answer = call(self.client(n), op, timeout_s, timeout_ms=int(timeout_s * 1000), **fields)
                except OSError:
                    continue
                if "error" not in answer:
                    return answer
                error = answer["error"]
                if error.get("code") != "NOT_CONTROLLER":
                    raise RuntimeError(f"{op}: {error}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{op}: {error}")
            time.sleep(0.5)  # a controller election: ask again

    def ready(self, brokers: set[int]) -> bool:
        try:
            status = self.op("cluster_status", 5.0)
        except RuntimeError:
            return False
        unfenced = {b["id"] for b in status.get("brokers", ()) if not b["fenced"]}
        return status.get("controller_id") is not None and brokers <= unfenced

    def moving(self) -> list[dict[str, Any]]:
        return self.op("list_partition_reassignments")["reassignments"]

    def stop(self) -> None:
        stop_all(self.processes.values(), 15.0)

    def log_bytes(self, n: int, topic: str, partition: int) -> int | None:
        """Broker `n`'s replica of `topic`-`partition`: its log's bytes (/metrics), None when
        it has none or does not answer."""
        http = self.configs[n].listeners.http
        try:
            with urllib.request.urlopen(f"http://{http.host}:{http.port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        want = f'raftlog_partition_log_size_bytes{{partition="{partition}",topic="{topic}"}} '
        line = next((ln for ln in text.splitlines() if ln.startswith(want)), None)
        return None if line is None else int(float(line[len(want):]))


class CatchUp:
    """Samples the new replica's log size every SAMPLE_S while a move runs: the bytes/s of
    its catch-up (first byte to the last, the move's membership steps left out), the figure
    a replication throttle bounds (Kafka's quota is judged over its own window too)."""

    def __init__(self, cluster: Cluster, broker: int, topic: str):
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(cluster, broker, topic), daemon=True)

    def _run(self, cluster: Cluster, broker: int, topic: str) -> None:
        while not self.stop.wait(SAMPLE_S):
            size = cluster.log_bytes(broker, topic, 0)
            if size is not None:
                self.samples.append((time.monotonic(), size))

    def rate(self) -> tuple[float, float, int]:
        """(MiB/s, seconds, bytes) from the sample before the first growth to the first at
        the final size."""
        grown = [s for s in self.samples if s[1] > 0]
        if len(grown) < 2:
            return 0.0, 0.0, 0
        final = grown[-1][1]
        first = max(0, self.samples.index(grown[0]) - 1)
        t0, b0 = self.samples[first]
        t1, b1 = next(s for s in grown if s[1] == final)
        took = max(t1 - t0, 1e-9)
        return (b1 - b0) / MIB / took, took, b1 - b0


def _producer(cluster: Cluster, nodes: list[int], **options: Any) -> Any:
    from raftlog.client import Producer

    return Producer([cluster.client(n) for n in nodes], acks="all", enable_idempotence=True,
                    delivery_timeout_ms=300_000, max_block_ms=600_000, **{"linger_ms": 5, **options})


def fill(cluster: Cluster, topic: str, size_bytes: int) -> float:
    """Write `size_bytes` to `topic`-0; MiB/s."""
    value = b"f" * FILL_RECORD_BYTES
    count = max(1, size_bytes // FILL_RECORD_BYTES)
    started = time.monotonic()
    with _producer(cluster, [1, 2, 3], linger_ms=20, batch_bytes=FILL_BATCH_BYTES) as producer:
        for start in range(0, count, 8192):
            futures = [producer.send(topic, value, partition=0) for _ in range(min(8192, count - start))]
            producer.flush(timeout=900)
            failed = [f.exception(0) for f in futures if f.exception(0) is not None]
            if failed:
                raise RuntimeError(f"fill failed: {failed[0]!r}")
    return count * FILL_RECORD_BYTES / MIB / (time.monotonic() - started)


class Load:
    """An acks=all producer writing 1 KiB records to `topic` in rounds of 200; per-second
    acknowledged counts, so any window's records/s can be read off."""

    def __init__(self, cluster: Cluster, topic: str):
        self.cluster, self.topic = cluster, topic
        self.acked: list[tuple[float, int]] = []  # (time, records acknowledged in the round)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        value = b"l" * LOAD_RECORD_BYTES
        try:
            with _producer(self.cluster, [1, 2, 3]) as producer:
                while not self.stop.is_set():
                    futures = [producer.send(self.topic, value) for _ in range(200)]
                    producer.flush(timeout=300)
                    self.acked.append((time.monotonic(), sum(1 for f in futures if f.exception(0) is None)))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def rate(self, start: float, end: float) -> float:
        n = sum(c for t, c in self.acked if start <= t < end)
        return n / max(1e-9, end - start)


def bench_move(root: Path, args: argparse.Namespace) -> None:
    sides = ("leader", "follower") if args.throttle_side == "both" else (args.throttle_side,)
    if args.throttle_mb is None:  # the nodes' default: the follower side's
        throttle_mb, side, settings = DEFAULT_FOLLOWER_REPLICATION_THROTTLED_RATE / MIB, "default, follower", {}
    else:
        throttle_mb, side = args.throttle_mb, args.throttle_side
        settings = {f"{s}_replication_throttled_rate": args.throttle_mb * MIB for s in sides}
    cluster = Cluster(root / "move", 4, settings)
    try:
        cluster.start(1, 2, 3, 4)
        wait_for(lambda: cluster.ready({1, 2, 3, 4}), 120, "4 brokers")
        cluster.op("create_topic", name="big", partitions=1, replication_factor=3, assignments=[[1, 2, 3]])
        cluster.op("create_topic", name="load", partitions=3, replication_factor=3,
                   assignments=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
        size = args.size_mb * MIB
        print(f"filling big-0 with {args.size_mb} MiB ...", flush=True)
        print(f"  filled at {fill(cluster, 'big', size):.1f} MiB/s", flush=True)
        load = Load(cluster, "load")
        load.thread.start()
        # Not its first seconds (they ran up to 2x faster than any later window: caches, the
        # fill's writeback), then the baseline window; the load runs all along.
        time.sleep(args.warmup_s + args.window_s)
        t0 = time.monotonic()
        before = load.rate(t0 - args.window_s, t0)
        catch_up = CatchUp(cluster, 4, "big")
        catch_up.thread.start()
        cluster.op("alter_partition_reassignments", partitions=[{"topic": "big", "partition": 0,
                                                                 "replicas": [2, 3, 4]}])
        wait_for(lambda: not cluster.moving(), args.move_timeout_s, "the move to finish")
        t1 = time.monotonic()
        catch_up.stop.set()
        catch_up.thread.join(timeout=60)
        during = load.rate(t0, t1)
        time.sleep(args.window_s)  # the window after: the machine's load drifts (others' runs)
        t2 = time.monotonic()
        after = load.rate(t2 - args.window_s, t2)
        load.stop.set()
        load.thread.join(timeout=600)
        if load.error is not None:
            raise RuntimeError(f"the load producer failed: {load.error!r}")
        took = t1 - t0
        rate = size / MIB / took
        print(f"move of {args.size_mb} MiB to a new broker: in sync after {took:.1f} s ({rate:.1f} MiB/s)")
        print(f"producer during move / before (acks=all, 1 KiB records, throttle {throttle_mb:g} MiB/s {side}): "
              f"{during:,.0f} / {before:,.0f} records/s = {during / max(before, 1e-9):.2f} (target >= 0.7); "
              f"{after:,.0f} records/s in the {args.window_s:g} s after: during / mean(before, after) = "
              f"{during / max((before + after) / 2, 1e-9):.2f} (the machine's drift taken out)")
        caught, caught_s, caught_bytes = catch_up.rate()
        print(f"catch-up of broker 4: {caught_bytes / MIB:.0f} MiB in {caught_s:.1f} s = {caught:.1f} MiB/s")
        if throttle_mb:
            print(f"throttle {throttle_mb:g} MiB/s ({side}): catch-up at {caught:.1f} MiB/s = "
                  f"{caught / throttle_mb:.2f} of the rate (target within 10 %); the whole move "
                  f"{rate / throttle_mb:.2f}")
        else:
            print("throttle: none (--throttle-mb 0)")
    finally:
        cluster.stop()


def bench_grow(root: Path, args: argparse.Namespace) -> None:
    cluster = Cluster(root / "grow", 5, {})
    try:
        cluster.start(1, 2, 3)
        wait_for(lambda: cluster.ready({1, 2, 3}), 120, "3 brokers")
        per_topic = 50
        for i in range(0, args.partitions, per_topic):
            cluster.op("create_topic", 60.0, name=f"grow-{i // per_topic}",
                       partitions=min(per_topic, args.partitions - i), replication_factor=3)
        cluster.start(4, 5)
        wait_for(lambda: cluster.ready({1, 2, 3, 4, 5}), 120, "5 brokers")
        t0 = time.monotonic()
        rounds = 0
        while True:
            if not cluster.moving():
                if not cluster.op("balance", 60.0, dry_run=True)["moves"]:
                    break
                cluster.op("balance", 60.0)
                rounds += 1
            if time.monotonic() - t0 > args.move_timeout_s:
                raise SystemExit(f"not balanced after {args.move_timeout_s} s")
            time.sleep(0.5)
        took = time.monotonic() - t0
        counts = {b["id"]: b["replicas"] for b in cluster.op("cluster_status")["brokers"]}
        leaders = {b["id"]: b["leaders"] for b in cluster.op("cluster_status")["brokers"]}
        print(f"grow 3 -> 5 with {args.partitions} partitions (RF 3): balanced after {took:.1f} s "
              f"({rounds} balance round(s)); replicas per broker {counts}, leaders {leaders} "
              f"(spread {max(counts.values()) - min(counts.values())}, "
              f"stdev {statistics.pstdev(counts.values()):.1f})")
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the moved partition's size (MiB)")
    parser.add_argument("--throttle-mb", type=int, default=None,
                        help="leader and follower replication throttle, MiB/s (0: none; default: the nodes' "
                             "default, follower side 10 MiB/s)")
    parser.add_argument("--throttle-side", choices=("both", "leader", "follower"), default="both",
                        help="which side --throttle-mb limits")
    parser.add_argument("--partitions", type=int, default=300, help="partitions of the grow part (RF 3)")
    parser.add_argument("--window-s", type=float, default=10.0, help="the producer's baseline window")
    parser.add_argument("--warmup-s", type=float, default=20.0,
                        help="the producer runs this long before its baseline window")
    parser.add_argument("--move-timeout-s", type=float, default=1800.0)
    parser.add_argument("--skip-move", action="store_true")
    parser.add_argument("--skip-grow", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    args = parser.parse_args()
    if args.size_mb < 1 or args.partitions < 1 or (args.throttle_mb or 0) < 0 or args.window_s <= 0 \
            or args.warmup_s < 0:
        parser.error("--size-mb and --partitions must be at least 1, --throttle-mb >= 0, --window-s > 0")
    root = Path(tempfile.mkdtemp(prefix="raftlog-elastic-"))
    print(f"data in {root}", flush=True)
    try:
        if not args.skip_move:
            bench_move(root, args)
        if not args.skip_grow:
            bench_grow(root, args)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one produce costs the node's main thread in the services (issue 46), at any load.

    scripts/bench append [--runs 5] [--requests 4000] [--acks 1] [--batch-records 100] [--record-bytes 100]

One leader replica (RF=1, a temp data dir) in this process, and the partition service over it;
--requests calls of `PartitionService.append` with the request `scripts/bench cores` sends (one
uncompressed batch of --batch-records records of --record-bytes B), one after another, each
acks=all one waiting for its commit. Printed per run and as medians of --runs: the main
thread's CPU per append (`time.thread_time`: the trio thread, where the validation, the log
append, the producer state, Raft and each flush's report run; the flushes' fsyncs run in
worker threads and are not counted) and the wall time per append. Unlike `bench cores`, whose
node CPU per request swings with the machine's other work, the thread's CPU per append barely
does: compare two checkouts by running this in each, alternately.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WARMUP_REQUESTS = 200
LEADER_WAIT_S = 30.0
COMMIT_WAIT_S = 30.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/bench append", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4000, help="appends timed per run")
    ap.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    ap.add_argument("--batch-records", type=int, default=100)
    ap.add_argument("--record-bytes", type=int, default=100)
    args = ap.parse_args(argv)
    if args.runs < 1 or args.requests < 1 or args.batch_records < 1 or args.record_bytes < 0:
        ap.error("--runs, --requests and --batch-records must be >= 1, --record-bytes >= 0")
    return args


def one_run(args: argparse.Namespace) -> tuple[float, float]:
    """(main-thread CPU us per append, wall us per append) of one fresh replica."""
    import trio

    from metadata.topic_config import TopicConfig
    from partition.batch import BatchBuilder
    from partition.port import ClientInfo, ProducePart
    from partition.replica import Replica
    from partition.service import PartitionService
    from partition.telemetry import TopicTraffic

    class Alone:
        """The transport of a single-voter group: it never sends."""

        file_slices = False

        def send(self, replica, to, message):
            raise AssertionError("a single voter sends nothing")

        def answering(self, broker_id):
            return False

    class Host:
        node_id = 1

        def __init__(self, replica: Replica) -> None:
            self._replica = replica
            self.traffic = TopicTraffic()

        def replica(self, topic, partition):
            return self._replica

        def replicas(self):
            return [self._replica]

        def image_now(self):
            raise AssertionError("the bench's replica always leads")

    builder = BatchBuilder()
    value = os.urandom(args.record_bytes)
    now_ms = int(time.time() * 1000)
    for _ in range(args.batch_records):
        builder.append_value(value, now_ms)
    parts = [ProducePart("bench", 0, builder.build())]
    client = ClientInfo("kafka", peer="bench", client_id="bench")
    tmp = Path(tempfile.mkdtemp(prefix="raftlog-bench-append-"))
    out: list[float] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            r = Replica(topic="bench", partition=0, topic_id="bench-id", replica_id=1, voters=(1,),
                        directory=tmp / "bench-0", topic_config=TopicConfig.from_configs({}), transport=Alone(),
                        rng=random.Random(1), clock_ms=lambda: int(time.time() * 1000))
            await trio.to_thread.run_sync(r.open)
            r.attach(nursery)
            try:
                await r.start_election()
                with trio.fail_after(LEADER_WAIT_S):
                    while not r.is_leader:
                        await r.tick()
                        await trio.sleep(0.01)
                service = PartitionService(Host(r), None)

                async def produce(n: int) -> None:
                    for i in range(n):
                        appended = await service.append(parts, acks=args.acks, client=client)
                        if appended.results[0].error is not None:
                            raise appended.results[0].error
                        if appended.waiting:
                            await appended.wait(trio.current_time() + COMMIT_WAIT_S)
                        if i % 8 == 7:
                            await trio.sleep(0)  # let the flush task report, as a loaded node's loop does

                await produce(WARMUP_REQUESTS)
                cpu0, wall0 = time.thread_time(), time.perf_counter()
                await produce(args.requests)
                cpu1, wall1 = time.thread_time(), time.perf_counter()
                out.extend([1e6 * (cpu1 - cpu0) / args.requests, 1e6 * (wall1 - wall0) / args.requests])
            finally:
                await r.close()
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out[0], out[1]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"one leader replica in this process, PartitionService.append x {args.requests}, acks={args.acks}, "
          f"{args.batch_records} x {args.record_bytes} B per request; {args.runs} run(s); load average {_load()}")
    cpu, wall = [], []
    for run in range(1, args.runs + 1):
        c, w = one_run(args)
        cpu.append(c)
        wall.append(w)
        print(f"  run {run}: main-thread CPU {c:7.1f} us/append   wall {w:8.1f} us/append   (load {_load()})")
    print(f"load average at the end {_load()}; medians of {args.runs} run(s)")
    print(f"main-thread CPU per append {statistics.median(cpu):.1f} us   wall per append {statistics.median(wall):.1f} us")


if __name__ == "__main__":
    main()

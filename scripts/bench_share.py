#!/usr/bin/env python3
"""Share groups beside a classic group (issue 43's "Speed"): five consumers read the same
preloaded topic of 100 B records, once as a share group (tests/integration/share_consumer.py
processes, implicit acknowledgement: every record acquired, delivered and accepted) and once as
a classic consumer group (tests/integration/group_consumer.py processes, committing after each
poll). Each figure is records / seconds from the consumers' start until every record was
delivered (implicit acknowledgement: each poll accepts the previous one's records), medians of
--share-runs (default 3); the goal is share >= 0.5 x classic.

Run by scripts/bench_groups.py (`--part share`, part of `all`) on its cluster:
    .venv/bin/python scripts/bench_groups.py --part share [--share-records 5000]
Every process is stopped by its PID at the end.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

MEMBERS = 5
RECORD_BYTES = 100
# Kafka's max.poll.records default (and the ShareConsumer's), as the classic consumers use;
# the share tests' 20 spreads a poll over the partitions a few records each.
MAX_POLL_RECORDS = 500


def _drain(cluster: Any, procs: list[Any], records: int, what: str) -> float:
    started = time.monotonic()

    def done() -> bool:
        return len({(e["p"], e["o"]) for p in procs for e in p.records()}) >= records

    cluster.wait_for(done, 600, what)
    return time.monotonic() - started


def _one(cluster: Any, topic: str, records: int, logs: Path, groups_test: Any, share_test: Any, run: int) -> dict:
    class Classic(groups_test.ConsumerProc):
        def records(self) -> list[dict]:
            return [e for e in self.snapshot() if e["ev"] == "rec"]

    classic = [Classic(cluster.bootstrap(), f"bench-classic-{run}", f"classic{run}-{i}", logs) for i in range(MEMBERS)]
    try:
        classic_s = _drain(cluster, classic, records, "the classic group read every record")
    finally:
        for c in classic:
            c.stop()
    share = [share_test.Proc(cluster, topic, f"bench-share-{run}", f"share{run}-{i}",
                            max_poll_records=MAX_POLL_RECORDS) for i in range(MEMBERS)]
    try:
        share_s = _drain(cluster, share, records, "the share group read every record")
    finally:
        for s in share:
            s.stop()
    result = {"classic_records_per_s": records / classic_s, "share_records_per_s": records / share_s}
    result["ratio"] = result["share_records_per_s"] / result["classic_records_per_s"]
    return result


def run(cluster: Any, topic: str, partitions: int, records: int, logs: Path, groups_test: Any, share_test: Any,
        runs: int = 3) -> dict:
    """Preload `records` records into `topic` and time both kinds of group over them, `runs`
    times (fresh groups each time); prints each run and the medians."""
    from raftlog.client import Producer

    with Producer(cluster.bootstrap(), acks="all", linger_ms=5) as p:
        for i in range(records):
            p.send(topic, str(i).encode().rjust(RECORD_BYTES, b"x"), partition=i % partitions)
        p.flush(120)
    results = []
    for n in range(runs):
        r = _one(cluster, topic, records, logs, groups_test, share_test, n)
        results.append(r)
        print(f"share run {n + 1}: share {r['share_records_per_s']:.0f} records/s, classic "
              f"{r['classic_records_per_s']:.0f} records/s, ratio {r['ratio']:.2f}", flush=True)
    result = {"records": records, "runs": runs,
              **{k: statistics.median(r[k] for r in results) for k in results[0]}}
    print(f"share group ({MEMBERS} consumers, {RECORD_BYTES} B records, median of {runs}): "
          f"{result['share_records_per_s']:.0f} records/s acknowledged; classic group: "
          f"{result['classic_records_per_s']:.0f} records/s consumed; ratio {result['ratio']:.2f} (goal >= 0.5)",
          flush=True)
    return result


if __name__ == "__main__":  # `scripts/bench share [options]` = `scripts/bench groups --part share [options]`
    import runpy
    import sys

    groups_script = Path(__file__).with_name("bench_groups.py")
    sys.argv = [str(groups_script), "--part", "share", *sys.argv[1:]]
    runpy.run_path(str(groups_script), run_name="__main__")

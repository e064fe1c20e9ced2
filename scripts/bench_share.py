#!/usr/bin/env python3
"""Share groups beside a classic group (issue 43's "Speed"): five consumers read the same
preloaded topic of 100 B records, once as a share group (tests/integration/share_consumer.py
processes, implicit acknowledgement: every record acquired, delivered and accepted) and once as
a classic consumer group (tests/integration/group_consumer.py processes, committing after each
poll). Each figure is records / seconds from the consumers' start until every record was
delivered; the goal is share >= 0.5 x classic.

Run by scripts/bench_groups.py (`--part share`, part of `all`) on its cluster:
    .venv/bin/python scripts/bench_groups.py --part share [--share-records 5000]
Every process is stopped by its PID at the end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

MEMBERS = 5
RECORD_BYTES = 100


def _drain(cluster: Any, procs: list[Any], records: int, what: str) -> float:
    started = time.monotonic()

    def done() -> bool:
        return len({(e["p"], e["o"]) for p in procs for e in p.records()}) >= records

    cluster.wait_for(done, 600, what)
    return time.monotonic() - started


def run(cluster: Any, topic: str, partitions: int, records: int, logs: Path, groups_test: Any, share_test: Any) -> dict:
    """Preload `records` records into `topic` and time both kinds of group over them."""
    from raftlog.client import Producer

    with Producer(cluster.bootstrap(), acks="all", linger_ms=5) as p:
        for i in range(records):
            p.send(topic, str(i).encode().rjust(RECORD_BYTES, b"x"), partition=i % partitions)
        p.flush(120)

    class Classic(groups_test.ConsumerProc):
        def records(self) -> list[dict]:
            return [e for e in self.snapshot() if e["ev"] == "rec"]

    classic = [Classic(cluster.bootstrap(), "bench-classic", f"classic{i}", logs) for i in range(MEMBERS)]
    try:
        classic_s = _drain(cluster, classic, records, "the classic group read every record")
    finally:
        for c in classic:
            c.stop()
    share = [share_test.Proc(cluster, topic, "bench-share", f"share{i}") for i in range(MEMBERS)]
    try:
        share_s = _drain(cluster, share, records, "the share group read every record")
    finally:
        for s in share:
            s.stop()
    result = {"records": records, "classic_records_per_s": records / classic_s,
              "share_records_per_s": records / share_s}
    result["ratio"] = result["share_records_per_s"] / result["classic_records_per_s"]
    print(f"share group ({MEMBERS} consumers, {RECORD_BYTES} B records): {result['share_records_per_s']:.0f} records/s "
          f"acknowledged; classic group: {result['classic_records_per_s']:.0f} records/s consumed; "
          f"ratio {result['ratio']:.2f} (goal >= 0.5)", flush=True)
    return result


if __name__ == "__main__":  # `scripts/bench share [options]` = `scripts/bench groups --part share [options]`
    import runpy
    import sys

    groups_script = Path(__file__).with_name("bench_groups.py")
    sys.argv = [str(groups_script), "--part", "share", *sys.argv[1:]]
    runpy.run_path(str(groups_script), run_name="__main__")

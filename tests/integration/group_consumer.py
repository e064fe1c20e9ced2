"""A group consumer process for the group tests and scripts/bench_groups.py (SIGKILL must be
real): consumes TOPIC in GROUP at least once (commit after processing every poll) and
writes one JSON line per event to stdout, flushed at once:

    {"ev": "assigned", "gen": g, "partitions": [[t, p], ...], "t": mono_s}   (after each rebalance)
    {"ev": "revoked", "partitions": [...], "t": ...}
    {"ev": "rec", "p": partition, "o": offset, "v": value, "t": mono_s}
    {"ev": "committed", "offsets": [[p, o], ...], "t": ...}

    python group_consumer.py BOOTSTRAP TOPIC GROUP [--session-ms 3000] [--strategy range]
                             [--instance ID] [--client-id NAME]
Stops on SIGTERM (closes: leaves the group).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from raftlog.client import Consumer
from raftlog.base.errors import RaftlogError


def out(obj: dict) -> None:
    obj["t"] = time.monotonic()
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def stop_on_sigterm() -> threading.Event:
    """An event set by SIGTERM (the test's graceful stop: the consumer closes and leaves)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    return stop


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--session-ms", type=int, default=3000)
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--instance", default=None)
    ap.add_argument("--client-id", default="group-consumer")
    args = ap.parse_args()
    stop = stop_on_sigterm()
    c = Consumer(args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
                 enable_auto_commit=False, session_timeout_ms=args.session_ms,
                 heartbeat_interval_ms=max(100, args.session_ms // 6), rebalance_timeout_ms=args.session_ms * 2,
                 partition_assignment_strategy=args.strategy, group_instance_id=args.instance,
                 client_id=args.client_id, max_wait_ms=200, request_timeout_ms=10_000)
    def assigned(parts):
        meta = c.group_metadata()
        out({"ev": "assigned", "gen": meta.generation_id,
             "partitions": sorted(meta.assignment)})

    def revoked(parts):
        out({"ev": "revoked", "partitions": sorted(parts)})

    c.subscribe([args.topic], on_revoked=revoked, on_assigned=assigned)
    committed: dict = {}
    try:
        while not stop.is_set():
            try:
                records = c.poll(300)
            except RaftlogError as exc:
                out({"ev": "error", "error": str(exc)})
                continue
            for r in records:
                out({"ev": "rec", "p": r.partition, "o": r.offset, "v": r.value.decode()})
            # Commit the positions (past the records just processed, and past control batches,
            # so an idle group shows lag 0) whenever they moved.
            positions = c._group.positions()
            if positions == committed:
                continue
            try:
                c.commit(positions)
                committed = positions
                out({"ev": "committed", "offsets": sorted([p, o] for (_t, p), o in positions.items())})
            except RaftlogError as exc:
                # A commit fenced by a rebalance: the records will be read again (at least once).
                out({"ev": "commit_failed", "error": str(exc)})
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Recovery benchmark (issue 19): reopening a partition log with a large active segment after
a SIGKILL.

    scripts/bench recovery [--size-mib 1024] [--batch-kib 256] [--producers 8] [--runs 3] [--dir DIR]

Each run: a child process appends batches of --producers idempotent producers (producer id,
epoch and sequences set, round robin) to one Log (one active segment of --size-mib: the segment
size is set above it), flushing as a follower does and writing the offset-granular recovery
point and the producer-state snapshot every --checkpoint-s as the replica's maintenance does
(and after a flush that passed RECOVERY_POINT_FLUSH_BYTES, as its flush task does); once the
segment holds --size-mib it appends --tail-mib more without an fsync and is SIGKILLed. Then,
each in a fresh process with the segment's pages dropped from the page cache (as drop-behind
leaves them):

* `open`: Log.open with the recovery point (what a restart does now);
* `whole scan`: Log.open of the same files without the point (the baseline: what a restart did
  before the point existed, a CRC scan of the whole active segment);
* `producer state`: the rebuild a replica runs after open, from the producer snapshot and the
  batch headers after it (what a restart does now), against the baseline in the same run: a
  header walk of the whole log (what it did before the snapshot existed). Both end in the same
  state (checked).

Prints medians of --runs beside the baselines as ratios, and the target (a node serving again
< 5 s after a SIGKILL with a 1 GiB active segment). Data lives in a temp dir under /tmp
(`--dir` to choose), removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from partition.batch import BatchBuilder  # noqa: E402
from partition.log import ACTIVE_POINT_CHECKPOINT, RECOVERY_POINT_FLUSH_BYTES, Log, LogConfig  # noqa: E402
from partition.producer_state import ProducerStateManager  # noqa: E402

INT32_MAX = 0x7FFFFFFF


def config(size_mib: int) -> LogConfig:
    return LogConfig(segment_bytes=min(INT32_MAX, (size_mib + 256) << 20), retention_ms=-1,
                     max_batch_bytes=16 << 20)


def checkpoint(log: Log, state: ProducerStateManager, min_bytes: int | None = None) -> None:
    """What the replica's checkpoint does: the recovery point, then the producer snapshot."""
    point = log.recovery_snapshot() if min_bytes is None else log.recovery_snapshot(min_bytes)
    pstate = log.producer_snapshot(state) if min_bytes is None else log.producer_snapshot(state, min_bytes)
    if point is not None:
        log.write_recovery_point(point)
    if pstate is not None:
        log.write_producer_snapshot(pstate)


def writer(directory: str, size_mib: int, batch_kib: int, checkpoint_s: float, tail_mib: int,
           producers: int) -> None:
    """The child: append --size-mib and --tail-mib more, print `ready <bytes> <point
    position> <producer snapshot offset>` and wait to be killed."""
    log = Log.open(Path(directory), config(size_mib), now_ms=0)
    state = ProducerStateManager()
    payload = os.urandom(max(1, batch_kib * 1024 - 100))
    ts = int(time.time() * 1000)
    target = size_mib << 20
    next_point = time.monotonic() + checkpoint_s
    flushed_at = 0
    n = 0
    while True:
        pid, seq = 1000 + n % producers, n // producers
        b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
        b.append(payload, None, timestamp_ms=ts)
        first, last = log.append(b.build(), leader_epoch=1, now_ms=0)
        state.record(pid, 0, seq, seq, first, last)
        n += 1
        size = log.size_bytes()
        if size - flushed_at >= 16 << 20:  # followers fsync in group commits
            log.flush()
            flushed_at = size
            checkpoint(log, state, RECOVERY_POINT_FLUSH_BYTES)  # as the replica's flush task
        if time.monotonic() >= next_point:
            checkpoint(log, state)  # as the replica's maintenance
            next_point = time.monotonic() + checkpoint_s
        if size >= target + (tail_mib << 20):
            print(f"ready {size} {log._active_point[1] if log._active_point else 0} "
                  f"{log.producer_snapshot_offset} {log.log_end_offset}", flush=True)
            threading.Event().wait()  # killed here, the tail not fsynced


def drop_cache(directory: Path) -> None:
    for p in directory.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def measure(directory: str, size_mib: int, what: str) -> None:
    """A fresh process: time one open, then (`snapshot`, `walk`) the producer-state rebuild
    from the snapshot or from every header; prints seconds, details and a digest of the
    state. Nothing is written: the log is abandoned, not closed."""
    d = Path(directory)
    drop_cache(d)
    t0 = time.perf_counter()
    log = Log.open(d, config(size_mib), now_ms=0)
    opened = time.perf_counter() - t0
    rep = log.recovery
    state = ProducerStateManager()
    t1 = time.perf_counter()
    loaded = log.load_producer_state(state, use_snapshot=what == "snapshot") if what != "open" else None
    walked = time.perf_counter() - t1
    digest = hash(state.snapshot(log.log_end_offset, -1).producers) if loaded else 0
    print(f"{opened:.4f} {walked:.4f} {rep.resumed_at} {rep.bytes_dropped} "
          f"{loaded.batches_walked if loaded else 0} {log.log_end_offset} "
          f"{loaded.snapshot_offset if loaded else None} {digest}", flush=True)
    log._abandon()


def child(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                         text=True).stdout
    return out.split()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]),
               int(sys.argv[7]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        measure(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="active segment size at the kill")
    ap.add_argument("--batch-kib", type=int, default=256)
    ap.add_argument("--producers", type=int, default=8, help="idempotent producers writing round robin")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--checkpoint-s", type=float, default=5.0,
                    help="recovery point interval (the replica maintenance's)")
    ap.add_argument("--tail-mib", type=int, default=8,
                    help="appended past the size without an fsync before the SIGKILL")
    ap.add_argument("--dir", help="parent directory for the data (default /tmp)")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}; active segment {args.size_mib} MiB "
          f"of {args.batch_kib} KiB batches from {args.producers} idempotent producers; runs {args.runs}",
          flush=True)
    opens, scans, loads, walks = [], [], [], []
    for run in range(args.runs):
        root = Path(tempfile.mkdtemp(prefix="scale-recovery-bench-", dir=args.dir))
        try:
            d = root / "log"
            proc = subprocess.Popen([sys.executable, __file__, "--writer", str(d), str(args.size_mib),
                                     str(args.batch_kib), str(args.checkpoint_s), str(args.tail_mib),
                                     str(args.producers)],
                                    stdout=subprocess.PIPE, text=True)
            try:
                line = proc.stdout.readline().split()
                if not line or line[0] != "ready":
                    raise SystemExit(f"writer failed: {line}")
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            size, point, snap_at, end_at_ready = int(line[1]), int(line[2]), line[3], int(line[4])
            o = child("--measure", str(d), str(args.size_mib), "snapshot")
            w = child("--measure", str(d), str(args.size_mib), "walk")
            if o[7] != w[7] or o[5] != w[5]:
                raise SystemExit(f"the snapshot's rebuild differs from the whole walk: {o} {w}")
            (d / ACTIVE_POINT_CHECKPOINT).unlink(missing_ok=True)
            s = child("--measure", str(d), str(args.size_mib), "open")
            opens.append(float(o[0]))
            loads.append(float(o[1]))
            walks.append(float(w[1]))
            scans.append(float(s[0]))
            print(f"run {run + 1}: {size / 2**20:.0f} MiB at ready (end offset {end_at_ready}), point at "
                  f"{point / 2**20:.0f} MiB, producer snapshot at offset {snap_at}; open {float(o[0]):.3f} s "
                  f"(resumed at {o[2]}, {o[3]} bytes cut); whole scan {float(s[0]):.3f} s; producer state "
                  f"{float(o[1]):.3f} s from the snapshot at {o[6]} ({o[4]} headers) against the whole walk "
                  f"{float(w[1]):.3f} s ({w[4]} headers)", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    o, s = statistics.median(opens), statistics.median(scans)
    ld, w = statistics.median(loads), statistics.median(walks)
    print(f"log open after SIGKILL: median {o:.3f} s; whole scan (baseline) {s:.3f} s; ratio "
          f"{o / max(s, 1e-9):.3f}")
    print(f"producer state after SIGKILL: median {ld:.3f} s (snapshot + headers after it); whole walk "
          f"(baseline) {w:.3f} s; ratio {ld / max(w, 1e-9):.3f}")
    print(f"open + producer state: median {o + ld:.3f} s; before the point and the snapshot {s + w:.3f} s "
          f"[target: node serving < 5 s after SIGKILL with a 1 GiB active segment]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

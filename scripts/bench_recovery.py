#!/usr/bin/env python
"""Recovery benchmark (issue 19): reopening a partition log with a large active segment after
a SIGKILL.

    scripts/bench recovery [--size-mib 1024] [--batch-kib 256] [--runs 3] [--dir DIR]

Each run: a child process appends batches to one Log (one active segment of --size-mib: the
segment size is set above it), flushing as a follower does and writing the offset-granular
recovery point every --checkpoint-s as the replica's maintenance does; once the segment holds
--size-mib it appends --tail-mib more without an fsync and is SIGKILLed. Then, each in a fresh
process with the segment's pages dropped from the page cache (as drop-behind leaves them):

* `open`: Log.open with the recovery point (what a restart does now);
* `whole scan`: Log.open of the same files without the point (the baseline: what a restart did
  before the point existed, a CRC scan of the whole active segment);
* `headers`: the producer-state rebuild a replica runs after open (a header walk of the log).

Prints medians of --runs beside the baseline as a ratio, and the target (a node serving again
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

INT32_MAX = 0x7FFFFFFF


def config(size_mib: int) -> LogConfig:
    return LogConfig(segment_bytes=min(INT32_MAX, (size_mib + 256) << 20), retention_ms=-1,
                     max_batch_bytes=16 << 20)


def writer(directory: str, size_mib: int, batch_kib: int, checkpoint_s: float, tail_mib: int) -> None:
    """The child: append --size-mib and --tail-mib more, print `ready <bytes> <point
    position>` and wait to be killed."""
    log = Log.open(Path(directory), config(size_mib), now_ms=0)
    b = BatchBuilder()
    b.append(os.urandom(max(1, batch_kib * 1024 - 100)), None, timestamp_ms=int(time.time() * 1000))
    batch = b.build()
    target = size_mib << 20
    next_point = time.monotonic() + checkpoint_s
    flushed_at = 0
    while True:
        log.append(batch, leader_epoch=1, now_ms=0)
        size = log.size_bytes()
        if size - flushed_at >= 16 << 20:  # followers fsync in group commits
            log.flush()
            flushed_at = size
            point = log.recovery_snapshot(RECOVERY_POINT_FLUSH_BYTES)  # as the replica's flush task
            if point is not None:
                log.write_recovery_point(point)
        if time.monotonic() >= next_point:
            point = log.recovery_snapshot()  # as the replica's maintenance
            if point is not None:
                log.write_recovery_point(point)
            next_point = time.monotonic() + checkpoint_s
        if size >= target + (tail_mib << 20):
            print(f"ready {size} {log._active_point[1] if log._active_point else 0}", flush=True)
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
    """A fresh process: time one open (or open + header walk); prints seconds and details."""
    d = Path(directory)
    drop_cache(d)
    t0 = time.perf_counter()
    log = Log.open(d, config(size_mib), now_ms=0)
    opened = time.perf_counter() - t0
    rep = log.recovery
    t1 = time.perf_counter()
    headers = sum(1 for _ in log.batch_headers()) if what == "headers" else 0
    walked = time.perf_counter() - t1
    print(f"{opened:.4f} {walked:.4f} {rep.resumed_at} {rep.bytes_dropped} {headers} "
          f"{log.log_end_offset}", flush=True)
    log.close()


def child(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                         text=True).stdout
    return out.split()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        measure(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="active segment size at the kill")
    ap.add_argument("--batch-kib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--checkpoint-s", type=float, default=5.0,
                    help="recovery point interval (the replica maintenance's)")
    ap.add_argument("--tail-mib", type=int, default=8,
                    help="appended past the size without an fsync before the SIGKILL")
    ap.add_argument("--dir", help="parent directory for the data (default /tmp)")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}; active segment {args.size_mib} MiB "
          f"of {args.batch_kib} KiB batches; runs {args.runs}", flush=True)
    opens, scans, walks = [], [], []
    for run in range(args.runs):
        root = Path(tempfile.mkdtemp(prefix="scale-recovery-bench-", dir=args.dir))
        try:
            d = root / "log"
            proc = subprocess.Popen([sys.executable, __file__, "--writer", str(d), str(args.size_mib),
                                     str(args.batch_kib), str(args.checkpoint_s), str(args.tail_mib)],
                                    stdout=subprocess.PIPE, text=True)
            try:
                line = proc.stdout.readline().split()
                if not line or line[0] != "ready":
                    raise SystemExit(f"writer failed: {line}")
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            size, point = int(line[1]), int(line[2])
            o = child("--measure", str(d), str(args.size_mib), "headers")
            (d / ACTIVE_POINT_CHECKPOINT).unlink(missing_ok=True)
            s = child("--measure", str(d), str(args.size_mib), "open")
            opens.append(float(o[0]))
            walks.append(float(o[1]))
            scans.append(float(s[0]))
            print(f"run {run + 1}: {size / 2**20:.0f} MiB at ready, point at {point / 2**20:.0f} MiB; "
                  f"open {float(o[0]):.3f} s (resumed at {o[2]}, {o[3]} bytes cut); whole scan "
                  f"{float(s[0]):.3f} s; header walk {float(o[1]):.3f} s ({o[4]} batches)", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    o, s, w = statistics.median(opens), statistics.median(scans), statistics.median(walks)
    print(f"log open after SIGKILL: median {o:.3f} s; whole scan (baseline) {s:.3f} s; ratio "
          f"{o / max(s, 1e-9):.3f}; producer-state header walk {w:.3f} s "
          f"[target: node serving < 5 s after SIGKILL with a 1 GiB active segment]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Storage benchmark of partition/log.py against raw file I/O on the same machine.

For each batch size (default 16 KiB and 256 KiB batches of 100-byte records, pre-built once
with BatchBuilder; Log.append re-stamps them on every append) it measures, as the median of
--runs runs:
  raw write           os.write of the same bytes, sequential, no fsync      (baseline)
  append, no flush    Log.append                                  ratio to raw write
  raw write+fsync     os.write + fsync per batch (--fsync-mib of data)     (baseline)
  append, flush each  Log.append + Log.flush per batch            ratio to raw write+fsync
  append, flush /N    Log.flush after every N appends (--group)   ratio to raw write+fsync
  raw read            os.pread 1 MiB at a time over the raw file  (baseline, page cache)
  log read            Log.read(offset, 1 MiB) over the whole log  ratio to raw read
                      (the first read after open: every batch's CRC is checked)
  log re-read         the same again on the same open log         ratio to raw read
                      (bytes are checked once: partition/segment.py "checked once")
  open                Log.open of the --size-mib log (closed cleanly; segments of
                      --segment-mib, so all but the active one are closed)
Reads are from the page cache (both sides). Files live in a temp dir under /tmp (or --dir),
removed at the end. Usage: scripts/bench [--size-mib 1024] [--runs 3] [--json] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from partition.batch import BatchBuilder, read_header  # noqa: E402
from partition.log import Log, LogConfig  # noqa: E402

MIB = 1 << 20
RECORD_BYTES = 100


def build_batch(batch_bytes: int) -> bytes:
    b = BatchBuilder()
    value = bytes(range(RECORD_BYTES))
    i = 0
    while b.size_bytes + RECORD_BYTES + 8 <= batch_bytes:
        b.append(value, timestamp_ms=1_700_000_000_000 + i)
        i += 1
    return b.build()


def raw_write(path: Path, batch: bytes, count: int, fsync_every: int = 0) -> float:
    """Plain writes; with fsync_every, fsyncs and the same drop-behind as the log's
    (partition/log.py `_drop_behind`), so the ratio measures the log's overhead and not
    the page-cache policy."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    tail = LogConfig().cache_tail_bytes
    try:
        t0 = time.perf_counter()
        written = dropped = 0
        for i in range(count):
            written += os.write(fd, batch)
            if fsync_every and (i + 1) % fsync_every == 0:
                os.fsync(fd)
                end = (written - tail) & ~4095
                if end > dropped:
                    os.posix_fadvise(fd, dropped, end - dropped, os.POSIX_FADV_DONTNEED)
                    dropped = end
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def raw_read(path: Path) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        t0 = time.perf_counter()
        while True:
            data = os.pread(fd, MIB, pos)
            if not data:
                break
            pos += len(data)
        return time.perf_counter() - t0, pos
    finally:
        os.close(fd)


def log_append(d: Path, cfg: LogConfig, batch: bytes, count: int, flush_every: int) -> float:
    log = Log.open(d, cfg, now_ms=0)
    try:
        t0 = time.perf_counter()
        for i in range(count):
            log.append(batch, leader_epoch=1, now_ms=0)
            if flush_every and (i + 1) % flush_every == 0:
                log.flush()
        return time.perf_counter() - t0
    finally:
        log.close()


def log_read(d: Path, cfg: LogConfig) -> tuple[float, float, int]:
    """(first pass s, second pass s, bytes per pass) over one open log."""
    log = Log.open(d, cfg, now_ms=0)
    try:
        first, n = _read_pass(log)
        second, _ = _read_pass(log)
        return first, second, n
    finally:
        log.close()


def _read_pass(log: Log) -> tuple[float, int]:
    offset, total = 0, 0
    end = log.log_end_offset
    t0 = time.perf_counter()
    while offset < end:
        data = log.read(offset, MIB)
        total += len(data)
        # A consumer's minimum work: hop over batch lengths to the last batch's header.
        pos = last = 0
        n = len(data)
        while pos < n:
            last = pos
            pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        offset = (int.from_bytes(data[last:last + 8], "big")
                  + int.from_bytes(data[last + 23:last + 27], "big") + 1)
    return time.perf_counter() - t0, total


def log_open(d: Path, cfg: LogConfig) -> tuple[float, int]:
    t0 = time.perf_counter()
    log = Log.open(d, cfg, now_ms=0)
    elapsed = time.perf_counter() - t0
    scanned = log.recovery.segments_scanned
    log.close()
    return elapsed, scanned


def bench_size(root: Path, batch_kib: int, args) -> dict:
    batch = build_batch(batch_kib * 1024)
    size = len(batch)
    count = max(1, args.size_mib * MIB // size)
    fcount = max(1, args.fsync_mib * MIB // size)
    cfg = LogConfig(segment_bytes=args.segment_mib * MIB, retention_ms=-1)
    # The read comparison is of code paths over cached data: the raw file is never fsynced,
    # so nothing drops it from the page cache; the log's close() flushes, so its drop-behind
    # is off here (with it on, Log.read reads from disk: 0.03-0.04 of a cached raw read).
    cached_cfg = dataclasses.replace(cfg, cache_tail_bytes=-1)
    runs: dict[str, list[float]] = {}

    def add(name, value):
        runs.setdefault(name, []).append(value)

    # Warm-up (untimed): the first write after a file's deletion or a fresh boot pays for
    # page-cache growth, which would flatter whichever side ran second.
    raw = root / "raw.bin"
    raw_write(raw, batch, count)
    raw.unlink()
    for run in range(args.runs):
        # Alternate which side goes first: on a shared machine the order matters (page-cache
        # reclaim, other tenants' writeback), so neither side always gets the quiet slot.
        raw = root / "raw.bin"
        d = root / "log"

        def raw_side():
            t = raw_write(raw, batch, count)
            add("raw_write_mbps", count * size / t / 1e6)
            t, n = raw_read(raw)
            add("raw_read_mbps", n / t / 1e6)
            raw.unlink()

        def log_side():
            t = log_append(d, cached_cfg, batch, count, 0)
            add("append_noflush_mbps", count * size / t / 1e6)
            add("append_noflush_batches_per_s", count / t)
            t, t2, n = log_read(d, cached_cfg)
            add("log_read_mbps", n / t / 1e6)
            add("log_reread_mbps", n / t2 / 1e6)
            t, scanned = log_open(d, cfg)
            add("open_ms", t * 1000)
            add("open_segments_scanned", scanned)
            add("log_bytes", sum(p.stat().st_size for p in d.glob("*.log")))
            shutil.rmtree(d)

        for side in ((raw_side, log_side) if run % 2 == 0 else (log_side, raw_side)):
            side()
        t = raw_write(raw, batch, fcount, fsync_every=1)
        add("raw_write_fsync_mbps", fcount * size / t / 1e6)
        add("raw_write_fsync_batches_per_s", fcount / t)
        raw.unlink()

        t = log_append(d, cfg, batch, fcount, 1)
        add("append_flush_each_mbps", fcount * size / t / 1e6)
        add("append_flush_each_batches_per_s", fcount / t)
        shutil.rmtree(d)
        t = log_append(d, cfg, batch, fcount, args.group)
        add("append_flush_group_mbps", fcount * size / t / 1e6)
        add("append_flush_group_batches_per_s", fcount / t)
        shutil.rmtree(d)
    med = {k: statistics.median(v) for k, v in runs.items()}
    med["batch_bytes"] = size
    med["records_per_batch"] = read_header(batch).record_count
    return med


def table(results: dict, args) -> str:
    lines = [f"storage bench: {args.size_mib} MiB per run (fsync modes {args.fsync_mib} MiB), "
             f"segments {args.segment_mib} MiB, median of {args.runs} runs, group N={args.group}"]
    for kib, r in results.items():
        lines.append("")
        lines.append(f"batch {kib} KiB ({r['batch_bytes']} bytes, {r['records_per_batch']} records of "
                     f"{RECORD_BYTES} B)")
        lines.append(f"  {'measure':<28}{'MB/s':>10}{'batches/s':>12}{'ratio':>8}  baseline")
        rows = [
            ("raw write", r["raw_write_mbps"], r["raw_write_mbps"] / r["batch_bytes"] * 1e6, None, ""),
            ("append, no flush", r["append_noflush_mbps"], r["append_noflush_batches_per_s"],
             r["append_noflush_mbps"] / r["raw_write_mbps"], "raw write"),
            ("raw write+fsync per batch", r["raw_write_fsync_mbps"], r["raw_write_fsync_batches_per_s"],
             None, ""),
            ("append, flush each", r["append_flush_each_mbps"], r["append_flush_each_batches_per_s"],
             r["append_flush_each_mbps"] / r["raw_write_fsync_mbps"], "raw write+fsync"),
            (f"append, flush every {args.group}", r["append_flush_group_mbps"],
             r["append_flush_group_batches_per_s"],
             r["append_flush_group_mbps"] / r["raw_write_fsync_mbps"], "raw write+fsync"),
            ("raw read (pread 1 MiB)", r["raw_read_mbps"], r["raw_read_mbps"] / r["batch_bytes"] * 1e6,
             None, ""),
            ("log read (Log.read 1 MiB)", r["log_read_mbps"], r["log_read_mbps"] / r["batch_bytes"] * 1e6,
             r["log_read_mbps"] / r["raw_read_mbps"], "raw read"),
            ("log re-read (checked once)", r["log_reread_mbps"],
             r["log_reread_mbps"] / r["batch_bytes"] * 1e6,
             r["log_reread_mbps"] / r["raw_read_mbps"], "raw read"),
        ]
        for name, mbps, bps, ratio, base in rows:
            rs = f"{ratio:>8.2f}" if ratio is not None else f"{'':>8}"
            lines.append(f"  {name:<28}{mbps:>10.1f}{bps:>12.0f}{rs}  {base}")
        lines.append(f"  open of {r['log_bytes'] / MIB:.0f} MiB log: {r['open_ms']:.1f} ms "
                     f"(segments CRC-scanned: {r['open_segments_scanned']:.0f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-mib", type=int, default=1024, help="data per no-flush run and open test")
    p.add_argument("--fsync-mib", type=int, default=64, help="data per fsync-mode run")
    p.add_argument("--segment-mib", type=int, default=128)
    p.add_argument("--batch-kib", type=int, nargs="+", default=[16, 256])
    p.add_argument("--group", type=int, default=16, help="appends per flush in group mode")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None, help="parent of the temp dir (default /tmp)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="raftlog-bench-", dir=args.dir or "/tmp"))
    try:
        results = {kib: bench_size(root, kib, args) for kib in args.batch_kib}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                   for k, v in vars(args).items()},
                          "results": {str(k): v for k, v in results.items()}}, indent=2))
    else:
        print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

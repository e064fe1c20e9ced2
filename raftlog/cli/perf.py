"""Producer and consumer performance tools (`raftlog perf produce|consume`), like Kafka's
kafka-producer-perf-test / kafka-consumer-perf-test.

Pure half (unit-tested, no clock, no I/O): `LatencyHistogram` (log buckets, mergeable,
serialisable to plain JSON so producer processes report through a pipe without pickle),
`Throttler` (Kafka's ThroughputThrottler: how long to wait to keep a target rate),
`WindowStats` (the live progress line), `summarize_*` (the final figures).

Shell half: `run_producer` / `run_consumer` drive the blocking client; `produce_perf` runs K
producer processes (multiprocessing, spawn) and merges their histograms.

Latency is per record, send() → acknowledgement: the producer records each record's send
time and one callback per batch stamps the ack time for that batch's records (records of a
batch are contiguous in send order here: fixed-size keyless records with the sticky
partitioner, one sending thread). The callback only notes (ack time, first, count); the
per-record histogram is filled after the timed run, so the tool's own work does not hold
the producer's lock on its I/O thread. Invariants: every histogram value is >= 0; percentiles
are bucket upper bounds (at most 2 % above the true value) and never exceed the exact max.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import operator
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

__all__ = [
    "LatencyHistogram",
    "Throttler",
    "WindowStats",
    "PERCENTILES",
    "ProduceResult",
    "ConsumeResult",
    "summarize_produce",
    "summarize_consume",
    "format_produce",
    "format_consume",
    "run_producer",
    "run_consumer",
    "produce_perf",
]

log = logging.getLogger(__name__)

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
_GROWTH = 1.02  # bucket i holds values in (GROWTH**(i-1), GROWTH**i] microseconds
_LOG_GROWTH = math.log(_GROWTH)
MB = 1024 * 1024
_value_of = operator.attrgetter("value")


# ---------------------------------------------------------------- pure statistics


class LatencyHistogram:
    """Latencies in microseconds, in logarithmic buckets (2 % wide). Merge with `merge`,
    carry across processes with `to_json`/`from_json`."""

    __slots__ = ("counts", "count", "total_us", "max_us", "min_us")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.total_us = 0.0
        self.max_us = 0.0
        self.min_us: float | None = None

    @staticmethod
    def bucket(value_us: float) -> int:
        if value_us <= 1.0:
            return 0
        return math.ceil(math.log(value_us) / _LOG_GROWTH - 1e-9)

    @staticmethod
    def bucket_upper_us(index: int) -> float:
        return _GROWTH ** index

    def record(self, value_us: float, times: int = 1) -> None:
        if value_us < 0:
            value_us = 0.0  # clocks are monotonic; a negative value is rounding
        b = self.bucket(value_us)
        self.counts[b] = self.counts.get(b, 0) + times
        self.count += times
        self.total_us += value_us * times
        if value_us > self.max_us:
            self.max_us = value_us
        if self.min_us is None or value_us < self.min_us:
            self.min_us = value_us

    def record_many(self, values_us: Iterable[float]) -> None:
        counts = self.counts
        bucket = self.bucket
        n = 0
        total = 0.0
        hi = self.max_us
        lo = self.min_us
        for v in values_us:
            if v < 0:
                v = 0.0
            b = bucket(v)
            counts[b] = counts.get(b, 0) + 1
            n += 1
            total += v
            if v > hi:
                hi = v
            if lo is None or v < lo:
                lo = v
        self.count += n
        self.total_us += total
        self.max_us = hi
        self.min_us = lo

    def merge(self, other: LatencyHistogram) -> None:
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.count += other.count
        self.total_us += other.total_us
        self.max_us = max(self.max_us, other.max_us)
        if other.min_us is not None and (self.min_us is None or other.min_us < self.min_us):
            self.min_us = other.min_us

    def percentile_us(self, p: float) -> float:
        """The value at or below which p % of the values lie (bucket upper bound, capped
        at the exact max); 0 when empty."""
        if not self.count:
            return 0.0
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {p}")
        rank = max(1, math.ceil(self.count * p / 100))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(self.bucket_upper_us(b), self.max_us)
        return self.max_us

    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"counts": {str(b): c for b, c in self.counts.items()}, "count": self.count,
                "total_us": self.total_us, "max_us": self.max_us, "min_us": self.min_us}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LatencyHistogram:
        h = cls()
        h.counts = {int(b): int(c) for b, c in d["counts"].items()}
        h.count = int(d["count"])
        h.total_us = float(d["total_us"])
        h.max_us = float(d["max_us"])
        h.min_us = None if d.get("min_us") is None else float(d["min_us"])
        return h


class Throttler:
    """Keep a target rate (records/s), as Kafka's ThroughputThrottler: after `sent` records
    at `elapsed_s` since start, `wait_s` says how long to pause (0: go on). A target <= 0
    means unlimited."""

    def __init__(self, target_per_s: float):
        self.target_per_s = target_per_s

    def wait_s(self, sent: int, elapsed_s: float) -> float:
        if self.target_per_s <= 0:
            return 0.0
        due_s = sent / self.target_per_s
        return max(0.0, due_s - elapsed_s)


class WindowStats:
    """Counts for the live progress line: records, bytes and latencies since the last
    report, and totals. `line(now_s)` returns the text and starts a new window."""

    def __init__(self, start_s: float):
        self.window_start_s = start_s
        self.records = 0
        self.bytes = 0
        self.latency_sum_us = 0.0
        self.latency_n = 0
        self.latency_max_us = 0.0
        self.total_records = 0

    def add(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        self.total_records += records

    def add_latency(self, sum_us: float, n: int, max_us: float) -> None:
        self.latency_sum_us += sum_us
        self.latency_n += n
        if max_us > self.latency_max_us:
            self.latency_max_us = max_us

    def line(self, now_s: float, what: str = "records sent") -> str:
        dt = max(now_s - self.window_start_s, 1e-9)
        text = (f"{self.records} {what}, {self.records / dt:,.1f} records/s "
                f"({self.bytes / dt / MB:.2f} MB/s)")
        if self.latency_n:
            text += (f", {self.latency_sum_us / self.latency_n / 1000:.1f} ms avg latency, "
                     f"{self.latency_max_us / 1000:.1f} ms max latency")
        self.window_start_s = now_s
        self.records = self.bytes = self.latency_n = 0
        self.latency_sum_us = self.latency_max_us = 0.0
        return text


@dataclass
class ProduceResult:
    records: int
    bytes: int
    elapsed_s: float
    errors: int
    histogram: LatencyHistogram
    first_error: str | None = None  # why the first failed record failed ("Class: message")

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "bytes": self.bytes, "elapsed_s": self.elapsed_s,
                "errors": self.errors, "histogram": self.histogram.to_json(),
                "first_error": self.first_error}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProduceResult:
        return cls(int(d["records"]), int(d["bytes"]), float(d["elapsed_s"]), int(d["errors"]),
                   LatencyHistogram.from_json(d["histogram"]), d.get("first_error"))


@dataclass
class ConsumeResult:
    records: int
    bytes: int
    elapsed_s: float
    first_record_s: float | None  # time to the first record (connect, metadata, resets)


def merge_produce(results: Iterable[ProduceResult]) -> ProduceResult:
    """Results of parallel producers as one: sums, the longest elapsed time (they ran side
    by side), merged histograms."""
    h = LatencyHistogram()
    records = nbytes = errors = 0
    elapsed = 0.0
    first_error = None
    for r in results:
        records += r.records
        nbytes += r.bytes
        errors += r.errors
        elapsed = max(elapsed, r.elapsed_s)
        h.merge(r.histogram)
        first_error = first_error or r.first_error
    return ProduceResult(records, nbytes, elapsed, errors, h, first_error)


def summarize_produce(r: ProduceResult) -> dict[str, Any]:
    """The figures Kafka's producer perf test prints, as a JSON-ready dict (ms, MB = MiB)."""
    dt = max(r.elapsed_s, 1e-9)
    h = r.histogram
    out: dict[str, Any] = {
        "records": r.records,
        "errors": r.errors,
        "elapsed_s": round(r.elapsed_s, 3),
        "records_per_s": round(r.records / dt, 1),
        "mb_per_s": round(r.bytes / dt / MB, 2),
        "latency_avg_ms": round(h.mean_us() / 1000, 2),
        "latency_max_ms": round(h.max_us / 1000, 2),
    }
    for p in PERCENTILES:
        out[f"latency_p{_pname(p)}_ms"] = round(h.percentile_us(p) / 1000, 2)
    if r.first_error is not None:
        out["first_error"] = r.first_error  # why records failed, for --json readers too
    return out


def summarize_consume(r: ConsumeResult) -> dict[str, Any]:
    dt = max(r.elapsed_s, 1e-9)
    return {
        "records": r.records,
        "elapsed_s": round(r.elapsed_s, 3),
        "records_per_s": round(r.records / dt, 1),
        "mb_per_s": round(r.bytes / dt / MB, 2),
        "first_record_ms": None if r.first_record_s is None else round(r.first_record_s * 1000, 1),
    }


def _pname(p: float) -> str:
    return str(int(p)) if p == int(p) else str(p).replace(".", "")  # 99.9 -> "999"


def format_produce(s: dict[str, Any]) -> str:
    """One line like Kafka's final producer perf report."""
    pct = ", ".join(f"{s[f'latency_p{_pname(p)}_ms']:.1f} ms {p:g}th" for p in PERCENTILES)
    err = f", {s['errors']} errors" if s["errors"] else ""
    return (f"{s['records']} records sent, {s['records_per_s']:,.1f} records/s "
            f"({s['mb_per_s']:.2f} MB/s), {s['latency_avg_ms']:.1f} ms avg latency, "
            f"{s['latency_max_ms']:.1f} ms max latency, {pct}{err}")


def format_consume(s: dict[str, Any]) -> str:
    first = "" if s["first_record_ms"] is None else f", first record after {s['first_record_ms']:.0f} ms"
    return (f"{s['records']} records consumed in {s['elapsed_s']:.2f} s, "
            f"{s['records_per_s']:,.1f} records/s ({s['mb_per_s']:.2f} MB/s){first}")


# ---------------------------------------------------------------- shells


def _producer_options(acks: str, linger_ms: int, batch_bytes: int | None,
                      compression: str | None, request_timeout_ms: int,
                      delivery_timeout_ms: int) -> dict[str, Any]:
    opts: dict[str, Any] = {"acks": acks, "linger_ms": linger_ms,
                            "enable_idempotence": acks in ("all", "-1"),
                            "request_timeout_ms": request_timeout_ms,
                            "delivery_timeout_ms": delivery_timeout_ms}
    if batch_bytes:
        opts["batch_bytes"] = batch_bytes
        opts["buffer_bytes"] = max(32 * MB, 4 * batch_bytes)
    if compression and compression != "none":
        opts["compression"] = compression
    return opts


def freeze_setup_objects() -> None:
    """Move everything alive now (modules, the client) out of the cyclic GC's reach, so a
    full collection during the timed run walks only what the run made: the tool must not
    add its own ~10-20 ms pauses to the latency it measures."""
    gc.collect()
    gc.freeze()


def run_producer(bootstrap: str, topic: str, records: int, record_bytes: int, *,
                 acks: str = "all", linger_ms: int = 5, batch_bytes: int | None = None,
                 compression: str | None = None, throughput: float = 0,
                 progress: Callable[[str], None] | None = None,
                 report_interval_s: float = 1.0, warmup_records: int = 0,
                 request_timeout_ms: int = 30_000, delivery_timeout_ms: int = 120_000,
                 security: dict[str, str] | None = None) -> ProduceResult:
    """Send `records` records of `record_bytes` random-ish bytes as fast as allowed
    (`throughput` records/s, 0 = unlimited); wait for every ack; return the figures.

    With `warmup_records` (Kafka's --warmup-records, KIP-1052), that many records go first,
    as fast as allowed, and are waited for; the clock starts after them, so connections,
    metadata and the producer id are set up and the figures are of the steady state only.
    `security`: client properties (Kafka's keys) for a secure cluster. A request unanswered
    for `request_timeout_ms` is retried; a record fails after `delivery_timeout_ms` (Kafka's
    request.timeout.ms and delivery.timeout.ms), and the result counts it in `errors`."""
    from raftlog.client import Producer

    payload = (os.urandom(16).hex().encode() * (record_bytes // 32 + 1))[:record_bytes]
    send_s = [0.0] * records
    hist = LatencyHistogram()
    lock = threading.Lock()
    errors = [0]
    first_error: list[str] = []
    clock = time.perf_counter
    window = WindowStats(clock())  # replaced when the timed run starts (after a warm-up)

    acked: list[tuple[float, int, int]] = []  # (ack time, first record, records) per batch

    def on_batch_done(fut: Any, first: int) -> None:
        # Runs on the producer's I/O thread, under its lock: O(1) Python work per batch (the
        # per-record histogram is filled after the timed run), so the tool does not slow
        # down what it measures. Send times of a batch only grow: the first is the oldest.
        done_s = clock()
        n = fut.batch_record_count
        exc = fut.exception()
        if exc is not None:
            with lock:
                errors[0] += n
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}")
            return
        acked.append((done_s, first, n))
        if progress is not None and n:
            sum_us = (done_s * n - sum(send_s[first:first + n])) * 1e6
            with lock:
                window.add_latency(sum_us, n, (done_s - send_s[first]) * 1e6)

    throttle = Throttler(throughput)
    with Producer(bootstrap, security=security,
                  **_producer_options(acks, linger_ms, batch_bytes, compression,
                                      request_timeout_ms, delivery_timeout_ms)) as p:
        send = p.send
        if warmup_records:
            for _ in range(warmup_records):
                send(topic, payload)
            p.flush()
        freeze_setup_objects()
        start = clock()
        window = WindowStats(start)
        next_report = start + report_interval_s
        for i in range(records):
            now = clock()
            if throughput > 0 and (i & 63) == 0:
                wait = throttle.wait_s(i, now - start)
                if wait > 0:
                    time.sleep(wait)
                    now = clock()
            send_s[i] = now
            fut = send(topic, payload)
            if fut.index == 0:
                fut.add_done_callback(lambda f, first=i: on_batch_done(f, first))
            if (i & 1023) == 0 and progress is not None and now >= next_report:
                with lock:
                    window.add(i - window.total_records, (i - window.total_records) * record_bytes)
                    line = window.line(now)
                progress(line)
                next_report = now + report_interval_s
        p.flush()
    elapsed = clock() - start
    for done_s, first, n in acked:
        hist.record_many([(done_s - t) * 1e6 for t in send_s[first:first + n]])
    return ProduceResult(records - errors[0], (records - errors[0]) * record_bytes, elapsed,
                         errors[0], hist, first_error[0] if first_error else None)


def run_consumer(bootstrap: str, topic: str, records: int, *, timeout_s: float = 60.0,
                 progress: Callable[[str], None] | None = None,
                 report_interval_s: float = 1.0,
                 fetch_max_bytes: int = 8 * MB, max_partition_fetch_bytes: int = 4 * MB,
                 security: dict[str, str] | None = None) -> ConsumeResult:
    """Read `records` records of `topic` from the beginning (every partition), or until
    `timeout_s` passes with no record; return the figures."""
    from raftlog.client import Consumer

    clock = time.perf_counter
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=100_000,
                  fetch_max_bytes=fetch_max_bytes, security=security,
                  max_partition_fetch_bytes=max_partition_fetch_bytes) as c:
        parts = _partitions(bootstrap, topic, security)
        c.assign([(topic, p) for p in parts])
        c.seek_to_beginning()
        freeze_setup_objects()
        start = clock()
        window = WindowStats(start)
        next_report = start + report_interval_s
        got = nbytes = 0
        first: float | None = None
        last_record = start
        while got < records:
            batch = c.poll(500, max_records=100_000)
            now = clock()
            if batch:
                if first is None:
                    first = now - start
                last_record = now
                got += len(batch)
                # Value bytes in C (map/filter): a Python loop here costs the tool ~0.1 us
                # per record. filter(None) drops null values (and empty ones, of length 0).
                b = sum(map(len, filter(None, map(_value_of, batch))))
                nbytes += b
                window.add(len(batch), b)
            elif now - last_record > timeout_s:
                break
            if progress is not None and now >= next_report:
                progress(window.line(now, "records consumed"))
                next_report = now + report_interval_s
        elapsed = clock() - start
    return ConsumeResult(got, nbytes, elapsed, first)


def _partitions(bootstrap: str, topic: str, security: dict[str, str] | None = None) -> list[int]:
    from raftlog.client import Admin

    with Admin(bootstrap, request_timeout_ms=15_000, security=security) as admin:
        info = admin.describe_topics([topic])[topic]
    return [p.partition for p in info.partitions]


def _producer_child(conn: Any, kwargs: dict[str, Any]) -> None:
    # Runs in a spawned process: result as JSON bytes through the pipe (no pickle of ours).
    try:
        r = run_producer(**kwargs)
        conn.send_bytes(json.dumps({"ok": r.to_json()}).encode())
    except Exception as exc:  # reported to the parent, which fails with it
        conn.send_bytes(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
    finally:
        conn.close()


def produce_perf(bootstrap: str, topic: str, records: int, record_bytes: int, *,
                 producers: int = 1, throughput: float = 0, progress: Callable[[str], None] | None = None,
                 **options: Any) -> ProduceResult:
    """`run_producer` in this process (producers=1) or in K spawned processes splitting the
    records (and the throughput) evenly; merged result."""
    if producers <= 1:
        return run_producer(bootstrap, topic, records, record_bytes, throughput=throughput,
                            progress=progress, **options)
    ctx = multiprocessing.get_context("spawn")
    procs = []
    share, extra = divmod(records, producers)
    for k in range(producers):
        parent, child = ctx.Pipe(duplex=False)
        kwargs = dict(bootstrap=bootstrap, topic=topic, records=share + (1 if k < extra else 0),
                      record_bytes=record_bytes, throughput=throughput / producers, **options)
        proc = ctx.Process(target=_producer_child, args=(child, kwargs), daemon=True)
        proc.start()
        child.close()
        procs.append((proc, parent))
    results: list[ProduceResult] = []
    failures: list[str] = []
    try:
        for proc, parent in procs:
            try:
                msg = json.loads(parent.recv_bytes())
            except EOFError:
                failures.append(f"producer process {proc.pid} died (exit {proc.exitcode})")
                continue
            if "ok" in msg:
                results.append(ProduceResult.from_json(msg["ok"]))
            else:
                failures.append(msg["error"])
    finally:
        for proc, _ in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    if failures:
        raise RuntimeError("; ".join(failures))
    return merge_produce(results)


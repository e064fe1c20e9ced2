"""The perf tools' pure statistics: histogram percentiles within 2 %, merging, JSON round trip, throttling, summaries."""

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.cli.perf import (
    PERCENTILES,
    ConsumeResult,
    LatencyHistogram,
    ProduceResult,
    Throttler,
    WindowStats,
    format_produce,
    merge_produce,
    summarize_consume,
    summarize_produce,
)


def exact_percentile(values, p):
    s = sorted(values)
    rank = max(1, math.ceil(len(s) * p / 100))
    return s[rank - 1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5e7, allow_nan=False), min_size=1, max_size=300),
       st.sampled_from([0, 1, 50, 95, 99, 99.9, 100]))
def test_percentile_is_within_two_percent_above_the_exact_value(values, p):
    h = LatencyHistogram()
    h.record_many(values)
    exact = exact_percentile(values, p)
    got = h.percentile_us(p)
    assert got >= exact or math.isclose(got, exact, rel_tol=1e-9)
    assert got <= max(exact * 1.02 + 1e-9, 1.0)
    assert got <= h.max_us or math.isclose(got, h.max_us)


def test_counts_mean_min_max_and_empty():
    h = LatencyHistogram()
    assert h.percentile_us(99) == 0.0 and h.mean_us() == 0.0
    for v in (100.0, 200.0, 300.0):
        h.record(v)
    h.record(-5.0)  # rounding noise is clamped to 0, never a negative latency
    assert h.count == 4
    assert h.min_us == 0.0 and h.max_us == 300.0
    assert h.mean_us() == pytest.approx(150.0)
    assert h.percentile_us(100) == 300.0
    with pytest.raises(ValueError):
        h.percentile_us(101)


def test_merge_equals_recording_everything_in_one():
    rng = random.Random(7)
    a_vals = [rng.expovariate(1 / 2000) for _ in range(2000)]
    b_vals = [rng.expovariate(1 / 9000) for _ in range(1000)]
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    a.record_many(a_vals)
    b.record_many(b_vals)
    both.record_many(a_vals + b_vals)
    a.merge(b)
    assert a.counts == both.counts and a.count == both.count
    assert a.max_us == both.max_us and a.min_us == both.min_us
    for p in PERCENTILES:
        assert a.percentile_us(p) == both.percentile_us(p)


def test_json_round_trip_through_text():
    h = LatencyHistogram()
    h.record_many([1.0, 10.0, 1000.0, 123456.0])
    back = LatencyHistogram.from_json(json.loads(json.dumps(h.to_json())))
    assert back.counts == h.counts and back.count == 4 and back.max_us == h.max_us
    r = ProduceResult(4, 400, 1.5, 1, h, "RequestTimedOutError: no answer")
    r2 = ProduceResult.from_json(json.loads(json.dumps(r.to_json())))
    assert (r2.records, r2.bytes, r2.elapsed_s, r2.errors) == (4, 400, 1.5, 1)
    assert r2.first_error == "RequestTimedOutError: no answer"  # the CLI says why records failed


def test_throttler_keeps_the_target_rate():
    t = Throttler(1000)  # 1000 records/s: record 500 is due at 0.5 s
    assert t.wait_s(500, 0.2) == pytest.approx(0.3)
    assert t.wait_s(500, 0.6) == 0.0
    assert Throttler(0).wait_s(10**9, 0.0) == 0.0  # unlimited


def test_merge_produce_sums_and_takes_the_longest_run():
    h1, h2 = LatencyHistogram(), LatencyHistogram()
    h1.record(1000.0)
    h2.record(3000.0)
    m = merge_produce([ProduceResult(10, 1000, 2.0, 0, h1), ProduceResult(20, 2000, 4.0, 1, h2, "E: x")])
    assert (m.records, m.bytes, m.elapsed_s, m.errors, m.first_error) == (30, 3000, 4.0, 1, "E: x")
    assert m.histogram.count == 2 and m.histogram.max_us == 3000.0


def test_summaries_and_the_report_line():
    h = LatencyHistogram()
    h.record_many([1000.0] * 98 + [20_000.0, 40_000.0])
    s = summarize_produce(ProduceResult(100, 100 * 1024 * 1024 // 100, 0.5, 0, h))
    assert s["records_per_s"] == 200.0 and s["mb_per_s"] == 2.0
    assert s["latency_p50_ms"] == pytest.approx(1.0, rel=0.02)
    assert s["latency_p99_ms"] == pytest.approx(20.0, rel=0.02)
    assert s["latency_max_ms"] == 40.0 and "latency_p999_ms" in s
    line = format_produce(s)
    assert line.startswith("100 records sent, 200.0 records/s (2.00 MB/s)") and "99.9th" in line
    assert "first_error" not in s
    failed = summarize_produce(ProduceResult(90, 9000, 0.5, 10, h, "OutOfOrderSequenceNumberError: gap"))
    assert failed["errors"] == 10 and failed["first_error"] == "OutOfOrderSequenceNumberError: gap"
    c = summarize_consume(ConsumeResult(1000, 2 * 1024 * 1024, 2.0, 0.25))
    assert c["records_per_s"] == 500.0 and c["mb_per_s"] == 1.0 and c["first_record_ms"] == 250.0


def test_window_line_reports_and_resets():
    w = WindowStats(10.0)
    w.add(500, 50_000)
    w.add_latency(5000.0 * 500, 500, 9000.0)
    line = w.line(11.0)
    assert line.startswith("500 records sent, 500.0 records/s") and "5.0 ms avg latency" in line
    assert "9.0 ms max latency" in line
    assert w.line(12.0).startswith("0 records sent")
    assert w.total_records == 500

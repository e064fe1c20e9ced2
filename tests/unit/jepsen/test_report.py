"""The report writes store/<test>/<timestamp>/ with history.jsonl, results.json, summary.txt and two
valid PNG plots (faults shaded), without warnings, and its numbers match the history."""

from __future__ import annotations

import json
import random
from datetime import datetime

import pytest

from jepsen_style_tests import generator as gen
from jepsen_style_tests.checker import check
from jepsen_style_tests.history import NEMESIS, History, HistoryWriter, Op, read_history
from jepsen_style_tests.report import (
    latency_quantiles,
    plot_latency,
    plot_throughput,
    results_dict,
    run_dir,
    summary_text,
    throughput_series,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SEC = gen.SEC_NS
MS = 1_000_000


def simulated_run(seconds: int = 6) -> History:
    offsets = {"t-0": 0, "t-1": 0}

    def complete(invoke: Op, rng: random.Random):
        latency = rng.randint(1, 20) * MS
        if invoke.f == "send":
            key, value = invoke.value
            if rng.random() < 0.1:
                return "info", [key, [None, value]], latency, "timeout"
            offsets[key] += 1
            return "ok", [key, [offsets[key] - 1, value]], latency, None
        if invoke.f == "poll":
            return ("fail", None, latency, "not-assigned") if rng.random() < 0.1 else ("ok", {}, latency, None)
        return "ok", None, latency, None

    faults = [gen.Fault("partition", {"f": "start-partition", "value": "halves"}, {"f": "stop-partition"})]
    workload = gen.any_of(
        gen.nemesis(gen.fault_cycle(faults, quiet_ns=SEC, fault_ns=SEC)),
        gen.clients(gen.stagger(20 * MS, gen.mix(gen.sends(["t-0", "t-1"]), gen.polls()))),
    )
    return gen.simulate(gen.time_limit(seconds * SEC, workload), complete, concurrency=3, seed=7)


def test_run_dir_is_per_test_and_per_timestamp(tmp_path):
    when = datetime(2026, 5, 9, 7, 35, 25, 123456)
    path = run_dir(tmp_path, "kafka / partitions!", when)
    assert path == tmp_path / "kafka_partitions" / "20260509T073525.123"
    assert path.is_dir()
    with pytest.raises(FileExistsError):
        run_dir(tmp_path, "kafka / partitions!", when)


def test_write_report_makes_every_file(tmp_path):
    history = simulated_run()
    result = check(history)
    directory = run_dir(tmp_path / "store", "sim", datetime(2026, 1, 1))
    files = write_report(directory, history, result, test_name="sim", extra={"seed": 7})

    for path in (files.history, files.results, files.summary, files.throughput_png, files.latency_png):
        assert path.parent == directory and path.stat().st_size > 0
    for png in (files.throughput_png, files.latency_png):
        assert png.read_bytes()[:8] == PNG_MAGIC
    assert list(read_history(files.history)) == list(history)

    results = json.loads(files.results.read_text())
    assert results["test"] == "sim" and results["seed"] == 7
    assert results["verdict"] == result.verdict == results["checker"]["verdict"]
    assert [f["name"] for f in results["faults"]] == ["partition"] * len(history.fault_windows())
    assert len(results["faults"]) >= 2
    assert results["latency_ms"]["send"]["count"] == history.counts()["send"]["ok"]

    summary = files.summary.read_text()
    assert summary.startswith("test: sim\nverdict: ")
    assert "faults: partition x" in summary and "latency send (ok, ms)" in summary


def test_history_streamed_by_the_runner_is_kept(tmp_path):
    history = simulated_run(2)
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        for op in history:
            writer.append(op)
    before = (tmp_path / "history.jsonl").read_bytes()
    write_report(tmp_path, history, check(history), test_name="x")
    assert (tmp_path / "history.jsonl").read_bytes() == before


def test_numbers_match_a_hand_written_history():
    ops = []
    for i, latency_ms in enumerate([1, 2, 3, 4, 100]):
        t = i * SEC // 2
        ops += [Op("invoke", "send", 0, ["t-0", i], t), Op("ok", "send", 0, ["t-0", [i, i]], t + latency_ms * MS)]
    ops += [Op("invoke", "poll", 1, None, 0), Op("info", "poll", 1, None, 3 * SEC, error="timeout")]
    history = History(ops)
    q = latency_quantiles(history)
    assert q == {"send": {"count": 5, "p50": 3.0, "p95": 100.0, "p99": 100.0, "max": 100.0}}
    series = throughput_series(history, SEC)
    assert sum(n for _, n in series[("send", "ok")]) == 5
    assert series[("poll", "info")] == [(0.0, 0), (1.0, 0), (2.0, 0), (3.0, 1)]


def test_summary_names_bad_anomalies_with_an_example():
    ops = [
        Op("invoke", "send", 0, ["t-0", 1], 0), Op("ok", "send", 0, ["t-0", [0, 1]], 1),
        Op("invoke", "send", 0, ["t-0", 2], 2), Op("ok", "send", 0, ["t-0", [1, 2]], 3),
        Op("invoke", "poll", 1, None, 4), Op("ok", "poll", 1, {"t-0": [[1, 2]]}, 5),
        Op("invoke", "start-kill", NEMESIS, "leader", 6),
    ]
    history = History(ops)
    result = check(history)
    text = summary_text(history, result, test_name="lost")
    assert "verdict: INVALID" in text and "lost-write 1" in text and "e.g. lost-write" in text
    data = results_dict(history, result, test_name="lost")
    assert data["faults"][0]["closed"] is False
    json.dumps(data)


def test_plots_cope_with_tiny_and_thinned_histories(tmp_path):
    tiny = History([Op("invoke", "poll", 0, None, 0)])
    assert plot_throughput(tiny, tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC
    assert plot_latency(tiny, tmp_path / "l.png").read_bytes()[:8] == PNG_MAGIC
    many = simulated_run(3)
    assert plot_latency(many, tmp_path / "thin.png", max_points=10).stat().st_size > 0

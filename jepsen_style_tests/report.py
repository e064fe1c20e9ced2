"""The report of one run: ``store/<test>/<timestamp>/`` with ``history.jsonl``, ``results.json``,
``summary.txt``, ``throughput.png`` and ``latency.png``.

Plots put seconds since the first op on x, and shade each nemesis fault window (from the
``start-X`` invoke to the ``stop-X`` completion, `History.fault_windows`).

* ``throughput.png`` — completions per second, one line per (f, outcome): colour = f, line
  style = outcome (solid ok, dashed info, dotted fail).
* ``latency.png``    — each completed op as a point (latency ms, log scale; colour = outcome,
  marker = f), and per-second p50/p95/p99 lines of ``ok`` ops, coloured by f.

Pure parts (`results_dict`, `summary_text`, `throughput_series`, `latency_quantiles`) take a
`History` and a `CheckResult`; the I/O is `run_dir`, `plot_*` and `write_report`. Plots use
matplotlib's object API (`Figure`, rendered by Agg) — no pyplot, no global backend switch — and
scatter at most `max_points` points so a long run stays cheap to draw.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .checker import CheckResult
from .history import History, NEMESIS, write_history

__all__ = [
    "ReportFiles",
    "run_dir",
    "results_dict",
    "summary_text",
    "throughput_series",
    "latency_quantiles",
    "plot_throughput",
    "plot_latency",
    "write_report",
]

SEC_NS = 1_000_000_000
_OUTCOME_COLORS = {"ok": "#2b8a3e", "info": "#e8890c", "fail": "#c92a2a"}
_FAULT_COLORS = ("#d0ebff", "#ffe3e3", "#fff3bf", "#e5dbff", "#d3f9d8", "#ffe8cc")
_MARKERS = ("o", "s", "^", "v", "D", "x", "+", "P")
_F_COLORS = ("#1971c2", "#2b8a3e", "#862e9c", "#e8590c", "#0c8599", "#5c940d", "#c2255c", "#495057")
_QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class ReportFiles:
    directory: Path
    history: Path
    results: Path
    summary: Path
    throughput_png: Path
    latency_png: Path


def run_dir(root: str | Path, test_name: str, started_at: datetime) -> Path:
    """Creates and returns ``<root>/<test>/<timestamp>/`` (``YYYYmmddTHHMMSS.mmm``).

    The test name is reduced to ``[A-Za-z0-9._-]``; raises `FileExistsError` if that run
    directory exists (two runs never share one)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", test_name).strip("._") or "test"
    stamp = started_at.strftime("%Y%m%dT%H%M%S.") + f"{started_at.microsecond // 1000:03d}"
    path = Path(root) / safe / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of a sorted, non-empty sequence."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def _latencies_ms(history: History) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pair in history.pairs():
        if pair.process == NEMESIS or pair.latency_ns is None:
            continue
        out[pair.f][pair.type].append(pair.latency_ns / 1e6)
    return out


def latency_quantiles(history: History) -> dict[str, dict[str, float | int]]:
    """``{f: {"count", "p50", "p95", "p99", "max"}}`` in ms, over ``ok`` client ops."""
    out: dict[str, dict[str, float | int]] = {}
    for f, by_type in sorted(_latencies_ms(history).items()):
        values = sorted(by_type.get("ok", []))
        if not values:
            continue
        summary: dict[str, float | int] = {"count": len(values)}
        for q in _QUANTILES:
            summary[f"p{round(q * 100)}"] = round(_quantile(values, q), 3)
        summary["max"] = round(values[-1], 3)
        out[f] = summary
    return out


def throughput_series(history: History, bucket_ns: int = SEC_NS) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """``{(f, outcome): [(bucket start s, completions per s), ...]}`` for client ops; every
    series has a point for every bucket of the run (zeros included)."""
    start = history.start_ns
    buckets = max(1, math.ceil((history.end_ns - start + 1) / bucket_ns))
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * buckets)
    for op in history.completions():
        if not op.is_client:
            continue
        counts[(op.f, op.type)][min(buckets - 1, (op.time_ns - start) // bucket_ns)] += 1
    per_s = SEC_NS / bucket_ns
    return {
        series: [(i * bucket_ns / SEC_NS, n * per_s) for i, n in enumerate(values)]
        for series, values in sorted(counts.items())
    }


def results_dict(
    history: History,
    result: CheckResult,
    *,
    test_name: str,
    examples_max: int = 8,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What goes in ``results.json``: verdict, checker output, faults, latency, throughput."""
    duration_s = history.duration_ns / SEC_NS
    ok_counts: dict[str, int] = defaultdict(int)
    for pair in history.pairs():
        if pair.process != NEMESIS and pair.type == "ok":
            ok_counts[pair.f] += 1
    return {
        "test": test_name,
        "verdict": result.verdict,
        "valid": result.valid,
        "duration_s": round(duration_s, 3),
        "checker": result.to_json_dict(examples_max=examples_max),
        "faults": [
            {
                "name": w.name,
                "start_s": round((w.start_ns - history.start_ns) / SEC_NS, 3),
                "end_s": round((w.end_ns - history.start_ns) / SEC_NS, 3),
                "closed": w.closed,
                "value": w.value,
            }
            for w in history.fault_windows()
        ],
        "latency_ms": latency_quantiles(history),
        "ok_ops_per_s": {f: round(n / duration_s, 3) if duration_s > 0 else None for f, n in sorted(ok_counts.items())},
        **(dict(extra) if extra else {}),
    }


def summary_text(history: History, result: CheckResult, *, test_name: str) -> str:
    """A short human summary (a dozen lines)."""
    lines = [f"test: {test_name}", f"verdict: {result.verdict.upper()}"]
    sends = result.stats.get("sends", {})
    lines.append(
        f"ops: {len(history)} in {history.duration_ns / SEC_NS:.1f} s; sends ok/info/fail "
        f"{sends.get('ok', 0)}/{sends.get('info', 0)}/{sends.get('fail', 0)}; "
        f"values read {result.stats.get('values_read', 0)}"
    )
    if result.anomalies:
        parts = [f"{name} {len(cases)}" + ("" if name in result.bad else " (allowed)")
                 for name, cases in result.anomalies.items()]
        lines.append("anomalies: " + ", ".join(parts))
        for name in result.bad:
            lines.append(f"  e.g. {name}: {json.dumps(result.anomalies[name][0], default=str)[:300]}")
    else:
        lines.append("anomalies: none")
    for reason in result.unknown_reasons:
        lines.append(f"unknown: {reason}")
    faults: dict[str, list[float]] = defaultdict(list)
    for window in history.fault_windows():
        faults[window.name].append((window.end_ns - window.start_ns) / SEC_NS)
    if faults:
        lines.append("faults: " + ", ".join(f"{n} x{len(d)} ({sum(d):.1f} s)" for n, d in sorted(faults.items())))
    for f, q in latency_quantiles(history).items():
        lines.append(f"latency {f} (ok, ms): p50 {q['p50']} p95 {q['p95']} p99 {q['p99']} max {q['max']} (n={q['count']})")
    causes = result.stats.get("info_causes") or []
    if causes:
        lines.append("info causes: " + ", ".join(causes[:10]))
    return "\n".join(lines) + "\n"


def _shade_faults(axes: Any, history: History) -> None:
    colors: dict[str, str] = {}
    for window in history.fault_windows():
        first = window.name not in colors
        color = colors.setdefault(window.name, _FAULT_COLORS[len(colors) % len(_FAULT_COLORS)])
        axes.axvspan(
            (window.start_ns - history.start_ns) / SEC_NS,
            (window.end_ns - history.start_ns) / SEC_NS,
            color=color,
            alpha=0.6,
            zorder=0,
            label=f"fault: {window.name}" if first else None,
        )


def _new_axes() -> tuple[Figure, Any]:
    # Constrained layout makes room for the legend outside the plot.
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    return figure, figure.add_subplot()


def _finish(figure: Figure, axes: Any, path: Path, ylabel: str, title: str) -> None:
    axes.set_xlabel("time (s)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.savefig(path, format="png", dpi=100)


def plot_throughput(history: History, path: str | Path, *, bucket_ns: int = SEC_NS, title: str = "") -> Path:
    """Writes ``throughput.png``: completions per second by (f, outcome), faults shaded."""
    path = Path(path)
    figure, axes = _new_axes()
    _shade_faults(axes, history)
    series = throughput_series(history, bucket_ns)
    styles = {"ok": "-", "info": "--", "fail": ":"}
    fs = sorted({f for f, _ in series})
    for (f, outcome), points in series.items():
        xs, ys = zip(*points)
        i = fs.index(f)
        axes.plot(xs, ys, styles.get(outcome, "-."), marker=_MARKERS[i % len(_MARKERS)], markersize=3,
                  label=f"{f} {outcome}", color=_F_COLORS[i % len(_F_COLORS)])
    _finish(figure, axes, path, "completions / s", f"{title} throughput".strip())
    return path


def plot_latency(
    history: History,
    path: str | Path,
    *,
    bucket_ns: int = SEC_NS,
    max_points: int = 20_000,
    title: str = "",
) -> Path:
    """Writes ``latency.png``: a latency point per op and per-bucket ok quantiles, faults shaded."""
    path = Path(path)
    figure, axes = _new_axes()
    _shade_faults(axes, history)
    pairs = [p for p in history.pairs() if p.process != NEMESIS and p.completion is not None]
    stride = max(1, math.ceil(len(pairs) / max_points))  # evenly thinned, deterministic
    fs = sorted({p.f for p in pairs})
    points: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for pair in pairs[::stride]:
        xs, ys = points[(pair.f, pair.type)]
        xs.append((pair.completion.time_ns - history.start_ns) / SEC_NS)
        ys.append(max(pair.latency_ns / 1e6, 1e-3))
    for (f, outcome), (xs, ys) in sorted(points.items()):
        axes.scatter(xs, ys, s=6, alpha=0.5, marker=_MARKERS[fs.index(f) % len(_MARKERS)],
                     color=_OUTCOME_COLORS.get(outcome, "#495057"), label=f"{f} {outcome}", linewidths=0)
    buckets: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pair in pairs:
        if pair.type == "ok":
            bucket = (pair.completion.time_ns - history.start_ns) // bucket_ns
            buckets[pair.f][bucket].append(max(pair.latency_ns / 1e6, 1e-3))
    for f, by_bucket in sorted(buckets.items()):
        keys = sorted(by_bucket)
        xs = [(k + 0.5) * bucket_ns / SEC_NS for k in keys]
        for q, style in zip(_QUANTILES, ("-", "--", ":")):
            ys = [_quantile(sorted(by_bucket[k]), q) for k in keys]
            axes.plot(xs, ys, style, linewidth=1.2, color=_F_COLORS[fs.index(f) % len(_F_COLORS)],
                      label=f"{f} ok p{round(q * 100)}")
    if points:
        axes.set_yscale("log")
    _finish(figure, axes, path, "latency (ms)", f"{title} latency".strip())
    return path


def write_report(
    directory: str | Path,
    history: History,
    result: CheckResult,
    *,
    test_name: str,
    extra: Mapping[str, Any] | None = None,
) -> ReportFiles:
    """Writes every report file into `directory` (made by `run_dir`); returns their paths.

    ``history.jsonl`` is written only if the runner has not already streamed it there."""
    directory = Path(directory)
    files = ReportFiles(
        directory=directory,
        history=directory / "history.jsonl",
        results=directory / "results.json",
        summary=directory / "summary.txt",
        throughput_png=directory / "throughput.png",
        latency_png=directory / "latency.png",
    )
    if not files.history.exists():
        write_history(files.history, history)
    results = results_dict(history, result, test_name=test_name, extra=extra)
    files.results.write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    files.summary.write_text(summary_text(history, result, test_name=test_name), encoding="utf-8")
    plot_throughput(history, files.throughput_png, title=test_name)
    plot_latency(history, files.latency_png, title=test_name)
    return files

"""Plots for `scripts/bench`: each benchmark writes a PNG beside its printed text.

    bench_plot.add_plot_option(parser)              # --plot PATH (default bench-results/NAME.png)
    bench_plot.throughput_latency(path, title, results, baseline=..., note=...)
    bench_plot.failover_timeline(path, title, runs, note=...)
    bench_plot.idle_cpu(path, title, {"baseline": {node: pct}, "1,000 partitions": {...}}, target=5.0, note=...)

Every figure names in its footer the command and the load that produced it (`note`), so a
plot copied into the docs says how to make it again. matplotlib (the `jepsen` extra, which
`scripts/bench` installs) draws off screen (Agg); nothing here opens a window.
"""

from __future__ import annotations

import argparse
import os
import shlex
import textwrap
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench-results"
# (label, key in a result row) of the latency percentiles `raftlog perf --json` reports.
PERCENTILES = (("p50", "lat_p50_ms"), ("p99", "lat_p99_ms"), ("p99.9", "lat_p999_ms"), ("max", "lat_max_ms"))
QUANTILES = (0.50, 0.99, 0.999, 1.0)


def add_plot_option(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--plot", type=Path, default=RESULTS_DIR / f"{name}.png",
                        help=f"where to write the PNG (default bench-results/{name}.png; '-' for none)")


def command_note() -> str:
    """The command that is running, as a user types it, with the machine and its load now."""
    argv = [Path(sys.argv[0]).name.removeprefix("bench_").removesuffix(".py"), *sys.argv[1:]]
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return f"scripts/bench {shlex.join(argv)}  |  {os.cpu_count()} cores, load average {load}"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, note: str) -> Path:
    width_chars = int(fig.get_figwidth() * 17)  # what fits at 7 pt
    lines = textwrap.wrap(note, width_chars, break_on_hyphens=False) or [""]
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.02 + 0.035 * len(lines), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    shown = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    print(f"plot: {shown}")
    return path


def throughput_latency(path: Path | None, title: str, results: Mapping[str, Mapping[str, float]], *,
                       baseline: str, note: str) -> Path | None:
    """Three panels from rows {config: {produce_rps, consume_rps, lat_p50_ms, ...}}: records/s
    produced and consumed beside the baseline config of the same run (its ratio on each bar),
    latency percentiles per config, and the latency CDF (the percentiles as its points)."""
    if path is None or str(path) == "-" or not results:
        return None
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    names = list(results)
    fig, (tput, lat, cdf) = plt.subplots(1, 3, figsize=(15, 4.8))
    width = 0.38
    base = results.get(baseline, {})
    for i, (key, label) in enumerate((("produce_rps", "produced"), ("consume_rps", "consumed"))):
        xs = [n + (i - 0.5) * width for n in range(len(names))]
        values = [results[name].get(key, 0.0) for name in names]
        bars = tput.bar(xs, values, width, label=label)
        for bar, value in zip(bars, values, strict=True):
            ratio = value / base[key] if base.get(key) else float("nan")
            tput.annotate(f"{value / 1000:,.0f}k\nx{ratio:.2f}", (bar.get_x() + width / 2, value),
                          ha="center", va="bottom", fontsize=7)
    tput.set_xticks(range(len(names)), names, fontsize=8)
    tput.set_ylabel("records/s")
    tput.set_title(f"throughput (ratios to {baseline})", fontsize=9)
    tput.set_ylim(0, 1.2 * max(results[n].get(k, 0.0) for n in names for k in ("produce_rps", "consume_rps")))
    tput.legend(fontsize=8, loc="upper left")
    step = 0.8 / len(names)
    for n, name in enumerate(names):
        values = [results[name].get(key, 0.0) for _, key in PERCENTILES]
        lat.bar([i + n * step for i in range(len(PERCENTILES))], values, step, label=name)
        cdf.plot(values, QUANTILES, marker="o", label=name)
    lat.set_xticks([i + 0.4 - step / 2 for i in range(len(PERCENTILES))], [p for p, _ in PERCENTILES])
    lat.set_yscale("log")
    lat.set_ylabel("send-to-ack latency, ms (log)")
    lat.set_title("latency percentiles of the paced run", fontsize=9)
    lat.legend(fontsize=8)
    cdf.set_xscale("log")
    for axis in (lat.yaxis, cdf.xaxis):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    cdf.set_xlabel("latency, ms (log)")
    cdf.set_ylabel("fraction of records acknowledged")
    cdf.set_title("latency distribution at its p50, p99, p99.9 and max", fontsize=9)
    cdf.set_ylim(0.45, 1.01)
    cdf.grid(True, alpha=0.3)
    cdf.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path, note)


def failover_timeline(path: Path | None, title: str, runs: Sequence[Mapping[str, float]], *,
                      note: str, target_ms: float | None = None) -> Path | None:
    """One row per run from `{phase: ms after the kill}` (phases in order): a bar from the kill
    (0) to each phase's time, the later phases drawn over the earlier ones."""
    if path is None or str(path) == "-" or not runs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * len(runs)))
    phases = list(runs[0])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, run in enumerate(runs):
        for i, phase in reversed(list(enumerate(phases))):
            ax.barh(row, run[phase], color=colors[i % len(colors)], label=phase if row == 0 else None)
        ax.annotate(" / ".join(f"{run[phase]:.0f}" for phase in phases) + " ms", (max(run.values()), row),
                    xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    if target_ms is not None:
        ax.axvline(target_ms, color="red", linestyle="--", label=f"target {target_ms:.0f} ms")
    ax.set_yticks(range(len(runs)), [f"run {i + 1}" for i in range(len(runs))])
    ax.invert_yaxis()
    ax.set_xlabel("ms after SIGKILL of the active controller")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=10)
    return _save(fig, path, note)


def idle_cpu(path: Path | None, title: str, series: Mapping[str, Mapping[str, float]], *, target: float,
             note: str) -> Path | None:
    """Idle CPU per node (% of one core), one bar per series (baseline first), and the target."""
    if path is None or str(path) == "-" or not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.6))
    nodes = list(next(iter(series.values())))
    width = 0.8 / len(series)
    for n, (label, values) in enumerate(series.items()):
        bars = ax.bar([i + n * width for i in range(len(nodes))], [values[node] for node in nodes], width,
                      label=label)
        for bar, node in zip(bars, nodes, strict=True):
            ax.annotate(f"{values[node]:.1f}%", (bar.get_x() + width / 2, values[node]), ha="center",
                        va="bottom", fontsize=8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(nodes))], nodes)
    ax.axhline(target, color="red", linestyle="--", label=f"target < {target:g}%")
    ax.set_ylabel("CPU, % of one core")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9, wrap=True)
    return _save(fig, path, note)

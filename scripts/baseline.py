"""`--baseline REV` for a benchmark (scripts/bench kafka, e2e): the same benchmark with the same
options against a `git worktree` of REV (a temp directory, removed at the end) and against this
tree, in the same command, alternating run by run (REV, this tree, REV, ...: a change of the
machine's load meanwhile hits both alike), each run on a fresh cluster; printed: the median of
--runs runs of each and their ratio (this tree / REV; for latencies lower is better).

    scripts/bench kafka --small --runs 3 --baseline f1db4ca

The baseline's processes import REV's code: it runs REV's own script with the worktree first on
PYTHONPATH (ahead of the venv's editable install) and the worktree as its working directory.
Its medians come from its `--json` line; REV's script must have that option.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_option", "compare", "report"]

ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 120  # the baseline's own cleanup stops its nodes by PID


def add_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--baseline", metavar="REV",
                    help="also run this benchmark against a git worktree of REV, first, in the same command, "
                         "and print the ratio of each median (this tree / REV)")


def fill_defaults(args: argparse.Namespace, defaults: dict[str, tuple[Any, Any]]) -> None:
    """Give each option declared with default=None its (normal, --small) default: the --small
    one when --small is given. A value given on the command line is kept either way, even one
    equal to the normal default (`--small --runs 3` runs three times)."""
    for key, (normal, small) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if args.small else normal)


def _argv_without_baseline(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--baseline":
            skip = True
        elif not arg.startswith("--baseline="):
            out.append(arg)
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}{key}." if isinstance(inner, dict) else f"{prefix}{key}"))
        return out
    return {prefix: float(value)} if isinstance(value, (int, float)) else {}


def _run(label: str, script: Path, cwd: Path, args: list[str], env: dict[str, str]) -> dict[str, float]:
    """One child benchmark to completion (stopped by its PID when interrupted); its JSON medians."""
    p = subprocess.Popen([sys.executable, str(script), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    last = ""
    try:
        assert p.stdout is not None
        for line in p.stdout:
            print(f"[{label}] {line}", end="", flush=True)
            if line.startswith("{"):
                last = line
        if p.wait() != 0:
            raise SystemExit(f"{label} failed (exit {p.returncode})")
    finally:
        if p.poll() is None:  # interrupted: let it stop its nodes, then make sure
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if not last:
        raise SystemExit(f"{label} printed no JSON medians")
    return _flatten(json.loads(last))


def compare(rev: str, script: str, runs: int, argv: list[str] | None = None) -> int:
    """Run `script` (a scripts/ file name) `runs` times at REV and `runs` times in this tree,
    alternating (REV first), each a whole run of its own (`--runs 1`, a fresh cluster), with
    this command's other options; print the medians of both and their ratios."""
    args = _argv_without_baseline(sys.argv[1:] if argv is None else argv)
    args = [a for i, a in enumerate(args) if a != "--runs" and (i == 0 or args[i - 1] != "--runs")]
    args = [a for a in args if not a.startswith("--runs=")] + ["--runs", "1", "--json"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   stdout=subprocess.DEVNULL)
    old: dict[str, list[float]] = {}
    new: dict[str, list[float]] = {}
    try:
        env_old = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
        for run in range(runs):
            print(f"--- run {run + 1} of {runs}: {rev}, then this tree ({script} {' '.join(args)})", flush=True)
            for into, label, root, env in ((old, rev, tree, env_old), (new, "this tree", ROOT, dict(os.environ))):
                for key, value in _run(label, root / "scripts" / script, root, args, env).items():
                    into.setdefault(key, []).append(value)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    report({k: statistics.median(v) for k, v in new.items()}, {k: statistics.median(v) for k, v in old.items()},
           rev, runs)
    return 0


def report(current: dict[str, Any], baseline: dict[str, float], rev: str, runs: int) -> None:
    now = _flatten(current)
    print()
    print(f"this tree vs {rev}: medians of {runs} alternating run(s) each; ratio this / {rev} "
          f"(*_ms: lower is better); load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'figure':<34}{rev:>16}{'this tree':>16}{'ratio':>9}")
    for key in sorted(set(now) & set(baseline)):
        before, after = baseline[key], now[key]
        ratio = after / before if before and not math.isnan(before) else float("nan")
        print(f"{key:<34}{before:>16,.1f}{after:>16,.1f}{ratio:>8.2f}x")

"""`--baseline REV` for a benchmark (scripts/bench kafka, e2e): the same benchmark with the same
options, run first against a `git worktree` of REV (a temp directory, removed at the end), then
against this tree, in the same command; printed: each median of both and their ratio
(this tree / REV; for latencies lower is better).

    scripts/bench kafka --small --baseline f1db4ca

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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_option", "measure", "report"]

ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 120  # the baseline's own cleanup stops its nodes by PID


def add_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--baseline", metavar="REV",
                    help="also run this benchmark against a git worktree of REV, first, in the same command, "
                         "and print the ratio of each median (this tree / REV)")


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


def measure(rev: str, script: str, argv: list[str] | None = None) -> dict[str, float]:
    """The medians of `script` (a scripts/ file name) run at REV with this command's options."""
    args = [*_argv_without_baseline(sys.argv[1:] if argv is None else argv)]
    if "--json" not in args:
        args.append("--json")
    tmp = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
        print(f"--- baseline {rev}: {script} {' '.join(args)}", flush=True)
        p = subprocess.Popen([sys.executable, str(tree / "scripts" / script), *args], cwd=tree, env=env,
                             stdout=subprocess.PIPE, text=True)
        last = ""
        try:
            assert p.stdout is not None
            for line in p.stdout:
                print(f"[{rev}] {line}", end="", flush=True)
                if line.startswith("{"):
                    last = line
            if p.wait() != 0:
                raise SystemExit(f"baseline {rev} failed (exit {p.returncode})")
        finally:
            if p.poll() is None:  # interrupted: let it stop its nodes, then make sure
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if not last:
            raise SystemExit(f"baseline {rev} printed no JSON medians")
        print(f"--- baseline {rev} done; now this tree", flush=True)
        return _flatten(json.loads(last))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


def report(current: dict[str, Any], baseline: dict[str, float], rev: str) -> None:
    now = _flatten(current)
    print()
    print(f"this tree vs {rev} (medians; ratio this / {rev}; *_ms: lower is better)")
    print(f"{'figure':<34}{rev:>16}{'this tree':>16}{'ratio':>9}")
    for key in sorted(set(now) & set(baseline)):
        before, after = baseline[key], now[key]
        ratio = after / before if before and not math.isnan(before) else float("nan")
        print(f"{key:<34}{before:>16,.1f}{after:>16,.1f}{ratio:>8.2f}x")

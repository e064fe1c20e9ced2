"""`scripts/bench NAME` starts every benchmark the way `python scripts/bench_NAME.py` would:
each one's options parse, and imports of sibling scripts resolve (bench_replication imports
bench_scale; a SIGTERM wrapper once ran them from the caller's directory and it failed); bench
replication's bad settings are usage errors, not tracebacks after the nodes started; a taken
--base-port is refused before any node starts."""

import os
import pathlib
import re
import socket
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "scripts").glob("bench_*.py"))


@pytest.mark.parametrize("name", NAMES)
def test_bench_starts_from_any_directory(name, tmp_path):
    done = subprocess.run([str(ROOT / "scripts" / "bench"), name, "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_an_unknown_bench_is_a_usage_error(tmp_path):
    done = subprocess.run([str(ROOT / "scripts" / "bench"), "nosuch"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "usage: scripts/bench NAME" in done.stderr


@pytest.mark.parametrize("argv", [["--window", "0"], ["--runs", "0"], ["--seconds", "0"], ["--sizes", "16,x"],
                                  ["--sizes", "0"]])
def test_bench_replication_refuses_bad_settings_before_starting_nodes(argv, tmp_path):
    done = subprocess.run([str(ROOT / "scripts" / "bench"), "replication", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "bench_replication.py: error:" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["replication", "scale"])
def test_a_taken_base_port_is_refused_before_any_node_starts(name, tmp_path):
    """A bench on ports something else holds would reach that instead of its own nodes. The
    refusal leaves no data directory behind (each suite run left two empty ones in /tmp)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        base = taken - 7 if taken - 7 > 1024 else taken  # the taken port inside the 15 used
        done = subprocess.run([str(ROOT / "scripts" / "bench"), name, "--base-port", str(base), "--runs", "1"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TMPDIR": str(temp)})
    named = re.search(r"port (\d+) is in use", done.stderr)
    assert done.returncode == 1 and named, done.stderr[-2000:]
    assert base <= int(named[1]) < base + 15  # ours, or another one of the 15 taken meanwhile
    assert "nodes:" not in done.stdout
    assert list(temp.iterdir()) == []

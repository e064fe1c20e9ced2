"""`scripts/bench NAME` starts every benchmark the way `python scripts/bench_NAME.py` would:
each one's options parse, and imports of sibling scripts resolve (bench_replication imports
bench_scale; a SIGTERM wrapper once ran them from the caller's directory and it failed)."""

import pathlib
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

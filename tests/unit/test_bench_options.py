"""The benches' --small defaults: --small shrinks only what the command line left unsaid, so an
explicit `--runs 3` (equal to the normal default) still runs three times."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_e2e  # noqa: E402


@pytest.mark.parametrize("argv, runs, records, latency_seconds", [
    ([], 3, 1_000_000, 5.0),
    (["--small"], 1, 100_000, 2.0),
    (["--small", "--runs", "3"], 3, 100_000, 2.0),
    (["--small", "--runs=2", "--records", "1000000"], 2, 1_000_000, 2.0),
    (["--runs", "5", "--latency-seconds", "1"], 5, 1_000_000, 1.0),
])
def test_small_keeps_explicit_values(argv, runs, records, latency_seconds):
    args = bench_e2e.parse_args(argv)
    assert (args.runs, args.records, args.latency_seconds) == (runs, records, latency_seconds)

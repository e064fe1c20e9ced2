"""The Kafka clients' own test suites against raftlog (issue 40): `scripts/client_suites SUITE`.

    scripts/client_suites franz-go      [--bootstrap HOST:PORT] [--run REGEX] [--json]
    scripts/client_suites kafka-python  [--bootstrap HOST:PORT] [-k EXPR] [--json]
    scripts/client_suites all           (every suite above, one raftlog cluster)

Without --bootstrap a three-node raftlog (the integration tests' harness, temp data dirs) is
started for the run and stopped by PID at the end. Each suite's sources and tools are fetched
into ~/.cache/raftlog/ (outside the repo) by its package manager, at a pinned version:
* franz-go: the `pkg/kgo` tests of the module pinned in tests/go.mod (Go module proxy), their
  brokers named by KGO_SEEDS; tests/reference/franz.py names each test left out with its reason.
* kafka-python: the sdist of KAFKA_PYTHON_VERSION from PyPI (it carries `test/integration`),
  installed into its own virtualenv, run with KAFKA_URI naming one raftlog node and
  KAFKA_VERSION=4.0.0 (the protocol level the suite assumes); KAFKA_PYTHON_EXCLUDED names the
  tests left out with their reasons.
Prints one summary line per suite (passed / failed / skipped / excluded) and, with --json, the
counts as one JSON object on the last line. A suite that cannot run here (no Go, no index) is
one line saying why, and counts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import franz  # noqa: E402 - the reference harness lives with the tests
from kafka_ref import ReferenceUnavailable  # noqa: E402

CACHE = Path(os.environ.get("RAFTLOG_SUITES_CACHE") or Path.home() / ".cache" / "raftlog" / "suites")
KAFKA_PYTHON_VERSION = "3.0.12"

# kafka-python's integration tests that are left out against raftlog, each with its reason.
KAFKA_PYTHON_EXCLUDED: dict[str, str] = {
    "test_sasl_integration.py": "starts its own SASL broker (the suite skips it with an external broker)",
    "test_ssl_integration.py": "starts its own TLS broker",
}


@contextmanager
def raftlog_cluster(bootstrap: str | None) -> Iterator[str]:
    """`bootstrap` if given, else a started three-node raftlog's Kafka bootstrap (stopped after)."""
    if bootstrap:
        yield bootstrap
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_kafka import load_harness

    with tempfile.TemporaryDirectory(prefix="client-suites-") as tmp:
        with load_harness().NodeCluster(Path(tmp), size=3) as cluster:
            cluster.start_all()
            cluster.wait_ready(timeout_s=90)
            yield cluster.kafka_bootstrap()


def run_franz_go(bootstrap: str, args: argparse.Namespace) -> Counter:
    log = CACHE / "franz-go.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = franz.run_kgo_suite(bootstrap, run=args.run, log_path=log)
    print(result.summary(), flush=True)
    for name in result.failed:
        print(f"  failed: {name}")
    for name, reason in result.excluded.items():
        print(f"  excluded: {name}: {reason}")
    print(f"  log: {log}")
    return result.counts


def _kafka_python_tree() -> tuple[Path, Path]:
    """kafka-python's unpacked sdist and a virtualenv with it and its test requirements."""
    base = CACHE / f"kafka-python-{KAFKA_PYTHON_VERSION}"
    src = base / f"kafka_python-{KAFKA_PYTHON_VERSION}"
    venv = base / "venv"
    if (base / ".complete").exists():
        return src, venv
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    f"kafka-python=={KAFKA_PYTHON_VERSION}", "-d", str(base)], check=True, timeout=600)
    with tarfile.open(base / f"kafka_python-{KAFKA_PYTHON_VERSION}.tar.gz") as tar:
        tar.extractall(base, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src),
                    "pytest", "pytest-mock", "pytest-timeout", "lz4", "python-snappy", "zstandard", "crc32c"],
                   check=True, timeout=900)
    (base / ".complete").write_text(KAFKA_PYTHON_VERSION + "\n")
    return src, venv


def junit_counts(path: Path) -> tuple[Counter, list[str]]:
    """pass/fail/skip counts (errors count as failed) and the failed tests of a JUnit XML file."""
    counts: Counter = Counter()
    failed = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            counts["fail"] += 1
            failed.append(name)
        elif case.find("skipped") is not None:
            counts["skip"] += 1
        else:
            counts["pass"] += 1
    return counts, failed


def run_kafka_python(bootstrap: str, args: argparse.Namespace) -> Counter:
    src, venv = _kafka_python_tree()
    first = bootstrap.split(",")[0]
    env = {**os.environ, "KAFKA_URI": f"kafka://{first}", "KAFKA_VERSION": "4.0.0"}
    report = CACHE / "kafka-python.xml"
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "test/integration", "-p", "no:cacheprovider", "-q",
           "--timeout=120", f"--junitxml={report}"]
    cmd += [f"--ignore=test/integration/{f}" for f in KAFKA_PYTHON_EXCLUDED if f.endswith(".py")]
    deselect = [t for t in KAFKA_PYTHON_EXCLUDED if "::" in t]
    cmd += [f"--deselect=test/integration/{t}" for t in deselect]
    if args.k:
        cmd += ["-k", args.k]
    log = CACHE / "kafka-python.log"
    with log.open("w") as out:
        subprocess.run(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    counts, failed = junit_counts(report)
    print(f"kafka-python {KAFKA_PYTHON_VERSION} test/integration (KAFKA_URI=kafka://{first}): "
          f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
          f"{len(KAFKA_PYTHON_EXCLUDED)} excluded", flush=True)
    for name in failed:
        print(f"  failed: {name}")
    for name, reason in KAFKA_PYTHON_EXCLUDED.items():
        print(f"  excluded: {name}: {reason}")
    print(f"  log: {log}")
    return counts


SUITES = {"franz-go": run_franz_go, "kafka-python": run_kafka_python}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=[*SUITES, "all"])
    ap.add_argument("--bootstrap", help="a running raftlog's Kafka bootstrap (default: start a 3-node one)")
    ap.add_argument("--run", help="franz-go: only the tests matching this regex (go test -run)")
    ap.add_argument("-k", help="kafka-python: only the tests matching this expression (pytest -k)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON on the last line")
    args = ap.parse_args()
    names = list(SUITES) if args.suite == "all" else [args.suite]
    totals: dict[str, dict[str, int]] = {}
    with raftlog_cluster(args.bootstrap) as bootstrap:
        for name in names:
            try:
                counts = SUITES[name](bootstrap, args)
            except ReferenceUnavailable as e:
                print(f"{name}: skipped: {e}", flush=True)
                continue
            totals[name] = {k: counts[k] for k in ("pass", "fail", "skip")}
    if args.json:
        print(json.dumps(totals, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

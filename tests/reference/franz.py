"""franz-go, the Go test peer of the conformance suite (issue 40): the pinned module
(`tests/go.mod`), the scenario program `tests/conformance/go/` built once, and franz-go's own
`pkg/kgo` integration tests run against a cluster through their seeds variable (KGO_SEEDS).

* Go's module and build caches live in `~/.cache/raftlog/go` (`RAFTLOG_GO_CACHE` moves them),
  outside the repo. The modules come from the Go module proxy (GOPROXY as set on the machine).
* No `go` binary, or a proxy that cannot be reached, is `ReferenceUnavailable` (one line, the
  tests skip); a build that fails is an error.
* `run_kgo_suite` returns the pass/fail/skip counts of `go test -json` and the names of the
  failed tests; the tests left out are named in `KGO_EXCLUDED` with their reasons.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_ref import ReferenceUnavailable

TESTS = Path(__file__).resolve().parent.parent
GO_MOD_DIR = TESTS  # tests/go.mod: module raftlog.tests
PROGRAM = TESTS / "conformance" / "go"
FRANZ_MODULE = "github.com/twmb/franz-go"
KGO_PACKAGE = f"{FRANZ_MODULE}/pkg/kgo"
BUILD_TIMEOUT_S = 900.0

# franz-go's own kgo tests that are not run against raftlog, each with its reason. The tests
# that check for a broker feature themselves (KIP-848, share groups, SCRAM/OAuth seeds) skip
# on their own and are counted as skipped.
KGO_EXCLUDED: dict[str, str] = {}

_NO_PROXY = ("dial tcp", "no such host", "connection refused", "i/o timeout", "network is unreachable",
             "TLS handshake timeout")


def cache_root() -> Path:
    return Path(os.environ.get("RAFTLOG_GO_CACHE") or Path.home() / ".cache" / "raftlog" / "go")


def go_bin() -> str:
    """The `go` command (PATH, then /usr/local/go/bin); ReferenceUnavailable without one."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise ReferenceUnavailable("no Go toolchain (go): franz-go's scenarios need it (https://go.dev/dl)")
    return go


def go_env() -> dict[str, str]:
    root = cache_root()
    return {**os.environ, "GOMODCACHE": str(root / "mod"), "GOCACHE": str(root / "build"),
            "GOPATH": str(root / "path"), "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def _go(*args: str, timeout_s: float = BUILD_TIMEOUT_S, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([go_bin(), *args], cwd=GO_MOD_DIR, env=env or go_env(), capture_output=True,
                          text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        text = done.stdout + done.stderr
        if any(marker in text for marker in _NO_PROXY):
            raise ReferenceUnavailable(f"the Go module proxy is not reachable: franz-go cannot be fetched ({text.strip()[-200:]})")
        raise RuntimeError(f"go {' '.join(args)} failed ({done.returncode}): {text[-1500:]}")
    return done


def ensure_modules() -> None:
    """Download the pinned modules of tests/go.mod (and go.sum's) into the cache, once."""
    _go("mod", "download", "all")


def franz_client() -> Path:
    """The built scenario program, cached under the hash of its sources and go.mod/go.sum."""
    digest = hashlib.sha256()
    for path in [GO_MOD_DIR / "go.mod", GO_MOD_DIR / "go.sum", *sorted(PROGRAM.glob("*.go"))]:
        digest.update(path.read_bytes())
    binary = cache_root() / "bin" / f"franzclient-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    ensure_modules()
    binary.parent.mkdir(parents=True, exist_ok=True)
    part = binary.with_name(binary.name + ".part")
    _go("build", "-o", str(part), "./conformance/go")
    part.rename(binary)
    return binary


def franz(*args: str, timeout_s: float = 240.0) -> Any:
    """Run one scenario of tests/conformance/go (built once); its JSON answer."""
    done = subprocess.run([str(franz_client()), *args], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"franzclient {args[0]} failed ({done.returncode}): {done.stderr[-1500:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class SuiteResult:
    """What one run of a client's own test suite gave."""

    suite: str
    counts: Counter = field(default_factory=Counter)  # "pass" / "fail" / "skip" -> tests
    failed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # test -> the reason it printed
    excluded: dict[str, str] = field(default_factory=dict)  # test -> why we left it out
    log_path: Path | None = None

    def summary(self) -> str:
        return (f"{self.suite}: {self.counts['pass']} passed, {self.counts['fail']} failed, "
                f"{self.counts['skip']} skipped, {len(self.excluded)} excluded")


def parse_go_test_json(lines: list[str], suite: str) -> SuiteResult:
    """Counts of top-level tests from `go test -json` output (subtests are part of their test)."""
    result = SuiteResult(suite)
    last_output: dict[str, str] = {}
    for line in lines:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        test = event.get("Test")
        if not test or "/" in test:
            continue
        action = event.get("Action")
        if action == "output":
            text = event.get("Output", "").strip()
            if text and not text.startswith(("=== ", "--- ")):
                last_output[test] = text
        elif action in ("pass", "fail", "skip"):
            result.counts[action] += 1
            if action == "fail":
                result.failed.append(test)
            elif action == "skip":
                result.skipped[test] = last_output.get(test, "")[-160:]
    return result


def run_kgo_suite(seeds: str, *, run: str | None = None, records: int = 20_000, timeout_s: float = 3600.0,
                  log_path: Path | None = None) -> SuiteResult:
    """franz-go's own pkg/kgo tests against `seeds` (KGO_SEEDS), the unit tests with them, every
    test of KGO_EXCLUDED left out (`-skip`). `run` narrows it to a regex of test names; an
    excluded test that `run` names runs."""
    ensure_modules()
    env = {**go_env(), "KGO_SEEDS": seeds, "KGO_TEST_RF": "3", "KGO_TEST_RECORDS": str(records),
           "KGO_LOG_LEVEL": "none"}
    args = ["test", "-json", "-count=1", "-p", "1", f"-timeout={int(timeout_s)}s", KGO_PACKAGE]
    if run:
        args += ["-run", run]
    skipped = sorted(name for name in KGO_EXCLUDED if not (run and re.search(run, name)))
    if skipped:
        args += ["-skip", "^(" + "|".join(skipped) + ")$"]
    with tempfile.TemporaryDirectory(prefix="kgo-suite-") as tmp:
        log = log_path or Path(tmp) / "go-test.json"
        with log.open("w") as out:  # streamed: a long run can be followed with tail -f
            # Its own process group: go runs the test binary as a child, and both are stopped
            # by the group's id when the run times out or is interrupted.
            proc = subprocess.Popen([go_bin(), *args], cwd=GO_MOD_DIR, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                returncode = proc.wait(timeout_s + 300)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        lines = log.read_text(errors="replace").splitlines()
    result = parse_go_test_json(lines, f"franz-go pkg/kgo (KGO_SEEDS={seeds})")
    if not result.counts and returncode != 0:
        raise RuntimeError(f"go test {KGO_PACKAGE} did not run: {' '.join(lines[-20:])[-1500:]}")
    result.excluded = {name: reason for name, reason in KGO_EXCLUDED.items() if run is None}
    result.log_path = log_path
    return result


def main() -> int:
    """`python tests/reference/franz.py fetch`: the modules and the scenario program, once; one
    line and exit 0 on a machine without Go or the module proxy (the tests skip there)."""
    try:
        print(f"franz-go scenario program: {franz_client()}")
    except ReferenceUnavailable as e:
        print(f"franz-go skipped: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Running the documentation's code blocks against a test cluster (README.md and the docs site).

A block is marked to run by the HTML comment on the line before its fence: README uses
`<!-- readme-test: run -->`, the docs pages `<!-- docs-test: run -->`. Blocks run as written;
only the default addresses of node 1 (`127.0.0.1:9093` native, `127.0.0.1:9092` Kafka) become
the test cluster's, and `raftlog` is the venv's. Shell blocks run under `bash -e -o pipefail`
in a session of their own, killed whole on a timeout; Python blocks in a fresh interpreter.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE_ADDRESS = "127.0.0.1:9093"
KAFKA_ADDRESS = "127.0.0.1:9092"


def marked_blocks(path: Path, marker: str) -> list[tuple[str, str]]:
    """(language, code) of every block of `path` marked `<!-- {marker} -->`, in page order."""
    pattern = re.compile(rf"<!-- {re.escape(marker)} -->\n```(\w+)\n(.*?)```", re.S)
    return pattern.findall(path.read_text())


def env(cluster) -> dict[str, str]:
    result = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    result["RAFTLOG_BOOTSTRAP"] = ",".join(cluster.bootstrap())
    result["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{result.get('PATH', '')}"  # `raftlog`
    result["PYTHONPATH"] = str(ROOT)  # the storage example imports partition/ from the checkout
    return result


def with_cluster_addresses(cluster, code: str) -> str:
    return code.replace(NATIVE_ADDRESS, ",".join(cluster.bootstrap())).replace(KAFKA_ADDRESS,
                                                                                cluster.kafka_bootstrap())


def run_python(cluster, code: str, cwd: Path) -> str:
    """Runs `code` with the cluster's addresses; asserts it exits 0; returns what it printed."""
    code = with_cluster_addresses(cluster, code)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(cluster),
                          cwd=cwd, timeout=120)
    assert done.returncode == 0, (code, done.stdout, done.stderr)
    return done.stdout


def run_shell(script: str, environment: dict[str, str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """bash -e -o pipefail -c `script` in a session of its own: on a timeout the shell and
    every command it started are killed (by the session's process group), none left behind."""
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the block did not finish within {timeout_s} s:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

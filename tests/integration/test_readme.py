"""Issue 20, "README's Python examples print nothing": the README blocks marked `<!-- readme-test: run -->` (the CLI quickstart, the blocking and trio client examples, the storage engine) run as written against a real three-node cluster (only the address 127.0.0.1:9093 is swapped for the test cluster's nodes) and print what they show; the blocking example leaves its group, so a second run starts at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path


README = Path(__file__).resolve().parents[2] / "README.md"
MARKED = re.compile(r"<!-- readme-test: run -->\n```(\w+)\n(.*?)```", re.S)
README_ADDRESS = "127.0.0.1:9093"


def marked_blocks() -> list[tuple[str, str]]:
    """(language, code) of every block marked to run, in README order."""
    return MARKED.findall(README.read_text())


def test_the_marked_blocks_are_the_examples():
    kinds = [lang for lang, _ in marked_blocks()]
    assert kinds == ["sh", "python", "python", "python"], kinds


def _env(cluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    env["RAFTLOG_BOOTSTRAP"] = ",".join(cluster.bootstrap())
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `raftlog`
    env["PYTHONPATH"] = str(README.parent)  # the storage example imports partition/ from the checkout
    return env


def run_python(cluster, code: str, cwd: Path) -> str:
    code = code.replace(README_ADDRESS, ",".join(cluster.bootstrap()))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(cluster),
                          cwd=cwd, timeout=120)
    assert done.returncode == 0, (code, done.stdout, done.stderr)
    return done.stdout


def run_shell(script: str, env: dict[str, str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """bash -e -o pipefail -c `script` in a session of its own: on a timeout the shell and
    every command it started are killed (by the session's process group), none left behind."""
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the README block did not finish within {timeout_s} s:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_readme_examples_print_what_they_show(cluster, tmp_path):
    (quickstart_lang, quickstart), blocking, aio, storage = marked_blocks()
    shell = run_shell(quickstart, _env(cluster), tmp_path, timeout_s=300)
    assert shell.returncode == 0, (shell.stdout, shell.stderr)
    out = shell.stdout
    assert "created topic demo" in out and "PARTITION  LEADER" in out, out
    kv = [line for line in out.splitlines() if line.count("\t") == 1 and line.split("\t")[0] in ("foo", "bar")]
    # The consume --format kv of the three records: in order per key (one partition), any order across.
    assert sorted(kv) == ["bar\tfirst", "foo\tfirst", "foo\tsecond"], out
    assert kv.index("foo\tfirst") < kv.index("foo\tsecond"), out
    assert "group demo-group" in out and "controller  node" in out, out
    assert "records/s" in out + shell.stderr

    first = run_python(cluster, blocking[1], tmp_path)
    assert re.search(r"^sent hello to demo-\d+ at offset \d+$", first, re.M), first
    assert re.search(r"^read demo-\d+ offset \d+: b'k' b'hello'$", first, re.M), first
    members = json.loads(subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "describe", "readme",
                                         "--json"], capture_output=True, text=True, env=_env(cluster),
                                        timeout=60).stdout)["members"]
    assert members == []  # it left the group: a second run does not wait out a session timeout
    second = run_python(cluster, blocking[1], tmp_path)
    sent_second = re.search(r"^sent hello to demo-(\d+) at offset (\d+)$", second, re.M).groups()
    read_second = re.findall(r"^read demo-(\d+) offset (\d+): b'k' b'hello'$", second, re.M)
    assert read_second == [sent_second], second  # only the new record: the first run committed its own

    printed = run_python(cluster, aio[1], tmp_path)
    assert printed.startswith("assigned [") and re.search(r"^\d+ \d+ b'hello'$", printed, re.M), printed

    assert run_python(cluster, storage[1], tmp_path) == "0 0 [(0, b'k', b'hello')]\n"


def test_status_figures_say_how_they_were_measured():
    """Why: "README's status table says `scripts/bench e2e` gives ~260k records/s produced, ~790k
    consumed and p99 13 ms ... A figure a reader cannot reproduce is worse than none: restate
    each with the command, the machine and the load". Every row of the status table that gives
    a figure names its `scripts/bench` command, the machine (its cores) and the load."""
    text = README.read_text()
    table = text[text.index("## Status"):text.index("\n## ", text.index("## Status") + 1)]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    body = table.split("| feature | state |")[1].strip()
    assert len(rows) >= 10 and "\n\n" not in body, table  # one table: a blank line would end it
    figures = [row for row in rows if re.search(r"\d[\d,.]*\s*(k|M)?\s*records/s|\bp99\b|\d+ ms\b", row)]
    assert len(figures) >= 2, rows
    for row in figures:
        assert re.search(r"`scripts/bench \w+", row), row
        assert re.search(r"\b\d+-core\b|\b\d+ cores\b", row), row
        assert re.search(r"\bload (average )?~?\d", row), row


def test_ports_table_is_the_nodes_defaults():
    """Why: "README never names the HTTP port". README's Ports table gives every listener's
    default port as `raftlog node start` uses it, and `cluster up`'s node 1 has the same."""
    from raftlog.cli.cluster import DEFAULT_BASE_PORT, PORT_STRIDE, NodePorts
    from raftlog.node.config import Listeners

    text = README.read_text()
    section = text[text.index("### Ports"):text.index("\n### ", text.index("### Ports") + 1)]
    table = {name: int(port) for name, port in
             re.findall(r"^\| (kafka|client|peer|quorum|http) \| (\d+) \|", section, re.M)}
    names = ("kafka", "client", "peer", "quorum", "http")
    assert table == {name: getattr(Listeners(), name).port for name in names}, table
    node_1 = NodePorts.from_base(DEFAULT_BASE_PORT, 0)
    assert table == {name: getattr(node_1, name) for name in names}, node_1
    assert f"base + {PORT_STRIDE}*(i-1)" in section and f"(base {DEFAULT_BASE_PORT})" in section, section
    assert "`GET /metrics`" in section, section

"""Issue 20, "README's Python examples print nothing", and issue 47: the README blocks marked `<!-- readme-test: run -->` (the CLI quickstart, the blocking client, a Kafka client) run as written against a real three-node cluster (only node 1's addresses 127.0.0.1:9093 and :9092 are swapped for the test cluster's) and print what they show; the blocking example leaves its group, so a second run starts at once. README stays the newcomer's first two screens and links into the docs site, where the status figures and the ports table moved."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import doc_blocks
from doc_blocks import run_python, run_shell

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
STATUS = ROOT / "docs" / "explanations" / "status.md"
LIMITS = ROOT / "docs" / "reference" / "limits.md"
SCREEN_LINES = 120  # two screens of a laptop's terminal (60 lines each); issues 40 and 46 put
# the compatibility matrix and the table beside Kafka in README too


def marked_blocks() -> list[tuple[str, str]]:
    """(language, code) of every block marked to run, in README order."""
    return doc_blocks.marked_blocks(README, "readme-test: run")


def test_the_marked_blocks_are_the_examples():
    kinds = [lang for lang, _ in marked_blocks()]
    assert kinds == ["sh", "python", "python"], kinds


def test_readme_fits_two_screens_and_links_into_the_site():
    text = README.read_text()
    assert text.count("\n") <= SCREEN_LINES, text.count("\n")
    for command in ("scripts/quorum", "scripts/test", "scripts/docs"):
        assert command in text, command
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 10, links
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, missing
    table = [line for line in text[text.index("## What works"):].splitlines() if line.startswith("| ")]
    visible = [re.sub(r"\]\([^)]*\)", "]", line) for line in table]  # as read, without link targets
    assert len(table) >= 12 and all(len(line) <= 220 for line in visible), visible  # one short line per row


def _env(cluster) -> dict[str, str]:
    return doc_blocks.env(cluster)


def test_readme_examples_print_what_they_show(cluster, tmp_path):
    (quickstart_lang, quickstart), blocking, kafka = marked_blocks()
    shell = run_shell(quickstart, _env(cluster), tmp_path, timeout_s=300)
    assert shell.returncode == 0, (shell.stdout, shell.stderr)
    out = shell.stdout
    assert "created topic demo" in out and "PARTITION  LEADER" in out, out
    kv = [line for line in out.splitlines() if line.count("\t") == 1 and line.split("\t")[0] in ("foo", "bar")]
    # The consume --format kv of the three records: in order per key (one partition), any order across.
    assert sorted(kv) == ["bar\tfirst", "foo\tfirst", "foo\tsecond"], out
    assert kv.index("foo\tfirst") < kv.index("foo\tsecond"), out
    assert "group demo-group" in out and "controller  node" in out, out

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

    printed = run_python(cluster, kafka[1], tmp_path)
    assert re.fullmatch(r"demo \d \d+ b'(hello|from kafka)'\n", printed), printed


def test_status_figures_say_how_they_were_measured():
    """Why: "README's status table says `scripts/bench e2e` gives ~260k records/s produced, ~790k
    consumed and p99 13 ms ... A figure a reader cannot reproduce is worse than none: restate
    each with the command, the machine and the load". Every row of the status table that gives
    a figure names its `scripts/bench` command, the machine (its cores) and the load. The table
    moved from README to the docs site (issue 47)."""
    text = STATUS.read_text()
    table = text[text.index("| feature | state |"):]
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
    """Why: "README never names the HTTP port". The Ports table (docs/reference/limits.md) gives every listener's
    default port as `raftlog node start` uses it, and `cluster up`'s node 1 has the same."""
    from raftlog.cli.cluster import DEFAULT_BASE_PORT, PORT_STRIDE, NodePorts
    from raftlog.node.config import Listeners

    text = LIMITS.read_text()  # moved from README's "### Ports" (issue 47)
    section = text[text.index("## Ports"):text.index("\n## ", text.index("## Ports") + 1)]
    table = {name: int(port) for name, port in
             re.findall(r"^\| (kafka|client|peer|quorum|http) \| (\d+) \|", section, re.M)}
    names = ("kafka", "client", "peer", "quorum", "http")
    assert table == {name: getattr(Listeners(), name).port for name in names}, table
    node_1 = NodePorts.from_base(DEFAULT_BASE_PORT, 0)
    assert table == {name: getattr(node_1, name) for name in names}, node_1
    assert f"base + {PORT_STRIDE}*(i-1)" in section and f"(base {DEFAULT_BASE_PORT})" in section, section
    assert "`GET /metrics`" in section, section

"""Issue 20, the smaller "Why" lines, on a real one-node cluster: records over 1 MiB can be sent once the limits are raised and every limit's error names how to raise it; `groups describe` of an unknown group and an out-of-range `--offset` fail (exit 1) saying why; `topics create` makes topics shaped as `produce` auto-creates them; `groups`, `node start` and `scripts/jepsen run` explain themselves in --help."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

import node_harness as harness

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
NODE_LIMIT = 2 << 20  # the node's max_frame_bytes here: 2 MiB


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    settings = {**harness.TEST_SETTINGS, "max_frame_bytes": NODE_LIMIT}
    with harness.NodeCluster(tmp_path_factory.mktemp("small"), size=1, settings=settings) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        yield cluster


def cli(node, *args: str, stdin: bytes | str | None = None, check: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    env["RAFTLOG_BOOTSTRAP"] = node.client(1)
    text = not isinstance(stdin, bytes)
    process = subprocess.run([*RAFTLOG, *args], input=stdin, capture_output=True, text=text, env=env, timeout=120)
    if check:
        assert process.returncode == 0, process
    return process


def error_line(process: subprocess.CompletedProcess) -> str:
    err = process.stderr if isinstance(process.stderr, str) else process.stderr.decode()
    assert process.returncode == 1 and "Traceback" not in err, process
    return err.strip().splitlines()[-1]


def test_record_limits_can_be_raised_and_say_how(node):
    """Why: "records over 1 MiB cannot be sent and no flag or config says how to raise the limit"."""
    record = b"x" * (1536 << 10) + b"\n"  # 1.5 MiB
    cli(node, "topics", "create", "plain", check=True)
    client_side = error_line(cli(node, "produce", "plain", stdin=record))
    assert "max_request_bytes" in client_side and "raftlog produce --max-request-bytes" in client_side, client_side
    broker_side = error_line(cli(node, "produce", "plain", "--max-request-bytes", str(NODE_LIMIT - 8192),
                                 stdin=record))
    assert "max_message_bytes" in broker_side and "raftlog topics alter plain --set max_message_bytes=" in broker_side
    # Raised on the topic as the error (and README's Limits table) says, the CLI's producer
    # follows the topic's limit by itself.
    cli(node, "topics", "alter", "plain", "--set", f"max_message_bytes={NODE_LIMIT}", check=True)
    sent = cli(node, "produce", "plain", stdin=record)
    assert sent.returncode == 0, sent
    got = cli(node, "consume", "plain", "--from-beginning", "--max-messages", "1", "--timeout-ms", "20000")
    assert got.returncode == 0 and got.stdout == record.decode(), (got.returncode, len(got.stdout))
    # Over the node's own limit: the client knows it from metadata and names the node's flag.
    cli(node, "topics", "create", "huge", "-c", "max_message_bytes=8388608", check=True)
    node_side = error_line(cli(node, "produce", "huge", stdin=b"y" * (NODE_LIMIT + 1024) + b"\n"))
    assert "node's limit" in node_side and "raftlog node start --max-request-bytes" in node_side, node_side


def test_unknown_group_and_out_of_range_offset_fail(node):
    """Why: "`groups describe` of an unknown group exits 0; an out-of-range `--offset` prints
    nothing and exits 0"."""
    line = error_line(cli(node, "groups", "describe", "no-such-group"))
    assert "unknown group 'no-such-group'" in line, line
    cli(node, "topics", "create", "numbers", "--partitions", "1", check=True)
    cli(node, "produce", "numbers", stdin="1\n2\n3\n", check=True)
    line = error_line(cli(node, "consume", "numbers", "--partition", "0", "--offset", "1000", "--max-messages", "1"))
    assert "--offset 1000 is out of range" in line and "numbers-0 has offsets" in line, line
    # In range: the records from there.
    described = json.loads(cli(node, "topics", "describe", "numbers", "--json", check=True).stdout)
    assert described["numbers"]["partitions"][0]["leader"] == 1
    end = int(line.split("..")[1].split()[0])
    ok = cli(node, "consume", "numbers", "--partition", "0", "--offset", str(end - 1), "--max-messages", "1",
             "--timeout-ms", "10000")
    assert ok.returncode == 0 and ok.stdout == "3\n", ok


def test_topics_create_defaults_match_auto_creation(node):
    """Why: "`topics create` defaults to 1 partition / RF 1 while auto-create uses 3/3"."""
    created = json.loads(cli(node, "topics", "create", "shaped", "--json", check=True).stdout)
    cli(node, "produce", "auto-made", stdin="a\n", check=True)
    auto = json.loads(cli(node, "topics", "describe", "auto-made", "--json", check=True).stdout)["auto-made"]
    shape = [(len(t["partitions"]), len(t["partitions"][0]["replicas"])) for t in (created, auto)]
    assert shape == [(3, 1), (3, 1)]  # 3 partitions, RF min(3, live brokers) with one broker


def test_help_explains_groups_node_start_and_jepsen():
    """Why: "`groups` commands have no examples in --help; `scripts/jepsen run --help` leaves
    options undescribed" and "`raftlog node start --help` has no flags for voters, peers or the
    advertised host; its own example `--client 0.0.0.0:9092` fails"."""
    for command in (["groups"], ["groups", "list"], ["groups", "describe"], ["groups", "reset-offsets"],
                    ["groups", "delete"]):
        text = subprocess.run([*RAFTLOG, *command, "--help"], capture_output=True, text=True, check=True).stdout
        assert "raftlog groups" in text.split("Options:")[0], command
    node_help = subprocess.run([*RAFTLOG, "node", "start", "--help"], capture_output=True, text=True,
                               check=True).stdout
    for flag in ("--voters", "--controller-peers", "--advertised-host", "--host", "--cluster-secret-file",
                 "--max-request-bytes"):
        assert flag in node_help, flag
    assert "--client 0.0.0.0:9093 --advertised-host" in node_help

    from jepsen_style_tests.__main__ import _parser

    run = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    undescribed = [a.option_strings for a in run._actions if a.option_strings and not a.help]
    assert undescribed == []

"""Issue 20, several hosts: README's three-host example, run as written in three Linux network namespaces (one address each on a bridge, from 198.18.0.0/15, no route out), node 1 configured by flags, node 2 by environment and node 3 by node.toml, forms a cluster on the default ports (plaintext, allowed explicitly: the client's TLS/SASL is issue 16's); no node binds or advertises 127.0.0.1; produce, consume and a leader kill work across them. Skipped (with the reason) where namespaces cannot be made."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from raftlog.cli.cluster import stop_all

import node_harness as harness
from netns_hosts import NamespacedNode, made_or_skip, wait_for

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
# The example moved from README to the docs site (issue 47); the blocks keep their markers.
README = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "several-hosts.md"
NODES = 3
SETTINGS = {"RAFTLOG_HEARTBEAT_MS": "300", "RAFTLOG_SESSION_TIMEOUT_MS": "2000"}


@pytest.fixture
def hosts():
    with made_or_skip(NODES) as made:
        yield made


def readme_host_blocks() -> dict[str, str]:
    """README's blocks marked `<!-- readme-test: hosts -->` and `host N`, by marker."""
    marked = re.findall(r"<!-- readme-test: (hosts|host \d) -->\n```\w+\n(.*?)```", README.read_text(), re.S)
    return dict(marked)


def cli(bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    return subprocess.run([*RAFTLOG, *args, "--bootstrap", bootstrap], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


def test_three_hosts(hosts, tmp_path):
    """README's three-host example, run as written: only its addresses 10.0.0.1-3 become the
    namespaces' and /var/lib/raftlog a directory per node."""
    blocks = readme_host_blocks()
    assert sorted(blocks) == ["host 1", "host 2", "host 3", "hosts"], sorted(blocks)

    def as_here(text: str, node_id: int | None = None) -> str:
        for i, ip in enumerate(hosts.ips, 1):
            text = text.replace(f"10.0.0.{i}", ip)
        if node_id is not None:
            text = text.replace("/var/lib/raftlog", str(tmp_path / f"node-{node_id}"))
        return text

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")} | SETTINGS
    base_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base_env.get('PATH', '')}"  # `raftlog`
    made = subprocess.run(["bash", "-e", "-c", blocks["hosts"]], cwd=tmp_path, env=base_env, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made
    cluster_id = (tmp_path / "cluster-id").read_text().strip()
    secret = (tmp_path / "secret").read_text().strip()
    assert cluster_id and len(secret) >= 32 and (tmp_path / "secret").stat().st_mode & 0o077 == 0

    nodes: dict[int, NamespacedNode] = {}
    for i in (1, 2):  # host 1 by flags, host 2 by environment: shell blocks ending in `raftlog node start`
        script = re.sub(r"^raftlog node start", "exec raftlog node start", as_here(blocks[f"host {i}"], i),
                        flags=re.M)
        assert "exec raftlog node start" in script, script
        nodes[i] = NamespacedNode(i, hosts.namespaces[i - 1], tmp_path / "unused.toml", tmp_path / f"node-{i}.log",
                                  env=base_env, script=f"cd {shlex.quote(str(tmp_path))}\n{script}")
    # Host 3 by node.toml, with the two files' contents in place of CLUSTER_ID and SECRET.
    toml = tmp_path / "node.toml"
    toml.write_text(as_here(blocks["host 3"], 3).replace('"CLUSTER_ID"', json.dumps(cluster_id))
                    .replace('"SECRET"', json.dumps(secret)))
    os.chmod(toml, 0o600)
    nodes[3] = NamespacedNode(3, hosts.namespaces[2], toml, tmp_path / "node-3.log", env=base_env,
                              script=f"exec raftlog node start --config {shlex.quote(str(toml))}")
    bootstrap = ",".join(f"{ip}:9093" for ip in hosts.ips)
    try:
        for node in nodes.values():
            node.start()

        def ready():
            status = harness.ok(harness.raw_call(f"{hosts.ips[0]}:9093", "cluster_status", timeout_s=5))
            unfenced = [b for b in status["brokers"] if not b["fenced"]]
            return status if status.get("controller_id") is not None and len(unfenced) == NODES else None
        status = wait_for(nodes, ready, 60, "three registered brokers")

        # Nothing binds or advertises 127.0.0.1 (or a wildcard).
        for ns, ip in zip(hosts.namespaces, hosts.ips):
            bound = hosts.listeners(ns)
            # 9092-9096 and the Schema Registry beside http (9097, its default).
            assert sorted(bound) == sorted(f"{ip}:{port}" for port in range(9092, 9098)), (ns, bound)
        advertised = json.dumps(status)
        assert "127.0.0.1" not in advertised and "0.0.0.0" not in advertised, advertised
        for b in status["brokers"]:
            assert (b["host"], b["kafka"]) == (hosts.ips[b["id"] - 1], f"{hosts.ips[b['id'] - 1]}:9092")

        created = cli(bootstrap, "topics", "create", "events", "--partitions", "3", "--replication-factor", "3")
        assert created.returncode == 0, created
        first = "".join(f"a{i}\n" for i in range(100))
        produced = cli(bootstrap, "produce", "events", stdin=first)
        assert produced.returncode == 0, produced

        # Kill the leader of partition 0 (SIGKILL by PID); the others carry on.
        topic = json.loads(cli(bootstrap, "topics", "describe", "events", "--json").stdout)["events"]
        leader = topic["partitions"][0]["leader"]
        nodes[leader].kill()
        survivors = ",".join(f"{hosts.ips[i - 1]}:9093" for i in nodes if i != leader)

        def produced_again():
            done = cli(survivors, "produce", "events", "--key-separator", ":",
                       stdin="".join(f"k{i}:b{i}\n" for i in range(100)))
            return done if done.returncode == 0 else None
        wait_for(nodes, produced_again, 60, "a produce after the leader kill")
        consumed = cli(survivors, "consume", "events", "--from-beginning", "--max-messages", "200",
                       "--timeout-ms", "20000")
        assert consumed.returncode == 0, consumed
        values = consumed.stdout.split()
        assert sorted(values) == sorted([f"a{i}" for i in range(100)] + [f"b{i}" for i in range(100)])
    finally:
        stop_all(nodes.values())

"""The metadata quorum's voter in its own process (issue 46, raftlog/node/quorum_process.py):
each node runs one child, the child dies with its node, and a node whose child dies stops (and
comes back whole on restart), checked by pid on real nodes."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

import node_harness as harness
from metadata.quorum import QuorumBindError
from raftlog.base.errors import RaftlogError
from raftlog.node.metadata_quorum import MetadataQuorum, QuorumConfig


_CHILD_MODULE = b"raftlog.node.quorum_process"


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _quorum_children(parent_pid: int) -> list[int]:
    """The pids of `parent_pid`'s live quorum processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == parent_pid and _CHILD_MODULE in cmdline and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _child_of(cluster: harness.NodeCluster, node_id: int) -> int:
    pid = cluster.processes[node_id].pid
    assert pid is not None
    children = cluster.wait_for(lambda: _quorum_children(pid), 30, f"node {node_id}'s quorum process")
    assert len(children) == 1, children
    return children[0]


def _topics(cluster: harness.NodeCluster, node_id: int) -> set[str]:
    return {t["name"] for t in cluster.call(node_id, "metadata")["topics"]}


def _create_topic(cluster: harness.NodeCluster) -> Callable[[], bool]:
    def create() -> bool:  # retried on the retriable errors of a fresh cluster
        try:
            cluster.call(1, "create_topic", name="qp-t", partitions=1, replication_factor=3, configs={})
        except RaftlogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
        return True
    return create


def _restart(cluster: harness.NodeCluster, node_id: int) -> None:
    cluster.start(node_id)
    cluster.wait_ready(timeout_s=90)
    _child_of(cluster, node_id)


@pytest.mark.cluster
def test_every_voter_runs_one_quorum_process_that_commits(cluster: harness.NodeCluster) -> None:
    children = {n: _child_of(cluster, n) for n in cluster.live()}
    assert len(set(children.values())) == 3
    status = cluster.wait_ready(timeout_s=60)
    assert status["controller_id"] in children
    # The quorum works through the children: a topic's creation is a committed command.
    cluster.wait_for(_create_topic(cluster), 60, "a created topic")
    for n in children:
        cluster.wait_for(lambda n=n: "qp-t" in _topics(cluster, n), 60, f"qp-t on node {n}")


@pytest.mark.cluster
def test_sigkill_of_the_quorum_process_stops_its_node_and_a_restart_recovers(
        cluster: harness.NodeCluster) -> None:
    victim = 2
    child = _child_of(cluster, victim)
    os.kill(child, signal.SIGKILL)
    process = cluster.processes[victim]
    cluster.wait_for(lambda: not process.alive(), 60, "node 2 to stop after its quorum process died")
    assert process.returncode() not in (0, None)
    log = (cluster.configs[victim].data_dir / "node.log").read_text()
    assert "event=quorum_process_exited" in log and f"pid={child}" in log
    # The other two keep a quorum and a controller meanwhile.
    cluster.wait_for(lambda: cluster.controller_id(1) in (1, 3), 60, "a controller among 1 and 3")
    _restart(cluster, victim)
    cluster.wait_for(lambda: "qp-t" in _topics(cluster, victim), 60, "qp-t replayed on node 2")


@pytest.mark.cluster
def test_sigkill_of_a_node_leaves_no_quorum_process(cluster: harness.NodeCluster) -> None:
    victim = 3
    child = _child_of(cluster, victim)
    cluster.kill(victim)
    cluster.wait_for(lambda: not _alive(child), 30, f"quorum process {child} to die with node 3")
    _restart(cluster, victim)
    assert child not in _quorum_children(cluster.processes[victim].pid or 0)


@pytest.mark.cluster
def test_sigterm_of_a_node_closes_its_quorum_process(cluster: harness.NodeCluster) -> None:
    victim = 1
    child = _child_of(cluster, victim)
    assert cluster.terminate(victim) == 0  # a clean stop closes the child before the node exits
    assert not _alive(child)
    log = (cluster.configs[victim].data_dir / "node.log").read_text()
    assert "event=quorum_process_exited" not in log
    _restart(cluster, victim)


async def test_a_taken_port_is_the_child_s_bind_error_and_leaves_no_child(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with taken:
        config = QuorumConfig(node_id=1, self_address=f"127.0.0.1:{taken.getsockname()[1]}", peers={},
                              data_dir=tmp_path, password="secret")
        quorum = MetadataQuorum(config, on_commit=lambda i, c: None, on_leader_change=lambda *a: None)
        with pytest.raises(QuorumBindError, match="cannot bind"):
            await quorum.run()
    assert _quorum_children(os.getpid()) == []

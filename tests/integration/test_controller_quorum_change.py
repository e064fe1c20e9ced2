"""The metadata quorum's voters change on a running cluster (issue 44): of three controller
nodes the quorum's leader is killed; the others remove it and add a new node in its place,
which then carries the quorum through a second leader failure and survives restarts. Bad
changes (one that would lose the quorum, a duplicate voter) are refused and change nothing.
A removed voter, still running, sees no controller: `raftlog cluster status` asked through it
asks the other nodes and shows the controller. Real node processes on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import node_harness as harness
from raftlog.base.errors import InvalidRequestError

pytestmark = pytest.mark.cluster


def _voters(cluster: harness.NodeCluster, node_id: int) -> list[int]:
    _, health = cluster.health(node_id)
    return sorted(int(v) for v in health["metadata"]["quorum"]["voters"])


def _controller_among(cluster: harness.NodeCluster, candidates: list[int]) -> int | None:
    for node_id in candidates:
        controller = cluster.controller_id(node_id)
        if controller in candidates:
            return controller
    return None


def _topic_names(cluster: harness.NodeCluster, node_id: int) -> set[str]:
    return {t["name"] for t in cluster.call(node_id, "metadata")["topics"]}


def test_replace_a_controller_while_the_quorum_leader_is_killed(tmp_path):
    with harness.NodeCluster(tmp_path, 3) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        cluster.call(1, "create_topic", name="before", partitions=1, replication_factor=3)
        leader = cluster.wait_for(lambda: cluster.controller_id(1), 30, "a controller")

        cluster.kill(leader)
        survivors = [n for n in (1, 2, 3) if n != leader]
        new_leader = cluster.wait_for(lambda: _controller_among(cluster, survivors), 60, "a new controller")
        other = next(n for n in survivors if n != new_leader)

        # Removing the other live voter would leave the leader alone with a dead one: refused.
        with pytest.raises(InvalidRequestError, match="quorum would be lost"):
            cluster.call(other, "remove_controller", voter_id=other)
        assert _voters(cluster, other) == [1, 2, 3]

        # Asked again while the new leader's log is not all committed (UNSETTLED, nothing proposed).
        voters = cluster.wait_for(lambda: cluster.call(other, "remove_controller", voter_id=leader), 60,
                                  "the removal")["voters"]
        assert sorted(map(int, voters)) == survivors
        cluster.wait_for(lambda: _voters(cluster, other) == survivors, 30, "the removal on the follower")

        config = cluster.add_controller_node(4, voters=[*survivors, 4])
        with pytest.raises(InvalidRequestError, match="already a voter"):
            cluster.call(other, "add_controller", voter_id=new_leader, quorum_address="127.0.0.1:1")
        answer = cluster.wait_for(lambda: cluster.call(other, "add_controller", voter_id=4,
                                                       quorum_address=str(config.listeners.quorum)), 60, "the addition")
        assert sorted(map(int, answer["voters"])) == [*survivors, 4]
        # The new voter caught up: the whole log, hence the topic made before it existed.
        cluster.wait_for(lambda: _voters(cluster, 4) == [*survivors, 4], 60, "node 4 to see itself a voter")
        cluster.wait_for(lambda: "before" in _topic_names(cluster, 4), 60, "node 4's image")
        cluster.wait_ready(timeout_s=60, brokers=[*survivors, 4])
        cluster.call(4, "create_topic", name="after", partitions=1, replication_factor=3)

        # A second leader failure: the two voters left (one of them the new node) elect one.
        cluster.kill(new_leader)
        remaining = [other, 4]
        third = cluster.wait_for(lambda: _controller_among(cluster, remaining), 60, "a controller of the new set")
        assert third in remaining
        cluster.call(other, "create_topic", name="after-failover", partitions=1, replication_factor=2)

        # A restart keeps the log's voters, not the config file's 1, 2, 3.
        cluster.start(new_leader)
        cluster.wait_for(lambda: _voters(cluster, new_leader) == [*survivors, 4], 60, "the restarted voter's set")
        cluster.wait_for(lambda: {"before", "after", "after-failover"} <= _topic_names(cluster, new_leader), 60,
                         "the restarted voter's image")
        actives = [n for n in cluster.live() if cluster.health(n)[1]["metadata"].get("active_controller")]
        assert len(actives) == 1 and actives[0] in [*survivors, 4]
        assert cluster.status(4)["controller_id"] == actives[0]


def _status_cli(*bootstrap: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    out = subprocess.run([sys.executable, "-m", "raftlog.cli", "cluster", "status", "--json",
                          "--bootstrap", ",".join(bootstrap)], capture_output=True, text=True, env=env, timeout=60)
    return out.returncode, json.loads(out.stdout)


def test_cluster_status_through_a_removed_voter_names_the_controller(tmp_path):
    with harness.NodeCluster(tmp_path, 3) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        config = cluster.add_controller_node(4, voters=[1, 2, 3, 4])
        cluster.wait_for(lambda: cluster.call(1, "add_controller", voter_id=4,
                                              quorum_address=str(config.listeners.quorum)), 60, "the addition")
        cluster.wait_for(lambda: _voters(cluster, 4) == [1, 2, 3, 4], 60, "node 4 to see itself a voter")
        cluster.wait_ready(timeout_s=60, brokers=[1, 2, 3, 4])  # node 4's image has every broker
        # Removed (not while it leads: asked again until another voter leads and it is settled).
        cluster.wait_for(lambda: cluster.controller_id(1) in (1, 2, 3)
                         and cluster.call(1, "remove_controller", voter_id=4), 60, "the removal")
        cluster.wait_for(lambda: _voters(cluster, 1) == [1, 2, 3], 30, "the removal committed")
        # Node 4 keeps running alone: it sees no controller, its own answer is its last image.
        cluster.wait_for(lambda: cluster.status(4)["view"] == "local", 60, "node 4 to see no controller")
        controller = cluster.wait_for(lambda: _controller_among(cluster, [1, 2, 3]), 30, "the controller")

        for bootstrap in ([cluster.client(4)], [cluster.client(n) for n in (4, 1, 2, 3)]):
            code, status = _status_cli(*bootstrap)
            assert code == 0, status
            assert status["view"] == "controller" and status["controller_id"] == controller, status
            assert status["answered_by"] != 4 and sorted(v["id"] for v in status["voters"]) == [1, 2, 3], status

"""Issue 20, truth under failure: on a real three-node cluster, a killed broker shows as fenced within session_timeout_ms and the partitions it alone held as OFFLINE; with two of three nodes killed `cluster status` exits 2 saying "no quorum", `topics describe` marks every partition OFFLINE with the reason, and `produce` / `consume` fail within seconds naming the partitions and why (exit 1), not with CLIENT_CLOSED after the timeout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from kafka.protocol.admin.cluster import DescribeQuorumRequest

import node_harness as harness
from test_kafka_unsupported import call

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
SESSION_MS = harness.TEST_SETTINGS["session_timeout_ms"]


def cli(cluster, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_DEBUG"}
    env["RAFTLOG_BOOTSTRAP"] = ",".join(cluster.client(n) for n in sorted(cluster.configs))
    return subprocess.run([*RAFTLOG, *args], input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_status_describe_produce_consume_tell_the_truth(tmp_path):
    with harness.NodeCluster(tmp_path, size=3) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        cluster.call(1, "create_topic", name="demo", partitions=3, replication_factor=3)
        cluster.call(1, "create_topic", name="solo", partitions=3, replication_factor=1)
        produced = cli(cluster, "produce", "demo", stdin="a\nb\n")
        assert produced.returncode == 0, produced

        # One broker killed: fenced within the session timeout; its RF=1 partition offline.
        solo = json.loads(cli(cluster, "topics", "describe", "solo", "--json").stdout)["solo"]
        victim = next(p["leader"] for p in solo["partitions"] if p["leader"] != 1)
        cluster.kill(victim)
        killed_at = time.monotonic()

        def fenced() -> bool:
            status = json.loads(cli(cluster, "cluster", "status", "--json", "--bootstrap", cluster.client(1)).stdout)
            return any(b["id"] == victim and b["fenced"] for b in status["brokers"])
        cluster.wait_for(fenced, SESSION_MS / 1000 + 5, f"broker {victim} fenced")
        # The controller's tick (at most 0.5 s) and one CLI run on a loaded machine: a bound,
        # not a speed measurement.
        assert time.monotonic() - killed_at < SESSION_MS / 1000 + 5
        described = cli(cluster, "topics", "describe", "solo")
        assert described.returncode == 0, described
        lost = [line for line in described.stdout.splitlines() if "OFFLINE" in line]
        assert len(lost) == 1 and f"leader {victim} is fenced" in lost[0], described.stdout
        assert "1 of 3 partitions offline" in described.stdout
        healthy = cli(cluster, "topics", "describe", "demo")
        assert "OFFLINE" not in healthy.stdout, healthy.stdout  # RF=3: led by the others
        # A produce to that partition fails (exit 1) naming it and why, not CLIENT_CLOSED.
        lost_partition = next(p["partition"] for p in solo["partitions"] if p["leader"] == victim)
        refused = cli(cluster, "produce", "solo", "--partition", str(lost_partition), stdin="x\n")
        assert refused.returncode == 1, refused
        message = refused.stderr.strip().splitlines()[-1]
        assert f"solo-{lost_partition}" in message and f"leader {victim} is fenced" in message, refused.stderr

        # Two of three killed: no quorum, nothing led, and every command says so.
        second = ({2, 3} - {victim}).pop()
        cluster.kill(second)
        survivor = ({1, 2, 3} - {victim, second}).pop()

        def no_quorum() -> subprocess.CompletedProcess[str] | None:
            status = cli(cluster, "cluster", "status")
            return status if status.returncode == 2 and "no quorum" in status.stdout else None
        status = cluster.wait_for(no_quorum, 30, "cluster status to say no quorum")
        assert "controller  NONE: no quorum" in status.stdout, status.stdout
        assert "unfenced  " not in status.stdout  # broker states are unknown, not "unfenced"
        assert status.stderr.strip().startswith("raftlog: no quorum"), status.stderr

        def all_offline() -> subprocess.CompletedProcess[str] | None:
            described = cli(cluster, "topics", "describe", "demo")
            return described if "3 of 3 partitions offline" in described.stdout else None
        described = cluster.wait_for(all_offline, 30, "every demo partition offline")
        assert "no quorum" in described.stderr, described.stderr

        produced = cli(cluster, "produce", "demo", stdin="c\n")
        assert produced.returncode == 1, produced
        message = produced.stderr.strip().splitlines()[-1]
        assert message.startswith("raftlog: cannot produce to demo: ") and "demo-0" in message, produced.stderr
        assert "no leader" in message and "no quorum" in message, message
        assert "CLIENT_CLOSED" not in produced.stderr

        consumed = cli(cluster, "consume", "demo", "--from-beginning", "--max-messages", "1")
        assert consumed.returncode == 1, consumed
        assert "cannot consume demo" in consumed.stderr and "no leader" in consumed.stderr, consumed.stderr

        # DescribeQuorum on a node that knows no quorum leader: Kafka's answer off the leader,
        # NOT_LEADER_OR_FOLLOWER, which the Java admin client (kafka-metadata-quorum) retries;
        # leader -1 with no error made that tool fail with NoSuchElementException.
        host, _, port = cluster.kafka(survivor).rpartition(":")
        Topic = DescribeQuorumRequest.TopicData
        ask = DescribeQuorumRequest[2](topics=[Topic(topic_name="__cluster_metadata", partitions=[
            Topic.PartitionData(partition_index=0)])])
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            answer = call(sock, ask, 2, 1)
        (p,) = answer.topics[0].partitions
        assert answer.error_code == 0 and p.error_code == 6 and p.leader_id == -1, answer

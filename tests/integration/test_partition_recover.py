"""`raftlog partitions recover --unclean` revives a partition whose every replica is flagged needs_catch_up, keeping its records; it refuses without --unclean and on a healthy partition."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from partition.batch import BatchBuilder, decode_batches
from partition.manager import PARTITIONS_DIR
from partition.raft import QuorumState, VoteRequest
from partition.quorum_state import read_quorum_state, write_quorum_state
from partition.replication import decode_message, encode_message

import node_harness as harness

TOPIC = "recover"
NODES = (1, 2, 3)


def _batch(values: list[bytes]) -> bytes:
    b = BatchBuilder()
    for v in values:
        b.append(v, None, timestamp_ms=int(time.time() * 1000))
    return b.build()


def _replica_status(cluster, node: int) -> dict | None:
    _, health = cluster.health(node)
    return health.get("replicas", {}).get("partitions", {}).get(f"{TOPIC}-0")


def _leader(cluster) -> int | None:
    leaders = [n for n in cluster.live() if (_replica_status(cluster, n) or {}).get("role") == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def _produce(cluster, node: int, values: list[bytes], timeout_ms: int = 2000) -> dict:
    r = harness.raw_call(cluster.client(node), "produce", timeout_s=timeout_ms / 1000 + 5,
                         acks=-1, timeout_ms=timeout_ms,
                         partitions=[{"topic": TOPIC, "partition": 0, "records": _batch(values)}])
    return r["partitions"][0] if "partitions" in r else r


def _produce_acked(cluster, values: list[bytes]) -> int | None:
    """Try every node once with acks=all; the node that acknowledged, or None."""
    for n in cluster.live():
        if "error" not in _produce(cluster, n, values, timeout_ms=1000):
            return n
    return None


def _read_all(cluster, node: int) -> list[bytes]:
    """Every data record below the high watermark, from the leader `node`."""
    values: list[bytes] = []
    offset = 0
    while True:
        r = harness.ok(harness.raw_call(cluster.client(node), "fetch", max_wait_ms=0, min_bytes=0,
                                        max_bytes=1 << 20, partitions=[{"topic": TOPIC, "partition": 0,
                                                                        "fetch_offset": offset,
                                                                        "max_bytes": 1 << 20}]))
        [p] = r["partitions"]
        assert "error" not in p, p
        if not p["records"]:
            return values
        for header, records in decode_batches(p["records"]):
            if not header.is_control:
                values.extend(rec.value for rec in records if rec.offset >= offset)
            offset = header.last_offset + 1


def _cli(cluster, node: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raftlog.cli", "partitions", "recover", TOPIC, "0", *args,
         "--bootstrap", cluster.client(node), "--timeout", "10"],
        capture_output=True, text=True, timeout=60,
    )


def _partition_dir(cluster, node: int) -> Path:
    return Path(cluster.configs[node].data_dir) / PARTITIONS_DIR / f"{TOPIC}-0"


def test_recover_unclean_elects_a_flagged_replica_and_keeps_the_records(tmp_path):
    # The flagged voters must see the candidate's `unclean` mark: it has to cross the wire.
    wire = encode_message(TOPIC, 0, VoteRequest(2, 3, 2, 10, True, True))
    assert decode_message(wire, 2, "m")[2].unclean, "partition/replication.py drops VoteRequest.unclean"
    with harness.NodeCluster(tmp_path, 3) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=30)
        cluster.call(1, "create_topic", name=TOPIC, partitions=1, replication_factor=3)
        cluster.wait_for(lambda: _leader(cluster), 15, "a partition leader")
        written = [b"before-%02d" % i for i in range(30)]
        for i in range(0, len(written), 10):
            cluster.wait_for(lambda: _produce_acked(cluster, written[i:i + 10]), 10, "an acked produce")

        # Refused on a healthy partition: nothing is flagged, a leader is live.
        healthy = _leader(cluster)
        refused = _cli(cluster, healthy, "--broker", str(healthy), "--unclean")
        assert refused.returncode == 1 and "not flagged" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1

        # Power lost everywhere, every tail torn: every replica comes back flagged.
        for n in NODES:
            assert cluster.terminate(n) == 0
        for n in NODES:
            d = _partition_dir(cluster, n)
            s = read_quorum_state(d)
            write_quorum_state(d, QuorumState(s.epoch, s.voted_for, s.leader_id, True))
        cluster.start_all()
        cluster.wait_ready(timeout_s=30)
        cluster.wait_for(lambda: all((_replica_status(cluster, n) or {}).get("needs_catch_up") for n in NODES),
                         15, "three flagged replicas")

        # Nobody may run: no leader over several election timeouts (1 s each); acks=all fails.
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            assert _leader(cluster) is None
            for n in NODES:
                r = _produce(cluster, n, [b"refused"], timeout_ms=200)
                assert r.get("error", {}).get("code") in ("NOT_LEADER", "LEADER_NOT_AVAILABLE"), r

        # Without --unclean: refused before anything is sent, the risk spelled out.
        no_flag = _cli(cluster, 1, "--broker", "2")
        assert no_flag.returncode == 1 and "--unclean" in no_flag.stderr and "lost for good" in no_flag.stderr
        assert all((_replica_status(cluster, n) or {}).get("needs_catch_up") for n in NODES)

        done = _cli(cluster, 1, "--broker", "2", "--unclean")
        assert done.returncode == 0, done.stderr
        assert "cleared needs_catch_up" in done.stdout
        leader = cluster.wait_for(lambda: _leader(cluster), 15, "a leader after recovery")
        assert leader == 2
        assert cluster.wait_for(lambda: _produce_acked(cluster, [b"after"]), 10, "an acked produce")
        assert _read_all(cluster, leader) == written + [b"after"]
        cluster.wait_for(lambda: not any(_replica_status(cluster, n)["needs_catch_up"] for n in NODES),
                         15, "the other replicas caught up")

        # Recovering again is refused: a live leader, and nothing flagged.
        again = _cli(cluster, 1, "--broker", "3", "--unclean")
        assert again.returncode == 1 and "INVALID_REQUEST" in again.stderr, again.stderr

        for n in NODES:
            cluster.terminate(n)
        assert not any(read_quorum_state(_partition_dir(cluster, n)).needs_catch_up for n in NODES)

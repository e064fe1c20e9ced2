"""franz-go (Go, pkg/kgo and pkg/kadm) sees the same records, offsets, group behaviour and admin
answers on raftlog as on the reference Kafka: an idempotent acks=all producer with every
compression read back by a direct consumer; a group of two members through a rebalance, a
leave, commits and a resume; and the admin calls of an operator's tool with their errors. The
last test runs a few of franz-go's own pkg/kgo integration tests through scripts/client_suites
and parses its summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from differential import Sides, assert_same
from kafka_ref import ReferenceUnavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def franz():
    import franz as franz_module

    try:
        franz_module.franz_client()
    except ReferenceUnavailable as e:
        pytest.skip(f"franz-go unavailable: {e}")
    return franz_module.franz


def test_produce_every_compression(sides: Sides, franz) -> None:
    same = assert_same(sides.run(lambda b: franz("produce", b, "franz-produce", "40")), "franz-go produce/consume")
    for codec, answer in same.items():
        assert answer["acked"] == answer["read"], f"{codec}: every acked record read back, same offsets"
        assert len(answer["read"]) == 40 and answer["headers"], codec
        assert len({r["partition"] for r in answer["read"]}) > 1, f"{codec}: keys spread over the partitions"


def test_group_rebalance_commit_resume(sides: Sides, franz) -> None:
    same = assert_same(sides.run(lambda b: franz("group", b, "franz-group", "franz-g", "200")),
                       "franz-go consumer group")
    assert same["a_alone"] == [0, 1, 2, 3] and same["split"] == [2, 2] and same["after_leave"] == [0, 1, 2, 3]
    assert same["read_ab"] == 400 and same["duplicates_ab"] == 0 and same["committed_total"] == 400
    assert same["described"] == {"state": "Empty", "protocol_type": "consumer", "members": 0, "err": ""}
    assert same["resumed_read"] == 200 and same["resumed_first"] == 400, "resumed at the committed offsets"


def test_admin(sides: Sides, franz) -> None:
    same = assert_same(sides.run(lambda b: franz("admin", b, "franz-admin")), "franz-go admin (kadm)")
    assert same["create_duplicate"] == "TOPIC_ALREADY_EXISTS"
    assert same["create_bad_rf"] == "INVALID_REPLICATION_FACTOR"
    assert same["describe_missing"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert same["offsets"] == {"start": 0, "end": 30} and same["fetch_offsets"] == 4
    assert same["config_after_alter"] == {"retention.ms": "7200000", "cleanup.policy": "compact"}


def test_kgo_suite_smoke(cluster) -> None:
    """scripts/client_suites franz-go runs franz-go's own tests against raftlog and prints a
    summary this test parses: a produce test and a group test pass."""
    import franz as franz_module

    try:
        franz_module.ensure_modules()
    except ReferenceUnavailable as e:
        pytest.skip(f"franz-go unavailable: {e}")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "client_suites.py"), "franz-go",
                           "--bootstrap", cluster.kafka_bootstrap(), "--run", "^(TestClient_Produce|TestGroupSimple)$",
                           "--json"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["franz-go"]
    assert summary["pass"] == 2 and summary["fail"] == 0, summary

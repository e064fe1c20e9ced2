"""DescribeFeatures and UpdateFeatures (issue 41) on a real 3-node cluster through kafka-python's
admin client: every broker's ApiVersions lists raftlog's supported features and finalized
levels; an update is recorded in the metadata log and seen by every broker; a downgrade without
a downgrade type, any metadata.version downgrade and a level raftlog does not support are
refused with INVALID_UPDATE_VERSION and change nothing; `raftlog features` does the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError

import node_harness as harness
from raftlog.cli.main import main as cli

FEATURES = {"metadata.version", "kraft.version", "transaction.version", "group.version",
            "eligible.leader.replicas.version", "share.version", "streams.version"}


def _admin(address: str) -> Any:
    return KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=30_000)


def _finalized_everywhere(cluster: harness.NodeCluster) -> list[dict[str, tuple[int, int]]]:
    out = []
    for node_id in sorted(cluster.configs):
        admin = _admin(cluster.kafka(node_id))
        try:
            described = admin.describe_features()
        finally:
            admin.close()
        out.append({n: f["finalized"] for n, f in described.items() if "finalized" in f})
    return out


def _wait_finalized(cluster: harness.NodeCluster, name: str, level: tuple[int, int] | None) -> None:
    cluster.wait_for(lambda: all(f.get(name) == level for f in _finalized_everywhere(cluster)), 60,
                     f"every broker's finalized {name} at {level}")


def test_features_described_updated_and_refused(cluster: harness.NodeCluster) -> None:
    admin = _admin(cluster.kafka_bootstrap())
    try:
        described = admin.describe_features()
        assert set(described) == FEATURES
        assert described["metadata.version"]["supported"] == (7, 25)
        assert described["metadata.version"]["finalized"] == (25, 25)
        assert described["group.version"]["finalized"] == (1, 1)
        assert described["share.version"]["supported"] == (0, 0) and "finalized" not in described["share.version"]
        assert described["metadata.version"]["finalized_epoch"] >= 0
        before = _finalized_everywhere(cluster)

        for updates in ({"group.version": 0}, {"metadata.version": ("SAFE_DOWNGRADE", 24)},
                        {"metadata.version": 26}, {"no.such.feature": 1},
                        {"group.version": ("SAFE_DOWNGRADE", 0), "share.version": 1}):
            with pytest.raises(InvalidUpdateVersionError):
                admin.update_features(updates)
        assert admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)}, validate_only=True) \
            == {"group.version": "OK"}
        assert _finalized_everywhere(cluster) == before  # nothing changed

        assert admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)}) == {"group.version": "OK"}
        _wait_finalized(cluster, "group.version", None)
        assert admin.update_features({"group.version": 1}) == {"group.version": "OK"}
        _wait_finalized(cluster, "group.version", (1, 1))
    finally:
        admin.close()


def test_the_cli_describes_and_changes_features(cluster: harness.NodeCluster) -> None:
    def run(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(cli, ["features", *args, "--bootstrap", cluster.client(1)])
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    described = json.loads(run("describe", "--json"))
    assert described["supported"]["metadata.version"] == [7, 25] and described["finalized"]["group.version"] == 1
    assert "group.version" in run("describe")
    assert "valid" in run("downgrade", "--feature", "group.version=0", "--dry-run")
    refused = run("downgrade", "--feature", "metadata.version=20", ok=False)
    assert "downgrade" in refused
    run("downgrade", "--feature", "transaction.version=0")
    assert "transaction.version" not in json.loads(run("describe", "--json"))["finalized"]
    run("upgrade", "--feature", "transaction.version=2")
    assert json.loads(run("describe", "--json"))["finalized"]["transaction.version"] == 2


def test_a_native_change_shows_at_once_on_the_node_it_was_sent_to(cluster: harness.NodeCluster) -> None:
    """The native admin path (the CLI's) answers UpdateFeatures only once the node it asked
    shows the new level: the controller answers at the commit, and each node's image applies it
    a moment later, so a describe right after read the old level now and then under load."""
    from raftlog.client import Admin

    for node_id in sorted(cluster.configs):
        with Admin(cluster.client(node_id)) as admin:
            for level, upgrade_type in ((0, 2), (2, 1), (0, 2), (2, 1)):
                admin.update_features({"transaction.version": level}, upgrade_type=upgrade_type)
                assert admin.describe_features()["finalized"].get("transaction.version", 0) == level, node_id

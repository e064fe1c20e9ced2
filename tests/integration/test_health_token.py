"""Issue 39: /health without the node's http_token says only up or down per component (no topic, partition, offset or broker); with the token, the details as before."""

from __future__ import annotations

import json
import secrets
import urllib.request
from pathlib import Path
from typing import Any

import node_harness as harness

TOPIC = "payroll-" + secrets.token_hex(4)


def _health(cluster: Any, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://{cluster.http(1)}/health")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def test_health_without_the_token_names_no_topic(tmp_path: Path) -> None:
    token = "health-" + secrets.token_urlsafe(12)
    settings = {**harness.TEST_SETTINGS, "http_token": token}
    with harness.NodeCluster(tmp_path / "c", size=1, settings=settings) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        cluster.call(1, "create_topic", name=TOPIC, partitions=2, replication_factor=1)
        cluster.wait_for(lambda: TOPIC in json.dumps(_health(cluster, token)[1]), 30, "the topic in the detailed /health")

        code, detailed = _health(cluster, token)
        assert code == 200 and detailed["ok"] is True
        assert f"{TOPIC}-0" in detailed["replicas"]["partitions"]
        assert detailed["metadata"]["broker"]["registered"] is True

        code, summary = _health(cluster, None)
        text = json.dumps(summary)
        assert code == 200 and summary["ok"] is True
        assert TOPIC not in text and "offset" not in text and "broker" not in text and "partitions" not in text
        assert summary["components"] and set(summary["components"].values()) == {"up"}
        assert set(summary["components"]) <= set(detailed)

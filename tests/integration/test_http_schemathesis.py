"""Schemathesis against a real node's HTTP listener (raftlog/node/http.py, described by raftlog/node/openapi.py), with an http_token: generated and negative requests to /health and /metrics, undocumented methods and missing or wrong credentials, get documented answers, never a 500 or a hang, and the node keeps serving. A short derandomized run here; the long one under `slow`."""

from __future__ import annotations

import copy
import secrets
import urllib.request
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")

from raftlog.node.openapi import OPENAPI  # noqa: E402

import node_harness as harness  # noqa: E402

TOKEN = secrets.token_urlsafe(16)
REQUEST_TIMEOUT_S = 15  # a hang fails the run (requests' timeout), it never blocks it
SHORT = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck))
LONG = settings(SHORT, max_examples=3_000)




def _fuzzed(document: dict) -> dict:
    """The node's description plus what a client may send besides (query parameters and
    headers the node ignores), so that the generated requests vary more than the path."""
    out = copy.deepcopy(document)
    extra = [
        {"name": "params", "in": "query", "required": False, "style": "form", "explode": True,
         "schema": {"type": "object", "additionalProperties": {"type": "string"}}},
        {"name": "Accept", "in": "header", "required": False, "schema": {"type": "string"}},
        {"name": "X-Fuzz", "in": "header", "required": False, "schema": {"type": "string"}},
    ]
    for operations in out["paths"].values():
        for operation in operations.values():
            operation["parameters"] = extra
    return out


schema = schemathesis.openapi.from_dict(_fuzzed(OPENAPI))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("http-fuzz"), size=1,
                             settings={**harness.TEST_SETTINGS, "http_token": TOKEN}) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


def call(node: harness.NodeCluster, case) -> None:
    # Every check but "schema-violating input must be refused": the node reads the path only,
    # so the extra query parameters and headers are ignored whatever they hold (by design).
    case.call_and_validate(base_url=f"http://{node.http(1)}", timeout=REQUEST_TIMEOUT_S,
                           headers={"Authorization": f"Bearer {TOKEN}"},
                           excluded_checks=[schemathesis.checks.negative_data_rejection])


@schema.parametrize()
@SHORT
def test_http_listener(node, case):
    call(node, case)


@pytest.mark.slow
@schema.parametrize()
@LONG
def test_http_listener_long(node, case):
    call(node, case)


def test_node_still_serves_after_the_fuzzing(node):
    # Runs after the runs above (file order): both endpoints answer, the node is up.
    assert node.live() == [1]
    request = urllib.request.Request(f"http://{node.http(1)}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        assert response.status == 200 and b"# TYPE" in response.read()
    status, _ = node.health(1)
    assert status == 200

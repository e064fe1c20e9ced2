"""Schemathesis against a real node's registry listener: every endpoint of the Schema Registry
and the REST proxy, as the node's own /openapi.json describes them (raftlog/node/registry/
openapi.py), gets generated and negative requests; every answer is documented (status, content
type), never a 500 or a hang, and the node keeps serving. A short derandomized run here; the
long one under `slow`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")

from raftlog.node.registry.openapi import rest_openapi  # noqa: E402

import node_harness as harness  # noqa: E402

REQUEST_TIMEOUT_S = 40  # above the listener's own 30 s: a hang fails the run, it never blocks it
SHORT = settings(max_examples=8, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck))
LONG = settings(SHORT, max_examples=300)

schema = schemathesis.openapi.from_dict(rest_openapi())


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    # Consumer instances idle 1 s expire (Confluent's consumer.instance.timeout.ms, at its floor here).
    settings = {**harness.TEST_SETTINGS, "consumer_instance_timeout_ms": 1000}
    with harness.NodeCluster(tmp_path_factory.mktemp("rest-fuzz"), size=1, settings=settings) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        # _schemas exists and is led before the fuzzing (its creation is the registry's own
        # first-write path, tested in test_registry_failover.py).
        c.wait_for(lambda: _register(c) == 200, 60, "a first registration")
        yield c


def _register(c: harness.NodeCluster) -> int:
    body = json.dumps({"schema": '{"type": "string"}'}).encode()
    request = urllib.request.Request(f"{c.schema_registry(1)}/subjects/warm-value/versions", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_served_document_is_the_one_fuzzed(node):
    with urllib.request.urlopen(f"{node.schema_registry(1)}/openapi.json", timeout=REQUEST_TIMEOUT_S) as response:
        assert response.status == 200 and response.headers["Content-Type"] == "application/json"
        assert json.loads(response.read()) == json.loads(json.dumps(rest_openapi()))


def call(node: harness.NodeCluster, case) -> None:
    # Every check but "schema-violating input must be refused": the listener reads the fields it
    # needs and ignores others (as Confluent's), so a body with extra or odd fields may be fine.
    case.call_and_validate(base_url=node.schema_registry(1), timeout=REQUEST_TIMEOUT_S,
                           excluded_checks=[schemathesis.checks.negative_data_rejection,
                                            schemathesis.checks.positive_data_acceptance])


@schema.parametrize()
@SHORT
def test_rest_listener(node, case):
    call(node, case)


@pytest.mark.slow
@schema.parametrize()
@LONG
def test_rest_listener_long(node, case):
    call(node, case)


def test_an_idle_consumer_instance_expires(node):
    def create() -> int:
        """Create instance i1 of group idle: 200, or 409 while it exists (the try does not use it)."""
        request = urllib.request.Request(f"{node.schema_registry(1)}/consumers/idle", method="POST",
                                         data=json.dumps({"name": "i1"}).encode(),
                                         headers={"Content-Type": "application/vnd.kafka.v2+json"})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            with exc:
                assert json.loads(exc.read())["error_code"] == 40902
                return exc.code

    assert create() == 200
    assert create() == 409
    node.wait_for(lambda: create() == 200, 30, "the idle instance to expire and its name to be free again")


def test_node_still_serves_after_the_fuzzing(node):
    # Runs after the runs above (file order): the registry and the proxy answer, the node is up.
    assert node.live() == [1]
    with urllib.request.urlopen(f"{node.schema_registry(1)}/v3/clusters", timeout=REQUEST_TIMEOUT_S) as response:
        assert response.status == 200 and json.loads(response.read())["data"][0]["cluster_id"] == node.cluster_id
    with urllib.request.urlopen(f"{node.schema_registry(1)}/schemas/types", timeout=REQUEST_TIMEOUT_S) as response:
        assert json.loads(response.read()) == ["AVRO", "JSON", "PROTOBUF"]

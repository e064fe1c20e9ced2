"""Fixtures of the differential conformance suite (issue 40): every scenario runs against the
reference Apache Kafka (`reference_kafka`, tests/conftest.py) and against raftlog's Kafka
listener (`cluster`, the integration tests' three-node fixture, used here as it is)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from differential import Sides


def _integration_fixtures():
    path = Path(__file__).resolve().parent.parent / "integration" / "conftest.py"
    spec = importlib.util.spec_from_file_location("integration_conftest_for_conformance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The integration tests' module-scoped three-node raftlog cluster, the same fixture function.
cluster = _integration_fixtures().cluster


@pytest.fixture(scope="module")
def sides(reference_kafka, cluster) -> Sides:
    """The two brokers' Kafka bootstrap addresses: the reference Kafka's and raftlog's."""
    return Sides(kafka=reference_kafka.bootstrap, raftlog=cluster.kafka_bootstrap())

"""Fixtures shared by the integration tests (pytest finds them here; a test file that defines
its own fixture of the same name uses that one instead)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import node_harness as harness


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    """Three real nodes (voters 1..3, combined mode) on free loopback ports, shared by one test
    module's tests in file order: started and ready (a controller, every broker unfenced) before
    the first, every process stopped by PID after the last, also when a test failed."""
    name = request.module.__name__.rpartition(".")[2]
    with harness.NodeCluster(tmp_path_factory.mktemp(name), size=3) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c

"""The server fuzz strategies (test_server_fuzz.py) against a real node process's client listener: garbage frames get well-formed answers or a close, the node keeps answering, and it still serves metadata afterwards."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

import node_harness as harness


def _load(name: str, filename: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_fuzz = _load("server_fuzz_strategies", "test_server_fuzz.py")

# The same hypothesis tests; pytest resolves their `node_address` fixture here, in this module.
test_random_bytes = _fuzz.test_random_bytes
test_truncated_frames = _fuzz.test_truncated_frames
test_cbor_that_is_not_a_map = _fuzz.test_cbor_that_is_not_a_map
test_wrong_envelope_types = _fuzz.test_wrong_envelope_types
test_unknown_ops_answered_by_id = _fuzz.test_unknown_ops_answered_by_id
test_huge_announced_length = _fuzz.test_huge_announced_length
test_valid_request_then_garbage = _fuzz.test_valid_request_then_garbage


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with harness.NodeCluster(tmp_path_factory.mktemp("fuzz"), size=1) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=30)
        yield cluster


@pytest.fixture(scope="module")
def node_address(one_node: Any) -> tuple[str, int]:
    host, _, port = one_node.client(1).rpartition(":")
    return host, int(port)


def test_node_still_serves_after_fuzzing(one_node: Any) -> None:
    # Runs after the fuzz tests above (file order): the node is up and its state intact.
    assert one_node.live() == [1]
    created = one_node.call(1, "create_topic", name="after-fuzz", partitions=2, replication_factor=1)
    assert len(created["partitions"]) == 2
    code, health = one_node.health(1)
    assert code == 200 and health["ok"] is True

"""Shared by every test. A test's kind marker comes from where it lives, so no one has to remember
to tag it: tests/unit/ and tests/sim/ are `unit` (one process, no node, no quorum, no child
process), tests/integration/ is `cluster` (real node processes on loopback), tests/reference/ is
`reference` and tests/conformance/ both (a reference Apache Kafka beside raftlog), and a test that
drives Chromium through selenium is also `browser`. Explicit markers (`spark`, `jepsen`, `slow`)
stay as the files set them. pyproject.toml declares each marker with its meaning.

Parallel runs (pytest-xdist, `scripts/test` runs `-n 2 --dist loadfile`): each test file runs
whole on one worker, in file order (its module-scoped fixtures, e.g. the 3-node `cluster`,
start once; files are handed out in name order, so test_spark_standalone.py, which switches
its worker's SparkSession to a standalone master, still runs after every local Spark file that
worker gets). Each worker picks ports from its own slice (RAFTLOG_PORT_SLICE,
raftlog/cli/cluster.py `free_ports`; node processes and CLI children inherit it) and has its
own temp dirs (pytest's basetemp per worker). Not `--dist loadgroup`: pytest-xdist 3.8 renames
a grouped test's `_nodeid`, which pytest 9 no longer reads, so its groups are ignored.

The helper modules of tests/integration/ (node_harness.py, bridge_node.py, ...) are importable by
name from any test: `import node_harness as harness`. Test folders are not packages
(--import-mode=importlib), so this is the one place that puts that folder on sys.path."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
INTEGRATION = TESTS / "integration"
REFERENCE = TESTS / "reference"  # kafka_ref.py: the reference Apache Kafka (issue 40)
for _folder in (INTEGRATION, REFERENCE):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# The top folder under tests/ -> the markers every test in it gets.
KIND_BY_FOLDER = {"unit": ("unit",), "sim": ("unit",), "integration": ("cluster",),
                  "reference": ("reference",), "conformance": ("reference", "cluster")}
BROWSER_FILES = frozenset({"test_console_browser.py"})


def _uses_selenium(module: ModuleType | None) -> bool:
    for value in vars(module).values() if module is not None else ():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.split(".")[0] == "selenium":
            return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... on xdist workers
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit():
        os.environ["RAFTLOG_PORT_SLICE"] = f"{worker[2:]}/{count}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).resolve()
        try:
            folder = path.relative_to(TESTS).parts[0]
        except ValueError:  # a test file outside tests/ named on the command line
            continue
        for kind in KIND_BY_FOLDER.get(folder, ()):
            item.add_marker(kind)
        if path.name in BROWSER_FILES or _uses_selenium(getattr(item, "module", None)):
            item.add_marker("browser")


@pytest.fixture(scope="session")
def reference_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real three-node Apache Kafka (tests/reference/kafka_ref.py), shared by every reference
    and conformance test of the session, every JVM stopped by PID after the last. A machine
    without Maven, JDK 17+ or Maven Central skips them with one reason; a download that fails
    is an error."""
    import kafka_ref

    try:
        kafka_ref.ensure_jars()
    except kafka_ref.ReferenceUnavailable as e:
        pytest.skip(f"reference Kafka unavailable: {e}")
    with kafka_ref.running_kafka(tmp_path_factory.mktemp("kafka-ref")) as kafka:
        yield kafka

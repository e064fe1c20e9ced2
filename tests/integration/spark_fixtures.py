"""One local SparkSession for the whole pytest session, shared by every Spark test module.

Load it by path (test folders are not packages) under the name "spark_fixtures", reusing
`sys.modules["spark_fixtures"]` when it is there, so that every module gets the same module
object and so the same session; then `spark = spark_fixtures.spark` in the test module
makes the session-scoped fixture available there (see test_spark_source_cluster.py).

pytest builds one fixture definition per module that imports it, so the session itself is
kept here: the first module to ask creates it and owns it (stops it at the very end, as
session fixtures finish last-in first-out); later modules borrow it. Session start is the
expensive part (5-7 s with the JVM options below), so there is exactly one per run.

Settings: local[2] (the machine has 2 cores), UI off, C1-only JIT and the serial GC for a
faster start, 2 shuffle partitions, the test's own Python for the workers, and Spark's own Kafka
connector on spark.jars (`kafka_connector_jars`) where Maven can fetch it.

A process has one SparkContext, so `session(master=...)` with another master (the standalone
cluster of test_spark_standalone.py) stops the current session and starts one on that
master. The session fixture's value is cached by pytest: a module asking for `spark` after
such a switch would get a stopped session, so the module that switches runs after every
local one (test files run in name order: test_spark_standalone.py sorts last).
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["spark", "session"]

_state: dict[str, Any] = {"session": None, "master": None}
LOCAL = "local[2]"


def session(master: str = LOCAL, conf: dict[str, str] | None = None) -> Any:
    """The shared SparkSession on `master`, created on first use (the caller does not stop
    it); another master stops the current session first (module docstring)."""
    if _state["session"] is not None and _state["master"] != master:
        _stop()
    if _state["session"] is None:
        from pyspark.sql import SparkSession

        _state["old_pyspark_python"] = os.environ.get("PYSPARK_PYTHON")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = (
            SparkSession.builder.master(master)
            .appName("raftlog-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.sql.shuffle.partitions", "2")
        )
        jars = kafka_connector_jars()
        if jars:
            builder = builder.config("spark.jars", ",".join(map(str, jars)))
        for k, v in (conf or {}).items():
            builder = builder.config(k, v)
        _state["session"] = builder.getOrCreate()
        _state["master"] = master
    return _state["session"]


def kafka_connector_jars() -> list[Any]:
    """Spark's own Kafka connector (spark-sql-kafka-0-10, tests/reference/kafka_ref.py fetches it
    with Maven, once) for every session, so that format("kafka") is there whichever Spark test
    starts the session; none where it cannot be had (no Maven, JDK or Maven Central): the tests
    that use it skip (tests/conformance/test_spark_kafka.py)."""
    import kafka_ref  # tests/reference/, on sys.path (tests/conftest.py)

    try:
        return kafka_ref.spark_kafka_jars()
    except (kafka_ref.ReferenceUnavailable, kafka_ref.ReferenceDownloadFailed) as e:
        _state["kafka_connector_missing"] = str(e)
        return []


def _stop() -> None:
    s = _state["session"]
    if s is None:
        return
    _state["session"] = None
    _state["master"] = None
    s.stop()
    # py4j leaves sockets of the stopped context to the garbage collector; collect them here,
    # where their ResourceWarning is expected, not in whatever test runs next (where
    # filterwarnings=error turns it into an unraisable-exception error).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    old = _state.pop("old_pyspark_python", None)
    if old is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = old


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    owner = _state["session"] is None
    s = session()
    yield s
    if owner:
        _stop()

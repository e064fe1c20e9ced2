"""Kafka Connect (4.4.0 runtime, standalone mode) moves a file through raftlog as through the
reference Apache Kafka: the FileStream source connector tails a file into a topic, the FileStream
sink connector writes the topic to another file; the same lines arrive in order, the topic holds
them as keyless records, and the sink's group commits the end offset.

The FileStream connectors are Kafka's own (connect-file 4.3.0: 4.4.0 is not on the Maven Central
this project reaches; tests/reference/connect-file.pom.xml), given to the worker by plugin.path;
the one class of kafka-clients they call that 4.4.0 moved is put back by
tests/conformance/java/AppInfoParser.java. The worker runs as connect-standalone does, as one JVM
started and stopped by its PID."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from differential import Sides, assert_same, wait_until
from kafka_ref import ConnectStandalone, ReferenceUnavailable, connect_file_plugin, kafka_tool
from raftlog.cli.cluster import free_ports

TOPIC = "connect-file"
LINES = [f"line {i}: {'word ' * (i % 5)}naïve ✓" for i in range(40)]


@pytest.fixture(scope="module")
def plugin() -> Path:
    try:
        return connect_file_plugin()
    except ReferenceUnavailable as e:
        pytest.skip(f"connect-file unavailable: {e}")


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _committed(bootstrap: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(TOPIC, 0)], timeout=15)[0].offset
    finally:
        c.close()


def _records(bootstrap: str, count: int) -> list[tuple[bytes | None, str]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-file-reader", "enable.auto.commit": False})
    out: list[tuple[bytes | None, str]] = []
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            out += [(m.key(), m.value().decode("utf-8")) for m in c.consume(100, timeout=1) if not m.error()]
    finally:
        c.close()
    return out


def connect_file_roundtrip(bootstrap: str, root: Path, plugin: Path) -> dict:
    done = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
                      "--partitions", "1", "--replication-factor", "3")
    assert done.returncode == 0, done.stderr[-800:]
    root.mkdir(parents=True, exist_ok=True)
    source, sink = root / "in.txt", root / "out.txt"
    source.write_text("".join(f"{line}\n" for line in LINES[:20]), encoding="utf-8")
    worker = ConnectStandalone(root, {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.file.filename": str(root / "connect.offsets"),
        "offset.flush.interval.ms": "500",
        "plugin.path": str(plugin),
        "listeners": f"http://127.0.0.1:{free_ports(1)[0]}",
    }, [
        {"name": "file-source", "connector.class": "FileStreamSource", "tasks.max": "1",
         "file": str(source), "topic": TOPIC},
        {"name": "file-sink", "connector.class": "FileStreamSink", "tasks.max": "1",
         "file": str(sink), "topics": TOPIC},
    ])
    out: dict = {}
    worker.start()
    try:
        out["first_half"] = wait_until(lambda: _read_lines(sink) == LINES[:20] or not worker.alive(), 180) \
            and _read_lines(sink) == LINES[:20]
        assert out["first_half"], f"the sink file never held the first lines: {worker.log_tail(30)}"
        with source.open("a", encoding="utf-8") as f:  # the source tails the file
            f.write("".join(f"{line}\n" for line in LINES[20:]))
        wait_until(lambda: len(_read_lines(sink)) >= len(LINES) or not worker.alive(), 120)
        out["sink_file"] = _read_lines(sink)
        wait_until(lambda: _committed(bootstrap, "connect-file-sink") >= len(LINES), 60)
        out["sink_committed"] = _committed(bootstrap, "connect-file-sink")
        out["records"] = _records(bootstrap, len(LINES))
        out["alive"] = worker.alive()
    finally:
        worker.terminate(grace_s=30)
    return out


def test_connect_standalone_file_source_and_sink(sides: Sides, plugin: Path, tmp_path: Path) -> None:
    answers = {side: connect_file_roundtrip(bootstrap, tmp_path / side, plugin)
               for side, bootstrap in (("kafka", sides.kafka), ("raftlog", sides.raftlog))}
    same = assert_same(answers, "Kafka Connect standalone, FileStream source -> topic -> FileStream sink")
    assert same["sink_file"] == LINES and same["sink_committed"] == len(LINES)
    assert same["records"] == [(None, line) for line in LINES]

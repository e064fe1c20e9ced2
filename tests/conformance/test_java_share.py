"""KIP-932 share groups with Kafka's own Java client and tools give the same answers on raftlog
as on the reference Apache Kafka: two KafkaShareConsumers (explicit acknowledgement) share
three partitions, each record accepted once; a rejected record is never redelivered; a
released one comes back with its delivery count up; a record released on every delivery
stops at the delivery count limit (5); describeShareGroups / listShareGroupOffsets (lag 0 once
all is acknowledged), alterShareGroupOffsets to 0 (everything read again) and
deleteShareGroupOffsets; then kafka-share-groups --list/--describe/--reset-offsets/
--delete-offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from differential import Sides, assert_same, java_program
from kafka_ref import kafka_tool

SOURCE = Path(__file__).resolve().parent / "java" / "ShareClient.java"


def test_share_consumers_acknowledge_release_reject_and_admin(sides: Sides) -> None:
    same = assert_same(sides.run(lambda b: java_program(SOURCE, "share", b, "java-share", "java-share-group")),
                       "Java KafkaShareConsumer and share-group Admin")
    assert same["accepted"] == 28 and same["duplicates"] == [], "every record accepted once, but v-7 and v-13"
    assert same["v13_deliveries"] == [1], "a rejected record is archived, never redelivered"
    assert same["v21_deliveries"] == [1, 2], "a released record is redelivered, its delivery count up"
    assert same["v7_deliveries"] == [1, 2, 3, 4, 5], "released on every delivery: archived at the limit"
    assert same["lag"] == {"0": 0, "1": 0, "2": 0}
    assert same["after_reset"] == 30, "alterShareGroupOffsets to 0: every record delivered again"
    assert same["offsets_after_delete"] == 0


def _rows(text: str) -> list[list[str]]:
    """kafka-share-groups' table rows, without the header and blank lines, sorted."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    return sorted(row for row in lines if row and row[0] not in ("GROUP", "TOPIC"))


def test_kafka_share_groups_tool(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict[str, object]:
        group, topic = "java-share-group", "java-share"
        tool = lambda *a: kafka_tool("kafka-share-groups", "--bootstrap-server", bootstrap, *a)  # noqa: E731
        out: dict[str, object] = {}
        reset = tool("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        out["reset"] = (reset.returncode, _rows(reset.stdout))
        described = tool("--describe", "--group", group)
        rows = _rows(described.stdout)  # LAG: the log end, which the warm-up records make differ
        out["describe"] = (described.returncode, [r[:4] for r in rows])
        out["lag_at_least_records"] = all(len(r) == 5 and int(r[4]) >= 10 for r in rows)
        out["list"] = sorted(line for line in tool("--list").stdout.split() if line == group)
        deleted = tool("--delete-offsets", "--group", group, "--topic", topic)
        out["delete"] = (deleted.returncode, _rows(deleted.stdout))
        return out

    same = assert_same(sides.run(scenario), "kafka-share-groups")
    assert same["reset"][0] == 0 and [r[3] for r in same["reset"][1]] == ["0", "0", "0"]
    assert same["describe"][0] == 0 and len(same["describe"][1]) == 3 and same["lag_at_least_records"]
    assert same["delete"] == (0, [["java-share", "Successful"]])

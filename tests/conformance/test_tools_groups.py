"""Kafka's console producer and consumer (keys, headers, --group, --from-beginning) and
kafka-consumer-groups (--describe, --reset-offsets --to-earliest/--to-datetime --execute,
--delete-offsets), kafka-get-offsets and kafka-delete-records give the same answers against
raftlog as against the reference Apache Kafka."""

from __future__ import annotations

import json
from pathlib import Path

from differential import Sides, assert_same
from kafka_ref import kafka_tool

TOPIC = "tools-groups"
GROUP = "tools-group"
RECORDS = 12


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _table(text: str, drop: tuple[str, ...] = ("CONSUMER-ID", "HOST", "CLIENT-ID")) -> list[dict[str, str]]:
    """A kafka-consumer-groups table -> its rows (header names as keys) sorted, without `drop`
    (per-run ids); the lines before the header (warnings) are left out."""
    lines = _lines(text)
    start = next((i for i, line in enumerate(lines) if line.split()[:1] in (["GROUP"], ["TOPIC"])), None)
    if start is None:
        return []
    header = lines[start].split()
    rows = [dict(zip(header, line.split())) for line in lines[start + 1:]]
    rows = [{k: v for k, v in row.items() if k not in drop} for row in rows]
    return sorted(rows, key=lambda row: sorted(row.items()))


def _console_input() -> str:
    # headers <TAB> key <TAB> value, as LineMessageReader reads them with parse.headers/parse.key.
    return "".join(f"h{i % 3}:v{i},trace:t{i}\tkey-{i % 5}\tvalue-{i}\n" for i in range(RECORDS))


def _consume(bootstrap: str, *extra: str) -> tuple[int, list[str]]:
    done = kafka_tool("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                      "--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms", "30000",
                      *[arg for prop in ("print.key=true", "print.headers=true", "print.partition=true",
                                         "print.offset=true") for arg in ("--formatter-property", prop)],
                      *extra)
    return done.returncode, sorted(_lines(done.stdout))


def test_console_producer_consumer_and_consumer_groups(sides: Sides, tmp_path: Path) -> None:
    def scenario(bootstrap: str) -> dict:
        out: dict = {}
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
                   "--partitions", "3", "--replication-factor", "3", check=True)
        done = kafka_tool("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                          "--producer-property", "acks=all", "--reader-property", "parse.key=true",
                          "--reader-property", "parse.headers=true", input_text=_console_input())
        out["produce"] = (done.returncode, done.stderr.strip()[-300:] if done.returncode else "")
        out["consume"] = _consume(bootstrap)
        out["consume_group"] = _consume(bootstrap, "--group", GROUP)
        groups = ("kafka-consumer-groups", "--bootstrap-server", bootstrap)
        done = kafka_tool(*groups, "--list")
        out["list"] = GROUP in done.stdout.split()
        done = kafka_tool(*groups, "--describe", "--group", GROUP)
        out["describe"] = (done.returncode, _table(done.stdout), "has no active members" in done.stderr)
        done = kafka_tool(*groups, "--reset-offsets", "--to-earliest", "--execute", "--group", GROUP, "--topic", TOPIC)
        out["reset_earliest"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--reset-offsets", "--to-datetime", "2020-01-01T00:00:00.000", "--execute",
                          "--group", GROUP, "--topic", f"{TOPIC}:0,1")
        out["reset_datetime"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--reset-offsets", "--to-latest", "--dry-run", "--group", GROUP, "--topic", TOPIC)
        out["reset_latest_dry"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--describe", "--group", GROUP)
        out["describe_after"] = (done.returncode, _table(done.stdout))
        done = kafka_tool("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", TOPIC)
        out["latest"] = sorted(_lines(done.stdout))
        plan = tmp_path / f"delete-{bootstrap.replace(':', '_').replace(',', '-')}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": p, "offset": 2} for p in range(3)]}))
        done = kafka_tool("kafka-delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(plan))
        out["delete_records"] = (done.returncode, sorted(line for line in _lines(done.stdout) if "partition:" in line))
        done = kafka_tool("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", TOPIC, "--time", "-2")
        out["earliest_after_delete"] = sorted(_lines(done.stdout))
        done = kafka_tool(*groups, "--delete", "--group", GROUP)
        out["delete_group"] = (done.returncode, done.stdout.strip())
        return out

    same = assert_same(sides.run(scenario), "console producer/consumer, kafka-consumer-groups, get-offsets, delete-records")
    assert same["produce"][0] == 0 and len(same["consume"][1]) == RECORDS
    assert same["reset_earliest"][0] == 0 and same["reset_earliest"][1]


def test_consumer_groups_delete_offsets(sides: Sides) -> None:
    """--delete-offsets (OffsetDelete) removes an inactive group's committed offset of one
    partition and keeps the others; a group that does not exist is an error."""
    def scenario(bootstrap: str) -> dict:
        topic, group = "tools-delete-offsets", "tools-delete-offsets-group"
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "2", "--replication-factor", "3", check=True)
        groups = ("kafka-consumer-groups", "--bootstrap-server", bootstrap)
        out: dict = {}
        done = kafka_tool(*groups, "--reset-offsets", "--to-earliest", "--execute", "--group", group, "--topic", topic)
        out["reset"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
        out["delete_offsets"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--describe", "--group", group)
        out["describe_after"] = (done.returncode, _table(done.stdout))
        done = kafka_tool(*groups, "--delete-offsets", "--group", "no-such-group", "--topic", topic)
        out["unknown_group"] = (done.returncode, "does not exist" in done.stdout + done.stderr)
        return out

    same = assert_same(sides.run(scenario), "kafka-consumer-groups --delete-offsets")
    assert same["delete_offsets"][1] == [{"TOPIC": "tools-delete-offsets", "PARTITION": "1", "STATUS": "Successful"}]

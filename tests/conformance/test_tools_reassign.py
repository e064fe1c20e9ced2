"""`kafka-reassign-partitions` with a plan file gives the same answers against raftlog as
against the reference Apache Kafka (issue 44): --execute starts the moves, --verify reports
them completed and the replicas are the plan's, --cancel of a plan with nothing moving says so;
and a plan naming a broker that does not exist is refused on both, nothing moved."""

from __future__ import annotations

import json
import time
from pathlib import Path

from differential import Sides, assert_same
from kafka_ref import kafka_tool

TOPIC = "tools-reassign"
VERIFY_TIMEOUT_S = 120.0


def _replicas(bootstrap: str) -> dict[int, list[int]]:
    done = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC, check=True)
    out = {}
    for line in done.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields and "Replicas" in fields:
            out[int(fields["Partition"])] = [int(r) for r in fields["Replicas"].split(",")]
    return out


def _plan(path: Path, moves: dict[int, list[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for p, r in moves.items()]}))
    return str(path)


def _completed(lines: str) -> list[str]:
    return sorted(line.strip() for line in lines.splitlines() if line.strip().startswith("Reassignment of partition"))


def test_execute_verify_cancel_and_a_bad_plan(sides: Sides, tmp_path: Path) -> None:
    def scenario(bootstrap: str) -> dict:
        out: dict = {}
        tool = ("kafka-reassign-partitions", "--bootstrap-server", bootstrap)
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
                   "--replica-assignment", "1:2,2:3", check=True)
        out["before"] = _replicas(bootstrap)
        plan = _plan(tmp_path / f"plan-{abs(hash(bootstrap))}.json", {0: [2, 3], 1: [3, 1]})
        done = kafka_tool(*tool, "--reassignment-json-file", plan, "--execute")
        out["execute"] = (done.returncode, "Successfully started partition reassignments" in done.stdout)
        deadline = time.monotonic() + VERIFY_TIMEOUT_S
        while True:
            done = kafka_tool(*tool, "--reassignment-json-file", plan, "--verify")
            if "is completed" in done.stdout and "is still in progress" not in done.stdout \
                    or time.monotonic() > deadline:
                break
        out["verify"] = (done.returncode, _completed(done.stdout))
        out["after"] = _replicas(bootstrap)
        done = kafka_tool(*tool, "--reassignment-json-file", plan, "--cancel")
        out["cancel_nothing_moving"] = done.returncode
        bad = _plan(tmp_path / f"bad-{abs(hash(bootstrap))}.json", {0: [2, 9]})
        done = kafka_tool(*tool, "--reassignment-json-file", bad, "--execute")
        out["bad_plan"] = (done.returncode != 0, "9" in (done.stdout + done.stderr))
        out["after_bad_plan"] = _replicas(bootstrap)
        return out

    answer = assert_same(sides.run(scenario), "kafka-reassign-partitions --execute/--verify/--cancel")
    assert answer["after"] == {0: [2, 3], 1: [3, 1]} and answer["execute"] == (0, True)
    assert answer["after_bad_plan"] == answer["after"] and answer["bad_plan"][0]

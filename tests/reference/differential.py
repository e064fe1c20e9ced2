"""Running one scenario on both brokers and comparing what a user sees (issue 40).

`Sides` holds the reference Kafka's and raftlog's bootstrap addresses; `sides.run(fn)` calls
`fn(bootstrap)` on each (Kafka first) and returns both answers; `assert_same` compares them and,
when they differ, says which broker answered what. Normalisers drop what legitimately differs
between two clusters (topic ids, timestamps, which node leads) and keep everything a user acts on.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_ref import java_client_argv

T = TypeVar("T")

# The Java client side of the suite: one program, a subcommand per scenario, JSON out.
JAVA_CLIENT = Path(__file__).resolve().parent.parent / "conformance" / "java" / "ConformanceClient.java"


def java_client(*args: str, timeout_s: float = 240.0) -> Any:
    """Run one subcommand of ConformanceClient.java (compiled once); its JSON answer."""
    return java_client_of(JAVA_CLIENT, *args, timeout_s=timeout_s)


def java_client_of(source: Path, *args: str, timeout_s: float = 240.0) -> Any:
    """Run one subcommand of the Java program `source` (compiled once); its JSON answer."""
    done = subprocess.run(java_client_argv(source, *args), capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{source.stem} {args[0]} failed ({done.returncode}): {done.stderr[-1500:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Sides:
    kafka: str
    raftlog: str

    def run(self, scenario: Callable[[str], T]) -> dict[str, T]:
        return {"kafka": scenario(self.kafka), "raftlog": scenario(self.raftlog)}


def assert_same(answers: dict[str, Any], what: str, known: dict[str, str] | None = None) -> Any:
    """The common answer of both brokers; AssertionError naming `what` and both answers if not.
    `known`: steps (keys of dict answers) where raftlog is known to differ, with the reason:
    when only those differ the test is xfail with the reasons, and a plain pass once they agree."""
    kafka, raftlog = answers["kafka"], answers["raftlog"]
    if known and isinstance(kafka, dict) and isinstance(raftlog, dict):
        differing = {k for k in set(kafka) | set(raftlog) if kafka.get(k) != raftlog.get(k)}
        if differing and differing <= set(known):
            import pytest

            pytest.xfail("; ".join(f"{k}: {known[k]} (Kafka {kafka.get(k)!r}, raftlog {raftlog.get(k)!r})"
                                   for k in sorted(differing)))
    if raftlog != kafka:
        if isinstance(kafka, dict) and isinstance(raftlog, dict):  # name only the steps that differ
            steps = sorted(set(kafka) | set(raftlog), key=str)
            diff = "".join(f"\n  {k}:\n    kafka:   {kafka.get(k)!r}\n    raftlog: {raftlog.get(k)!r}"
                           for k in steps if kafka.get(k) != raftlog.get(k))
        else:
            diff = f"\n  kafka:   {kafka!r}\n  raftlog: {raftlog!r}"
        raise AssertionError(f"{what}: raftlog answered differently from Apache Kafka{diff}")
    return kafka




def parse_topic_describe(text: str) -> dict[str, Any]:
    """`kafka-topics --describe` output -> per topic: partition count, replication factor, configs
    and per partition (replica count, leader among replicas, ISR == replicas). Topic ids, node ids
    and ELR are left out: they differ between two healthy clusters."""
    topics: dict[str, Any] = {}
    for line in text.splitlines():
        fields = dict(_split_fields(line))
        if "PartitionCount" in fields:
            configs = dict(kv.split("=", 1) for kv in fields.get("Configs", "").split(",") if "=" in kv)
            # Kafka 4 writes a cluster-wide min.insync.replicas when it formats storage (KIP-966),
            # so its describe lists it on every topic: a broker default, not the topic's own.
            configs.pop("min.insync.replicas", None)
            topics[fields["Topic"]] = {"partitions": int(fields["PartitionCount"]),
                                       "replication_factor": int(fields["ReplicationFactor"]),
                                       "configs": configs, "layout": {}}
        elif "Partition" in fields and fields.get("Topic") in topics:
            replicas = fields["Replicas"].split(",")
            isr = fields["Isr"].split(",")
            topics[fields["Topic"]]["layout"][int(fields["Partition"])] = {
                "replicas": len(replicas), "leader_in_replicas": fields["Leader"] in replicas,
                "isr_is_replicas": sorted(isr) == sorted(replicas)}
    return topics


def wait_until(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll `predicate` until it is true (returns True) or `timeout_s` passes (returns False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def _split_fields(line: str) -> list[tuple[str, str]]:
    """'Topic: t\tPartitionCount: 3\t...' -> [('Topic', 't'), ('PartitionCount', '3'), ...]."""
    out = []
    for part in line.strip().split("\t"):
        key, sep, value = part.partition(":")
        if sep:
            out.append((key.strip(), value.strip()))
    return out

"""Short fault-injection runs against a real 3-node cluster (RF=3, acks=all, flush always) end valid: no lost, duplicated or reordered writes under kill, pause, partition, leader-kill and storage-damage nemeses (torn tails, bit flips anywhere in any segment or index file, a full disk), and against a secure cluster (--secure)."""

from __future__ import annotations

import os

import pytest

from jepsen_style_tests.runner import RunConfig, run
from raftlog.base.client_properties import load_properties

# Seconds of workload per run (setup and final reads add ~10 s): override with
# RAFTLOG_JEPSEN_TIME_S for longer local runs.
TIME_LIMIT_S = float(os.environ.get("RAFTLOG_JEPSEN_TIME_S", "25"))
MIXED_TIME_LIMIT_S = float(os.environ.get("RAFTLOG_JEPSEN_MIXED_TIME_S", "600"))
ALL_NEMESES = ("kill", "pause", "partition", "leader-kill", "controller-kill", "rolling", "corrupt")


async def _valid_run(tmp_path, nemesis: tuple[str, ...], time_limit_s: float, **overrides):
    settings = dict(rate=100, nodes=3, partitions=4, concurrency=6, fault_interval_s=8, recovery_s=4)
    config = RunConfig(nemesis=nemesis, time_limit_s=time_limit_s, store=str(tmp_path / "store"),
                       **{**settings, **overrides})
    outcome = await run(config, out=None)
    where = f"seed={outcome.seed} dir={outcome.files.directory}"
    counts = outcome.history.counts()
    # An unknown verdict fails too: these runs always acknowledge sends and read to the end.
    assert outcome.verdict == "valid", (
        f"{outcome.verdict}: {outcome.result.counts} {list(outcome.result.unknown_reasons)} ({where})"
    )
    assert counts["send"].get("ok", 0) > 50, (counts, where)
    windows = outcome.history.fault_windows()
    assert windows and all(w.name in ("kill", "pause", "partition", "rolling-restart", "corrupt-tail",
                                      "bitflip", "disk-full") for w in windows), (windows, where)  # fmt: skip
    failed_nemesis = [p for p in outcome.history.pairs() if p.process == "nemesis" and p.type == "info"]
    assert not failed_nemesis, (failed_nemesis[:3], where)
    return outcome


@pytest.mark.jepsen
@pytest.mark.parametrize("nemesis", [("kill",), ("pause",), ("partition",), ("leader-kill",), ("corrupt",),
                                     ("bitflip",), ("disk-full",)],
                         ids=lambda n: "+".join(n))
async def test_short_run_is_valid(tmp_path, nemesis):
    await _valid_run(tmp_path, nemesis, TIME_LIMIT_S)


@pytest.mark.jepsen
async def test_secure_cluster_run_is_valid(tmp_path):
    # scripts/jepsen run --secure: the cluster of `cluster up --secure` (TLS + SASL/SCRAM
    # clients, ACLs, mutual-TLS peers through the partition proxies) under kills and partitions.
    outcome = await _valid_run(tmp_path, ("kill", "partition"), min(TIME_LIMIT_S, 22.0), secure=True)
    properties = outcome.files.directory / "cluster" / "client.properties"
    password = load_properties(properties)["sasl.password"]
    # The admin's password is in no log and no history the run wrote (only in client.properties).
    written = [f for f in outcome.files.directory.rglob("*") if f.is_file() and f != properties
               and f.suffix in (".log", ".jsonl", ".json", ".txt", ".edn")]
    assert written and not [f for f in written if password.encode() in f.read_bytes()]


@pytest.mark.jepsen
async def test_group_workload_run_is_valid(tmp_path):
    # Consumer-group ops (subscribe, polls that join and rebalance, commits) under kills: the
    # group checks (double-assignment, nonmonotonic-commit) run on real group facts.
    outcome = await _valid_run(tmp_path, ("kill",), min(TIME_LIMIT_S, 22.0), workload="group")
    where = f"seed={outcome.seed} dir={outcome.files.directory}"
    counts = outcome.history.counts()
    assert counts.get("subscribe", {}).get("ok", 0) >= 1, (counts, where)
    assert counts.get("commit", {}).get("ok", 0) >= 1, (counts, where)
    committed = [op for op in outcome.history if op.f == "commit" and op.type == "ok" and op.value]
    assert committed and all(op.get("generation_id") is not None for op in committed), (counts, where)


@pytest.mark.jepsen
@pytest.mark.slow
async def test_mixed_ten_minute_run_is_valid(tmp_path):
    # Documented command: scripts/jepsen run --nemesis kill,pause,partition,leader-kill,
    #   controller-kill,rolling,corrupt --time-limit 600 --rate 100
    await _valid_run(tmp_path, ALL_NEMESES, MIXED_TIME_LIMIT_S, fault_interval_s=10)

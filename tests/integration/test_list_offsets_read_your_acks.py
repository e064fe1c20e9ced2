"""ListOffsets right after an acks=1 produce names the acked record (issue 40, KafkaJS's
deleteTopicRecords / fetchTopicsOffset tests): under `flush.policy=always` the high watermark
moves at the fsync, and acks=1 is answered at the leader's append, so a ListOffsets(latest)
that came between the two answered the old end. It now waits, bounded, for the high watermark
to reach the log end it found (partition/service.py "Read-your-acks"). Three replica managers
in one trio process (test_replica_group.py's harness) with every log's fsync held by a gate,
so the window is there on any machine."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest
import trio

from partition.log import Log
from raftlog.base.peer import PeerPool

_spec = importlib.util.spec_from_file_location(
    "replica_group_harness", Path(__file__).with_name("test_replica_group.py"))
rg = importlib.util.module_from_spec(_spec)
sys.modules["replica_group_harness"] = rg
_spec.loader.exec_module(rg)

LATEST, EARLIEST = -1, -2


@pytest.fixture
async def group(tmp_path, nursery):
    client = PeerPool(0, backoff_max_s=0.2)
    await nursery.start(client.run)
    g = rg.Group(tmp_path, nursery, client)
    for i in (1, 2, 3):
        await g.start(i)
    yield g
    for i in list(g.scopes):
        await g.stop(i)


async def _list(g, node: int, timestamp: int) -> dict:
    r = await g.call(node, "list_offsets", partitions=[{"topic": rg.TOPIC, "partition": 0, "timestamp": timestamp}])
    return r["partitions"][0]


async def test_list_offsets_after_an_acks_1_produce_waits_for_the_fsync_it_needs(group, monkeypatch):
    g = group
    out = await g.produce_to_leader(rg._batch(b"first"))
    assert "error" not in out, out
    leader = await g.wait_leader()
    replica = g.managers[leader].replica(rg.TOPIC, 0)
    with trio.fail_after(rg.WAIT_S):
        while replica.high_watermark < 1:
            await trio.sleep(0.01)

    gate = threading.Event()  # every log's fsync waits here (in its worker thread)
    real_flush = Log.flush

    def held_flush(self: Log) -> int:
        gate.wait(rg.WAIT_S)
        return real_flush(self)

    monkeypatch.setattr(Log, "flush", held_flush)
    try:
        out = await g.produce(leader, rg._batch(b"second"), acks=1)
        assert "error" not in out and out["base_offset"] == 1, out
        assert replica.high_watermark == 1  # the fsync is held: the acked record is above it
        assert (await _list(g, leader, EARLIEST))["offset"] == 0  # earliest never waits
        answers: list[dict] = []

        async def latest() -> None:
            answers.append(await _list(g, leader, LATEST))

        async with trio.open_nursery() as n:
            n.start_soon(latest)
            with trio.fail_after(rg.WAIT_S):  # until it waits on the high watermark, or answered
                while not replica._watchers and not answers:
                    await trio.sleep(0.005)
            gate.set()
        assert answers[0].get("offset") == 2, answers  # the old code answered 1 at once
        assert (await _list(g, leader, 1_700_000_000_000))["offset"] == 0
    finally:
        gate.set()

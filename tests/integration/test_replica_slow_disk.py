"""Disk work is off the event loop (issue 13): while one partition's compaction is stuck in an injected slow disk (a file wrapper that blocks until released), other partitions, and the compacting partition itself, keep answering acks=all produce and fetch; damage found by a read is repaired from the peers."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest
import trio

from partition import cleaner
from partition.batch import BatchBuilder, decode_batches
from raftlog.base.peer import PeerPool

_spec = importlib.util.spec_from_file_location(
    "replica_group_harness", Path(__file__).with_name("test_replica_group.py"))
rg = importlib.util.module_from_spec(_spec)
sys.modules["replica_group_harness"] = rg
_spec.loader.exec_module(rg)

CONFIGS = {"cleanup_policy": "compact", "segment_bytes": "4096"}


def _keyed(i: int, key: bytes) -> bytes:
    b = BatchBuilder()
    b.append(b"v%05d" % i + b"." * 300, key, timestamp_ms=1_700_000_000_000)
    return b.build()


@pytest.fixture
async def group2(tmp_path, nursery):
    client = PeerPool(0, backoff_max_s=0.2)
    await nursery.start(client.run)
    g = rg.Group(tmp_path, nursery, client, partitions=2, configs=CONFIGS)
    for i in (1, 2, 3):
        await g.start(i)
    yield g
    for i in list(g.scopes):
        await g.stop(i)


async def _fetch_values(g, node: int, partition: int) -> list[bytes]:
    values, offset = [], 0
    while True:
        r = await g.call(node, "fetch", max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                         partitions=[{"topic": rg.TOPIC, "partition": partition, "fetch_offset": offset}])
        p = r["partitions"][0]
        assert "error" not in p, p
        if not p["records"]:
            return values
        for h, recs in decode_batches(p["records"]):
            if not h.is_control:
                values += [rec.value for rec in recs if rec.offset >= offset]
            offset = h.next_offset


async def test_other_partitions_answer_while_a_compaction_is_stuck_on_a_slow_disk(group2, monkeypatch):
    g = group2
    l0 = await g.wait_leader(0)
    await g.wait_leader(1)
    for i in range(40):  # one key: everything but the newest value is garbage
        out = await g.produce(l0, _keyed(i, b"k"), partition=0)
        assert "error" not in out, out
    entered, release = threading.Event(), threading.Event()
    real = cleaner.pwrite_all

    def slow_pwrite_all(fd, data, pos):  # the injected slow disk: blocks the cleaner's writes
        entered.set()
        release.wait(timeout=60)
        return real(fd, data, pos)

    monkeypatch.setattr(cleaner, "pwrite_all", slow_pwrite_all)
    r0 = g.managers[l0].replica(rg.TOPIC, 0)
    done = {}

    async def compact():
        done["result"] = await r0.maintain()

    async with trio.open_nursery() as n:
        n.start_soon(compact)
        with trio.fail_after(rg.WAIT_S):
            while not entered.is_set():
                await trio.sleep(0.01)
        try:
            with trio.fail_after(rg.WAIT_S):  # the compaction is stuck in the disk meanwhile
                for i in range(5):  # (an election on a loaded machine may move partition 1)
                    out = await g.produce_to_leader(_keyed(i, b"other"), partition=1)
                    assert "error" not in out, out
                assert len(await _fetch_values(g, await g.wait_leader(1), 1)) == 5
                out = await g.produce(l0, _keyed(99, b"k2"), partition=0)  # and its own partition
                assert "error" not in out, out
                assert r0._cleaning and not release.is_set()
        finally:
            release.set()
    assert done["result"]["records_removed"] > 0
    values = await _fetch_values(g, l0, 0)
    assert values[-2:] == [b"v00039" + b"." * 300, b"v00099" + b"." * 300]
    assert len(values) < 40


async def test_a_damaged_batch_found_by_a_read_is_repaired_from_the_peers(group2):
    g = group2
    l0 = await g.wait_leader(0)
    for i in range(30):
        assert "error" not in await g.produce(l0, _keyed(i, b"k%d" % i), partition=0)
    follower = next(n for n in (1, 2, 3) if n != l0)
    r = g.managers[follower].replica(rg.TOPIC, 0)
    with trio.fail_after(rg.WAIT_S):
        while r.log.log_end_offset < g.managers[l0].replica(rg.TOPIC, 0).log.log_end_offset:
            await trio.sleep(0.02)
    seg = r.log._segments[1]
    with open(seg.log_path, "r+b") as f:  # flip a byte inside the follower's second segment
        f.seek(seg.size_bytes // 2)
        b = f.read(1)
        f.seek(seg.size_bytes // 2)
        f.write(bytes([b[0] ^ 0x10]))
    before = r.log.log_end_offset
    # A read finds it (here the leader-side read path a transfer or fetch would use).
    from partition.errors import StorageDamageError
    with pytest.raises(StorageDamageError) as e:
        r.log.read(seg.base_offset, 1 << 20)
    r.report_damage(e.value, found_by="test")
    with trio.fail_after(rg.WAIT_S):
        while r.repairs < 1 or r.core.needs_catch_up or r.log.log_end_offset < before:
            await trio.sleep(0.02)
    assert r.log.check_segment(seg.base_offset).damage is None
    await g.stop(l0)  # the repaired replica may now lead: every value is there
    new = await g.wait_leader(0, not_=l0)
    assert len(await _fetch_values(g, new, 0)) == 30

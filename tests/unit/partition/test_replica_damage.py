"""A replica never serves damaged bytes, as bytes or as a zero-copy slice: a single-voter replica keeps its log and answers the bad batch CORRUPT_MESSAGE with its offset; a replica with peers found damaged at open cuts it and comes back flagged needs_catch_up."""

from __future__ import annotations

import random

import pytest
import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.errors import StorageDamageError
from partition.quorum_state import read_quorum_state
from partition.replica import Replica

CONFIG = TopicConfig.from_configs({"segment_bytes": "4096"})


class _Quiet:
    def send(self, replica, to, message):
        pass


def _replica(directory, voters):
    return Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=voters,
                   directory=directory, topic_config=CONFIG, transport=_Quiet(),
                   rng=random.Random(1), clock_ms=lambda: 1000)


def _batch(i):
    b = BatchBuilder()
    b.append(b"v%04d" % i + b"." * 300, key=b"k%d" % i, timestamp_ms=1000 + i)
    return b.build()


def _fill(r, n=40):
    for i in range(n):
        r.log.append(_batch(i), leader_epoch=1, now_ms=1000)
    r.log.flush()


def _flip_middle_of_second_segment(r):
    seg = r.log._segments[1]
    with open(seg.log_path, "r+b") as f:
        f.seek(seg.size_bytes // 2)
        b = f.read(1)
        f.seek(seg.size_bytes // 2)
        f.write(bytes([b[0] ^ 0x10]))
    return seg


async def test_a_single_voter_answers_corrupt_message_with_the_offset_and_keeps_its_log(tmp_path, nursery):
    r = _replica(tmp_path / "t-0", (1,))
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    await r.start_election()
    with trio.fail_after(5):
        while not r.is_leader:
            await r.tick()
            await trio.sleep(0.01)
    for i in range(40):
        await r.append_as_leader(_batch(i), acks=1)
    with trio.fail_after(5):
        while r.high_watermark < r.log.log_end_offset:
            await r.tick()
            await trio.sleep(0.01)
    end = r.log.log_end_offset
    seg = _flip_middle_of_second_segment(r)
    with pytest.raises(StorageDamageError) as e:
        await r.read_committed(seg.base_offset, 1 << 20)
    assert e.value.code == "CORRUPT_MESSAGE" and e.value.details["offset"] >= seg.base_offset
    with pytest.raises(StorageDamageError):  # the Kafka listener's zero-copy read: no slice
        await r.read_committed_slice(seg.base_offset, 1 << 20)
    with trio.fail_after(5):
        while r.damaged is None:
            await trio.sleep(0.01)
    assert r.damaged["segment"] == seg.base_offset and r.repairs == 0
    assert r.log.log_end_offset == end and r.is_leader  # nothing cut: no peer to repair from
    assert await r.read_committed(0, 100)  # what lies before it is still served
    s = await r.read_committed_slice(0, 100)
    assert s is not None and s.length > 0
    s.close()
    await r.close()


def test_damage_found_at_open_is_cut_and_flags_the_replica(tmp_path):
    d = tmp_path / "t-0"
    r = _replica(d, (1, 2, 3))
    r.open()
    _fill(r)
    seg = r.log._segments[1]
    # A header the producer-state walk cannot read: magic of the second batch of segment 1.
    second = [p for p, _ in seg.walk(0, seg.size_bytes)][1]
    r.log.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(second + 16)
        f.write(b"\x07")
    again = _replica(d, (1, 2, 3))
    again.open()
    assert again.log.log_end_offset < 40
    assert again.core.needs_catch_up and read_quorum_state(d).needs_catch_up
    again.log.close()

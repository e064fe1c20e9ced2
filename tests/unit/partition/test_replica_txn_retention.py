"""Issue 42, the log side: retention never moves the log start past the first offset of an open
transaction (Kafka: the log start never passes the first unstable offset), and once the
transaction's marker is committed it goes on as before."""

from __future__ import annotations

import random

import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.replica import Replica

CONFIG = TopicConfig.from_configs({"segment_bytes": "4096", "retention_bytes": "4096"})
PID = 7


class _Quiet:
    def send(self, replica, to, message):
        pass


def _batch(i: int, *, txn: bool = False) -> bytes:
    if txn:
        b = BatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=0, is_transactional=True)
    else:
        b = BatchBuilder()
    b.append(b"v%04d" % i + b"." * 300, key=b"k%d" % i, timestamp_ms=1000 + i)
    return b.build()


async def _verified(producer_id: int, producer_epoch: int, marker_offset) -> int:
    """The coordinator says: this partition is in the producer's ongoing transaction."""
    return marker_offset()


async def test_retention_stops_at_an_open_transaction_and_goes_on_after_its_marker(tmp_path, nursery):
    r = Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1,), directory=tmp_path / "t-0",
                topic_config=CONFIG, transport=_Quiet(), rng=random.Random(1), clock_ms=lambda: 1000)
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    await r.start_election()
    with trio.fail_after(30):
        while not r.is_leader:
            await r.tick()
            await trio.sleep(0.01)
    for i in range(30):
        await r.append_as_leader(_batch(i), acks=1)
    opened = await r.append_as_leader(_batch(30, txn=True), acks=1, verify_txn=_verified)
    for i in range(31, 90):
        await r.append_as_leader(_batch(i), acks=1)
    with trio.fail_after(30):
        while r.core.high_watermark < r.log.log_end_offset:
            await trio.sleep(0.01)
    assert len(r.log._segments) > 6
    await r.maintain()
    assert 0 < r.log.log_start_offset <= opened.first_offset  # retention ran, and stopped there
    waiter = await r.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    await waiter.wait(trio.current_time() + 30)
    await r.maintain()
    assert r.log.log_start_offset > opened.first_offset  # the transaction is over: retention goes on

"""Issue 42, the partition side of the coordinator's own writes: a marker from an older coordinator epoch than the producer's last one is refused (TRANSACTION_COORDINATOR_FENCED) and writes nothing, and a coordinator's transactional batch (the group coordinator's TxnOffsetCommit) is taken without KIP-890 verification or sequence numbers, but never from a fenced producer epoch."""

from __future__ import annotations

import random

import pytest
import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.replica import Replica
from raftlog.base.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError

PID = 11


class _Quiet:
    def send(self, replica, to, message):
        pass


async def _leader(tmp_path, nursery) -> Replica:
    r = Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1,), directory=tmp_path / "t-0",
                topic_config=TopicConfig.from_configs({}), transport=_Quiet(), rng=random.Random(1),
                clock_ms=lambda: 1000)
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    await r.start_election()
    with trio.fail_after(30):
        while not r.is_leader:
            await r.tick()
            await trio.sleep(0.01)
    return r


def _txn_batch(epoch: int) -> bytes:
    b = BatchBuilder(producer_id=PID, producer_epoch=epoch, is_transactional=True)  # no sequence
    b.append(b"offset", key=b"group-key", timestamp_ms=1000)
    return b.build()


async def test_a_marker_of_an_older_coordinator_epoch_is_fenced(tmp_path, nursery):
    r = await _leader(tmp_path, nursery)
    first = await r.append_as_leader(_txn_batch(0), acks=1, coordinator=True)
    waiter = await r.append_marker(PID, 0, commit=True, coordinator_epoch=4)
    await waiter.wait(trio.current_time() + 30)
    end = r.log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        await r.append_marker(PID, 0, commit=False, coordinator_epoch=3)
    assert r.log.log_end_offset == end  # nothing written
    again = await r.append_marker(PID, 0, commit=True, coordinator_epoch=4)  # the same coordinator retries
    await again.wait(trio.current_time() + 30)
    assert r.log.log_end_offset == end + 1 and first.first_offset < end


async def test_a_coordinators_transactional_batch_needs_no_verification_but_a_current_epoch(tmp_path, nursery):
    r = await _leader(tmp_path, nursery)
    with pytest.raises(InvalidTxnStateError):  # a client's would need the coordinator's word (KIP-890)
        await r.append_as_leader(_txn_batch(1), acks=1)
    await r.append_as_leader(_txn_batch(1), acks=1, coordinator=True)
    await r.append_as_leader(_txn_batch(1), acks=1, coordinator=True)  # no sequence to check
    assert r.producers.txns.open == {PID: 0}
    with pytest.raises(InvalidProducerEpochError):
        await r.append_as_leader(_txn_batch(0), acks=1, coordinator=True)
    assert r.log.log_end_offset == 2

"""Issue 42, the partition side of the coordinator's own writes: a marker from an older coordinator epoch than the producer's last one is refused (TRANSACTION_COORDINATOR_FENCED) and writes nothing, and a coordinator's transactional batch (the group coordinator's TxnOffsetCommit) is taken without KIP-890 verification or sequence numbers, but never from a fenced producer epoch."""

from __future__ import annotations

import random

import pytest
import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.replica import Replica
from raftlog.base.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)

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


def _client_batch(epoch: int, base_sequence: int, n: int) -> bytes:
    b = BatchBuilder(producer_id=PID, producer_epoch=epoch, base_sequence=base_sequence, is_transactional=True)
    for i in range(n):
        b.append(b"v%d" % (base_sequence + i), timestamp_ms=1000)
    return b.build()


async def test_a_batch_verified_before_its_transactions_marker_is_refused(tmp_path, nursery):
    """Kafka's verification guard (KIP-890 part 1): the coordinator said yes for the transaction
    that was ongoing, then its ABORT marker reached the partition before the batch did: the
    batch belongs to the aborted transaction and is refused (INVALID_TXN_STATE), nothing
    written; a batch verified after the marker (the next transaction) is taken."""
    r = await _leader(tmp_path, nursery)
    asked = []

    async def marker_meanwhile(producer_id: int, epoch: int) -> None:
        # The marker lands while the coordinator is asked; asked again, it knows the
        # transaction has ended.
        asked.append(epoch)
        if len(asked) > 1:
            raise InvalidTxnStateError("the transaction has ended")
        waiter = await r.append_marker(producer_id, epoch, commit=False, coordinator_epoch=0)
        await waiter.wait(trio.current_time() + 30)

    async def yes(producer_id: int, epoch: int) -> None:
        pass

    with pytest.raises(InvalidTxnStateError):
        await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=marker_meanwhile)
    end = r.log.log_end_offset
    assert end == 1 and r.producers.txns.open == {} and len(asked) == 2  # the marker only
    res = await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=yes)
    assert (res.first_offset, res.duplicate) == (1, False) and r.producers.txns.open == {PID: 1}


async def test_the_previous_transactions_marker_landing_during_verification_refuses_nothing(tmp_path, nursery):
    """Transactions V2's implicit add waits out CONCURRENT_TRANSACTIONS while the previous
    transaction's markers are written; its marker landing here meanwhile is not this batch's
    transaction ending: asked again, the coordinator says the new one is ongoing, and the batch
    is taken (before: INVALID_TXN_STATE, the Java client's aborted and open transactions lost
    their records, tests/conformance/test_java_client.py)."""
    r = await _leader(tmp_path, nursery)
    asked = []

    async def previous_marker_meanwhile(producer_id: int, epoch: int) -> None:
        asked.append(epoch)
        if len(asked) == 1:
            waiter = await r.append_marker(producer_id, epoch, commit=True, coordinator_epoch=0)
            await waiter.wait(trio.current_time() + 30)

    res = await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=previous_marker_meanwhile)
    assert (res.first_offset, res.duplicate) == (1, False) and r.producers.txns.open == {PID: 1} and len(asked) == 2


async def test_a_new_transaction_reusing_an_aborted_batchs_sequences_is_refused(tmp_path, nursery):
    """The lost write the fault suite found (issue 42): a batch of transaction 1 was written, the
    producer never heard, aborted, and began transaction 2 with the same epoch and the same
    sequences. It was answered as a duplicate with the aborted batch's offsets (acked, never
    written); now OUT_OF_ORDER_SEQUENCE_NUMBER, nothing written."""
    r = await _leader(tmp_path, nursery)

    async def yes(producer_id: int, epoch: int) -> None:
        pass

    first = await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=yes)
    waiter = await r.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    await waiter.wait(trio.current_time() + 30)
    end = r.log.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=yes)
    assert r.log.log_end_offset == end and first.first_offset == 0
    nxt = await r.append_as_leader(_client_batch(0, 2, 1), acks=1, verify_txn=yes)
    assert (nxt.first_offset, nxt.duplicate) == (end, False)

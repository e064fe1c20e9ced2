"""Issue 42, the partition side of the coordinator's own writes: a marker from an older coordinator epoch than the producer's last one is refused (TRANSACTION_COORDINATOR_FENCED) and writes nothing, and a coordinator's transactional batch (the group coordinator's TxnOffsetCommit) is taken without KIP-890 verification or sequence numbers, but never from a fenced producer epoch."""

from __future__ import annotations

import random
from functools import partial
from types import SimpleNamespace

import pytest
import trio

from groupcoord.txn_port import AddPartitionsToTxn, TxnPartitionsAdded
from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.replica import Replica
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from raftlog.node.txn_link import TxnLink

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


def _coordinator(r: Replica, answers: list) -> tuple[TxnLink, list[bool]]:
    """A partition leader's TxnLink (raftlog/node/txn_link.py) to a coordinator on the same node
    whose answers are `answers`, in order: "yes", an error to raise, or ("marker", epoch,
    commit, then): that producer's marker lands here while the question is in flight, then
    `then` (either of the others) is the answer. Returns the link and each question's
    verify_only."""
    asked: list[bool] = []

    class Coordinator:
        async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded:
            asked.append(request.verify_only)
            answer = answers.pop(0)
            if isinstance(answer, tuple):
                _, epoch, commit, answer = answer
                waiter = await r.append_marker(PID, epoch, commit=commit, coordinator_epoch=0)
                await waiter.wait(trio.current_time() + 30)
            if isinstance(answer, Exception):
                raise answer
            return TxnPartitionsAdded()

    metadata = SimpleNamespace(image=SimpleNamespace(partition=lambda topic, p: SimpleNamespace(leader=1)))
    link = TxnLink(1, metadata, peers=None, port=None, txn=Coordinator(), txn_partitions=4)  # type: ignore[arg-type]
    return link, asked


def _verifier(link: TxnLink, *, add: bool):
    return partial(link.verify_txn, "app", "t", 0, add=add)


async def test_a_batch_verified_before_its_transactions_marker_is_refused(tmp_path, nursery):
    """Kafka's verification guard (KIP-890 part 1), Transactions V1 (one epoch for every
    transaction): the coordinator said yes for the transaction that was ongoing, then its ABORT
    marker reached the partition before the batch did: the batch belongs to the aborted
    transaction and is refused (INVALID_TXN_STATE), nothing written, without asking again
    (before: asked again, a coordinator whose next transaction had the partition already let
    the aborted transaction's batch into it); a batch verified after the marker is taken."""
    r = await _leader(tmp_path, nursery)
    link, asked = _coordinator(r, [("marker", 0, False, "yes"), "yes", "yes"])
    with pytest.raises(InvalidTxnStateError):
        await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=_verifier(link, add=False))
    end = r.log.log_end_offset
    assert end == 1 and r.producers.txns.open == {} and asked == [True]  # the marker only
    res = await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=_verifier(link, add=False))
    assert (res.first_offset, res.duplicate) == (1, False) and r.producers.txns.open == {PID: 1}


async def test_the_previous_transactions_marker_landing_during_the_add_refuses_nothing(tmp_path, nursery):
    """Transactions V2's implicit add waits out CONCURRENT_TRANSACTIONS while the previous
    transaction's markers are written (with the bumped epoch, this batch's); that marker landing
    here meanwhile is not this batch's transaction ending: the retry's question is taken after
    it, and the batch is taken with no further question (before fb3f889: INVALID_TXN_STATE, the
    Java client's aborted and open transactions lost their records; before this: a third)."""
    r = await _leader(tmp_path, nursery)
    link, asked = _coordinator(r, [("marker", 1, True, ConcurrentTransactionsError("markers")), "yes"])
    res = await r.append_as_leader(_client_batch(1, 0, 2), acks=1, verify_txn=_verifier(link, add=True))
    assert (res.first_offset, res.duplicate) == (1, False) and r.producers.txns.open == {PID: 1}
    assert asked == [False, False]


async def test_an_add_sent_before_the_previous_marker_and_answered_after_it_refuses_nothing(tmp_path, nursery):
    """The case the last note left (Transactions V2): the add is sent just before the previous
    transaction's marker lands here and answered after it. Taken from the question alone, the
    guard would refuse the batch (a spurious INVALID_TXN_STATE); the batch's epoch names its
    transaction, so the add is asked once more from after the marker, and the batch is taken."""
    r = await _leader(tmp_path, nursery)
    link, asked = _coordinator(r, [("marker", 1, True, "yes"), "yes"])
    res = await r.append_as_leader(_client_batch(1, 0, 2), acks=1, verify_txn=_verifier(link, add=True))
    assert (res.first_offset, res.duplicate) == (1, False) and r.producers.txns.open == {PID: 1}
    assert asked == [False, False]


async def test_an_add_whose_own_transaction_ended_meanwhile_is_refused(tmp_path, nursery):
    """Transactions V2: the coordinator added the partition, then aborted the transaction (a
    timeout; the marker carries the bumped epoch) before the answer arrived: asked again, it
    says the producer's epoch is fenced, and nothing is written."""
    r = await _leader(tmp_path, nursery)
    link, asked = _coordinator(r, [("marker", 2, False, "yes"), ProducerFencedError("epoch 2 now")])
    with pytest.raises(InvalidProducerEpochError):
        await r.append_as_leader(_client_batch(1, 0, 2), acks=1, verify_txn=_verifier(link, add=True))
    assert r.log.log_end_offset == 1 and r.producers.txns.open == {} and len(asked) == 2


async def test_a_new_transaction_reusing_an_aborted_batchs_sequences_is_refused(tmp_path, nursery):
    """The lost write the fault suite found (issue 42): a batch of transaction 1 was written, the
    producer never heard, aborted, and began transaction 2 with the same epoch and the same
    sequences. It was answered as a duplicate with the aborted batch's offsets (acked, never
    written); now OUT_OF_ORDER_SEQUENCE_NUMBER, nothing written."""
    r = await _leader(tmp_path, nursery)

    async def yes(producer_id: int, epoch: int, marker_offset) -> int:
        return marker_offset()

    first = await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=yes)
    waiter = await r.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    await waiter.wait(trio.current_time() + 30)
    end = r.log.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        await r.append_as_leader(_client_batch(0, 0, 2), acks=1, verify_txn=yes)
    assert r.log.log_end_offset == end and first.first_offset == 0
    nxt = await r.append_as_leader(_client_batch(0, 2, 1), acks=1, verify_txn=yes)
    assert (nxt.first_offset, nxt.duplicate) == (end, False)

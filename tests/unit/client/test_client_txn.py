"""The transactional client's pure parts: the state machine refuses calls out of order with TransactionStateError and nothing sent, a fence is final, an add answer moves partitions into the transaction, and read_committed drops exactly the batches of aborted transactions up to each ABORT marker (Kafka's consumer rule)."""

from __future__ import annotations

import pytest

from partition.batch import BatchBuilder, txn_marker_batch
from raftlog.base.errors import InvalidProducerEpochError, ProducerFencedError
from raftlog.client.consumer import append_fetched, drop_aborted
from raftlog.client.core import Call
from raftlog.client.errors import TransactionStateError
from raftlog.client.txn import TxnCall, TxnState, end_transaction, init_transactions, send_offsets

pytestmark = pytest.mark.unit


def batch(base_offset: int, producer_id: int, values: list[bytes], transactional: bool = True) -> bytes:
    b = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=transactional,
                     base_offset=base_offset)
    for v in values:
        b.append(v, None, (), timestamp_ms=1)
    return b.build()


def marker(base_offset: int, producer_id: int, commit: bool) -> bytes:
    raw = bytearray(txn_marker_batch(producer_id, 0, commit=commit, coordinator_epoch=0, timestamp_ms=1))
    raw[0:8] = base_offset.to_bytes(8, "big")  # the base offset is outside the CRC
    return bytes(raw)


def test_calls_out_of_order_raise_and_send_nothing() -> None:
    txn = TxnState("t")
    with pytest.raises(TransactionStateError):
        txn.check_sendable()
    with pytest.raises(TransactionStateError):
        txn.begin()
    with pytest.raises(TransactionStateError):
        next(end_transaction(txn, True))
    proc = init_transactions(txn)
    assert next(proc) == TxnCall({"op": "find_txn_coordinator", "transactional_id": "t"})
    effect = proc.send({"partition": 3})
    assert effect.route == ("__transaction_state", 3) and effect.request["op"] == "init_txn_producer_id"
    with pytest.raises(StopIteration) as stop:
        proc.send({"producer_id": 7, "producer_epoch": 2})
    assert stop.value.value == (7, 2)
    with pytest.raises(TransactionStateError):
        txn.check_sendable()  # ready, not in a transaction
    txn.begin()
    txn.check_sendable()
    with pytest.raises(TransactionStateError):
        txn.begin()
    with pytest.raises(ValueError):
        next(send_offsets(txn, {("a", 0): 1}, ""))


def test_a_fence_is_final() -> None:
    txn = TxnState("t")
    txn.state, txn.producer_id, txn.producer_epoch = "ready", 7, 0
    txn.begin()
    txn.failed(InvalidProducerEpochError("old epoch"))
    for call in (txn.check_sendable, txn.begin, txn.check_usable):
        with pytest.raises(ProducerFencedError):
            call()


def test_an_add_answer_moves_partitions_into_the_transaction() -> None:
    txn = TxnState("t")
    txn.state = "ready"
    txn.begin()
    txn.note_partition("a", 1)
    txn.note_partition("a", 0)
    req = txn.add_request()
    assert req["partitions"] == [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 1}]
    assert not txn.may_send("a", 0)
    txn.add_call = Call(req, None, 0)
    assert txn.add_request() is None  # one add at a time
    txn.add_call.done, txn.add_call.result = True, {}
    assert txn.add_done() is None
    assert txn.may_send("a", 0) and txn.may_send("a", 1) and txn.add_request() is None


def test_read_committed_drops_aborted_batches_up_to_their_abort_marker() -> None:
    records = b"".join([
        batch(0, 5, [b"x0", b"x1"]),        # producer 5, aborted below
        batch(2, 6, [b"c0"]),               # producer 6, committed
        batch(3, 9, [b"plain"], transactional=False),
        marker(4, 5, commit=False),
        marker(5, 6, commit=True),
        batch(6, 5, [b"x-next"]),           # producer 5's next transaction: not aborted
    ])
    got: list = []
    append_fetched("t", 0, records, 0, got)
    kept = drop_aborted(records, [[5, 0]], got)
    assert [r.value for r in kept] == [b"c0", b"plain", b"x-next"]
    assert drop_aborted(records, [], got) == got

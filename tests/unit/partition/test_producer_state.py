"""partition/producer_state.py: retries get their original offsets, gaps and zombies are refused, and the state rebuilds from headers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.batch import BatchBuilder, iter_headers, stamp
from partition.producer_state import MAX_BATCHES, Duplicate, ProducerStateManager
from raftlog.base.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
)


def _append(state: ProducerStateManager, log: list, pid: int, epoch: int, seq: int, n: int):
    """What the leader does: check, then (if new) append at the log end and record."""
    last_seq = seq + n - 1
    dup = state.check(pid, epoch, seq, last_seq)
    if dup is not None:
        return dup
    first = len(log)
    log.extend([(pid, epoch, seq + i) for i in range(n)])
    state.record(pid, epoch, seq, last_seq, first, first + n - 1)
    return Duplicate(first, first + n - 1)


def test_in_order_batches_are_accepted_and_a_retry_gets_the_original_offsets():
    s, log = ProducerStateManager(), []
    assert _append(s, log, 7, 0, 0, 3) == (0, 2)
    assert _append(s, log, 7, 0, 3, 2) == (3, 4)
    assert s.check(7, 0, 0, 2) == Duplicate(0, 2)
    assert s.check(7, 0, 3, 4) == Duplicate(3, 4)
    assert s.check(7, 0, 5, 5) is None
    assert len(log) == 5


def test_gap_zombie_epoch_and_new_epoch_rules():
    s, log = ProducerStateManager(), []
    _append(s, log, 1, 3, 0, 1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(1, 3, 5, 5)  # a gap
    with pytest.raises(InvalidProducerEpochError):
        s.check(1, 2, 1, 1)  # a fenced producer
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(1, 4, 1, 1)  # a new epoch must restart at 0
    assert s.check(1, 4, 0, 0) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(2, 0, 9, 9)  # never seen, does not start at 0
    assert s.check(-1, -1, -1, -1) is None  # not idempotent: nothing to check


def test_a_retry_older_than_the_window_is_a_duplicate_sequence_error():
    s, log = ProducerStateManager(), []
    for i in range(MAX_BATCHES + 2):
        _append(s, log, 1, 0, i, 1)
    with pytest.raises(DuplicateSequenceNumberError):
        s.check(1, 0, 0, 0)
    assert s.check(1, 0, 2, 2) == Duplicate(2, 2)


def test_a_batch_straddling_the_last_sequence_is_out_of_order_not_a_duplicate():
    # Written: sequences 0-9 and 10-14. A writer that cut its records differently sends
    # 10-19: its tail 15-19 was never written, so it must not be taken as "written before".
    s, log = ProducerStateManager(), []
    _append(s, log, 1, 0, 0, 10)
    _append(s, log, 1, 0, 10, 5)
    with pytest.raises(OutOfOrderSequenceNumberError) as err:
        s.check(1, 0, 10, 19)
    assert err.value.details["expected_sequence"] == 15  # on the wire: where to resume
    assert err.value.to_wire()["expected_sequence"] == 15
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(1, 0, 12, 15)
    assert s.check(1, 0, 10, 14) == Duplicate(10, 14)
    assert s.check(1, 0, 15, 20) is None


def test_sequences_wrap_at_int32():
    s = ProducerStateManager()
    s.record(1, 0, 2**31 - 2, 2**31 - 1, 10, 11)
    assert s.check(1, 0, 0, 0) is None
    with pytest.raises(DuplicateSequenceNumberError):
        s.check(1, 0, 2**31 - 5, 2**31 - 5)


def test_producers_are_bounded_oldest_forgotten():
    s = ProducerStateManager(max_producers=2)
    for pid in (1, 2, 3):
        s.record(pid, 0, 0, 0, pid, pid)
    assert s.entry(1) is None and s.entry(3) is not None and len(s) == 2


def test_truncate_drops_lost_batches_and_asks_for_rebuild_when_a_full_window_empties():
    s = ProducerStateManager()
    for i in range(MAX_BATCHES):
        s.record(1, 0, i, i, i, i)
    s.record(2, 0, 0, 0, 10, 10)
    assert s.truncate(12) is False  # nothing at or above 12
    assert s.truncate(3) is False  # pid 1 keeps 0..2, pid 2 is gone (it had one batch)
    assert s.entry(2) is None and s.check(1, 0, 3, 3) is None
    for i in range(3, 8):
        s.record(1, 0, i, i, 20 + i, 20 + i)
    assert s.truncate(0) is True  # a full window went: older batches may still be in the log


def _stamped(batches):
    buf = bytearray()
    offset = 0
    for pid, epoch, seq, n in batches:
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        for i in range(n):
            b.append(b"v", None, timestamp_ms=1)
        raw = bytearray(b.build())
        stamp(raw, 0, offset, 1)
        offset += n
        buf += raw
    return bytes(buf)


def test_apply_headers_rebuilds_the_same_answers_as_the_leader_had():
    batches = [(5, 0, 0, 2), (-1, -1, -1, 1), (5, 0, 2, 3), (6, 1, 0, 1)]
    s = ProducerStateManager()
    s.apply_headers(h for _, h in iter_headers(_stamped(batches)))
    assert s.check(5, 0, 0, 1) == Duplicate(0, 1)
    assert s.check(5, 0, 2, 4) == Duplicate(3, 5)
    assert s.check(6, 1, 0, 0) == Duplicate(6, 6)
    assert s.check(5, 0, 5, 5) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), st.booleans()), max_size=40))
def test_every_record_is_written_once_whatever_the_retries(ops):
    """Reference: a producer retrying any of its last batches never duplicates a record."""
    s, log = ProducerStateManager(), []
    next_seq = {1: 0, 2: 0, 3: 0}
    sent: dict[int, list[tuple[int, int]]] = {1: [], 2: [], 3: []}
    for pid, n, retry in ops:
        if retry and sent[pid]:
            seq, k = sent[pid][-min(len(sent[pid]), MAX_BATCHES)]
            _append(s, log, pid, 0, seq, k)
        else:
            _append(s, log, pid, 0, next_seq[pid], n)
            sent[pid].append((next_seq[pid], n))
            next_seq[pid] += n
    for pid in (1, 2, 3):
        seqs = [seq for p, _, seq in log if p == pid]
        assert seqs == list(range(next_seq[pid]))


def test_in_txn_is_per_epoch_transactions_v2():
    """KIP-890 part 2: a batch of a newer epoch than the open transaction's begins another
    transaction (verified with the coordinator), and the marker with the bumped epoch closes
    the old one and fences its epoch."""
    s = ProducerStateManager()
    s.record(7, 3, 0, 4, 100, 104)
    s.txns.begin(7, 100)
    assert s.in_txn(7, 3) and not s.in_txn(7, 4) and not s.in_txn(8, 3)
    s.marker(7, 4, 105, commit=True)  # the coordinator bumped the epoch at the prepare
    assert not s.in_txn(7, 3) and not s.in_txn(7, 4)
    assert s.check(7, 4, 0, 0) is None  # the next transaction's first batch starts at sequence 0
    with pytest.raises(InvalidProducerEpochError):
        s.check(7, 3, 5, 5)  # the old epoch's late batch


def test_a_new_transactions_batch_is_never_a_duplicate_of_an_ended_ones():
    """The fault suite's lost write (issue 42, Transactions V1, one epoch across transactions):
    a batch of an aborted transaction was written, the producer never heard (its retry purged
    by the abort) and the next transaction reused the sequences. Answering that batch with the
    aborted one's offsets acks records never written; it is OUT_OF_ORDER_SEQUENCE_NUMBER (the
    client aborts and bumps its epoch), and a retry inside the new transaction is still a
    duplicate."""
    s = ProducerStateManager()
    s.record(7, 0, 0, 4, 100, 104)  # transaction 1: sequences 0..4 at 100..104
    s.txns.begin(7, 100)
    assert s.check(7, 0, 0, 4, transactional=True) == Duplicate(100, 104)  # a retry, in the transaction
    s.marker(7, 0, 105, commit=False)  # aborted
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(7, 0, 0, 4, transactional=True)  # transaction 2 reusing the aborted sequences
    with pytest.raises(OutOfOrderSequenceNumberError):
        s.check(7, 0, 2, 3, transactional=True)  # behind: not DUPLICATE_SEQUENCE_NUMBER either
    assert s.check(7, 0, 5, 6, transactional=True) is None  # the next sequence begins it
    s.record(7, 0, 5, 6, 106, 107)
    s.txns.begin(7, 106)
    assert s.check(7, 0, 5, 6, transactional=True) == Duplicate(106, 107)  # its own retry
    assert s.check(7, 0, 0, 4) == Duplicate(100, 104)  # an idempotent producer's rule is Kafka's


def test_marker_offset_is_the_producers_last_marker():
    s = ProducerStateManager()
    assert s.marker_offset(7) == -1
    s.record(7, 0, 0, 0, 10, 10)
    s.txns.begin(7, 10)
    s.marker(7, 0, 11, commit=True)
    assert s.marker_offset(7) == 11
    s.marker(7, 0, 12, commit=False)
    assert s.marker_offset(7) == 12 and s.marker_offset(8) == -1

"""partition/producer_txn.py and its use in producer_state.py: a transaction opens at its first transactional batch and holds the last stable offset back until the high watermark passes its marker; aborts are indexed; truncation reopens; snapshots (v2) carry open and aborted transactions; a marker's epoch fences older writes."""

from __future__ import annotations

import pytest

from partition.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchBuilder,
    control_type,
    iter_headers,
    txn_marker,
    txn_marker_batch,
)
from partition.producer_state import ProducerSnapshot, ProducerStateManager
from partition.producer_txn import AbortedTxn, ProducerTxns
from raftlog.base.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError


def test_lso_is_the_first_offset_of_the_oldest_undecided_transaction():
    t = ProducerTxns()
    assert t.last_stable_offset(10) == 10
    t.begin(1, 3)
    t.begin(2, 5)
    t.begin(1, 7)  # already open: the first offset stays 3
    assert t.last_stable_offset(10) == 3
    t.end(1, 8, commit=True)
    assert t.last_stable_offset(8) == 3  # the marker at 8 is not committed yet
    assert t.last_stable_offset(9) == 5  # now it is; producer 2 holds it at 5
    t.end(2, 9, commit=False)
    assert t.last_stable_offset(10) == 10
    assert t.aborted == [AbortedTxn(2, 5, 9, 5)]
    assert t.aborted_between(0, 10) == [AbortedTxn(2, 5, 9, 5)]
    assert t.aborted_between(10, 20) == []  # its marker is below the range
    assert t.aborted_between(0, 5) == []    # it begins at the range's end
    assert t.first_open_offset() is None


def test_a_marker_without_an_open_transaction_changes_nothing():
    t = ProducerTxns()
    t.end(1, 4, commit=False)
    assert t.aborted == [] and t.last_stable_offset(5) == 5


def test_truncation_above_the_high_watermark_reopens_what_it_cuts():
    t = ProducerTxns()
    t.begin(1, 2)
    t.end(1, 6, commit=False)
    t.begin(2, 7)
    t.truncate(6)  # the abort marker and producer 2's batch are gone
    assert t.open == {1: 2} and t.aborted == [] and t.last_stable_offset(6) == 2


def test_drop_below_forgets_aborted_entries_under_the_log_start():
    t = ProducerTxns()
    for pid, first, last in [(1, 0, 2), (2, 3, 5), (3, 6, 8)]:
        t.begin(pid, first)
        t.end(pid, last, commit=False)
    t.drop_below(4)
    assert [a.producer_id for a in t.aborted] == [2, 3]


def _h(batch: bytes, base: int):
    b = bytearray(batch)
    b[0:8] = base.to_bytes(8, "big")
    return next(iter_headers(bytes(b), verify=False))[1]


def test_marker_batches_say_their_type_and_the_state_follows_them():
    commit = txn_marker_batch(7, 1, commit=True, coordinator_epoch=3, timestamp_ms=5)
    abort = txn_marker_batch(7, 1, commit=False, coordinator_epoch=3, timestamp_ms=5)
    assert control_type(commit) == CONTROL_COMMIT and control_type(abort) == CONTROL_ABORT
    data = BatchBuilder(producer_id=7, producer_epoch=1, base_sequence=0, is_transactional=True)
    data.append(b"v", b"k", timestamp_ms=5)
    headers = [_h(data.build(), 0), _h(abort, 1)]
    assert headers[0].is_transactional and headers[1].is_control and headers[1].is_transactional
    s = ProducerStateManager()
    s.apply_headers(headers[:1])
    assert s.txns.open == {7: 0}
    s.apply_headers(headers[1:], lambda h: txn_marker(abort))
    assert s.txns.aborted == [AbortedTxn(7, 0, 1, 0)]
    assert txn_marker(commit) == (True, 3) and s.entry(7).coordinator_epoch == 3


def test_a_marker_of_an_older_coordinator_epoch_is_fenced_and_changes_nothing():
    """Kafka's appendEndTxnMarker: a coordinator that lost its `__transaction_state` partition
    (an older leader epoch) may not end a transaction the newer one has marked."""
    s = ProducerStateManager()
    s.record(7, 1, 0, 0, 0, 0)
    s.txns.begin(7, 0)
    s.check_marker(7, 1, 0)  # no marker seen yet: any coordinator epoch
    s.marker(7, 1, 1, commit=True, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError):
        s.check_marker(7, 1, 4)
    s.check_marker(7, 1, 5)  # the same coordinator again (a retried marker)
    s.check_marker(7, 2, 6)  # a newer one
    with pytest.raises(InvalidProducerEpochError):
        s.check_marker(7, 0, 9)  # a stale producer epoch, whatever the coordinator epoch
    # A newer producer epoch keeps the coordinator epoch (a fenced coordinator stays fenced).
    s.record(7, 2, 0, 0, 2, 2)
    with pytest.raises(TransactionCoordinatorFencedError):
        s.check_marker(7, 2, 4)
    # The replayed log gives the same state (a follower, a restart's walk).
    rebuilt = ProducerStateManager()
    batch = BatchBuilder(producer_id=7, producer_epoch=1, base_sequence=0, is_transactional=True)
    batch.append(b"v", b"k", timestamp_ms=5)
    marker = txn_marker_batch(7, 1, commit=True, coordinator_epoch=5, timestamp_ms=5)
    rebuilt.apply_headers([_h(batch.build(), 0), _h(marker, 1)], lambda h: txn_marker(marker))
    with pytest.raises(TransactionCoordinatorFencedError):
        rebuilt.check_marker(7, 1, 4)


def test_a_marker_with_a_newer_epoch_fences_the_older_producer():
    s = ProducerStateManager()
    s.record(7, 0, 0, 0, 0, 0)
    s.txns.begin(7, 0)
    s.marker(7, 1, 1, commit=False)  # the coordinator aborted with a bumped epoch
    with pytest.raises(InvalidProducerEpochError):
        s.check(7, 0, 1, 1)
    assert s.check(7, 1, 0, 0) is None


def test_a_snapshot_carries_open_and_aborted_transactions():
    s = ProducerStateManager()
    s.record(1, 0, 0, 0, 0, 0)
    s.txns.begin(1, 0)
    s.record(2, 0, 0, 0, 1, 1)
    s.txns.begin(2, 1)
    s.marker(2, 0, 2, commit=False)
    snap = s.snapshot(3, 0)
    again = ProducerSnapshot.decode(snap.encode())
    assert again == snap and snap.open_txns == ((1, 0),) and snap.aborted == (AbortedTxn(2, 1, 2, 0),)
    loaded = ProducerStateManager()
    loaded.load(again, log_start_offset=0)
    assert loaded.txns.open == {1: 0} and loaded.txns.aborted == [AbortedTxn(2, 1, 2, 0)]
    assert loaded.txns.last_stable_offset(3) == 0


def test_a_snapshot_carries_coordinator_epochs_even_of_producers_without_batches():
    s = ProducerStateManager()
    s.record(7, 1, 0, 0, 0, 0)
    s.txns.begin(7, 0)
    s.marker(7, 1, 1, commit=True, coordinator_epoch=5)
    s.marker(8, 2, 2, commit=False, coordinator_epoch=9)  # no batch of 8 here (a marker only)
    snap = s.snapshot(3, 0)
    assert snap.coordinator_epochs == ((7, 1, 5), (8, 2, 9))
    decoded = ProducerSnapshot.decode(snap.encode())
    assert decoded == snap
    loaded = ProducerStateManager()
    loaded.load(decoded, log_start_offset=1)  # 7's batch is below the log start now
    for pid, epoch, stale in ((7, 1, 4), (8, 2, 8)):
        with pytest.raises(TransactionCoordinatorFencedError):
            loaded.check_marker(pid, epoch, stale)
    # A snapshot without markers stays v1/v2 (older nodes read it); a bad entry is refused.
    assert ProducerSnapshot.decode(ProducerStateManager().snapshot(0, -1).encode()) is not None
    bad = ProducerSnapshot(3, 0, -1, (), coordinator_epochs=((8, 2, 9), (8, 2, 9)))
    assert ProducerSnapshot.decode(bad.encode()) is None

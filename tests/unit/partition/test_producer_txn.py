"""partition/producer_txn.py and its use in producer_state.py: a transaction opens at its first transactional batch and holds the last stable offset back until the high watermark passes its marker; aborts are indexed; truncation reopens; snapshots (v2) carry open and aborted transactions; a marker's epoch fences older writes."""

from __future__ import annotations

import pytest

from partition.batch import (
    CONTROL_LEADER_CHANGE,
    control_batch,
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


# Issue 42, the fault suite's seed-20 run: jepsen-1 as every replica held it, offsets 80-136
# (base, last, producer id, producer epoch, what): "d" a transactional data batch, "C"/"A" a
# COMMIT/ABORT marker, "L" the leader-change batch a new Raft leader appends (epochs 4 at 105,
# 5 at 120). A read_committed consumer at 102 passed over 108, 109-110, 113, 115 and 118 (four
# producers' committed records) after the partition's leader re-elected itself.
_SEED20_JEPSEN_1 = [
    (80, 80, 0, 0, "C"), (81, 81, 2000, 0, "C"), (82, 82, 2001, 0, "d"), (83, 83, 1000, 0, "A"),
    (84, 84, 2001, 0, "C"), (85, 86, 1001, 0, "d"), (87, 87, 1000, 0, "d"), (88, 88, 1001, 0, "C"),
    (89, 89, 1000, 0, "C"), (90, 90, 1, 0, "d"), (91, 93, 1001, 0, "d"), (94, 94, 0, 0, "d"),
    (95, 95, 1, 0, "A"), (96, 96, 1000, 0, "d"), (97, 97, 1001, 0, "C"), (98, 98, 0, 0, "C"),
    (99, 99, 1000, 0, "C"), (100, 100, 1, 0, "d"), (101, 101, 1, 0, "C"), (102, 104, 1000, 0, "d"),
    (105, 105, -1, -1, "L"), (106, 106, 2000, 0, "d"), (107, 107, 2000, 0, "A"),
    (108, 108, 1001, 1, "d"), (109, 110, 2001, 1, "d"), (111, 111, 2001, 1, "C"),
    (112, 112, 1001, 1, "C"), (113, 113, 0, 1, "d"), (114, 114, 0, 1, "C"), (115, 115, 1001, 1, "d"),
    (116, 116, 1000, 1, "A"), (117, 117, 1001, 1, "C"), (118, 118, 2000, 1, "d"),
    (119, 119, 2000, 1, "C"), (120, 120, -1, -1, "L"), (121, 121, 1000, 1, "A"),
    (122, 122, 2000, 1, "C"), (123, 123, 1001, 1, "C"), (124, 124, 1000, 2, "d"), (125, 125, 1, 1, "d"),
    (126, 126, 1000, 2, "C"), (127, 127, 1, 1, "C"), (128, 128, 1, 1, "d"), (129, 129, 2000, 2, "d"),
    (130, 130, 1001, 2, "d"), (131, 131, 1, 1, "A"), (132, 132, 2000, 2, "C"), (133, 133, 1001, 2, "C"),
    (134, 134, 1, 1, "d"), (135, 136, 2000, 2, "d"),
]


def _seed20_batches() -> list[tuple[object, bytes]]:
    out = []
    for base, last, pid, epoch, what in _SEED20_JEPSEN_1:
        if what == "L":
            raw = control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=5, partition_leader_epoch=4)
        elif what in "CA":
            raw = txn_marker_batch(pid, epoch, commit=what == "C", coordinator_epoch=3, timestamp_ms=5)
        else:
            b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
            for _ in range(last - base + 1):
                b.append(b"v", None, timestamp_ms=5)
            raw = b.build()
        h = _h(raw, base)
        assert h.last_offset == last
        out.append((h, raw))
    return out


def _replay(state: ProducerStateManager, batches) -> None:
    marks = {h.base_offset: raw for h, raw in batches if h.is_control and h.is_transactional}
    state.apply_headers([h for h, _ in batches], lambda h: txn_marker(marks[h.base_offset]))


def _librdkafka_delivers(batches, fetch_offset: int, end: int, aborted: list[AbortedTxn]) -> list[int]:
    """The base offsets of the data batches a read_committed librdkafka consumer hands to its
    application from a fetch of [fetch_offset, end) answered with `aborted` (its
    rdkafka_msgset_reader.c: per producer, the aborted first offsets in order; a transactional
    batch at or past the next one is skipped; an ABORT marker pops it)."""
    firsts: dict[int, list[int]] = {}
    for a in aborted:
        firsts.setdefault(a.producer_id, []).append(a.first_offset)
    for offsets in firsts.values():
        offsets.sort()
    delivered = []
    for h, raw in batches:
        if h.last_offset < fetch_offset or h.base_offset >= end:
            continue
        pending = firsts.get(h.producer_id, [])
        if h.is_control:
            if h.is_transactional and not txn_marker(raw)[0] and pending and pending[0] <= h.base_offset:
                pending.pop(0)
        elif not (pending and h.base_offset >= pending[0]):
            delivered.append(h.base_offset)
    return delivered


@pytest.mark.parametrize("path", ["walk", "snapshot", "truncate"])
def test_issue42_seed20_read_committed_from_102_gets_every_committed_batch(path):
    """Issue 42 (suspects 1 and 2): whichever way the leader's state was built (a walk of the
    log; a snapshot at any offset and the rest replayed; the epoch-5 suffix cut and appended
    again), a read_committed fetch of jepsen-1 from 102 is answered with exactly the two
    aborted transactions there (producers 2000 and 1000, as Kafka's collectAbortedTxns gives:
    last offset >= 102, first offset below the LSO) and a client applying them as librdkafka
    does gets the six records the consumer passed over. So the server's aborted list and LSO
    do not explain the skip."""
    batches = _seed20_batches()
    starts = [h.base_offset for h, _ in batches if h.base_offset >= 100]  # snapshots lie on batch starts
    cuts = {"walk": [None], "snapshot": starts, "truncate": [105, 116, 120]}[path]
    for cut in cuts:
        s = ProducerStateManager()
        if path == "walk":
            _replay(s, batches)
        elif path == "snapshot":
            _replay(s, [b for b in batches if b[0].base_offset < cut])
            loaded = ProducerStateManager()
            loaded.load(ProducerSnapshot.decode(s.snapshot(cut, 5).encode()), log_start_offset=80)
            s = loaded
            _replay(s, [b for b in batches if b[0].base_offset >= cut])
        else:
            _replay(s, batches)
            s.truncate(cut)
            _replay(s, [b for b in batches if b[0].base_offset >= cut])
        # The LSO as the high watermark moved (it never falls back, never passes an open one).
        assert [s.txns.last_stable_offset(hw) for hw in (103, 117, 118, 120, 124)] == [102, 115, 118, 120, 124]
        lso = s.txns.last_stable_offset(124)
        aborted = s.txns.aborted_between(102, lso)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == \
            [(2000, 106, 107), (1000, 102, 116)], cut
        assert _librdkafka_delivers(batches, 102, lso, aborted) == [108, 109, 113, 115, 118], cut


def test_a_snapshot_above_the_high_watermark_keeps_the_transactions_whose_marker_may_be_cut():
    """A snapshot is taken at the log end, above the high watermark: a transaction whose marker
    is in it but not committed still holds the LSO after a reload, and a truncation of that
    marker (a new leader without it) reopens it, so that the marker written again (an abort
    here) is indexed. Without them the reload let read_committed readers past the open
    transaction, and its records stayed readable after the abort."""
    s = ProducerStateManager()
    s.record(1, 0, 0, 0, 10, 10)
    s.txns.begin(1, 10)
    s.marker(1, 0, 11, commit=True)      # the marker at 11: the high watermark is still 11
    assert s.txns.last_stable_offset(11) == 10
    snap = ProducerSnapshot.decode(s.snapshot(12, 0).encode())
    assert snap is not None and snap.ended == ((1, 10, 11, True),)
    loaded = ProducerStateManager()
    loaded.load(snap, log_start_offset=0)
    assert loaded.txns.last_stable_offset(11) == 10
    loaded.truncate(11)                  # the new leader never had the marker
    assert loaded.txns.open == {1: 10} and loaded.txns.last_stable_offset(11) == 10
    loaded.marker(1, 1, 11, commit=False)
    assert loaded.txns.aborted_between(0, 12) == [AbortedTxn(1, 10, 11, 10)]
    assert loaded.txns.last_stable_offset(12) == 12
    # v4 only when there is such a transaction; a bad entry is refused.
    assert b"ended" in s.snapshot(12, 0).encode() and b"ended" not in ProducerStateManager().snapshot(0, -1).encode()
    for bad in ((1, 11, 10, True), (1, 0, 12, True)):
        assert ProducerSnapshot.decode(ProducerSnapshot(12, 0, -1, (), ended=(bad,)).encode()) is None

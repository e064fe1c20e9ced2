"""partition/producer_state.py's snapshot: it round-trips, refuses bytes no real state has, and a snapshot loaded at a log start and then walked equals the walk of the whole log; `exact` is False whenever a truncation leaves a state a walk of the cut log would not give."""

from __future__ import annotations

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.producer_state import MAX_BATCHES, ProducerSnapshot, ProducerStateManager
from raftlog.base import cbor


class H:
    """Just the batch-header fields apply_headers reads."""

    def __init__(self, base_offset, n, pid, epoch, seq, *, txn=False, control=False):
        self.base_offset = base_offset
        self.last_offset_delta = n - 1
        self.producer_id = pid
        self.producer_epoch = epoch
        self.base_sequence = seq
        self.last_sequence = seq + n - 1 if seq >= 0 else -1
        self.is_control = control
        self.is_transactional = txn

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1


def log_of(ops):
    """Headers of a log written by `ops` [(producer, records, new_epoch)]: producers 0-5 are
    idempotent with per-producer sequences and epochs, producer 6 is not idempotent."""
    headers, offset = [], 0
    seq, epoch = {}, {}
    for pid, n, bump in ops:
        if pid == 6:
            headers.append(H(offset, n, -1, -1, -1))
        else:
            if bump or pid not in epoch:
                epoch[pid] = epoch.get(pid, -1) + 1
                seq[pid] = 0
            headers.append(H(offset, n, 100 + pid, epoch[pid], seq[pid]))
            seq[pid] += n
        offset += n
    return headers


def walk(headers, max_producers, start=0):
    s = ProducerStateManager(max_producers=max_producers)
    s.apply_headers(h for h in headers if h.next_offset > start)
    return s


def dump(s: ProducerStateManager, offset=10**9):
    return s.snapshot(offset, -1).producers


OPS = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.booleans()), max_size=60)


def test_a_snapshot_round_trips_through_its_bytes():
    s = walk(log_of([(0, 2, False), (1, 1, False), (0, 3, False), (6, 1, False), (2, 1, True)]),
             max_producers=2)  # producer 101 (oldest last write) is evicted by 102
    snap = s.snapshot(8, 4)
    data = snap.encode()
    assert ProducerSnapshot.decode(data) == snap
    assert snap.offset == 8 and snap.last_epoch == 4 and snap.evicted_at == 7
    assert [pid for pid, _, _ in snap.producers] == [100, 102]
    again = ProducerStateManager(max_producers=2)
    again.load(snap, log_start_offset=0)
    assert dump(again) == dump(s) and again.exact


def test_decode_refuses_damage_and_states_no_log_has():
    good = walk(log_of([(0, 2, False), (1, 1, False)]), 10).snapshot(3, 1)
    data = good.encode()
    assert ProducerSnapshot.decode(data[:-1]) is None  # torn
    flipped = bytearray(data)
    flipped[-3] ^= 0x01
    assert ProducerSnapshot.decode(bytes(flipped)) is None  # CRC
    assert ProducerSnapshot.decode(b"") is None
    assert ProducerSnapshot.decode(data, max_producers=1) is None  # over the bound

    def framed(body):
        raw = cbor.dumps(body)
        return struct.pack(">4sII", b"RLPS", len(raw), google_crc32c.value(raw)) + raw

    base = {"v": 1, "offset": 10, "last_epoch": 0, "evicted_at": -1}
    ok = [[7, 0, [[0, 1, 0, 1], [2, 2, 4, 4]]], [8, 0, [[0, 0, 5, 5]]]]
    assert ProducerSnapshot.decode(framed(base | {"producers": ok})) is not None
    bad = [
        base | {"producers": [[7, 0, [[0, 1, 0, 10]]]]},  # a batch at the snapshot's offset
        base | {"producers": [[7, 0, [[2, 2, 4, 4], [0, 1, 0, 1]]]]},  # batches out of order
        base | {"producers": [[8, 0, [[0, 0, 5, 5]]], [7, 0, [[0, 0, 1, 1]]]]},  # producers out of order
        base | {"producers": [[7, 0, [[0, 0, 1, 1]]], [7, 0, [[1, 1, 2, 2]]]]},  # one producer twice
        base | {"producers": [[7, 0, [[i, i, i, i] for i in range(MAX_BATCHES + 1)]]]},
        base | {"producers": [[7, 0, []]]},
        base | {"producers": [[-3, 0, [[0, 0, 1, 1]]]]},
        base | {"producers": [[7, 0, [[0, 2**31, 1, 1]]]]},
        base | {"producers": [[7, True, [[0, 0, 1, 1]]]]},
        base | {"producers": [], "evicted_at": 10},
        base | {"producers": [], "v": 2},
        {"v": 1, "offset": 10, "producers": []},
    ]
    for body in bad:
        assert ProducerSnapshot.decode(framed(body)) is None, body
    assert ProducerSnapshot.decode(b"XXXX" + framed(base | {"producers": ok})[4:]) is None


def test_load_refuses_more_producers_than_it_may_keep():
    snap = walk(log_of([(0, 1, False), (1, 1, False), (2, 1, False)]), 10).snapshot(3, 0)
    with pytest.raises(ValueError):
        ProducerStateManager(max_producers=2).load(snap, log_start_offset=0)


@settings(max_examples=150, deadline=None)
@given(OPS, st.data(), st.integers(1, 4))
def test_snapshot_at_s_then_the_walk_from_s_is_the_whole_walk(ops, data, max_producers):
    """Reference: the walk of the whole log (from its log start L), against a snapshot taken
    at a batch boundary S, loaded at L <= S, then the headers from S."""
    headers = log_of(ops)
    end = headers[-1].next_offset if headers else 0
    bounds = [h.base_offset for h in headers] + [end]
    at = data.draw(st.sampled_from(bounds), label="S")
    start = data.draw(st.integers(0, at), label="log start")
    snap = walk([h for h in headers if h.base_offset < at], max_producers).snapshot(at, -1)
    snap = ProducerSnapshot.decode(snap.encode())
    loaded = ProducerStateManager(max_producers=max_producers)
    loaded.load(snap, log_start_offset=start)
    loaded.apply_headers(h for h in headers if h.base_offset >= at)
    assert dump(loaded) == dump(walk(headers, max_producers, start))


@settings(max_examples=200, deadline=None)
@given(OPS, st.data(), st.integers(1, 4))
def test_an_exact_truncation_equals_the_walk_of_the_cut_log(ops, data, max_producers):
    """`exact` after truncate(T) promises the state a walk of the log below T gives."""
    headers = log_of(ops)
    end = headers[-1].next_offset if headers else 0
    cut = data.draw(st.integers(0, end), label="T")
    s = walk(headers, max_producers)
    s.truncate(cut)
    kept = [h for h in headers if h.next_offset <= cut]
    if s.exact:
        assert dump(s) == dump(walk(kept, max_producers))
    s.clear()
    assert s.exact


def test_truncation_exactness_cases():
    headers = log_of([(0, 1, False)] * MAX_BATCHES + [(1, 1, False), (1, 1, False)])
    s = walk(headers, 10)
    s.truncate(6)  # producer 101 keeps one of its two batches; 100's window is untouched
    assert s.exact and s.entry(101).last_offset == 5
    s.truncate(4)  # a full window loses a batch: the walk would remember an older one
    assert not s.exact
    s = walk(headers, 10)
    s.truncate(5)  # producer 101 emptied (an older epoch of it could be in the log)
    assert not s.exact
    s = walk(log_of([(0, 1, False), (1, 1, False), (2, 1, False)]), max_producers=2)
    s.truncate(2)  # the batch that evicted producer 100 is gone: the walk would keep it
    assert not s.exact


def test_a_truncation_restores_the_last_write_order():
    s = walk(log_of([(0, 1, False), (1, 1, False), (0, 1, False)]), max_producers=10)
    s.truncate(2)
    assert [pid for pid, _, _ in dump(s)] == [100, 101]
    assert s.exact and dump(s) == dump(walk(log_of([(0, 1, False), (1, 1, False)]), 10))


def test_a_compaction_that_removes_a_named_batch_makes_the_state_inexact():
    s = walk(log_of([(0, 2, False), (1, 1, False), (0, 1, False)]), 10)
    assert not s.batches_removed([]) and s.exact
    assert not s.batches_removed([7]) and s.exact
    assert s.batches_removed([2]) and not s.exact

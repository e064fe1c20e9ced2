"""Sparse offset and time indexes: lookups, truncation, round trips, and corrupt-file detection."""

import pytest

from partition.index import IndexCorrupt, OffsetIndex, TimeIndex


def make_index():
    idx = OffsetIndex(max_entries=10)
    for rel, pos in [(5, 100), (9, 250), (20, 600)]:
        idx.append(rel, pos)
    return idx


@pytest.mark.parametrize("rel, expected", [(0, (0, 0)), (4, (0, 0)), (5, (5, 100)), (8, (5, 100)),
                                           (9, (9, 250)), (19, (9, 250)), (20, (20, 600)),
                                           (10**6, (20, 600))])
def test_offset_lookup_finds_last_entry_at_or_below(rel, expected):
    assert make_index().lookup(rel) == expected


def test_offset_index_round_trip_and_truncate():
    idx = make_index()
    back = OffsetIndex.from_bytes(idx.to_bytes(), max_entries=10, segment_bytes=1000)
    assert list(back.rel_offsets) == [5, 9, 20] and list(back.positions) == [100, 250, 600]
    back.truncate_from_position(250)
    assert list(back.positions) == [100]
    assert back.lookup(30) == (5, 100)


def test_offset_index_rejects_appends_out_of_order():
    idx = make_index()
    with pytest.raises(AssertionError):
        idx.append(20, 700)


@pytest.mark.parametrize("mutate, size", [
    (lambda b: b[:-3], 1000),                         # partial entry
    (lambda b: b[8:16] + b[0:8] + b[16:], 1000),      # not monotonic
    (lambda b: b, 600),                               # last position past the file
    (lambda b: bytes(len(b)), 1000),                  # zeros (a preallocated, unwritten file)
])
def test_offset_index_corruption_detected(mutate, size):
    with pytest.raises(IndexCorrupt):
        OffsetIndex.from_bytes(mutate(make_index().to_bytes()), max_entries=10, segment_bytes=size)


def test_time_index_lookup_and_round_trip():
    t = TimeIndex(max_entries=10)
    assert t.maybe_append(100, 0)
    assert not t.maybe_append(100, 3)  # timestamps must strictly increase
    assert t.maybe_append(200, 4)
    assert t.maybe_append(300, 8)
    assert t.last_timestamp == 300
    # Every batch before the returned offset is older than the target.
    assert t.lookup(50) == 0
    assert t.lookup(150) == 0
    assert t.lookup(201) == 4
    assert t.lookup(10**9) == 8
    back = TimeIndex.from_bytes(t.to_bytes(), max_entries=10)
    assert list(back.timestamps) == [100, 200, 300] and list(back.rel_offsets) == [0, 4, 8]
    back.truncate_from_rel_offset(4)
    assert list(back.timestamps) == [100]


def test_time_index_corruption_detected():
    t = TimeIndex(max_entries=10)
    t.maybe_append(100, 1)
    t.maybe_append(200, 2)
    raw = t.to_bytes()
    with pytest.raises(IndexCorrupt):
        TimeIndex.from_bytes(raw[12:] + raw[:12], max_entries=10)
    with pytest.raises(IndexCorrupt):
        TimeIndex.from_bytes(raw[:-1], max_entries=10)

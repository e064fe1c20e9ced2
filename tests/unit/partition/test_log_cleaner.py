"""Compaction keeps each key's newest value at its original offset, tombstones until delete_retention_ms, and loses nothing when a swap crashes at any step."""

import os

import pytest

from partition.batch import (
    CONTROL_LEADER_CHANGE,
    BatchBuilder,
    Compression,
    control_batch,
    decode_batches,
    iter_headers,
    txn_marker_batch,
)
from partition.cleaner import filter_batch
from partition.log import Log, LogConfig

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200, cleanup_policy="compact",
                delete_retention_ms=1000, retention_ms=-1)
STEPS = ["cleaned_written", "swap_marked", "log_replaced", "index_replaced",
         "timeindex_replaced", "marker_removed"]


def mk(items, ts=100, compression=Compression.NONE):
    """items: [(key, value)]"""
    b = BatchBuilder(compression=compression)
    for i, (k, v) in enumerate(items):
        b.append(v, key=k, timestamp_ms=ts + i)
    return b.build()


def records(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for h, rs in decode_batches(data):  # CRC and record structure checked
            offset = max(offset, h.next_offset)
            if not h.is_control:
                out.extend(rs)
    return out


def fill(log, rounds=12, keys=5, ts=100):
    """Appends `rounds` batches, each updating every key; returns {offset: (key, value)}."""
    written = {}
    for r in range(rounds):
        items = [(b"k%d" % k, b"r%d-%s" % (r, b"x" * 30)) for k in range(keys)]
        first, _ = log.append(mk(items, ts=ts + r), leader_epoch=0, now_ms=0)
        for i, kv in enumerate(items):
            written[first + i] = kv
    return written


def latest(written):
    out = {}
    for offset in sorted(written):
        k, v = written[offset]
        out[k] = (offset, v)
    return out


def check_newest_kept(log, written):
    rs = records(log)
    offsets = [r.offset for r in rs]
    assert offsets == sorted(set(offsets))
    for r in rs:
        assert written[r.offset] == (r.key, r.value)  # every offset kept as it was
    seen = {r.key: (r.offset, r.value) for r in rs}
    for k, (offset, v) in latest(written).items():
        if v is not None:
            assert seen[k] == (offset, v)
    return rs


def test_compaction_keeps_newest_per_key_at_original_offsets(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    written = fill(log)
    active_before = os.pread(log._segments[-1].fd, 1 << 20, 0)
    assert log.maintain(now_ms=0)["compacted_segments"] == []  # nothing fsynced yet
    log.flush()
    size = log.size_bytes()
    done = log.maintain(now_ms=0)
    assert done["compacted_segments"] and done["records_removed"] > 0
    assert log.size_bytes() == size - done["bytes_reclaimed"] < size
    rs = check_newest_kept(log, written)
    assert len(rs) < len(written)
    assert os.pread(log._segments[-1].fd, 1 << 20, 0) == active_before  # active untouched
    # A read inside a gap returns the next batch after it.
    gap = min(set(range(log.log_end_offset)) - {r.offset for r in rs})
    data = log.read(gap, 1)
    assert [h for _, h in iter_headers(data)][0].last_offset >= gap
    log.close()
    again = Log.open(tmp_path, CFG, now_ms=0)
    check_newest_kept(again, written)
    again.close()


def test_filtered_batch_keeps_base_and_last_offset_with_holes():
    raw = bytearray(mk([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")], ts=50))
    raw[0:8] = (1000).to_bytes(8, "big")
    new, removed = filter_batch(bytes(raw), lambda off, k, v: off in (1001, 1003))
    assert removed == 2
    (h, rs), = list(decode_batches(new))
    assert (h.base_offset, h.last_offset, h.record_count) == (1000, 1003, 2)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in rs] == [
        (1001, b"b", b"2", 51), (1003, b"c", b"4", 53)]
    assert h.max_timestamp == 53
    assert filter_batch(bytes(raw), lambda *a: False)[0] is None
    assert filter_batch(bytes(raw), lambda *a: True) == (bytes(raw), 0)


def test_compressed_batches_null_keys_and_control_batches(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    written = {}
    for r in range(10):
        items = [(b"k", b"v%d" % r), (None, b"nokey%d" % r), (b"j", b"w%d" % r + b"y" * 40)]
        first, _ = log.append(mk(items, compression=Compression.GZIP), leader_epoch=r, now_ms=0)
        written.update({first + i: kv for i, kv in enumerate(items)})
        lc, _ = log.append(control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=1,
                                         partition_leader_epoch=0), leader_epoch=r, now_ms=0)
    log.flush()
    assert log.maintain(now_ms=0)["records_removed"] > 0
    rs = check_newest_kept(log, written)
    assert sum(1 for r in rs if r.key is None) == 10  # null keys are kept
    controls = [h for h, _ in decode_batches(b"".join(
        log.read(s.base_offset, 1 << 20) for s in log._segments)) if h.is_control]
    assert len(controls) == 10  # every leader-change marker survives
    assert log.epochs() == [(r, 4 * r) for r in range(10)]
    log.close()


def test_tombstones_kept_until_delete_retention(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    written = fill(log, rounds=6, keys=3, ts=100)
    first, _ = log.append(mk([(b"k1", None)], ts=200), leader_epoch=0, now_ms=0)
    written[first] = (b"k1", None)
    for r in range(8):  # push the tombstone's segment well into the closed region
        o, _ = log.append(mk([(b"k0", b"late%d" % r + b"z" * 60)], ts=300 + r), leader_epoch=0, now_ms=0)
        written[o] = (b"k0", b"late%d" % r + b"z" * 60)
    log.flush()
    log.maintain(now_ms=500)
    keys = [(r.key, r.value) for r in records(log)]
    assert (b"k1", None) in keys and not any(k == b"k1" and v is not None for k, v in keys)
    # After delete_retention_ms past the tombstone segment's largest timestamp: gone.
    done = log.maintain(now_ms=200 + 1000 + 400)
    assert done["records_removed"] >= 1
    assert not any(r.key == b"k1" for r in records(log))
    check_newest_kept(log, {o: kv for o, kv in written.items() if kv[0] != b"k1"})
    log.close()


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_each_swap_step_loses_no_newest_value(tmp_path, step):
    log = Log.open(tmp_path, CFG, now_ms=0)
    written = fill(log)
    log.flush()

    class Crash(Exception):
        pass

    calls = []

    def crash_point(s):
        calls.append(s)
        if s == step and calls.count(s) == 2:  # the second segment's swap: one already done
            raise Crash(s)

    log._cleaner_crash_point = crash_point
    with pytest.raises(Crash):
        log.maintain(now_ms=0)
    log._abandon()
    again = Log.open(tmp_path, CFG, now_ms=0)
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    assert bool(again.recovery.swaps_recovered) == (step != "marker_removed")
    check_newest_kept(again, written)
    again.maintain(now_ms=0)
    check_newest_kept(again, written)
    again.close()


def _compact_with(log, aborted):
    plan = log.plan_compaction(0)
    assert plan is not None
    log.clean_planned(plan, aborted=aborted)
    return log.install_cleaned(plan)


@pytest.mark.parametrize("told", [True, False])
def test_an_aborted_transactions_records_never_obsolete_a_committed_value_and_are_discarded(tmp_path, told):
    """Issue 42, Kafka's cleaner rule: a record of an aborted transaction neither enters the
    offset map nor survives. Told nothing (the control), the aborted value wins the key and
    the committed one is lost to read_committed readers."""
    log = Log.open(tmp_path, CFG, now_ms=0)
    good, _ = log.append(mk([(b"k", b"committed")]), leader_epoch=0, now_ms=0)
    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(b"aborted", key=b"k", timestamp_ms=100)
    bad, _ = log.append(b.build(), leader_epoch=0, now_ms=0)
    marker, _ = log.append(txn_marker_batch(7, 0, commit=False, coordinator_epoch=0, timestamp_ms=100),
                           leader_epoch=0, now_ms=0)
    written = fill(log, keys=3)  # other keys: closes the segments above
    log.flush()
    _compact_with(log, [(7, bad, marker)] if told else [])
    kept = {r.offset: (r.key, r.value) for r in records(log)}
    if told:
        assert kept[good] == (b"k", b"committed") and bad not in kept
    else:
        assert good not in kept and kept[bad] == (b"k", b"aborted")
    assert any(h.is_control and h.base_offset == marker for h in _headers(log))  # the marker stays
    if told:  # every other key's newest value is kept as before
        check_newest_kept(log, {**written, good: (b"k", b"committed")})
    log.close()


def _headers(log):
    return [h for _, h in iter_headers(log.read(log.log_start_offset, 1 << 24))]

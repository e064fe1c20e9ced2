"""partition/log.py's producer-snapshot file: written only after the log is durable up to its offset, voided by a cut taken after it, and removed before compaction, retention or recovery take away what it describes."""

from __future__ import annotations

import pytest

from partition.batch import BatchBuilder
from partition.log import ACTIVE_POINT_CHECKPOINT, PRODUCER_SNAPSHOT_PREFIX, Log, LogConfig
from partition.producer_state import ProducerStateManager

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1)


def batch(pid, seq, key=b"k", n=1):
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
    for i in range(n):
        b.append(b"v" * 60, key=key, timestamp_ms=1000 + seq + i)
    return b.build()


def fill(log, state, count, pid=7, key=b"k", start_seq=0):
    for i in range(count):
        first, last = log.append(batch(pid, start_seq + i, key), leader_epoch=1, now_ms=0)
        state.record(pid, 0, start_seq + i, start_seq + i, first, last)


def snapshot_files(directory):
    """The offsets of the producer snapshot files in `directory`, ascending."""
    return sorted(int(p.name[len(PRODUCER_SNAPSHOT_PREFIX):]) for p in directory.iterdir()
                  if p.name.startswith(PRODUCER_SNAPSHOT_PREFIX) and not p.name.endswith(".tmp"))


def whole_walk(log):
    s = ProducerStateManager()
    s.apply_headers(log.batch_headers())
    return s.snapshot(1 << 62, -1).producers


def snapshot_now(log, state):
    ckpt = log.producer_snapshot(state, min_bytes=0)
    assert ckpt is not None and log.write_producer_snapshot(ckpt)
    return ckpt.snapshot.offset


def test_the_snapshot_is_written_after_the_log_is_durable_up_to_it(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 5)
    assert log.flushed_offset == 0
    ckpt = log.producer_snapshot(state, min_bytes=0)
    assert log.producer_snapshot(state, min_bytes=1 << 20) is None  # not due: too few bytes
    assert log.write_producer_snapshot(ckpt)
    assert log.flushed_offset >= ckpt.snapshot.offset == log.producer_snapshot_offset == 5
    assert log.producer_snapshot(state, min_bytes=0) is None  # nothing new since
    log.close()


def test_two_snapshots_taken_at_the_same_end_write_one_file(tmp_path):
    """The flush task and the maintenance pass may both take one before either is written:
    the second write is a no-op (before, an assertion in a worker thread stopped the node)."""
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 5)
    first, second = (log.producer_snapshot(state, min_bytes=0) for _ in range(2))
    assert first.snapshot.offset == second.snapshot.offset == 5
    assert log.write_producer_snapshot(second)
    assert not log.write_producer_snapshot(first)
    fill(log, state, 3, start_seq=5)
    older = log.producer_snapshot(state, min_bytes=0)
    fill(log, state, 2, start_seq=8)
    assert snapshot_now(log, state) == 10
    assert not log.write_producer_snapshot(older)  # older than the newest: nothing to add
    assert snapshot_files(tmp_path) == [5, 10] and log.producer_snapshot_offset == 10
    log.close()


def test_a_cut_after_the_snapshot_was_taken_voids_it(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 5)
    ckpt = log.producer_snapshot(state, min_bytes=0)
    log.truncate_to(3)
    assert not log.write_producer_snapshot(ckpt)  # it names batches the log no longer has
    assert snapshot_files(tmp_path) == []
    state.truncate(3)
    assert log.producer_snapshot(state, min_bytes=0) is None  # a full window was cut: inexact
    log.close()


def test_compaction_that_empties_a_producer_batch_below_it_removes_it_first(tmp_path):
    cfg = LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1,
                    cleanup_policy="compact")
    log, state = Log.open(tmp_path, cfg, now_ms=0), ProducerStateManager()
    fill(log, state, 30)  # one key, rewritten: every batch but the newest is emptied
    at = snapshot_now(log, state)
    log.flush()
    seen = []
    log._cleaner_crash_point = lambda step: seen.append(
        (step, snapshot_files(tmp_path)))
    done = log.maintain(now_ms=0)
    assert done["compacted_segments"] and seen and seen[0] == ("cleaned_written", [])
    assert log.producer_snapshot_offset is None
    assert state.batches_removed(range(at)) and not state.exact  # the replica's side
    log.close()


def test_compaction_of_batches_without_a_producer_keeps_it(tmp_path):
    cfg = LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1,
                    cleanup_policy="compact")
    log, state = Log.open(tmp_path, cfg, now_ms=0), ProducerStateManager()
    for i in range(30):
        log.append(batch(-1, -1), leader_epoch=1, now_ms=0)
    at = snapshot_now(log, state)
    log.flush()
    assert log.maintain(now_ms=0)["compacted_segments"]
    assert log.producer_snapshot_offset == at
    log.close()


def test_retention_past_it_removes_it_before_the_new_log_start(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 4)
    at = snapshot_now(log, state)
    fill(log, state, 30, start_seq=4)
    log.flush()
    log.set_config(LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1,
                             retention_bytes=1500))
    log.maintain(now_ms=0)
    assert log.log_start_offset > at
    assert log.producer_snapshot_offset is None
    assert snapshot_files(tmp_path) == []
    log.close()


def test_retention_below_it_keeps_it_and_the_load_drops_what_went(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 12, pid=7, key=b"a")
    fill(log, state, 1, pid=8, key=b"b")
    at = snapshot_now(log, state)
    log.set_config(LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1,
                             retention_bytes=500))
    log.maintain(now_ms=0)
    assert 0 < log.log_start_offset < at and log.producer_snapshot_offset == at
    loaded = ProducerStateManager()
    assert log.load_producer_state(loaded).snapshot_offset == at
    assert loaded.snapshot(1 << 62, -1).producers == whole_walk(log)
    log.close()


def test_a_recovery_that_cuts_below_it_removes_it_durably_at_open(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 6)
    at = snapshot_now(log, state)
    seg = log._segments[-1]
    positions = [p for p, _ in seg.walk(0, seg.size_bytes)]
    log.close()
    (tmp_path / ACTIVE_POINT_CHECKPOINT).unlink(missing_ok=True)  # recovery scans it all
    with open(seg.log_path, "r+b") as f:  # a bad CRC in the batch before S
        f.seek(positions[-1] + 70)
        b = f.read(1)
        f.seek(positions[-1] + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    log = Log.open(tmp_path, CFG, now_ms=0)
    assert log.log_end_offset < at and log.recovery.bytes_dropped
    assert log.producer_snapshot_offset is None
    assert snapshot_files(tmp_path) == []
    state = ProducerStateManager()
    state.apply_headers(log.batch_headers())
    fill(log, state, 3, start_seq=5)  # past S again, with other batches
    log.flush()
    log._abandon()
    log = Log.open(tmp_path, CFG, now_ms=0)
    loaded = ProducerStateManager()
    assert log.load_producer_state(loaded).snapshot_offset is None
    assert loaded.snapshot(1 << 62, -1).producers == whole_walk(log)
    log.close()


def test_headers_from_an_offset_start_at_its_batch(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    for i in range(40):
        log.append(batch(7, 2 * i, n=2), leader_epoch=1, now_ms=0)
    for start in (0, 1, 2, 37, 38, 41, 79, 80):
        got = [h.base_offset for h in log.batch_headers(start)]
        assert got == [b for b in range(0, 80, 2) if b + 1 >= start], start
    log.close()


ONE_SEGMENT = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, retention_ms=-1)


def reopened_unwalkable(tmp_path, config):
    """Reopen the log at tmp_path after a crash (recovery scans the active segment from its
    point, if any): (the log, the producers a whole walk gives), with batch_headers failing."""
    log = Log.open(tmp_path, config, now_ms=0)
    expected = whole_walk(log)

    def unwalkable(start=None):
        raise AssertionError(f"read the headers from disk again (from {start})")
        yield

    log.batch_headers = unwalkable
    return log, expected


def crash(log):
    log.flush()
    log._abandon()


def test_the_rebuild_after_open_takes_the_headers_recovery_just_checked(tmp_path):
    log, state = Log.open(tmp_path, ONE_SEGMENT, now_ms=0), ProducerStateManager()
    fill(log, state, 4)
    at = snapshot_now(log, state)
    fill(log, state, 3, pid=8)
    crash(log)
    for use_snapshot in (True, False):
        log, expected = reopened_unwalkable(tmp_path, ONE_SEGMENT)
        loaded = ProducerStateManager()
        got = log.load_producer_state(loaded, use_snapshot=use_snapshot)
        assert got.snapshot_offset == (at if use_snapshot else None)
        assert got.batches_walked == (3 if use_snapshot else 7)
        assert loaded.snapshot(1 << 62, -1).producers == expected
        log._abandon()


def test_headers_recovery_did_not_scan_or_that_changed_since_are_read_from_disk(tmp_path):
    log, state = Log.open(tmp_path, CFG, now_ms=0), ProducerStateManager()
    fill(log, state, 3)
    assert snapshot_now(log, state) == 3  # in the first segment: the scan covers only the last
    fill(log, state, 30, start_seq=3)
    assert len(log._segments) > 2
    crash(log)
    log, _ = reopened_unwalkable(tmp_path, CFG)
    with pytest.raises(AssertionError, match=r"from disk again \(from 3\)"):
        log.load_producer_state(ProducerStateManager())
    log._abandon()
    # Appended after open: the scan no longer reaches the log end.
    one = tmp_path / "one-segment"
    log, state = Log.open(one, ONE_SEGMENT, now_ms=0), ProducerStateManager()
    fill(log, state, 3)
    crash(log)
    log = Log.open(one, ONE_SEGMENT, now_ms=0)
    fill(log, state, 2, pid=9)
    loaded = ProducerStateManager()
    log.load_producer_state(loaded, use_snapshot=False)
    producers = loaded.snapshot(1 << 62, -1).producers
    assert producers == whole_walk(log) and 9 in [p[0] for p in producers]
    log.close()

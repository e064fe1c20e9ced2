"""Log API: offset assignment, reads, follower appends, epochs, truncation, retention, flush/roll concurrency."""

import threading

import pytest

from partition.batch import (
    CONTROL_LEADER_CHANGE,
    BatchBuilder,
    control_batch,
    decode_batches,
    iter_headers,
)
from partition.errors import CorruptRecordError, LogClosedError
from partition.log import (
    EpochRegression,
    LeaderEpochCache,
    Log,
    LogConfig,
    NonContiguousAppend,
)
from raftlog.base.errors import MessageTooLargeError, OffsetOutOfRangeError

SMALL = LogConfig(segment_bytes=1500, index_interval_bytes=100, retention_ms=-1)


def mk(n=3, ts=1000, key=None, value_bytes=50, epoch=-1, base=0):
    b = BatchBuilder(base_offset=base, partition_leader_epoch=epoch)
    for i in range(n):
        b.append(bytes(value_bytes), key=key, timestamp_ms=ts + i)
    return b.build()


def offsets_of(data):
    return [r.offset for _, rs in decode_batches(data) for r in rs]


def read_all(log, start=None):
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data
        for _, h in iter_headers(data):
            offset = max(offset, h.next_offset)
        out.append(data)
    return b"".join(out)


@pytest.fixture
def log(tmp_path):
    lg = Log.open(tmp_path / "p0", SMALL, now_ms=0)
    yield lg
    lg.close()


def test_append_assigns_offsets_stamps_epoch_and_rolls(log):
    assert log.append(mk(3), leader_epoch=1, now_ms=0) == (0, 2)
    assert log.append(mk(2) + mk(4), leader_epoch=1, now_ms=0) == (3, 8)
    for _ in range(20):
        log.append(mk(3), leader_epoch=2, now_ms=0)
    assert log.log_end_offset == 69 and log.segment_count() > 1
    data = read_all(log)
    assert offsets_of(data) == list(range(69))
    epochs = [h.partition_leader_epoch for _, h in iter_headers(data)]
    assert epochs[:3] == [1, 1, 1] and set(epochs[3:]) == {2}
    assert log.epochs() == [(1, 0), (2, 9)] and log.last_epoch() == 2


def test_read_rules(log):
    for i in range(10):
        log.append(mk(3, ts=i), leader_epoch=0, now_ms=0)
    assert log.read(log.log_end_offset, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    one = log.read(4, 1)  # batch 3..5 even though larger than max_bytes
    assert offsets_of(one) == [3, 4, 5]
    capped = log.read(0, 1 << 20, max_offset=9)
    assert offsets_of(capped) == list(range(9))
    assert log.read(9, 1 << 20, max_offset=9) == b""


def test_bad_appends_are_refused_and_write_nothing(tmp_path):
    log = Log.open(tmp_path, LogConfig(max_batch_bytes=5000), now_ms=0)
    good = mk(3)
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(bad), leader_epoch=0, now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(good[:-5], leader_epoch=0, now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(b"", leader_epoch=0, now_ms=0)
    with pytest.raises(MessageTooLargeError):
        log.append(good + mk(1, value_bytes=10_000), leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 0 and log.size_bytes() == 0
    log.close()


def test_leader_epoch_cannot_go_back(log):
    log.append(mk(), leader_epoch=3, now_ms=0)
    with pytest.raises(EpochRegression):
        log.append(mk(), leader_epoch=2, now_ms=0)
    assert log.log_end_offset == 3


def test_append_replicated_contiguity_and_epochs(tmp_path, log):
    log.append(mk(), leader_epoch=1, now_ms=0)
    log.append(control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=5, partition_leader_epoch=0),
               leader_epoch=2, now_ms=0)
    log.append(mk(), leader_epoch=2, now_ms=0)
    follower = Log.open(tmp_path / "f", SMALL, now_ms=0)
    data = read_all(log)
    assert follower.append_replicated(data, now_ms=0) == log.log_end_offset
    assert follower.epochs() == log.epochs() == [(1, 0), (2, 3)]
    with pytest.raises(NonContiguousAppend):
        follower.append_replicated(mk(base=100, epoch=2), now_ms=0)
    with pytest.raises(EpochRegression):
        follower.append_replicated(mk(base=7, epoch=1), now_ms=0)
    # Gaps between batches of one call are fine (compacted leaders send them).
    assert follower.append_replicated(mk(base=7, epoch=2) + mk(base=20, epoch=3), now_ms=0) == 23
    assert follower.end_offset_for_epoch(2) == (2, 20)
    follower.close()


def test_end_offset_for_epoch_kip_595_semantics():
    c = LeaderEpochCache([(2, 0), (4, 10), (7, 30)])
    assert c.end_offset_for(1, 50) == (-1, -1)
    assert c.end_offset_for(2, 50) == (2, 10)
    assert c.end_offset_for(3, 50) == (2, 10)
    assert c.end_offset_for(6, 50) == (4, 30)
    assert c.end_offset_for(7, 50) == (7, 50)
    assert c.end_offset_for(9, 50) == (7, 50)
    assert LeaderEpochCache().end_offset_for(0, 0) == (-1, -1)
    assert c.truncate_from_start(12) and c.entries == [(4, 12), (7, 30)]
    assert c.truncate_from_end(30) and c.entries == [(4, 12)]


def test_truncate_to_drops_whole_batch_segments_and_epochs(tmp_path):
    log = Log.open(tmp_path, SMALL, now_ms=0)
    for i in range(30):
        log.append(mk(), leader_epoch=1 + i // 10, now_ms=0)
    segments = log.segment_count()
    log.truncate_to(31)  # inside batch 30..32
    assert log.log_end_offset == 30 and log.flushed_offset == 30
    assert log.epochs() == [(1, 0)]
    assert log.segment_count() < segments
    assert offsets_of(read_all(log)) == list(range(30))
    log.append(mk(), leader_epoch=5, now_ms=0)
    assert log.epochs() == [(1, 0), (5, 30)]
    log.close()
    again = Log.open(tmp_path, SMALL, now_ms=0)
    assert again.log_end_offset == 33 and again.epochs() == [(1, 0), (5, 30)]
    assert offsets_of(read_all(again)) == list(range(33))
    again.truncate_to(0)
    assert again.log_end_offset == 0 and again.epochs() == [] and again.size_bytes() == 0
    again.close()


def test_retention_by_time_and_bytes_advances_and_persists_log_start(tmp_path):
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=100, retention_ms=1000)
    log = Log.open(tmp_path, cfg, now_ms=0)
    for i in range(40):
        log.append(mk(ts=i * 100), leader_epoch=0, now_ms=0)
    log.flush()
    done = log.maintain(now_ms=2500)
    assert done["deleted_segments"] and log.log_start_offset == done["log_start_offset"] > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_start_offset - 1, 100)
    assert offsets_of(log.read(log.log_start_offset, 1 << 20))[0] == log.log_start_offset
    start = log.log_start_offset
    log.set_config(LogConfig(segment_bytes=1500, index_interval_bytes=100, retention_ms=-1,
                             retention_bytes=2000))
    log.maintain(now_ms=2500)
    assert log.log_start_offset > start
    assert log.size_bytes() - log._segments[-1].size_bytes <= 2000  # closed part within budget
    assert log.epochs() == [(0, log.log_start_offset)]
    start = log.log_start_offset
    log.close()
    again = Log.open(tmp_path, cfg, now_ms=0)
    assert again.log_start_offset == start
    with pytest.raises(OffsetOutOfRangeError):
        again.read(start - 1, 100)
    again.close()


def test_advance_start_moves_the_log_start_mid_segment_and_survives_reopen(tmp_path):
    log = Log.open(tmp_path, SMALL, now_ms=0)
    for i in range(20):
        log.append(mk(ts=i), leader_epoch=2, now_ms=0)  # 3 records a batch, ~5 a segment
    log.flush()
    segments = len(log._segments)
    with pytest.raises(ValueError):
        log.advance_start(0)  # not above the log start
    with pytest.raises(ValueError):
        log.advance_start(log.log_end_offset + 1)
    gone = log.advance_start(31)  # inside a batch, inside a segment
    assert gone and len(log._segments) == segments - len(gone)
    assert log.log_start_offset == 31 and log._segments[0].base_offset <= 31
    with pytest.raises(OffsetOutOfRangeError):
        log.read(30, 100)
    assert offsets_of(log.read(31, 100))[0] <= 31  # the batch holding 31, whole
    assert log.epochs() == [(2, 31)]
    log.advance_start(log.log_end_offset)  # everything (the active segment stays)
    assert log.log_start_offset == log.log_end_offset == 60 and log.read(60, 100) == b""
    assert log.epochs() == []  # no entry may start at the log end
    log.close()
    again = Log.open(tmp_path, SMALL, now_ms=0)
    assert (again.log_start_offset, again.log_end_offset) == (60, 60)
    assert again.append(mk(), leader_epoch=3, now_ms=0) == (60, 62)
    again.close()


def test_retention_never_deletes_the_active_segment(tmp_path):
    log = Log.open(tmp_path, LogConfig(retention_ms=0, retention_bytes=0), now_ms=0)
    log.append(mk(ts=0), leader_epoch=0, now_ms=0)
    assert log.maintain(now_ms=10**8)["deleted_segments"] == []  # < segment_ms: no roll
    assert offsets_of(log.read(0, 1000)) == [0, 1, 2]
    log.close()


def test_segment_ms_rolls(tmp_path):
    log = Log.open(tmp_path, LogConfig(segment_ms=100), now_ms=0)
    log.append(mk(), leader_epoch=0, now_ms=0)
    log.append(mk(), leader_epoch=0, now_ms=50)
    assert log.segment_count() == 1
    log.append(mk(), leader_epoch=0, now_ms=150)
    assert log.segment_count() == 2
    assert log.maintain(now_ms=400)["rolled"] and log.segment_count() == 3
    log.close()


def test_offset_for_timestamp_is_the_first_record_at_or_after(log):
    """Kafka's rule: the first record whose own timestamp >= the one asked for (inside a
    batch too), with that record's timestamp; before, the batch's base offset and max."""
    for i in range(30):
        log.append(mk(ts=1000 + 10 * i), leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1105) == (33, 1110)  # batch 11: ts 1110..1112
    assert log.offset_for_timestamp(1111) == (34, 1111)  # inside batch 11
    assert log.offset_for_timestamp(1292) == (89, 1292)  # the last record of batch 29
    assert log.offset_for_timestamp(1293) is None
    log.advance_start(35)  # DeleteRecords inside batch 11: its earlier records do not count
    assert log.offset_for_timestamp(1105) == (35, 1112)


def test_closed_log_refuses_everything(tmp_path):
    log = Log.open(tmp_path, SMALL, now_ms=0)
    log.close()
    log.close()
    for call in (lambda: log.append(mk(), leader_epoch=0, now_ms=0), lambda: log.read(0, 1),
                 log.flush, lambda: log.truncate_to(0), lambda: log.maintain(0)):
        with pytest.raises(LogClosedError):
            call()


def test_flush_in_a_thread_while_appending_and_rolling(tmp_path):
    log = Log.open(tmp_path, LogConfig(segment_bytes=2000, index_interval_bytes=100,
                                       retention_bytes=3000), now_ms=0)
    stop = threading.Event()
    flushed = []
    errors = []

    def flusher():
        try:
            while not stop.is_set():
                flushed.append(log.flush())
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            log.append(mk(), leader_epoch=0, now_ms=0)
            if i % 50 == 0:
                log.maintain(now_ms=0)  # deletes segments a flush may hold
            assert log.flushed_offset <= log.log_end_offset
    finally:
        stop.set()
        t.join(timeout=30)
    assert not t.is_alive() and not errors
    assert flushed == sorted(flushed) and flushed[-1] <= 900
    assert log.flush() == 900 == log.flushed_offset
    log.close()

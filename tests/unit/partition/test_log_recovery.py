"""Recovery on open keeps exactly the intact prefix of a torn or bit-flipped tail, trusts closed segments without reading them, and rebuilds damaged indexes and checkpoints."""

import os
import random
import shutil

import pytest

from partition.batch import BatchBuilder, iter_headers, read_header, verify_crc
from partition.errors import CorruptRecordError
from partition.log import EPOCH_CHECKPOINT, LOG_START_CHECKPOINT, Log, LogConfig

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=-1)


def mk(n=3, ts=1000, value_bytes=40):
    b = BatchBuilder()
    for i in range(n):
        b.append(bytes([i]) * value_bytes, key=b"k%d" % i, timestamp_ms=ts + i)
    return b.build()


def read_all(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for _, h in iter_headers(data):  # verify=True: never a corrupt batch
            offset = max(offset, h.next_offset)
        out.append(data)
    return b"".join(out)


def seg_files(d):
    return sorted(p for p in d.iterdir() if p.suffix == ".log")


def build(d, batches=5, epoch=1, small_last=False):
    log = Log.open(d, CFG, now_ms=0)
    for i in range(batches):
        log.append(mk(ts=1000 + i), leader_epoch=epoch, now_ms=0)
    if small_last:  # a short last batch keeps the every-byte tests quick (one open per byte)
        log.append(mk(n=2, value_bytes=4), leader_epoch=epoch, now_ms=0)
    log.close()


def test_cut_at_every_byte_of_the_last_batch(tmp_path):
    src = tmp_path / "src"
    build(src, small_last=True)
    active = seg_files(src)[-1]
    full = active.read_bytes()
    headers = [h for _, h in iter_headers(full)]
    last = headers[-1]
    prefix = full[: len(full) - last.size]
    case = tmp_path / "case"
    for k in range(last.size):
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(src, case)
        (case / active.name).write_bytes(prefix + full[len(prefix): len(prefix) + k])
        log = Log.open(case, CFG, now_ms=0)
        rep = log.recovery
        assert rep.bytes_dropped == k, k
        assert rep.offsets_lost == (2 if k >= 27 else 0), k
        assert (rep.segment is not None) == (k > 0)
        assert log.log_end_offset == last.base_offset
        assert read_all(log) == prefix
        assert log.epochs() == [(1, 0)]
        log.close()


def test_bit_flips_in_the_last_batch_never_survive_as_corrupt(tmp_path):
    src = tmp_path / "src"
    build(src, small_last=True)
    active = seg_files(src)[-1]
    full = active.read_bytes()
    last = [h for _, h in iter_headers(full)][-1]
    start = len(full) - last.size
    prefix = full[:start]
    rng = random.Random(20240611)
    case = tmp_path / "case"
    for pos in range(start, len(full)):
        bit = rng.randrange(8)
        damaged = bytearray(full)
        damaged[pos] ^= 1 << bit
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(src, case)
        (case / active.name).write_bytes(bytes(damaged))
        log = Log.open(case, CFG, now_ms=0)
        data = read_all(log)  # iter_headers(verify=True) inside: every CRC holds
        rel = pos - start
        if rel >= 8 and not 12 <= rel < 16:
            # Length, magic, CRC and everything under the CRC: the batch must go.
            assert data == prefix, (pos, bit)
            assert log.recovery.bytes_dropped == last.size
        else:
            # baseOffset / partitionLeaderEpoch sit outside the CRC (Kafka's design): a flip
            # is caught only when it breaks offset/epoch order; the log stays ordered anyway.
            assert data in (prefix, bytes(damaged)), (pos, bit)
            bases = [h.base_offset for _, h in iter_headers(data)]
            assert bases == sorted(set(bases))
        log.close()


def test_closed_segments_are_trusted_not_read_and_active_tail_is_checked(tmp_path):
    d = tmp_path / "log"
    build(d, batches=60)
    files = seg_files(d)
    assert len(files) >= 4
    # Damage the middle of a closed segment (record bytes of its first batch) ...
    closed = files[1]
    raw = bytearray(closed.read_bytes())
    raw[100] ^= 0xFF
    closed.write_bytes(bytes(raw))
    # ... and tear the active segment's tail.
    active = files[-1]
    tail = active.read_bytes()
    active.write_bytes(tail[:-10])
    log = Log.open(d, CFG, now_ms=0)
    rep = log.recovery
    assert rep.segments_scanned == 1 and rep.segment == active.name
    assert rep.bytes_dropped == len(tail) - 10 - _intact(tail[:-10])
    assert rep.indexes_rebuilt == []
    # open() did not notice the closed segment's damage; a reader checking CRCs does.
    base = int(closed.stem)
    with pytest.raises(CorruptRecordError):
        verify_crc(log.read(base, 1))
    log.close()


def _intact(buf):
    end = 0
    try:
        for pos, h in iter_headers(buf):
            end = pos + h.size
    except CorruptRecordError:
        pass
    return end


def test_unflushed_closed_segments_are_scanned_and_a_hole_ends_the_log(tmp_path):
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0)
    log.append(mk(), leader_epoch=1, now_ms=0)
    log.flush()
    for i in range(60):
        log.append(mk(), leader_epoch=1, now_ms=0)
    log._abandon()  # crash: no flush since the rolls, recovery point still at segment 0
    files = seg_files(d)
    assert len(files) >= 4
    torn = files[1]
    data = torn.read_bytes()
    torn.write_bytes(data[:-30])
    log = Log.open(d, CFG, now_ms=0)
    rep = log.recovery
    assert rep.segments_scanned == 2 and rep.segment == torn.name  # later ones: deleted
    kept = _intact(data[:-30])
    last_kept = [h for _, h in iter_headers(data[:kept])][-1]
    assert log.log_end_offset == last_kept.next_offset
    assert log.segment_count() == 2
    assert rep.offsets_lost == 183 - log.log_end_offset
    read_all(log)
    log.close()


def test_missing_and_damaged_indexes_are_rebuilt(tmp_path):
    d = tmp_path / "log"
    build(d, batches=60)
    before = Log.open(d, CFG, now_ms=0)
    expected = read_all(before)
    before.close()
    files = seg_files(d)
    (d / (files[0].stem + ".index")).unlink()
    (d / (files[1].stem + ".timeindex")).write_bytes(b"\x00" * 24)
    (d / (files[2].stem + ".index")).write_bytes(b"\xff" * 13)
    log = Log.open(d, CFG, now_ms=0)
    rebuilt = set(log.recovery.indexes_rebuilt)
    for f in files[:3]:
        assert f.stem + ".index" in rebuilt
    assert read_all(log) == expected
    assert log.offset_for_timestamp(1030) is not None
    log.close()
    again = Log.open(d, CFG, now_ms=0)
    assert again.recovery.indexes_rebuilt == []  # the rebuilt files were written
    again.close()


@pytest.mark.parametrize("damage", [lambda p: p.unlink(), lambda p: p.write_bytes(b"garbage\n")])
def test_epoch_checkpoint_rebuilt_from_segments(tmp_path, damage):
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0)
    for i in range(40):
        log.append(mk(), leader_epoch=1 + i // 15, now_ms=0)
    expected = log.epochs()
    log.close()
    damage(d / EPOCH_CHECKPOINT)
    log = Log.open(d, CFG, now_ms=0)
    assert log.epochs() == expected == [(1, 0), (2, 45), (3, 90)]
    log.close()


def test_torn_tail_trims_epochs_that_started_in_it(tmp_path):
    d = tmp_path / "log"
    log = Log.open(d, CFG, now_ms=0)
    log.append(mk(), leader_epoch=1, now_ms=0)
    log.append(mk(), leader_epoch=2, now_ms=0)
    log._abandon()
    active = seg_files(d)[-1]
    active.write_bytes(active.read_bytes()[:-1])
    log = Log.open(d, CFG, now_ms=0)
    assert log.log_end_offset == 3 and log.epochs() == [(1, 0)]
    assert log.end_offset_for_epoch(2) == (1, 3)
    log.close()


def test_damaged_log_start_checkpoint_falls_back_to_first_segment(tmp_path):
    d = tmp_path / "log"
    build(d, batches=30)
    (d / LOG_START_CHECKPOINT).write_bytes(b"log-start-offset-checkpoint\n1\n999\ncrc32c 00000000\n")
    log = Log.open(d, CFG, now_ms=0)
    assert log.log_start_offset == 0
    log.close()


def test_leftover_temp_and_orphan_index_files_are_removed(tmp_path):
    d = tmp_path / "log"
    build(d)
    (d / (EPOCH_CHECKPOINT + ".tmp")).write_bytes(b"half")
    (d / ("%020d.index" % 12345)).write_bytes(b"")
    log = Log.open(d, CFG, now_ms=0)
    names = set(os.listdir(d))
    assert EPOCH_CHECKPOINT + ".tmp" not in names and "%020d.index" % 12345 not in names
    assert read_header(log.read(0, 1)).base_offset == 0
    log.close()

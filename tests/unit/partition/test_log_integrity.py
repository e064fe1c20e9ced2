"""Damage anywhere at rest is found and never served: reads check every batch's CRC and the index entry they start from, the segment check and repair cut exactly at the first bad batch, open checks index files against their segments, and compaction's long phase runs beside writes."""

import os

import pytest

from partition.batch import BatchBuilder, iter_headers
from partition.errors import StorageDamageError
from partition.index import OFFSET_ENTRY_BYTES
from partition.log import Log, LogConfig
from partition.segment_index import INDEX_SAMPLE_ENTRIES

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=200, retention_ms=-1)


def mk(n=4, ts=1000, key=b"k", value_bytes=50):
    b = BatchBuilder()
    for i in range(n):
        b.append(bytes([65 + i]) * value_bytes, key=key + b"%d" % i, timestamp_ms=ts + i)
    return b.build()


def fill(log, batches=30, epoch=1):
    for i in range(batches):
        log.append(mk(ts=1000 + i), leader_epoch=epoch, now_ms=0)
    log.flush()


def read_all(log):
    offset, out = log.log_start_offset, []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for _, h in iter_headers(data):
            offset = max(offset, h.next_offset)
            out.append(h.base_offset)
    return out


def flip(path, pos, mask=0x10):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ mask]))


def second_segment(log):
    seg = log._segments[1]
    positions = [(p, h) for p, h in seg.walk(0, seg.size_bytes)]
    return seg, positions


def test_read_never_returns_a_batch_whose_crc_fails(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg, batches = second_segment(log)
    pos, h = batches[2]
    flip(seg.log_path, pos + 100)  # inside the records: only the CRC can tell
    with pytest.raises(StorageDamageError) as e:
        log.read(h.base_offset, 1 << 20)
    assert (e.value.segment, e.value.position, e.value.offset, e.value.what) == (
        seg.base_offset, pos, h.base_offset, "batch")
    # A read that starts earlier in the segment stops being served there as well.
    with pytest.raises(StorageDamageError):
        log.read(seg.base_offset, 1 << 20)
    # Batches before it in another segment are still served, and checked.
    assert log.read(0, 100)
    log.close()


def test_index_entry_naming_another_batch_is_index_damage_and_rebuild_fixes_it(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg = log._segments[1]
    assert len(seg.index) >= 2
    seg.index.positions[1] = seg.index.positions[0]  # entry 1 now points at entry 0's batch
    target = seg.base_offset + seg.index.rel_offsets[1]
    with pytest.raises(StorageDamageError) as e:
        log.read(target, 1 << 20)
    assert e.value.what == "index"
    check = log.check_segment(seg.base_offset)
    assert check.damage is None and check.index_problem is not None
    assert log.repair(seg.base_offset) is None  # the batches are intact: nothing is cut
    assert log.rebuild_indexes(seg.base_offset)
    assert log.check_segment(seg.base_offset).index_problem is None
    assert log.index_files_match(seg.base_offset)
    assert read_all(log)[-1] == log.log_end_offset - 4
    log.close()


def test_repair_cuts_exactly_at_the_first_bad_batch_and_drops_later_segments(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    end_before = log.log_end_offset
    segments_before = log.segment_count()
    seg, batches = second_segment(log)
    pos, h = batches[3]
    flip(seg.log_path, pos + 70)
    check = log.check_segment(seg.base_offset)
    assert check.damage is not None and check.valid_bytes == pos and check.damage_offset == h.base_offset
    report = log.repair(seg.base_offset)
    assert report is not None and report.log_end_offset == h.base_offset
    assert log.log_end_offset == h.base_offset == log.flushed_offset
    assert log.segment_count() == 2 < segments_before
    assert report.offsets_lost == end_before - h.base_offset
    assert read_all(log) == list(range(0, h.base_offset, 4))
    log.close()
    again = Log.open(tmp_path, CFG, now_ms=0)  # durable, and the cut segment is rescanned
    assert again.log_end_offset == h.base_offset
    assert again.recovery.bytes_dropped == 0
    again.close()


def test_a_garbled_header_is_found_by_the_check_and_cut_by_repair(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg, batches = second_segment(log)
    pos, h = batches[1]
    flip(seg.log_path, pos + 16, 0xFF)  # magic
    assert log.check_segment(seg.base_offset).damage_offset == h.base_offset
    assert log.repair(seg.base_offset).log_end_offset == h.base_offset
    log.close()


def test_repair_of_an_intact_segment_changes_nothing(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    end, count = log.log_end_offset, log.segment_count()
    for base, _ in log.scrub_candidates():
        assert log.repair(base) is None
        assert log.check_segment(base).damage is None
    assert (log.log_end_offset, log.segment_count()) == (end, count)
    log.close()


def test_open_checks_index_entries_against_the_segment_and_rebuilds(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    log.close()
    seg_name = sorted(p for p in tmp_path.iterdir() if p.suffix == ".index")[1]
    data = bytearray(seg_name.read_bytes())
    assert len(data) >= 2 * OFFSET_ENTRY_BYTES
    # Entry 0 (not the last one): point its position 8 bytes later, still increasing.
    pos0 = int.from_bytes(data[4:8], "big") + 8
    data[4:8] = pos0.to_bytes(4, "big")
    seg_name.write_bytes(bytes(data))
    again = Log.open(tmp_path, CFG, now_ms=0)
    assert seg_name.name in again.recovery.indexes_rebuilt
    assert again.recovery.bytes_dropped == 0
    assert len(read_all(again)) == 30
    again.close()
    assert INDEX_SAMPLE_ENTRIES >= 16


def test_open_cuts_a_sealed_segment_whose_headers_do_not_walk(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg, batches = second_segment(log)
    pos, h = batches[2]
    path = seg.log_path
    log.close()
    os.unlink(seg.index_path)  # force a rebuild of the trusted segment's index: the walk breaks
    flip(path, pos + 16, 0xFF)
    again = Log.open(tmp_path, CFG, now_ms=0)
    assert again.log_end_offset == h.base_offset
    assert again.recovery.bytes_dropped > 0 and again.recovery.offsets_lost > 0
    again.close()


def test_compaction_cleans_beside_appends_and_a_truncation_cancels_its_swap(tmp_path):
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=200, retention_ms=-1,
                    cleanup_policy="compact")
    log = Log.open(tmp_path, cfg, now_ms=0)
    for i in range(20):
        log.append(mk(n=3, ts=1000 + i, key=b"same"), leader_epoch=1, now_ms=0)
    log.flush()
    plan = log.plan_compaction(0)
    assert plan is not None and plan.segments
    log.clean_planned(plan)
    assert plan.cleaned
    # The writer goes on meanwhile: appends land, and the plan's segments stay readable.
    log.append(mk(ts=5000), leader_epoch=1, now_ms=0)
    first = plan.segments[0].base_offset
    assert log.read(first, 100)
    result = log.install_cleaned(plan)
    assert result.segments_rewritten and result.records_removed > 0
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]

    for i in range(10):
        log.append(mk(n=3, ts=6000 + i, key=b"same"), leader_epoch=1, now_ms=0)
    log.flush()
    plan = log.plan_compaction(0)
    log.clean_planned(plan)
    log.truncate_to(plan.segments[0].base_offset + 1)  # the candidates go
    result = log.install_cleaned(plan)
    assert result.segments_rewritten == []
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]
    log.close()

"""Reads check each byte once and never trust a stale check: a segment's checked ranges merge and stay bounded, a cut forgets the bytes past it, a zero-copy slice is checked before it is made, the fast read-path check refuses exactly the batches read_header / verify_crc refuse, and a leader's reads for its followers take this process's own appends as checked only while they lie in the active segment's cached tail."""

import os

import pytest

import partition.batch as batch_module
import partition.log_integrity as log_module
from partition.batch import BatchBuilder, iter_headers, read_header, verify_crc
from partition.errors import CorruptRecordError, StorageDamageError
from partition.log import Log, LogConfig
from partition.log_integrity import _check_batches
from partition.file_io import pread_exact
from partition.segment import MAX_VERIFIED_RANGES

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=200, retention_ms=-1)


def mk(i, n=4):
    b = BatchBuilder()
    for k in range(n):
        b.append(bytes([65 + (i + k) % 26]) * 50, key=b"k%d" % k, timestamp_ms=1000 + i)
    return b.build()


def fill(log, batches=30, first=0):
    for i in range(first, first + batches):
        log.append(mk(i), leader_epoch=1, now_ms=0)
    log.flush()


def read_all(log, own_tail=False):
    offset, out = log.log_start_offset, []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, own_tail=own_tail)
        for _, h in iter_headers(data, verify=False):
            offset = max(offset, h.next_offset)
            out.append(h.base_offset)
    return out


def flip(path, pos, mask=0x10):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ mask]))


@pytest.fixture
def crcs(monkeypatch):
    """Counts the CRC-32C computations of the read path (partition/log.py's batch checks and
    partition/batch.py's verify_crc)."""
    seen = []
    real = log_module.crc32c

    def counting(data, value=0):
        seen.append(len(data))
        return real(data, value)

    monkeypatch.setattr(log_module, "crc32c", counting)
    monkeypatch.setattr(batch_module, "crc32c", counting)
    return seen


def test_checked_ranges_merge_stay_bounded_and_a_cut_forgets_past_it(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log, 3)
    seg = log._segments[0]
    v = seg.verified_version
    seg.mark_verified(0, 100, v)
    seg.mark_verified(200, 300, v)
    assert seg.unverified(0, 400) == [(100, 200), (300, 400)]
    seg.mark_verified(100, 200, v)  # adjacent on both sides: one range
    assert seg.unverified(0, 400) == [(300, 400)] and seg._verified == [(0, 300)]
    assert seg.unverified(50, 250) == []
    for k in range(2 * MAX_VERIFIED_RANGES):
        seg.mark_verified(1000 + 20 * k, 1010 + 20 * k, v)
    assert len(seg._verified) == MAX_VERIFIED_RANGES and (0, 300) in seg._verified
    seg._forget_verified_from(150)
    assert seg.unverified(0, 400) == [(150, 400)]
    # A check that read its bytes before the cut marks nothing and trusts nothing.
    seg.mark_verified(0, 400, v)
    assert seg.unverified(0, 400) == [(150, 400)]
    assert seg.unverified(0, 100, v) == [(0, 100)]
    log.close()


def test_a_second_read_of_the_same_bytes_computes_no_crc(tmp_path, crcs):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    crcs.clear()  # the appends' own checks
    first = read_all(log)
    assert len(crcs) == len(first)  # one CRC per batch, the first time
    crcs.clear()
    assert read_all(log) == first and crcs == []
    fill(log, 5, first=30)  # new batches: only they are checked
    crcs.clear()
    assert read_all(log)[:len(first)] == first
    assert len(crcs) == 5
    log.close()


def test_a_verifier_marks_what_it_checked_and_the_scrubber_still_finds_later_damage(tmp_path, crcs):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg = log._segments[1]
    assert log.check_segment(seg.base_offset).damage is None
    assert seg.unverified(0, seg.size_bytes) == []
    # Bytes damaged after their check: reads trust the check; the scrubber's full check
    # (which ignores the marks) still finds them.
    p, h = list(seg.walk(0, seg.size_bytes))[2]
    flip(seg.log_path, p + 100)
    check = log.check_segment(seg.base_offset)
    assert check.damage is not None and check.valid_bytes == p
    log.close()


def test_a_cut_and_new_bytes_at_the_same_positions_are_checked_again(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    read_all(log)  # everything checked
    seg = log._segments[-1]
    batches = list(seg.walk(0, seg.size_bytes))
    assert len(batches) >= 3
    cut_pos, cut_h = batches[1]
    log.truncate_to(cut_h.base_offset)
    assert seg.unverified(0, cut_pos) == [] and seg.unverified(cut_pos, cut_pos + 10) == [(cut_pos, cut_pos + 10)]
    fill(log, 2, first=100)  # other bytes where the cut ones were
    flip(seg.log_path, cut_pos + 100)
    with pytest.raises(StorageDamageError) as e:
        log.read(cut_h.base_offset, 1 << 20)
    assert e.value.position == cut_pos
    log.close()


def _fds():
    return len(os.listdir("/proc/self/fd"))


def test_a_slice_is_checked_before_it_is_made_and_holds_what_read_returns(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    fill(log)
    seg = log._segments[1]
    batches = list(seg.walk(0, seg.size_bytes))
    for warm in (False, True):
        s = log.read_slice(seg.base_offset, 1 << 20, warm=warm)
        try:
            assert pread_exact(s.fd, s.length, s.offset) == log.read(seg.base_offset, 1 << 20)
        finally:
            s.close()
    # Damage in the part of a range that no read has checked yet: no slice, nothing leaked.
    log2_dir = tmp_path / "two"
    log2 = Log.open(log2_dir, CFG, now_ms=0)
    fill(log2)
    seg2 = log2._segments[1]
    batches = list(seg2.walk(0, seg2.size_bytes))
    log2.read(seg2.base_offset, batches[1][0])  # checks (and marks) the first batch only
    assert seg2.unverified(0, seg2.size_bytes) == [(batches[1][0], seg2.size_bytes)]
    p, h = batches[3]
    flip(seg2.log_path, p + 100)
    before = _fds()
    for warm in (False, True):
        with pytest.raises(StorageDamageError) as e:
            log2.read_slice(seg2.base_offset, 1 << 20, warm=warm)
        assert (e.value.position, e.value.offset) == (p, h.base_offset)
    assert _fds() == before
    # Up to the bad batch, slices are still made (and checked).
    s = log2.read_slice(seg2.base_offset, p - 1)
    assert s.offset + s.length <= p
    s.close()
    log.close()
    log2.close()


def _slow_ok(data, exact, floor, seg_base):
    """The reference: partition/batch.py's own checks plus the read path's offset rules."""
    expected, first = (exact if exact is not None else floor), True
    try:
        for _, h in iter_headers(data, verify=True):
            if (h.base_offset != exact) if first and exact is not None else (h.base_offset < expected):
                return False
            if h.base_offset < seg_base or h.last_offset - seg_base > 0x7FFFFFFF:
                return False
            expected, first = h.next_offset, False
    except CorruptRecordError:
        return False
    return True


def test_the_fast_check_refuses_exactly_what_the_full_header_check_refuses(tmp_path):
    log = Log.open(tmp_path, CFG, now_ms=0)
    seg = log._segments[0]
    data = bytearray()
    for i in range(3):
        b = bytearray(mk(i, n=1 + i))
        b[0:8] = (i * 10).to_bytes(8, "big")  # base offsets 0, 10, 20 (gaps, as compaction leaves)
        data += b
    data = bytes(data)
    verify_crc(data, 0)
    assert read_header(data, 0).base_offset == 0
    cases = 0
    for pos in range(len(data)):
        for mask in (0x01, 0x80):
            bad = bytearray(data)
            bad[pos] ^= mask
            bad = bytes(bad)
            for exact in (0, None):
                want = _slow_ok(bad, exact, 0, seg.base_offset)
                try:
                    _check_batches(seg, bad, 0, len(bad), 0, exact, 0)
                    got = True
                except StorageDamageError:
                    got = False
                assert got == want, (pos, mask, exact)
                cases += 1
    assert cases > 1000
    log.close()


def _batches_by_segment(log):
    return [[h.base_offset for _, h in s.walk(0, s.size_bytes)] for s in log._segments]


def test_own_appends_in_the_active_segments_cached_tail_count_as_checked_for_followers(tmp_path, crcs):
    log = Log.open(tmp_path, CFG, now_ms=0)  # the default cached tail: 16 MiB
    fill(log)
    *sealed, active = _batches_by_segment(log)
    assert sealed and active
    crcs.clear()
    assert read_all(log, own_tail=True) == [o for seg in sealed for o in seg] + active
    assert len(crcs) == sum(map(len, sealed))  # the active segment's batches: no CRC
    seg = log._segments[-1]
    assert log.unverified_bytes(active[0], 1 << 20, own_tail=True) == 0
    assert log.unverified_bytes(active[0], 1 << 20) == seg.size_bytes
    assert seg.unverified(0, seg.size_bytes) == [(0, seg.size_bytes)]  # trusted, not marked
    # A follower's slice of the tail is made without reading it.
    crcs.clear()
    s = log.read_slice(active[0], 1 << 20, own_tail=True)
    assert crcs == [] and s.length == seg.size_bytes
    # Any other read checks them (a consumer's), and marks them checked.
    assert pread_exact(s.fd, s.length, s.offset) == log.read(active[0], 1 << 20)
    assert len(crcs) == len(active) and seg.unverified(0, seg.size_bytes) == []
    s.close()
    log.close()
    # What a restart finds is nobody's write: reads check what recovery's scan did not.
    log = Log.open(tmp_path, log.config, now_ms=0)
    seg = log._segments[-1]
    assert seg.trusted_from() == seg.size_bytes > 0
    crcs.clear()
    read_all(log)
    assert len(crcs) == sum(map(len, sealed))
    log.close()


def test_own_appends_behind_the_cached_tail_and_damage_there_are_checked(tmp_path, crcs):
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, retention_ms=-1,
                    cache_tail_bytes=2000)
    log = Log.open(tmp_path, cfg, now_ms=0)
    fill(log)  # ~10 KiB in one segment
    seg = log._segments[-1]
    batches = list(seg.walk(0, seg.size_bytes))
    trusted = seg.trusted_from()
    assert seg.size_bytes - 2000 <= trusted < seg.size_bytes
    assert trusted in [p for p, _ in batches]  # a batch boundary: the check stops between batches
    behind = [h for p, h in batches if p < trusted]
    assert len(behind) >= 10
    crcs.clear()
    read_all(log, own_tail=True)
    assert len(crcs) == len(behind)
    # Damage behind the tail is found by the first read there.
    log2 = Log.open(tmp_path / "two", cfg, now_ms=0)
    fill(log2)
    seg2 = log2._segments[-1]
    p, h = list(seg2.walk(0, seg2.size_bytes))[3]
    assert p < seg2.trusted_from()
    flip(seg2.log_path, p + 100)
    with pytest.raises(StorageDamageError) as e:
        log2.read(0, 1 << 20, own_tail=True)
    assert (e.value.position, e.value.offset) == (p, h.base_offset)
    log.close()
    log2.close()


def test_a_cut_drops_the_trust_past_it_and_the_bytes_written_after_it_are_trusted(tmp_path, crcs):
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, retention_ms=-1)
    log = Log.open(tmp_path, cfg, now_ms=0)
    fill(log, 10)
    seg = log._segments[-1]
    assert seg.trusted_from() == 0
    cut_pos, cut_h = list(seg.walk(0, seg.size_bytes))[4]
    log.truncate_to(cut_h.base_offset)
    assert seg.trusted_from() == 0 and seg.size_bytes == cut_pos  # bytes before the cut: ours
    fill(log, 3, first=50)
    crcs.clear()
    assert len(read_all(log, own_tail=True)) == 7 and crcs == []
    seg._forget_verified_from(0)  # a cut below every append: nothing is trusted
    assert seg.trusted_from() == seg.size_bytes > 0
    log.close()
    # A sealed segment that a truncation makes active again trusts nothing it had.
    log = Log.open(tmp_path / "two", LogConfig(segment_bytes=3000, index_interval_bytes=200,
                                               retention_ms=-1), now_ms=0)
    fill(log)
    first = log._segments[0]
    assert len(log._segments) > 2 and first.trusted_from() == first.size_bytes
    pos, h = list(first.walk(0, first.size_bytes))[-1]
    log.truncate_to(h.base_offset)
    assert log._segments == [first] and first.trusted_from() == first.size_bytes == pos
    crcs.clear()
    read_all(log, own_tail=True)
    assert len(crcs) == len(list(first.walk(0, first.size_bytes))) > 0
    log.close()

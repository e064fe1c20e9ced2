"""One segment: append/index/locate/read, CRC-scan recovery of a torn tail, sealed-index checks."""

import os

import pytest

from partition.batch import BatchBuilder, read_header, stamp
from partition.segment import FileCache, Segment

INTERVAL = 200


def batch(base_offset, n=3, ts=1000, size=40):
    b = BatchBuilder(base_offset=base_offset, partition_leader_epoch=1)
    for i in range(n):
        b.append(bytes(size), key=b"k%d" % i, timestamp_ms=ts + i)
    return b.build()


def fill(tmp_path, count=30):
    seg = Segment.create(tmp_path, 100, max_index_bytes=1 << 16, files=FileCache(8))
    offset = 100
    for i in range(count):
        data = batch(offset, ts=1000 + 10 * i)
        h = read_header(data)
        seg.append(data, [(0, h.size, offset, offset + 3, h.max_timestamp, 1)],
                   index_interval_bytes=INTERVAL, now_ms=0)
        offset += 3
    return seg, offset


def test_append_indexes_sparsely_and_locates_every_offset(tmp_path):
    seg, end = fill(tmp_path)
    assert seg.next_offset == end and 0 < len(seg.index) < 30
    for offset in range(100, end):
        pos, h = seg.locate(offset)
        assert h.base_offset <= offset <= h.last_offset
        assert read_header(os.pread(seg.fd, h.size, pos)).base_offset == h.base_offset
    assert seg.locate(end) is None
    seg.close()


def test_read_at_returns_whole_batches_and_respects_max_offset(tmp_path):
    seg, end = fill(tmp_path)
    pos, h = seg.locate(100)
    one = seg.read_at(pos, h, 1, None)  # smaller than a batch: still one whole batch
    assert len(one) == h.size
    capped = seg.read_at(pos, h, 1 << 20, 109)
    headers = []
    p = 0
    while p < len(capped):
        headers.append(read_header(capped, p))
        p += headers[-1].size
    assert [x.base_offset for x in headers] == [100, 103, 106]
    seg.close()


def test_recover_cuts_torn_tail_and_rebuilds_index(tmp_path):
    seg, end = fill(tmp_path)
    full_index = seg.index.to_bytes()
    size = seg.size_bytes
    seg.close()
    with open(tmp_path / (seg.name + ".log"), "r+b") as f:
        f.truncate(size - 7)
    seg2 = Segment.open_existing(tmp_path, 100, max_index_bytes=1 << 16, files=FileCache(8))
    scan = seg2.recover(index_interval_bytes=INTERVAL)
    assert scan.bytes_dropped == seg2.size_bytes + scan.bytes_dropped - scan.valid_bytes
    assert seg2.next_offset == end - 3 and scan.offsets_lost == 3
    assert os.fstat(seg2.fd).st_size == scan.valid_bytes
    assert full_index.startswith(seg2.index.to_bytes())
    seg2.close()


def test_sealed_index_damage_is_detected_and_rebuilt(tmp_path):
    seg, end = fill(tmp_path)
    seg.seal()
    good_index, good_time = seg.index.to_bytes(), seg.timeindex.to_bytes()
    seg.close()
    again = Segment.open_existing(tmp_path, 100, max_index_bytes=1 << 16, files=FileCache(8))
    assert again.load_indexes(next_base_offset=end, index_interval_bytes=INTERVAL) is False
    assert again.max_timestamp == 1000 + 10 * 29 + 2
    again.close()
    # Last entry shifted by one byte: positions still monotonic but not at a batch header.
    raw = bytearray(good_index)
    raw[-1] += 1
    (tmp_path / (seg.name + ".index")).write_bytes(bytes(raw))
    again = Segment.open_existing(tmp_path, 100, max_index_bytes=1 << 16, files=FileCache(8))
    assert again.load_indexes(next_base_offset=end, index_interval_bytes=INTERVAL) is True
    assert again.index.to_bytes() == good_index and again.timeindex.to_bytes() == good_time
    again.close()


def test_index_bytes_for_matches_incremental_indexing(tmp_path):
    seg, end = fill(tmp_path)
    seg.seal()
    data = os.pread(seg.fd, seg.size_bytes, 0)
    idx, tidx = Segment.index_bytes_for(data, 100, index_interval_bytes=INTERVAL, max_index_bytes=1 << 16)
    assert idx == seg.index.to_bytes() and tidx == seg.timeindex.to_bytes()
    seg.close()


def test_truncate_to_inside_a_batch_drops_the_whole_batch(tmp_path):
    seg, end = fill(tmp_path)
    removed = seg.truncate_to(131, index_interval_bytes=INTERVAL)
    assert removed > 0 and seg.next_offset == 130
    assert seg.locate(129)[1].last_offset == 129
    assert seg.locate(130) is None
    # Max timestamp recomputed from what is left: batch 130 had ts 1100..1102.
    assert seg.max_timestamp == 1000 + 10 * 9 + 2
    seg.close()


def test_stamp_then_recover_rejects_backwards_offsets(tmp_path):
    seg, end = fill(tmp_path, count=3)
    bad = bytearray(batch(0))
    stamp(bad, 0, 101, 1)  # goes back below the previous batch's last offset
    h = read_header(bad)
    seg.append(bytes(bad), [(0, h.size, 109, 112, h.max_timestamp, 1)],
               index_interval_bytes=INTERVAL, now_ms=0)
    scan = seg.recover(index_interval_bytes=INTERVAL)
    assert seg.next_offset == 109 and scan.bytes_dropped == h.size
    seg.close()


@pytest.mark.parametrize("name", ["x.log", "0000000000000000001.log", "00000000000000000001.index"])
def test_parse_segment_name_ignores_other_files(name):
    from partition.segment import parse_segment_name
    assert parse_segment_name(name) is None


def test_pwrite_all_writes_every_byte_in_calls_of_at_most_the_chunk(tmp_path, monkeypatch):
    import os

    from partition import file_io as segment

    calls = []
    real = os.pwritev

    def counting_pwritev(fd, buffers, pos):
        calls.append(sum(len(b) for b in buffers))
        return real(fd, buffers, pos)

    monkeypatch.setattr(segment, "WRITE_CHUNK_BYTES", 1000)
    monkeypatch.setattr(segment.os, "pwritev", counting_pwritev)
    one = bytes(range(256)) * 17  # 4,352 bytes: five calls
    parts = [b"a" * 999, b"", bytearray(b"b" * 2), memoryview(b"c" * 2500), b"d"]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        segment.pwrite_all(fd, one, 10)
        assert calls == [1000, 1000, 1000, 1000, 352]
        calls.clear()
        segment.pwrite_all(fd, parts, 10 + len(one))
        assert calls == [1000, 1000, 1000, 502]
        assert os.pread(fd, 10_000, 0) == bytes(10) + one + b"".join(parts)
    finally:
        os.close(fd)


def test_pwrite_all_writes_a_small_append_in_one_call_and_finishes_a_short_write(tmp_path, monkeypatch):
    """A produce's append (its stamped header and the rest of its batch) is one pwritev; a
    call that writes less (the kernel may) is finished by the chunked loop from where it stopped."""
    import os

    from partition import file_io

    calls = []
    real = os.pwritev

    def short_pwritev(fd, buffers, pos):
        size = sum(len(memoryview(b).cast("B")) for b in buffers)
        calls.append(size)
        if len(calls) == 1 and size > 7:  # the first call writes 7 bytes only
            return real(fd, [memoryview(b"".join(bytes(b) for b in buffers))[:7]], pos)
        return real(fd, buffers, pos)

    monkeypatch.setattr(file_io.os, "pwritev", short_pwritev)
    head, rest = bytearray(b"h" * 61), memoryview(b"r" * 300).cast("B")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        file_io.pwrite_all(fd, [head, rest], 0)
        assert calls == [361, 354]  # one call, then the rest after the 7 bytes it wrote
        calls.clear()
        file_io.pwrite_all(fd, [b"x" * 5, b"y" * 2], 361)  # 7 bytes: written whole at once
        assert calls == [7]
        assert os.pread(fd, 1_000, 0) == bytes(head) + bytes(rest) + b"xxxxxyy"
    finally:
        os.close(fd)

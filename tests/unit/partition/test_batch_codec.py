"""RecordBatch v2 codec: header layout, CRC, stamping, builder, round trips, codec glue limits."""

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import partition.compression as compression
from partition.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    BatchBuilder,
    Compression,
    Header,
    Record,
    TimestampType,
    control_batch,
    decode_batch,
    decode_batches,
    iter_headers,
    read_header,
    scan_valid_prefix,
    stamp,
    verify_crc,
)
from partition.errors import CompressionUnavailableError, CorruptRecordError
from raftlog.base.errors import MessageTooLargeError

ALL_CODECS = list(Compression)


def reseal(batch: bytearray) -> bytes:
    """Fix batchLength and CRC after a test changed the bytes on purpose."""
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


def with_payload(batch: bytes, payload: bytes) -> bytes:
    return reseal(bytearray(batch[:HEADER_BYTES] + payload))


def sample(compression=Compression.NONE, n=3, **kw) -> bytes:
    b = BatchBuilder(compression=compression, **kw)
    for i in range(n):
        b.append(b"value-%d" % i, key=b"k%d" % i, headers=[("h", b"x")], timestamp_ms=1000 + i)
    return b.build()


def test_header_fields_at_kafka_offsets():
    data = BatchBuilder(
        producer_id=77, producer_epoch=3, base_sequence=10, is_transactional=True,
        base_offset=500, partition_leader_epoch=9,
    )
    data.append(b"a", timestamp_ms=2000)
    data.append(b"b", timestamp_ms=1990)
    data.append(b"c", timestamp_ms=2005)
    raw = data.build()
    h = read_header(raw)
    assert struct.unpack_from(">q", raw, 0)[0] == 500 == h.base_offset
    assert struct.unpack_from(">i", raw, 8)[0] == len(raw) - 12 == h.batch_length
    assert struct.unpack_from(">i", raw, 12)[0] == 9 == h.partition_leader_epoch
    assert raw[16] == MAGIC == h.magic
    assert struct.unpack_from(">I", raw, 17)[0] == google_crc32c.value(raw[21:]) == h.crc
    assert struct.unpack_from(">hiqqqhii", raw, 21) == (
        0x10, 2, 2000, 2005, 77, 3, 10, 3
    )
    assert (h.size, h.last_offset, h.next_offset, h.last_sequence) == (len(raw), 502, 503, 12)
    assert h.compression is Compression.NONE
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.is_transactional and not h.is_control


@pytest.mark.parametrize(
    "base_sequence, last_offset_delta, expected",
    [(-1, 5, -1), (0, 0, 0), (10, 4, 14), (2**31 - 1, 1, 0), (2**31 - 3, 5, 2)],
)
def test_last_sequence_wraps_like_kafka(base_sequence, last_offset_delta, expected):
    h = Header(0, 49, -1, 2, 0, 0, last_offset_delta, 0, 0, 1, 0, base_sequence, 1)
    assert h.last_sequence == expected


def test_attributes_bits():
    raw = BatchBuilder(
        compression=Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME,
        is_control=True,
    )
    raw.append(b"x", key=b"\0\0\0\1", timestamp_ms=5)
    h = read_header(raw.build())
    assert h.attributes == 1 | 0x08 | 0x20
    assert h.compression is Compression.GZIP
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.is_control and not h.is_transactional


def test_log_append_time_gives_every_record_the_max_timestamp():
    b = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    b.append(b"x", timestamp_ms=10)
    b.append(b"y", timestamp_ms=30)
    h, records = decode_batch(b.build())
    assert h.max_timestamp == 30
    assert [r.timestamp for r in records] == [30, 30]


def test_stamp_rewrites_offset_and_epoch_and_keeps_crc():
    raw = sample()
    buf = bytearray(b"junk" + raw)
    stamp(buf, 4, 123456789, 42)
    h = verify_crc(buf, 4)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (123456789, 42, read_header(raw).crc)
    _, records = decode_batch(buf, 4)
    assert [r.offset for r in records] == [123456789, 123456790, 123456791]
    mv = memoryview(bytearray(raw))
    stamp(mv, 0, 7, 8)
    assert read_header(mv).base_offset == 7
    with pytest.raises(CorruptRecordError):
        stamp(bytearray(b"\0" * 70), 0, 1, 1)


def test_iter_headers_and_scan_walk_a_concatenation():
    parts = [sample(n=1), sample(Compression.GZIP, n=4, base_offset=1), sample(n=2, base_offset=5)]
    log = b"".join(parts)
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    got = list(iter_headers(log))
    assert [p for p, _ in got] == positions
    assert [h.record_count for _, h in got] == [1, 4, 2]
    assert scan_valid_prefix(log) == (len(log), got)
    assert list(iter_headers(bytearray(log), positions[1])) == got[1:]
    assert [len(r) for _, r in decode_batches(log)] == [1, 4, 2]


def test_iter_headers_verify_flag_controls_the_crc_check():
    raw = bytearray(sample())
    raw[-1] ^= 0xFF
    assert len(list(iter_headers(raw, verify=False))) == 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_headers(raw))


def test_append_reports_bytes_and_size_tracks_them():
    b = BatchBuilder()
    assert b.size_bytes == HEADER_BYTES and b.record_count == 0
    total = HEADER_BYTES
    for i in range(200):
        total += b.append(b"v" * (i * 7), key=None if i % 3 else b"k", timestamp_ms=i * 1000)
        assert b.size_bytes == total
    assert b.record_count == 200
    raw = b.build()
    assert len(raw) == total
    assert b.build() == raw  # building twice gives the same bytes


def test_append_needs_a_timestamp_and_build_needs_a_record():
    b = BatchBuilder()
    with pytest.raises(TypeError):
        b.append(b"x")  # no clock in the core
    with pytest.raises(ValueError):
        b.build()
    with pytest.raises(ValueError):
        b.append(b"x", timestamp_ms=2**63)
    b.append(b"x", timestamp_ms=-(2**63) + 5)
    for bad in (-(2**63) - 1, 2**63, -(2**80)):
        with pytest.raises(ValueError):
            b.append(b"y", timestamp_ms=bad)
    with pytest.raises((TypeError, AttributeError)):
        b.append(b"z", headers=[(b"not-str", b"v")], timestamp_ms=-(2**63) + 9)
    assert b.record_count == 1 and b.size_bytes == len(b.build())  # refusals leave no trace
    assert read_header(b.build()).max_timestamp == -(2**63) + 5


def test_appended_bytearray_is_copied():
    value = bytearray(b"abc")
    b = BatchBuilder()
    b.append(value, key=memoryview(b"key"), timestamp_ms=1)
    value[:] = b"zzzzzz"
    _, [r] = decode_batch(b.build())
    assert (r.key, r.value) == (b"key", b"abc")
    assert type(r.key) is bytes and type(r.value) is bytes


def test_control_batch_is_kafka_leader_change_shape():
    raw = control_batch(2, timestamp_ms=99, partition_leader_epoch=4, base_offset=10, value=b"v")
    h, [r] = decode_batch(raw)
    assert h.is_control and h.partition_leader_epoch == 4 and h.record_count == 1
    assert h.producer_id == -1 and h.base_sequence == -1
    assert struct.unpack(">hh", r.key) == (0, 2)
    assert (r.offset, r.timestamp, r.value) == (10, 99, b"v")


def test_large_records_and_long_varints_round_trip():
    b = BatchBuilder()
    big = bytes(range(256)) * 1000  # 256000 bytes: 3-byte length varints
    b.append(big, key=b"k" * 20000, timestamp_ms=-(2**62))
    b.append(None, timestamp_ms=2**63 - 1 - 2**62)  # delta 2**63 - 1: a 10-byte varlong
    with pytest.raises(ValueError):
        b.append(None, timestamp_ms=2**63 - 2**62)  # delta past int64
    for i in range(20000):  # offset deltas past the 2-byte varint table
        b.append(b"", timestamp_ms=0)
    h, records = decode_batch(b.build())
    assert records[0].value == big and records[0].key == b"k" * 20000
    assert records[0].timestamp == -(2**62)
    assert records[1].timestamp == 2**63 - 1 - 2**62 and records[1].value is None
    assert records[-1].offset == h.last_offset == 20001


headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),  # value
    st.one_of(st.none(), st.binary(max_size=20)),  # key
    headers_st,
    st.integers(-(2**40), 2**40),  # timestamp: deltas may be negative and large
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(0, 2**62),
    producer=st.tuples(
        st.integers(-1, 2**62), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
)
def test_round_trip(records, codec, base_offset, producer):
    b = BatchBuilder(
        compression=codec, base_offset=base_offset, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=producer[2], partition_leader_epoch=3,
    )
    for value, key, headers, ts in records:
        b.append(value, key, headers, timestamp_ms=ts)
    raw = b.build()
    h, got = decode_batch(raw)
    assert h.compression is codec and h.record_count == len(records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert h.base_timestamp == records[0][3]
    assert h.max_timestamp == max(r[3] for r in records)
    assert got == [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (value, key, headers, ts) in enumerate(records)
    ]


# ---- codec glue -------------------------------------------------------------------------


def test_default_limit_is_64_mib():
    assert compression.DEFAULT_MAX_DECOMPRESSED_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_decompression_over_the_limit_is_an_error(codec):
    b = BatchBuilder(compression=codec)
    b.append(b"\0" * 300_000, timestamp_ms=0)
    raw = b.build()
    assert len(raw) < 20_000  # it really is a small input
    assert decode_batch(raw, max_decompressed_bytes=400_000)[1][0].value == b"\0" * 300_000
    with pytest.raises(MessageTooLargeError):
        decode_batch(raw, max_decompressed_bytes=100_000)


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_zip_bomb_at_the_default_limit(codec):
    bomb = compression.compress(codec, bytes(65 * 1024 * 1024))
    raw = with_payload(sample(codec, n=1), bomb)
    with pytest.raises(MessageTooLargeError):
        decode_batch(raw)


def test_snappy_written_xerial_and_raw_accepted():
    import cramjam

    raw = sample(Compression.SNAPPY, n=5)
    assert raw[HEADER_BYTES:].startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    records = decode_batch(raw)[1]
    plain = sample(n=5)[HEADER_BYTES:]
    raw_snappy = bytes(cramjam.snappy.compress_raw(plain))
    assert decode_batch(with_payload(raw, raw_snappy))[1] == records


def test_lz4_frame_is_kafka_style_and_foreign_frames_are_read():
    import cramjam

    raw = sample(Compression.LZ4, n=5)
    frame = raw[HEADER_BYTES:]
    # independent blocks, no checksums, 64 KiB blocks: what Kafka's own LZ4 stream writes
    assert frame[:6] == b"\x04\x22\x4d\x18\x60\x40"
    plain = sample(n=5)[HEADER_BYTES:]
    assert bytes(cramjam.lz4.decompress(frame)) == plain  # its header checksum is right
    foreign = bytes(cramjam.lz4.compress(plain))  # linked blocks and checksums
    assert decode_batch(with_payload(raw, foreign))[1] == decode_batch(raw)[1]


def test_zstd_reads_streamed_and_multi_frame_input():
    import cramjam

    plain = sample(n=5)[HEADER_BYTES:]
    c = cramjam.zstd.Compressor()
    c.compress(plain[:30])
    streamed = bytes(c.finish())
    two = bytes(cramjam.zstd.compress(plain[:30])) + bytes(cramjam.zstd.compress(plain[30:]))
    base = sample(Compression.ZSTD, n=5)
    for payload in (streamed + bytes(cramjam.zstd.compress(plain[30:])), two):
        assert decode_batch(with_payload(base, payload))[1] == decode_batch(base)[1]


def test_gzip_reads_concatenated_members():
    import gzip

    plain = sample(n=5)[HEADER_BYTES:]
    payload = gzip.compress(plain[:10]) + gzip.compress(plain[10:])
    base = sample(Compression.GZIP, n=5)
    assert decode_batch(with_payload(base, payload))[1] == decode_batch(base)[1]


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_missing_cramjam_names_the_extra(monkeypatch, codec):
    raw = sample(codec)
    monkeypatch.setattr(compression, "cramjam", None)
    assert not compression.available(codec) and compression.available(Compression.GZIP)
    with pytest.raises(CompressionUnavailableError, match=r"pip install 'raftlog\[compression\]'"):
        BatchBuilder(compression=codec)  # at construction, before any record is encoded
    with pytest.raises(CompressionUnavailableError, match=r"raftlog\[compression\]"):
        compression.compress(codec, b"x")
    with pytest.raises(CompressionUnavailableError):
        decode_batch(raw)
    assert verify_crc(raw).compression is codec  # header work needs no codec
    assert decode_batch(sample(Compression.GZIP))[1]


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(ALL_CODECS[1:]),
    data=st.data(),
)
def test_decompress_of_damaged_streams_raises_only_our_errors(codec, data):
    good = compression.compress(codec, sample(n=8)[HEADER_BYTES:] * 3)
    mode = data.draw(st.sampled_from(["flip", "cut", "random"]))
    if mode == "flip":
        i = data.draw(st.integers(0, len(good) - 1))
        bad = bytearray(good)
        bad[i] ^= 1 << data.draw(st.integers(0, 7))
        bad = bytes(bad)
    elif mode == "cut":
        bad = good[: data.draw(st.integers(0, len(good) - 1))]
    else:
        bad = data.draw(st.binary(max_size=64))
    try:
        out = compression.decompress(codec, bad, max_decompressed_bytes=1 << 20)
    except (CorruptRecordError, MessageTooLargeError):
        return
    assert len(out) <= 1 << 20

"""Damaged batches (cut, flipped, lying length or count, bad magic) raise CorruptRecordError."""

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partition.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD,
    BatchBuilder,
    Compression,
    decode_batch,
    decode_batches,
    iter_headers,
    read_header,
    scan_valid_prefix,
    verify_crc,
)
from partition.errors import CorruptRecordError


def reseal(batch: bytearray) -> bytes:
    """Make length and CRC agree with the bytes again, so only the deeper checks can object."""
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


def build(n=4, codec=Compression.NONE, base_offset=0) -> bytes:
    b = BatchBuilder(compression=codec, base_offset=base_offset, partition_leader_epoch=1)
    for i in range(n):
        b.append(b"value-%d" % i * (i + 1), key=b"key-%d" % i, headers=[("h%d" % i, b"x")],
                 timestamp_ms=10_000 + i)
    return b.build()


GOOD = build()
GOOD_GZIP = build(codec=Compression.GZIP)


@pytest.mark.parametrize("raw", [GOOD, GOOD_GZIP], ids=["none", "gzip"])
def test_every_cut_is_an_error_everywhere(raw):
    for cut in range(len(raw)):
        part = raw[:cut]
        for call in (read_header, verify_crc, decode_batch, lambda b: list(iter_headers(b)),
                     lambda b: list(decode_batches(b))):
            if cut == 0 and call not in (read_header, verify_crc, decode_batch):
                assert list(call(part)) == []  # nothing is not a bad batch
                continue
            with pytest.raises(CorruptRecordError):
                call(part)
        assert scan_valid_prefix(part) == (0, [])


def test_scan_valid_prefix_keeps_exactly_the_intact_batches():
    batches = [build(1), build(3, Compression.GZIP, 1), build(2, base_offset=4)]
    log = b"".join(batches)
    ends = [sum(len(b) for b in batches[: i + 1]) for i in range(3)]
    for cut in range(len(log) + 1):
        end, found = scan_valid_prefix(log[:cut])
        intact = [e for e in ends if e <= cut]
        assert end == (intact[-1] if intact else 0)
        assert len(found) == len(intact)
    with pytest.raises(CorruptRecordError):
        list(iter_headers(log[:-1]))
    assert [len(r) for _, r in decode_batches(log)] == [1, 3, 2]


def test_scan_stops_at_a_bad_crc_in_the_middle():
    a, b, c = build(1), bytearray(build(2, base_offset=1)), build(1, base_offset=3)
    b[-3] ^= 0x10
    end, found = scan_valid_prefix(a + bytes(b) + c)
    assert end == len(a) and len(found) == 1


@settings(max_examples=300, deadline=None)
@given(raw=st.sampled_from([GOOD, GOOD_GZIP]), data=st.data())
def test_bit_flip_is_detected_unless_in_stamped_fields(raw, data):
    i = data.draw(st.integers(0, len(raw) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(raw)
    bad[i] ^= 1 << bit
    if i < 8 or 12 <= i < 16:  # baseOffset, partitionLeaderEpoch: outside the CRC on purpose
        h, records = decode_batch(bad)
        assert [r.value for r in records] == [r.value for r in decode_batch(raw)[1]]
        return
    with pytest.raises(CorruptRecordError):
        decode_batch(bad)
    assert scan_valid_prefix(bytes(bad) + GOOD) == (0, [])


def test_wrong_magic():
    for magic in (0, 1, 3, 255):
        bad = bytearray(GOOD)
        bad[16] = magic
        with pytest.raises(CorruptRecordError, match="magic"):
            read_header(bad)
        with pytest.raises(CorruptRecordError, match="magic"):
            read_header(bad[:20])


@pytest.mark.parametrize("length", [-1, 0, 48, len(GOOD) - 11, 2**31 - 1])
def test_length_that_lies_long_or_short_of_the_header(length):
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, 8, length)
    with pytest.raises(CorruptRecordError, match="length"):
        read_header(bad)
    assert scan_valid_prefix(bad) == (0, [])


def test_length_that_lies_short_inside_the_buffer():
    # A shorter batchLength with a matching CRC: the records no longer fit.
    bad = bytearray(GOOD[:-5])
    with pytest.raises(CorruptRecordError):
        decode_batch(reseal(bad))


@pytest.mark.parametrize("delta", [-4, -1, 1, 100])
def test_record_count_disagreeing_with_the_records(delta):
    bad = bytearray(GOOD)
    count = read_header(GOOD).record_count + delta
    struct.pack_into(">i", bad, 57, count)
    bad = reseal(bad)
    with pytest.raises(CorruptRecordError, match="record|bytes left|negative"):
        decode_batch(bad)


def test_trailing_garbage_inside_the_batch():
    for codec in (Compression.NONE, Compression.GZIP):
        raw = build(codec=codec)
        if codec is Compression.NONE:
            bad = reseal(bytearray(raw + b"\x00\x01"))
        else:
            import partition.compression as compression

            plain = build()[HEADER_BYTES:] + b"\x00"
            bad = reseal(bytearray(raw[:HEADER_BYTES] + compression.compress(codec, plain)))
        with pytest.raises(CorruptRecordError, match="left"):
            decode_batch(bad)


def test_offset_delta_outside_last_offset_delta():
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, 23, 1)  # lastOffsetDelta 1 but records carry deltas 0..3
    with pytest.raises(CorruptRecordError, match="offset delta"):
        decode_batch(reseal(bad))
    struct.pack_into(">i", bad, 23, -1)
    with pytest.raises(CorruptRecordError, match="negative last offset delta"):
        read_header(reseal(bad))


def test_unknown_codec_in_attributes():
    bad = bytearray(GOOD)
    struct.pack_into(">h", bad, 21, 5)
    with pytest.raises(CorruptRecordError, match="codec"):
        read_header(reseal(bad))


def _one_record_batch(body: bytes) -> bytes:
    # A batch of one record whose body (after the length varint) is given by the test.
    raw = bytearray(build(1))
    zz = len(body) << 1
    length = bytes([zz]) if zz < 0x80 else bytes([(zz & 0x7F) | 0x80, zz >> 7])
    return reseal(bytearray(raw[:HEADER_BYTES] + length + body))


@pytest.mark.parametrize(
    "body, why",
    [
        (b"\x00\x00\x00\x03", "record"),  # key length -2
        (b"\x00\x00\x00\x01\x14ab\x00", "value length"),  # value says 10, has 2
        (b"\x00\x00\x00\x01\x01\x02", "header count"),  # 1 header, no bytes for it
        (b"\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01", "UTF-8"),  # header key not utf-8
        (b"\x00\x00\x00\x01\x01\x00\x00", "disagrees"),  # a byte past the fields
        (b"\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00", "varint"),  # 12-byte varlong
    ],
)
def test_malformed_record_fields(body, why):
    with pytest.raises(CorruptRecordError, match=why):
        decode_batch(_one_record_batch(body))


def test_a_well_formed_handmade_record_decodes():
    # Same helper, valid body: proves the malformed cases above fail for their stated reason.
    _, [r] = decode_batch(_one_record_batch(b"\x00\x00\x00\x01\x04ab\x02\x02k\x01"))
    assert (r.key, r.value, r.headers) == (None, b"ab", (("k", None),))

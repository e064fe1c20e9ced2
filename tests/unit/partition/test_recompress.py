"""The leader's recompression (compression.type, issue 41): a batch in another codec comes out in
the topic's, with every header field but the codec bits, length and CRC unchanged, a valid CRC,
and the same records; a batch already in the codec, and records needing nothing, are kept."""

import pytest

from partition.batch import BatchBuilder, Compression, decode_batches, read_header, verify_crc
from partition.recompress import needs_recompression, recompress

pytestmark = pytest.mark.unit

LIMIT = 1 << 24


def _batch(codec: Compression, n: int = 20, base_sequence: int = 7) -> bytes:
    b = BatchBuilder(compression=codec, producer_id=42, producer_epoch=3, base_sequence=base_sequence,
                     partition_leader_epoch=5)
    for i in range(n):
        b.append(key=f"k{i}".encode(), value=b"v" * (50 + i), timestamp_ms=1_700_000_000_000 + i,
                 headers=[("h", b"x")])
    return b.build()


@pytest.mark.parametrize("source", list(Compression))
@pytest.mark.parametrize("target", list(Compression))
def test_every_codec_into_every_codec_keeps_header_and_records(source: Compression, target: Compression) -> None:
    records = _batch(source) + _batch(Compression.NONE, 3, base_sequence=27)
    out = recompress(records, target, max_decompressed_bytes=LIMIT)
    before = [read_header(records, 0)]
    after = [verify_crc(out, 0)]
    before.append(read_header(records, before[0].size))
    after.append(verify_crc(out, after[0].size))
    assert len(out) == after[0].size + after[1].size
    for b, a in zip(before, after):
        assert a.compression is target
        for name in ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp",
                     "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count"):
            assert getattr(a, name) == getattr(b, name), name
        assert a.attributes & ~0x07 == b.attributes & ~0x07
    def rows(data: bytes) -> list:
        return [(r.offset, r.key, r.value, r.headers) for _, batch in decode_batches(data) for r in batch]

    assert rows(out) == rows(records)
    assert not needs_recompression(out, target)


def test_records_already_in_the_codec_are_returned_as_they_are() -> None:
    records = _batch(Compression.GZIP)
    assert recompress(records, Compression.GZIP, max_decompressed_bytes=LIMIT) is records

"""The stranger's lying batches lie only where they should: a valid CRC (a node cannot refuse them for damage), a header that disagrees with the records it holds."""

from __future__ import annotations

import pytest

from jepsen_style_tests.stranger import LYING_KINDS, _varint, lying_batch
from partition.batch import HEADER_BYTES, read_header, verify_crc


def _offset_deltas(batch: bytes) -> list[int]:
    """The offset delta of each record, read by hand (uncompressed v2 records)."""
    pos, out = HEADER_BYTES, []
    while pos < len(batch):
        length, used = _varint(batch, pos)
        body = pos + used
        _ts_delta, ts_used = _varint(batch, body + 1)  # after the attributes byte
        delta, _ = _varint(batch, body + 1 + ts_used)
        out.append(delta)
        pos = body + length
    return out


def test_the_records_count_lie():
    batch = lying_batch("records-count")
    h = verify_crc(batch)  # raises on a bad CRC
    assert (h.record_count, h.last_offset_delta) == ((1 << 31) - 1, (1 << 31) - 2)
    assert _offset_deltas(batch) == [0]  # holds one record


def test_the_offset_deltas_lie():
    batch = lying_batch("offset-deltas")
    h = verify_crc(batch)
    assert (h.record_count, h.last_offset_delta) == (2, 1)
    assert _offset_deltas(batch) == [0, 5]


def test_every_kind_is_built_and_an_unknown_one_is_refused():
    assert all(read_header(lying_batch(k)).magic == 2 for k in LYING_KINDS)
    with pytest.raises(ValueError, match="unknown lying batch"):
        lying_batch("polite")

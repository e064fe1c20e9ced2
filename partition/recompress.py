"""The leader's recompression of what producers append, as Kafka's LogValidator does when a
topic's `compression.type` is a codec (not `producer`) other than a batch's: the records section
is decompressed and compressed again with the topic's codec before the append (pure).

    records = recompress(records, Compression.ZSTD, max_decompressed_bytes=...)

Every header field is kept (base offset, partition leader epoch, the other attribute bits,
last offset delta, timestamps, producer id, epoch and base sequence, record count), so an
idempotent producer's sequence checks and its offsets are what they would have been; only
the codec bits, the batch length and the CRC (computed once, over the new bytes) change.
A batch already in the codec is copied as it is. The input has passed
partition/validator.py `validate_client_records`, so its headers and sections are sound;
decompression is still bounded by `max_decompressed_bytes` (MessageTooLargeError past it).
"""

from __future__ import annotations

from crc32c import crc32c

from partition.batch import COMPRESSION_MASK, CRC_START, HEADER, HEADER_BYTES, LOG_OVERHEAD, read_header
from partition.compression import Compression, compress, decompress

__all__ = ["recompress", "needs_recompression"]


def needs_recompression(records: bytes | bytearray, codec: Compression) -> bool:
    """Whether any batch of `records` is in another codec than `codec`."""
    pos = 0
    while pos < len(records):
        h = read_header(records, pos)
        if h.compression is not codec:
            return True
        pos += h.size
    return False


def recompress(records: bytes | bytearray, codec: Compression, *, max_decompressed_bytes: int) -> bytes | bytearray:
    """`records` with every batch's records section in `codec` (a copy, or `records` itself
    when nothing changes). Raises MessageTooLargeError, CorruptRecordError (a section that
    does not decompress), CompressionUnavailableError (a codec this node lacks)."""
    if not needs_recompression(records, codec):
        return records
    out = bytearray()
    pos = 0
    while pos < len(records):
        h = read_header(records, pos)
        end = pos + h.size
        if h.compression is codec:
            out += records[pos:end]
            pos = end
            continue
        section = memoryview(records)[pos + HEADER_BYTES:end]
        plain = section if h.compression is Compression.NONE else decompress(
            h.compression, section, max_decompressed_bytes=max_decompressed_bytes)
        packed = plain if codec is Compression.NONE else compress(codec, plain)
        start = len(out)
        out += HEADER.pack(h.base_offset, HEADER_BYTES - LOG_OVERHEAD + len(packed), h.partition_leader_epoch,
                           h.magic, 0, (h.attributes & ~COMPRESSION_MASK) | int(codec), h.last_offset_delta,
                           h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
                           h.base_sequence, h.record_count)
        out += packed
        with memoryview(out) as view:  # released before `out` grows again
            crc = crc32c(view[start + CRC_START:])
        out[start + 17:start + CRC_START] = crc.to_bytes(4, "big")
        pos = end
    return out

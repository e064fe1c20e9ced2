"""Codec glue for RecordBatch v2: the records section of a batch is one compressed stream.

Formats, as Kafka's Java client writes them (so Java, librdkafka and kafka-python read ours):
* GZIP: a gzip stream (stdlib zlib). Reading accepts concatenated gzip members.
* SNAPPY: written xerial-framed (``\\x82SNAPPY\\0``, version 1, compat 1, then int32-length
  raw blocks of at most 32 KiB input) as Java's SnappyOutputStream does; read raw or xerial.
* LZ4: an LZ4 *frame* with independent 64 KiB blocks and no checksums, as Kafka's
  KafkaLZ4BlockOutputStream writes it (Kafka rejects linked blocks); any valid frame is read.
* ZSTD: a zstd frame; any sequence of frames (and skippable frames) is read.
SNAPPY, LZ4 and ZSTD need `cramjam` (the `compression` extra); without it they raise
CompressionUnavailableError. GZIP and NONE need only the standard library.

Invariants: decompression never produces more than `max_decompressed_bytes` (checked before
or while inflating, from the formats' own length fields, so a zip bomb costs at most about the
limit in memory) and raises MessageTooLargeError beyond it; malformed input raises
CorruptRecordError, never a codec library's own exception. Integrity is the batch CRC's job;
the LZ4 and zstd checksums are checked only where cramjam does it natively.
"""

from __future__ import annotations

import enum
import struct
import zlib

from partition.errors import CompressionUnavailableError, CorruptRecordError
from raftlog.base.errors import MessageTooLargeError

try:
    import cramjam
except ImportError:  # the `compression` extra is optional
    cramjam = None

__all__ = [
    "Compression",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "available",
    "compress",
    "decompress",
]

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
_EXTRA_HINT = "pip install 'raftlog[compression]'"


class Compression(enum.IntEnum):
    """The codec id in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def available(codec: int) -> bool:
    """True if this process can both compress and decompress with `codec`."""
    codec = Compression(codec)
    return codec <= Compression.GZIP or cramjam is not None


def _need_cramjam(codec: Compression) -> None:
    if cramjam is None:
        raise CompressionUnavailableError(
            f"{codec.name} compression needs cramjam: {_EXTRA_HINT}"
        )


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a records section with `codec` in the format Kafka's Java client writes.

    Raises CompressionUnavailableError for SNAPPY/LZ4/ZSTD without cramjam, ValueError for an
    unknown codec id.
    """
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        # wbits 31 = gzip wrapper; level 6 is Java's Deflater default. mtime stays 0.
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    _need_cramjam(codec)
    if codec is Compression.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec is Compression.LZ4:
        return _lz4_frame_compress(data)
    return bytes(cramjam.zstd.compress(bytes(data), level=3))


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes | bytearray:
    """Inflate a records section; returns the raw record bytes.

    Raises CorruptRecordError on malformed input, MessageTooLargeError if the output would
    exceed `max_decompressed_bytes`, CompressionUnavailableError if cramjam is missing.
    """
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return _gzip_decompress(data, max_decompressed_bytes)
    _need_cramjam(codec)
    data = bytes(data)
    try:
        if codec is Compression.SNAPPY:
            return _snappy_decompress(data, max_decompressed_bytes)
        if codec is Compression.LZ4:
            bound = _lz4_frame_bound(data)
            return _bounded(cramjam.lz4.decompress_into, data, bound, max_decompressed_bytes, "lz4")
        bound = _zstd_bound(data)
        return _bounded(cramjam.zstd.decompress_into, data, bound, max_decompressed_bytes, "zstd")
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"{codec.name} stream does not decompress: {e}") from e


def _too_large(what: str, size: int, limit: int) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"{what} decompresses to {size}+ bytes, over max_decompressed_bytes={limit}"
    )


def _bounded(into, data: bytes, bound: int, limit: int, what: str) -> bytearray:
    # `bound` is the most the format allows this input to produce; the output buffer is never
    # larger than the limit (+1, so that overflowing it proves the stream too large).
    if bound <= limit:
        out = bytearray(bound)
        n = into(data, out)
        del out[n:]
        return out
    out = bytearray(limit + 1)
    try:
        n = into(data, out)
    except cramjam.DecompressionError as e:
        # The stream may be valid but bigger than the buffer, or invalid: an error either way.
        raise _too_large(what, limit + 1, limit) from e
    if n > limit:
        raise _too_large(what, n, limit)
    del out[n:]
    return out


# ---------------------------------------------------------------------------------- gzip

def _gzip_decompress(data, limit: int) -> bytearray:
    out = bytearray()
    rest = bytes(data)
    try:
        while True:
            d = zlib.decompressobj(31)
            out += d.decompress(rest, limit - len(out) + 1)
            if len(out) > limit:
                raise _too_large("gzip stream", len(out), limit)
            if not d.eof:
                raise CorruptRecordError("gzip stream is truncated")
            rest = d.unused_data
            if not rest:
                return out
    except zlib.error as e:
        raise CorruptRecordError(f"gzip stream does not decompress: {e}") from e


# -------------------------------------------------------------------------------- snappy

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024  # SnappyOutputStream's default block size
_BE_INT32 = struct.Struct(">i")


def _snappy_xerial_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[i : i + _XERIAL_BLOCK_BYTES])))
        parts.append(_BE_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes, budget: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)
    if size > budget:
        raise MessageTooLargeError(f"snappy block of {size} bytes is over the remaining limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not (len(data) >= 16 and data.startswith(_XERIAL_MAGIC)):
        try:
            return _snappy_raw(data, limit)
        except MessageTooLargeError as e:
            raise _too_large("snappy stream", limit + 1, limit) from e
    parts = []
    total = 0
    pos = 16  # magic 8, version int32, compat int32 (values ignored, as every reader does)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy: truncated block length")
        (n,) = _BE_INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError(f"xerial snappy: block length {n} runs past the end")
        block = _snappy_raw(data[pos : pos + n], limit - total)
        total += len(block)
        parts.append(block)
        pos += n
    return b"".join(parts)


# ----------------------------------------------------------------------------------- lz4

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LE_UINT32 = struct.Struct("<I")
_M32 = 0xFFFFFFFF


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes: only the LZ4 frame-descriptor checksum needs it."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    h = (seed + p5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (h + _LE_UINT32.unpack_from(data, i)[0] * p3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * p4 & _M32
        i += 4
    while i < len(data):
        h = (h + data[i] * p5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * p1 & _M32
        i += 1
    h ^= h >> 15
    h = h * p2 & _M32
    h ^= h >> 13
    h = h * p3 & _M32
    h ^= h >> 16
    return h


# FLG: version 01, independent blocks, no checksums, no content size; BD: 64 KiB blocks.
_LZ4_DESCRIPTOR = bytes([0x60, 0x40])
_LZ4_FRAME_HEADER = (
    _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes([(_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF])
)
_LZ4_END_MARK = b"\x00\x00\x00\x00"


def _lz4_frame_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_LZ4_FRAME_HEADER]
    for i in range(0, len(view), _LZ4_BLOCK_BYTES):
        chunk = bytes(view[i : i + _LZ4_BLOCK_BYTES])
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store it, high bit set
            parts.append(_LE_UINT32.pack(len(chunk) | 0x80000000))
            parts.append(chunk)
        else:
            parts.append(_LE_UINT32.pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_frame_bound(data: bytes) -> int:
    """Most bytes this LZ4 frame can inflate to, from its block sizes; CorruptRecordError if
    the framing is broken (the content itself is left to the decoder)."""
    if len(data) < 7 or not data.startswith(_LZ4_MAGIC):
        raise CorruptRecordError("lz4: not an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4: frame version {flg >> 6}")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
    if block_max is None:
        raise CorruptRecordError(f"lz4: bad block size id in BD {bd:#x}")
    block_checksum = bool(flg & 0x10)
    content_size = bool(flg & 0x08)
    content_checksum = bool(flg & 0x04)
    pos = 6 + (8 if content_size else 0) + (4 if flg & 0x01 else 0) + 1
    bound = 0
    while True:
        if pos + 4 > len(data):
            raise CorruptRecordError("lz4: truncated frame")
        (word,) = _LE_UINT32.unpack_from(data, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if size > block_max:
            raise CorruptRecordError(f"lz4: block of {size} bytes over the frame's {block_max}")
        bound += size if word & 0x80000000 else block_max
        pos += size + (4 if block_checksum else 0)
    pos += 4 if content_checksum else 0
    if pos != len(data):
        raise CorruptRecordError(f"lz4: {len(data) - pos} bytes after the frame")
    return bound


# ---------------------------------------------------------------------------------- zstd

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024


def _zstd_bound(data: bytes) -> int:
    """Most bytes these zstd frames can inflate to, from the block headers; CorruptRecordError
    if the framing is broken."""
    pos = 0
    bound = 0
    if not data:
        raise CorruptRecordError("zstd: empty stream")
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("zstd: truncated frame magic")
        (magic,) = _LE_UINT32.unpack_from(data, pos)
        pos += 4
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 4 > len(data):
                raise CorruptRecordError("zstd: truncated skippable frame")
            pos += 4 + _LE_UINT32.unpack_from(data, pos)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd: bad frame magic {magic:#010x}")
        if pos >= len(data):
            raise CorruptRecordError("zstd: truncated frame header")
        fhd = data[pos]
        pos += 1
        single_segment = bool(fhd & 0x20)
        fcs_bytes = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        pos += (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 0x03] + fcs_bytes
        while True:
            if pos + 3 > len(data):
                raise CorruptRecordError("zstd: truncated block header")
            bh = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            pos += 3
            block_type, size = (bh >> 1) & 0x3, bh >> 3
            if block_type == 0:  # raw
                bound += size
                pos += size
            elif block_type == 1:  # RLE: one byte repeated `size` times
                bound += size
                pos += 1
            elif block_type == 2:
                bound += _ZSTD_BLOCK_MAX
                pos += size
            else:
                raise CorruptRecordError("zstd: reserved block type")
            if bh & 1:
                break
        pos += 4 if fhd & 0x04 else 0
    if pos != len(data):
        raise CorruptRecordError("zstd: frame runs past the end")
    return bound

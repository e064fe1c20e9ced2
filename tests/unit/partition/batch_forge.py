"""Forged RecordBatch v2 bytes for the produce validator's tests (unit and attack tests): every
header and record field chosen by the test, the CRC-32C made right unless a test says otherwise.
Written from Kafka's format description, not from partition/batch.py's builder, so a lie the
builder cannot express can still be sent. Load by path (test folders are not packages):

    spec = importlib.util.spec_from_file_location("batch_forge", <this file>)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import google_crc32c

from partition.compression import compress

HEADER = struct.Struct(">qiibIhiqqqhii")
CRC_START = 21
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


def varint(n: int) -> bytes:
    """Zig-zag varint (Kafka's varint/varlong) of any int (the value is not range-checked)."""
    zz = n << 1 if n >= 0 else (-n << 1) - 1
    out = bytearray()
    while zz > 0x7F:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def record(offset_delta: int, *, ts_delta: int = 0, key: bytes | None = None,
           value: bytes | None = b"v", headers: Sequence[tuple[bytes, bytes | None]] = (),
           length_delta: int = 0, header_count: int | None = None) -> bytes:
    """One record; `length_delta` makes its length varint lie by that much, `header_count`
    makes its header count lie."""
    body = bytearray(b"\x00")  # attributes
    body += varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers) if header_count is None else header_count)
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body) + length_delta) + bytes(body)


def batch(records: Sequence[bytes], *, count: int | None = None, last_offset_delta: int | None = None,
          attributes: int = 0, base_timestamp: int = 1_000, max_timestamp: int | None = None,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, magic: int = 2,
          base_offset: int = 0, codec: int = 0, bad_crc: bool = False) -> bytes:
    """One batch holding `records` (compressed with `codec`, a Compression id, into the
    attributes too); count and last offset delta default to the truth, max timestamp to the
    base timestamp."""
    n = len(records) if count is None else count
    payload = b"".join(records)
    if codec:
        payload = compress(codec, payload)
    head = HEADER.pack(
        base_offset, HEADER.size - 12 + len(payload), -1, magic, 0, attributes | codec,
        n - 1 if last_offset_delta is None else last_offset_delta, base_timestamp,
        base_timestamp if max_timestamp is None else max_timestamp,
        producer_id, producer_epoch, base_sequence, n)
    raw = bytearray(head + payload)
    crc = google_crc32c.value(bytes(raw[CRC_START:]))
    struct.pack_into(">I", raw, 17, crc ^ 1 if bad_crc else crc)
    return bytes(raw)


def values(n: int, *, start: int = 0) -> list[bytes]:
    """n honest records with offset deltas 0..n-1, values b"r<start+i>"."""
    return [record(i, value=f"r{start + i}".encode()) for i in range(n)]


def recrc(raw: bytes | bytearray, pos: int = 0) -> bytes:
    """`raw` with the CRC of the batch at `pos` made right again (after a test changed it)."""
    out = bytearray(raw)
    end = pos + 12 + struct.unpack_from(">i", out, pos + 8)[0]
    struct.pack_into(">I", out, pos + 17, google_crc32c.value(bytes(out[pos + CRC_START:end])))
    return bytes(out)

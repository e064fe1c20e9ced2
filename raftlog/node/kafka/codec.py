"""Kafka wire codec: request/response headers and bodies through kafka-python 3.x's message
classes, which are generated from Kafka's own `common/message/*.json` schemas (the choice and
its measurement: scripts/bench kafka_codec).

Framing (the listener's job): `int32 size` then `size` bytes. Inside a request frame:

    request header v1 (non-flexible API version) or v2 (flexible: + tagged fields)
      int16 api_key, int16 api_version, int32 correlation_id, nullable string client_id
    request body in that API version

A response is `int32 size`, response header v0 (`int32 correlation_id`) or v1 (+ tagged
fields, for flexible versions), then the body. ApiVersions responses always use header v0
(KIP-511: a client that sent a version we do not know must still be able to read it).

Zero-copy: `encode_response(..., splices)` lets a body carry placeholders for its bulk
`records` fields; the result is a list of chunks where each placeholder is replaced by the
real length prefix and the caller's chunk (bytes, or a `FileRange` the writer sends with
os.sendfile), so stored batches never pass through a Python bytes object.

Importing this module loads kafka-python's protocol classes (about a second): only the
listener's protocol loader (listener.py) and the API modules import it; wire.py holds what
the sockets need without it.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Final

import kafka.protocol.admin.cluster
import kafka.protocol.admin.configs
import kafka.protocol.admin.groups
import kafka.protocol.admin.topics
import kafka.protocol.admin.transactions
import kafka.protocol.consumer.fetch
import kafka.protocol.consumer.group
import kafka.protocol.consumer.offsets
import kafka.protocol.metadata.api_versions
import kafka.protocol.metadata.find_coordinator
import kafka.protocol.metadata.metadata
import kafka.protocol.producer.produce
import kafka.protocol.producer.transaction
import kafka.protocol.sasl  # noqa: F401  (registers SaslHandshake / SaslAuthenticate)
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_message import ApiMessage

import raftlog.node.kafka.schemas  # noqa: F401  (registers the Kafka 4 APIs kafka-python lacks)
from raftlog.node.kafka.fast_encode import encode_produce, uvarint
from raftlog.node.kafka.wire import (
    API_VERSIONS_KEY,
    Chunk,
    CodecError,
    FileRange,
    Header,
    chunks_size,
)

__all__ = [
    "API_VERSIONS_KEY",
    "REQUEST_CLASSES",
    "RESPONSE_CLASSES",
    "FileRange",
    "Chunk",
    "Header",
    "CodecError",
    "decode_header",
    "decode_body",
    "encode_response",
    "is_flexible",
    "chunks_size",
]

PRODUCE_KEY: Final = 0

_MODULES: Final = (
    kafka.protocol.admin.cluster, kafka.protocol.admin.configs, kafka.protocol.admin.groups,
    kafka.protocol.admin.topics, kafka.protocol.admin.transactions, kafka.protocol.consumer.fetch, kafka.protocol.consumer.group,
    kafka.protocol.consumer.offsets, kafka.protocol.metadata.api_versions,
    kafka.protocol.metadata.find_coordinator, kafka.protocol.metadata.metadata,
    kafka.protocol.producer.produce, kafka.protocol.producer.transaction,
)  # fmt: skip


def _message_classes() -> tuple[dict[int, type[ApiMessage]], dict[int, type[ApiMessage]]]:
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue  # a versioned wrapper (Foo_v3) or an abstract base
        (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


# api_key -> the primary message class (index with [version] for a versioned one).
REQUEST_CLASSES, RESPONSE_CLASSES = _message_classes()


# (api_key, api_version) -> flexible, every version of every schema, built once: no growth
# at run time (a foreign key or version is looked up uncached).
_FLEXIBLE: Final = {(key, v): bool(cls.flexible_version_q(v))
                    for key, cls in REQUEST_CLASSES.items() for v in range(cls.max_version + 1)}


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this API version uses flexible encoding (compact types, tagged fields)."""
    flexible = _FLEXIBLE.get((api_key, api_version))
    if flexible is None:
        cls = REQUEST_CLASSES.get(api_key)
        return cls is not None and bool(cls.flexible_version_q(api_version))
    return flexible


_HEADER_PREFIX: Final = struct.Struct(">hh")
_HEADER_FIXED: Final = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


def decode_header(frame: bytes | memoryview) -> tuple[Header, int]:
    """The request header and the body's start offset. Raises CodecError when the frame is too
    short for a header or its client_id runs past the end. An unknown api_key still decodes
    (as header v1) so that its correlation id can be logged. The common header (a UTF-8 or
    null client_id; in header v2 no tagged fields) is unpacked directly, anything else goes
    through kafka-python's RequestHeader (the same results: test_kafka_fast_encode.py)."""
    if len(frame) < 10:
        raise CodecError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, n = _HEADER_FIXED.unpack_from(frame, 0)
    flexible = is_flexible(api_key, api_version)
    end = 10 + max(n, 0)
    if n >= -1 and end + flexible <= len(frame) and (not flexible or frame[end] == 0):
        try:
            client_id = None if n == -1 else str(frame[10:end], "utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return Header(api_key, api_version, correlation_id, client_id), end + flexible
    stream = io.BytesIO(frame)
    try:
        raw = RequestHeader.decode(stream, flexible=flexible)
    except Exception as exc:  # noqa: BLE001 - any decode failure of foreign bytes is the same
        raise CodecError(f"request header does not decode: {type(exc).__name__}") from None
    if stream.tell() > len(frame):
        raise CodecError("request header runs past the end of the frame")
    return Header(api_key, api_version, raw.correlation_id, raw.client_id), stream.tell()


def decode_body(header: Header, frame: bytes | memoryview, offset: int, *, removed: bool = False) -> ApiMessage:
    """The request body as the versioned message class. Raises CodecError (unknown key,
    version outside the schema, truncated or malformed body). `removed`: also the versions
    below the schema's validVersions that Kafka 4 removed (KIP-896), whose layout its fields'
    version ranges still describe (an UNSUPPORTED_VERSION answer mirrors their items)."""
    cls = REQUEST_CLASSES.get(header.api_key)
    if cls is None:
        raise CodecError(f"unknown api key {header.api_key}")
    lo, hi = (0, cls.max_version) if removed else cls.valid_versions
    if not lo <= header.api_version <= hi:
        raise CodecError(f"{cls.__name__} v{header.api_version} is outside the schema's {lo}-{hi}")
    versioned = cls[header.api_version]
    flexible = is_flexible(header.api_key, header.api_version)
    data = memoryview(frame)
    try:
        body, end = versioned._struct.compiled_decode_from(
            header.api_version, compact=flexible, tagged=flexible, data_class=cls
        )(data, offset)
    except Exception as exc:  # noqa: BLE001 - foreign bytes: every failure means "malformed"
        raise CodecError(
            f"{cls.__name__} v{header.api_version} body does not decode: {type(exc).__name__}"
        ) from None
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka 2.16 sends
    # Metadata v12 with 3 more bytes than the schema has (measured here).
    body._header = None  # (kafka-python expects the slot set before API_VERSION is)
    body.API_VERSION = header.api_version
    return body


_SIZE: Final = struct.Struct(">i")


def response_header_bytes(header: Header) -> bytes:
    """Response header v1 for flexible versions (the correlation id, then no tagged fields),
    v0 otherwise and always for ApiVersions (the correlation id): kafka-python's
    ResponseHeader bytes (tests/unit/kafka/test_kafka_fast_encode.py), packed directly."""
    flexible = header.api_key != API_VERSIONS_KEY and is_flexible(header.api_key, header.api_version)
    return _SIZE.pack(header.correlation_id) + b"\x00" if flexible else _SIZE.pack(header.correlation_id)


# Bodies written by hand (fast_encode.py) instead of kafka-python's generic encoder.
_FAST_BODIES: Final = {PRODUCE_KEY: encode_produce}


def encode_response(
    header: Header,
    body: ApiMessage,
    *,
    version: int | None = None,
    splices: dict[bytes, Chunk] | None = None,
) -> list[Chunk]:
    """The whole response frame (size prefix, header, body) as chunks to send in order.
    `version` overrides the header's (ApiVersions answering an unknown version in v0).
    `splices` maps placeholder values of `bytes`/`records` fields in `body` to the chunk
    that replaces each (see the module docstring); the length prefixes are rewritten."""
    at_version = header.api_version if version is None else version
    fast = _FAST_BODIES.get(header.api_key)
    encoded = fast(body, at_version) if fast is not None else bytes(body.encode(version=at_version))
    head = response_header_bytes(header)
    if not splices:
        return [_SIZE.pack(len(head) + len(encoded)) + head + encoded]
    flexible = is_flexible(header.api_key, header.api_version if version is None else version)
    parts: list[Chunk] = []
    pos = 0
    for marker, chunk in splices.items():
        at = encoded.find(marker, pos)
        if at < 0:
            raise AssertionError("a zero-copy placeholder is missing from the encoded body")
        prefix_len = _length_prefix_size(len(marker), flexible)
        parts.append(encoded[pos:at - prefix_len])
        parts.append(_length_prefix(_chunk_len(chunk), flexible))
        parts.append(chunk)
        pos = at + len(marker)
    parts.append(encoded[pos:])
    size = len(head) + chunks_size(parts)
    return [_SIZE.pack(size) + head, *[p for p in parts if _chunk_len(p)]]


def _chunk_len(chunk: Chunk) -> int:
    return chunk.length if isinstance(chunk, FileRange) else len(chunk)


def _length_prefix(n: int, flexible: bool) -> bytes:
    # records/bytes fields: int32 length, or compact (unsigned varint of length + 1).
    return uvarint(n + 1) if flexible else _SIZE.pack(n)


def _length_prefix_size(n: int, flexible: bool) -> int:
    return len(_length_prefix(n, flexible))


def placeholder(index: int) -> bytes:
    """A 16-byte placeholder that cannot occur in the encoded metadata around it."""
    return b"\xfe\xedRAFTLOG-ZC" + index.to_bytes(4, "big") + b"\xfe"


def describe(body: Any) -> str:
    return type(body).__name__

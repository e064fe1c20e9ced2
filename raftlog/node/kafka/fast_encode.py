"""Hand-written encoders for the hottest response bodies (issue 46: CPU per produce request).

kafka-python's generic encoder (codec.py) walks each message's schema per field; a saturated
node spent 11 % of its GIL time there, most of it on Produce answers. `encode_produce` writes
a ProduceResponse body (v0-13, flexible from v9; v0-2 carry
the UNSUPPORTED_VERSION answers) straight from the response object's
attributes with struct packs into one bytearray: the same bytes kafka-python writes, checked
byte for byte over every version in tests/unit/test_kafka_fast_encode.py, where kafka-python
stays the reference. codec.encode_response uses it for Produce and kafka-python for the rest.

Tagged fields follow kafka-python's rule, which the node's answers always had: a partition's
CurrentLeader (v10+, tag 0) is written when the handler set one (it does only with a leader
hint; kafka-python writes even a set (-1, -1), where Kafka would not), the response's
NodeEndpoints (v10+, tag 0) when not empty.

No kafka-python import here: the objects are read by attribute only, so the encoder takes
kafka-python's ProduceResponse (error answers: dispatch.error_response) and the light answer
classes below alike. The produce handler builds the latter: a kafka-python message object
costs more to construct (its constructor walks the schema, 20-35 us for one partition's
answer) than the encoding itself.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["encode_produce", "uvarint", "FLEXIBLE_PRODUCE_VERSION", "ProduceAnswer", "TopicAnswer",
           "PartitionAnswer", "RecordError", "LeaderHint", "Endpoint"]

FLEXIBLE_PRODUCE_VERSION: Final = 9
_TOPIC_IDS_VERSION: Final = 13
_LEADER_HINT_VERSION: Final = 10  # KIP-951 tagged fields
_RECORD_ERRORS_VERSION: Final = 8
_LOG_START_VERSION: Final = 5
_APPEND_TIME_VERSION: Final = 2
_THROTTLE_VERSION: Final = 1

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_PART_V0: Final = struct.Struct(">ihq")  # index, error_code, base_offset
_PART_V2: Final = struct.Struct(">ihqq")  # + log_append_time_ms
_PART_V5: Final = struct.Struct(">ihqqq")  # + log_start_offset
_LEADER: Final = struct.Struct(">iiB")  # leader_id, leader_epoch, no tagged fields
_ENDPOINT_ID: Final = struct.Struct(">i")

# One-byte varints (0-127), the common case of every length and count.
_SMALL: Final = [bytes((n,)) for n in range(128)]


@dataclass(slots=True)
class RecordError:
    batch_index: int
    batch_index_error_message: str | None = None


@dataclass(slots=True)
class LeaderHint:  # KIP-951's CurrentLeader
    leader_id: int
    leader_epoch: int


@dataclass(slots=True)
class PartitionAnswer:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list[RecordError] = field(default_factory=list)
    current_leader: LeaderHint | None = None


@dataclass(slots=True)
class TopicAnswer:
    name: str
    topic_id: uuid.UUID
    partition_responses: list[PartitionAnswer]


@dataclass(slots=True)
class Endpoint:  # KIP-951's NodeEndpoint
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class ProduceAnswer:
    """A ProduceResponse for encode_produce (the listener sets throttle_time_ms)."""

    responses: list[TopicAnswer]
    throttle_time_ms: int = 0
    node_endpoints: list[Endpoint] = field(default_factory=list)


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (compact lengths and counts, tags)."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _count(out: bytearray, n: int, flexible: bool) -> None:
    out += uvarint(n + 1) if flexible else _I32.pack(n)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    """A (nullable) string: int16 length or compact (varint length + 1); null is -1 / 0."""
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    raw = value.encode()
    out += uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
    out += raw


def encode_produce(body: Any, version: int) -> bytes:
    """The ProduceResponse body at `version` (0-13), without the response header."""
    flexible = version >= FLEXIBLE_PRODUCE_VERSION
    by_id = version >= _TOPIC_IDS_VERSION
    with_start = version >= _LOG_START_VERSION
    with_time = version >= _APPEND_TIME_VERSION
    with_errors = version >= _RECORD_ERRORS_VERSION
    with_hints = version >= _LEADER_HINT_VERSION
    out = bytearray()
    responses = body.responses
    _count(out, len(responses), flexible)
    for topic in responses:
        if by_id:
            out += topic.topic_id.bytes
        else:
            _string(out, topic.name, flexible)
        partitions = topic.partition_responses
        _count(out, len(partitions), flexible)
        for p in partitions:
            if with_start:
                out += _PART_V5.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
            elif with_time:
                out += _PART_V2.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            else:
                out += _PART_V0.pack(p.index, p.error_code, p.base_offset)
            if with_errors:
                record_errors = p.record_errors
                _count(out, len(record_errors), flexible)
                for e in record_errors:
                    out += _I32.pack(e.batch_index)
                    _string(out, e.batch_index_error_message, flexible)
                    if flexible:
                        out += b"\x00"
                _string(out, p.error_message, flexible)
            if flexible:
                leader = getattr(p, "current_leader", None) if with_hints else None
                if leader is not None:
                    # one tagged field: tag 0, size 9, the struct (with its empty tagged fields)
                    out += b"\x01\x00\x09" + _LEADER.pack(leader.leader_id, leader.leader_epoch, 0)
                else:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    if version >= _THROTTLE_VERSION:
        out += _I32.pack(body.throttle_time_ms)
    if flexible:
        endpoints = getattr(body, "node_endpoints", None) if with_hints else None
        if endpoints:
            tagged = bytearray()
            _count(tagged, len(endpoints), True)
            for e in endpoints:
                tagged += _ENDPOINT_ID.pack(e.node_id)
                _string(tagged, e.host, True)
                tagged += _I32.pack(e.port)
                _string(tagged, e.rack, True)
                tagged += b"\x00"
            out += b"\x01\x00" + uvarint(len(tagged)) + tagged
        else:
            out += b"\x00"
    return bytes(out)

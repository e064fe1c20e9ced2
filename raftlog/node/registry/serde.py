"""Confluent's wire format over the registry's state: one place that turns a typed value into
record bytes (magic byte 0, the 4-byte big-endian schema id, the payload) and record bytes back
into a value, used by the REST proxy, the console and the Spark source and sink.

    encode_with(state, schema_type, data, schema_id=None, subject=None, version="latest") -> bytes
    decode(state, raw) -> Decoded(schema_type, schema_id, value)   or raises UndecodableError

Payloads: Avro binary (fastavro, schemaless); JSON Schema: the JSON text (validated against
the schema when encoding); Protobuf: the message-index list (varints, [0] as the single 0 byte)
then the message, encoded and decoded over the parsed `.proto` model (protobuf_codec.py).
A record that is not in the wire format, or names an id the registry does not have, or whose
payload does not decode, raises UndecodableError with the reason (shown as such, never a 500).
Pure: the state is read, never changed.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any, Final

import fastavro
import jsonschema

from raftlog.node.registry.errors import RegistryError, SchemaNotFoundError
from raftlog.node.registry.protobuf_codec import ProtobufCodecError, decode_message, encode_message
from raftlog.node.registry.state import Version

__all__ = ["MAGIC", "Decoded", "UndecodableError", "EncodeError", "encode_with", "decode", "wire_header",
           "has_magic", "to_jsonable"]

MAGIC: Final = 0
_HEADER: Final = struct.Struct(">bI")


class UndecodableError(ValueError):
    """A record's bytes could not be decoded through the registry; `str()` says why."""


class EncodeError(ValueError):
    """A value could not be encoded with the schema; `str()` says why."""


@dataclass(frozen=True)
class Decoded:
    schema_type: str  # AVRO | JSON | PROTOBUF
    schema_id: int
    value: Any        # JSON-able (bytes as latin-1 strings, as Confluent's JSON encodings do)


def wire_header(schema_id: int) -> bytes:
    return _HEADER.pack(MAGIC, schema_id)


def has_magic(raw: bytes | None) -> bool:
    """Whether `raw` starts like a record in the wire format (magic 0 and room for an id)."""
    return raw is not None and len(raw) >= _HEADER.size and raw[0] == MAGIC


def _version_of(state: Any, schema_id: int | None, subject: str | None, version: Any) -> Version:
    if schema_id is not None:
        return state.by_id(schema_id)
    if subject is None:
        raise EncodeError("a schema_id or a subject is needed")
    return state.version(subject, version)


def encode_with(state: Any, schema_type: str | None, data: Any, *, schema_id: int | None = None,
                subject: str | None = None, version: Any = "latest") -> bytes:
    """The record bytes of `data` under a registered schema (by id, or a subject's version;
    `state`: a RegistryState, or anything with its `by_id`, `version` and `parsed`).
    Raises EncodeError (the data does not fit the schema, or the type does not match) and the
    registry's RegistryError (SchemaNotFoundError, SubjectNotFoundError, ...)."""
    v = _version_of(state, schema_id, subject, version)
    if schema_type is not None and schema_type != v.schema_type:
        raise EncodeError(f"schema {v.id} is {v.schema_type}, not {schema_type}")
    model = state.parsed(v).model
    header = wire_header(v.id)
    if v.schema_type == "AVRO":
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, model.parsed, data)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"the data does not fit Avro schema {v.id}: {exc}") from None
        return header + out.getvalue()
    if v.schema_type == "JSON":
        try:
            jsonschema.validate(data, model.document)
        except jsonschema.ValidationError as exc:
            raise EncodeError(f"the data does not fit JSON schema {v.id}: {exc.message}") from None
        except jsonschema.SchemaError as exc:
            raise EncodeError(f"JSON schema {v.id} cannot validate: {exc.message}") from None
        return header + json.dumps(data, separators=(",", ":")).encode()
    try:
        return header + b"\x00" + encode_message(model, _message_at(model, [0]), data)
    except (ProtobufCodecError, UndecodableError) as exc:
        raise EncodeError(f"the data does not fit Protobuf schema {v.id}: {exc}") from None


def _message_indexes(raw: bytes, pos: int) -> tuple[list[int], int]:
    count, pos = _zigzag(raw, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= 64:
        raise UndecodableError(f"bad Protobuf message-index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(raw, pos)
        indexes.append(index)
    return indexes, pos


def _zigzag(raw: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise UndecodableError("truncated Protobuf message indexes")
        b = raw[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def decode(state: Any, raw: bytes | None, *, jsonable: bool = True) -> Decoded:
    """Decode record bytes in the wire format (`state`: a RegistryState, or anything with its
    `by_id` and `parsed`). With `jsonable` false the value keeps Avro's bytes as bytes.
    Raises UndecodableError saying why not."""
    if raw is None:
        raise UndecodableError("null")
    if len(raw) < _HEADER.size:
        raise UndecodableError(f"too short for the wire format ({len(raw)} bytes)")
    magic, schema_id = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise UndecodableError(f"bad magic byte {raw[0]} (not the registry's wire format)")
    try:
        v = state.by_id(schema_id)
        model = state.parsed(v).model
    except SchemaNotFoundError:
        raise UndecodableError(f"unknown schema id {schema_id}") from None
    except RegistryError as exc:
        raise UndecodableError(f"schema {schema_id}: {exc.message}") from None
    payload = raw[_HEADER.size:]
    try:
        if v.schema_type == "AVRO":
            value = fastavro.schemaless_reader(io.BytesIO(payload), model.parsed, None)
        elif v.schema_type == "JSON":
            value = json.loads(payload)
        else:
            indexes, pos = _message_indexes(payload, 0)
            value = decode_message(model, _message_at(model, indexes), payload[pos:])
    except UndecodableError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, EOFError, struct.error, ProtobufCodecError) as exc:
        raise UndecodableError(f"the payload does not decode with {v.schema_type} schema {schema_id}: {exc}") from None
    return Decoded(v.schema_type, schema_id, to_jsonable(value) if jsonable else value)


def _message_at(model: Any, indexes: list[int]) -> str:
    """The message the index path names: only top-level messages are indexed by order here."""
    prefix = f"{model.package}." if model.package else ""
    tops = [m for m in model.messages if "." not in m.removeprefix(prefix)]
    if not indexes or not 0 <= indexes[0] < len(tops):
        raise UndecodableError(f"no message at index {indexes} of the schema")
    name = tops[indexes[0]]
    for index in indexes[1:]:
        nested = [m for m in model.messages if m.startswith(name + ".") and "." not in m[len(name) + 1:]]
        if not 0 <= index < len(nested):
            raise UndecodableError(f"no message at index {indexes} of the schema")
        name = nested[index]
    return name


def to_jsonable(value: Any) -> Any:
    """Avro's bytes and fixed as latin-1 strings (Avro's JSON encoding), tuples as lists,
    decimals and dates as strings, so any decoded value is JSON."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

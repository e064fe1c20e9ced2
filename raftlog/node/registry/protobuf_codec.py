"""Protobuf messages <-> JSON-able dicts over the registry's parsed `.proto` model
(protobuf.ProtobufSchema: message full name -> {field number: ProtoField}), so a record of a
registered Protobuf schema is encoded and decoded without generated classes.

Covers scalars, nested messages, enums (by name, or the number when unknown), repeated fields
(packed or not when decoding; packed numbers when encoding, as proto3) and maps. Field names as
in the `.proto`; decoding leaves out fields the record does not carry (as proto3's JSON with
defaults omitted); unknown field numbers are skipped. Pure.
"""

from __future__ import annotations

import struct
from typing import Any, Final

__all__ = ["ProtobufCodecError", "encode_message", "decode_message"]

MAX_DEPTH: Final = 64
_VARINT: Final = frozenset({"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum"})
_FIXED64: Final = {"fixed64": "<Q", "sfixed64": "<q", "double": "<d"}
_FIXED32: Final = {"fixed32": "<I", "sfixed32": "<i", "float": "<f"}


class ProtobufCodecError(ValueError):
    pass


def _kind(type_: str) -> str:
    return type_.split(":", 1)[0] if ":" in type_ else type_


def _wire_type(kind: str) -> int:
    if kind in _VARINT:
        return 0
    if kind in _FIXED64:
        return 1
    if kind in _FIXED32:
        return 5
    return 2


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtobufCodecError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _scalar_bytes(model: Any, type_: str, value: Any, depth: int) -> bytes:
    kind = _kind(type_)
    if kind == "message":
        return encode_message(model, type_.split(":", 1)[1], value, depth + 1)
    if kind == "enum":
        if isinstance(value, str):
            numbers = model.enums.get(type_.split(":", 1)[1], {})
            if value not in numbers:
                raise ProtobufCodecError(f"{value!r} is not a value of {type_}")
            value = numbers[value]
        return _varint(int(value))
    if kind == "bool":
        return _varint(1 if value else 0)
    if kind in ("sint32", "sint64"):
        n = int(value)
        return _varint((n << 1) ^ (n >> 63))
    if kind in _VARINT:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ProtobufCodecError(f"{kind} needs an integer, not {type(value).__name__}")
        return _varint(int(value))
    if kind in _FIXED64:
        return struct.pack(_FIXED64[kind], value)
    if kind in _FIXED32:
        return struct.pack(_FIXED32[kind], value)
    if kind == "string":
        if not isinstance(value, str):
            raise ProtobufCodecError(f"string needs a string, not {type(value).__name__}")
        return value.encode()
    if kind == "bytes":
        return value.encode("latin-1") if isinstance(value, str) else bytes(value)
    raise ProtobufCodecError(f"unsupported field type {type_}")


def _field_bytes(model: Any, number: int, type_: str, value: Any, depth: int) -> bytes:
    wire = _wire_type(_kind(type_))
    body = _scalar_bytes(model, type_, value, depth)
    if wire == 2:
        body = _varint(len(body)) + body
    return _varint((number << 3) | wire) + body


def encode_message(model: Any, name: str, data: Any, depth: int = 0) -> bytes:
    """The wire bytes of message `name` from the dict `data`. Raises ProtobufCodecError."""
    if depth > MAX_DEPTH:
        raise ProtobufCodecError("nested too deeply")
    fields = model.messages.get(name)
    if fields is None:
        raise ProtobufCodecError(f"no message {name}")
    if not isinstance(data, dict):
        raise ProtobufCodecError(f"message {name} needs an object, not {type(data).__name__}")
    by_name = {f.name: (n, f) for n, f in fields.items()}
    unknown = set(data) - set(by_name)
    if unknown:
        raise ProtobufCodecError(f"message {name} has no field {sorted(unknown)[0]!r}")
    out = bytearray()
    for key, value in data.items():
        number, f = by_name[key]
        if value is None:
            continue
        try:
            if f.type.startswith("map<"):
                key_type, value_type = f.type[4:-1].split(",", 1)
                if not isinstance(value, dict):
                    raise ProtobufCodecError(f"map field {key} needs an object")
                for k, v in value.items():
                    entry = _field_bytes(model, 1, key_type, k, depth) + _field_bytes(model, 2, value_type, v, depth)
                    out += _varint((number << 3) | 2) + _varint(len(entry)) + entry
            elif f.label == "repeated":
                if not isinstance(value, list):
                    raise ProtobufCodecError(f"repeated field {key} needs a list")
                if _wire_type(_kind(f.type)) != 2 and value:
                    packed = b"".join(_scalar_bytes(model, f.type, v, depth) for v in value)
                    out += _varint((number << 3) | 2) + _varint(len(packed)) + packed
                else:
                    for v in value:
                        out += _field_bytes(model, number, f.type, v, depth)
            else:
                out += _field_bytes(model, number, f.type, value, depth)
        except (struct.error, ValueError, TypeError, OverflowError) as exc:
            if isinstance(exc, ProtobufCodecError):
                raise
            raise ProtobufCodecError(f"field {key}: {exc}") from None
    return bytes(out)


def _decode_scalar(model: Any, type_: str, wire: int, raw: Any, depth: int) -> Any:
    kind = _kind(type_)
    if kind == "message":
        return decode_message(model, type_.split(":", 1)[1], raw, depth + 1)
    if kind == "enum":
        names = {v: k for k, v in model.enums.get(type_.split(":", 1)[1], {}).items()}
        return names.get(raw, raw)
    if kind == "bool":
        return bool(raw)
    if kind in ("sint32", "sint64"):
        return (raw >> 1) ^ -(raw & 1)
    if kind in ("int32", "int64"):
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    if kind in _VARINT:
        return raw
    if kind in _FIXED64:
        return struct.unpack(_FIXED64[kind], raw)[0]
    if kind in _FIXED32:
        return struct.unpack(_FIXED32[kind], raw)[0]
    if kind == "string":
        return bytes(raw).decode()
    return bytes(raw).decode("latin-1")  # bytes, as a latin-1 string (JSON-able)


def _next_field(data: bytes, pos: int) -> tuple[int, int, Any, int]:
    tag, pos = _read_varint(data, pos)
    number, wire = tag >> 3, tag & 7
    if wire == 0:
        raw, pos = _read_varint(data, pos)
    elif wire == 1:
        raw, pos = data[pos:pos + 8], pos + 8
    elif wire == 5:
        raw, pos = data[pos:pos + 4], pos + 4
    elif wire == 2:
        size, pos = _read_varint(data, pos)
        raw, pos = data[pos:pos + size], pos + size
    else:
        raise ProtobufCodecError(f"unsupported wire type {wire}")
    if pos > len(data):
        raise ProtobufCodecError("truncated message")
    return number, wire, raw, pos


def decode_message(model: Any, name: str, data: bytes, depth: int = 0) -> dict[str, Any]:
    """The dict of message `name` from its wire bytes. Raises ProtobufCodecError."""
    if depth > MAX_DEPTH:
        raise ProtobufCodecError("nested too deeply")
    fields = model.messages.get(name)
    if fields is None:
        raise ProtobufCodecError(f"no message {name}")
    out: dict[str, Any] = {}
    pos = 0
    while pos < len(data):
        number, wire, raw, pos = _next_field(data, pos)
        f = fields.get(number)
        if f is None:
            continue
        if f.type.startswith("map<"):
            key_type, value_type = f.type[4:-1].split(",", 1)
            entry: dict[int, Any] = {}
            p = 0
            while p < len(raw):
                n, w, r, p = _next_field(raw, p)
                entry[n] = _decode_scalar(model, key_type if n == 1 else value_type, w, r, depth)
            out.setdefault(f.name, {})[str(entry.get(1, ""))] = entry.get(2)
        elif f.label == "repeated":
            items = out.setdefault(f.name, [])
            kind = _kind(f.type)
            if wire == 2 and _wire_type(kind) != 2:  # packed
                p = 0
                while p < len(raw):
                    if kind in _VARINT:
                        r, p = _read_varint(raw, p)
                    else:
                        width = 8 if kind in _FIXED64 else 4
                        r, p = raw[p:p + width], p + width
                    items.append(_decode_scalar(model, f.type, wire, r, depth))
            else:
                items.append(_decode_scalar(model, f.type, wire, raw, depth))
        else:
            out[f.name] = _decode_scalar(model, f.type, wire, raw, depth)
    return out

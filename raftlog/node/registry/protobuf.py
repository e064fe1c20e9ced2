"""Protobuf schemas for the registry: parsing either form Confluent accepts — `.proto` text
(proto-schema-parser, a pure-Python parser of proto2/proto3/editions) or a base64-encoded
`FileDescriptorProto` (what confluent-kafka's Python ProtobufSerializer registers; decoded
with `protobuf`'s descriptor_pb2) — into one model, its canonical form, and a compatibility
check following Confluent's Protobuf rules.

Why proto-schema-parser: pure Python, maintained (2.x, 2025), an AST with field numbers,
cardinality and nesting, no protoc binary; grpcio-tools would need protoc and files on disk.

The model: {message full name: {field number: Field(name, type, label)}}, package, and
enums. Rules (Confluent's names): a message removed [MESSAGE_REMOVED], a field's scalar kind
changed outside a wire-compatible group [FIELD_SCALAR_KIND_CHANGED], a message or enum type
changed [FIELD_NAMED_TYPE_CHANGED], scalar <-> message [FIELD_KIND_CHANGED], a label changed
between repeated and singular, a required field added or removed, the package changed
[PACKAGE_CHANGED]: incompatible. Fields added or removed, renamed fields: compatible.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Final

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

__all__ = ["ProtoField", "ProtobufSchema", "parse_protobuf", "protobuf_incompatibilities"]

_SCALARS: Final = frozenset({
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
    "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
})
# Kinds whose wire form is the same (Confluent's compatible scalar groups).
_GROUPS: Final = (
    frozenset({"int32", "uint32", "int64", "uint64", "bool"}),
    frozenset({"sint32", "sint64"}),
    frozenset({"fixed32", "sfixed32"}),
    frozenset({"fixed64", "sfixed64"}),
    frozenset({"string", "bytes"}),
)
_DESCRIPTOR_TYPES: Final = {
    v: k[len("TYPE_"):].lower() for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()
}
_DESCRIPTOR_LABELS: Final = {1: "optional", 2: "required", 3: "repeated"}


@dataclass(frozen=True)
class ProtoField:
    name: str
    type: str   # a scalar kind, or "message:<full name>" / "enum:<full name>" / "map<k,v>"
    label: str  # "optional" (singular), "required", "repeated"


@dataclass(frozen=True)
class ProtobufSchema:
    package: str
    messages: dict[str, dict[int, ProtoField]]
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    canonical: str = ""


def parse_protobuf(text: str, references: list[str] = ()) -> ProtobufSchema:  # type: ignore[assignment]
    """Parse `.proto` text or a base64 FileDescriptorProto. Raises ValueError saying why not."""
    stripped = text.strip()
    if stripped and all(c.isalnum() or c in "+/=\n\r" for c in stripped):
        try:
            raw = base64.b64decode(stripped, validate=False)
            descriptor = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except (binascii.Error, DecodeError, ValueError):
            descriptor = None
        if descriptor is not None and (descriptor.message_type or descriptor.enum_type or descriptor.name):
            return _from_descriptor(descriptor)
    try:
        parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except ValueError:
        raise
    except Exception as exc:  # the parser raises its own (antlr) errors: any is "does not parse"
        raise ValueError(f"invalid Protobuf schema: {exc}") from None
    return _from_ast(parsed)


class _Refuse(ErrorListener):  # type: ignore[misc]
    """ANTLR's default listener prints a syntax error and recovers; a registry refuses."""

    def syntaxError(self, recognizer: Any, offending: Any, line: int, column: int, msg: str, e: Any) -> None:
        raise ValueError(f"invalid Protobuf schema: line {line}:{column} {msg}")


def _strict(recognizer: Any) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Refuse())


def _finish(package: str, messages: dict[str, dict[int, ProtoField]],
            enums: dict[str, dict[str, int]]) -> ProtobufSchema:
    if not messages and not enums:
        raise ValueError("invalid Protobuf schema: it defines no message")
    model = {"package": package, "enums": enums,
             "messages": {m: {str(n): [f.name, f.type, f.label] for n, f in sorted(fs.items())}
                          for m, fs in messages.items()}}
    return ProtobufSchema(package, messages, enums, json.dumps(model, sort_keys=True, separators=(",", ":")))


def _from_descriptor(fd: descriptor_pb2.FileDescriptorProto) -> ProtobufSchema:
    messages: dict[str, dict[int, ProtoField]] = {}
    enums: dict[str, dict[str, int]] = {}
    prefix = f".{fd.package}" if fd.package else ""

    def walk(msg: descriptor_pb2.DescriptorProto, scope: str) -> None:
        name = f"{scope}.{msg.name}"
        fields: dict[int, ProtoField] = {}
        for f in msg.field:
            kind = _DESCRIPTOR_TYPES.get(f.type, "unknown")
            if kind in ("message", "group"):
                kind = f"message:{f.type_name.lstrip('.')}"
            elif kind == "enum":
                kind = f"enum:{f.type_name.lstrip('.')}"
            fields[f.number] = ProtoField(f.name, kind, _DESCRIPTOR_LABELS.get(f.label, "optional"))
        messages[name.lstrip(".")] = fields
        for nested in msg.nested_type:
            walk(nested, name)
        for e in msg.enum_type:
            enums[f"{name}.{e.name}".lstrip(".")] = {v.name: v.number for v in e.value}

    for msg in fd.message_type:
        walk(msg, prefix)
    for e in fd.enum_type:
        enums[f"{prefix}.{e.name}".lstrip(".")] = {v.name: v.number for v in e.value}
    return _finish(fd.package, messages, enums)


def _from_ast(file: ast.File) -> ProtobufSchema:
    package = next((e.name for e in file.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, ProtoField]] = {}
    enums: dict[str, dict[str, int]] = {}
    declared: dict[str, str] = {}  # full name -> "message" / "enum"
    prefix = package

    def declare(elements: list[Any], scope: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                name = f"{scope}.{e.name}".lstrip(".")
                declared[name] = "message"
                declare(e.elements, name)
            elif isinstance(e, ast.Enum):
                declared[f"{scope}.{e.name}".lstrip(".")] = "enum"

    def resolve(type_name: str, scope: str) -> str:
        if type_name in _SCALARS:
            return type_name
        if type_name.startswith("."):
            full = type_name[1:]
            return f"{declared.get(full, 'message')}:{full}"
        parts = scope.split(".") if scope else []
        while True:
            candidate = ".".join([*parts, type_name])
            if candidate in declared:
                return f"{declared[candidate]}:{candidate}"
            if not parts:
                return f"message:{type_name}"  # from an import: taken as a message
            parts.pop()

    def walk(elements: list[Any], scope: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                name = f"{scope}.{e.name}".lstrip(".")
                fields: dict[int, ProtoField] = {}
                collect(e.elements, name, fields)
                messages[name] = fields
                walk(e.elements, name)
            elif isinstance(e, ast.Enum):
                enums[f"{scope}.{e.name}".lstrip(".")] = {
                    v.name: v.number for v in e.elements if isinstance(v, ast.EnumValue)}

    def collect(elements: list[Any], scope: str, fields: dict[int, ProtoField]) -> None:
        for e in elements:
            if isinstance(e, ast.Field):
                card = (e.cardinality.value.lower() if e.cardinality is not None else "optional")
                fields[e.number] = ProtoField(e.name, resolve(e.type, scope), card)
            elif isinstance(e, ast.MapField):
                fields[e.number] = ProtoField(
                    e.name, f"map<{resolve(e.key_type, scope)},{resolve(e.value_type, scope)}>", "repeated")
            elif isinstance(e, ast.OneOf):
                collect(e.elements, scope, fields)

    declare(file.file_elements, prefix)
    walk(file.file_elements, prefix)
    return _finish(package, messages, enums)


def _kinds_compatible(old: str, new: str) -> bool:
    if old == new:
        return True
    return any(old in g and new in g for g in _GROUPS)


def protobuf_incompatibilities(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    """Why `reader` cannot read what `writer` wrote per Confluent's rules (empty: it can). Pure."""
    problems: list[str] = []
    if reader.package != writer.package:
        problems.append(f"package changed from {writer.package!r} to {reader.package!r}")
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            problems.append(f"message {name} was removed")
            continue
        for number, wf in wfields.items():
            rf = rfields.get(number)
            if rf is None:
                if wf.label == "required":
                    problems.append(f"{name}.{wf.name} (#{number}): a required field was removed")
                continue
            if not _kinds_compatible(wf.type, rf.type):
                problems.append(f"{name} field #{number}: type {wf.type} changed to {rf.type}")
            if (wf.label == "repeated") != (rf.label == "repeated"):
                problems.append(f"{name} field #{number}: label {wf.label} changed to {rf.label}")
        for number, rf in rfields.items():
            if number not in wfields and rf.label == "required":
                problems.append(f"{name}.{rf.name} (#{number}): a required field was added")
    return problems

"""The registry's compatibility rules are real schema resolution, not string comparison: a
table of Avro, JSON Schema and Protobuf evolutions, each judged per level as Confluent does."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2

from raftlog.node.registry.compat import LEVELS, incompatibilities, parse_schema
from raftlog.node.registry.errors import InvalidSchemaError


def avro(fields, name="User", **extra):
    return parse_schema("AVRO", json.dumps({"type": "record", "name": name, "fields": fields, **extra}))


A_INT = avro([{"name": "a", "type": "int"}])
A_LONG = avro([{"name": "a", "type": "long"}])
A_STRING = avro([{"name": "a", "type": "string"}])
A_PLUS_B_DEFAULT = avro([{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "x"}])
A_PLUS_B = avro([{"name": "a", "type": "int"}, {"name": "b", "type": "string"}])
A_NULLABLE = avro([{"name": "a", "type": ["null", "int"], "default": None}])
A_RENAMED_ALIAS = avro([{"name": "z", "type": "int", "aliases": ["a"]}])
OTHER_NAME = avro([{"name": "a", "type": "int"}], name="Other")


def enum(symbols, default=None):
    t = {"type": "enum", "name": "Color", "symbols": symbols}
    if default:
        t["default"] = default
    return avro([{"name": "c", "type": t}])


@pytest.mark.parametrize("new, old, backward, forward", [
    (A_LONG, A_INT, True, False),              # int promotes to long; long does not narrow
    (A_STRING, A_INT, False, False),           # no promotion between int and string
    (A_PLUS_B_DEFAULT, A_INT, True, True),     # added with a default: both ways
    (A_PLUS_B, A_INT, False, True),            # added without a default: new cannot read old
    (A_INT, A_PLUS_B, True, False),            # removed without a default: old cannot read new
    (A_NULLABLE, A_INT, True, False),          # a union reads its branch; int cannot read null
    (A_RENAMED_ALIAS, A_INT, True, False),     # a reader alias reads the old name
    (OTHER_NAME, A_INT, False, False),         # another record name
    (enum(["R", "G", "B"]), enum(["R", "G"]), True, False),
    (enum(["R"], default="R"), enum(["R", "G"]), True, True),
])
def test_avro_resolution(new, old, backward, forward):
    assert (not incompatibilities("BACKWARD", new, [old])) is backward
    assert (not incompatibilities("FORWARD", new, [old])) is forward
    assert (not incompatibilities("FULL", new, [old])) is (backward and forward)
    assert incompatibilities("NONE", new, [old]) == []


def test_transitive_levels_check_every_version_not_only_the_latest():
    v1 = avro([{"name": "a", "type": "int"}])
    v2 = avro([{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}])
    v3 = avro([{"name": "b", "type": "string", "default": ""}, {"name": "c", "type": "int"}])  # c: no default
    # v3 cannot read v1 data (c missing there) nor v2 data: both levels refuse.
    assert incompatibilities("BACKWARD", v3, [v1, v2])
    v3b = avro([{"name": "a", "type": "long"}, {"name": "b", "type": "string"}])  # b required
    assert not incompatibilities("BACKWARD", v3b, [v1, v2])      # reads v2 data: b is there
    assert incompatibilities("BACKWARD_TRANSITIVE", v3b, [v1, v2])  # v1 data has no b


def js(doc):
    return parse_schema("JSON", json.dumps(doc))


CLOSED_A = js({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False})
CLOSED_AB = js({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                "additionalProperties": False})
OPEN_A = js({"type": "object", "properties": {"a": {"type": "integer"}}})
OPEN_AB = js({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})
CLOSED_A_NUMBER = js({"type": "object", "properties": {"a": {"type": "number"}}, "additionalProperties": False})
REQUIRED_A = js({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                 "additionalProperties": False})
ENUM_2 = js({"enum": ["x", "y"]})
ENUM_3 = js({"enum": ["x", "y", "z"]})


@pytest.mark.parametrize("new, old, backward, forward", [
    (CLOSED_AB, CLOSED_A, True, False),   # added to a closed model / removed from a closed one
    (OPEN_AB, OPEN_A, False, True),       # added to an open model: old data may hold any b
    (CLOSED_A_NUMBER, CLOSED_A, True, False),  # integer widened to number
    (REQUIRED_A, CLOSED_A, False, True),  # a required property added
    (ENUM_3, ENUM_2, True, False),
    (CLOSED_A, OPEN_A, False, True),      # additionalProperties removed
])
def test_json_schema_rules(new, old, backward, forward):
    assert (not incompatibilities("BACKWARD", new, [old])) is backward
    assert (not incompatibilities("FORWARD", new, [old])) is forward


def proto(text):
    return parse_schema("PROTOBUF", text)


P1 = proto('syntax = "proto3"; package p; message M { int32 a = 1; string s = 2; }')


@pytest.mark.parametrize("text, ok", [
    ('syntax = "proto3"; package p; message M { int32 a = 1; string s = 2; bool n = 3; }', True),  # added
    ('syntax = "proto3"; package p; message M { int32 a = 1; }', True),            # removed
    ('syntax = "proto3"; package p; message M { int64 renamed = 1; bytes s = 2; }', True),  # same wire group
    ('syntax = "proto3"; package p; message M { string a = 1; string s = 2; }', False),  # kind changed
    ('syntax = "proto3"; package p; message M { repeated int32 a = 1; string s = 2; }', False),  # label
    ('syntax = "proto3"; package q; message M { int32 a = 1; string s = 2; }', False),  # package
    ('syntax = "proto3"; package p; message N { int32 a = 1; }', False),            # message removed
])
def test_protobuf_rules(text, ok):
    assert (not incompatibilities("FULL", proto(text), [P1])) is ok


def test_protobuf_descriptor_and_text_forms_are_one_model():
    fd = descriptor_pb2.FileDescriptorProto(name="m.proto", package="p", syntax="proto3")
    m = fd.message_type.add(name="M")
    m.field.add(name="a", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32, label=1)
    m.field.add(name="s", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    encoded = parse_schema("PROTOBUF", base64.b64encode(fd.SerializeToString()).decode())
    assert encoded.model.messages == P1.model.messages
    assert not incompatibilities("FULL_TRANSITIVE", encoded, [P1])


def test_canonical_forms_ignore_layout():
    spaced = parse_schema("AVRO", '{ "type" : "record", "name": "User", "fields": [ {"name":"a", "type":"int", "doc": "x"} ] }')
    assert spaced.canonical == A_INT.canonical
    assert js({"b": 1, "type": "object"}).canonical == js({"type": "object", "b": 1}).canonical


@pytest.mark.parametrize("schema_type, text", [
    ("AVRO", "{not json"), ("AVRO", '{"type": "record", "name": "R"}'), ("AVRO", '"nosuchtype"'),
    ("JSON", "[1, 2"), ("JSON", '{"type": 12}'), ("JSON", "3"),
    ("PROTOBUF", "message {"), ("PROTOBUF", ""), ("XML", "<a/>"),
])
def test_a_schema_that_does_not_parse_is_invalid_schema(schema_type, text):
    with pytest.raises(InvalidSchemaError) as caught:
        parse_schema(schema_type, text)
    assert caught.value.details["error_code"] == 42201 and caught.value.message


def test_unknown_level_is_refused():
    assert "NONE" in LEVELS
    with pytest.raises(ValueError):
        incompatibilities("SIDEWAYS", A_INT, [A_INT])

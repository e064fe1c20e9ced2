"""Confluent's wire format through the registry's state (serde.py), the Protobuf codec checked
against Google's protobuf runtime, and the REST proxy's consumer instances (idle expiry like
Confluent's consumer.instance.timeout.ms, the bound on instances)."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from raftlog.node.registry.consumers import ConsumerInstances
from raftlog.node.registry.errors import (
    ConsumerAlreadyExistsError, ConsumerInstanceNotFoundError, InvalidConsumerConfigError, SchemaNotFoundError,
    TooManyConsumersError,
)
from raftlog.node.registry.protobuf_codec import decode_message, encode_message
from raftlog.node.registry.serde import EncodeError, UndecodableError, decode, encode_with, wire_header
from raftlog.node.registry.state import RegistryState

AVRO = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}, {"name": "blob", "type": "bytes"}]})
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
PROTO = """
syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int64 amount = 2;
  repeated int32 items = 3;
  Line line = 4;
  Kind kind = 5;
  sint32 delta = 6;
  double price = 7;
  map<string, int32> counts = 8;
  message Line { string sku = 1; bool gift = 2; }
  enum Kind { NONE = 0; RUSH = 1; }
}
"""


def registered(state: RegistryState, subject: str, schema_type: str, text: str) -> int:
    records, v = state.register(subject, schema_type, text, (), None, None)
    for key, value in records:
        state.apply(state.applied_offset + 1, key, value)
    return v.id


@pytest.fixture
def state() -> RegistryState:
    return RegistryState()


def test_avro_round_trip_matches_fastavro_and_the_wire_format(state):
    schema_id = registered(state, "u-value", "AVRO", AVRO)
    record = {"name": "ann", "age": 7, "blob": b"\x00\xff"}
    raw = encode_with(state, "AVRO", record, subject="u-value")
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, fastavro.parse_schema(json.loads(AVRO)), record)
    assert raw == wire_header(schema_id) + expected.getvalue() and raw[:1] == b"\x00"
    decoded = decode(state, raw)
    assert (decoded.schema_type, decoded.schema_id) == ("AVRO", schema_id)
    assert decoded.value == {"name": "ann", "age": 7, "blob": "\x00\xff"}  # bytes as Avro's JSON (latin-1)


def test_json_schema_validates_when_encoding(state):
    schema_id = registered(state, "j-value", "JSON", JSON_SCHEMA)
    assert decode(state, encode_with(state, "JSON", {"n": 3}, schema_id=schema_id)).value == {"n": 3}
    with pytest.raises(EncodeError, match="does not fit JSON schema"):
        encode_with(state, "JSON", {"n": "three"}, schema_id=schema_id)
    with pytest.raises(EncodeError, match="is JSON, not AVRO"):
        encode_with(state, "AVRO", {"n": 3}, schema_id=schema_id)
    with pytest.raises(SchemaNotFoundError):
        encode_with(state, "JSON", {"n": 3}, schema_id=999)


@pytest.mark.parametrize("raw, reason", [
    (None, "null"),
    (b"\x00\x00", "too short"),
    (b"\x07\x00\x00\x00\x01{}", "bad magic byte 7"),
    (b"\x00\x00\x00\x03\xe7{}", "unknown schema id 999"),
])
def test_undecodable_records_say_why(state, raw, reason):
    with pytest.raises(UndecodableError, match=reason):
        decode(state, raw)


def test_a_payload_that_does_not_fit_its_schema_is_undecodable(state):
    schema_id = registered(state, "u-value", "AVRO", AVRO)
    with pytest.raises(UndecodableError, match="does not decode with AVRO schema"):
        decode(state, wire_header(schema_id) + b"\x99")


def _google_order_class():
    """The same Order built by hand as a FileDescriptorProto, for Google's runtime."""
    f = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    order = f.message_type.add(name="Order")
    T = descriptor_pb2.FieldDescriptorProto
    for name, number, kind, label, type_name in [
        ("id", 1, T.TYPE_STRING, T.LABEL_OPTIONAL, ""), ("amount", 2, T.TYPE_INT64, T.LABEL_OPTIONAL, ""),
        ("items", 3, T.TYPE_INT32, T.LABEL_REPEATED, ""), ("line", 4, T.TYPE_MESSAGE, T.LABEL_OPTIONAL, ".shop.Order.Line"),
        ("kind", 5, T.TYPE_ENUM, T.LABEL_OPTIONAL, ".shop.Order.Kind"), ("delta", 6, T.TYPE_SINT32, T.LABEL_OPTIONAL, ""),
        ("price", 7, T.TYPE_DOUBLE, T.LABEL_OPTIONAL, ""),
        ("counts", 8, T.TYPE_MESSAGE, T.LABEL_REPEATED, ".shop.Order.CountsEntry"),
    ]:
        field = order.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    line.field.add(name="gift", number=2, type=T.TYPE_BOOL, label=T.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    kind = order.enum_type.add(name="Kind")
    kind.value.add(name="NONE", number=0)
    kind.value.add(name="RUSH", number=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_codec_agrees_with_googles_runtime(state):
    schema_id = registered(state, "o-value", "PROTOBUF", PROTO)
    model = state.parsed(state.by_id(schema_id)).model
    data = {"id": "o1", "amount": -5, "items": [1, 2, 300], "line": {"sku": "x", "gift": True}, "kind": "RUSH",
            "delta": -3, "price": 2.5, "counts": {"a": 1}}
    Order = _google_order_class()
    theirs = Order(id="o1", amount=-5, items=[1, 2, 300], line=Order.Line(sku="x", gift=True), kind=1, delta=-3,
                   price=2.5, counts={"a": 1})
    ours = encode_message(model, "shop.Order", data)
    assert Order.FromString(ours) == theirs
    assert decode_message(model, "shop.Order", theirs.SerializeToString()) == data
    raw = encode_with(state, "PROTOBUF", data, schema_id=schema_id)
    assert raw[5:6] == b"\x00" and Order.FromString(raw[6:]) == theirs  # message index [0]
    assert decode(state, raw).value == data
    with pytest.raises(EncodeError, match="no field 'nope'"):
        encode_with(state, "PROTOBUF", {"nope": 1}, schema_id=schema_id)


def test_consumer_instances_expire_when_idle_and_are_bounded():
    instances = ConsumerInstances(instance_timeout_ms=1000, max_instances=2)
    a = instances.create("g", {"name": "a", "format": "json"}, now_s=0.0)
    assert (a.format, a.auto_offset_reset) == ("json", "latest")
    with pytest.raises(ConsumerAlreadyExistsError):
        instances.create("g", {"name": "a"}, now_s=0.1)
    instances.create("g", {}, now_s=0.2)  # a generated name
    with pytest.raises(TooManyConsumersError):
        instances.create("h", {"name": "c"}, now_s=0.3)
    assert instances.get("g", "a", now_s=0.9) is a  # used: its idle time restarts
    instances.expire(now_s=1.5)  # the unnamed one, idle since 0.2, is gone; "a" used at 0.9 stays
    assert len(instances) == 1
    with pytest.raises(ConsumerInstanceNotFoundError):
        instances.get("g", "a", now_s=2.0)  # idle 1.1 s > 1 s
    for bad in ({"format": "xml"}, {"auto.offset.reset": "middle"}, {"name": "a/b"}, [1]):
        with pytest.raises(InvalidConsumerConfigError):
            instances.create("g", bad, now_s=3.0)

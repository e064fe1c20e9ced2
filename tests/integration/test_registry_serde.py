"""The Schema Registry with confluent-kafka's own SchemaRegistryClient, serializers and
deserializers (Avro, JSON Schema, Protobuf), producing through the Kafka listener and consuming
back; incompatible evolutions refused per level; a subject deleted and re-registered."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = pytest.mark.cluster

USER = {"type": "record", "name": "User", "namespace": "demo",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}


_CLIENTS: list[SchemaRegistryClient] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def _registry(cluster, node_id=1) -> SchemaRegistryClient:
    """A client of node `node_id`'s registry, closed after the test."""
    client = SchemaRegistryClient({"url": cluster.schema_registry(node_id)})
    _CLIENTS.append(client)
    return client


def _round_trip(cluster, topic: str, serialize, deserialize, values: list) -> list:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap()})
    for value in values:
        producer.produce(topic, value=serialize(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            got.append(deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE)))
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    return got


def test_avro_serializer_round_trip_through_the_kafka_listener(cluster):
    client = _registry(cluster)
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    serializer = AvroSerializer(client, json.dumps(USER))
    deserializer = AvroDeserializer(_registry(cluster, 2))  # another node answers the id
    values = [{"name": f"u{i}", "age": i} for i in range(5)]
    assert _round_trip(cluster, topic, serializer, deserializer, values) == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and latest.schema_id >= 1


def test_json_serializer_round_trip(cluster):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    topic = f"json-{uuid.uuid4().hex[:8]}"
    serializer = JSONSerializer(json.dumps(schema), _registry(cluster))
    deserializer = JSONDeserializer(None, schema_registry_client=_registry(cluster, 3))
    values = [{"n": i} for i in range(3)]
    assert _round_trip(cluster, topic, serializer, deserializer, values) == values


def test_protobuf_serializer_round_trip(cluster):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    fd = descriptor_pb2.FileDescriptorProto(name="reading.proto", package="demo", syntax="proto3")
    msg = fd.message_type.add(name="Reading")
    msg.field.add(name="sensor", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    msg.field.add(name="value", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    Reading = message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.Reading"))
    topic = f"proto-{uuid.uuid4().hex[:8]}"
    serializer = ProtobufSerializer(Reading, _registry(cluster), {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(Reading, {"use.deprecated.format": False})
    values = [Reading(sensor=f"s{i}", value=i / 2) for i in range(3)]
    got = _round_trip(cluster, topic, serializer, deserializer, values)
    assert [(m.sensor, m.value) for m in got] == [(m.sensor, m.value) for m in values]
    assert _registry(cluster, 2).get_latest_version(f"{topic}-value").schema.schema_type == "PROTOBUF"


def test_incompatible_evolutions_are_refused_per_level(cluster):
    client = _registry(cluster, 2)
    subject = f"evolve-{uuid.uuid4().hex[:8]}"
    first = client.register_schema(subject, Schema(json.dumps(USER), "AVRO"))
    # BACKWARD (the default): a new field without a default cannot read old data.
    no_default = {**USER, "fields": USER["fields"] + [{"name": "email", "type": "string"}]}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(no_default), "AVRO"))
    assert refused.value.http_status_code == 409
    with_default = {**USER, "fields": USER["fields"] + [{"name": "email", "type": "string", "default": ""}]}
    second = client.register_schema(subject, Schema(json.dumps(with_default), "AVRO"))
    assert second != first
    # FORWARD: removing a field without a default breaks old readers.
    client.set_compatibility(subject, "FORWARD")
    removed = {**USER, "fields": [USER["fields"][0], with_default["fields"][2]]}
    assert not client.test_compatibility(subject, Schema(json.dumps(removed), "AVRO"))
    with pytest.raises(SchemaRegistryError):
        client.register_schema(subject, Schema(json.dumps(removed), "AVRO"))
    client.set_compatibility(subject, "NONE")
    assert client.register_schema(subject, Schema(json.dumps(removed), "AVRO")) > second
    # The same schema registered again: the same id, no new version.
    again = client.register_schema(subject, Schema(json.dumps(removed), "AVRO"))
    assert client.get_versions(subject) == [1, 2, 3] and again == client.get_latest_version(subject).schema_id


def test_a_subject_deleted_and_registered_again(cluster):
    client = _registry(cluster, 3)
    subject = f"gone-{uuid.uuid4().hex[:8]}"
    schema_id = client.register_schema(subject, Schema(json.dumps(USER), "AVRO"))
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_latest_version(subject)
    assert missing.value.error_code == 40401
    assert client.delete_subject(subject, permanent=True) == [1]
    assert client.register_schema(subject, Schema(json.dumps(USER), "AVRO")) == schema_id
    assert client.get_versions(subject) == [1]


def test_concurrent_registrations_on_every_node_get_unique_dense_ids(cluster):
    from concurrent.futures import ThreadPoolExecutor

    clients = [_registry(cluster, n) for n in (1, 2, 3)]
    tag = uuid.uuid4().hex[:6]

    def register(i: int) -> int:
        schema = {"type": "record", "name": f"C{tag}{i}", "fields": [{"name": "f", "type": "int"}]}
        return clients[i % 3].register_schema(f"conc-{tag}-{i}", Schema(json.dumps(schema), "AVRO"))

    with ThreadPoolExecutor(max_workers=6) as pool:
        ids = list(pool.map(register, range(24)))
    assert len(set(ids)) == 24  # one writer: no id handed out twice
    assert sorted(ids) == list(range(min(ids), min(ids) + 24))  # and none skipped

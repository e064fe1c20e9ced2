"""The registry on a secure cluster (the material of `cluster up --secure`): HTTPS with Basic
auth by the cluster's SCRAM users, ACLs on subjects through their topics; confluent-kafka's
AvroSerializer registers and produces through the SASL_SSL Kafka listener and reads back."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from raftlog.base.client_properties import load_properties

import node_harness as harness

pytestmark = pytest.mark.cluster

ADMIN_PASSWORD = "registry-admin-Pw-" + "9d2e1a"
DAVE_PASSWORD = "dave-Pw-" + "51c0fe"
USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with harness.secure_cluster(tmp_path_factory.mktemp("registry-secure"), ADMIN_PASSWORD) as cluster:
        yield cluster


def url(secure: Any) -> str:
    return secure.schema_registry(1)


def registry(secure: Any, user: str = "admin", password: str = ADMIN_PASSWORD) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url(secure), "basic.auth.user.info": f"{user}:{password}",
                                 "ssl.ca.location": str(secure.material.ca_file)})


def kafka_conf(secure: Any) -> dict[str, str]:
    conf = load_properties(secure.material.client_properties)
    conf.update({"bootstrap.servers": secure.kafka(1), "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD})
    return conf


def raw_status(secure: Any, path: str, headers: dict[str, str] | None = None) -> int:
    context = ssl.create_default_context(cafile=str(secure.material.ca_file))
    request = urllib.request.Request(url(secure) + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code


def test_basic_auth_is_required_and_checked(secure):
    assert raw_status(secure, "/subjects") == 401
    assert raw_status(secure, "/subjects", {"Authorization": "Basic YWRtaW46d3Jvbmc="}) == 401  # admin:wrong
    client = registry(secure, password="wrong")
    try:
        with pytest.raises(SchemaRegistryError) as refused:
            client.get_subjects()
        assert refused.value.http_status_code == 401
    finally:
        client.close()


def test_avro_serializer_over_tls_with_basic_auth(secure):
    client = registry(secure)
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    try:
        serializer = AvroSerializer(client, USER)
        producer = Producer(kafka_conf(secure))
        producer.produce(topic, value=serializer({"a": 7}, SerializationContext(topic, MessageField.VALUE)))
        assert producer.flush(30) == 0
        consumer = Consumer({**kafka_conf(secure), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got = None
        try:
            for _ in range(60):
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got = AvroDeserializer(client)(msg.value(), SerializationContext(topic, MessageField.VALUE))
                    break
        finally:
            consumer.close()
        assert got == {"a": 7}
    finally:
        client.close()


def test_acls_on_subjects_follow_their_topics(secure):
    admin = AdminClient(kafka_conf(secure))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("dave", info, DAVE_PASSWORD.encode())]).values():
        f.result(30)
    acls = [AclBinding(ResourceType.TOPIC, "dave-", ResourcePatternType.PREFIXED, "User:dave", "*",
                       operation, AclPermissionType.ALLOW)
            for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(acls).values():
        f.result(30)
    admin_client, dave = registry(secure), registry(secure, "dave", DAVE_PASSWORD)
    try:
        admin_client.register_schema("other-value", Schema(USER, "AVRO"))
        def register_as_dave():
            try:
                return dave.register_schema("dave-orders-value", Schema(USER, "AVRO"))
            except SchemaRegistryError as exc:
                assert exc.error_code == 40301, exc  # the ACLs have not reached the node yet
                return None

        secure.wait_for(register_as_dave, 30, "dave's ACLs to reach the node")
        assert dave.get_subjects() == ["dave-orders-value"]  # "other-value" is not listed
        with pytest.raises(SchemaRegistryError) as refused:
            dave.register_schema("other-value", Schema(USER, "AVRO"))
        assert (refused.value.http_status_code, refused.value.error_code) == (403, 40301)
        with pytest.raises(SchemaRegistryError) as refused:
            dave.set_compatibility(level="NONE")
        assert refused.value.error_code == 40301
        assert admin_client.get_versions("other-value") == [1]
    finally:
        admin_client.close()
        dave.close()

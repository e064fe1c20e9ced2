"""Real Kafka clients against a secure node's Kafka listener (SASL_SSL, ACLs; the material of `cluster up --secure`): confluent-kafka and aiokafka log in with SCRAM-SHA-512/256, produce and consume; users and ACLs are managed with Kafka's AdminClient (AlterUserScramCredentials, CreateAcls/DescribeAcls/DeleteAcls); an ACL that denies produce on one topic and allows another holds for a Kafka producer; a transactional producer follows the TransactionalId ACLs; a wrong password and no credentials get nothing; no log holds a password."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer as KConsumer
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as KProducer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from raftlog.base.client_properties import load_properties

import node_harness as harness

ADMIN_PASSWORD = "kafka-admin-Pw-" + "4f1c9e"
CAROL_PASSWORD = "carol-Pw-" + "77ab0d"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with harness.secure_cluster(tmp_path_factory.mktemp("kafka-secure"), ADMIN_PASSWORD) as cluster:
        yield cluster


def kafka_conf(secure: Any, user: str = "admin", password: str = ADMIN_PASSWORD,
               mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    """librdkafka settings: client.properties as it is, with another login if asked."""
    conf = load_properties(secure.material.client_properties)
    conf.update({"bootstrap.servers": secure.kafka(1), "sasl.username": user, "sasl.password": password,
                 "sasl.mechanism": mechanism})
    return conf


def produce(conf: dict[str, str], topic: str, values: list[bytes]) -> list[Any]:
    errors: list[Any] = []
    producer = KProducer({**conf, "message.timeout.ms": 20000})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    return errors


def consume(conf: dict[str, str], topic: str, count: int, group: str) -> list[bytes]:
    # Assigned partitions: Kafka's group APIs are another branch's work on this listener.
    consumer = KConsumer({**conf, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def log_end(secure: Any, topic: str) -> int:
    answer = secure.call(1, "list_offsets", partitions=[{"topic": topic, "partition": 0, "timestamp": -1}])
    return answer["partitions"][0]["offset"]


def admin(conf: dict[str, str]) -> AdminClient:
    return AdminClient(conf)


def test_confluent_kafka_logs_in_produces_and_consumes(secure):
    conf = kafka_conf(secure)
    client = admin(conf)  # kept referenced: a collected AdminClient fails its futures
    client.create_topics([NewTopic("ck-t", 1, 1)])["ck-t"].result(30)
    assert produce(conf, "ck-t", [b"one", b"two"]) == [None, None]
    assert consume(conf, "ck-t", 2, "ck-group") == [b"one", b"two"]


def test_aiokafka_logs_in_with_scram_sha_256(secure):
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    ssl_context = create_ssl_context(cafile=str(secure.material.ca_file))
    options = dict(bootstrap_servers=secure.kafka(1), security_protocol="SASL_SSL",
                   sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="admin",
                   sasl_plain_password=ADMIN_PASSWORD, ssl_context=ssl_context)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            await producer.send_and_wait("aio-t", b"via-aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition("aio-t", 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            msg = await asyncio.wait_for(consumer.getone(), 60)
            return [msg.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"via-aiokafka"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_kafka_python_logs_in_admin_produce_consume(secure, mechanism):
    """What kafka-python's own test_sasl_integration.py checks (it spawns its own Kafka and
    skips itself against an external broker, so scripts/client_suites cannot point it here):
    each of its mechanisms logs in (over TLS: raftlog offers PLAIN on TLS only), the admin
    client creates a topic, 100 records go to two partitions and all come back."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic as KpNewTopic

    topic = "kp-" + mechanism.lower()
    options = dict(bootstrap_servers=secure.kafka(1), security_protocol="SASL_SSL", sasl_mechanism=mechanism,
                   sasl_plain_username="admin", sasl_plain_password=ADMIN_PASSWORD,
                   ssl_cafile=str(secure.material.ca_file), ssl_check_hostname=False, request_timeout_ms=30_000)
    kp_admin = KafkaAdminClient(**options)
    try:
        kp_admin.create_topics([KpNewTopic(topic, 2, 1)])
        secure.wait_for(lambda: topic in kp_admin.list_topics(), 30, f"{topic} listed")
    finally:
        kp_admin.close()
    producer = KafkaProducer(**options)
    futures = [producer.send(topic, value=f"{i}".encode(), partition=i % 2) for i in range(100)]
    producer.flush(60)
    producer.close()
    assert all(f.succeeded() for f in futures)
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=60_000, **options)
    try:
        got = {0: 0, 1: 0}
        for i, message in enumerate(consumer, 1):
            got[message.partition] += 1
            if i >= 100:
                break
    finally:
        consumer.close()
    assert got == {0: 50, 1: 50}


def test_kafka_python_acl_filters_are_matched_as_written(secure):
    """kafka-python's test_create_describe_delete_acls: a filter principal '*' is no
    'User:<name>', and Kafka matches filter strings as written (no ACL has principal '*'):
    DescribeAcls and DeleteAcls answer none and no error (raftlog answered INVALID_REQUEST)."""
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient
    from kafka.admin import ResourcePattern as KpPattern
    from kafka.admin import ResourceType as KpType
    from kafka.errors import NoError

    kp_admin = KafkaAdminClient(bootstrap_servers=secure.kafka(1), security_protocol="SASL_SSL",
                                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
                                sasl_plain_password=ADMIN_PASSWORD, ssl_cafile=str(secure.material.ca_file),
                                ssl_check_hostname=False, request_timeout_ms=30_000)
    pattern = KpPattern(KpType.TOPIC, "kp-acl-topic")

    def described(principal: str | None) -> tuple[list[Any], Any]:
        return kp_admin.describe_acls(ACLFilter(principal=principal, host="*", operation=ACLOperation.ANY,
                                                permission_type=ACLPermissionType.ANY, resource_pattern=pattern))

    try:
        acl = ACL(principal="User:test", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW, resource_pattern=pattern)
        assert len(kp_admin.create_acls([acl])["succeeded"]) == 1
        secure.wait_for(lambda: len(described(None)[0]) == 1, 30, "the ACL described")
        assert described("*") == ([], NoError)
        [(_, deleted, error)] = kp_admin.delete_acls([ACLFilter(
            principal="*", host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=pattern)])
        assert (deleted, error) == ([], NoError)
        assert len(described("User:test")[0]) == 1  # still there
    finally:
        kp_admin.close()


def test_users_and_acls_through_kafkas_admin_api_and_a_deny_that_holds(secure):
    conf = kafka_conf(secure)
    client = admin(conf)
    for f in client.create_topics([NewTopic("k-allowed", 1, 1), NewTopic("k-denied", 1, 1)]).values():
        f.result(30)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for f in client.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", info, CAROL_PASSWORD.encode())]).values():
        f.result(30)
    described = client.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [i.mechanism for i in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_256]
    acls = [
        AclBinding(ResourceType.TOPIC, "k-", ResourcePatternType.PREFIXED, "User:carol", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "k-", ResourcePatternType.PREFIXED, "User:carol", "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "k-denied", ResourcePatternType.LITERAL, "User:carol", "*",
                   AclOperation.WRITE, AclPermissionType.DENY),
    ]
    for f in client.create_acls(acls).values():
        f.result(30)
    found = client.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol",
                                                  None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert sorted(str(b.permission_type) for b in found).count("AclPermissionType.DENY") == 1 and len(found) == 3
    carol = kafka_conf(secure, "carol", CAROL_PASSWORD, "SCRAM-SHA-256")
    assert produce(carol, "k-allowed", [b"ok"]) == [None]
    before = log_end(secure, "k-denied")
    denied = produce(carol, "k-denied", [b"no"])
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert log_end(secure, "k-denied") == before  # nothing reached the denied topic
    # Carol may not administer.
    carol_admin = admin(carol)
    with pytest.raises(KafkaException) as info:
        carol_admin.create_acls(acls[:1])[acls[0]].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The deny goes away: now the write lands.
    deleted = client.delete_acls([AclBindingFilter(ResourceType.TOPIC, "k-denied", ResourcePatternType.LITERAL,
                                                   "User:carol", "*", AclOperation.WRITE,
                                                   AclPermissionType.DENY)])
    assert [len(f.result(30)) for f in deleted.values()] == [1]
    assert secure.wait_for(lambda: produce(carol, "k-denied", [b"now"]) == [None], 30, "the deny's removal")
    # Carol removed: her next login fails.
    for f in client.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(30)
    assert login_errors(carol) == {KafkaError._AUTHENTICATION}


def login_errors(conf: dict[str, str]) -> set[int]:
    """The connection-level errors librdkafka reports (error_cb) for one metadata request."""
    seen: set[int] = set()
    producer = KProducer({**conf, "error_cb": lambda err: seen.add(err.code()), "reconnect.backoff.max.ms": 1000})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    # The error callback may come after list_topics gives up (a slow SCRAM exchange on a
    # loaded machine): poll for it under a deadline.
    deadline = time.monotonic() + 20
    while not seen - {KafkaError._ALL_BROKERS_DOWN} and time.monotonic() < deadline:
        producer.poll(0.5)
    return seen - {KafkaError._ALL_BROKERS_DOWN}


def test_wrong_password_and_no_credentials_get_nothing(secure):
    assert login_errors(kafka_conf(secure, password="wrong-password")) == {KafkaError._AUTHENTICATION}
    # TLS without SASL, and plaintext: the node closes such connections (no metadata comes).
    assert KafkaError._AUTHENTICATION not in login_errors({**kafka_conf(secure), "security.protocol": "SSL"})
    assert KafkaError._AUTHENTICATION not in login_errors({"bootstrap.servers": secure.kafka(1)})


DAVE_PASSWORD = "dave-Pw-" + "3e90c1"


def test_transactions_follow_kafkas_transactional_id_acls(secure):
    """The transaction port's guard on the Kafka listener, with a real transactional producer:
    WRITE (and DESCRIBE) on its transactional id lets it commit; another id is refused at once
    with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing reaches the topic."""
    conf = kafka_conf(secure)
    client = admin(conf)
    client.create_topics([NewTopic("tx-acl", 1, 1)])["tx-acl"].result(30)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for f in client.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("dave", info, DAVE_PASSWORD.encode())]).values():
        f.result(30)
    acls = [AclBinding(ResourceType.TOPIC, "tx-acl", ResourcePatternType.LITERAL, "User:dave", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    acls += [AclBinding(ResourceType.TRANSACTIONAL_ID, "dave-app", ResourcePatternType.LITERAL, "User:dave", "*", op,
                        AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in client.create_acls(acls).values():
        f.result(30)
    dave = kafka_conf(secure, "dave", DAVE_PASSWORD)

    def transactional(tid: str) -> KProducer:
        return KProducer({**dave, "transactional.id": tid, "message.timeout.ms": 20000})

    producer = transactional("dave-app")
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("tx-acl", b"committed")
    producer.commit_transaction(60)
    assert log_end(secure, "tx-acl") == 2  # the record and its COMMIT marker
    refused = transactional("other-app")
    with pytest.raises(KafkaException) as raised:
        refused.init_transactions(30)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert log_end(secure, "tx-acl") == 2


def test_zz_no_log_holds_a_password(secure):
    for path in secure.root.rglob("*.log"):
        text = path.read_text(errors="replace")
        for secret in (ADMIN_PASSWORD, CAROL_PASSWORD):
            assert secret not in text, f"{path} holds a password"
    metrics = json.dumps(secure.health(1)[1])
    assert ADMIN_PASSWORD not in metrics

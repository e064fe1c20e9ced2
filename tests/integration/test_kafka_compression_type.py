"""compression.type (issue 41) on a real 3-node cluster: a topic's compression.type makes the
leader store what producers send in that codec (recompressed as Kafka does: consumers read the
same records, an idempotent producer's batches keep their sequence), `producer` keeps the
producer's codec, and the broker's dynamic compression.type applies to topics left at
`producer`; bad values are refused with INVALID_CONFIG."""

from __future__ import annotations

import socket

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from confluent_kafka.admin import ResourceType as CResourceType
from kafka.protocol.consumer.fetch import FetchRequest

import node_harness as harness
from partition.batch import Compression, iter_headers
from test_kafka_broker_configs import BROKER, DELETE, INVALID_CONFIG, SET, TOPIC, _incremental
from test_kafka_unsupported import call

RECORDS = 50


def _stored_codecs(cluster: harness.NodeCluster, topic: str) -> set[Compression]:
    """The codecs of the batches partition 0's leader serves, read with a raw Fetch."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    leader = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
    host, _, port = cluster.kafka(leader).rpartition(":")
    T, P = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        answer = call(sock, FetchRequest[4](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
            topics=[T(topic=topic, partitions=[P(partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])]), 4, 1)
    records = answer.responses[0].partitions[0].records
    assert answer.responses[0].partitions[0].error_code == 0 and records
    return {h.compression for _, h in iter_headers(records)}


def _produce_and_read(cluster: harness.NodeCluster, topic: str, codec: str) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "compression.type": codec,
                         "enable.idempotence": True, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, value=b"record-%03d " % i + b"z" * 200, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < RECORDS:
            msgs = consumer.consume(RECORDS, timeout=30)
            assert msgs, f"{topic}: {len(values)} of {RECORDS} records read"
            for m in msgs:
                assert m.error() is None, m.error()
                values.append(m.value())
    finally:
        consumer.close()
    return values


def test_topic_and_broker_compression_type(cluster: harness.NodeCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    for name, configs in (("ct-gzip", {"compression.type": "gzip"}), ("ct-producer", {}),
                          ("ct-uncompressed", {"compression.type": "uncompressed"}), ("ct-broker", {})):
        admin.create_topics([NewTopic(name, 1, 3, config=configs)])[name].result(timeout=60)
    expected = [b"record-%03d " % i + b"z" * 200 for i in range(RECORDS)]

    assert _produce_and_read(cluster, "ct-gzip", "lz4") == expected
    assert _stored_codecs(cluster, "ct-gzip") == {Compression.GZIP}
    assert _produce_and_read(cluster, "ct-producer", "snappy") == expected
    assert _stored_codecs(cluster, "ct-producer") == {Compression.SNAPPY}
    assert _produce_and_read(cluster, "ct-uncompressed", "zstd") == expected
    assert _stored_codecs(cluster, "ct-uncompressed") == {Compression.NONE}

    assert _incremental(cluster, 1, BROKER, "", [("compression.type", SET, "zstd")]) == (0, None)
    try:
        def broker_zstd() -> bool:
            return all(next(iter(admin.describe_configs([ConfigResource(CResourceType.BROKER, str(n))]).values()))
                       .result(timeout=30)["compression.type"].value == "zstd" for n in sorted(cluster.configs))

        cluster.wait_for(broker_zstd, 60, "every broker's compression.type at zstd")
        assert _produce_and_read(cluster, "ct-broker", "gzip") == expected
        assert _stored_codecs(cluster, "ct-broker") == {Compression.ZSTD}
    finally:
        assert _incremental(cluster, 1, BROKER, "", [("compression.type", DELETE, None)]) == (0, None)
    assert _incremental(cluster, 1, BROKER, "", [("compression.type", SET, "brotli")])[0] == INVALID_CONFIG

    described = admin.describe_configs([ConfigResource(CResourceType.TOPIC, "ct-gzip")])
    entries = next(iter(described.values())).result(timeout=30)
    assert entries["compression.type"].value == "gzip"
    assert entries["min.insync.replicas"].value == "1"
    # as Kafka 4, whose new cluster holds a cluster-wide min.insync.replicas (KIP-966)
    assert entries["min.insync.replicas"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    code, message = _incremental(cluster, 1, TOPIC, "ct-gzip", [("compression.type", SET, "brotli")])
    assert code == INVALID_CONFIG and "brotli" in (message or ""), (code, message)

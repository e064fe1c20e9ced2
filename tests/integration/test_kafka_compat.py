"""Unmodified Kafka clients (kcat, confluent-kafka, kafka-python, aiokafka) against a real three-node cluster's Kafka listeners: metadata and leader discovery, produce with acks 0/1/all, keys, headers and every compression codec, consume with assign+seek and by timestamp, admin topics and configs, idempotent produce across a leader SIGKILL, and records crossing between the native and the Kafka protocol at the same offsets."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.base.errors import InvalidReplicationFactorError

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
)

TIMEOUT_S = 30


def create(cluster, name: str, partitions: int, rf: int = 3) -> None:
    with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
        def created() -> bool:
            try:
                admin.create_topic(name, partitions, rf)
            except InvalidReplicationFactorError:  # a restarted broker not unfenced yet: retry
                return False
            return True

        cluster.wait_for(created, 30, f"create {name}")
        cluster.wait_for(lambda: all(p.leader is not None for p in admin.describe_topics([name])[name].partitions),
                         20, f"leaders of {name}")


def wait_serving(cluster, topic: str, partitions: int) -> None:
    """Until each partition's leader answers ListOffsets for it (it leads, not only named)."""
    c = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "unused"})

    def serving() -> bool:
        try:
            return all(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5) is not None
                       for p in range(partitions))
        except KafkaException:
            return False

    try:
        cluster.wait_for(serving, 30, f"leaders of {topic} serving")
    finally:
        c.close()


def ck_consume(bootstrap: str, topic: str, partitions: int | list[int], expect: int, offset: int = 0) -> list[Any]:
    """`expect` records read by confluent-kafka from `offset` of partitions 0..partitions-1 (or
    of those listed), fewer if they do not come within TIMEOUT_S (test_kafka_lying_batches.py
    uses it too)."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        numbers = range(partitions) if isinstance(partitions, int) else partitions
        c.assign([TopicPartition(topic, p, offset) for p in numbers])
        out: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
        return out
    finally:
        c.close()


def test_metadata_lists_every_broker_at_its_kafka_listener(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.kafka(1)})  # one node is enough
    md = admin.list_topics(timeout=TIMEOUT_S)
    assert {(b.id, f"{b.host}:{b.port}") for b in md.brokers.values()} == {
        (n, cluster.kafka(n)) for n in (1, 2, 3)}
    status = cluster.status()
    assert {b["id"]: b["kafka"] for b in status["brokers"]} == {n: cluster.kafka(n) for n in (1, 2, 3)}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_produce_every_codec_keys_headers_and_read_back(cluster, acks):
    topic = f"ck-{acks}"
    create(cluster, topic, 3)
    if acks == "0":  # unanswered: a named leader not serving yet drops it silently, as Kafka does
        wait_serving(cluster, topic, 3)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    sent = []
    for codec in codecs:
        p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": acks,
                        "compression.type": codec, "linger.ms": 5})
        for i in range(50):
            key, value = f"{codec}-k{i}".encode(), f"{codec}-v{i}".encode() * 3
            p.produce(topic, value, key, headers=[("h", codec.encode()), ("n", b"%d" % i)])
            sent.append((key, value))
        assert p.flush(TIMEOUT_S) == 0
    got = ck_consume(cluster.kafka_bootstrap(), topic, 3, len(sent))
    assert sorted((m.key(), m.value()) for m in got) == sorted(sent)
    for m in got:
        headers = dict(m.headers())
        assert headers["h"] == m.key().split(b"-")[0]
    # offsets per partition are dense from the first record's offset (no gaps in what clients see)
    for part in range(3):
        offsets = sorted(m.offset() for m in got if m.partition() == part)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def test_confluent_idempotent_produce_across_leader_kill_is_exactly_once(cluster):
    topic = "ck-kill"
    create(cluster, topic, 1)
    with Admin(cluster.bootstrap()) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader
    acked: list[int] = []
    errors: list[Any] = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(int(msg.value()))
        else:
            errors.append(err)

    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "enable.idempotence": True,
                    "acks": "all", "linger.ms": 2, "message.timeout.ms": 60_000})
    total = 4000
    for i in range(total):
        p.produce(topic, b"%d" % i, on_delivery=on_delivery)
        if i == total // 3:
            p.flush(TIMEOUT_S)
            cluster.kill(leader)  # SIGKILL by PID, mid-stream
        if i % 200 == 0:
            p.poll(0)
    assert p.flush(90) == 0
    assert len(acked) + len(errors) == total
    assert len(acked) > total // 2
    survivors = ",".join(cluster.kafka(n) for n in cluster.live())
    got = ck_consume(survivors, topic, 1, total)
    values = Counter(int(m.value()) for m in got)
    assert not [v for v, n in values.items() if n > 1], "duplicates"
    assert not [v for v in acked if v not in values], "acknowledged but lost"
    assert [int(m.value()) for m in sorted(got, key=lambda m: m.offset())] == sorted(values)
    cluster.start(leader)
    cluster.wait_ready(timeout_s=60)


def test_kafka_python_assign_seek_and_offsets_for_times(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "kp"
    create(cluster, topic, 2)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), acks="all",
                                   compression_type="gzip")
    before = int(time.time() * 1000)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                             headers=[("i", b"%d" % i)]) for i in range(40)]
    metas = [f.get(TIMEOUT_S) for f in futures]
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(), enable_auto_commit=False,
                                   consumer_timeout_ms=5000)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    first = min(m.offset for m in metas if m.partition == 0)
    consumer.seek(tp, first + 5)
    got = [r for r in consumer]
    assert [r.value for r in got] == [b"v%d" % i for i in range(10, 40, 2)]
    found = consumer.offsets_for_times({tp: before})[tp]
    assert found is not None and found.offset == first
    assert consumer.end_offsets([tp])[tp] == first + 20
    consumer.close()


def test_kafka_python_every_codec_it_has(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "kp-codecs"
    create(cluster, topic, 2)
    sent = []
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), acks="all",
                                       compression_type=codec, linger_ms=5)
        futures = []
        for i in range(20):
            key, value = f"{codec}-{i}".encode(), f"{codec} value {i}".encode() * 4
            futures.append(producer.send(topic, key=key, value=value, partition=i % 2))
            sent.append((key, value))
        for f in futures:
            f.get(TIMEOUT_S)
        producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(), enable_auto_commit=False,
                                   auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([kafka.TopicPartition(topic, p) for p in (0, 1)])
    got = sorted((r.key, r.value) for r in consumer)
    consumer.close()
    assert got == sorted(sent)


def test_confluent_offsets_for_times(cluster):
    topic = "ck-times"
    create(cluster, topic, 1)
    base = int(time.time() * 1000) + 60_000  # ahead of anything the broker stamped itself
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    offsets: list[int] = []
    for i in range(10):
        p.produce(topic, b"t%d" % i, partition=0, timestamp=base + i * 1000,
                  on_delivery=lambda err, msg: offsets.append(msg.offset()))
        p.flush(TIMEOUT_S)  # one batch each: ListOffsets answers at batch granularity
    c = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "unused"})
    try:
        [found] = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=TIMEOUT_S)
        assert found.error is None and found.offset == offsets[5]
        [none] = c.offsets_for_times([TopicPartition(topic, 0, base + 10**9)], timeout=TIMEOUT_S)
        assert none.offset == -1  # no record that late: Kafka's OFFSET_END answer
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        assert (lo, hi) == (offsets[0], offsets[-1] + 1)
    finally:
        c.close()


AIOKAFKA_012 = Path(sys.prefix) / "aiokafka-0.12"  # scripts/test installs it beside the newest
_AIOKAFKA_012_SCRIPT = """
import asyncio, sys, aiokafka
assert aiokafka.__version__ == "0.12.0", aiokafka.__version__
bootstrap, topic = sys.argv[1:3]
async def run():
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    await producer.start()
    try:
        for i in range(30):
            await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2)
    finally:
        await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                         auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([aiokafka.TopicPartition(topic, p) for p in (0, 1)])
        await consumer.seek_to_beginning()
        out = []
        while len(out) < 30:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(r.value for r in records)
        print(sorted(out) == sorted(b"v%d" % i for i in range(30)))
    finally:
        await consumer.stop()
asyncio.run(asyncio.wait_for(run(), 60))
"""


@pytest.mark.skipif(not (AIOKAFKA_012 / "aiokafka").is_dir(),
                    reason="aiokafka 0.12 is not installed beside the venv (scripts/test installs it)")
def test_aiokafka_012_produce_and_consume(cluster):
    topic = "aio012"
    create(cluster, topic, 2)
    env = {**os.environ, "PYTHONPATH": str(AIOKAFKA_012)}
    out = subprocess.run([sys.executable, "-c", _AIOKAFKA_012_SCRIPT, cluster.kafka_bootstrap(), topic],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"


def test_aiokafka_produce_and_consume(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "aio"
    create(cluster, topic, 2)

    async def run() -> list[Any]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), acks="all")
        await producer.start()
        try:
            for i in range(30):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(),
                                             enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in (0, 1)])
            await consumer.seek_to_beginning()
            out: list[Any] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(out) < 30 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    out.extend(records)
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(30))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/test installs it)")
def test_kcat_produce_and_consume(cluster):
    topic = "kcat"
    create(cluster, topic, 1)
    lines = "".join(f"k{i}:v{i}\n" for i in range(20))
    subprocess.run(["kcat", "-b", cluster.kafka(1), "-P", "-t", topic, "-K:", "-z", "lz4"],
                   input=lines.encode(), check=True, timeout=TIMEOUT_S)
    out = subprocess.run(["kcat", "-b", cluster.kafka(2), "-C", "-t", topic, "-e", "-f", "%k=%s\n"],
                         capture_output=True, check=True, timeout=TIMEOUT_S).stdout.decode()
    assert out.splitlines() == [f"k{i}=v{i}" for i in range(20)]


def test_confluent_admin_topics_and_configs(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    futures = admin.create_topics([NewTopic("adm", 4, 3, config={"retention.ms": "3600000"})])
    futures["adm"].result(TIMEOUT_S)
    md = admin.list_topics("adm", timeout=TIMEOUT_S)
    assert len(md.topics["adm"].partitions) == 4
    res = ConfigResource(ConfigResource.Type.TOPIC, "adm")
    configs = admin.describe_configs([res])[res].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["segment.bytes"].is_default
    alter = ConfigResource(ConfigResource.Type.TOPIC, "adm", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([alter])[alter].result(TIMEOUT_S)
    configs = admin.describe_configs([res])[res].result(TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].is_default
    admin.delete_topics(["adm"])["adm"].result(TIMEOUT_S)
    cluster.wait_for(lambda: "adm" not in admin.list_topics(timeout=TIMEOUT_S).topics, 20, "adm deleted")


def test_create_partitions_from_confluent_and_kafka_python(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic("grow", 2, 3)])["grow"].result(TIMEOUT_S)
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(TIMEOUT_S)
    cluster.wait_for(lambda: len(admin.list_topics("grow", timeout=TIMEOUT_S).topics["grow"].partitions) == 4,
                     20, "grow has 4 partitions")
    with pytest.raises(Exception) as info:  # never fewer
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(TIMEOUT_S)
    assert "INVALID_PARTITIONS" in str(info.value)
    kafka = pytest.importorskip("kafka")
    from kafka.admin import NewPartitions as KPNewPartitions

    kp = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    try:
        kp.create_partitions({"grow": KPNewPartitions(6)})
    finally:
        kp.close()
    # Records reach a new partition and read back from it.
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "topic.metadata.refresh.interval.ms": 500})
    p.produce("grow", b"in-5", partition=5)
    assert p.flush(TIMEOUT_S) == 0
    # Each node's metadata learns of new partitions on its own, as in Kafka; a consumer that
    # asks a node which does not know partition 5 yet would wait for its next refresh.
    for n in (1, 2, 3):
        one = AdminClient({"bootstrap.servers": cluster.kafka(n)})
        cluster.wait_for(lambda: len(one.list_topics("grow", timeout=TIMEOUT_S).topics["grow"].partitions) == 6,
                         20, f"node {n} knows grow's 6 partitions")
    [m] = ck_consume(cluster.kafka_bootstrap(), "grow", 6, 1)
    assert (m.partition(), m.offset(), m.value()) == (5, 0, b"in-5")


def test_delete_records_from_confluent_and_kafka_python(cluster):
    topic = "trim"
    create(cluster, topic, 1)
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    for i in range(20):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(TIMEOUT_S) == 0
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    [future] = admin.delete_records([TopicPartition(topic, 0, 8)]).values()
    assert future.result(TIMEOUT_S).low_watermark == 8
    got = ck_consume(cluster.kafka_bootstrap(), topic, 1, 12, offset=-2)  # OFFSET_BEGINNING
    assert [(m.offset(), m.value()) for m in got] == [(i, b"v%d" % i) for i in range(8, 20)]
    kafka = pytest.importorskip("kafka")
    kp = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    try:
        result = kp.delete_records({kafka.TopicPartition(topic, 0): 15})
    finally:
        kp.close()
    assert [v for v in result.values()][0]["low_watermark"] == 15
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:  # the native side too
        c.assign([(topic, 0)])
        c.seek_to_beginning()
        assert c.position((topic, 0)) == 15


def test_native_and_kafka_protocols_see_the_same_records_at_the_same_offsets(cluster):
    topic = "cross"
    create(cluster, topic, 1)
    with Producer(cluster.bootstrap(), acks="all") as p:
        native = [p.send(topic, b"n%d" % i, key=b"k%d" % i, partition=0).result(TIMEOUT_S) for i in range(10)]
    kp = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    offsets: list[int] = []
    for i in range(10):
        kp.produce(topic, b"c%d" % i, b"k%d" % i, partition=0,
                   on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert kp.flush(TIMEOUT_S) == 0
    got = ck_consume(cluster.kafka_bootstrap(), topic, 1, 20)
    assert [(m.offset(), m.value()) for m in got] == (
        [(off, b"n%d" % i) for i, (_, off) in enumerate(native)] + [(off, b"c%d" % i) for i, off in enumerate(offsets)])
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        records: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < 20 and time.monotonic() < deadline:
            records.extend(c.poll(500))
    assert [(r.offset, r.value) for r in records] == [(m.offset(), m.value()) for m in got]


def test_auto_create_on_metadata(cluster):
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    p.produce("auto-created", b"x")
    assert p.flush(TIMEOUT_S) == 0
    with Admin(cluster.bootstrap()) as admin:
        assert "auto-created" in admin.describe_topics(["auto-created"])


"""The cells of README's Kafka client table that test_kafka_compat.py leaves to other clients, against a real three-node cluster: kcat, kafka-python and aiokafka produce idempotently across a SIGKILL of the partition leader with every acked record exactly once; aiokafka (offsets_for_times) and kcat (`-o s@<ms>`) consume by timestamp; kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient create, describe, alter and delete topics and their configs, and aiokafka grows a topic (CreatePartitions) and trims a partition (DeleteRecords)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections import Counter
from typing import Any

import pytest

from raftlog.base.errors import InvalidReplicationFactorError
from raftlog.client import Admin

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402


TIMEOUT_S = 30
TOTAL = 3000  # records per idempotent run; the leader dies after the first third is acked

# See test_kafka_compat.py: kafka-python 3.0.12 leaks the socket of a connect that fails (to a
# node busy in a leader change, or the one a test killed); only that never-connected socket is
# ignored. For the whole module: the garbage collector may close it during a later test (a
# gc.collect() at the end of the kafka-python test does not reach it).
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket\.socket fd=\d+, family=2, type=1, proto=6, "
    r"laddr=\('0\.0\.0\.0', \d+\)>\n:pytest.PytestUnraisableExceptionWarning")


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


def leader_of(cluster, topic: str) -> int:
    """Partition 0's leader (polled: just after a node restart the answer may be "none yet")."""
    with Admin(cluster.bootstrap()) as admin:
        return cluster.wait_for(lambda: admin.describe_topics([topic])[topic].partitions[0].leader,
                                20, f"leader of {topic}")


def ck_consume(bootstrap: str, topic: str, expect: int) -> list[Any]:
    """Every record of partition 0 from offset 0, read by confluent-kafka (the reference reader)."""
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
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


def assert_exactly_once(cluster, topic: str, acked: list[int], failed: int) -> None:
    assert len(acked) + failed == TOTAL
    assert len(acked) > TOTAL // 2, f"only {len(acked)} of {TOTAL} acked"
    survivors = ",".join(cluster.kafka(n) for n in cluster.live())
    got = ck_consume(survivors, topic, TOTAL)
    values = Counter(int(m.value()) for m in got)
    assert not [v for v, n in values.items() if n > 1], "duplicates"
    assert not [v for v in acked if v not in values], "acknowledged but lost"
    # one partition, one producer: the log holds the records in the order they were sent
    assert [int(m.value()) for m in sorted(got, key=lambda m: m.offset())] == sorted(values)


def restart(cluster, node: int) -> None:
    """Start a node a test killed (only if it is down: a second process would orphan the first)."""
    if node not in cluster.live():
        cluster.start(node)
    cluster.wait_ready(timeout_s=60)


def test_kafka_python_idempotent_produce_across_leader_kill_is_exactly_once(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "kp-kill"
    create(cluster, topic, 1)
    leader = leader_of(cluster, topic)
    acked: list[int] = []
    errors: list[Any] = []
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), enable_idempotence=True,
                                   acks="all", linger_ms=2, delivery_timeout_ms=90_000,
                                   request_timeout_ms=10_000)
    try:
        for i in range(TOTAL):
            future = producer.send(topic, b"%d" % i, partition=0)
            future.add_callback(lambda meta, i=i: acked.append(i))
            future.add_errback(errors.append)
            if i == TOTAL // 3:
                producer.flush(TIMEOUT_S)
                assert len(acked) == i + 1 and not errors
                cluster.kill(leader)  # SIGKILL by PID, mid-stream
        producer.flush(120)
    finally:
        producer.close(timeout=10)
        try:
            assert_exactly_once(cluster, topic, acked, len(errors))
        finally:
            restart(cluster, leader)


def test_aiokafka_idempotent_produce_across_leader_kill_is_exactly_once(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "aio-kill"
    create(cluster, topic, 1)
    leader = leader_of(cluster, topic)

    async def run() -> list[Any]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(),
                                             enable_idempotence=True, acks="all", linger_ms=2,
                                             request_timeout_ms=10_000)
        await producer.start()
        try:
            futures = []
            for i in range(TOTAL):
                futures.append(await producer.send(topic, b"%d" % i, partition=0))
                if i == TOTAL // 3:
                    await producer.flush()
                    assert all(f.done() and f.exception() is None for f in futures)
                    cluster.kill(leader)  # SIGKILL by PID, mid-stream
            return await asyncio.gather(*futures, return_exceptions=True)
        finally:
            await producer.stop()

    try:
        results = asyncio.run(asyncio.wait_for(run(), 150))
        acked = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        assert_exactly_once(cluster, topic, acked, TOTAL - len(acked))
    finally:
        restart(cluster, leader)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/test installs it)")
def test_kcat_idempotent_produce_across_leader_kill_is_exactly_once(cluster):
    topic = "kcat-kill"
    create(cluster, topic, 1)
    leader = leader_of(cluster, topic)
    # kcat exits non-zero when any message fails delivery, so exit 0 means every line was acked
    kcat = subprocess.Popen(["kcat", "-b", cluster.kafka_bootstrap(), "-P", "-t", topic, "-p", "0",
                             "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=2",
                             "-X", "message.timeout.ms=90000"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = TOTAL // 3
        kcat.stdin.write(b"".join(b"%d\n" % i for i in range(first)))
        kcat.stdin.flush()
        # kcat reads stdin in blocks and keeps a partial one back, so wait for most of the first
        # third, not all of it: what matters is that the leader dies with records in flight
        watcher = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "unused"})
        try:
            cluster.wait_for(lambda: watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] >= first // 2,
                             TIMEOUT_S, "half of the first third acked")
        finally:
            watcher.close()
        cluster.kill(leader)  # SIGKILL by PID, mid-stream
        _, stderr = kcat.communicate(b"".join(b"%d\n" % i for i in range(first, TOTAL)), timeout=150)
        assert kcat.returncode == 0, stderr.decode()[-2000:]
        assert_exactly_once(cluster, topic, list(range(TOTAL)), 0)
    finally:
        if kcat.poll() is None:
            kcat.kill()
            kcat.wait(10)
        restart(cluster, leader)


def produce_stamped(cluster, topic: str, base: int) -> list[int]:
    """Ten records stamped base, base+1s, ... (one batch each: ListOffsets answers at batch granularity)."""
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    offsets: list[int] = []
    for i in range(10):
        p.produce(topic, b"t%d" % i, partition=0, timestamp=base + i * 1000,
                  on_delivery=lambda err, msg: offsets.append(msg.offset()))
        assert p.flush(TIMEOUT_S) == 0
    assert len(offsets) == 10
    return offsets


def test_aiokafka_offsets_for_times_and_consume_from_there(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "aio-times"
    create(cluster, topic, 1)
    base = int(time.time() * 1000) + 60_000  # ahead of anything the broker stamped itself
    offsets = produce_stamped(cluster, topic, base)
    tp = aiokafka.TopicPartition(topic, 0)

    async def run() -> tuple[Any, Any, Any, Any, list[Any]]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(),
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            found = (await consumer.offsets_for_times({tp: base + 4500}))[tp]
            late = (await consumer.offsets_for_times({tp: base + 10**9}))[tp]
            low = (await consumer.beginning_offsets([tp]))[tp]
            high = (await consumer.end_offsets([tp]))[tp]
            consumer.assign([tp])
            consumer.seek(tp, found.offset)
            out: list[Any] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(out) < 5 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(records)
            return found, late, low, high, out
        finally:
            await consumer.stop()

    found, late, low, high, out = asyncio.run(asyncio.wait_for(run(), 90))
    assert (found.offset, found.timestamp) == (offsets[5], base + 5000)
    assert late is None  # no record that late
    assert (low, high) == (offsets[0], offsets[-1] + 1)
    assert [(r.offset, r.timestamp, r.value) for r in out] == [
        (offsets[i], base + i * 1000, b"t%d" % i) for i in range(5, 10)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/test installs it)")
def test_kcat_consume_from_a_timestamp(cluster):
    topic = "kcat-times"
    create(cluster, topic, 1)
    base = int(time.time() * 1000) + 60_000
    offsets = produce_stamped(cluster, topic, base)
    out = subprocess.run(["kcat", "-b", cluster.kafka(3), "-C", "-t", topic, "-p", "0",
                          "-o", f"s@{base + 4500}", "-e", "-f", "%o %T %s\n"],
                         capture_output=True, check=True, timeout=TIMEOUT_S).stdout.decode()
    assert out.splitlines() == [f"{offsets[i]} {base + i * 1000} t{i}" for i in range(5, 10)]
    # and an exact hit starts at that record
    out = subprocess.run(["kcat", "-b", cluster.kafka(1), "-C", "-t", topic, "-p", "0",
                          "-o", f"s@{base + 8000}", "-e", "-f", "%s\n"],
                         capture_output=True, check=True, timeout=TIMEOUT_S).stdout.decode()
    assert out.splitlines() == ["t8", "t9"]


def test_kafka_python_admin_topics_and_configs(cluster):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = "kp-adm"
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=15_000)
    try:
        result = admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 3,
                                              "configs": {"retention.ms": "3600000"}}})
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        cluster.wait_for(lambda: topic in admin.list_topics(), 20, f"{topic} listed")
        [described] = admin.describe_topics([topic])
        assert described["name"] == topic and described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2, 3]
        assert all(len(p["replica_nodes"]) == 3 for p in described["partitions"])

        res = ConfigResource(ConfigResourceType.TOPIC, topic)

        def modified_becomes(expected: dict[str, str]) -> None:
            # DescribeConfigs answers from the answering node's metadata image, which follows
            # the controller's a moment later (as a Kafka broker's metadata cache does)
            cluster.wait_for(lambda: {k: v["value"] for k, v in admin.describe_configs([res])["topic"][topic].items()}
                             == expected, 20, f"{topic} configs {expected}")

        modified_becomes({"retention.ms": "3600000"})  # kafka-python's default filter: modified only
        everything = admin.describe_configs([res], config_filter="all")["topic"][topic]
        assert everything["retention.ms"]["value"] == "3600000"
        assert everything["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert everything["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"cleanup.policy": "compact"})])
        modified_becomes({"retention.ms": "3600000", "cleanup.policy": "compact"})
        admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=["retention.ms"])])
        modified_becomes({"cleanup.policy": "compact"})

        result = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        cluster.wait_for(lambda: topic not in admin.list_topics(), 20, f"{topic} deleted")
    finally:
        admin.close()


def test_aiokafka_admin_topics_and_configs(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = "aio-adm"

    def configs_of(responses: list[Any]) -> dict[str, tuple[str, bool]]:
        """{name: (value, is_default)} from DescribeConfigs v1+ (config_source 5 is DEFAULT_CONFIG);
        {} while the answering node does not know the topic yet."""
        [response] = responses
        [resource] = response.to_object()["resources"]
        assert resource["resource_name"] == topic
        if resource["error_code"] != 0:
            return {}
        return {c["config_names"]: (c["config_value"], c["config_source"] == 5) for c in resource["config_entries"]}

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=15_000)
        await admin.start()
        try:
            created = (await admin.create_topics([NewTopic(topic, 4, 3, topic_configs={"retention.ms": "3600000"})]))
            assert [(t[0], t[1]) for t in created.topic_errors] == [(topic, 0)]
            deadline = time.monotonic() + 20
            while topic not in await admin.list_topics():
                assert time.monotonic() < deadline, f"{topic} never listed"
                await asyncio.sleep(0.2)  # poll under a deadline
            [described] = await admin.describe_topics([topic])
            assert described["topic"] == topic and described["error_code"] == 0
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2, 3]
            assert all(len(p["replicas"]) == 3 for p in described["partitions"])

            res = ConfigResource(ConfigResourceType.TOPIC, topic)

            async def configs_become(key: str, value: tuple[str, bool]) -> dict[str, tuple[str, bool]]:
                # DescribeConfigs answers from the answering node's metadata image, which
                # follows the controller's a moment later (as a Kafka broker's cache does)
                deadline = time.monotonic() + 20
                while (configs := configs_of(await admin.describe_configs([res]))).get(key) != value:
                    assert time.monotonic() < deadline, f"{key} is {configs.get(key)}, never {value}"
                    await asyncio.sleep(0.2)
                return configs

            configs = await configs_become("retention.ms", ("3600000", False))
            assert configs["segment.bytes"][1] is True
            # AlterConfigs (not incremental): the set given replaces the topic's whole set
            [altered] = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                                  configs={"cleanup.policy": "compact"})])
            assert [r[0] for r in altered.resources] == [0]
            configs = await configs_become("cleanup.policy", ("compact", False))
            assert configs["retention.ms"][1] is True  # in the same change: not in the new set

            # CreatePartitions: 4 -> 6, and never fewer
            await admin.create_partitions({topic: NewPartitions(6)})
            deadline = time.monotonic() + 20
            while len((await admin.describe_topics([topic]))[0]["partitions"]) != 6:
                assert time.monotonic() < deadline, f"{topic} never had 6 partitions"
                await asyncio.sleep(0.2)
            with pytest.raises(aiokafka.errors.InvalidPartitionsError):
                await admin.create_partitions({topic: NewPartitions(5)})
            # DeleteRecords: the low watermark moves and the records below it are gone
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), acks="all")
            await producer.start()
            try:
                sent = [await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, partition=5)  # keys: compacted
                        for i in range(10)]
            finally:
                await producer.stop()
            tp = aiokafka.TopicPartition(topic, 5)
            assert await admin.delete_records({tp: RecordsToDelete(sent[6].offset)}) == {tp: sent[6].offset}
            consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(),
                                                 enable_auto_commit=False)
            await consumer.start()
            try:
                assert (await consumer.beginning_offsets([tp]))[tp] == sent[6].offset
            finally:
                await consumer.stop()

            deleted = await admin.delete_topics([topic])
            assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [(topic, 0)]
            deadline = time.monotonic() + 20
            while topic in await admin.list_topics():
                assert time.monotonic() < deadline, f"{topic} never deleted"
                await asyncio.sleep(0.2)
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(run(), 120))

"""Topic configs Kafka accepts that raftlog refused (issue 40: librdkafka 0052 and 0077,
KafkaJS's produce test): `message.timestamp.type=LogAppendTime` (the leader stamps each batch
at its append: a consumer reads LogAppendTime and the leader's clock, the Produce answer
carries it), `message.timestamp.before/after.max.ms` and `difference.max.ms` (a batch out of
bounds is refused with INVALID_TIMESTAMP and nothing is stored), and the cleaner's
`min.cleanable.dirty.ratio`, `max.compaction.lag.ms`, `file.delete.delay.ms` (stored, shown by
DescribeConfigs), each bad value still refused naming the key; through confluent-kafka."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

pytestmark = pytest.mark.cluster

DEADLINE_S = 60  # an upper bound on waiting, never a speed claim
HOUR_MS = 3_600_000


def _create(cluster, configs: dict[str, str]) -> str:
    name = f"ts-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic(name, 1, 3, config=configs)], operation_timeout=30)[name].result(timeout=60)
    return name


def _produce(cluster, topic: str, timestamp_ms: int = 0) -> tuple[KafkaError | None, int]:
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "message.timeout.ms": 30_000,
                  "retries": 0})
    out: list = []
    p.produce(topic, b"v", timestamp=timestamp_ms, on_delivery=lambda err, msg: out.append((err, msg)))
    assert p.flush(DEADLINE_S) == 0
    err, msg = out[0]
    return err, -1 if err else msg.offset()


def _read_one(cluster, topic: str):
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                return msg
        raise AssertionError(f"nothing read from {topic} within {DEADLINE_S}s")
    finally:
        c.close()


def test_log_append_time_stamps_the_batch_with_the_leaders_clock(cluster):
    topic = _create(cluster, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    err, offset = _produce(cluster, topic, timestamp_ms=1_000_000)  # a producer time far in the past
    after = int(time.time() * 1000)
    assert err is None and offset == 0, err
    kind, ts = _read_one(cluster, topic).timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME, kind
    assert before - 5_000 <= ts <= after + 5_000, (before, ts, after)  # the leader's clock, not 1_000_000


def test_timestamps_out_of_the_topics_bounds_are_refused_with_invalid_timestamp(cluster):
    topic = _create(cluster, {"message.timestamp.before.max.ms": str(HOUR_MS),
                              "message.timestamp.after.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    for ts in (now - 24 * HOUR_MS, now + 24 * HOUR_MS):
        err, _ = _produce(cluster, topic, timestamp_ms=ts)
        assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    err, offset = _produce(cluster, topic, timestamp_ms=now)
    assert err is None and offset == 0, err  # nothing of the refused batches was stored
    kind, ts = _read_one(cluster, topic).timestamp()
    assert (kind, ts) == (TIMESTAMP_CREATE_TIME, now)
    old = _create(cluster, {"message.timestamp.difference.max.ms": str(HOUR_MS)})  # Kafka 3's name
    err, _ = _produce(cluster, old, timestamp_ms=now - 24 * HOUR_MS)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err


def test_the_cleaners_configs_are_stored_and_bad_values_refused_naming_the_key(cluster):
    stored = {"min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "60000", "file.delete.delay.ms": "0"}
    topic = _create(cluster, {"cleanup.policy": "compact", **stored})
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([res])[res].result(timeout=30)
    assert {k: described[k].value for k in stored} == stored
    name = f"bad-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as info:
        admin.create_topics([NewTopic(name, 1, 1, config={"min.cleanable.dirty.ratio": "2"})])[name].result(timeout=60)
    assert "min_cleanable_dirty_ratio" in str(info.value) or "min.cleanable.dirty.ratio" in str(info.value)

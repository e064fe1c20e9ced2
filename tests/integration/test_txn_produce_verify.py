"""A transactional Produce whose KIP-890 verification meets a coordinator still completing the previous transaction, on a real 3-node cluster (issue 40: librdkafka's 0103_transactions failed its transaction on a Produce answered CONCURRENT_TRANSACTIONS): the Produce is answered NOT_ENOUGH_REPLICAS, as Kafka's ReplicaManager translates it, which clients without transactions v2 retry. confluent-kafka aborting and beginning transactions back to back, each producing at once to four partitions, never has a transaction fail, and a read_committed reader gets exactly the committed records."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from test_kafka_groups import create

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.cluster

DEADLINE_S = 60  # an upper bound on waiting, never a speed claim
ROUNDS, PER_ROUND, PARTITIONS = 12, 8, 4


def test_back_to_back_transactions_never_fail_on_verification(cluster):
    topic = f"verify-{uuid.uuid4().hex[:6]}"
    create(cluster, topic, PARTITIONS)
    p = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"tid-{topic}",
                     "transaction.timeout.ms": 60_000})
    p.init_transactions(DEADLINE_S)
    committed = set()
    for r in range(ROUNDS):
        p.begin_transaction()
        values = [f"{r}-{i}".encode() for i in range(PER_ROUND)]
        for i, v in enumerate(values):
            p.produce(topic, v, partition=i % PARTITIONS)
        if r % 2 == 0:  # an abort, then at once the next transaction's records: the abort's markers may be in flight
            p.abort_transaction(DEADLINE_S)
        else:
            p.commit_transaction(DEADLINE_S)
            committed.update(values)
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": f"g-{topic}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed"})
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(seen) < len(committed) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
    finally:
        c.close()
    assert sorted(seen) == sorted(committed)


def test_a_fenced_producers_produce_is_a_fatal_error(cluster):
    """librdkafka's do_test_fenced_txn: once a second producer with the same transactional id
    initialised, the first one's Produce is answered INVALID_PRODUCER_EPOCH (Kafka's answer; not
    PRODUCER_FENCED, which librdkafka takes as an abortable error) and the first producer
    raises its fatal error."""
    topic = f"fenced-{uuid.uuid4().hex[:6]}"
    create(cluster, topic, PARTITIONS)
    fatal: list[Any] = []
    conf = {"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"tid-{topic}",
            "transaction.timeout.ms": 60_000}
    p1 = ck.Producer({**conf, "error_cb": lambda e: fatal.append(e) if e.fatal() else None})
    p1.init_transactions(DEADLINE_S)
    p1.begin_transaction()
    for i in range(PARTITIONS):
        p1.produce(topic, b"before", partition=i)
    assert p1.flush(DEADLINE_S) == 0
    p2 = ck.Producer(conf)
    p2.init_transactions(DEADLINE_S)  # fences p1
    for i in range(PARTITIONS):
        p1.produce(topic, b"after", partition=i)
    deadline = time.monotonic() + DEADLINE_S
    while not fatal and time.monotonic() < deadline:
        try:
            p1.poll(0.2)
        except ck.KafkaException as exc:  # confluent-kafka raises the fatal error from poll
            fatal.append(exc.args[0])
    assert fatal and fatal[0].fatal() and fatal[0].code() == ck.KafkaError._FENCED, fatal
    p2.begin_transaction()
    p2.produce(topic, b"p2", partition=0)
    p2.commit_transaction(DEADLINE_S)

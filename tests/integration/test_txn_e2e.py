"""Transactions end to end on a real 3-node cluster (issue 42): confluent-kafka's transactional producer across 3 partitions with a read_committed consumer that never sees aborted or open records while read_uncommitted sees them; consume-transform-produce with send_offsets_to_transaction (offsets land at commit only); a fenced zombie's late writes are never visible; a partition leader SIGKILLed mid-transaction, then commit: every record once; a restarted node rebuilds the LSO and the aborted index; kafka-python reads committed."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from test_kafka_groups import create

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.cluster

DEADLINE_S = 60  # an upper bound on waiting, never a speed claim


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def cluster(cluster: Any) -> Any:
    return cluster


def producer(cluster: Any, tid: str, **extra: Any) -> Any:
    p = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": tid,
                     "transaction.timeout.ms": 60_000, **extra})
    p.init_transactions(DEADLINE_S)
    return p


def consume_all(cluster: Any, topic: str, isolation: str, expect: int | None = None,
                idle_s: float = 3.0, group: str | None = None) -> list[tuple[int, bytes]]:
    """Every value of `topic` as (partition, value), polling until `expect` values came (or,
    without it, until nothing came for `idle_s`), under DEADLINE_S."""
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group or uuid.uuid4().hex,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": isolation})
    c.subscribe([topic])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                if expect is None and out and time.monotonic() - quiet_since > idle_s:
                    break
                if expect is None and not out and time.monotonic() - quiet_since > idle_s * 3:
                    break
                continue
            out.append((m.partition(), m.value()))
            quiet_since = time.monotonic()
            if expect is not None and len(out) >= expect:
                break
    finally:
        c.close()
    return out


def test_read_committed_sees_only_committed_records(cluster):
    topic = topic_name("txn-rc")
    create(cluster, topic, 3)
    p = producer(cluster, f"rc-{topic}")
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"c{i}".encode(), partition=i % 3)
    p.commit_transaction(DEADLINE_S)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"a{i}".encode(), partition=i % 3)
    p.flush(DEADLINE_S)
    p.abort_transaction(DEADLINE_S)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"o{i}".encode(), partition=i % 3)
    p.flush(DEADLINE_S)  # written, not committed: open
    committed = consume_all(cluster, topic, "read_committed")
    assert sorted(v for _, v in committed) == sorted(f"c{i}".encode() for i in range(30))
    uncommitted = consume_all(cluster, topic, "read_uncommitted", expect=66)
    assert {v[:1] for _, v in uncommitted} == {b"c", b"a", b"o"} and len(uncommitted) == 66
    p.commit_transaction(DEADLINE_S)
    later = consume_all(cluster, topic, "read_committed", expect=36)
    assert sorted(v for _, v in later) == sorted([f"c{i}".encode() for i in range(30)]
                                                 + [f"o{i}".encode() for i in range(6)])


def test_list_offsets_latest_under_read_committed_is_the_lso(cluster):
    topic = topic_name("txn-lso")
    create(cluster, topic, 1)
    p = producer(cluster, f"lso-{topic}")
    p.begin_transaction()
    p.produce(topic, b"x", partition=0)
    p.flush(DEADLINE_S)
    tp = ck.TopicPartition(topic, 0)
    c_rc = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "g-lso",
                        "isolation.level": "read_committed"})
    c_ru = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "g-lso",
                        "isolation.level": "read_uncommitted"})
    try:
        assert c_rc.get_watermark_offsets(tp, timeout=DEADLINE_S)[1] == 0  # the open txn holds it
        assert c_ru.get_watermark_offsets(tp, timeout=DEADLINE_S)[1] == 1
        p.commit_transaction(DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while c_rc.get_watermark_offsets(tp, timeout=DEADLINE_S)[1] != 2:  # record + COMMIT marker
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        c_rc.close()
        c_ru.close()


def test_consume_transform_produce_commits_offsets_with_the_transaction(cluster):
    src, dst = topic_name("ctp-in"), topic_name("ctp-out")
    create(cluster, src, 3)
    create(cluster, dst, 3)
    plain = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap()})
    for i in range(20):
        plain.produce(src, f"{i}".encode(), partition=i % 3)
    plain.flush(DEADLINE_S)
    group = f"ctp-{src}"
    p = producer(cluster, f"ctp-{src}")
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed"})
    c.subscribe([src])
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    try:
        while seen < 20 and time.monotonic() < deadline:
            msgs = c.consume(20, 1.0)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, m.value() + b"!", partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), DEADLINE_S)
            p.commit_transaction(DEADLINE_S)
            seen += len(msgs)
        assert seen == 20
    finally:
        c.close()
    out = consume_all(cluster, dst, "read_committed", expect=20)
    assert sorted(v for _, v in out) == sorted(f"{i}!".encode() for i in range(20))
    # The group's committed offsets are the ends of the input: a new member reads nothing more.
    again = consume_all(cluster, src, "read_committed", group=group, idle_s=2.0)
    assert again == []


def test_an_aborted_send_offsets_leaves_the_group_where_it_was(cluster):
    src = topic_name("ctp-abort")
    create(cluster, src, 1)
    plain = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap()})
    for i in range(5):
        plain.produce(src, f"{i}".encode(), partition=0)
    plain.flush(DEADLINE_S)
    group = f"g-{src}"
    p = producer(cluster, f"ab-{src}")
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([src])
    got = 0
    deadline = time.monotonic() + DEADLINE_S
    try:
        while got < 5 and time.monotonic() < deadline:
            got += len([m for m in c.consume(5, 1.0) if not m.error()])
        p.begin_transaction()
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), DEADLINE_S)
        p.abort_transaction(DEADLINE_S)
        committed = c.committed([ck.TopicPartition(src, 0)], timeout=DEADLINE_S)
        assert committed[0].offset < 0  # nothing committed
    finally:
        c.close()


def test_a_fenced_zombie_never_becomes_visible(cluster):
    topic = topic_name("txn-zombie")
    create(cluster, topic, 2)
    tid = f"z-{topic}"
    old = producer(cluster, tid)
    old.begin_transaction()
    old.produce(topic, b"zombie-1", partition=0)
    old.flush(DEADLINE_S)
    new = producer(cluster, tid)  # fences `old`, aborting its transaction
    new.begin_transaction()
    new.produce(topic, b"new", partition=0)
    new.commit_transaction(DEADLINE_S)
    old.produce(topic, b"zombie-2", partition=1)  # late writes of the fenced producer
    with pytest.raises(ck.KafkaException):
        old.flush(10)
        old.commit_transaction(DEADLINE_S)
    values = [v for _, v in consume_all(cluster, topic, "read_committed")]
    assert values == [b"new"]


def test_leader_sigkill_mid_transaction_then_commit_gives_each_record_once(cluster):
    topic = topic_name("txn-kill")
    create(cluster, topic, 3)
    p = producer(cluster, f"k-{topic}", **{"message.timeout.ms": 50_000})
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"{i}".encode(), partition=i % 3)
    p.flush(DEADLINE_S)
    from raftlog.client import Admin
    with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader
    cluster.kill(leader)
    try:
        for i in range(30, 60):
            p.produce(topic, f"{i}".encode(), partition=i % 3)
        p.commit_transaction(DEADLINE_S)
        out = consume_all(cluster, topic, "read_committed", expect=60)
        assert sorted(int(v) for _, v in out) == list(range(60))
    finally:
        cluster.start(leader)


def test_kafka_python_reads_committed(cluster):
    import kafka
    topic = topic_name("txn-kp")
    create(cluster, topic, 1)
    p = producer(cluster, f"kp-{topic}")
    p.begin_transaction()
    p.produce(topic, b"gone", partition=0)
    p.flush(DEADLINE_S)
    p.abort_transaction(DEADLINE_S)
    p.begin_transaction()
    p.produce(topic, b"kept", partition=0)
    p.commit_transaction(DEADLINE_S)
    c = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap(), auto_offset_reset="earliest",
                            isolation_level="read_committed", consumer_timeout_ms=5000, group_id=None)
    try:
        deadline = time.monotonic() + DEADLINE_S
        values: list[bytes] = []
        while not values and time.monotonic() < deadline:
            values = [m.value for m in c]
        assert values == [b"kept"]
    finally:
        c.close()


def test_a_restarted_cluster_rebuilds_the_lso_and_the_aborted_transactions(cluster):
    """Last in the module: it restarts every node. Each replica rebuilds its open and aborted
    transactions from its producer snapshot and log at open."""
    topic = topic_name("txn-restart")
    create(cluster, topic, 1)
    p = producer(cluster, f"r-{topic}")
    p.begin_transaction()
    p.produce(topic, b"kept", partition=0)
    p.commit_transaction(DEADLINE_S)  # offsets 0, 1 (marker)
    p.begin_transaction()
    p.produce(topic, b"gone", partition=0)
    p.flush(DEADLINE_S)
    p.abort_transaction(DEADLINE_S)  # offsets 2, 3 (marker)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(DEADLINE_S)  # offset 4, left open
    cluster.stop_all()
    cluster.start_all()
    tp = ck.TopicPartition(topic, 0)
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "g-restart",
                     "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                if c.get_watermark_offsets(tp, timeout=10)[1] == 4:  # held at the open transaction
                    break
            except ck.KafkaException:
                pass  # the cluster is still electing leaders
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        c.close()
    assert [v for _, v in consume_all(cluster, topic, "read_committed")] == [b"kept"]

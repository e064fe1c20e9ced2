"""A transaction's group offsets and OffsetFetch's require_stable (KIP-447) on a real 3-node cluster (issue 40: librdkafka's 0103_transactions read an offset of the transaction before last): while a TxnOffsetCommit's offsets wait for their transaction's marker, OffsetFetch v7+ with require_stable answers UNSTABLE_OFFSET_COMMIT for those partitions (without it, the last applied offset), so confluent-kafka's `committed()` right after `commit_transaction()` retries until it gets the transaction's offset, and after an abort gets the offset from before."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from test_kafka_group_versions import Conn
from test_kafka_groups import create

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.cluster

NONE, UNSTABLE_OFFSET_COMMIT = 0, 88
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
DEADLINE_S = 60  # an upper bound on waiting, never a speed claim


def group_coordinator(cluster: Any, group: str) -> Conn:
    """A connection to `group`'s coordinator, found as a client finds it."""
    return Conn(cluster.kafka(coordinator_id(cluster, group, 0)))


def fetch(conn: Conn, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(partition error, committed offset) of `topic`-0 by OffsetFetch v7."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        r = conn.call(OffsetFetchRequest, 7, group_id=group, require_stable=require_stable,
                      topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
        if r.error_code not in RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.error_code == NONE, r
    (p,) = r.topics[0].partitions
    return p.error_code, p.committed_offset


def committed(cluster: Any, group: str, topic: str) -> int:
    """What a new read_committed consumer of `group` is told is committed for `topic`-0."""
    c = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                     "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        (tp,) = c.committed([ck.TopicPartition(topic, 0)], timeout=DEADLINE_S)
        return tp.offset
    finally:
        c.close()


def test_pending_transaction_offsets_are_unstable_until_the_marker(cluster):
    topic = f"stable-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    create(cluster, topic, 1)
    p = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"tid-{topic}",
                     "transaction.timeout.ms": 60_000})
    p.init_transactions(DEADLINE_S)
    member = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                          "enable.auto.commit": False})
    conn = group_coordinator(cluster, group)
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 7)], member.consumer_group_metadata(),
                                      DEADLINE_S)
        # Held for the open transaction: unstable to a read_committed reader, and the last
        # applied offset (none) to one that does not ask for stable offsets.
        assert fetch(conn, group, topic, require_stable=True)[0] == UNSTABLE_OFFSET_COMMIT
        assert fetch(conn, group, topic, require_stable=False) == (NONE, -1)
        p.commit_transaction(DEADLINE_S)
        # librdkafka retries UNSTABLE_OFFSET_COMMIT: right after the commit it is told 7.
        assert committed(cluster, group, topic) == 7
        assert fetch(conn, group, topic, require_stable=True) == (NONE, 7)

        # Repeated, as librdkafka's 0103_transactions does: each commit is read back at once,
        # an aborted one leaves the offset before it.
        for i, abort in enumerate([False, True, False, True, False]):
            offset = 100 + i
            p.begin_transaction()
            p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, offset)],
                                          member.consumer_group_metadata(), DEADLINE_S)
            if abort:
                p.abort_transaction(DEADLINE_S)
                assert committed(cluster, group, topic) == offset - 1
            else:
                p.commit_transaction(DEADLINE_S)
                assert committed(cluster, group, topic) == offset
    finally:
        conn.sock.close()
        member.close()


def coordinator_id(cluster: Any, key: str, key_type: int) -> int:
    """The node id of `key`'s coordinator (0: group, 1: transaction), as a client finds it."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        boot = Conn(cluster.kafka_bootstrap().split(",")[0])
        try:
            r = boot.call(FindCoordinatorRequest, 3, key=key, key_type=key_type)
        finally:
            boot.sock.close()
        if r.error_code == NONE:
            return r.node_id
        assert r.error_code in RETRIABLE and time.monotonic() < deadline, r
        time.sleep(0.2)


def test_pending_offsets_survive_a_group_coordinator_sigkill(cluster):
    """Issue 42: TxnOffsetCommit's offsets are a transactional batch in `__consumer_offsets`,
    so a group coordinator SIGKILLed between send_offsets_to_transaction and
    commit_transaction loses none: the new coordinator's replay holds them until the marker,
    and after the commit the group's offset is the transaction's (in memory only, they were lost
    and the group went back to its previous commit)."""
    topic = f"gc-kill-{uuid.uuid4().hex[:6]}"
    tid = f"tid-{topic}"
    create(cluster, topic, 1)
    txn_node = coordinator_id(cluster, tid, 1)
    # A group whose coordinator is another node than the transaction's: only it is killed.
    group = next(g for g in (f"g-{topic}-{i}" for i in range(200)) if coordinator_id(cluster, g, 0) != txn_node)
    victim = coordinator_id(cluster, group, 0)
    p = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": tid,
                     "transaction.timeout.ms": 60_000})
    member = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                          "enable.auto.commit": False})
    try:
        p.init_transactions(DEADLINE_S)
        p.begin_transaction()
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 5)], member.consumer_group_metadata(),
                                      DEADLINE_S)
        p.commit_transaction(DEADLINE_S)
        assert committed(cluster, group, topic) == 5  # the commit before the one cut short
        p.begin_transaction()
        p.produce(topic, b"out", partition=0)
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 9)], member.consumer_group_metadata(),
                                      DEADLINE_S)
        cluster.kill(victim)
        p.commit_transaction(DEADLINE_S)  # answered once prepared; the markers follow
        cluster.wait_for(lambda: coordinator_id(cluster, group, 0) != victim, DEADLINE_S, "a new group coordinator")
        assert committed(cluster, group, topic) == 9
    finally:
        member.close()
        if victim not in cluster.live():
            cluster.start(victim)
        cluster.wait_ready(timeout_s=DEADLINE_S)

"""Issue 42's bad input, each answered with Kafka's error and nothing half-applied, over the
Kafka wire: on the real 3-node cluster, AddPartitionsToTxn with a stale epoch (PRODUCER_FENCED, or
INVALID_PRODUCER_EPOCH below v2) adds no partition, WriteTxnMarkers for a partition this broker
does not lead (it moved) answers NOT_LEADER_OR_FOLLOWER and writes no marker, and a
transactional Produce (v11: Transactions V1) to a partition never added to the transaction
answers INVALID_TXN_STATE and writes nothing; on a secure node (SASL_SSL, ACLs on), the
TransactionalId resource is enforced as Kafka's authorizer does (DESCRIBE for FindCoordinator
and DescribeTransactions, WRITE for InitProducerId, AddPartitionsToTxn and EndTxn:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and TxnOffsetCommit for a group the producer may not
read answers GROUP_AUTHORIZATION_FAILED and commits nothing. (EndTxn for an unknown id, a
commit of nothing and a zombie's steps: test_txn_kafka.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

from partition.batch import BatchBuilder
from raftlog.base.acl import AclBinding
from raftlog.client import Admin
from test_client_cluster import leader_of
from test_kafka_acl_apis import ADMIN_PASSWORD
from test_kafka_acl_apis import TOPIC as SECURE_TOPIC
from test_kafka_acl_apis import Conn as AclConn
from test_kafka_acl_apis import secure  # noqa: F401  (the module fixture: a 1-node secure cluster)
from test_txn_kafka import (
    DEADLINE_S,
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    RETRIABLE,
    TOPIC,
    add,
    cluster,  # noqa: F401  (the module fixture: the shared cluster with TOPIC)
    coordinator,
    describe,
    end,
    init,
    wait_state,
)
from test_kafka_group_versions import Conn
from test_txn_offsets_stable import fetch, group_coordinator

pytestmark = pytest.mark.cluster

NOT_LEADER_OR_FOLLOWER = 6


def test_add_partitions_with_a_stale_epoch_is_fenced_and_adds_nothing(cluster):  # noqa: F811
    tid = "bad-stale-add"
    _, conn = coordinator(cluster, tid)
    try:
        first = init(conn, tid)
        assert first.error_code == NONE
        second = init(conn, tid)  # a new producer: the first one's epoch is stale now
        assert second.error_code == NONE and second.producer_epoch == first.producer_epoch + 1
        pid, stale = first.producer_id, first.producer_epoch
        assert add(conn, tid, pid, stale, [0, 1], version=3) == [PRODUCER_FENCED] * 2
        assert add(conn, tid, pid, stale, [0], version=1) == [INVALID_PRODUCER_EPOCH]  # before KIP-588
        d = describe(conn, tid)
        assert d.error_code == NONE and d.transaction_state == "Empty" and not d.topics, d  # nothing added
    finally:
        conn.close()


def _markers_to(conn: Conn, partition: int, producer_id: int) -> Any:
    W = WriteTxnMarkersRequest.WritableTxnMarker
    return conn.call(WriteTxnMarkersRequest, 1, markers=[W(
        producer_id=producer_id, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[W.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[partition])])])


def test_markers_for_a_partition_led_elsewhere_answer_not_leader_and_write_nothing(cluster):  # noqa: F811
    leader = leader_of(cluster, TOPIC, 0)
    other = next(n for n in cluster.live() if n != leader)
    query = {"partitions": [{"topic": TOPIC, "partition": 0, "timestamp": -1}]}
    before = cluster.call(leader, "list_offsets", **query)
    conn = Conn(cluster.kafka(other))
    try:
        r = _markers_to(conn, 0, producer_id=987_654)
    finally:
        conn.close()
    codes = [p.error_code for m in r.markers for t in m.topics for p in t.partitions]
    assert codes == [NOT_LEADER_OR_FOLLOWER], r
    after = cluster.call(leader, "list_offsets", **query)
    assert after == before  # no marker was written anywhere


def test_a_transactional_produce_to_a_partition_not_added_is_refused_and_writes_nothing(cluster):  # noqa: F811
    """Transactions V1 (Produce v11): the partition must be added first (AddPartitionsToTxn);
    the leader's KIP-890 verification asks the coordinator and answers INVALID_TXN_STATE."""
    tid = "bad-produce-unadded"
    _, conn = coordinator(cluster, tid)
    try:
        first = init(conn, tid)
        assert first.error_code == NONE
        pid, epoch = first.producer_id, first.producer_epoch
        assert add(conn, tid, pid, epoch, [1]) == [NONE]  # an ongoing transaction, without partition 0
    finally:
        conn.close()
    leader = leader_of(cluster, TOPIC, 0)
    query = {"partitions": [{"topic": TOPIC, "partition": 0, "timestamp": -1}]}
    before = cluster.call(leader, "list_offsets", **query)
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    b.append(b"not added", timestamp_ms=1_000)
    T = ProduceRequest.TopicProduceData
    produce = Conn(cluster.kafka(leader))
    try:
        r = produce.call(ProduceRequest, 11, transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
            T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=b.build())])])
    finally:
        produce.close()
    codes = [p.error_code for t in r.responses for p in t.partition_responses]
    assert codes == [INVALID_TXN_STATE], r
    assert cluster.call(leader, "list_offsets", **query) == before  # nothing written


OUT_OF_ORDER_SEQUENCE_NUMBER, NOT_ENOUGH_REPLICAS = 45, 19


def _produce_v11(cluster: Any, tid: str, pid: int, epoch: int, base_sequence: int, values: list[bytes]) -> Any:
    """A transactional Produce v11 (Transactions V1) of one batch to partition 0's leader;
    retried while the leader's verification meets a coordinator completing a step
    (NOT_ENOUGH_REPLICAS) or the leader moves. Returns the partition's answer."""
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=base_sequence, is_transactional=True)
    for v in values:
        b.append(v, timestamp_ms=1_000)
    records = b.build()
    T = ProduceRequest.TopicProduceData
    deadline = time.monotonic() + DEADLINE_S
    while True:
        conn = Conn(cluster.kafka(leader_of(cluster, TOPIC, 0)))
        try:
            r = conn.call(ProduceRequest, 11, transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
                T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=records)])])
        finally:
            conn.close()
        answer = r.responses[0].partition_responses[0]
        if answer.error_code not in (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER) or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def test_a_new_transaction_reusing_an_aborted_batchs_sequences_is_refused(cluster):  # noqa: F811
    """The lost write the fault suite found (Transactions V1, one epoch across transactions): a
    batch of a transaction is written, the producer does not learn it (librdkafka's abort purges
    the retry of a request whose answer was lost and reuses its sequences), aborts, and its next
    transaction sends a batch with the same producer id, epoch and sequences. The partition took
    it for a duplicate and answered with the aborted batch's offset: records acked, never written,
    the aborted ones in their place. The answer is OUT_OF_ORDER_SEQUENCE_NUMBER (the client aborts
    and bumps its epoch), nothing written; the next sequence is taken."""
    tid = "bad-reused-sequences"
    _, conn = coordinator(cluster, tid)
    try:
        first = init(conn, tid)
        assert first.error_code == NONE
        pid, epoch = first.producer_id, first.producer_epoch
        assert add(conn, tid, pid, epoch, [0]) == [NONE]
        aborted = _produce_v11(cluster, tid, pid, epoch, 0, [b"aborted-0", b"aborted-1"])
        assert aborted.error_code == NONE, aborted
        assert end(conn, tid, pid, epoch, commit=False) == NONE
        wait_state(conn, tid, "CompleteAbort")  # the ABORT marker is in partition 0
        assert add(conn, tid, pid, epoch, [0]) == [NONE]  # the next transaction, same epoch (V1)
        leader = leader_of(cluster, TOPIC, 0)
        query = {"partitions": [{"topic": TOPIC, "partition": 0, "timestamp": -1}]}
        before = cluster.call(leader, "list_offsets", **query)
        reused = _produce_v11(cluster, tid, pid, epoch, 0, [b"new-0", b"new-1"])
        assert reused.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, (reused, aborted.base_offset)
        assert cluster.call(leader, "list_offsets", **query) == before  # nothing written
        taken = _produce_v11(cluster, tid, pid, epoch, 2, [b"new-2"])
        assert taken.error_code == NONE and taken.base_offset > aborted.base_offset, taken
        assert end(conn, tid, pid, epoch, commit=False) == NONE
    finally:
        conn.close()


def test_txn_offset_commit_without_add_offsets_is_refused_and_holds_nothing(cluster):  # noqa: F811
    """Transactions V1 (TxnOffsetCommit v3): the group's partition must be in the transaction
    (AddOffsetsToTxn) before its offsets are written there, or no marker would ever settle them:
    the group coordinator verifies with the transaction coordinator, as Kafka's does
    (INVALID_TXN_STATE), and holds nothing (OffsetFetch with require_stable answers at once)."""
    tid, group = "bad-offsets-unadded", "bad-offsets-unadded-g"
    _, conn = coordinator(cluster, tid)
    try:
        first = init(conn, tid)
        assert first.error_code == NONE
    finally:
        conn.close()
    groups = group_coordinator(cluster, group)
    try:
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

        def commit() -> Any:
            return groups.call(TxnOffsetCommitRequest, 3, transactional_id=tid, group_id=group,
                               producer_id=first.producer_id, producer_epoch=first.producer_epoch,
                               generation_id=-1, member_id="", group_instance_id=None,
                               topics=[T(name=TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                   committed_metadata="")])])

        deadline = time.monotonic() + DEADLINE_S
        while True:
            r = commit()
            codes = [p.error_code for t in r.topics for p in t.partitions]
            if codes[0] not in RETRIABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert codes == [INVALID_TXN_STATE], r
        assert fetch(groups, group, TOPIC, require_stable=True) == (NONE, -1)
    finally:
        groups.sock.close()


# ---------------------------------------------------------------- ACLs (a secure node)

TXN_USER, TXN_PASSWORD = "txn-user", "txn-bad-input-Pw-" + "3f81c2"
ALLOWED_TID, DENIED_TID, SECURE_GROUP = "txn-ok", "txn-denied", "txn-g"
GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 30, 53


@pytest.fixture(scope="module")
def txn_secure(secure: Any) -> Any:
    """The ACL test's 1-node SASL_SSL cluster (its own instance for this module), where
    `txn-user` may WRITE and DESCRIBE the transactional id `txn-ok` and READ the topic, and
    nothing on `txn-denied` or the group."""
    with Admin(secure.bootstrap(), request_timeout_ms=15_000, security=secure.material.admin_security()) as admin:
        admin.upsert_user(TXN_USER, TXN_PASSWORD)
        principal = f"User:{TXN_USER}"
        admin.create_acls([
            AclBinding("transactional_id", ALLOWED_TID, "literal", principal, "*", "write", "allow"),
            AclBinding("transactional_id", ALLOWED_TID, "literal", principal, "*", "describe", "allow"),
            AclBinding("topic", SECURE_TOPIC, "literal", principal, "*", "read", "allow"),
        ])
    return secure


def _retry_coordinator(fn: Callable[[], Any]) -> Any:
    """A first transactional step on a fresh node meets `__transaction_state` being created and
    elected: retried as clients do."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        r = fn()
        if getattr(r, "error_code", NONE) not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def test_transactional_id_acls_are_enforced_as_kafka(txn_secure):
    admin = AclConn.login(txn_secure, "admin", ADMIN_PASSWORD)
    user = AclConn.login(txn_secure, TXN_USER, TXN_PASSWORD)
    try:
        # The super user creates the state topic (first FindCoordinator) and the denied id's state.
        r = _retry_coordinator(lambda: admin.call(FindCoordinatorRequest, 3, key=DENIED_TID, key_type=1))
        assert r.error_code == NONE, r
        denied = _retry_coordinator(lambda: admin.call(
            InitProducerIdRequest, 4, transactional_id=DENIED_TID, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        assert denied.error_code == NONE, denied

        # DESCRIBE on the id: FindCoordinator, DescribeTransactions.
        assert user.call(FindCoordinatorRequest, 3, key=DENIED_TID, key_type=1).error_code == \
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        d = user.call(DescribeTransactionsRequest, 0, transactional_ids=[DENIED_TID]).transaction_states[0]
        assert d.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, d
        # WRITE on the id: InitProducerId, AddPartitionsToTxn, EndTxn (nothing changes).
        r = user.call(InitProducerIdRequest, 4, transactional_id=DENIED_TID, transaction_timeout_ms=60_000,
                      producer_id=-1, producer_epoch=-1)
        assert r.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        r = user.call(AddPartitionsToTxnRequest, 3, v3_and_below_transactional_id=DENIED_TID,
                      v3_and_below_producer_id=denied.producer_id, v3_and_below_producer_epoch=denied.producer_epoch,
                      v3_and_below_topics=[T(name=SECURE_TOPIC, partitions=[0])])
        assert [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition] \
            == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED], r
        r = user.call(EndTxnRequest, 3, transactional_id=DENIED_TID, producer_id=denied.producer_id,
                      producer_epoch=denied.producer_epoch, committed=True)
        assert r.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        d = admin.call(DescribeTransactionsRequest, 0, transactional_ids=[DENIED_TID]).transaction_states[0]
        assert d.error_code == NONE and d.transaction_state == "Empty" and d.producer_epoch == denied.producer_epoch, d

        # The allowed id: every step passes the same checks.
        r = _retry_coordinator(lambda: user.call(FindCoordinatorRequest, 3, key=ALLOWED_TID, key_type=1))
        assert r.error_code == NONE, r
        ok = _retry_coordinator(lambda: user.call(
            InitProducerIdRequest, 4, transactional_id=ALLOWED_TID, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        assert ok.error_code == NONE, ok
        d = user.call(DescribeTransactionsRequest, 0, transactional_ids=[ALLOWED_TID]).transaction_states[0]
        assert d.error_code == NONE, d
    finally:
        admin.close()
        user.close()


def test_txn_offset_commit_for_a_group_the_producer_may_not_read_is_refused(txn_secure):
    """Kafka: WRITE on the transactional id, then READ on the group: GROUP_AUTHORIZATION_FAILED
    for every partition, and nothing is committed (the admin reads no offset)."""
    user = AclConn.login(txn_secure, TXN_USER, TXN_PASSWORD)
    admin = AclConn.login(txn_secure, "admin", ADMIN_PASSWORD)
    try:
        tid = ALLOWED_TID
        r = _retry_coordinator(lambda: user.call(
            InitProducerIdRequest, 4, transactional_id=tid, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        assert r.error_code == NONE, r
        pid, epoch = r.producer_id, r.producer_epoch
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        r = user.call(TxnOffsetCommitRequest, 3, transactional_id=tid, group_id=SECURE_GROUP, producer_id=pid,
                      producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                      topics=[T(name=SECURE_TOPIC, partitions=[T.TxnOffsetCommitRequestPartition(
                          partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                          committed_metadata="")])])
        assert [p.error_code for t in r.topics for p in t.partitions] == [GROUP_AUTHORIZATION_FAILED], r
        fetched = _retry_coordinator(lambda: admin.call(
            OffsetFetchRequest, 7, group_id=SECURE_GROUP, require_stable=True,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=SECURE_TOPIC, partition_indexes=[0])]))
        assert fetched.error_code == NONE, fetched
        (p,) = fetched.topics[0].partitions
        assert (p.error_code, p.committed_offset) == (NONE, -1)  # nothing pending, nothing committed
    finally:
        user.close()
        admin.close()

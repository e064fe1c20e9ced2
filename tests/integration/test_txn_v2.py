"""Transactions V2 (KIP-890 part 2) on the Kafka wire, as the Java client 4.x at
transaction.version 2 drives it (the conformance test runs that client beside Kafka):
EndTxn v5 bumps the epoch per transaction and answers it, a retry with the old epoch gets the
same answer, the old epoch is fenced, an abort with nothing ongoing still bumps, and
TxnOffsetCommit v5 adds the group's partition itself (no AddOffsetsToTxn)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import EndTxnRequest, TxnOffsetCommitRequest

from test_kafka_group_versions import Conn
from test_kafka_groups import create
from test_txn_kafka import (
    DEADLINE_S,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    add,
    coordinator,
    describe,
    init,
    retry,
    wait_state,
)

pytestmark = pytest.mark.cluster

TOPIC = "txn-v2"
OFFSETS_TOPIC = "__consumer_offsets"


def end_v5(conn: Conn, tid: str, pid: int, epoch: int, commit: bool) -> Any:
    return retry(lambda: conn.call(EndTxnRequest, 5, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=commit), "end v5")


def group_coordinator(cluster: Any, group: str) -> Conn:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        boot = Conn(cluster.kafka(cluster.live()[0]))
        try:
            r = retry(lambda: boot.call(FindCoordinatorRequest, 3, key=group, key_type=0), f"coordinator of {group}")
        finally:
            boot.close()
        if r.error_code == NONE and r.node_id in cluster.live():
            return Conn(cluster.kafka(r.node_id))
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(cluster: Any) -> Any:
    """The shared 3-node cluster with TOPIC (3 partitions, RF 3) created."""
    create(cluster, TOPIC, 3)
    return cluster


def test_end_txn_v5_bumps_the_epoch_per_transaction(cluster):
    tid = "v2-1"
    _, conn = coordinator(cluster, tid)
    try:
        r = init(conn, tid)
        assert r.error_code == NONE, r
        pid, epoch = r.producer_id, r.producer_epoch
        # The coordinator's metadata may learn the new topic a moment after the creator's: poll.
        cluster.wait_for(lambda: add(conn, tid, pid, epoch, [0, 1], TOPIC) == [NONE, NONE], DEADLINE_S,
                         "partitions added")
        committed = end_v5(conn, tid, pid, epoch, True)
        assert (committed.error_code, committed.producer_id, committed.producer_epoch) == (NONE, pid, epoch + 1)
        wait_state(conn, tid, "CompleteCommit")
        again = end_v5(conn, tid, pid, epoch, True)  # the client's retry after a lost answer
        assert (again.error_code, again.producer_id, again.producer_epoch) == (NONE, pid, epoch + 1)
        assert add(conn, tid, pid, epoch, [2], TOPIC) == [PRODUCER_FENCED]  # the old epoch is fenced
        assert end_v5(conn, tid, pid, epoch + 1, True).error_code == INVALID_TXN_STATE  # nothing to commit
        aborted = end_v5(conn, tid, pid, epoch + 1, False)  # an empty abort still bumps (Kafka's TV2)
        assert (aborted.error_code, aborted.producer_epoch) == (NONE, epoch + 2)
        wait_state(conn, tid, "CompleteAbort")
        assert describe(conn, tid).producer_epoch == epoch + 2
    finally:
        conn.close()


def test_txn_offset_commit_v5_adds_the_groups_partition(cluster):
    tid, group = "v2-2", "v2-group"
    _, conn = coordinator(cluster, tid)
    groups = group_coordinator(cluster, group)
    try:
        r = init(conn, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        P = T.TxnOffsetCommitRequestPartition
        answer = retry(lambda: groups.call(
            TxnOffsetCommitRequest, 5, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=[T(name=TOPIC, partitions=[P(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                                committed_metadata="")])]), "txn offset commit")
        codes = [p.error_code for t in answer.topics for p in t.partitions]
        assert codes == [NONE], answer
        d = describe(conn, tid)
        assert d.transaction_state == "Ongoing", d
        assert [t.topic for t in d.topics] == [OFFSETS_TOPIC], d  # added by the group coordinator
        done = end_v5(conn, tid, pid, epoch, True)
        assert (done.error_code, done.producer_epoch) == (NONE, epoch + 1)
        wait_state(conn, tid, "CompleteCommit")
    finally:
        groups.close()
        conn.close()

"""Issue 42's bad input, each answered with Kafka's error and nothing half-applied, on the real
3-node cluster over the Kafka wire: AddPartitionsToTxn with a stale epoch (PRODUCER_FENCED, or
INVALID_PRODUCER_EPOCH below v2) adds no partition, and WriteTxnMarkers for a partition this
broker does not lead (it moved) answers NOT_LEADER_OR_FOLLOWER and writes no marker. (EndTxn
for an unknown id, a commit of nothing and a zombie's steps: test_txn_kafka.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from test_client_cluster import leader_of
from test_txn_kafka import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    PRODUCER_FENCED,
    TOPIC,
    add,
    cluster,  # noqa: F401  (the module fixture: the shared cluster with TOPIC)
    coordinator,
    describe,
    init,
)
from test_kafka_group_versions import Conn

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

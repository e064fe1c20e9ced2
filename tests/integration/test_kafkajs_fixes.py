"""What KafkaJS's own suite (issue 40, `scripts/client_suites kafkajs`) found, on a real 3-node cluster, each as KafkaJS sends it: its Broker.joinGroup leaves the rebalance timeout unset, so JoinGroup v5 carries rebalance_timeout_ms 0, which Kafka accepts (the rebalance completes with the members that joined) and raftlog answered INVALID_REQUEST (KafkaJS's errorRecovery.spec.js)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from raftlog.base.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription

from test_kafka_groups import create
from test_txn_offsets_stable import group_coordinator

pytestmark = pytest.mark.cluster

NONE, MEMBER_ID_REQUIRED = 0, 79


def test_join_group_with_a_zero_rebalance_timeout_completes(cluster):
    topic = f"zero-rt-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    create(cluster, topic, 1)
    conn = group_coordinator(cluster, group)
    try:
        sub = encode_subscription(Subscription((topic,)))
        join = dict(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=0, member_id="",
                    group_instance_id=None, protocol_type="consumer",
                    protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="AssignerName", metadata=sub)])
        r = conn.call(JoinGroupRequest, 5, **join)
        assert r.error_code == MEMBER_ID_REQUIRED and r.member_id, r
        r = conn.call(JoinGroupRequest, 5, **{**join, "member_id": r.member_id})
        assert r.error_code == NONE, r
        assert r.leader == r.member_id and r.protocol_name == "AssignerName" and r.generation_id >= 1
        member_id, generation = r.member_id, r.generation_id
        plan = encode_assignment(Assignment(((topic, 0),)))
        r = conn.call(SyncGroupRequest, 3, group_id=group, generation_id=generation, member_id=member_id,
                      group_instance_id=None,
                      assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=plan)])
        assert r.error_code == NONE and bytes(r.assignment) == plan
        assert conn.call(HeartbeatRequest, 3, group_id=group, generation_id=generation, member_id=member_id,
                         group_instance_id=None).error_code == NONE
    finally:
        conn.sock.close()

"""Read-only operator APIs (issue 41): DescribeLogDirs (35), DescribeQuorum (55),
DescribeProducers (61) and DescribeTopicPartitions (75), answered from what the node
already knows.

* DescribeLogDirs: one log dir, the node's data dir, with every partition replica open
  here: its size in bytes (its segments), its offset lag (the high watermark this replica
  knows minus its log end offset, never below 0; Kafka's "lag of the log's LEO w.r.t. the
  partition's HW"), is_future false; v4+ the volume's total and usable bytes
  (`os.statvfs`). Kafka's rule: the principal needs DESCRIBE on the cluster, else the
  answer is CLUSTER_AUTHORIZATION_FAILED with no dirs.
* DescribeQuorum: the metadata quorum (PySyncObj; raftlog/node/metadata_quorum.py), asked
  as Kafka's `__cluster_metadata` partition 0 (another name: UNKNOWN_TOPIC_OR_PARTITION, as
  Kafka). Kafka's controller answers only as the quorum's leader; clients send the request
  to any node (kafka-python to the least loaded one, with no retry elsewhere), and raftlog
  has no controller-only listener to send it to, so every node that knows a leader answers
  what it knows (one that knows none, in an election or without a quorum, answers
  NOT_LEADER_OR_FOLLOWER, which the Java admin client retries and Kafka's non-leaders answer): the
  leader it knows and, on a voter, the Raft term as the epoch, its commit index as the high
  watermark and its own log end; the leader adds each voter's match index as its log end
  offset. A node that is not a voter, or a voter about its peers, answers -1 where it does
  not know; raftlog tracks no fetch or caught-up times (-1). Observers: the registered
  brokers that are not voters (log end -1: they read the image through the controller, not
  the Raft log). Needs DESCRIBE on the cluster, as in Kafka.
* DescribeProducers: the partition leader's producer state (partition/producer_state.py):
  per active producer id its epoch, last sequence and the first offset of its transaction open
  in that partition (current_txn_start_offset, -1 if none); raftlog keeps neither the last
  timestamp nor the coordinator epoch (-1). A partition not led here: NOT_LEADER_OR_FOLLOWER (the
  admin client sends each partition to its leader, as Kafka expects). Needs READ on the topic.
* DescribeTopicPartitions (KIP-966): the topics asked (all, if none) in name order, their
  partitions from the cursor on, at most `response_partition_limit` partitions per answer,
  and `next_cursor` where the next page starts (DESCRIBE on each topic, as in Kafka: a topic
  asked by name is answered TOPIC_AUTHORIZATION_FAILED, and listing all leaves it out). ISR: as in Metadata, every voter replica (Raft
  has no ISR; the high watermark moves with a majority); eligible leader replicas empty.
"""

from __future__ import annotations

import os
from typing import Any, Final

import trio
from kafka.protocol.admin.cluster import DescribeLogDirsResponse, DescribeQuorumResponse
from kafka.protocol.admin.topics import DescribeTopicPartitionsResponse
from kafka.protocol.admin.transactions import DescribeProducersResponse

from partition.port import PartitionKey
from raftlog.base.acl import ResourceType
from raftlog.base.errors import ClusterAuthorizationFailedError, NotLeaderError, RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Reply, bit_field
from raftlog.node.kafka.metadata import ZERO_UUID, topic_uuid

__all__ = ["HANDLERS"]

DESCRIBE_LOG_DIRS_KEY: Final = 35
DESCRIBE_QUORUM_KEY: Final = 55
DESCRIBE_PRODUCERS_KEY: Final = 61
METADATA_TOPIC: Final = "__cluster_metadata"
DESCRIBE_TOPIC_PARTITIONS_KEY: Final = 75
TOPIC_AUTHORIZATION_FAILED: Final = errors.TOPIC_AUTHORIZATION_FAILED


async def handle_describe_log_dirs(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeLogDirsResponse
    wanted = None if call.request.topics is None else {
        PartitionKey(t.topic, p) for t in call.request.topics for p in t.partitions}
    try:
        sizes = ctx.port().log_dirs(wanted)
    except ClusterAuthorizationFailedError:
        return R(throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED, results=[])
    except NotLeaderError:  # a controller-only node: no partitions here
        sizes = []
    rows = [(s.topic, s.partition, s.size_bytes, s.offset_lag) for s in sizes]
    data_dir = str(ctx.node_config.data_dir) if ctx.node_config is not None else ""
    total = usable = -1
    if data_dir:
        st = await trio.to_thread.run_sync(os.statvfs, data_dir)
        total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, size, lag in sorted(rows):
        by_topic.setdefault(topic, []).append(R.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition(
            partition_index=partition, partition_size=size, offset_lag=lag, is_future_key=False))
    topics = [R.DescribeLogDirsResult.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in by_topic.items()]
    result = R.DescribeLogDirsResult(error_code=errors.NONE, log_dir=os.path.abspath(data_dir), topics=topics,
                                     total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return R(throttle_time_ms=0, error_code=errors.NONE, results=[result])


async def handle_describe_quorum(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeQuorumResponse
    Topic, Partition = R.TopicData, R.TopicData.PartitionData
    State = Partition.ReplicaState
    request = call.request
    try:
        status = ctx.admin().quorum_status() or {}  # DESCRIBE on the cluster: the port's guard
    except RaftlogError as exc:
        code, message = errors.kafka_error(exc)
        return R(error_code=code, error_message=message, topics=[], nodes=[])
    asked = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        return R(error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
                 error_message=f"the metadata quorum is {METADATA_TOPIC} partition 0", topics=[], nodes=[])
    if status.get("voters"):  # the running quorum's (voters change, issue 44)
        voter_ids = sorted(int(v) for v in status["voters"])
    else:
        voter_ids = sorted(ctx.node_config.controller_quorum_voters) if ctx.node_config is not None else []
    match = {int(k): v for k, v in status.get("match_index", {}).items()}
    if status:
        match[ctx.node_id] = status["log_end_index"]

    def state(node_id: int, log_end: int) -> Any:
        return State(replica_id=node_id, replica_directory_id=ZERO_UUID, log_end_offset=log_end,
                     last_fetch_timestamp=-1, last_caught_up_timestamp=-1)

    voters = [state(v, match.get(v, -1)) for v in voter_ids]
    observers = [state(b, -1) for b in sorted(ctx.metadata.image.brokers) if b not in voter_ids]
    leader = ctx.metadata.controller_id
    if leader is None or status.get("has_quorum") is False:  # an election, or no quorum (PySyncObj
        # keeps naming its last leader while it reaches no other voter): Kafka's answer off the leader
        lost = Partition(partition_index=0, error_code=errors.NOT_LEADER_OR_FOLLOWER,
                         error_message="this node knows no metadata quorum leader now", leader_id=-1,
                         leader_epoch=-1, high_watermark=-1, current_voters=[], observers=[])
        return R(error_code=errors.NONE, error_message=None,
                 topics=[Topic(topic_name=METADATA_TOPIC, partitions=[lost])], nodes=[])
    partition = Partition(
        partition_index=0, error_code=errors.NONE, error_message=None,
        leader_id=-1 if leader is None else leader, leader_epoch=status.get("term", -1),
        high_watermark=status.get("raft_commit_index", -1), current_voters=voters, observers=observers)  # fmt: skip
    nodes = []
    for v in voter_ids:
        address = ctx.metadata.kafka_address(v)
        if address is not None:
            listener = R.Node.Listener(name=ctx.node_config.security_protocol, host=address[0], port=address[1])
            nodes.append(R.Node(node_id=v, listeners=[listener]))
    return R(error_code=errors.NONE, error_message=None,
             topics=[Topic(topic_name=METADATA_TOPIC, partitions=[partition])], nodes=nodes)


async def handle_describe_producers(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeProducersResponse
    Topic, Partition = R.TopicResponse, R.TopicResponse.PartitionResponse
    State = Partition.ProducerState
    topics = []
    for t in call.request.topics:
        parts = []
        for index in t.partition_indexes:
            code, message, active = errors.NONE, None, []
            try:  # READ on the topic: the port's guard
                found = ctx.port().producers(t.name, index)
            except RaftlogError as exc:
                code, message = errors.kafka_error(exc)
            else:
                active = [State(producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                last_sequence=p.last_sequence, last_timestamp=-1, coordinator_epoch=-1,
                                current_txn_start_offset=p.current_txn_start_offset) for p in found]
            parts.append(Partition(partition_index=index, error_code=code, error_message=message,
                                   active_producers=active))
        topics.append(Topic(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


async def handle_describe_topic_partitions(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeTopicPartitionsResponse
    Topic, Partition = R.DescribeTopicPartitionsResponseTopic, R.DescribeTopicPartitionsResponseTopic.DescribeTopicPartitionsResponsePartition
    request = call.request
    image = ctx.metadata.image
    names = sorted({t.name for t in request.topics} if request.topics else {t.name for t in image.topics.values()})
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(1, request.response_partition_limit)
    topics: list[Any] = []
    next_cursor = None
    # DESCRIBE on each topic, at the metadata port's guard: listing every topic leaves out those
    # the principal may not describe, a topic asked by name is refused (as in Kafka).
    for described in await ctx.admin().describe_topics(names, listing=not request.topics):
        name, info = described.name, described.topic
        if info is None:
            code = errors.UNKNOWN_TOPIC_OR_PARTITION if described.error is None else TOPIC_AUTHORIZATION_FAILED
            topics.append(Topic(error_code=code, name=name, topic_id=topic_uuid(None), is_internal=False,
                                partitions=[], topic_authorized_operations=-2147483648))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        parts = []
        for p in info.partitions[max(0, start):]:
            if budget == 0:
                next_cursor = R.Cursor(topic_name=name, partition_index=p.partition)
                break
            budget -= 1
            parts.append(Partition(
                error_code=errors.NONE, partition_index=p.partition, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.replicas), eligible_leader_replicas=[],
                last_known_elr=[], offline_replicas=[]))  # fmt: skip
        topics.append(Topic(error_code=errors.NONE, name=name, topic_id=topic_uuid(info.topic_id),
                            is_internal=info.internal, partitions=parts,
                            topic_authorized_operations=bit_field(ctx.authorized_operations(ResourceType.TOPIC, name))))
        if next_cursor is not None:
            break
    return R(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


HANDLERS: Final = {
    DESCRIBE_LOG_DIRS_KEY: handle_describe_log_dirs,
    DESCRIBE_QUORUM_KEY: handle_describe_quorum,
    DESCRIBE_PRODUCERS_KEY: handle_describe_producers,
    DESCRIBE_TOPIC_PARTITIONS_KEY: handle_describe_topic_partitions,
}

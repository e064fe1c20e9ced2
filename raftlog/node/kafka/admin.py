"""Admin APIs: CreateTopics (19), DeleteTopics (20), DeleteRecords (21), CreatePartitions (37),
DescribeCluster (60).

Each calls the metadata port (metadata/port.py `create_topics`, `delete_topics`: forwarded
to the active controller by the metadata service), one topic at a time, and answers per
topic. CreateTopics: -1 partitions / replication factor mean the node's defaults; a manual
replica assignment (partition indexes 0..n-1, the first replica of each the preferred
leader) is checked by the controller (metadata/reassignment.py `check_assignments`:
INVALID_REPLICA_ASSIGNMENT with the reason) and needs -1 for both, as in Kafka
(INVALID_REQUEST otherwise); `validate_only` checks the names, configs and assignment
without creating. Config names may be Kafka's (`retention.ms`) or ours. The answer comes once
every partition of the topics created has a leader in this node's image (Kafka answers with
the leaders assigned, so a Metadata request right after names them; raftlog's partitions
elect in their own Raft groups), or when the request's `timeout_ms` passes (0: at once, as
Kafka) with success all the same: the topics exist and their leaders follow.
DeleteRecords runs the replica manager's `delete_records` (the native op's code): on each
partition's leader, every replica's log start moves up to the offset (-1: the high
watermark), answered with the low watermark once a majority holds it (partition/raft.py
"Log start"); an offset past the high watermark gets OFFSET_OUT_OF_RANGE.
ACLs: at the ports' guards (raftlog/node/authorize.py `GuardedPartitions`,
raftlog/node/guarded_metadata.py), with the connection's principal: DELETE on each topic of
DeleteRecords and on a deleted topic (by name or id), ALTER on a grown one, CREATE on the
cluster or topic for CreateTopics, DESCRIBE on the cluster for DescribeCluster.
CreatePartitions calls the port's `create_partitions` (the controller adds the partitions
and places them, or takes the manual assignment, one replica list per new partition of the
topic's replication factor; `count` is the new total); `validate_only` checks without
changing anything.
"""

from __future__ import annotations

from typing import Any, Final

import trio

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.admin.topics import (
    CreatePartitionsResponse,
    DeleteRecordsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from metadata.port import NewPartitions, NewTopic, TopicCreated
from metadata.reassignment import check_assignments
from metadata.topic_config import normalize_configs
from partition.port import DeletePart
from raftlog.base.acl import CLUSTER_NAME, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    RaftlogError,
)
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.metadata import brokers, names_by_uuid, topic_uuid

__all__ = ["HANDLERS"]

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
CREATE_PARTITIONS_KEY: Final = 37
DELETE_RECORDS_KEY: Final = 21
DESCRIBE_CLUSTER_KEY: Final = 60


def _manual(t: Any, fields: dict[str, Any]) -> list[list[int]]:
    """CreateTopics' manual assignment as one replica list per partition, in order. Raises
    InvalidRequestError (a count or factor given too: Kafka's rule) and
    InvalidReplicaAssignmentError (indexes not 0..n-1)."""
    if "partitions" in fields or "replication_factor" in fields:
        raise InvalidRequestError("both numPartitions or replicationFactor and replicasAssignments were set: "
                                  "give -1 for both with a manual assignment")
    by_index = {a.partition_index: list(a.broker_ids) for a in t.assignments}
    if sorted(by_index) != list(range(len(t.assignments))):
        raise InvalidReplicaAssignmentError(
            f"topic {t.name!r}: partition indexes {sorted(by_index)} are not 0..{len(t.assignments) - 1}, each once")
    return [by_index[i] for i in range(len(by_index))]


async def handle_create_topics(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = CreateTopicsResponse

    async def one(t: Any) -> Any:
        fields: dict[str, Any] = {"name": t.name}
        if t.num_partitions not in (None, -1):
            fields["partitions"] = t.num_partitions
        if t.replication_factor not in (None, -1):
            fields["replication_factor"] = t.replication_factor
        configs = {c.name: c.value for c in (t.configs or []) if c.value is not None}
        created = TopicCreated(t.name)
        try:
            assignments = _manual(t, fields) if t.assignments else None
            if request.validate_only:
                normalize_configs(configs)
                if assignments is not None:
                    check_assignments(ctx.metadata.image, f"topic {t.name!r}", assignments)
            else:
                [created] = await ctx.admin().create_topics([NewTopic(
                    t.name, fields.get("partitions"), fields.get("replication_factor"), configs, assignments)])
                if created.error is not None:
                    raise created.error
        except Exception as exc:  # noqa: BLE001 - every failure is this topic's answer
            code, message = errors.kafka_error(exc)
            return R.CreatableTopicResult(name=t.name, error_code=code, error_message=message,
                                          num_partitions=-1, replication_factor=-1, configs=None)
        replicas = created.replicas
        return R.CreatableTopicResult(
            name=t.name, topic_id=topic_uuid(created.topic_id), error_code=errors.NONE,
            error_message=None,
            num_partitions=len(replicas) if replicas else fields.get("partitions", ctx.default_partitions),
            replication_factor=len(replicas[0]) if replicas else
            fields.get("replication_factor", ctx.default_replication_factor),
            configs=[],
        )  # fmt: skip

    async def answer() -> Reply:
        started = trio.current_time()
        results = [await one(t) for t in request.topics]
        created = [r.name for r in results if r.error_code == errors.NONE] if not request.validate_only else []
        timeout_s = max(0, min(request.timeout_ms, ctx.request_timeout_ms - 1000)) / 1000
        if created:  # Kafka answers with the leaders assigned (module docstring)
            await ctx.admin().wait_leaders(created, timeout_s - (trio.current_time() - started))
        return R(throttle_time_ms=0, topics=results)

    return Later(answer)


async def handle_delete_topics(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DeleteTopicsResponse
    names: list[str | None] = list(request.topic_names or [])
    ids: list[Any] = [None] * len(names)
    by_id = names_by_uuid(ctx) if call.version >= 6 else {}
    for t in getattr(request, "topics", None) or []:  # v6+: by name or by id
        names.append(t.name if t.name is not None else by_id.get(t.topic_id))
        ids.append(t.topic_id if t.name is None else None)

    async def answer() -> Reply:
        results = []
        for name, topic_id in zip(names, ids):
            if name is None:
                results.append(R.DeletableTopicResult(
                    name=None, topic_id=topic_id, error_code=errors.UNKNOWN_TOPIC_ID,
                    error_message="unknown topic id"))
                continue
            try:
                [deleted] = await ctx.admin().delete_topics([name])
                if deleted.error is not None:
                    raise deleted.error
                results.append(R.DeletableTopicResult(
                    name=name, topic_id=topic_uuid(deleted.topic_id), error_code=errors.NONE))
            except RaftlogError as exc:
                code, message = errors.kafka_error(exc)
                results.append(R.DeletableTopicResult(name=name, error_code=code, error_message=message))
        return R(throttle_time_ms=0, responses=results)

    return Later(answer)


async def handle_create_partitions(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = CreatePartitionsResponse

    async def one(t: Any) -> Any:
        try:
            assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            [error] = await ctx.admin().create_partitions([NewPartitions(t.name, t.count, assignments)],
                                                          validate_only=bool(request.validate_only))
            if error is not None:
                raise error
        except Exception as exc:  # noqa: BLE001 - every failure is this topic's answer
            code, message = errors.kafka_error(exc)
            return R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
        return R.CreatePartitionsTopicResult(name=t.name, error_code=errors.NONE, error_message=None)

    async def answer() -> Reply:
        return R(throttle_time_ms=0, results=[await one(t) for t in request.topics])

    return Later(answer)


async def handle_delete_records(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DeleteRecordsResponse
    # ACLs before any effect, at the port's guard: DELETE on each topic (Kafka's rule).
    parts = [DeletePart(t.name, p.partition_index, p.offset) for t in request.topics for p in t.partitions]
    timeout_ms = max(0, min(request.timeout_ms, ctx.request_timeout_ms - 1000))

    async def answer() -> Reply:
        results = await ctx.port().delete_records(parts, trio.current_time() + timeout_ms / 1000) if parts else []
        topics: dict[str, list[Any]] = {}
        for r in results:
            topics.setdefault(r.topic, []).append(R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult(
                partition_index=r.partition, low_watermark=-1 if r.error is not None else r.low_watermark,
                error_code=errors.kafka_error_code(None if r.error is None else r.error.code),
            ))  # fmt: skip
        return R(throttle_time_ms=0, topics=[
            R.DeleteRecordsTopicResult(name=name, partitions=ps) for name, ps in topics.items()])

    return Later(answer)


async def handle_describe_cluster(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeClusterResponse
    try:
        ctx.admin().authorize_cluster_describe()  # DESCRIBE on the cluster: Kafka's rule
    except ClusterAuthorizationFailedError:
        return R(throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="not authorized to describe the cluster", endpoint_type=1, cluster_id=ctx.cluster_id,
                 controller_id=-1, brokers=[], authorized_operations=None)
    image = ctx.metadata.image

    def fenced(broker_id: int) -> bool:  # v2+
        reg = image.broker(broker_id)
        return reg is None or reg.fenced

    controller = ctx.metadata.controller_id
    return R(
        throttle_time_ms=0, error_code=errors.NONE, error_message=None, endpoint_type=1,
        cluster_id=ctx.cluster_id, controller_id=controller if controller is not None else -1,
        brokers=[R.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r, is_fenced=fenced(i))
                 for i, h, p, r in brokers(ctx)],
        authorized_operations=ctx.authorized_operations(
            ResourceType.CLUSTER, CLUSTER_NAME, bool(call.request.include_cluster_authorized_operations)),
    )  # fmt: skip


HANDLERS: Final = {
    CREATE_TOPICS_KEY: handle_create_topics,
    DELETE_TOPICS_KEY: handle_delete_topics,
    CREATE_PARTITIONS_KEY: handle_create_partitions,
    DELETE_RECORDS_KEY: handle_delete_records,
    DESCRIBE_CLUSTER_KEY: handle_describe_cluster,
}

"""Admin APIs: CreateTopics (19), DeleteTopics (20), DescribeCluster (60).

Each runs the native admin op of the same meaning (`create_topic`, `delete_topic`: forwarded
to the active controller by the metadata service), one topic at a time, and answers per
topic. CreateTopics: -1 partitions / replication factor mean the node's defaults; manual
replica assignments are refused (INVALID_REQUEST); `validate_only` checks the names and
configs without creating. Config names may be Kafka's (`retention.ms`) or ours.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.admin.topics import CreateTopicsResponse, DeleteTopicsResponse

from metadata.topic_config import normalize_configs
from raftlog.base.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.base.errors import InvalidRequestError, RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply
from raftlog.node.kafka.metadata import brokers, topic_uuid

__all__ = ["HANDLERS"]

CREATE_TOPICS_KEY: Final = 19
DELETE_TOPICS_KEY: Final = 20
DESCRIBE_CLUSTER_KEY: Final = 60


async def handle_create_topics(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = CreateTopicsResponse

    async def one(t: Any) -> Any:
        fields: dict[str, Any] = {"name": t.name}
        if t.num_partitions not in (None, -1):
            fields["partitions"] = t.num_partitions
        if t.replication_factor not in (None, -1):
            fields["replication_factor"] = t.replication_factor
        fields["configs"] = {c.name: c.value for c in (t.configs or []) if c.value is not None}
        result: Any = {}
        try:
            if t.assignments:
                raise InvalidRequestError("manual replica assignments are not supported")
            if request.validate_only:
                normalize_configs(fields["configs"])
            else:
                result = await ctx.call("create_topic", fields) or {}
        except Exception as exc:  # noqa: BLE001 - every failure is this topic's answer
            code, message = errors.kafka_error(exc)
            return R.CreatableTopicResult(name=t.name, error_code=code, error_message=message,
                                          num_partitions=-1, replication_factor=-1, configs=None)
        partitions = result.get("partitions") or []
        return R.CreatableTopicResult(
            name=t.name, topic_id=topic_uuid(result.get("topic_id")), error_code=errors.NONE,
            error_message=None,
            num_partitions=len(partitions) if partitions else fields.get("partitions", ctx.default_partitions),
            replication_factor=len(partitions[0]["replicas"]) if partitions else
            fields.get("replication_factor", ctx.default_replication_factor),
            configs=[],
        )  # fmt: skip

    async def answer() -> Reply:
        return R(throttle_time_ms=0, topics=[await one(t) for t in request.topics])

    return Later(answer)


async def handle_delete_topics(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DeleteTopicsResponse
    names = list(request.topic_names or [])
    for t in getattr(request, "topics", None) or []:  # v6+ (not advertised yet)
        if t.name is not None:
            names.append(t.name)

    async def answer() -> Reply:
        results = []
        for name in names:
            try:
                result = await ctx.call("delete_topic", {"name": name}) or {}
                results.append(R.DeletableTopicResult(
                    name=name, topic_id=topic_uuid(result.get("topic_id")), error_code=errors.NONE))
            except RaftlogError as exc:
                code, message = errors.kafka_error(exc)
                results.append(R.DeletableTopicResult(name=name, error_code=code, error_message=message))
        return R(throttle_time_ms=0, responses=results)

    return Later(answer)


async def handle_describe_cluster(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeClusterResponse
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):  # Kafka's rule
        return R(throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="not authorized to describe the cluster", endpoint_type=1, cluster_id=ctx.cluster_id,
                 controller_id=-1, brokers=[], cluster_authorized_operations=-2147483648)
    controller = ctx.metadata.controller_id
    return R(
        throttle_time_ms=0, error_code=errors.NONE, error_message=None, endpoint_type=1,
        cluster_id=ctx.cluster_id, controller_id=controller if controller is not None else -1,
        brokers=[R.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r) for i, h, p, r in brokers(ctx)],
        cluster_authorized_operations=-2147483648,
    )  # fmt: skip


HANDLERS: Final = {
    CREATE_TOPICS_KEY: handle_create_topics,
    DELETE_TOPICS_KEY: handle_delete_topics,
    DESCRIBE_CLUSTER_KEY: handle_describe_cluster,
}

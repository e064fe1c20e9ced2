"""Metadata (key 3): brokers at their Kafka listeners, topics with ids, partitions with
leaders; auto-creation of requested unknown topics when `auto_create_topics` is on (Kafka's
auto.create.topics.enable) and the request allows it.

The topic and partition facts come from the metadata port's `cluster_metadata` (the code of
the native `metadata` op, with its read-your-writes wait for a topic created through another
node; DESCRIBE on each topic at the port's guard, raftlog/node/guarded_metadata.py); broker
Kafka addresses and topic ids from the node's metadata image. Every registered broker with a Kafka listener is
listed, so a client that bootstraps from one node finds the others. Partition ISR: Raft has
no ISR; every voter replica is listed (the high watermark only moves with a majority).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kafka.protocol.metadata.metadata import MetadataResponse

from metadata.port import ClusterView, NewTopic
from raftlog.base.acl import CLUSTER_NAME, ResourceType
from raftlog.base.errors import NotLeaderError, RaftlogError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from raftlog.base.eventlog import log_event
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS", "topic_uuid", "brokers", "names_by_uuid", "leader_hint"]

logger = logging.getLogger(__name__)

METADATA_KEY: Final = 3
ZERO_UUID: Final = uuid.UUID(int=0)


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    """Kafka's 16-byte topic id for our topic id (16 random bytes, URL-safe base64)."""
    if not topic_id:
        return ZERO_UUID
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    return uuid.UUID(bytes=raw[:16].rjust(16, b"\0"))


def names_by_uuid(ctx: KafkaContext) -> dict[uuid.UUID, str]:
    """Topic name of each Kafka topic id in the node's image (APIs that name topics by id:
    Fetch v13+, Produce v13, DeleteTopics v6, Metadata by id). Built once per image."""
    image = ctx.metadata.image
    cached = ctx.cache.get("names_by_uuid")
    if cached is not None and cached[0] is image:
        return cached[1]
    names = {topic_uuid(t.topic_id): t.name for t in image.topics.values()}
    ctx.cache["names_by_uuid"] = (image, names)
    return names


def leader_hint(error: RaftlogError | None) -> tuple[int, int] | None:
    """(leader id, leader epoch) for KIP-951's CurrentLeader in a NOT_LEADER_OR_FOLLOWER
    answer, from the hint the partition port put in its NotLeaderError; None when unknown."""
    if not isinstance(error, NotLeaderError) or error.leader_id is None or error.epoch is None:
        return None
    return error.leader_id, error.epoch


def node_endpoints(ctx: KafkaContext, ids: set[int], cls: Any) -> list[Any]:
    """KIP-951's NodeEndpoints (Produce v10+, Fetch v16+): the Kafka address of each broker
    named in a CurrentLeader hint, as `cls` entries."""
    return [cls(node_id=i, host=h, port=p, rack=r) for i, h, p, r in brokers(ctx) if i in ids]


def brokers(ctx: KafkaContext) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every registered broker with a Kafka listener."""
    out = []
    for broker_id, reg in sorted(ctx.metadata.image.brokers.items()):
        if reg.kafka_host is not None and reg.kafka_port is not None:
            out.append((broker_id, reg.kafka_host, reg.kafka_port, reg.rack))
    return out


async def handle_metadata(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    names: list[str] | None = None
    # Topics asked for by id only: {name: id}, so a refusal names none of them (Kafka: a null
    # name), and the ids we do not know.
    by_id_only: dict[str, uuid.UUID] = {}
    unknown_ids: list[uuid.UUID] = []
    if request.topics is not None:
        ids = names_by_uuid(ctx)
        names = []
        for t in request.topics:
            if t.name is not None:
                names.append(t.name)
            elif getattr(t, "topic_id", None) is not None:
                name = ids.get(t.topic_id)
                if name is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(name)
                    by_id_only[name] = t.topic_id
        by_id_only = {n: i for n, i in by_id_only.items() if names.count(n) == 1}
        if call.version == 0 and not names:
            names = None  # v0: an empty list means every topic
    allow_create = ctx.auto_create_topics and getattr(request, "allow_auto_topic_creation", True)

    async def answer() -> Reply:
        admin = ctx.admin()
        view = await admin.cluster_metadata(names, include_internal=names is None)
        created: set[str] = set()
        if allow_create and names:
            missing = [t.name for t in view.topics if isinstance(t.error, UnknownTopicOrPartitionError)]
            created = await _auto_create(ctx, missing)
            if created:
                view = await admin.cluster_metadata(names, include_internal=False)
        return _response(ctx, call, view, created, by_id_only, unknown_ids)

    return Later(answer)


async def _auto_create(ctx: KafkaContext, names: list[str]) -> set[str]:
    created: set[str] = set()
    admin = ctx.admin()
    for name in names:
        [answer] = await admin.create_topics([NewTopic(name)])
        if answer.error is None:
            log_event(logger, "kafka_topic_auto_created", topic=name)
            created.add(name)
        elif isinstance(answer.error, TopicAlreadyExistsError):
            created.add(name)
        else:  # INVALID_TOPIC and the like: the answer says unknown
            log_event(logger, "kafka_topic_auto_create_failed", level=logging.INFO, topic=name,
                      reason=str(answer.error))
    return created


def _response(ctx: KafkaContext, call: Call, view: ClusterView, created: set[str],
              by_id_only: Mapping[str, uuid.UUID] | None = None,
              unknown_ids: list[uuid.UUID] | None = None) -> MetadataResponse:
    R = MetadataResponse
    topic_ids = ctx.metadata.image.topic_ids
    asked_topic_ops = bool(getattr(call.request, "include_topic_authorized_operations", False))  # v8+ (KIP-430)
    by_id_only = by_id_only or {}
    out_topics = [R.MetadataResponseTopic(error_code=errors.UNKNOWN_TOPIC_ID, name=None, topic_id=i,
                                          is_internal=False, partitions=[]) for i in unknown_ids or ()]
    for t in view.topics:
        if t.error is not None:
            # A topic auto-created a moment ago, not in the image yet: LEADER_NOT_AVAILABLE (retriable).
            new = t.name in created and isinstance(t.error, UnknownTopicOrPartitionError)
            code = errors.LEADER_NOT_AVAILABLE if new else errors.kafka_error_code(t.error.code)
            asked_id = by_id_only.get(t.name)
            if asked_id is not None:  # asked for by id: answer by id, never with the name
                out_topics.append(R.MetadataResponseTopic(
                    error_code=code, name=None, topic_id=asked_id, is_internal=False, partitions=[]))
                continue
            out_topics.append(R.MetadataResponseTopic(
                error_code=code, name=t.name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
            ))  # fmt: skip
            continue
        partitions = []
        for p in t.partitions:
            leader = p.leader
            partitions.append(R.MetadataResponseTopic.MetadataResponsePartition(
                error_code=errors.NONE if leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                partition_index=p.partition, leader_id=leader,
                leader_epoch=max(p.leader_epoch, -1), replica_nodes=list(p.replicas),
                isr_nodes=list(p.replicas), offline_replicas=[],
            ))  # fmt: skip
        out_topics.append(R.MetadataResponseTopic(
            error_code=errors.NONE, name=t.name,
            topic_id=topic_uuid(t.topic_id or topic_ids.get(t.name)),
            is_internal=t.internal, partitions=partitions,
            authorized_operations=ctx.authorized_operations(ResourceType.TOPIC, t.name, asked_topic_ops),
        ))  # fmt: skip
    controller = view.controller_id
    extra = {}
    if 8 <= call.version <= 10:  # v11 moved it to DescribeCluster (KIP-700)
        extra["authorized_operations"] = ctx.authorized_operations(
            ResourceType.CLUSTER, CLUSTER_NAME, bool(call.request.include_cluster_authorized_operations))
    return R[call.version](
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r) for i, h, p, r in brokers(ctx)],
        cluster_id=view.cluster_id,
        controller_id=controller if controller is not None else -1,
        topics=out_topics,
        **extra,
    )


HANDLERS: Final = {METADATA_KEY: handle_metadata}

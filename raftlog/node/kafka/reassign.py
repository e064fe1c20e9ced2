"""Replica moves on the Kafka listener: AlterPartitionReassignments (45) and
ListPartitionReassignments (46), so `kafka-reassign-partitions --execute / --verify /
--cancel` and the Java Admin's alterPartitionReassignments work (docs/reassignment.md).

Both call the metadata port (metadata/port.py `alter_reassignments`, `list_reassignments`:
forwarded to the active controller) behind the one guard (`ctx.admin()`, the rules of the native
ops `alter_partition_reassignments`, `list_partition_reassignments`: ALTER resp. DESCRIBE on
the cluster, as Kafka's). Alter answers per
partition (a null replica list cancels that partition's move); a whole-request failure (not
authorized, no controller) is the top-level error. Versions: Alter 0-1 (v1's
allow_replication_factor_change is accepted either way: a move may change the replication
factor, as v0 always allowed), List 0.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.topics import (
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
)

from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

ALTER_PARTITION_REASSIGNMENTS_KEY: Final = 45
LIST_PARTITION_REASSIGNMENTS_KEY: Final = 46


async def handle_alter_partition_reassignments(ctx: KafkaContext, call: Call) -> Reply:
    R = AlterPartitionReassignmentsResponse
    Topic = R.ReassignableTopicResponse
    Part = Topic.ReassignablePartitionResponse
    request = call.request
    items = [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
             for t in request.topics for p in t.partitions]

    async def answer() -> Reply:
        try:
            results = await ctx.admin().alter_reassignments(items)
        except Exception as exc:  # noqa: BLE001 - the whole request's answer
            code, message = errors.kafka_error(exc)
            return R(throttle_time_ms=0, allow_replication_factor_change=True, error_code=code,
                     error_message=message, responses=[])
        by_topic: dict[str, list[Any]] = {}
        for (name, index, _), error in zip(items, results):
            by_topic.setdefault(name, []).append(Part(
                partition_index=index, error_code=errors.NONE if error is None else errors.kafka_error_code(error.code),
                error_message=None if error is None else error.message))
        return R(throttle_time_ms=0, allow_replication_factor_change=True, error_code=errors.NONE,
                 error_message=None,
                 responses=[Topic(name=name, partitions=parts) for name, parts in by_topic.items()])

    return Later(answer)


async def handle_list_partition_reassignments(ctx: KafkaContext, call: Call) -> Reply:
    R = ListPartitionReassignmentsResponse
    Topic = R.OngoingTopicReassignment
    Part = Topic.OngoingPartitionReassignment
    request = call.request
    wanted = None if request.topics is None else [(t.name, i) for t in request.topics for i in t.partition_indexes]

    async def answer() -> Reply:
        try:
            moves = await ctx.admin().list_reassignments(wanted)
        except Exception as exc:  # noqa: BLE001 - the whole request's answer
            code, message = errors.kafka_error(exc)
            return R(throttle_time_ms=0, error_code=code, error_message=message, topics=[])
        by_topic: dict[str, list[Any]] = {}
        for move in moves:
            by_topic.setdefault(move.topic, []).append(Part(
                partition_index=move.partition, replicas=list(move.replicas),
                adding_replicas=list(move.adding_replicas), removing_replicas=list(move.removing_replicas)))
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None,
                 topics=[Topic(name=name, partitions=parts) for name, parts in by_topic.items()])

    return Later(answer)


HANDLERS: Final = {
    ALTER_PARTITION_REASSIGNMENTS_KEY: handle_alter_partition_reassignments,
    LIST_PARTITION_REASSIGNMENTS_KEY: handle_list_partition_reassignments,
}

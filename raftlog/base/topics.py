"""Names every layer agrees on: internal topics, topic-name limits, and which partition of
`__consumer_offsets` holds a group and which partition of `__transaction_state` holds a
transactional id (so any node or client finds the coordinator).

Values are Kafka's: a consumer group hashes to the same `__consumer_offsets` partition here
as in Kafka (`Utils.abs(groupId.hashCode) % partitions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from raftlog.base.errors import RaftlogError

__all__ = [
    "OFFSETS_TOPIC",
    "OFFSETS_TOPIC_PARTITIONS",
    "TRANSACTION_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC_PARTITIONS",
    "INTERNAL_TOPICS",
    "MAX_TOPIC_NAME_CHARS",
    "busy_row",
    "java_string_hash",
    "partition_for_group",
    "partition_for_transactional_id",
]

OFFSETS_TOPIC: Final = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS: Final = 16  # Kafka's offsets.topic.num.partitions is 50; ours is fixed at 16
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
TRANSACTION_STATE_TOPIC_PARTITIONS: Final = 16  # Kafka's transaction.state.log.num.partitions is 50
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
MAX_TOPIC_NAME_CHARS: Final = 249  # Kafka's limit (a topic name is also a directory name)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, as a signed
    32-bit int."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def partition_for_group(group_id: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`. Utils.abs
    maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative)."""
    if type(partitions) is not int or partitions < 1:
        raise ValueError(f"partitions must be a positive int, got {partitions!r}")
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


def partition_for_transactional_id(transactional_id: str, partitions: int = TRANSACTION_STATE_TOPIC_PARTITIONS) -> int:
    """Kafka's `TransactionStateManager.partitionFor`: the same hash as a group's."""
    return partition_for_group(transactional_id, partitions)


def busy_row(topic: str, partition: int, reason: RaftlogError) -> dict[str, Any]:
    """An internal partition whose coordinator is busy here, as a broker heartbeat's
    `busy_partitions` carries it to the controller (which refuses to move it meanwhile:
    metadata/reassignment.py "Busy coordinators"): {topic, partition, error: {code, message}}."""
    return {"topic": topic, "partition": partition, "error": reason.to_wire()}

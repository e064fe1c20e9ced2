"""Kafka's numeric error codes for raftlog's wire error codes (PROTOCOL.md names).

Kafka clients act on these numbers (retriable or not, refresh metadata or not), so each of
our codes maps to the Kafka code of the same meaning, as in Kafka's `Errors.java`. A code
with no Kafka twin maps to UNKNOWN_SERVER_ERROR (-1), except PEER_UNAVAILABLE (a forwarded
admin op found no controller link), which maps to NOT_CONTROLLER so clients retry.
"""

from __future__ import annotations

from typing import Final

from raftlog.base.errors import RaftlogError, UnknownServerError, as_wire_error

__all__ = ["KAFKA_ERROR_CODES", "NONE", "UNSUPPORTED_VERSION", "kafka_error_code", "kafka_error"]

NONE: Final = 0
UNKNOWN_SERVER_ERROR: Final = -1
OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
LEADER_NOT_AVAILABLE: Final = 5
NOT_LEADER_OR_FOLLOWER: Final = 6
REQUEST_TIMED_OUT: Final = 7
MESSAGE_TOO_LARGE: Final = 10
INVALID_TOPIC_EXCEPTION: Final = 17
INVALID_REQUIRED_ACKS: Final = 21
TOPIC_AUTHORIZATION_FAILED: Final = 29
CLUSTER_AUTHORIZATION_FAILED: Final = 31
UNSUPPORTED_VERSION: Final = 35
TOPIC_ALREADY_EXISTS: Final = 36
INVALID_PARTITIONS: Final = 37
INVALID_CONFIG: Final = 40
NOT_CONTROLLER: Final = 41
INVALID_REQUEST: Final = 42
POLICY_VIOLATION: Final = 44
KAFKA_STORAGE_ERROR: Final = 56
UNKNOWN_TOPIC_ID: Final = 100

# raftlog wire code -> Kafka error code (Errors.java).
KAFKA_ERROR_CODES: Final[dict[str, int]] = {
    "UNKNOWN_SERVER_ERROR": UNKNOWN_SERVER_ERROR,
    "OFFSET_OUT_OF_RANGE": OFFSET_OUT_OF_RANGE,
    "CORRUPT_MESSAGE": CORRUPT_MESSAGE,
    "UNKNOWN_TOPIC_OR_PARTITION": UNKNOWN_TOPIC_OR_PARTITION,
    "NOT_LEADER": NOT_LEADER_OR_FOLLOWER,
    "REQUEST_TIMED_OUT": REQUEST_TIMED_OUT,
    "MESSAGE_TOO_LARGE": MESSAGE_TOO_LARGE,
    "STALE_CONTROLLER_EPOCH": 11,
    "OFFSET_METADATA_TOO_LARGE": 12,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "UNSTABLE_OFFSET_COMMIT": 88,
    "NOT_COORDINATOR": 16,
    "INVALID_TOPIC": INVALID_TOPIC_EXCEPTION,
    "NOT_ENOUGH_REPLICAS": 19,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "TOPIC_ALREADY_EXISTS": TOPIC_ALREADY_EXISTS,
    "INVALID_PARTITIONS": INVALID_PARTITIONS,
    "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_REPLICA_ASSIGNMENT": 39,
    "REASSIGNMENT_IN_PROGRESS": 60,
    "NO_REASSIGNMENT_IN_PROGRESS": 85,
    "PREFERRED_LEADER_NOT_AVAILABLE": 80,
    "ELECTION_NOT_NEEDED": 84,
    "INVALID_CONFIG": INVALID_CONFIG,
    "NOT_CONTROLLER": NOT_CONTROLLER,
    "INVALID_REQUEST": INVALID_REQUEST,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47,
    "KAFKA_STORAGE_ERROR": KAFKA_STORAGE_ERROR,
    "UNKNOWN_PRODUCER_ID": 59,
    "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69,
    "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    "FENCED_LEADER_EPOCH": 74,
    "UNKNOWN_LEADER_EPOCH": 75,
    "UNSUPPORTED_COMPRESSION_TYPE": 76,
    # Produce batch validation (partition/validator.py, issue 39).
    "INVALID_TIMESTAMP": 32,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "INVALID_RECORD": 87,
    "STALE_BROKER_EPOCH": 77,
    "MEMBER_ID_REQUIRED": 79,
    "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82,
    # KIP-848 consumer groups (groupcoord/consumer_group_ops.py).
    "FENCED_MEMBER_EPOCH": 110,
    "UNRELEASED_INSTANCE_ID": 111,
    "UNSUPPORTED_ASSIGNOR": 112,
    "STALE_MEMBER_EPOCH": 113,
    "INVALID_REGULAR_EXPRESSION": 128,
    # KIP-932 share groups (partition/share_partition.py).
    "INVALID_RECORD_STATE": 121,
    "DUPLICATE_BROKER_REGISTRATION": 101,
    "BROKER_ID_NOT_REGISTERED": 102,
    "INVALID_UPDATE_VERSION": 95,
    # Transactions (issue 42).
    "INVALID_TXN_STATE": 48,
    "INVALID_PRODUCER_ID_MAPPING": 49,
    "INVALID_TRANSACTION_TIMEOUT": 50,
    "CONCURRENT_TRANSACTIONS": 51,
    "TRANSACTION_COORDINATOR_FENCED": 52,
    "PRODUCER_FENCED": 90,
    "TRANSACTIONAL_ID_NOT_FOUND": 105,
    # Security (issue 16).
    "TOPIC_AUTHORIZATION_FAILED": 29,
    "GROUP_AUTHORIZATION_FAILED": 30,
    "CLUSTER_AUTHORIZATION_FAILED": 31,
    "UNSUPPORTED_SASL_MECHANISM": 33,
    "ILLEGAL_SASL_STATE": 34,
    "SECURITY_DISABLED": 54,
    "SASL_AUTHENTICATION_FAILED": 58,
    "RESOURCE_NOT_FOUND": 91,
    "DUPLICATE_RESOURCE": 92,
    "UNACCEPTABLE_CREDENTIAL": 93,
    # The Schema Registry's errors travel only between nodes (registry_forward) and over HTTP;
    # a Kafka client never sees one, and would see Kafka's UNKNOWN_SERVER_ERROR.
    "SCHEMA_REGISTRY_ERROR": -1,
    # Not a raftlog wire code: the Kafka handlers' own answer to a topic id they do not know
    # (Fetch v13+, Produce v13, DeleteTopics v6).
    "UNKNOWN_TOPIC_ID": UNKNOWN_TOPIC_ID,
    # A peer link that could not carry a forwarded admin op: the client retries, as it does
    # for NOT_CONTROLLER.
    "PEER_UNAVAILABLE": NOT_CONTROLLER,
}


def kafka_error_code(code: str | None) -> int:
    """The Kafka error code for a raftlog wire code (None: no error -> 0)."""
    if code is None:
        return NONE
    return KAFKA_ERROR_CODES.get(code, UNKNOWN_SERVER_ERROR)


def kafka_error(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for an exception a handler raised; an exception with no
    wire code is UNKNOWN_SERVER_ERROR (the caller logs it)."""
    wire: RaftlogError | None = as_wire_error(exc)
    if wire is None:
        wire = UnknownServerError(f"{type(exc).__name__}")
    return kafka_error_code(wire.code), wire.message

"""Errors of the metadata package, each with a stable wire `code` (DESIGN §6, PROTOCOL.md).

    MetadataError                         UNKNOWN_SERVER_ERROR   root; never raised bare on purpose
     ├── NotControllerError               NOT_CONTROLLER         this node is not the active controller
     ├── InvalidRequestError              INVALID_REQUEST        malformed or contradictory request
     ├── InvalidRecordError               CORRUPT_MESSAGE        bytes that are not a valid record,
     │                                                           envelope or snapshot (strict decode)
     ├── EnvelopeTooLargeError            MESSAGE_TOO_LARGE      an envelope over MAX_ENVELOPE_BYTES
     ├── InvalidTopicError                INVALID_TOPIC          bad topic name / internal topic
     ├── TopicAlreadyExistsError          TOPIC_ALREADY_EXISTS
     ├── UnknownTopicOrPartitionError     UNKNOWN_TOPIC_OR_PARTITION
     ├── InvalidPartitionsError           INVALID_PARTITIONS     partition count out of 1..10000
     ├── InvalidReplicationFactorError    INVALID_REPLICATION_FACTOR  (message: how many live brokers)
     ├── InvalidConfigError               INVALID_CONFIG         names the key (`.key`)
     ├── BrokerNotRegisteredError         BROKER_ID_NOT_REGISTERED  heartbeat/record for an unknown broker
     ├── StaleBrokerEpochError            STALE_BROKER_EPOCH     an older incarnation of a broker
     ├── DuplicateBrokerRegistrationError DUPLICATE_BROKER_REGISTRATION  another live incarnation holds the id
     ├── FencedLeaderEpochError           FENCED_LEADER_EPOCH    a partition leader report older than the image
     ├── StaleControllerEpochError        STALE_CONTROLLER_EPOCH an envelope from a deposed controller
     └── ProducerIdsExhaustedError        UNKNOWN_SERVER_ERROR   the 64-bit producer id space is used up

Every code above is also what `image.RequestOutcome.code` holds when replay rejected an
envelope; `from_code(code, message)` turns such an outcome back into the matching exception so
the service can answer the client with it.
"""

from __future__ import annotations


class MetadataError(Exception):
    """Root of the metadata errors. `code` is the stable wire string."""

    code = "UNKNOWN_SERVER_ERROR"


class NotControllerError(MetadataError):
    """Raised by the service (not the pure core) when a controller op reaches a non-controller.
    `controller_id` is the active controller's node id when known (else None)."""

    code = "NOT_CONTROLLER"

    def __init__(self, message: str = "not the active controller", controller_id: int | None = None):
        super().__init__(message)
        self.controller_id = controller_id


class InvalidRequestError(MetadataError):
    code = "INVALID_REQUEST"


class InvalidRecordError(MetadataError):
    """Bytes that do not decode to a valid record/envelope/snapshot, or a record constructed
    with out-of-range fields. The message names the record kind and field."""

    code = "CORRUPT_MESSAGE"


class EnvelopeTooLargeError(MetadataError):
    code = "MESSAGE_TOO_LARGE"


class InvalidTopicError(MetadataError):
    code = "INVALID_TOPIC"


class TopicAlreadyExistsError(MetadataError):
    code = "TOPIC_ALREADY_EXISTS"


class UnknownTopicOrPartitionError(MetadataError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"


class InvalidPartitionsError(MetadataError):
    code = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(MetadataError):
    code = "INVALID_REPLICATION_FACTOR"


class InvalidConfigError(MetadataError):
    """`key` is the offending config key (None when the problem is not one key)."""

    code = "INVALID_CONFIG"

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


class BrokerNotRegisteredError(MetadataError):
    code = "BROKER_ID_NOT_REGISTERED"


class StaleBrokerEpochError(MetadataError):
    code = "STALE_BROKER_EPOCH"


class DuplicateBrokerRegistrationError(MetadataError):
    code = "DUPLICATE_BROKER_REGISTRATION"


class FencedLeaderEpochError(MetadataError):
    code = "FENCED_LEADER_EPOCH"


class StaleControllerEpochError(MetadataError):
    code = "STALE_CONTROLLER_EPOCH"


class ProducerIdsExhaustedError(MetadataError):
    code = "UNKNOWN_SERVER_ERROR"


_BY_CODE: dict[str, type[MetadataError]] = {}
for _cls in (
    NotControllerError,
    InvalidRequestError,
    InvalidRecordError,
    EnvelopeTooLargeError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidConfigError,
    BrokerNotRegisteredError,
    StaleBrokerEpochError,
    DuplicateBrokerRegistrationError,
    FencedLeaderEpochError,
    StaleControllerEpochError,
):
    _BY_CODE[_cls.code] = _cls


def from_code(code: str, message: str) -> MetadataError:
    """The exception matching a wire `code` (MetadataError for codes this package does not own)."""
    cls = _BY_CODE.get(code, MetadataError)
    if cls is MetadataError:
        err = MetadataError(message)
        err.code = code  # keep the code the outcome carried, even one we do not know
        return err
    return cls(message)

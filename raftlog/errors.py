"""Errors of the raftlog package, each with a stable wire `code` (PROTOCOL.md, DESIGN §6).

    RaftlogError                        UNKNOWN_SERVER_ERROR (and any code we do not know)
     ├── Rejected          definite failure: the request did not take effect
     │    ├── NotLeader                    NOT_LEADER  (leader_id, leader)
     │    ├── NotController                NOT_CONTROLLER  (controller_id, controller)
     │    ├── UnknownTopicOrPartition      UNKNOWN_TOPIC_OR_PARTITION
     │    ├── OffsetOutOfRange             OFFSET_OUT_OF_RANGE  (log_start/end_offset)
     │    ├── MessageTooLarge              MESSAGE_TOO_LARGE
     │    ├── CorruptMessage               CORRUPT_MESSAGE
     │    ├── UnsupportedCompressionType   UNSUPPORTED_COMPRESSION_TYPE
     │    ├── InvalidRequest               INVALID_REQUEST  (field, when one is to blame)
     │    ├── InvalidTopic                 INVALID_TOPIC
     │    ├── TopicAlreadyExists           TOPIC_ALREADY_EXISTS
     │    ├── InvalidPartitions            INVALID_PARTITIONS
     │    ├── InvalidReplicationFactor     INVALID_REPLICATION_FACTOR
     │    ├── InvalidConfig                INVALID_CONFIG
     │    │    └── ConfigError             (local only: a bad node configuration file/env/flag)
     │    ├── PeerUnavailable              (local only: a peer link could not send the request)
     │    ├── NotEnoughReplicas            NOT_ENOUGH_REPLICAS  (checked before the append)
     │    ├── BrokerIdNotRegistered        BROKER_ID_NOT_REGISTERED  (the broker re-registers)
     │    ├── StaleBrokerEpoch             STALE_BROKER_EPOCH  (a newer incarnation holds the id)
     │    ├── DuplicateBrokerRegistration  DUPLICATE_BROKER_REGISTRATION  (a live incarnation holds it)
     │    ├── FencedLeaderEpoch            FENCED_LEADER_EPOCH
     │    ├── StaleControllerEpoch         STALE_CONTROLLER_EPOCH
     │    ├── OutOfOrderSequenceNumber     OUT_OF_ORDER_SEQUENCE_NUMBER
     │    ├── DuplicateSequenceNumber      DUPLICATE_SEQUENCE_NUMBER
     │    ├── InvalidProducerEpoch         INVALID_PRODUCER_EPOCH
     │    ├── UnknownProducerId            UNKNOWN_PRODUCER_ID
     │    ├── RebalanceInProgress          REBALANCE_IN_PROGRESS
     │    ├── IllegalGeneration            ILLEGAL_GENERATION
     │    ├── UnknownMemberId              UNKNOWN_MEMBER_ID
     │    ├── MemberIdRequired             MEMBER_ID_REQUIRED
     │    ├── NotCoordinator               NOT_COORDINATOR
     │    ├── CoordinatorLoadInProgress    COORDINATOR_LOAD_IN_PROGRESS
     │    ├── CoordinatorNotAvailable      COORDINATOR_NOT_AVAILABLE
     │    ├── GroupIdNotFound              GROUP_ID_NOT_FOUND
     │    ├── FencedInstanceId             FENCED_INSTANCE_ID
     │    ├── InconsistentGroupProtocol    INCONSISTENT_GROUP_PROTOCOL
     │    ├── GroupMaxSizeReached          GROUP_MAX_SIZE_REACHED
     │    ├── InvalidSessionTimeout        INVALID_SESSION_TIMEOUT
     │    ├── InvalidGroupId               INVALID_GROUP_ID
     │    ├── OffsetMetadataTooLarge       OFFSET_METADATA_TOO_LARGE
     │    └── NonEmptyGroup                NON_EMPTY_GROUP
     └── UnknownOutcome    the request may or may not have taken effect (Jepsen's `info`)
          ├── RequestTimedOut              REQUEST_TIMED_OUT
          ├── KafkaStorageError            KAFKA_STORAGE_ERROR  (a write may be on disk)
          └── UnknownServerError           UNKNOWN_SERVER_ERROR  (a handler crashed midway)

Invariants:
* `code` is a class attribute and never changes for a class; `error_from_wire` maps a code
  back to exactly one class, and an unknown code to a plain `RaftlogError` that keeps it.
* `details` hold only CBOR-plain values (None, bool, int, float, str, bytes, lists, str-keyed
  maps) so `to_wire()` always encodes; the names "code" and "message" are reserved.
* Other packages keep their own error roots with the same `code` strings (e.g.
  partition/errors.py); `as_wire_error` turns any of them into the matching class here.
* `retriable` says whether the same request may succeed if simply sent again later (after a
  metadata refresh for the routing errors), as Kafka's RetriableException does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "RaftlogError",
    "Rejected",
    "UnknownOutcome",
    "NotLeader",
    "NotController",
    "UnknownTopicOrPartition",
    "OffsetOutOfRange",
    "MessageTooLarge",
    "CorruptMessage",
    "UnsupportedCompressionType",
    "InvalidRequest",
    "InvalidTopic",
    "TopicAlreadyExists",
    "InvalidPartitions",
    "InvalidReplicationFactor",
    "InvalidConfig",
    "ConfigError",
    "PeerUnavailable",
    "NotEnoughReplicas",
    "BrokerIdNotRegistered",
    "StaleBrokerEpoch",
    "DuplicateBrokerRegistration",
    "FencedLeaderEpoch",
    "StaleControllerEpoch",
    "OutOfOrderSequenceNumber",
    "DuplicateSequenceNumber",
    "InvalidProducerEpoch",
    "UnknownProducerId",
    "RebalanceInProgress",
    "IllegalGeneration",
    "UnknownMemberId",
    "MemberIdRequired",
    "NotCoordinator",
    "CoordinatorLoadInProgress",
    "CoordinatorNotAvailable",
    "GroupIdNotFound",
    "NonEmptyGroup",
    "RequestTimedOut",
    "KafkaStorageError",
    "UnknownServerError",
    "ERROR_CLASSES",
    "error_from_wire",
    "as_wire_error",
]

_RESERVED_DETAIL_NAMES = frozenset({"code", "message"})


class RaftlogError(Exception):
    """Root of every raftlog error. `code` is the stable wire string; `message` is for humans;
    `details` are the extra wire fields (e.g. `leader_id`)."""

    code: str = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "", **details: Any) -> None:
        bad = _RESERVED_DETAIL_NAMES.intersection(details)
        if bad:
            raise TypeError(f"detail names {sorted(bad)} are reserved")
        super().__init__(message)
        self.message = message
        self._details = details

    @property
    def details(self) -> dict[str, Any]:
        """A copy of the extra wire fields."""
        return dict(self._details)

    def to_wire(self) -> dict[str, Any]:
        """The `error` map of a response: {"code", "message", **details}."""
        return {"code": self.code, "message": self.message, **self._details}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._details.items())
        return f"{type(self).__name__}({self.message!r}{extra})"


class Rejected(RaftlogError):
    """A definite failure: the request was refused and had no effect."""


class UnknownOutcome(RaftlogError):
    """The request may or may not have taken effect; a client must not treat it as failed."""


class NotLeader(Rejected):
    """This node does not lead the partition; `leader` ("host:port" or None) is a hint."""

    code = "NOT_LEADER"
    retriable = True

    def __init__(
        self,
        message: str = "",
        *,
        leader_id: int | None = None,
        leader: str | None = None,
        **details: Any,
    ) -> None:
        if not message:
            message = f"not the leader; leader is {leader_id} at {leader}"
        super().__init__(message, leader_id=leader_id, leader=leader, **details)
        self.leader_id = leader_id
        self.leader = leader


class NotController(Rejected):
    """This node is not the active controller; `controller` ("host:port" or None) is a hint."""

    code = "NOT_CONTROLLER"
    retriable = True

    def __init__(
        self,
        message: str = "",
        *,
        controller_id: int | None = None,
        controller: str | None = None,
        **details: Any,
    ) -> None:
        if not message:
            message = f"not the controller; controller is {controller_id} at {controller}"
        super().__init__(message, controller_id=controller_id, controller=controller, **details)
        self.controller_id = controller_id
        self.controller = controller


class UnknownTopicOrPartition(Rejected):
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    # Retriable as in Kafka: metadata may simply not have reached this broker yet.
    retriable = True


class OffsetOutOfRange(Rejected):
    """The fetch offset is outside [log_start_offset, log_end_offset]."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(
        self,
        message: str = "",
        *,
        log_start_offset: int | None = None,
        log_end_offset: int | None = None,
        **details: Any,
    ) -> None:
        if not message:
            message = f"offset outside [{log_start_offset}, {log_end_offset}]"
        super().__init__(
            message, log_start_offset=log_start_offset, log_end_offset=log_end_offset, **details
        )
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class MessageTooLarge(Rejected):
    code = "MESSAGE_TOO_LARGE"


class CorruptMessage(Rejected):
    code = "CORRUPT_MESSAGE"
    # Retriable as in Kafka: the bytes may have been damaged on the way.
    retriable = True


class UnsupportedCompressionType(Rejected):
    code = "UNSUPPORTED_COMPRESSION_TYPE"


class InvalidRequest(Rejected):
    """The request is malformed. `field` (a detail) names the culprit when there is one;
    `request_id` is the id of the request when it could be read (not a wire detail: the
    response's own `id` carries it)."""

    code = "INVALID_REQUEST"

    def __init__(self, message: str = "", *, request_id: int | None = None, **details: Any):
        super().__init__(message, **details)
        self.request_id = request_id


class InvalidTopic(Rejected):
    code = "INVALID_TOPIC"


class TopicAlreadyExists(Rejected):
    code = "TOPIC_ALREADY_EXISTS"


class InvalidPartitions(Rejected):
    code = "INVALID_PARTITIONS"


class InvalidReplicationFactor(Rejected):
    code = "INVALID_REPLICATION_FACTOR"


class InvalidConfig(Rejected):
    code = "INVALID_CONFIG"


class ConfigError(InvalidConfig):
    """A node configuration that cannot be used; the message names the key and its source
    (file path, environment variable or flag). Never sent on the wire."""

    def __str__(self) -> str:
        return self.message  # shown to an operator as is: the message already says it all


class PeerUnavailable(Rejected):
    """A peer link (raftlog/peer.py) could not send the request: no connection to the
    address, or it is in reconnect backoff. Nothing was sent, so nothing took effect (a
    connection lost after sending is RequestTimedOut instead). Never sent on the wire: a
    handler turns it into the error its caller understands (e.g. NOT_CONTROLLER)."""

    code = "PEER_UNAVAILABLE"
    retriable = True

    def __init__(self, message: str = "", *, address: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.address = address


class NotEnoughReplicas(Rejected):
    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class BrokerIdNotRegistered(Rejected):
    code = "BROKER_ID_NOT_REGISTERED"


class StaleBrokerEpoch(Rejected):
    code = "STALE_BROKER_EPOCH"


class DuplicateBrokerRegistration(Rejected):
    # Retriable: the older incarnation's session runs out (or it shuts down) and then the
    # same registration succeeds.
    code = "DUPLICATE_BROKER_REGISTRATION"
    retriable = True


class FencedLeaderEpoch(Rejected):
    code = "FENCED_LEADER_EPOCH"


class StaleControllerEpoch(Rejected):
    code = "STALE_CONTROLLER_EPOCH"
    retriable = True


class OutOfOrderSequenceNumber(Rejected):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumber(Rejected):
    code = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpoch(Rejected):
    code = "INVALID_PRODUCER_EPOCH"


class UnknownProducerId(Rejected):
    code = "UNKNOWN_PRODUCER_ID"


class RebalanceInProgress(Rejected):
    code = "REBALANCE_IN_PROGRESS"


class IllegalGeneration(Rejected):
    code = "ILLEGAL_GENERATION"


class UnknownMemberId(Rejected):
    code = "UNKNOWN_MEMBER_ID"


class MemberIdRequired(Rejected):
    code = "MEMBER_ID_REQUIRED"


class NotCoordinator(Rejected):
    code = "NOT_COORDINATOR"
    retriable = True


class CoordinatorLoadInProgress(Rejected):
    code = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailable(Rejected):
    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class GroupIdNotFound(Rejected):
    code = "GROUP_ID_NOT_FOUND"


class NonEmptyGroup(Rejected):
    code = "NON_EMPTY_GROUP"


class FencedInstanceId(Rejected):
    """A newer member with the same group_instance_id took over."""

    code = "FENCED_INSTANCE_ID"


class InconsistentGroupProtocol(Rejected):
    """No assignment protocol every member supports."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class GroupMaxSizeReached(Rejected):
    code = "GROUP_MAX_SIZE_REACHED"


class InvalidSessionTimeout(Rejected):
    code = "INVALID_SESSION_TIMEOUT"


class InvalidGroupId(Rejected):
    code = "INVALID_GROUP_ID"


class OffsetMetadataTooLarge(Rejected):
    code = "OFFSET_METADATA_TOO_LARGE"


class RequestTimedOut(UnknownOutcome):
    """The deadline passed before an answer; the request may still take effect."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


class KafkaStorageError(UnknownOutcome):
    # Unknown, not rejected: a write can fail at fsync after its bytes reached the page cache
    # (and a follower's fetch).
    code = "KAFKA_STORAGE_ERROR"
    retriable = True


class UnknownServerError(UnknownOutcome):
    """A handler failed in an unexpected way, possibly after part of its work was done."""

    code = "UNKNOWN_SERVER_ERROR"


def _collect_codes() -> dict[str, type[RaftlogError]]:
    codes: dict[str, type[RaftlogError]] = {}
    pending: list[type[RaftlogError]] = [Rejected, UnknownOutcome]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls in (Rejected, UnknownOutcome, ConfigError, PeerUnavailable):
            continue
        assert cls.code not in codes, f"code {cls.code} is used twice"
        codes[cls.code] = cls
    return codes


ERROR_CLASSES: Mapping[str, type[RaftlogError]] = _collect_codes()
"""Wire code -> the one class that carries it."""


def error_from_wire(error: Any) -> RaftlogError:
    """Rebuild the exception from a response's `error` map.

    Returns the class registered for the code, with the remaining keys as details (and as
    attributes for the classes that name them). An unknown code gives a plain `RaftlogError`
    whose `code` is that string; a map that is not a well-formed error gives a
    `RaftlogError` with code UNKNOWN_SERVER_ERROR saying so. Never raises.
    """
    if not isinstance(error, Mapping) or not isinstance(error.get("code"), str):
        return RaftlogError(f"malformed error in response: {error!r:.200}")
    code = error["code"]
    message = error.get("message", "")
    if not isinstance(message, str):
        message = repr(message)
    details = {
        k: v for k, v in error.items() if isinstance(k, str) and k not in _RESERVED_DETAIL_NAMES
    }
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        exc = RaftlogError(message, **details)
        exc.code = code  # instance attribute: keeps a code this version does not know
        return exc
    return cls(message, **details)


_PLAIN_DETAIL_TYPES = (type(None), bool, int, float, str)


def as_wire_error(exc: BaseException) -> RaftlogError | None:
    """The RaftlogError to answer with for `exc`, or None when `exc` is a plain bug.

    A RaftlogError is returned as is. Any other exception whose `code` attribute is a
    PROTOCOL.md code (another package's typed error) becomes the class registered for that
    code, with its message and its public scalar attributes as details. A group holding a
    single exception (from a handler's nursery) is judged by that exception.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, RaftlogError):
        return exc
    cls = ERROR_CLASSES.get(getattr(exc, "code", None))  # type: ignore[arg-type]
    if cls is None:
        return None
    details = {
        name: value
        for name, value in vars(exc).items()
        if not name.startswith("_")
        and name not in _RESERVED_DETAIL_NAMES
        and isinstance(value, _PLAIN_DETAIL_TYPES)
    }
    return cls(str(exc), **details)

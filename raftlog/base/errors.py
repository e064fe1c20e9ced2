"""The one registry of raftlog's errors: every wire `code` is defined here once (PROTOCOL.md,
DESIGN §6), and every exception raised anywhere in raftlog derives from one of its two bases.

    RaftlogError                          UNKNOWN_SERVER_ERROR (and any code we do not know)
     ├── RejectedError       definite failure: the request did not take effect (Jepsen's `fail`)
     │    ├── NotLeaderError                    NOT_LEADER  (leader_id, leader, epoch)
     │    ├── NotControllerError                NOT_CONTROLLER  (controller_id, controller)
     │    ├── UnknownTopicOrPartitionError      UNKNOWN_TOPIC_OR_PARTITION
     │    ├── OffsetOutOfRangeError             OFFSET_OUT_OF_RANGE  (offset, log_start/end_offset)
     │    ├── MessageTooLargeError              MESSAGE_TOO_LARGE
     │    ├── CorruptMessageError               CORRUPT_MESSAGE
     │    ├── InvalidRecordError                INVALID_RECORD  (a batch that disagrees with its records)
     │    ├── InvalidTimestampError             INVALID_TIMESTAMP
     │    ├── TransactionalIdAuthorizationFailedError  TRANSACTIONAL_ID_AUTHORIZATION_FAILED
     │    ├── UnsupportedCompressionTypeError   UNSUPPORTED_COMPRESSION_TYPE
     │    ├── InvalidRequestError               INVALID_REQUEST  (field, when one is to blame)
     │    ├── InvalidTopicError                 INVALID_TOPIC
     │    ├── TopicAlreadyExistsError           TOPIC_ALREADY_EXISTS
     │    ├── InvalidPartitionsError            INVALID_PARTITIONS
     │    ├── InvalidReplicationFactorError     INVALID_REPLICATION_FACTOR
     │    ├── InvalidReplicaAssignmentError     INVALID_REPLICA_ASSIGNMENT  (a bad replica set)
     │    ├── ReassignmentInProgressError       REASSIGNMENT_IN_PROGRESS  (one change at a time)
     │    ├── NoReassignmentInProgressError     NO_REASSIGNMENT_IN_PROGRESS  (nothing to cancel)
     │    ├── ElectionNotNeededError            ELECTION_NOT_NEEDED  (the leader is already the one asked for)
     │    ├── PreferredLeaderNotAvailableError  PREFERRED_LEADER_NOT_AVAILABLE  (fenced or not serving)
     │    ├── InvalidConfigError                INVALID_CONFIG  (key, when one is to blame)
     │    │    └── ConfigError                  (local only: a bad node configuration file/env/flag)
     │    ├── PeerUnavailableError              (local only: a peer link could not send the request)
     │    ├── NotEnoughReplicasError            NOT_ENOUGH_REPLICAS  (checked before the append)
     │    ├── BrokerIdNotRegisteredError        BROKER_ID_NOT_REGISTERED  (the broker re-registers)
     │    ├── StaleBrokerEpochError             STALE_BROKER_EPOCH  (a newer incarnation holds the id)
     │    ├── DuplicateBrokerRegistrationError  DUPLICATE_BROKER_REGISTRATION
     │    ├── FencedLeaderEpochError            FENCED_LEADER_EPOCH
     │    ├── UnknownLeaderEpochError           UNKNOWN_LEADER_EPOCH  (the client's epoch is newer: retriable)
     │    ├── StaleControllerEpochError         STALE_CONTROLLER_EPOCH
     │    ├── OutOfOrderSequenceNumberError     OUT_OF_ORDER_SEQUENCE_NUMBER
     │    ├── DuplicateSequenceNumberError      DUPLICATE_SEQUENCE_NUMBER
     │    ├── InvalidProducerEpochError         INVALID_PRODUCER_EPOCH
     │    ├── UnknownProducerIdError            UNKNOWN_PRODUCER_ID
     │    ├── RebalanceInProgressError          REBALANCE_IN_PROGRESS
     │    ├── IllegalGenerationError            ILLEGAL_GENERATION
     │    ├── UnknownMemberIdError              UNKNOWN_MEMBER_ID
     │    ├── MemberIdRequiredError             MEMBER_ID_REQUIRED  (member_id to rejoin with)
     │    ├── NotCoordinatorError               NOT_COORDINATOR
     │    ├── CoordinatorLoadInProgressError    COORDINATOR_LOAD_IN_PROGRESS
     │    ├── CoordinatorNotAvailableError      COORDINATOR_NOT_AVAILABLE
     │    ├── GroupIdNotFoundError              GROUP_ID_NOT_FOUND
     │    ├── FencedInstanceIdError             FENCED_INSTANCE_ID
     │    ├── InconsistentGroupProtocolError    INCONSISTENT_GROUP_PROTOCOL
     │    ├── GroupMaxSizeReachedError          GROUP_MAX_SIZE_REACHED
     │    ├── InvalidSessionTimeoutError        INVALID_SESSION_TIMEOUT
     │    ├── InvalidGroupIdError               INVALID_GROUP_ID
     │    ├── OffsetMetadataTooLargeError       OFFSET_METADATA_TOO_LARGE
     │    ├── NonEmptyGroupError                NON_EMPTY_GROUP
     │    ├── ProducerFencedError               PRODUCER_FENCED  (a newer epoch holds the transactional id)
     │    ├── InvalidTxnStateError              INVALID_TXN_STATE
     │    ├── InvalidProducerIdMappingError     INVALID_PRODUCER_ID_MAPPING
     │    ├── InvalidTransactionTimeoutError    INVALID_TRANSACTION_TIMEOUT
     │    ├── ConcurrentTransactionsError       CONCURRENT_TRANSACTIONS  (retriable: a step is in flight)
     │    ├── TransactionCoordinatorFencedError TRANSACTION_COORDINATOR_FENCED  (a marker of an older
     │    │                                     coordinator epoch than the producer's last one)
     │    ├── TransactionalIdNotFoundError      TRANSACTIONAL_ID_NOT_FOUND
     │    ├── GroupSubscribedToTopicError       GROUP_SUBSCRIBED_TO_TOPIC  (OffsetDelete of a live group's topic)
     │    ├── UnstableOffsetCommitError         UNSTABLE_OFFSET_COMMIT  (retriable: a transaction's offsets are pending)
     │    ├── InvalidUpdateVersionError         INVALID_UPDATE_VERSION  (UpdateFeatures: a level refused)
     │    ├── InvalidRecordStateError           INVALID_RECORD_STATE  (KIP-932: an ack for a record
     │    │                                     the member does not hold)
     │    ├── SaslAuthenticationFailedError     SASL_AUTHENTICATION_FAILED  (no principal: which
     │    │                                     part was wrong is never said)
     │    ├── UnsupportedSaslMechanismError     UNSUPPORTED_SASL_MECHANISM  (mechanisms enabled)
     │    ├── IllegalSaslStateError             ILLEGAL_SASL_STATE  (a request out of order)
     │    ├── TopicAuthorizationFailedError     TOPIC_AUTHORIZATION_FAILED  (an ACL said no)
     │    ├── GroupAuthorizationFailedError     GROUP_AUTHORIZATION_FAILED
     │    ├── ClusterAuthorizationFailedError   CLUSTER_AUTHORIZATION_FAILED
     │    ├── SecurityDisabledError             SECURITY_DISABLED  (ACL ops without an authorizer)
     │    ├── ResourceNotFoundError             RESOURCE_NOT_FOUND  (e.g. no such SCRAM credential)
     │    ├── DuplicateResourceError            DUPLICATE_RESOURCE
     │    ├── UnacceptableCredentialError       UNACCEPTABLE_CREDENTIAL  (e.g. too few iterations)
     │    └── SchemaRegistryError               SCHEMA_REGISTRY_ERROR  (http_status, error_code:
     │                                          Confluent's REST error; raftlog/node/registry/errors.py)
     └── UnknownOutcomeError the request may or may not have taken effect (Jepsen's `info`)
          ├── RequestTimedOutError              REQUEST_TIMED_OUT
          ├── KafkaStorageError                 KAFKA_STORAGE_ERROR  (a write may be on disk)
          └── UnknownServerError                UNKNOWN_SERVER_ERROR  (a handler failed midway)

Packages add their own exceptions as subclasses of these (never a second class for a code):
e.g. `partition.errors.CorruptRecordError(CorruptMessageError)`,
`metadata.quorum.ProposalOutcomeUnknownError(UnknownOutcomeError)`,
`raftlog.client.errors.ConnectionLostError(UnknownOutcomeError)`. So a handler raises
whatever it raises and the listener answers with its `code` and `details`; a caller catches
by class, never by matching `code` strings.

Invariants:
* `code` is a class attribute and never changes for a class; `error_from_wire` maps a code
  back to exactly one registry class, and an unknown code to a plain `RaftlogError` that
  keeps it.
* `details` hold only CBOR-plain values (None, bool, int, float, str, bytes, lists, str-keyed
  maps) so `to_wire()` always encodes; the names "code" and "message" are reserved.
* `retriable` says whether the same request may succeed if simply sent again later (after a
  metadata refresh for the routing errors), as Kafka's RetriableException does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

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


class RejectedError(RaftlogError):
    """A definite failure: the request was refused and had no effect."""


class UnknownOutcomeError(RaftlogError):
    """The request may or may not have taken effect; a client must not treat it as failed."""


class NotLeaderError(RejectedError):
    """This node does not lead the partition; `leader` ("host:port" or None) is a hint."""

    code = "NOT_LEADER"
    retriable = True

    def __init__(
        self,
        message: str = "",
        *,
        leader_id: int | None = None,
        leader: str | None = None,
        epoch: int | None = None,
        **details: Any,
    ) -> None:
        if not message:
            message = f"not the leader; leader is {leader_id} at {leader}"
        super().__init__(message, leader_id=leader_id, leader=leader, epoch=epoch, **details)
        self.leader_id = leader_id
        self.leader = leader
        self.epoch = epoch


class NotControllerError(RejectedError):
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


class UnknownTopicOrPartitionError(RejectedError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    # Retriable as in Kafka: metadata may simply not have reached this broker yet.
    retriable = True


class OffsetOutOfRangeError(RejectedError):
    """The offset is outside [log_start_offset, log_end_offset]."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(
        self,
        message: str = "",
        *,
        offset: int | None = None,
        log_start_offset: int | None = None,
        log_end_offset: int | None = None,
        **details: Any,
    ) -> None:
        if not message:
            where = "offset" if offset is None else f"offset {offset}"
            message = f"{where} is outside [{log_start_offset}, {log_end_offset}]"
        super().__init__(message, offset=offset, log_start_offset=log_start_offset,
                         log_end_offset=log_end_offset, **details)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class MessageTooLargeError(RejectedError):
    code = "MESSAGE_TOO_LARGE"


class CorruptMessageError(RejectedError):
    code = "CORRUPT_MESSAGE"
    # Retriable as in Kafka: the bytes may have been damaged on the way.
    retriable = True


class InvalidRecordError(RejectedError):
    """A producer's batch whose header and records disagree (count, offset deltas, lengths)
    or that a client may not write (a control batch): Kafka's InvalidRecordException, not
    retriable (partition/validator.py)."""

    code = "INVALID_RECORD"


class InvalidTimestampError(RejectedError):
    code = "INVALID_TIMESTAMP"


class TransactionalIdAuthorizationFailedError(RejectedError):
    """What Kafka answers to transactional records without an authorized transactional id;
    raftlog has no transactions, so every transactional produce gets it."""

    code = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class UnsupportedCompressionTypeError(RejectedError):
    code = "UNSUPPORTED_COMPRESSION_TYPE"


class InvalidRequestError(RejectedError):
    """The request is malformed. `field` (a detail) names the culprit when there is one;
    `request_id` is the id of the request when it could be read (not a wire detail: the
    response's own `id` carries it)."""

    code = "INVALID_REQUEST"

    def __init__(self, message: str = "", *, request_id: int | None = None, **details: Any):
        super().__init__(message, **details)
        self.request_id = request_id


class InvalidTopicError(RejectedError):
    code = "INVALID_TOPIC"


class TopicAlreadyExistsError(RejectedError):
    code = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(RejectedError):
    code = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(RejectedError):
    code = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(RejectedError):
    """A replica set that cannot be: an unknown broker, a duplicate, none at all."""

    code = "INVALID_REPLICA_ASSIGNMENT"


class ReassignmentInProgressError(RejectedError):
    """A replica move is under way (one membership change at a time): try again after it."""

    code = "REASSIGNMENT_IN_PROGRESS"


class NoReassignmentInProgressError(RejectedError):
    code = "NO_REASSIGNMENT_IN_PROGRESS"


class ElectionNotNeededError(RejectedError):
    """ElectLeaders: the partition already has the leader the election would give it."""

    code = "ELECTION_NOT_NEEDED"


class PreferredLeaderNotAvailableError(RejectedError):
    """ElectLeaders PREFERRED: the preferred replica's broker is fenced or cannot take over now."""

    code = "PREFERRED_LEADER_NOT_AVAILABLE"


class InvalidConfigError(RejectedError):
    """A config key or value that cannot be used; `key` names it when one key is to blame."""

    code = "INVALID_CONFIG"

    def __init__(self, message: str = "", *, key: str | None = None, **details: Any) -> None:
        super().__init__(message, key=key, **details)
        self.key = key


class ConfigError(InvalidConfigError):
    """A node configuration that cannot be used; the message names the key and its source
    (file path, environment variable or flag). Never sent on the wire."""

    def __str__(self) -> str:
        return self.message  # shown to an operator as is: the message already says it all


class PeerUnavailableError(RejectedError):
    """A peer link (raftlog/base/peer.py) could not send the request: no connection to the
    address, or it is in reconnect backoff. Nothing was sent, so nothing took effect (a
    connection lost after sending is RequestTimedOutError instead). Never sent on the wire: a
    handler turns it into the error its caller understands (e.g. NOT_CONTROLLER)."""

    code = "PEER_UNAVAILABLE"
    retriable = True

    def __init__(self, message: str = "", *, address: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.address = address


class NotEnoughReplicasError(RejectedError):
    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class BrokerIdNotRegisteredError(RejectedError):
    code = "BROKER_ID_NOT_REGISTERED"


class StaleBrokerEpochError(RejectedError):
    code = "STALE_BROKER_EPOCH"


class DuplicateBrokerRegistrationError(RejectedError):
    # Retriable: the older incarnation's session runs out (or it shuts down) and then the
    # same registration succeeds.
    code = "DUPLICATE_BROKER_REGISTRATION"
    retriable = True


class FencedLeaderEpochError(RejectedError):
    code = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(RejectedError):
    """KIP-320: the client names a leader epoch newer than this replica knows (it is behind the
    client's metadata); retriable once it catches up."""

    code = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class StaleControllerEpochError(RejectedError):
    code = "STALE_CONTROLLER_EPOCH"
    retriable = True


class OutOfOrderSequenceNumberError(RejectedError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumberError(RejectedError):
    code = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(RejectedError):
    code = "INVALID_PRODUCER_EPOCH"


class UnknownProducerIdError(RejectedError):
    code = "UNKNOWN_PRODUCER_ID"


class RebalanceInProgressError(RejectedError):
    code = "REBALANCE_IN_PROGRESS"
    retriable = True  # rejoin, then retry


class IllegalGenerationError(RejectedError):
    code = "ILLEGAL_GENERATION"


class UnknownMemberIdError(RejectedError):
    code = "UNKNOWN_MEMBER_ID"


class MemberIdRequiredError(RejectedError):
    """The join was parked as a pending member: rejoin with `member_id`."""

    code = "MEMBER_ID_REQUIRED"

    def __init__(self, message: str = "", *, member_id: str | None = None, **details: Any) -> None:
        super().__init__(message, member_id=member_id, **details)
        self.member_id = member_id


class NotCoordinatorError(RejectedError):
    code = "NOT_COORDINATOR"
    retriable = True


class CoordinatorLoadInProgressError(RejectedError):
    code = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(RejectedError):
    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class UnstableOffsetCommitError(RejectedError):
    """OffsetFetch asking for stable offsets (KIP-447) of a partition whose offsets an open
    transaction has committed (TxnOffsetCommit) and whose marker is not applied yet."""

    code = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class GroupIdNotFoundError(RejectedError):
    code = "GROUP_ID_NOT_FOUND"


class ProducerFencedError(RejectedError):
    """A newer producer epoch holds the transactional id (a zombie, or a transaction the
    coordinator aborted on timeout)."""

    code = "PRODUCER_FENCED"


class InvalidTxnStateError(RejectedError):
    code = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(RejectedError):
    """The transactional id is unknown, or holds another producer id."""

    code = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(RejectedError):
    code = "INVALID_TRANSACTION_TIMEOUT"


class TransactionCoordinatorFencedError(RejectedError):
    """A transaction marker (WriteTxnMarkers) whose coordinator epoch (the leader epoch of the
    `__transaction_state` partition that sent it) is older than the one of a marker the
    partition already holds for that producer: a coordinator that lost its partition (Kafka's
    TransactionCoordinatorFencedException, not retriable)."""

    code = "TRANSACTION_COORDINATOR_FENCED"


class ConcurrentTransactionsError(RejectedError):
    """The transactional id's previous step (a state write, markers) is still in flight."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class TransactionalIdNotFoundError(RejectedError):
    code = "TRANSACTIONAL_ID_NOT_FOUND"


class NonEmptyGroupError(RejectedError):
    code = "NON_EMPTY_GROUP"


class GroupSubscribedToTopicError(RejectedError):
    """OffsetDelete for a topic the group's live members consume (Kafka's rule)."""

    code = "GROUP_SUBSCRIBED_TO_TOPIC"


class InvalidUpdateVersionError(RejectedError):
    """UpdateFeatures: a feature raftlog does not know, a level outside what it supports, or a
    downgrade Kafka refuses (metadata/features.py); no level was changed."""

    code = "INVALID_UPDATE_VERSION"


class FencedInstanceIdError(RejectedError):
    """A newer member with the same group_instance_id took over."""

    code = "FENCED_INSTANCE_ID"


class InconsistentGroupProtocolError(RejectedError):
    """No assignment protocol every member supports."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class GroupMaxSizeReachedError(RejectedError):
    code = "GROUP_MAX_SIZE_REACHED"


class FencedMemberEpochError(RejectedError):
    """KIP-848: the member's epoch is not the coordinator's (it was fenced): rejoin with epoch 0."""

    code = "FENCED_MEMBER_EPOCH"


class UnreleasedInstanceIdError(RejectedError):
    """KIP-848: a static member's instance id is still held by a member that did not leave."""

    code = "UNRELEASED_INSTANCE_ID"


class InvalidRecordStateError(RejectedError):
    """KIP-932: an acknowledgement for a record the member does not hold (not acquired, held by
    another member, or its lock expired). Nothing in the request took effect."""

    code = "INVALID_RECORD_STATE"


class UnsupportedAssignorError(RejectedError):
    """KIP-848: the server-side assignor the member names is not one the broker has."""

    code = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(RejectedError):
    """KIP-848: an offset commit or fetch with a member epoch older than the member's."""

    code = "STALE_MEMBER_EPOCH"


class InvalidRegularExpressionError(RejectedError):
    """KIP-848: a subscription regex that does not compile."""

    code = "INVALID_REGULAR_EXPRESSION"


class InvalidSessionTimeoutError(RejectedError):
    code = "INVALID_SESSION_TIMEOUT"


class InvalidGroupIdError(RejectedError):
    code = "INVALID_GROUP_ID"


class OffsetMetadataTooLargeError(RejectedError):
    code = "OFFSET_METADATA_TOO_LARGE"


class SaslAuthenticationFailedError(RejectedError):
    """Authentication failed. The message never says whether the user or the password was
    wrong, and never holds a secret."""

    code = "SASL_AUTHENTICATION_FAILED"


class UnsupportedSaslMechanismError(RejectedError):
    """The mechanism is not enabled on this listener; `enabled` lists those that are."""

    code = "UNSUPPORTED_SASL_MECHANISM"


class IllegalSaslStateError(RejectedError):
    """A request out of order for the connection's authentication state (e.g. any op before
    authentication completed, or a second handshake)."""

    code = "ILLEGAL_SASL_STATE"


class TopicAuthorizationFailedError(RejectedError):
    """An ACL (or the absence of one) refused the operation on the topic."""

    code = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(RejectedError):
    code = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailedError(RejectedError):
    code = "CLUSTER_AUTHORIZATION_FAILED"


class SecurityDisabledError(RejectedError):
    """ACL or credential operations on a cluster that has no authorizer configured."""

    code = "SECURITY_DISABLED"


class ResourceNotFoundError(RejectedError):
    code = "RESOURCE_NOT_FOUND"


class DuplicateResourceError(RejectedError):
    code = "DUPLICATE_RESOURCE"


class UnacceptableCredentialError(RejectedError):
    """A credential the cluster refuses to store (e.g. a SCRAM iteration count out of range)."""

    code = "UNACCEPTABLE_CREDENTIAL"


class SchemaRegistryError(RejectedError):
    """The Schema Registry refused a request. Details: `http_status` and `error_code`, the
    Confluent REST error (e.g. 404 / 40401 subject not found); raftlog/node/registry/errors.py
    holds one subclass per Confluent code."""

    code = "SCHEMA_REGISTRY_ERROR"


class RequestTimedOutError(UnknownOutcomeError):
    """The deadline passed before an answer; the request may still take effect."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


class KafkaStorageError(UnknownOutcomeError):
    # Unknown, not rejected: a write can fail at fsync after its bytes reached the page cache
    # (and a follower's fetch).
    code = "KAFKA_STORAGE_ERROR"
    retriable = True


class UnknownServerError(UnknownOutcomeError):
    """A handler failed in an unexpected way, possibly after part of its work was done."""

    code = "UNKNOWN_SERVER_ERROR"


def _collect_codes() -> dict[str, type[RaftlogError]]:
    codes: dict[str, type[RaftlogError]] = {}
    pending: list[type[RaftlogError]] = [RejectedError, UnknownOutcomeError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls in (RejectedError, UnknownOutcomeError, ConfigError, PeerUnavailableError):
            continue  # bases and local-only errors carry no code of their own
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


def as_wire_error(exc: BaseException) -> RaftlogError | None:
    """The RaftlogError to answer with for `exc`, or None when `exc` is a plain bug (answer
    UNKNOWN_SERVER_ERROR and log it). A group holding a single exception (from a handler's
    nursery) is judged by that exception."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, RaftlogError) else None

"""Errors of the groupcoord package, each with a stable wire `code` (DESIGN §5, PROTOCOL.md).

    GroupError                            UNKNOWN_SERVER_ERROR   root; never raised bare on purpose
     ├── InvalidGroupRecordError          CORRUPT_MESSAGE        bytes that are not a valid
     │                                                           `__consumer_offsets` key or value
     ├── InvalidGroupRequestError         INVALID_REQUEST        malformed argument (`field` names it)
     ├── NotCoordinatorError              NOT_COORDINATOR        this node does not lead the group's partition
     ├── CoordinatorLoadInProgressError   COORDINATOR_LOAD_IN_PROGRESS  the partition is being replayed
     ├── CoordinatorNotAvailableError     COORDINATOR_NOT_AVAILABLE     group Dead (being deleted), a
     │                                                           failed append, or a coordinator limit
     ├── InvalidGroupIdError              INVALID_GROUP_ID       empty or too long group id
     ├── InvalidSessionTimeoutError       INVALID_SESSION_TIMEOUT  outside the coordinator's bounds
     ├── InconsistentGroupProtocolError   INCONSISTENT_GROUP_PROTOCOL  no protocol in common / type differs
     ├── MemberIdRequiredError            MEMBER_ID_REQUIRED     first join with an empty id (`member_id`
     │                                                           carries the id to rejoin with)
     ├── UnknownMemberIdError             UNKNOWN_MEMBER_ID
     ├── IllegalGenerationError           ILLEGAL_GENERATION
     ├── RebalanceInProgressError         REBALANCE_IN_PROGRESS
     ├── FencedInstanceIdError            FENCED_INSTANCE_ID     a newer member holds the group_instance_id
     ├── GroupMaxSizeReachedError         GROUP_MAX_SIZE_REACHED
     ├── GroupIdNotFoundError             GROUP_ID_NOT_FOUND
     ├── NonEmptyGroupError               NON_EMPTY_GROUP        delete / reset on a group with members
     └── OffsetMetadataTooLargeError      OFFSET_METADATA_TOO_LARGE

The codes are Kafka's names. FENCED_INSTANCE_ID, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT,
INCONSISTENT_GROUP_PROTOCOL, GROUP_MAX_SIZE_REACHED and OFFSET_METADATA_TOO_LARGE are not yet in
PROTOCOL.md / raftlog/errors.py (reported to the lead); the others are.

Public scalar attributes are wire details (raftlog.errors.as_wire_error copies them), e.g.
`MemberIdRequiredError.member_id`, `InvalidGroupRequestError.field`.
"""

from __future__ import annotations


class GroupError(Exception):
    """Root of the groupcoord errors. `code` is the stable wire string; `retriable` says whether
    the same request may succeed later (after finding the coordinator again / rejoining)."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class InvalidGroupRecordError(GroupError):
    """Bytes that do not decode to a valid `__consumer_offsets` key or value (strict decode),
    or a record built with out-of-range fields. The message names the field."""

    code = "CORRUPT_MESSAGE"


class InvalidGroupRequestError(GroupError):
    code = "INVALID_REQUEST"

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class NotCoordinatorError(GroupError):
    code = "NOT_COORDINATOR"
    retriable = True


class CoordinatorLoadInProgressError(GroupError):
    code = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(GroupError):
    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class InvalidGroupIdError(GroupError):
    code = "INVALID_GROUP_ID"


class InvalidSessionTimeoutError(GroupError):
    code = "INVALID_SESSION_TIMEOUT"


class InconsistentGroupProtocolError(GroupError):
    code = "INCONSISTENT_GROUP_PROTOCOL"


class MemberIdRequiredError(GroupError):
    """The join was parked as a pending member: rejoin with `member_id`."""

    code = "MEMBER_ID_REQUIRED"

    def __init__(self, message: str, member_id: str):
        super().__init__(message)
        self.member_id = member_id


class UnknownMemberIdError(GroupError):
    code = "UNKNOWN_MEMBER_ID"


class IllegalGenerationError(GroupError):
    code = "ILLEGAL_GENERATION"


class RebalanceInProgressError(GroupError):
    code = "REBALANCE_IN_PROGRESS"
    retriable = True


class FencedInstanceIdError(GroupError):
    code = "FENCED_INSTANCE_ID"


class GroupMaxSizeReachedError(GroupError):
    code = "GROUP_MAX_SIZE_REACHED"


class GroupIdNotFoundError(GroupError):
    code = "GROUP_ID_NOT_FOUND"


class NonEmptyGroupError(GroupError):
    code = "NON_EMPTY_GROUP"


class OffsetMetadataTooLargeError(GroupError):
    code = "OFFSET_METADATA_TOO_LARGE"


ERRORS_BY_CODE: dict[str, type[GroupError]] = {
    cls.code: cls
    for cls in (
        InvalidGroupRequestError,
        NotCoordinatorError,
        CoordinatorLoadInProgressError,
        CoordinatorNotAvailableError,
        InvalidGroupIdError,
        InvalidSessionTimeoutError,
        InconsistentGroupProtocolError,
        UnknownMemberIdError,
        IllegalGenerationError,
        RebalanceInProgressError,
        FencedInstanceIdError,
        GroupMaxSizeReachedError,
        GroupIdNotFoundError,
        NonEmptyGroupError,
        OffsetMetadataTooLargeError,
    )
}

"""The console's errors: the registry classes it uses (imported here once, so the rest of
the package names them from one place) and its one own class.

    raftlog.base.errors.InvalidRequestError   INVALID_REQUEST
     ├── BadInputError                   a URL parameter or form field the console cannot use
     │                                   (`field` names it); shown on the page with status 400
     └── CsrfError                       a state-changing form without this session's token (403)
    raftlog.base.errors.GroupIdNotFoundError  GROUP_ID_NOT_FOUND
     └── UnknownGroupError               a group page for a group the coordinator does not know (404)

The cluster's ACL refusals (NOT_ALLOWED) are shown as 403 "not allowed for your user";
a login the cluster refuses (SaslAuthenticationFailedError) as 401.
Everything the cluster answers arrives as the registry's class (`error_from_wire`) and is
shown as one line on the page; the client's own failures (no broker reachable, connection
lost) likewise. Nothing here ever reaches the browser as a traceback.
"""

from __future__ import annotations

from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InvalidRequestError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RaftlogError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)
from raftlog.client.errors import ClientClosedError, ConnectionLostError, NoBrokerAvailableError

__all__ = [
    "NOT_ALLOWED",
    "BadInputError",
    "CsrfError",
    "UnknownGroupError",
    "RaftlogError",
    "InvalidRequestError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "RequestTimedOutError",
    "UnknownTopicOrPartitionError",
    "GroupIdNotFoundError",
    "ClientClosedError",
    "SaslAuthenticationFailedError",
    "ConnectionLostError",
    "NoBrokerAvailableError",
    "error_from_wire",
]


class BadInputError(InvalidRequestError):
    """A URL parameter or form field the console cannot use; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field=field)
        self.field = field


class CsrfError(InvalidRequestError):
    """A form that changes state arrived without this session's CSRF token (or a stale one)."""


class UnknownGroupError(GroupIdNotFoundError):
    """The coordinator knows no such group (Kafka's "Dead": no members, no offsets)."""


# An ACL of the cluster said no to this visitor's user.
NOT_ALLOWED = (TopicAuthorizationFailedError, GroupAuthorizationFailedError,
               ClusterAuthorizationFailedError)

"""The groupcoord package's own exceptions, each a subclass of the registry class of its wire
code (raftlog/base/errors.py). Everything else the coordinator answers with is a registry class
itself, named as Kafka names the code (NotCoordinatorError, UnknownMemberIdError,
IllegalGenerationError, RebalanceInProgressError, MemberIdRequiredError, ...).

    CorruptMessageError
     └── InvalidGroupRecordError     bytes that are not a valid `__consumer_offsets` key or value
                                     (strict decode), or a record built with out-of-range fields
"""

from __future__ import annotations

from raftlog.base.errors import CorruptMessageError

__all__ = ["InvalidGroupRecordError"]


class InvalidGroupRecordError(CorruptMessageError):
    """The message names the field."""

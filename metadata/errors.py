"""The metadata package's own exceptions, each a subclass of the registry class of its wire
code (raftlog/base/errors.py). Everything else the package raises is a registry class itself
(NotControllerError, InvalidTopicError, TopicAlreadyExistsError, InvalidConfigError, ...).

    CorruptMessageError
     └── InvalidRecordError          bytes that are not a valid record, envelope or snapshot
                                     (strict decode), or a record built with out-of-range fields
    MessageTooLargeError
     └── EnvelopeTooLargeError       an envelope over MAX_ENVELOPE_BYTES
    UnknownServerError
     └── ProducerIdsExhaustedError   the 64-bit producer id space is used up

`image.RequestOutcome.code` holds the registry code when replay rejected an envelope;
`RequestOutcome.error()` turns it back into the registry exception.
"""

from __future__ import annotations

from raftlog.base.errors import CorruptMessageError, MessageTooLargeError, UnknownServerError

__all__ = ["InvalidRecordError", "EnvelopeTooLargeError", "ProducerIdsExhaustedError"]


class InvalidRecordError(CorruptMessageError):
    """The message names the record kind and field."""


class EnvelopeTooLargeError(MessageTooLargeError):
    pass


class ProducerIdsExhaustedError(UnknownServerError):
    pass

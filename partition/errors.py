"""The partition package's own exceptions, each a subclass of the registry class of its wire
code (raftlog/base/errors.py). Where the registry class says all there is to say
(NotLeaderError, OffsetOutOfRangeError, MessageTooLargeError), the package raises it directly.

    CorruptMessageError
     └── CorruptRecordError           bytes that are not a valid RecordBatch v2 (the message says why)
    UnsupportedCompressionTypeError
     └── CompressionUnavailableError  the codec needs an extra that is not installed
    KafkaStorageError
     └── LogClosedError               the log was closed or failed
    UnknownServerError
     └── RaftStateError               the Raft core's contract was broken: take the partition offline
"""

from raftlog.base.errors import (
    CorruptMessageError,
    KafkaStorageError,
    UnknownServerError,
    UnsupportedCompressionTypeError,
)

__all__ = ["CorruptRecordError", "CompressionUnavailableError", "LogClosedError", "RaftStateError"]


class CorruptRecordError(CorruptMessageError):
    """Bytes that do not form a valid RecordBatch v2; the message says what was wrong."""


class CompressionUnavailableError(UnsupportedCompressionTypeError):
    """The batch's codec needs a package that is not installed (the `compression` extra)."""


class LogClosedError(KafkaStorageError):
    """The log was closed, or failed and was taken offline."""


class RaftStateError(UnknownServerError):
    """An event broke the core's contract (a shell bug or a corrupt peer); the partition
    must stop rather than risk its log."""

"""The partition package's own exceptions, each a subclass of the registry class of its wire
code (raftlog/base/errors.py). Where the registry class says all there is to say
(NotLeaderError, OffsetOutOfRangeError, MessageTooLargeError), the package raises it directly.

    CorruptMessageError
     └── CorruptRecordError           bytes that are not a valid RecordBatch v2 (the message says why)
          └── StorageDamageError      bytes AT REST (a segment or its index) that fail their checks:
                                      where (segment, position, offset) and what ("batch", "index")
    UnsupportedCompressionTypeError
     └── CompressionUnavailableError  the codec needs an extra that is not installed
    KafkaStorageError
     └── LogClosedError               the log was closed or failed
    InvalidRequestError
     └── InvalidAppendError           well-formed batches that cannot go at the end of a log
          ├── NonContiguousAppend     replicated batches not at log_end_offset, or going back
          └── EpochRegression         a batch's leader epoch below the log's latest
    UnknownServerError
     └── RaftStateError               the Raft core's contract was broken: take the partition offline
"""

from raftlog.base.errors import (
    CorruptMessageError,
    InvalidRequestError,
    KafkaStorageError,
    UnknownServerError,
    UnsupportedCompressionTypeError,
)

__all__ = [
    "CorruptRecordError",
    "StorageDamageError",
    "CompressionUnavailableError",
    "LogClosedError",
    "RaftStateError",
    "InvalidAppendError",
    "NonContiguousAppend",
    "EpochRegression",
]


class CorruptRecordError(CorruptMessageError):
    """Bytes that do not form a valid RecordBatch v2; the message says what was wrong."""


class StorageDamageError(CorruptRecordError):
    """A read found bytes on this replica's disk that fail their checks (a batch CRC, a
    header, offsets out of order, or an index entry that does not point at the batch it
    names). Never served: the replica checks the segment and repairs itself from a peer
    (partition/replica.py "Damage"). Details: `segment` (its base offset), `position` (byte
    position in the segment file), `offset` (the damaged batch's base offset when its header
    reads, else the first offset that could not be read), `what` ("batch" | "index")."""

    def __init__(self, message: str = "", *, segment: int, position: int, offset: int,
                 what: str = "batch", **details) -> None:
        super().__init__(message, segment=segment, position=position, offset=offset, what=what,
                         **details)
        self.segment = segment
        self.position = position
        self.offset = offset
        self.what = what


class CompressionUnavailableError(UnsupportedCompressionTypeError):
    """The batch's codec needs a package that is not installed (the `compression` extra)."""


class LogClosedError(KafkaStorageError):
    """The log was closed, or failed and was taken offline."""


class RaftStateError(UnknownServerError):
    """An event broke the core's contract (a shell bug or a corrupt peer); the partition
    must stop rather than risk its log."""


class InvalidAppendError(InvalidRequestError):
    """Batches that are well-formed but cannot go at the end of this log."""


class NonContiguousAppend(InvalidAppendError):
    """Replicated batches that do not start at log_end_offset or whose offsets go back."""


class EpochRegression(InvalidAppendError):
    """A batch whose partition leader epoch is below the log's latest epoch."""

"""Errors of the partition package, each with a stable wire `code` (DESIGN §6).

    PartitionError
     ├── CorruptRecordError        CORRUPT_MESSAGE        bytes that are not a valid batch
     ├── CompressionUnavailable    UNSUPPORTED_COMPRESSION_TYPE  codec needs an extra
     ├── OffsetOutOfRangeError     OFFSET_OUT_OF_RANGE    below log start / above log end
     ├── MessageTooLargeError      MESSAGE_TOO_LARGE      batch over a byte limit
 ├── NotLeaderError            NOT_LEADER             this replica does not lead (hint kept)
 ├── RaftStateError            UNKNOWN_SERVER_ERROR   Raft contract broken: take it offline
     └── LogClosedError            KAFKA_STORAGE_ERROR    the log was closed or failed
"""


class PartitionError(Exception):
    code = "UNKNOWN_SERVER_ERROR"


class CorruptRecordError(PartitionError):
    """Bytes that do not form a valid RecordBatch v2; the message says what was wrong."""

    code = "CORRUPT_MESSAGE"


class CompressionUnavailable(PartitionError):
    code = "UNSUPPORTED_COMPRESSION_TYPE"


class OffsetOutOfRangeError(PartitionError):
    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class MessageTooLargeError(PartitionError):
    code = "MESSAGE_TOO_LARGE"


class LogClosedError(PartitionError):
    code = "KAFKA_STORAGE_ERROR"


class NotLeaderError(PartitionError):
    """The operation needs the leader; `leader_id` is the hint (None if unknown)."""

    code = "NOT_LEADER"

    def __init__(self, leader_id: int | None, epoch: int):
        super().__init__(f"not the leader of epoch {epoch} (leader: {leader_id})")
        self.leader_id = leader_id
        self.epoch = epoch


class RaftStateError(PartitionError):
    """An event broke the core's contract (a shell bug or a corrupt peer); the partition
    must stop rather than risk its log."""

    code = "UNKNOWN_SERVER_ERROR"

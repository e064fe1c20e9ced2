"""The checkpoint files of a partition log (partition/log.py): their names, formats, and
reading and writing them. Kafka keeps the same files beside its segments
(LeaderEpochCheckpointFile, OffsetCheckpointFile, ProducerStateManager's snapshots).

Files in the log directory besides the segments:
* `leader-epoch-checkpoint`: [(epoch, start_offset)], Kafka's LeaderEpochFileCache
  (partition/epoch_cache.py).
* `log-start-offset-checkpoint`: log_start_offset, so it survives a restart even when
  retention leaves it where no segment starts.
* `recovery-point-offset-checkpoint`: the base offset of the first segment that may not be
  durable. Every segment below it was fsynced (data and index files) after it was sealed.
* `recovery-point-active`: the offset-granular part of the recovery point (issue 19): the
  active segment's base, a byte position and offset up to which its batches were checked and
  fsynced, and its indexes and index state for that prefix (binary, CRC-32C at the end; see
  `ActiveCheckpoint`). Written every few seconds by the replica (`Log.recovery_snapshot` +
  `Log.write_recovery_point`) and at `close`; removed (durably) before any cut of the log. A
  missing, damaged or stale one (another base, a file shorter than its position, an index
  that does not match) is ignored: the active segment is then scanned whole.
* `producer-snapshot-<S:020d>`: the replica's producer state as of an offset S (issue 19;
  format in partition/producer_state.py "Snapshot"; when they are written, kept and not used:
  partition/producer_snapshot.py).
The first three are `<kind>\\n<count>\\n<lines>\\ncrc32c <hex>\\n`, replaced atomically (tmp file,
fsync, rename, fsync dir: partition/segment.py `write_durably`); a missing or bad one is
rebuilt from the segments (epochs), or taken as the safe default (log start: the first
segment; recovery point: 0, scan all).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

__all__ = [
    "EPOCH_CHECKPOINT", "LOG_START_CHECKPOINT", "RECOVERY_POINT_CHECKPOINT",
    "ACTIVE_POINT_CHECKPOINT", "PRODUCER_SNAPSHOT_PREFIX", "PRODUCER_SNAPSHOTS_KEPT",
    "RECOVERY_POINT_MIN_BYTES", "RECOVERY_POINT_CLOSE_MIN_BYTES", "RECOVERY_POINT_FLUSH_BYTES",
    "ActiveCheckpoint", "encode_checkpoint", "decode_checkpoint", "read_checkpoint",
    "read_offset_checkpoint", "producer_snapshot_name", "producer_snapshot_offset_of",
]

logger = logging.getLogger(__name__)

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
ACTIVE_POINT_CHECKPOINT = "recovery-point-active"
PRODUCER_SNAPSHOT_PREFIX = "producer-snapshot-"
PRODUCER_SNAPSHOTS_KEPT = 2  # the newest, and one older by a checkpoint interval (docstring)
# A new offset-granular point is written once the active segment holds this many bytes past
# the last one (periodically and at close): what a restart scans is bounded by it plus what
# was written since the last checkpoint, and idle or slow partitions cost no fsyncs.
RECOVERY_POINT_MIN_BYTES = 4 << 20
RECOVERY_POINT_CLOSE_MIN_BYTES = 1 << 20
# ... and after a flush once this many bytes are past it (a fast writer's 5 s can be a GiB).
RECOVERY_POINT_FLUSH_BYTES = 64 << 20
_ACTIVE_MAGIC = b"RPA1"
# magic, base, position, next_offset, last_epoch, max_timestamp, offset_of_max_timestamp,
# bytes_since_index, index bytes, timeindex bytes; then the two indexes, then CRC-32C.
_ACTIVE_HEAD = struct.Struct(">4sqqqiqqqII")
_CRC = struct.Struct(">I")


def encode_checkpoint(kind: str, lines: list[str]) -> bytes:
    body = f"{kind}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    raw = body.encode()
    return raw + f"crc32c {crc32c(raw):08x}\n".encode()


def decode_checkpoint(kind: str, data: bytes) -> list[str] | None:
    """The lines of a checkpoint, or None if it is not a whole, valid one of this kind."""
    cut = data.rfind(b"crc32c ")
    if cut < 0 or not data.endswith(b"\n"):
        return None
    raw = data[:cut]
    try:
        if int(data[cut + 7:].strip(), 16) != crc32c(raw):
            return None
        lines = raw.decode().split("\n")
        if lines[0] != kind or lines[-1] != "":
            return None
        count = int(lines[1])
        body = lines[2:-1]
    except (ValueError, UnicodeDecodeError, IndexError):
        return None
    return body if len(body) == count else None


def read_checkpoint(directory: Path, name: str) -> list[str] | None:
    try:
        data = (directory / name).read_bytes()
    except FileNotFoundError:
        return None
    lines = decode_checkpoint(name, data)
    if lines is None:
        logger.warning("%s/%s is damaged; ignoring it", directory, name)
    return lines


def read_offset_checkpoint(directory: Path, name: str) -> int | None:
    lines = read_checkpoint(directory, name)
    if lines is None or len(lines) != 1:
        return None
    try:
        return int(lines[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class ActiveCheckpoint:
    """The offset-granular recovery point of the active segment (module docstring): taken by
    the writer (`Log.recovery_snapshot`, no I/O), made durable by `write_recovery_point`.
    `generation` is the log's cut counter when taken (a cut since makes it void)."""

    base: int
    position: int
    next_offset: int
    last_epoch: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int
    index: bytes
    timeindex: bytes
    generation: int = 0

    def encode(self) -> bytes:
        raw = _ACTIVE_HEAD.pack(_ACTIVE_MAGIC, self.base, self.position, self.next_offset,
                                self.last_epoch, self.max_timestamp, self.offset_of_max_timestamp,
                                self.bytes_since_index, len(self.index), len(self.timeindex))
        raw += self.index + self.timeindex
        return raw + _CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, data: bytes) -> "ActiveCheckpoint | None":
        """The checkpoint in `data`, or None if it is not a whole, valid one."""
        if len(data) < _ACTIVE_HEAD.size + _CRC.size:
            return None
        raw = data[:-_CRC.size]
        if _CRC.unpack_from(data, len(raw))[0] != crc32c(raw):
            return None
        (magic, base, position, next_offset, last_epoch, max_ts, off_max_ts, since, n_index,
         n_time) = _ACTIVE_HEAD.unpack_from(raw)
        if magic != _ACTIVE_MAGIC or len(raw) != _ACTIVE_HEAD.size + n_index + n_time:
            return None
        if base < 0 or position <= 0 or next_offset <= base or since < 0:
            return None
        at = _ACTIVE_HEAD.size
        return cls(base, position, next_offset, last_epoch, max_ts, off_max_ts, since,
                   raw[at:at + n_index], raw[at + n_index:])


def producer_snapshot_name(offset: int) -> str:
    """The file name of the producer snapshot at `offset`."""
    return f"{PRODUCER_SNAPSHOT_PREFIX}{offset:020d}"


def producer_snapshot_offset_of(name: str) -> int | None:
    """The offset a producer snapshot's file name carries; None for any other name."""
    tail = name[len(PRODUCER_SNAPSHOT_PREFIX):]
    if not name.startswith(PRODUCER_SNAPSHOT_PREFIX) or len(tail) != 20 or not tail.isdigit():
        return None
    return int(tail)

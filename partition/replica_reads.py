"""A replica's consumer reads, the part of `partition.replica.Replica` that serves Fetch and
ListOffsets from the leader's log up to the high watermark (a base class of it, holding no
state of its own), and the long-poll watchers woken when the high watermark moves.

A read runs inline when it touches only the cached tail and little of it, else in a worker
thread (partition/replica_storage.py "Threads and disk"). A zero-copy read
(`read_committed_slice`, the Kafka listener's fetch) reads only the bytes not yet checked
(partition/segment.py "checked once"): inline when those are few and in the cached tail; else
in a worker thread, which for a cold range reads all of it into the page cache for the
sendfile. A read that finds damage reports it (`report_damage`) and never serves the bytes.
"""

from __future__ import annotations

import errno
import logging
import time
from functools import partial
from typing import Any, Final

import trio

from partition.batch import decode_batch
from partition.errors import LogClosedError, StorageDamageError
from partition.log import Log
from partition.segment import FileSlice
from raftlog.base.eventlog import log_event
from raftlog.base.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    RaftlogError,
)

__all__ = ['ReplicaReads', 'INLINE_READ_MAX_BYTES']

logger = logging.getLogger(__name__)

# A read that needs a descriptor (a sealed segment reopened by the file cache) and finds none
# (issue 46): the node answers KAFKA_STORAGE_ERROR (clients retry) and logs it, at most once
# per OUT_OF_FILES_LOG_S; the replica and the node carry on.
OUT_OF_FILES_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE})
OUT_OF_FILES_LOG_S: Final = 10.0
_out_of_files = {"logged_s": float("-inf"), "since": 0}

def _max_timestamp(log: Log, high_watermark: int) -> tuple[int, int]:
    best_base, best_ts = -1, -1
    for h in log.batch_headers():
        if h.base_offset >= high_watermark:
            break
        if not h.is_control and h.max_timestamp > best_ts:
            best_base, best_ts = h.base_offset, h.max_timestamp
    if best_base < 0:
        return -1, -1
    # Kafka 3.8+ (KAFKA-16310, RecordBatch.offsetOfMaxTimestamp): the first record of that
    # batch carrying the max timestamp, not the batch's last offset.
    header, records = decode_batch(log.read(best_base, 1))
    exact = next((r.offset for r in records if r.timestamp == best_ts), None)
    return (header.base_offset if exact is None else exact), best_ts  # LogAppendTime: every record has it


INLINE_READ_MAX_BYTES: Final = 256 << 10  # larger reads (and their CRC checks) go to a thread


class ReplicaReads:
    """Replica's consumer reads (module docstring)."""

    async def read_committed(self, fetch_offset: int, max_bytes: int, *, upto: int | None = None) -> bytes:
        """Whole, CRC-checked batches from `fetch_offset` below the high watermark (leader
        only); cold or large reads in a worker thread. Raises NotLeaderError,
        KafkaStorageError (offline, or damage found: this replica repairs it from a peer),
        StorageDamageError (CORRUPT_MESSAGE with the offset: damage and no peer to repair
        from), OffsetOutOfRangeError. `upto`: read only below it (read_committed's last stable
        offset) when that is below the high watermark."""
        data = await self._read_committed(fetch_offset, max_bytes, zero_copy=False, upto=upto)
        return b"" if data is None else data

    async def _read_committed(self, fetch_offset: int, max_bytes: int, *, zero_copy: bool,
                              as_follower: bool = False, upto: int | None = None) -> Any:
        """`read_committed` / `read_committed_slice`: None when there is nothing to read.
        `as_follower`: a follower serves it too, up to its own high watermark (KIP-392)."""
        if as_follower:
            self.check_online()
        else:
            self.check_leader()
        log = self.log
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            raise OffsetOutOfRangeError(offset=fetch_offset, log_start_offset=log.log_start_offset,
                                        log_end_offset=log.log_end_offset)
        hw = self.high_watermark if upto is None else min(upto, self.high_watermark)
        if fetch_offset >= hw:
            return None
        try:
            return await self._read(log, fetch_offset, max_bytes, max_offset=hw, zero_copy=zero_copy)
        except StorageDamageError as exc:
            raise self._damaged_read(exc) from None
        except LogClosedError as exc:
            self._go_offline(exc)
            raise

    def _damaged_read(self, exc: StorageDamageError) -> RaftlogError:
        """A consumer read found damage: report it, and the error to answer with (the damage
        itself, CORRUPT_MESSAGE with the offset, when no peer can repair it; else
        KAFKA_STORAGE_ERROR: this replica repairs itself and clients go elsewhere)."""
        self.report_damage(exc, found_by="fetch")
        if len(self.voters) == 1:
            return exc
        return KafkaStorageError(
            f"{self.name}: damaged batch at offset {exc.offset} on broker {self.replica_id};"
            " it is being repaired from another replica", offset=exc.offset)

    async def read_committed_slice(self, fetch_offset: int, max_bytes: int, *,
                                   as_follower: bool = False, upto: int | None = None) -> FileSlice | None:
        """`read_committed` as a FileSlice of the segment file (zero-copy senders; the caller
        closes it), None where that returns b"". The range is checked as `read_committed`'s
        bytes are (never a slice over a bad batch); the check runs where `_read` would read.
        Same errors."""
        return await self._read_committed(fetch_offset, max_bytes, zero_copy=True, as_follower=as_follower,
                                          upto=upto)

    async def _read(self, log: Log, offset: int, max_bytes: int, *,
                    max_offset: int | None = None, zero_copy: bool = False,
                    own_tail: bool = False) -> Any:
        """`_read_log`; out of descriptors (EMFILE, ENFILE), KafkaStorageError instead
        (retriable: the read is tried again by its client or follower), logged."""
        try:
            return await self._read_log(log, offset, max_bytes, max_offset=max_offset,
                                        zero_copy=zero_copy, own_tail=own_tail)
        except OSError as exc:
            if exc.errno not in OUT_OF_FILES_ERRNOS:
                raise
            raise self._out_of_files(exc, offset) from None

    def _out_of_files(self, exc: OSError, offset: int) -> KafkaStorageError:
        now_s = time.monotonic()
        _out_of_files["since"] += 1
        if now_s - _out_of_files["logged_s"] >= OUT_OF_FILES_LOG_S:
            log_event(logger, "out_of_file_descriptors", level=logging.ERROR, topic=self.topic,
                      partition=self.partition, offset=offset, error=str(exc),
                      reads_refused=_out_of_files["since"],
                      hint="raise `ulimit -n` or lower log_open_files_max")
            _out_of_files["logged_s"] = now_s
            _out_of_files["since"] = 0
        return KafkaStorageError(
            f"{self.name}: broker {self.replica_id} is out of file descriptors ({exc.strerror});"
            " retry", offset=offset)

    async def _read_log(self, log: Log, offset: int, max_bytes: int, *,
                        max_offset: int | None = None, zero_copy: bool = False,
                        own_tail: bool = False) -> Any:
        """`log.read` inline when it touches only the cached tail and little of it, else in a
        worker thread (module docstring "Threads and disk"). With `zero_copy`,
        `log.read_slice`: it reads only the bytes still to be checked (once per byte), so it
        runs inline when it stays in the cached tail and those are few; else in a worker
        thread, which for a cold range also reads the rest into the page cache, so that
        the sender's sendfile on the trio thread does not wait on the disk either.
        `own_tail`: a read for a follower (partition/log.py "Integrity").
        Concurrency: a slice made in a worker thread is returned even when the caller is
        cancelled meanwhile (to_thread does not abandon the thread), so it is never lost
        unclosed."""
        behind = log.bytes_behind_end(offset)
        hot = behind <= log.config.hot_tail_bytes
        if zero_copy:
            if hot and log.unverified_bytes(offset, max_bytes, own_tail=own_tail) <= INLINE_READ_MAX_BYTES:
                return log.read_slice(offset, max_bytes, max_offset=max_offset, own_tail=own_tail)
            return await trio.to_thread.run_sync(
                partial(log.read_slice, offset, max_bytes, max_offset=max_offset, warm=not hot,
                        own_tail=own_tail),
                limiter=self.disk.io)
        if hot and min(behind, max_bytes) <= INLINE_READ_MAX_BYTES:
            return log.read(offset, max_bytes, max_offset=max_offset, own_tail=own_tail)
        return await trio.to_thread.run_sync(
            partial(log.read, offset, max_bytes, max_offset=max_offset, own_tail=own_tail),
            limiter=self.disk.io)

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Log.offset_for_timestamp in a worker thread (it may walk cold segments)."""
        return await trio.to_thread.run_sync(self.log.offset_for_timestamp, timestamp_ms,
                                             limiter=self.disk.io)

    async def max_timestamp_offset(self, high_watermark: int) -> tuple[int, int]:
        """(offset, timestamp) for ListOffsets -3 (KIP-734): the largest timestamp below the
        high watermark, and the offset of the first record carrying it in the first batch
        holding it (control batches skipped), as Kafka 3.8+; (-1, -1) for an empty log. In a worker thread: it reads
        every batch header of the log."""
        return await trio.to_thread.run_sync(_max_timestamp, self.log, high_watermark,
                                             limiter=self.disk.io)

    def watch(self, event: trio.Event) -> None:
        """Set `event` at the next high-watermark or leadership change (once)."""
        self._watchers.add(event)

    def unwatch(self, event: trio.Event) -> None:
        self._watchers.discard(event)

    async def wait_high_watermark(self, offset: int, deadline: float) -> None:
        """Return once the high watermark reaches `offset`, this replica stops leading, or
        `deadline` (trio time) passes; the caller reads the high watermark after."""
        with trio.move_on_at(deadline):
            while self.high_watermark < offset and self.is_leader:
                event = trio.Event()
                self.watch(event)
                try:
                    await event.wait()
                finally:
                    self.unwatch(event)

    def _wake_watchers(self) -> None:
        watchers, self._watchers = self._watchers, set()
        for ev in watchers:
            ev.set()

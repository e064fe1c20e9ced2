"""The log side of producer-state snapshots (issue 19), Kafka's ProducerStateManager
snapshot files: `producer-snapshot-<S:020d>` holds the replica's producer state as of an
offset S (format in partition/producer_state.py "Snapshot"), so that a restart walks batch
headers only from S (`load_producer_state`) instead of the whole log.

Written beside the recovery point by the replica (`producer_snapshot` +
`write_producer_snapshot`: the log is fsynced up to S first); the newest
PRODUCER_SNAPSHOTS_KEPT are kept, since S is the log end when taken and a new leader's
truncation of the uncommitted tail can cut below the newest one: the one before it, older by
a checkpoint interval, is then below the cut. Each is removed durably before any cut that
reaches below its S, as the recovery point is: a truncation or repair below S, a reset, the
log start moving past S, and a compaction that empties a producer's batch below S. One that
is damaged, past the log end, below the log start, of another leader epoch at S-1, or whose S
falls inside a batch is not used (and removed): the next older one, else a walk of the whole
log, serves instead.

`ProducerSnapshots` is a part of `partition.log.Log` (a base class of it, holding no state of
its own); its calls follow Log's concurrency rules (partition/log.py "Concurrency").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

from partition.batch import Header, txn_marker
from partition.checkpoint import (
    PRODUCER_SNAPSHOTS_KEPT,
    RECOVERY_POINT_MIN_BYTES,
    producer_snapshot_name,
    producer_snapshot_offset_of,
)
from partition.errors import LogClosedError, StorageDamageError
from partition.file_io import read_or_none, unlink_if_present, write_durably
from partition.log_loader import ScannedTail
from partition.producer_state import MAX_SNAPSHOT_BYTES, ProducerSnapshot, ProducerStateManager

__all__ = ["ProducerSnapshots", "ProducerCheckpoint", "ProducerStateLoad"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProducerCheckpoint:
    """A producer-state snapshot taken by the writer (`Log.producer_snapshot`, no I/O), to
    be made durable by `write_producer_snapshot`; `generation` as in ActiveCheckpoint."""

    snapshot: ProducerSnapshot
    generation: int


@dataclass(frozen=True)
class ProducerStateLoad:
    """What `Log.load_producer_state` did: the snapshot offset it started from (None: the
    whole log was walked; `unused` then says why no snapshot served) and the batch headers
    it walked."""

    snapshot_offset: int | None
    batches_walked: int
    unused: str | None = None


class _SnapshotMisfit(Exception):
    """The producer snapshot's offset falls inside a batch of this log."""


def _apply_counted(state: ProducerStateManager, headers: Iterator[Header], *,
                   from_offset: int | None = None,
                   marker_of: Callable[[Header], tuple[bool, int]] | None = None) -> int:
    """`state.apply_headers(headers)`; returns how many headers it took. With `from_offset`,
    the first must start at or after it (raises _SnapshotMisfit)."""
    walked = 0

    def counted() -> Iterator[Header]:
        nonlocal walked
        for h in headers:
            if not walked and from_offset is not None and h.base_offset < from_offset:
                raise _SnapshotMisfit(f"its offset {from_offset} lies inside the batch "
                                      f"{h.base_offset}-{h.last_offset}")
            walked += 1
            yield h

    try:
        state.apply_headers(counted(), marker_of)
    finally:
        headers.close()  # unpin now, not at garbage collection
    return walked


class ProducerSnapshots:
    """Log's producer-state snapshots (module docstring)."""

    @property
    def producer_snapshot_offset(self) -> int | None:
        """S of the newest durable producer snapshot; None when there is none."""
        return self._producer_snapshots[-1] if self._producer_snapshots else None

    def producer_snapshot(self, state: ProducerStateManager,
                          min_bytes: int = RECOVERY_POINT_MIN_BYTES) -> ProducerCheckpoint | None:
        """Writer, no I/O: `state` (the producer state of this log as it stands: the caller
        holds the writer's place) as of log_end_offset, or None when it is not `exact`, the
        log holds fewer than `min_bytes` past the newest durable snapshot (past the log start
        when there is none), or the log is closed. O(producers). Make it durable with
        `write_producer_snapshot` (any thread)."""
        if self._closed or self._failed is not None or not state.exact:
            return None
        end = self.log_end_offset
        prev = self.producer_snapshot_offset
        if end == prev or end <= self.log_start_offset:
            return None
        since = self.bytes_behind_end(self.log_start_offset if prev is None else prev)
        if since < max(min_bytes, 1):
            return None
        return ProducerCheckpoint(state.snapshot(end, self._epochs.epoch_at(end - 1)),
                                  self._cut_generation)

    def write_producer_snapshot(self, ckpt: ProducerCheckpoint) -> bool:
        """Make `ckpt` durable: fsync the log first if it holds offsets below the snapshot's
        that are not yet flushed, then write its file atomically, the oldest kept one removed
        in the same directory fsync. False (nothing written) when a cut or a move of the log
        start came after the snapshot, or a snapshot at its offset or later was written since
        it was taken (the flush task's and the maintenance pass's can be taken together).
        Blocking; any thread (it waits for a running flush). Raises LogClosedError (an fsync
        or write failed)."""
        self._check_open()
        data = ckpt.snapshot.encode()
        at = ckpt.snapshot.offset
        with self._flush_lock:
            self._check_open()
            if ckpt.generation != self._cut_generation:
                return False
            try:
                if self._producer_snapshots and self._producer_snapshots[-1] >= at:
                    return False  # another checkpoint (flush, maintenance) wrote it or a newer one
                if self.flushed_offset < at:
                    self._flush_locked()
                doomed = set(self._producer_snapshots[:max(0, len(self._producer_snapshots)
                                                           - PRODUCER_SNAPSHOTS_KEPT + 1)])
                self._unlink_producer_snapshots(lambda s: s in doomed)
                write_durably(self.directory, producer_snapshot_name(at), data)  # fsyncs the dir
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"producer snapshot write failed: {e}") from e
            self._producer_snapshots.append(at)
            self._producer_snapshot_refused = None
            return True

    def discard_producer_snapshots(self) -> None:
        """Writer: remove every producer snapshot durably and void any taken so far (before
        the replica resets the log). Blocking. Raises LogClosedError."""
        self._check_open()
        with self._flush_lock:
            self._void_producer_snapshots(lambda at: True)

    def _void_producer_snapshots(self, doomed: Callable[[int], bool]) -> None:
        """Under _flush_lock: void the producer snapshots taken so far; remove the durable
        ones `doomed(offset)` names, durably."""
        self._cut_generation += 1
        try:
            if self._unlink_producer_snapshots(doomed):
                self._fsync_dir()
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"producer snapshot removal failed: {e}") from e

    def _unlink_producer_snapshots(self, doomed: Callable[[int], bool]) -> bool:
        """Unlink the producer snapshot files (as the directory lists them: during open, before
        they are checked, they are not known yet) whose offset `doomed` names; the caller
        fsyncs the directory. Returns whether any went."""
        gone = False
        for name in os.listdir(self.directory):
            at = producer_snapshot_offset_of(name)
            if at is not None and doomed(at):
                gone |= unlink_if_present(self.directory / name)
        self._producer_snapshots = [at for at in self._producer_snapshots if not doomed(at)]
        return gone

    def load_producer_state(self, state: ProducerStateManager, *,
                            use_snapshot: bool = True) -> ProducerStateLoad:
        """Writer (blocking: at open, or with the replica's lock held): rebuild `state` from
        the newest durable producer snapshot that fits this log (module docstring) and the
        batch headers from its offset to the log end; or, when none does, from every batch
        header of the log. One found not to fit (damaged, or its offset inside a batch) is
        removed. Returns a ProducerStateLoad. Raises StorageDamageError (a header in the walk
        does not parse: the replica repairs and calls again), LogClosedError."""
        self._check_open()
        why = "not asked" if not use_snapshot else (self._producer_snapshot_refused or "none")
        self._producer_snapshot_refused = None
        tail, self._scanned_tail = self._scanned_tail, None
        if tail is not None and tail.shape != self._shape():
            tail = None  # the log changed since open
        for at in reversed(self._producer_snapshots if use_snapshot else []):
            state.clear()
            snap, why = self._read_producer_snapshot(at, state.max_producers)
            try:
                if snap is not None:
                    state.load(snap, log_start_offset=self.log_start_offset)
                    walked = _apply_counted(state, self._headers_from(at, tail), from_offset=at,
                                            marker_of=self._marker_of)
                    return ProducerStateLoad(at, walked)
            except _SnapshotMisfit as e:
                why = str(e)
            except StorageDamageError as e:
                if e.what != "index":
                    raise
                why = f"the index led the walk astray ({e})"  # the scrubber or a read rebuilds it
                logger.warning("log %s: %s not used: %s", self.directory, producer_snapshot_name(at), why)
                continue
            logger.warning("log %s: %s not used: %s; removing it", self.directory,
                           producer_snapshot_name(at), why)
            with self._flush_lock:
                self._void_producer_snapshots(lambda s, at=at: s == at)
        state.clear()
        return ProducerStateLoad(None, _apply_counted(state, self._headers_from(None, tail),
                                                    marker_of=self._marker_of), why)

    def _marker_of(self, h: Header) -> tuple[bool, int]:
        """(whether the transaction marker whose header is `h` is a COMMIT, its coordinator
        epoch), its record read from the log: the walk reads headers only."""
        return txn_marker(self.read(h.base_offset, h.size, max_offset=h.base_offset + 1))

    def _shape(self) -> tuple[int, int, int]:
        return self.log_end_offset, self._cut_generation, self._segments[-1].base_offset

    def _headers_from(self, start: int | None, tail: ScannedTail | None) -> Iterator[Header]:
        """`batch_headers(start)`, from `tail` when it covers every batch that walk would
        give: right after open, the producer-state rebuild then walks the headers recovery
        just checked instead of reading them again (at 1,000 partitions after a load, that
        second walk was ~1/4 of a restarted node's replica opening)."""
        begin = self.log_start_offset if start is None else max(start, self.log_start_offset)
        if tail is None or tail.first_offset > begin:
            return self.batch_headers(start)
        return (h for _, h in tail.headers if h.next_offset > begin)

    def _read_producer_snapshot(self, at: int, max_producers: int | None) -> tuple[ProducerSnapshot | None, str]:
        """(the durable producer snapshot at `at`, "") if it is whole and fits this log as it
        stands; else (None, why)."""
        data = read_or_none(self.directory / producer_snapshot_name(at), MAX_SNAPSHOT_BYTES + 1)
        if data is None:
            return None, "gone"
        snap = ProducerSnapshot.decode(data, max_producers=max_producers)
        if snap is None or snap.offset != at:
            return None, "damaged, or more producers than max_producers"
        start, end = self.log_start_offset, self.log_end_offset
        if at > end:
            return None, f"its offset {at} is past the log end {end}"
        if at < start:
            return None, f"its offset {at} is below the log start {start}"
        if at > start and self._epochs.epoch_at(at - 1) != snap.last_epoch:
            return None, (f"the log's leader epoch at {at - 1} is {self._epochs.epoch_at(at - 1)}, "
                          f"the snapshot's {snap.last_epoch}")
        return snap, ""

    def _check_producer_snapshots(self) -> None:
        """Open, before the directory fsync: keep the newest PRODUCER_SNAPSHOTS_KEPT producer
        snapshots that fit the recovered log. The others are unlinked, durably before
        anything is appended: after a recovery that cut below a snapshot's offset, a log
        grown past it again would seem to fit."""
        found = sorted(at for at in map(producer_snapshot_offset_of, os.listdir(self.directory))
                       if at is not None)
        good = []
        for at in reversed(found):
            snap, why = self._read_producer_snapshot(at, None)
            if snap is not None and len(good) < PRODUCER_SNAPSHOTS_KEPT:
                good.append(at)
                continue
            if snap is None:
                logger.warning("log %s: %s not used: %s; removing it", self.directory,
                               producer_snapshot_name(at), why)
                self._producer_snapshot_refused = self._producer_snapshot_refused or why
            os.unlink(self.directory / producer_snapshot_name(at))
            self._dir_dirty = True
        self._producer_snapshots = sorted(good)
        if good:
            self._producer_snapshot_refused = None  # one serves

"""Batched opens of new replicas (issue 46: 10,000 partitions RF 3 created in under a minute).

A new partition's replica used to open like any other: its directory, partition metadata
file and checkpoints each written durably, about ten fsyncs (1.8-3.7 ms each on this
machine's ext4, every one a journal commit, serialised whichever thread asks). Creating
10,000 partitions over three nodes on one disk took ~100 per second.

Here the replicas the reconcile finds new (no directory of theirs at start) are opened
together: each in its own new directory with nothing fsynced (`Replica.open(fresh=True)`:
the partition metadata file, the empty active segment, no checkpoints), then ONE
`make_new_dirs_durable` for the batch (a syncfs where that makes them durable, else an
fsync per file and directory), all in one worker thread call; only then do the replicas
attach, so nothing durable of theirs (a vote, an append) exists before their directories
are. A replica whose directory is there after all (left by a run that stopped before its
reconcile listed it) opens the usual way (`fallback`). Batches hold what arrived while the
previous one ran, at most MAX_BATCH replicas; one batch runs at a time.

Replicas whose directory was there at start (a restart) open the same way in batches of
their own (`open_existing_batch`, at most MAX_EXISTING_BATCH): each recovers with its fsyncs
left to the batch (`Replica.open(defer_sync=True)`; partition/log_loader.py), then one
`make_new_dirs_durable` covers the directories that left any, before any of them attaches.
Several such batches run at once (`parallel`): what is left of an open is mostly waiting on
cold directory and file reads (py-spy of a node restarted with 10,000 replicas: a
directory listing was the largest single item), which overlap in threads.
A restart with 10,000 replicas spent one fsync each on its active segment after the epoch
and log-start checkpoints stopped costing four (issue 46).

Concurrency: trio-thread only (the batch itself in one worker thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import trio

from partition.file_io import make_new_dirs_durable
from raftlog.base.errors import RaftlogError

if TYPE_CHECKING:
    from partition.replica import Replica

__all__ = ["BatchedOpens", "open_existing_batch", "open_fresh_batch"]

MAX_BATCH: Final = 500  # replicas opened in one worker-thread call (one durability barrier)
# Restart: smaller, since a replica with much to recover holds up its batch's others.
MAX_EXISTING_BATCH: Final = 32


def open_fresh_batch(replicas: list[Replica], fallback: Callable[[Replica], None]) -> list[BaseException | None]:
    """Blocking: open each replica fresh (`fallback(replica)` for one whose directory exists),
    then make the new directories durable at once. Returns an error or None per replica;
    a replica that failed has no log open."""
    errors: list[BaseException | None] = []
    fresh: list[int] = []
    for i, r in enumerate(replicas):
        try:
            try:
                r.open(fresh=True)
                fresh.append(i)
            except FileExistsError:
                fallback(r)
            errors.append(None)
        except (OSError, RaftlogError) as exc:
            errors.append(exc)
    _barrier(replicas, fresh, errors)
    return errors


def open_existing_batch(replicas: list[Replica], prepare_and_open: Callable[[Replica, bool], None]
                        ) -> list[BaseException | None]:
    """Blocking: `prepare_and_open(replica, True)` each (the log's recovery fsyncs left to
    this call), then make durable at once the directories whose logs left any. Returns an
    error or None per replica; a replica that failed has no log open."""
    errors: list[BaseException | None] = []
    pending: list[int] = []
    for i, r in enumerate(replicas):
        try:
            prepare_and_open(r, True)
            errors.append(None)
            if r.log is not None and r.log.sync_pending:
                pending.append(i)
        except (OSError, RaftlogError) as exc:
            errors.append(exc)
    _barrier(replicas, pending, errors)
    return errors


def _barrier(replicas: list[Replica], opened: list[int], errors: list[BaseException | None]) -> None:
    """One durability barrier for the directories of `replicas[i]` for i in `opened`; if it
    fails, those replicas fail (their logs closed unused)."""
    try:
        make_new_dirs_durable([replicas[i].directory for i in opened])
    except OSError as exc:
        for i in opened:
            log = replicas[i].log
            if log is not None:
                with contextlib.suppress(OSError, RaftlogError):
                    log.close()
            replicas[i].log = replicas[i].core = None
            errors[i] = exc
    for i in opened:
        log = replicas[i].log
        if log is not None:
            log.sync_pending = False


class BatchedOpens:
    """The batcher (module docstring): `await open(replica)` from any task, `run` in the
    manager's nursery. `batch(replicas, fallback)`: `open_fresh_batch` (new replicas) or
    `open_existing_batch` (`fallback` is then the open itself)."""

    def __init__(self, limiter: trio.CapacityLimiter, fallback: Callable[..., None], *,
                 batch: Callable[..., list[BaseException | None]] = open_fresh_batch,
                 max_batch: int = MAX_BATCH, parallel: int = 1):
        self._limiter = limiter
        self._fallback = fallback
        self._batch = batch
        self._max_batch = max_batch
        self._queue: list[tuple[Replica, trio.Event, list[BaseException | None]]] = []
        self._wake = trio.Event()
        self.batches = 0  # batches run so far (tests)
        self._slots = trio.Semaphore(parallel)  # batches running at once

    async def open(self, r: Replica) -> None:
        """Open `r` in the next batch. Raises what `Replica.open` raises."""
        done = trio.Event()
        result: list[BaseException | None] = [None]
        self._queue.append((r, done, result))
        self._wake.set()
        await done.wait()
        if result[0] is not None:
            raise result[0]

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._queue:
                    await self._slots.acquire()  # what queues meanwhile joins this batch
                    n = self._max_batch
                    batch, self._queue = self._queue[:n], self._queue[n:]
                    nursery.start_soon(self._run_batch, batch)

    async def _run_batch(self, batch: list[tuple[Replica, trio.Event, list[BaseException | None]]]) -> None:
        try:
            errors = await trio.to_thread.run_sync(
                self._batch, [r for r, _, _ in batch], self._fallback, limiter=self._limiter)
            self.batches += 1
            for (_, done, result), error in zip(batch, errors, strict=True):
                result[0] = error
                done.set()
        finally:
            self._slots.release()

"""Retention and compaction of a partition log, Kafka's LogCleanupPolicy "delete" and
"compact": rolling by age, deleting the oldest closed segments past retention.ms /
retention.bytes, moving the log start (DeleteRecords), and a compaction pass in three phases
(plan under the writer, clean beside it, install under the writer; partition/cleaner.py).

Retention and compaction touch only closed segments; compaction only fsynced ones (below the
recovery point). The log start checkpoint is durable before any file goes.

`LogRetention` is a part of `partition.log.Log` (a base class of it, holding no state of its
own); its calls follow Log's concurrency rules (partition/log.py "Concurrency").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from partition import cleaner
from partition.errors import LogClosedError
from partition.segment import Segment

__all__ = ["LogRetention", "CompactionPlan"]


@dataclass
class CompactionPlan:
    """The segments one compaction pass may clean (`Log.plan_compaction`), pinned until
    `install_cleaned` or `discard_plan`. `cleaned` / `result` are filled by `clean_planned`."""

    segments: list[Segment]
    upto: int
    now_ms: int
    cleaned: list = field(default_factory=list)
    result: cleaner.CleanResult | None = None


class LogRetention:
    """Log's retention and compaction (module docstring)."""

    def maintain(self, now_ms: int, *, high_watermark: int | None = None) -> dict:
        """All housekeeping in one writer call: `roll_and_retain`, then (under "compact") one
        compaction pass (`plan_compaction`, `clean_planned`, `install_cleaned`). Returns
        {"rolled", "deleted_segments", "log_start_offset", "compacted_segments",
        "records_removed", "bytes_reclaimed"}. Tests and tools call this; the replica runs the
        phases itself so that cleaning runs beside its writes."""
        done = self.roll_and_retain(now_ms, high_watermark=high_watermark)
        done.update(compacted_segments=[], records_removed=0, bytes_reclaimed=0)
        plan = self.plan_compaction(now_ms, high_watermark=high_watermark)
        if plan is not None:
            try:
                self.clean_planned(plan)
            except BaseException:
                self.discard_plan(plan)
                raise
            res = self.install_cleaned(plan)
            done["compacted_segments"] = res.segments_rewritten
            done["records_removed"] = res.records_removed
            done["bytes_reclaimed"] = res.bytes_reclaimed
        return done

    def roll_or_retention_due(self, now_ms: int, *, high_watermark: int | None = None) -> bool:
        """Writer (no I/O): whether `roll_and_retain` would change anything now. The replica
        asks first, so an idle partition's maintenance costs no worker-thread hand-off."""
        self._check_open()
        a = self._active
        if a.size_bytes and a.created_ms is not None and now_ms - a.created_ms >= self.config.segment_ms:
            return True
        return self.config.deletes and self._retention_count(now_ms, high_watermark) > 0

    def roll_and_retain(self, now_ms: int, *, high_watermark: int | None = None) -> dict:
        """Writer: roll the active segment if older than segment_ms; under "delete", drop the
        oldest CLOSED segments past retention_ms (by their largest timestamp) or beyond
        retention_bytes (never one at or above `high_watermark` if given) and advance
        log_start_offset (persisted before any file goes). Returns {"rolled",
        "deleted_segments", "log_start_offset"}. Blocking (fsyncs a checkpoint, unlinks)."""
        self._check_open()
        cfg = self.config
        done = {"rolled": False, "deleted_segments": [], "log_start_offset": self.log_start_offset}
        a = self._active
        try:
            if a.size_bytes and a.created_ms is not None and now_ms - a.created_ms >= cfg.segment_ms:
                self._roll()
                done["rolled"] = True
            if cfg.deletes:
                done["deleted_segments"] = self._apply_retention(now_ms, high_watermark)
                done["log_start_offset"] = self.log_start_offset
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"retention failed: {e}") from e
        return done

    def _apply_retention(self, now_ms: int, high_watermark: int | None) -> list[str]:
        k = self._retention_count(now_ms, high_watermark)
        if k == 0:
            return []
        gone = self._segments[:k]
        new_start = self._segments[k].base_offset
        if new_start <= self.log_start_offset:
            new_start = self.log_start_offset
        else:
            with self._flush_lock:
                self._void_producer_snapshots(lambda at: at < new_start)
        self.log_start_offset = new_start
        self._write_log_start()  # before any file goes: reopen then drops what is below
        if self._epochs_from_start(new_start):
            self._write_epochs()
        with self._lock:
            del self._segments[:k]
            del self._bases[:k]
            self._pending = [s for s in self._pending if s not in gone]
        for s in gone:
            self._close_segment(s)
            s.delete_files()
        return [s.name for s in gone]

    def _retention_count(self, now_ms: int, high_watermark: int | None) -> int:
        """How many of the oldest closed segments retention would delete now (no I/O)."""
        cfg = self.config
        closed = self._segments[:-1]
        k = 0
        if cfg.retention_ms >= 0:
            while k < len(closed) and now_ms - closed[k].max_timestamp > cfg.retention_ms:
                k += 1
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes() - cfg.retention_bytes
            j = 0
            while j < len(closed) and excess - closed[j].size_bytes >= 0:
                excess -= closed[j].size_bytes
                j += 1
            k = max(k, j)
        if high_watermark is not None:
            while k and self._segments[k].base_offset > high_watermark:
                k -= 1
        return k

    def advance_start(self, offset: int) -> list[str]:
        """DeleteRecords (partition/raft.py "Log start"): raise log_start_offset to `offset`
        (log_start_offset < offset <= log_end_offset; the replica keeps it at or below its
        high watermark). Durable when it returns: the checkpoint is fsynced before any file
        goes, as in retention; closed segments wholly below `offset` are deleted, and reads
        below it raise OffsetOutOfRangeError (the batch holding it may still be returned
        whole; clients trim). Owner thread. Returns the deleted segment names. Raises
        ValueError (out of range), LogClosedError, OSError."""
        self._check_open()
        if not self.log_start_offset < offset <= self.log_end_offset:
            raise ValueError(f"log start {offset} outside ({self.log_start_offset}, "
                             f"{self.log_end_offset}]")
        with self._flush_lock:
            self._void_producer_snapshots(lambda at: at < offset)
        self.log_start_offset = offset
        self._write_log_start()
        if self._epochs_from_start(offset):
            self._write_epochs()
        k = 0
        while k < len(self._segments) - 1 and self._segments[k + 1].base_offset <= offset:
            k += 1
        gone = self._segments[:k]
        with self._lock:
            del self._segments[:k]
            del self._bases[:k]
            self._pending = [s for s in self._pending if s not in gone]
        for seg in gone:
            self._close_segment(seg)
            seg.delete_files()
        return [seg.name for seg in gone]

    def plan_compaction(self, now_ms: int, *, high_watermark: int | None = None) -> CompactionPlan | None:
        """Writer (no I/O): the closed, fsynced segments a compaction pass may clean now (all
        below `high_watermark` if given, so uncommitted data never obsoletes committed data),
        pinned; None when the policy does not compact or nothing is due. Hand the plan to
        `clean_planned` (any thread) and then `install_cleaned` (writer), or `discard_plan`."""
        self._check_open()
        if not self.config.compacts:
            return None
        limit = self._clean_below if high_watermark is None else min(self._clean_below, high_watermark)
        with self._lock:
            candidates = []
            for i, seg in enumerate(self._segments[:-1]):
                if self._segments[i + 1].base_offset > limit:
                    break
                candidates.append(seg)
            if not candidates:
                return None
            upto = candidates[-1].base_offset
            due = self._next_tombstone_expiry_ms is not None and now_ms >= self._next_tombstone_expiry_ms
            if upto <= self._compacted_below and not due:
                return None
            for seg in candidates:
                seg.pin()
        return CompactionPlan(candidates, upto, now_ms)

    def clean_planned(self, plan: CompactionPlan, *,
                      should_stop: Callable[[], bool] = lambda: False,
                      aborted: Sequence[cleaner.AbortedRange] = ()) -> None:
        """A reader (any thread, beside the writer): the long phase of a compaction pass, the
        segments' `.cleaned` files written and fsynced (partition/cleaner.py `clean`; `aborted`:
        the aborted transactions, whose records are discarded). Fills `plan.cleaned` and
        `plan.result`. Raises OSError, CorruptRecordError, cleaner.CleanAborted; the plan stays
        pinned either way (`discard_plan`)."""
        cfg = self.config
        plan.cleaned, plan.result = cleaner.clean(
            self.directory, plan.segments, now_ms=plan.now_ms,
            delete_retention_ms=cfg.delete_retention_ms,
            index_interval_bytes=cfg.index_interval_bytes, max_index_bytes=cfg.max_index_bytes,
            should_stop=should_stop, aborted=aborted)

    def install_cleaned(self, plan: CompactionPlan) -> cleaner.CleanResult:
        """Writer: swap in, oldest first, every segment `clean_planned` rewrote that is still
        in the log (a truncation or reset meanwhile ends the pass: the rest is discarded), then
        unpin the plan. Returns the CleanResult. Raises LogClosedError (the log failed)."""
        result = plan.result or cleaner.CleanResult()
        cleaned = list(plan.cleaned)
        try:
            self._check_open()
            while cleaned:
                c = cleaned[0]
                old = c.segment
                with self._lock:
                    i = next((k for k, seg in enumerate(self._segments) if seg is old), -1)
                    still_ours = 0 <= i < len(self._segments) - 1
                if not still_ours:
                    break
                if c.emptied:
                    # Batches of producers go: a snapshot past one of them may name it (and
                    # one taken meanwhile from a state that names one must not be written).
                    with self._flush_lock:
                        self._void_producer_snapshots(lambda at: c.emptied[0] < at)
                self._cleaner_crash_point("cleaned_written")
                try:
                    with self._dir() as dir_fd:
                        cleaner.install(self.directory, dir_fd, old.base_offset,
                                        self._cleaner_crash_point)
                    new = Segment.open_existing(self.directory, old.base_offset,
                                                max_index_bytes=self.config.max_index_bytes,
                                                files=self._files)
                    new.load_indexes(next_base_offset=self._segments[i + 1].base_offset,
                                     index_interval_bytes=self.config.index_interval_bytes)
                    new.make_evictable()  # the cleaner fsynced it
                except OSError as e:
                    self._fail(e)
                    raise LogClosedError(f"compaction failed: {e}") from e
                with self._lock:
                    self._segments[i] = new
                self._close_segment(old)
                result.segments_rewritten.append(old.name)
                result.batches_emptied.extend(c.emptied)
                cleaned.pop(0)
            else:
                self._compacted_below = plan.upto
                self._next_tombstone_expiry_ms = result.next_tombstone_expiry_ms
            # A pass ended by a truncation: its other .cleaned files go (on an exception they
            # stay, as a crash would leave them, for the next open's recover_swaps).
            cleaner.discard(self.directory, [c.segment.base_offset for c in cleaned])
        finally:
            self._unpin_plan(plan)
        return result

    def discard_plan(self, plan: CompactionPlan) -> None:
        """Give up a plan: delete its `.cleaned` files and unpin its segments. Any thread."""
        cleaner.discard(self.directory, [c.segment.base_offset for c in plan.cleaned])
        self._unpin_plan(plan)

    def _unpin_plan(self, plan: CompactionPlan) -> None:
        with self._lock:
            for seg in plan.segments:
                seg.unpin()
        plan.segments = []

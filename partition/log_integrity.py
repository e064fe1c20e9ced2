"""Integrity of a partition log at rest (DESIGN §9): the read-path check of the batches a
read returns, the full check of a segment for the scrubber, and the writer's answers to
damage (`repair`, `rebuild_indexes`).

No byte leaves the log unchecked. `Log.read` checks the header and CRC-32C of every batch it
returns (and that offsets increase from the batch it located), and raises StorageDamageError
(segment, position, offset) instead of returning bad bytes; `Log.read_slice` (zero-copy
senders) checks the range the same way before it makes the slice; `locate` checks the index
entry it starts from. Each byte is checked once: a segment remembers the ranges a read or a
SegmentVerifier (recovery, the scrubber) checked, and later reads of them skip the CRCs
(partition/segment.py "checked once"). A leader's reads for its followers (`own_tail`) also
skip the bytes this process appended itself while they are in the active segment's cached
tail (`config.hot_tail_bytes`, which `_drop_behind` keeps in the page cache): the append
checked those CRCs before the write, a read there most likely gets the page cache's copy of
what was written, and the follower checks every CRC it receives. Re-checking them was ~15% of
an RF=3 leader's CPU (every follower fetch read back and checked the bytes just appended, in
a worker thread). The replica asks a checked read when a follower asks for the same offset
again (it may have refused the bytes), so damage there is still found; consumers' reads
always check. `check_segment` runs the full check of one segment (partition/segment.py
`SegmentVerifier`, optionally with its indexes); `pinned_segment` lets a scrubber run it in
paced steps. What to do about damage is the replica's decision: `repair` cuts the log at the
first bad batch of a segment (deleting later segments, as recovery does) only if the check,
run again by the writer, still finds it; `rebuild_indexes` rewrites a segment's indexes when
only they disagree with its batches.

`LogIntegrity` is a part of `partition.log.Log` (a base class of it, holding no state of its
own); its calls follow Log's concurrency rules (partition/log.py "Concurrency").
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from crc32c import crc32c

from partition.batch import (
    COMPRESSION_MASK,
    CRC_START,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    Compression,
    Header,
    read_header,
    verify_crc,
)
from partition.errors import CorruptRecordError, LogClosedError, StorageDamageError
from partition.log_loader import count_records
from partition.file_io import read_or_none
from partition.segment import INT32_MAX, Segment
from partition.segment_verifier import SegmentVerifier

__all__ = ["LogIntegrity", "RepairReport", "check_read"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairReport:
    """What `Log.repair` cut: the segment where the first bad batch was found, why, the bytes
    and offsets dropped (that segment's tail plus every later segment), and the new end."""

    segment: str
    reason: str
    bytes_dropped: int
    offsets_lost: int
    log_end_offset: int


def check_read(seg: Segment, pos: int, first: Header, data, skip: int, version: int,
                trusted: int) -> None:
    """The read-path check ("Integrity") of bytes read from `seg`: `data` holds the segment's
    bytes from `pos + skip`, where `pos` is the start of the batch `first` that `locate`
    found. Every batch in it that no earlier check covered (Segment.unverified under
    `version`, bytes from `trusted` on taken as checked by their write) must have a sane
    header and a good CRC-32C, and base offsets must increase from `first`'s within the
    segment's offset range; then the range below `trusted` is marked checked. Raises
    StorageDamageError naming the first bad batch."""
    start = pos + skip
    end = start + len(data)
    for a, b in seg.unverified(start, end, version, trusted):
        _check_batches(seg, data, a - start, b - start, start,
                       first.base_offset if a == pos else None, first.next_offset)
    seg.mark_verified(start, min(end, max(start, trusted)), version)


def _check_batches(seg: Segment, data: bytes, lo: int, hi: int, at: int, exact: int | None,
                   floor: int) -> None:
    """Check the batches in data[lo:hi] (`data` starts at segment position `at`): each has
    the header `read_header` accepts and a good CRC-32C; the first starts at offset `exact`
    if given, else at or above `floor`; offsets increase and stay in the segment's range.
    Raises StorageDamageError (what `read_header` / `verify_crc` say about a bad batch)."""
    p = lo
    expected = exact if exact is not None else floor
    seg_base = seg.base_offset
    view = memoryview(data)  # each batch's CRC is taken where it lies, not from a copy
    # The header as a plain tuple: one per batch, so not batch.py's Header objects (5x the
    # cost) unless a batch looks bad.
    unpack = HEADER.unpack_from
    while p < hi:
        if hi - p >= HEADER_BYTES:
            base, length, _, magic, crc, attrs, delta, _, _, _, _, _, count = unpack(data, p)
            nxt = p + LOG_OVERHEAD + length
            if (magic == MAGIC and length >= MIN_BATCH_LENGTH and nxt <= hi and delta >= 0
                    and count >= 0 and attrs & COMPRESSION_MASK <= Compression.ZSTD
                    and (base == exact if p == lo and exact is not None else base >= expected)
                    and base >= seg_base and base + delta - seg_base <= INT32_MAX
                    and crc32c(view[p + CRC_START:nxt]) == crc):
                expected = base + delta + 1
                p = nxt
                continue
        _raise_bad_batch(seg, data, p, hi, at, expected, exact if p == lo else None)


def _raise_bad_batch(seg: Segment, data: bytes, p: int, hi: int, at: int, expected: int,
                     exact: int | None) -> None:
    """Say what is wrong with the batch at data[p] (one the fast check refused)."""
    h = None
    try:
        h = read_header(data, p)
        verify_crc(data, p, h)
        if (h.base_offset != exact) if exact is not None else (h.base_offset < expected):
            why = f"base offset {h.base_offset}, expected {expected}"
        elif h.last_offset - seg.base_offset > INT32_MAX or h.base_offset < seg.base_offset:
            why = f"offsets {h.base_offset}..{h.last_offset} outside the segment's range"
        else:
            why = f"batch runs past the checked range's end {at + hi}"
    except CorruptRecordError as e:
        why = str(e).partition(": ")[2] or str(e)
    bad = h.base_offset if h is not None and h.base_offset >= expected else expected
    raise StorageDamageError(f"segment {seg.name} at position {at + p}: {why}",
                             segment=seg.base_offset, position=at + p, offset=bad)


class LogIntegrity:
    """Log's integrity calls (module docstring)."""

    @contextmanager
    def pinned_segment(self, base_offset: int) -> Iterator[tuple[Segment, int | None] | None]:
        """(segment, next segment's base offset or None) for the segment starting at
        `base_offset`, pinned for the `with` block; None if no segment starts there any more.
        A reader (the scrubber drives a SegmentVerifier over it in paced steps)."""
        with self._lock:
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset or self._closed:
                found = None
            else:
                seg = self._segments[i]
                nxt = self._bases[i + 1] if i + 1 < len(self._bases) else None
                seg.pin()
                found = (seg, nxt)
        if found is None:
            yield None
            return
        try:
            yield found
        finally:
            self._unpin(found[0])

    def scrub_candidates(self) -> list[tuple[int, int]]:
        """[(base_offset, size_bytes)] of the sealed segments below the recovery point (every
        one of them fsynced, data and index files): what a scrubber re-reads. A reader."""
        with self._lock:
            return [(s.base_offset, s.size_bytes) for s in self._segments[:-1]
                    if s.base_offset < self._clean_below and s not in self._pending]

    def check_segment(self, base_offset: int, *, check_index: bool = True) -> SegmentVerifier | None:
        """Run the full check of the segment starting at `base_offset` (SegmentVerifier, with
        its in-memory indexes when `check_index`); None if no segment starts there. Blocking
        (reads the whole segment). A reader."""
        with self.pinned_segment(base_offset) as found:
            if found is None:
                return None
            seg, nxt = found
            return SegmentVerifier(seg, max_offset=nxt, check_index=check_index).run()

    def index_files_match(self, base_offset: int) -> bool | None:
        """Whether a sealed segment's `.index` / `.timeindex` files hold exactly its in-memory
        indexes (what the next open would load); None if the segment is gone or active. A
        reader."""
        with self.pinned_segment(base_offset) as found:
            if found is None or found[1] is None:
                return None
            seg = found[0]
            return (read_or_none(seg.index_path) == seg.index.to_bytes()
                    and read_or_none(seg.timeindex_path) == seg.timeindex.to_bytes())

    def repair(self, base_offset: int) -> RepairReport | None:
        """The writer's answer to damage in the segment starting at `base_offset`: check it
        again and, if a batch is still bad, cut the log there (the segment keeps its intact
        prefix, every later segment is deleted, the epoch cache trimmed), lower the recovery
        point first, and fsync it all before returning. Returns the RepairReport, or None
        (and changes nothing) when the segment is gone or every batch in it is intact.
        Raises LogClosedError (an I/O failure: the log is then unusable)."""
        self._check_open()
        with self._flush_lock:
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset:
                return None
            seg = self._segments[i]
            later = self._segments[i + 1:]
            nxt = later[0].base_offset if later else None
            check = SegmentVerifier(seg, max_offset=nxt).run()
            if check.damage is None:
                return None
            try:
                self._cut_after(i, seg.base_offset)
                dropped = sum(s.size_bytes for s in later)
                lost = sum(count_records(s) for s in later)
                for s in later:
                    self._close_segment(s)
                    s.delete_files()
                seg.keep_open()  # the active segment now
                scan = seg.recover(index_interval_bytes=self.config.index_interval_bytes,
                                   max_offset=nxt)
                seg.created_ms = None
                new_end = seg.next_offset if seg.next_offset is not None else seg.base_offset
                if new_end < self.log_start_offset:
                    self._truncate_fully_locked(self.log_start_offset)
                    new_end = self.log_start_offset
                else:
                    with self._lock:
                        self.log_end_offset = new_end
                        self.flushed_offset = min(self.flushed_offset, new_end)
                    if self._epochs.truncate_from_end(new_end):
                        self._write_epochs()
                self._flush_locked()
            except OSError as e:
                self._fail(e)
                raise LogClosedError(f"repair failed: {e}") from e
        report = RepairReport(seg.log_path.name, check.damage, dropped + scan.bytes_dropped,
                              lost + scan.offsets_lost, new_end)
        logger.warning("log %s: cut at %s (%s): %d bytes, %d offsets dropped", self.directory,
                       report.segment, report.reason, report.bytes_dropped, report.offsets_lost)
        return report

    def rebuild_indexes(self, base_offset: int) -> bool:
        """The writer rebuilds the indexes of the segment starting at `base_offset` from its
        batch headers and, for a sealed segment, rewrites and fsyncs its index files. Returns
        False if no segment starts there. Raises StorageDamageError (a header does not parse:
        repair instead), LogClosedError."""
        self._check_open()
        i = bisect_right(self._bases, base_offset) - 1
        if i < 0 or self._bases[i] != base_offset:
            return False
        seg = self._segments[i]
        sealed = i < len(self._segments) - 1
        seg.rebuild_indexes(index_interval_bytes=self.config.index_interval_bytes)
        try:
            if sealed:
                seg.seal()
                seg.fsync_index_files()
        except OSError as e:
            self._fail(e)
            raise LogClosedError(f"index rewrite failed: {e}") from e
        logger.warning("log %s: rebuilt the indexes of segment %s", self.directory, seg.name)
        return True

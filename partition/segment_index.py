"""The indexes of a segment, the part of `partition.segment.Segment` that keeps its
`.index` and `.timeindex` (partition/index.py) in step with its batches: sealing (the files
written whole), loading sealed ones at open (checked against a sample of the batches they
name, else rebuilt), rebuilding them from the batch headers, and what the compactor writes
beside a rewritten segment. A base class of Segment, holding no state of its own; the rules
of partition/segment.py "Invariants" hold for it (the files are only a copy of the
in-memory indexes; the active segment's are never trusted).
"""

from __future__ import annotations

import logging
from pathlib import Path

from partition.batch import HEADER_BYTES
from partition.errors import CorruptRecordError
from partition.file_cache import FileCache
from partition.file_io import fsync_path, pread_exact, write_whole_file
from partition.index import OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES, IndexCorrupt, OffsetIndex, TimeIndex
from partition.segment_verifier import parse_header_prefix

__all__ = ["SegmentIndexes", "INDEX_SAMPLE_ENTRIES"]

logger = logging.getLogger(__name__)

# Index entries `load_indexes` checks against the batch headers they name (evenly spread;
# all of them when there are fewer): bounded so that opening a large log stays O(segments).
# The scrubber checks every entry (SegmentVerifier).
INDEX_SAMPLE_ENTRIES = 256


class SegmentIndexes:
    """Segment's indexes (module docstring)."""

    def seal(self) -> None:
        """Close the segment for appends: final timeindex entry, index files written (not
        fsynced: the log's flush does that before it trusts the segment). Reads trust only
        the active segment's own appends ("checked once"): the marks go, so that a segment a
        truncation makes active again, long after its bytes left the cached tail, has none."""
        self.timeindex.maybe_append(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)
        self.write_index_files()
        self._append_marks.clear()
        self._written_from = None
        self.release_reserved()

    def write_index_files(self) -> None:
        write_whole_file(self.index_path, self.index.to_bytes())
        write_whole_file(self.timeindex_path, self.timeindex.to_bytes())

    def fsync_index_files(self) -> None:
        fsync_path(self.index_path)
        fsync_path(self.timeindex_path)

    def load_indexes(self, *, next_base_offset: int | None, index_interval_bytes: int) -> bool:
        """For a sealed segment: read and sanity-check both index files; rebuild them from the
        batch headers if missing or damaged. Returns True if they were rebuilt. Raises
        StorageDamageError when a rebuild meets a header that does not parse.

        Checks: entries monotonic and inside the file; the last offset entry and an even
        sample of the others (INDEX_SAMPLE_ENTRIES; all in a small index) point at a batch
        header with the offset they name; timeindex offsets below the next segment."""
        try:
            data = self.index_path.read_bytes()
            tdata = self.timeindex_path.read_bytes()
            index = OffsetIndex.from_bytes(data, max_entries=self.index.max_entries,
                                           segment_bytes=self.size_bytes)
            timeindex = TimeIndex.from_bytes(tdata, max_entries=self.timeindex.max_entries)
            n = len(index)
            if n:
                # The last entry and an even sample of the others (all of them in a small
                # index) must each point at a batch header with the offset it names.
                step = max(1, n // INDEX_SAMPLE_ENTRIES)
                for k in sorted({*range(n - 1, -1, -step), 0}):
                    self._check_index_entry(index, k)
            if len(timeindex) and next_base_offset is not None and \
                    self.base_offset + timeindex.rel_offsets[-1] >= next_base_offset:
                raise IndexCorrupt("timeindex names an offset of the next segment")
        except (OSError, IndexCorrupt) as e:
            logger.warning("segment %s: rebuilding indexes (%s)", self.name, e)
            self.rebuild_indexes(index_interval_bytes=index_interval_bytes)
            self.seal()
            return True
        self.index, self.timeindex = index, timeindex
        self.max_timestamp = timeindex.last_timestamp
        if len(timeindex):
            self.offset_of_max_timestamp = self.base_offset + timeindex.rel_offsets[-1]
        return False

    def _check_index_entry(self, index: OffsetIndex, k: int) -> None:
        pos = index.positions[k]
        head = self._io(pread_exact, HEADER_BYTES, pos)
        if len(head) < HEADER_BYTES:
            raise IndexCorrupt(f"entry {k} position {pos} has no whole header")
        try:
            h = parse_header_prefix(head)
        except CorruptRecordError as e:
            raise IndexCorrupt(f"entry {k} position {pos}: {e}") from None
        if h.base_offset != self.base_offset + index.rel_offsets[k]:
            raise IndexCorrupt(
                f"entry {k} names offset {self.base_offset + index.rel_offsets[k]},"
                f" the batch there starts at {h.base_offset}")

    def _reset_indexes(self) -> None:
        self.index = OffsetIndex(self.index.max_entries)
        self.timeindex = TimeIndex(self.timeindex.max_entries)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index = 0
        self.next_offset = self.base_offset
        self.last_epoch = -1

    def _index_batch(self, pos: int, base_offset: int, next_offset: int, max_timestamp: int,
                     size: int, epoch: int, index_interval_bytes: int) -> None:
        # Kafka's rule: an entry at the start of a batch once more than the interval was
        # written since the last entry; the timeindex moves with it when time moved on.
        if self.bytes_since_index > index_interval_bytes:
            self.index.append(base_offset - self.base_offset, pos)
            self.timeindex.maybe_append(self.max_timestamp,
                                        self.offset_of_max_timestamp - self.base_offset)
            self.bytes_since_index = 0
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        self.bytes_since_index += size
        self.next_offset = next_offset
        self.last_epoch = epoch

    def rebuild_indexes(self, *, index_interval_bytes: int) -> None:
        """Rebuild both indexes by walking every batch header (no CRC: for trusted sealed
        segments). Raises StorageDamageError at a header that does not parse (the indexes
        are then partial: the caller scans the segment and cuts it, as recovery does)."""
        interval = index_interval_bytes
        self._reset_indexes()
        for pos, h in self.walk(0, self.size_bytes):
            self._index_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                              h.partition_leader_epoch, interval)

    @classmethod
    def index_bytes_for(cls, data: bytes, base_offset: int, *, index_interval_bytes: int,
                        max_index_bytes: int) -> tuple[bytes, bytes]:
        """(.index bytes, .timeindex bytes) of a sealed segment holding `data` (whole, trusted
        batches): what the compactor writes next to a rewritten segment."""
        seg = cls(Path("."), base_offset, -1, 0,
                  max_index_entries=max(1, max_index_bytes // OFFSET_ENTRY_BYTES),
                  max_time_entries=max(1, max_index_bytes // TIME_ENTRY_BYTES),
                  files=FileCache(1))  # never opened: fd -1
        pos = 0
        while pos < len(data):
            h = parse_header_prefix(data, pos)
            seg._index_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size,
                             h.partition_leader_epoch, index_interval_bytes)
            pos += h.size
        seg.timeindex.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp - base_offset)
        return seg.index.to_bytes(), seg.timeindex.to_bytes()

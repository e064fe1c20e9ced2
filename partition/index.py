"""Sparse per-segment indexes: offset → file position, and timestamp → offset (pure core).

Both live in memory as two parallel `array`s and are written to disk whole when a segment is
sealed (rolled or closed); the on-disk bytes are Kafka-shaped, big-endian:

* `.index`: entries of 8 bytes ``(relative_offset int32, position int32)``. An entry is
  added at the start of a batch once more than `index_interval_bytes` were written since the
  last one; it names that batch's *base* offset (relative to the segment's base offset) and
  the position of its first byte. A lookup of offset `o` returns the position of the last
  indexed batch whose base offset is <= o (0 if none); a short header walk goes on from there.
* `.timeindex`: entries of 12 bytes ``(timestamp int64, relative_offset int32)``. An entry
  (T, r) says: every batch before the index point has max_timestamp <= T, and T was first
  reached by the batch whose base offset is segment base + r. Timestamps strictly increase.
  A sealed segment's last entry is its largest timestamp.

Invariants (checked by `OffsetIndex.check` / `TimeIndex.check` on data read from disk):
relative offsets strictly increase in `.index` and never decrease in `.timeindex`; positions
strictly increase and stay below the segment's size. Anything else is `IndexCorrupt`, and the
caller rebuilds the index from the segment's batch headers.

No I/O here: the segment shell reads and writes the bytes.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right

__all__ = ["IndexCorrupt", "OffsetIndex", "TimeIndex", "OFFSET_ENTRY_BYTES", "TIME_ENTRY_BYTES"]

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
_INT32_MAX = 0x7FFFFFFF
_LITTLE = sys.byteorder == "little"


class IndexCorrupt(ValueError):
    """Index bytes that break an invariant; the message says which. Not a wire error: the
    log rebuilds the index and reports it."""


def _from_be(typecode: str, data: bytes) -> array:
    a = array(typecode)
    a.frombytes(data)
    if _LITTLE:
        a.byteswap()
    return a


def _to_be(a: array) -> bytes:
    if not _LITTLE:
        return a.tobytes()
    b = array(a.typecode, a)
    b.byteswap()
    return b.tobytes()


def _strictly_increasing(a: array) -> bool:
    return all(x < y for x, y in zip(a, a[1:]))


class OffsetIndex:
    """Sparse relative-offset → position map of one segment (see module docstring)."""

    __slots__ = ("rel_offsets", "positions", "max_entries")

    def __init__(self, max_entries: int):
        self.rel_offsets = array("i")
        self.positions = array("i")
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self.rel_offsets)

    @property
    def is_full(self) -> bool:
        return len(self.rel_offsets) >= self.max_entries

    def append(self, rel_offset: int, position: int) -> None:
        """Add an entry; both keys must exceed the last entry's (AssertionError otherwise:
        a caller bug, never bad input)."""
        if self.rel_offsets:
            assert rel_offset > self.rel_offsets[-1] and position > self.positions[-1], (
                rel_offset, position, self.rel_offsets[-1], self.positions[-1])
        assert 0 <= rel_offset <= _INT32_MAX and 0 <= position <= _INT32_MAX
        self.rel_offsets.append(rel_offset)
        self.positions.append(position)

    def lookup(self, rel_offset: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry with relative offset <= rel_offset;
        (0, 0) when there is none (walk from the segment's start)."""
        i = bisect_right(self.rel_offsets, rel_offset) - 1
        if i < 0:
            return 0, 0
        return self.rel_offsets[i], self.positions[i]

    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_from_position(self, position: int) -> None:
        """Drop every entry at or past `position` (the segment was cut there)."""
        i = bisect_right(self.positions, position - 1)
        del self.rel_offsets[i:]
        del self.positions[i:]

    def to_bytes(self) -> bytes:
        pairs = array("i", [0]) * (2 * len(self.rel_offsets))
        pairs[0::2] = self.rel_offsets
        pairs[1::2] = self.positions
        return _to_be(pairs)

    @classmethod
    def from_bytes(cls, data: bytes, *, max_entries: int, segment_bytes: int) -> "OffsetIndex":
        """Parse and check index bytes against the segment's size; raises IndexCorrupt."""
        if len(data) % OFFSET_ENTRY_BYTES:
            raise IndexCorrupt(f"index size {len(data)} is not a multiple of {OFFSET_ENTRY_BYTES}")
        pairs = _from_be("i", data)
        idx = cls(max(max_entries, len(pairs) // 2))
        idx.rel_offsets = pairs[0::2]
        idx.positions = pairs[1::2]
        idx.check(segment_bytes)
        return idx

    def check(self, segment_bytes: int) -> None:
        if self.rel_offsets and self.rel_offsets[0] < 0:
            raise IndexCorrupt(f"negative relative offset {self.rel_offsets[0]}")
        if self.positions and self.positions[0] <= 0:
            # Position 0 is never indexed (the walk starts there anyway).
            raise IndexCorrupt(f"first indexed position {self.positions[0]} <= 0")
        if not _strictly_increasing(self.rel_offsets):
            raise IndexCorrupt("relative offsets do not strictly increase")
        if not _strictly_increasing(self.positions):
            raise IndexCorrupt("positions do not strictly increase")
        if self.positions and self.positions[-1] >= segment_bytes:
            raise IndexCorrupt(
                f"last position {self.positions[-1]} is past the segment's {segment_bytes} bytes")


class TimeIndex:
    """Sparse timestamp → relative-offset map of one segment (see module docstring)."""

    __slots__ = ("timestamps", "rel_offsets", "max_entries")

    def __init__(self, max_entries: int):
        self.timestamps = array("q")
        self.rel_offsets = array("i")
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def is_full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        """Largest timestamp indexed, -1 (Kafka's NO_TIMESTAMP) if none."""
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, rel_offset: int) -> bool:
        """Add (timestamp, rel_offset) if the timestamp is larger than the last one; returns
        whether it was added."""
        if timestamp <= self.last_timestamp:
            return False
        if self.rel_offsets:
            assert rel_offset >= self.rel_offsets[-1], (rel_offset, self.rel_offsets[-1])
        self.timestamps.append(timestamp)
        self.rel_offsets.append(rel_offset)
        return True

    def lookup(self, timestamp: int) -> int:
        """Relative offset from which a walk finds the first batch with max_timestamp >=
        `timestamp`: the offset of the last entry whose timestamp is < `timestamp` (every
        batch before it is older), or 0 if none."""
        i = bisect_right(self.timestamps, timestamp - 1) - 1
        return self.rel_offsets[i] if i >= 0 else 0

    def truncate_from_rel_offset(self, rel_offset: int) -> None:
        """Drop every entry that names a batch at or past `rel_offset`."""
        i = bisect_right(self.rel_offsets, rel_offset - 1)
        del self.timestamps[i:]
        del self.rel_offsets[i:]

    def to_bytes(self) -> bytes:
        ts = _to_be(self.timestamps)
        ro = _to_be(self.rel_offsets)
        out = bytearray()
        for i in range(len(self.timestamps)):
            out += ts[8 * i: 8 * i + 8]
            out += ro[4 * i: 4 * i + 4]
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes, *, max_entries: int) -> "TimeIndex":
        """Parse and check timeindex bytes; raises IndexCorrupt."""
        if len(data) % TIME_ENTRY_BYTES:
            raise IndexCorrupt(f"timeindex size {len(data)} is not a multiple of {TIME_ENTRY_BYTES}")
        n = len(data) // TIME_ENTRY_BYTES
        ts = bytearray()
        ro = bytearray()
        for i in range(n):
            p = TIME_ENTRY_BYTES * i
            ts += data[p: p + 8]
            ro += data[p + 8: p + 12]
        idx = cls(max(max_entries, n))
        idx.timestamps = _from_be("q", bytes(ts))
        idx.rel_offsets = _from_be("i", bytes(ro))
        idx.check()
        return idx

    def check(self) -> None:
        if self.rel_offsets and self.rel_offsets[0] < 0:
            raise IndexCorrupt(f"negative relative offset {self.rel_offsets[0]}")
        if not _strictly_increasing(self.timestamps):
            raise IndexCorrupt("timestamps do not strictly increase")
        if not all(x <= y for x, y in zip(self.rel_offsets, self.rel_offsets[1:])):
            raise IndexCorrupt("relative offsets decrease")

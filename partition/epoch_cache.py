"""The leader-epoch cache of a partition log: [(epoch, start_offset)], Kafka's
LeaderEpochFileCache. Pure: the log persists it in `leader-epoch-checkpoint`
(partition/checkpoint.py) and keeps it in step with its appends, truncations and log start.

Invariants: epochs and start offsets strictly increase; the log keeps every start offset in
[log_start_offset, log_end_offset).
"""

from __future__ import annotations

from bisect import bisect_right

from partition.checkpoint import EPOCH_CHECKPOINT, encode_checkpoint
from partition.errors import EpochRegression

__all__ = ["LeaderEpochCache"]


class LeaderEpochCache:
    """[(epoch, start_offset)] with both strictly increasing (pure; the Log persists it)."""

    def __init__(self, entries: list[tuple[int, int]] | None = None):
        self.entries: list[tuple[int, int]] = list(entries or [])

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the last epoch;
        returns whether the cache changed. Raises EpochRegression for an older epoch."""
        if epoch < self.last_epoch:
            raise EpochRegression(f"epoch {epoch} is below the log's latest {self.last_epoch}")
        if epoch == self.last_epoch:
            return False
        assert not self.entries or start_offset > self.entries[-1][1]
        self.entries.append((epoch, start_offset))
        return True

    def assign_lenient(self, epoch: int, start_offset: int) -> bool:
        """Recovery's assign: ignore epochs not newer than the last; when `start_offset` is
        not past the last entry's (both clamped to the log start), the newer epoch replaces
        it. Returns whether the cache changed."""
        if epoch <= self.last_epoch or epoch < 0:
            return False
        if self.entries and start_offset <= self.entries[-1][1]:
            self.entries[-1] = (epoch, self.entries[-1][1])
        else:
            self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop epochs that start at or after `end_offset`; returns whether anything changed."""
        n = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        return len(self.entries) != n

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget epochs wholly below `start_offset`; the epoch covering it starts there."""
        i = bisect_right([s for _, s in self.entries], start_offset)
        if i == 0 or (i == 1 and self.entries[0][1] == start_offset):
            return False
        self.entries = [(self.entries[i - 1][0], start_offset)] + self.entries[i:]
        return True

    def epoch_at(self, offset: int) -> int:
        """The epoch of the entry covering `offset` (the last one starting at or below it);
        -1 below every entry."""
        i = bisect_right([s for _, s in self.entries], offset) - 1
        return self.entries[i][0] if i >= 0 else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """KIP-279/KIP-595: (largest known epoch <= `epoch`, the start offset of the next
        larger epoch or log_end_offset if it is the latest); (-1, -1) below every epoch."""
        if not self.entries or epoch < self.entries[0][0]:
            return -1, -1
        i = bisect_right([e for e, _ in self.entries], epoch) - 1
        if i == len(self.entries) - 1:
            return self.entries[i][0], log_end_offset
        return self.entries[i][0], self.entries[i + 1][1]

    def encode(self) -> bytes:
        return encode_checkpoint(EPOCH_CHECKPOINT, [f"{e} {s}" for e, s in self.entries])

    @classmethod
    def decode(cls, lines: list[str]) -> "LeaderEpochCache | None":
        try:
            entries = [(int(a), int(b)) for a, b in (line.split() for line in lines)]
        except ValueError:
            return None
        if any(e1 >= e2 or s1 >= s2 for (e1, s1), (e2, s2) in zip(entries, entries[1:])):
            return None
        return cls(entries)

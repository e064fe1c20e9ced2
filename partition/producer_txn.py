"""Transactions in one partition's log (pure): which producers have a transaction open here,
where each began, the last stable offset, and the aborted transactions (Kafka's
ProducerStateManager `ongoingTxns` / `unreplicatedTxns` and its `.txnindex` entries).

A transactional producer's first transactional batch in a partition opens its transaction
there at that batch's base offset; the COMMIT or ABORT control batch (the marker) the
coordinator writes closes it. Until the high watermark passes the marker the transaction
still holds the last stable offset back (a marker not yet committed may be cut by a new
leader and written again): it moves from `open` to `unstable`, and leaves that when `settle`
sees the high watermark past it. An aborted transaction leaves an `AbortedTxn` (producer id,
first offset, the marker's offset as last offset, the last stable offset when it ended)
which read_committed fetches return for the range they cover, so clients drop its records.

    txns = ProducerTxns()
    txns.begin(pid, first_offset)  /  txns.end(pid, marker_offset, commit=...)
    txns.last_stable_offset(high_watermark) -> int
    txns.aborted_between(first_offset, end_offset) -> [AbortedTxn]
    txns.truncate(offset), txns.drop_below(log_start_offset), txns.clear()

Invariants:
* The state is a function of the log (its batch headers and the markers' types), so a walk of
  the log rebuilds it; the producer snapshot (producer_state.py) carries `open`, `unstable` and `aborted`.
* A truncation only cuts above the high watermark (Raft never cuts a committed offset): every
  marker it removes is still in `unstable`, so `truncate` restores the state exactly (the
  transaction is open again, its aborted entry gone).
* `aborted` is ordered by last offset and bounded by the log: entries wholly below the log
  start are dropped (`drop_below`), as Kafka drops the `.txnindex` of deleted segments.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["AbortedTxn", "ProducerTxns"]


class AbortedTxn(NamedTuple):
    """One entry of Kafka's `.txnindex` (and of Fetch's aborted_transactions)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class _Ended(NamedTuple):
    producer_id: int
    first_offset: int
    marker_offset: int
    commit: bool


@dataclass(slots=True)
class ProducerTxns:
    """Transactions of one partition (module docstring). Concurrency: none (the replica's task)."""

    open: dict[int, int] = field(default_factory=dict)          # producer id -> first offset
    unstable: list[_Ended] = field(default_factory=list)         # ended, marker not yet committed
    aborted: list[AbortedTxn] = field(default_factory=list)      # by last offset

    def clear(self) -> None:
        self.open.clear()
        self.unstable.clear()
        self.aborted.clear()

    def begin(self, producer_id: int, first_offset: int) -> None:
        """A transactional batch of `producer_id` at `first_offset`: opens its transaction here
        unless one is open already."""
        self.open.setdefault(producer_id, first_offset)

    def end(self, producer_id: int, marker_offset: int, *, commit: bool) -> None:
        """The marker of `producer_id` at `marker_offset`. A marker for no open transaction (a
        retry of the coordinator's, or a partition it added but never wrote) changes nothing
        but what it must: nothing to abort or commit."""
        first = self.open.pop(producer_id, None)
        if first is None:
            return
        # The last stable offset as it stood: the first offset still open before this one.
        lso = min([first, *self.open.values(), *(e.first_offset for e in self.unstable)])
        self.unstable.append(_Ended(producer_id, first, marker_offset, commit))
        if not commit:
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset, lso))

    def settle(self, high_watermark: int) -> None:
        """Forget the ended transactions whose marker is below `high_watermark` (committed)."""
        if self.unstable and self.unstable[0].marker_offset < high_watermark:
            self.unstable = [e for e in self.unstable if e.marker_offset >= high_watermark]

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset a read_committed reader may not see yet: the first offset of the
        oldest transaction not yet decided for good, else the high watermark."""
        self.settle(high_watermark)
        lso = high_watermark
        for first in self.open.values():
            lso = min(lso, first)
        for e in self.unstable:
            lso = min(lso, e.first_offset)
        return lso

    def first_open_offset(self) -> int | None:
        """The first offset of the oldest transaction still open or unstable (None if none):
        what retention and DeleteRecords must not cut past."""
        firsts = [*self.open.values(), *(e.first_offset for e in self.unstable)]
        return min(firsts) if firsts else None

    def aborted_between(self, first_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that may hold records in [first_offset, end_offset): their
        marker at or after `first_offset` and their first offset before `end_offset`."""
        i = bisect.bisect_left(self.aborted, first_offset, key=lambda a: a.last_offset)
        return [a for a in self.aborted[i:] if a.first_offset < end_offset]

    def truncate(self, offset: int) -> None:
        """The log lost every offset >= `offset` (above the high watermark): transactions
        begun there are gone, those whose marker was there are open again."""
        for pid, first in list(self.open.items()):
            if first >= offset:
                del self.open[pid]
        keep = []
        for e in self.unstable:
            if e.marker_offset < offset:
                keep.append(e)
            elif e.first_offset < offset:
                self.open[e.producer_id] = e.first_offset
        self.unstable = keep
        while self.aborted and self.aborted[-1].last_offset >= offset:
            self.aborted.pop()

    def drop_below(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: aborted entries wholly below go."""
        i = bisect.bisect_left(self.aborted, log_start_offset, key=lambda a: a.last_offset)
        if i:
            del self.aborted[:i]

    def load(self, open_txns: list[tuple[int, int]], aborted: list[AbortedTxn], log_start_offset: int,
             ended: list[tuple[int, int, int, bool]] = ()) -> None:
        """The state a snapshot carries (`open` in offset order, `aborted` by last offset,
        `ended`: the `unstable` ones, (producer id, first offset, marker offset, commit) in
        marker order; a snapshot is taken at the log end, above the high watermark, so those
        markers may still be cut: the LSO waits for them and `truncate` reopens them)."""
        self.clear()
        for pid, first in open_txns:
            self.open[pid] = first
        self.unstable = [_Ended(*e) for e in ended]
        self.aborted = [a for a in aborted if a.last_offset >= log_start_offset]

"""Idempotent producers: per partition, the last batches of each producer id, so that a
retried batch is answered with its original offsets instead of being written twice (pure).

Kafka's ProducerStateManager, without transactions. A producer (id, epoch) numbers its records
per partition with sequences 0, 1, 2, ... (wrapping at 2**31); each batch header carries the
producer id, epoch and base sequence, and covers [base_sequence, last_sequence]. The leader
checks an incoming batch against the producer's entry *before* appending it:

* no producer id (-1): nothing to check;
* epoch below the entry's: INVALID_PRODUCER_EPOCH (a zombie of a fenced producer);
* epoch above the entry's (or a producer never seen): the sequence must start at 0, else
  OUT_OF_ORDER_SEQUENCE_NUMBER (an unknown producer whose batches were removed, or a gap);
* same epoch, (base, last) sequence equal to one of the last `MAX_BATCHES` batches:
  a DUPLICATE: answer with that batch's original offsets and do not append;
* same epoch, base == last cached last sequence + 1: accept;
* same epoch, the whole batch behind the window of cached batches: DUPLICATE_SEQUENCE_NUMBER
  (an old retry we can no longer answer with offsets); ahead of it, or straddling the last
  sequence (base behind it, last beyond it: part of it was never written, so it is no
  duplicate): OUT_OF_ORDER_SEQUENCE_NUMBER.

Invariants:
* The state is a function of the log: `apply_headers` over the log's batch headers, in offset
  order, rebuilds it (recovery, and a truncation that empties a producer's window). Appends
  record a batch only after the log accepted it. Only headers are read, never records.
* Everything is bounded: `MAX_BATCHES` per producer, `max_producers` per partition (the
  producer with the oldest last write is forgotten first).

Public API:
    ProducerStateManager(max_producers=...)
    .check(producer_id, producer_epoch, base_sequence, last_sequence) -> Duplicate | None
        raises InvalidProducerEpochError, OutOfOrderSequenceNumberError, DuplicateSequenceNumberError
    .record(producer_id, producer_epoch, base_sequence, last_sequence, first_offset, last_offset)
    .apply_headers(headers: Iterable[Header])      replicated / replayed batches (no checks)
    .truncate(offset) -> bool     drop batches at or above offset; True = rebuild from the log
    .clear(), .entry(producer_id), len()
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from raftlog.base.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
)

__all__ = [
    "MAX_BATCHES",
    "DEFAULT_MAX_PRODUCERS",
    "Duplicate",
    "ProducerEntry",
    "ProducerStateManager",
]

MAX_BATCHES = 5  # Kafka keeps the last 5 batches per producer (max.in.flight <= 5)
DEFAULT_MAX_PRODUCERS = 10_000
SEQUENCE_MODULO = 1 << 31
NO_PRODUCER_ID = -1


class Duplicate(NamedTuple):
    """The batch was appended before: answer with these offsets."""

    first_offset: int
    last_offset: int


class _Batch(NamedTuple):
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


class ProducerStateManager:
    """Producer entries of one partition. Concurrency: none (the partition's owner task)."""

    def __init__(self, *, max_producers: int = DEFAULT_MAX_PRODUCERS):
        if max_producers < 1:
            raise ValueError("max_producers must be >= 1")
        self.max_producers = max_producers
        # Ordered by last write (move_to_end on every record): eviction takes the oldest.
        self._entries: OrderedDict[int, ProducerEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def clear(self) -> None:
        self._entries.clear()

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int
    ) -> Duplicate | None:
        """Judge a batch before appending it. Returns None (append it) or a Duplicate (do not;
        answer with its offsets). Raises InvalidProducerEpochError, OutOfOrderSequenceNumberError,
        DuplicateSequenceNumberError (module docstring)."""
        if producer_id == NO_PRODUCER_ID:
            return None
        if base_sequence < 0:
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}: a batch with a producer id needs a base sequence"
            )
        e = self._entries.get(producer_id)
        if e is None or not e.batches:
            if e is not None and producer_epoch < e.producer_epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id}: epoch {producer_epoch} < {e.producer_epoch}"
                )
            if base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {producer_id}: unknown here, first sequence must be 0, got "
                    f"{base_sequence}"
                )
            return None
        if producer_epoch < e.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id}: epoch {producer_epoch} < {e.producer_epoch}"
            )
        if producer_epoch > e.producer_epoch:
            if base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {producer_id}: new epoch {producer_epoch} must start at "
                    f"sequence 0, got {base_sequence}"
                )
            return None
        for b in e.batches:
            if b.base_sequence == base_sequence and b.last_sequence == last_sequence:
                return Duplicate(b.first_offset, b.last_offset)
        expected = (e.last_sequence + 1) % SEQUENCE_MODULO
        if base_sequence == expected:
            return None
        # Behind the window (an old retry) or ahead of it (a gap), judged modulo 2**31. A
        # batch that begins behind but ends at or past `expected` was cut differently from
        # what was written (its tail is new): producers treat DUPLICATE_SEQUENCE_NUMBER as
        # "written", so calling it that would lose the tail.
        ahead = (base_sequence - expected) % SEQUENCE_MODULO
        last_ahead = (last_sequence - expected) % SEQUENCE_MODULO
        if ahead >= SEQUENCE_MODULO // 2 and last_ahead >= SEQUENCE_MODULO // 2:
            raise DuplicateSequenceNumberError(
                f"producer {producer_id}: sequence {base_sequence} was written before the "
                f"last {len(e.batches)} batches kept (expected {expected})"
            )
        # expected_sequence is a wire detail: where a producer that numbers its records the
        # same way again can resume (the Spark sink, docs/spark-exactly-once.md).
        raise OutOfOrderSequenceNumberError(
            f"producer {producer_id}: sequence {base_sequence}, expected {expected}",
            expected_sequence=expected,
        )

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
    ) -> None:
        """The log holds this batch at [first_offset, last_offset]. A newer epoch replaces
        the entry; an older one (never in a valid log) is ignored."""
        if producer_id == NO_PRODUCER_ID:
            return
        e = self._entries.get(producer_id)
        if e is None or producer_epoch > e.producer_epoch:
            e = ProducerEntry(producer_epoch)
            self._entries[producer_id] = e
        elif producer_epoch < e.producer_epoch:
            return
        e.batches.append(_Batch(base_sequence, last_sequence, first_offset, last_offset))
        self._entries.move_to_end(producer_id)
        while len(self._entries) > self.max_producers:
            self._entries.popitem(last=False)

    def apply_headers(self, headers: Iterable) -> None:
        """Record stamped batches (batch.Header objects: base_offset, producer_id, ...) in
        offset order, without checks: they are in the log already. Control batches and
        batches without a producer id are skipped."""
        for h in headers:
            pid = h.producer_id
            if pid == NO_PRODUCER_ID or h.is_control:
                continue
            self.record(
                pid, h.producer_epoch, h.base_sequence, h.last_sequence,
                h.base_offset, h.base_offset + h.last_offset_delta,
            )  # fmt: skip

    def truncate(self, offset: int) -> bool:
        """The log lost every offset >= `offset`: drop those batches. Returns True when a
        producer lost its whole window while it may have older batches still in the log; the
        caller must then rebuild from the log (otherwise a retry of such an older batch could
        look new)."""
        rebuild = False
        gone = []
        for pid, e in self._entries.items():
            if not e.batches or e.batches[-1].last_offset < offset:
                continue
            full = len(e.batches) == MAX_BATCHES
            while e.batches and e.batches[-1].last_offset >= offset:
                e.batches.pop()
            if not e.batches:
                gone.append(pid)
                rebuild |= full
        for pid in gone:
            del self._entries[pid]
        return rebuild

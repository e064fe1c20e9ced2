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
  `exact` says whether that still holds: a truncation that may have forgotten batches the
  log still holds (a full window cut, a producer emptied, an eviction undone) or a compaction
  that removed a batch the state names clears it until the next `clear`. Batches wholly below
  the log start do not count: retention leaves them, `load` drops them.
* Everything is bounded: `MAX_BATCHES` per producer, `max_producers` per partition (the
  producer with the oldest last write is forgotten first). Producers are kept in the order of
  their last batch's offset, which is the order a walk of the log records them in.

Snapshot (issue 19; Kafka's ProducerStateManager `.snapshot` files): `snapshot(offset, ...)`
copies an exact state as of `offset` S (every batch below S applied, none above), `encode`
makes the bytes the log keeps in its `producer-snapshot` file (partition/log.py writes,
removes and validates it against the log), `decode` reads them back or says None, and
`load(snapshot, log_start_offset)` installs one, after which `apply_headers` over the log's
batches from S gives the state of the whole walk. The bytes: "RLPS", u32 body length, u32
CRC-32C of the body, then the body in canonical CBOR {"v": 1, "offset": S, "last_epoch": the
log's leader epoch at S-1 (-1 if none), "evicted_at": offset of the batch whose record last
evicted a producer (-1 if none), "producers": [[producer_id, producer_epoch, [[base_sequence,
last_sequence, first_offset, last_offset], ...]], ...] in last-write order}; v2 adds "txns"
[[producer_id, first_offset], ...] and "aborted" [[producer_id, first, last, lso], ...], v3
"coordinator_epochs" [[producer_id, producer_epoch, coordinator_epoch], ...] (each producer's
last marker's coordinator epoch, a producer without batches left included), v4 "ended"
[[producer_id, first_offset, marker_offset, commit 0/1], ...] (the transactions whose marker was
not known committed: a snapshot is taken at the log end, above the high watermark, and without
them a reload let the LSO pass a transaction whose marker a new leader may still cut, and a
truncation of that marker left it neither open nor ended). `decode` refuses
anything a real state could not be: offsets at or past S, unordered batches or producers, a
producer twice, more than `max_producers` entries or `MAX_BATCHES` batches, values out of range.

Public API:
    ProducerStateManager(max_producers=...)
    .check(producer_id, producer_epoch, base_sequence, last_sequence, transactional=...) -> Duplicate | None
        raises InvalidProducerEpochError, OutOfOrderSequenceNumberError, DuplicateSequenceNumberError
    .record(producer_id, producer_epoch, base_sequence, last_sequence, first_offset, last_offset)
    .apply_headers(headers: Iterable[Header])      replicated / replayed batches (no checks)
    .truncate(offset) -> bool     drop batches at or above offset; True = rebuild from the log
    .batches_removed(first_offsets)   compaction emptied these batches
    .clear(), .entry(producer_id), len(), .exact
    .snapshot(offset, last_epoch) -> ProducerSnapshot;  .load(snapshot, log_start_offset=...)
    ProducerSnapshot.encode() -> bytes;  ProducerSnapshot.decode(data, max_producers=...) -> ... | None
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from crc32c import crc32c

from partition.producer_txn import AbortedTxn, ProducerTxns
from raftlog.base import cbor
from raftlog.base.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)

__all__ = [
    "MAX_BATCHES",
    "DEFAULT_MAX_PRODUCERS",
    "MAX_SNAPSHOT_BYTES",
    "Duplicate",
    "ProducerEntry",
    "ProducerSnapshot",
    "ProducerStateManager",
]

MAX_BATCHES = 5  # Kafka keeps the last 5 batches per producer (max.in.flight <= 5)
DEFAULT_MAX_PRODUCERS = 10_000
SEQUENCE_MODULO = 1 << 31
NO_PRODUCER_ID = -1
_SNAPSHOT_MAGIC = b"RLPS"
_SNAPSHOT_HEAD = struct.Struct(">4sII")  # magic, body length, CRC-32C of the body
_SNAPSHOT_KEYS = frozenset({"v", "offset", "last_epoch", "evicted_at", "producers"})
_SNAPSHOT_KEYS_V2 = _SNAPSHOT_KEYS | {"txns", "aborted"}
_SNAPSHOT_KEYS_V3 = _SNAPSHOT_KEYS_V2 | {"coordinator_epochs"}
_SNAPSHOT_KEYS_V4 = _SNAPSHOT_KEYS_V3 | {"ended"}
_MAX_ABORTED = 1_000_000  # aborted-transaction entries a snapshot may carry
# A snapshot takes ~160 bytes per producer with a full window (the default 10,000 producers:
# ~1.6 MB); a file larger than this (~400,000 producers) is not read.
MAX_SNAPSHOT_BYTES = 64 << 20
_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


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
    # The coordinator epoch of the last transaction marker of this producer here (-1: none);
    # a marker of an older one is TRANSACTION_COORDINATOR_FENCED (Kafka's ProducerStateEntry).
    coordinator_epoch: int = -1
    # The offset of this producer's last marker here (-1: none seen): a transactional batch
    # verified before a marker moved it belongs to the transaction that marker ended.
    marker_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


@dataclass(frozen=True)
class ProducerSnapshot:
    """The producer state as of `offset` S: what every batch below S left, nothing above
    (module docstring "Snapshot"). `last_epoch`: the log's leader epoch at S-1 (-1 if none),
    so that a log that changed below S without removing the snapshot is not taken for this
    one. `evicted_at`: the offset of the batch whose record last evicted a producer (-1)."""

    offset: int
    last_epoch: int
    evicted_at: int
    producers: tuple[tuple[int, int, tuple[_Batch, ...]], ...]  # (id, epoch, batches), last write last
    # Transactions (v2, issue 42): (producer id, first offset) of each open one, and the
    # aborted ones (producer_txn.AbortedTxn) by last offset.
    open_txns: tuple[tuple[int, int], ...] = ()
    aborted: tuple[AbortedTxn, ...] = ()
    # (v3) (producer id, producer epoch, coordinator epoch) of each producer with a marker here:
    # the epoch a marker must reach (TRANSACTION_COORDINATOR_FENCED below it).
    coordinator_epochs: tuple[tuple[int, int, int], ...] = ()
    # (v4) (producer id, first offset, marker offset, commit) of each ended transaction whose
    # marker was not known committed (producer_txn.ProducerTxns.unstable), in marker order.
    ended: tuple[tuple[int, int, int, bool], ...] = ()

    def encode(self) -> bytes:
        """The file's bytes: header (magic, body length, CRC-32C) and canonical CBOR body
        (v1 without transactions, v2 with them)."""
        obj = {
            "v": 1, "offset": self.offset, "last_epoch": self.last_epoch,
            "evicted_at": self.evicted_at,
            "producers": [[pid, epoch, [list(b) for b in batches]]
                          for pid, epoch, batches in self.producers],
        }  # fmt: skip
        if self.open_txns or self.aborted or self.coordinator_epochs or self.ended:
            obj.update(v=2, txns=[list(t) for t in self.open_txns], aborted=[list(a) for a in self.aborted])
        if self.coordinator_epochs or self.ended:
            obj.update(v=3, coordinator_epochs=[list(c) for c in self.coordinator_epochs])
        if self.ended:
            obj.update(v=4, ended=[[pid, first, marker, int(commit)] for pid, first, marker, commit in self.ended])
        body = cbor.dumps(obj)
        return _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, len(body), crc32c(body)) + body

    @classmethod
    def decode(cls, data: bytes, *, max_producers: int | None = None) -> "ProducerSnapshot | None":
        """The snapshot in `data`, or None when it is not a whole, valid one (a torn or
        damaged file, another format, or values no real state has; module docstring)."""
        if len(data) < _SNAPSHOT_HEAD.size or len(data) > MAX_SNAPSHOT_BYTES:
            return None
        magic, length, crc = _SNAPSHOT_HEAD.unpack_from(data)
        body = data[_SNAPSHOT_HEAD.size:]
        if magic != _SNAPSHOT_MAGIC or length != len(body) or crc != crc32c(body):
            return None
        try:
            obj = cbor.loads(body, what="producer snapshot", max_bytes=MAX_SNAPSHOT_BYTES,
                             error=ValueError, canonical=True)
        except ValueError:
            return None
        if type(obj) is not dict or (obj.keys(), obj.get("v")) not in (
                (_SNAPSHOT_KEYS, 1), (_SNAPSHOT_KEYS_V2, 2), (_SNAPSHOT_KEYS_V3, 3), (_SNAPSHOT_KEYS_V4, 4)):
            return None
        offset, last_epoch, evicted_at = obj["offset"], obj["last_epoch"], obj["evicted_at"]
        raw = obj["producers"]
        if not (_is_int(offset, 0, _INT64_MAX) and _is_int(last_epoch, -1, _INT64_MAX)
                and _is_int(evicted_at, -1, offset - 1) and type(raw) is list):
            return None
        if max_producers is not None and len(raw) > max_producers:
            return None
        producers = []
        seen: set[int] = set()
        prev_last = -1
        for item in raw:
            entry = _decode_entry(item, offset)
            if entry is None or entry[0] in seen or entry[2][-1].last_offset <= prev_last:
                return None
            seen.add(entry[0])
            prev_last = entry[2][-1].last_offset
            producers.append(entry)
        txns = _decode_txns(obj.get("txns", []), obj.get("aborted", []), offset)
        if txns is None:
            return None
        coordinator_epochs = _decode_coordinator_epochs(obj.get("coordinator_epochs", []), max_producers)
        ended = _decode_ended(obj.get("ended", []), offset)
        if coordinator_epochs is None or ended is None:
            return None
        return cls(offset, last_epoch, evicted_at, tuple(producers), *txns, coordinator_epochs, ended)


def _decode_ended(raw: object, offset: int) -> tuple[tuple[int, int, int, bool], ...] | None:
    """A v4 snapshot's ended transactions, or None when not valid: first offset <= marker
    offset < `offset`, markers ascending, commit 0 or 1."""
    if type(raw) is not list or len(raw) > _MAX_ABORTED:
        return None
    out = []
    prev = -1
    for e in raw:
        if type(e) is not list or len(e) != 4:
            return None
        pid, first, marker, commit = e
        if not (_is_int(pid, 0, _INT64_MAX) and _is_int(first, 0, offset - 1)
                and _is_int(marker, max(first, prev + 1), offset - 1) and _is_int(commit, 0, 1)):
            return None
        prev = marker
        out.append((pid, first, marker, bool(commit)))
    return tuple(out)


def _decode_coordinator_epochs(raw: object, max_producers: int | None) -> tuple[tuple[int, int, int], ...] | None:
    """A v3 snapshot's (producer id, producer epoch, coordinator epoch) entries, or None when
    not valid: each producer once, values in range, at most `max_producers`."""
    if type(raw) is not list or (max_producers is not None and len(raw) > max_producers):
        return None
    out = []
    for c in raw:
        if type(c) is not list or len(c) != 3 or not (
                _is_int(c[0], 0, _INT64_MAX) and _is_int(c[1], _INT16_MIN, _INT16_MAX) and _is_int(c[2], 0, _INT32_MAX)):
            return None
        out.append((c[0], c[1], c[2]))
    if len({pid for pid, _, _ in out}) != len(out):
        return None
    return tuple(out)


def _decode_txns(raw_open: object, raw_aborted: object, offset: int
                 ) -> tuple[tuple[tuple[int, int], ...], tuple[AbortedTxn, ...]] | None:
    """A v2 snapshot's open and aborted transactions, or None when not valid: offsets below
    `offset`, a producer open once, aborted entries ordered by last offset."""
    if type(raw_open) is not list or type(raw_aborted) is not list or len(raw_aborted) > _MAX_ABORTED:
        return None
    opened = []
    for t in raw_open:
        if type(t) is not list or len(t) != 2 or not (_is_int(t[0], 0, _INT64_MAX) and _is_int(t[1], 0, offset - 1)):
            return None
        opened.append((t[0], t[1]))
    if len({pid for pid, _ in opened}) != len(opened):
        return None
    aborted = []
    prev = -1
    for a in raw_aborted:
        if type(a) is not list or len(a) != 4:
            return None
        pid, first, last, lso = a
        if not (_is_int(pid, 0, _INT64_MAX) and _is_int(first, 0, offset - 1) and _is_int(last, max(first, prev), offset - 1)
                and _is_int(lso, 0, _INT64_MAX)):
            return None
        prev = last
        aborted.append(AbortedTxn(pid, first, last, lso))
    return tuple(opened), tuple(aborted)


def _is_int(v: object, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _decode_entry(item: object, offset: int) -> tuple[int, int, tuple[_Batch, ...]] | None:
    """(producer id, epoch, batches) of one snapshot entry, or None if it is not valid:
    1..MAX_BATCHES batches, offsets ascending and below `offset`, values in range."""
    if type(item) is not list or len(item) != 3:
        return None
    pid, epoch, raw = item
    if not (_is_int(pid, 0, _INT64_MAX) and _is_int(epoch, _INT16_MIN, _INT16_MAX)
            and type(raw) is list and 1 <= len(raw) <= MAX_BATCHES):
        return None
    batches = []
    prev_last = -1
    for b in raw:
        if type(b) is not list or len(b) != 4:
            return None
        base_seq, last_seq, first, last = b
        if not (_is_int(base_seq, -1, SEQUENCE_MODULO - 1) and _is_int(last_seq, -1, SEQUENCE_MODULO - 1)
                and _is_int(first, prev_last + 1, offset - 1) and _is_int(last, first, offset - 1)):
            return None
        batches.append(_Batch(base_seq, last_seq, first, last))
        prev_last = last
    return pid, epoch, tuple(batches)


class ProducerStateManager:
    """Producer entries of one partition. Concurrency: none (the partition's owner task)."""

    def __init__(self, *, max_producers: int = DEFAULT_MAX_PRODUCERS):
        if max_producers < 1:
            raise ValueError("max_producers must be >= 1")
        self.max_producers = max_producers
        # Ordered by last write (move_to_end on every record): eviction takes the oldest.
        self._entries: OrderedDict[int, ProducerEntry] = OrderedDict()
        # Whether the state is what a walk of the log gives (module docstring "Invariants").
        self.exact = True
        # The last offset of the batch whose record last evicted a producer; -1 if none.
        self._evicted_at = -1
        # Open and aborted transactions (producer_txn.py; issue 42).
        self.txns = ProducerTxns()

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def active(self) -> list[tuple[int, ProducerEntry]]:
        """(producer id, entry) of every producer held, oldest write first (DescribeProducers)."""
        return list(self._entries.items())

    def clear(self) -> None:
        """Forget everything: the state of an empty log (exact again)."""
        self._entries.clear()
        self.exact = True
        self._evicted_at = -1
        self.txns.clear()

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
        *, transactional: bool = False,
    ) -> Duplicate | None:
        """Judge a batch before appending it. Returns None (append it) or a Duplicate (do not;
        answer with its offsets). Raises InvalidProducerEpochError, OutOfOrderSequenceNumberError,
        DuplicateSequenceNumberError (module docstring). `transactional`: the batch is; when
        it begins a transaction here (none of its epoch open), every batch held belongs to an
        ended transaction, so none is its duplicate: only the next sequence is taken."""
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
        expected = (e.last_sequence + 1) % SEQUENCE_MODULO
        if transactional and not self.in_txn(producer_id, producer_epoch):
            # The first batch of a transaction here (Transactions V1: one epoch across
            # transactions). A batch held with its sequences is an earlier transaction's,
            # perhaps aborted: answering with its offsets would ack records never written
            # (librdkafka reuses the sequences of the records an abort purged, some of which
            # may have been written). Kafka's findDuplicateBatch does; this is stricter.
            if base_sequence == expected:
                return None
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}: a new transaction's first batch has sequence "
                f"{base_sequence}, expected {expected}", expected_sequence=expected)
        for b in e.batches:
            if b.base_sequence == base_sequence and b.last_sequence == last_sequence:
                return Duplicate(b.first_offset, b.last_offset)
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

    def check_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """A coordinator's own batch of `producer_id` (no sequence to check): raises
        InvalidProducerEpochError when a newer epoch holds the producer here."""
        e = self._entries.get(producer_id)
        if e is not None and producer_epoch < e.producer_epoch:
            raise InvalidProducerEpochError(f"producer {producer_id}: epoch {producer_epoch} < {e.producer_epoch}")

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
            e = ProducerEntry(producer_epoch, coordinator_epoch=-1 if e is None else e.coordinator_epoch)
            self._entries[producer_id] = e
        elif producer_epoch < e.producer_epoch:
            return
        e.batches.append(_Batch(base_sequence, last_sequence, first_offset, last_offset))
        self._entries.move_to_end(producer_id)
        while len(self._entries) > self.max_producers:
            self._entries.popitem(last=False)
            self._evicted_at = last_offset

    def in_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether `producer_id` has a transaction open here at `producer_epoch` (Kafka's
        hasOngoingTransaction: at Transactions V2 each transaction has its own epoch, so a batch
        of a newer epoch begins a new transaction even before the old one's marker is here)."""
        e = self._entries.get(producer_id)
        return producer_id in self.txns.open and e is not None and e.producer_epoch == producer_epoch

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Judge a coordinator's marker before appending it (Kafka's appendEndTxnMarker):
        raises InvalidProducerEpochError for an epoch below the producer's here (a stale
        coordinator's), TransactionCoordinatorFencedError for a coordinator epoch below the
        one of the producer's last marker here (a coordinator that lost its partition)."""
        e = self._entries.get(producer_id)
        if e is None:
            return
        if producer_epoch < e.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {producer_epoch} < producer {producer_id}'s {e.producer_epoch}")
        if coordinator_epoch < e.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"coordinator epoch {coordinator_epoch} < {e.coordinator_epoch}, of producer {producer_id}'s last marker")

    def marker(self, producer_id: int, producer_epoch: int, offset: int, *, commit: bool,
               coordinator_epoch: int = -1) -> None:
        """The COMMIT/ABORT marker of `producer_id` at `offset`: its transaction here ends,
        an epoch above the entry's fences the older one (the coordinator bumps the epoch
        when it aborts a fenced or timed-out producer's transaction), and the entry keeps its
        coordinator epoch (the highest seen)."""
        e = self._entries.get(producer_id)
        if e is None or producer_epoch > e.producer_epoch:
            e = self._entries[producer_id] = ProducerEntry(
                producer_epoch, coordinator_epoch=-1 if e is None else e.coordinator_epoch)
        e.coordinator_epoch = max(e.coordinator_epoch, coordinator_epoch)
        e.marker_offset = offset
        self.txns.end(producer_id, offset, commit=commit)

    def marker_offset(self, producer_id: int) -> int:
        """The offset of `producer_id`'s last marker here, -1 if none (Kafka's verification
        guard: a verification taken before the marker does not hold after it)."""
        e = self._entries.get(producer_id)
        return -1 if e is None else e.marker_offset

    def apply_headers(self, headers: Iterable,
                      marker_of: Callable[[Any], tuple[bool, int]] | None = None) -> None:
        """Record stamped batches (batch.Header objects: base_offset, producer_id, ...) in
        offset order, without checks: they are in the log already. Batches without a
        producer id and control batches other than transaction markers are skipped; a
        marker's type (COMMIT or not) and coordinator epoch are asked of `marker_of(header)`
        (the header holds no record; without it markers are taken for aborts of epoch -1)."""
        for h in headers:
            pid = h.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            if h.is_control:
                if h.is_transactional:
                    commit, coordinator_epoch = marker_of(h) if marker_of is not None else (False, -1)
                    self.marker(pid, h.producer_epoch, h.base_offset, commit=commit,
                                coordinator_epoch=coordinator_epoch)
                continue
            self.record(
                pid, h.producer_epoch, h.base_sequence, h.last_sequence,
                h.base_offset, h.base_offset + h.last_offset_delta,
            )  # fmt: skip
            if h.is_transactional:
                self.txns.begin(pid, h.base_offset)

    def truncate(self, offset: int) -> bool:
        """The log lost every offset >= `offset`: drop those batches. Returns True when a
        producer lost its whole window while it may have older batches still in the log; the
        caller must then rebuild from the log (otherwise a retry of such an older batch could
        look new). Clears `exact` when the result may differ from a walk of the cut log: a
        full window lost batches (the walk would remember older ones), a producer was emptied
        (the walk may find an older epoch's batches), or a cut batch had evicted a producer."""
        rebuild = False
        changed = False
        gone = []
        for pid, e in self._entries.items():
            if not e.batches or e.batches[-1].last_offset < offset:
                continue
            changed = True
            full = len(e.batches) == MAX_BATCHES
            while e.batches and e.batches[-1].last_offset >= offset:
                e.batches.pop()
            if full or not e.batches:
                self.exact = False
            if not e.batches:
                gone.append(pid)
                rebuild |= full
        for pid in gone:
            del self._entries[pid]
        if self._evicted_at >= offset:
            self.exact = False
        self.txns.truncate(offset)
        if changed:
            # Keep the last-write order a walk of the cut log would give (eviction uses it).
            self._entries = OrderedDict(sorted(self._entries.items(), key=lambda kv: kv[1].last_offset))
        return rebuild

    def batches_removed(self, first_offsets: Iterable[int]) -> bool:
        """Compaction removed the batches starting at `first_offsets` from the log. Returns
        whether the state names one; then it is no longer what a walk of the log gives
        (`exact` clears), though it still answers retries of them."""
        gone = set(first_offsets)
        if not gone:
            return False
        named = any(b.first_offset in gone for e in self._entries.values() for b in e.batches)
        if named:
            self.exact = False
        return named

    def snapshot(self, offset: int, last_epoch: int) -> ProducerSnapshot:
        """A copy of the state as of `offset` (every batch recorded lies below it; the
        caller takes it where that holds, and only while `exact`). O(producers)."""
        if self._entries:
            last = next(reversed(self._entries.values()))
            assert not last.batches or last.batches[-1].last_offset < offset, (last, offset)
        return ProducerSnapshot(
            offset, last_epoch, self._evicted_at,
            tuple((pid, e.producer_epoch, tuple(e.batches))
                  for pid, e in self._entries.items() if e.batches),
            tuple(sorted(self.txns.open.items(), key=lambda t: t[1])), tuple(self.txns.aborted),
            tuple((pid, e.producer_epoch, e.coordinator_epoch)
                  for pid, e in self._entries.items() if e.coordinator_epoch >= 0),
            tuple((e.producer_id, e.first_offset, e.marker_offset, e.commit) for e in self.txns.unstable),
        )  # fmt: skip

    def load(self, snapshot: ProducerSnapshot, *, log_start_offset: int) -> None:
        """Replace the state with `snapshot`'s, without the batches wholly below
        `log_start_offset` (retention or DeleteRecords removed them; a walk of the log would
        not see them). Exact afterwards: `apply_headers` over the log's batches from
        `snapshot.offset` then gives the whole walk's state. Raises ValueError when the
        snapshot holds more producers than `max_producers`."""
        if len(snapshot.producers) > self.max_producers:
            raise ValueError(f"snapshot of {len(snapshot.producers)} producers > {self.max_producers}")
        self.clear()
        for pid, epoch, batches in snapshot.producers:
            kept = [b for b in batches if b.last_offset >= log_start_offset]
            if kept:
                self._entries[pid] = ProducerEntry(epoch, deque(kept, maxlen=MAX_BATCHES))
        for pid, epoch, coordinator_epoch in snapshot.coordinator_epochs:
            e = self._entries.get(pid)
            if e is None:  # a producer whose batches are gone keeps its coordinator epoch
                if len(self._entries) >= self.max_producers:
                    continue
                e = self._entries[pid] = ProducerEntry(epoch)
                self._entries.move_to_end(pid, last=False)
            e.coordinator_epoch = coordinator_epoch
        self._evicted_at = snapshot.evicted_at
        self.txns.load(list(snapshot.open_txns), list(snapshot.aborted), log_start_offset,
                       ended=list(snapshot.ended))

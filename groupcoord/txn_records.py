"""The `__transaction_state` record codec and a transaction's stored state (pure).

One kind of record, as Kafka's TransactionLog: key = the transactional id, value = its
`TxnMetadata` as of that write (None = tombstone: the id expired, Kafka's Dead). The topic
is compacted, so the latest value per id is the state.

    key    [1, transactional_id]                         (canonical CBOR array)
    value  {"v": 1, "producer_id", "producer_epoch", "last_producer_id",
            "last_producer_epoch", "timeout_ms", "state", "partitions": [[topic, p], ...]
            (sorted), "start_ms", "update_ms"}           (canonical CBOR map)

Decoding is strict (unknown version or field, wrong type, out-of-range value, trailing bytes:
`InvalidGroupRecordError`), as for `__consumer_offsets` (records.py), whose helpers it uses.

States are Kafka's `TransactionState` (names as DescribeTransactions shows them); the legal
transitions (`VALID_PREVIOUS`) are Kafka's too (TransactionState.java).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Final

from raftlog.base import cbor
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.records import INT32_MAX, MAX_PARTITION, _fields, _int, _str, loads_strict

__all__ = [
    "TxnState", "TxnMetadata", "VALID_PREVIOUS", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
    "MAX_TRANSACTIONAL_ID_CHARS", "MAX_TXN_PARTITIONS", "MAX_PRODUCER_EPOCH",
    "encode_txn_key", "decode_txn_key", "encode_txn_value", "decode_txn_value", "txn_record",
]

KEY_KIND: Final = 1
VALUE_VERSION: Final = 1
MAX_TRANSACTIONAL_ID_CHARS: Final = 1024
MAX_TXN_PARTITIONS: Final = 10_000       # partitions one transaction may touch
MAX_KEY_BYTES: Final = 4096
MAX_VALUE_BYTES: Final = 4 * 1024 * 1024
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_PRODUCER_EPOCH: Final = 32767       # Short.MaxValue


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_S = TxnState
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT,
                                 _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
_STORED: Final = frozenset(s for s in TxnState if s not in (_S.DEAD, _S.PREPARE_EPOCH_FENCE))


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state. `last_producer_id/epoch` are the ones before the latest
    bump (KIP-360/890: a producer retrying InitProducerId with them is not a zombie);
    `start_ms` is when the ongoing transaction began (-1 when none); `partitions` are the
    partitions of the ongoing or preparing transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    update_ms: int
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    start_ms: int = -1

    def __post_init__(self) -> None:
        _str("txn.transactional_id", self.transactional_id, 1, MAX_TRANSACTIONAL_ID_CHARS)
        _int("txn.producer_id", self.producer_id, 0)
        _int("txn.producer_epoch", self.producer_epoch, 0, MAX_PRODUCER_EPOCH)
        _int("txn.last_producer_id", self.last_producer_id, NO_PRODUCER_ID)
        _int("txn.last_producer_epoch", self.last_producer_epoch, NO_PRODUCER_EPOCH, MAX_PRODUCER_EPOCH)
        _int("txn.timeout_ms", self.timeout_ms, 1, INT32_MAX)
        _int("txn.update_ms", self.update_ms)
        _int("txn.start_ms", self.start_ms, -1)
        if not isinstance(self.state, TxnState):
            raise InvalidGroupRecordError(f"txn.state: expected TxnState, got {type(self.state).__name__}")
        if not isinstance(self.partitions, frozenset) or len(self.partitions) > MAX_TXN_PARTITIONS:
            raise InvalidGroupRecordError(f"txn.partitions: a frozenset of at most {MAX_TXN_PARTITIONS}")
        for tp in self.partitions:
            if not (isinstance(tp, tuple) and len(tp) == 2):
                raise InvalidGroupRecordError("txn.partitions: items are (topic, partition)")
            _str("txn.partitions.topic", tp[0], 1, MAX_TOPIC_NAME_CHARS)
            _int("txn.partitions.partition", tp[1], 0, MAX_PARTITION)

    def moved(self, state: TxnState, now_ms: int, **changes: Any) -> "TxnMetadata":
        """This state moved to `state` (checked against VALID_PREVIOUS; AssertionError if
        illegal: a bug of the coordinator, never of input)."""
        if self.state not in VALID_PREVIOUS[state]:
            raise AssertionError(f"{self.transactional_id}: {self.state.value} -> {state.value} is not a transition")
        return replace(self, state=state, update_ms=now_ms, **changes)


def encode_txn_key(transactional_id: str) -> bytes:
    _str("txn_key.transactional_id", transactional_id, 1, MAX_TRANSACTIONAL_ID_CHARS)
    return cbor.dumps([KEY_KIND, transactional_id])


def decode_txn_key(data: bytes) -> str:
    """The transactional id of a key. Raises InvalidGroupRecordError."""
    obj = loads_strict(data, "txn key", MAX_KEY_BYTES)
    if not (isinstance(obj, list) and len(obj) == 2 and type(obj[0]) is int and obj[0] == KEY_KIND):
        raise InvalidGroupRecordError("txn key: expected [1, transactional_id]")
    return _str("txn_key.transactional_id", obj[1], 1, MAX_TRANSACTIONAL_ID_CHARS)


def encode_txn_value(m: TxnMetadata) -> bytes:
    if m.state not in _STORED:
        raise ValueError(f"state {m.state.value} is never stored")
    return cbor.dumps({
        "v": VALUE_VERSION, "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
        "last_producer_id": m.last_producer_id, "last_producer_epoch": m.last_producer_epoch,
        "timeout_ms": m.timeout_ms, "state": m.state.value,
        "partitions": [[t, p] for t, p in sorted(m.partitions)],
        "start_ms": m.start_ms, "update_ms": m.update_ms,
    })  # fmt: skip


_VALUE_FIELDS: Final = {"v", "producer_id", "producer_epoch", "last_producer_id", "last_producer_epoch",
                        "timeout_ms", "state", "partitions", "start_ms", "update_ms"}


def decode_txn_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """The state stored for `transactional_id` (None for a tombstone). Raises
    InvalidGroupRecordError."""
    if data is None:
        return None
    obj = _fields("txn value", loads_strict(data, "txn value", MAX_VALUE_BYTES), _VALUE_FIELDS, set())
    if type(obj["v"]) is not int or obj["v"] != VALUE_VERSION:
        raise InvalidGroupRecordError(f"txn value: unsupported version {obj['v']!r}")
    try:
        state = TxnState(obj["state"])
    except ValueError:
        raise InvalidGroupRecordError(f"txn value: unknown state {obj['state']!r}") from None
    if state not in _STORED:
        raise InvalidGroupRecordError(f"txn value: state {state.value} is never stored")
    parts = obj["partitions"]
    if not isinstance(parts, list) or len(parts) > MAX_TXN_PARTITIONS:
        raise InvalidGroupRecordError(f"txn value: partitions must be a list of at most {MAX_TXN_PARTITIONS}")
    tps = []
    for tp in parts:
        if not (isinstance(tp, list) and len(tp) == 2):
            raise InvalidGroupRecordError("txn value: a partition is [topic, partition]")
        tps.append((tp[0], tp[1]))
    return TxnMetadata(
        transactional_id=transactional_id, producer_id=obj["producer_id"], producer_epoch=obj["producer_epoch"],
        last_producer_id=obj["last_producer_id"], last_producer_epoch=obj["last_producer_epoch"],
        timeout_ms=obj["timeout_ms"], state=state, partitions=frozenset(tps), start_ms=obj["start_ms"],
        update_ms=obj["update_ms"],
    )  # fmt: skip


def txn_record(m: TxnMetadata) -> tuple[bytes, bytes | None]:
    """(key, value) of the record that stores `m` (a tombstone for Dead)."""
    return encode_txn_key(m.transactional_id), None if m.state is TxnState.DEAD else encode_txn_value(m)

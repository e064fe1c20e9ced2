"""The keyed records of a run of committed batches, for the services that replay an internal
compacted topic into memory (the Schema Registry's `_schemas`; groupcoord/partition_load.py's loop feeds
the group and transaction coordinators' `__consumer_offsets` and `__transaction_state` loads). Pure.
"""

from __future__ import annotations

import struct

from partition.batch import CONTROL_ABORT, CONTROL_COMMIT, decode_batches

__all__ = ["KeyedRecord", "LoggedRecord", "keyed_records", "logged_records"]

KeyedRecord = tuple[int, bytes, bytes | None]  # (offset, key, value; None: a tombstone)
# (offset, key, value, producer id, marker): a record of a transactional batch carries its
# producer id (-1 otherwise) and marker None; a transaction's COMMIT/ABORT marker is
# (offset, b"", None, producer id, True for COMMIT / False for ABORT).
LoggedRecord = tuple[int, bytes, bytes | None, int, bool | None]
_CONTROL_KEY = struct.Struct(">hh")


def keyed_records(data: bytes | memoryview, offset: int) -> tuple[list[KeyedRecord], int]:
    """The records with a key at or after `offset` in the whole batches `data` (control
    batches and batches wholly before `offset` skipped), and the offset after the last batch.
    Raises like `decode_batches` on a bad batch."""
    records: list[KeyedRecord] = []
    for h, recs in decode_batches(data):
        if h.next_offset <= offset:
            continue
        if not h.is_control:
            records.extend((rec.offset, rec.key, rec.value) for rec in recs
                           if rec.key is not None and rec.offset >= offset)
        offset = h.next_offset
    return records, offset


def logged_records(data: bytes | memoryview, offset: int) -> tuple[list[LoggedRecord], int]:
    """As `keyed_records`, with what a replay of transactional writes needs (Kafka's
    GroupMetadataManager load): each record's producer id when its batch is transactional,
    and the transaction markers in log order (other control batches skipped)."""
    records: list[LoggedRecord] = []
    for h, recs in decode_batches(data):
        if h.next_offset <= offset:
            continue
        pid = h.producer_id if h.is_transactional else -1
        if h.is_control:
            key = recs[0].key if recs else None
            if pid >= 0 and key is not None and len(key) >= _CONTROL_KEY.size and h.base_offset >= offset:
                kind = _CONTROL_KEY.unpack_from(key)[1]
                if kind in (CONTROL_COMMIT, CONTROL_ABORT):
                    records.append((h.base_offset, b"", None, pid, kind == CONTROL_COMMIT))
        else:
            records.extend((rec.offset, rec.key, rec.value, pid, None) for rec in recs
                           if rec.key is not None and rec.offset >= offset)
        offset = h.next_offset
    return records, offset

"""The keyed records of a run of committed batches, for the services that replay an internal
compacted topic into memory (the Schema Registry's `_schemas`; groupcoord/partition_load.py's loop feeds
the group and transaction coordinators' `__consumer_offsets` and `__transaction_state` loads). Pure.
"""

from __future__ import annotations

from partition.batch import decode_batches

__all__ = ["KeyedRecord", "keyed_records"]

KeyedRecord = tuple[int, bytes, bytes | None]  # (offset, key, value; None: a tombstone)


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

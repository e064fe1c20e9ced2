"""Membership control batches: how a partition's Raft membership (`raft.Membership`) is
written into its own log, and found again (pure, over bytes and a log reader).

A membership change is one control batch of one record (KIP-853's KRaft voters record is
control type 6; ours keeps the type, its value is canonical CBOR
`{"voters": [ids], "learners": [ids]}`). Consumers skip control batches, as Kafka's do.
The leader writes it for `AppendMembership`; a follower's shell fills
`FetchResponse.memberships` from the fetched batches (`memberships_in`); recovery scans the
log from the quorum state's `membership_scan_from` (`scan_log`), so a log that never had a
change is not read at all.

Invariant: a batch is a membership batch iff it is a control batch whose one record's key
is (version 0, CONTROL_MEMBERSHIP); its value then decodes to a valid Membership, or the
batch is corrupt (CorruptRecordError: a leader never writes one that does not).
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

import cbor2

from partition.batch import Header, control_batch, decode_batch, iter_headers
from partition.errors import CorruptRecordError
from partition.raft import Membership
from raftlog.base.errors import InvalidReplicaAssignmentError

__all__ = ["CONTROL_MEMBERSHIP", "membership_batch", "memberships_in", "scan_log"]

CONTROL_MEMBERSHIP = 6  # KRaft's voters control record type (KIP-853)
_KEY = struct.Struct(">hh")
SCAN_READ_BYTES = 1 << 20  # recovery reads the log this much at a time


def membership_batch(membership: Membership, *, timestamp_ms: int, partition_leader_epoch: int) -> bytes:
    """The control batch holding `membership`."""
    value = cbor2.dumps({"voters": list(membership.voters), "learners": list(membership.learners)},
                        canonical=True)
    return control_batch(CONTROL_MEMBERSHIP, timestamp_ms=timestamp_ms,
                         partition_leader_epoch=partition_leader_epoch, value=value)


def _decode(buf: Any, pos: int, header: Header) -> Membership | None:
    _, records = decode_batch(buf, pos)
    if len(records) != 1 or records[0].key is None or len(records[0].key) != _KEY.size:
        return None
    version, kind = _KEY.unpack(records[0].key)
    if version != 0 or kind != CONTROL_MEMBERSHIP:
        return None
    try:
        obj = cbor2.loads(records[0].value or b"")
        return Membership.of(obj["voters"], obj["learners"])
    except (cbor2.CBORDecodeError, KeyError, TypeError, ValueError, InvalidReplicaAssignmentError) as exc:
        raise CorruptRecordError(f"membership batch at {header.base_offset}: {exc}") from None


def memberships_in(buf: Any, headers: Iterable[tuple[int, Header]]) -> tuple[tuple[int, Membership], ...]:
    """(offset, membership) of every membership batch among `headers` ((position in buf,
    Header), checked already). Raises CorruptRecordError."""
    found = []
    for pos, h in headers:
        if h.is_control and h.record_count == 1:
            membership = _decode(buf, pos, h)
            if membership is not None:
                found.append((h.base_offset, membership))
    return tuple(found)


def scan_log(log: Any, start_offset: int) -> tuple[tuple[int, Membership], ...]:
    """Recovery: every membership batch of `log` (partition.log.Log) from `start_offset`
    (-1: none to look for) to its end. Blocking (reads the log). Raises what `log.read`
    raises, CorruptRecordError."""
    if start_offset < 0:
        return ()
    offset = max(start_offset, log.log_start_offset)
    found: list[tuple[int, Membership]] = []
    while offset < log.log_end_offset:
        data = log.read(offset, SCAN_READ_BYTES)
        if not data:
            break
        headers = list(iter_headers(data, verify=False))
        found.extend((o, m) for o, m in memberships_in(data, headers) if o >= start_offset)
        offset = max(offset + 1, headers[-1][1].next_offset) if headers else offset + 1
    return tuple(found)

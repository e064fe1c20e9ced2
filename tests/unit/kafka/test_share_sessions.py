"""The Kafka listener's share sessions (KIP-932, raftlog/node/kafka/share_groups.py) and its
translation of Kafka's AcknowledgementBatches: pure, no node."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from raftlog.node.kafka.share_groups import (
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_NOT_FOUND,
    ShareSessions,
    _acks,
)

T = uuid.UUID(int=7)
U = uuid.UUID(int=8)


def test_session_opens_grows_forgets_and_closes() -> None:
    s = ShareSessions()
    assert s.fetch("g", "m", 0, [(T, 0), (T, 1)], []) == (0, [(T, 0), (T, 1)])
    assert s.fetch("g", "m", 1, [(U, 0)], [(T, 0)]) == (0, [(T, 1), (U, 0)])
    assert s.fetch("g", "m", 2, [], []) == (0, [(T, 1), (U, 0)])
    assert s.acknowledge("g", "m", 3) == 0, "ShareAcknowledge takes the session's next epoch too"
    assert s.fetch("g", "m", -1, [], []) == (0, [])
    assert len(s) == 0
    assert s.fetch("g", "m", 5, [], [])[0] == SHARE_SESSION_NOT_FOUND


def test_wrong_epoch_changes_nothing() -> None:
    s = ShareSessions()
    s.fetch("g", "m", 0, [(T, 0)], [])
    assert s.fetch("g", "m", 3, [(U, 0)], []) == (INVALID_SHARE_SESSION_EPOCH, [])
    assert s.acknowledge("g", "m", 0) == INVALID_SHARE_SESSION_EPOCH, "an acknowledgement cannot open a session"
    assert s.fetch("g", "m", 1, [], []) == (0, [(T, 0)]), "the session is as it was"
    assert s.acknowledge("g", "other", 1) == SHARE_SESSION_NOT_FOUND


def test_sessions_are_bounded() -> None:
    s = ShareSessions(max_sessions=2)
    for m in ("a", "b", "c"):
        s.fetch("g", m, 0, [(T, 0)], [])
    assert len(s) == 2
    assert s.fetch("g", "a", 1, [], [])[0] == SHARE_SESSION_NOT_FOUND, "the least recently used went first"


def _batch(first: int, last: int, types: list[int]) -> SimpleNamespace:
    return SimpleNamespace(first_offset=first, last_offset=last, acknowledge_types=types)


def test_acknowledgement_batches_become_runs() -> None:
    assert _acks([_batch(0, 4, [1])]) == ([[0, 4, 1]], None)
    assert _acks([_batch(10, 13, [1, 1, 3, 2])]) == ([[10, 11, 1], [12, 12, 3], [13, 13, 2]], None)
    assert _acks([_batch(0, 1, [1, 2, 3])])[1] is not None, "one type per offset or one for all"
    assert _acks([_batch(3, 2, [1])])[1] is not None
    assert _acks([_batch(0, 0, [4])])[1] is not None, "RENEW is refused, not ignored"

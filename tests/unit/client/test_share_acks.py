"""ShareConsumer's acknowledgement ledger: only held records can be acknowledged, pending acks go out as runs of one type, implicit mode accepts what the last poll returned."""

import pytest

from raftlog.base.errors import InvalidRequestError
from raftlog.client.share_consumer import ACK_TYPES, ShareAcks, ShareConsumer

pytestmark = pytest.mark.unit

TP = ("t", 0)


def test_runs_of_one_type_and_cleared_after_take():
    a = ShareAcks()
    for off in (1, 2, 3, 5, 6):
        a.hold(TP, off)
    for off in (1, 2, 5):
        a.ack(TP, off, ACK_TYPES["accept"])
    a.ack(TP, 3, ACK_TYPES["reject"])
    assert a.unacknowledged() == 1
    assert a.take(TP) == [[1, 2, 1], [3, 3, 3], [5, 5, 1]]
    assert a.take(TP) == []


def test_a_record_not_held_cannot_be_acknowledged_twice_or_at_all():
    a = ShareAcks()
    a.hold(TP, 7)
    a.ack(TP, 7, ACK_TYPES["release"])
    with pytest.raises(InvalidRequestError):
        a.ack(TP, 7, ACK_TYPES["accept"])
    with pytest.raises(InvalidRequestError):
        a.ack(("t", 1), 7, ACK_TYPES["accept"])


def test_ack_all_and_forget():
    a = ShareAcks()
    for off in range(4):
        a.hold(TP, off)
    a.hold(("u", 2), 9)
    a.ack_all(ACK_TYPES["accept"])
    assert a.unacknowledged() == 0 and a.take(TP) == [[0, 3, 1]]
    a.forget(("u", 2))
    assert a.take(("u", 2)) == []


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        ShareConsumer("127.0.0.1:1", "g", acknowledgement_mode="sometimes")
    with pytest.raises(ValueError):
        ShareConsumer("127.0.0.1:1", "g", auto_offset_reset="never")

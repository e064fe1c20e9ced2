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


def drive(procedure, answers):
    """Run a session procedure against canned answers (an exception is thrown in); the
    requests it sent and its value."""
    from raftlog.base.errors import RaftlogError

    sent = []
    try:
        effect = next(procedure)
        for answer in answers:
            sent.append(effect)
            effect = procedure.throw(answer) if isinstance(answer, RaftlogError) else procedure.send(answer)
        raise AssertionError(f"more requests than answers: {effect}")
    except StopIteration as stop:
        return sent, stop.value


def batch(offsets):
    from partition.batch import BatchBuilder

    b = BatchBuilder(base_offset=offsets[0])
    for o in offsets:
        b.append(f"v{o}".encode(), None, timestamp_ms=0)
    return b.build()


def test_session_rejoins_when_fenced_and_keeps_only_acquired_records():
    from raftlog.base.errors import FencedMemberEpochError
    from raftlog.client.share_session import ShareSession

    s = ShareSession("g")
    s.subscribe(["t"])
    joined = {"member_id": "m", "member_epoch": 1, "heartbeat_interval_ms": 100,
              "assignment": [{"topic": "t", "partitions": [0]}]}
    sent, _ = drive(s.heartbeat(0), [joined])
    assert sent[0].request["member_epoch"] == 0 and sent[0].request["subscribed_topic_names"] == ["t"]
    sent, _ = drive(s.heartbeat(50), [])  # not due yet: nothing sent
    assert sent == []
    sent, _ = drive(s.heartbeat(100), [FencedMemberEpochError("old"), {**joined, "member_epoch": 4}])
    assert [e.request["member_epoch"] for e in sent] == [1, 0] and s.member_epoch == 4
    # The batch holds 0..3; only 1 and 2 were acquired, 3 was acquired but is not in the data (GAP).
    answer = {"records": batch([0, 1, 2]), "acquired": [[1, 3, 2]], "acknowledge_error": None}
    _, records = drive(s.fetch_round(10), [answer])
    assert [(r.offset, r.value, r.delivery_count) for r in records] == [(1, b"v1", 2), (2, b"v2", 2)]
    assert s.acks.take(("t", 0)) == [[3, 3, 0]]
    s.acknowledge(records[0], "reject")
    sent, result = drive(s.commit(), [{}])
    assert sent[0].request["acknowledgements"] == [[1, 1, 3]] and result == {("t", 0): None}


def test_session_reports_a_refused_acknowledgement_and_goes_on():
    from raftlog.client.share_session import ShareSession

    s = ShareSession("g")
    s.assignment, s.member_id = [("t", 0)], "m"
    refused = {"code": "INVALID_RECORD_STATE", "message": "lock expired"}
    _, records = drive(s.fetch_round(5), [{"records": batch([7]), "acquired": [[7, 7, 1]],
                                          "acknowledge_error": refused}])
    assert [r.offset for r in records] == [7]
    assert [type(e).__name__ for _, e in s.acknowledge_errors] == ["InvalidRecordStateError"]

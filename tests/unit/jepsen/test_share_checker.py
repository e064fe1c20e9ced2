"""The share workload's checker flags each anomaly on a hand-written history that has it, and
passes clean histories (redeliveries after a crash or a failed acknowledgement, poison records
rejected, flaky ones archived at the limit) as valid."""

from __future__ import annotations

import pytest

from jepsen_style_tests.history import History, Op
from jepsen_style_tests.share_checker import SHARE_ANOMALIES, check_share
from jepsen_style_tests.share_client import ack_type_for

pytestmark = pytest.mark.unit

K = "jepsen-0"
LIMIT = 3


class Share:
    """Hand-made share histories: each helper appends an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def _op(self, type_, process, f, value, error=None):
        self.t += 1_000_000
        self.ops.append(Op(type_, f, process, value, self.t, error=error))

    def send(self, process, value, offset, outcome="ok"):
        self._op("invoke", process, "send", [K, value])
        self._op(outcome, process, "send", [K, [offset if outcome == "ok" else None, value]],
                 None if outcome == "ok" else "timeout")
        return self

    def poll(self, process, *records, outcome="ok"):
        """records: (offset, value, delivery_count)."""
        self._op("invoke", process, "share", None)
        value = {"deliveries": [[K, o, v, n] for o, v, n in records]} if outcome == "ok" else None
        self._op(outcome, process, "share", value, None if outcome == "ok" else "timeout")
        return self

    def poll_unanswered(self, process, key=K):
        """A poll that got nothing, one of whose share_fetch attempts on `key` got no answer."""
        self._op("invoke", process, "share", None)
        self._op("ok", process, "share", {"deliveries": [], "unanswered": [key]})
        return self

    def ack(self, process, *acks):
        """acks: (offset, value, delivery_count, type, result)."""
        self._op("invoke", process, "share", None)
        self._op("ok", process, "share", {"acks": [[K, o, v, n, t, r] for o, v, n, t, r in acks]})
        return self

    def poll_begins(self, process):
        self._op("invoke", process, "share", None)
        return self

    def poll_ends(self, process, *records):
        self._op("ok", process, "share", {"deliveries": [[K, o, v, n] for o, v, n in records]})
        return self

    def check(self):
        return check_share(History(self.ops), limit=LIMIT)


def _valid(b: Share) -> None:
    result = b.check()
    assert result.verdict == "valid", result.to_json_dict()


def _invalid(b: Share, name: str) -> dict:
    result = b.check()
    assert result.verdict == "invalid" and name in result.bad, result.to_json_dict()
    return result.anomalies[name][0]


def test_accepted_once_is_valid():
    _valid(Share().send(0, 1, 0).send(0, 3, 1).poll(1, (0, 1, 1), (1, 3, 1))
           .ack(1, (0, 1, 1, "accept", None), (1, 3, 1, "accept", None)))


def test_redelivery_after_a_crash_or_a_refused_ack_is_valid():
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1), outcome="info")  # crashed holding it (unseen)
    b.poll(2, (0, 1, 2)).ack(2, (0, 1, 2, "accept", "INVALID_RECORD_STATE"))  # lock ran out first
    b.poll(3, (0, 1, 3)).ack(3, (0, 1, 3, "accept", None))
    result = b.check()
    assert result.verdict == "valid", result.to_json_dict()
    assert result.stats["redeliveries"] == 1 and result.stats["accepted"] == 1


def test_poison_rejected_and_flaky_archived_at_the_limit_are_valid():
    b = Share().send(0, 23, 0).send(0, 5, 1)
    b.poll(1, (0, 23, 1)).ack(1, (0, 23, 1, "reject", None))
    for n in range(1, LIMIT + 1):
        b.poll(1 + n % 2, (1, 5, n)).ack(1 + n % 2, (1, 5, n, "release", None))
    result = b.check()
    assert result.verdict == "valid", result.to_json_dict()
    assert result.stats["rejected"] == 1 and result.stats["exhausted"] == 1


def test_an_ack_of_unknown_outcome_may_have_settled_it():
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1)).ack(1, (0, 1, 1, "accept", "unknown"))
    assert b.check().stats["maybe-settled"] == 1
    _valid(b)


def test_lost():
    assert _invalid(Share().send(0, 1, 0).send(0, 2, 1).poll(1, (0, 1, 1)).ack(1, (0, 1, 1, "accept", None)),
                    "lost") == {"value": 2}


def test_phantom():
    _invalid(Share().poll(1, (0, 9, 1)).ack(1, (0, 9, 1, "accept", None)), "phantom")


def test_unacknowledged_maybe_sends_are_not_lost_and_may_be_delivered():
    _valid(Share().send(0, 1, 0, outcome="info").send(0, 2, 0, outcome="info").poll(1, (0, 2, 1))
           .ack(1, (0, 2, 1, "accept", None)))


def test_double_accept_and_redelivered_after_accept():
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1)).ack(1, (0, 1, 1, "accept", None))
    b.poll(2, (0, 1, 2)).ack(2, (0, 1, 2, "accept", None))
    case = _invalid(b, "redelivered-after-accept")
    assert case["ack_process"] == 1 and case["delivered_to"] == 2
    assert "double-accept" in b.check().bad


def test_redelivered_after_reject():
    b = Share().send(0, 23, 0).poll(1, (0, 23, 1)).ack(1, (0, 23, 1, "reject", None))
    b.poll(2, (0, 23, 2)).ack(2, (0, 23, 2, "reject", "INVALID_RECORD_STATE"))
    _invalid(b, "redelivered-after-reject")


def test_redelivered_after_exhausted():
    b = Share().send(0, 5, 0)
    for n in range(1, LIMIT + 1):
        b.poll(1, (0, 5, n)).ack(1, (0, 5, n, "release", None))
    b.poll(2, (0, 5, 1)).ack(2, (0, 5, 1, "accept", None))  # a count reset would hide it from the limit check
    _invalid(b, "redelivered-after-exhausted")


def test_delivery_count_exceeded():
    b = Share().send(0, 1, 0).poll(1, (0, 1, LIMIT + 1)).ack(1, (0, 1, LIMIT + 1, "accept", None))
    assert _invalid(b, "delivery-count-exceeded")["count"] == LIMIT + 1


def test_double_acquisition_inside_a_held_lock():
    # Member 1 holds the record from its poll to its applied ack; member 2's whole poll of the
    # same record lies between.
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1)).poll(2, (0, 1, 2)).ack(2, (0, 1, 2, "release", "INVALID_RECORD_STATE"))
    b.ack(1, (0, 1, 1, "accept", None))
    case = _invalid(b, "double-acquisition")
    assert case["holder"] == 1 and case["other"] == 2


def test_overlapping_polls_are_not_a_double_acquisition():
    # Member 2's poll began before member 1's ended: it may have acquired the record before
    # member 1 did (and lost its lock), so nothing is proven.
    b = Share().send(0, 1, 0).poll_begins(2).poll(1, (0, 1, 2)).poll_ends(2, (0, 1, 1))
    b.ack(2, (0, 1, 1, "accept", "INVALID_RECORD_STATE")).ack(1, (0, 1, 2, "accept", None))
    _valid(b)


def test_unsettled():
    # Its partition left the member before it acknowledged: nothing sent, and never redelivered.
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1)).ack(1, (0, 1, 1, "accept", "not-held"))
    assert _invalid(b, "unsettled")["last_count"] == 1


def test_an_unanswered_fetch_may_have_taken_its_last_delivery():
    # Released at LIMIT - 1; the next acquisition (the last) went to a fetch whose answer was
    # lost with its leader, and the new leader archived the record: not stuck.
    b = Share().send(0, 5, 0)
    for n in range(1, LIMIT):
        b.poll(1, (0, 5, n)).ack(1, (0, 5, n, "release", None))
    assert _invalid(b, "unsettled")["last_count"] == LIMIT - 1
    b.poll_unanswered(2)
    assert b.check().stats["maybe-settled"] == 1
    _valid(b)
    # An unanswered fetch of another partition, or one that ended before the last delivery
    # seen, could not have taken it.
    other = Share().send(0, 5, 0).poll_unanswered(2)
    for n in range(1, LIMIT):
        other.poll(1, (0, 5, n)).ack(1, (0, 5, n, "release", None))
    _invalid(other.poll_unanswered(2, key="jepsen-1"), "unsettled")


def test_a_refused_ack_may_have_been_applied_by_a_first_attempt():
    # The old leader applied the ack and died before answering; the client's retry at the new
    # leader was refused (INVALID_RECORD_STATE): the record is accepted, not stuck.
    b = Share().send(0, 1, 0).poll(1, (0, 1, 1)).ack(1, (0, 1, 1, "accept", "INVALID_RECORD_STATE"))
    assert b.check().stats["maybe-settled"] == 1
    _valid(b)


def test_every_anomaly_is_named_once():
    assert len(set(SHARE_ANOMALIES)) == len(SHARE_ANOMALIES)


def test_ack_types_of_the_workload():
    assert ack_type_for(23, 1) == "reject"
    assert ack_type_for(32, 4) == "release"  # flaky: every delivery
    assert ack_type_for(7, 1) == "release" and ack_type_for(7, 2) == "accept"
    assert ack_type_for(8, 1) == "accept"


def test_gap_over_a_written_record():
    b = Share().send(0, 1, 0).send(0, 2, 1)
    b._op("invoke", 1, "share", None)
    b._op("ok", 1, "share", {"deliveries": [[K, 0, 1, 1]], "gaps": [[K, 1]]})
    b.ack(1, (0, 1, 1, "accept", None))
    assert _invalid(b, "gap-over-record") == {"key": K, "offset": 1, "value": 2, "process": 1}

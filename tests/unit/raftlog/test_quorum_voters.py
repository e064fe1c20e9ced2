"""The metadata quorum's voter-set rules (raftlog/node/quorum_voters.py): the log's changes
folded in order, and the changes refused before anything is proposed (issue 44)."""

from __future__ import annotations

import pytest

from raftlog.node.quorum_voters import change_refusal, fold

pytestmark = pytest.mark.unit

VOTERS = {1: "h:1", 2: "h:2", 3: "h:3"}


def test_fold_applies_changes_in_log_order_and_ignores_repeats():
    start = {"h:1": 1, "h:2": 2, "h:3": 3}
    changes = [("rem", "h:3", 3), ("add", "h:4", 4), ("add", "h:4", 4), ("rem", "h:9", None)]
    assert fold(start, changes) == {"h:1": 1, "h:2": 2, "h:4": 4}
    assert start == {"h:1": 1, "h:2": 2, "h:3": 3}  # not modified


def test_removing_a_dead_voter_is_allowed_but_not_a_live_one_beside_a_dead_one():
    assert change_refusal("remove", 3, None, VOTERS, live={1, 2}, leader_id=1) is None
    reason = change_refusal("remove", 2, None, VOTERS, live={1, 2}, leader_id=1)
    assert reason is not None and "quorum would be lost" in reason


@pytest.mark.parametrize(("op", "node_id", "address", "voters", "live", "expected"), [
    ("remove", 1, None, VOTERS, {1, 2, 3}, "leads the metadata quorum"),
    ("remove", 7, None, VOTERS, {1, 2, 3}, "is not a voter"),
    ("remove", 1, None, {1: "h:1"}, {1}, "last voter"),
    ("add", 2, "h:9", VOTERS, {1, 2, 3}, "already a voter"),
    ("add", 4, "h:3", VOTERS, {1, 2, 3}, "already the quorum address"),
    ("add", 4, "h:4", VOTERS, {1, 2}, "cannot form"),
])
def test_bad_changes_are_refused_with_the_reason(op, node_id, address, voters, live, expected):
    reason = change_refusal(op, node_id, address, voters, live=live, leader_id=1)
    assert reason is not None and expected in reason


def test_adding_to_a_healthy_quorum_is_allowed():
    assert change_refusal("add", 4, "h:4", VOTERS, live={1, 2, 3}, leader_id=1) is None

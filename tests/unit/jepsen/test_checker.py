"""The checker flags each anomaly on a hand-written history that has it, with the right name and
example, and passes clean histories (including the tricky ones) as valid."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jepsen_style_tests.checker import ANOMALIES, CheckerInputError, check
from jepsen_style_tests.history import History, Op, parse_history_lines

K = "t-0"
K1 = "t-1"


class Builder:
    """Writes histories by hand: each helper appends an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0

    def _op(self, type_, process, f, value, error=None, **extra):
        self.t += 1_000_000
        self.ops.append(Op(type_, f, process, value, self.t, error=error, extra=extra))

    def invoke(self, process, f, value=None, **extra):
        self._op("invoke", process, f, value, **extra)
        return self

    def complete(self, process, f, type_, value=None, error=None, **extra):
        self._op(type_, process, f, value, error, **extra)
        return self

    def send(self, process, key, value, offset=None, outcome="ok"):
        self.invoke(process, "send", [key, value])
        if outcome == "fail":
            return self.complete(process, "send", "fail", [key, value], error="rejected")
        if outcome == "info":
            return self.complete(process, "send", "info", [key, [offset, value]], error="timeout")
        return self.complete(process, "send", "ok", [key, [offset, value]])

    def poll(self, process, reads, outcome="ok", **extra):
        self.invoke(process, "poll", None, poll_ms=100)
        value = {k: [list(p) for p in pairs] for k, pairs in reads.items()} if outcome != "info" else None
        return self.complete(process, "poll", outcome, value, error="timeout" if outcome == "info" else None, **extra)

    def assign(self, process, keys, seek=False):
        extra = {"seek_to_beginning": True} if seek else {}
        self.invoke(process, "assign", list(keys), **extra)
        return self.complete(process, "assign", "ok", list(keys))

    def end_offsets(self, process, ends):
        self.invoke(process, "end-offsets", sorted(ends))
        return self.complete(process, "end-offsets", "ok", dict(ends))

    def history(self) -> History:
        return History(self.ops)


def sent(builder: Builder, key: str, n: int, process: int = 0, first_value: int = 0) -> Builder:
    for i in range(n):
        builder.send(process, key, first_value + i, offset=i)
    return builder


def cases(result, name):
    return result.anomalies.get(name, [])


# ----------------------------------------------------------------------------- clean histories


def test_clean_history_is_valid():
    b = sent(Builder(), K, 5)
    b.poll(1, {K: [(i, i) for i in range(3)]}).poll(1, {K: [(3, 3), (4, 4)]})
    b.end_offsets(2, {K: 5})
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies
    assert result.anomalies == {}
    assert result.stats["sends"]["ok"] == 5
    assert result.stats["values_read"] == 5


def test_info_send_that_was_read_is_fine_and_counts_as_written():
    b = sent(Builder(), K, 2)
    b.send(0, K, 2, outcome="info")  # unknown outcome...
    b.poll(1, {K: [(0, 0), (1, 1), (2, 2)]})  # ...but it was read
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_failed_or_info_send_never_read_is_fine():
    b = sent(Builder(), K, 2)
    b.send(0, K, 100, outcome="fail")
    b.send(0, K, 101, outcome="info")
    b.poll(1, {K: [(0, 0), (1, 1)]})
    b.end_offsets(1, {K: 2})
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_info_send_that_claims_an_offset_but_was_never_read_is_not_in_the_log():
    b = sent(Builder(), K, 2)
    b.send(0, K, 101, offset=2, outcome="info")  # an offset, yet the outcome is unknown
    b.send(0, K, 3, offset=3)
    b.poll(1, {K: [(0, 0), (1, 1), (3, 3)]})
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_compacted_gap_without_values_is_not_a_poll_skip():
    b = Builder()
    for value, offset in [(0, 0), (1, 1), (2, 2), (5, 5)]:
        b.send(0, K, value, offset=offset)
    # Offsets 3 and 4 hold nothing anyone knows of (compacted): jumping over them is fine.
    b.poll(1, {K: [(0, 0), (1, 1), (2, 2)]}).poll(1, {K: [(5, 5)]})
    b.poll(2, {K: [(0, 0), (5, 5)][1:]})
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_reassign_with_seek_to_beginning_and_generation_change_are_not_nonmonotonic():
    b = sent(Builder(), K, 4)
    b.assign(1, [K]).poll(1, {K: [(0, 0), (1, 1), (2, 2)]})
    b.assign(1, [K], seek=True).poll(1, {K: [(0, 0), (1, 1), (2, 2), (3, 3)]})
    # A group consumer that moved to a new generation restarts from the committed offset.
    b.poll(2, {K: [(0, 0), (1, 1), (2, 2)]}, generation_id=1)
    b.poll(2, {K: [(1, 1), (2, 2), (3, 3)]}, generation_id=2)
    # A poll that ended info leaves the consumer's position unknown.
    b.poll(3, {K: [(0, 0), (1, 1)]}).poll(3, {}, outcome="info").poll(3, {K: [(3, 3)]})
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_concurrent_commits_may_complete_out_of_order():
    b = sent(Builder(), K, 1)
    b.poll(1, {K: [(0, 0)]})
    # Commit 5 completes after commit 3 was invoked: they overlap, no order is implied.
    b.invoke(1, "commit", {K: 5}, group="g").invoke(2, "commit", {K: 3}, group="g")
    b.complete(1, "commit", "ok", {K: 5}, group="g").complete(2, "commit", "ok", {K: 3}, group="g")
    b.invoke(1, "commit", {K: 6}, group="g").complete(1, "commit", "ok", {K: 6}, group="g")
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


def test_group_members_with_disjoint_partitions_are_fine():
    b = sent(Builder(), K, 1)
    b.poll(1, {K: [(0, 0)]}, group="g", member_id="m1", generation_id=3, assignment=[K])
    b.poll(2, {}, group="g", member_id="m2", generation_id=3, assignment=[K1])
    b.poll(2, {K: [(0, 0)]}, group="g", member_id="m2", generation_id=4, assignment=[K, K1])
    result = check(b.history())
    assert result.verdict == "valid", result.anomalies


# ----------------------------------------------------------------------------- one anomaly each


def test_lost_write():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0)]})
    b.poll(2, {K: [(2, 2)]})  # a later offset was read; offset 1 (value 1) never was
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "lost-write")
    assert case["key"] == K and case["value"] == 1 and case["offset"] == 1
    assert case["max_read_offset"] == 2
    assert "lost-write" in result.bad


def test_unseen_when_reads_reached_the_reported_end():
    b = sent(Builder(), K, 2)
    b.poll(1, {K: [(0, 0)]})
    b.end_offsets(1, {K: 1})  # the cluster says the log ends at 1: value 1 (acked @1) is gone
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "unseen")
    assert case == {"key": K, "count": 1, "values": [1], "read_to_offset": 1, "end_offset": 1}
    assert "lost-write" not in result.anomalies


def test_unseen_is_unknown_when_final_reads_did_not_reach_the_end():
    b = sent(Builder(), K, 2)
    b.poll(1, {K: [(0, 0)]})
    b.end_offsets(1, {K: 2})
    result = check(b.history())
    assert result.verdict == "unknown"
    assert "unseen" not in result.anomalies
    assert any(K in reason and "before its end 2" in reason for reason in result.unknown_reasons)


def test_nothing_read_is_unknown():
    result = check(sent(Builder(), K, 2).poll(1, {}).history())
    assert result.verdict == "unknown"
    assert "no ok poll read anything" in result.unknown_reasons


def test_duplicate():
    b = sent(Builder(), K, 2)
    b.poll(1, {K: [(0, 0), (1, 1), (2, 0)]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "duplicate")
    assert case == {"key": K, "value": 0, "offsets": [0, 2]}


def test_inconsistent_offsets():
    b = sent(Builder(), K, 1)
    b.send(0, K, 7, outcome="info")
    b.poll(1, {K: [(0, 7)]})  # offset 0 was acknowledged for value 0, a poll saw 7 there
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "inconsistent-offsets")
    assert case == {"key": K, "offset": 0, "values": [0, 7]}
    # Offset 0 was read, acknowledged value 0 sits there and was never read: lost too.
    assert [c["value"] for c in cases(result, "lost-write")] == [0]


def test_nonmonotonic_send():
    b = Builder()
    b.send(0, K, 0, offset=5).send(0, K, 1, offset=3)
    b.poll(1, {K: [(3, 1), (5, 0)]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "nonmonotonic-send")
    assert case["key"] == K and case["values"] == [0, 1] and case["offsets"] == [5, 3]
    assert case["delta"] == -1


def test_nonmonotonic_poll():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0), (1, 1)]}).poll(1, {K: [(1, 1), (2, 2)]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "nonmonotonic-poll")
    assert case["key"] == K and case["offsets"] == [1, 1] and case["delta"] == 0
    assert set(result.anomalies) == {"nonmonotonic-poll"}


def test_poll_skip_lists_the_skipped_values():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0)]}).poll(1, {K: [(2, 2)]})
    b.poll(2, {K: [(0, 0), (1, 1), (2, 2)]})  # value 1 was read by someone: not lost
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "poll-skip")
    assert case["skipped"] == [1] and case["delta"] == 2 and case["offsets"] == [0, 2]
    assert set(result.anomalies) == {"poll-skip"}


def test_internal_poll_skip_and_nonmonotonic():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0), (2, 2)]})
    b.poll(2, {K: [(1, 1), (0, 0)]})
    result = check(b.history())
    assert cases(result, "int-poll-skip")[0]["skipped"] == [1]
    assert cases(result, "int-nonmonotonic-poll")[0]["offsets"] == [1, 0]
    assert result.verdict == "invalid"


def test_aborted_read_G1a():
    b = sent(Builder(), K, 1)
    b.send(0, K, 9, outcome="fail")
    b.poll(1, {K: [(0, 0), (1, 9)]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "G1a")
    assert case["value"] == 9 and case["offset"] == 1


def test_unwritten_read():
    b = sent(Builder(), K, 1)
    b.poll(1, {K: [(0, 0), (1, 99)]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "unwritten-read")
    assert case["value"] == 99


def test_double_assignment_in_one_generation():
    b = sent(Builder(), K, 1)
    b.poll(1, {K: [(0, 0)]}, group="g", member_id="m1", generation_id=3, assignment=[K])
    b.poll(2, {}, group="g", member_id="m2", generation_id=3, assignment=[K1],
           rebalance_log=[{"generation_id": 3, "member_id": "m2", "keys": [K, K1]}])
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "double-assignment")
    assert case["key"] == K and case["generation_id"] == 3 and set(case["members"]) == {"m1", "m2"}


def test_committed_offset_going_backwards():
    b = sent(Builder(), K, 1)
    b.poll(1, {K: [(0, 0)]})
    b.invoke(1, "commit", {K: 10}, group="g").complete(1, "commit", "ok", {K: 10}, group="g")
    b.invoke(2, "offset-fetch", [K], group="g").complete(2, "offset-fetch", "ok", {K: 4}, group="g")
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "nonmonotonic-commit")
    assert case["offset"] == 4 and case["previous_offset"] == 10 and case["group"] == "g"


# ----------------------------------------------------------------------------- verdict plumbing


def test_allowed_anomalies_are_reported_but_do_not_invalidate():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0)]}).poll(1, {K: [(2, 2)]}).poll(2, {K: [(1, 1)]})
    result = check(b.history(), allowed={"poll-skip"})
    assert result.verdict == "valid"
    assert result.counts == {"poll-skip": 1}
    assert result.bad == ()
    with pytest.raises(CheckerInputError):
        check(b.history(), allowed={"no-such-anomaly"})


def test_value_sent_twice_is_a_harness_bug():
    b = Builder().send(0, K, 1, offset=0).send(0, K, 1, offset=1)
    with pytest.raises(CheckerInputError) as info:
        check(b.history())
    assert info.value.code == "checker-input-invalid"


def test_result_is_json_and_survives_a_history_round_trip():
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(0, 0)]}).poll(1, {K: [(2, 2)]})
    history = b.history()
    lines = [op.to_json_line() for op in history]
    again = check(parse_history_lines(lines))
    first = check(history)
    assert json.loads(json.dumps(first.to_json_dict())) == again.to_json_dict()
    assert first.to_json_dict(examples_max=0)["anomalies"] == {"lost-write": [], "unseen": [], "poll-skip": []}
    assert set(first.anomalies) <= set(ANOMALIES)


# ----------------------------------------------------------------------------- properties


def _correct_run(rng: random.Random, n_values: int, n_consumers: int) -> Builder:
    """A history of a correct log: acked sends at increasing offsets (with compaction gaps),
    consumers that read contiguous runs from the start, and a full final read."""
    b = Builder()
    offset = 0
    log = []
    for value in range(n_values):
        outcome = rng.choice(["ok", "ok", "ok", "info", "fail"])
        if outcome == "fail":
            b.send(0, K, value, outcome="fail")
            continue
        b.send(0, K, value, offset=offset if outcome == "ok" else None, outcome=outcome)
        log.append((offset, value))
        offset += rng.choice([1, 1, 1, 2])  # gaps the size of a compacted record
    for process in range(1, n_consumers + 1):
        position = 0
        while position < len(log) and rng.random() < 0.8:
            take = rng.randint(1, 3)
            b.poll(process, {K: log[position : position + take]})
            position += take
    b.poll(99, {K: log})
    b.end_offsets(99, {K: log[-1][0] + 1 if log else 0})
    return b


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n_values=st.integers(1, 30), n_consumers=st.integers(0, 3))
def test_correct_logs_are_valid_and_dropping_a_middle_read_is_a_lost_write(seed, n_values, n_consumers):
    rng = random.Random(seed)
    b = _correct_run(rng, n_values, n_consumers)
    result = check(b.history())
    if result.stats["sends"]["ok"] == 0:
        assert result.verdict == "unknown"
    else:
        assert result.verdict == "valid", (seed, result.anomalies)

    # Remove one acknowledged value from every read while a later one is still read.
    acked = [op for op in b.ops if op.f == "send" and op.type == "ok"]
    read_values = sorted({v for op in b.ops if op.f == "poll" and op.type == "ok" for _, v in op.value.get(K, [])})
    victims = [op.value[1][1] for op in acked if op.value[1][1] < max(read_values, default=-1)]
    if not victims:
        return
    victim = rng.choice(victims)
    mutated = [
        Op(op.type, op.f, op.process, {K: [p for p in op.value[K] if p[1] != victim]}, op.time_ns, extra=op.extra)
        if op.f == "poll" and op.type == "ok" and K in op.value
        else Op(op.type, op.f, op.process, op.value, op.time_ns, error=op.error, extra=op.extra)
        for op in b.ops
    ]
    bad = check(History(mutated))
    assert bad.verdict == "invalid"
    assert victim in [case["value"] for case in bad.anomalies["lost-write"]]


def test_a_huge_skip_lists_only_the_first_values():
    b = sent(Builder(), K, 1000)
    b.poll(1, {K: [(0, 0)]}).poll(1, {K: [(999, 999)]})
    b.poll(2, {K: [(i, i) for i in range(1000)]})
    (case,) = check(b.history()).anomalies["poll-skip"]
    assert case["delta"] == 999 and case["skipped"] == list(range(1, 33))


def test_orphaned_process_after_a_supervisor_kill():
    """Issue 20: a `kill-supervisor` nemesis op whose side cluster left processes or ports
    behind makes the run invalid; one that left nothing does not."""
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(i, i) for i in range(3)]})
    b.invoke("nemesis", "kill-supervisor")
    b.complete("nemesis", "kill-supervisor", "ok", {"supervisor": 10, "pids": {"node-1": 11}, "left": [],
                                                     "ports_held": []})
    assert check(b.history()).verdict == "valid"
    b.invoke("nemesis", "kill-supervisor")
    b.complete("nemesis", "kill-supervisor", "ok", {"supervisor": 20, "pids": {"node-1": 21, "console": 22},
                                                     "left": ["node-1"], "ports_held": [28101]})
    result = check(b.history())
    assert result.verdict == "invalid"
    (case,) = cases(result, "orphaned-process")
    assert case["left"] == ["node-1"] and case["ports_held"] == [28101] and case["supervisor"] == 20


def test_the_stranger_makes_a_run_invalid_for_an_accepted_lying_batch_or_starved_clients():
    """Issue 39: a lying batch a leader accepted, or a node that served a fresh client before
    the stranger and not while it held on, makes the run invalid; refusals, and a node that
    did not serve at the baseline either (restarting), do not."""
    served = {"1": {"client": True, "kafka": True}, "2": {"client": False, "kafka": False}}
    refused = [{"kind": "records-count", "node": 1, "error_code": 87, "accepted": False}]
    b = sent(Builder(), K, 3)
    b.poll(1, {K: [(i, i) for i in range(3)]})
    b.invoke("nemesis", "start-stranger")
    b.complete("nemesis", "start-stranger", "ok", {"baseline": served, "lying": refused, "served": served})
    b.invoke("nemesis", "stop-stranger")
    b.complete("nemesis", "stop-stranger", "ok", {"served": served, "held": 5, "closed_by_node": 5})
    assert check(b.history()).verdict == "valid"
    accepted = [{"kind": "offset-deltas", "node": 1, "error_code": 0, "base_offset": 7, "accepted": True}]
    starved = {"1": {"client": True, "kafka": False}, "2": {"client": False, "kafka": False}}
    b.invoke("nemesis", "start-stranger")
    b.complete("nemesis", "start-stranger", "ok", {"baseline": served, "lying": accepted, "served": starved})
    b.invoke("nemesis", "stop-stranger")
    b.complete("nemesis", "stop-stranger", "ok", {"served": starved, "held": 5, "closed_by_node": 0})
    result = check(b.history())
    assert result.verdict == "invalid"
    (lie,) = cases(result, "lying-batch-accepted")
    assert lie["kind"] == "offset-deltas" and lie["base_offset"] == 7
    assert [(c["f"], c["node"], c["listeners"]) for c in cases(result, "stranger-starved-clients")] == [
        ("start-stranger", "1", ["kafka"]), ("stop-stranger", "1", ["kafka"])]

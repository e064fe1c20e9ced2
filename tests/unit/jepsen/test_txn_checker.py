"""The txn workload's checker on hand-written histories: a clean one is valid, a legal
interleaving of two concurrent transactions is valid, and each anomaly (aborted read, G1b,
torn transaction, G1c, G0-realtime, lost write, duplicate, inconsistent offsets, nonmonotonic
offsets inside a transaction) is found."""

from __future__ import annotations

from typing import Any

import pytest

from jepsen_style_tests.checker import CheckerInputError
from jepsen_style_tests.history import History, Op
from jepsen_style_tests.txn_checker import check_txn, to_send_history

pytestmark = pytest.mark.unit

K0, K1 = "t-0", "t-1"


class H:
    """A history builder: ops in the order written; a txn's invoke and completion can be apart."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, type_: str, f: str, process: Any, value: Any = None, **extra: Any) -> int:
        error = extra.pop("error", None)
        self.ops.append(Op(type_, f, process, value, len(self.ops), error=error, index=len(self.ops), extra=extra))
        return len(self.ops) - 1

    def begin(self, p: int, sends: list[tuple[str, int]], *, poll: bool = False, abort: bool = False) -> None:
        micro = ([["poll"]] if poll else []) + [["send", k, v] for k, v in sends]
        self.add("invoke", "txn", p, micro, abort=abort)

    def end(self, p: int, type_: str, sends: list[tuple[str, int, int | None]], *,
            reads: dict[str, list[list[int]]] | None = None) -> None:
        micro = ([["poll", reads]] if reads is not None else []) + [["send", k, [o, v]] for k, v, o in sends]
        self.add(type_, "txn", p, micro, error=None if type_ == "ok" else "aborted")

    def txn(self, p: int, sends: list[tuple[str, int, int | None]], type_: str = "ok", **kw: Any) -> None:
        self.begin(p, [(k, v) for k, v, _ in sends], poll=kw.get("reads") is not None)
        self.end(p, type_, sends, **kw)

    def poll(self, p: int, reads: dict[str, list[list[int]]], positions: dict[str, int] | None = None) -> None:
        self.add("invoke", "poll", p, None, poll_ms=100)
        self.add("ok", "poll", p, reads, positions=positions or {})

    def assign(self, p: int, keys: list[str]) -> None:
        self.add("invoke", "assign", p, keys, seek_to_beginning=True)
        self.add("ok", "assign", p, keys)

    def final(self, ends: dict[str, int], reads: dict[str, list[list[int]]]) -> History:
        self.add("invoke", "end-offsets", 9, list(ends))
        self.add("ok", "end-offsets", 9, ends)
        self.assign(9, sorted(ends))
        self.poll(9, reads, positions=ends)
        return History(self.ops)


def _clean() -> H:
    h = H()
    h.txn(0, [(K0, 1, 0), (K1, 2, 0)])
    h.txn(1, [(K0, 3, None)], "fail")  # aborted at 1, marker at 2
    h.txn(0, [(K0, 4, 3), (K0, 5, 4)])
    return h


def test_a_clean_history_is_valid():
    history = _clean().final({K0: 6, K1: 2}, {K0: [[0, 1], [3, 4], [4, 5]], K1: [[0, 2]]})
    result = check_txn(history)
    assert result.verdict == "valid", result.to_json_dict()
    assert result.stats["txns"] == {"fail": 1, "ok": 2}


def test_concurrent_transactions_may_interleave_their_appends():
    h = H()
    h.begin(0, [(K0, 1), (K1, 2)])
    h.begin(1, [(K0, 3), (K1, 4)])
    h.end(0, "ok", [(K0, 1, 0), (K1, 2, 1)])
    h.end(1, "ok", [(K0, 3, 1), (K1, 4, 0)])
    history = h.final({K0: 4, K1: 4}, {K0: [[0, 1], [1, 3]], K1: [[0, 4], [1, 2]]})
    result = check_txn(history)
    assert result.verdict == "valid", result.to_json_dict()


def test_an_aborted_read_is_g1a():
    history = _clean().final({K0: 6, K1: 2}, {K0: [[0, 1], [1, 3], [3, 4], [4, 5]], K1: [[0, 2]]})
    result = check_txn(history)
    assert result.verdict == "invalid"
    (case,) = result.anomalies["G1a"]
    assert case["value"] == 3 and case["writer"] == 2  # the aborted txn's invoke


def test_reading_past_the_rest_of_a_transaction_on_one_key_is_g1b():
    h = H()
    h.txn(0, [(K0, 1, 0), (K0, 2, 1)])
    h.txn(1, [(K0, 3, 2)])
    h.assign(2, [K0])
    h.poll(2, {K0: [[0, 1], [2, 3]]})
    result = check_txn(h.final({K0: 3}, {K0: [[0, 1], [1, 2], [2, 3]]}))
    assert result.verdict == "invalid"
    assert [c["value"] for c in result.anomalies["G1b"]] == [2]
    assert "torn-txn" not in result.anomalies


def test_part_of_a_transaction_across_partitions_is_torn():
    h = H()
    h.txn(0, [(K0, 1, 0), (K1, 2, 0)])
    h.assign(2, [K0, K1])
    h.poll(2, {K0: [[0, 1]]}, positions={K0: 1, K1: 1})  # K1's position passed offset 0 unread
    result = check_txn(h.final({K0: 1, K1: 1}, {K0: [[0, 1]], K1: [[0, 2]]}))
    assert result.verdict == "invalid"
    (case,) = result.anomalies["torn-txn"]
    assert case["key"] == K1 and case["value"] == 2 and case["seen"] == [[K0, 1]]


def test_an_unknown_transaction_that_was_read_counts_as_committed():
    h = H()
    h.begin(0, [(K0, 1), (K1, 2)])
    h.add("info", "txn", 0, [["send", K0, [None, 1]], ["send", K1, [None, 2]]], error="timeout")
    h.assign(2, [K0, K1])
    h.poll(2, {K0: [[0, 1]], K1: [[1, 5]]})
    h.txn(3, [(K1, 5, 1)])
    result = check_txn(h.final({K0: 1, K1: 2}, {K0: [[0, 1]], K1: [[0, 2], [1, 5]]}))
    assert result.stats["txns_committed"] == 2
    assert [c["value"] for c in result.anomalies["torn-txn"]] == [2]


def test_the_poll_of_a_transaction_that_ended_unknown_still_counts_as_a_read():
    h = H()
    h.txn(0, [(K0, 1, 0), (K1, 2, 0)])
    h.assign(1, [K0, K1])
    h.begin(1, [(K0, 3)], poll=True)
    h.add("info", "txn", 1, [["poll", {K0: [[0, 1]]}], ["send", K0, [None, 3]]], error="timeout",
          positions={K0: 1, K1: 1})
    result = check_txn(h.final({K0: 1, K1: 1}, {K0: [[0, 1]], K1: [[0, 2]]}))
    assert [c["value"] for c in result.anomalies["torn-txn"]] == [2]


def test_reading_an_open_transaction_closes_a_g1c_cycle():
    """What reading past the LSO does: process 1 reads T0's append before T0 commits and appends
    to K1 before T0 does."""
    h = H()
    h.begin(0, [(K0, 1), (K1, 2)])
    h.begin(1, [(K1, 3)], poll=True)
    h.end(1, "ok", [(K1, 3, 0)], reads={K0: [[0, 1]]})
    h.end(0, "ok", [(K0, 1, 0), (K1, 2, 1)])
    result = check_txn(h.final({K0: 1, K1: 2}, {K0: [[0, 1]], K1: [[0, 3], [1, 2]]}))
    assert result.verdict == "invalid"
    (case,) = result.anomalies["G1c"]
    assert {s["edge"] for s in case["cycle"]} == {"wr", "ww"} and case["txns"] == [0, 1]


def test_an_append_before_one_of_a_transaction_that_had_committed_is_g0_realtime():
    h = H()
    h.txn(0, [(K0, 1, 1)])
    h.txn(1, [(K0, 2, 0)])  # invoked after txn 0 completed, yet lower in the log
    result = check_txn(h.final({K0: 2}, {K0: [[0, 2], [1, 1]]}))
    assert result.verdict == "invalid"
    assert "G0-realtime" in result.anomalies and "G0" not in result.anomalies


def test_a_committed_append_skipped_by_every_reader_is_lost():
    h = H()
    h.txn(0, [(K0, 1, 0)])
    h.txn(0, [(K0, 2, 1)])
    result = check_txn(h.final({K0: 2}, {K0: [[1, 2]]}))
    assert result.verdict == "invalid"
    assert [c["value"] for c in result.anomalies["lost-write"]] == [1]


def test_offsets_must_agree_between_writer_and_readers():
    h = H()
    h.txn(0, [(K0, 1, 0), (K1, 2, 0)])
    h.assign(2, [K0])
    h.poll(2, {K0: [[0, 1], [1, 1]]})  # one value at two offsets
    h.assign(3, [K1])
    h.poll(3, {K1: [[0, 7]]})  # another value at the offset K1's append was acked at
    result = check_txn(h.final({K0: 2, K1: 1}, {K0: [[0, 1]], K1: [[0, 2]]}))
    assert result.verdict == "invalid"
    assert [c["value"] for c in result.anomalies["duplicate"]] == [1]
    assert [c["values"] for c in result.anomalies["inconsistent-offsets"]] == [[2, 7]]
    assert result.anomalies["unwritten-read"][0]["value"] == 7


def test_offsets_inside_one_transaction_must_increase():
    h = H()
    h.txn(0, [(K0, 1, 1), (K0, 2, 0)])
    result = check_txn(h.final({K0: 2}, {K0: [[0, 2], [1, 1]]}))
    assert result.verdict == "invalid"
    assert "nonmonotonic-send" in result.anomalies


def test_cases_name_the_original_history_indexes():
    h = _clean()
    history = h.final({K0: 6, K1: 2}, {K0: [[0, 1], [1, 3], [3, 4], [4, 5]], K1: [[0, 2]]})
    sends, origin, txns = to_send_history(history)
    assert len(origin) == len(sends) and [t.index for t in txns] == [0, 2, 4]
    (case,) = check_txn(history).anomalies["G1a"]
    assert history[case["op"]].f == "poll" and history[case["writer"]].f == "txn"


def test_a_txn_that_completes_with_other_sends_is_refused():
    h = H()
    h.begin(0, [(K0, 1)])
    h.end(0, "ok", [(K0, 2, 0)])
    with pytest.raises(CheckerInputError):
        check_txn(History(h.ops))


def test_nothing_committed_is_unknown():
    h = H()
    h.txn(0, [(K0, 1, None)], "fail")
    result = check_txn(h.final({K0: 2}, {}))
    assert result.verdict == "unknown" and "no transaction committed" in result.unknown_reasons


class FakeTxnLog:
    """A correct read_committed log per key for `generator.simulate`: a transaction's appends
    and its COMMIT/ABORT marker land at once; polls skip aborted records and markers (or, with
    `read_aborted`, return aborted records too: the control)."""

    def __init__(self, keys, *, read_aborted: bool = False):
        self.log: dict[str, list[tuple[Any, bool]]] = {k: [] for k in keys}  # (value|None, visible)
        self.positions: dict = {}
        self.read_aborted = read_aborted

    def _poll(self, p) -> tuple[dict, dict]:
        out: dict = {}
        for key, position in self.positions.get(p, {}).items():
            entries = self.log[key][position:position + 4]
            got = [[position + i, v] for i, (v, visible) in enumerate(entries)
                   if v is not None and (visible or self.read_aborted)]
            if got:
                out[key] = got
            self.positions[p][key] = position + len(entries)
        return out, dict(self.positions.get(p, {}))

    def __call__(self, invoke: Op, rng):
        latency = rng.randint(1, 5) * 1_000_000
        f, p = invoke.f, invoke.process
        if f == "txn":
            reads, positions = self._poll(p) if invoke.value[0] == ["poll"] else ({}, {})
            commit = not invoke.get("abort")
            done = [["poll", reads]] if invoke.value[0] == ["poll"] else []
            for _, key, v in (m for m in invoke.value if m[0] == "send"):
                self.log[key].append((v, commit))
                done.append(["send", key, [len(self.log[key]) - 1 if commit else None, v]])
            for key in {m[1] for m in invoke.value if m[0] == "send"}:
                self.log[key].append((None, True))  # the marker
            return ("ok" if commit else "fail"), done, latency, None if commit else "aborted"
        if f == "assign":  # as txn_client: kept keys go on, new ones start at the beginning
            old = {} if invoke.get("seek_to_beginning") else self.positions.get(p, {})
            self.positions[p] = {k: old.get(k, 0) for k in invoke.value}
            return "ok", invoke.value, latency, None
        if f == "poll":
            out, positions = self._poll(p)
            return "ok", out, latency, None
        if f == "end-offsets":
            # simulate() carries no positions: the end is one past the last visible value
            ends = {k: 1 + max((i for i, (v, visible) in enumerate(self.log[k]) if v is not None and visible),
                               default=-1) for k in invoke.value}
            return "ok", ends, latency, None
        return "ok", invoke.value, latency, None


def _simulated(read_aborted: bool, seed: int = 7) -> History:
    import random

    from jepsen_style_tests import generator as gen
    from jepsen_style_tests.runner import RunConfig, workload

    keys = ["jepsen-0", "jepsen-1", "jepsen-2"]
    config = RunConfig(workload="txn", nemesis=(), time_limit_s=3, rate=200, recovery_s=0.1)
    return gen.simulate(workload(config, keys, random.Random(seed)), FakeTxnLog(keys, read_aborted=read_aborted),
                        concurrency=4, seed=seed)


def test_the_txn_workload_on_a_correct_log_is_valid():
    history = _simulated(read_aborted=False)
    counts = history.counts()["txn"]
    assert counts["ok"] > 50 and counts["fail"] > 5  # committed and aborted on purpose
    result = check_txn(history)
    assert result.verdict == "valid", result.to_json_dict()


def test_the_txn_workload_on_a_log_that_shows_aborted_records_is_invalid():
    result = check_txn(_simulated(read_aborted=True))
    assert result.verdict == "invalid" and "G1a" in result.bad

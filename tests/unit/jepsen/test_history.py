"""History: ops round-trip through JSON lines, the writer appends and bounds lines, invokes pair
with completions, invariant breaches are rejected, and fault windows come out of nemesis ops."""

from __future__ import annotations

import json

import pytest

from jepsen_style_tests.history import (
    NEMESIS,
    History,
    HistoryError,
    HistoryWriter,
    Op,
    key_of,
    parse_history_lines,
    parse_key,
    read_history,
    write_history,
)


def op(type_, process, f, value=None, t=0, **extra):
    return Op(type_, f, process, value, t, extra=extra)


def sample_ops():
    return [
        op("invoke", 0, "send", ["t-0", 1], 10),
        op("invoke", 1, "poll", None, 11, poll_ms=100),
        op("ok", 0, "send", ["t-0", [0, 1]], 20),
        op("invoke", NEMESIS, "start-partition", "halves", 25),
        op("ok", 1, "poll", {"t-0": [[0, 1]]}, 30, positions={"t-0": 1}),
        op("ok", NEMESIS, "start-partition", {"shape": "halves", "grudge": {"1": ["2"]}}, 31),
        op("invoke", 0, "send", ["t-0", 2], 40),
        op("invoke", NEMESIS, "stop-partition", None, 50),
        op("ok", NEMESIS, "stop-partition", None, 60),
    ]


def test_keys_round_trip():
    assert key_of("orders", 3) == "orders-3"
    assert parse_key("my-topic-12") == ("my-topic", 12)
    with pytest.raises(HistoryError):
        parse_key("no_partition")


def test_op_json_round_trip_keeps_fields_and_extras():
    original = Op("ok", "poll", 3, {"t-1": [[5, 9]]}, 123, wall_time=1.5, error=None, index=7,
                  extra={"generation_id": 2, "positions": {"t-1": 6}})
    line = original.to_json_line()
    assert line.endswith("\n") and "\n" not in line[:-1]
    data = json.loads(line)
    assert list(data)[:8] == ["index", "type", "process", "f", "value", "time_ns", "wall_time", "error"]
    assert Op.from_json_dict(data) == original
    assert original.get("generation_id") == 2 and original.get("missing", "d") == "d"


def test_bad_ops_are_rejected():
    with pytest.raises(HistoryError):
        Op("done", "send", 0)
    with pytest.raises(HistoryError):
        Op.from_json_dict({"type": "ok", "process": 0})
    with pytest.raises(HistoryError):
        Op("ok", "send", 0, extra={"value": 1}).to_json_dict()


def test_pairs_and_lookups():
    history = History(sample_ops())
    assert [o.index for o in history] == list(range(len(history)))
    pairs = history.pairs()
    assert [(p.f, p.type) for p in pairs] == [
        ("send", "ok"), ("poll", "ok"), ("start-partition", "ok"), ("send", "info"), ("stop-partition", "ok"),
    ]
    assert pairs[0].latency_ns == 10
    unfinished = pairs[3]
    assert unfinished.completion is None and unfinished.latency_ns is None
    assert history.completion_of(0).index == 2
    assert history.invocation_of(4).index == 1
    assert [o.index for o in history.filter(f="send", type="invoke")] == [0, 6]
    assert len(history.nemesis_ops()) == 4 and len(history.client_ops()) == 5
    assert history.counts() == {"send": {"ok": 1, "info": 1}, "poll": {"ok": 1},
                                "start-partition": {"ok": 1}, "stop-partition": {"ok": 1}}
    assert (history.start_ns, history.end_ns, history.duration_ns) == (10, 60, 50)


@pytest.mark.parametrize(
    "ops, message",
    [
        ([op("ok", 0, "send")], "has no invoke"),
        ([op("invoke", 0, "send"), op("invoke", 0, "poll")], "still running"),
        ([op("invoke", 0, "send"), op("ok", 0, "poll")], "does not match"),
        ([Op("invoke", "send", 0, index=3)], "has index 3"),
    ],
)
def test_invariant_breaches_raise(ops, message):
    with pytest.raises(HistoryError, match=message):
        History(ops)


def test_fault_windows():
    ops = sample_ops() + [
        op("invoke", NEMESIS, "start-kill", "leader", 70),
        op("fail", NEMESIS, "start-kill", None, 71),  # a failed start opens nothing
        op("invoke", NEMESIS, "corrupt-tail", {"node": 1}, 80),
        op("ok", NEMESIS, "corrupt-tail", None, 85),
        op("invoke", NEMESIS, "start-pause", "one", 90),
        op("ok", NEMESIS, "start-pause", ["n1"], 95),
        op("ok", 0, "send", ["t-0", [1, 2]], 100),
    ]
    windows = History(ops).fault_windows()
    assert [(w.name, w.start_ns, w.end_ns, w.closed) for w in windows] == [
        ("partition", 25, 60, True),
        ("corrupt-tail", 80, 85, True),
        ("pause", 90, 100, False),
    ]
    assert windows[0].value == "halves"


def test_writer_appends_assigns_indexes_and_reads_back(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        written = [writer.append(o) for o in sample_ops()]
        assert len(writer) == len(written)
        # Flushed per line: a reader sees every op before the writer closes.
        assert len(path.read_text().splitlines()) == len(written)
    assert [o.index for o in written] == list(range(len(written)))
    assert list(read_history(path)) == written
    with pytest.raises(HistoryError):
        writer.append(sample_ops()[0])
    with pytest.raises(FileExistsError):
        HistoryWriter(path)  # never append to another run's history


def test_writer_bounds_lines_and_checks_indexes(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl", max_line_bytes=200) as writer:
        writer.append(op("invoke", 1, "poll"))
        with pytest.raises(HistoryError, match="max_line_bytes"):
            writer.append(op("ok", 1, "poll", {"t-0": [[i, i] for i in range(100)]}))
        with pytest.raises(HistoryError, match="expected 1"):
            writer.append(Op("ok", "poll", 1, index=5))
        writer.append(op("ok", 1, "poll", {}))
    assert len(read_history(tmp_path / "h.jsonl")) == 2


def test_torn_last_line_is_dropped_but_torn_middle_line_is_an_error(tmp_path):
    path = tmp_path / "h.jsonl"
    assert write_history(path, sample_ops()[:3]) == 3
    text = path.read_text()
    torn = text + '{"index":3,"type":"inv'
    assert len(parse_history_lines(torn.splitlines(keepends=True))) == 3
    lines = text.splitlines(keepends=True)
    broken = lines[:1] + ['{"index":1,"ty\n'] + lines[1:]
    with pytest.raises(HistoryError, match="line 2"):
        parse_history_lines(broken)

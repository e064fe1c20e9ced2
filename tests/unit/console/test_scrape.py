"""The console reads /metrics text tolerantly (bad lines and missing families never hide the rest) and turns counter deltas into per-second rates, treating a counter that went down as a restart."""

from __future__ import annotations

import pytest

from raftlog.console.scrape import counter_rates, parse_metrics, partition_sizes

TEXT = '''# HELP raftlog_requests_total Requests answered.
# TYPE raftlog_requests_total counter
raftlog_requests_total{listener="client",op="produce",code="OK"} 100
raftlog_requests_total{listener="client",op="produce",code="NOT_LEADER"} 5
raftlog_requests_total{listener="client",op="fetch",code="OK"} 40
raftlog_requests_total{listener="peer",op="fetch",code="OK"} 1000
raftlog_connections{listener="client"} 3
weird_label{a="x\\"y",b="line\\nbreak"} 1.5e3
this line is not a sample
bad_value{a="1"} twelve
bad_labels{a=1} 4
raftlog_topic_records_in_total{topic="t"} 10
raftlog_topic_records_in_total{topic="u"} 20
kafka_messages_in_total 999
raftlog_log_size_bytes{topic="t",partition="0"} 4096
'''


def test_parse_keeps_good_samples_and_skips_bad_lines():
    s = parse_metrics(TEXT)
    assert s[("raftlog_connections", (("listener", "client"),))] == 3
    assert s[("weird_label", (("a", 'x"y'), ("b", "line\nbreak")))] == 1500
    assert not any(name in ("bad_value", "bad_labels", "this") for name, _ in s)
    assert parse_metrics("") == {}
    assert parse_metrics("x +Inf\ny NaN")[("x", ())] == float("inf")


def bump(text: str, factor: int) -> str:
    out = []
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if line.startswith(("raftlog_requests_total", "raftlog_topic", "kafka_")):
            line = f"{head} {float(value) * factor}"
        out.append(line)
    return "\n".join(out)


def test_rates_sum_nodes_and_pick_one_family_per_flow():
    before = [parse_metrics(TEXT), parse_metrics(TEXT)]
    after = [parse_metrics(bump(TEXT, 2)), parse_metrics(bump(TEXT, 3))]
    r = counter_rates(before, after, 2.0)
    assert r.produce_requests == pytest.approx((105 + 210) / 2)
    assert r.fetch_requests == pytest.approx((40 + 80) / 2)           # the peer listener is not counted
    assert r.flows == {"records_in": pytest.approx((30 + 60) / 2)}     # kafka_messages_in_total not added twice


def test_missing_families_give_none_and_restarts_count_from_zero():
    r = counter_rates([{}], [parse_metrics("x 1")], 1.0)
    assert r.produce_requests is None and r.fetch_requests is None and r.flows == {}
    restarted = counter_rates([parse_metrics(TEXT)], [parse_metrics(bump(TEXT, 0))], 1.0)
    assert restarted.produce_requests == 0.0
    with pytest.raises(ValueError):
        counter_rates([{}], [{}], 0)


def test_partition_sizes_take_the_largest_replica():
    a = parse_metrics('raftlog_log_size_bytes{topic="t",partition="0"} 10\nother_size_bytes{topic="t"} 5')
    b = parse_metrics('raftlog_log_size_bytes{topic="t",partition="0"} 30')
    assert partition_sizes([a, b]) == {("t", 0): 30}
    assert partition_sizes([{}]) == {}

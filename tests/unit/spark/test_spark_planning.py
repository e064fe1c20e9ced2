"""Pure planning: offset JSON has a fixed key order, specs resolve as Kafka's source does, ranges and data-loss decisions are right, rate_limit never exceeds the limit and shares it by backlog, splits cover ranges exactly."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_source.options import DataLoss, InvalidOption, OffsetSpec, Subscription
from spark_source.planning import (
    PartitionMeta,
    RaftlogInputPartition,
    next_end_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    rate_limit,
    resolve_offsets,
    select_partitions,
    split_ranges,
    timestamps_to_look_up,
)

A0, A1, A2, A10, B0 = ("a", 0), ("a", 1), ("a", 2), ("a", 10), ("b", 0)


def test_offset_json_orders_topics_and_partitions_numerically():
    doc = offsets_to_json({B0: 1, A10: 4, A2: 3, A0: 2})
    assert json.dumps(doc) == '{"a": {"0": 2, "2": 3, "10": 4}, "b": {"0": 1}}'
    # Spark hands it back parsed; the round trip is exact and re-serialises identically.
    back = offsets_from_json(json.loads(json.dumps(doc)))
    assert back == {B0: 1, A10: 4, A2: 3, A0: 2}
    assert json.dumps(offsets_to_json(back)) == json.dumps(doc)


@pytest.mark.parametrize("doc", [[], {"a": [1]}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "1"}}])
def test_offset_json_rejects_garbage(doc):
    with pytest.raises(InvalidOption):
        offsets_from_json(doc)


def test_select_partitions_by_kind():
    metas = [PartitionMeta("b", 0), PartitionMeta("a", 1), PartitionMeta("a", 0),
             PartitionMeta("__consumer_offsets", 0, internal=True)]
    assert [(m.topic, m.partition) for m in select_partitions(
        Subscription("subscribe", topics=("a",)), metas)] == [A0, A1]
    assert [(m.topic, m.partition) for m in select_partitions(
        Subscription("subscribepattern", pattern=".*"), metas)] == [A0, A1, B0]
    assert [m.topic for m in select_partitions(
        Subscription("subscribe", topics=("__consumer_offsets",)), metas)] == ["__consumer_offsets"]
    with pytest.raises(InvalidOption, match="a-7"):
        select_partitions(Subscription("assign", assigned=(A0, ("a", 7))), metas)


EARLIEST = {A0: 3, A1: 0}
LATEST = {A0: 10, A1: 5}


@pytest.mark.parametrize("spec, expected", [
    (OffsetSpec("earliest"), {A0: 3, A1: 0}),
    (OffsetSpec("latest"), {A0: 10, A1: 5}),
    (OffsetSpec("specific", offsets={A0: -2, A1: -1}), {A0: 3, A1: 5}),
    (OffsetSpec("specific", offsets={A0: 7, A1: 2}), {A0: 7, A1: 2}),
    (OffsetSpec("group", group_id="g"), {A0: 6, A1: 0}),  # no commit on a-1: earliest
])
def test_resolve_offsets(spec, expected):
    got = resolve_offsets(spec, [A0, A1], EARLIEST, LATEST, name="startingOffsets",
                          committed={A0: 6, A1: None})
    assert got == expected


def test_specific_offsets_must_name_exactly_the_subscribed_partitions():
    with pytest.raises(InvalidOption, match="missing a-1"):
        resolve_offsets(OffsetSpec("specific", offsets={A0: 1}), [A0, A1], EARLIEST, LATEST,
                        name="startingOffsets")
    with pytest.raises(InvalidOption, match="not subscribed b-0"):
        resolve_offsets(OffsetSpec("specific", offsets={A0: 1, A1: 1, B0: 1}), [A0, A1],
                        EARLIEST, LATEST, name="startingOffsets")


def test_timestamp_resolution_and_strategy():
    spec = OffsetSpec("timestamp", timestamp=1000)
    assert timestamps_to_look_up(spec, [A0, A1]) == {A0: 1000, A1: 1000}
    found = {A0: 4, A1: None}
    with pytest.raises(InvalidOption, match="a-1"):
        resolve_offsets(spec, [A0, A1], EARLIEST, LATEST, name="s", by_timestamp=found)
    assert resolve_offsets(spec, [A0, A1], EARLIEST, LATEST, name="s", by_timestamp=found,
                           timestamp_strategy="latest") == {A0: 4, A1: 5}
    per = OffsetSpec("timestamp", offsets={A0: 5, A1: 6})
    assert timestamps_to_look_up(per, [A0, A1]) == {A0: 5, A1: 6}


def test_plan_ranges_one_per_partition_with_leader_hints_and_no_empty_ranges():
    metas = {A0: PartitionMeta("a", 0, 2, "h:2")}
    ranges, warnings = plan_ranges({A0: 3, A1: 5}, {A0: 9, A1: 5}, {}, metas)
    assert ranges == [RaftlogInputPartition("a", 0, 3, 9, 2, "h:2")] and warnings == []


def test_plan_ranges_data_loss_raises_or_warns_and_skips():
    start, end, earliest = {A0: 2, A1: 8}, {A0: 9, A1: 4, B0: 6}, {A0: 5, B0: 3}
    with pytest.raises(DataLoss, match="failOnDataLoss"):
        plan_ranges(start, end, earliest)
    ranges, warnings = plan_ranges(start, end, earliest, fail_on_data_loss=False)
    # a-0 from the log start, a-1 went backwards (nothing), b-0 new but not from 0.
    assert [(r.tp, r.start, r.end) for r in ranges] == [(A0, 5, 9), (B0, 3, 6)]
    assert len(warnings) == 3 and all("failOnDataLoss is false" in w for w in warnings)


def test_rate_limit_shares_by_backlog_like_kafka():
    start = {A0: 0, A1: 0, A2: 100}
    latest = {A0: 300, A1: 100, A2: 100}
    assert rate_limit(start, latest, 100) == {A0: 75, A1: 25, A2: 100}
    assert rate_limit(start, latest, 1000) == latest  # under the limit: everything


def test_rate_limit_never_exceeds_where_kafka_rounds_up():
    # Kafka's ceil would give 1 + 1 + 1 = 3 > 2.
    got = rate_limit({A0: 0, A1: 0, A2: 0}, {A0: 1, A1: 1, A2: 1}, 2)
    assert sum(got.values()) == 2


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 5)),
                       st.tuples(st.integers(0, 10**12), st.integers(0, 10**6)), min_size=1,
                       max_size=12),
       st.integers(1, 10**7))
def test_rate_limit_properties(spec, limit):
    start = {tp: s for tp, (s, _) in spec.items()}
    latest = {tp: s + n for tp, (s, n) in spec.items()}
    total = sum(n for _, n in spec.values())
    got = rate_limit(start, latest, limit)
    admitted = {tp: got[tp] - start[tp] for tp in spec}
    assert all(0 <= admitted[tp] <= spec[tp][1] for tp in spec)
    assert sum(admitted.values()) == min(limit, total)  # exact: never over, progress when due
    if total > limit:
        for tp, (_, n) in spec.items():  # each share within one of its exact proportion
            assert abs(admitted[tp] - limit * n / total) < 1 + 1e-9


def test_next_end_offsets():
    start = {A0: 5, A1: 2}
    # Nothing new: the start itself.
    end, w = next_end_offsets(start, {A0: 5, A1: 2}, {}, limit=None, fail_on_data_loss=True)
    assert end == start and w == []
    # A new partition joins from its earliest and shares the limit.
    end, _ = next_end_offsets(start, {A0: 15, A1: 2, B0: 10}, {B0: 0}, limit=10,
                              fail_on_data_loss=True)
    assert end == {A0: 10, A1: 2, B0: 5}
    # AvailableNow target caps the end; partitions born after the target stay out.
    end, _ = next_end_offsets(start, {A0: 15, A1: 9, B0: 4}, {B0: 0}, limit=None,
                              fail_on_data_loss=True, target={A0: 12, A1: 9})
    assert end == {A0: 12, A1: 9}
    # A partition that disappeared.
    with pytest.raises(DataLoss, match="a-1 no longer exists"):
        next_end_offsets(start, {A0: 6}, {}, limit=None, fail_on_data_loss=True)
    end, w = next_end_offsets(start, {A0: 6}, {}, limit=None, fail_on_data_loss=False)
    assert end == {A0: 6} and len(w) == 1


def test_split_ranges_for_min_partitions():
    r = [RaftlogInputPartition("a", 0, 0, 90, 1, "h:1"), RaftlogInputPartition("a", 1, 5, 15)]
    assert split_ranges(r, None) == r and split_ranges(r, 2) == r
    out = split_ranges(r, 10)
    assert [(p.partition, p.start, p.end) for p in out] == [
        (0, 0, 10), (0, 10, 20), (0, 20, 30), (0, 30, 40), (0, 40, 50), (0, 50, 60),
        (0, 60, 70), (0, 70, 80), (0, 80, 90), (1, 5, 15)]
    assert all(p.leader_id == 1 for p in out if p.partition == 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=8), st.integers(1, 64))
def test_split_ranges_cover_each_range_exactly(sizes, min_partitions):
    ranges = [RaftlogInputPartition("t", p, 1000 * p, 1000 * p + n) for p, n in enumerate(sizes)]
    out = split_ranges(ranges, min_partitions)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert all(p.size > 0 for p in pieces)

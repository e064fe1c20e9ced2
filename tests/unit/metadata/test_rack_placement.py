"""Rack-aware placement (metadata/placement.py): new partitions spread over racks the way
Kafka's rack-aware assignment does, leaders stay balanced, and single-replica replacements
keep racks spread."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from metadata.placement import rack_alternated, racks_spread, replacement, ring_placement


def test_rack_alternated_interleaves_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assert rack_alternated(racks) == [1, 3, 5, 2, 4, 6]


def test_no_racks_is_the_plain_ring():
    racks = {1: None, 2: None, 3: None, 4: None}
    assert ring_placement(racks, {}, 4, 3) == [(1, 2, 3), (2, 3, 4), (3, 4, 1), (4, 1, 2)]


@pytest.mark.parametrize("seed", range(20))
def test_every_partition_spans_min_rf_racks_and_leaders_balance(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 9)
    rack_names = ["r%d" % i for i in range(rng.randint(2, 4))]
    racks = {b: rng.choice(rack_names) for b in range(1, n + 1)}
    rf = rng.randint(1, min(3, n))
    count = rng.randint(1, 40)
    placed = ring_placement(racks, {}, count, rf)
    assert len(placed) == count
    for replicas in placed:
        assert len(set(replicas)) == rf and set(replicas) <= set(racks)
        assert racks_spread(replicas, racks), (replicas, racks)
    leaders = Counter(r[0] for r in placed)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1


def test_three_racks_rf3_one_replica_per_rack():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for replicas in ring_placement(racks, {}, 12, 3):
        assert sorted(racks[r] for r in replicas) == ["a", "b", "c"]


def test_replacement_prefers_a_free_rack_then_the_leaving_rack_then_load():
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    # 3 (rack c) leaves (1, 2, 3): only rack c is free among 4 (a), 5 (b), 6 (c)
    assert replacement((1, 2, 3), 3, racks, {}) == 6
    # every rack used by the staying ones: same rack as the leaving one
    racks2 = {1: "a", 2: "b", 4: "a", 5: "b"}
    assert replacement((1, 2, 9), 9, {**racks2, 9: "b"}, {}) in (4, 5)
    # no racks: least loaded, lowest id
    assert replacement((1, 2), 2, {1: None, 3: None, 4: None}, {3: 5, 4: 1}) == 4
    assert replacement((1, 2), 2, {1: None, 2: None}, {}) is None


def test_replication_factor_over_brokers_is_refused():
    with pytest.raises(ValueError, match="replication factor 4 > 3"):
        ring_placement({1: None, 2: None, 3: None}, {}, 1, 4)

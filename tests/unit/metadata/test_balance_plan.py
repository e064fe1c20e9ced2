"""The balancer's plan (metadata/balancer.py) on random images: applied, it leaves replica,
preferred-leader and byte counts within the tolerance (or as close as racks allow), never
changes a replication factor, never puts two replicas on one broker, never narrows a rack
spread, touches only placeable brokers, and a balanced image gives an empty plan."""

from __future__ import annotations

import random

import pytest

from metadata.balancer import loads, plan
from metadata.image import MetadataImage
from metadata.placement import racks_spread
from metadata.reassignment import ReassignmentItem, plan_reassignments


def _image(controller_cluster, brokers, racks, topics):
    """Brokers 1..`brokers` (racks), then each topic (count, rf, on) placed on brokers 1..on
    only (the others shut down meanwhile): the later ones are empty, as after growing."""
    cl = controller_cluster(brokers=0)
    for b in range(1, brokers + 1):
        _start(cl, b, racks[b], "0")
    for i, (count, rf, on) in enumerate(topics):
        hidden = range(on + 1, brokers + 1)
        for b in hidden:
            cl.commit(cl.c.controlled_shutdown(b, cl.image.broker(b).incarnation_id, now_ms=0))
        cl.commit(cl.c.create_topic(f"t{i}", count, rf, now_ms=0))
        for b in hidden:
            _start(cl, b, racks[b], f"{i + 1}")
    return cl


def _start(cl, b, rack, inc):
    cl.commit(cl.c.register_broker(b, f"inc-{b}-{inc}", "localhost", 9000 + b, "localhost", 9100 + b,
                                   rack, now_ms=0))
    cl.commit(cl.c.heartbeat(b, f"inc-{b}-{inc}", now_ms=0))


def _apply(cl, moves):
    records, errors = plan_reassignments(cl.image, [ReassignmentItem(m.topic, m.partition, m.replicas)
                                                    for m in moves])
    assert errors == [None] * len(moves)
    cl.commit(cl.c._result(records, None))
    for m in moves:  # the group reaches the target: the leader reports it
        cl.commit(cl.c.membership_report(m.topic, m.partition, m.replicas, now_ms=0))


@pytest.mark.parametrize("seed", range(25))
def test_random_images_converge_and_keep_rf_and_racks(controller_cluster, seed):
    rng = random.Random(seed)
    n = rng.randint(3, 7)
    rack_names = [None] if rng.random() < 0.3 else ["a", "b", "c"][:rng.randint(2, 3)]
    racks = {b: rng.choice(rack_names) for b in range(1, n + 1)}
    topics = []
    for _ in range(rng.randint(1, 4)):
        on = rng.randint(3, n)
        topics.append((rng.randint(1, 20), rng.randint(1, 3), on))
    cl = _image(controller_cluster, n, racks, topics)
    before = {(t, p.partition): p for t in cl.image.topic_names() for p in cl.image.topic(t).partitions}
    sizes = {k: rng.randint(0, 10_000) for k in before}
    moves = plan(cl.image, sizes, tolerance=0.1, min_gap_bytes=0)  # the bytes step at any size
    assert len({(m.topic, m.partition) for m in moves}) == len(moves)
    for m in moves:
        old = before[(m.topic, m.partition)]
        assert len(m.replicas) == len(old.replicas) == len(set(m.replicas))
        assert set(m.replicas) <= set(cl.image.placeable_broker_ids())
        if racks_spread(old.replicas, racks):
            assert racks_spread(m.replicas, racks), (m, racks)
    _apply(cl, moves)
    after = loads(cl.image, sizes)
    counts = [v.replicas for v in after.values()]
    mean = sum(counts) / len(counts)
    if all(r is None for r in racks.values()):
        assert max(counts) - min(counts) <= max(1, 0.1 * mean), after
        leaders = [v.leaders for v in after.values()]
        assert max(leaders) - min(leaders) <= max(1, 0.1 * sum(leaders) / len(leaders)), after
    before_counts = [v.replicas for v in loads(_image(controller_cluster, n, racks, topics).image).values()]
    assert max(counts) - min(counts) <= max(before_counts) - min(before_counts)
    # a second plan has little left to do (ties and racks aside)
    assert len(plan(cl.image, sizes, tolerance=0.1, min_gap_bytes=0)) <= len(moves)


def test_growing_three_to_five_spreads_replicas_and_leaders(controller_cluster):
    cl = _image(controller_cluster, 5, {b: None for b in range(1, 6)}, [(30, 3, 3)])
    assert loads(cl.image)[4].replicas == loads(cl.image)[5].replicas == 0
    moves = plan(cl.image)
    _apply(cl, moves)
    after = loads(cl.image)
    assert sorted(v.replicas for v in after.values()) == [18] * 5
    assert max(v.leaders for v in after.values()) - min(v.leaders for v in after.values()) <= 1
    assert plan(cl.image) == []


def _sizes(cl, unit: int) -> dict[tuple[str, int], int]:
    """Partition i of t0 holds i x `unit` bytes: brokers differ by a few units."""
    return {("t0", p.partition): p.partition * unit for p in cl.image.topic("t0").partitions}


def test_a_bytes_gap_under_the_floor_is_balanced(controller_cluster):
    # Balanced by replicas and leaders (12 partitions RF 2 made on 4 brokers); the brokers' bytes
    # differ by a few KiB, as an idle cluster's do: nothing to move, though the gap is far over
    # the tolerance x mean (with no floor the bytes step swaps replicas over it).
    cl = _image(controller_cluster, 4, {b: None for b in range(1, 5)}, [(12, 2, 4)])
    sizes = _sizes(cl, 1024)
    bytes_per_broker = [v.bytes for v in loads(cl.image, sizes).values()]
    assert max(bytes_per_broker) - min(bytes_per_broker) > 0.1 * sum(bytes_per_broker) / 4
    assert plan(cl.image, sizes, min_gap_bytes=0) != []
    assert plan(cl.image, sizes) == []
    with pytest.raises(ValueError, match="min_gap_bytes"):
        plan(cl.image, sizes, min_gap_bytes=-1)


def test_a_bytes_gap_of_many_mib_is_moved(controller_cluster):
    cl = _image(controller_cluster, 4, {b: None for b in range(1, 5)}, [(12, 2, 4)])
    sizes = _sizes(cl, 100 << 20)
    before = [v.bytes for v in loads(cl.image, sizes).values()]
    moves = plan(cl.image, sizes)
    assert moves and all(m.reason.startswith("bytes") for m in moves)
    _apply(cl, moves)
    after = [v.bytes for v in loads(cl.image, sizes).values()]
    assert max(after) - min(after) < max(before) - min(before)
    assert sorted(v.replicas for v in loads(cl.image).values()) == [6, 6, 6, 6]


def test_draining_and_fenced_brokers_are_left_out(controller_cluster):
    cl = _image(controller_cluster, 5, {b: None for b in range(1, 6)}, [(12, 2, 3)])
    cl.commit(cl.c.controlled_shutdown(5, cl.image.broker(5).incarnation_id, now_ms=0))
    cl.commit(cl.c.decommission_broker(4, now_ms=0))
    assert plan(cl.image) == []  # 1..3 hold 8 each; 4 drains, 5 is fenced


def test_bad_tolerance_and_an_empty_image():
    assert plan(MetadataImage.empty()) == []
    with pytest.raises(ValueError, match="tolerance"):
        plan(MetadataImage.empty(), tolerance=1.5)


def _settle(cl, rounds=40):
    """Ticks, with every move finished by its leader's report, until nothing moves."""
    for _ in range(rounds):
        cl.now_ms += 100
        cl.heartbeat_all()
        result = cl.c.tick(cl.now_ms)
        cl.commit(result)
        moving = [(n, p) for n in cl.image.topic_names() for p in cl.image.topic(n).partitions if p.reassigning]
        for name, p in moving:
            cl.commit(cl.c.membership_report(name, p.partition, p.target_replicas, now_ms=cl.now_ms))
        if not result.envelopes and not moving:
            return
    raise AssertionError("still moving")


def test_balance_op_dry_run_moves_nothing_then_executes(controller_cluster):
    cl = _image(controller_cluster, 4, {b: None for b in range(1, 5)}, [(8, 2, 3)])
    rows = cl.commit(cl.c.balance(dry_run=True, now_ms=0))
    assert rows and all(set(r) == {"topic", "partition", "replicas", "reason"} for r in rows)
    assert not any(p.reassigning for p in cl.image.topic("t0").partitions)
    rows = cl.commit(cl.c.balance(now_ms=0))
    assert {(r["topic"], r["partition"]) for r in rows} == {
        ("t0", p.partition) for p in cl.image.topic("t0").partitions if p.reassigning}
    with pytest.raises(Exception, match="tolerance"):
        cl.c.balance(tolerance=2, now_ms=0)


@pytest.mark.parametrize("mode,moves", [("off", False), ("node_add", True), ("continuous", True)])
def test_autobalancing_after_a_broker_joins(controller_cluster, mode, moves):
    cl = _image(controller_cluster, 4, {b: None for b in range(1, 5)}, [(12, 3, 3)])
    cl.c.autobalancing_mode = mode
    assert loads(cl.image)[4].replicas == 0
    _settle(cl)
    assert (loads(cl.image)[4].replicas == 9) is moves, loads(cl.image)


def test_continuous_mode_moves_replicas_off_a_broker_down_too_long(controller_cluster):
    cl = controller_cluster(brokers=4, autobalancing_mode="continuous", node_availability_timeout_ms=5000)
    cl.commit(cl.c.create_topic("t", 8, 2, now_ms=0))
    _settle(cl)
    held = len(cl.image.partitions_assigned_to(2))
    assert held
    cl.commit(cl.c.controlled_shutdown(2, cl.image.broker(2).incarnation_id, now_ms=cl.now_ms))
    cl.now_ms += 1000
    cl.commit(cl.c.tick(cl.now_ms))
    assert len(cl.image.partitions_assigned_to(2)) == held  # within the grace period
    cl.now_ms += 5000
    _settle(cl)
    assert cl.image.partitions_assigned_to(2) == ()


def test_racks_bound_the_balance_a_lone_racks_broker_keeps_its_replicas(controller_cluster):
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b"}
    cl = _image(controller_cluster, 5, racks, [(22, 3, 3)])
    _apply(cl, plan(cl.image))
    after = loads(cl.image)
    assert after[3].replicas == 22  # rack c has one broker: it holds a replica of each partition
    assert abs(after[1].replicas - after[4].replicas) <= 2 and abs(after[2].replicas - after[5].replicas) <= 2
    for p in cl.image.topic("t0").partitions:
        assert sorted(racks[r] for r in p.replicas) == ["a", "b", "c"]

"""Decommissioning a broker in the controller (metadata/decommission.py): refused with the
reason when a topic would have fewer brokers than its RF; otherwise the tick moves every
replica off (internal topics first, a bounded number at once), then records the broker
decommissioned and fenced; it survives a new controller; recommission undoes it."""

from __future__ import annotations

import random

import pytest

from metadata.controller import Controller
from metadata.delta import image_from_snapshot, image_to_snapshot
from metadata.reassignment import completion
from raftlog.base.errors import BrokerIdNotRegisteredError, InvalidReplicationFactorError


def _finish_moves(cl):
    """What the partition leaders would do: report the target as the committed membership."""
    for name in cl.image.topic_names():
        for p in cl.image.topic(name).partitions:
            if p.reassigning:
                cl.commit(cl.c.membership_report(name, p.partition, p.target_replicas, now_ms=cl.now_ms))


def _drain(cl, broker, rounds=50):
    for _ in range(rounds):
        cl.now_ms += 100
        cl.heartbeat_all()
        cl.commit(cl.c.tick(cl.now_ms))
        if cl.image.broker_state(broker) == "decommissioned":
            return
        _finish_moves(cl)
    raise AssertionError(f"broker {broker} still {cl.image.broker_state(broker)}")


def test_rf3_on_three_brokers_is_refused_with_the_reason(controller_cluster):
    cl = controller_cluster(brokers=3)
    cl.commit(cl.c.create_topic("t", 2, 3, now_ms=0))
    with pytest.raises(InvalidReplicationFactorError, match=r"topic t \(replication factor 3\) with 2 brokers"):
        cl.c.decommission_broker(2, now_ms=0)
    assert cl.image.broker_state(2) == "active"
    with pytest.raises(BrokerIdNotRegisteredError):
        cl.c.decommission_broker(9, now_ms=0)


def test_decommission_empties_the_broker_then_fences_it(controller_cluster):
    cl = controller_cluster(brokers=5, max_drain_moves=3)
    cl.commit(cl.c.create_topic("__consumer_offsets", 4, 3, internal=True, now_ms=0))
    cl.commit(cl.c.create_topic("t", 10, 3, now_ms=0))
    assert cl.image.partitions_assigned_to(3)
    assert cl.commit(cl.c.decommission_broker(3, now_ms=0)) == "draining"
    # the first round moves internal partitions first, at most max_drain_moves at once
    cl.commit(cl.c.tick(cl.now_ms))
    moving = [(n, p.partition) for n in cl.image.topic_names() for p in cl.image.topic(n).partitions
              if p.reassigning]
    assert 0 < len(moving) <= 3
    internal = [k for k in cl.image.partitions_assigned_to(3) if k[0] == "__consumer_offsets"]
    assert set(internal[:len(moving)]) == set(moving[:len(internal)])
    # new topics never land on a draining broker
    resp = cl.commit(cl.c.create_topic("u", 8, 3, now_ms=0))
    assert all(3 not in p.replicas for p in resp.partitions)
    _drain(cl, 3)
    assert cl.image.partitions_assigned_to(3) == ()
    assert cl.image.broker(3).fenced
    for name in cl.image.topic_names():
        for p in cl.image.topic(name).partitions:
            assert len(set(p.replicas)) == 3 and 3 not in p.replicas
    # its heartbeats no longer unfence it; recommission does
    cl.heartbeat_all()
    assert cl.image.broker(3).fenced
    assert cl.commit(cl.c.recommission_broker(3, now_ms=cl.now_ms)) == "active"
    cl.heartbeat_all()
    assert not cl.image.broker(3).fenced and cl.image.broker_state(3) == "active"


def test_a_new_controller_resumes_the_drain_from_the_image(controller_cluster):
    cl = controller_cluster(brokers=4)
    cl.commit(cl.c.create_topic("t", 6, 3, now_ms=0))
    cl.commit(cl.c.decommission_broker(4, now_ms=0))
    cl.commit(cl.c.tick(0))
    image = image_from_snapshot(image_to_snapshot(cl.image))
    assert image.broker_state(4) == "draining"
    cl.c = Controller(image, 2, cl.now_ms, random.Random(2))
    cl.commit(cl.c.noop())
    _drain(cl, 4)
    assert cl.image.partitions_assigned_to(4) == ()


def test_draining_is_idempotent_and_completion_is_the_reassignment_one(controller_cluster):
    cl = controller_cluster(brokers=4)
    cl.commit(cl.c.create_topic("t", 1, 3, now_ms=0))
    cl.commit(cl.c.decommission_broker(1, now_ms=0))
    assert cl.c.decommission_broker(1, now_ms=0).envelopes == ()
    cl.commit(cl.c.tick(0))
    p = cl.image.topic("t").partitions[0]
    assert p.removing_replicas == (1,) and p.adding_replicas == (4,)
    assert cl.c.tick(0).envelopes == ()  # no second move of a moving partition
    assert completion(cl.image, "t", 0, p.target_replicas) is not None

"""The controller's replica moves: a plan is judged per item (Kafka's errors, nothing
half-done), a move is recorded as target/adding/removing, survives a snapshot and a new
controller, completes on the leader's membership report, and can be cancelled."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from metadata.controller import Controller
from metadata.delta import image_from_snapshot, image_to_snapshot
from metadata.reassignment import ReassignmentItem as Item
from raftlog.base.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    ReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)


def _controller_harness():
    name = "test_controller_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("test_controller.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].Cluster


@pytest.fixture
def cl():
    cluster = _controller_harness()(brokers=4)
    cluster.commit(cluster.c.create_topic("t", 2, 3, now_ms=0))
    return cluster


@pytest.mark.parametrize("item,error,words", [
    (Item("t", 0, (1, 2, 9)), InvalidReplicaAssignmentError, "do not exist"),
    (Item("t", 0, (1, 1, 2)), InvalidReplicaAssignmentError, "twice"),
    (Item("t", 0, ()), InvalidReplicaAssignmentError, "factor 0"),
    (Item("nope", 0, (1, 2, 3)), UnknownTopicOrPartitionError, "nope-0"),
    (Item("t", 5, (1, 2, 3)), UnknownTopicOrPartitionError, "t-5"),
    (Item("t", 1, None), NoReassignmentInProgressError, "no reassignment"),
])
def test_bad_plans_are_refused_with_kafkas_errors(cl, item, error, words):
    before = cl.image.topic("t").partitions
    good = Item("t", 1 - item.partition if item.topic == "t" and item.partition < 2 else 0, (1, 2, 4))
    res = cl.c.alter_partition_reassignments([item, good], now_ms=0)
    assert type(res.response[0]) is error and words in str(res.response[0])
    assert res.response[1] is None  # the good item of the same request goes ahead, whole
    cl.commit(res)
    assert cl.image.topic("t").partitions[item.partition if item.topic == "t" and item.partition < 2 else 1] \
        == before[item.partition if item.topic == "t" and item.partition < 2 else 1]


def test_the_same_partition_twice_in_one_request_is_refused(cl):
    res = cl.c.alter_partition_reassignments([Item("t", 0, (1, 2, 4)), Item("t", 0, (2, 3, 4))], now_ms=0)
    assert res.response[0] is None and isinstance(res.response[1], InvalidRequestError)


def test_move_is_recorded_completes_on_report_and_survives_failover(cl):
    cur = cl.image.topic("t").partitions[0]
    leaving = cur.replicas[-1]
    target = tuple(r for r in cur.replicas if r != leaving) + (4,)
    assert cl.commit(cl.c.alter_partition_reassignments([Item("t", 0, target)], now_ms=0)) == [None]
    p = cl.image.topic("t").partitions[0]
    assert p.replicas == target + (leaving,) and p.adding_replicas == (4,)
    assert p.removing_replicas == (leaving,) and p.target_replicas == target
    [status] = cl.c.list_partition_reassignments()
    assert (status.topic, status.partition, status.adding_replicas) == ("t", 0, (4,))
    # A second move of a moving partition is refused; the first is untouched.
    res = cl.c.alter_partition_reassignments([Item("t", 0, cur.replicas)], now_ms=0)
    assert isinstance(res.response[0], ReassignmentInProgressError) and not res.envelopes
    # A new controller (failover) from the snapshot still knows the move.
    image = image_from_snapshot(image_to_snapshot(cl.image))
    assert image == cl.image
    c2 = Controller(image, 2, 0, random.Random(1))
    assert c2.list_partition_reassignments() == [status]
    # Not done while the group's membership is not the target; done when it is.
    assert cl.c.membership_report("t", 0, cur.replicas, (4,), now_ms=0).response is False
    assert cl.commit(cl.c.membership_report("t", 0, target, (), now_ms=0)) is True
    p = cl.image.topic("t").partitions[0]
    assert p.replicas == target and not p.reassigning and cl.c.list_partition_reassignments() == []


def test_cancel_goes_back_to_the_original_replicas(cl):
    cur = cl.image.topic("t").partitions[1]
    new = next(b for b in (1, 2, 3, 4) if b not in cur.replicas)
    cl.commit(cl.c.alter_partition_reassignments([Item("t", 1, (new,) + cur.replicas[1:])], now_ms=0))
    assert cl.image.topic("t").partitions[1].reassigning
    assert cl.commit(cl.c.alter_partition_reassignments([Item("t", 1, None)], now_ms=0)) == [None]
    p = cl.image.topic("t").partitions[1]
    assert set(p.replicas) == set(cur.replicas) and not p.reassigning
    # Same replicas in another order: nothing to move.
    res = cl.c.alter_partition_reassignments([Item("t", 1, tuple(reversed(cur.replicas)))], now_ms=0)
    assert res.response == [None] and res.envelopes == ()

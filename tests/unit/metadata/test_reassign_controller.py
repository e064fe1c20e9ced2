"""The controller's replica moves: a plan is judged per item (Kafka's errors, nothing
half-done), a move is recorded as target/adding/removing, survives a snapshot and a new
controller, completes on the leader's membership report, and can be cancelled."""

from __future__ import annotations

import random

import pytest

from metadata.controller import Controller
from metadata.delta import image_from_snapshot, image_to_snapshot
from metadata.reassignment import ReassignmentItem as Item
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    ReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from raftlog.base.topics import busy_row


@pytest.fixture
def cl(controller_cluster):
    cluster = controller_cluster(brokers=4)
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


@pytest.mark.parametrize("error", [
    CoordinatorLoadInProgressError("the group coordinator is loading t-0"),
    ConcurrentTransactionsError("transaction 'tx' of t-0 has its markers in flight"),
])
def test_a_partition_whose_coordinator_is_busy_is_not_moved_until_it_is_idle(cl, error):
    """Its leader's heartbeat says the partition's coordinator is busy: a move (and the
    balancer's) is refused with that error and the reason, nothing recorded, the other items
    go ahead; a report from a broker that does not lead it, or older than a session timeout,
    does not count; once the leader reports it idle the same move goes through."""
    p0 = cl.image.topic("t").partitions[0]
    leader = p0.leader
    target = tuple(r for r in p0.replicas if r != p0.replicas[-1]) + (4,)
    other = next(b for b in p0.replicas if b != leader)
    cl.c.record_busy_partitions(other, [busy_row("t", 0, error), "junk", {"topic": 1}], now_ms=0)
    assert cl.c.busy_partitions(0) == {}  # not its leader: not counted (junk ignored)
    cl.c.record_busy_partitions(leader, [busy_row("t", 0, error)], now_ms=0)
    [busy] = cl.c.busy_partitions(0).values()
    assert type(busy) is type(error)
    p1 = cl.image.topic("t").partitions[1]
    other_target = tuple(r for r in p1.replicas if r != p1.replicas[-1]) + (4,)
    res = cl.c.alter_partition_reassignments([Item("t", 0, target), Item("t", 1, other_target)], now_ms=0)
    refused = res.response[0]
    assert type(refused) is type(error) and refused.code == error.code
    assert "t-0 is not moved while its coordinator is busy" in refused.message and error.message in refused.message
    assert res.response[1] is None
    cl.commit(res)
    assert cl.image.topic("t").partitions[0] == p0  # nothing half-done
    assert cl.c.busy_partitions(cl.c.session_timeout_ms + 1) == {}  # a stale report lapses
    cl.c.record_busy_partitions(leader, [], now_ms=0)  # idle again
    assert cl.commit(cl.c.alter_partition_reassignments([Item("t", 0, target)], now_ms=0)) == [None]
    assert cl.image.topic("t").partitions[0].target_replicas == target

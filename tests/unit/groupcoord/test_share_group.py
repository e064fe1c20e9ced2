"""Share-group membership (KIP-932): join/heartbeat/leave epochs, the simple assignor (every member every partition), fencing, session expiry, another protocol's group id refused."""

import random

import pytest

from groupcoord.share_group import LEAVE_EPOCH, ShareGroupConfig, ShareGroups
from raftlog.base.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)

pytestmark = pytest.mark.unit

TOPICS = {"orders": 3, "other": 2}


def groups():
    return ShareGroups(ShareGroupConfig(session_timeout_ms=1000, heartbeat_interval_ms=100), random.Random(7))


def join(g, member_id="", now_ms=0, topics=("orders",)):
    return g.heartbeat(group_id="q", member_id=member_id, member_epoch=0, now_ms=now_ms, topics=TOPICS,
                       subscribed_topic_names=list(topics))


def test_every_member_gets_every_partition_and_follows_the_group_epoch():
    g = groups()
    a = join(g, "a")
    assert a.member_epoch == 1 and a.assignment == [{"topic": "orders", "partitions": [0, 1, 2]}]
    b = join(g, now_ms=1)
    assert b.member_id and b.member_id != "a" and b.member_epoch == 2
    # a is behind: its next heartbeat takes the new epoch (same assignment, sent again).
    a2 = g.heartbeat(group_id="q", member_id="a", member_epoch=1, now_ms=2, topics=TOPICS)
    assert a2.member_epoch == 2 and a2.assignment == [{"topic": "orders", "partitions": [0, 1, 2]}]
    a3 = g.heartbeat(group_id="q", member_id="a", member_epoch=2, now_ms=3, topics=TOPICS)
    assert a3.member_epoch == 2 and a3.assignment is None
    assert g.may_fetch("q", "a", "orders", 2) and g.may_fetch("q", b.member_id, "orders", 0)
    assert not g.may_fetch("q", "a", "other", 0) and not g.may_fetch("q", "a", "orders", 3)


def test_subscription_and_partition_count_changes_move_the_epoch():
    g = groups()
    join(g, "a")
    r = g.heartbeat(group_id="q", member_id="a", member_epoch=1, now_ms=1, topics=TOPICS,
                    subscribed_topic_names=["orders", "other"])
    assert r.member_epoch == 2 and {x["topic"] for x in r.assignment} == {"orders", "other"}
    grown = {**TOPICS, "orders": 5}
    r = g.heartbeat(group_id="q", member_id="a", member_epoch=2, now_ms=2, topics=grown)
    assert r.member_epoch == 3 and r.assignment[0] == {"topic": "orders", "partitions": [0, 1, 2, 3, 4]}


def test_bad_heartbeats_are_refused_and_change_nothing():
    g = groups()
    join(g, "a")
    with pytest.raises(FencedMemberEpochError):
        g.heartbeat(group_id="q", member_id="a", member_epoch=7, now_ms=1, topics=TOPICS)
    with pytest.raises(UnknownMemberIdError):
        g.heartbeat(group_id="q", member_id="zz", member_epoch=1, now_ms=1, topics=TOPICS)
    with pytest.raises(GroupIdNotFoundError):
        g.heartbeat(group_id="q2", member_id="", member_epoch=0, now_ms=1, topics=TOPICS,
                    subscribed_topic_names=["orders"], other_protocol=True)
    with pytest.raises(InvalidRequestError):
        join(g, "b", topics=())
    with pytest.raises(InvalidGroupIdError):
        g.heartbeat(group_id="", member_id="", member_epoch=0, now_ms=1, topics=TOPICS, subscribed_topic_names=["x"])
    assert "q2" not in g.groups and g.groups["q"].group_epoch == 1 and list(g.groups["q"].members) == ["a"]


def test_leave_expire_and_delete():
    g = groups()
    join(g, "a")
    join(g, "b", now_ms=500)
    left = g.heartbeat(group_id="q", member_id="b", member_epoch=LEAVE_EPOCH, now_ms=600, topics=TOPICS)
    assert left.member_epoch == LEAVE_EPOCH and left.removed == (("q", "b"),)
    with pytest.raises(NonEmptyGroupError):
        g.delete("q")
    assert g.next_deadline_ms() == 1000
    assert g.expire(999, TOPICS) == []
    assert g.expire(1000, TOPICS) == [("q", "a")]
    assert g.describe(["q"])[0]["state"] == "Empty"
    assert g.describe(["nope"])[0]["error"]["code"] == "GROUP_ID_NOT_FOUND"
    g.delete("q")
    assert g.list() == []


def test_a_new_coordinator_restores_the_group_and_its_members_keep_heartbeating():
    from groupcoord.share_state import decode_members, encode_members

    old = groups()
    a = join(old, now_ms=0)
    b = join(old, now_ms=0, topics=("orders", "other"))
    a = old.heartbeat(group_id="q", member_id=a.member_id, member_epoch=a.member_epoch, now_ms=10, topics=TOPICS)
    snapshot = decode_members(encode_members(old.snapshot("q")))  # through the record, as a failover reads it
    new = groups()
    new.restore("q", snapshot, now_ms=5000, topics=TOPICS)
    assert new.snapshot("q") == old.snapshot("q")
    assert new.may_fetch("q", b.member_id, "other", 1) and not new.may_fetch("q", a.member_id, "other", 0)
    beat = new.heartbeat(group_id="q", member_id=a.member_id, member_epoch=a.member_epoch, now_ms=5100, topics=TOPICS)
    assert (beat.member_epoch, beat.assignment) == (a.member_epoch, None), "nothing changed: no new assignment"
    with pytest.raises(FencedMemberEpochError):
        new.heartbeat(group_id="q", member_id=b.member_id, member_epoch=b.member_epoch - 1, now_ms=5100, topics=TOPICS)
    assert new.expire(5900, TOPICS) == [], "restored sessions start at the restore"
    assert groups().snapshot("q") is None


def test_a_groups_own_session_timeout_and_heartbeat_interval_apply_at_the_next_use():
    g = groups()
    own: dict[str, ShareGroupConfig] = {}
    g.config_of = lambda group_id: own.get(group_id, g.config)
    assert join(g, "a").heartbeat_interval_ms == 100
    own["q"] = ShareGroupConfig(session_timeout_ms=5000, heartbeat_interval_ms=2000)  # a group config set
    beat = g.heartbeat(group_id="q", member_id="a", member_epoch=1, now_ms=10, topics=TOPICS)
    assert beat.heartbeat_interval_ms == 2000
    assert g.expire(1500, TOPICS) == [] and g.next_deadline_ms() == 5010  # the broker's 1000 ms would drop it
    assert g.expire(5010, TOPICS) == [("q", "a")]

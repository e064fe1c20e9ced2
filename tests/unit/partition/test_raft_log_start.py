"""partition/raft.py additions for the shell: start_election now, and a follower below the leader's log start restarts at it."""

from __future__ import annotations

import random

import pytest

from partition.raft import (
    FetchRequest,
    FetchResponse,
    HighWatermarkChanged,
    LogState,
    PersistQuorumState,
    QuorumState,
    RaftCore,
    RaftStateError,
    Role,
    Send,
    TruncateFully,
    VoteRequest,
    VoteResponse,
)


def _settle(core, effects):
    """Confirm every quorum-state write at once; return the effects released."""
    out = []
    while effects:
        eff = effects.pop(0)
        out.append(eff)
        if type(eff) is PersistQuorumState:
            effects += core.quorum_state_persisted(eff.version)
    return out


def _elect(core):
    effects = _settle(core, core.start_election())
    for _ in range(2):  # pre-vote round, then the real vote
        reqs = [e for e in effects if type(e) is Send and type(e.message) is VoteRequest]
        assert reqs, effects
        v = reqs[0].message
        their_epoch = core.epoch if v.pre_vote else v.epoch  # a pre-vote changes no epoch
        effects = _settle(core, core.handle(VoteResponse(reqs[0].to, their_epoch, True, v.pre_vote, None)))
    assert core.role is Role.LEADER
    core.flushed(core.log_end_offset)
    return effects


def test_start_election_runs_at_once_and_is_a_no_op_for_a_follower():
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1))
    effects = core.start_election()
    votes = [e.message for e in effects if type(e) is Send]
    assert {type(m) for m in votes} == {VoteRequest} and all(m.pre_vote for m in votes)
    follower = RaftCore(2, [1, 2, 3], rng=random.Random(2), quorum_state=QuorumState(3, None, 1))
    assert follower.start_election() == [] and follower.role is Role.FOLLOWER


def test_follower_below_the_leaders_log_start_truncates_fully_and_refetches_from_there():
    leader = RaftCore(1, [1, 2, 3], rng=random.Random(1),
                      log_state=LogState(0, 10, 10, ((1, 0),)), quorum_state=QuorumState(1))
    _elect(leader)
    epoch = leader.epoch
    assert leader.log_start_advanced(8) == []
    with pytest.raises(RaftStateError):
        leader.log_start_advanced(99)  # past the log end: a shell bug
    follower = RaftCore(2, [1, 2, 3], rng=random.Random(2), quorum_state=QuorumState(epoch, None, 1),
                        log_state=LogState(0, 5, 5, ((1, 0),)), high_watermark=3)
    fetch = [e.message for e in follower.tick() if type(e) is Send][0]
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (5, 1)
    [resp] = [e.message for e in leader.handle(fetch) if type(e) is Send]
    assert (resp.error, resp.log_start_offset) == ("OFFSET_OUT_OF_RANGE", 8)
    effects = follower.handle(resp)
    assert effects[0] == TruncateFully(8)
    assert HighWatermarkChanged(8) in effects
    refetch = [e.message for e in effects if type(e) is Send][0]
    assert (refetch.fetch_offset, refetch.last_fetched_epoch) == (8, 0)
    assert (follower.log_end_offset, follower.high_watermark, follower.flushed_offset) == (8, 8, 8)
    # An empty log at exactly the leader's log start is consistent: data comes back.
    [data] = [e.message for e in leader.handle(refetch) if type(e) is Send]
    assert type(data) is FetchResponse and data.error is None and data.read_offset == 8
    assert data.diverging_epoch is None


def test_a_fetch_at_or_above_the_log_start_is_served_as_before():
    leader = RaftCore(1, [1, 2, 3], rng=random.Random(1),
                      log_state=LogState(0, 10, 10, ((1, 0),)), quorum_state=QuorumState(1))
    _elect(leader)
    leader.log_start_advanced(4)
    req = FetchRequest(2, leader.epoch, 6, 1, 6, 1)
    [resp] = [e.message for e in leader.handle(req) if type(e) is Send]
    assert resp.error is None and resp.read_offset == 6


def test_a_follower_with_a_slow_fsync_keeps_fetching_so_nobody_blames_the_leader():
    from partition.raft import Flush, RaftConfig

    cfg = RaftConfig(election_timeout_ticks=10, fetch_max_wait_ticks=2,
                     fetch_request_timeout_ticks=4, check_quorum_ticks=15)
    follower = RaftCore(2, [1, 2, 3], rng=random.Random(2), quorum_state=QuorumState(1, None, 1),
                        config=cfg)
    [fetch] = [e.message for e in follower.tick() if type(e) is Send]
    data = FetchResponse(1, 1, 1, fetch.fetch_id, None, 0, 0, None, -1, 0)
    effects = follower.handle(data.with_records(b"x", ((0, 0, 1),)))
    assert Flush() in effects and not [e for e in effects if type(e) is Send]
    sent = []
    for _ in range(cfg.fetch_request_timeout_ticks):  # the flush never completes
        sent += [e.message for e in follower.tick() if type(e) is Send]
    [keepalive] = sent
    assert (keepalive.fetch_offset, keepalive.flushed_offset) == (1, 0)  # durable: nothing yet
    reply = FetchResponse(1, 1, 1, keepalive.fetch_id, None, 0, 1)
    follower.handle(reply)
    for _ in range(3 * cfg.election_timeout_ticks):  # answered fetches: no election
        for e in follower.tick():
            if type(e) is Send and type(e.message) is FetchRequest:
                follower.handle(FetchResponse(1, 1, 1, e.message.fetch_id, None, 0, 1))
    assert follower.role is Role.FOLLOWER and follower.leader_id == 1


def test_a_prospective_sent_back_to_a_leader_it_never_heard_holds_no_lease_for_it():
    from partition.raft import RaftConfig

    cfg = RaftConfig(election_timeout_ticks=10, fetch_max_wait_ticks=2,
                     fetch_request_timeout_ticks=4, check_quorum_ticks=15)
    core = RaftCore(2, [1, 2, 3], rng=random.Random(5), quorum_state=QuorumState(1, None, 1),
                    config=cfg)
    for _ in range(2 * cfg.election_timeout_ticks):
        core.tick()
        if core.role is Role.PROSPECTIVE:
            break
    assert core.role is Role.PROSPECTIVE  # leader 1 is silent
    core.handle(VoteResponse(3, 1, False, True, 1))  # 3 still believes in leader 1
    assert core.role is Role.FOLLOWER and core.leader_id == 1
    [grant] = [e.message for e in core.handle(VoteRequest(3, 2, 0, 0, True)) if type(e) is Send]
    assert grant.granted  # no lease: we never heard from leader 1 ourselves
    for _ in range(cfg.election_timeout_ticks):
        core.tick()
    assert core.role is Role.PROSPECTIVE  # ran again within one timeout, not a full one

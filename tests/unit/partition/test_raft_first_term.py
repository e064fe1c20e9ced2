"""partition/raft.py "First term": a new partition's record names its first leader; the group
starts led by it in epoch 1 without an election, and only a fresh core takes the record."""

from __future__ import annotations

import random

from partition.raft import (
    FIRST_EPOCH,
    BeginQuorumEpoch,
    FetchHeld,
    FetchRequest,
    LeadershipChanged,
    LogState,
    PersistQuorumState,
    QuorumState,
    RaftConfig,
    RaftCore,
    Role,
    Send,
    VoteRequest,
)

CFG = RaftConfig(election_timeout_ticks=10, fetch_max_wait_ticks=2, fetch_request_timeout_ticks=4,
                 check_quorum_ticks=15, transfer_timeout_ticks=10, begin_quorum_resend_ticks=3)


def _core(replica_id, **kw):
    return RaftCore(replica_id, (1, 2, 3), rng=random.Random(replica_id), config=CFG, **kw)


def _persisted(core, effects):
    """Confirm the PersistQuorumState in `effects`; returns it and what it released."""
    persists = [e for e in effects if type(e) is PersistQuorumState]
    assert len(persists) == 1 and effects[0] is persists[0]  # nothing goes before it
    return persists[0], core.quorum_state_persisted(persists[0].version)


def test_named_leader_leads_epoch_one_after_persisting_its_vote_with_no_election():
    core = _core(1)
    effects = core.begin_first_term(1, 0)
    persist, released = _persisted(core, effects)
    assert (persist.state.epoch, persist.state.voted_for, persist.state.leader_id) == (FIRST_EPOCH, 1, 1)
    assert core.role is Role.LEADER and core.epoch == FIRST_EPOCH and core.elections_started == 0
    assert core.may_accept_writes
    assert LeadershipChanged(FIRST_EPOCH, 1) in released
    # No vote round, and no BeginQuorumEpoch: the followers know their leader from the record.
    assert not [e for e in effects + released if type(e) is Send
                and type(e.message) in (VoteRequest, BeginQuorumEpoch)]


def test_named_follower_follows_and_its_first_fetch_is_held_at_once():
    leader, follower = _core(1), _core(2)
    _persisted(leader, leader.begin_first_term(1, 0))
    persist, released = _persisted(follower, follower.begin_first_term(1, 0))
    assert (persist.state.epoch, persist.state.voted_for, persist.state.leader_id) == (FIRST_EPOCH, None, 1)
    assert follower.role is Role.FOLLOWER and follower.leader_id == 1
    fetches = [e.message for e in released if type(e) is Send and type(e.message) is FetchRequest]
    assert len(fetches) == 1 and fetches[0].quiescent and fetches[0].epoch == FIRST_EPOCH
    answer = leader.handle(fetches[0])
    held = [e.message for e in answer if type(e) is Send and type(e.message) is FetchHeld]
    assert len(held) == 1 and held[0].fetch_id == fetches[0].fetch_id
    follower.handle(held[0])
    assert follower.quiescent and follower.tick() == []


def test_a_later_record_epoch_is_followed_and_never_led_again():
    follower = _core(2)
    _persisted(follower, follower.begin_first_term(3, 5))
    assert (follower.role, follower.epoch, follower.leader_id) == (Role.FOLLOWER, 5, 3)
    # The recorded leader opened fresh (it lost its directory): it adopts the epoch only.
    former = _core(3)
    _persisted(former, former.begin_first_term(3, 5))
    assert (former.role, former.epoch, former.leader_id) == (Role.UNATTACHED, 5, None)


def test_only_a_fresh_core_takes_the_record():
    with_log = _core(1, log_state=LogState(0, 1, 1, ((1, 0),)))
    voted = _core(1, quorum_state=QuorumState(0, 2, None))
    later = _core(1, quorum_state=QuorumState(4, None, None))
    for core in (with_log, voted, later):
        assert core.begin_first_term(1, 0) == [] and core.role is not Role.LEADER
    unnamed = _core(1)
    assert unnamed.begin_first_term(-1, 0) == [] and unnamed.epoch == 0
    learner = RaftCore(4, (1, 2, 3), learners=(4,), rng=random.Random(4), config=CFG)
    assert learner.begin_first_term(4, 0) == [] and learner.role is Role.UNATTACHED


def test_a_vote_request_for_the_first_epoch_is_refused_by_a_named_follower():
    follower = _core(2)
    _persisted(follower, follower.begin_first_term(1, 0))
    effects = follower.handle(VoteRequest(3, FIRST_EPOCH, 0, 0, False, False))
    grants = [e.message for e in effects if type(e) is Send and getattr(e.message, "granted", False)]
    assert grants == []

"""The Raft core's membership changes: the single-server rule's refusals, learners that never
vote, quorums over the membership in force, a removed leader stepping down, persistence."""

from __future__ import annotations

import random

import cbor2
import pytest

from partition.batch import CONTROL_LEADER_CHANGE, BatchBuilder, control_batch, iter_headers
from partition.errors import CorruptRecordError
from partition.log import Log, LogConfig
from partition.membership import CONTROL_MEMBERSHIP, membership_batch, memberships_in, scan_log
from partition.raft import (
    AppendMembership,
    BeginQuorumEpoch,
    FetchRequest,
    FetchResponse,
    Flush,
    LogState,
    Membership,
    PersistQuorumState,
    QuorumState,
    RaftConfig,
    RaftCore,
    Role,
    Send,
    TimeoutNow,
)
from partition.quorum_state import read_quorum_state, write_quorum_state
from partition.replication import decode_fetch_response, encode_fetch_response
from raftlog.base.errors import InvalidReplicaAssignmentError, NotLeaderError, ReassignmentInProgressError

CFG = RaftConfig(require_flush=False)


def _leader(voters=(1,), learners=()) -> RaftCore:
    """Replica 1 leading epoch 1 with an empty log (no control batch: its epoch is open)."""
    core = RaftCore(1, voters, learners=learners, rng=random.Random(1), config=CFG)
    effects = core.start_election()
    for version in range(1, 4):  # the candidate's vote, then the leader's state
        effects += core.quorum_state_persisted(version)
    assert core.role is Role.LEADER and core.epoch == 1 and core.may_accept_writes, effects
    return core


def _confirm(core: RaftCore, effects: list) -> list:
    """Confirm every PersistQuorumState among `effects` (and those it releases) durable."""
    out = list(effects)
    for eff in out:
        if type(eff) is PersistQuorumState:
            out += core.quorum_state_persisted(eff.version)
    return out


def _fetch(core: RaftCore, sender: int, offset: int, epoch: int = 1) -> list:
    return _confirm(core, core.handle(
        FetchRequest(sender, core.epoch, offset, epoch if offset else 0, offset, 7)))


def _change(core: RaftCore, membership: Membership) -> list:
    return _confirm(core, core.change_membership(membership))


def test_membership_refuses_bad_shapes():
    with pytest.raises(InvalidReplicaAssignmentError):
        Membership((), ())
    with pytest.raises(InvalidReplicaAssignmentError):
        Membership((1, 2), (2,))
    with pytest.raises(InvalidReplicaAssignmentError):
        Membership((2, 1))
    assert Membership.of([3, 1, 1], [4]) == Membership((1, 3), (4,))


def test_single_server_rule():
    core = _leader()
    assert core.membership == Membership((1,))
    # A new voter must first be a learner that caught up.
    with pytest.raises(InvalidReplicaAssignmentError, match="learner"):
        core.change_membership(Membership((1, 2)))
    with pytest.raises(InvalidReplicaAssignmentError, match="more than one"):
        core.change_membership(Membership((1, 2, 3)))
    effects = _change(core, Membership((1,), (2,)))
    assert AppendMembership(1, 0, Membership((1,), (2,))) in effects
    assert core.membership == Membership((1,), (2,))
    # A learner does not count: the single voter commits the entry on its own.
    assert core.high_watermark == 1 and not core.membership_change_pending
    assert core.quorum_state.membership == Membership((1,), (2,))
    assert core.quorum_state.membership_offset == 0
    # The learner is behind until it fetches the whole log.
    with pytest.raises(InvalidReplicaAssignmentError, match="behind"):
        core.change_membership(Membership((1, 2)))
    _fetch(core, 2, 1)
    _change(core, Membership((1, 2)))
    assert core.voters == (1, 2) and core.membership_change_pending
    # One change in flight: the next waits until this one commits (needs 2's fetch now).
    with pytest.raises(ReassignmentInProgressError):
        core.change_membership(Membership((1, 2), (3,)))
    assert core.high_watermark == 1
    core.leader_appended(2, 2)
    assert core.high_watermark == 1  # replica 2 now votes: one of two is not a majority
    _fetch(core, 2, 3)
    assert core.high_watermark == 3 and not core.membership_change_pending


def test_learner_never_runs_and_followers_refuse_changes():
    learner = RaftCore(3, (1, 2), learners=(3,), rng=random.Random(2), config=CFG)
    for _ in range(10 * CFG.election_timeout_ticks):
        assert not learner.tick()
        assert not learner.runs_on_next_tick()
    assert learner.start_election() == [] and learner.role is Role.UNATTACHED
    with pytest.raises(NotLeaderError):
        learner.change_membership(Membership((1, 2, 3)))


def test_removed_leader_hands_over_and_resigns_once_committed():
    core = _leader()
    _change(core, Membership((1,), (2,)))
    _fetch(core, 2, 1)
    _change(core, Membership((1, 2)))
    _fetch(core, 2, 2)
    assert core.voters == (1, 2) and not core.membership_change_pending
    _change(core, Membership((2,)))  # remove ourselves: counted among {2} only
    assert core.role is Role.LEADER and core.high_watermark == 2
    _fetch(core, 2, 3)
    assert core.high_watermark == 3
    effects = core.tick()
    assert Send(2, TimeoutNow(1, 1)) in effects and core.role is Role.RESIGNED
    for _ in range(10 * CFG.election_timeout_ticks):
        assert not core.runs_on_next_tick()
        core.tick()


def test_restart_keeps_memberships_from_log_and_quorum_state(tmp_path):
    state = QuorumState(4, 1, 1, False, Membership((1, 2), (5,)), 10, 12)
    write_quorum_state(tmp_path, state)
    assert read_quorum_state(tmp_path) == state
    # The constructor's voters yield to the persisted membership, a later log entry to both.
    core = RaftCore(5, (1, 2, 3), rng=random.Random(3), quorum_state=state, config=CFG,
                    log_state=LogState(0, 20, 20, ((4, 0),), ((12, Membership((1, 2, 5))),)))
    assert core.membership == Membership((1, 2, 5)) and core.committed_membership == state.membership
    core = RaftCore(5, (1, 2, 3), rng=random.Random(3), quorum_state=state, config=CFG,
                    log_state=LogState(0, 20, 20, ((4, 0),), ((8, Membership((1, 2, 3))),)))
    assert core.membership == state.membership  # an entry below the folded one is older


# ------------------------------------------------------------------ membership batches


def _client_batch(n: int) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(b"v%d" % i, key=b"k", timestamp_ms=i)
    return b.build()


def test_membership_batches_round_trip_through_log_fetch_and_recovery(tmp_path):
    log = Log.open(tmp_path / "p0", LogConfig(segment_bytes=1500, retention_ms=-1), now_ms=0)
    try:
        log.append(_client_batch(3), leader_epoch=1, now_ms=0)
        first = Membership((1, 2), (4,))
        second = Membership((1, 2, 4))
        assert log.append(membership_batch(first, timestamp_ms=0, partition_leader_epoch=1),
                          leader_epoch=1, now_ms=0) == (3, 3)
        log.append(control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=0, partition_leader_epoch=2),
                   leader_epoch=2, now_ms=0)  # another control batch: not a membership
        for _ in range(20):  # several segments and reads
            log.append(_client_batch(5), leader_epoch=2, now_ms=0)
        at = log.log_end_offset
        log.append(membership_batch(second, timestamp_ms=0, partition_leader_epoch=2),
                   leader_epoch=2, now_ms=0)
        log.append(_client_batch(2), leader_epoch=2, now_ms=0)
        assert scan_log(log, -1) == ()
        assert scan_log(log, 0) == ((3, first), (at, second))
        assert scan_log(log, 4) == ((at, second),)
        # A follower's shell finds them in the fetched bytes (replication.decode_fetch_response).
        data = log.read(0, 1 << 20)
        d = encode_fetch_response("t", 0, FetchResponse(1, 1, 1, 7, None, 0, 0, None, -1, 0, data))
        _, _, m = decode_fetch_response(d, 1, "test")
        assert m.memberships == ((3, first),) and m.batches[0] == (0, 2, 1)
    finally:
        log.close()


def test_a_forged_membership_batch_is_corrupt():
    bad = control_batch(CONTROL_MEMBERSHIP, timestamp_ms=0, partition_leader_epoch=1,
                        value=cbor2.dumps({"voters": [2, 2, "x"], "learners": []}))
    headers = list(iter_headers(bad))
    with pytest.raises(CorruptRecordError):
        memberships_in(bad, headers)


def test_a_learner_fetch_held_back_by_the_throttle_times_out_from_when_it_left():
    """partition/throttle.py holds a learner's fetch; `fetch_left` restarts its timeout (an
    election timeout for a learner), so the core does not ask again for an answer that is on
    its way (issue 44)."""
    learner = RaftCore(3, (1, 2), learners=(3,), rng=random.Random(2), config=CFG)
    effects = _confirm(learner, learner.handle(BeginQuorumEpoch(1, 1)))
    [first] = [e.message for e in effects if type(e) is Send and type(e.message) is FetchRequest]
    timeout = max(CFG.fetch_request_timeout_ticks, CFG.election_timeout_ticks)  # a learner's
    for _ in range(timeout - 1):
        assert not [e for e in learner.tick() if type(e) is Send]
    learner.fetch_left(first.fetch_id - 1)  # an older fetch: no effect
    learner.fetch_left(first.fetch_id)  # held until now: the timeout starts again
    for _ in range(timeout - 1):
        assert not [e for e in learner.tick() if type(e) is Send]
    [again] = [e.message for e in learner.tick() if type(e) is Send and type(e.message) is FetchRequest]
    assert again.fetch_id == first.fetch_id + 1 and again.fetch_offset == first.fetch_offset


@pytest.mark.parametrize("learner", [True, False])
def test_a_learner_fetches_on_while_its_flush_runs_a_voter_waits(learner):
    """With require_flush, a voter's next fetch waits for its flush (it reports what is
    durable, which counts toward commits); a learner counts toward none: its next fetch
    leaves with the flush (issue 44), reporting what was durable, and the one after the
    flush reports the rest."""
    cfg = RaftConfig(require_flush=True)
    core = RaftCore(3, (1, 2) if learner else (1, 2, 3), learners=(3,) if learner else (),
                    rng=random.Random(2), config=cfg)
    effects = _confirm(core, core.handle(BeginQuorumEpoch(1, 1)))
    [fetch] = [e.message for e in effects if type(e) is Send and type(e.message) is FetchRequest]
    answer = FetchResponse(1, 1, 1, fetch.fetch_id, None, 0, 0, None, -1, 0).with_records(b"x", ((0, 9, 1),))
    effects = core.handle(answer)
    sent = [e.message for e in effects if type(e) is Send and type(e.message) is FetchRequest]
    assert any(type(e) is Flush for e in effects)
    if learner:
        assert [(m.fetch_offset, m.flushed_offset) for m in sent] == [(10, 0)]
    else:
        assert sent == []
    sent = [e.message for e in core.flushed(10) if type(e) is Send and type(e.message) is FetchRequest]
    assert [(m.fetch_offset, m.flushed_offset) for m in sent] == ([] if learner else [(10, 10)])

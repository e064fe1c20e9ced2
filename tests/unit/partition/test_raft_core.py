"""partition/raft.py keeps the Raft rules: votes, pre-vote, divergence, HW, transfer, persist."""

from __future__ import annotations

import random

import pytest

from partition.raft import (
    LEADER_ALIVE_GRACE_TIMEOUTS,
    AdvanceLogStart,
    AppendControl,
    AppendReplicated,
    BeginQuorumEpoch,
    FetchHeld,
    FetchRequest,
    FetchResponse,
    Flush,
    HighWatermarkChanged,
    LeadershipChanged,
    LogState,
    LowWatermarkChanged,
    NotLeaderError,
    PersistQuorumState,
    QuorumState,
    RaftConfig,
    RaftCore,
    RaftStateError,
    Role,
    Send,
    TimeoutNow,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)

CFG = RaftConfig(
    election_timeout_ticks=10,
    fetch_max_wait_ticks=2,
    fetch_request_timeout_ticks=4,
    check_quorum_ticks=15,
    transfer_timeout_ticks=10,
    begin_quorum_resend_ticks=3,
)


class Harness:
    """A tiny in-memory shell: logs as lists of epochs, a lossless network with cuts,
    fsyncs that complete at once (or on demand when `auto_persist` is off). It watches the
    links between nodes as the replica manager does (raft.py contract 11): a cut wakes the
    quiescent followers across it at once, and after an election timeout of silence the
    nodes on either side hear `leader_unreachable` / `follower_silent` about each other."""

    def __init__(self, n, *, seed=0, states=None, max_read=64, config=CFG):
        self.voters = tuple(range(1, n + 1))
        self.logs = {i: [] for i in self.voters}
        self.flushed = {i: 0 for i in self.voters}
        self.cores = {}
        for i in self.voters:
            qs, epochs_per_offset = (states or {}).get(i, (QuorumState(), []))
            self.logs[i] = list(epochs_per_offset)
            self.flushed[i] = len(epochs_per_offset)
            self.cores[i] = RaftCore(
                i, self.voters, rng=random.Random(seed * 31 + i), quorum_state=qs,
                log_state=LogState(0, len(epochs_per_offset), len(epochs_per_offset),
                                   _cache(epochs_per_offset)),
                config=config,
            )  # fmt: skip
        self.inbox = []
        self.cut = set()
        self.hold = None  # predicate(src, dst, msg): keep such messages queued
        self.auto_persist = True
        self.max_read = max_read
        self.effects = {i: [] for i in self.voters}
        self.hw_seen = {i: [] for i in self.voters}
        self.log_start = {i: 0 for i in self.voters}
        self.low_wm_seen = {i: [] for i in self.voters}
        self.silent_ticks = {}  # (node, other) -> ticks the link between them has been cut

    def apply(self, i, effects):
        log = self.logs[i]
        for eff in effects:
            self.effects[i].append(eff)
            kind = type(eff)
            if kind is Send:
                msg = eff.message
                if type(msg) is FetchResponse and msg.read_offset is not None:
                    lo = msg.read_offset
                    hi = min(len(log), lo + self.max_read)
                    batches = tuple((o, o, log[o]) for o in range(lo, hi))
                    msg = msg.with_records(tuple(log[lo:hi]), batches)
                self.inbox.append((i, eff.to, msg))
            elif kind is PersistQuorumState:
                if self.auto_persist:
                    self.apply(i, self.cores[i].quorum_state_persisted(eff.version))
            elif kind is AppendControl:
                assert eff.offset == len(log)
                log.append(eff.epoch)
            elif kind is AppendReplicated:
                assert eff.base_offset == len(log)
                log.extend(eff.records)
                assert eff.end_offset == len(log)
            elif kind is TruncateTo:
                del log[eff.offset:]
                self.flushed[i] = min(self.flushed[i], eff.offset)
            elif kind is Flush:
                self.flushed[i] = len(log)
                self.apply(i, self.cores[i].flushed(len(log)))
            elif kind is HighWatermarkChanged:
                self.hw_seen[i].append(eff.high_watermark)
            elif kind is AdvanceLogStart:
                assert self.log_start[i] < eff.offset <= len(log)
                assert eff.offset <= self.cores[i].high_watermark  # committed records only
                self.log_start[i] = eff.offset
            elif kind is LowWatermarkChanged:
                self.low_wm_seen[i].append(eff.low_watermark)

    def write(self, i, count=1):
        core = self.cores[i]
        assert core.may_accept_writes
        first = len(self.logs[i])
        self.logs[i].extend([core.epoch] * count)
        self.apply(i, core.leader_appended(first, first + count - 1))

    def deliver(self, max_messages=10_000):
        """Deliver queued messages (and those they cause) until none is left."""
        for _ in range(max_messages):
            if not self.inbox:
                return
            idx = 0
            if self.hold is not None:
                idx = next((k for k, m in enumerate(self.inbox) if not self.hold(*m)), None)
                if idx is None:
                    return
            src, dst, msg = self.inbox.pop(idx)
            if src in self.cut or dst in self.cut:
                continue
            self.apply(dst, self.cores[dst].handle(msg))
        raise AssertionError("message storm")

    def tick(self, ticks=1, nodes=None):
        for _ in range(ticks):
            for i in nodes or self.voters:
                self.apply(i, self.cores[i].tick())
                self.watch_links(i)
            self.deliver()

    def watch_links(self, i):
        silence = self.cores[i]._cfg.election_timeout_ticks
        core = self.cores[i]
        for j in self.voters:
            if j == i:
                continue
            if i not in self.cut and j not in self.cut:
                if self.silent_ticks.pop((i, j), 0) >= silence:
                    self.apply(i, core.follower_heard(j))
                continue
            n = self.silent_ticks[(i, j)] = self.silent_ticks.get((i, j), 0) + 1
            if n == 1:
                self.apply(i, core.wake(j))
            if n == silence:
                self.apply(i, core.leader_unreachable(j))
            if n >= silence:
                self.apply(i, core.follower_silent(j))  # leaders elected since, too

    def leader(self):
        leaders = [c for c in self.cores.values() if c.role is Role.LEADER]
        assert len({c.epoch for c in leaders}) == len(leaders)
        live = [c for c in leaders if c.replica_id not in self.cut]
        return live[0] if len(live) == 1 else None

    def run_until(self, pred, max_ticks=500):
        for _ in range(max_ticks):
            if pred():
                return
            self.tick()
        raise AssertionError("condition not reached")

    def elect(self):
        self.run_until(lambda: self.leader() is not None and self.leader().may_accept_writes)
        return self.leader()


def _cache(epochs_per_offset):
    cache = []
    for off, ep in enumerate(epochs_per_offset):
        if not cache or cache[-1][0] != ep:
            cache.append((ep, off))
    return tuple(cache)


def _quiet(effects):
    return [e for e in effects if type(e) is not LeadershipChanged]


def _sends(effects, kind):
    return [e.message for e in effects if type(e) is Send and type(e.message) is kind]


# ----------------------------------------------------------------------------- elections


def test_single_voter_leads_alone_and_commits_only_flushed_offsets():
    core = RaftCore(7, [7], rng=random.Random(1), config=CFG)
    effects = []
    for _ in range(2 * CFG.election_timeout_ticks):
        effects += core.tick()
        if effects:
            break
    assert effects == [PersistQuorumState(QuorumState(1, 7, None), 1)]
    effects = core.quorum_state_persisted(1)
    assert effects == [LeadershipChanged(1, None), PersistQuorumState(QuorumState(1, 7, 7), 2)]
    assert not core.may_accept_writes  # leader of an epoch that is not durable yet
    effects = core.quorum_state_persisted(2)
    # A new partition's leader appends no control batch: its first record is at offset 0.
    assert effects == [LeadershipChanged(1, 7)]
    assert core.may_accept_writes and core.high_watermark == 0
    assert core.leader_appended(0, 0) == [Flush()]
    assert core.end_offset_for_epoch(1) == (1, 1)  # the epoch starts with its first record
    assert core.flushed(1) == [HighWatermarkChanged(1)]
    assert core.leader_appended(1, 4) == [Flush()]
    assert core.high_watermark == 1  # written but not fsynced: not committed
    assert core.flushed(5) == [HighWatermarkChanged(5)]
    with pytest.raises(RaftStateError):
        core.leader_appended(9, 9)  # not at the log end


def test_three_voters_elect_one_leader_and_replicate():
    h = Harness(3)
    leader = h.elect()
    h.write(leader.replica_id, 3)
    h.tick(3)
    assert all(c.high_watermark == 3 for c in h.cores.values())
    assert all(log == [1, 1, 1] for log in h.logs.values())  # no control batch: a new log
    assert {c.leader_id for c in h.cores.values()} == {leader.replica_id}


def test_new_leader_is_elected_after_leader_loss_and_old_one_resigns():
    h = Harness(3, seed=3)
    old = h.elect()
    h.write(old.replica_id, 2)
    h.tick(2)
    old_epoch = old.epoch
    h.cut.add(old.replica_id)
    h.run_until(lambda: h.leader() is not None and h.leader().epoch > old.epoch)
    new = h.leader()
    assert new.replica_id != old.replica_id
    assert h.logs[new.replica_id][:3] == [1, 1, 2]  # committed entries survive
    assert h.logs[new.replica_id][2] == new.epoch  # its control batch follows them
    # Check quorum: the cut-off leader stops acknowledging writes within two windows.
    h.tick(2 * CFG.check_quorum_ticks)
    assert old.role in (Role.RESIGNED, Role.PROSPECTIVE) and not old.may_accept_writes
    assert LeadershipChanged(old_epoch, None) in h.effects[old.replica_id]
    assert old.epoch == old_epoch  # alone, it can only pre-vote: no epoch bumps
    h.cut.clear()
    h.tick(5)
    assert old.role is Role.FOLLOWER and old.leader_id == new.replica_id
    assert h.logs[old.replica_id] == h.logs[new.replica_id]


def _elect_alone(core):
    effects = []
    for _ in range(2 * CFG.election_timeout_ticks):
        effects += core.tick()
        if effects:
            break
    effects += core.quorum_state_persisted(1)
    return effects + core.quorum_state_persisted(2)


@pytest.mark.parametrize(
    "log_state, high_watermark, control_at",
    [
        (LogState(), 0, None),  # a new partition: the first record is offset 0
        (LogState(5, 5, 5), 5, None),  # empty, everything below it committed
        (LogState(5, 5, 5), 0, 5),  # empty but HW unknown (restart): commit through a control
        (LogState(0, 3, 3, ((1, 0),)), 3, 3),  # entries of an earlier epoch
    ],
)
def test_leader_appends_a_control_batch_only_when_earlier_entries_need_it(
    log_state, high_watermark, control_at
):
    core = RaftCore(1, [1], rng=random.Random(3), log_state=log_state,
                    high_watermark=high_watermark, config=CFG)
    effects = _elect_alone(core)
    controls = [e for e in effects if type(e) is AppendControl]
    assert controls == ([] if control_at is None else [AppendControl(core.epoch, control_at)])
    end = log_state.log_end_offset + (0 if control_at is None else 1)
    assert core.log_end_offset == end and core.may_accept_writes


def test_follower_drops_an_uncommitted_old_epoch_for_a_leader_with_an_empty_log():
    # Voter 3 holds entries of epoch 1 that never reached a majority; 1 and 2 have empty
    # logs, so one of them leads epoch 2 without a control batch. 3 must still lose them.
    h = Harness(3, seed=5, states={3: (QuorumState(1, 3, None), [1, 1])})
    h.cut.add(3)
    leader = h.elect()
    assert leader.replica_id != 3 and h.logs[leader.replica_id] == []
    h.write(leader.replica_id, 2)
    h.cut.clear()
    h.tick(6)
    assert all(log == [leader.epoch] * 2 for log in h.logs.values())
    assert all(c.high_watermark == 2 for c in h.cores.values())


def test_isolated_leader_resigns_after_check_quorum_window_and_not_before():
    """Quiescent, the leader counts held followers as live until the shell says their
    brokers went silent (an election timeout), then resigns within a check-quorum window."""
    h = Harness(3, seed=5)
    leader = h.elect()
    h.tick(1)
    assert leader.quiescent
    h.cut.add(leader.replica_id)
    h.tick(CFG.check_quorum_ticks - 1, nodes=[leader.replica_id])
    assert leader.role is Role.LEADER  # a window that began before the cut may still pass
    h.tick(CFG.election_timeout_ticks + 1, nodes=[leader.replica_id])
    assert leader.role is Role.RESIGNED and not leader.may_accept_writes
    assert LeadershipChanged(leader.epoch, None) in h.effects[leader.replica_id][-3:]
    # ... and answers the held fetches it leaves behind, so nobody waits on them.
    released = _sends(h.effects[leader.replica_id][-3:], FetchResponse)
    assert sorted(m.error for m in released) == ["NOT_LEADER"] * 2


def test_prevote_keeps_a_rejoining_partitioned_node_from_disrupting():
    h = Harness(3, seed=7)
    leader = h.elect()
    epoch = leader.epoch
    loner = next(i for i in h.voters if i != leader.replica_id)
    h.cut.add(loner)
    h.tick(10 * CFG.election_timeout_ticks)  # many election timeouts alone
    assert h.cores[loner].epoch == epoch  # pre-votes never bump the epoch
    assert h.cores[loner].role is Role.PROSPECTIVE
    h.cut.clear()
    h.tick(3 * CFG.election_timeout_ticks)
    assert h.leader() is leader and leader.epoch == epoch
    assert h.cores[loner].role is Role.FOLLOWER and h.cores[loner].leader_id == leader.replica_id


def test_restart_after_leading_comes_back_resigned():
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(4, 1, 1),
                    log_state=LogState(0, 3, 3, ((4, 0),)), config=CFG)  # fmt: skip
    assert core.role is Role.RESIGNED and core.leader_id is None
    assert not core.may_accept_writes
    fetch = FetchRequest(2, 4, 0, 0, 0, 1)
    [resp] = _sends(core.handle(fetch), FetchResponse)
    assert resp.error == "NOT_LEADER" and resp.leader_id is None


# --------------------------------------------------------------------- votes (table)


@pytest.mark.parametrize(
    "state, log, request_, granted",
    [
        (QuorumState(2), [1, 2], VoteRequest(2, 3, 2, 2, False), True),  # equal log
        (QuorumState(2), [1, 2], VoteRequest(2, 3, 2, 1, False), False),  # shorter
        (QuorumState(2), [1, 2], VoteRequest(2, 3, 1, 9, False), False),  # older last epoch
        (QuorumState(2), [1, 2], VoteRequest(2, 3, 3, 1, False), True),  # newer last epoch
        (QuorumState(3, 3, None), [1], VoteRequest(2, 3, 1, 1, False), False),  # voted for 3
        (QuorumState(3, 2, None), [1], VoteRequest(2, 3, 1, 1, False), True),  # same vote again
        (QuorumState(4), [1], VoteRequest(2, 3, 1, 1, False), False),  # stale epoch
        (QuorumState(3, None, 3), [1], VoteRequest(2, 3, 1, 1, False), False),  # has a leader
        (QuorumState(2), [1, 2], VoteRequest(2, 3, 2, 2, True), True),  # pre-vote, no leader
        (QuorumState(3), [1], VoteRequest(2, 3, 1, 1, True), False),  # pre-vote for our epoch
    ],
)
def test_vote_rules(state, log, request_, granted):
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=state,
                    log_state=LogState(0, len(log), len(log), _cache(log)), config=CFG)  # fmt: skip
    effects = core.handle(request_)
    while effects and type(effects[-1]) is PersistQuorumState:
        effects = core.quorum_state_persisted(effects[-1].version)
    [resp] = _sends(effects, VoteResponse)
    assert resp.granted is granted
    if request_.pre_vote:
        assert core.quorum_state == state  # a pre-vote changes nothing
    elif granted:
        assert core.quorum_state.voted_for == request_.sender


def test_prevote_refused_by_follower_that_heard_from_its_leader():
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(2, None, 3),
                    config=CFG)  # fmt: skip
    [resp] = _sends(core.handle(VoteRequest(2, 3, 5, 5, True)), VoteResponse)
    assert not resp.granted and resp.leader_id == 3
    for _ in range(CFG.election_timeout_ticks - 1):
        core.tick()  # no fetch answered: the lease runs out
    core.handle(BeginQuorumEpoch(3, 2))  # ... but the leader speaks again
    [resp] = _sends(core.handle(VoteRequest(2, 3, 5, 5, True)), VoteResponse)
    assert not resp.granted


def test_vote_grant_is_not_sent_before_quorum_state_is_durable():
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(2), config=CFG)
    effects = core.handle(VoteRequest(2, 3, 0, 0, False))
    assert effects == [PersistQuorumState(QuorumState(3, None, None), 1)]
    # Events meanwhile are processed, but their effects wait too.
    assert core.handle(VoteRequest(3, 3, 0, 0, False)) == []
    assert core.quorum_state_persisted(99) == []  # not the awaited version
    effects = _quiet(core.quorum_state_persisted(1))
    assert effects == [PersistQuorumState(QuorumState(3, 2, None), 2)]
    effects = core.quorum_state_persisted(2)
    assert [(e.to, e.message.granted) for e in effects] == [(2, True), (3, False)]


def test_candidate_sends_vote_requests_only_after_its_vote_is_durable():
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), config=CFG)
    effects = []
    while not effects:
        effects = core.tick()
    assert [type(e.message) for e in effects] == [VoteRequest, VoteRequest]  # pre-votes
    effects = core.handle(VoteResponse(2, 0, True, True, None))
    assert effects == [PersistQuorumState(QuorumState(1, 1, None), 1)]
    assert core.role is Role.CANDIDATE
    assert core.handle(VoteResponse(2, 1, True, False, None)) == []  # wins, held
    assert core.role is Role.LEADER and not core.may_accept_writes
    effects = _quiet(core.quorum_state_persisted(1))
    assert [type(e) for e in effects] == [Send, Send, PersistQuorumState]
    effects = core.quorum_state_persisted(2)
    assert effects[0] == LeadershipChanged(1, 1) and core.may_accept_writes  # empty log: no control
    assert len(_sends(effects, BeginQuorumEpoch)) == 2


# ---------------------------------------------------------------- fetch and divergence


def _leader(log_epochs, epoch, hw=0):
    """A leader of `epoch` over `log_epochs` (its control batch last), all flushed."""
    core = RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(epoch - 1),
                    log_state=LogState(0, len(log_epochs) - 1, len(log_epochs) - 1,
                                       _cache(log_epochs[:-1])),
                    high_watermark=hw, config=CFG)  # fmt: skip
    core.handle(VoteRequest(2, epoch - 1, 0, 0, False))  # move to epoch - 1 with a vote
    for e in list(core._out):
        if type(e) is PersistQuorumState:
            core.quorum_state_persisted(e.version)
    core._cfg  # noqa: B018 - keep flake quiet about the access above
    effects = []
    while core.role is not Role.LEADER:
        effects = core.tick()
        for e in effects:
            if type(e) is Send and type(e.message) is VoteRequest:
                v = e.message
                effects = core.handle(VoteResponse(e.to, v.epoch, True, v.pre_vote, None))
                while effects and type(effects[0]) is PersistQuorumState:
                    effects = core.quorum_state_persisted(effects[0].version)
                break
    while effects and type(effects[-1]) is PersistQuorumState:
        effects = core.quorum_state_persisted(effects[-1].version)
    core.flushed(core.log_end_offset)
    assert core.epoch == epoch and core.may_accept_writes
    return core


@pytest.mark.parametrize(
    "fetch_offset, last_fetched_epoch, diverging",
    [
        (0, 0, None),  # empty follower: always consistent
        (3, 1, None),  # leader epochs: 1 @ [0,3), 3 @ [3,5), L @ [5,6)
        (4, 3, None),
        (5, 1, (1, 3)),  # the follower kept epoch 1 past where the leader's ended
        (4, 2, (1, 3)),  # epoch 2 unknown to the leader: its largest below is 1
        (9, "L", ("L", 6)),  # longer than the leader in the leader's own epoch
        (6, "L", None),
    ],
)
def test_leader_answers_inconsistent_fetch_with_diverging_epoch(
    fetch_offset, last_fetched_epoch, diverging
):
    states = {1: (QuorumState(3), [1, 1, 1, 3, 3]), 2: (QuorumState(3), []),
              3: (QuorumState(3), [])}  # fmt: skip
    h = Harness(3, seed=1, states=states)
    leader = h.elect()
    assert leader.replica_id == 1 and h.logs[1] == [1, 1, 1, 3, 3, leader.epoch]
    h.cut = {2, 3}
    lfe = leader.epoch if last_fetched_epoch == "L" else last_fetched_epoch
    request = FetchRequest(2, leader.epoch, fetch_offset, lfe, fetch_offset, 99)
    responses = _sends(leader.handle(request), FetchResponse)
    if fetch_offset == 6 and diverging is None:
        assert responses == [] and leader._peers[2].parked == request  # long poll
        return
    [resp] = responses
    if diverging is None:
        assert resp.diverging_epoch is None and resp.error is None
        assert resp.read_offset == (fetch_offset if fetch_offset < 6 else None)
    else:
        epoch, end = diverging
        expected = (leader.epoch if epoch == "L" else epoch, end)
        assert (resp.diverging_epoch, resp.diverging_end_offset) == expected
        assert resp.read_offset is None


def test_end_offset_for_epoch():
    core = RaftCore(1, [1], rng=random.Random(1),
                    log_state=LogState(0, 9, 9, ((2, 0), (4, 3), (7, 6))), config=CFG)  # fmt: skip
    assert core.end_offset_for_epoch(1) == (-1, -1)
    assert core.end_offset_for_epoch(2) == (2, 3)
    assert core.end_offset_for_epoch(3) == (2, 3)
    assert core.end_offset_for_epoch(6) == (4, 6)
    assert core.end_offset_for_epoch(7) == (7, 9)
    assert core.end_offset_for_epoch(99) == (7, 9)


def test_uncommitted_suffix_of_an_old_epoch_is_truncated_figure_8():
    """Raft paper figure 8 with epochs: a leader must not commit an old-epoch entry by
    counting replicas; only its own epoch's control batch on a majority commits it."""
    # Offset 0 (epoch 1) is committed everywhere. Replica 1 led epoch 2 and wrote offsets
    # 1-2 alone; replica 3 led epoch 3 and wrote offset 1 alone.
    states = {
        1: (QuorumState(3, None, 3), [1, 2, 2]),
        2: (QuorumState(3, 3, 3), [1]),
        3: (QuorumState(3, 3, 3), [1, 3]),
    }
    h = Harness(3, seed=11, states=states, max_read=2)
    for c in h.cores.values():
        c._hw = 1  # what each learned before (the shell passes it at restart)
    h.cut.add(3)
    # Replica 2 may copy the epoch-2 entries, but not yet the epoch-4 control batch.
    h.hold = lambda src, dst, m: type(m) is FetchResponse and m.fetch_offset >= 3
    h.run_until(lambda: h.logs[2] == [1, 2, 2] and h.cores[2].flushed_offset == 3)
    one, two = h.cores[1], h.cores[2]
    assert one.role is Role.LEADER and one.epoch == 4 and h.logs[1] == [1, 2, 2, 4]
    h.tick(3)
    assert one._peers[2].durable_offset == 3
    # Offsets 1-2 sit on a majority, but not one offset of epoch 4 does: no commit.
    assert one.high_watermark == 1 and h.hw_seen[1] == []
    # Replica 1 dies; replica 3 comes back and (with replica 2's vote) leads epoch 5.
    h.cut = {1}
    h.hold = None
    h.inbox.clear()
    h.run_until(lambda: h.leader() is not None and h.leader().replica_id == 3)
    h.tick(5)
    assert h.logs[3] == [1, 3, 5] and h.logs[2] == [1, 3, 5]
    assert any(type(e) is TruncateTo and e.offset == 1 for e in h.effects[2])
    assert two.high_watermark == 3
    # Replica 1 rejoins and drops its epoch-2 and epoch-4 entries too.
    h.cut.clear()
    h.tick(5)
    assert h.logs[1] == [1, 3, 5]


def test_follower_never_truncates_below_its_high_watermark():
    core = RaftCore(2, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(3, None, 1),
                    log_state=LogState(0, 4, 4, ((1, 0), (2, 2))), high_watermark=3,
                    config=CFG)  # fmt: skip
    [fetch] = _sends(core.tick(), FetchRequest)
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (4, 2)
    bad = FetchResponse(1, 3, 1, fetch.fetch_id, None, 3, 4, 1, 2)
    with pytest.raises(RaftStateError):
        core.handle(bad)


def test_follower_high_watermark_is_capped_at_its_log_end_and_fetches_after_flush():
    core = RaftCore(2, [1, 2, 3], rng=random.Random(1), quorum_state=QuorumState(3, None, 1),
                    log_state=LogState(0, 1, 1, ((1, 0),)), config=CFG)  # fmt: skip
    [fetch] = _sends(core.tick(), FetchRequest)
    resp = FetchResponse(1, 3, 1, fetch.fetch_id, None, 50, 1, None, -1, 1)
    resp = resp.with_records(b"opaque", ((1, 2, 3), (3, 3, 3)))
    effects = core.handle(resp)
    assert effects == [AppendReplicated(b"opaque", 1, 4), HighWatermarkChanged(4), Flush()]
    assert core.last_epoch == 3 and core.end_offset_for_epoch(1) == (1, 1)
    [fetch2] = _sends(core.flushed(4), FetchRequest)
    assert (fetch2.fetch_offset, fetch2.last_fetched_epoch, fetch2.flushed_offset) == (4, 3, 4)
    # A duplicate of the old response is ignored.
    assert core.handle(resp) == []


def test_leader_parks_caught_up_fetch_until_data_or_max_wait():
    h = Harness(3, seed=2)
    leader = h.elect()
    h.write(leader.replica_id)
    h.tick(3)
    assert all(c.high_watermark == 1 for c in h.cores.values())
    parked = [p for p in leader._peers.values() if p.parked is not None]
    assert len(parked) == 2  # both followers are waiting at the leader
    h.write(leader.replica_id)
    h.deliver()
    assert all(c.high_watermark == 2 for c in h.cores.values())


def test_a_tick_told_to_answers_every_parked_fetch_at_once():
    h = Harness(3, seed=2)
    leader = h.elect()
    h.write(leader.replica_id)
    h.tick(3)
    assert sum(p.held for p in leader._peers.values()) == 2 and leader.quiescent
    assert leader.tick(answer_parked=True) == []  # held fetches wait for news
    for i in h.voters:
        if i != leader.replica_id:
            h.apply(i, h.cores[i].wake(leader.replica_id))  # fetches that are not held
    h.deliver()
    assert sum(p.parked is not None and not p.held for p in leader._peers.values()) == 2
    answers = [e for e in leader.tick() if type(e) is Send]
    assert answers == []  # a plain tick waits for fetch_max_wait_ticks
    answers = [e for e in leader.tick(answer_parked=True) if type(e) is Send]
    assert sorted(type(e.message).__name__ for e in answers) == ["FetchResponse"] * 2
    assert all(p.parked is None for p in leader._peers.values())
    follower = next(c for c in h.cores.values() if c is not leader)
    assert follower.tick(answer_parked=True) == follower.tick() == []  # leaders only


# ------------------------------------------------------------------ leadership transfer


def test_transfer_leadership_hands_over_to_the_target():
    h = Harness(3, seed=4)
    leader = h.elect()
    target = next(i for i in h.voters if i != leader.replica_id)
    h.write(leader.replica_id, 2)
    h.apply(leader.replica_id, leader.transfer_leadership(target))
    assert not leader.may_accept_writes
    h.run_until(lambda: h.leader() is not None and h.leader().replica_id == target, 50)
    assert h.cores[target].epoch == leader.epoch  # old leader followed into the new epoch
    assert leader.role is Role.FOLLOWER and leader.leader_id == target
    h.tick(5)
    assert all(log == h.logs[target] for log in h.logs.values())
    assert h.logs[target][:2] == [1, 1] and h.logs[target][2] == h.cores[target].epoch


def test_transfer_gives_up_after_timeout_and_writes_resume():
    h = Harness(3, seed=6)
    leader = h.elect()
    target = next(i for i in h.voters if i != leader.replica_id)
    h.cut.add(target)
    h.write(leader.replica_id)
    h.apply(leader.replica_id, leader.transfer_leadership(target))
    assert not leader.may_accept_writes
    h.tick(CFG.transfer_timeout_ticks - 1)
    assert not leader.may_accept_writes
    h.tick(1)
    assert leader.may_accept_writes and leader.role is Role.LEADER


def test_transfer_refusal_names_a_target_that_lacks_committed_offsets():
    h = Harness(3, seed=10)
    leader = h.elect()
    target = next(i for i in h.voters if i != leader.replica_id)
    h.write(leader.replica_id, 2)
    h.tick(4)
    assert leader.transfer_refusal(target) is None
    h.cut.add(target)
    h.write(leader.replica_id, 2)
    h.tick(4)  # the other follower fetches: the high watermark passes the cut target
    assert leader.high_watermark == len(h.logs[leader.replica_id])
    assert leader.transfer_refusal(target) is None  # caught up lately: merely a fetch behind
    h.tick(CFG.election_timeout_ticks)
    assert "behind" in leader.transfer_refusal(target)
    assert "not a voter" in leader.transfer_refusal(42)
    assert h.cores[target].transfer_refusal(leader.replica_id) is None  # not a leader: no opinion


def test_transfer_needs_a_leader_and_a_voter():
    h = Harness(3, seed=8)
    leader = h.elect()
    follower = h.cores[next(i for i in h.voters if i != leader.replica_id)]
    with pytest.raises(NotLeaderError) as err:
        follower.transfer_leadership(leader.replica_id)
    assert err.value.code == "NOT_LEADER" and err.value.leader_id == leader.replica_id
    with pytest.raises(ValueError):
        leader.transfer_leadership(42)


def test_config_rejects_timeouts_that_cannot_work():
    with pytest.raises(ValueError):
        RaftConfig(election_timeout_ticks=5, fetch_request_timeout_ticks=8)
    with pytest.raises(ValueError):
        RaftConfig(check_quorum_ticks=5)
    with pytest.raises(ValueError):
        RaftCore(9, [1, 2, 3], rng=random.Random(1))


def test_without_require_flush_the_log_end_counts():
    cfg = RaftConfig(election_timeout_ticks=10, fetch_max_wait_ticks=2,
                     fetch_request_timeout_ticks=4, check_quorum_ticks=15, require_flush=False)
    h = Harness(3, seed=9, config=cfg)
    leader = h.elect()
    h.write(leader.replica_id, 2)
    h.tick(2)
    assert all(c.high_watermark == 2 for c in h.cores.values())
    assert not any(type(e) is Flush for effects in h.effects.values() for e in effects)


# ------------------------------------------------------ damaged storage (needs_catch_up)


def _damaged(state=QuorumState(2, None, None, True), log=(1, 2)):
    return RaftCore(1, [1, 2, 3], rng=random.Random(1), quorum_state=state,
                    log_state=LogState(0, len(log), len(log), _cache(log)), config=CFG)  # fmt: skip


def test_damaged_replica_grants_no_vote_or_prevote_but_learns_the_epoch():
    core = _damaged()
    assert core.status()["needs_catch_up"] and core.quorum_state.needs_catch_up
    [resp] = _sends(core.handle(VoteRequest(2, 3, 9, 99, True)), VoteResponse)
    assert not resp.granted  # the same request is granted without the flag (table above)
    effects = core.handle(VoteRequest(2, 3, 9, 99, False))
    # It adopts the epoch (durably, flag kept) and refuses the vote.
    assert effects == [PersistQuorumState(QuorumState(3, None, None, True), 1)]
    [resp] = _sends(core.quorum_state_persisted(1), VoteResponse)
    assert not resp.granted and core.epoch == 3 and core.quorum_state.voted_for is None


def test_damaged_replica_never_runs_for_election():
    core = _damaged()
    effects = []
    for _ in range(5 * CFG.election_timeout_ticks):
        effects += core.tick()
    assert core.start_election() == []
    assert _sends(effects, VoteRequest) == [] and core.role is Role.UNATTACHED
    follower = _damaged(QuorumState(2, None, 3, True))
    assert _sends(follower.handle(TimeoutNow(3, 2)), VoteRequest) == []
    assert follower.role is Role.FOLLOWER and follower.epoch == 2
    # A lone voter has nobody to catch up from: the flag does not apply.
    alone = RaftCore(1, [1], rng=random.Random(1), quorum_state=QuorumState(2, None, None, True),
                     config=CFG)  # fmt: skip
    assert not alone.needs_catch_up
    alone.start_election()
    assert alone.role is Role.LEADER


def test_damaged_replica_clears_the_flag_once_durably_caught_up_then_votes():
    # Follower of leader 3 in epoch 4; the damage cut its log to [1, 2].
    core = _damaged(QuorumState(4, None, 3, True))
    [fetch] = _sends(core.tick(), FetchRequest)
    # A response with HW <= our end but no entry of epoch 4 yet: the leader's HW may still
    # be below commits of earlier epochs, so that is not caught up.
    resp = FetchResponse(3, 4, 3, fetch.fetch_id, None, 2, 2, None, -1, 2)
    effects = core.handle(resp.with_records(b"x", ((2, 3, 2),)))
    assert [type(e) for e in effects] == [AppendReplicated, HighWatermarkChanged, Flush]
    [fetch] = _sends(core.flushed(4), FetchRequest)
    assert core.needs_catch_up
    # Now the leader's control batch (epoch 4) and HW 5 arrive; cleared only once flushed.
    resp = FetchResponse(3, 4, 3, fetch.fetch_id, None, 5, 4, None, -1, 4)
    effects = core.handle(resp.with_records(b"y", ((4, 4, 4),)))
    assert core.needs_catch_up and Flush() in effects
    effects = core.flushed(5)
    assert effects[0] == PersistQuorumState(QuorumState(4, None, 3, False), 1)
    assert not core.needs_catch_up and not core.status()["needs_catch_up"]
    core.quorum_state_persisted(1)
    # Caught up, it votes again (its leader's lease has run out).
    for _ in range(CFG.election_timeout_ticks):
        core.tick()
    [resp] = _sends(core.handle(VoteRequest(2, 5, 4, 5, True)), VoteResponse)
    assert resp.granted


def test_error_and_divergence_responses_do_not_clear_the_flag():
    core = _damaged(QuorumState(4, None, 3, True), log=(1, 4))
    [fetch] = _sends(core.tick(), FetchRequest)
    assert core.handle(FetchResponse(3, 4, 3, fetch.fetch_id, None, 0, 2, 1, 1)) != []
    assert core.needs_catch_up and core.log_end_offset == 1  # truncated, fetching again
    core = _damaged(QuorumState(4, None, 3, True), log=(1, 4))
    [fetch] = _sends(core.tick(), FetchRequest)
    core.handle(FetchResponse(3, 4, 3, fetch.fetch_id, "NOT_LEADER"))
    assert core.needs_catch_up and core.role is Role.UNATTACHED


def test_damaged_voter_cannot_help_elect_a_leader_that_lacks_a_commit():
    # jepsen-2: [0, 5) committed on {1, 3}; node 2 lags; node 3's damaged storage lost 3, 4.
    h = Harness(3, states={
        1: (QuorumState(2, None, None), [1, 1, 2, 2, 2]),
        2: (QuorumState(2, None, None), [1, 1]),
        3: (QuorumState(2, None, None, True), [1, 1, 2]),
    })  # fmt: skip
    h.cut = {1}
    h.tick(6 * CFG.election_timeout_ticks)
    assert h.leader() is None  # 2 would win with 3's vote; without it nobody can
    h.cut = set()
    leader = h.elect()
    assert leader.replica_id == 1
    h.run_until(lambda: not h.cores[3].needs_catch_up)
    assert h.logs[3][:5] == [1, 1, 2, 2, 2] and h.logs[2][:5] == [1, 1, 2, 2, 2]


# ------------------------------------------------------------------- log start (DeleteRecords)


def test_delete_records_moves_every_log_start_and_answers_at_a_majority():
    h = Harness(3, seed=11)
    leader = h.elect()
    lid = leader.replica_id
    h.write(lid, 10)
    h.tick(3)
    assert leader.high_watermark == 10
    with pytest.raises(RaftStateError):
        leader.delete_records(11)  # past the high watermark: the shell checks first
    follower = next(c for c in h.cores.values() if c is not leader)
    with pytest.raises(NotLeaderError):
        follower.delete_records(3)
    effects = leader.delete_records(6)
    assert effects[0] == AdvanceLogStart(6)  # here at once; a majority only once reported
    # Held (quiescent) followers are answered at once: the news is the new log start.
    assert [(type(e.message), e.message.log_start_offset) for e in effects[1:]] == [(FetchResponse, 6)] * 2
    h.apply(lid, effects)
    assert leader.low_watermark == 0
    h.tick(3)
    assert h.log_start == {1: 6, 2: 6, 3: 6}
    assert h.low_wm_seen[lid] == [6]
    assert leader.delete_records(4) == [] and leader.delete_records(6) == []  # nothing to do


def test_a_deletion_held_by_a_majority_survives_a_leader_elected_without_it():
    h = Harness(3, seed=12)
    old = h.elect()
    h.write(old.replica_id, 10)
    h.tick(3)
    lagging = next(i for i in h.voters if i != old.replica_id)
    holder = next(i for i in h.voters if i not in (old.replica_id, lagging))
    h.cut.add(lagging)
    h.apply(old.replica_id, old.delete_records(8))
    h.tick(3)
    assert h.log_start[holder] == 8 and h.low_wm_seen[old.replica_id] == [8]
    assert h.log_start[lagging] == 0
    # The old leader goes; the lagging replica (same log otherwise) wins with the holder's vote
    # (the holder's own vote requests are held back, so it cannot win first).
    h.cut = {old.replica_id}
    h.hold = lambda src, dst, m: type(m) is VoteRequest and src == holder
    h.run_until(lambda: h.leader() is not None and h.leader().replica_id == lagging
                and h.leader().may_accept_writes, 300)
    new = h.cores[lagging]
    h.tick(3)
    assert h.log_start[lagging] == 8  # adopted from the holder's fetch report
    assert new.log_start_offset == 8


def _leader_killed(seed, *, refused=False):
    """A 3-voter group whose elected leader is then cut off, its followers told
    `leader_unreachable`: (harness, old leader, followers)."""
    h = Harness(3, seed=seed)
    old = h.elect()
    h.tick(3)
    followers = [i for i in h.voters if i != old.replica_id]
    h.cut.add(old.replica_id)
    for i in followers:
        h.apply(i, h.cores[i].leader_unreachable(old.replica_id, refused=refused))
    return h, old, followers


def _ticks_until_led(h, nodes):
    ticks = 0
    while h.leader() is None or not h.leader().may_accept_writes:
        h.tick(nodes=nodes)
        ticks += 1
        assert ticks < CFG.election_timeout_ticks, "no faster than a plain election timeout"
    return ticks


def test_followers_of_an_unreachable_leader_elect_at_once_without_a_split_vote():
    for seed in range(20):
        h, old, followers = _leader_killed(seed)
        _ticks_until_led(h, followers)
        new = h.leader()
        assert new.replica_id in followers and new.epoch == old.epoch + 1  # one round: no split vote


def test_after_a_split_vote_the_two_candidates_run_again_one_after_the_other():
    for seed in range(20):
        h, old, followers = _leader_killed(seed)
        # Both run before either hears the other (a slow vote under load): both pre-votes
        # pass, then the votes cross: a split vote.
        h.hold = lambda src, dst, m: type(m) is VoteRequest
        h.run_until(lambda: all(h.cores[i].role is not Role.FOLLOWER for i in followers), 50)
        h.hold = lambda src, dst, m: type(m) is VoteRequest and not m.pre_vote
        h.run_until(lambda: all(h.cores[i].role is Role.CANDIDATE for i in followers), 50)
        split = old.epoch + 1
        assert [h.cores[i].epoch for i in followers] == [split, split]
        h.hold = None
        h.deliver()
        assert all(h.cores[i].role is Role.CANDIDATE for i in followers)  # each refused the other
        _ticks_until_led(h, followers)  # not a candidate's own timeout (at least one more)
        assert h.leader().epoch == split + 1  # one more round, not two more splits


def test_refused_only_the_first_ranked_follower_skips_the_pre_vote_so_slow_votes_do_not_split():
    # Issue 46: on a starved node the second-ranked follower's ticks ran ahead of the first
    # one's vote request; had both stood as candidates for one epoch, the vote split.
    for seed in range(20):
        h, old, followers = _leader_killed(seed, refused=True)
        first, second = sorted(followers, key=lambda i: (sorted(followers).index(i) - old.epoch) % 2)
        h.hold = lambda src, dst, m: type(m) is VoteRequest  # nobody hears anybody yet
        h.run_until(lambda: h.cores[first].role is Role.CANDIDATE
                    and h.cores[second].role is not Role.FOLLOWER, 50)
        assert h.cores[second].role is Role.PROSPECTIVE and h.cores[second].epoch == old.epoch
        h.hold = None
        h.deliver()
        _ticks_until_led(h, followers)
        assert h.leader().replica_id == first and h.leader().epoch == old.epoch + 1  # one round


class _ElectionChecked(Harness):
    """Checks, before every tick of every core, that `runs_on_next_tick()` says whether that
    tick starts an election (a pre-vote request or a candidacy's quorum-state write): the
    replica shell runs exactly those ticks in the replica's own task."""

    due_ticks = 0

    def tick(self, ticks=1, nodes=None):
        for _ in range(ticks):
            for i in nodes or self.voters:
                core = self.cores[i]
                due = core.runs_on_next_tick()
                effects = core.tick()
                started = any(type(e) is PersistQuorumState or type(e) is Send and type(e.message) is VoteRequest
                              for e in effects)
                assert due == started, (i, core.status(), effects)
                self.due_ticks += due
                self.apply(i, effects)
                self.watch_links(i)
            self.deliver()


def test_runs_on_next_tick_says_exactly_which_ticks_start_an_election():
    due = 0
    for seed in range(12):
        h = _ElectionChecked(3, seed=seed)
        old = h.elect()
        h.write(old.replica_id, 2)
        h.tick(5)
        others = [i for i in h.voters if i != old.replica_id]
        h.cut.add(old.replica_id)  # killed
        if seed % 2:
            for i in others:
                h.apply(i, h.cores[i].leader_unreachable(old.replica_id, refused=True))
        h.run_until(lambda: h.leader() is not None and h.leader().replica_id != old.replica_id)
        h.cut = {others[0]}  # a follower cut off: it runs again and again, refused pre-votes
        h.tick(3 * CFG.election_timeout_ticks)
        h.cut = set()
        h.tick(3 * CFG.election_timeout_ticks)
        due += h.due_ticks
    single = _ElectionChecked(1)
    single.elect()
    assert single.due_ticks == 1
    assert due > 12 * 3  # every seed elected twice and its cut-off follower kept running


def test_a_follower_told_its_live_leader_is_unreachable_does_not_depose_it():
    h = Harness(3, seed=4)
    leader = h.elect()
    h.tick(3)
    a, b = [i for i in h.voters if i != leader.replica_id]
    h.apply(a, h.cores[a].leader_unreachable(leader.replica_id))  # a false alarm, for `a` only
    h.tick(2 * CFG.election_timeout_ticks)
    assert h.leader() is leader and leader.epoch == h.cores[a].epoch == h.cores[b].epoch
    assert h.cores[a].leader_id == leader.replica_id
    # Not a follower of that broker: nothing happens.
    assert h.cores[a].leader_unreachable(b) == [] and h.cores[a].role is Role.FOLLOWER


# ------------------------------------------------------------------------------ quiescence


def _quiesced(n=3, seed=21):
    h = Harness(n, seed=seed)
    leader = h.elect()
    h.write(leader.replica_id, 2)
    h.tick(4)
    assert all(c.quiescent for c in h.cores.values()), [c.status() for c in h.cores.values()]
    return h, leader


def test_an_idle_group_quiesces_and_then_sends_nothing_and_counts_nothing():
    h, leader = _quiesced()
    held = [m for i in h.voters for m in _sends(h.effects[leader.replica_id], FetchHeld)]
    assert held, "the followers' fetches were held, and the leader said so"
    before = {i: len(h.effects[i]) for i in h.voters}
    elapsed = {i: h.cores[i]._election_elapsed for i in h.voters}
    h.tick(20 * CFG.election_timeout_ticks)
    assert {i: len(h.effects[i]) for i in h.voters} == before  # no message, no effect at all
    assert {i: h.cores[i]._election_elapsed for i in h.voters} == elapsed  # timers stand still
    end = len(h.logs[leader.replica_id])
    assert leader.follower_states() == {v: (end, True) for v in h.voters if v != leader.replica_id}


def test_a_write_to_a_quiescent_group_answers_the_held_fetches_at_once():
    h, leader = _quiesced()
    first = len(h.logs[leader.replica_id])
    h.logs[leader.replica_id].append(leader.epoch)
    effects = leader.leader_appended(first, first)
    answers = _sends(effects, FetchResponse)
    # The records go out in the same step as the append: no extra round trip to wake anyone.
    assert sorted(m.read_offset for m in answers) == [first, first]
    h.apply(leader.replica_id, effects)
    h.deliver()
    assert all(h.logs[i] == h.logs[leader.replica_id] for i in h.voters)
    assert leader.high_watermark == first + 1
    h.tick(4)
    assert all(c.quiescent for c in h.cores.values())  # and quiet again


def test_a_lost_fetch_held_leaves_the_follower_ticking_until_it_is_held():
    h = Harness(3, seed=22)
    h.hold = lambda src, dst, m: type(m) is FetchHeld  # never arrives
    leader = h.elect()
    h.tick(6)
    followers = [c for c in h.cores.values() if c is not leader]
    assert not any(c.quiescent for c in followers)
    # Their fetches time out and go again (still asking to be held): they never wait on a
    # fetch they were not told is held.
    sent = [m for c in followers for m in _sends(h.effects[c.replica_id], FetchRequest)]
    assert len(sent) >= 4 and sent[-1].quiescent
    h.hold = None
    h.inbox.clear()
    h.tick(CFG.fetch_request_timeout_ticks + 2)
    assert all(c.quiescent for c in h.cores.values())


def test_a_lost_answer_to_a_held_fetch_is_recovered_by_the_leaders_wake():
    h, leader = _quiesced()
    lost = next(i for i in h.voters if i != leader.replica_id)
    h.hold = lambda src, dst, m: type(m) is FetchResponse and dst == lost
    h.write(leader.replica_id)
    h.deliver()
    h.inbox = [m for m in h.inbox if m[1] != lost]  # the answer is gone for good
    h.hold = None
    assert h.cores[lost].quiescent  # it still waits for the answer it will never get
    h.tick(CFG.election_timeout_ticks)
    wakes = _sends(h.effects[leader.replica_id], BeginQuorumEpoch)
    assert wakes and h.logs[lost] == h.logs[leader.replica_id]
    assert leader.epoch == h.cores[lost].epoch  # woken, not deposed


def test_a_pre_vote_makes_a_quiescent_follower_check_its_leader_and_refuse():
    h, leader = _quiesced()
    a, b = [i for i in h.voters if i != leader.replica_id]
    fa = h.cores[a]
    effects = fa.handle(VoteRequest(b, leader.epoch + 1, fa.last_epoch, fa.log_end_offset, True))
    vote = _sends(effects, VoteResponse)[0]
    assert not vote.granted and vote.leader_id == leader.replica_id  # its lease holds
    check = _sends(effects, FetchRequest)
    assert len(check) == 1 and not check[0].quiescent and not fa.quiescent


def test_a_leader_that_steps_down_answers_held_fetches_with_the_news():
    h, leader = _quiesced()
    a, b = [i for i in h.voters if i != leader.replica_id]
    old_epoch = leader.epoch
    effects = leader.handle(VoteRequest(a, old_epoch + 1, leader.last_epoch, leader.log_end_offset, False))
    if effects and type(effects[0]) is PersistQuorumState:
        effects += leader.quorum_state_persisted(effects[0].version)
    released = _sends(effects, FetchResponse)
    assert sorted(m.sender for m in released) == [leader.replica_id] * 2
    # In the new epoch: the followers move to it at once instead of electing in the old one.
    assert all(m.error == "NOT_LEADER" and m.epoch == old_epoch + 1 for m in released)


def test_abandon_releases_what_others_wait_on():
    h, leader = _quiesced()
    out = leader.abandon()
    assert sorted(e.to for e in out) == sorted(i for i in h.voters if i != leader.replica_id)
    assert all(type(e.message) is FetchResponse and e.message.error == "NOT_LEADER" for e in out)
    assert leader.abandon() == []  # released once
    follower = next(c for c in h.cores.values() if c is not leader)
    (send,) = follower.abandon()
    assert send.to == leader.replica_id and type(send.message) is FetchRequest
    assert not send.message.quiescent  # the leader stops counting it as held


def test_silence_and_return_of_a_followers_broker():
    h, leader = _quiesced()
    a, b = [i for i in h.voters if i != leader.replica_id]
    assert leader.follower_silent(a) == []
    end = len(h.logs[leader.replica_id])
    assert leader.follower_states()[a] == (end, False)  # not in sync while silent
    assert leader.quiescent  # b is held: with the leader a majority
    leader.follower_silent(b)
    assert not leader.quiescent  # no majority held: it ticks (check quorum runs)
    leader.follower_heard(a)
    leader.follower_heard(b)
    assert leader.quiescent and leader.follower_states()[a] == (end, True)


def test_wake_makes_a_quiescent_follower_fetch_from_that_broker_only():
    h, leader = _quiesced()
    follower = next(c for c in h.cores.values() if c is not leader)
    other = next(i for i in h.voters if i not in (leader.replica_id, follower.replica_id))
    assert follower.wake(other) == [] and follower.quiescent
    (fetch,) = _sends(follower.wake(leader.replica_id), FetchRequest)
    assert not fetch.quiescent and not follower.quiescent


def test_followers_of_a_leader_whose_port_refuses_skip_the_pre_vote():
    h, leader = _quiesced(seed=23)
    followers = [i for i in h.voters if i != leader.replica_id]
    seen = {i: len(h.effects[i]) for i in followers}
    h.cut.add(leader.replica_id)
    for i in followers:
        h.apply(i, h.cores[i].leader_unreachable(leader.replica_id, refused=True))
    h.run_until(lambda: h.leader() is not None and h.leader().may_accept_writes, 3 * CFG.election_timeout_ticks)
    requests = [m for i in followers for m in _sends(h.effects[i][seen[i]:], VoteRequest)]
    assert requests and not any(m.pre_vote for m in requests)  # straight to the real vote
    assert h.leader().epoch == leader.epoch + 1


def test_a_write_after_a_long_quiet_does_not_make_the_leader_resign():
    """Quiescent, the leader's check-quorum window stands still; the held fetches it answers
    at the next write count as fetches in it, so the window closing right after does not
    find an empty quorum (seen: hundreds of leaders resigned when a load woke them)."""
    for elapsed in range(CFG.check_quorum_ticks):
        h, leader = _quiesced(seed=24)
        leader._cq_elapsed = elapsed  # wherever the window stood when the group went quiet
        leader._cq_fetched.clear()
        epoch = leader.epoch
        h.write(leader.replica_id)
        for _ in range(CFG.check_quorum_ticks - elapsed):  # to the end of that window
            h.apply(leader.replica_id, leader.tick())  # before any follower's fetch is back
        assert leader.role is Role.LEADER and leader.epoch == epoch, elapsed


def _ticks_until_a_follower_runs(h, follower, leader_id, *, alive, limit):
    """Writes at the leader and ticks every node until `follower` runs for election (sends
    a pre-vote request); before a tick that would start it, tells the follower that its
    leader's broker answers when `alive` (as the replica shell does)."""
    for ticks in range(1, limit + 1):
        core = h.cores[follower]
        if alive and core.runs_on_next_tick():
            h.apply(follower, core.leader_alive(leader_id))
        if h.cores[leader_id].may_accept_writes:
            h.write(leader_id)  # under load: no partition goes quiescent
        asked = len(_sends(h.effects[follower], VoteRequest))
        h.tick()
        if len(_sends(h.effects[follower], VoteRequest)) > asked:
            return ticks
    raise AssertionError(f"{follower} did not run in {limit} ticks: {h.cores[follower].status()}")


@pytest.mark.parametrize("seed", range(6))
def test_a_follower_whose_leader_broker_answers_waits_longer_but_not_for_ever(seed):
    t = CFG.election_timeout_ticks
    runs = {}
    for alive in (False, True):
        h = Harness(3, seed=seed)
        leader = h.elect()
        h.tick(3)
        a = next(i for i in h.voters if i != leader.replica_id)
        # The leader broker answers the other follower, and `a`'s fetches never.
        h.hold = lambda src, dst, msg: src == leader.replica_id and dst == a and type(msg) is FetchResponse
        runs[alive] = _ticks_until_a_follower_runs(h, a, leader.replica_id, alive=alive,
                                                   limit=(2 + 2 * LEADER_ALIVE_GRACE_TIMEOUTS) * t)
    assert runs[False] < 3 * t  # one randomized election timeout after the writes began
    # The same seed draws the same timeout: the grace adds whole election timeouts, and no
    # more (the first may be a tick short: the timer does not go below zero).
    assert LEADER_ALIVE_GRACE_TIMEOUTS * t - 1 <= runs[True] - runs[False] <= LEADER_ALIVE_GRACE_TIMEOUTS * t


def test_leader_alive_is_a_no_op_before_the_timer_runs_out_and_after_leader_unreachable():
    h = Harness(3, seed=2)
    leader = h.elect()
    h.tick(3)
    a = next(i for i in h.voters if i != leader.replica_id)
    core = h.cores[a]
    before = (core._election_elapsed, core._graced)
    assert core.leader_alive(leader.replica_id) == []  # not due: its timer is not touched
    assert (core._election_elapsed, core._graced) == before
    h.cut.add(leader.replica_id)
    h.apply(a, core.leader_unreachable(leader.replica_id, refused=True))
    ticks = _ticks_until_a_follower_runs(h, a, leader.replica_id, alive=True, limit=2 * CFG.election_timeout_ticks)
    assert ticks < CFG.election_timeout_ticks  # as soon as without leader_alive

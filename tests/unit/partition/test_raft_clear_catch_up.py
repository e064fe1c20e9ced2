"""clear_catch_up (unclean recovery) lets one of a flagged majority lead; the rest catch up."""

from __future__ import annotations

import random
from collections import deque

import pytest

from partition.raft import (
    AppendControl,
    AppendReplicated,
    FetchResponse,
    Flush,
    LeadershipChanged,
    LogState,
    PersistQuorumState,
    QuorumState,
    RaftCore,
    RaftStateError,
    Role,
    Send,
    TruncateFully,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)

# Every replica's log: offsets 0-4 in epoch 1, 5-9 in epoch 2 (one entry per "batch").
_EPOCHS = [1] * 5 + [2] * 5
_FLAGGED = QuorumState(epoch=2, voted_for=1, leader_id=None, needs_catch_up=True)


def _log_state(log: list[int]) -> LogState:
    starts: list[tuple[int, int]] = []
    for offset, epoch in enumerate(log):
        if not starts or starts[-1][0] != epoch:
            starts.append((epoch, offset))
    return LogState(0, len(log), len(log), tuple(starts))


class _Net:
    """Three cores with a synchronous, lossless shell: persists and flushes complete at
    once, messages are delivered in FIFO order, logs are lists of entry epochs."""

    def __init__(self, seed: int, states: dict[int, QuorumState], logs: dict[int, list[int]]):
        self.rng = random.Random(seed)
        self.logs = {n: list(log) for n, log in logs.items()}
        self.persisted = dict(states)
        self.cores = {
            n: RaftCore(n, tuple(states), rng=random.Random(seed * 10 + n), quorum_state=s,
                        log_state=_log_state(self.logs[n]))
            for n, s in states.items()
        }  # fmt: skip
        self.queue: deque[tuple[int, object]] = deque()
        self.leaders: list[tuple[int, int]] = []  # (epoch, leader) every replica announced

    def apply(self, n: int, effects: list) -> None:
        todo = deque(effects)
        core, log = self.cores[n], self.logs[n]
        while todo:
            eff = todo.popleft()
            if type(eff) is PersistQuorumState:
                self.persisted[n] = eff.state
                todo.extend(core.quorum_state_persisted(eff.version))
            elif type(eff) is Send:
                m = eff.message
                if type(m) is FetchResponse and m.read_offset is not None:
                    # The leader's shell reads at once; the follower's fills the summary.
                    records = log[m.read_offset:]
                    batches = tuple((m.read_offset + i, m.read_offset + i, e)
                                    for i, e in enumerate(records))
                    m = m.with_records(records, batches)
                self.queue.append((eff.to, m))
            elif type(eff) is AppendControl:
                assert eff.offset == len(log)
                log.append(eff.epoch)
            elif type(eff) is AppendReplicated:
                assert eff.base_offset == len(log)
                log.extend(eff.records)
                assert len(log) == eff.end_offset
            elif type(eff) is TruncateTo:
                del log[eff.offset:]
            elif type(eff) is TruncateFully:
                raise AssertionError("no retention here")
            elif type(eff) is Flush:
                todo.extend(core.flushed(len(log)))
            elif type(eff) is LeadershipChanged and eff.leader_id is not None:
                self.leaders.append((eff.epoch, eff.leader_id))

    def step(self) -> None:
        """One tick everywhere, then deliver until quiet."""
        for n, core in self.cores.items():
            self.apply(n, core.tick())
        delivered = 0
        while self.queue:
            to, m = self.queue.popleft()
            self.apply(to, self.cores[to].handle(m))
            delivered += 1
            assert delivered < 10_000, "message storm"

    def run_until(self, predicate, max_steps: int) -> bool:
        for _ in range(max_steps):
            if predicate():
                return True
            self.step()
        return predicate()

    def leader(self) -> int | None:
        found = [n for n, c in self.cores.items() if c.role is Role.LEADER]
        assert len(found) <= 1
        return found[0] if found else None


def test_clear_catch_up_clears_the_flag_durably():
    core = RaftCore(2, (1, 2, 3), rng=random.Random(1), quorum_state=_FLAGGED,
                    log_state=_log_state(_EPOCHS))
    assert core.needs_catch_up
    effects = core.clear_catch_up()
    assert effects == [PersistQuorumState(QuorumState(2, 1, None, False), 1)]
    assert not core.needs_catch_up and core.quorum_state.needs_catch_up is False
    assert core.status()["unclean_election"] is True
    # Nothing else goes out until the persist is confirmed.
    assert core.start_election() == []
    assert any(type(e) is Send for e in core.quorum_state_persisted(1))


def test_clear_catch_up_refuses_an_unflagged_replica():
    core = RaftCore(2, (1, 2, 3), rng=random.Random(1), log_state=_log_state(_EPOCHS))
    with pytest.raises(RaftStateError):
        core.clear_catch_up()
    # A single voter ignores the flag, so there is never anything to clear.
    single = RaftCore(1, (1,), rng=random.Random(1), quorum_state=_FLAGGED)
    with pytest.raises(RaftStateError):
        single.clear_catch_up()


@pytest.mark.parametrize("seed", range(6))
def test_one_cleared_replica_of_three_flagged_leads_and_the_others_catch_up(seed):
    net = _Net(seed, {n: _FLAGGED for n in (1, 2, 3)}, {n: _EPOCHS for n in (1, 2, 3)})
    # Everybody flagged: nobody runs, for many election timeouts.
    for _ in range(200):
        net.step()
    assert net.leader() is None and net.leaders == []
    assert all(c.role is Role.UNATTACHED for c in net.cores.values())

    chosen = 1 + seed % 3
    net.apply(chosen, net.cores[chosen].clear_catch_up())
    assert net.persisted[chosen].needs_catch_up is False
    net.apply(chosen, net.cores[chosen].start_election())
    assert net.run_until(lambda: net.leader() is not None, 20)
    assert net.leader() == chosen and set(net.leaders) == {(3, chosen)}
    assert not net.cores[chosen].status()["unclean_election"]

    # The others follow and clear their flags by catching up (durably), and everything up
    # to the new leader's control batch is committed.
    def caught_up():
        return all(not c.needs_catch_up for c in net.cores.values()) and all(
            c.high_watermark == len(_EPOCHS) + 1 for c in net.cores.values())

    assert net.run_until(caught_up, 50)
    assert all(not s.needs_catch_up for s in net.persisted.values())
    assert all(log == _EPOCHS + [3] for log in net.logs.values())


def test_a_flagged_voter_grants_unclean_requests_by_the_usual_log_rule_only():
    voter = RaftCore(1, (1, 2, 3), rng=random.Random(1), quorum_state=_FLAGGED,
                     log_state=_log_state(_EPOCHS))

    def answer(req: VoteRequest) -> VoteResponse:
        out = voter.handle(req)
        for eff in out:
            if type(eff) is PersistQuorumState:
                out += voter.quorum_state_persisted(eff.version)
        [reply] = [e.message for e in out if type(e) is Send]
        return reply

    # Unmarked pre-vote from an equal log: refused (the flag); marked: granted.
    assert not answer(VoteRequest(2, 3, 2, 10, True)).granted
    assert answer(VoteRequest(2, 3, 2, 10, True, True)).granted
    # Marked but the candidate's log is behind the voter's: refused.
    assert not answer(VoteRequest(3, 3, 2, 9, True, True)).granted
    # A real marked vote is granted once per epoch; the voter stays flagged.
    assert answer(VoteRequest(2, 3, 2, 10, False, True)).granted
    assert not answer(VoteRequest(3, 3, 2, 10, False, True)).granted
    assert voter.needs_catch_up and voter.quorum_state.voted_for == 2


def test_an_unflagged_voter_is_not_moved_by_the_unclean_mark():
    voter = RaftCore(1, (1, 2, 3), rng=random.Random(1),
                     quorum_state=QuorumState(2, 1, None, False),
                     log_state=_log_state(_EPOCHS + [2]))
    out = voter.handle(VoteRequest(2, 3, 2, 10, True, True))
    [reply] = [e.message for e in out if type(e) is Send]
    assert not reply.granted  # its log is ahead; the mark changes nothing


def test_a_flagged_follower_of_a_silent_leader_lets_its_lease_lapse():
    # Restarted following leader 3, which never answers (dead): after an election timeout
    # the lease is gone, so the unclean pre-vote of an operator's pick is granted.
    voter = RaftCore(1, (1, 2, 3), rng=random.Random(1),
                     quorum_state=QuorumState(2, None, 3, True), log_state=_log_state(_EPOCHS))
    assert voter.role is Role.FOLLOWER
    request = VoteRequest(2, 3, 2, 10, True, True)
    [early] = [e.message for e in voter.handle(request) if type(e) is Send]
    assert not early.granted  # within the lease
    for _ in range(2 * 20):  # twice the default election timeout
        assert not [e for e in voter.tick() if type(e) is Send and type(e.message) is VoteRequest]
    [late] = [e.message for e in voter.handle(request) if type(e) is Send]
    assert late.granted and voter.needs_catch_up and voter.role is Role.FOLLOWER

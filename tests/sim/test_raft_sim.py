"""Seeded simulations of partition Raft groups keep every safety invariant and converge."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from partition.raft import RaftCore, Role, Send


def _load_sim():
    # Test folders are not packages (--import-mode=importlib): load the harness by path.
    name = "raft_sim_cluster"
    if name not in sys.modules:
        path = Path(__file__).with_name("sim_cluster.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


sim = _load_sim()

CI_SEEDS = 200
CI_STEPS = 3_000
SLOW_SEEDS = 2_000
SLOW_STEPS = 5_000

_ONLY = os.environ.get("SIM_SEED")
_STEPS = int(os.environ.get("SIM_STEPS", CI_STEPS))


@pytest.mark.parametrize("seed", [int(_ONLY)] if _ONLY else range(CI_SEEDS))
def test_seed(seed):
    """One seed: 3 replicas for even seeds, 5 for odd; `SIM_SEED=n` replays just that one."""
    cluster = sim.run_seed(seed, _STEPS)
    assert cluster.committed_ids, "nothing was ever committed: the run proved nothing"
    final = next(iter(cluster.nodes.values())).log
    assert len(final.ids) >= len(cluster.committed_ids)


def test_runs_are_deterministic():
    a = sim.run_seed(12345, 1_500)
    b = sim.run_seed(12345, 1_500)
    assert a.stats == b.stats and a.committed_ids == b.committed_ids and a.step_no == b.step_no
    assert a.stats["elections"] >= 1 and a.stats["acked"] > 0


def test_faults_actually_happen_across_ci_seeds():
    totals: dict[str, int] = {}
    for seed in range(20):
        for key, value in sim.run_seed(seed, CI_STEPS).stats.items():
            totals[key] = totals.get(key, 0) + value
    # Crashes, transfers, re-elections and divergence truncations all occur.
    assert totals["crashes"] >= 20 and totals["transfers"] >= 5
    assert totals["elections"] >= 40 and totals["truncations"] >= 5
    assert totals["acked"] >= 500
    assert totals["damaged"] >= 3  # storage damage (flushed entries lost) is exercised too


def test_first_record_is_at_offset_zero_and_control_batches_only_follow_older_epochs():
    """Kafka's convention: a new partition's leader writes no control batch (its log is
    empty), so offset 0 holds the first record; a later leader appends its control batch
    after entries of earlier epochs, which it must commit."""
    controls = 0
    for seed in range(30):
        cluster = sim.run_seed(seed, 1_500)
        final = next(iter(cluster.nodes.values())).log
        assert final.ids[0] > 0, f"seed {seed}: offset 0 is a control batch"
        for off, wid in enumerate(final.ids):
            if wid < 0:  # a control batch (the sim gives them negative ids)
                controls += 1
                assert off > 0 and final.epochs[off - 1] < final.epochs[off], (seed, off)
    assert controls >= 10  # leader changes happened and wrote their control batches


class _CountsUnflushedEnd(RaftCore):
    """Planted bug: the leader counts its unflushed end toward the high watermark."""

    def _maybe_advance_hw(self):
        saved, self._flushed = self._flushed, self._end
        try:
            super()._maybe_advance_hw()
        finally:
            self._flushed = saved


class _VotesTwice(RaftCore):
    """Planted bug: forgets its vote, so it can vote for two candidates in one epoch."""

    def _on_vote_request(self, m):
        if not m.pre_vote and m.epoch == self._epoch and self._leader_id is None:
            self._voted_for = None
        super()._on_vote_request(m)


class _IgnoresLogOnVote(RaftCore):
    """Planted bug: grants (pre-)votes to candidates whose log is behind."""

    def _on_vote_request(self, m):
        saved = self._end, self._ep_epochs
        self._end, self._ep_epochs = -1, []  # "our log is empty": every candidate is ahead
        try:
            super()._on_vote_request(m)
        finally:
            self._end, self._ep_epochs = saved


class _SendsBeforePersist(RaftCore):
    """Planted bug: sends (vote grants, vote requests) before the quorum state is durable;
    caught when a crash cuts a quorum-state fsync short between two candidacies."""

    def _send(self, to, message):
        self._out.append(Send(to, message))


class _VotesWhileCatchingUp(RaftCore):
    """Planted bug (the jepsen-2 loss): a replica whose storage lost fsynced entries votes by
    its shortened log before it has caught up, so a leader lacking a commit can be elected."""

    def _on_vote_request(self, m):
        saved, self._needs_catch_up = self._needs_catch_up, False
        try:
            super()._on_vote_request(m)
        finally:
            self._needs_catch_up = saved


class _HeldMeansCaughtUp(RaftCore):
    """Planted bug (quiescence): the leader takes a follower whose fetch it held for one that
    has every entry it appends, counting it toward the high watermark without a fetch."""

    def _respond_fetch(self, peer, req):
        was_held = peer.held
        super()._respond_fetch(peer, req)
        if was_held:
            peer.durable_offset = self._end


class _IgnoresWakes(RaftCore):
    """Planted bug (quiescence): a quiescent follower ignores its leader's wake
    (BeginQuorumEpoch) and does not check its leader on a pre-vote, so one whose held fetch
    was answered into the void waits forever (caught as no convergence after healing)."""

    def _on_begin_quorum_epoch(self, m):
        if self._quiesced and m.epoch == self._epoch and m.sender == self._leader_id:
            return
        super()._on_begin_quorum_epoch(m)

    def _on_vote_request(self, m):
        quiesced, self._quiesced = self._quiesced, False
        epoch = self._epoch
        super()._on_vote_request(m)
        if quiesced and self._role is Role.FOLLOWER and self._epoch == epoch:
            self._quiesced = True
            self._out = [e for e in self._out if not (type(e) is Send and e.to == self._leader_id)]


def test_groups_quiesce_under_faults():
    totals = {}
    for seed in range(10):
        stats = sim.run_seed(seed, CI_STEPS).stats
        totals["quiescent_ticks"] = totals.get("quiescent_ticks", 0) + stats["quiescent_ticks"]
    assert totals["quiescent_ticks"] >= 500  # the faults above also hit quiescent groups


PLANTED_SEEDS = 500  # _CountsUnflushedEnd is the rarest catch (a leader's fsync must lag)


@pytest.mark.parametrize(
    "mutant",
    [_CountsUnflushedEnd, _VotesTwice, _IgnoresLogOnVote, _SendsBeforePersist,
     _VotesWhileCatchingUp, _HeldMeansCaughtUp, _IgnoresWakes],
)
def test_planted_bugs_are_caught(mutant):
    for seed in range(PLANTED_SEEDS):
        try:
            sim.run_seed(seed, CI_STEPS, core_cls=mutant)
        except sim.SimFailure as failure:
            assert f"seed={seed}" in str(failure) and "step=" in str(failure)
            return
    pytest.fail(f"{mutant.__name__} survived {PLANTED_SEEDS} seeds")


FIRST_TERM_SEEDS = 100


@pytest.mark.parametrize("seed", [int(_ONLY)] if _ONLY else range(FIRST_TERM_SEEDS))
def test_first_term_seed(seed):
    """The record names node 1 the first leader (raft.py "First term"): every invariant holds
    under the same faults (crashes that lose unconfirmed quorum state make a replica fresh
    again, and it then takes the record as the controller holds it by then)."""
    cluster = sim.run_seed(seed, _STEPS, first_leader=1)
    assert cluster.committed_ids, "nothing was ever committed: the run proved nothing"
    assert cluster.leaders.get(1) in (None, 1)  # nobody but the named replica led epoch 1


@pytest.mark.parametrize("seed", range(10))
def test_first_term_without_faults_has_no_election_and_quiesces(seed):
    # Short delays, no losses: an elected start split its votes at seeds 15 and 28 of 30.
    params = sim.SimParams(n=3, first_leader=2, drop_p=0.0, dup_p=0.0, long_delay_p=0.0,
                           delay_max_units=8)
    cluster = sim.Cluster(seed, params)
    cluster.faults = cluster.clients = False
    cluster.run(300)
    cores = [node.core for node in cluster.nodes.values()]
    assert cluster.leaders == {1: 2}
    assert [c.epoch for c in cores] == [1, 1, 1] and {c.leader_id for c in cores} == {2}
    assert sum(c.elections_started for c in cores) == 0
    assert all(c.quiescent for c in cores)  # idle: each follower's fetch held


class _FirstTermFollowersStayAtZero(RaftCore):
    """Planted bug: a named follower does not adopt the first term (stays at epoch 0), so it
    can vote for another replica in epoch 1, the epoch the named leader leads."""

    def begin_first_term(self, leader_id, leader_epoch):
        if leader_id != self.replica_id:
            return []
        return super().begin_first_term(leader_id, leader_epoch)


def test_first_term_planted_bug_is_caught():
    for seed in range(PLANTED_SEEDS):
        try:
            sim.run_seed(seed, CI_STEPS, core_cls=_FirstTermFollowersStayAtZero, first_leader=1)
        except sim.SimFailure as failure:
            assert "two leaders in epoch 1" in str(failure) or "voted for" in str(failure)
            return
    pytest.fail(f"_FirstTermFollowersStayAtZero survived {PLANTED_SEEDS} seeds")


@pytest.mark.slow
def test_many_seeds_long():
    failures = []
    for seed in range(CI_SEEDS, CI_SEEDS + SLOW_SEEDS):
        try:
            sim.run_seed(seed, SLOW_STEPS)
        except sim.SimFailure as failure:
            failures.append(str(failure).splitlines()[0])
            if len(failures) >= 3:
                break
    assert not failures, "\n".join(failures)

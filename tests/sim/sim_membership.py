"""The Raft simulation (sim_cluster.py) with membership changes: spare nodes join as learners,
learners are promoted, voters and learners (the leader too) are removed, under every fault
of the base simulation.

Beyond the base checks (one leader per epoch, one vote per voter per epoch, log matching,
committed entries never lost or changed, convergence), after every step:

* the committed prefix survives every membership that can still elect a leader: no majority
  of the latest committed membership, nor of any membership entry above the committed
  prefix in a log that holds that prefix, lacks its last entry (counting a damaged replica
  that has not caught up as holding what it lost, as the base check does). That is the
  quorum-intersection property single-server changes keep; a removed voter counted toward
  a commit, or two changes in flight, break it;
* the single-server rule itself: no log that holds the committed prefix has more than one
  membership entry above it (a leader appends a change only once the last one committed).

At the end, the members of the final membership hold identical logs.
"""

from __future__ import annotations

from partition.raft import Membership, Role
from raftlog.base.errors import InvalidReplicaAssignmentError, ReassignmentInProgressError

from raft_sim_cluster import Cluster, RaftCore, SimFailure, SimParams


class MembershipCluster(Cluster):
    def __init__(self, seed: int, params: SimParams, reconfig_p: float = 0.45) -> None:
        super().__init__(seed, params)
        self.reconfig_p = reconfig_p
        self.majority = len(self.universe) // 2 + 1  # crashes keep most of the nodes up
        self.initial = Membership.of(self.voters)
        self.committed_members: dict[int, Membership] = {}  # offset -> membership, committed
        for key in ("changes", "refused", "removed_leader", "max_voters"):
            self.stats[key] = 0

    # --------------------------------------------------------------------- faults

    def _nemesis(self) -> None:
        if self.rng.random() >= self.reconfig_p:
            super()._nemesis()
            return
        leaders = [nd for nd in self.nodes.values() if nd.up and nd.core.role is Role.LEADER]
        if not leaders:
            return
        node = leaders[self.rng.randrange(len(leaders))]
        current = node.core.membership
        voters, learners = set(current.voters), set(current.learners)
        outsiders = [i for i in self.universe if i not in voters | learners]
        choices = []
        # Growth is drawn twice as often as shrinking, so memberships of 4 and 5 voters occur.
        if outsiders:
            choices += [("add learner", self.rng.choice(outsiders))] * 2
        if learners:
            choices += [("promote", self.rng.choice(sorted(learners)))] * 2
            choices.append(("remove learner", self.rng.choice(sorted(learners))))
        # A damaged replica may not vote until it caught up: with it a majority of a small
        # membership, nobody could be elected without an operator (raft.py "Damaged storage").
        flagged = any(map(self._flagged, self.nodes.values()))
        if len(voters) > (3 if flagged else 1):
            choices.append(("remove voter", self.rng.choice(sorted(voters))))
        what, who = self.rng.choice(choices)
        if what == "add learner":
            learners.add(who)
        elif what == "promote":
            learners.discard(who)
            voters.add(who)
        elif what == "remove learner":
            learners.discard(who)
        else:
            voters.discard(who)
        target = Membership.of(voters, learners)
        try:
            effects = node.core.change_membership(target)
        except (ReassignmentInProgressError, InvalidReplicaAssignmentError) as refused:
            self.stats["refused"] += 1
            self.trace.append((self.now, "membership refused", node.id, str(refused)))
            return
        self.stats["changes"] += 1
        self.stats["max_voters"] = max(self.stats["max_voters"], len(target.voters))
        if what == "remove voter" and who == node.id:
            self.stats["removed_leader"] += 1
        self.trace.append((self.now, what, node.id, (who, target)))
        self._apply(node, effects)

    def _damage(self, node) -> None:
        """Storage damage only where the damaged replica stays a minority of every
        membership in force (see the comment in `_nemesis`); a plain crash otherwise."""
        sizes = [len(self._committed_membership().voters)]
        for nd in self.nodes.values():
            sizes.extend(len(m.voters) for _, m in nd.log.memberships(len(self.committed_ids)))
        if min(sizes) < 3:
            self._crash(node)
        else:
            super()._damage(node)

    # --------------------------------------------------------------------- checks

    def _on_hw(self, node, hw: int) -> None:
        before = len(self.committed_ids)
        super()._on_hw(node, hw)
        if len(self.committed_ids) > before:
            self.committed_members.update(node.log.memberships(before, len(self.committed_ids)))

    def _committed_membership(self) -> Membership:
        if not self.committed_members:
            return self.initial
        return self.committed_members[max(self.committed_members)]

    def _check_durable_majority(self) -> None:
        n_committed = len(self.committed_ids)
        if n_committed == 0:
            return
        last = n_committed - 1
        cid, cep = self.committed_ids[last], self.committed_epochs[last]
        holders = set()
        memberships = {self._committed_membership()}
        for node in self.nodes.values():
            log = node.log
            if log.end >= n_committed and log.ids[last] == cid and log.epochs[last] == cep:
                above = log.memberships(n_committed)
                if len(above) > 1:
                    self._fail(f"node {node.id} holds {len(above)} uncommitted membership changes:"
                               f" {above}")
                memberships.update(m for _, m in above)
                if log.flushed >= n_committed:
                    holders.add(node.id)
                    continue
            if self._flagged(node) and node.lost.get(last) == (cep, cid):
                holders.add(node.id)  # lost it to damage; barred from votes until it is back
        for m in memberships:
            need = len(m.voters) - len(m.voters) // 2  # every majority of m meets the holders
            if len(holders & set(m.voters)) < need:
                self._fail(f"committed prefix [0, {n_committed}) is durable on {sorted(holders)},"
                           f" which a majority of voters {m.voters} can avoid")

    def _members(self) -> list:
        leaders = [nd for nd in self.nodes.values() if nd.core.role is Role.LEADER]
        membership = leaders[0].core.membership if len(leaders) == 1 else self.initial
        return [self.nodes[i] for i in membership.members]

    def _converged(self) -> bool:
        nodes = self._members()
        leaders = [nd for nd in self.nodes.values() if nd.core.role is Role.LEADER]
        if len(leaders) != 1 or not leaders[0].core.may_accept_writes:
            return False
        if leaders[0].core.membership_change_pending:
            return False
        end = leaders[0].log.end
        for nd in nodes:
            if nd.log.end != end or nd.core.high_watermark != end or nd.log.flushed != end:
                return False
        return True

    def _final_checks(self) -> None:
        saved = self.nodes
        self.nodes = {nd.id: nd for nd in self._members()}
        try:
            super()._final_checks()
        finally:
            self.nodes = saved


def run_membership_seed(seed: int, steps: int, core_cls: type = RaftCore) -> MembershipCluster:
    """One seeded run with membership changes: 3 initial voters and 2 spares (even seeds) or
    1 voter and 3 spares (odd seeds: the group grows from one), then heal and converge."""
    n, spares = (3, 2) if seed % 2 == 0 else (1, 3)
    cluster = MembershipCluster(seed, SimParams(n=n, spares=spares, core_cls=core_cls))
    cluster.run(steps)
    cluster.quiesce()
    return cluster

__all__ = ["MembershipCluster", "SimFailure", "run_membership_seed"]

"""Replica moves, the partition side (docs/reassignment.md): every partition this broker
leads is steered, one Raft membership change at a time, toward the replicas the metadata
image asks for (the target of a move in progress, else the replicas); once its committed
membership is the target, the controller is told, and it ends the move.

`next_step` (pure) picks the change: drop a learner that is not wanted; add a wanted replica
as a learner; promote a learner (the core refuses while it is behind: it catches up first);
remove a voter that is not wanted, never the leader while another can go; the leader itself
last, by handing leadership to a wanted voter first (the new leader removes it).

`Mover.run` (the shell) asks every MOVE_INTERVAL_S. A refusal (a change still in flight, a
learner behind, a transfer target behind) is only "not yet": the next round asks again, so a
move resumes after any failover, of the partition leader or of the controller.
A round asks only what can have changed (issue 46: at 10,000 partitions a pass over every
leader every 0.2 s was 11% of a survivor's samples after a kill): the leaders of topics whose
image changed other than in leaders, the leaderships won since (`leadership_changed`, the
replica manager's listener), and those not settled last time (a step taken or refused, a
move in progress); every FULL_PASS_S, all of them.
Throttling moves' replication (Kafka's replication.throttled.rate) is not built.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import trio

from partition.raft import Membership
from raftlog.base.errors import RaftlogError
from raftlog.base.eventlog import log_event

__all__ = ["MOVE_INTERVAL_S", "Mover", "next_step"]

logger = logging.getLogger(__name__)

MOVE_INTERVAL_S = 0.2
FULL_PASS_S = 10.0  # a round over every leader at least this often, whatever changed
REPORT_INTERVAL_S = 1.0  # a finished move is reported again at most this often until the image shows it


def next_step(current: Membership, target: tuple[int, ...], leader_id: int) -> Membership | int | None:
    """The next membership from `current` toward voters `target` (no learners), or the
    broker to hand leadership to (only the leader itself is left to remove), or None (there)."""
    voters, learners, want = set(current.voters), set(current.learners), set(target)
    unwanted = sorted(learners - want)
    if unwanted:
        return Membership.of(voters, learners - {unwanted[0]})
    missing = [r for r in target if r not in voters and r not in learners]
    if missing:
        return Membership.of(voters, learners | {missing[0]})
    if learners:
        joining = min(learners)
        return Membership.of(voters | {joining}, learners - {joining})
    leaving = sorted(voters - want)
    others = [v for v in leaving if v != leader_id]
    if others:
        return Membership.of(voters - {others[0]}, learners)
    if leaving:
        return next(r for r in target if r in voters)
    return None


class Mover:
    """Steers the led partitions of one broker (module docstring). `replicas()` lists the
    broker's replicas, `image()` the metadata image (or None), `metadata` has
    `report_partition_membership` (metadata/service.py)."""

    def __init__(self, replicas: Callable[[], list[Any]], image: Callable[[], Any], metadata: Any,
                 clock: Callable[[], float] = trio.current_time):
        self._replicas = replicas
        self._image = image
        self._metadata = metadata
        self._clock = clock
        self._reported: dict[tuple[str, int], float] = {}
        self.changes = 0  # membership changes appended (for tests and logs)
        self.asked = 0  # leaders asked (`_steer`), for tests: a quiet round asks none
        self._due: dict[tuple[str, int], Any] = {}  # key -> replica to ask next round
        self._topics: Any = None  # image.topics at the last round
        self._full_at = float("-inf")

    def leadership_changed(self, r: Any) -> None:
        """A replica here gained or lost leadership (manager.add_leadership_listener)."""
        if r.is_leader:
            self._due[(r.topic, r.partition)] = r

    def _round(self, image: Any) -> list[Any]:
        """The leaders to ask this round (module docstring)."""
        now = self._clock()
        seen, self._topics = self._topics, image.topics
        due, self._due = self._due, {}
        if now >= self._full_at or seen is None:
            self._full_at = now + FULL_PASS_S
            return list(self._replicas())
        if seen is not image.topics:
            changed = {t.name for tid, t in image.topics.items()
                       if seen.get(tid) is not t and not t.only_leaders_moved_since(seen.get(tid))}
            if changed:
                for r in self._replicas():
                    if r.topic in changed:
                        due[(r.topic, r.partition)] = r
        return list(due.values())

    async def run(self) -> None:
        while True:
            await trio.sleep(MOVE_INTERVAL_S)
            image = self._image()
            if image is not None:
                await self.round(image)

    async def round(self, image: Any) -> None:
        """One round: ask what can have changed (module docstring)."""
        for r in self._round(image):
            if r.is_leader and r.online and not r.closed:
                p = image.partition(r.topic, r.partition)
                if p is not None and not await self._steer(r, p):
                    self._due[(r.topic, r.partition)] = r  # ask again next round

    async def _steer(self, r: Any, p: Any) -> bool:
        """Take the next step for `r`; True when it is settled (nothing to do, no move)."""
        self.asked += 1
        core = r.core
        if core.membership_change_pending:
            return False
        step = next_step(core.membership, p.target_replicas, r.replica_id)
        try:
            if step is None:
                if not p.reassigning:
                    return True
                await self._report(r, core.committed_membership)
            elif isinstance(step, int):
                await r.transfer_leadership(step)
            else:
                await r.change_membership(step)
                self.changes += 1
                log_event(logger, "replica_membership_change", topic=r.topic, partition=r.partition,
                          voters=list(step.voters), learners=list(step.learners))
        except (RaftlogError, ValueError) as exc:  # not yet: the next round asks again
            log_event(logger, "replica_membership_not_yet", level=logging.DEBUG, topic=r.topic,
                      partition=r.partition, reason=str(exc))
        return False

    async def _report(self, r: Any, membership: Membership) -> None:
        key = (r.topic, r.partition)
        now = self._clock()
        if now - self._reported.get(key, -REPORT_INTERVAL_S) < REPORT_INTERVAL_S:
            return
        self._reported[key] = now
        await self._metadata.report_partition_membership(
            r.topic, r.partition, membership.voters, membership.learners)

"""Replica moves, the partition side (docs/reassignment.md): every partition this broker
leads is steered, one Raft membership change at a time, toward the replicas the metadata
image asks for (the target of a move in progress, else the replicas); once its committed
membership is the target, the controller is told, and it ends the move.

`next_step` (pure) picks the change: drop a learner that is not wanted; add a wanted replica
as a learner; promote a learner (the core refuses while it is behind: it catches up first);
remove a voter that is not wanted, never the leader while another can go; the leader itself
last, by handing leadership to a wanted voter first (the new leader removes it).

`Mover.run` (the shell) asks every MOVE_INTERVAL_S. A led partition found where it should be
(no step, no move in progress) is settled: later passes skip it while its topic's image and
its core's membership are the same objects (both immutable, replaced on any change), so an
idle broker's pass costs a dict lookup per leader, not a `next_step` (issue 46: at 3,000
partitions the passes were a quarter of an idle node's samples). A refusal (a change still in flight, a
learner behind, a transfer target behind) is only "not yet": the next round asks again, so a
move resumes after any failover, of the partition leader or of the controller.
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
        # key -> (its topic's image, its core's membership) when found settled (module docstring)
        self._settled: dict[tuple[str, int], tuple[Any, Membership]] = {}
        self.changes = 0  # membership changes appended (for tests and logs)

    async def run(self) -> None:
        while True:
            await trio.sleep(MOVE_INTERVAL_S)
            image = self._image()
            if image is None:
                continue
            topics, settled, leaders = image.topics, self._settled, self._replicas()
            if len(settled) > 2 * len(leaders) + 1000:  # bounded: forget partitions led no more
                settled.clear()
            for r in leaders:
                if r.is_leader and r.online and not r.closed:
                    was = settled.get((r.topic, r.partition))
                    if was is not None and was[0] is topics.get(r.topic_id) and was[1] is r.core.membership:
                        continue
                    p = image.partition(r.topic, r.partition)
                    if p is not None:
                        await self._steer(r, p, topics.get(r.topic_id))

    async def _steer(self, r: Any, p: Any, topic: Any = None) -> None:
        core = r.core
        if core.membership_change_pending:
            return
        membership = core.membership
        step = next_step(membership, p.target_replicas, r.replica_id)
        try:
            if step is None:
                if p.reassigning:
                    await self._report(r, core.committed_membership)
                elif topic is not None:
                    self._settled[(r.topic, r.partition)] = (topic, membership)
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

    async def _report(self, r: Any, membership: Membership) -> None:
        key = (r.topic, r.partition)
        now = self._clock()
        if now - self._reported.get(key, -REPORT_INTERVAL_S) < REPORT_INTERVAL_S:
            return
        self._reported[key] = now
        await self._metadata.report_partition_membership(
            r.topic, r.partition, membership.voters, membership.learners)

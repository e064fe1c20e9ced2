"""The replication throttles (Kafka's follower.replication.throttled.rate and
leader.replication.throttled.rate, broker settings here): the bytes/s that the replicas being
added by a move (learners of their Raft group, partition/mover.py) may take in catching up, so
a move does not starve the producers whose acks=all waits on the same links and disks
(docs/elastic.md).

Follower side (`deliver_throttled`): a learner's catch-up answer is charged when it arrives;
once the bytes charged run ahead of the rate, its delivery to the replica (and so its next
fetch) waits until they fit. Leader side (`hold_learner_fetch`, `charge_learner_answer`): the
records a leader sends to learners are charged when they leave; while the bytes charged run
ahead of the rate, a learner's next fetch waits before it reaches the leader's replica. Voters
are never held back, and a rate of 0 means no limit. The core is pure (`Throttle.delay_s`
takes the time); the functions below are the shell the replication links call.
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["Throttle", "deliver_throttled", "hold_learner_fetch", "charge_learner_answer"]


class Throttle:
    """A byte-rate limit: `delay_s(nbytes, now_s)` charges `nbytes` and says how long their
    delivery waits so that the bytes delivered never run ahead of `rate_bytes_per_s`."""

    def __init__(self, rate_bytes_per_s: int):
        if rate_bytes_per_s < 0:
            raise ValueError("rate_bytes_per_s must be >= 0")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._free_at_s = 0.0
        self.throttled_bytes = 0  # delivered late (for /metrics and tests)

    def delay_s(self, nbytes: int, now_s: float) -> float:
        if self.rate_bytes_per_s == 0 or nbytes <= 0:
            return 0.0
        start = max(now_s, self._free_at_s)
        self._free_at_s = start + nbytes / self.rate_bytes_per_s
        delay = start - now_s
        if delay > 0:
            self.throttled_bytes += nbytes
        return delay

    def debt_s(self, now_s: float) -> float:
        """How long until the bytes charged so far fit the rate (0: they do now)."""
        return max(0.0, self._free_at_s - now_s) if self.rate_bytes_per_s else 0.0


def _learning(replica: Any) -> bool:
    core = getattr(replica, "core", None)
    return core is not None and replica.replica_id in core.membership.learners


def _learner_of_leader(replica: Any, broker_id: int) -> bool:
    core = getattr(replica, "core", None)
    return core is not None and broker_id in core.membership.learners


def hold_learner_fetch(nursery: trio.Nursery | None, throttle: Throttle | None, replica: Any,
                       broker_id: int, message: Any) -> bool:
    """Leader side: whether the fetch `message` of learner `broker_id` to the leader
    `replica` waits (then it is delivered later from `nursery`; the caller must not)."""
    if throttle is None or nursery is None or not _learner_of_leader(replica, broker_id):
        return False
    delay = throttle.debt_s(trio.current_time())
    if delay <= 0:
        return False
    _deliver_later(nursery, delay, replica, message)
    return True


def _deliver_later(nursery: trio.Nursery, delay_s: float, replica: Any, message: Any) -> None:
    async def later() -> None:
        await trio.sleep(delay_s)
        await replica.deliver(message)

    nursery.start_soon(later)


def charge_learner_answer(throttle: Throttle | None, replica: Any, broker_id: int, message: Any) -> None:
    """Leader side: charge the records of an answer leaving for learner `broker_id`."""
    records = getattr(message, "records", None)
    if throttle is not None and records and _learner_of_leader(replica, broker_id):
        throttle.delay_s(len(records), trio.current_time())


def deliver_throttled(nursery: trio.Nursery | None, throttle: Throttle | None, replica: Any, message: Any) -> bool:
    """Whether `message` (a fetch answer for `replica`) is held back by `throttle`: then it is
    delivered later from `nursery`, else the caller delivers it now."""
    records = getattr(message, "records", None)
    if throttle is None or nursery is None or not records or not _learning(replica):
        return False
    delay = throttle.delay_s(len(records), trio.current_time())
    if delay <= 0:
        return False
    _deliver_later(nursery, delay, replica, message)
    return True

"""The replication throttles (Kafka's follower.replication.throttled.rate and
leader.replication.throttled.rate, broker settings here): the bytes/s that the replicas being
added by a move (learners of their Raft group, partition/mover.py) may take in catching up, so
a move does not starve the producers whose acks=all waits on the same links and disks
(docs/elastic.md).

Both sides pace the learner's FETCHES, never its answers: an answer is charged and used at
once, and the learner's next fetch waits until the bytes charged fit the rate. (Holding the
answers back instead, as this module once did, let the learner's core time out and fetch
its old position again; the late answer then no longer matched its fetch and was dropped,
and the move ran at 0.03 of the rate: issue 44.)

Follower side (`charge_learning`, `pace_learner_fetch`): the records of a learner's catch-up
answer are charged when they arrive; its next fetch leaves for the leader once they fit.
Leader side (`charge_learner_answer`, `hold_learner_fetch`): the records a leader sends to
learners are charged when they leave; a learner's next fetch waits before it reaches the
leader's replica. A held fetch is one per partition, the newest (the core re-sends an
unanswered fetch with a new id: only that one is answered and charged). A fetch leaves
LEAD_S before the debt is paid, so the round trip (a 4 MiB cold read, its send and its write
on a loaded machine) does not come out of the rate: over any span the bytes run at most
LEAD_S of the rate and one answer ahead (Kafka's replication quota is judged over a window of
samples too). Time lost to a round trip slower than that (debt down to 0: a stalled disk) is
carried over, up to CREDIT_S: the schedule may lag the clock by that much, so later fetches
make it up (a token bucket's burst credit); behind it longer than IDLE_S is idle, and the
next bytes start a fresh schedule. A fetch held on the follower side tells the learner's core
when it leaves (`fetch_left`), and a learner's core waits an election timeout before it asks
again (one held on the leader side cannot tell it), so it does not ask again for an answer on
its way (those answers were charged twice: 6 % of the rate, 20 % with the leader side only). With these (and learners fetching
while they flush, partition/raft.py) a throttled move's catch-up runs at 0.97 of the rate
(1.01 with the leader side only; issue 44, docs/elastic.md). Voters are never held back, and a rate of 0
means no limit. The core is pure (`Throttle.delay_s` and `debt_s` take the time); the
functions below are the shell the replication links call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

__all__ = ["LEAD_S", "CREDIT_S", "IDLE_S", "Throttle", "charge_learning", "pace_learner_fetch", "hold_learner_fetch",
           "charge_learner_answer"]

LEAD_S: Final = 1.0  # a paced fetch leaves this long before the bytes charged fit the rate (a 1 s burst)
CREDIT_S: Final = 1.0  # time lost to a slow round trip that later fetches may make up (the deficit carried over)
IDLE_S: Final = 5.0  # behind the schedule longer than this: idle, not slow (no credit)


class Throttle:
    """A byte-rate limit: `delay_s(nbytes, now_s)` charges `nbytes` and says how long their
    delivery waits so that the bytes delivered never run ahead of `rate_bytes_per_s`; it
    also holds the fetches it paces (`hold`: one per key, the newest)."""

    def __init__(self, rate_bytes_per_s: int):
        if rate_bytes_per_s < 0:
            raise ValueError("rate_bytes_per_s must be >= 0")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._free_at_s: float | None = None  # None: idle (nothing charged yet)
        self.throttled_bytes = 0  # charged while in debt (for /metrics and tests)
        self._held: dict[Any, Any] = {}  # key -> the newest fetch paced under it

    def delay_s(self, nbytes: int, now_s: float) -> float:
        if self.rate_bytes_per_s == 0 or nbytes <= 0:
            return 0.0
        free_at = self._free_at_s
        if free_at is None or now_s - free_at > IDLE_S:
            start = now_s  # idle: the schedule starts afresh, no credit
        else:  # behind the schedule by up to CREDIT_S: those bytes may still come, faster
            start = max(free_at, now_s - CREDIT_S)
        self._free_at_s = start + nbytes / self.rate_bytes_per_s
        delay = max(0.0, start - now_s)
        if delay > 0:
            self.throttled_bytes += nbytes
        return delay

    def debt_s(self, now_s: float) -> float:
        """How long until the bytes charged so far fit the rate (0: they do now)."""
        if not self.rate_bytes_per_s or self._free_at_s is None:
            return 0.0
        return max(0.0, self._free_at_s - now_s)

    def wait_s(self, now_s: float) -> float:
        """How long a paced fetch waits now (0: it goes; under a millisecond is rounding)."""
        wait = self.debt_s(now_s) - LEAD_S
        return wait if wait > 0.001 else 0.0

    def holds(self, key: Any) -> bool:
        return key in self._held

    def hold(self, nursery: trio.Nursery, key: Any, message: Any,
             send: Callable[[Any], Awaitable[None] | None]) -> None:
        """Hold `message` under `key` until the debt allows (replacing an older one held
        there), then `send` it."""
        first = key not in self._held
        self._held[key] = message
        if first:
            nursery.start_soon(self._release, key, send)

    async def _release(self, key: Any, send: Callable[[Any], Awaitable[None] | None]) -> None:
        while (wait := self.wait_s(trio.current_time())) > 0:
            await trio.sleep(wait)  # the rate may have been lowered, or others charged
        message = self._held.pop(key, None)
        if message is not None:
            sent = send(message)
            if sent is not None:
                await sent


def _learning(replica: Any) -> bool:
    core = getattr(replica, "core", None)
    return core is not None and replica.replica_id in core.membership.learners


def _learner_of_leader(replica: Any, broker_id: int) -> bool:
    core = getattr(replica, "core", None)
    return core is not None and broker_id in core.membership.learners


def charge_learning(throttle: Throttle | None, replica: Any, message: Any) -> None:
    """Follower side: charge the records of an answer arriving for `replica` while it learns."""
    records = getattr(message, "records", None)
    if throttle is not None and records and _learning(replica):
        throttle.delay_s(len(records), trio.current_time())


def pace_learner_fetch(nursery: trio.Nursery | None, throttle: Throttle | None, replica: Any,
                       leader: int, message: Any, send: Callable[[Any], None]) -> bool:
    """Follower side: whether the fetch `message` of the learning `replica` to broker
    `leader` waits (then `send(message)` is called later, unless a newer fetch replaced it;
    the caller must not send it)."""
    if throttle is None or nursery is None or not _learning(replica):
        return False
    key = (leader, replica.topic, replica.partition)
    if throttle.wait_s(trio.current_time()) <= 0 and not throttle.holds(key):
        return False
    throttle.hold(nursery, key, message, send)
    return True


def hold_learner_fetch(nursery: trio.Nursery | None, throttle: Throttle | None, replica: Any,
                       broker_id: int, message: Any) -> bool:
    """Leader side: whether the fetch `message` of learner `broker_id` to the leader
    `replica` waits (then it is delivered later, unless a newer fetch replaced it; the
    caller must not deliver it)."""
    if throttle is None or nursery is None or not _learner_of_leader(replica, broker_id):
        return False
    key = (broker_id, replica.topic, replica.partition)
    if throttle.wait_s(trio.current_time()) <= 0 and not throttle.holds(key):
        return False
    throttle.hold(nursery, key, message, replica.deliver)
    return True


def charge_learner_answer(throttle: Throttle | None, replica: Any, broker_id: int, message: Any) -> None:
    """Leader side: charge the records of an answer leaving for learner `broker_id`."""
    records = getattr(message, "records", None)
    if throttle is not None and records and _learner_of_leader(replica, broker_id):
        throttle.delay_s(len(records), trio.current_time())

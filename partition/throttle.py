"""The replication throttle (Kafka's follower.replication.throttled.rate, a broker setting
here): the bytes/s that the replicas this broker is adding by a move (learners of their
Raft group, partition/mover.py) may take in catching up, so a move does not starve the
producers whose acks=all waits on the same links and disks (docs/elastic.md).

A learner's catch-up answer is charged when it arrives; once the bytes charged run ahead of
the rate, its delivery to the replica (and so its next fetch) waits until they fit. Voters
are never held back, and a rate of 0 means no limit. The core is pure (`Throttle.delay_s`
takes the time); `deliver_throttled` is the shell the replication links call.
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["Throttle", "deliver_throttled"]


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


def _learning(replica: Any) -> bool:
    core = getattr(replica, "core", None)
    return core is not None and replica.replica_id in core.membership.learners


def deliver_throttled(nursery: trio.Nursery | None, throttle: Throttle | None, replica: Any, message: Any) -> bool:
    """Whether `message` (a fetch answer for `replica`) is held back by `throttle`: then it is
    delivered later from `nursery`, else the caller delivers it now."""
    records = getattr(message, "records", None)
    if throttle is None or nursery is None or not records or not _learning(replica):
        return False
    delay = throttle.delay_s(len(records), trio.current_time())
    if delay <= 0:
        return False

    async def later() -> None:
        await trio.sleep(delay)
        await replica.deliver(message)

    nursery.start_soon(later)
    return True

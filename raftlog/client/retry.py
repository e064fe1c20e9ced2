"""Retry timing: bounded exponential backoff with jitter under a total deadline.

Pure: randomness comes from an injected `random.Random`, time from the caller's `now_ms`.
"""

from __future__ import annotations

import random

__all__ = ["RetryPolicy"]


class RetryPolicy:
    """Bounded exponential backoff with jitter, and a total deadline.

    Attempt n (1-based) waits min(backoff_max_ms, backoff_ms * 2**(n-1)) scaled by a
    uniform factor in [1 - jitter, 1 + jitter], then capped at backoff_max_ms again, so no
    wait ever exceeds backoff_max_ms. Randomness comes from the injected Random only.
    """

    def __init__(
        self, rng: random.Random, backoff_ms: int = 100, backoff_max_ms: int = 1000, jitter: float = 0.2
    ):
        if backoff_ms <= 0 or backoff_max_ms < backoff_ms or not 0 <= jitter < 1:
            raise ValueError("need 0 < backoff_ms <= backoff_max_ms and 0 <= jitter < 1")
        self.rng = rng
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.jitter = jitter

    def backoff(self, attempt: int) -> int:
        base = min(self.backoff_max_ms, self.backoff_ms * (1 << min(max(attempt, 1) - 1, 30)))
        scaled = base * (1 + self.jitter * (2 * self.rng.random() - 1))
        return max(1, min(self.backoff_max_ms, int(scaled)))

    def next_attempt_ms(self, attempt: int, now_ms: int, deadline_ms: int) -> int | None:
        """When to try again after `attempt` failed, or None when that passes the deadline."""
        t = now_ms + self.backoff(attempt)
        return t if t < deadline_ms else None

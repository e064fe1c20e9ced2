"""The one clock a client shell reads: monotonic time (deadlines, backoffs, linger) and wall
time (record timestamps), from one injected object, so a test can drive a shell's time.

The cores never read a clock (`now_ms` is an argument); each shell owns exactly one `Clock`
and reads nothing else: the blocking shell's default is `SYSTEM_CLOCK` (time.monotonic,
time.time); the trio shell's default (`network_aio.TRIO_CLOCK`) reads trio's clock, so
`trio.testing.MockClock` drives the core's deadlines and trio's timeouts alike.

`monotonic_s` / `wall_s` are plain callables returning seconds, kept as attributes so a hot
path can bind one to a local (the producer's per-record timestamp costs one C call).
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["Clock", "SYSTEM_CLOCK"]


class Clock:
    """`monotonic_ms()` for deadlines, `wall_ms()` for timestamps (milliseconds, ints)."""

    __slots__ = ("monotonic_s", "wall_s")

    def __init__(self, monotonic_s: Callable[[], float] = time.monotonic,
                 wall_s: Callable[[], float] = time.time):
        self.monotonic_s = monotonic_s
        self.wall_s = wall_s

    def monotonic_ms(self) -> int:
        return int(self.monotonic_s() * 1000)

    def wall_ms(self) -> int:
        return int(self.wall_s() * 1000)

    def __repr__(self) -> str:
        return f"Clock(monotonic_s={self.monotonic_s!r}, wall_s={self.wall_s!r})"


SYSTEM_CLOCK = Clock()

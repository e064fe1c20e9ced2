"""Small trio helpers shared by the node's hot paths."""

from __future__ import annotations

from typing import Protocol

import trio


class _Acquirable(Protocol):
    def acquire_nowait(self) -> None: ...

    async def acquire(self) -> None: ...


async def acquire_free(resource: _Acquirable) -> None:
    """Acquire a trio Lock, Semaphore or CapacityLimiter: at once when it is free, without
    the pass through the scheduler that `acquire()` makes even then (on a path taken per
    request or per fetch, that pass let whatever arrived meanwhile run first); else wait
    as `acquire()` does. The caller's next blocking call is its checkpoint."""
    try:
        resource.acquire_nowait()
    except trio.WouldBlock:
        await resource.acquire()

"""A share-group consumer (KIP-932), trio shell: share_session.py's procedures over a trio
Admin (`from raftlog import aio`; `aio.ShareConsumer`). The same API as the blocking
ShareConsumer (share_consumer.py), awaited:

    async with aio.ShareConsumer("127.0.0.1:9093", "jobs", auto_offset_reset="earliest") as c:
        c.subscribe(["orders"])
        for r in await c.poll(timeout_ms=1000):
            c.acknowledge(r, "accept")       # explicit mode; implicit accepts with the next poll
        await c.commit_sync()

Use it with `async with` (its Admin's connections live in that block). Concurrency: one task
at a time per consumer (not task-safe); a cancelled call leaves the records it held to their
locks.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import trio

from raftlog.base.errors import RaftlogError
from raftlog.client.aio import Admin
from raftlog.client.clock import Clock
from raftlog.client.network_aio import TRIO_CLOCK
from raftlog.client.security import SecurityOption
from raftlog.client.share_session import EMPTY_POLL_WAIT_MS, MAX_POLL_RECORDS, Procedure, ShareRecord, ShareSession

__all__ = ["ShareConsumer"]


class ShareConsumer:
    """See the module docstring."""

    def __init__(self, bootstrap: str | Iterable[str], group_id: str, *, acknowledgement_mode: str = "implicit",
                 max_poll_records: int = MAX_POLL_RECORDS, auto_offset_reset: str = "latest", client_id: str = "",
                 max_partition_fetch_bytes: int = 1 << 20, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = TRIO_CLOCK, security: SecurityOption = None):
        self.session = ShareSession(group_id, acknowledgement_mode=acknowledgement_mode,
                                    max_poll_records=max_poll_records, auto_offset_reset=auto_offset_reset,
                                    client_id=client_id, max_partition_fetch_bytes=max_partition_fetch_bytes)
        self._clock = clock
        self._admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, rng=rng, clock=clock,
                            security=security)
        self._closed = False

    async def _drive(self, procedure: Procedure) -> Any:
        try:
            effect = next(procedure)
            while True:
                try:
                    answer = await self._admin.request(effect.request, route=effect.route)
                except RaftlogError as exc:
                    effect = procedure.throw(exc)
                else:
                    effect = procedure.send(answer)
        except StopIteration as stop:
            return stop.value

    def subscribe(self, topics: Sequence[str]) -> None:
        self.session.subscribe(topics)

    def acknowledge(self, record: ShareRecord, ack_type: str = "accept") -> None:
        self.session.acknowledge(record, ack_type)

    async def commit_sync(self) -> dict[tuple[str, int], RaftlogError | None]:
        return await self._drive(self.session.commit())

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ShareRecord]:
        if self._closed:
            raise RuntimeError("this ShareConsumer is closed")
        limit = self.session.start_poll(max_records)
        deadline = self._clock.monotonic_ms() + timeout_ms
        while True:
            await self._drive(self.session.heartbeat(self._clock.monotonic_ms()))
            got = await self._drive(self.session.fetch_round(limit))
            left = deadline - self._clock.monotonic_ms()
            if got or left <= 0:
                return got
            await trio.sleep(min(EMPTY_POLL_WAIT_MS, left) / 1000)  # nothing yet: ask again shortly

    async def aclose(self) -> None:
        """Send the acknowledgements and leave the group (the Admin closes at the `async with`'s end)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._drive(self.session.close(self._clock.monotonic_ms()))
        except RaftlogError:
            pass  # the locks run out on the leaders; the coordinator's session expires the member

    async def __aenter__(self) -> ShareConsumer:
        await self._admin.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            if exc_info[0] is None:
                await self.aclose()
        finally:
            return await self._admin.__aexit__(*exc_info)

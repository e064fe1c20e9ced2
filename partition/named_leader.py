"""Requests held for a partition this broker is named the first leader of (issue 46).

A new partition's record may name this broker its first leader (partition/raft.py "First
term"; the controller names one when every replica's broker supports it, metadata/features.py
"Broker capabilities") before the replica here has opened or led, and Metadata answers send
clients here from that moment: Kafka's broker is told of its leadership before any client can
ask, a raftlog replica may still be opening (~125 a second per node at 10,000 new
partitions). The partition service (partition/service.py "Named leaders") holds such a
request until the replica leads, the record changes, or its deadline, instead of answering
NOT_LEADER at once.

    holds = NamedLeaderHolds(node_id, replica_of, image_now)
    holds.not_leading(topic, partition) -> bool     named here, not leading yet, but may soon
    await holds.wait(topic, partition, deadline)    while not_leading, until deadline (trio time)
    holds.wake((topic, partition)) / holds.wake_all()

One trio.Event per partition is the waiter list of every request held for it (no task per
request); the replica manager wakes it when the replica gains leadership, fails to open or
is removed, and wakes them all at each image change; a woken waiter looks again.

Concurrency: trio thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from metadata.image import MetadataImage

__all__ = ["NamedLeaderHolds"]


class _Core(Protocol):
    @property
    def epoch(self) -> int: ...

    @property
    def leader_id(self) -> int | None: ...


class _Replica(Protocol):
    """What the holds read of a partition/replica.py Replica."""

    is_leader: bool
    offline_reason: str | None

    @property
    def closed(self) -> bool: ...

    @property
    def attached(self) -> bool: ...

    @property
    def core(self) -> _Core | None: ...


class NamedLeaderHolds:
    """See the module docstring."""

    def __init__(self, node_id: int, replica_of: Callable[[tuple[str, int]], _Replica | None],
                 image_now: Callable[[], MetadataImage]) -> None:
        self._node_id = node_id
        self._replica_of = replica_of
        self._image_now = image_now
        self._waits: dict[tuple[str, int], trio.Event] = {}

    def not_leading(self, topic: str, partition: int) -> bool:
        """The image names this broker the partition's first leader, not yet confirmed (record
        epoch 0), and its replica here does not lead yet but may soon: not reconciled or still
        opening, open and not begun its first term, or its core leads the first term but does
        not serve before its vote is durable."""
        r = self._replica_of((topic, partition))
        if r is not None and (r.is_leader or r.closed or r.offline_reason is not None):
            return False
        p = self._image_now().partition(topic, partition)
        if p is None or p.leader != self._node_id or p.leader_epoch != 0:
            return False
        if r is None or not r.attached or r.core is None:
            return True
        return r.core.epoch == 0 or r.core.leader_id == self._node_id

    async def wait(self, topic: str, partition: int, deadline: float) -> None:
        """Wait while `not_leading`, at most until `deadline` (trio time); returns at once
        otherwise. Cancel-safe (an abandoned wait leaves an Event the next wake drops)."""
        key = (topic, partition)
        while self.not_leading(topic, partition) and trio.current_time() < deadline:
            event = self._waits.get(key)
            if event is None:
                event = self._waits[key] = trio.Event()
            with trio.move_on_at(deadline):
                await event.wait()

    def wake(self, key: tuple[str, int]) -> None:
        event = self._waits.pop(key, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        for key in list(self._waits):
            self.wake(key)

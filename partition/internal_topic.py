"""The partition side of a coordinator's seam: `groupcoord/internal_topic.py`'s
`InternalTopics` / `InternalPartition` over the node's local replicas, so a coordinator appends
to, replays and watches its internal topic without holding a `Replica` or its `Log`.

    LocalInternalTopics(replica_manager)   # the node builds one and gives it to the coordinators

Only the members the Protocols declare are exposed; everything is delegated to the replica's
public methods (`append_as_leader` with acks=all as the coordinator's own append,
`read_committed`, `watch`).
Concurrency: the trio thread, as the replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from partition.replica import Replica
from partition.replica_writes import AppendResult

__all__ = ["LocalInternalTopics", "ReplicaPartition"]


class _Replicas(Protocol):
    """What this adapter uses of partition/manager.py's ReplicaManager."""

    def replica(self, topic: str, partition: int) -> Replica | None: ...

    def add_leadership_listener(self, listener: Callable[[Replica], None]) -> None: ...


class _Committed:
    """An append's outcome: `wait_committed` waits on the replica's ack waiter, if any."""

    __slots__ = ("_result",)

    def __init__(self, result: AppendResult) -> None:
        self._result = result

    @property
    def first_offset(self) -> int:
        return self._result.first_offset

    async def wait_committed(self, deadline: float) -> None:
        if self._result.waiter is not None:
            await self._result.waiter.wait(deadline)


class ReplicaPartition:
    """One local replica as an `InternalPartition`."""

    __slots__ = ("_replica",)

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    @property
    def is_leader(self) -> bool:
        return self._replica.is_leader

    @property
    def leader_epoch(self) -> int:
        return self._replica.leader_epoch

    @property
    def log_start_offset(self) -> int:
        return self._replica.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._replica.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._replica.high_watermark

    async def append(self, batch: bytes) -> _Committed:
        return _Committed(await self._replica.append_as_leader(batch, acks=-1, coordinator=True))

    async def read_committed(self, offset: int, max_bytes: int) -> bytes:
        return await self._replica.read_committed(offset, max_bytes)

    def watch(self, event: trio.Event) -> None:
        self._replica.watch(event)

    def unwatch(self, event: trio.Event) -> None:
        self._replica.unwatch(event)


class LocalInternalTopics:
    """`InternalTopics` over the node's replica manager."""

    def __init__(self, replicas: _Replicas) -> None:
        self._replicas = replicas

    def partition(self, topic: str, partition: int) -> ReplicaPartition | None:
        r = self._replicas.replica(topic, partition)
        return None if r is None else ReplicaPartition(r)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        r = self._replicas.replica(topic, partition)
        if r is None or r.core is None:
            return None
        return r.core.high_watermark

    def add_leadership_listener(self, listener: Callable[[str, int], None]) -> None:
        self._replicas.add_leadership_listener(lambda r: listener(r.topic, r.partition))

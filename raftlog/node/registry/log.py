"""The registry's access to its partition, `_schemas`-0, behind one small Protocol
(`SchemasLog`), and its implementation over the node's ReplicaManager and metadata image
(`ReplicaSchemasLog`): the one place to repoint when the partition port is shared.

Reads come from the leader: locally when this node leads, else over the peer op
`registry_read` (served by service.py on the leader), a long poll: with nothing new the leader
answers after LONG_POLL_MS or as soon as its high watermark moves. Appends happen only on the
leader.
"""

from __future__ import annotations

import time
from typing import Any, Final, Protocol

import trio

from partition.batch import BatchBuilder
from partition.keyed import KeyedRecord, keyed_records
from raftlog.base.errors import NotLeaderError, RaftlogError
from raftlog.base.protocol import Request

__all__ = ["SCHEMAS_TOPIC", "SchemasLog", "ReplicaSchemasLog", "LogRecord"]

SCHEMAS_TOPIC: Final = "_schemas"
READ_CHUNK_BYTES: Final = 1 << 20
COMMIT_TIMEOUT_S: Final = 10.0
PEER_TIMEOUT_S: Final = 5.0
LONG_POLL_MS: Final = 2000  # a follower's read waits this long on the leader for new records

LogRecord = KeyedRecord  # (offset, key, value)


class SchemasLog(Protocol):
    def leader_id(self) -> int | None:
        """The node leading `_schemas`-0 per the metadata image (None: no topic or no leader)."""
        ...

    def is_leader(self) -> bool:
        """This node's replica leads the partition now."""
        ...

    def peer_address(self, node_id: int) -> str | None:
        """The peer listener ("host:port") of node `node_id`, None when unknown."""
        ...

    async def read_here(self, offset: int, wait_s: float = 0.0) -> tuple[list[LogRecord], int]:
        """`read`, from this node's replica only (it must lead); with nothing to read, waits up
        to `wait_s` for something (a long poll). Raises NotLeaderError."""
        ...

    async def ensure_topic(self) -> None:
        """Create `_schemas` (1 partition, compacted) unless it exists. Raises RaftlogError."""
        ...

    async def read(self, offset: int) -> tuple[list[LogRecord], int]:
        """Committed records from `offset` (at most a chunk) and the next offset to read. From
        the local leader replica, else from the leader node. Raises RaftlogError."""
        ...

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append on the local leader replica with acks=all and wait for the commit; the last
        offset. Raises NotLeaderError, RequestTimedOutError, RaftlogError."""
        ...


class ReplicaSchemasLog:
    """SchemasLog over the local ReplicaManager (`replicas`), the metadata service (its image
    and its `create_topic` client handler) and the peer pool."""

    def __init__(self, node_id: int, metadata: Any, replicas: Any, peers: Any) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.replicas = replicas
        self.peers = peers

    def _replica(self) -> Any:
        return None if self.replicas is None else self.replicas.replica(SCHEMAS_TOPIC, 0)

    def leader_id(self) -> int | None:
        state = self.metadata.image.partition(SCHEMAS_TOPIC, 0)
        return None if state is None or state.reported_leader < 0 else state.leader

    def is_leader(self) -> bool:
        r = self._replica()
        return r is not None and r.is_leader

    def peer_address(self, node_id: int) -> str | None:
        broker = self.metadata.image.broker(node_id)
        return None if broker is None else f"{broker.peer_host}:{broker.peer_port}"

    async def ensure_topic(self) -> None:
        image = self.metadata.image
        if image.topic(SCHEMAS_TOPIC) is not None:
            return
        # RF as __consumer_offsets': 3, or every broker of a smaller cluster.
        fields = {"name": SCHEMAS_TOPIC, "partitions": 1, "replication_factor": max(1, min(3, len(image.brokers))),
                  "configs": {"cleanup_policy": "compact"}, "timeout_ms": 10_000}
        try:
            await self.metadata.client_handlers["create_topic"](Request(0, "create_topic", fields))
        except RaftlogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise

    async def read_here(self, offset: int, wait_s: float = 0.0) -> tuple[list[LogRecord], int]:
        r = self._replica()
        if r is None or not r.is_leader:
            raise NotLeaderError("this node does not lead _schemas")
        if wait_s > 0 and max(offset, r.log.log_start_offset) >= r.high_watermark:
            wake = trio.Event()
            r.watch(wake)  # set at the next high-watermark or leadership change
            try:
                with trio.move_on_after(wait_s):
                    await wake.wait()
            finally:
                r.unwatch(wake)
            if not r.is_leader:
                raise NotLeaderError("this node no longer leads _schemas")
        return await read_local(r, offset)

    async def read(self, offset: int) -> tuple[list[LogRecord], int]:
        r = self._replica()
        if r is not None and r.is_leader:
            return await read_local(r, offset)
        leader = self.leader_id()
        address = None if leader is None else self.peer_address(leader)
        if address is None:
            raise NotLeaderError("no leader of _schemas known")
        answer = await self.peers.call(address, "registry_read", {"offset": offset, "wait_ms": LONG_POLL_MS},
                                       timeout_s=PEER_TIMEOUT_S)
        records = [(int(o), bytes(k), None if v is None else bytes(v)) for o, k, v in answer.get("records", [])]
        return records, int(answer.get("next_offset", offset))

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        r = self._replica()
        if r is None or not r.is_leader:
            raise NotLeaderError("this node does not lead _schemas")
        builder = BatchBuilder()
        now_ms = int(time.time() * 1000)  # the records' timestamps: wall time, as Kafka's
        for key, value in records:
            builder.append(value, key, timestamp_ms=now_ms)
        res = await r.append_as_leader(builder.build(), acks=-1)
        if res.waiter is not None:
            await res.waiter.wait(trio.current_time() + COMMIT_TIMEOUT_S)
        return int(res.last_offset)


async def read_local(r: Any, offset: int) -> tuple[list[LogRecord], int]:
    """Committed records of the local leader replica `r` from `offset`."""
    offset = max(offset, r.log.log_start_offset)
    if offset >= r.high_watermark:
        return [], offset
    data = await r.read_committed(offset, READ_CHUNK_BYTES)
    return keyed_records(data, offset)


def records_to_wire(records: list[LogRecord]) -> list[list[Any]]:
    return [[o, k, v] for o, k, v in records]

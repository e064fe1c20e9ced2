"""What a coordinator needs from the layers under it, as `Protocol` types (DESIGN §10,
"Coordinators"): the local partitions of its internal compacted topic (`__consumer_offsets`,
`__transaction_state`; `__share_group_state` and `_schemas` next) and a view of the
metadata image. A coordinator's shell is written against these and never against `Replica`,
`Log` or the replica manager: `partition/internal_topic.py` implements `InternalTopics` over
the node's ReplicaManager; tests implement it in memory.

    topics.partition(OFFSETS_TOPIC, 3)       -> InternalPartition | None (open and serving here)
    await part.append(batch)                  -> Appended (acks=all; wait_committed for the commit)
    await part.read_committed(offset, max_bytes) -> whole batches below the high watermark
    part.watch(event)                          -> set at the next high-watermark or leadership change
    topics.add_leadership_listener(fn)         -> fn(topic, partition) on every leadership change here
    await metadata.ensure_transaction_state_topic(timeout_s=2.0)  (TxnMetadataView: created on first use)

Invariants the implementation keeps (a coordinator relies on them):
* `append` appends as the leader with acks=all: it raises NotLeaderError (or another registry
  error: a definite failure) when nothing was appended; `Appended.wait_committed(deadline)`
  returns once the batch is committed, raises RequestTimedOutError when it may still be
  (unknown outcome) or the failure that ended the wait (leadership lost: it may not be).
* `read_committed` returns only committed, CRC-checked whole batches.
* `leader_epoch` grows with every new leadership; a coordinator replays its partition once per
  (partition, leader epoch) it leads.
Concurrency: every member is called on the node's trio thread.
May import: raftlog.base, metadata (for the image type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import trio

from metadata.image import MetadataImage

__all__ = [
    "Appended", "Coordinated", "GroupOwnership", "InternalPartition", "InternalTopics", "MetadataView",
    "ShareMetadataView", "TxnMetadataView",
]


class Appended(Protocol):
    """One batch appended by the leader, perhaps not yet committed."""

    @property
    def first_offset(self) -> int: ...

    async def wait_committed(self, deadline: float) -> None:
        """Return once committed (at once if already). `deadline` is trio's clock. Raises
        RequestTimedOutError (unknown outcome) or the error that ended the wait."""


class InternalPartition(Protocol):
    """One local replica of an internal topic's partition, as its coordinator uses it."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    async def append(self, batch: bytes) -> Appended:
        """Append one RecordBatch v2 as the leader, acks=all (module docstring)."""

    async def read_committed(self, offset: int, max_bytes: int) -> bytes:
        """Whole committed batches from `offset`, at most about `max_bytes` (b"" at the end)."""

    def watch(self, event: trio.Event) -> None:
        """Set `event` (once) at the next high-watermark or leadership change."""

    def unwatch(self, event: trio.Event) -> None: ...


class InternalTopics(Protocol):
    """The partitions hosted on this node, as coordinators see them."""

    def partition(self, topic: str, partition: int) -> InternalPartition | None:
        """The local replica of `topic`-`partition` if it is open and serving, else None."""

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The high watermark the local replica knows (leader or follower), None without one
        (consumer-lag metrics of committed offsets)."""

    def add_leadership_listener(self, listener: Callable[[str, int], None]) -> None:
        """Call `listener(topic, partition)` on the trio thread whenever a local replica gains
        or loses leadership or leads in a new epoch."""


class MetadataView(Protocol):
    """The node's metadata as a coordinator reads it (find_coordinator, unknown topics)."""

    @property
    def image(self) -> MetadataImage: ...

    def client_address(self, broker_id: int) -> str | None:
        """A broker's native client listener "host:port", None when unknown."""


class ShareMetadataView(MetadataView, Protocol):
    """The share service's view (share_service.py, share_store.py): it also reaches other
    brokers' peer listeners and creates `__share_group_state` on first use."""

    def peer_address(self, broker_id: int) -> str | None:
        """A node's peer listener "host:port", None when unknown."""

    async def create_topic(self, name: str, *, partitions: int, replication_factor: int,
                           configs: Mapping[str, str], timeout_ms: int) -> None:
        """Have the controller create a topic; raises TopicAlreadyExistsError (a registry
        error, as every failure) when it exists."""


class GroupOwnership(Protocol):
    """What the share service asks the group coordinator's core (groupcoord/coordinator.py):
    which `__consumer_offsets` partitions it coordinates here, and whether a classic or
    consumer group holds an id."""

    def is_active(self, partition: int) -> bool: ...

    def group(self, group_id: str) -> object | None: ...

    def consumer_group(self, group_id: str) -> object | None: ...


class Coordinated(Protocol):
    """The group coordinator service as the share service holds it."""

    @property
    def core(self) -> GroupOwnership: ...


class TxnMetadataView(MetadataView, Protocol):
    """The transaction coordinator's view: it also asks the controller to create
    `__transaction_state` on the first transactional FindCoordinator (Kafka creates it on
    first use; metadata/service.py serves this)."""

    async def ensure_transaction_state_topic(self, *, timeout_s: float) -> bool:
        """Ask for the topic unless it exists; True when this call created it. A controller
        not reached raises a registry error (RaftlogError)."""

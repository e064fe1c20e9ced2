"""raftlog's Python client: one sans-I/O core, two thin shells (blocking sockets, trio).

Public API (declared here once):

    from raftlog.client import Producer, Consumer, Admin          # blocking
    from raftlog import aio                                       # trio: aio.Producer, ...

    p = Producer("127.0.0.1:9093", acks="all", linger_ms=5)
    fut = p.send("events", b"value", key=b"k")     # -> RecordFuture
    partition, offset = fut.result(timeout=10)
    p.flush(); p.close()

    c = Consumer("127.0.0.1:9093")
    c.assign([("events", 0)]); c.seek_to_beginning()
    for record in c.poll(timeout_ms=1000): ...     # ConsumerRecord(topic, partition, offset, ...)

Layer 3 (docs/architecture.md): imports only `raftlog.base` and the record-batch codec
(`partition.batch`); never the node, the services or the CLI.

Modules: the sans-I/O core (no sockets, clocks or threads) — `request` (request builders,
response parsers, the plain data they return), `metadata_cache` (routing), `retry` (backoff),
`core` (the request engine: ids, deadlines, broker choice, metadata refresh, calls),
`producer` + `accumulator` + `partitioner` (the producer core), `consumer` (the consumer
core), `admin` (the admin core and its ops), `group` (group membership, coordinator calls,
offset-reset planning), `group_session` (the group half of a Consumer, as procedures both
shells run), `assignor` (client-side partition assignment); the shells — `blocking` +
`network_blocking` + `group_blocking`, `aio` + `network_aio` + `group_aio`, each reading
one injected `clock`; `group_admin` (list/describe/reset/delete groups); `errors`
(client-local errors). Share groups (KIP-932): `share_session` (the member's procedures, sans
I/O), its shells `share_consumer` (blocking `ShareConsumer`) and `share_aio` (trio), and
`share_admin` (`ShareGroupAdmin`: list/describe/reset/delete share groups).
"""

from raftlog.client.blocking import Admin, Consumer, Producer, RecordFuture
from raftlog.client.consumer import ConsumerRecord
from raftlog.client.request import BrokerInfo, ClusterStatus, PartitionInfo, TopicInfo
from raftlog.client.errors import (
    BufferFullError,
    ClientClosedError,
    ConnectionLostError,
    DeliveryTimedOutError,
    NoBrokerAvailableError,
)
from raftlog.client.group_admin import GroupAdmin
from raftlog.client.share_admin import ShareGroupAdmin
from raftlog.client.share_consumer import ShareConsumer, ShareRecord
from raftlog.client.partitioner import murmur2, partition_for_key

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "GroupAdmin",
    "ShareConsumer",
    "ShareRecord",
    "ShareGroupAdmin",
    "RecordFuture",
    "ConsumerRecord",
    "TopicInfo",
    "PartitionInfo",
    "BrokerInfo",
    "ClusterStatus",
    "BufferFullError",
    "ClientClosedError",
    "ConnectionLostError",
    "DeliveryTimedOutError",
    "NoBrokerAvailableError",
    "murmur2",
    "partition_for_key",
]

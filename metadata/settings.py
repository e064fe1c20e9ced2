"""The metadata service's settings: one frozen value the node builds from its config
(`raftlog/node/settings.py` from `raftlog/node/config.py`, where each setting has its flag,
`RAFTLOG_*` variable, TOML key, default and range). No defaults here: config.py holds them.
Addresses are plain ("host", port) pairs and "host:port" strings: this layer does not know
the node's HostPort.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Address", "MetadataSettings"]

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MetadataSettings:
    node_id: int
    is_controller: bool
    is_broker: bool
    voter_quorum: Mapping[int, str]  # voter id -> its quorum listener "host:port"
    voter_peers: Mapping[int, str]   # voter id -> its peer listener "host:port"
    advertised_client: Address       # what this broker registers: native client listener,
    advertised_peer: Address         # peer listener,
    advertised_kafka: Address | None  # Kafka listener (None: none)
    heartbeat_ms: int
    session_timeout_ms: int
    request_timeout_ms: int
    max_frame_bytes: int             # the metadata answer's max_request_bytes
    default_partitions: int          # create_topic without partitions / replication factor
    default_replication_factor: int
    topic_defaults: Mapping[str, str]  # topic configs every new topic starts from
    authorizer_enabled: bool         # ACL ops answer SECURITY_DISABLED when False
    broker_rack: str | None          # what this broker registers as its rack (None: none)
    partition_autobalancing_mode: str  # off | node_add | continuous (the controller's balancer)
    partition_autobalancing_node_availability_timeout_ms: int  # continuous: fenced this long, drained
    partition_autobalancing_min_gap_bytes: int  # the balancer's bytes goal: a smaller gap is balanced

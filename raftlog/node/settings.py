"""The services' typed settings, built from the node's config (`config.py` holds every setting's
flag, `RAFTLOG_*` variable, TOML key, default and range; nothing below it repeats a default).
Each service takes one frozen value of its own (`partition/settings.py`,
`groupcoord/settings.py` for both coordinators, `metadata/settings.py`); the listeners theirs
(`raftlog/node/listener.py`'s `ListenerSettings`). Building one raises ConfigError where the
config cannot say a value (a voter without a peer address).
"""

from __future__ import annotations

from groupcoord.context import CoordinatorConfig
from groupcoord.settings import GroupCoordinatorSettings, ShareServiceSettings, TxnCoordinatorSettings
from groupcoord.share_group import ShareGroupConfig
from groupcoord.txn_coordinator import TxnConfig
from metadata.settings import MetadataSettings
from partition.replica import ReplicaSettings
from partition.settings import PartitionSettings
from partition.share_partition import ShareSettings
from raftlog.base.topics import OFFSETS_TOPIC_PARTITIONS, TRANSACTION_STATE_TOPIC_PARTITIONS
from raftlog.node.config import HostPort, NodeConfig
from raftlog.node.listener import ListenerSettings

__all__ = ["group_settings", "listener_settings", "metadata_settings", "partition_settings", "share_settings", "txn_settings"]


def _pair(address: HostPort) -> tuple[str, int]:
    return (address.host, address.port)


def partition_settings(config: NodeConfig) -> PartitionSettings:
    return PartitionSettings(
        node_id=config.node_id,
        data_dir=config.data_dir,
        replica=ReplicaSettings(election_timeout_ms=config.election_timeout_ms),
        scrub_bytes_per_s=config.scrub_bytes_per_s,
        scrub_interval_ms=config.scrub_interval_ms,
        log_open_files_max=config.log_open_files_max,
        follower_replication_throttled_rate=config.follower_replication_throttled_rate,
        leader_replication_throttled_rate=config.leader_replication_throttled_rate,
    )


def group_settings(config: NodeConfig) -> GroupCoordinatorSettings:
    return GroupCoordinatorSettings(
        node_id=config.node_id,
        request_timeout_ms=config.request_timeout_ms,
        coordinator=CoordinatorConfig(
            partitions=OFFSETS_TOPIC_PARTITIONS,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            group_consumer_assignor=config.group_consumer_assignor,
            group_consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            group_consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            group_consumer_migration_policy=config.group_consumer_migration_policy,
        ),
    )


def txn_settings(config: NodeConfig) -> TxnCoordinatorSettings:
    return TxnCoordinatorSettings(
        node_id=config.node_id,
        coordinator=TxnConfig(
            partitions=TRANSACTION_STATE_TOPIC_PARTITIONS,
            max_timeout_ms=config.transaction_max_timeout_ms,
            offsets_partitions=OFFSETS_TOPIC_PARTITIONS,
        ),
        abort_scan_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
    )


def metadata_settings(config: NodeConfig) -> MetadataSettings:
    return MetadataSettings(
        node_id=config.node_id,
        is_controller=config.is_controller,
        is_broker=config.is_broker,
        voter_quorum={v: str(a) for v, a in config.controller_quorum_voters.items()},
        voter_peers={v: str(a) for v, a in config.controller_peer_addresses().items()},
        advertised_client=_pair(config.advertised("client")),
        advertised_peer=_pair(config.advertised("peer")),
        advertised_kafka=_pair(config.advertised("kafka")),
        heartbeat_ms=config.heartbeat_ms,
        session_timeout_ms=config.session_timeout_ms,
        request_timeout_ms=config.request_timeout_ms,
        max_frame_bytes=config.max_frame_bytes,
        default_partitions=config.default_partitions,
        default_replication_factor=config.default_replication_factor,
        topic_defaults=dict(config.topic_defaults),
        authorizer_enabled=config.authorizer_enabled,
        broker_rack=config.broker_rack,
        partition_autobalancing_mode=config.partition_autobalancing_mode,
        partition_autobalancing_node_availability_timeout_ms=config.partition_autobalancing_node_availability_timeout_ms,
        partition_autobalancing_min_gap_bytes=config.partition_autobalancing_min_gap_bytes,
    )


def listener_settings(config: NodeConfig, *, peer: bool = False) -> ListenerSettings:
    """The client-facing listeners' (native client, Kafka) or, with `peer`, the peer listener's."""
    return ListenerSettings(
        max_frame_bytes=config.peer_max_frame_bytes if peer else config.max_frame_bytes,
        request_timeout_ms=config.request_timeout_ms,
        max_in_flight=config.max_in_flight,
    )


def share_settings(config: NodeConfig) -> ShareServiceSettings:
    return ShareServiceSettings(
        node_id=config.node_id,
        partitions=ShareSettings(
            record_lock_duration_ms=config.group_share_record_lock_duration_ms,
            delivery_count_limit=config.group_share_delivery_count_limit,
            max_record_locks=config.group_share_partition_max_record_locks,
        ),
        groups=ShareGroupConfig(
            session_timeout_ms=config.group_share_session_timeout_ms,
            heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        ),
    )

"""A replica's settings and what they and a topic's configs make of the Raft core's and the
log's configs (`raft_config_for`, `log_config_for`)."""

from __future__ import annotations

from dataclasses import dataclass

from metadata.topic_config import TopicConfig
from partition.log_config import LogConfig
from partition.raft import RaftConfig

__all__ = ["ReplicaSettings", "fetch_wait_ticks", "raft_config_for", "log_config_for",
           "REPLICA_MAX_BATCH_BYTES"]

# The follower's log must take whatever a leader accepted, whatever max_message_bytes says now:
# the producer limit is checked on the leader path only.
REPLICA_MAX_BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class ReplicaSettings:
    tick_ms: int = 50
    election_timeout_ms: int = 1000
    fetch_max_wait_ms: int = 250  # a leader parks a caught-up follower fetch this long
    replica_fetch_max_bytes: int = 4 << 20  # per partition per replica fetch answer
    max_producers: int = 10_000


def fetch_wait_ticks(settings: ReplicaSettings) -> int:
    """RaftConfig.fetch_max_wait_ticks of every replica with these settings."""
    ticks = max(4, settings.election_timeout_ms // settings.tick_ms)
    return max(1, min(settings.fetch_max_wait_ms // settings.tick_ms, ticks // 4))


def raft_config_for(settings: ReplicaSettings, topic_config: TopicConfig) -> RaftConfig:
    ticks = max(4, settings.election_timeout_ms // settings.tick_ms)
    fetch_wait = fetch_wait_ticks(settings)
    return RaftConfig(
        election_timeout_ticks=ticks,
        fetch_max_wait_ticks=fetch_wait,
        fetch_request_timeout_ticks=max(fetch_wait + 1, min(fetch_wait + 3, ticks - 1)),
        check_quorum_ticks=ticks + ticks // 2,
        transfer_timeout_ticks=ticks,
        begin_quorum_resend_ticks=max(1, fetch_wait),
        require_flush=topic_config.flush_policy == "always",
    )


def log_config_for(topic_config: TopicConfig) -> LogConfig:
    return LogConfig(
        segment_bytes=topic_config.segment_bytes,
        segment_ms=topic_config.segment_ms,
        retention_ms=topic_config.retention_ms,
        retention_bytes=topic_config.retention_bytes,
        cleanup_policy=topic_config.cleanup_policy,
        delete_retention_ms=topic_config.delete_retention_ms,
        max_batch_bytes=max(REPLICA_MAX_BATCH_BYTES, topic_config.max_message_bytes),
    )

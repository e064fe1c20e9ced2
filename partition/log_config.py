"""A partition log's settings (Kafka's LogConfig: the topic configs of the same names).
Built by the replica manager from the topic's configs (metadata/topic_config.py)."""

from __future__ import annotations

from dataclasses import dataclass

from partition.batch import INT32_MAX

__all__ = ["LogConfig", "CACHED_TAIL_BYTES"]

# LogConfig.cache_tail_bytes's default, and the hot tail of a log that keeps everything cached.
CACHED_TAIL_BYTES = 16 << 20


@dataclass(frozen=True)
class LogConfig:
    """Per-log settings (Kafka's topic configs of the same names)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 << 20
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1 = forever
    retention_bytes: int = -1  # -1 = unlimited
    cleanup_policy: str = "delete"  # "delete" | "compact" | "compact,delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    max_batch_bytes: int = 8 << 20  # larger batches -> MessageTooLargeError
    # Flushed bytes more than this far behind the end are dropped from the page cache
    # (drop-behind); -1 keeps everything cached. See `_drop_behind`.
    cache_tail_bytes: int = CACHED_TAIL_BYTES

    @property
    def hot_tail_bytes(self) -> int:
        """How far behind the end a read still counts as a read of the cached tail."""
        return self.cache_tail_bytes if self.cache_tail_bytes >= 0 else CACHED_TAIL_BYTES

    def __post_init__(self):
        if not 100 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes} outside [100, 2**31-1]")
        if self.max_index_bytes < 12:
            raise ValueError(f"max_index_bytes {self.max_index_bytes} < 12")
        if self.index_interval_bytes < 0 or self.segment_ms <= 0 or self.max_batch_bytes <= 0:
            raise ValueError("index_interval_bytes, segment_ms and max_batch_bytes must be positive")
        if self.cache_tail_bytes < -1:
            raise ValueError(f"cache_tail_bytes {self.cache_tail_bytes} < -1")
        policies = set(self.cleanup_policy.replace(" ", "").split(","))
        if not policies or not policies <= {"delete", "compact"}:
            raise ValueError(f"cleanup_policy {self.cleanup_policy!r}")

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

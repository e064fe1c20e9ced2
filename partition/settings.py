"""The replica manager's settings: one frozen value the node builds from its config
(`raftlog/node/settings.py` from `raftlog/node/config.py`, where each setting has its flag,
`RAFTLOG_*` variable, TOML key, default and range). The Raft timing lives in
`ReplicaSettings` (replica.py), which every replica shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from partition.replica import ReplicaSettings

__all__ = ["PartitionSettings"]


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    node_id: int
    data_dir: Path              # the node's: replicas live under data_dir/partitions
    replica: ReplicaSettings    # Raft ticks, election timeout, replica fetch limits
    scrub_bytes_per_s: int      # the scrubber's read rate
    scrub_interval_ms: int      # at most one scrub pass this often
    log_open_files_max: int     # segment files held open at once (FILE_CACHE)
    follower_replication_throttled_rate: int  # bytes/s for replicas added by a move; 0: no limit
    leader_replication_throttled_rate: int = 0  # bytes/s a leader sends to replicas being added; 0: none

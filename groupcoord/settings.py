"""The group and transaction coordinator services' settings: one frozen value each the node builds from its config
(`raftlog/node/settings.py` from `raftlog/node/config.py`, where each setting has its flag,
`RAFTLOG_*` variable, TOML key, default and range). No defaults here: config.py holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from groupcoord.context import CoordinatorConfig
from groupcoord.share_group import ShareGroupConfig
from groupcoord.txn_coordinator import TxnConfig
from partition.share_partition import ShareSettings

__all__ = ["GroupCoordinatorSettings", "TxnCoordinatorSettings"]


@dataclass(frozen=True, slots=True)
class GroupCoordinatorSettings:
    node_id: int
    request_timeout_ms: int  # a waiting join/sync/commit answers before the server's deadline
    coordinator: CoordinatorConfig  # the pure core's (group.* / offsets.* settings)


@dataclass(frozen=True, slots=True)
class TxnCoordinatorSettings:
    node_id: int
    coordinator: TxnConfig  # the pure core's (transaction.max.timeout.ms; partition counts)
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: timed-out transactions are
    # looked for at most this often, so one is aborted between its timeout and that plus this
    abort_scan_interval_ms: int = 10_000


@dataclass(frozen=True, slots=True)
class ShareServiceSettings:
    node_id: int
    partitions: ShareSettings      # the share-partition windows' (group.share.record.lock.duration.ms, ...)
    groups: ShareGroupConfig       # share-group membership (group.share.session.timeout.ms, ...)

"""The share-group settings (KIP-932, Kafka's group.share.* names) load from file, env and overrides with Kafka's defaults and bounds."""

import pytest

from raftlog.base.errors import ConfigError
from raftlog.node.config import load_config

pytestmark = pytest.mark.unit

BASE = {"RAFTLOG_NODE_ID": "1", "RAFTLOG_DATA_DIR": "/tmp/raftlog-share-config", "RAFTLOG_CLUSTER_SECRET": "s" * 16,
        "RAFTLOG_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9095"}


def test_defaults_are_kafkas():
    c = load_config(None, env=BASE)
    assert (c.group_share_record_lock_duration_ms, c.group_share_delivery_count_limit,
            c.group_share_partition_max_record_locks) == (30_000, 5, 2000)


def test_env_and_override_win_and_bounds_hold(tmp_path):
    c = load_config(None, env={**BASE, "RAFTLOG_GROUP_SHARE_DELIVERY_COUNT_LIMIT": "3"},
                    overrides={"group_share_record_lock_duration_ms": 2000})
    assert c.group_share_delivery_count_limit == 3 and c.group_share_record_lock_duration_ms == 2000
    with pytest.raises(ConfigError, match="group_share_delivery_count_limit"):
        load_config(None, env=BASE, overrides={"group_share_delivery_count_limit": 1})
    with pytest.raises(ConfigError, match="group_share_session_timeout_ms"):
        load_config(None, env=BASE, overrides={"group_share_session_timeout_ms": 100,
                                             "group_share_heartbeat_interval_ms": 200})

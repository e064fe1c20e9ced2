"""Kafka 4's online upgrade, the same on raftlog as on Apache Kafka 4.4: a classic group of three confluent-kafka members restarted one at a time with group.protocol=consumer becomes a consumer group, and back to classic the same way, with every record read, commits never going back, one owner per partition at a time and the offsets kept (test_kip848_kafka.rolling_upgrade on both brokers)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from differential import Sides, assert_same, wait_until  # noqa: E402
from test_kip848_kafka import PARTITIONS, rolling_upgrade  # noqa: E402


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(60)

    def led() -> bool:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        return t is not None and len(t.partitions) == PARTITIONS and all(p.leader >= 0 for p in t.partitions.values())

    assert wait_until(led, 60), f"leaders of {topic}"


def test_rolling_upgrade_classic_to_consumer_and_back(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict:
        topic, group = "kip848-rolling-ref", "kip848-rolling-ref-g"
        _create(bootstrap, topic)
        return rolling_upgrade(SimpleNamespace(kafka_bootstrap=lambda: bootstrap), topic, group)

    same = assert_same(sides.run(scenario), "a rolling upgrade classic -> consumer -> classic")
    assert same == {"types": ["consumer"] * 5 + ["classic"], "one_owner_at_a_time": True, "all_read": True,
                    "commits_never_go_back": True, "offsets_at_the_end": True}

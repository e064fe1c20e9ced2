"""Follower fetching (KIP-392) on a real 3-node cluster with three racks: a confluent-kafka
consumer with `client.rack` reads every record, and its fetches are served by its rack's
follower (counted per node in /metrics), not by the leader; without client.rack the leader
serves."""

from __future__ import annotations

import dataclasses
import urllib.request

import pytest

import node_harness as harness

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402

TOPIC = "racked"
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
COUNT = 300


def _follower_fetches(cluster, node: int) -> float:
    with urllib.request.urlopen(f"http://{cluster.http(node)}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("raftlog_topic_follower_fetches_total{") and f'topic="{TOPIC}"' in line)


def _read_all(cluster, rack: str | None) -> list[bytes]:
    config = {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "rack-test",
              "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    if rack is not None:
        config["client.rack"] = rack
    consumer = CKConsumer(config)
    seen: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        cluster.wait_for(lambda: seen.extend(m.value() for m in consumer.consume(100, 0.5) if not m.error())
                         or len(seen) >= COUNT, 60, "every record")
    finally:
        consumer.close()
    return seen


def test_a_consumer_fetches_from_its_racks_follower(tmp_path):
    with harness.NodeCluster(tmp_path, 3) as cluster:
        for n in (1, 2, 3):
            cluster.configs[n] = dataclasses.replace(cluster.configs[n], broker_rack=RACKS[n])
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        assert {b["id"]: b["rack"] for b in cluster.status()["brokers"]} == RACKS
        cluster.call(1, "create_topic", name=TOPIC, partitions=1, replication_factor=3)

        def leader():
            [t] = cluster.call(1, "metadata", topics=[TOPIC])["topics"]
            return t["partitions"][0]["leader"] if t["partitions"][0]["leader"] > 0 else None

        lead = cluster.wait_for(leader, 60, "a leader")
        producer = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
        for i in range(COUNT):
            producer.produce(TOPIC, b"r%05d" % i, partition=0)
        assert producer.flush(60) == 0
        follower = next(n for n in (1, 2, 3) if n != lead)

        def served_by_follower() -> bool:
            seen = _read_all(cluster, RACKS[follower])
            assert sorted(seen) == [b"r%05d" % i for i in range(COUNT)]
            return _follower_fetches(cluster, follower) > 0

        # The leader points a rack's consumer at that rack's follower once the follower has caught
        # up (Kafka's rule), so on a loaded machine a first read may be served by the leader: read
        # again, from the start, until the follower serves one.
        cluster.wait_for(served_by_follower, 120, "a read served by the rack's follower")
        assert all(_follower_fetches(cluster, n) == 0 for n in (1, 2, 3) if n != follower)
        # a consumer without client.rack is served by the leader only
        before = {n: _follower_fetches(cluster, n) for n in (1, 2, 3)}
        assert len(_read_all(cluster, None)) >= COUNT
        after = {n: _follower_fetches(cluster, n) for n in (1, 2, 3)}
        # At most the rack consumer's last long poll, answered after it closed, lands in between.
        assert all(before[n] <= after[n] <= before[n] + 1 for n in (1, 2, 3)), (before, after)
        assert all(after[n] == 0 for n in (1, 2, 3) if n != follower)

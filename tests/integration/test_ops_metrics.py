"""Issue 20, "/metrics has 8 families": a real three-node cluster's /metrics, read by prometheus-client's own parser, carries what an operator alerts on (per broker, topic, partition and group, and Raft) with values that follow the cluster: records in and out, high watermarks, group lag, and, after a broker is killed, under-replicated and offline partitions and a fenced broker on the active controller; and every metric README names is among them."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from raftlog.client import Consumer, Producer

import node_harness as harness

# The Metrics section moved from README to this page of the docs site (issue 47).
README = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "metrics.md"
TOPIC = "orders"
RECORDS = 300


def scrape(cluster, node_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one node's /metrics, parsed by prometheus-client."""
    with urllib.request.urlopen(f"http://{cluster.http(node_id)}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(samples_by_node, name: str, **labels: str) -> float:
    """The sum of `name` over nodes and over series whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for samples in samples_by_node for (n, ls), v in samples.items()
               if n == name and want <= set(ls))


def test_metrics_follow_the_cluster(tmp_path):
    with harness.NodeCluster(tmp_path, size=3) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        cluster.call(1, "create_topic", name=TOPIC, partitions=3, replication_factor=3)
        cluster.call(1, "create_topic", name="solo", partitions=3, replication_factor=1)
        with Producer(cluster.bootstrap(), linger_ms=1) as producer:
            futures = [producer.send(TOPIC, b"v%03d" % i, key=b"k%d" % i) for i in range(RECORDS)]
            futures += [producer.send("solo", b"x", partition=p) for p in range(3)]
            for f in futures:
                f.result(timeout=30)
        consumer = Consumer(cluster.bootstrap(), group_id="billing", auto_offset_reset="earliest",
                            enable_auto_commit=False)
        try:
            consumer.subscribe([TOPIC])
            seen = [0]

            def consumed() -> bool:
                seen[0] += len(consumer.poll(500))
                return seen[0] >= RECORDS
            cluster.wait_for(consumed, 60, "the records consumed")
            consumer.commit()
        finally:
            consumer.close()

        everyone = [scrape(cluster, n) for n in (1, 2, 3)]
        assert total(everyone, "raftlog_controller_active_controller_count") == 1
        assert total(everyone, "raftlog_topic_records_in_total", topic=TOPIC) == RECORDS
        assert total(everyone, "raftlog_topic_bytes_in_total", topic=TOPIC) > RECORDS * 4
        assert total(everyone, "raftlog_topic_records_out_total", topic=TOPIC) >= RECORDS
        # Each partition's leader and followers agree on the high watermark, which counts
        # the records plus Raft's leader-change control batches.
        hw = {int(dict(ls)["partition"]): v for (n, ls), v in everyone[0].items()
              if n == "raftlog_partition_high_watermark" and dict(ls)["topic"] == TOPIC}
        assert sorted(hw) == [0, 1, 2] and sum(hw.values()) >= RECORDS
        assert total(everyone, "raftlog_replica_manager_leader_count") == 3 + 3 + 16  # incl. __consumer_offsets
        assert total(everyone, "raftlog_replica_manager_under_replicated_partitions") == 0
        assert total(everyone, "raftlog_log_fsync_seconds_count") > 0
        # acks=all appends timed to their commit on the leaders (issue 46): the producer's batches
        assert total(everyone, "raftlog_produce_commit_seconds_count") > 0
        assert total(everyone, "raftlog_group_members", group="billing") == 0  # closed: left the group
        assert total(everyone, "raftlog_group_lag_sum", group="billing") == 0
        assert total(everyone, "raftlog_group_state", group="billing", state="Empty") == 1

        with Producer(cluster.bootstrap(), linger_ms=1) as producer:
            for f in [producer.send(TOPIC, b"late") for _ in range(7)]:
                f.result(timeout=30)

        def lag_seen() -> bool:
            lag = total([scrape(cluster, n) for n in (1, 2, 3)], "raftlog_group_lag_sum", group="billing")
            return lag == 7
        cluster.wait_for(lag_seen, 20, "the group's lag to show the 7 new records")

        victim = 3
        cluster.kill(victim)

        def degraded():
            live = [scrape(cluster, n) for n in (1, 2)]
            return (total(live, "raftlog_replica_manager_under_replicated_partitions") > 0
                    and total(live, "raftlog_controller_fenced_broker_count") == 1
                    and total(live, "raftlog_controller_offline_partitions_count") >= 1
                    and any(n == "raftlog_partition_replica_lag" and ("replica", str(victim)) in ls
                            for samples in live for (n, ls) in samples)
                    and live)
        live = cluster.wait_for(degraded, 30, "under-replicated, fenced and offline counts")
        assert total(live, "raftlog_controller_active_controller_count") == 1
        assert total(live, "raftlog_controller_active_broker_count") == 2
        # The RF=1 partition on the dead broker is the offline one (ours are RF=3: led by survivors).
        assert total(live, "raftlog_raft_leader_changes_total") > 0

        # Every metric README's Metrics section names is there (after the kill: offline and fenced too).
        scraped = {name for samples in everyone + live for (name, _) in samples}
        missing = sorted(set(readme_metric_names()) - scraped)
        assert not missing, missing


def readme_metric_names() -> list[str]:
    """The metric names README's "### Metrics" section gives, its `_suffix` shorthands expanded
    (`raftlog_topic_bytes_in_total`, `_records_in_total` -> raftlog_topic_records_in_total)."""
    section = README.read_text()
    names, family = [], ""
    for token in re.findall(r"`(_[a-z_]+)`|(raftlog_[a-z_]+)", section):
        short, full = token
        if full:
            names.append(full)
            family = "_".join(full.split("_")[:2])
        else:
            names.append(family + short)
    assert len(names) >= 20, names
    return names


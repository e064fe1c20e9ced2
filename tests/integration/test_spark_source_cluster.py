"""format("raftlog") against a real 3-node cluster: batch rows equal the client's, AvailableNow streams resume exactly across a leader SIGKILL, maxOffsetsPerTrigger splits a backlog, startingOffsets earliest/latest/JSON/group, failOnDataLoss after retention, decoded __consumer_offsets, group commits and lag."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


import node_harness as harness  # noqa: E402
from spark_fixtures import spark  # noqa: E402

pytestmark = pytest.mark.spark

BASE_TS_MS = 1_700_000_000_000
READ_TIMEOUT_MS = "20000"  # a planned range not readable in 20 s fails the task


# ------------------------------------------------------------------ the cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("spark-cluster"), 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=40)
        yield c
    # NodeCluster.__exit__ stopped every node by PID, also when a test failed.


def _admin(cluster):
    from raftlog.client import Admin

    return Admin(cluster.bootstrap(), request_timeout_ms=15_000)


def _leaders(cluster, topic: str) -> dict[int, int | None]:
    with _admin(cluster) as admin:
        info = admin.describe_topics([topic])[topic]
    return {p.partition: p.leader for p in info.partitions}


def create_topic(cluster, topic: str, partitions: int, configs: dict[str, str] | None = None):
    with _admin(cluster) as admin:
        admin.create_topic(topic, partitions, 3, configs)
    cluster.wait_for(lambda: all(n is not None for n in _leaders(cluster, topic).values())
                     and len(_leaders(cluster, topic)) == partitions, 20, f"leaders of {topic}")


def produce(cluster, topic: str, per_partition: dict[int, range], *, flush_every: int = 0) -> None:
    """Record i of partition p: key k-p-i (none for i % 10 == 9), value v-p-i, timestamp
    BASE_TS_MS + i; acks=all. flush_every > 0 flushes after that many (small batches)."""
    from raftlog.client import Producer

    with Producer(cluster.bootstrap(), acks="all", linger_ms=5, request_timeout_ms=5_000,
                  delivery_timeout_ms=60_000) as producer:
        futures = []
        for p, numbers in per_partition.items():
            for i in numbers:
                key = None if i % 10 == 9 else b"k-%d-%d" % (p, i)
                futures.append(producer.send(topic, b"v-%d-%d" % (p, i), key=key, partition=p,
                                             timestamp=BASE_TS_MS + i))
                if flush_every and len(futures) % flush_every == 0:
                    producer.flush(60)
        producer.flush(60)
        for f in futures:  # flush waits for failures too: each record must be acked
            f.result(0)


def client_read(cluster, topic: str, partitions: int) -> list[tuple]:
    """Everything below the high watermark of every partition, read by the blocking
    Consumer: (topic, partition, offset, key, value, timestamp_ms), sorted."""
    from raftlog.client import Consumer

    with _admin(cluster) as admin:
        from raftlog.client.request import list_offsets_request, parse_list_offsets

        ends = {}
        for p in range(partitions):
            msg = admin.request(list_offsets_request([(topic, p, -1)]), route=(topic, p))
            ends[(topic, p)] = parse_list_offsets(msg)[(topic, p)][0]
    out = []
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as consumer:
        consumer.assign(sorted(ends))
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, "the client could not read to the high watermark"
            for r in consumer.poll(timeout_ms=500):
                if r.offset < ends[(r.topic, r.partition)]:
                    out.append((r.topic, r.partition, r.offset, r.key, r.value, r.timestamp))
    return sorted(out)


def row_tuple(r) -> tuple:
    return (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
            bytes(r.value), int(r.timestamp.timestamp() * 1000))


def expected(topic: str, per_partition: dict[int, range]) -> list[tuple]:
    """What produce() wrote, without offsets (a partition's log may begin with a control
    batch, so the first record's offset is not known in advance): compare with strip()."""
    out = []
    for p, numbers in per_partition.items():
        for i in numbers:
            key = None if i % 10 == 9 else b"k-%d-%d" % (p, i)
            out.append((topic, p, key, b"v-%d-%d" % (p, i), BASE_TS_MS + i))
    return out


def strip(rows: list[tuple]) -> list[tuple]:
    """Rows sorted by (topic, partition, offset), offsets dropped."""
    return [(t, p, k, v, ts) for t, p, _off, k, v, ts in sorted(rows)]


def reader(spark, cluster, topic: str, *, stream: bool, **options: str):
    src = (spark.readStream if stream else spark.read).format("raftlog")
    src = (src.option("bootstrap", ",".join(cluster.client(n) for n in sorted(cluster.configs)))
           .option("subscribe", topic).option("raftlog.read.timeout.ms", READ_TIMEOUT_MS)
           .option("raftlog.request.timeout.ms", "5000"))
    for k, v in options.items():
        src = src.option(k, v)
    return src.load()


def run_available_now(df, checkpoint: Path) -> dict[int, list[tuple]]:
    """Run df to the end of what is there now; {batch id: rows} (a re-run batch replaces
    its earlier attempt: dedupe by batch id). Raises the query's exception."""
    batches: dict[int, list[tuple]] = {}

    def sink(batch_df, batch_id):
        batches[batch_id] = sorted(row_tuple(r) for r in batch_df.collect())

    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    from pyspark.errors import StreamingQueryException

    try:
        assert q.awaitTermination(120), "the AvailableNow query did not finish in 120 s"
    except StreamingQueryException as exc:
        raise AssertionError(f"the query failed: {exc}") from None
    finally:
        if q.isActive:
            q.stop()
    return batches


def all_rows(batches: dict[int, list[tuple]]) -> list[tuple]:
    return sorted(r for rows in batches.values() for r in rows)


@pytest.fixture(scope="module", autouse=True)
def _registered(spark):
    from spark_source import register

    register(spark)


# ------------------------------------------------------------------ tests


def test_batch_read_of_three_partitions_equals_what_the_client_reads(spark, cluster):
    topic = "spark-batch"
    create_topic(cluster, topic, 3)
    data = {0: range(0, 400), 1: range(0, 250), 2: range(0, 7)}
    produce(cluster, topic, data)
    client = client_read(cluster, topic, 3)
    assert strip(client) == expected(topic, data)
    rows = reader(spark, cluster, topic, stream=False).collect()
    assert sorted(row_tuple(r) for r in rows) == client
    assert {r.timestampType for r in rows} == {0}
    # JSON startingOffsets / endingOffsets: a window of each partition.
    window = reader(spark, cluster, topic, stream=False,
                    startingOffsets=json.dumps({topic: {"0": 100, "1": -2, "2": 3}}),
                    endingOffsets=json.dumps({topic: {"0": 150, "1": 10, "2": -1}})).collect()
    assert sorted(row_tuple(r) for r in window) == [
        r for r in client if (r[1] == 0 and 100 <= r[2] < 150) or (r[1] == 1 and r[2] < 10)
        or (r[1] == 2 and r[2] >= 3)]


def test_max_offsets_per_trigger_splits_a_backlog_into_the_expected_batches(spark, cluster, tmp_path):
    topic = "spark-limit"
    create_topic(cluster, topic, 3)
    data = {0: range(100), 1: range(60), 2: range(40)}
    produce(cluster, topic, data)
    df = reader(spark, cluster, topic, stream=True, startingOffsets="earliest",
                maxOffsetsPerTrigger="70")
    batches = run_available_now(df, tmp_path / "checkpoint")
    client = client_read(cluster, topic, 3)
    assert all_rows(batches) == client
    assert strip(client) == expected(topic, data)
    # The limit counts offsets (as Kafka's does), control batches included: replay the plan
    # from the offsets in the log, then each batch holds exactly the records of its ranges.
    from spark_source.planning import rate_limit

    ends = {(topic, p): max(r[2] for r in client if r[1] == p) + 1 for p in range(3)}
    start = {tp: 0 for tp in ends}
    plans = []
    while start != ends:
        end = rate_limit(start, ends, 70)
        assert sum(end[tp] - start[tp] for tp in ends) <= 70
        plans.append([r for r in client if start[(topic, r[1])] <= r[2] < end[(topic, r[1])]])
        start = end
    assert len(plans) == 3  # about 200 offsets at most 70 per trigger
    assert [rows for _bid, rows in sorted(batches.items()) if rows] == plans


def test_starting_offsets_latest_reads_only_what_comes_after_the_start(spark, cluster, tmp_path):
    topic = "spark-latest"
    create_topic(cluster, topic, 2)
    produce(cluster, topic, {0: range(30), 1: range(20)})
    checkpoint = tmp_path / "checkpoint"
    df = reader(spark, cluster, topic, stream=True, startingOffsets="latest")
    assert all_rows(run_available_now(df, checkpoint)) == []
    produce(cluster, topic, {0: range(30, 45), 1: range(20, 22)})
    got = all_rows(run_available_now(df, checkpoint))
    # "latest" was fixed at the first run (the checkpoint keeps it): exactly the new records.
    assert strip(got) == expected(topic, {0: range(30, 45), 1: range(20, 22)})
    assert set(got) <= set(client_read(cluster, topic, 2))


def test_fail_on_data_loss_after_retention_errors_by_default_and_skips_when_false(spark, cluster, tmp_path):
    topic = "spark-retained"
    create_topic(cluster, topic, 1, {"segment_bytes": "4096"})
    produce(cluster, topic, {0: range(50)}, flush_every=25)
    checkpoint = tmp_path / "checkpoint"
    first = all_rows(run_available_now(
        reader(spark, cluster, topic, stream=True, startingOffsets="earliest"), checkpoint))
    assert strip(first) == expected(topic, {0: range(50)})
    produce(cluster, topic, {0: range(50, 400)}, flush_every=50)
    with _admin(cluster) as admin:
        admin.alter_configs(topic, {"retention_ms": "1"})  # every closed segment expires

    def log_start() -> int:
        from raftlog.client.request import list_offsets_request, parse_list_offsets

        with _admin(cluster) as admin:
            msg = admin.request(list_offsets_request([(topic, 0, -2)]), route=(topic, 0))
        return parse_list_offsets(msg)[(topic, 0)][0]

    lso = cluster.wait_for(lambda: log_start() if log_start() > 60 else None, 40,
                           "retention to advance the log start offset past 60")
    # A batch read from an offset that is gone fails at planning time...
    with pytest.raises(Exception, match="DATA_LOSS|failOnDataLoss"):
        reader(spark, cluster, topic, stream=False,
               startingOffsets=json.dumps({topic: {"0": 0}})).collect()
    # ...and a stream resuming below the log start fails the query by default...
    with pytest.raises(AssertionError, match="failOnDataLoss"):
        run_available_now(reader(spark, cluster, topic, stream=True), checkpoint)
    # ...and with failOnDataLoss=false skips to the log start and reads the rest once.
    rest = all_rows(run_available_now(
        reader(spark, cluster, topic, stream=True, failOnDataLoss="false"), checkpoint))
    assert rest[0][2] >= lso  # nothing below the log start offset seen at the time
    skipped_to = int(rest[0][4].split(b"-")[-1])
    assert skipped_to > 50
    assert strip(rest) == expected(topic, {0: range(skipped_to, 400)})
    assert rest == [r for r in client_read(cluster, topic, 1) if r[2] >= rest[0][2]]


def test_groups_decoded_offsets_start_from_a_group_commit_back_and_give_the_lag(spark, cluster, tmp_path):
    from pyspark.sql import functions as F
    from raftlog.client import Consumer
    from spark_source import group_commit_listener

    topic, group = "spark-groups", "spark-group"
    create_topic(cluster, topic, 2)
    produce(cluster, topic, {0: range(40), 1: range(30)})
    bootstrap = ",".join(cluster.client(n) for n in sorted(cluster.configs))
    before_ms = int(time.time() * 1000)
    with Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c:
        c.commit({(topic, 0): 5, (topic, 1): 7})
        c.commit({(topic, 0): 10, (topic, 1): 12})  # the latest value per key wins

    def committed_rows():
        df = (spark.read.format("raftlog").option("bootstrap", bootstrap)
              .option("decode", "offsets").load())
        assert df.columns == ["group", "topic", "partition", "committed_offset", "metadata",
                              "commit_timestamp"]
        return df.where(F.col("group") == group)

    rows = committed_rows().collect()
    assert sorted((r.topic, r.partition, r.committed_offset, r.metadata) for r in rows) == [
        (topic, 0, 10, ""), (topic, 1, 12, "")]
    assert all(before_ms - 1000 <= r.commit_timestamp.timestamp() * 1000 <= time.time() * 1000
               for r in rows)

    # A stream starts from the group's offsets and the listener commits its progress back.
    client = client_read(cluster, topic, 2)
    ends = {p: max(r[2] for r in client if r[1] == p) + 1 for p in range(2)}
    listener = group_commit_listener(bootstrap, group)
    spark.streams.addListener(listener)
    try:
        got = all_rows(run_available_now(
            reader(spark, cluster, topic, stream=True, startingOffsets=f"group:{group}"),
            tmp_path / "checkpoint"))
        assert got == [r for r in client if r[2] >= {0: 10, 1: 12}[r[1]]]
        with Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c:
            cluster.wait_for(lambda: c.committed([(topic, 0), (topic, 1)]) ==
                             {(topic, 0): ends[0], (topic, 1): ends[1]}, 20,
                             "the listener's commit of the last batch")
    finally:
        spark.streams.removeListener(listener)

    # Lag: the data's end per partition joined with the decoded committed offsets.
    produce(cluster, topic, {0: range(40, 45)})
    data_ends = (reader(spark, cluster, topic, stream=False).groupBy("topic", "partition")
                 .agg((F.max("offset") + 1).alias("end_offset")))
    lag = (data_ends.join(committed_rows(), ["topic", "partition"])
           .select("partition", (F.col("end_offset") - F.col("committed_offset")).alias("lag")))
    assert sorted(tuple(r) for r in lag.collect()) == [(0, 5), (1, 0)]


def test_stream_resumes_exactly_once_across_a_partition_leader_sigkill(spark, cluster, tmp_path):
    topic = "spark-stream"
    create_topic(cluster, topic, 3)
    first_data = {0: range(200), 1: range(150), 2: range(100)}
    produce(cluster, topic, first_data)
    checkpoint = tmp_path / "checkpoint"
    df = reader(spark, cluster, topic, stream=True, startingOffsets="earliest")
    first = run_available_now(df, checkpoint)
    before = client_read(cluster, topic, 3)
    assert all_rows(first) == before
    assert strip(before) == expected(topic, first_data)

    more = {0: range(200, 260), 1: range(150, 170), 2: range(100, 140)}
    produce(cluster, topic, more)
    victim = _leaders(cluster, topic)[0]
    cluster.kill(victim)  # SIGKILL by PID; the node stays down for the second run
    try:
        cluster.wait_for(lambda: _leaders(cluster, topic)[0] not in (None, victim), 20,
                         "a new leader of partition 0")
        after = {0: range(260, 300), 1: range(170, 180), 2: range(140, 150)}
        produce(cluster, topic, after)
        second = run_available_now(df, checkpoint)
        new_data = {p: range(more[p].start, after[p].stop) for p in range(3)}
        assert strip(all_rows(second)) == expected(topic, new_data)
        now = client_read(cluster, topic, 3)
        assert all_rows(second) == sorted(set(now) - set(before))
        assert min(second) > max(first)
    finally:
        cluster.start(victim)
        cluster.wait_ready(timeout_s=40)

"""Helpers of the Spark sink tests (loaded by path, as spark_fixtures): topics, unique-id input
rows, reading a topic back, and the exactly-once check (every id once, ids of a key in order).

Input rows of topic A: record i has key b"k<i % KEYS>" and value b"id-<i:07d>", produced in
order of i with acks=all, so within a key the ids increase with the offset. A pipeline that
copies A to B with the sink keeps that order (same keys, same partition count, so a key's
rows land in one partition of B in the order the source task read them).
"""

from __future__ import annotations

import time
from typing import Any

KEYS = 13


def admin(bootstrap: str):
    from raftlog.client import Admin

    return Admin(bootstrap, request_timeout_ms=15_000)


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> None:
    from raftlog.base.errors import InvalidReplicationFactorError

    deadline = time.monotonic() + timeout_s
    with admin(bootstrap) as a:
        while True:  # a broker fenced for a moment on a loaded machine refuses RF 3: ask again
            try:
                a.create_topic(topic, partitions, 3)
                break
            except InvalidReplicationFactorError:
                assert time.monotonic() < deadline, f"fewer than 3 live brokers for {timeout_s} s"
                time.sleep(0.2)
        while True:
            info = a.describe_topics([topic]).get(topic)
            if info is not None and len(info.partitions) == partitions and all(
                    p.leader is not None for p in info.partitions):
                return
            assert time.monotonic() < deadline, f"no leaders for {topic} in {timeout_s} s"
            time.sleep(0.05)


def leaders(bootstrap: str, topic: str) -> dict[int, int | None]:
    with admin(bootstrap) as a:
        return {p.partition: p.leader for p in a.describe_topics([topic])[topic].partitions}


def produce_ids(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Records first..first+count-1 of the module docstring's shape into `topic`."""
    from raftlog.client import Producer

    with Producer(bootstrap, acks="all", linger_ms=5, batch_bytes=256 * 1024,
                  delivery_timeout_ms=120_000) as p:
        futures = [p.send(topic, b"id-%07d" % i, key=b"k%d" % (i % KEYS)) for i in range(first, first + count)]
        p.flush(120)
        for f in futures:  # flush waits for failures too: each record must be acked
            f.result(0)


def end_offsets(bootstrap: str, topic: str, *, stable: bool = False) -> dict[int, int]:
    """Each partition's high watermark, or with `stable` its last stable offset (below every
    open transaction)."""
    from raftlog.client.request import list_offsets_request, parse_list_offsets

    out = {}
    with admin(bootstrap) as a:
        for p in leaders(bootstrap, topic):
            req = list_offsets_request([(topic, p, -1)])
            if stable:
                req["isolation_level"] = 1
            msg = a.request(req, route=(topic, p))
            out[p] = parse_list_offsets(msg)[(topic, p)][0]
    return out


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60, *, settled: bool = True) -> list[Any]:
    """Every record a read_committed reader sees (the sink's transactions), in (partition,
    offset) order. `settled`: first wait until no transaction of `topic` is open any more
    (last stable offsets = high watermarks, polled under the deadline: the markers follow
    the commit); else read up to the last stable offsets as they are."""
    from raftlog.client import Consumer

    deadline = time.monotonic() + timeout_s
    while (ends := end_offsets(bootstrap, topic, stable=True)) != end_offsets(bootstrap, topic) and settled:
        assert time.monotonic() < deadline, f"{topic} still has an open transaction after {timeout_s} s"
        time.sleep(0.1)
    out = []
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=50_000,
                  isolation_level="read_committed") as c:
        c.assign([(topic, p) for p in ends])
        c.seek_to_beginning()
        while any(c.position((topic, p)) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            out.extend(r for r in c.poll(timeout_ms=500) if r.offset < ends[r.partition])
    return sorted(out, key=lambda r: (r.partition, r.offset))


def count_records(bootstrap: str, topic: str) -> int:
    """Records in `topic` (offsets below the high watermarks, control batches included)."""
    return sum(end_offsets(bootstrap, topic).values())


def check_exactly_once(records: list[Any], expected_ids: range) -> None:
    """Every id of `expected_ids` exactly once (counted by id), and within each key the ids
    increase with the offset (per-key order)."""
    ids = [int(r.value.split(b"-")[1]) for r in records]
    seen: dict[int, int] = {}
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    doubled = sorted(i for i, n in seen.items() if n > 1)
    missing = sorted(set(expected_ids) - set(seen))
    extra = sorted(set(seen) - set(expected_ids))
    assert not doubled and not missing and not extra, (
        f"not exactly once: {len(doubled)} ids doubled (first {doubled[:5]}), {len(missing)} "
        f"missing (first {missing[:5]}), {len(extra)} unexpected")
    last: dict[bytes, int] = {}
    for r in records:
        i = int(r.value.split(b"-")[1])
        assert r.key == b"k%d" % (i % KEYS), f"id {i} has key {r.key!r}"
        assert last.get(r.key, -1) < i, f"key {r.key!r}: id {i} after id {last[r.key]}"
        last[r.key] = i


def copy_query(spark, bootstrap: str, source: str, sink: str, checkpoint: str, *,
               max_offsets: int | None = None, batch_bytes: int = 2048, transform=None,
               trigger: dict | None = None, **sink_options: str):
    """A streaming query copying `source` to `sink` (key and value) with the sink; small
    producer batches so that a task's writes are spread over many requests. Returns the
    started StreamingQuery."""
    reader = (spark.readStream.format("raftlog").option("bootstrap", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("raftlog.read.timeout.ms", "30000"))
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    df = reader.load().select("key", "value")
    if transform is not None:
        df = transform(df)
    w = (df.writeStream.format("raftlog").option("bootstrap", bootstrap).option("topic", sink)
         .option("raftlog.batch.bytes", str(batch_bytes))
         .option("raftlog.request.timeout.ms", "5000")
         .option("checkpointLocation", checkpoint))
    for k, v in sink_options.items():
        w = w.option(k, v)
    return w.trigger(**(trigger or {"availableNow": True})).start()


def await_query(q, timeout_s: float = 180) -> None:
    """Wait for an AvailableNow query; raise AssertionError with its failure."""
    from pyspark.errors import StreamingQueryException

    try:
        assert q.awaitTermination(timeout_s), f"the query did not finish in {timeout_s} s"
    except StreamingQueryException as exc:
        raise AssertionError(f"the query failed: {str(exc)[:2000]}") from None
    finally:
        if q.isActive:
            q.stop()

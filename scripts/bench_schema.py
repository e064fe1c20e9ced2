"""confluent-kafka's AvroSerializer against raftlog's Schema Registry (issue 45), on a real
three-node cluster.

    python scripts/bench_schema.py [--records 200000] [--runs 3]

Two producers of the same records in the same run, alternating, each timed from the first
produce() to the last delivery (acks=all, RF=3, 6 partitions, linger.ms=5):
* serialised: every value passed through AvroSerializer per record (the serializer registers
  the schema once and caches the id: the registry must not be hit per record);
* pre-serialised: the same Confluent-framed bytes, made before the clock starts.
Prints records/s of both (median of --runs) and their ratio serialised / pre-serialised
(target >= 0.9), the serializer's own rate without producing (its CPU per record, a bound on
the serialised rate), how many `_schemas` records the runs wrote (one registration per
subject) and how many registry requests each serialised run made (the nodes' /metrics: the
serializer caches the id, so a handful, not one per record).

The nodes are real processes on free loopback ports with a temp data dir (the integration
tests' harness); every node is stopped by its PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_kafka import _load, load_harness  # the harness loader and load average, as bench_kafka's

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = {"type": "record", "name": "Reading", "namespace": "bench",
          "fields": [{"name": "sensor", "type": "string"}, {"name": "seq", "type": "long"},
                     {"name": "value", "type": "double"}, {"name": "unit", "type": "string"}]}


def produce(bootstrap: str, topic: str, values: list, serialize=None) -> float:
    """Records/s of producing `values` (bytes, or dicts through `serialize`) to `topic`."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    ctx = SerializationContext(topic, MessageField.VALUE)
    failed = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)

    producer.produce(topic, b"warmup", on_delivery=on_delivery)
    producer.flush(60)
    start = time.perf_counter()
    for value in values:
        payload = serialize(value, ctx) if serialize is not None else value
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[:3]}")
    return len(values) / (time.perf_counter() - start)


def registry_requests(cluster) -> int:
    """Schema Registry requests the nodes have answered (their /metrics)."""
    import urllib.request

    total = 0.0
    for node_id in cluster.live():
        with urllib.request.urlopen(f"http://{cluster.http(node_id)}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("raftlog_schema_registry_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
    return int(total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.records < 1 or args.runs < 1:
        parser.error("--records and --runs must be at least 1")
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    harness = load_harness()
    with tempfile.TemporaryDirectory(prefix="bench-schema-") as tmp, harness.NodeCluster(Path(tmp), size=3) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=90)
        print(f"nodes: {', '.join(f'{n}: pid {p.pid}' for n, p in cluster.processes.items())}", flush=True)
        bootstrap = cluster.kafka_bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        values = [{"sensor": f"s-{i % 100}", "seq": i, "value": i * 0.5, "unit": "celsius"} for i in range(args.records)]
        registry = SchemaRegistryClient({"url": ",".join(cluster.schema_registry(n) for n in (1, 2, 3))})
        try:
            serialized: list[float] = []
            raw: list[float] = []
            alone: list[float] = []
            asked_per_run: list[int] = []  # registry requests during a serialised run  # the serializer by itself: the client's CPU per record
            before = cluster.health(1)[1]["registry"]["applied_offset"]
            for run in range(args.runs):
                topics = [f"bench-schema-{uuid.uuid4().hex[:6]}" for _ in range(2)]
                for f in admin.create_topics([NewTopic(t, 6, 3) for t in topics]).values():
                    f.result(60)
                serializer = AvroSerializer(registry, json.dumps(SCHEMA))
                ctx = SerializationContext(topics[1], MessageField.VALUE)
                started = time.perf_counter()
                framed = [serializer(v, ctx) for v in values]  # before the clock: the baseline's bytes
                alone.append(len(values) / (time.perf_counter() - started))
                asked = registry_requests(cluster)
                serialized.append(produce(bootstrap, topics[0], values, serializer))
                asked_per_run.append(registry_requests(cluster) - asked)
                raw.append(produce(bootstrap, topics[1], framed))
                print(f"run {run + 1}: AvroSerializer {serialized[-1]:,.0f} rec/s, pre-serialised {raw[-1]:,.0f} rec/s",
                      flush=True)
            after = cluster.health(1)[1]["registry"]["applied_offset"]
        finally:
            registry.close()
        s, r = statistics.median(serialized), statistics.median(raw)
        print(f"records: {args.records:,} per run, {args.runs} runs, load average {_load()}")
        print(f"AvroSerializer produce: {s:,.0f} records/s (median)")
        print(f"pre-serialised produce: {r:,.0f} records/s (median)")
        print(f"ratio serialised / pre-serialised: {s / r:.2f} (target >= 0.90)")
        print(f"AvroSerializer alone, no produce: {statistics.median(alone):,.0f} records/s (the client's own "
              "CPU per record: a bound on the serialised rate whatever the registry does)")
        print(f"_schemas records written during the runs: {after - before} (one registration per subject)")
        print(f"registry requests during each serialised run of {args.records:,} records: {asked_per_run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

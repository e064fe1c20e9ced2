"""PySpark Python Data Source `format("raftlog")`: batch and micro-batch reads of raftlog topics
with the options and output schema of Spark's built-in Kafka source (DESIGN §7).

Public API (declared here once):

    from spark_source import register
    register(spark)                                   # once per SparkSession
    df = (spark.read.format("raftlog")
          .option("bootstrap", "127.0.0.1:9093")      # or raftlog.bootstrap.servers
          .option("subscribe", "events")              # or subscribePattern / assign (JSON)
          .option("startingOffsets", "earliest")      # earliest | latest | JSON | group:<id>
          .load())
    # key binary, value binary, topic string, partition int, offset long,
    # timestamp timestamp, timestampType int [, headers array<struct<key,value>>]

Streaming: `spark.readStream.format("raftlog")` with `maxOffsetsPerTrigger` (admission
control), `failOnDataLoss`, `startingTimestamp`, `minPartitions`, `includeHeaders`;
`startingOffsets=group:<id>`; `commitToGroup` (one batch behind) and
`spark.streams.addListener(group_commit_listener(bootstrap, group))` (every completed
batch) write progress to a consumer group. Batch `decode=offsets` reads
`__consumer_offsets` as group, topic, partition, committed_offset, metadata,
commit_timestamp (latest per key).

Typed keys and values: `valueFormat` / `keyFormat` = avro | protobuf | json-schema with
`schemaRegistryUrl` decode Confluent's wire format into struct columns (with `value_error` /
`key_error` for records that do not decode) and encode them in the sink (`schemas`).

Isolation: reads are read_committed unless `kafka.isolation.level=read_uncommitted` (as
Spark's Kafka source): up to the last stable offset, aborted transactions' records skipped.

Writing: `df.write.format("raftlog")` (at-least-once) and `df.writeStream.format("raftlog")`
(exactly-once per micro-batch unless exactlyOnce=false: one transaction per write task,
committed on Spark's commit; docs/spark-exactly-once.md) with Spark's Kafka sink columns:
value, key, topic (or option topic), partition, headers.

Modules: `options` (parsing, the error tree), `schemas` (typed columns through a registry), `sink` (pure: sink options, schema check,
rows, transactional ids), `writer` (Spark's Arrow writers over the client's Producer), `planning` (pure: offsets JSON, ranges,
admission control, splits), `arrow` (batches -> Arrow columns), `fetch` (Provider, the
blocking cluster provider, the read loop), `source` (the DataSource and its readers).
"""

from spark_source.options import (
    DataLoss,
    InvalidOption,
    NotAvailableYet,
    ReadTimedOut,
    SourceError,
    SourceOptions,
    parse_options,
)
from spark_source.planning import RaftlogInputPartition

__all__ = [
    "register",
    "RaftlogDataSource",
    "group_commit_listener",
    "RaftlogInputPartition",
    "SourceOptions",
    "parse_options",
    "SourceError",
    "InvalidOption",
    "DataLoss",
    "NotAvailableYet",
    "ReadTimedOut",
]


def __getattr__(name: str):
    # The Spark-facing names import pyspark; keep `import spark_source` cheap without it.
    if name in ("register", "RaftlogDataSource", "group_commit_listener"):
        from spark_source import source

        return getattr(source, name)
    raise AttributeError(f"module 'spark_source' has no attribute {name!r}")

"""`format("raftlog")`: the PySpark Python Data Source (batch and micro-batch streaming).

Thin shell: options come from `options.py`, every decision from `planning.py`, every byte
from `fetch.py`. Spark's process model (measured, see the shared notes) shapes it:

* The driver runs one long-lived Python process per streaming query holding one
  `RaftlogStreamReader` (initialOffset, latestOffset, partitions, commit, stop); a planning
  step builds another reader and pickles it to the executors, whose `read()` sees nothing
  the driver built. So readers hold only plain values (options, the provider factory,
  leader hints); a provider (sockets) is made lazily by `provider_for` in whichever process
  needs one and cached there per process.
* `read(partition)` is stateless: it reads exactly the planned [start, end) of one
  topic-partition and yields Arrow record batches.
* Offsets are `{"topic": {"partition": next offset}}` with topics sorted and partitions
  ascending, so Spark's string comparison of offsets is sound.
* `maxOffsetsPerTrigger` is admission control: `getDefaultReadLimit()` returns
  ReadMaxRows(n) and `latestOffset(start, limit)` honours whatever limit Spark passes
  (ReadAllAvailable included). `Trigger.AvailableNow` fixes a target in
  `prepareForTriggerAvailableNow` and never plans past it.
* Consumer groups: `startingOffsets="group:<id>"` starts from a group's committed offsets
  (earliest where it has none). Progress goes back to a group in two ways:
  `commitToGroup=<id>` commits from the source's `commit(end)`, which Spark calls only when
  it plans the NEXT batch, so it runs one batch behind and the last batch of a run is never
  committed; `spark.streams.addListener(group_commit_listener(bootstrap, group_id))` commits
  every completed batch's end offsets from the driver (`onQueryProgress`), the complete way.
  Commits are Kafka's "simple" commits (no membership, generation -1): the group must have
  no live members. Offsets committed are the next offsets to read, as Kafka's.
* `decode=offsets` (batch only) reads `__consumer_offsets` as (group, topic, partition,
  committed_offset, metadata, commit_timestamp), the latest value per key, so a job can
  join its data with group progress (lag = latest offset - committed_offset).

Usage:
    from spark_source import register
    register(spark)
    df = (spark.readStream.format("raftlog").option("bootstrap", "127.0.0.1:9093")
          .option("subscribe", "events").option("startingOffsets", "earliest").load())
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_source.arrow import OFFSETS_SCHEMA_DDL, schema_ddl
from spark_source.schemas import parse_format_options, typed_batches, typed_schema_ddl
from spark_source.fetch import (
    ClusterProvider,
    ProviderFactory,
    provider_for,
    read_range,
    release_provider,
)
from spark_source.options import (
    InvalidOption,
    SourceOptions,
    TopicPartition,
    parse_options,
)
from spark_source.planning import (
    PartitionMeta,
    RaftlogInputPartition,
    next_end_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_offsets,
    select_partitions,
    split_ranges,
    timestamps_to_look_up,
)

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1 call latestOffset() with no limit
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = [
    "RaftlogDataSource",
    "RaftlogBatchReader",
    "RaftlogStreamReader",
    "group_commit_listener",
    "register",
]

log = logging.getLogger(__name__)


def register(spark: Any, source: type[DataSource] | None = None) -> type[DataSource]:
    """Register `format("raftlog")` in this SparkSession (once per session). Returns the
    registered class."""
    cls = source or RaftlogDataSource
    spark.dataSource.register(cls)
    return cls


class RaftlogDataSource(DataSource):
    """The data source. Subclasses may set `provider_factory` (SourceOptions -> Provider) to
    read from something other than a raftlog cluster (tests)."""

    provider_factory: ClassVar[ProviderFactory] = ClusterProvider.from_options

    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def schema(self) -> str:
        opts = {str(k).lower(): v for k, v in self.options.items()}
        if "decode" in opts:
            parse_options(opts, streaming=False)  # raises InvalidOption on a bad combination
            return OFFSETS_SCHEMA_DDL
        raw = str(opts.get("includeheaders", "false")).strip().lower()
        if raw not in ("true", "false"):
            raise InvalidOption(f"option includeHeaders={raw!r}: expected 'true' or 'false'")
        formats = parse_format_options(opts)
        if formats is None:
            return schema_ddl(raw == "true")
        return typed_schema_ddl(schema_ddl(raw == "true"), formats, _single_topic(opts))

    def reader(self, schema: StructType) -> RaftlogBatchReader:
        return RaftlogBatchReader(parse_options(self.options, streaming=False),
                                  type(self).provider_factory)

    def writer(self, schema: StructType, overwrite: bool):
        """`df.write.format("raftlog")`: at-least-once, Arrow batches per task."""
        from spark_source.writer import RaftlogBatchWriter

        opts, sink_schema = _sink(self.options, schema, overwrite, streaming=False)
        return RaftlogBatchWriter(opts, sink_schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """`df.writeStream.format("raftlog")`: exactly-once per micro-batch by default."""
        from spark_source.writer import RaftlogStreamWriter

        opts, sink_schema = _sink(self.options, schema, overwrite, streaming=True)
        return RaftlogStreamWriter(opts, sink_schema)

    def streamReader(self, schema: StructType) -> RaftlogStreamReader:
        opts = parse_options(self.options, streaming=True)
        factory = type(self).provider_factory
        if opts.commit_to_group is not None:
            # Fail at query start, not after the first batch. No I/O: the check is local.
            provider_for(factory, opts).check_groups()
        return RaftlogStreamReader(opts, factory)


# ---------------------------------------------------------------- shared helpers


def _single_topic(opts) -> str | None:
    """The one subscribed topic (the default subjects are named after it), else None."""
    topics = [t.strip() for t in str(opts.get("subscribe", "")).split(",") if t.strip()]
    return topics[0] if len(topics) == 1 else None


def _sink(options, schema: StructType, overwrite: bool, *, streaming: bool):
    from spark_source.sink import check_schema, parse_sink_options
    from spark_source.writer import check_writable

    opts = parse_sink_options(options, streaming=streaming)
    check_writable(opts, overwrite)
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return opts, check_schema(fields, opts)


def _topics_arg(opts: SourceOptions) -> list[str] | None:
    sub = opts.subscription
    if sub.kind == "subscribe":
        return list(sub.topics)
    if sub.kind == "assign":
        return sorted({t for t, _ in sub.assigned})
    return None  # a pattern: every topic


def _discover(provider, opts: SourceOptions) -> dict[TopicPartition, PartitionMeta]:
    metas = select_partitions(opts.subscription, provider.list_partitions(_topics_arg(opts)))
    return {(m.topic, m.partition): m for m in metas}


def _resolve(provider, opts: SourceOptions, spec, tps: list[TopicPartition],
             earliest: dict, latest: dict, name: str) -> dict[TopicPartition, int]:
    want_ts = timestamps_to_look_up(spec, tps)
    by_ts = provider.offsets_for_times(want_ts) if want_ts else None
    committed = provider.committed_offsets(spec.group_id, tps) if spec.kind == "group" else None
    return resolve_offsets(spec, tps, earliest, latest, name=name, by_timestamp=by_ts,
                           committed=committed, timestamp_strategy=opts.timestamp_strategy)


def _read(factory: ProviderFactory, opts: SourceOptions,
          partition: RaftlogInputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RaftlogInputPartition):
        # Spark replaces an empty partitions() list by one plain InputPartition(None) for
        # a batch read (measured): there is nothing to read.
        return
    provider = provider_for(factory, opts)
    batches = read_range(provider, partition, include_headers=opts.include_headers,
                         fetch_max_bytes=opts.fetch_max_bytes,
                         read_timeout_ms=opts.read_timeout_ms,
                         fail_on_data_loss=opts.fail_on_data_loss)
    formats = parse_format_options(opts.raw)
    if opts.decode == "offsets":
        yield from _latest_offsets(batches)
    elif formats is not None:
        yield from typed_batches(batches, formats, _single_topic(opts.raw))
    else:
        yield from batches


_OFFSETS_ARROW = pa.schema([
    ("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("committed_offset", pa.int64()), ("metadata", pa.string()),
    ("commit_timestamp", pa.timestamp("us", tz="UTC")),
])


def _latest_offsets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """decode=offsets: the records of one whole `__consumer_offsets` partition in, the latest
    committed offset per (group, topic, partition) out (a tombstone deletes the key; group
    metadata records are skipped). Every key of a group lives in the group's one partition,
    so one task sees all of a key's records, in offset order."""
    from groupcoord.records import OffsetKey, decode_record

    latest: dict[tuple[str, str, int], object] = {}
    for batch in batches:
        for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
            if key is None:
                continue
            k, v = decode_record(key, value)  # raises InvalidGroupRecordError on bad bytes
            if not isinstance(k, OffsetKey):
                continue
            if v is None:
                latest.pop((k.group, k.topic, k.partition), None)
            else:
                latest[(k.group, k.topic, k.partition)] = v
    if not latest:
        return
    rows = sorted(latest.items())
    yield pa.RecordBatch.from_arrays([
        pa.array([g for (g, _t, _p), _v in rows], pa.string()),
        pa.array([t for (_g, t, _p), _v in rows], pa.string()),
        pa.array([p for (_g, _t, p), _v in rows], pa.int32()),
        pa.array([v.offset for _k, v in rows], pa.int64()),
        pa.array([v.metadata for _k, v in rows], pa.string()),
        pa.array([v.commit_timestamp * 1000 for _k, v in rows], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
    ], schema=_OFFSETS_ARROW)


def _log_warnings(warnings: list[str]) -> None:
    for w in warnings:
        log.warning(w)


# ---------------------------------------------------------------- batch


class RaftlogBatchReader(DataSourceReader):
    """`spark.read.format("raftlog")`: [startingOffsets, endingOffsets) of every subscribed
    partition, one task per partition (more with minPartitions)."""

    def __init__(self, options: SourceOptions, factory: ProviderFactory):
        self._options = options
        self._factory = factory

    def partitions(self) -> list[RaftlogInputPartition]:
        opts = self._options
        provider = provider_for(self._factory, opts)
        metas = _discover(provider, opts)
        tps = sorted(metas)
        if not tps:
            return []
        earliest = provider.earliest_offsets(tps)
        latest = provider.latest_offsets(tps)
        start = _resolve(provider, opts, opts.starting, tps, earliest, latest, "startingOffsets")
        end = _resolve(provider, opts, opts.ending, tps, earliest, latest, "endingOffsets")
        for tp in tps:
            if end[tp] > latest[tp]:
                raise InvalidOption(f"endingOffsets for {tp[0]}-{tp[1]} is {end[tp]}, past the "
                                    f"latest offset {latest[tp]}")
            if start[tp] > end[tp]:
                raise InvalidOption(f"{tp[0]}-{tp[1]}: starting offset {start[tp]} is after "
                                    f"the ending offset {end[tp]}")
        ranges, warnings = plan_ranges(start, end, earliest, metas,
                                       fail_on_data_loss=opts.fail_on_data_loss,
                                       new_partitions_from_zero=False)
        _log_warnings(warnings)
        if opts.decode is not None:
            return ranges  # latest value per key: one task must see a whole partition
        return split_ranges(ranges, opts.min_partitions)

    def read(self, partition: RaftlogInputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._factory, self._options, partition)


# ---------------------------------------------------------------- streaming


class RaftlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("raftlog")`. Driver-side state (leader hints, the
    AvailableNow target, the last latest offsets) is an optimisation or a per-run setting;
    offsets and ranges depend only on the arguments and the cluster."""

    def __init__(self, options: SourceOptions, factory: ProviderFactory):
        self._options = options
        self._factory = factory
        self._metas: dict[TopicPartition, PartitionMeta] = {}
        self._target: dict[TopicPartition, int] | None = None
        self._last_latest: dict[TopicPartition, int] | None = None

    def _provider(self):
        return provider_for(self._factory, self._options)

    def initialOffset(self) -> dict:
        opts = self._options
        provider = self._provider()
        self._metas = _discover(provider, opts)
        tps = sorted(self._metas)
        if not tps:
            return {}
        earliest = provider.earliest_offsets(tps)
        latest = provider.latest_offsets(tps)
        start = _resolve(provider, opts, opts.starting, tps, earliest, latest, "startingOffsets")
        return offsets_to_json(start)

    def getDefaultReadLimit(self):
        n = self._options.max_offsets_per_trigger
        if n is not None and ReadMaxRows is not None:
            return ReadMaxRows(n)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        provider = self._provider()
        self._metas = _discover(provider, self._options)
        self._target = provider.latest_offsets(sorted(self._metas))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        opts = self._options
        provider = self._provider()
        self._metas = _discover(provider, opts)
        tps = sorted(self._metas)
        latest = provider.latest_offsets(tps) if tps else {}
        self._last_latest = latest
        if start is None:  # Spark 4.0/4.1: no start, no limit
            return offsets_to_json(latest)
        start_map = offsets_from_json(start)
        new = [tp for tp in tps if tp not in start_map]
        earliest_of_new = provider.earliest_offsets(new) if new else {}
        max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        end, warnings = next_end_offsets(start_map, latest, earliest_of_new, limit=max_rows,
                                         fail_on_data_loss=opts.fail_on_data_loss,
                                         target=self._target)
        _log_warnings(warnings)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._last_latest is None else offsets_to_json(self._last_latest)

    def partitions(self, start: dict, end: dict) -> list[RaftlogInputPartition]:
        opts = self._options
        s = offsets_from_json(start)
        e = offsets_from_json(end)
        new = [tp for tp in sorted(e) if tp not in s]
        earliest = self._provider().earliest_offsets(new) if new else {}
        ranges, warnings = plan_ranges(s, e, earliest, self._metas,
                                       fail_on_data_loss=opts.fail_on_data_loss,
                                       new_partitions_from_zero=True)
        _log_warnings(warnings)
        return split_ranges(ranges, opts.min_partitions)

    def read(self, partition: RaftlogInputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._factory, self._options, partition)

    def commit(self, end: dict) -> None:
        # Arrives one batch late (when Spark plans the next one); see group_commit_listener.
        group = self._options.commit_to_group
        if group is not None:
            self._provider().commit_offsets(group, offsets_from_json(end))

    def stop(self) -> None:
        release_provider(self._factory, self._options)


# ---------------------------------------------------------------- group progress


def group_commit_listener(bootstrap: str, group_id: str, *,
                        factory: ProviderFactory = ClusterProvider.from_options,
                        query_name: str | None = None):
    """A StreamingQueryListener committing every completed batch's raftlog end offsets to
    `group_id` (add it with `spark.streams.addListener(...)`). It sees each batch as it
    completes, unlike the source's `commit(end)`, which Spark calls one batch late.
    Spark delivers listener events asynchronously: the commit of a run's last batch lands
    shortly after the query ends. `query_name` limits it to one named query."""
    from pyspark.sql.streaming import StreamingQueryListener

    opts = parse_options({"bootstrap": bootstrap, "subscribepattern": ".*"}, streaming=True)
    provider_for(factory, opts).check_groups()

    class _GroupCommitListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if query_name is not None and progress.name != query_name:
                return
            for src in progress.sources:
                try:
                    offsets = offsets_from_json(json.loads(src.endOffset or "null"))
                except (InvalidOption, json.JSONDecodeError, TypeError):
                    continue  # not a raftlog source (or no offsets yet)
                if offsets:
                    provider_for(factory, opts).commit_offsets(group_id, offsets)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return _GroupCommitListener()


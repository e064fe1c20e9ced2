"""The pure half of the sink (`df.write.format("raftlog")`, `df.writeStream.format("raftlog")`):
options, the input schema check, Arrow columns -> records, deterministic partitions for
keyless rows, and the derived producer identity of exactly-once writes.

No I/O, no Spark session, no clock. `writer.py` is the shell (Spark's writer classes and the
client's Producer).

Input columns are Spark's Kafka sink's: `value` (string or binary, required), `key` (string
or binary), `topic` (string; the `topic` option, else `path`, overrides it), `partition`
(int), `headers` (array<struct<key: string, value: binary>>). Other columns are ignored, as
Spark's Kafka sink ignores them. Strings are written as their UTF-8 bytes.

Options (lower-cased keys, as Spark passes them): `bootstrap` or `raftlog.bootstrap.servers`
(required), `topic`, `exactlyOnce` (streaming only, default true), `rowOrder` ("input", the
default: rows are sent in the order Spark gives them; "key": a task first gathers its rows,
up to `raftlog.sink.max.task.bytes`, and sends them stably sorted by key, which makes the
order of a task's rows the same in every attempt after a shuffle when each key appears once
per task, as after an aggregation), and producer settings
under the `raftlog.` prefix the source uses: `raftlog.acks`, `raftlog.linger.ms`,
`raftlog.batch.bytes`, `raftlog.buffer.bytes`, `raftlog.compression.type`,
`raftlog.request.timeout.ms`, `raftlog.delivery.timeout.ms`, `raftlog.max.block.ms`,
`raftlog.enable.idempotence`. Exactly-once fixes acks=all, idempotence, and no linger.

Exactly-once (docs/transactions.md, docs/spark-exactly-once.md): every attempt of write task
(query, batch, partition) writes in one transaction of transactional id
`sink_transactional_id(query, batch, partition)`, committed by the driver on Spark's commit
(writer.py), so read_committed readers see a micro-batch whole or not at all; the option
`raftlog.transaction.timeout.ms` (300 000) bounds how long it may stay open. Keyless rows
with no partition go to partitions chosen by `KeylessSpreader` (row index, not the clock).
`derived_producer_id` is the fixed-identity scheme of earlier versions, kept for its readers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raftlog.base.errors import InvalidRequestError
from spark_source.options import InvalidOption, SourceError
from spark_source.schemas import RegistrySchemas, encode_column, parse_format_options

__all__ = [
    "InvalidRowError",
    "sorted_by_key",
    "SinkOptions",
    "SinkSchema",
    "parse_sink_options",
    "check_schema",
    "derived_producer_id",
    "sink_transactional_id",
    "DERIVED_PRODUCER_ID_MIN",
    "KeylessSpreader",
    "Columns",
    "columns_of",
]

# Producer ids at and above this are derived by clients from a name (the sink's write
# tasks); the brokers' ProducerIdBlocks count up from 0 and never get here.
DERIVED_PRODUCER_ID_MIN = 1 << 62

_KNOWN = frozenset({
    "bootstrap", "raftlog.bootstrap.servers", "topic", "path", "exactlyonce",
    "raftlog.acks", "raftlog.linger.ms", "raftlog.batch.bytes", "raftlog.buffer.bytes",
    "raftlog.compression.type", "raftlog.request.timeout.ms", "raftlog.delivery.timeout.ms",
    "raftlog.max.block.ms", "raftlog.enable.idempotence", "roworder",
    "raftlog.sink.max.task.bytes", "raftlog.transaction.timeout.ms",
    # typed keys and values through a schema registry (spark_source/schemas.py)
    "valueformat", "keyformat", "schemaregistryurl", "valuesubject", "keysubject",
    # Spark's own writeStream options reach the sink too.
    "checkpointlocation", "queryname",
})
_UNSUPPORTED = {
    "kafka.bootstrap.servers": "use 'bootstrap' or 'raftlog.bootstrap.servers'",
    "includeheaders": "the sink writes the headers column whenever there is one",
}
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
_HEADERS_TYPE = "array<struct<key:string,value:binary>>"
# Keyless rows of exactly-once writes move to the next partition every this many rows.
KEYLESS_CHUNK_ROWS = 512


class InvalidRowError(SourceError, InvalidRequestError, ValueError):
    """A row the sink cannot write (no topic, a partition out of range)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap: str
    topic: str | None  # overrides the topic column
    streaming: bool
    exactly_once: bool
    acks: str = "all"
    linger_ms: int | None = 5  # None with exactly-once: batches cut by size and flush alone
    batch_bytes: int = 256 * 1024
    buffer_bytes: int = 64 * 1024 * 1024
    compression: str = "none"
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    max_block_ms: int = 60_000
    enable_idempotence: bool = True
    row_order: str = "input"  # "input" | "key"
    max_task_bytes: int = 512 * 1024 * 1024  # rowOrder=key: what one task may gather
    # Exactly-once: how long a task's transaction may stay open until Spark commits it.
    transaction_timeout_ms: int = 300_000
    raw: Mapping[str, str] = field(default_factory=dict)

    def producer_kwargs(self) -> dict:
        """Keyword arguments of `raftlog.client.Producer` (bootstrap aside)."""
        return dict(acks=self.acks, linger_ms=self.linger_ms, batch_bytes=self.batch_bytes,
                    buffer_bytes=self.buffer_bytes,
                    compression=None if self.compression == "none" else self.compression,
                    enable_idempotence=self.enable_idempotence,
                    request_timeout_ms=self.request_timeout_ms,
                    delivery_timeout_ms=self.delivery_timeout_ms,
                    max_block_ms=self.max_block_ms)


def _int(opts: Mapping[str, str], key: str, default: int, lo: int, hi: int) -> int:
    v = opts.get(key)
    if v is None:
        return default
    s = str(v).strip()
    if not s.lstrip("-").isdigit() or not lo <= int(s) <= hi:
        raise InvalidOption(f"option {key}={v!r}: expected an integer in [{lo}, {hi}]")
    return int(s)


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    v = opts.get(key)
    if v is None:
        return default
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise InvalidOption(f"option {name}={v!r}: expected 'true' or 'false'")
    return s == "true"


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Check and convert the sink's options. Raises InvalidOption naming the option."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    for k in opts:
        if k in _UNSUPPORTED:
            raise InvalidOption(f"option {k} is not supported by the sink: {_UNSUPPORTED[k]}")
    unknown = sorted(k for k in opts if k not in _KNOWN)
    if unknown:
        raise InvalidOption(f"unknown sink option(s) {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(_KNOWN - {'path', 'checkpointlocation', 'queryname'}))}")
    boot = [opts[k] for k in ("bootstrap", "raftlog.bootstrap.servers") if k in opts]
    if len(boot) != 1 or not boot[0].strip():
        raise InvalidOption("set 'bootstrap' (or 'raftlog.bootstrap.servers') to "
                            "'host:port[,host:port...]', exactly once")
    bootstrap = ",".join(a.strip() for a in boot[0].split(",") if a.strip())
    for addr in bootstrap.split(","):
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidOption(f"option bootstrap={addr!r}: expected 'host:port' entries "
                                "separated by commas")
    # Spark's Kafka sink: the topic option overrides path, which overrides the column.
    topic = opts.get("topic") or opts.get("path") or None
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise InvalidOption("option topic is empty")
    if "exactlyonce" in opts and not streaming:
        raise InvalidOption("exactlyOnce is for streaming writes; batch writes are "
                            "at-least-once (a retried task writes its rows again)")
    exactly_once = streaming and _bool(opts, "exactlyonce", "exactlyOnce", True)
    acks = opts.get("raftlog.acks", "all").strip().lower()
    if acks == "-1":
        acks = "all"
    if acks not in ("all", "0", "1"):
        raise InvalidOption(f"option raftlog.acks={acks!r}: expected 'all', '1' or '0'")
    idempotence = _bool(opts, "raftlog.enable.idempotence", "raftlog.enable.idempotence",
                        acks == "all")
    if idempotence and acks != "all":
        raise InvalidOption("raftlog.enable.idempotence=true needs raftlog.acks=all")
    if exactly_once:
        for key, value, want in (("raftlog.acks", acks, "all"),
                                 ("raftlog.enable.idempotence", idempotence, True)):
            if value != want:
                raise InvalidOption(f"exactlyOnce needs {key}={want} (or set exactlyOnce=false)")
        if "raftlog.linger.ms" in opts:
            raise InvalidOption("exactlyOnce cuts batches by size alone: raftlog.linger.ms "
                                "does not apply (or set exactlyOnce=false)")
    compression = opts.get("raftlog.compression.type", "none").strip().lower()
    if compression not in _COMPRESSIONS:
        raise InvalidOption(f"option raftlog.compression.type={compression!r}: expected one "
                            f"of {', '.join(_COMPRESSIONS)}")
    batch_bytes = _int(opts, "raftlog.batch.bytes", 256 * 1024, 1024, 64 << 20)
    buffer_bytes = _int(opts, "raftlog.buffer.bytes", 64 << 20, 1 << 20, 4 << 30)
    if buffer_bytes < batch_bytes:
        raise InvalidOption("raftlog.buffer.bytes must be >= raftlog.batch.bytes")
    request_timeout_ms = _int(opts, "raftlog.request.timeout.ms", 30_000, 100, 3_600_000)
    linger_ms = None if exactly_once else _int(opts, "raftlog.linger.ms", 5, 0, 60_000)
    delivery_timeout_ms = _int(opts, "raftlog.delivery.timeout.ms",
                               max(120_000, request_timeout_ms + (linger_ms or 0)),
                               1000, 86_400_000)
    if delivery_timeout_ms < request_timeout_ms + (linger_ms or 0):
        raise InvalidOption("raftlog.delivery.timeout.ms must be >= raftlog.request.timeout.ms "
                            "+ raftlog.linger.ms")
    row_order = opts.get("roworder", "input").strip().lower()
    if row_order not in ("input", "key"):
        raise InvalidOption(f"option rowOrder={opts['roworder']!r}: expected 'input' or 'key'")
    return SinkOptions(
        row_order=row_order,
        max_task_bytes=_int(opts, "raftlog.sink.max.task.bytes", 512 << 20, 1 << 20, 64 << 30),
        transaction_timeout_ms=_int(opts, "raftlog.transaction.timeout.ms", 300_000, 1000, 3_600_000),
        bootstrap=bootstrap, topic=topic, streaming=streaming, exactly_once=exactly_once,
        acks=acks, linger_ms=linger_ms, batch_bytes=batch_bytes, buffer_bytes=buffer_bytes,
        compression=compression, request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        max_block_ms=_int(opts, "raftlog.max.block.ms", 60_000, 0, 3_600_000),
        enable_idempotence=idempotence, raw=opts,
    )


# ---------------------------------------------------------------- the input schema


@dataclass(frozen=True, slots=True)
class SinkSchema:
    """Which of the sink's columns the input has (the rest are ignored)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool
    # valueFormat / keyFormat: the struct columns are encoded through the registry
    formats: Any = None  # spark_source.schemas.FormatOptions



def check_schema(fields: Sequence[tuple[str, str]], options: SinkOptions) -> SinkSchema:
    """`fields`: (name, Spark simpleString type) of the input. Raises InvalidOption with
    Spark's Kafka sink's rules (value required; string or binary key and value; a topic
    column unless the topic option is set)."""
    types = {name.lower(): t.replace(" ", "").lower() for name, t in fields}
    formats = parse_format_options(options.raw)
    typed = set() if formats is None else {p for p, f in (("key", formats.key_format),
                                                           ("value", formats.value_format)) if f}
    for name in typed:
        if name in types and not types[name].startswith("struct<"):
            raise InvalidOption(f"{name}Format is set: the {name} column must be a struct, got {types[name]}")
        if options.topic is None:
            formats.subject(name, None)  # raises unless the subject is given
    if "value" not in types:
        raise InvalidOption("required attribute 'value' not found: the sink writes the "
                            "'value' column (string or binary)")
    for name in ("key", "value"):
        if name in types and name not in typed and types[name] not in ("string", "binary"):
            raise InvalidOption(f"{name} attribute type must be a string or binary, got "
                                f"{types[name]}")
    if "topic" in types and types["topic"] != "string":
        raise InvalidOption(f"topic attribute type must be a string, got {types['topic']}")
    if "topic" not in types and options.topic is None:
        raise InvalidOption("topic option required when no 'topic' attribute is present; "
                            "use the topic option for setting a topic")
    if "partition" in types and types["partition"] != "int":
        raise InvalidOption(f"partition attribute type must be an int, got {types['partition']}")
    if "headers" in types and types["headers"] != _HEADERS_TYPE:
        raise InvalidOption(f"headers attribute type must be {_HEADERS_TYPE}, got "
                            f"{types['headers']}")
    return SinkSchema(has_key="key" in types,
                      has_topic="topic" in types and options.topic is None,
                      has_partition="partition" in types, has_headers="headers" in types, formats=formats)


# ---------------------------------------------------------------- rows


@dataclass(slots=True)
class Columns:
    """One Arrow batch as Python lists. `topics` is one str for every row, or a list."""

    values: list
    keys: list | None
    topics: str | list
    partitions: list | None
    headers: list | None

    def __len__(self) -> int:
        return len(self.values)


def _bytes_list(col: pa.Array) -> list:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col.to_pylist()


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    # Spark keeps the column names' case; the sink's names are case-insensitive.
    for i, f in enumerate(batch.schema):
        if f.name.lower() == name:
            return batch.column(i)
    raise KeyError(name)


def _part(batch: pa.RecordBatch, name: str, schema: SinkSchema, topic: str | None) -> list:
    col = _column(batch, name)
    fmt = None if schema.formats is None else getattr(schema.formats, f"{name}_format")
    if fmt is None:
        return _bytes_list(col)
    return encode_column(col, _schemas_of(schema.formats), fmt, schema.formats.subject(name, topic))


_SCHEMAS: dict[str, Any] = {}


def _schemas_of(formats: Any) -> Any:
    """One registry reader per URL in this process (its cache lives as long as the task)."""
    reader = _SCHEMAS.get(formats.registry_url)
    if reader is None:
        reader = _SCHEMAS[formats.registry_url] = RegistrySchemas(formats.registry_url)
    return reader


def columns_of(batch: pa.RecordBatch, schema: SinkSchema, topic: str | None) -> Columns:
    """The sink's columns of one Arrow batch. Raises InvalidRowError for a row with no topic."""
    values = _part(batch, "value", schema, topic)
    keys = _part(batch, "key", schema, topic) if schema.has_key else None
    if schema.has_topic:
        col = _column(batch, "topic")
        if col.null_count:
            raise InvalidRowError("null topic present in the data; use the topic option for "
                             "setting a default topic")
        topics: str | list = col.to_pylist()
    else:
        topics = topic
    partitions = None
    if schema.has_partition:
        col = _column(batch, "partition")
        partitions = col.to_pylist()
    headers = None
    if schema.has_headers:
        headers = [None if h is None else [(e["key"], e["value"]) for e in h]
                   for h in _column(batch, "headers").to_pylist()]
    return Columns(values, keys, topics, partitions, headers)


def sorted_by_key(batches, schema: SinkSchema, max_bytes: int) -> list[pa.RecordBatch]:
    """rowOrder=key: every batch of a task gathered and stably sorted by the key column
    (rows without a key first, rows of one key in the order they came). Raises InvalidRowError
    past `max_bytes` of gathered rows."""
    gathered, size = [], 0
    for b in batches:
        size += b.nbytes
        if size > max_bytes:
            raise InvalidRowError(f"rowOrder=key gathers a task's rows before sending them, and this "
                             f"task has more than raftlog.sink.max.task.bytes={max_bytes}: "
                             "raise it, or lower maxOffsetsPerTrigger / add partitions")
        gathered.append(b)
    if not gathered or not schema.has_key:
        return gathered
    table = pa.Table.from_batches(gathered)
    key_name = next(f.name for f in table.schema if f.name.lower() == "key")
    # Nulls first by hand (where null_placement goes moved between pyarrow versions):
    # a stable sort on (key is not null, key).
    keys = table.column(key_name)
    order = pc.sort_indices(pa.table({"has_key": pc.is_valid(keys), "key": keys}),
                            sort_keys=[("has_key", "ascending"), ("key", "ascending")])
    return table.take(order).combine_chunks().to_batches()


# ---------------------------------------------------------------- exactly-once


def sink_transactional_id(query_id: str, batch_id: int, task_partition: int) -> str:
    """The transactional id of every attempt of write task `task_partition` of micro-batch
    `batch_id` of streaming query `query_id` (the id kept in the checkpoint): a later attempt
    fences the earlier ones, and a replay of a committed batch finds it committed."""
    if not query_id or batch_id < 0 or task_partition < 0:
        raise ValueError(f"bad write task identity {query_id!r}/{batch_id}/{task_partition}")
    return f"raftlog-sink/{query_id}/{batch_id}/{task_partition}"


def derived_producer_id(query_id: str, batch_id: int, task_partition: int) -> int:
    """The producer id of every attempt of write task `task_partition` of micro-batch
    `batch_id` of streaming query `query_id` (the id kept in the checkpoint): in
    [DERIVED_PRODUCER_ID_MIN, 2**63), a hash (BLAKE2b) of the three."""
    if not query_id or batch_id < 0 or task_partition < 0:
        raise ValueError(f"bad write task identity {query_id!r}/{batch_id}/{task_partition}")
    digest = hashlib.blake2b(f"raftlog-sink/{query_id}/{batch_id}/{task_partition}".encode(),
                             digest_size=8).digest()
    return DERIVED_PRODUCER_ID_MIN + (int.from_bytes(digest, "big") % DERIVED_PRODUCER_ID_MIN)


class KeylessSpreader:
    """Partitions for keyless rows without a partition column in exactly-once writes: row
    j (counted per topic) of write task t goes to partition (t + j // chunk) % n, so every
    attempt puts the same rows in the same places, and tasks start on different partitions.
    """

    __slots__ = ("task_partition", "chunk_rows", "_count")

    def __init__(self, task_partition: int, chunk_rows: int = KEYLESS_CHUNK_ROWS):
        self.task_partition = task_partition
        self.chunk_rows = chunk_rows
        self._count: dict[str, int] = {}

    def next(self, topic: str, num_partitions: int) -> int:
        j = self._count.get(topic, 0)
        self._count[topic] = j + 1
        return (self.task_partition + j // self.chunk_rows) % num_partitions

"""The sink's pure half: options as Spark's Kafka sink takes them (exactly-once by default for streams, at-least-once for batch), the input schema check, Arrow columns to records, deterministic keyless partitions and derived producer ids."""

import pyarrow as pa
import pytest

from spark_source.options import InvalidOption
from spark_source.sink import (
    DERIVED_PRODUCER_ID_MIN,
    InvalidRowError,
    KeylessSpreader,
    check_schema,
    columns_of,
    derived_producer_id,
    parse_sink_options,
)

BOOT = {"bootstrap": "127.0.0.1:9093"}


def test_streams_are_exactly_once_by_default_with_no_linger_and_batches_at_least_once():
    s = parse_sink_options({**BOOT, "topic": "out", "checkpointLocation": "/x"}, streaming=True)
    assert s.exactly_once and s.linger_ms is None and s.acks == "all" and s.topic == "out"
    assert s.producer_kwargs()["linger_ms"] is None
    b = parse_sink_options({**BOOT, "raftlog.linger.ms": "20"}, streaming=False)
    assert not b.exactly_once and b.linger_ms == 20 and b.topic is None
    loose = parse_sink_options({**BOOT, "exactlyOnce": "false", "raftlog.acks": "1"}, streaming=True)
    assert not loose.exactly_once and loose.acks == "1" and not loose.enable_idempotence


@pytest.mark.parametrize("opts, match", [
    ({}, "bootstrap"),
    ({**BOOT, "exactlyOnce": "true"}, "exactlyOnce is for streaming"),
    ({**BOOT, "raftlog.bach.bytes": "1"}, "unknown sink option"),
    ({**BOOT, "kafka.bootstrap.servers": "h:1"}, "use 'bootstrap'"),
    ({**BOOT, "raftlog.compression.type": "brotli"}, "compression"),
    ({**BOOT, "raftlog.batch.bytes": "10"}, "batch.bytes"),
])
def test_bad_batch_options_are_named(opts, match):
    with pytest.raises(InvalidOption, match=match):
        parse_sink_options(opts, streaming=False)


@pytest.mark.parametrize("opts, match", [
    ({**BOOT, "raftlog.acks": "1"}, "exactlyOnce needs raftlog.acks=all"),
    ({**BOOT, "raftlog.linger.ms": "5"}, "linger"),
    ({**BOOT, "raftlog.enable.idempotence": "false"}, "idempotence"),
    ({**BOOT, "exactlyOnce": "maybe"}, "exactlyOnce"),
])
def test_exactly_once_refuses_settings_that_break_it(opts, match):
    with pytest.raises(InvalidOption, match=match):
        parse_sink_options(opts, streaming=True)


def test_schema_rules_are_spark_kafka_sinks():
    opts = parse_sink_options(BOOT, streaming=False)
    with_topic = parse_sink_options({**BOOT, "topic": "t"}, streaming=False)
    s = check_schema([("key", "string"), ("value", "binary"), ("topic", "string"),
                      ("partition", "int"), ("id", "bigint"),
                      ("headers", "array<struct<key:string,value:binary>>")], opts)
    assert (s.has_key, s.has_topic, s.has_partition, s.has_headers) == (True, True, True, True)
    # The topic option overrides the column.
    assert not check_schema([("value", "string"), ("topic", "string")], with_topic).has_topic
    for fields, match in [
        ([("key", "string")], "'value' not found"),
        ([("value", "int")], "value attribute type"),
        ([("value", "string")], "topic option required"),
        ([("value", "string"), ("topic", "int")], "topic attribute type"),
        ([("value", "string"), ("topic", "string"), ("partition", "bigint")], "partition attribute"),
        ([("value", "string"), ("topic", "string"), ("headers", "map<string,binary>")], "headers"),
    ]:
        with pytest.raises(InvalidOption, match=match):
            check_schema(fields, opts)


def test_columns_become_bytes_and_header_tuples_and_a_null_topic_is_refused():
    opts = parse_sink_options(BOOT, streaming=False)
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays([
        pa.array(["k1", None]), pa.array([b"v1", None], pa.binary()), pa.array(["a", "b"]),
        pa.array([2, None], pa.int32()), pa.array([[{"key": "h", "value": b"x"}], None], hdr),
    ], names=["Key", "value", "topic", "partition", "headers"])
    schema = check_schema([(f.name, {"Key": "string", "value": "binary", "topic": "string",
                                     "partition": "int"}.get(f.name, "array<struct<key:string,value:binary>>"))
                           for f in batch.schema], opts)
    cols = columns_of(batch, schema, None)
    assert cols.keys == [b"k1", None] and cols.values == [b"v1", None]
    assert cols.topics == ["a", "b"] and cols.partitions == [2, None]
    assert cols.headers == [[("h", b"x")], None]
    bad = pa.RecordBatch.from_arrays([pa.array(["v"]), pa.array([None], pa.string())],
                                     names=["value", "topic"])
    with pytest.raises(InvalidRowError, match="null topic"):
        columns_of(bad, check_schema([("value", "string"), ("topic", "string")], opts), None)


def test_derived_producer_ids_are_stable_distinct_and_out_of_the_brokers_range():
    a = derived_producer_id("q-1", 7, 0)
    assert a == derived_producer_id("q-1", 7, 0)
    ids = {derived_producer_id(q, b, p) for q in ("q-1", "q-2") for b in range(50) for p in range(8)}
    assert len(ids) == 2 * 50 * 8
    assert all(DERIVED_PRODUCER_ID_MIN <= i < 1 << 63 for i in ids)
    with pytest.raises(ValueError):
        derived_producer_id("", 0, 0)


def test_keyless_rows_are_spread_by_row_index_the_same_way_every_time():
    def run(task):
        s = KeylessSpreader(task, chunk_rows=3)
        return [s.next("t", 4) for _ in range(12)] + [s.next("u", 2)]
    assert run(1) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0, 1] == run(1)
    assert run(2)[0] == 2


def test_row_order_key_sorts_a_tasks_rows_stably_and_bounds_what_it_gathers():
    from spark_source.sink import sorted_by_key

    opts = parse_sink_options({**BOOT, "topic": "t", "rowOrder": "key"}, streaming=True)
    assert opts.row_order == "key"
    schema = check_schema([("key", "string"), ("value", "string")], opts)
    rows = [("b", "1"), (None, "2"), ("a", "3"), ("b", "4"), ("a", "5")]
    batches = [pa.RecordBatch.from_arrays([pa.array([k for k, _ in part]), pa.array([v for _, v in part])],
                                          names=["key", "value"]) for part in (rows[:2], rows[2:])]
    out = [r for b in sorted_by_key(batches, schema, 1 << 20) for r in zip(*(c.to_pylist() for c in b.columns))]
    assert out == [(None, "2"), ("a", "3"), ("a", "5"), ("b", "1"), ("b", "4")]
    with pytest.raises(InvalidRowError, match="max.task.bytes"):
        sorted_by_key(batches, schema, 10)
    with pytest.raises(InvalidOption, match="rowOrder"):
        parse_sink_options({**BOOT, "rowOrder": "value"}, streaming=True)

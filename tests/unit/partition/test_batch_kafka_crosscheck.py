"""Our batches and kafka-python 3.0.12's read each other; uncompressed ones are byte-identical."""

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python 3.0.12's package import calls importlib.resources.read_text (deprecated),
    # and the suite turns warnings into errors.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec
    import kafka.record.default_records as kdr
    from kafka.record.memory_records import MemoryRecords

from partition.batch import (
    BatchBuilder,
    Compression,
    control_batch,
    decode_batch,
    decode_batches,
)


def test_kafka_python_has_every_codec_natively():
    # The cross-check is only as good as the oracle: kafka-python must compress and decompress
    # with its own libraries (python-snappy, lz4, zstandard from the `test` extra), not ours.
    assert kafka.codec.has_gzip() and kafka.codec.has_snappy()
    assert kafka.codec.has_lz4() and kafka.codec.has_zstd()


headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2
)
records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=30)),
        st.one_of(st.none(), st.binary(max_size=10)),
        headers_st,
        st.integers(0, 2**45),
    ),
    min_size=1,
    max_size=10,
)
producer_st = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(
        st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1), st.booleans()
    ),
)


def ours(records, codec, producer, **kw):
    pid, pepoch, seq, txn = producer
    b = BatchBuilder(compression=codec, producer_id=pid, producer_epoch=pepoch,
                     base_sequence=seq, is_transactional=txn, **kw)
    for value, key, headers, ts in records:
        b.append(value, key, headers, timestamp_ms=ts)
    return b.build()


def theirs(records, codec, producer):
    pid, pepoch, seq, txn = producer
    b = kdr.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=txn, producer_id=pid,
        producer_epoch=pepoch, base_sequence=seq, batch_size=1 << 20,
    )
    for i, (value, key, headers, ts) in enumerate(records):
        assert b.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(b.build())


@settings(max_examples=100, deadline=None)
@given(records=records_st, producer=producer_st)
def test_uncompressed_batches_are_byte_identical(records, producer):
    # kafka-python stamps partitionLeaderEpoch 0 where Java and we default to -1.
    assert ours(records, Compression.NONE, producer, partition_leader_epoch=0) == theirs(
        records, Compression.NONE, producer
    )


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=25, deadline=None)
@given(records=records_st, producer=producer_st, base_offset=st.integers(0, 2**40))
def test_kafka_python_reads_our_batches(codec, records, producer, base_offset):
    raw = ours(records, codec, producer, base_offset=base_offset, partition_leader_epoch=7)
    batch = kdr.DefaultRecordBatch(raw)
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == (
        base_offset, 7, int(codec))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.is_transactional) == producer
    assert batch.last_offset_delta == len(records) - 1
    assert batch.max_timestamp == max(r[3] for r in records)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [
        (base_offset + i, ts, key, value, list(headers))
        for i, (value, key, headers, ts) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=25, deadline=None)
@given(records=records_st, producer=producer_st)
def test_we_read_kafka_python_batches(codec, records, producer):
    raw = theirs(records, codec, producer)
    h, got = decode_batch(raw)
    # kafka-python sends uncompressed when compressing does not shrink the records.
    assert h.compression in (codec, Compression.NONE)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == producer
    assert h.record_count == len(records) and h.last_offset_delta == len(records) - 1
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (i, ts, key, value, tuple(headers))
        for i, (value, key, headers, ts) in enumerate(records)
    ]


def test_compressible_kafka_python_batches_stay_compressed_and_decode():
    records = [(b"abc" * 200, b"k", [("h", b"v")], 1000 + i) for i in range(50)]
    for codec in list(Compression)[1:]:
        raw = theirs(records, codec, (-1, -1, -1, False))
        h, got = decode_batch(raw)
        assert h.compression is codec
        assert [r.value for r in got] == [b"abc" * 200] * 50


def test_memory_records_reads_a_concatenation_and_control_batches():
    log = b"".join([
        ours([(b"a", None, [], 5)], Compression.NONE, (-1, -1, -1, False), base_offset=0),
        control_batch(2, timestamp_ms=6, partition_leader_epoch=3, base_offset=1),
        ours([(b"b", b"k", [], 7), (b"c", None, [], 8)], Compression.GZIP,
             (-1, -1, -1, False), base_offset=2),
    ])
    mr = MemoryRecords(log)
    batches = []
    while mr.has_next():
        batches.append(mr.next_batch())
    assert [b.base_offset for b in batches] == [0, 1, 2]
    assert [b.is_control_batch for b in batches] == [False, True, False]
    [control] = list(batches[1])
    assert (control.version, control.type) == (0, 2)
    assert [r.value for r in batches[2]] == [b"b", b"c"]
    assert [h.base_offset for h, _ in decode_batches(log)] == [0, 1, 2]

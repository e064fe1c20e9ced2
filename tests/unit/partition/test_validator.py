"""The produce validator (partition/validator.py) refuses every batch whose header and records disagree, with Kafka's error, accepts what real producers write unchanged, and rewrites a wrong max timestamp as Kafka does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from partition.batch import BatchBuilder, Compression, decode_batches, verify_crc
from partition.compression import available
from partition.errors import CorruptRecordError
from partition.validator import TimestampPolicy, validate_client_records
from raftlog.base.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RejectedError,
    TransactionalIdAuthorizationFailedError,
)

_spec = importlib.util.spec_from_file_location("batch_forge", Path(__file__).with_name("batch_forge.py"))
forge = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("batch_forge", forge)
_spec.loader.exec_module(forge)

MAX_MESSAGE_BYTES = 1 << 20
MAX_DECOMPRESSED_BYTES = 1 << 20
INT32_MAX = (1 << 31) - 1


def validate(records: bytes) -> bytes | bytearray:
    return validate_client_records(records, max_message_bytes=MAX_MESSAGE_BYTES,
                                   max_decompressed_bytes=MAX_DECOMPRESSED_BYTES)


def built(n: int = 3, codec: Compression = Compression.NONE, **kw) -> bytes:
    b = BatchBuilder(compression=codec, **kw)
    for i in range(n):
        b.append(b"value-%d" % i, key=b"k%d" % i if i % 2 else None,
                 headers=[("h", b"x"), ("n", None)] if i == 1 else (), timestamp_ms=5_000 - i * 7)
    return b.build()


CODECS = [c for c in Compression if available(c)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_what_producers_write_is_accepted_unchanged(codec):
    records = built(50, codec) + built(1, codec) + built(3, codec, producer_id=7, producer_epoch=0,
                                                            base_sequence=INT32_MAX - 1)
    assert validate(records) is records  # no copy when nothing needed fixing


def test_forged_honest_batch_is_accepted():
    raw = forge.batch(forge.values(3) + [forge.record(3, key=b"k", headers=[(b"h", b"v"), (b"z", None)])])
    assert validate(raw) is raw


E = InvalidRecordError
_KEYED = forge.record(0, key=b"abc")  # length, attributes, ts delta, offset delta, key length at [4]
LIES = {
    # (a) the batch: a header claiming 2^31-1 records, one inside
    "count_2^31-1_holding_one": (forge.batch(forge.values(1), count=INT32_MAX, last_offset_delta=0), E),
    "count_and_delta_2^31-1_holding_one": (
        forge.batch(forge.values(1), count=INT32_MAX, last_offset_delta=INT32_MAX - 1), E),
    "count_0": (forge.batch(forge.values(1), count=0, last_offset_delta=0), E),
    "count_less_than_records": (forge.batch(forge.values(3), count=2, last_offset_delta=1), E),
    "last_offset_delta_past_count": (forge.batch(forge.values(3), last_offset_delta=5), E),
    # (b) offset deltas not 0..n-1
    "deltas_swapped": (forge.batch([forge.record(0), forge.record(2), forge.record(1)]), E),
    "deltas_from_1": (forge.batch([forge.record(1), forge.record(2), forge.record(3)]), E),
    "deltas_repeated": (forge.batch([forge.record(0), forge.record(0), forge.record(0)]), E),
    "delta_negative": (forge.batch([forge.record(0), forge.record(-1)]), E),
    # (c) record bodies that disagree with their lengths
    "length_one_too_long": (forge.batch([forge.record(0), forge.record(1, length_delta=1), forge.record(2)]), E),
    "length_one_too_short": (forge.batch([forge.record(0), forge.record(1, length_delta=-1), forge.record(2)]), E),
    "length_past_the_batch": (forge.batch([forge.record(0, length_delta=1000)]), E),
    "length_negative": (forge.batch([forge.record(0, length_delta=-100)]), E),
    "key_length_past_record": (forge.batch([_KEYED[:4] + forge.varint(40) + _KEYED[5:]]), E),
    "value_length_minus_2": (forge.batch([forge.record(0, value=None)[:-2] + forge.varint(-2) + b"\x00"]), E),
    "header_count_negative": (forge.batch([forge.record(0, header_count=-1)]), E),
    "header_count_too_big": (forge.batch([forge.record(0, headers=[(b"a", b"b")], header_count=2)]), E),
    "header_key_not_utf8": (forge.batch([forge.record(0, headers=[(b"\xff\xfe", b"v")])]), E),
    "bytes_after_records": (forge.batch([forge.record(0), b"\x00\x00"], count=1), E),
    "varint_too_long": (forge.batch([b"\xff\xff\xff\xff\xff\xff\x01" + forge.record(0)]), E),
    "timestamp_leaves_int64": (forge.batch([forge.record(0, ts_delta=1 << 62)], base_timestamp=(1 << 62) + 5), E),
    # (d) what clients may not write
    "control_batch": (forge.batch(forge.values(1), attributes=forge.ATTR_CONTROL), E),
    "transactional": (forge.batch(forge.values(1), attributes=forge.ATTR_TRANSACTIONAL, producer_id=1,
                                  producer_epoch=0, base_sequence=0), TransactionalIdAuthorizationFailedError),
    "log_append_time": (forge.batch(forge.values(1), attributes=forge.ATTR_LOG_APPEND_TIME), InvalidTimestampError),
    # producer fields
    "idempotent_without_sequence": (forge.batch(forge.values(1), producer_id=5, producer_epoch=0), E),
    "idempotent_negative_epoch": (forge.batch(forge.values(1), producer_id=5, base_sequence=0), E),
    "producer_id_minus_2": (forge.batch(forge.values(1), producer_id=-2), E),
    # the frame of the batch itself
    "magic_1": (forge.batch(forge.values(1), magic=1), E),
    "bad_crc": (forge.batch(forge.values(1), bad_crc=True), CorruptRecordError),
    "truncated": (forge.batch(forge.values(2))[:-3], CorruptRecordError),
    "too_large": (forge.batch([forge.record(0, value=b"x" * MAX_MESSAGE_BYTES)]), MessageTooLargeError),
    # compressed: the same checks after decompression
    "gzip_count_2^31-1": (forge.batch(forge.values(1), count=INT32_MAX, last_offset_delta=INT32_MAX - 1, codec=1), E),
    "gzip_deltas_swapped": (forge.batch([forge.record(1), forge.record(0)], codec=1), E),
    "gzip_bomb": (forge.batch([forge.record(0, value=bytes(2 * MAX_DECOMPRESSED_BYTES))], codec=1), MessageTooLargeError),
    "gzip_garbage": (forge.batch([b"not gzip"])[:61] + b"\x1f\x8b garbage", CorruptRecordError),
}


REASONS = {  # what the refusal says (so each lie is caught for its own reason)
    "count_2^31-1_holding_one": "disagrees with the record count", "count_0": "record count 0",
    "count_and_delta_2^31-1_holding_one": "records end inside record 1", "deltas_swapped": "record 1: offset delta 2",
    "deltas_from_1": "record 0: offset delta 1", "length_one_too_long": "record 1: length",
    "key_length_past_record": "key length 40", "header_count_too_big": "inside record 0",
    "bytes_after_records": "2 bytes left after the 1 records", "varint_too_long": "varint longer",
    "timestamp_leaves_int64": "leaves int64", "control_batch": "control", "magic_1": "magic 1",
    "bad_crc": "CRC", "idempotent_without_sequence": "sequence -1", "gzip_count_2^31-1": "inside record 1",
}


@pytest.mark.parametrize("name", LIES)
def test_lying_batches_are_refused_with_kafkas_error(name):
    raw, error = LIES[name]
    if name == "gzip_garbage":  # forge.batch compressed nothing: mark it gzip, fix the length and CRC
        raw = bytearray(raw)
        raw[22] |= 1
        raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
        raw = forge.recrc(raw)
    with pytest.raises(error) as caught:
        validate(raw)
    assert type(caught.value) is error  # exactly Kafka's code, not a subclass's
    assert REASONS.get(name, "") in caught.value.message
    # And after a good batch: the whole partition's records are refused.
    with pytest.raises(error):
        validate(built(2) + raw)


def test_kafka_codes():
    assert (InvalidRecordError.code, InvalidTimestampError.code, TransactionalIdAuthorizationFailedError.code) == (
        "INVALID_RECORD", "INVALID_TIMESTAMP", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    assert all(issubclass(e, RejectedError) for _, e in LIES.values())  # nothing was stored


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP], ids=lambda c: c.name)
def test_wrong_max_timestamp_is_rewritten_as_kafka_does(codec):
    records = [forge.record(0, ts_delta=0), forge.record(1, ts_delta=90), forge.record(2, ts_delta=-40)]
    good = built(1)
    raw = good + forge.batch(records, base_timestamp=10_000, max_timestamp=10_010, codec=codec)
    fixed = validate(raw)
    assert fixed != raw and len(fixed) == len(raw) and fixed[:len(good)] == good
    header = verify_crc(fixed, len(good))  # the CRC was made right again
    assert header.max_timestamp == 10_090
    assert [r.timestamp for r in list(decode_batches(fixed))[1][1]] == [10_000, 10_090, 9_960]
    assert validate(fixed) is fixed  # and it is now what a producer should have sent


# Runs of same-shaped records are checked by strided slices (partition/validator.py
# `_same_shape_run`): a lie anywhere inside a long run is still found, and an honest oddity
# (a negative timestamp delta, a wider varint) still passes.
RUN = 9_000  # past 8192: offset deltas of one, two and three bytes


def run_of(n: int, odd: int | None = None, **change) -> bytes:
    return forge.batch([forge.record(j, **{"ts_delta": j // 3, "value": b"v" * 100, **(change if j == odd else {})})
                        for j in range(n)], max_timestamp=1_000 + (n - 1) // 3)


@pytest.mark.parametrize("at", [5, 63, 64, 100, 4_000, 8_191, 8_192, RUN - 1])
@pytest.mark.parametrize("lie", [
    {"length_delta": 1}, {"length_delta": -1}, {"header_count": 1}, {"offset_delta": "next"},
], ids=["longer", "shorter", "header_count", "offset_delta"])
def test_a_lie_inside_a_long_run_is_found(at, lie):
    if lie.get("offset_delta") == "next":
        records = [forge.record(j if j != at else j + 1, ts_delta=j // 3, value=b"v" * 100) for j in range(RUN)]
        raw = forge.batch(records, max_timestamp=1_000 + (RUN - 1) // 3)
    else:
        raw = run_of(RUN, at, **lie)
    with pytest.raises(InvalidRecordError):
        validate(raw)


@pytest.mark.parametrize("change", [{"value": b"v" * 99}, {"key": b""}, {"key": b"k" * 200},
                                    {"headers": [(b"h", b"x")]}, {"value": None}],
                         ids=["shorter_value", "empty_key", "long_key", "a_header", "null_value"])
def test_a_record_of_another_shape_inside_a_long_run_passes(change):
    for at in (5, 64, 8_192, RUN - 1):
        raw = run_of(RUN, at, **change)
        assert validate(raw) is raw


def test_honest_oddities_inside_a_long_run_pass():
    honest = run_of(RUN)
    assert validate(honest) is honest
    records = [forge.record(j, ts_delta=(-5 if j == 500 else j // 3), value=b"v" * 100) for j in range(RUN)]
    records[700] = forge.record(700, ts_delta=100_000, value=b"v" * 100)  # a three-byte delta, the largest
    raw = forge.batch(records, max_timestamp=1_000 + 100_000)
    assert validate(raw) is raw
    wrong_max = forge.batch(records, max_timestamp=1_000 + (RUN - 1) // 3)
    assert verify_crc(validate(wrong_max)).max_timestamp == 1_000 + 100_000


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_compacted_topic_refuses_records_without_key(codec):
    """librdkafka 0011: Kafka refuses a null key on a compacted topic, naming the record."""
    records = built(4, codec)  # records 0 and 2 have no key
    with pytest.raises(InvalidRecordError) as caught:
        validate_client_records(records, max_message_bytes=MAX_MESSAGE_BYTES,
                                max_decompressed_bytes=MAX_DECOMPRESSED_BYTES, topic="t", partition=3,
                                require_keys=True)
    message = "Compacted topic cannot accept message without key in topic partition t-3."
    assert caught.value.details["record_errors"] == [[0, message], [2, message]]
    assert message in caught.value.message
    keyed = BatchBuilder(compression=codec)
    keyed.append(b"v", key=b"k", timestamp_ms=1)
    keyed.append(None, key=b"gone", timestamp_ms=2)  # a tombstone has a key: accepted
    raw = keyed.build()
    assert validate_client_records(raw, max_message_bytes=MAX_MESSAGE_BYTES,
                                   max_decompressed_bytes=MAX_DECOMPRESSED_BYTES, require_keys=True) is raw
    assert validate(records) is records  # a topic that does not compact keeps null keys


def test_timestamp_bounds_refuse_a_batch_too_old_or_too_new_with_invalid_timestamp():
    records = built(3)  # timestamps 5000 (the first, the largest), 4993, 4986
    policy = TimestampPolicy(now_ms=10_000, before_max_ms=5_000, after_max_ms=0)
    assert validate_client_records(records, max_message_bytes=MAX_MESSAGE_BYTES,
                                   max_decompressed_bytes=MAX_DECOMPRESSED_BYTES, timestamps=policy) is records
    for bad in (TimestampPolicy(now_ms=10_000, before_max_ms=4_999),   # 5000 is older than 5001
                TimestampPolicy(now_ms=4_999, after_max_ms=0)):       # 5000 is ahead of 4999
        with pytest.raises(InvalidTimestampError, match="out of range"):
            validate_client_records(records, max_message_bytes=MAX_MESSAGE_BYTES,
                                    max_decompressed_bytes=MAX_DECOMPRESSED_BYTES, timestamps=bad)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_log_append_time_rewrites_the_type_bit_and_max_timestamp_with_a_good_crc(codec):
    records = built(3, codec)
    fixed = validate_client_records(records, max_message_bytes=MAX_MESSAGE_BYTES,
                                    max_decompressed_bytes=MAX_DECOMPRESSED_BYTES,
                                    timestamps=TimestampPolicy(now_ms=123_456, before_max_ms=1, log_append_time=True))
    header = verify_crc(fixed, 0)
    assert header.max_timestamp == 123_456 and header.timestamp_type.name == "LOG_APPEND_TIME"
    assert len(fixed) == len(records)
    assert [r.value for r in list(decode_batches(fixed))[0][1]] == [b"value-0", b"value-1", b"value-2"]

"""`__consumer_offsets` records round-trip as canonical CBOR (a classic member's metadata inside a KIP-848 group's record among them), decode strictly, and groups hash to Kafka's partitions."""

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.consumer_group_records import ConsumerGroupKey, MemberMetadataValue
from groupcoord.consumer_group_records import decode_record as decode_any_record
from groupcoord.consumer_group_records import encode_key as encode_consumer_key
from groupcoord.consumer_group_records import encode_value as encode_consumer_value
from groupcoord.errors import InvalidGroupRecordError
from groupcoord.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
    group_record,
    offset_record,
)
from raftlog.base.topics import java_string_hash, partition_for_group

names = st.text(min_size=1, max_size=30)
blobs = st.binary(max_size=40)


@st.composite
def members(draw):
    return MemberValue(
        member_id=draw(names), client_id=draw(st.text(max_size=10)), client_host=draw(st.text(max_size=10)),
        session_timeout_ms=draw(st.integers(1, 2**31 - 1)), rebalance_timeout_ms=draw(st.integers(1, 2**31 - 1)),
        subscription=draw(blobs), assignment=draw(blobs), group_instance_id=draw(st.one_of(st.none(), names)),
    )


@st.composite
def group_values(draw):
    ms = tuple({m.member_id: m for m in draw(st.lists(members(), max_size=4))}.values())
    return GroupValue(
        protocol_type=draw(st.text(max_size=10)), generation=draw(st.integers(0, 2**31 - 1)), members=ms,
        protocol=draw(names) if ms else None, leader=ms[0].member_id if ms else None,
        current_state_timestamp=draw(st.one_of(st.none(), st.integers(0, 2**50))),
        state=draw(st.one_of(st.none(), st.sampled_from(["Empty", "Stable"]))),
    )


offset_values = st.builds(
    OffsetValue, offset=st.integers(0, 2**63 - 1), metadata=st.text(max_size=50),
    commit_timestamp=st.integers(-(2**63), 2**63 - 1), leader_epoch=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    expire_timestamp=st.one_of(st.none(), st.integers(0, 2**50)),
)


@settings(max_examples=150, deadline=None)
@given(names, names, st.integers(0, 2**31 - 1), offset_values)
def test_offset_record_round_trips(group, topic, partition, value):
    key = OffsetKey(group, topic, partition)
    kb, vb = offset_record(key, value)
    assert decode_record(kb, vb) == (key, value)
    assert cbor2.dumps(cbor2.loads(vb), canonical=True) == vb


@settings(max_examples=80, deadline=None)
@given(names, group_values())
def test_group_record_round_trips(group, value):
    kb, vb = group_record(GroupKey(group), value)
    assert decode_record(kb, vb) == (GroupKey(group), value)


def test_key_layout_is_fixed_and_kinds_differ():
    assert cbor2.loads(encode_key(OffsetKey("g", "t", 3))) == [1, "g", "t", 3]
    assert cbor2.loads(encode_key(GroupKey("g"))) == [2, "g"]
    assert decode_key(encode_key(GroupKey("g"))) == GroupKey("g")


def test_tombstones_decode_to_none():
    kb, vb = offset_record(OffsetKey("g", "t", 0), None)
    assert vb is None and decode_record(kb, None) == (OffsetKey("g", "t", 0), None)
    assert decode_value(GroupKey("g"), None) is None


def test_optional_fields_are_left_out_not_null():
    obj = cbor2.loads(encode_value(OffsetValue(5, "", 7)))
    assert obj == {"v": 1, "offset": 5, "metadata": "", "commit_timestamp": 7}


def _dumps(obj):
    return cbor2.dumps(obj, canonical=True)


GOOD_OFFSET = {"v": 1, "offset": 5, "metadata": "", "commit_timestamp": 7}


@pytest.mark.parametrize(
    "value, why",
    [
        ({**GOOD_OFFSET, "v": 2}, "version"),
        ({**GOOD_OFFSET, "extra": 1}, "unknown field"),
        ({k: v for k, v in GOOD_OFFSET.items() if k != "metadata"}, "missing"),
        ({**GOOD_OFFSET, "offset": True}, "expected int"),
        ({**GOOD_OFFSET, "offset": -(2**63) - 1}, "out of range"),  # -1, -2 are stored, as Kafka does
        ({**GOOD_OFFSET, "leader_epoch": None}, "null"),
        ([1, 2], "expected map"),
    ],
)
def test_offset_value_decode_is_strict(value, why):
    with pytest.raises(InvalidGroupRecordError, match=why):
        decode_value(OffsetKey("g", "t", 0), _dumps(value))


@pytest.mark.parametrize(
    "data, why",
    [
        (_dumps([3, "g"]), "unknown key kind"),
        (_dumps([1, "g", "t"]), "unknown key kind"),
        (_dumps([2, ""]), "length 0"),
        (_dumps([1, "g", "t", -1]), "out of range"),
        (_dumps([2, "g"]) + b"\x00", "trailing"),
        (b"\xa1\x61a\x01\x61a\x02"[:3], "not valid CBOR"),
        (bytes.fromhex("82" "1a00000002" "6167"), "not canonical"),  # 2 as a 4-byte int
        (_dumps(cbor2.CBORTag(40000, [2, "g"])), "tag"),
    ],
)
def test_key_decode_is_strict(data, why):
    with pytest.raises(InvalidGroupRecordError, match=why):
        decode_key(data)


def test_group_value_checks_its_members():
    m = MemberValue("m1", "c", "h", 10_000, 30_000, b"s", b"a")
    with pytest.raises(InvalidGroupRecordError, match="duplicate"):
        GroupValue("consumer", 1, (m, m), "range", "m1")
    with pytest.raises(InvalidGroupRecordError, match="not a member"):
        GroupValue("consumer", 1, (m,), "range", "m2")
    with pytest.raises(InvalidGroupRecordError, match="needs a protocol"):
        GroupValue("consumer", 1, (m,))
    with pytest.raises(InvalidGroupRecordError, match="unknown state"):
        GroupValue("consumer", 0, state="Running")


# Java's String.hashCode: known values (the first two from the JDK's own docs and folklore:
# "polygenelubricants".hashCode() == Integer.MIN_VALUE is the classic Math.abs trap).
@pytest.mark.parametrize(
    "s, h",
    [("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
     ("polygenelubricants", -(2**31)), ("\U0001F600", 55357 * 31 + 56832)],
)
def test_java_string_hash(s, h):
    assert java_string_hash(s) == h


@pytest.mark.parametrize(
    "group, partitions, expected",
    [
        ("hello", 16, 99162322 % 16),
        ("polygenelubricants", 16, 0),  # Utils.abs(MIN_VALUE) = 0, not a negative index
        ("Aa", 50, 2112 % 50),
        ("my-group", 50, abs(java_string_hash("my-group")) % 50),
    ],
)
def test_partition_for_group_is_kafkas(group, partitions, expected):
    assert partition_for_group(group, partitions) == expected


def test_partition_for_group_negative_hash_uses_abs():
    negatives = [g for g in (f"group-{i}" for i in range(200)) if java_string_hash(g) < 0]
    assert negatives, "need a group id whose hash is negative"
    g = negatives[0]
    assert partition_for_group(g, 16) == (-java_string_hash(g)) % 16
    assert all(0 <= partition_for_group(f"g{i}") < 16 for i in range(500))


def test_a_classic_members_metadata_round_trips_in_the_consumer_group_record():
    key = ConsumerGroupKey(5, "g", "m1")
    classic = MemberMetadataValue("c", "/127.0.0.1", 30_000, ("orders",), classic_session_timeout_ms=10_000,
                                  classic_protocols=(("range", b"\x00\x03sub"), ("roundrobin", b"")))
    assert decode_any_record(encode_consumer_key(key), encode_consumer_value(classic)) == (key, classic)
    plain = MemberMetadataValue("c", "/127.0.0.1", 30_000, ("orders",))
    assert b"classic" not in encode_consumer_value(plain)  # a KIP-848 member: the fields are left out
    assert decode_any_record(encode_consumer_key(key), encode_consumer_value(plain)) == (key, plain)
    with pytest.raises(InvalidGroupRecordError, match="go together"):
        MemberMetadataValue("c", "h", 1, (), classic_session_timeout_ms=10_000)
    with pytest.raises(InvalidGroupRecordError, match="metadata bytes"):
        MemberMetadataValue("c", "h", 1, (), classic_session_timeout_ms=1, classic_protocols=(("range", "str"),))

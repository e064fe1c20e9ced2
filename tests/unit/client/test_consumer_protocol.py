"""The native client's ConsumerProtocol codec writes the bytes Kafka's own schemas (kafka-python's generated classes) write, reads what they write at every version 0-3, and refuses malformed or oversized input with CorruptMessageError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from raftlog.base.errors import CorruptMessageError
from raftlog.base.consumer_protocol import (
    MAX_BYTES,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

topics = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)
tps = st.lists(st.tuples(topics, st.integers(0, 2**31 - 1)), max_size=20, unique=True)
user_data = st.none() | st.binary(max_size=50)


def _grouped(cls, pairs):
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(pairs):
        by_topic.setdefault(t, []).append(p)
    return [cls.TopicPartition(topic=t, partitions=ps) for t, ps in by_topic.items()]


def _kafka_subscription(s: Subscription, version: int) -> bytes:
    return KSubscription(
        version=version, topics=sorted(s.topics), user_data=s.user_data,
        owned_partitions=_grouped(KSubscription, s.owned_partitions), generation_id=s.generation,
        rack_id=s.rack_id,
    ).encode(version=version)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(topics, max_size=10, unique=True), tps, st.integers(-1, 2**31 - 1), user_data,
       st.none() | st.text(max_size=10))
def test_subscription_bytes_equal_kafkas_own_schema(ts, owned, generation, ud, rack):
    s = Subscription(tuple(sorted(ts)), tuple(sorted(owned)), generation, ud, rack)
    ours = encode_subscription(s)
    assert ours == _kafka_subscription(s, 3)
    assert decode_subscription(ours) == s
    k = KSubscription.decode(ours)
    assert sorted(k.topics) == sorted(ts) and k.generation_id == generation and k.user_data == ud


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_subscription_version_kafka_writes_decodes(version):
    s = Subscription(("a", "b"), (("a", 0), ("a", 1), ("b", 7)), 5, b"ud", "rack-1")
    got = decode_subscription(_kafka_subscription(s, version), "inst")
    assert got.topics == ("a", "b") and got.user_data == b"ud" and got.group_instance_id == "inst"
    assert got.owned_partitions == (s.owned_partitions if version >= 1 else ())
    assert got.generation == (5 if version >= 2 else -1)
    assert got.rack_id == ("rack-1" if version >= 3 else None)


@settings(max_examples=200, deadline=None)
@given(tps, user_data)
def test_assignment_bytes_equal_kafkas_own_schema(pairs, ud):
    a = Assignment(tuple(sorted(pairs)), ud)
    ours = encode_assignment(a)
    assert ours == KAssignment(version=3, assigned_partitions=_grouped(KAssignment, pairs),
                               user_data=ud).encode(version=3)
    assert decode_assignment(ours) == a
    for version in (0, 1, 2, 3):
        theirs = KAssignment(version=version, assigned_partitions=_grouped(KAssignment, pairs),
                             user_data=ud).encode(version=version)
        assert decode_assignment(theirs) == a


def test_empty_assignment_is_no_partitions():
    assert decode_assignment(b"") == Assignment(())


def test_a_newer_version_is_read_as_v3_and_its_tail_ignored():
    s = Subscription(("t",), (("t", 0),), 2, None, None)
    newer = struct.pack(">h", 4) + encode_subscription(s)[2:] + b"future fields"
    assert decode_subscription(newer) == s
    a = Assignment((("t", 1),))
    assert decode_assignment(struct.pack(">h", 9) + encode_assignment(a)[2:] + b"\x00\x01") == a


def _sub_v0(topic_list, tail=b"\xff\xff\xff\xff"):
    out = struct.pack(">hi", 0, len(topic_list))
    for t in topic_list:
        out += struct.pack(">h", len(t)) + t
    return out + tail


@pytest.mark.parametrize(
    "blob, why",
    [
        (b"", "truncated"),
        (b"\x00", "truncated"),
        (struct.pack(">h", -1) + _sub_v0([b"a"])[2:], "version -1"),
        (_sub_v0([b"a"], tail=b""), "truncated"),
        (_sub_v0([b"a", b"a"]), "listed twice"),
        (_sub_v0([b""]), "empty topic"),
        (_sub_v0([b"\xff\xfe"]), "not UTF-8"),
        (_sub_v0([b"x" * 250]), "over 249"),
        (_sub_v0([b"a"]) + b"!", "after the last field"),
        (struct.pack(">hi", 0, -1) + b"\xff\xff\xff\xff", "count -1"),
        (struct.pack(">hi", 0, 10_001), "count 10001"),
        (struct.pack(">hih", 0, 1, -1) + b"\xff\xff\xff\xff", "null or negative"),
        (_sub_v0([b"a"], tail=struct.pack(">i", -2)), "negative length"),
        (_sub_v0([b"a"], tail=struct.pack(">i", 100)), "truncated"),
        (struct.pack(">h", 1) + _sub_v0([b"a"])[2:] + struct.pack(">ih", 1, 1) + b"a" + struct.pack(">ii", 1, -3),
         "partition -3"),
        (struct.pack(">h", 1) + _sub_v0([b"a"])[2:] + struct.pack(">ih", 2, 1) + b"a" + struct.pack(">ii", 1, 0)
         + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 0), "listed twice"),
        (struct.pack(">h", 2) + _sub_v0([b"a"])[2:] + struct.pack(">ii", 0, -5), "generation_id -5"),
        (b"\x00" * (MAX_BYTES + 1), "over the"),
    ],
)
def test_subscription_decode_is_strict(blob, why):
    with pytest.raises(CorruptMessageError, match=why):
        decode_subscription(blob)


@pytest.mark.parametrize(
    "blob, why",
    [
        (b"\x00\x00", "truncated"),
        (struct.pack(">hi", 0, 0), "truncated"),
        (struct.pack(">hi", 0, 0) + struct.pack(">i", -1) + b"x", "after the last field"),
        (struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 1_000_001), "outside"),
        (struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">iii", 2, 1, 1) + struct.pack(">i", -1), "listed twice"),
    ],
)
def test_assignment_decode_is_strict(blob, why):
    with pytest.raises(CorruptMessageError, match=why):
        decode_assignment(blob)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_is_refused_or_decoded_never_anything_else(blob):
    for decode, kind in ((decode_subscription, Subscription), (decode_assignment, Assignment)):
        try:
            out = decode(blob)
        except CorruptMessageError as exc:
            assert str(exc).startswith("CORRUPT_MESSAGE")
        else:
            assert isinstance(out, kind)

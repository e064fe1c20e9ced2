"""The client's murmur2 is Kafka's (known vectors + kafka-python cross-check) and the sticky partitioner sticks, then moves."""

import random
import warnings

from hypothesis import given, settings, strategies as st

with warnings.catch_warnings():
    # kafka-python's package import uses a deprecated importlib.resources call.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from raftlog.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
# (Java's signed int results of Utils.murmur2).
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# kafka-python test/test_partitioner.py, test_murmur2_java_compatibility: partitions out of
# 1000 "compared with output from Kafka's org.apache.kafka.clients.producer.Partitioner".
KAFKA_PYTHON_JAVA_PARTITIONS_OF_1000 = [
    (b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742),
]

# akka/pekko cluster-sharding-typed Murmur2Spec ("expected correct hash values from the kafka
# murmur2 impl", Utils.java#L500).
AKKA_VECTORS = [(b"1", -1993445489), (b"12", 126087238), (b"123", -267702483),
                (b"1234", -1614185708), (b"12345", -1188365604)]


def test_kafka_utils_test_vectors():
    for key, expected in KAFKA_UTILS_TEST_VECTORS + AKKA_VECTORS:
        assert murmur2(key) == expected, key


def test_java_partition_vectors():
    for key, expected in KAFKA_PYTHON_JAVA_PARTITIONS_OF_1000:
        assert partition_for_key(key, 1000) == expected, key


def test_to_positive_is_mask_not_abs():
    assert to_positive(-2147483648) == 0
    assert to_positive(-1) == 0x7FFFFFFF


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_matches_kafka_python(key, n):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert partition_for_key(key, n) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


def test_sticky_stays_until_new_batch_then_moves():
    sp = StickyPartitioner(random.Random(7))
    avail = (0, 1, 2, 3)
    first = sp.partition("t", 4, avail)
    assert all(sp.partition("t", 4, avail) == first for _ in range(50))
    # A stale notice (not the sticky partition any more): no move.
    assert sp.on_new_batch("t", (first + 1) % 4, 4, avail) == first
    second = sp.on_new_batch("t", first, 4, avail)
    assert second != first and second in avail
    assert sp.partition("t", 4, avail) == second


def test_sticky_only_available_and_spreads():
    sp = StickyPartitioner(random.Random(1))
    seen = set()
    for _ in range(200):
        p = sp.partition("t", 6, (1, 4, 5))
        assert p in (1, 4, 5)
        seen.add(p)
        sp.on_new_batch("t", p, 6, (1, 4, 5))
    assert seen == {1, 4, 5}
    # No leader known anywhere: still a valid partition (the record waits for one).
    assert StickyPartitioner(random.Random(2)).partition("u", 3, ()) in range(3)

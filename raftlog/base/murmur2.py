"""Kafka's key hashing, byte for byte, shared by the client's partitioner and the node's REST
proxy (which picks a keyed record's partition as a Java client would).

Invariants: `murmur2(data)` equals Java's `org.apache.kafka.common.utils.Utils.murmur2` as a
signed 32-bit int (seed 0x9747b28c), so a keyed record lands on the partition a Java client,
Kafka Streams or librdkafka's `murmur2_random` would pick: `(murmur2(key) & 0x7fffffff) % n`.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "to_positive", "partition_for_key"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_WORD_STRUCTS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as a signed 32-bit int (what Java's `Utils.murmur2` returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    words = length >> 2
    if words:
        # One struct call for all 4-byte little-endian words: the per-word Python work is
        # what costs, not the unpacking.
        st = _WORD_STRUCTS.get(words)
        if st is None:
            st = struct.Struct(f"<{words}I")
            if len(_WORD_STRUCTS) < 256:
                _WORD_STRUCTS[words] = st
        for k in st.unpack_from(data):
            k = (k * _M) & _MASK32
            k ^= k >> 24
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs(), which breaks on MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions

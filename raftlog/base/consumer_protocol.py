"""Kafka's ConsumerProtocol bytes (pure): what a consumer-group member puts in JoinGroup
(`Subscription`) and what the leader hands out in SyncGroup (`Assignment`), exactly as Kafka's
`ConsumerProtocolSubscription.json` / `ConsumerProtocolAssignment.json` (versions 0-3,
non-flexible, big-endian) lay them out. Every consumer speaks these, so a raftlog member and a
Kafka client (librdkafka, kafka-python, aiokafka, Java) can share one group: each leader reads
every member's subscription, and each member reads the leader's assignment.

    Subscription  int16 version
                  [string] topics
                  nullable bytes user_data
                  v1+: [topic string, [int32] partitions] owned_partitions
                  v2+: int32 generation_id (-1: none)
                  v3+: nullable string rack_id
    Assignment    int16 version
                  [topic string, [int32] partitions] assigned_partitions
                  nullable bytes user_data

    string = int16 length + UTF-8 (-1: null), bytes = int32 length (-1: null),
    [x] = int32 count + items.

We write Subscription v3 (owned partitions and generation feed the sticky assignors) and
Assignment v3, as Kafka's Java client does; Kafka's own readers, kafka-python's and aiokafka's
read them (the unit tests decode ours with kafka-python's schema classes and theirs with ours).

Decoding is strict (CorruptMessageError): a negative version, a truncated field, a null or
invalid topic name, a negative count or one past the limits, a partition outside 0..2^31-1, a
partition listed twice, or bytes after the last field of a version we know. A version above
3 is read as version 3 and what follows is ignored: that is Kafka's rule ("new versions cannot
remove or reorder any of the existing fields"). Limits: MAX_BYTES per blob, MAX_TOPICS topics,
MAX_PARTITIONS partitions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

from raftlog.base.errors import CorruptMessageError
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

__all__ = [
    "Subscription",
    "Assignment",
    "TopicPartition",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
    "SUBSCRIPTION_VERSION",
    "ASSIGNMENT_VERSION",
    "MAX_BYTES",
]

SUBSCRIPTION_VERSION: Final = 3
ASSIGNMENT_VERSION: Final = 3
HIGHEST_KNOWN_VERSION: Final = 3
MAX_BYTES: Final = 1024 * 1024
MAX_TOPICS: Final = 10_000
MAX_PARTITIONS: Final = 1_000_000
MAX_RACK_CHARS: Final = 255

TopicPartition = tuple[str, int]

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1
    user_data: bytes | None = None
    rack_id: str | None = None
    # Not encoded: the leader fills it from the JoinGroup member list (range orders by it).
    group_instance_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


# --- writing ----------------------------------------------------------------------------


def _string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise ValueError("a string of the consumer protocol is at most 32767 bytes")
    out += _I16.pack(len(raw)) + raw


def _bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(value)) + value


def _topic_partitions(out: bytearray, tps: tuple[TopicPartition, ...] | list[TopicPartition]) -> None:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(set(tps)):
        by_topic.setdefault(t, []).append(p)
    out += _I32.pack(len(by_topic))
    for t, parts in by_topic.items():
        _string(out, t)
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)


def encode_subscription(s: Subscription) -> bytes:
    """Subscription v3; topics and owned partitions sorted, so equal values give equal bytes."""
    out = bytearray(_I16.pack(SUBSCRIPTION_VERSION))
    topics = sorted(set(s.topics))
    out += _I32.pack(len(topics))
    for t in topics:
        _string(out, t)
    _bytes(out, s.user_data)
    _topic_partitions(out, s.owned_partitions)
    out += _I32.pack(s.generation)
    _string(out, s.rack_id)
    return bytes(out)


def encode_assignment(a: Assignment) -> bytes:
    out = bytearray(_I16.pack(ASSIGNMENT_VERSION))
    _topic_partitions(out, a.partitions)
    _bytes(out, a.user_data)
    return bytes(out)


# --- reading ----------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptMessageError(f"{what}: expected bytes")
        if len(data) > MAX_BYTES:
            raise CorruptMessageError(f"{what}: {len(data)} bytes, over the {MAX_BYTES} limit")
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def fail(self, why: str) -> CorruptMessageError:
        return CorruptMessageError(f"{self.what}: {why} (at byte {self.pos})")

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise self.fail("truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def count(self, limit: int, name: str) -> int:
        n = self.i32()
        if n < 0 or n > limit:
            raise self.fail(f"{name}: count {n} outside 0..{limit}")
        return n

    def string(self, name: str, *, nullable: bool = False, max_chars: int = 0x7FFF) -> str | None:
        n = self.i16()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.fail(f"{name}: null or negative length {n}")
        raw = self.take(n)
        try:
            value = raw.decode()
        except UnicodeDecodeError:
            raise self.fail(f"{name}: not UTF-8") from None
        if len(value) > max_chars:
            raise self.fail(f"{name}: over {max_chars} characters")
        return value

    def topic(self, name: str) -> str:
        t = self.string(name, max_chars=MAX_TOPIC_NAME_CHARS)
        assert t is not None
        if not t:
            raise self.fail(f"{name}: empty topic name")
        return t

    def nullable_bytes(self, name: str) -> bytes | None:
        n = self.i32()
        if n == -1:
            return None
        if n < 0:
            raise self.fail(f"{name}: negative length {n}")
        return self.take(n)

    def topic_partitions(self, name: str) -> tuple[TopicPartition, ...]:
        out: list[TopicPartition] = []
        for _ in range(self.count(MAX_TOPICS, name)):
            t = self.topic(name)
            for _ in range(self.count(MAX_PARTITIONS - len(out), name)):
                p = self.i32()
                if p < 0:
                    raise self.fail(f"{name}: partition {p} of {t!r}")
                out.append((t, p))
        if len(set(out)) != len(out):
            raise self.fail(f"{name}: a partition is listed twice")
        return tuple(sorted(out))

    def version(self) -> int:
        v = self.i16()
        if v < 0:
            raise self.fail(f"version {v}")
        return v

    def end(self, version: int) -> None:
        if version <= HIGHEST_KNOWN_VERSION and self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} bytes after the last field of v{version}")


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """A member's subscription (any version; see the module docstring). `group_instance_id`
    (from the JoinGroup member list, not the bytes) is carried along for the range assignor.
    Raises CorruptMessageError."""
    r = _Reader(data, "subscription")
    version = r.version()
    topics = [r.topic("topics") for _ in range(r.count(MAX_TOPICS, "topics"))]
    if len(set(topics)) != len(topics):
        raise r.fail("topics: a topic is listed twice")
    user_data = r.nullable_bytes("user_data")
    owned: tuple[TopicPartition, ...] = ()
    generation = -1
    rack_id = None
    if version >= 1:
        owned = r.topic_partitions("owned_partitions")
    if version >= 2:
        generation = r.i32()
        if generation < -1:
            raise r.fail(f"generation_id {generation}")
    if version >= 3:
        rack_id = r.string("rack_id", nullable=True, max_chars=MAX_RACK_CHARS)
    r.end(version)
    return Subscription(tuple(sorted(topics)), owned, generation, user_data, rack_id, group_instance_id)


def decode_assignment(data: bytes) -> Assignment:
    """A member's assignment. An empty byte string (what the coordinator gives a member the
    leader left out) is an empty assignment. Raises CorruptMessageError."""
    if data == b"":
        return Assignment(())
    r = _Reader(data, "assignment")
    version = r.version()
    partitions = r.topic_partitions("assigned_partitions")
    user_data = r.nullable_bytes("user_data")
    r.end(version)
    return Assignment(partitions, user_data)

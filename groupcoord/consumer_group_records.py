"""KIP-848 consumer-group records in `__consumer_offsets` (pure codec), our own CBOR forms of
Kafka's record types, beside the classic offset (kind 1) and group (kind 2) records of
records.py:

    kind  key                          value                      Kafka's record
    3     [3, group]                   GroupMetadataValue         ConsumerGroupMetadata
    4     [4, group]                   PartitionMetadataValue     ConsumerGroupPartitionMetadata
    5     [5, group, member_id]        MemberMetadataValue        ConsumerGroupMemberMetadata
    6     [6, group]                   TargetMetadataValue        ConsumerGroupTargetAssignmentMetadata
    7     [7, group, member_id]        TargetMemberValue          ConsumerGroupTargetAssignmentMember
    8     [8, group, member_id]        CurrentAssignmentValue     ConsumerGroupCurrentMemberAssignment

A tombstone (value None) deletes the key; a group converted back to classic, or deleted,
writes tombstones for all of its keys. The same rules as records.py: canonical CBOR, values
`{"v": 1, field: value}` with absent optional fields left out, strict decoding
(InvalidGroupRecordError for anything else). An assignment is `{topic: [partition, ...]}`,
partitions sorted, so equal assignments have equal bytes.

    encode_key / encode_value / decode_record accept both these and records.py's kinds, so
    the coordinator has one codec (context.py, replay.py use these).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final, Union

from groupcoord import records
from groupcoord.records import INT32_MAX, MAX_GROUP_ID_CHARS, MAX_KEY_BYTES, MAX_VALUE_BYTES, loads_strict
from raftlog.base import cbor
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

__all__ = [
    "ConsumerGroupKey", "GroupMetadataValue", "PartitionMetadataValue", "MemberMetadataValue",
    "TargetMetadataValue", "TargetMemberValue", "CurrentAssignmentValue", "Assignment",
    "GROUP_METADATA", "PARTITION_METADATA", "MEMBER_METADATA", "TARGET_METADATA", "TARGET_MEMBER",
    "CURRENT_ASSIGNMENT", "encode_key", "encode_value", "decode_record", "MEMBER_STATES",
]  # fmt: skip

GROUP_METADATA: Final = 3
PARTITION_METADATA: Final = 4
MEMBER_METADATA: Final = 5
TARGET_METADATA: Final = 6
TARGET_MEMBER: Final = 7
CURRENT_ASSIGNMENT: Final = 8
_MEMBER_KINDS: Final = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
_GROUP_KINDS: Final = frozenset({GROUP_METADATA, PARTITION_METADATA, TARGET_METADATA})
MEMBER_STATES: Final = ("stable", "unrevoked_partitions", "unreleased_partitions", "unknown")
MAX_TOPICS: Final = 100_000
MAX_REGEX_CHARS: Final = 4096
MAX_CLASSIC_PROTOCOLS: Final = 64

# An assignment: ((topic, (partition, ...)), ...) sorted by topic, partitions sorted.
Assignment = tuple[tuple[str, tuple[int, ...]], ...]

_fail = records._fail
_int = records._int
_str = records._str


@dataclass(frozen=True, order=True)
class ConsumerGroupKey:
    kind: int
    group: str
    member_id: str = ""

    def __post_init__(self) -> None:
        if self.kind in _MEMBER_KINDS:
            _str("consumer_key.member_id", self.member_id, 1)
        elif self.kind in _GROUP_KINDS:
            if self.member_id:
                raise _fail("consumer_key.member_id", f"kind {self.kind} has no member id")
        else:
            raise _fail("consumer_key.kind", f"unknown kind {self.kind!r}")
        _str("consumer_key.group", self.group, 1, MAX_GROUP_ID_CHARS)


def _check_assignment(where: str, value: Any) -> None:
    if not isinstance(value, tuple) or len(value) > MAX_TOPICS:
        raise _fail(where, "expected a tuple of (topic, partitions)")
    last = None
    for item in value:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], tuple)):
            raise _fail(where, "expected (topic, (partition, ...)) pairs")
        _str(f"{where}.topic", item[0], 1, MAX_TOPIC_NAME_CHARS)
        if last is not None and item[0] <= last:
            raise _fail(where, "topics must be sorted and unique")
        last = item[0]
        for p in item[1]:
            _int(f"{where}.partition", p, 0, INT32_MAX)
        if list(item[1]) != sorted(set(item[1])):
            raise _fail(where, "partitions must be sorted and unique")


@dataclass(frozen=True)
class GroupMetadataValue:
    epoch: int

    def __post_init__(self) -> None:
        _int("group_metadata.epoch", self.epoch, 0, INT32_MAX)


@dataclass(frozen=True)
class PartitionMetadataValue:
    """The partition counts of the subscribed topics the target assignment was computed for."""

    topics: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.topics, tuple) or len(self.topics) > MAX_TOPICS:
            raise _fail("partition_metadata.topics", "expected a tuple of (topic, count)")
        for t, n in self.topics:
            _str("partition_metadata.topic", t, 1, MAX_TOPIC_NAME_CHARS)
            _int("partition_metadata.count", n, 0, INT32_MAX)


@dataclass(frozen=True)
class MemberMetadataValue:
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    instance_id: str | None = None
    rack_id: str | None = None
    # A classic member inside a consumer group (Kafka's ClassicMemberMetadata): its JoinGroup
    # session timeout and protocols ((name, metadata bytes), ...). Absent for KIP-848 members.
    classic_session_timeout_ms: int | None = None
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None

    def __post_init__(self) -> None:
        _check_classic(self.classic_session_timeout_ms, self.classic_protocols)
        _str("member_metadata.client_id", self.client_id)
        _str("member_metadata.client_host", self.client_host)
        _int("member_metadata.rebalance_timeout_ms", self.rebalance_timeout_ms, 0, INT32_MAX)
        if not isinstance(self.subscribed_topic_names, tuple) or len(self.subscribed_topic_names) > MAX_TOPICS:
            raise _fail("member_metadata.subscribed_topic_names", "expected a tuple of names")
        for t in self.subscribed_topic_names:
            _str("member_metadata.subscribed_topic_names", t, 1, MAX_TOPIC_NAME_CHARS)
        for name in ("subscribed_topic_regex", "server_assignor", "instance_id", "rack_id"):
            v = getattr(self, name)
            if v is not None:
                _str(f"member_metadata.{name}", v, 0 if name == "subscribed_topic_regex" else 1,
                     MAX_REGEX_CHARS if name == "subscribed_topic_regex" else records.MAX_ID_CHARS)


def _check_classic(session_timeout_ms: Any, protocols: Any) -> None:
    if (session_timeout_ms is None) != (protocols is None):
        raise _fail("member_metadata.classic_protocols", "classic session timeout and protocols go together")
    if protocols is None:
        return
    _int("member_metadata.classic_session_timeout_ms", session_timeout_ms, 0, INT32_MAX)
    if not isinstance(protocols, tuple) or not 1 <= len(protocols) <= MAX_CLASSIC_PROTOCOLS:
        raise _fail("member_metadata.classic_protocols", f"expected 1..{MAX_CLASSIC_PROTOCOLS} (name, metadata)")
    for item in protocols:
        if not (isinstance(item, tuple) and len(item) == 2 and type(item[1]) is bytes):
            raise _fail("member_metadata.classic_protocols", "expected (name, metadata bytes) pairs")
        _str("member_metadata.classic_protocols.name", item[0], 1, records.MAX_ID_CHARS)
        if len(item[1]) > records.MAX_BLOB_BYTES:
            raise _fail("member_metadata.classic_protocols.metadata", f"over {records.MAX_BLOB_BYTES} bytes")


@dataclass(frozen=True)
class TargetMetadataValue:
    assignment_epoch: int

    def __post_init__(self) -> None:
        _int("target_metadata.assignment_epoch", self.assignment_epoch, 0, INT32_MAX)


@dataclass(frozen=True)
class TargetMemberValue:
    partitions: Assignment

    def __post_init__(self) -> None:
        _check_assignment("target_member.partitions", self.partitions)


@dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: Assignment
    pending_revocation: Assignment

    def __post_init__(self) -> None:
        _int("current_assignment.member_epoch", self.member_epoch, -2, INT32_MAX)
        _int("current_assignment.previous_member_epoch", self.previous_member_epoch, -2, INT32_MAX)
        if self.state not in MEMBER_STATES:
            raise _fail("current_assignment.state", f"unknown state {self.state!r}")
        _check_assignment("current_assignment.assigned", self.assigned)
        _check_assignment("current_assignment.pending_revocation", self.pending_revocation)


ConsumerValue = Union[GroupMetadataValue, PartitionMetadataValue, MemberMetadataValue,
                      TargetMetadataValue, TargetMemberValue, CurrentAssignmentValue]
_VALUE_OF_KIND: Final[dict[int, type]] = {
    GROUP_METADATA: GroupMetadataValue, PARTITION_METADATA: PartitionMetadataValue,
    MEMBER_METADATA: MemberMetadataValue, TARGET_METADATA: TargetMetadataValue,
    TARGET_MEMBER: TargetMemberValue, CURRENT_ASSIGNMENT: CurrentAssignmentValue,
}  # fmt: skip
_ASSIGNMENT_FIELDS: Final = frozenset({"partitions", "assigned", "pending_revocation"})
_TUPLE_FIELDS: Final = frozenset({"subscribed_topic_names"})


def _value_obj(value: ConsumerValue) -> dict[str, Any]:
    obj: dict[str, Any] = {"v": records.VALUE_VERSION}
    for f in fields(value):
        v = getattr(value, f.name)
        if v is None:
            continue
        if f.name in _ASSIGNMENT_FIELDS:
            v = {t: list(ps) for t, ps in v}
        elif f.name == "topics":
            v = {t: n for t, n in v}
        elif f.name in _TUPLE_FIELDS:
            v = list(v)
        elif f.name == "classic_protocols":
            v = [list(item) for item in v]
        obj[f.name] = v
    return obj


def _value_from_obj(kind: int, obj: Any) -> ConsumerValue:
    cls = _VALUE_OF_KIND[kind]
    where = cls.__name__
    if not isinstance(obj, dict) or type(obj.get("v")) is not int or obj.get("v") != records.VALUE_VERSION:
        raise _fail(where, "expected a map with v=1")
    names = {f.name: f for f in fields(cls)}
    required = {n for n in names if not _optional(cls, n)}
    body = {k: v for k, v in obj.items() if k != "v"}
    extra = set(body) - set(names)
    if extra:
        raise _fail(where, f"unknown field(s) {sorted(map(str, extra))}")
    missing = required - set(body)
    if missing:
        raise _fail(where, f"missing field(s) {sorted(missing)}")
    args: dict[str, Any] = {}
    for k, v in body.items():
        if v is None:
            raise _fail(f"{where}.{k}", "null (an absent optional field is left out)")
        if k in _ASSIGNMENT_FIELDS:
            if not isinstance(v, dict):
                raise _fail(f"{where}.{k}", "expected a map topic -> partitions")
            if not all(isinstance(ps, list) for ps in v.values()):
                raise _fail(f"{where}.{k}", "expected lists of partitions")
            v = tuple((t, tuple(ps)) for t, ps in sorted(v.items(), key=lambda kv: str(kv[0])))
        elif k == "topics":
            if not isinstance(v, dict):
                raise _fail(f"{where}.{k}", "expected a map topic -> count")
            v = tuple(sorted(v.items(), key=lambda kv: str(kv[0])))
        elif k in _TUPLE_FIELDS:
            if not isinstance(v, list):
                raise _fail(f"{where}.{k}", "expected an array")
            v = tuple(v)
        elif k == "classic_protocols":
            if not (isinstance(v, list) and all(isinstance(item, list) for item in v)):
                raise _fail(f"{where}.{k}", "expected an array of [name, metadata]")
            v = tuple(tuple(item) for item in v)
        args[k] = v
    return cls(**args)


def _optional(cls: type, name: str) -> bool:
    return any(f.name == name and f.default is None for f in fields(cls))


def encode_key(key: Any) -> bytes:
    """Bytes of a consumer-group key or a records.py key."""
    if isinstance(key, ConsumerGroupKey):
        return cbor.dumps([key.kind, key.group, key.member_id] if key.member_id else [key.kind, key.group])
    return records.encode_key(key)


def encode_value(value: Any) -> bytes:
    if isinstance(value, tuple(_VALUE_OF_KIND.values())):
        return cbor.dumps(_value_obj(value))
    return records.encode_value(value)


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> tuple[Any, Any]:
    """Decode any `__consumer_offsets` record: (key, value or None). Raises
    InvalidGroupRecordError."""
    obj = loads_strict(key_bytes, "key", MAX_KEY_BYTES)
    kind = obj[0] if isinstance(obj, list) and obj else None
    if type(kind) is not int or kind not in _VALUE_OF_KIND:
        return records.decode_record(key_bytes, value_bytes)
    if kind in _MEMBER_KINDS and len(obj) == 3:
        key = ConsumerGroupKey(kind, obj[1], obj[2])
    elif kind in _GROUP_KINDS and len(obj) == 2:
        key = ConsumerGroupKey(kind, obj[1])
    else:
        raise _fail("key", f"kind {kind} with {len(obj)} elements")
    if type(key.group) is not str or type(key.member_id) is not str:
        raise _fail("key", "group and member id must be strings")
    if value_bytes is None:
        return key, None
    return key, _value_from_obj(kind, loads_strict(value_bytes, "value", MAX_VALUE_BYTES))

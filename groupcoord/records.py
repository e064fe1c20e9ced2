"""The `__consumer_offsets` record codec (pure).

Two kinds of record live in the compacted topic, told apart by their key (as Kafka's key
versions 0/1 = offset commit and 2 = group metadata):

    key                                   value (None = tombstone: the key is deleted)
    OffsetKey(group, topic, partition)    OffsetValue(offset, leader_epoch?, metadata,
                                                      commit_timestamp, expire_timestamp?)
    GroupKey(group)                       GroupValue(protocol_type, generation, protocol?,
                                                     leader?, current_state_timestamp?,
                                                     members: (MemberValue, ...), state?)

Wire form (canonical CBOR, `cbor2.dumps(x, canonical=True)`):
* Keys are arrays: `[1, group, topic, partition]` and `[2, group]`. Compaction compares key
  bytes, so one logical key must have exactly one encoding: canonical CBOR of a fixed-shape
  array gives that.
* Values are maps `{"v": 1, <field>: <value>, ...}`; an optional field that is None is left
  out (never encoded as null), so equal values have equal bytes.
* Decoding is strict: unknown key kind, unknown value version, missing or extra field, wrong
  type (a bool is not an int), out-of-range value, tags, or trailing bytes all raise
  `InvalidGroupRecordError` (never KeyError/TypeError). Constructors check the same rules,
  so an invalid record cannot be built either.

Which partition holds a group is Kafka's hash (`raftlog.base.topics.partition_for_group`), so a
group maps to the partition a Kafka cluster with the same partition count would use.

Public API:
    OffsetKey, GroupKey, OffsetValue, GroupValue, MemberValue
    encode_key(key) -> bytes                  decode_key(data) -> OffsetKey | GroupKey
    encode_value(value) -> bytes              decode_value(key, data | None) -> value | None
    offset_record(key, value | None) / group_record(key, value | None) -> (bytes, bytes | None)
    decode_record(key_bytes, value_bytes | None) -> (key, value | None)
    (the group -> partition hash is raftlog.base.topics.partition_for_group)
    limits: MAX_GROUP_ID_CHARS, MAX_TOPIC_NAME_CHARS, MAX_METADATA_CHARS, MAX_MEMBERS,
            MAX_BLOB_BYTES, MAX_VALUE_BYTES
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from raftlog.base import cbor
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

from groupcoord.errors import InvalidGroupRecordError

VALUE_VERSION = 1
OFFSET_KEY_KIND = 1
GROUP_KEY_KIND = 2
MAX_GROUP_ID_CHARS = 255
MAX_PARTITION = 2**31 - 1
MAX_METADATA_CHARS = 32 * 1024   # the coordinator's own limit (offset_metadata_max_bytes) is lower
MAX_ID_CHARS = 1024               # member ids, instance ids, client ids, hosts, protocol names
MAX_MEMBERS = 10_000
MAX_BLOB_BYTES = 1024 * 1024      # one member's subscription or assignment
MAX_KEY_BYTES = 2048
MAX_VALUE_BYTES = 64 * 1024 * 1024
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


def _fail(where: str, why: str) -> InvalidGroupRecordError:
    return InvalidGroupRecordError(f"{where}: {why}")


def _int(where: str, value: Any, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if type(value) is not int:  # bool is an int subclass and is refused
        raise _fail(where, f"expected int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(where, f"{value} out of range {lo}..{hi}")
    return value


def _str(where: str, value: Any, min_chars: int = 0, max_chars: int = MAX_ID_CHARS) -> str:
    if type(value) is not str:
        raise _fail(where, f"expected str, got {type(value).__name__}")
    if not min_chars <= len(value) <= max_chars:
        raise _fail(where, f"length {len(value)} out of range {min_chars}..{max_chars}")
    return value


def _blob(where: str, value: Any) -> bytes:
    if type(value) is not bytes:
        raise _fail(where, f"expected bytes, got {type(value).__name__}")
    if len(value) > MAX_BLOB_BYTES:
        raise _fail(where, f"{len(value)} bytes, more than {MAX_BLOB_BYTES}")
    return value


# --- keys -------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class OffsetKey:
    group: str
    topic: str
    partition: int

    def __post_init__(self) -> None:
        _str("offset_key.group", self.group, 1, MAX_GROUP_ID_CHARS)
        _str("offset_key.topic", self.topic, 1, MAX_TOPIC_NAME_CHARS)
        _int("offset_key.partition", self.partition, 0, MAX_PARTITION)


@dataclass(frozen=True, order=True)
class GroupKey:
    group: str

    def __post_init__(self) -> None:
        _str("group_key.group", self.group, 1, MAX_GROUP_ID_CHARS)


Key = Union[OffsetKey, GroupKey]


# --- values -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset. `leader_epoch` is the epoch of the fetched record the offset
    follows (None if unknown); `expire_timestamp` is only set by explicit retention (None =
    the coordinator's default retention applies)."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int | None = None
    expire_timestamp: int | None = None

    def __post_init__(self) -> None:
        _int("offset_value.offset", self.offset)  # Kafka stores -1/-2 too: "no position"
        _str("offset_value.metadata", self.metadata, 0, MAX_METADATA_CHARS)
        _int("offset_value.commit_timestamp", self.commit_timestamp)
        if self.leader_epoch is not None:
            _int("offset_value.leader_epoch", self.leader_epoch, 0, INT32_MAX)
        if self.expire_timestamp is not None:
            _int("offset_value.expire_timestamp", self.expire_timestamp)


@dataclass(frozen=True)
class MemberValue:
    """One member as stored at the end of a rebalance: `subscription` is its metadata for the
    selected protocol, `assignment` what the leader gave it (both opaque to the coordinator)."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        _str("member.member_id", self.member_id, 1)
        _str("member.client_id", self.client_id)
        _str("member.client_host", self.client_host)
        _int("member.session_timeout_ms", self.session_timeout_ms, 1, INT32_MAX)
        _int("member.rebalance_timeout_ms", self.rebalance_timeout_ms, 0, INT32_MAX)
        _blob("member.subscription", self.subscription)
        _blob("member.assignment", self.assignment)
        if self.group_instance_id is not None:
            _str("member.group_instance_id", self.group_instance_id, 1)


@dataclass(frozen=True)
class GroupValue:
    """A group's metadata as of its last stored generation. `protocol` and `leader` are None
    for a group without members; `state` is informational (a reloaded group is Stable when it
    has members, else Empty)."""

    protocol_type: str
    generation: int
    members: tuple[MemberValue, ...] = ()
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int | None = None
    state: str | None = None

    def __post_init__(self) -> None:
        _str("group_value.protocol_type", self.protocol_type)
        _int("group_value.generation", self.generation, 0, INT32_MAX)
        if not isinstance(self.members, tuple):
            raise _fail("group_value.members", f"expected tuple, got {type(self.members).__name__}")
        if len(self.members) > MAX_MEMBERS:
            raise _fail("group_value.members", f"{len(self.members)} members, at most {MAX_MEMBERS}")
        for m in self.members:
            if not isinstance(m, MemberValue):
                raise _fail("group_value.members", f"expected MemberValue, got {type(m).__name__}")
        ids = [m.member_id for m in self.members]
        if len(set(ids)) != len(ids):
            raise _fail("group_value.members", "duplicate member_id")
        if self.protocol is not None:
            _str("group_value.protocol", self.protocol, 1)
        if self.leader is not None:
            _str("group_value.leader", self.leader, 1)
            if self.leader not in ids:
                raise _fail("group_value.leader", f"{self.leader!r} is not a member")
        if self.members and (self.protocol is None or self.leader is None):
            raise _fail("group_value", "a group with members needs a protocol and a leader")
        if self.current_state_timestamp is not None:
            _int("group_value.current_state_timestamp", self.current_state_timestamp)
        if self.state is not None and self.state not in GROUP_STATES:
            raise _fail("group_value.state", f"unknown state {self.state!r}")


Value = Union[OffsetValue, GroupValue]


# --- objects <-> plain CBOR items ---------------------------------------------------------


def _strip_none(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


def _member_to_obj(m: MemberValue) -> dict[str, Any]:
    return _strip_none(
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "session_timeout_ms": m.session_timeout_ms,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "subscription": m.subscription,
            "assignment": m.assignment,
        }
    )


def _value_to_obj(value: Value) -> dict[str, Any]:
    if isinstance(value, OffsetValue):
        obj = {
            "offset": value.offset,
            "leader_epoch": value.leader_epoch,
            "metadata": value.metadata,
            "commit_timestamp": value.commit_timestamp,
            "expire_timestamp": value.expire_timestamp,
        }
    elif isinstance(value, GroupValue):
        obj = {
            "protocol_type": value.protocol_type,
            "generation": value.generation,
            "protocol": value.protocol,
            "leader": value.leader,
            "current_state_timestamp": value.current_state_timestamp,
            "members": [_member_to_obj(m) for m in value.members],
            "state": value.state,
        }
    else:
        raise TypeError(f"not a __consumer_offsets value: {type(value).__name__}")
    return {"v": VALUE_VERSION, **_strip_none(obj)}


def _fields(where: str, obj: Any, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(where, f"expected map, got {type(obj).__name__}")
    extra = set(obj) - required - optional
    if extra:
        raise _fail(where, f"unknown field(s) {sorted(map(str, extra))}")
    missing = required - set(obj)
    if missing:
        raise _fail(where, f"missing field(s) {sorted(missing)}")
    for name in optional & set(obj):
        if obj[name] is None:  # optional fields are left out, never null: one encoding per value
            raise _fail(f"{where}.{name}", "null (an absent optional field is left out)")
    return obj


_MEMBER_REQUIRED = {"member_id", "client_id", "client_host", "session_timeout_ms",
                    "rebalance_timeout_ms", "subscription", "assignment"}


def _member_from_obj(obj: Any) -> MemberValue:
    f = _fields("member", obj, _MEMBER_REQUIRED, {"group_instance_id"})
    return MemberValue(**f)


def _value_from_obj(key: Key, obj: Any) -> Value:
    where = "offset_value" if isinstance(key, OffsetKey) else "group_value"
    if not isinstance(obj, dict):
        raise _fail(where, f"expected map, got {type(obj).__name__}")
    version = obj.get("v")
    if type(version) is not int or version != VALUE_VERSION:
        raise _fail(where, f"unsupported version {version!r} (this node reads v{VALUE_VERSION})")
    body = {k: v for k, v in obj.items() if k != "v"}
    if isinstance(key, OffsetKey):
        f = _fields(where, body, {"offset", "metadata", "commit_timestamp"},
                    {"leader_epoch", "expire_timestamp"})
        return OffsetValue(**f)
    f = _fields(where, body, {"protocol_type", "generation", "members"},
                {"protocol", "leader", "current_state_timestamp", "state"})
    members = f["members"]
    if not isinstance(members, list):
        raise _fail("group_value.members", f"expected array, got {type(members).__name__}")
    if len(members) > MAX_MEMBERS:
        raise _fail("group_value.members", f"{len(members)} members, at most {MAX_MEMBERS}")
    return GroupValue(**{**f, "members": tuple(_member_from_obj(m) for m in members)})


# --- bytes ------------------------------------------------------------------------------


_dumps = cbor.dumps


def loads_strict(data: Any, what: str, max_bytes: int) -> Any:
    """Decode exactly one canonical, tag-free CBOR item filling `data` (at most `max_bytes`);
    compaction and dedupe compare bytes, so only the canonical encoding is accepted.
    Raises InvalidGroupRecordError."""
    return cbor.loads(data, what=what, max_bytes=max_bytes, error=InvalidGroupRecordError, canonical=True)


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return _dumps([OFFSET_KEY_KIND, key.group, key.topic, key.partition])
    if isinstance(key, GroupKey):
        return _dumps([GROUP_KEY_KIND, key.group])
    raise TypeError(f"not a __consumer_offsets key: {type(key).__name__}")


def decode_key(data: bytes) -> Key:
    """Raises InvalidGroupRecordError."""
    obj = loads_strict(data, "key", MAX_KEY_BYTES)
    if not isinstance(obj, list) or not obj:
        raise _fail("key", f"expected a non-empty array, got {type(obj).__name__}")
    kind = obj[0]
    if type(kind) is int and kind == OFFSET_KEY_KIND and len(obj) == 4:
        return OffsetKey(obj[1], obj[2], obj[3])
    if type(kind) is int and kind == GROUP_KEY_KIND and len(obj) == 2:
        return GroupKey(obj[1])
    raise _fail("key", f"unknown key kind {kind!r} with {len(obj)} elements")


def encode_value(value: Value) -> bytes:
    return _dumps(_value_to_obj(value))


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value for `key`, or None for a tombstone. Raises InvalidGroupRecordError."""
    if data is None:
        return None
    return _value_from_obj(key, loads_strict(data, "value", MAX_VALUE_BYTES))


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> tuple[Key, Value | None]:
    """Decode one `__consumer_offsets` record. Raises InvalidGroupRecordError."""
    key = decode_key(key_bytes)
    return key, decode_value(key, value_bytes)


def offset_record(key: OffsetKey, value: OffsetValue | None) -> tuple[bytes, bytes | None]:
    if value is not None and not isinstance(value, OffsetValue):
        raise TypeError("an offset key takes an OffsetValue")
    return encode_key(key), None if value is None else encode_value(value)


def group_record(key: GroupKey, value: GroupValue | None) -> tuple[bytes, bytes | None]:
    if value is not None and not isinstance(value, GroupValue):
        raise TypeError("a group key takes a GroupValue")
    return encode_key(key), None if value is None else encode_value(value)


# --- group -> partition -------------------------------------------------------------------

"""The `__share_group_state` records and their replay (KIP-932's share coordinator), pure.

One compacted, Raft-replicated internal topic holds the durable state of every share
partition, one key per (group, topic, partition); the latest value wins, a tombstone (None)
deletes it (DeleteShareGroupOffsets, a deleted group):

    key    [1, group, topic, partition]                     (canonical CBOR array)
    value  {"v": 1, "state_epoch": int, "start_offset": int,
            "state_batches": [[first_offset, last_offset, delivery_state, delivery_count], ...],
            "leader_epoch": int}       (absent from values written before it)

The value is `partition.share_partition.SharePartition.snapshot()` (Kafka's ShareSnapshot:
SPSO plus the in-flight window's runs, an acquired record written as AVAILABLE), so a new
partition leader rebuilds the window with `SharePartition.restore`, and the leader epoch of
the share-partition leader that wrote it (Kafka's leaderEpoch of WriteShareGroupState): the
share coordinator refuses a write from an older leader (share_store.py, "Fencing"). Decoding is strict
(InvalidGroupRecordError: the bytes are not ours or were damaged), as in records.py.

Which partition of `__share_group_state` holds a share partition: Kafka's hash of
"group:topic:partition" (`partition_for_share`).

Writes: a share-partition leader writes one record per request that changed a window (a
fetch that acquired a batch of records, an acknowledgement of many ranges): the window's latest
state, whatever number of records changed in it (share_service.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.records import MAX_GROUP_ID_CHARS, loads_strict
from partition.share_partition import RecordState
from raftlog.base import cbor
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS, java_string_hash

__all__ = ["SHARE_STATE_TOPIC", "SHARE_STATE_TOPIC_PARTITIONS", "ShareKey", "MembersKey", "StateKey", "encode_key",
           "decode_key", "encode_value", "decode_value", "encode_members", "decode_members", "ShareStateImage",
           "partition_for_share"]

SHARE_STATE_TOPIC: Final = "__share_group_state"
SHARE_STATE_TOPIC_PARTITIONS: Final = 16  # Kafka's share.coordinator.state.topic.num.partitions is 50
KEY_KIND: Final = 1
MEMBERS_KEY_KIND: Final = 2  # a share group's membership (share_group.py), so a new coordinator keeps it
MAX_MEMBERS: Final = 10_000
VALUE_VERSION: Final = 1
MAX_KEY_BYTES: Final = 2048
MAX_VALUE_BYTES: Final = 4 * 1024 * 1024
MAX_BATCHES: Final = 20_000
_STATES: Final = frozenset(int(s) for s in RecordState if s is not RecordState.ACQUIRED)


@dataclass(frozen=True, slots=True, order=True)
class ShareKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, order=True)
class MembersKey:
    """The key of a share group's membership record (Kafka keeps it in `__consumer_offsets`;
    raftlog beside the group's share-partition state)."""

    group: str


StateKey = ShareKey | MembersKey


def partition_for_share(key: StateKey, partitions: int = SHARE_STATE_TOPIC_PARTITIONS) -> int:
    """Kafka's `Utils.abs(("group:topic:partition").hashCode) % partitions` (Kafka hashes the
    topic id; raftlog's share keys name topics); a membership key hashes its group id."""
    text = key.group if isinstance(key, MembersKey) else f"{key.group}:{key.topic}:{key.partition}"
    h = java_string_hash(text)
    return (0 if h == -(2**31) else abs(h)) % partitions


def _fail(where: str, why: str) -> InvalidGroupRecordError:
    return InvalidGroupRecordError(f"{SHARE_STATE_TOPIC} {where}: {why}")


def _int(where: str, v: Any, lo: int = 0, hi: int = 2**63 - 1) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _fail(where, f"expected an int in [{lo}, {hi}], got {v!r}")
    return v


def encode_key(key: StateKey) -> bytes:
    if isinstance(key, MembersKey):
        return cbor.dumps([MEMBERS_KEY_KIND, key.group])
    return cbor.dumps([KEY_KIND, key.group, key.topic, key.partition])


def decode_key(data: bytes) -> StateKey:
    """Raises InvalidGroupRecordError."""
    obj = loads_strict(data, "key", MAX_KEY_BYTES)
    if isinstance(obj, list) and len(obj) == 2 and type(obj[0]) is int and obj[0] == MEMBERS_KEY_KIND:
        if not isinstance(obj[1], str) or not 1 <= len(obj[1]) <= MAX_GROUP_ID_CHARS:
            raise _fail("key.group", "expected a group id")
        return MembersKey(obj[1])
    if not isinstance(obj, list) or len(obj) != 4 or obj[0] != KEY_KIND or type(obj[0]) is not int:
        raise _fail("key", f"not a share key: {obj!r}")
    group, topic = obj[1], obj[2]
    if not isinstance(group, str) or not 1 <= len(group) <= MAX_GROUP_ID_CHARS:
        raise _fail("key.group", "expected a group id")
    if not isinstance(topic, str) or not 1 <= len(topic) <= MAX_TOPIC_NAME_CHARS:
        raise _fail("key.topic", "expected a topic name")
    return ShareKey(group, topic, _int("key.partition", obj[3], 0, 2**31 - 1))


def encode_value(snapshot: Mapping[str, Any]) -> bytes:
    """`SharePartition.snapshot()` as a record value."""
    value = {
        "v": VALUE_VERSION, "state_epoch": snapshot["state_epoch"], "start_offset": snapshot["start_offset"],
        "state_batches": [[b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]]
                          for b in snapshot["state_batches"]],
    }
    if snapshot.get("leader_epoch") is not None:
        value["leader_epoch"] = snapshot["leader_epoch"]
    return cbor.dumps(value)


def decode_value(data: bytes | None) -> dict[str, Any] | None:
    """The snapshot a value holds (None for a tombstone), in `SharePartition.restore`'s shape.
    Raises InvalidGroupRecordError."""
    if data is None:
        return None
    obj = loads_strict(data, "value", MAX_VALUE_BYTES)
    if not isinstance(obj, dict) or set(obj) - {"leader_epoch"} != {"v", "state_epoch", "start_offset", "state_batches"}:
        raise _fail("value", "expected {v, state_epoch, start_offset, state_batches[, leader_epoch]}")
    if obj["v"] != VALUE_VERSION:
        raise _fail("value.v", f"unknown version {obj['v']!r}")
    start = _int("value.start_offset", obj["start_offset"])
    raw = obj["state_batches"]
    if not isinstance(raw, list) or len(raw) > MAX_BATCHES:
        raise _fail("value.state_batches", f"expected at most {MAX_BATCHES} batches")
    batches, expect = [], start
    for i, b in enumerate(raw):
        where = f"value.state_batches[{i}]"
        if not isinstance(b, list) or len(b) != 4:
            raise _fail(where, "expected [first, last, state, count]")
        first, last = _int(where, b[0]), _int(where, b[1])
        state, count = _int(where, b[2], 0, 4), _int(where, b[3], 0, 2**31 - 1)
        if first != expect or last < first or state not in _STATES:
            raise _fail(where, f"batch {b!r} does not follow {expect} or has a bad state")
        batches.append({"first_offset": first, "last_offset": last, "delivery_state": state,
                        "delivery_count": count})
        expect = last + 1
    out = {"state_epoch": _int("value.state_epoch", obj["state_epoch"], 0, 2**31 - 1), "start_offset": start,
           "state_batches": batches}
    if "leader_epoch" in obj:
        out["leader_epoch"] = _int("value.leader_epoch", obj["leader_epoch"], 0, 2**31 - 1)
    return out


def encode_members(snapshot: Mapping[str, Any]) -> bytes:
    """`ShareGroups.snapshot()` as a record value."""
    return cbor.dumps({"v": VALUE_VERSION, "group_epoch": snapshot["group_epoch"], "members": [
        [m["member_id"], m["member_epoch"], list(m["subscribed_topic_names"]), m.get("rack_id"),
         m.get("client_id") or "", m.get("client_host") or ""] for m in snapshot["members"]]})


def _str(where: str, v: Any, nullable: bool = False) -> Any:
    if (v is None and nullable) or (isinstance(v, str) and len(v) <= MAX_TOPIC_NAME_CHARS):
        return v
    raise _fail(where, f"expected a string, got {v!r}")


def decode_members(data: bytes | None) -> dict[str, Any] | None:
    """A membership value in `ShareGroups.restore`'s shape (None: a tombstone). Raises
    InvalidGroupRecordError."""
    if data is None:
        return None
    obj = loads_strict(data, "value", MAX_VALUE_BYTES)
    if not isinstance(obj, dict) or set(obj) != {"v", "group_epoch", "members"} or obj["v"] != VALUE_VERSION:
        raise _fail("value", "expected {v: 1, group_epoch, members}")
    raw = obj["members"]
    if not isinstance(raw, list) or len(raw) > MAX_MEMBERS:
        raise _fail("value.members", f"expected at most {MAX_MEMBERS} members")
    members = []
    for i, m in enumerate(raw):
        where = f"value.members[{i}]"
        if not isinstance(m, list) or len(m) != 6 or not isinstance(m[2], list):
            raise _fail(where, "expected [member_id, member_epoch, topics, rack_id, client_id, client_host]")
        members.append({"member_id": _str(where, m[0]), "member_epoch": _int(where, m[1], 0, 2**31 - 1),
                        "subscribed_topic_names": [_str(where, x) for x in m[2]], "rack_id": _str(where, m[3], True),
                        "client_id": _str(where, m[4]), "client_host": _str(where, m[5])})
    return {"group_epoch": _int("value.group_epoch", obj["group_epoch"], 0, 2**31 - 1), "members": members}


class ShareStateImage:
    """The latest state of each share partition of the `__share_group_state` partitions a
    share coordinator leads, replayed from their records (the last value of a key wins)."""

    def __init__(self) -> None:
        self.states: dict[ShareKey, dict[str, Any]] = {}
        self.members: dict[MembersKey, dict[str, Any]] = {}

    def replay(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Apply records in log order; returns how many. Raises InvalidGroupRecordError."""
        n = 0
        for key_bytes, value_bytes in records:
            key = decode_key(key_bytes)
            if isinstance(key, MembersKey):
                self._put(self.members, key, decode_members(value_bytes))
            else:
                self._put(self.states, key, decode_value(value_bytes))
            n += 1
        return n

    @staticmethod
    def _put(table: dict[Any, dict[str, Any]], key: Any, value: dict[str, Any] | None) -> None:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def get(self, key: StateKey) -> dict[str, Any] | None:
        return self.members.get(key) if isinstance(key, MembersKey) else self.states.get(key)

    def group_states(self, group: str) -> dict[ShareKey, dict[str, Any]]:
        return {k: v for k, v in self.states.items() if k.group == group}

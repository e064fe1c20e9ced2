"""Metadata records (after KIP-631) and the envelope the quorum carries (pure).

The metadata quorum has one command, `apply(envelope_bytes)`. One proposal = one `Envelope`
= a request id, the proposing controller's epoch, and a tuple of records that replay
atomically (all or nothing, see delta.py).

    Envelope(request_id, controller_epoch, records)
      records: RegisterBroker | FenceBroker | UnfenceBroker | Topic | RemoveTopic | Partition
             | PartitionChange | PartitionReassignment | Config | ProducerIdBlock | NoOp
             | Acl | RemoveAcl | UserScramCredential | RemoveUserScramCredential | AddPartitions
             | PartitionReassignment | BrokerState

Where things live, and why:
* `controller_epoch` (the Raft term of the controller that wrote it) is on the envelope, not
  repeated in every record: a record exists only inside an envelope, so every record carries
  its epoch through it, at no cost per record.
* `request_id` is on the envelope: dedupe is per proposal. A proposal retried after an
  unknown outcome re-sends the *same bytes*, and replay skips a request id it has already
  applied (the image keeps the last `image.MAX_RECENT_REQUESTS` of them).
* Records name topics by `topic_id`, never by name: a late record for a deleted topic can
  then never touch a re-created topic of the same name.
* FenceBroker / UnfenceBroker carry the broker's `incarnation_id` (a deviation from the
  brief's `FenceBroker(broker_id)`, as Kafka's records carry the broker epoch): a decision
  taken about one process of a broker must not fence or unfence its next incarnation.
* Acl / UserScramCredential (after KRaft's AccessControlEntryRecord and
  UserScramCredentialRecord) are kinds added later: logs written before them simply hold
  none, so they replay as before. An Acl is one binding of raftlog/base/acl.py under an
  `acl_id`; a UserScramCredential holds the salted keys of raftlog/base/sasl.py, never a
  password.
* Topic carries `partition_count`: a topic too large for one envelope is created in several
  (see controller.py); Partition records must arrive in index order, and a topic is
  `complete` once it has all of them. AddPartitions raises a complete topic's
  `partition_count`; its Partition records follow in the same envelope.

Wire form: canonical CBOR (`cbor2.dumps(obj, canonical=True)`) of a map
`{"k": kind, "v": 1, <field>: <value>, ...}`; tuples travel as arrays, maps as maps.
Decoding is strict: unknown kind or version, missing or extra field, wrong type (a bool is
not an int), out-of-range value, or trailing bytes all raise `InvalidRecordError` (never
KeyError/TypeError). Constructors check the same rules, so an invalid record cannot exist.

Sizes (measured by tests/unit/metadata/test_records.py): a 6-partition RF 3 topic envelope
is ~0.9 KiB; `encode_envelope` refuses anything over MAX_ENVELOPE_BYTES (32 KiB), well under
PySyncObj's default appendEntriesBatchSizeBytes (64 KiB) that entries must stay below after
PySyncObj's own framing (pickle, in raftlog/node/bridge.py).

Public API:
    Record (union type), RECORD_KINDS: Mapping[str, type]
    Envelope(request_id: str, controller_epoch: int, records: tuple[Record, ...])
    encode_record(record) -> bytes          decode_record(data) -> Record
    encode_envelope(envelope) -> bytes      decode_envelope(data) -> Envelope
    record_to_obj(record) -> dict           record_from_obj(obj) -> Record   (plain CBOR-able)
    MAX_ENVELOPE_BYTES, MAX_PARTITIONS, MAX_REQUEST_ID_CHARS
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Union

from raftlog.base import cbor
from raftlog.base.acl import AclBinding
from raftlog.base.errors import InvalidRequestError, UnacceptableCredentialError, UnsupportedSaslMechanismError
from raftlog.base.sasl import MAX_USERNAME_CHARS, ScramCredential
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

from metadata.errors import EnvelopeTooLargeError, InvalidRecordError

VERSION = 1
MAX_ENVELOPE_BYTES = 32 * 1024
MAX_PARTITIONS = 10_000
MAX_REPLICAS = 64
MAX_REQUEST_ID_CHARS = 64
MAX_ID_CHARS = 64
MAX_HOST_CHARS = 255
MAX_CONFIG_ENTRIES = 64
MAX_CONFIG_CHARS = 256
MAX_PRODUCER_ID_BLOCK = 1_000_000
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


# --- field checks -----------------------------------------------------------------------
# Each returns the frozen value or raises InvalidRecordError(f"{kind}.{name}: why").


def _fail(kind: str, name: str, why: str) -> InvalidRecordError:
    return InvalidRecordError(f"{kind}.{name}: {why}")


def _int(kind: str, name: str, value: Any, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if type(value) is not int:  # bool is an int subclass and is not accepted
        raise _fail(kind, name, f"expected int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(kind, name, f"{value} out of range {lo}..{hi}")
    return value


def _str(kind: str, name: str, value: Any, min_chars: int = 1, max_chars: int = MAX_ID_CHARS) -> str:
    if type(value) is not str:
        raise _fail(kind, name, f"expected str, got {type(value).__name__}")
    if not min_chars <= len(value) <= max_chars:
        raise _fail(kind, name, f"length {len(value)} out of range {min_chars}..{max_chars}")
    return value


def _bool(kind: str, name: str, value: Any) -> bool:
    if type(value) is not bool:
        raise _fail(kind, name, f"expected bool, got {type(value).__name__}")
    return value


def _replicas(kind: str, name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise _fail(kind, name, f"expected array, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_REPLICAS:
        raise _fail(kind, name, f"{len(value)} replicas, expected 1..{MAX_REPLICAS}")
    out = tuple(_int(kind, name, v, 0, 2**31 - 1) for v in value)
    if len(set(out)) != len(out):
        raise _fail(kind, name, f"duplicate broker in {list(out)}")
    return out


def _str_map(kind: str, name: str, value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise _fail(kind, name, f"expected map, got {type(value).__name__}")
    if len(value) > MAX_CONFIG_ENTRIES:
        raise _fail(kind, name, f"{len(value)} entries, at most {MAX_CONFIG_ENTRIES}")
    for k, v in value.items():
        _str(kind, name, k, 1, MAX_CONFIG_CHARS)
        _str(kind, name, v, 0, MAX_CONFIG_CHARS)
    return MappingProxyType(dict(sorted(value.items())))


def _str_tuple(kind: str, name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise _fail(kind, name, f"expected array, got {type(value).__name__}")
    if len(value) > MAX_CONFIG_ENTRIES:
        raise _fail(kind, name, f"{len(value)} entries, at most {MAX_CONFIG_ENTRIES}")
    out = tuple(_str(kind, name, v, 1, MAX_CONFIG_CHARS) for v in value)
    if len(set(out)) != len(out):
        raise _fail(kind, name, "duplicate entry")
    return tuple(sorted(out))


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclass: normalise in __post_init__


# --- records ----------------------------------------------------------------------------


class _Record:
    """Base of every record: `KIND` is its wire name."""

    KIND: ClassVar[str]


@dataclass(frozen=True)
class RegisterBroker(_Record):
    """A broker process announces itself. A new broker, or a new `incarnation_id` for a
    known broker id, replays as *fenced*; the same incarnation only updates endpoints."""

    KIND: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: str
    host: str
    port: int
    peer_host: str
    peer_port: int
    rack: str | None = None
    # The Kafka listener's advertised address; absent in records written before it existed.
    kafka_host: str | None = None
    kafka_port: int | None = None

    def __post_init__(self) -> None:
        k = self.KIND
        if (self.kafka_host is None) != (self.kafka_port is None):
            raise InvalidRecordError(f"{k}: kafka_host and kafka_port come together")
        if self.kafka_host is not None:
            _str(k, "kafka_host", self.kafka_host, 1, MAX_HOST_CHARS)
            _int(k, "kafka_port", self.kafka_port, 1, 65535)
        _int(k, "broker_id", self.broker_id, 0, 2**31 - 1)
        _str(k, "incarnation_id", self.incarnation_id)
        _str(k, "host", self.host, 1, MAX_HOST_CHARS)
        _int(k, "port", self.port, 1, 65535)
        _str(k, "peer_host", self.peer_host, 1, MAX_HOST_CHARS)
        _int(k, "peer_port", self.peer_port, 1, 65535)
        if self.rack is not None:
            _str(k, "rack", self.rack)


@dataclass(frozen=True)
class FenceBroker(_Record):
    """Fence one incarnation of a broker (session expired or controlled shutdown)."""

    KIND: ClassVar[str] = "fence_broker"
    broker_id: int
    incarnation_id: str

    def __post_init__(self) -> None:
        _int(self.KIND, "broker_id", self.broker_id, 0, 2**31 - 1)
        _str(self.KIND, "incarnation_id", self.incarnation_id)


@dataclass(frozen=True)
class UnfenceBroker(_Record):
    """Unfence one incarnation of a broker (it heartbeats)."""

    KIND: ClassVar[str] = "unfence_broker"
    broker_id: int
    incarnation_id: str

    def __post_init__(self) -> None:
        _int(self.KIND, "broker_id", self.broker_id, 0, 2**31 - 1)
        _str(self.KIND, "incarnation_id", self.incarnation_id)


@dataclass(frozen=True)
class Topic(_Record):
    """Create a topic; its `partition_count` Partition records follow (same or later envelopes)."""

    KIND: ClassVar[str] = "topic"
    name: str
    topic_id: str
    partition_count: int
    internal: bool = False
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "name", self.name, 1, MAX_TOPIC_NAME_CHARS)
        _str(k, "topic_id", self.topic_id)
        _int(k, "partition_count", self.partition_count, 1, MAX_PARTITIONS)
        _bool(k, "internal", self.internal)
        _set(self, "configs", _str_map(k, "configs", self.configs))


@dataclass(frozen=True)
class AddPartitions(_Record):
    """Grow a complete topic to `partition_count` partitions (Kafka's CreatePartitions); the
    new Partition records follow in the same envelope, so the topic is never seen incomplete."""

    KIND: ClassVar[str] = "add_partitions"
    topic_id: str
    partition_count: int

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "topic_id", self.topic_id)
        _int(k, "partition_count", self.partition_count, 2, MAX_PARTITIONS)


@dataclass(frozen=True)
class RemoveTopic(_Record):
    KIND: ClassVar[str] = "remove_topic"
    topic_id: str

    def __post_init__(self) -> None:
        _str(self.KIND, "topic_id", self.topic_id)


@dataclass(frozen=True)
class Partition(_Record):
    """One partition of a topic: its replicas (in placement order), preferred leader, and the
    leader/epoch last reported. At creation the controller may name the first leader at epoch 0
    ("named, not confirmed": its Raft group starts led by it in epoch 1, partition/raft.py
    "First term"; only when every replica's broker supports it, metadata/features.py "Broker
    capabilities"); -1/0: the group elects."""

    KIND: ClassVar[str] = "partition"
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    preferred_leader: int
    leader: int = -1
    leader_epoch: int = 0

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "topic_id", self.topic_id)
        _int(k, "partition", self.partition, 0, MAX_PARTITIONS - 1)
        _set(self, "replicas", _replicas(k, "replicas", self.replicas))
        _int(k, "preferred_leader", self.preferred_leader, 0, 2**31 - 1)
        if self.preferred_leader not in self.replicas:
            raise _fail(k, "preferred_leader", f"{self.preferred_leader} not in replicas {list(self.replicas)}")
        _int(k, "leader", self.leader, -1, 2**31 - 1)
        if self.leader != -1 and self.leader not in self.replicas:
            raise _fail(k, "leader", f"{self.leader} not in replicas {list(self.replicas)}")
        _int(k, "leader_epoch", self.leader_epoch, 0, 2**31 - 1)


@dataclass(frozen=True)
class PartitionChange(_Record):
    """A partition's leader/epoch as its Raft group reported it (and, later, reassignment via
    `replicas`). `leader` -1 means no leader known."""

    KIND: ClassVar[str] = "partition_change"
    topic_id: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "topic_id", self.topic_id)
        _int(k, "partition", self.partition, 0, MAX_PARTITIONS - 1)
        _int(k, "leader", self.leader, -1, 2**31 - 1)
        _int(k, "leader_epoch", self.leader_epoch, 0, 2**31 - 1)
        if self.replicas is not None:
            _set(self, "replicas", _replicas(k, "replicas", self.replicas))
            if self.leader != -1 and self.leader not in self.replicas:
                raise _fail(k, "leader", f"{self.leader} not in replicas {list(self.replicas)}")


@dataclass(frozen=True)
class PartitionReassignment(_Record):
    """A partition's replica set during a move (Kafka's PartitionChangeRecord fields
    replicas/addingReplicas/removingReplicas): `replicas` is the target followed by the
    replicas being removed; `adding_replicas` are in the target but were not replicas before;
    `removing_replicas` are leaving. A start, a cancel (back to the original replicas) and a
    completion (the target alone) are each one such record."""

    KIND: ClassVar[str] = "partition_reassignment"
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "topic_id", self.topic_id)
        _int(k, "partition", self.partition, 0, MAX_PARTITIONS - 1)
        _set(self, "replicas", _replicas(k, "replicas", self.replicas))
        for name in ("adding_replicas", "removing_replicas"):
            value = getattr(self, name)
            _set(self, name, _replicas(k, name, value) if value else ())
            if not set(getattr(self, name)) <= set(self.replicas):
                raise _fail(k, name, f"{list(getattr(self, name))} not all in replicas {list(self.replicas)}")
        if set(self.adding_replicas) & set(self.removing_replicas):
            raise _fail(k, "removing_replicas", "a replica cannot be added and removed at once")
        if len(self.removing_replicas) >= len(self.replicas):
            raise _fail(k, "removing_replicas", "the target would have no replica")

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True)
class Config(_Record):
    """Set and delete topic config keys (values are validated strings, see topic_config.py)."""

    KIND: ClassVar[str] = "config"
    topic_id: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "topic_id", self.topic_id)
        _set(self, "set", _str_map(k, "set", self.set))
        _set(self, "delete", _str_tuple(k, "delete", self.delete))
        both = sorted(key for key in self.delete if key in self.set)
        if both:
            raise _fail(k, "delete", f"keys both set and deleted: {both}")


@dataclass(frozen=True)
class BrokerConfig(_Record):
    """Set and delete dynamic broker configs (Kafka's names, normalized values: broker_config.py)
    of one broker (`resource` its id in decimal) or of the cluster default (`resource` "")."""

    KIND: ClassVar[str] = "broker_config"
    resource: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        k = self.KIND
        if not isinstance(self.resource, str) or not (self.resource == "" or self.resource.isdigit()) \
                or len(self.resource) > 10:
            raise _fail(k, "resource", "must be a broker id in decimal or \"\" (the cluster default)")
        _set(self, "set", _str_map(k, "set", self.set))
        _set(self, "delete", _str_tuple(k, "delete", self.delete))
        both = sorted(key for key in self.delete if key in self.set)
        if both:
            raise _fail(k, "delete", f"keys both set and deleted: {both}")


@dataclass(frozen=True)
class GroupConfig(_Record):
    """Set and delete a group's dynamic configs (Kafka's GROUP ConfigRecord; names and
    normalized values: group_config.py)."""

    KIND: ClassVar[str] = "group_config"
    group_id: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "group_id", self.group_id, 1, 255)
        _set(self, "set", _str_map(k, "set", self.set))
        _set(self, "delete", _str_tuple(k, "delete", self.delete))
        both = sorted(key for key in self.delete if key in self.set)
        if both:
            raise _fail(k, "delete", f"keys both set and deleted: {both}")


@dataclass(frozen=True)
class ProducerIdBlock(_Record):
    """Producer ids [first_producer_id, first_producer_id + size) now belong to `broker_id`."""

    KIND: ClassVar[str] = "producer_id_block"
    broker_id: int
    first_producer_id: int
    size: int

    def __post_init__(self) -> None:
        k = self.KIND
        _int(k, "broker_id", self.broker_id, 0, 2**31 - 1)
        _int(k, "first_producer_id", self.first_producer_id, 0, INT64_MAX)
        _int(k, "size", self.size, 1, MAX_PRODUCER_ID_BLOCK)
        if self.first_producer_id + self.size - 1 > INT64_MAX:
            raise _fail(k, "size", "block runs past the largest producer id")


BROKER_STATES = ("active", "draining", "decommissioned")


@dataclass(frozen=True)
class BrokerState(_Record):
    """A broker's place in a decommission (`raftlog brokers decommission`): "draining" (the
    controller moves its replicas off), "decommissioned" (empty and fenced for good), or
    "active" again (recommissioned). Brokers without one are active."""

    KIND: ClassVar[str] = "broker_state"
    broker_id: int
    state: str

    def __post_init__(self) -> None:
        _int(self.KIND, "broker_id", self.broker_id, 0, 2**31 - 1)
        if self.state not in BROKER_STATES:
            raise _fail(self.KIND, "state", f"must be one of {list(BROKER_STATES)}")


@dataclass(frozen=True)
class NoOp(_Record):
    """Nothing; a new controller writes one to stamp its epoch into the image."""

    KIND: ClassVar[str] = "no_op"


@dataclass(frozen=True)
class Acl(_Record):
    """Add one ACL (an AclBinding of raftlog/base/acl.py, its values in stored form)."""

    KIND: ClassVar[str] = "acl"
    acl_id: str
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "acl_id", self.acl_id)
        for name in ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission"):
            _str(k, name, getattr(self, name), 1, 512)
        try:
            binding = AclBinding(
                self.resource_type, self.resource_name, self.pattern_type, self.principal,
                self.host, self.operation, self.permission,
            )  # fmt: skip
        except InvalidRequestError as e:
            raise _fail(k, e.details.get("field", "?"), e.message) from None
        for name, value in binding.to_obj().items():
            _set(self, name, value)  # normalised: equal ACLs have equal records

    @classmethod
    def of(cls, acl_id: str, binding: AclBinding) -> "Acl":
        return cls(acl_id, **binding.to_obj())

    @property
    def binding(self) -> AclBinding:
        return AclBinding(
            self.resource_type, self.resource_name, self.pattern_type, self.principal,
            self.host, self.operation, self.permission,
        )  # fmt: skip


@dataclass(frozen=True)
class RemoveAcl(_Record):
    KIND: ClassVar[str] = "remove_acl"
    acl_id: str

    def __post_init__(self) -> None:
        _str(self.KIND, "acl_id", self.acl_id)


@dataclass(frozen=True)
class UserScramCredential(_Record):
    """Set (add or replace) one user's SCRAM credential for one mechanism: salt, StoredKey,
    ServerKey and iteration count; never the password."""

    KIND: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        k = self.KIND
        _str(k, "name", self.name, 1, MAX_USERNAME_CHARS)
        _str(k, "mechanism", self.mechanism)
        for name in ("salt", "stored_key", "server_key"):
            if type(getattr(self, name)) is not bytes:
                raise _fail(k, name, f"expected bytes, got {type(getattr(self, name)).__name__}")
        _int(k, "iterations", self.iterations, 1, 2**31 - 1)
        try:
            self.credential
        except (UnacceptableCredentialError, UnsupportedSaslMechanismError) as e:
            raise _fail(k, "credential", e.message) from None

    def __repr__(self) -> str:
        return f"UserScramCredential({self.name!r}, {self.mechanism!r}, iterations={self.iterations}, keys=<hidden>)"

    @classmethod
    def of(cls, name: str, credential: ScramCredential) -> "UserScramCredential":
        c = credential
        return cls(name, c.mechanism, c.salt, c.stored_key, c.server_key, c.iterations)

    @property
    def credential(self) -> ScramCredential:
        return ScramCredential(self.mechanism, self.salt, self.stored_key, self.server_key, self.iterations)


@dataclass(frozen=True)
class RemoveUserScramCredential(_Record):
    KIND: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: str

    def __post_init__(self) -> None:
        _str(self.KIND, "name", self.name, 1, MAX_USERNAME_CHARS)
        _str(self.KIND, "mechanism", self.mechanism)


# Kafka's quota names (ClientQuotaRecord keys); raftlog/node/quotas.py applies them.
CLIENT_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
DEFAULT_ENTITY = "<default>"  # Kafka's default entity (`kafka-configs --entity-default`)


@dataclass(frozen=True)
class ClientQuota(_Record):
    """Set and delete one quota entity's values (Kafka's ClientQuotaRecord). The entity is
    `user` and/or `client_id`: a name, DEFAULT_ENTITY, or None (not part of the entity).
    Values are positive decimal strings under CLIENT_QUOTA_KEYS."""

    KIND: ClassVar[str] = "client_quota"
    user: str | None = None
    client_id: str | None = None
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        k = self.KIND
        if self.user is None and self.client_id is None:
            raise _fail(k, "user", "a quota entity has a user, a client id or both")
        if self.user is not None:
            _str(k, "user", self.user, 1, MAX_USERNAME_CHARS)
        if self.client_id is not None:
            _str(k, "client_id", self.client_id, 0, MAX_CONFIG_CHARS)
        _set(self, "set", _str_map(k, "set", self.set))
        _set(self, "delete", _str_tuple(k, "delete", self.delete))
        for key in (*self.set, *self.delete):
            if key not in CLIENT_QUOTA_KEYS:
                raise _fail(k, "set", f"unknown quota {key!r:.60}; known: {', '.join(CLIENT_QUOTA_KEYS)}")
        for key, value in self.set.items():
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if not (0 < number < float("inf")):
                raise _fail(k, "set", f"{key} must be a positive number, got {value!r:.40}")
        both = sorted(key for key in self.delete if key in self.set)
        if both:
            raise _fail(k, "delete", f"keys both set and deleted: {both}")

    @property
    def entity(self) -> tuple[str | None, str | None]:
        return self.user, self.client_id


@dataclass(frozen=True)
class FeatureLevel(_Record):
    """The cluster's finalized level of one feature (Kafka's FeatureLevelRecord;
    metadata/features.py decides which levels are valid)."""

    KIND: ClassVar[str] = "feature_level"
    name: str
    level: int

    def __post_init__(self) -> None:
        _str(self.KIND, "name", self.name, 1, 64)
        _int(self.KIND, "level", self.level, 0, 32767)


Record = Union[
    RegisterBroker, FenceBroker, UnfenceBroker, Topic, RemoveTopic, Partition,
    PartitionChange, Config, ProducerIdBlock, NoOp,
    Acl, RemoveAcl, UserScramCredential, RemoveUserScramCredential, AddPartitions,
    PartitionReassignment, BrokerState, ClientQuota, BrokerConfig, FeatureLevel, GroupConfig,
]

RECORD_KINDS: Mapping[str, type] = MappingProxyType(
    {
        cls.KIND: cls
        for cls in (
            RegisterBroker, FenceBroker, UnfenceBroker, Topic, RemoveTopic, Partition,
            PartitionChange, Config, ProducerIdBlock, NoOp,
            Acl, RemoveAcl, UserScramCredential, RemoveUserScramCredential, AddPartitions,
            PartitionReassignment, BrokerState, ClientQuota, BrokerConfig, FeatureLevel, GroupConfig,
        )
    }
)


@dataclass(frozen=True)
class Envelope:
    """One proposal to the quorum: replayed atomically and at most once per `request_id`."""

    KIND: ClassVar[str] = "envelope"
    request_id: str
    controller_epoch: int
    records: tuple[Record, ...]

    def __post_init__(self) -> None:
        _str(self.KIND, "request_id", self.request_id, 1, MAX_REQUEST_ID_CHARS)
        _int(self.KIND, "controller_epoch", self.controller_epoch, 0, INT64_MAX)
        if not isinstance(self.records, (list, tuple)):
            raise _fail(self.KIND, "records", f"expected a sequence, got {type(self.records).__name__}")
        for r in self.records:
            if type(r) not in RECORD_KINDS.values():
                raise _fail(self.KIND, "records", f"not a record: {type(r).__name__}")
        _set(self, "records", tuple(self.records))


# --- plain objects ----------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def record_to_obj(record: Record) -> dict[str, Any]:
    """The plain map (str/int/bool/None/list/dict) a record encodes as."""
    obj: dict[str, Any] = {"k": record.KIND, "v": VERSION}
    for f in fields(record):  # type: ignore[arg-type]
        obj[f.name] = _plain(getattr(record, f.name))
    return obj


def record_from_obj(obj: Any) -> Record:
    """Strictly rebuild a record from its plain map. Raises InvalidRecordError."""
    if not isinstance(obj, dict):
        raise InvalidRecordError(f"record: expected map, got {type(obj).__name__}")
    kind = obj.get("k")
    if type(kind) is not str or kind not in RECORD_KINDS:
        raise InvalidRecordError(f"record: unknown kind {kind!r}")
    version = obj.get("v")
    if type(version) is not int or version != VERSION:
        raise InvalidRecordError(f"{kind}: unsupported version {version!r} (this node reads v{VERSION})")
    cls = RECORD_KINDS[kind]
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    extra = set(obj) - names - {"k", "v"}
    if extra:
        raise InvalidRecordError(f"{kind}: unknown field(s) {sorted(map(str, extra))}")
    missing = sorted(required - set(obj))
    if missing:
        raise InvalidRecordError(f"{kind}: missing field(s) {missing}")
    kwargs = {name: obj[name] for name in names if name in obj}
    try:
        return cls(**kwargs)
    except InvalidRecordError:
        raise
    except (TypeError, ValueError) as e:  # a constructor check we did not anticipate
        raise InvalidRecordError(f"{kind}: {e}") from None


def envelope_to_obj(envelope: Envelope) -> dict[str, Any]:
    return {
        "k": Envelope.KIND,
        "v": VERSION,
        "request_id": envelope.request_id,
        "controller_epoch": envelope.controller_epoch,
        "records": [record_to_obj(r) for r in envelope.records],
    }


def envelope_from_obj(obj: Any) -> Envelope:
    if not isinstance(obj, dict):
        raise InvalidRecordError(f"envelope: expected map, got {type(obj).__name__}")
    if obj.get("k") != Envelope.KIND:
        raise InvalidRecordError(f"envelope: kind {obj.get('k')!r} is not 'envelope'")
    if type(obj.get("v")) is not int or obj["v"] != VERSION:
        raise InvalidRecordError(f"envelope: unsupported version {obj.get('v')!r}")
    expected = {"k", "v", "request_id", "controller_epoch", "records"}
    if set(obj) != expected:
        extra = sorted(map(str, set(obj) - expected))
        missing = sorted(expected - set(obj))
        raise InvalidRecordError(f"envelope: unknown field(s) {extra}, missing field(s) {missing}")
    records = obj["records"]
    if not isinstance(records, list):
        raise InvalidRecordError(f"envelope.records: expected array, got {type(records).__name__}")
    return Envelope(obj["request_id"], obj["controller_epoch"], tuple(record_from_obj(r) for r in records))


# --- bytes ------------------------------------------------------------------------------


_dumps = cbor.dumps


def loads_strict(data: bytes, what: str, max_bytes: int) -> Any:
    """Decode exactly one CBOR item filling `data`. Raises InvalidRecordError."""
    return cbor.loads(data, what=what, max_bytes=max_bytes, error=InvalidRecordError)


def encode_record(record: Record) -> bytes:
    """Canonical CBOR of one record (for tests and sizes; the quorum carries envelopes)."""
    return _dumps(record_to_obj(record))


def decode_record(data: bytes) -> Record:
    """Raises InvalidRecordError."""
    return record_from_obj(loads_strict(data, "record", MAX_ENVELOPE_BYTES))


def encode_envelope(envelope: Envelope, max_bytes: int = MAX_ENVELOPE_BYTES) -> bytes:
    """Canonical CBOR of an envelope. Raises EnvelopeTooLargeError over `max_bytes`."""
    data = _dumps(envelope_to_obj(envelope))
    if len(data) > max_bytes:
        raise EnvelopeTooLargeError(
            f"envelope {envelope.request_id!r} with {len(envelope.records)} records is "
            f"{len(data)} bytes, more than {max_bytes}"
        )
    return data


def decode_envelope(data: bytes) -> Envelope:
    """Raises InvalidRecordError (including for more than MAX_ENVELOPE_BYTES)."""
    return envelope_from_obj(loads_strict(data, "envelope", MAX_ENVELOPE_BYTES))

"""The metadata image: an immutable view of the cluster as of some committed envelope (pure).

Every node keeps one, replaying committed envelopes (delta.py). Nothing else changes it.

Invariants:
* Immutable: frozen dataclasses; maps are `types.MappingProxyType` over dicts no one else
  holds; sequences are tuples. An update copies only the maps it changes (delta.py), so an
  image handed to another thread or task never changes under it.
* `topic_ids[name] == topic_id` iff `topics[topic_id].name == name` (one topic per name).
* A topic's `partitions[i].partition == i`; `len(partitions) <= partition_count`; the topic is
  `complete` when they are equal (big topics arrive over several envelopes).
* Every partition's replicas are registered brokers (brokers are never removed, only fenced).
* `acls[acl_id]` is one ACL binding, no binding twice; `scram_credentials[user][mechanism]`
  is a user's stored SCRAM credential (salted keys, never a password), no user without one.
* `broker_configs[resource]` (resource "" or a broker id) holds a broker's or the cluster's
  dynamic broker configs, never an empty map (metadata/broker_config.py); so does
  `group_configs[group_id]` a group's dynamic configs (metadata/group_config.py).
* `recent_requests` holds the outcome of the last MAX_RECENT_REQUESTS envelopes in log order:
  the dedupe window for retried proposals and how the proposer learns what became of its
  proposal ("OK" or the rejection code).
* Concurrency: an image may be read from any thread, since nothing in it ever changes (the
  metadata service replays on the trio thread; loader.py).
* `image_to_snapshot` is canonical CBOR, so equal images give equal bytes; `image_from_snapshot`
  checks all of the above and raises InvalidRecordError. The `acls` and `scram_credentials`
  sections (and `broker_configs`, `group_configs`, `features`) are written only when non-empty, so an image without them has the very bytes it
  had before they existed (and an older node still reads it).

Public API:
    MetadataImage.empty() -> MetadataImage
    image.broker(id) / unfenced_broker_ids() / fenced_broker_ids()
    image.topic(name) / topic_by_id(topic_id) / topic_names(include_internal=True)
    image.partition(name, p) -> PartitionState | None
    image.partitions_led_by(broker_id) / partitions_assigned_to(broker_id)
        -> tuple[(topic_name, partition), ...]
    image.preferred_leader_counts() -> dict[broker_id, int]
    image.request_outcome(request_id) -> RequestOutcome | None
    image.acl_bindings() -> tuple[(acl_id, AclBinding), ...]
    image.scram_credential(user, mechanism) -> ScramCredential | None;  image.scram_users()
    image_to_snapshot(image) -> bytes;  image_from_snapshot(data) -> MetadataImage
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

import cbor2

from metadata.errors import InvalidRecordError
from metadata.records import (
    VERSION,
    Acl,
    BrokerConfig,
    GroupConfig,
    FeatureLevel,
    BrokerState,
    ClientQuota,
    Partition,
    PartitionReassignment,
    RegisterBroker,
    Topic,
    UserScramCredential,
    loads_strict,
    record_from_obj,
    record_to_obj,
)
from raftlog.base.acl import AclBinding
from raftlog.base.sasl import ScramCredential
from metadata.topic_config import TopicConfig
from raftlog.base.errors import RaftlogError, error_from_wire

MAX_RECENT_REQUESTS = 1024
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
MAX_OUTCOME_MESSAGE_CHARS = 200
OK = "OK"

_EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    host: str
    port: int
    peer_host: str
    peer_port: int
    rack: str | None
    fenced: bool
    kafka_host: str | None = None  # the Kafka listener (None: registered before it existed)
    kafka_port: int | None = None

    @classmethod
    def from_record(cls, record: RegisterBroker, fenced: bool) -> "BrokerRegistration":
        return cls(
            record.broker_id, record.incarnation_id, record.host, record.port,
            record.peer_host, record.peer_port, record.rack, fenced,
            record.kafka_host, record.kafka_port,
        )

    def to_record(self) -> RegisterBroker:
        return RegisterBroker(
            self.broker_id, self.incarnation_id, self.host, self.port,
            self.peer_host, self.peer_port, self.rack, self.kafka_host, self.kafka_port,
        )


@dataclass(frozen=True)
class PartitionState:
    partition: int
    replicas: tuple[int, ...]  # during a move: the target, then the replicas being removed
    preferred_leader: int
    leader: int
    leader_epoch: int
    adding_replicas: tuple[int, ...] = ()  # a move in progress (records.PartitionReassignment)
    removing_replicas: tuple[int, ...] = ()

    @property
    def reported_leader(self) -> int:
        """The leader its Raft group reported leading (-1: none yet, or only named: a new
        partition's first leader at record epoch 0, partition/raft.py "First term", whose
        replica may not lead yet). Peer calls routed to a partition's leader use this, as
        they did before first leaders were named; clients go to the named one, which holds
        their requests until it leads (partition/service.py "Named leaders")."""
        return self.leader if self.leader_epoch > 0 else -1

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where the replicas are going (the replicas when no move is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the move (the replicas when no move is in progress)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: str
    internal: bool
    partition_count: int
    configs: Mapping[str, str]  # only keys set explicitly; defaults live in topic_config
    partitions: tuple[PartitionState, ...]

    @property
    def complete(self) -> bool:
        """All `partition_count` partitions are known (clients should see only complete topics)."""
        return len(self.partitions) == self.partition_count

    def effective_config(self) -> TopicConfig:
        return TopicConfig.from_configs(self.configs)

    def only_leaders_moved_since(self, old: TopicImage | None) -> bool:
        """True when this differs from `old` at most in its partitions' leaders and epochs
        (a replica host's reconcile has nothing to do for it)."""
        if (old is None or old.name != self.name or old.configs != self.configs
                or len(old.partitions) != len(self.partitions)):
            return False
        return all(a is b or (a.replicas == b.replicas and a.adding_replicas == b.adding_replicas
                              and a.removing_replicas == b.removing_replicas)
                   for a, b in zip(old.partitions, self.partitions))


@dataclass(frozen=True)
class RequestOutcome:
    """What replay made of one envelope: `code` "OK" (applied) or a rejection code."""

    code: str
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == OK

    def error(self) -> RaftlogError | None:
        """The exception to answer the proposer with, or None if applied."""
        return None if self.ok else error_from_wire({"code": self.code, "message": self.message})


@dataclass(frozen=True)
class MetadataImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY_MAP)
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)  # by topic_id
    topic_ids: Mapping[str, str] = field(default_factory=lambda: _EMPTY_MAP)  # name -> topic_id
    next_producer_id: int = 0
    controller_epoch: int = 0  # of the last applied envelope
    recent_requests: Mapping[str, RequestOutcome] = field(default_factory=lambda: _EMPTY_MAP)
    acls: Mapping[str, AclBinding] = field(default_factory=lambda: _EMPTY_MAP)  # by acl_id
    # user -> mechanism -> credential
    scram_credentials: Mapping[str, Mapping[str, ScramCredential]] = field(default_factory=lambda: _EMPTY_MAP)
    # broker id -> "draining" | "decommissioned" (records.BrokerState); absent: active
    broker_states: Mapping[int, str] = field(default_factory=lambda: _EMPTY_MAP)
    # (user, client id) -> quota name -> bound (records.ClientQuota; raftlog/node/quotas.py)
    client_quotas: Mapping[tuple[str | None, str | None], Mapping[str, float]] = field(
        default_factory=lambda: _EMPTY_MAP)
    # "" (cluster default) or a broker id -> Kafka broker config name -> value (broker_config.py)
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_MAP)
    # group id -> Kafka group config name -> value (group_config.py)
    group_configs: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_MAP)
    # feature name -> finalized level set by UpdateFeatures (records.FeatureLevel); a feature
    # absent is at its bootstrap level (metadata/features.py)
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)

    @classmethod
    def empty(cls) -> "MetadataImage":
        return cls()

    # --- brokers ---

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def unfenced_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, reg in self.brokers.items() if not reg.fenced))

    def broker_state(self, broker_id: int) -> str:
        """"active", "draining" or "decommissioned" (records.BrokerState)."""
        return self.broker_states.get(broker_id, "active")

    def placeable_broker_ids(self) -> tuple[int, ...]:
        """Unfenced brokers that may take new replicas: not draining nor decommissioned."""
        return tuple(b for b in self.unfenced_broker_ids() if b not in self.broker_states)

    def fenced_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, reg in self.brokers.items() if reg.fenced))

    # --- topics ---

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        return self.topics.get(topic_id)

    def topic_names(self, include_internal: bool = True) -> tuple[str, ...]:
        return tuple(
            sorted(n for n, tid in self.topic_ids.items() if include_internal or not self.topics[tid].internal)
        )

    def partition(self, name: str, partition: int) -> PartitionState | None:
        topic = self.topic(name)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def partitions_led_by(self, broker_id: int) -> tuple[tuple[str, int], ...]:
        return tuple(
            (t.name, p.partition)
            for t in sorted(self.topics.values(), key=lambda t: t.name)
            for p in t.partitions
            if p.leader == broker_id
        )

    def partitions_assigned_to(self, broker_id: int) -> tuple[tuple[str, int], ...]:
        return tuple(
            (t.name, p.partition)
            for t in sorted(self.topics.values(), key=lambda t: t.name)
            for p in t.partitions
            if broker_id in p.replicas
        )

    def leader_problem(self, p: PartitionState) -> str | None:
        """Why partition `p` has no live leader by this image, or None when its leader is a
        registered, unfenced broker: "no leader" or "leader N is fenced" / "... unknown"."""
        if p.leader < 0:
            return "no leader"
        reg = self.brokers.get(p.leader)
        if reg is None:
            return f"leader {p.leader} is not a registered broker"
        if reg.fenced:
            return f"leader {p.leader} is fenced (missed heartbeats or shut down)"
        return None

    def offline_partitions(self) -> tuple[tuple[str, int, str], ...]:
        """(topic, partition, reason) of every partition without a live leader by this image
        (`leader_problem`), sorted. Kafka: OfflinePartitionsCount counts these."""
        return tuple(
            (t.name, p.partition, why)
            for t in sorted(self.topics.values(), key=lambda t: t.name)
            for p in t.partitions
            if (why := self.leader_problem(p)) is not None
        )

    def preferred_leader_counts(self) -> dict[int, int]:
        """Partitions whose preferred leader is each registered broker (0 included)."""
        counts = {b: 0 for b in self.brokers}
        for t in self.topics.values():
            for p in t.partitions:
                counts[p.preferred_leader] = counts.get(p.preferred_leader, 0) + 1
        return counts

    def replica_counts(self) -> dict[int, int]:
        """Replicas each registered broker holds (0 included)."""
        counts = {b: 0 for b in self.brokers}
        for t in self.topics.values():
            for p in t.partitions:
                for r in p.replicas:
                    counts[r] = counts.get(r, 0) + 1
        return counts

    # --- requests ---

    def request_outcome(self, request_id: str) -> RequestOutcome | None:
        """None while the envelope is not applied (or fell out of the dedupe window)."""
        return self.recent_requests.get(request_id)

    # --- security ---

    def acl_bindings(self) -> tuple[tuple[str, AclBinding], ...]:
        """Every ACL with its id, in id order."""
        return tuple(sorted(self.acls.items()))

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram_credentials.get(user, _EMPTY_MAP).get(mechanism)

    def scram_users(self) -> tuple[str, ...]:
        return tuple(sorted(self.scram_credentials))


# --- snapshots --------------------------------------------------------------------------
# Brokers and topics are stored as the very records that create them, so the strict record
# decoder checks snapshot contents too.


def image_to_snapshot(image: MetadataImage) -> bytes:
    """Canonical CBOR of the whole image: equal images give equal bytes."""
    obj = {
        "k": "image",
        "v": VERSION,
        "brokers": [
            [record_to_obj(reg.to_record()), reg.fenced]
            for _, reg in sorted(image.brokers.items())
        ],
        "topics": [
            [
                record_to_obj(Topic(t.name, t.topic_id, t.partition_count, t.internal, t.configs)),
                [
                    record_to_obj(
                        Partition(t.topic_id, p.partition, p.replicas, p.preferred_leader, p.leader, p.leader_epoch)
                    )
                    for p in t.partitions
                ],
            ]
            for _, t in sorted(image.topics.items())
        ],
        "next_producer_id": image.next_producer_id,
        "controller_epoch": image.controller_epoch,
        "recent_requests": [[rid, o.code, o.message] for rid, o in image.recent_requests.items()],
    }
    if image.acls:
        obj["acls"] = [record_to_obj(Acl.of(acl_id, b)) for acl_id, b in sorted(image.acls.items())]
    reassignments = [
        record_to_obj(PartitionReassignment(t.topic_id, p.partition, p.replicas, p.adding_replicas,
                                            p.removing_replicas))
        for _, t in sorted(image.topics.items()) for p in t.partitions if p.reassigning
    ]
    if reassignments:  # written only when a move is in progress: older images keep their bytes
        obj["reassignments"] = reassignments
    if image.broker_states:  # written only when a broker is draining or decommissioned
        obj["broker_states"] = [record_to_obj(BrokerState(b, st)) for b, st in sorted(image.broker_states.items())]
    if image.scram_credentials:
        obj["scram_credentials"] = [
            record_to_obj(UserScramCredential.of(user, cred))
            for user, by_mechanism in sorted(image.scram_credentials.items())
            for _, cred in sorted(by_mechanism.items())
        ]
    if image.client_quotas:
        obj["client_quotas"] = [
            record_to_obj(ClientQuota(user, client_id, {k: repr(v) for k, v in values.items()}))
            for (user, client_id), values in sorted(image.client_quotas.items(), key=lambda kv: entity_order(kv[0]))
        ]
    if image.broker_configs:
        obj["broker_configs"] = [record_to_obj(BrokerConfig(resource, dict(configs)))
                                 for resource, configs in sorted(image.broker_configs.items())]
    if image.group_configs:
        obj["group_configs"] = [record_to_obj(GroupConfig(group, dict(configs)))
                                for group, configs in sorted(image.group_configs.items())]
    if image.features:
        obj["features"] = [record_to_obj(FeatureLevel(name, level)) for name, level in sorted(image.features.items())]
    return cbor2.dumps(obj, canonical=True)


def entity_order(entity: tuple[str | None, str | None]) -> tuple[bool, str, bool, str]:
    """A sort key of quota entities (None, not part of the entity, first)."""
    user, client_id = entity
    return user is not None, user or "", client_id is not None, client_id or ""


def _check(cond: bool, why: str) -> None:
    if not cond:
        raise InvalidRecordError(f"snapshot: {why}")


def image_from_snapshot(data: bytes) -> MetadataImage:
    """Rebuild an image from `image_to_snapshot` bytes. Raises InvalidRecordError."""
    obj = loads_strict(data, "snapshot", MAX_SNAPSHOT_BYTES)
    expected = {"k", "v", "brokers", "topics", "next_producer_id", "controller_epoch", "recent_requests"}
    optional = {"acls", "scram_credentials", "reassignments", "broker_states", "client_quotas", "broker_configs", "group_configs",
                "features"}
    _check(
        isinstance(obj, dict) and expected <= set(obj) <= expected | optional,
        "expected an image map with fields " + str(sorted(expected)) + " and optionally " + str(sorted(optional)),
    )
    _check(obj["k"] == "image" and type(obj["v"]) is int and obj["v"] == VERSION, "unknown kind or version")
    for key in ("next_producer_id", "controller_epoch"):
        _check(type(obj[key]) is int and 0 <= obj[key] < 2**63, f"{key} must be a non-negative int")
    for key in ("brokers", "topics", "recent_requests", *optional):
        _check(isinstance(obj.get(key, []), list), f"{key} must be an array")

    brokers: dict[int, BrokerRegistration] = {}
    for item in obj["brokers"]:
        _check(isinstance(item, list) and len(item) == 2 and type(item[1]) is bool, "broker entry")
        reg = record_from_obj(item[0])
        _check(isinstance(reg, RegisterBroker), "broker entry is not a register_broker record")
        _check(reg.broker_id not in brokers, f"duplicate broker {reg.broker_id}")
        brokers[reg.broker_id] = BrokerRegistration.from_record(reg, item[1])

    topics: dict[str, TopicImage] = {}
    topic_ids: dict[str, str] = {}
    for item in obj["topics"]:
        _check(isinstance(item, list) and len(item) == 2 and isinstance(item[1], list), "topic entry")
        topic = record_from_obj(item[0])
        _check(isinstance(topic, Topic), "topic entry is not a topic record")
        _check(topic.topic_id not in topics and topic.name not in topic_ids, f"duplicate topic {topic.name}")
        parts = []
        for i, pobj in enumerate(item[1]):
            p = record_from_obj(pobj)
            _check(isinstance(p, Partition) and p.topic_id == topic.topic_id and p.partition == i,
                   f"topic {topic.name}: partition entry {i}")
            _check(all(r in brokers for r in p.replicas), f"topic {topic.name}: unknown replica in {p.replicas}")
            parts.append(PartitionState(p.partition, p.replicas, p.preferred_leader, p.leader, p.leader_epoch))
        _check(len(parts) <= topic.partition_count, f"topic {topic.name}: more partitions than partition_count")
        topics[topic.topic_id] = TopicImage(
            topic.name, topic.topic_id, topic.internal, topic.partition_count, topic.configs, tuple(parts)
        )
        topic_ids[topic.name] = topic.topic_id

    recent: dict[str, RequestOutcome] = {}
    for item in obj["recent_requests"]:
        _check(
            isinstance(item, list) and len(item) == 3 and all(type(x) is str for x in item) and item[0] not in recent,
            "recent request entry",
        )
        recent[item[0]] = RequestOutcome(item[1], item[2])
    _check(len(recent) <= MAX_RECENT_REQUESTS, "too many recent requests")

    for item in obj.get("reassignments", []):
        record = record_from_obj(item)
        topic_image = topics.get(getattr(record, "topic_id", ""))
        _check(isinstance(record, PartitionReassignment) and topic_image is not None
               and record.partition < len(topic_image.partitions), "reassignment entry")
        parts = list(topic_image.partitions)
        cur = parts[record.partition]
        _check(cur.replicas == record.replicas and not cur.reassigning, "reassignment entry: replicas")
        parts[record.partition] = replace(cur, adding_replicas=record.adding_replicas,
                                          removing_replicas=record.removing_replicas)
        topics[record.topic_id] = replace(topic_image, partitions=tuple(parts))

    acls: dict[str, AclBinding] = {}
    for item in obj.get("acls", []):
        record = record_from_obj(item)
        _check(isinstance(record, Acl) and record.acl_id not in acls, "acl entry")
        acls[record.acl_id] = record.binding
    _check(len(set(acls.values())) == len(acls), "the same ACL twice")
    scram: dict[str, dict[str, ScramCredential]] = {}
    for item in obj.get("scram_credentials", []):
        record = record_from_obj(item)
        _check(isinstance(record, UserScramCredential), "scram credential entry")
        by_mechanism = scram.setdefault(record.name, {})
        _check(record.mechanism not in by_mechanism, f"user {record.name}: credential twice")
        by_mechanism[record.mechanism] = record.credential
    broker_configs: dict[str, Mapping[str, str]] = {}
    for item in obj.get("broker_configs", []):
        record = record_from_obj(item)
        _check(isinstance(record, BrokerConfig) and record.resource not in broker_configs and bool(record.set),
               "broker config entry")
        broker_configs[record.resource] = MappingProxyType(dict(sorted(record.set.items())))
    group_configs: dict[str, Mapping[str, str]] = {}
    for item in obj.get("group_configs", []):
        record = record_from_obj(item)
        _check(isinstance(record, GroupConfig) and record.group_id not in group_configs and bool(record.set),
               "group config entry")
        group_configs[record.group_id] = MappingProxyType(dict(sorted(record.set.items())))

    features: dict[str, int] = {}
    for item in obj.get("features", []):
        record = record_from_obj(item)
        _check(isinstance(record, FeatureLevel) and record.name not in features, "feature level entry")
        features[record.name] = record.level
    states: dict[int, str] = {}
    for item in obj.get("broker_states", []):
        record = record_from_obj(item)
        _check(isinstance(record, BrokerState) and record.broker_id in brokers
               and record.broker_id not in states and record.state != "active", "broker state entry")
        states[record.broker_id] = record.state
    quotas: dict[tuple[str | None, str | None], Mapping[str, float]] = {}
    for item in obj.get("client_quotas", []):
        record = record_from_obj(item)
        _check(isinstance(record, ClientQuota) and record.entity not in quotas and bool(record.set)
               and not record.delete, "client quota entry")
        quotas[record.entity] = MappingProxyType({k: float(v) for k, v in record.set.items()})

    return MetadataImage(
        broker_states=MappingProxyType(dict(sorted(states.items()))),
        brokers=MappingProxyType(brokers),
        topics=MappingProxyType(dict(sorted(topics.items()))),
        topic_ids=MappingProxyType(dict(sorted(topic_ids.items()))),
        next_producer_id=obj["next_producer_id"],
        controller_epoch=obj["controller_epoch"],
        recent_requests=MappingProxyType(recent),
        acls=MappingProxyType(dict(sorted(acls.items()))),
        scram_credentials=MappingProxyType(
            {user: MappingProxyType(dict(sorted(m.items()))) for user, m in sorted(scram.items())}
        ),
        client_quotas=MappingProxyType(dict(sorted(quotas.items(), key=lambda kv: entity_order(kv[0])))),
        broker_configs=MappingProxyType(dict(sorted(broker_configs.items()))),
        group_configs=MappingProxyType(dict(sorted(group_configs.items()))),
        features=MappingProxyType(dict(sorted(features.items()))),
    )

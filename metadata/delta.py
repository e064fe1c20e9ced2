"""Replaying committed metadata records into images (pure, deterministic).

    replay(image, record) -> image                 one record; a rejected record is ignored
    replay_envelope(image, envelope_bytes) -> image   what the quorum's apply(bytes) calls
    replay_decoded(image, envelope) -> image       the same for an already-decoded Envelope
    MetadataDelta(image).replay(record) ... .apply() -> image   batch builder (copy-on-write)
    image_to_snapshot / image_from_snapshot        re-exported from image.py

Determinism: the result depends only on the image and the bytes, never on time, randomness,
dict iteration order of inputs, or which node replays. Replaying a committed log from
`MetadataImage.empty()` gives equal images (and equal snapshot bytes) however the log is
chunked between snapshots.

Envelope rules, in order:
1. A `request_id` already in `image.recent_requests` → the image is returned unchanged (a
   retried proposal applies at most once within the MAX_RECENT_REQUESTS window).
2. `controller_epoch` lower than `image.controller_epoch` → rejected STALE_CONTROLLER_EPOCH
   (a deposed controller decided on an old image). Otherwise the image's controller_epoch
   becomes the envelope's, even if rule 3 rejects the records.
3. Records apply in order to one working copy; if any record is rejected, none apply (all or
   nothing) and the outcome is the first rejection's code and message.
4. The outcome ("OK" or the code) is recorded under the request id; the oldest outcome is
   dropped beyond MAX_RECENT_REQUESTS.

Record rules (rejection code in brackets; "no-op" means accepted and nothing changes):
* RegisterBroker: new id, or new incarnation of a known id → registered *fenced*; same
  incarnation → endpoints/rack updated, fenced flag kept.
* FenceBroker / UnfenceBroker: unknown broker [BROKER_ID_NOT_REGISTERED]; other incarnation
  than registered [STALE_BROKER_EPOCH]; already in that state → no-op.
* BrokerState: unknown broker [BROKER_ID_NOT_REGISTERED]; else the broker's decommission
  state ("active" clears it).
* Topic: name taken [TOPIC_ALREADY_EXISTS]; topic_id taken [INVALID_REQUEST].
* RemoveTopic: unknown topic_id [UNKNOWN_TOPIC_OR_PARTITION].
* AddPartitions: unknown topic_id [UNKNOWN_TOPIC_OR_PARTITION]; topic not complete
  [INVALID_REQUEST]; partition_count not above the topic's [INVALID_PARTITIONS]; else the
  topic's partition_count grows (its new Partition records follow, as after Topic).
* Partition: unknown topic_id [UNKNOWN_TOPIC_OR_PARTITION]; index other than the next one
  (partitions arrive 0, 1, 2, ... up to partition_count - 1) [INVALID_REQUEST]; a replica
  that is not a registered broker [BROKER_ID_NOT_REGISTERED].
* PartitionChange: unknown topic or partition [UNKNOWN_TOPIC_OR_PARTITION]; unregistered
  replica [BROKER_ID_NOT_REGISTERED]; leader not in the replicas [INVALID_REQUEST];
  leader_epoch lower than the image's [FENCED_LEADER_EPOCH]; same epoch: same leader → no-op
  (or replicas update), image leader -1 → leader learnt, reported leader -1 →
  [FENCED_LEADER_EPOCH] (older news), another leader → [INVALID_REQUEST] (two leaders in one
  epoch cannot happen in Raft). Higher epoch → applied. New replicas keep the preferred leader
  if it is still a replica, else their first replica becomes preferred.
* PartitionReassignment: unknown topic or partition [UNKNOWN_TOPIC_OR_PARTITION]; a replica
  that is not a registered broker [BROKER_ID_NOT_REGISTERED]; a start (adding or removing
  replicas) while a move is in progress, or `replicas` not the current target plus original
  [REASSIGNMENT_IN_PROGRESS / INVALID_REPLICA_ASSIGNMENT]; an end (none adding or removing)
  with no move in progress [NO_REASSIGNMENT_IN_PROGRESS], or to other than its target
  (completed) or original replicas (cancelled) [INVALID_REPLICA_ASSIGNMENT]. A leader no
  longer among the replicas becomes -1 (the group reports its leader again); the preferred
  leader follows the rule of PartitionChange.
* Config: unknown topic_id [UNKNOWN_TOPIC_OR_PARTITION]; else keys deleted, then set. Values
  are stored as given (the controller validated them); replay does not re-judge them, so a
  config schema change cannot split the images of nodes on different versions.
* BrokerConfig: keys deleted, then set, in `broker_configs[resource]` (an entry left empty
  goes); values as given, as for Config. A broker id need not be registered (Kafka allows
  configs of a broker that has not joined yet).
* GroupConfig: the same in `group_configs[group_id]` (a group need not exist: Kafka's group
  configs are set before or after the group has members, and outlive it).
* ProducerIdBlock: unknown broker [BROKER_ID_NOT_REGISTERED]; first_producer_id below
  `next_producer_id` [INVALID_REQUEST] (another block got there first); else next_producer_id
  = first + size.
* NoOp: no-op.
* Acl: acl_id taken [INVALID_REQUEST]; the same binding already present under another id
  [DUPLICATE_RESOURCE] (the controller treats that as done: creating an ACL is idempotent).
* RemoveAcl: unknown acl_id [RESOURCE_NOT_FOUND].
* UserScramCredential: sets (adds or replaces) the user's credential for that mechanism.
* RemoveUserScramCredential: no such credential [RESOURCE_NOT_FOUND]; a user whose last
  credential goes is no longer in `scram_credentials`.
* ClientQuota: the entity's keys deleted, then set; an entity left with none is no longer in
  `client_quotas` (never rejected: deleting what is not there is a no-op, as in Kafka).

Undecodable envelope bytes raise InvalidRecordError: every node would fail on the same entry,
and skipping silently would let a newer-version node and an older one diverge. The service
must treat it as fatal for the node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from metadata.image import (
    MAX_OUTCOME_MESSAGE_CHARS,
    MAX_RECENT_REQUESTS,
    OK,
    BrokerRegistration,
    MetadataImage,
    PartitionState,
    RequestOutcome,
    TopicImage,
    entity_order,
    image_from_snapshot,
    image_to_snapshot,
)
from metadata.records import (
    ClientQuota,
    Acl,
    AddPartitions,
    BrokerConfig,
    GroupConfig,
    FeatureLevel,
    BrokerState,
    Config,
    Envelope,
    FenceBroker,
    NoOp,
    Partition,
    PartitionChange,
    PartitionReassignment,
    ProducerIdBlock,
    Record,
    RegisterBroker,
    RemoveAcl,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnfenceBroker,
    UserScramCredential,
    decode_envelope,
)
from raftlog.base.acl import AclBinding
from raftlog.base.sasl import ScramCredential
from raftlog.base.errors import (
    BrokerIdNotRegisteredError,
    DuplicateResourceError,
    FencedLeaderEpochError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    ReassignmentInProgressError,
    RejectedError,
    ResourceNotFoundError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "MetadataDelta",
    "replay",
    "replay_envelope",
    "replay_decoded",
    "image_to_snapshot",
    "image_from_snapshot",
]


class MetadataDelta:
    """Changes on top of one image. Maps are copied on first write only, and a topic's
    partition tuple once per delta however many of its records replay, so a 10,000-partition
    creation is linear. `replay` raises a RejectedError (registry) and may leave the delta half-changed: throw
    such a delta away (replay_decoded does)."""

    def __init__(self, image: MetadataImage):
        self._image = image
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[str, TopicImage] | None = None
        self._topic_ids: dict[str, str] | None = None
        self._parts: dict[str, list[PartitionState]] = {}  # touched topics, by topic_id
        self._next_producer_id = image.next_producer_id
        self._acls: dict[str, AclBinding] | None = None
        self._scram: dict[str, Mapping[str, ScramCredential]] | None = None
        self._states: dict[int, str] | None = None
        self._quotas: dict[tuple[str | None, str | None], Mapping[str, float]] | None = None
        self._broker_configs: dict[str, Mapping[str, str]] | None = None
        self._group_configs: dict[str, Mapping[str, str]] | None = None
        self._features: dict[str, int] | None = None

    # --- copy-on-write accessors ---

    def _brokers_w(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self._image.brokers)
        return self._brokers

    def _broker(self, broker_id: int) -> BrokerRegistration | None:
        return (self._brokers if self._brokers is not None else self._image.brokers).get(broker_id)

    def _topics_w(self) -> dict[str, TopicImage]:
        if self._topics is None:
            self._topics = dict(self._image.topics)
        return self._topics

    def _topic_ids_w(self) -> dict[str, str]:
        if self._topic_ids is None:
            self._topic_ids = dict(self._image.topic_ids)
        return self._topic_ids

    def _topic(self, topic_id: str) -> TopicImage | None:
        return (self._topics if self._topics is not None else self._image.topics).get(topic_id)

    def _topic_id_of(self, name: str) -> str | None:
        return (self._topic_ids if self._topic_ids is not None else self._image.topic_ids).get(name)

    def _parts_w(self, topic: TopicImage) -> list[PartitionState]:
        parts = self._parts.get(topic.topic_id)
        if parts is None:
            parts = self._parts[topic.topic_id] = list(topic.partitions)
        return parts

    def _parts_r(self, topic: TopicImage) -> list[PartitionState] | tuple[PartitionState, ...]:
        return self._parts.get(topic.topic_id, topic.partitions)

    def _require_topic(self, topic_id: str) -> TopicImage:
        topic = self._topic(topic_id)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"no topic with id {topic_id}")
        return topic

    def _require_brokers(self, replicas: tuple[int, ...]) -> None:
        unknown = [r for r in replicas if self._broker(r) is None]
        if unknown:
            raise BrokerIdNotRegisteredError(f"replicas {unknown} are not registered brokers")

    # --- replay ---

    def replay(self, record: Record) -> None:
        """Apply one record to the delta. Raises RejectedError (see module docstring)."""
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise TypeError(f"not a metadata record: {type(record).__name__}")
        handler(self, record)

    def _register_broker(self, r: RegisterBroker) -> None:
        old = self._broker(r.broker_id)
        fenced = True if old is None or old.incarnation_id != r.incarnation_id else old.fenced
        self._brokers_w()[r.broker_id] = BrokerRegistration.from_record(r, fenced)

    def _set_fenced(self, broker_id: int, incarnation_id: str, fenced: bool) -> None:
        old = self._broker(broker_id)
        if old is None:
            raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
        if old.incarnation_id != incarnation_id:
            raise StaleBrokerEpochError(f"broker {broker_id} incarnation {incarnation_id} was replaced by {old.incarnation_id}",
            )
        if old.fenced != fenced:
            self._brokers_w()[broker_id] = dataclasses.replace(old, fenced=fenced)

    def _fence_broker(self, r: FenceBroker) -> None:
        self._set_fenced(r.broker_id, r.incarnation_id, True)

    def _unfence_broker(self, r: UnfenceBroker) -> None:
        self._set_fenced(r.broker_id, r.incarnation_id, False)

    def _broker_state(self, r: BrokerState) -> None:
        if self._broker(r.broker_id) is None:
            raise BrokerIdNotRegisteredError(f"broker {r.broker_id} is not registered")
        if self._states is None:
            self._states = dict(self._image.broker_states)
        if r.state == "active":
            self._states.pop(r.broker_id, None)
        else:
            self._states[r.broker_id] = r.state

    def _topic_record(self, r: Topic) -> None:
        if self._topic_id_of(r.name) is not None:
            raise TopicAlreadyExistsError(f"topic {r.name!r} already exists")
        if self._topic(r.topic_id) is not None:
            raise InvalidRequestError(f"topic id {r.topic_id} is already used")
        self._topics_w()[r.topic_id] = TopicImage(r.name, r.topic_id, r.internal, r.partition_count, r.configs, ())
        self._topic_ids_w()[r.name] = r.topic_id

    def _remove_topic(self, r: RemoveTopic) -> None:
        topic = self._require_topic(r.topic_id)
        del self._topics_w()[r.topic_id]
        del self._topic_ids_w()[topic.name]
        self._parts.pop(r.topic_id, None)

    def _add_partitions(self, r: AddPartitions) -> None:
        topic = self._require_topic(r.topic_id)
        if len(self._parts_r(topic)) != topic.partition_count:
            raise InvalidRequestError(f"topic {topic.name!r} is still being created")
        if r.partition_count <= topic.partition_count:
            raise InvalidPartitionsError(
                f"topic {topic.name!r} has {topic.partition_count} partitions, "
                f"not fewer than {r.partition_count}"
            )
        self._topics_w()[r.topic_id] = dataclasses.replace(topic, partition_count=r.partition_count)

    def _partition(self, r: Partition) -> None:
        topic = self._require_topic(r.topic_id)
        parts = self._parts_r(topic)
        if r.partition != len(parts) or r.partition >= topic.partition_count:
            raise InvalidRequestError(f"topic {topic.name!r} expects partition {len(parts)} of {topic.partition_count}, got {r.partition}",
            )
        self._require_brokers(r.replicas)
        self._parts_w(topic).append(PartitionState(r.partition, r.replicas, r.preferred_leader, r.leader, r.leader_epoch))

    def _partition_change(self, r: PartitionChange) -> None:
        topic = self._require_topic(r.topic_id)
        parts = self._parts_r(topic)
        if r.partition >= len(parts):
            raise UnknownTopicOrPartitionError(f"topic {topic.name!r} has no partition {r.partition}")
        cur = parts[r.partition]
        replicas = cur.replicas if r.replicas is None else r.replicas
        self._require_brokers(replicas)
        if r.leader != -1 and r.leader not in replicas:
            raise InvalidRequestError(f"leader {r.leader} is not a replica of {topic.name}-{r.partition}")
        where = f"{topic.name}-{r.partition}"
        if r.leader_epoch < cur.leader_epoch:
            raise FencedLeaderEpochError(f"{where}: epoch {r.leader_epoch} < current {cur.leader_epoch}")
        if r.leader_epoch == cur.leader_epoch and r.leader != cur.leader:
            if r.leader == -1:
                raise FencedLeaderEpochError(f"{where}: epoch {r.leader_epoch} already has leader {cur.leader}")
            if cur.leader != -1:
                raise InvalidRequestError(f"{where}: epoch {r.leader_epoch} led by {cur.leader}, reported {r.leader}"
                )
        preferred = cur.preferred_leader if cur.preferred_leader in replicas else replicas[0]
        new = PartitionState(cur.partition, replicas, preferred, r.leader, r.leader_epoch,
                             *((cur.adding_replicas, cur.removing_replicas) if r.replicas is None else ()))
        if new != cur:
            self._parts_w(topic)[r.partition] = new

    def _partition_reassignment(self, r: PartitionReassignment) -> None:
        topic = self._require_topic(r.topic_id)
        parts = self._parts_r(topic)
        if r.partition >= len(parts):
            raise UnknownTopicOrPartitionError(f"topic {topic.name!r} has no partition {r.partition}")
        cur = parts[r.partition]
        where = f"{topic.name}-{r.partition}"
        self._require_brokers(r.replicas)
        starting = bool(r.adding_replicas or r.removing_replicas)
        if starting:
            if cur.reassigning:
                raise ReassignmentInProgressError(f"{where}: a reassignment is in progress")
            if set(r.original_replicas) != set(cur.replicas):
                raise InvalidReplicaAssignmentError(
                    f"{where}: replicas {list(r.replicas)} do not extend {list(cur.replicas)}")
        else:
            if not cur.reassigning:
                raise NoReassignmentInProgressError(f"{where}: no reassignment in progress")
            if set(r.replicas) not in (set(cur.target_replicas), set(cur.original_replicas)):
                raise InvalidReplicaAssignmentError(
                    f"{where}: {list(r.replicas)} is neither the target nor the original replicas")
        leader = cur.leader if cur.leader in r.replicas else -1
        preferred = cur.preferred_leader if cur.preferred_leader in r.replicas else r.replicas[0]
        self._parts_w(topic)[r.partition] = PartitionState(
            cur.partition, r.replicas, preferred, leader, cur.leader_epoch,
            r.adding_replicas, r.removing_replicas)

    def _config(self, r: Config) -> None:
        topic = self._require_topic(r.topic_id)
        configs = {k: v for k, v in topic.configs.items() if k not in r.delete}
        configs.update(r.set)
        configs = dict(sorted(configs.items()))
        if configs != dict(topic.configs):
            self._topics_w()[r.topic_id] = TopicImage(
                topic.name, topic.topic_id, topic.internal, topic.partition_count,
                MappingProxyType(configs), topic.partitions,
            )

    def _broker_config(self, r: BrokerConfig) -> None:
        if self._broker_configs is None:
            self._broker_configs = dict(self._image.broker_configs)
        _set_and_delete(self._broker_configs, r.resource, r.set, r.delete)

    def _group_config(self, r: GroupConfig) -> None:
        if self._group_configs is None:
            self._group_configs = dict(self._image.group_configs)
        _set_and_delete(self._group_configs, r.group_id, r.set, r.delete)

    def _feature_level(self, r: FeatureLevel) -> None:
        if self._features is None:
            self._features = dict(self._image.features)
        self._features[r.name] = r.level

    def _producer_id_block(self, r: ProducerIdBlock) -> None:
        if self._broker(r.broker_id) is None:
            raise BrokerIdNotRegisteredError(f"broker {r.broker_id} is not registered")
        if r.first_producer_id < self._next_producer_id:
            raise InvalidRequestError(f"producer id block at {r.first_producer_id} is below next producer id {self._next_producer_id}",
            )
        self._next_producer_id = r.first_producer_id + r.size

    def _no_op(self, r: NoOp) -> None:
        pass

    def _acls_r(self) -> Mapping[str, AclBinding]:
        return self._acls if self._acls is not None else self._image.acls

    def _acl(self, r: Acl) -> None:
        acls = self._acls_r()
        if r.acl_id in acls:
            raise InvalidRequestError(f"acl id {r.acl_id} is already used")
        binding = r.binding
        if binding in acls.values():
            raise DuplicateResourceError(f"the ACL {binding} exists already")
        if self._acls is None:
            self._acls = dict(self._image.acls)
        self._acls[r.acl_id] = binding

    def _remove_acl(self, r: RemoveAcl) -> None:
        if r.acl_id not in self._acls_r():
            raise ResourceNotFoundError(f"no ACL with id {r.acl_id}")
        if self._acls is None:
            self._acls = dict(self._image.acls)
        del self._acls[r.acl_id]

    def _scram_w(self) -> dict[str, Mapping[str, ScramCredential]]:
        if self._scram is None:
            self._scram = dict(self._image.scram_credentials)
        return self._scram

    def _user_scram_credential(self, r: UserScramCredential) -> None:
        scram = self._scram_w()
        by_mechanism = dict(scram.get(r.name, {}))
        by_mechanism[r.mechanism] = r.credential
        scram[r.name] = MappingProxyType(dict(sorted(by_mechanism.items())))

    def _remove_user_scram_credential(self, r: RemoveUserScramCredential) -> None:
        current = (self._scram if self._scram is not None else self._image.scram_credentials).get(r.name, {})
        if r.mechanism not in current:
            raise ResourceNotFoundError(f"user {r.name!r} has no {r.mechanism} credential")
        by_mechanism = {m: c for m, c in current.items() if m != r.mechanism}
        scram = self._scram_w()
        if by_mechanism:
            scram[r.name] = MappingProxyType(by_mechanism)
        else:
            del scram[r.name]

    def _client_quota(self, r: ClientQuota) -> None:
        if self._quotas is None:
            self._quotas = dict(self._image.client_quotas)
        values = {k: v for k, v in self._quotas.get(r.entity, {}).items() if k not in r.delete}
        values.update((k, float(v)) for k, v in r.set.items())
        if values:
            self._quotas[r.entity] = MappingProxyType(dict(sorted(values.items())))
        else:
            self._quotas.pop(r.entity, None)

    # --- result ---

    def apply(self) -> MetadataImage:
        """The new image. Unchanged maps are shared with the old image, not copied."""
        base = self._image
        topics = self._topics
        if self._parts:
            topics = self._topics_w()
            for topic_id, parts in self._parts.items():
                t = topics.get(topic_id)
                if t is not None:
                    topics[topic_id] = TopicImage(
                        t.name, t.topic_id, t.internal, t.partition_count, t.configs, tuple(parts)
                    )
        return MetadataImage(
            broker_states=(base.broker_states if self._states is None
                           else MappingProxyType(dict(sorted(self._states.items())))),
            brokers=base.brokers if self._brokers is None else MappingProxyType(self._brokers),
            topics=base.topics if topics is None else MappingProxyType(topics),
            topic_ids=base.topic_ids if self._topic_ids is None else MappingProxyType(self._topic_ids),
            next_producer_id=self._next_producer_id,
            controller_epoch=base.controller_epoch,
            recent_requests=base.recent_requests,
            acls=base.acls if self._acls is None else MappingProxyType(dict(sorted(self._acls.items()))),
            scram_credentials=(
                base.scram_credentials if self._scram is None
                else MappingProxyType(dict(sorted(self._scram.items())))
            ),
            client_quotas=(
                base.client_quotas if self._quotas is None
                else MappingProxyType(dict(sorted(self._quotas.items(), key=lambda kv: entity_order(kv[0]))))
            ),
            broker_configs=(
                base.broker_configs if self._broker_configs is None
                else MappingProxyType(dict(sorted(self._broker_configs.items())))
            ),
            group_configs=(
                base.group_configs if self._group_configs is None
                else MappingProxyType(dict(sorted(self._group_configs.items())))
            ),
            features=base.features if self._features is None else MappingProxyType(dict(sorted(self._features.items()))),
        )


def _set_and_delete(by_resource: dict[str, Mapping[str, str]], resource: str, set_: Mapping[str, str],
                    delete: tuple[str, ...]) -> None:
    """A resource's configs with `delete` removed and `set_` set; an entry left empty goes."""
    configs = {k: v for k, v in by_resource.get(resource, {}).items() if k not in delete}
    configs.update(set_)
    if configs:
        by_resource[resource] = MappingProxyType(dict(sorted(configs.items())))
    else:
        by_resource.pop(resource, None)


_HANDLERS = {
    RegisterBroker: MetadataDelta._register_broker,
    FenceBroker: MetadataDelta._fence_broker,
    UnfenceBroker: MetadataDelta._unfence_broker,
    BrokerState: MetadataDelta._broker_state,
    Topic: MetadataDelta._topic_record,
    AddPartitions: MetadataDelta._add_partitions,
    RemoveTopic: MetadataDelta._remove_topic,
    Partition: MetadataDelta._partition,
    PartitionChange: MetadataDelta._partition_change,
    PartitionReassignment: MetadataDelta._partition_reassignment,
    Config: MetadataDelta._config,
    BrokerConfig: MetadataDelta._broker_config,
    GroupConfig: MetadataDelta._group_config,
    FeatureLevel: MetadataDelta._feature_level,
    ProducerIdBlock: MetadataDelta._producer_id_block,
    NoOp: MetadataDelta._no_op,
    Acl: MetadataDelta._acl,
    RemoveAcl: MetadataDelta._remove_acl,
    UserScramCredential: MetadataDelta._user_scram_credential,
    RemoveUserScramCredential: MetadataDelta._remove_user_scram_credential,
    ClientQuota: MetadataDelta._client_quota,
}


def replay(image: MetadataImage, record: Record) -> MetadataImage:
    """Apply one record outside any envelope (no dedupe, no epoch check). A record the image
    rejects is ignored: the same image object is returned."""
    delta = MetadataDelta(image)
    try:
        delta.replay(record)
    except RejectedError:
        return image
    return delta.apply()


def _with_outcome(image: MetadataImage, request_id: str, epoch: int, outcome: RequestOutcome) -> MetadataImage:
    recent = dict(image.recent_requests)
    recent[request_id] = outcome
    while len(recent) > MAX_RECENT_REQUESTS:
        del recent[next(iter(recent))]  # oldest first: dicts keep insertion (= log) order
    return dataclasses.replace(image, controller_epoch=epoch, recent_requests=MappingProxyType(recent))


def replay_decoded(image: MetadataImage, envelope: Envelope) -> MetadataImage:
    """Apply one envelope (rules 1-4 of the module docstring)."""
    if envelope.request_id in image.recent_requests:
        return image
    if envelope.controller_epoch < image.controller_epoch:
        outcome = RequestOutcome(
            "STALE_CONTROLLER_EPOCH",
            f"envelope of controller epoch {envelope.controller_epoch} after epoch {image.controller_epoch}",
        )
        return _with_outcome(image, envelope.request_id, image.controller_epoch, outcome)
    delta = MetadataDelta(image)
    try:
        for record in envelope.records:
            delta.replay(record)
    except RejectedError as e:
        outcome = RequestOutcome(e.code, e.message[:MAX_OUTCOME_MESSAGE_CHARS])
        return _with_outcome(image, envelope.request_id, envelope.controller_epoch, outcome)
    return _with_outcome(delta.apply(), envelope.request_id, envelope.controller_epoch, RequestOutcome(OK))


def replay_envelope(image: MetadataImage, envelope_bytes: bytes) -> MetadataImage:
    """Decode and apply one committed envelope. Raises InvalidRecordError if the bytes do not
    decode (fatal for the node: see module docstring)."""
    return replay_decoded(image, decode_envelope(envelope_bytes))

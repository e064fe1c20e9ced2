"""The active controller's decisions (pure: `now_ms`, `random.Random` and a random-bytes
source for ids are injected).

Kafka-coordinator style: every decision returns a `ControllerResult(envelopes, response)`
and never changes the image. The service proposes each envelope through the quorum, in
order, re-sending the *same bytes* on an unknown outcome, and answers the caller once every
envelope's outcome is in the image (`image.request_outcome(env.request_id)`): all "OK" →
`response`; otherwise `outcome.error()` (e.g. TOPIC_ALREADY_EXISTS if another create won the
race). A result with no envelopes needs no proposal: answer at once.

Life cycle (what active_controller.py does):
    on becoming Raft leader (term T):  c = Controller(image, T, now_ms, random.Random(seed))
                                        propose(c.noop())   # stamps epoch T into the image
    after each committed envelope:      c.update_image(new_image, now_ms)
                                        propose(c.ensure_internal_topics(now_ms))
    every heartbeat_ms or so:           propose(c.tick(now_ms))
                                        moves = c.preferred_leader_moves(now_ms)  # send transfers
    broker RPCs:                        c.register_broker(...), c.heartbeat(...), ...
    on losing leadership:               drop c (its in-memory state is worth nothing)
A Controller that sees a newer controller epoch in `update_image` raises NotControllerError
from every decision.

In memory only (never records; rebuilt on activation): broker heartbeat times (every
registered broker gets a fresh session on activation, as in KRaft), since-when each broker is
unfenced, "pending" marks for proposals in flight (so a tick does not propose the same fence
twice and two racing creates of one name do not both pass; a mark clears when its envelope's
outcome appears in the image, or after `proposal_timeout_ms`), the producer-id reservation,
and when each leader move was last suggested.

Placement (create_topic): the unfenced brokers in id order form a ring. Each partition's
preferred leader (its first replica) is the broker with the fewest preferred leaderships so
far — counting the whole image, so leaders spread across topics too — ties going to the next
broker round the ring after the previous partition's leader; the other replicas are the next
brokers round the ring. 6 partitions × RF 3 on 3 brokers: 2 preferred leaderships each.
Initial `leader`: the preferred one at epoch 0 ("named, not confirmed"; partition/raft.py "First
term") when every replica's broker said it supports that (metadata/features.py "Broker
capabilities"), else -1 (the partition's Raft group elects); the controller records reports.

Big topics: a creation whose records exceed `max_envelope_bytes` is split over several
envelopes (Topic + first partitions, then more partitions). Clients should see only
`complete` topics (`list_topics`/`describe_topic` hide incomplete ones). If a later envelope
is lost, `tick` re-places the missing partitions.

Public API (now_ms is keyword-only except in tick/preferred_leader_moves):
    Controller(image, controller_epoch, now_ms, rng, *, session_timeout_ms=9000, ...)
    .image, .controller_epoch, .update_image(image, now_ms)
    .noop() -> ControllerResult[None]
    .register_broker(broker_id, incarnation_id, host, port, peer_host, peer_port, rack=None, *, now_ms)
        -> ControllerResult[RegisterBrokerResponse]
    .heartbeat(broker_id, incarnation_id, *, now_ms) -> ControllerResult[HeartbeatResponse]
    .controlled_shutdown(broker_id, incarnation_id, *, now_ms) -> ControllerResult[None]
    .tick(now_ms) -> ControllerResult[None]
    .create_topic(name, partitions, replication_factor, configs=None, internal=False, *, now_ms)
        -> ControllerResult[CreateTopicResponse]
    .delete_topic(name, *, now_ms) -> ControllerResult[str]   (the topic_id)
    .create_partitions(name, partition_count, *, validate_only=False, now_ms)
        -> ControllerResult[CreateTopicResponse]   (the new partitions)
    .alter_configs(name, set=None, delete=(), *, now_ms) -> ControllerResult[dict[str, str]]
    .describe_topic(name) -> TopicImage;  .list_topics(include_internal=False) -> tuple[str, ...]
    .describe_configs(name) -> tuple[ConfigEntry, ...]
    .partition_leader_report(topic, partition, leader, leader_epoch, *, now_ms, topic_id=None)
        -> ControllerResult[bool]   (True if a PartitionChange is proposed)
    .partition_leader_reports(reports, *, now_ms) -> ControllerResult[list[dict]]
        (the same for many LeaderReports at once, in one result; per report {"changed"} or {"error"})
    .preferred_leader_moves(now_ms, max_moves=None) -> tuple[LeaderMove, ...]
    .allocate_producer_ids(broker_id, *, now_ms) -> ControllerResult[ProducerIdBlock]
    .ensure_internal_topics(now_ms) -> ControllerResult[CreateTopicResponse | None]
    .ensure_transaction_state_topic(now_ms) -> ControllerResult[CreateTopicResponse | None]
    .create_acls(acls, *, now_ms) -> ControllerResult[list[dict]]   (per binding: {} or {"error"})
    .delete_acls(filters, *, now_ms) -> ControllerResult[list[dict]]   (per filter: {"acls"} or {"error"})
    .alter_scram_credentials(upsertions, deletions, *, now_ms) -> ControllerResult[list[dict]]
    .ensure_bootstrap_credentials(credentials, *, now_ms) -> ControllerResult[None]
    .decommission_broker(broker_id, *, now_ms) / .recommission_broker(broker_id, *, now_ms)
        -> ControllerResult[str]   (the broker's state; metadata/decommission.py; the tick drains)
    .balance(*, dry_run=False, tolerance=0.1, max_moves=1000, now_ms) -> ControllerResult[list[dict]]
        (metadata/balancer.py's plan, started as reassignments; the tick autobalances when
        autobalancing_mode is node_add or continuous)

ACLs and SCRAM credentials (Kafka's CreateAcls/DeleteAcls/AlterUserScramCredentials rules):
each item is judged on its own and answered in order (a bad one does not fail the others); an
ACL that exists (or is being created) counts as created; a filter deletes every ACL it matches
(each at most once); a user named twice in one alteration gets DUPLICATE_RESOURCE for all of
its alterations; removing a credential that does not exist gets RESOURCE_NOT_FOUND.
    .last_heartbeat_age_ms(broker_id, now_ms) -> int | None

Size (issue 13's ~800-line rule): over it because every controller op validates against the
one image and emits records here; the security ops (ACLs, SCRAM users, ~200 lines) are the
seam to cut along; the decommission and balancing ops (~150 lines, their pure parts
already in decommission.py and balancer.py) are another.
"""

from __future__ import annotations

import base64
import logging
import random
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Mapping, TypeVar

from raftlog.base.topics import (
    INTERNAL_TOPICS,
    MAX_TOPIC_NAME_CHARS,
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_PARTITIONS,
)
from raftlog.base.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    DuplicateResourceError,
    NotControllerError,
    RaftlogError,
    ResourceNotFoundError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnacceptableCredentialError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
)
from metadata import broker_config, group_config
from metadata.features import FIRST_TERM, MAX_CAPABILITIES
from metadata.errors import InvalidRecordError, ProducerIdsExhaustedError
from metadata.image import MetadataImage, PartitionState, TopicImage
from metadata.decommission import drain_moves, drained, judge_decommission, judge_recommission, rack_map
from metadata.balancer import DEFAULT_MAX_MOVES, DEFAULT_MIN_GAP_BYTES, DEFAULT_TOLERANCE, plan
from metadata.placement import ring_placement
from metadata.reassignment import (
    ReassignmentItem,
    ReassignmentStatus,
    check_assignments,
    completion,
    list_reassignments,
    busy_partitions,
    plan_reassignments,
)
from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.protocol import field
from raftlog.base.sasl import SCRAM_MECHANISMS, credential_from_salted_password
from metadata.records import (
    INT64_MAX,
    Acl,
    BrokerConfig,
    GroupConfig,
    RemoveAcl,
    RemoveUserScramCredential,
    UserScramCredential,
    MAX_ENVELOPE_BYTES,
    MAX_PARTITIONS,
    MAX_REPLICAS,
    AddPartitions,
    BrokerState,
    Config,
    Envelope,
    FenceBroker,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIdBlock,
    Record,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    encode_envelope,
    encode_record,
)
from metadata.topic_config import (
    TOPIC_CONFIGS, ConfigEntry, canonical_key, describe_configs, normalize_configs,
)

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 9000
DEFAULT_HEARTBEAT_MS = 1500  # for the broker side; the controller only judges silence
DEFAULT_PROPOSAL_TIMEOUT_MS = 5000
DEFAULT_LEADER_SETTLE_MS = 5000
DEFAULT_LEADER_MOVE_RETRY_MS = 10_000
DEFAULT_MAX_LEADER_MOVES = 8
DEFAULT_MAX_DRAIN_MOVES = 8  # partitions moving at once while brokers drain (decommission.py)
PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PENDING = 100_000  # marks are per broker/topic/partition; this only guards against leaks

_TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+\Z")
# Envelope map framing around the records array: keys, request id, epoch, array header.
_ENVELOPE_OVERHEAD_BYTES = 160
MAX_LEADER_REPORTS = 1000  # per partition_leader_reports request (~4 envelopes of PartitionChanges)
MAX_ACL_ITEMS = 100  # bindings or filters per request (each create/alter fits one envelope)
MAX_ACLS_PER_ENVELOPE = 200  # RemoveAcl records are ~50 bytes: far under MAX_ENVELOPE_BYTES

T = TypeVar("T")


@dataclass(frozen=True)
class ControllerResult(Generic[T]):
    """Envelopes to propose, in order (empty: nothing to write), and the answer to give once
    they all apply."""

    envelopes: tuple[Envelope, ...]
    response: T

    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(r for env in self.envelopes for r in env.records)


@dataclass(frozen=True)
class RegisterBrokerResponse:
    broker_id: int
    incarnation_id: str


@dataclass(frozen=True)
class HeartbeatResponse:
    """`fenced`: as of the committed image (stays True until the UnfenceBroker applies).
    `shutting_down`: the controller knows of a controlled shutdown of this incarnation."""

    fenced: bool
    shutting_down: bool
    controller_epoch: int


@dataclass(frozen=True)
class CreateTopicResponse:
    name: str
    topic_id: str
    partitions: tuple[PartitionState, ...]


@dataclass(frozen=True)
class LeaderReport:
    """One item of `partition_leader_reports`: `leader` leads `topic`-`partition` in
    `leader_epoch` (`topic_id`, when given, must match the topic's)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    topic_id: str | None = None

    @classmethod
    def from_obj(cls, obj: Any, where: str = "") -> "LeaderReport":
        """From its wire map {topic, partition, leader_id, leader_epoch, topic_id?}. Raises
        InvalidRequestError naming the field."""
        if not isinstance(obj, Mapping):
            raise InvalidRequestError(f"{where or 'a leader report'} must be a map", field=where or "reports")
        return cls(field(obj, "topic", str, where=where), field(obj, "partition", int, min_value=0, where=where),
                   field(obj, "leader_id", int, min_value=-1, where=where),
                   field(obj, "leader_epoch", int, min_value=0, where=where),
                   field(obj, "topic_id", str, default=None, nullable=True, where=where))

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"topic": self.topic, "partition": self.partition,
                               "leader_id": self.leader, "leader_epoch": self.leader_epoch}
        if self.topic_id is not None:
            obj["topic_id"] = self.topic_id
        return obj


def _new_partition(topic_id: str, partition: int, replicas: tuple[int, ...], leader: int) -> Partition:
    """A new partition's record: `leader` is its first leader, the preferred one, named at
    record epoch 0 (Kafka's controller names it too) when every replica supports it
    (`Controller._first_leader`): its Raft group starts led by it, with no election
    (partition/raft.py "First term"), and Metadata answers name it from the start (issue 46;
    KafkaJS's Metadata v0 throws on a partition with no leader, issue 40). Its report of
    leading epoch 1 confirms it (the record's epoch 0 means "named, not confirmed"). -1: the
    record names none and the preferred leader runs for election at once."""
    return Partition(topic_id, partition, replicas, replicas[0], leader, 0)


def _newer_leader(a: PartitionChange, b: PartitionChange) -> bool:
    """Of two changes for one partition, is `a` the newer news (higher epoch, or the same
    epoch naming a leader where `b` named none)?"""
    return a.leader_epoch > b.leader_epoch or (a.leader_epoch == b.leader_epoch and b.leader == -1 and a.leader != -1)


@dataclass(frozen=True)
class LeaderMove:
    """Ask the partition's current leader to transfer leadership to `preferred_leader`."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    preferred_leader: int


def validate_topic_name(name: object) -> str:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not "." or "..". Raises InvalidTopicError."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_CHARS:
        raise InvalidTopicError(f"topic name is {len(name)} chars, at most {MAX_TOPIC_NAME_CHARS}")
    if not _TOPIC_NAME_RE.match(name):
        raise InvalidTopicError(f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'")
    return name


class Controller:
    """Decisions of the active controller for one controller epoch. Not thread-safe: the
    service calls it from one task (the trio thread)."""

    def __init__(
        self,
        image: MetadataImage,
        controller_epoch: int,
        now_ms: int,
        rng: random.Random,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        proposal_timeout_ms: int = DEFAULT_PROPOSAL_TIMEOUT_MS,
        leader_settle_ms: int = DEFAULT_LEADER_SETTLE_MS,
        leader_move_retry_ms: int = DEFAULT_LEADER_MOVE_RETRY_MS,
        max_leader_moves: int = DEFAULT_MAX_LEADER_MOVES,
        max_drain_moves: int = DEFAULT_MAX_DRAIN_MOVES,
        autobalancing_mode: str = "off",
        node_availability_timeout_ms: int = 900_000,
        min_gap_bytes: int = DEFAULT_MIN_GAP_BYTES,
        offsets_replication_factor: int = 3,
        max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ):
        """`offsets_replication_factor`: RF of `__consumer_offsets`, created once that many
        brokers are unfenced (pass min(3, cluster size) for small clusters). `random_bytes(n)`
        makes topic and ACL ids: the OS's CSPRNG by default, since an id is not to be guessed
        from others (issue 39); tests that want repeatable ids pass a seeded `rng.randbytes`.
        `rng` makes the request tag."""
        if controller_epoch < image.controller_epoch:
            raise NotControllerError(
                f"controller epoch {controller_epoch} is older than the image's {image.controller_epoch}"
            )
        self._image = image
        self.controller_epoch = controller_epoch
        self._rng = rng
        self._random_bytes = random_bytes
        self.session_timeout_ms = session_timeout_ms
        self.proposal_timeout_ms = proposal_timeout_ms
        self.leader_settle_ms = leader_settle_ms
        self.leader_move_retry_ms = leader_move_retry_ms
        self.max_leader_moves = max_leader_moves
        self.max_drain_moves = max_drain_moves
        self.autobalancing_mode = autobalancing_mode  # off | node_add | continuous
        self.node_availability_timeout_ms = node_availability_timeout_ms
        self.min_gap_bytes = min_gap_bytes  # the balancer's floor on a bytes gap worth moving for
        self._fenced_since_ms: dict[int, int] = {b: now_ms for b in image.fenced_broker_ids()}
        self._balancing = False  # node_add: an empty broker appeared; cleared once balanced
        # bytes of each partition as its leader last reported (heartbeats): the balancer's
        # disk goal; not in the metadata log (a measurement, as Cruise Control's metrics)
        self._partition_bytes: dict[tuple[str, int], int] = {}
        # broker -> (when, the internal partitions whose coordinator it reported busy): no
        # move of them meanwhile (metadata/reassignment.py "Busy coordinators"); soft state too
        self._busy: dict[int, tuple[int, list[Any]]] = {}
        self.offsets_replication_factor = offsets_replication_factor
        self.max_envelope_bytes = max_envelope_bytes
        # A random tag keeps request ids unique even if the service builds two Controllers
        # for one epoch (a request id collision would make replay drop a new proposal).
        self._request_tag = _b64(rng.getrandbits(36).to_bytes(5, "big"))[:6]
        self._request_seq = 0
        self._deposed = False
        self._last_heartbeat_ms: dict[int, int] = {b: now_ms for b in image.brokers}
        self._unfenced_since_ms: dict[int, int] = {b: now_ms for b in image.unfenced_broker_ids()}
        self._shutting_down: dict[int, str] = {}  # broker id -> incarnation in controlled shutdown
        # key -> (request_id, expires_ms, tag); tag is e.g. the proposed leader epoch
        self._pending: dict[tuple, tuple[str, int, int]] = {}
        self._reserved_producer_id = image.next_producer_id
        self._move_suggested_ms: dict[tuple[str, int], int] = {}
        # broker -> (incarnation, the capabilities it sent: metadata/features.py "Broker
        # capabilities"); soft state, heard again with every heartbeat
        self._capabilities: dict[int, tuple[str, frozenset[str]]] = {}

    # --- image ---

    @property
    def image(self) -> MetadataImage:
        return self._image

    def update_image(self, image: MetadataImage, now_ms: int) -> None:
        """Adopt a newly committed image: clears settled pending marks, tracks unfencing."""
        self._image = image
        if image.controller_epoch > self.controller_epoch:
            self._deposed = True  # a newer controller wrote: every decision now refuses
        self._pending = {
            k: v for k, v in self._pending.items() if image.request_outcome(v[0]) is None and v[1] > now_ms
        }
        unfenced = set(image.unfenced_broker_ids())
        for b in list(self._unfenced_since_ms):
            if b not in unfenced:
                del self._unfenced_since_ms[b]
        for b in unfenced:
            self._unfenced_since_ms.setdefault(b, now_ms)
        self._fenced_since_ms = {b: self._fenced_since_ms.get(b, now_ms) for b in image.fenced_broker_ids()}
        for b in image.brokers:
            self._last_heartbeat_ms.setdefault(b, now_ms)
        self._reserved_producer_id = max(self._reserved_producer_id, image.next_producer_id)

    def _check_active(self) -> None:
        if self._deposed:
            raise NotControllerError(
                f"controller epoch {self.controller_epoch} was superseded by {self._image.controller_epoch}"
            )

    # --- plumbing ---

    def _envelope(self, records: list[Record] | tuple[Record, ...]) -> Envelope:
        self._request_seq += 1
        return Envelope(f"{self.controller_epoch}.{self._request_tag}.{self._request_seq}",
                        self.controller_epoch, tuple(records))

    def _result(self, records: list[Record], response: T) -> ControllerResult[T]:
        envelopes = (self._envelope(records),) if records else ()
        return ControllerResult(envelopes, response)

    def _pending_tag(self, key: tuple, now_ms: int) -> int | None:
        entry = self._pending.get(key)
        if entry is None:
            return None
        request_id, expires_ms, tag = entry
        if expires_ms <= now_ms or self._image.request_outcome(request_id) is not None:
            del self._pending[key]
            return None
        return tag

    def _mark(self, key: tuple, envelope: Envelope, now_ms: int, tag: int = 0) -> None:
        if len(self._pending) >= MAX_PENDING:
            self._purge_pending(now_ms)
        self._pending[key] = (envelope.request_id, now_ms + self.proposal_timeout_ms, tag)

    def _purge_pending(self, now_ms: int) -> None:
        for key in list(self._pending):
            self._pending_tag(key, now_ms)

    def noop(self) -> ControllerResult[None]:
        """A NoOp envelope: propose it first after activation (stamps the epoch, so envelopes
        a deposed controller still has in flight get STALE_CONTROLLER_EPOCH)."""
        self._check_active()
        return self._result([NoOp()], None)

    # --- brokers ---

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: str,
        host: str,
        port: int,
        peer_host: str,
        peer_port: int,
        rack: str | None = None,
        *,
        now_ms: int,
        kafka_host: str | None = None,
        kafka_port: int | None = None,
        previous_incarnation_id: str | None = None,
        capabilities: Sequence[str] = (),
    ) -> ControllerResult[RegisterBrokerResponse]:
        """Register a broker process. A new incarnation of a known id is refused with
        DuplicateBrokerRegistrationError while the old incarnation is unfenced, not shutting
        down, and heard from within session_timeout_ms (two live processes with one id),
        unless the new one names the old as `previous_incarnation_id`: the incarnation that
        last ran on its data dir, which it could only take over once that process was gone
        (the node's pid-file claim), so a restart after a SIGKILL need not wait out the
        session. The broker is fenced until its first heartbeat after the record applies.
        `capabilities`: what it supports (`record_capabilities`). Raises InvalidRequestError
        for bad fields."""
        self._check_active()
        try:
            record = RegisterBroker(broker_id, incarnation_id, host, port, peer_host, peer_port, rack,
                                    kafka_host, kafka_port)
        except InvalidRecordError as e:
            raise InvalidRequestError(str(e)) from None
        old = self._image.broker(broker_id)
        if old is not None and old.incarnation_id != incarnation_id:
            silent_ms = now_ms - self._last_heartbeat_ms.get(broker_id, now_ms)
            if not old.fenced and self._shutting_down.get(broker_id) != old.incarnation_id \
                    and silent_ms <= self.session_timeout_ms \
                    and old.incarnation_id != previous_incarnation_id:
                raise DuplicateBrokerRegistrationError(
                    f"broker {broker_id} is registered by live incarnation {old.incarnation_id} "
                    f"(heard {silent_ms} ms ago; session {self.session_timeout_ms} ms)"
                )
        self.record_capabilities(broker_id, incarnation_id, capabilities)
        self._last_heartbeat_ms[broker_id] = now_ms
        if self._shutting_down.get(broker_id) != incarnation_id:
            self._shutting_down.pop(broker_id, None)
        response = RegisterBrokerResponse(broker_id, incarnation_id)
        if old is not None and old.to_record() == record:
            return ControllerResult((), response)  # a retried registration: nothing new
        result = self._result([record], response)
        self._mark(("register", broker_id, incarnation_id), result.envelopes[0], now_ms)
        return result

    def heartbeat(self, broker_id: int, incarnation_id: str, *, now_ms: int,
                  capabilities: Sequence[str] = ()) -> ControllerResult[HeartbeatResponse]:
        """Record a heartbeat and the `capabilities` it carries (`record_capabilities`; a
        heartbeat without them, an older broker's, says none); propose UnfenceBroker if the
        broker is fenced (and not shutting down). Raises BrokerIdNotRegisteredError
        (re-register) or StaleBrokerEpochError (this process was replaced by a newer
        incarnation: stop)."""
        self._check_active()
        self.record_capabilities(broker_id, incarnation_id, capabilities)
        reg = self._image.broker(broker_id)
        registering = self._pending_tag(("register", broker_id, incarnation_id), now_ms) is not None
        if reg is None or reg.incarnation_id != incarnation_id:
            if registering:  # its registration is in flight: a heartbeat, still fenced
                self._last_heartbeat_ms[broker_id] = now_ms
                return ControllerResult((), HeartbeatResponse(True, False, self.controller_epoch))
            if reg is None:
                raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
            raise StaleBrokerEpochError(
                f"broker {broker_id} incarnation {incarnation_id} was replaced by {reg.incarnation_id}"
            )
        self._last_heartbeat_ms[broker_id] = now_ms
        shutting_down = self._shutting_down.get(broker_id) == incarnation_id
        response = HeartbeatResponse(reg.fenced, shutting_down, self.controller_epoch)
        key = ("unfence", broker_id, incarnation_id)
        if not reg.fenced or shutting_down or self._pending_tag(key, now_ms) is not None \
                or self._image.broker_state(broker_id) == "decommissioned":
            return ControllerResult((), response)
        result = self._result([UnfenceBroker(broker_id, incarnation_id)], response)
        self._mark(key, result.envelopes[0], now_ms)
        return result

    def record_capabilities(self, broker_id: int, incarnation_id: str, capabilities: Sequence[str]) -> None:
        """What incarnation `incarnation_id` of broker `broker_id` says it supports
        (metadata/features.py "Broker capabilities"): it replaces what that broker said before.
        Unknown names are kept and ignored. Raises InvalidRequestError (not a list of at most
        MAX_CAPABILITIES short strings)."""
        if not isinstance(capabilities, (list, tuple)) or len(capabilities) > MAX_CAPABILITIES or not all(
                type(c) is str and 0 < len(c) <= 64 for c in capabilities):
            raise InvalidRequestError(f"capabilities: a list of at most {MAX_CAPABILITIES} names",
                                      field="capabilities")
        self._capabilities[broker_id] = (incarnation_id, frozenset(capabilities))

    def _first_leader(self, replicas: tuple[int, ...]) -> int:
        """The first leader a new partition's record names (`_new_partition`): its preferred
        replica when every replica's registered incarnation said it supports FIRST_TERM, else
        -1 (the group elects). An incarnation that has not heartbeated this controller yet (a
        new controller, a new registration) counts as not supporting it."""
        for b in replicas:
            reg = self._image.broker(b)
            said = self._capabilities.get(b)
            if reg is None or said is None or said[0] != reg.incarnation_id or FIRST_TERM not in said[1]:
                return -1
        return replicas[0]

    def controlled_shutdown(self, broker_id: int, incarnation_id: str, *, now_ms: int) -> ControllerResult[None]:
        """Fence a broker that is shutting down cleanly; its heartbeats no longer unfence it,
        and its next incarnation may register at once. Raises as heartbeat does."""
        self._check_active()
        reg = self._image.broker(broker_id)
        if reg is None:
            raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
        if reg.incarnation_id != incarnation_id:
            raise StaleBrokerEpochError(f"broker {broker_id} incarnation {incarnation_id} is not registered")
        self._shutting_down[broker_id] = incarnation_id
        key = ("fence", broker_id, incarnation_id)
        if reg.fenced or self._pending_tag(key, now_ms) is not None:
            return ControllerResult((), None)
        result = self._result([FenceBroker(broker_id, incarnation_id)], None)
        self._mark(key, result.envelopes[0], now_ms)
        return result

    def last_heartbeat_age_ms(self, broker_id: int, now_ms: int) -> int | None:
        last = self._last_heartbeat_ms.get(broker_id)
        return None if last is None else now_ms - last

    def tick(self, now_ms: int) -> ControllerResult[None]:
        """Fence every unfenced broker silent for more than session_timeout_ms (one envelope
        per broker, so one stale fence cannot hold back another), and re-place the missing
        partitions of incomplete topics that no proposal is completing."""
        self._check_active()
        envelopes: list[Envelope] = []
        for broker_id in self._image.unfenced_broker_ids():
            reg = self._image.brokers[broker_id]
            silent_ms = now_ms - self._last_heartbeat_ms.get(broker_id, now_ms)
            key = ("fence", broker_id, reg.incarnation_id)
            if silent_ms > self.session_timeout_ms and self._pending_tag(key, now_ms) is None:
                log.info("fencing broker %d: silent for %d ms", broker_id, silent_ms)
                env = self._envelope([FenceBroker(broker_id, reg.incarnation_id)])
                self._mark(key, env, now_ms)
                envelopes.append(env)
        for topic in sorted(self._image.topics.values(), key=lambda t: t.name):
            if not topic.complete and self._pending_tag(("topic", topic.name), now_ms) is None:
                envelopes.extend(self._complete_topic(topic, now_ms))
        envelopes.extend(self._drain(now_ms))
        envelopes.extend(self._autobalance(now_ms))
        self._purge_pending(now_ms)
        return ControllerResult(tuple(envelopes), None)

    # --- decommission (metadata/decommission.py) ---

    def decommission_broker(self, broker_id: int, *, now_ms: int) -> ControllerResult[str]:
        """Start draining `broker_id` (the tick moves its replicas off, then fences it for
        good). Response: the broker's state. Raises BrokerIdNotRegisteredError,
        InvalidReplicationFactorError (a topic would have fewer brokers than its RF)."""
        self._check_active()
        record = judge_decommission(self._image, broker_id)
        if record is None:
            return ControllerResult((), self._image.broker_state(broker_id))
        return self._result([record], record.state)

    def recommission_broker(self, broker_id: int, *, now_ms: int) -> ControllerResult[str]:
        """Make a draining or decommissioned broker active again (a fenced one is unfenced by
        its next heartbeat). Raises BrokerIdNotRegisteredError."""
        self._check_active()
        record = judge_recommission(self._image, broker_id)
        if record is None:
            return ControllerResult((), "active")
        return self._result([record], record.state)

    def record_partition_bytes(self, rows: list[Any]) -> None:
        """Partition sizes from a leader's heartbeat ([[topic, partition, bytes]]); rows
        that are not so are ignored (a measurement, not a command)."""
        for row in rows[:100_000]:
            if (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                    and all(type(v) is int and v >= 0 for v in row[1:])):
                self._partition_bytes[(row[0], row[1])] = row[2]

    def record_busy_partitions(self, broker_id: int, rows: list[Any], *, now_ms: int) -> None:
        """The internal partitions whose coordinator `broker_id` reports busy (its heartbeat's
        `busy_partitions`: raftlog/base/topics.py busy_row); replaces its last report."""
        self._busy[broker_id] = (now_ms, rows[:1000])

    def busy_partitions(self, now_ms: int) -> dict[tuple[str, int], RaftlogError]:
        """The reports of the last session timeout from each partition's current leader."""
        return busy_partitions(self._image, {b: rows for b, (at, rows) in self._busy.items()
                                             if now_ms - at <= self.session_timeout_ms})

    def balance(self, *, dry_run: bool = False, tolerance: float = DEFAULT_TOLERANCE,
                max_moves: int = DEFAULT_MAX_MOVES, now_ms: int) -> ControllerResult[list[dict[str, Any]]]:
        """The balancer's plan (metadata/balancer.py), started as reassignments unless
        `dry_run`. Response: per move {topic, partition, replicas, reason} and, when refused,
        {error}. Raises InvalidRequestError for a tolerance outside [0, 1)."""
        self._check_active()
        if type(tolerance) not in (int, float) or not 0 <= tolerance < 1:
            raise InvalidRequestError(f"tolerance must be in [0, 1), got {tolerance!r}")
        moves = plan(self._image, self._partition_bytes, tolerance=float(tolerance), max_moves=max_moves,
                     min_gap_bytes=self.min_gap_bytes)
        rows: list[dict[str, Any]] = [{"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas),
                                       "reason": m.reason} for m in moves]
        if dry_run or not moves:
            return ControllerResult((), rows)
        records, errors = plan_reassignments(
            self._image, [ReassignmentItem(m.topic, m.partition, m.replicas) for m in moves], self.busy_partitions(now_ms))
        for row, error in zip(rows, errors):
            if error is not None:
                row["error"] = error
        return ControllerResult((), rows) if not records else self._result(list(records), rows)

    def _autobalance(self, now_ms: int) -> list[Envelope]:
        """partition_autobalancing_mode: node_add balances after an empty broker appears;
        continuous balances whenever the plan is not empty and drains brokers fenced longer
        than node_availability_timeout_ms. A batch (at most max_drain_moves) at a time, only
        while nothing else moves."""
        if self.autobalancing_mode == "off":
            return []
        out: list[Envelope] = []
        if self.autobalancing_mode == "continuous":
            for b, since in sorted(self._fenced_since_ms.items()):
                if now_ms - since >= self.node_availability_timeout_ms and b not in self._image.broker_states \
                        and not drained(self._image, b) and self._pending_tag(("down", b), now_ms) is None:
                    moves = drain_moves(self._image, b, self.max_drain_moves)
                    if moves:
                        log.info("broker %d down for %d ms: moving %d partition(s) off", b, now_ms - since, len(moves))
                        env = self._envelope(list(moves))
                        self._mark(("down", b), env, now_ms)
                        out.append(env)
        counts = self._image.replica_counts()
        placeable = self._image.placeable_broker_ids()
        if any(counts.get(b, 0) == 0 for b in placeable) and any(counts.values()):
            self._balancing = True
        if out or not (self._balancing or self.autobalancing_mode == "continuous"):
            return out
        if self._pending_tag(("balance",), now_ms) is not None or any(
                p.reassigning for t in self._image.topics.values() for p in t.partitions):
            return out
        result = self.balance(max_moves=self.max_drain_moves, now_ms=now_ms)
        if not result.envelopes:
            self._balancing = False
            return out
        log.info("autobalancing (%s): moving %d partition(s)", self.autobalancing_mode, len(result.response))
        self._mark(("balance",), result.envelopes[-1], now_ms)
        return out + list(result.envelopes)

    def _drain(self, now_ms: int) -> list[Envelope]:
        out: list[Envelope] = []
        for broker_id, state in sorted(self._image.broker_states.items()):
            if state != "draining":
                continue
            if drained(self._image, broker_id):
                key = ("decommissioned", broker_id)
                if self._pending_tag(key, now_ms) is None:
                    reg = self._image.brokers[broker_id]
                    records: list[Record] = [BrokerState(broker_id, "decommissioned")]
                    if not reg.fenced:
                        records.append(FenceBroker(broker_id, reg.incarnation_id))
                    log.info("broker %d is empty: decommissioned", broker_id)
                    env = self._envelope(records)
                    self._mark(key, env, now_ms)
                    out.append(env)
                continue
            skip = frozenset(k[1:] for k in self._pending if k[0] == "drain")
            moves = drain_moves(self._image, broker_id, self.max_drain_moves, skip)
            if moves:
                env = self._envelope(list(moves))
                for m in moves:
                    t = self._image.topic_by_id(m.topic_id)
                    self._mark(("drain", t.name, m.partition), env, now_ms)  # type: ignore[union-attr]
                log.info("draining broker %d: moving %d partition(s)", broker_id, len(moves))
                out.append(env)
        return out

    # --- topics ---

    def _ring_placement(self, count: int, replication_factor: int) -> list[tuple[int, ...]]:
        """Rack-aware ring placement on the placeable brokers (metadata/placement.py)."""
        return ring_placement(rack_map(self._image), self._image.preferred_leader_counts(), count,
                              replication_factor)

    def _pack(self, records: list[Record]) -> list[Envelope]:
        """Split records, in order, into envelopes of at most max_envelope_bytes."""
        budget = self.max_envelope_bytes - _ENVELOPE_OVERHEAD_BYTES
        chunks: list[list[Record]] = [[]]
        used = 0
        for r in records:
            size = len(encode_record(r))
            if chunks[-1] and used + size > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(r)
            used += size
        envelopes = [self._envelope(c) for c in chunks]
        for env in envelopes:  # assert on write: raises EnvelopeTooLargeError if the estimate was wrong
            encode_envelope(env, self.max_envelope_bytes)
        return envelopes

    def _complete_topic(self, topic: TopicImage, now_ms: int) -> list[Envelope]:
        live = len(self._image.placeable_broker_ids())
        rf = min(len(topic.partitions[0].replicas) if topic.partitions else 1, live)
        if rf < 1:
            return []
        first = len(topic.partitions)
        placement = self._ring_placement(topic.partition_count - first, rf)
        records: list[Record] = [
            _new_partition(topic.topic_id, first + i, replicas, self._first_leader(replicas)) for i, replicas in enumerate(placement)
        ]
        envelopes = self._pack(records)
        self._mark(("topic", topic.name), envelopes[-1], now_ms)
        log.warning("completing topic %s: partitions %d..%d", topic.name, first, topic.partition_count - 1)
        return envelopes

    def _new_topic_id(self) -> str:
        while True:
            topic_id = _b64(self._random_bytes(16))
            if self._image.topic_by_id(topic_id) is None:
                return topic_id

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
        internal: bool = False,
        assignments: list[list[int]] | None = None,
        *,
        now_ms: int,
    ) -> ControllerResult[CreateTopicResponse]:
        """Validate and place a new topic. Raises, in this order of checks: InvalidTopicError
        (name rules; reserved internal name; '.'/'_' collision with an existing topic),
        TopicAlreadyExistsError (committed or in flight), InvalidPartitionsError (1..10000),
        InvalidReplicationFactorError (1..unfenced brokers), InvalidConfigError (names the key)."""
        self._check_active()
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not internal:
            raise InvalidTopicError(f"{name!r} is reserved for an internal topic")
        if self._image.topic(name) is not None or self._pending_tag(("topic", name), now_ms) is not None:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        collision_key = name.replace(".", "_")
        for other in self._image.topic_ids:
            if other.replace(".", "_") == collision_key:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} ('.' and '_' collide)")
        placement = None
        if assignments is not None:  # manual: the count and replication factor follow from it
            placement = check_assignments(self._image, f"topic {name!r}", assignments)
            partitions, replication_factor = len(placement), len(placement[0])
        if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partitions must be 1..{MAX_PARTITIONS}, got {partitions!r}")
        live = self._image.placeable_broker_ids()
        if placement is None and (
                type(replication_factor) is not int or not 1 <= replication_factor <= min(len(live), MAX_REPLICAS)):
            raise InvalidReplicationFactorError(
                f"replication factor must be 1..{min(len(live), MAX_REPLICAS)}: "
                f"{len(live)} live (unfenced) broker(s), got {replication_factor!r}"
            )
        normalized = normalize_configs(configs if configs is not None else {})
        topic_id = self._new_topic_id()
        if placement is None:
            placement = self._ring_placement(partitions, replication_factor)
        parts = [_new_partition(topic_id, p, replicas, self._first_leader(replicas)) for p, replicas in enumerate(placement)]
        records: list[Record] = [Topic(name, topic_id, partitions, internal, normalized), *parts]
        envelopes = self._pack(records)
        self._mark(("topic", name), envelopes[-1], now_ms)
        response = CreateTopicResponse(
            name, topic_id, tuple(PartitionState(p.partition, p.replicas, p.preferred_leader, p.leader, p.leader_epoch) for p in parts)
        )
        return ControllerResult(tuple(envelopes), response)

    def create_partitions(
        self, name: str, partition_count: int, *, validate_only: bool = False, now_ms: int,
        assignments: list[list[int]] | None = None,
    ) -> ControllerResult[CreateTopicResponse]:
        """Grow topic `name` to `partition_count` partitions (Kafka's CreatePartitions): one
        AddPartitions record and the new Partition records, placed like a new topic's (the
        least-loaded preferred leaders first, RF of the topic's partition 0), in ONE envelope,
        so no node ever sees the topic incomplete. `validate_only` checks and writes nothing.
        Response: the topic's new partitions. Raises UnknownTopicOrPartitionError (also while
        it is being created or deleted), InvalidTopicError (internal topics: their partition
        count fixes each group's coordinator), InvalidPartitionsError (not more than now, over
        MAX_PARTITIONS, another change in flight, or too many at once for one envelope),
        InvalidReplicationFactorError (fewer live brokers than the topic's RF)."""
        self._check_active()
        topic = self._image.topic(name)
        if topic is None or not topic.complete or (
            self._pending_tag(("delete", topic.topic_id), now_ms) is not None
        ):
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        if topic.internal:
            raise InvalidTopicError(f"the partition count of internal topic {name!r} is fixed")
        current = topic.partition_count
        if type(partition_count) is not int or not current < partition_count <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions: the new count must be "
                f"{current + 1}..{MAX_PARTITIONS}, got {partition_count!r}"
            )
        if self._pending_tag(("topic", name), now_ms) is not None:
            raise InvalidPartitionsError(f"a partition change of topic {name!r} is in flight")
        rf = len(topic.partitions[0].replicas)
        live = self._image.placeable_broker_ids()
        manual = None
        if assignments is not None:  # one replica list per new partition, of the topic's RF
            manual = check_assignments(self._image, f"topic {name!r}", assignments, rf)
            if len(manual) != partition_count - current:
                raise InvalidReplicaAssignmentError(
                    f"topic {name!r}: {len(manual)} assignments for {partition_count - current} new partitions")
        if manual is None and rf > len(live):
            raise InvalidReplicationFactorError(
                f"topic {name!r} has replication factor {rf}: {len(live)} live (unfenced) broker(s)"
            )
        placement = manual if manual is not None else self._ring_placement(partition_count - current, rf)
        parts = [_new_partition(topic.topic_id, current + i, replicas, self._first_leader(replicas)) for i, replicas in enumerate(placement)]
        records: list[Record] = [AddPartitions(topic.topic_id, partition_count), *parts]
        response = CreateTopicResponse(
            name, topic.topic_id,
            tuple(PartitionState(p.partition, p.replicas, p.preferred_leader, p.leader, p.leader_epoch) for p in parts),
        )  # fmt: skip
        budget = self.max_envelope_bytes - _ENVELOPE_OVERHEAD_BYTES
        if sum(len(encode_record(r)) for r in records) > budget:
            per = max(1, budget // max(1, len(encode_record(parts[-1]))) - 1)
            raise InvalidPartitionsError(
                f"add at most about {per} partitions per request (one metadata entry); asked "
                f"{partition_count - current}"
            )
        if validate_only:
            return ControllerResult((), response)
        result = self._result(records, response)
        encode_envelope(result.envelopes[0], self.max_envelope_bytes)  # assert on write
        self._mark(("topic", name), result.envelopes[0], now_ms)
        return result

    def _complete_topic_named(self, name: str) -> TopicImage:
        topic = self._image.topic(name)
        if topic is None or not topic.complete:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def delete_topic(self, name: str, *, now_ms: int) -> ControllerResult[str]:
        """Propose RemoveTopic. Raises UnknownTopicOrPartitionError (also while a delete of it
        is in flight), InvalidTopicError for internal topics. Response: the topic_id."""
        self._check_active()
        topic = self._image.topic(name)
        if topic is None or self._pending_tag(("delete", topic.topic_id), now_ms) is not None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        if topic.internal:
            raise InvalidTopicError(f"internal topic {name!r} cannot be deleted")
        result = self._result([RemoveTopic(topic.topic_id)], topic.topic_id)
        self._mark(("delete", topic.topic_id), result.envelopes[0], now_ms)
        return result

    def write_records(self, records: list[Record], response: T) -> ControllerResult[T]:
        """Records a pure planner made (metadata/quota_ops.py's client quotas) in one
        envelope, as the active controller."""
        self._check_active()
        return self._result(records, response)

    def alter_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,
        delete: tuple[str, ...] | list[str] = (),
        *,
        now_ms: int,
    ) -> ControllerResult[dict[str, str]]:
        """Set and delete (back to default) topic config keys. Response: the topic's explicitly
        set configs after the change. Raises UnknownTopicOrPartitionError, InvalidConfigError
        (names the key), InvalidRequestError (a key both set and deleted)."""
        self._check_active()
        topic = self._complete_topic_named(name)
        normalized = normalize_configs(set if set is not None else {})
        if isinstance(delete, (str, bytes)) or not isinstance(delete, (list, tuple)):
            raise InvalidRequestError("delete must be a list of config keys")
        for key in delete:
            if not isinstance(key, str) or canonical_key(key) not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"unknown topic config {key!r}", key=key if isinstance(key, str) else None)
        delete = [canonical_key(k) for k in delete]
        both = sorted(k for k in dict.fromkeys(delete) if k in normalized)
        if both:
            raise InvalidRequestError(f"config keys both set and deleted: {both}")
        after = {k: v for k, v in topic.configs.items() if k not in delete}
        after.update(normalized)
        after = dict(sorted(after.items()))
        if after == dict(topic.configs):
            return ControllerResult((), after)
        deleted = tuple(k for k in dict.fromkeys(delete) if k in topic.configs)
        return self._result([Config(topic.topic_id, normalized, deleted)], after)

    def alter_broker_configs(
        self, resource: str, set: Mapping[str, str], delete: list[str], *, now_ms: int,
    ) -> ControllerResult[dict[str, str]]:
        """Set and delete dynamic broker configs of a broker id or the cluster default ("").
        Response: the resource's dynamic configs after. Raises InvalidRequestError (a bad
        resource, a read-only config), InvalidConfigError (a bad value)."""
        self._check_active()
        current = self._image.broker_configs.get(broker_config.check_resource(resource), {})
        after = broker_config.alter(current, set, delete)
        if after is None:
            return ControllerResult((), dict(current))
        return self._result([BrokerConfig(resource, broker_config.normalize_broker_configs(set),
                                          tuple(k for k in delete if k in current))], after)

    def alter_group_configs(
        self, group_id: str, set: Mapping[str, str], delete: list[str], *, now_ms: int,
    ) -> ControllerResult[dict[str, str]]:
        """Set and delete a group's dynamic configs (Kafka 4's GROUP resource; the group need
        not exist). Response: the group's configs after. Raises InvalidRequestError (an empty
        or too long group id), InvalidConfigError (an unknown name, a bad value)."""
        self._check_active()
        if not group_id:
            raise InvalidRequestError("Default group resources are not allowed.")
        if len(group_id) > group_config.MAX_GROUP_ID_CHARS:
            raise InvalidRequestError(f"group id over {group_config.MAX_GROUP_ID_CHARS} characters")
        current = self._image.group_configs.get(group_id, {})
        after = group_config.alter(current, set, delete)
        if after is None:
            return ControllerResult((), dict(current))
        return self._result([GroupConfig(group_id, group_config.normalize(set),
                                         tuple(k for k in delete if k in current))], after)

    def describe_topic(self, name: str) -> TopicImage:
        """Raises UnknownTopicOrPartitionError (also for a topic still being created)."""
        return self._complete_topic_named(name)

    def list_topics(self, include_internal: bool = False) -> tuple[str, ...]:
        return tuple(n for n in self._image.topic_names(include_internal) if self._image.topic(n).complete)

    def describe_configs(self, name: str) -> tuple[ConfigEntry, ...]:
        return describe_configs(self._complete_topic_named(name).configs)

    # --- partition leadership ---

    def partition_leader_report(
        self,
        topic: str,
        partition: int,
        leader: int,
        leader_epoch: int,
        *,
        now_ms: int,
        topic_id: str | None = None,
    ) -> ControllerResult[bool]:
        """A partition's Raft group reports its leader. Proposes PartitionChange only when the
        report is newer than the image (higher epoch, or the leader of the current epoch was
        unknown) and newer than any change already in flight. Raises
        UnknownTopicOrPartitionError, InvalidRequestError (leader not a replica)."""
        self._check_active()
        change = self._leader_change(LeaderReport(topic, partition, leader, leader_epoch, topic_id), now_ms)
        if change is None:
            return ControllerResult((), False)
        result = self._result([change], True)
        self._mark(("leader", change.topic_id, partition), result.envelopes[0], now_ms, tag=leader_epoch)
        return result

    def partition_leader_reports(
        self, reports: list[Any] | tuple[Any, ...], *, now_ms: int
    ) -> ControllerResult[list[dict[str, Any]]]:
        """Many leader reports (LeaderReports or their wire maps) at once, each judged as
        `partition_leader_report` judges one; every PartitionChange goes into one result
        (envelopes of at most max_envelope_bytes, ~300 changes each), so a broker that just
        won hundreds of elections costs the quorum a few proposals, not hundreds. Response:
        one entry per report, in order: {"changed": bool} or {"error": wire error} (a bad or
        unknown one does not fail the others; of two reports for one partition the newer
        wins, the other answers changed false). Raises InvalidRequestError (not a list, more
        than MAX_LEADER_REPORTS)."""
        self._check_active()
        if not isinstance(reports, (list, tuple)) or len(reports) > MAX_LEADER_REPORTS:
            raise InvalidRequestError(
                f"reports must be a list of at most {MAX_LEADER_REPORTS} leader reports", field="reports")
        results: list[dict[str, Any]] = []
        chosen: dict[tuple[str, int], tuple[int, PartitionChange]] = {}  # key -> (result index, change)
        for i, item in enumerate(reports):
            try:
                report = item if isinstance(item, LeaderReport) else LeaderReport.from_obj(item, f"reports[{i}]")
                change = self._leader_change(report, now_ms)
            except RaftlogError as exc:
                results.append({"error": exc.to_wire()})
                continue
            results.append({"changed": change is not None})
            if change is None:
                continue
            key = (change.topic_id, change.partition)
            earlier = chosen.get(key)
            if earlier is not None:
                if _newer_leader(change, earlier[1]):
                    results[earlier[0]] = {"changed": False}
                else:
                    results[-1] = {"changed": False}
                    continue
            chosen[key] = (i, change)
        changes = [change for _, change in sorted(chosen.values(), key=lambda entry: entry[0])]
        envelopes = self._pack(changes) if changes else []
        for env in envelopes:
            for rec in env.records:
                assert isinstance(rec, PartitionChange)
                self._mark(("leader", rec.topic_id, rec.partition), env, now_ms, tag=rec.leader_epoch)
        return ControllerResult(tuple(envelopes), results)

    def _leader_change(self, report: LeaderReport, now_ms: int) -> PartitionChange | None:
        """The PartitionChange a report calls for, or None (not newer than the image or than
        a change in flight). Raises UnknownTopicOrPartitionError, InvalidRequestError."""
        topic, partition, leader, leader_epoch = report.topic, report.partition, report.leader, report.leader_epoch
        t = self._image.topic(topic)
        if t is None or (report.topic_id is not None and t.topic_id != report.topic_id) \
                or not 0 <= partition < len(t.partitions):
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        cur = t.partitions[partition]
        if type(leader) is not int or type(leader_epoch) is not int or leader_epoch < 0:
            raise InvalidRequestError("leader and leader_epoch must be ints, leader_epoch >= 0")
        if leader != -1 and leader not in cur.replicas:
            raise InvalidRequestError(f"broker {leader} is not a replica of {topic}-{partition}")
        newer = leader_epoch > cur.leader_epoch or (
            leader_epoch == cur.leader_epoch and cur.leader == -1 and leader != -1
        )
        in_flight = self._pending_tag(("leader", t.topic_id, partition), now_ms)
        if not newer or (in_flight is not None and in_flight >= leader_epoch):
            return None
        return PartitionChange(t.topic_id, partition, leader, leader_epoch)

    def alter_partition_reassignments(
        self, items: list[ReassignmentItem], *, now_ms: int
    ) -> ControllerResult[list[RaftlogError | None]]:
        """Start or cancel replica moves (metadata/reassignment.py): one record per accepted
        item, all in one proposal; per item None or the error refusing it."""
        self._check_active()
        records, results = plan_reassignments(self._image, items, self.busy_partitions(now_ms))
        if not records:
            return ControllerResult((), results)
        return self._result(list(records), results)

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> list[ReassignmentStatus]:
        """The moves in progress (all, or of `partitions`)."""
        return list_reassignments(self._image, partitions)

    def membership_report(
        self, topic: str, partition: int, voters: tuple[int, ...], learners: tuple[int, ...] = (),
        *, now_ms: int,
    ) -> ControllerResult[bool]:
        """A partition leader reports its group's committed Raft membership: ends the
        partition's move when that is its target (or, cancelled, its original replicas).
        Response: whether a record was proposed. Raises UnknownTopicOrPartitionError."""
        self._check_active()
        record = completion(self._image, topic, partition, voters, learners)
        if record is None:
            return ControllerResult((), False)
        return self._result([record], True)

    def preferred_leader_moves(self, now_ms: int, max_moves: int | None = None) -> tuple[LeaderMove, ...]:
        """Partitions whose known leader is not the preferred leader while the preferred
        leader has been unfenced for >= leader_settle_ms; at most `max_moves` (default
        max_leader_moves), in (topic, partition) order, and a partition is suggested again
        only after leader_move_retry_ms. Not records: the service asks the current leader to
        transfer leadership, and the group's next leader report updates the image."""
        self._check_active()
        limit = self.max_leader_moves if max_moves is None else max_moves
        self._move_suggested_ms = {
            k: t for k, t in self._move_suggested_ms.items() if now_ms - t < self.leader_move_retry_ms
        }
        moves: list[LeaderMove] = []
        for t in sorted(self._image.topics.values(), key=lambda t: t.name):
            for p in t.partitions:
                if len(moves) >= limit:
                    return tuple(moves)
                if p.leader == -1 or p.leader == p.preferred_leader:
                    continue
                since = self._unfenced_since_ms.get(p.preferred_leader)
                if since is None or now_ms - since < self.leader_settle_ms:
                    continue
                if (t.name, p.partition) in self._move_suggested_ms:
                    continue
                self._move_suggested_ms[(t.name, p.partition)] = now_ms
                moves.append(LeaderMove(t.name, p.partition, p.leader, p.leader_epoch, p.preferred_leader))
        return tuple(moves)

    # --- producer ids ---

    def allocate_producer_ids(self, broker_id: int, *, now_ms: int) -> ControllerResult[ProducerIdBlock]:
        """The next block of PRODUCER_ID_BLOCK_SIZE ids for a registered broker. Blocks handed
        out by this controller never overlap, even with several in flight. Raises
        BrokerIdNotRegisteredError, ProducerIdsExhaustedError."""
        self._check_active()
        if self._image.broker(broker_id) is None:
            raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
        first = max(self._reserved_producer_id, self._image.next_producer_id)
        if first + PRODUCER_ID_BLOCK_SIZE - 1 > INT64_MAX:
            raise ProducerIdsExhaustedError("no producer ids left")
        block = ProducerIdBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        self._reserved_producer_id = first + PRODUCER_ID_BLOCK_SIZE
        return self._result([block], block)

    # --- internal topics ---

    def ensure_internal_topics(self, now_ms: int) -> ControllerResult[CreateTopicResponse | None]:
        """Create `__consumer_offsets` (16 partitions, RF offsets_replication_factor,
        cleanup_policy=compact, internal) once that many brokers are unfenced and it neither
        exists nor is being created. Otherwise an empty result (response None)."""
        self._check_active()
        rf = self.offsets_replication_factor
        if self._image.topic(OFFSETS_TOPIC) is not None or self._pending_tag(("topic", OFFSETS_TOPIC), now_ms) is not None:
            return ControllerResult((), None)
        if len(self._image.placeable_broker_ids()) < rf:
            return ControllerResult((), None)
        return self.create_topic(
            OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, rf, {"cleanup_policy": "compact"}, internal=True, now_ms=now_ms
        )

    def ensure_transaction_state_topic(self, now_ms: int) -> ControllerResult[CreateTopicResponse | None]:
        """Create `__transaction_state` (TRANSACTION_STATE_TOPIC_PARTITIONS partitions, RF as
        `__consumer_offsets`, cleanup_policy=compact, internal) unless it exists or is being
        created. Asked for by a broker on the first transactional FindCoordinator, as Kafka
        creates it on first use (so clusters without transactions carry no such partitions).
        Fewer unfenced brokers than the RF: the RF is lowered to their count (at least 1)."""
        self._check_active()
        name = TRANSACTION_STATE_TOPIC
        if self._image.topic(name) is not None or self._pending_tag(("topic", name), now_ms) is not None:
            return ControllerResult((), None)
        brokers = len(self._image.unfenced_broker_ids())
        if brokers < 1:
            return ControllerResult((), None)
        rf = min(self.offsets_replication_factor, brokers)
        return self.create_topic(name, TRANSACTION_STATE_TOPIC_PARTITIONS, rf, {"cleanup_policy": "compact"},
                                 internal=True, now_ms=now_ms)

    # --- ACLs and SCRAM credentials ---

    def create_acls(self, acls: list[Any], *, now_ms: int) -> ControllerResult[list[dict[str, Any]]]:
        """Add ACL bindings (plain maps or AclBindings). Response: one entry per input, {} or
        {"error": wire error}. Raises InvalidRequestError (not a list, more than MAX_ACL_ITEMS)."""
        self._check_active()
        if not isinstance(acls, (list, tuple)) or len(acls) > MAX_ACL_ITEMS:
            raise InvalidRequestError(f"acls must be a list of at most {MAX_ACL_ITEMS} bindings", field="acls")
        existing = set(self._image.acls.values())
        results: list[dict[str, Any]] = []
        records: list[Record] = []
        new: list[AclBinding] = []
        for item in acls:
            try:
                binding = item if isinstance(item, AclBinding) else AclBinding.from_obj(item)
            except RaftlogError as exc:
                results.append({"error": exc.to_wire()})
                continue
            results.append({})
            if binding in existing or binding in new or self._pending_tag(("acl", binding), now_ms) is not None:
                continue
            new.append(binding)
            records.append(Acl.of(_b64(self._random_bytes(16)), binding))
        result = self._result(records, results)
        for binding in new:
            self._mark(("acl", binding), result.envelopes[0], now_ms)
        return result

    def delete_acls(self, filters: list[Any], *, now_ms: int) -> ControllerResult[list[dict[str, Any]]]:
        """Remove every ACL the filters match. Response: per filter {"acls": [binding maps]}
        or {"error"}; an ACL matched by several filters is listed under the first."""
        self._check_active()
        if not isinstance(filters, (list, tuple)) or len(filters) > MAX_ACL_ITEMS:
            raise InvalidRequestError(f"filters must be a list of at most {MAX_ACL_ITEMS} filters", field="filters")
        results: list[dict[str, Any]] = []
        taken: set[str] = set()
        removals: list[str] = []
        for item in filters:
            try:
                f = item if isinstance(item, AclFilter) else AclFilter.from_obj(item)
            except RaftlogError as exc:
                results.append({"error": exc.to_wire()})
                continue
            matched = []
            for acl_id, binding in self._image.acl_bindings():
                if acl_id in taken or not f.matches(binding):
                    continue
                if self._pending_tag(("acl-delete", acl_id), now_ms) is not None:
                    continue  # another delete is removing it
                taken.add(acl_id)
                removals.append(acl_id)
                matched.append(binding.to_obj())
            results.append({"acls": matched})
        envelopes = tuple(
            self._envelope([RemoveAcl(i) for i in removals[start:start + MAX_ACLS_PER_ENVELOPE]])
            for start in range(0, len(removals), MAX_ACLS_PER_ENVELOPE)
        )
        for envelope in envelopes:
            for record in envelope.records:
                assert isinstance(record, RemoveAcl)
                self._mark(("acl-delete", record.acl_id), envelope, now_ms)
        return ControllerResult(envelopes, results)

    def alter_scram_credentials(
        self, upsertions: list[Any], deletions: list[Any], *, now_ms: int
    ) -> ControllerResult[list[dict[str, Any]]]:
        """Set and remove users' SCRAM credentials (Kafka's AlterUserScramCredentials).
        Upsertions are {name, mechanism, iterations, salt, salted_password}; deletions
        {name, mechanism}. Response: one entry per user named, in first-seen order: {"user"}
        or {"user", "error"}. A user with any failed alteration has none applied."""
        self._check_active()
        if not isinstance(upsertions, (list, tuple)) or not isinstance(deletions, (list, tuple)):
            raise InvalidRequestError("upsertions and deletions must be lists", field="upsertions")
        if len(upsertions) + len(deletions) > MAX_ACL_ITEMS:
            raise InvalidRequestError(f"at most {MAX_ACL_ITEMS} alterations per request", field="upsertions")
        order: list[str] = []
        errors: dict[str, RaftlogError] = {}
        planned: dict[str, list[Record]] = {}
        seen: dict[tuple[str, str], int] = {}
        for kind, items in (("upsert", upsertions), ("delete", deletions)):
            for item in items:
                name = item.get("name") if isinstance(item, Mapping) else None
                if type(name) is not str or not name:
                    raise InvalidRequestError("every alteration names a user", field="name")
                if name not in order:
                    order.append(name)
                mechanism = item.get("mechanism")
                seen[(name, str(mechanism))] = seen.get((name, str(mechanism)), 0) + 1
                if name in errors:
                    continue
                try:
                    planned.setdefault(name, []).append(self._scram_record(kind, name, mechanism, item))
                except RaftlogError as exc:
                    errors[name] = exc
        for (name, mechanism), count in seen.items():
            if count > 1:
                errors[name] = DuplicateResourceError(f"user {name!r} has {count} alterations for {mechanism}")
        records = [r for name in order if name not in errors for r in planned.get(name, [])]
        response = [
            {"user": name, "error": errors[name].to_wire()} if name in errors else {"user": name} for name in order
        ]
        return self._result(records, response)

    def _scram_record(self, kind: str, name: str, mechanism: Any, item: Mapping[str, Any]) -> Record:
        if type(mechanism) is not str or mechanism not in SCRAM_MECHANISMS:
            raise UnsupportedSaslMechanismError(f"mechanism {mechanism!r:.40} is not a SCRAM mechanism",
                                                enabled=sorted(SCRAM_MECHANISMS))
        if kind == "delete":
            if self._image.scram_credential(name, mechanism) is None:
                raise ResourceNotFoundError(f"user {name!r} has no {mechanism} credential")
            return RemoveUserScramCredential(name, mechanism)
        iterations, salt, salted = item.get("iterations"), item.get("salt"), item.get("salted_password")
        if type(iterations) is not int or type(salt) is not bytes or type(salted) is not bytes:
            raise UnacceptableCredentialError("an upsertion has int iterations and bytes salt and salted_password")
        try:
            return UserScramCredential.of(name, credential_from_salted_password(mechanism, salt, salted, iterations))
        except InvalidRecordError as exc:  # e.g. a name too long for the record
            raise UnacceptableCredentialError(exc.message) from None

    def ensure_bootstrap_credentials(
        self, credentials: list[UserScramCredential] | tuple[UserScramCredential, ...], *, now_ms: int
    ) -> ControllerResult[None]:
        """Seed an empty credential store with the bootstrap users (`raftlog cluster up
        --secure` writes their salted keys, never a password, to each node's
        bootstrap_credentials file; Kafka's `kafka-storage format --add-scram`). Nothing to do
        once any user has a credential: later changes are the operators' (and removing every
        user brings the bootstrap admin back, so nobody is locked out)."""
        self._check_active()
        if not credentials or self._image.scram_credentials or self._pending_tag(("bootstrap-scram",), now_ms) is not None:
            return ControllerResult((), None)
        result = self._result(list(credentials), None)
        self._mark(("bootstrap-scram",), result.envelopes[0], now_ms)
        return result


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

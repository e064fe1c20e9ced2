"""The metadata service's typed port (issue 48): topics (CreateTopics, DeleteTopics,
CreatePartitions, DescribeTopicPartitions: raftlog/node/kafka/admin.py, describe.py), configs
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: kafka/configs.py), client quotas
(kafka/quotas.py) and features (kafka/features.py); ACLs and SCRAM users (the Kafka
listener's DescribeAcls, CreateAcls, DeleteAcls, DescribeUserScramCredentials,
AlterUserScramCredentials: raftlog/node/kafka/acls.py), preferred-leader elections, replica moves and
the quorum's status (ElectLeaders: kafka/elect.py, Alter/ListPartitionReassignments:
kafka/reassign.py, DescribeQuorum: kafka/describe.py), behind the
one ACL guard (raftlog/node/guarded_metadata.py). Served by metadata/service.py
`MetadataService`: describes from this node's image, changes decided by the active controller
(forwarded there as every admin op).

A whole-request failure is raised (an exception of raftlog/base/errors.py); a per-item one is
that item's `error`, one item per item asked, in the order asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import RaftlogError

if TYPE_CHECKING:
    from metadata.image import TopicImage

__all__ = ["ClusterPort", "ClusterView", "PartitionView", "TopicView", "ConfigEntry", "ConfigPort", "ElectionResult", "FeatureUpdate", "MetadataPort", "NewPartitions",
           "NewTopic", "QuotaAlteration", "QuotaAltered", "QuotaEntry", "QuotaFilter", "QuotaOp", "Reassignment",
           "DeletedAcls", "ScramCredential", "ScramDeletion", "ScramUpsertion", "ScramUser", "SecurityPort",
           "TopicCreated", "TopicDeleted", "TopicDescription", "TopicPort", "UserAltered"]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: None partitions / replication factor take the cluster's defaults;
    `assignments` (one replica list per partition, the first the preferred leader) instead of both."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicCreated:
    name: str
    topic_id: str | None = None
    replicas: Sequence[Sequence[int]] = ()  # each partition's replicas
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    name: str
    topic_id: str | None = None
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow `name` to `total` partitions (manual `assignments`: one replica list per new one)."""

    name: str
    total: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic as this node's image has it (`topic` None: unknown here), or its refusal."""

    name: str
    topic: TopicImage | None = None
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as the Metadata answer has it: the leader (-1: none) and epoch this node
    vouches for, or why it is offline."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: Sequence[int]
    preferred_leader: int | None = None
    offline_reason: str | None = None


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str | None = None
    internal: bool = False
    configs: Mapping[str, str] = field(default_factory=dict)  # only the keys set on the topic
    partitions: Sequence[PartitionView] = ()
    error: RaftlogError | None = None  # UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, a refusal


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Kafka's Metadata: the cluster, its controller (None: none this node can vouch for,
    `controller_problem` says why), its brokers (native listeners) and the topics asked."""

    cluster_id: str
    controller_id: int | None
    controller_problem: str | None
    max_request_bytes: int
    brokers: Sequence[Mapping[str, Any]]
    topics: Sequence[TopicView]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic config (our key, e.g. `retention_ms`): its value, default or set, type and doc."""

    name: str
    value: str | None
    is_default: bool
    type: str
    doc: str


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """DescribeClientQuotas' component: entity type, match type (0 exact, 1 default, 2 any), name."""

    entity_type: str
    match_type: int
    match: str | None = None


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    entity: Mapping[str, str | None]  # entity type -> name (None: the default entity)
    values: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float | None
    remove: bool = False


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    entity: Mapping[str, str | None]
    ops: Sequence[QuotaOp]


@dataclass(frozen=True, slots=True)
class QuotaAltered:
    entity: Mapping[str, str | None]
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int  # 1 upgrade, 2 safe downgrade, 3 unsafe downgrade (Kafka's)


@dataclass(frozen=True, slots=True)
class DeletedAcls:
    """What one delete filter removed (an ACL matched by several filters: under the first)."""

    acls: Sequence[AclBinding] = ()
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramUser:
    user: str
    credentials: Sequence[ScramCredential] = ()
    error: RaftlogError | None = None  # RESOURCE_NOT_FOUND: no credentials


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A salted password (never the password): only keys derived from it reach the log."""

    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class UserAltered:
    user: str
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition of a preferred-leader election: done (the leader accepted), or its error
    (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ...)."""

    topic: str
    partition: int
    error: RaftlogError | None = None


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition's replica move under way: its replicas now, those being added and removed."""

    topic: str
    partition: int
    replicas: Sequence[int]
    adding_replicas: Sequence[int]
    removing_replicas: Sequence[int]


class ClusterPort(Protocol):
    """Operator ops on the cluster (Kafka's ElectLeaders, DescribeQuorum)."""

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectionResult]:
        """Preferred-leader elections; None: every partition off its preferred replica."""

    async def alter_reassignments(self, moves: Sequence[tuple[str, int, Sequence[int] | None]],
                                  ) -> list[RaftlogError | None]:
        """(topic, partition, target replicas; None cancels the move under way): one answer each."""

    async def list_reassignments(self, partitions: Sequence[tuple[str, int]] | None) -> list[Reassignment]:
        """The moves under way (of these partitions; None: of every partition)."""

    def quorum_status(self) -> Mapping[str, Any] | None:
        """The metadata quorum as this node sees it (None: not a voter)."""


class SecurityPort(Protocol):
    async def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]: ...

    async def create_acls(self, acls: Sequence[AclBinding]) -> list[RaftlogError | None]: ...

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeletedAcls]: ...

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramUser]:
        """None: every user with a credential."""

    async def alter_scram_users(self, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramDeletion]) -> list[UserAltered]:
        """One answer per user named, in first-seen order; a user with a failed alteration has none applied."""


class TopicPort(Protocol):
    """Topics, one answer per topic asked, each created / deleted / grown in turn."""

    async def create_topics(self, topics: Sequence[NewTopic]) -> list[TopicCreated]: ...

    async def wait_leaders(self, names: Sequence[str], timeout_s: float) -> bool:
        """Wait until every partition of each named topic has a leader in this node's image
        (Kafka's CreateTopics answers once the new partitions' leaders are assigned); False
        at `timeout_s` (the topics stay created). One wait on the image's change event."""

    async def delete_topics(self, names: Sequence[str]) -> list[TopicDeleted]: ...

    async def create_partitions(self, changes: Sequence[NewPartitions], *,
                                validate_only: bool) -> list[RaftlogError | None]: ...

    async def cluster_metadata(self, names: Sequence[str] | None, *, include_internal: bool) -> ClusterView:
        """Kafka's Metadata (None: every complete topic), after a short read-your-writes wait
        for names not known yet; a topic unknown or refused is answered by its error (the
        guard's refusals after the others)."""

    async def describe_topics(self, names: Sequence[str], *, listing: bool) -> list[TopicDescription]:
        """From this node's image; `listing`: the names are every topic (the guard leaves out
        those the principal may not describe, rather than refusing them)."""


class ConfigPort(Protocol):
    """Topic, broker and group configs, client quotas, features (changes decided by the controller)."""

    async def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every key; raises UNKNOWN_TOPIC_OR_PARTITION."""

    async def alter_topic_configs(self, name: str, set_: Mapping[str, str], delete: Sequence[str]) -> None: ...

    def broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        """The dynamic broker configs by resource (a broker id, or "" for the cluster default)."""

    async def alter_broker_configs(self, resource: str, set_: Mapping[str, str], delete: Sequence[str]) -> None: ...

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """The dynamic configs set on a group (Kafka 4's GROUP resource; metadata/group_config.py)."""

    async def alter_group_configs(self, group_id: str, set_: Mapping[str, str], delete: Sequence[str]) -> None:
        """Raises InvalidConfigError naming the key, InvalidRequestError; nothing is stored then."""

    async def describe_client_quotas(self, filters: Sequence[QuotaFilter], *, strict: bool) -> list[QuotaEntry]: ...

    async def alter_client_quotas(self, alterations: Sequence[QuotaAlteration], *,
                                  validate_only: bool) -> list[QuotaAltered]: ...

    async def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> None: ...


class MetadataPort(ClusterPort, SecurityPort, TopicPort, ConfigPort, Protocol):
    """What the listeners call typed of the metadata service."""

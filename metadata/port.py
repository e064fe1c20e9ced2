"""The metadata service's typed port (issue 48), first part: ACLs and SCRAM users (the Kafka
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
from dataclasses import dataclass
from typing import Any, Protocol

from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import RaftlogError

__all__ = ["ClusterPort", "ElectionResult", "MetadataPort", "Reassignment", "DeletedAcls", "ScramCredential", "ScramDeletion", "ScramUpsertion", "ScramUser", "SecurityPort",
           "UserAltered"]


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


class MetadataPort(ClusterPort, SecurityPort, Protocol):
    """What the listeners call typed of the metadata service so far."""

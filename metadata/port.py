"""The metadata service's typed port (issue 48), first part: ACLs and SCRAM users, what both
front doors call (the Kafka listener's DescribeAcls, CreateAcls, DeleteAcls,
DescribeUserScramCredentials, AlterUserScramCredentials: raftlog/node/kafka/acls.py), behind
the one ACL guard (raftlog/node/guarded_metadata.py). Served by metadata/service.py
`MetadataService`: describes from this node's image, changes decided by the active controller
(forwarded there as every admin op).

A whole-request failure is raised (an exception of raftlog/base/errors.py); a per-item one is
that item's `error`, one item per item asked, in the order asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import RaftlogError

__all__ = ["DeletedAcls", "ScramCredential", "ScramDeletion", "ScramUpsertion", "ScramUser", "SecurityPort",
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


class SecurityPort(Protocol):
    async def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]: ...

    async def create_acls(self, acls: Sequence[AclBinding]) -> list[RaftlogError | None]: ...

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeletedAcls]: ...

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramUser]:
        """None: every user with a credential."""

    async def alter_scram_users(self, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramDeletion]) -> list[UserAltered]:
        """One answer per user named, in first-seen order; a user with a failed alteration has none applied."""

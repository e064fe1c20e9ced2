"""The metadata port (metadata/port.py) behind one principal's ACLs, for the listeners that
call it typed (the Kafka listener's ACL and SCRAM APIs, ElectLeaders, DescribeQuorum): each op's
rule is the one the native op of the same name declares in raftlog/node/authorize.py
`POLICIES` (a `ResourceRule`: DESCRIBE on the cluster to describe, ALTER to change, ALTER on
the cluster to elect leaders, `cluster_status`'s DESCRIBE on the cluster for the quorum; listed in
docs/reference/native-protocol.md), checked before the port is called, so a refused request
has no effect and raises its refusal (CLUSTER_AUTHORIZATION_FAILED).

    admin = GuardedMetadata(metadata_service, guard.access(principal, host))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metadata.port import (
    DeletedAcls,
    ElectionResult,
    MetadataPort,
    Reassignment,
    ScramDeletion,
    ScramUpsertion,
    ScramUser,
    UserAltered,
)
from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import RaftlogError
from raftlog.node.authorize import POLICIES, Access, ResourceRule

__all__ = ["GuardedMetadata"]


class GuardedMetadata:
    """See the module docstring. Implements `MetadataPort`."""

    def __init__(self, port: MetadataPort, access: Access) -> None:
        self._port = port
        self._access = access

    def _require(self, op: str) -> None:
        rule = POLICIES[op]
        assert isinstance(rule, ResourceRule) and rule.field is None, op
        rule.require(self._access)

    def authorize_elections(self) -> None:
        """Raises the refusal unless the principal may elect leaders (ALTER on the cluster):
        the unclean kind recovers partitions one by one, and a refused request must learn
        nothing of them."""
        self._require("elect_leaders")

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectionResult]:
        self._require("elect_leaders")
        return await self._port.elect_leaders(partitions)

    async def alter_reassignments(self, moves: Sequence[tuple[str, int, Sequence[int] | None]],
                                  ) -> list[RaftlogError | None]:
        self._require("alter_partition_reassignments")
        return await self._port.alter_reassignments(moves)

    async def list_reassignments(self, partitions: Sequence[tuple[str, int]] | None) -> list[Reassignment]:
        self._require("list_partition_reassignments")
        return await self._port.list_reassignments(partitions)

    def quorum_status(self) -> Mapping[str, Any] | None:
        self._require("cluster_status")  # DESCRIBE on the cluster, as Kafka's DescribeQuorum
        return self._port.quorum_status()

    async def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        self._require("describe_acls")
        return await self._port.describe_acls(acl_filter)

    async def create_acls(self, acls: Sequence[AclBinding]) -> list[RaftlogError | None]:
        self._require("create_acls")
        return await self._port.create_acls(acls)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[DeletedAcls]:
        self._require("delete_acls")
        return await self._port.delete_acls(filters)

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramUser]:
        self._require("describe_user_scram_credentials")
        return await self._port.describe_scram_users(users)

    async def alter_scram_users(self, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramDeletion]) -> list[UserAltered]:
        self._require("alter_user_scram_credentials")
        return await self._port.alter_scram_users(upsertions, deletions)

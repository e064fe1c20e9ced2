"""The metadata port (metadata/port.py) behind one principal's ACLs, for the listeners that
call it typed (the Kafka listener's ACL and SCRAM APIs, raftlog/node/kafka/acls.py): each op's
rule is the one the native op of the same name declares in raftlog/node/authorize.py
`POLICIES` (a `ResourceRule`: DESCRIBE on the cluster to describe, ALTER to change; listed in
docs/reference/native-protocol.md), checked before the port is called, so a refused request
has no effect and raises its refusal (CLUSTER_AUTHORIZATION_FAILED).

    security = GuardedSecurity(metadata_service, guard.access(principal, host))
"""

from __future__ import annotations

from collections.abc import Sequence

from metadata.port import DeletedAcls, ScramDeletion, ScramUpsertion, ScramUser, SecurityPort, UserAltered
from raftlog.base.acl import AclBinding, AclFilter
from raftlog.base.errors import RaftlogError
from raftlog.node.authorize import POLICIES, Access, ResourceRule

__all__ = ["GuardedSecurity"]


class GuardedSecurity:
    """See the module docstring. Implements `SecurityPort`."""

    def __init__(self, port: SecurityPort, access: Access) -> None:
        self._port = port
        self._access = access

    def _require(self, op: str) -> None:
        rule = POLICIES[op]
        assert isinstance(rule, ResourceRule) and rule.field is None, op
        rule.require(self._access)

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

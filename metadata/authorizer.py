"""The ACL check: may this principal, from this host, do this operation on this resource? (pure)

    authorizer = Authorizer(image.acls.values(), super_users={"User:admin"})
    authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "orders")

Kafka's rules (its StandardAuthorizer), in order:
1. A super user may do everything.
2. The ACLs that apply to the resource are its literal ones, the literal "*" ones of its type,
   and the prefixed ones whose prefix starts its name. If none apply at all (to anyone),
   the answer is `allow_if_no_acls` (Kafka's allow.everyone.if.no.acl.found; false by default).
3. Deny wins: an applying DENY for the principal (or "User:*"), the host (or "*") and the
   operation (or ALL) refuses, whatever allows it.
4. An applying ALLOW for the principal, host and the operation (or ALL) allows; DESCRIBE is
   also allowed by READ, WRITE, DELETE or ALTER, and DESCRIBE_CONFIGS by ALTER_CONFIGS.
5. Otherwise refused.

An Authorizer is immutable and built once per metadata image (ACLs change rarely); lookups
are dictionary hits: literal names by name, prefixes by each length that some prefix has.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from raftlog.base.acl import WILDCARD, AclBinding, Operation, PatternType, Permission, ResourceType

__all__ = ["Authorizer", "IMPLIED_BY"]

# operation asked for -> the ALLOW operations that grant it (ALL grants everything)
IMPLIED_BY: Final = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


class _TypeIndex:
    """The bindings of one resource type, indexed by how they match a name."""

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        self.prefix_lengths: list[int] = []

    def add(self, binding: AclBinding) -> None:
        table = self.literal if binding.pattern_type is PatternType.LITERAL else self.prefixed
        table.setdefault(binding.resource_name, []).append(binding)

    def freeze(self) -> None:
        self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def applying(self, name: str) -> list[AclBinding]:
        out = list(self.literal.get(name, ()))
        if name != WILDCARD:
            out.extend(self.literal.get(WILDCARD, ()))
        for length in self.prefix_lengths:
            if length > len(name):
                break
            out.extend(self.prefixed.get(name[:length], ()))
        return out


class Authorizer:
    """Immutable. `authorize` is a pure function of its arguments and the bindings."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acls: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_if_no_acls
        self._by_type: dict[ResourceType, _TypeIndex] = {}
        count = 0
        for binding in bindings:
            self._by_type.setdefault(binding.resource_type, _TypeIndex()).add(binding)
            count += 1
        for index in self._by_type.values():
            index.freeze()
        self.acl_count = count

    def __repr__(self) -> str:
        return f"Authorizer({self.acl_count} ACLs, super_users={sorted(self.super_users)})"

    def applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding that applies to the resource (rule 2), for any principal."""
        index = self._by_type.get(resource_type)
        return [] if index is None else index.applying(name)

    def allows_some(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """True iff some ALLOW binding of `resource_type` grants `operation` (or ALL) to the
        principal from the host (Kafka's "WRITE on any topic" test for idempotent producers;
        like Kafka's, a DENY elsewhere does not cancel it). Super users: always."""
        if principal in self.super_users:
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return False
        granting = IMPLIED_BY.get(operation, frozenset({operation}))
        for table in (index.literal, index.prefixed):
            for bindings in table.values():
                for acl in bindings:
                    if (acl.permission is Permission.ALLOW and acl.principal in (principal, "User:*")
                            and acl.host in (WILDCARD, host)
                            and (acl.operation is Operation.ALL or acl.operation in granting)):
                        return True
        return False

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """True iff `principal` connected from `host` may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        acls = self.applying(resource_type, name)
        if not acls:
            return self.allow_if_no_acls
        granting = IMPLIED_BY.get(operation, frozenset({operation}))
        allowed = False
        for acl in acls:
            if acl.principal != principal and acl.principal != "User:*":
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission is Permission.DENY:
                if acl.operation is operation or acl.operation is Operation.ALL:
                    return False
            elif acl.operation is Operation.ALL or acl.operation in granting:
                allowed = True
        return allowed

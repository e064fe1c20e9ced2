"""ACLs in Kafka's model: the vocabulary clients, the CLI and nodes share (pure).

    AclBinding(resource_type, resource_name, pattern_type, principal, host, operation, permission)
      "User:alice may READ the topics whose names start with 'orders-' from any host"
      = AclBinding(TOPIC, "orders-", PREFIXED, "User:alice", "*", READ, ALLOW)
    AclFilter(...)   the same fields, each may be ANY/None: what describe and delete match

The checks against these bindings (deny wins, super users, implied DESCRIBE) are
`metadata/authorizer.py`'s; the records that store them are `metadata/records.py`'s `Acl`.

Rules (each refused with InvalidRequestError naming the field, as Kafka's CreateAcls does):
* resource types: topic, group, cluster, transactional_id; pattern types literal and prefixed; the cluster's
  one resource is named "kafka-cluster" and is literal; a literal "*" names every resource
  of its type;
* principals are "User:<name>" or "User:*" (everyone, including User:ANONYMOUS);
* host is "*" or one IP address (stored in its canonical text form);
* each resource type allows Kafka's operations for it (kafka-acls' table), plus ALL;
* names and values are case-insensitive on input ("DescribeConfigs", "describe_configs",
  "DESCRIBE-CONFIGS") and lowercase snake_case when stored.

The KAFKA_CODES tables give Kafka's wire numbers (CreateAcls/DescribeAcls/DeleteAcls) for
each enum member.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from raftlog.base.errors import InvalidRequestError

__all__ = [
    "ANONYMOUS",
    "AclBinding",
    "AclFilter",
    "CLUSTER_NAME",
    "KAFKA_CODES",
    "MAX_RESOURCE_NAME_CHARS",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
    "VALID_OPERATIONS",
    "WILDCARD",
    "parse_enum",
]

CLUSTER_NAME: Final = "kafka-cluster"
WILDCARD: Final = "*"
ANONYMOUS: Final = "User:ANONYMOUS"  # the principal of an unauthenticated connection
MAX_RESOURCE_NAME_CHARS: Final = 255
MAX_PRINCIPAL_CHARS: Final = 260


class ResourceType(enum.Enum):
    ANY = "any"
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    TRANSACTIONAL_ID = "transactional_id"


class PatternType(enum.Enum):
    ANY = "any"  # filters only: any pattern type, exact name
    MATCH = "match"  # filters only: every binding that applies to the name
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(enum.Enum):
    ANY = "any"  # filters only
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster_action"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"
    IDEMPOTENT_WRITE = "idempotent_write"


class Permission(enum.Enum):
    ANY = "any"  # filters only
    DENY = "deny"
    ALLOW = "allow"


KAFKA_CODES: Final[Mapping[type, Mapping[enum.Enum, int]]] = {
    ResourceType: {ResourceType.ANY: 1, ResourceType.TOPIC: 2, ResourceType.GROUP: 3, ResourceType.CLUSTER: 4,
                   ResourceType.TRANSACTIONAL_ID: 5},
    PatternType: {PatternType.ANY: 1, PatternType.MATCH: 2, PatternType.LITERAL: 3, PatternType.PREFIXED: 4},
    Operation: {
        Operation.ANY: 1, Operation.ALL: 2, Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5,
        Operation.DELETE: 6, Operation.ALTER: 7, Operation.DESCRIBE: 8, Operation.CLUSTER_ACTION: 9,
        Operation.DESCRIBE_CONFIGS: 10, Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12,
    },
    Permission: {Permission.ANY: 1, Permission.DENY: 2, Permission.ALLOW: 3},
}  # fmt: skip

# kafka-acls' table of the operations each resource type has (ALL always applies).
VALID_OPERATIONS: Final[Mapping[ResourceType, frozenset[Operation]]] = {
    ResourceType.TOPIC: frozenset({
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
        Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL,
    }),
    # DESCRIBE_CONFIGS / ALTER_CONFIGS: Kafka 4's group configs (kafka-configs --entity-type groups)
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS, Operation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.WRITE, Operation.DESCRIBE, Operation.ALL}),
    ResourceType.CLUSTER: frozenset({
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE, Operation.ALL,
    }),
}  # fmt: skip

E = TypeVar("E", bound=enum.Enum)


def parse_enum(cls: type[E], value: Any, field: str) -> E:
    """`value` as a member of `cls`: a member, its stored value, its name, or Kafka's spelling
    (case, '-' and '_' ignored), or Kafka's wire number. Raises InvalidRequestError."""
    if isinstance(value, cls):
        return value
    if type(value) is int:
        for member, code in KAFKA_CODES[cls].items():
            if code == value:
                return member  # type: ignore[return-value]
    elif isinstance(value, str):
        key = value.replace("-", "").replace("_", "").lower()
        for member in cls:
            if member.value.replace("_", "") == key:
                return member
    names = ", ".join(m.value for m in cls)
    raise InvalidRequestError(f"{field} {value!r:.40} is not one of {names}", field=field)


def _check_principal(principal: Any, field: str = "principal") -> str:
    if type(principal) is not str or not principal.startswith("User:") or len(principal) <= len("User:"):
        raise InvalidRequestError(f"{field} must be 'User:<name>' or 'User:*', got {principal!r:.60}", field=field)
    if len(principal) > MAX_PRINCIPAL_CHARS or any(ord(c) < 0x20 for c in principal):
        raise InvalidRequestError(f"{field} is too long or holds control characters", field=field)
    return principal


def _check_filter_string(value: Any, field: str, max_chars: int) -> str:
    """A filter's string: compared with the ACLs' as written (Kafka's AccessControlEntryFilter
    parses nothing, so a filter principal '*' is valid and matches no ACL)."""
    if type(value) is not str or len(value) > max_chars or any(ord(c) < 0x20 for c in value):
        raise InvalidRequestError(f"{field} must be a string of at most {max_chars} printable characters",
                                  field=field)
    return value


def _check_host(host: Any, field: str = "host") -> str:
    if host == WILDCARD:
        return host
    if type(host) is not str:
        raise InvalidRequestError(f"{field} must be '*' or an IP address", field=field)
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise InvalidRequestError(f"{field} must be '*' or an IP address, got {host!r:.60}", field=field) from None


def _check_name(name: Any, field: str = "resource_name") -> str:
    if type(name) is not str or not 1 <= len(name) <= MAX_RESOURCE_NAME_CHARS:
        raise InvalidRequestError(f"{field} must be 1..{MAX_RESOURCE_NAME_CHARS} characters", field=field)
    if any(ord(c) < 0x20 for c in name):
        raise InvalidRequestError(f"{field} holds control characters", field=field)
    return name


@dataclass(frozen=True)
class AclBinding:
    """One ACL. Construct with members or with any spelling `parse_enum` takes; a constructed
    binding is valid and normalised (equal ACLs compare equal)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        rt = parse_enum(ResourceType, self.resource_type, "resource_type")
        pt = parse_enum(PatternType, self.pattern_type, "pattern_type")
        op = parse_enum(Operation, self.operation, "operation")
        perm = parse_enum(Permission, self.permission, "permission")
        if rt is ResourceType.ANY:
            raise InvalidRequestError("an ACL names one resource type, not 'any'", field="resource_type")
        if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequestError("an ACL's pattern type is literal or prefixed", field="pattern_type")
        if op is Operation.ANY:
            raise InvalidRequestError("an ACL names one operation (or 'all'), not 'any'", field="operation")
        if perm is Permission.ANY:
            raise InvalidRequestError("an ACL either allows or denies", field="permission")
        name = _check_name(self.resource_name)
        if rt is ResourceType.CLUSTER and (name != CLUSTER_NAME or pt is not PatternType.LITERAL):
            raise InvalidRequestError(
                f"the cluster resource is the literal name {CLUSTER_NAME!r}", field="resource_name"
            )
        if op not in VALID_OPERATIONS[rt]:
            allowed = ", ".join(sorted(o.value for o in VALID_OPERATIONS[rt]))
            raise InvalidRequestError(
                f"operation {op.value} does not apply to a {rt.value}; it takes {allowed}", field="operation"
            )
        for name_, value in (
            ("resource_type", rt), ("pattern_type", pt), ("operation", op), ("permission", perm),
            ("principal", _check_principal(self.principal)), ("host", _check_host(self.host)),
        ):  # fmt: skip
            object.__setattr__(self, name_, value)

    def to_obj(self) -> dict[str, str]:
        """The plain map the native protocol and the metadata record carry."""
        return {
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_obj(cls, obj: Any) -> "AclBinding":
        """Raises InvalidRequestError (a missing, extra or bad field)."""
        return cls(**_fields(obj, _BINDING_FIELDS, required=True))

    def __str__(self) -> str:
        return (
            f"{self.permission.value} {self.principal} {self.operation.value} on "
            f"{self.resource_type.value}:{self.pattern_type.value}:{self.resource_name} from {self.host}"
        )


_BINDING_FIELDS: Final = (
    "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission",
)  # fmt: skip


def _fields(obj: Any, names: tuple[str, ...], *, required: bool) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise InvalidRequestError(f"an ACL is a map, got {type(obj).__name__}", field="acl")
    extra = sorted(str(k) for k in obj if k not in names)
    if extra:
        raise InvalidRequestError(f"unknown ACL field(s) {extra}", field=extra[0])
    missing = [n for n in names if n not in obj]
    if required and missing:
        raise InvalidRequestError(f"missing ACL field(s) {missing}", field=missing[0])
    return {n: obj[n] for n in names if n in obj}


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls/DeleteAcls select: ANY (or None for the strings) matches everything.

    pattern_type: LITERAL/PREFIXED match bindings of that type with exactly `resource_name`;
    ANY matches any pattern type with exactly that name; MATCH matches every binding that
    applies to the resource `resource_name` (its literal, the "*" wildcard, and every prefix
    of it), Kafka's rule."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", parse_enum(ResourceType, self.resource_type, "resource_type"))
        object.__setattr__(self, "pattern_type", parse_enum(PatternType, self.pattern_type, "pattern_type"))
        object.__setattr__(self, "operation", parse_enum(Operation, self.operation, "operation"))
        object.__setattr__(self, "permission", parse_enum(Permission, self.permission, "permission"))
        if self.resource_name is not None:
            _check_name(self.resource_name)
        if self.principal is not None:  # matched as it is written, as Kafka's filters do ('*' selects nothing)
            _check_filter_string(self.principal, "principal", MAX_PRINCIPAL_CHARS)
        if self.host is not None:
            object.__setattr__(self, "host", _check_host(self.host))

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and binding.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and binding.principal != self.principal:
            return False
        if self.host is not None and binding.host != self.host:
            return False
        if self.operation is not Operation.ANY and binding.operation is not self.operation:
            return False
        return self.permission is Permission.ANY or binding.permission is self.permission

    def _matches_pattern(self, binding: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type is PatternType.MATCH:
            if name is None:
                return True
            if binding.pattern_type is PatternType.LITERAL:
                return binding.resource_name in (name, WILDCARD)
            return name.startswith(binding.resource_name)
        if self.pattern_type is not PatternType.ANY and binding.pattern_type is not self.pattern_type:
            return False
        return name is None or binding.resource_name == name

    def to_obj(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_obj(cls, obj: Any) -> "AclFilter":
        """Absent fields match anything. Raises InvalidRequestError."""
        return cls(**{k: v for k, v in _fields(obj, _BINDING_FIELDS, required=False).items() if v is not None})

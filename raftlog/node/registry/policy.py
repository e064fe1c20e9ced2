"""Who may do what in the registry, in Kafka's ACL model (the cluster's ACLs, no second set):
a subject is guarded by the ACLs of its topic — the subject without its `-key` / `-value`
suffix (TopicNameStrategy, the serializers' default); any other subject by a topic of its own
name.

    reading a subject (versions, lookup, compatibility test, its config or mode)  DESCRIBE topic
    registering a schema under it                                                 WRITE topic
    deleting it or a version, setting or deleting its config or mode              ALTER topic
    the global /config and /mode: reading                                          any user
                                  changing                                         ALTER_CONFIGS cluster
    schemas by id, /schemas/types, /subjects (filtered to what the user may DESCRIBE)  any user

Refusals are 403 with Confluent's 40301. Pure: `allowed(operation, resource type, name)` is
the node's authorizer for the caller (principal and host bound).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from raftlog.base.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.node.registry.errors import ForbiddenError

__all__ = ["Allowed", "topic_of", "check_call", "SUBJECT_SUFFIXES"]

Allowed = Callable[[Operation, ResourceType, str], bool]
SUBJECT_SUFFIXES: Final = ("-key", "-value")


def topic_of(subject: str) -> str:
    """The topic whose ACLs guard `subject`."""
    for suffix in SUBJECT_SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def check_call(allowed: Allowed, method: str, path: str, params: tuple[str, ...], writes: bool) -> None:
    """Raise ForbiddenError unless the caller may make this call (route already matched)."""
    section = path.split("/", 2)[1] if path.count("/") >= 1 else ""
    if section in ("subjects", "compatibility") or (section in ("config", "mode") and params):
        if not params:
            return  # the subject listing: filtered by the caller
        subject = params[0]
        if not writes:
            operation = Operation.DESCRIBE
        elif method == "POST" and section == "subjects":
            operation = Operation.WRITE
        else:
            operation = Operation.ALTER
        if not allowed(operation, ResourceType.TOPIC, topic_of(subject)):
            raise ForbiddenError(f"User is denied operation {operation.value} on subject {subject[:200]}")
        return
    if section in ("config", "mode") and writes:
        if not allowed(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            raise ForbiddenError(f"User is denied operation alter_configs on the global {section}")

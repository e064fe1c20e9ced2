"""Sans-I/O admin core (`AdminCore`) and the admin ops both shells' Admins run.

Admin ops are `Call`s to any broker (the node forwards them to the controller); routed
calls (list_offsets) go to a partition's leader. Each op is an `AdminOp`: the request and
how to read its ok answer, so a shell's method is one line (`_op(create_topic_op(...))`).
No I/O, no clock, no threads.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple

from raftlog.base.errors import UnknownTopicOrPartitionError
from raftlog.client.core import Call, ClientCore
from raftlog.client.request import (
    ClusterStatus,
    TopicInfo,
    alter_configs_request,
    cluster_status_request,
    create_partitions_request,
    create_topic_request,
    delete_topic_request,
    metadata_request,
    parse_cluster_status,
    parse_metadata,
    parse_topic,
)

__all__ = [
    "AdminCore",
    "AdminOp",
    "create_topic_op",
    "create_partitions_op",
    "delete_topic_op",
    "describe_topics_op",
    "list_topics_op",
    "alter_configs_op",
    "cluster_status_op",
]


class AdminCore(ClientCore):
    """Admin ops are Calls to any broker (the node forwards them to the controller).

    An admin op (a call with no route) answered UNKNOWN_TOPIC_OR_PARTITION fails at once:
    the controller that answered it is the authority on which topics exist, so waiting for
    metadata to catch up (why produce retries it) only delays the answer to the deadline.
    Routed calls (list_offsets, fetch to a partition's leader) keep retrying it, since the
    leader's metadata may lag a create made a moment ago.
    """

    def _needs_metadata(self) -> bool:
        return bool(self._wanted_topics)

    def _retry_call(self, c: Call, exc: BaseException, now_ms: int) -> None:
        if c.route is None and isinstance(exc, UnknownTopicOrPartitionError):
            c.error = exc
            c.done = True
            return
        super()._retry_call(c, exc, now_ms)


# ---------------------------------------------------------------- admin ops


class AdminOp(NamedTuple):
    """One admin request (to any broker) and how to read its ok answer."""

    request: dict
    parse: Callable[[dict], Any]


def create_topic_op(name: str, partitions: int, replication_factor: int,
                    configs: dict[str, str] | None = None) -> AdminOp:
    """-> TopicInfo of the new topic."""
    def parse(r: dict) -> TopicInfo:
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})
    return AdminOp(create_topic_request(name, partitions, replication_factor, configs), parse)


def create_partitions_op(name: str, partitions: int, validate_only: bool = False) -> AdminOp:
    """-> TopicInfo of the topic after it grew to `partitions` partitions."""
    def parse(r: dict) -> TopicInfo:
        return parse_topic({"name": r.get("name", name), "partitions": r.get("partitions") or ()})
    return AdminOp(create_partitions_request(name, partitions, validate_only), parse)


def delete_topic_op(name: str) -> AdminOp:
    """-> None."""
    return AdminOp(delete_topic_request(name), lambda r: None)


def describe_topics_op(names: Iterable[str] | None = None) -> AdminOp:
    """-> {name: TopicInfo}; raises the error of the first requested topic that has one."""
    def parse(r: dict) -> dict[str, TopicInfo]:
        md = parse_metadata(r)
        for err in md.topic_errors.values():
            raise err
        return md.topics
    return AdminOp(metadata_request(None if names is None else list(names)), parse)


def list_topics_op(internal: bool = False) -> AdminOp:
    """-> sorted topic names (internal ones too if `internal`)."""
    def parse(r: dict) -> list[str]:
        md = parse_metadata(r)
        return sorted(name for name, t in md.topics.items() if internal or not t.internal)
    return AdminOp(metadata_request(None, internal=internal), parse)


def alter_configs_op(name: str, set_configs: dict[str, str] | None = None,
                     delete_configs: Iterable[str] = ()) -> AdminOp:
    """-> the topic's configs after the change."""
    return AdminOp(alter_configs_request(name, set_configs, delete_configs),
                   lambda r: dict(r.get("configs") or {}))


def cluster_status_op() -> AdminOp:
    """-> ClusterStatus."""
    parse: Callable[[dict], ClusterStatus] = parse_cluster_status
    return AdminOp(cluster_status_request(), parse)

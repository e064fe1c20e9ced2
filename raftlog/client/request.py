"""The client's half of the native protocol (PROTOCOL.md): request builders, response
parsers, and the plain data they return. Pure functions of their arguments; no state.

A builder returns the request map without `v` and `id` (the core adds both when it sends).
A parser takes an answer map, raises the server's error (`check_response`: a registry class
from `raftlog.base.errors`) when it is not ok, and returns typed data; a malformed answer
raises UnknownServerError (an unknown outcome: the request may have taken effect).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from raftlog.base.errors import RaftlogError, UnknownServerError, error_from_wire
from raftlog.client.accumulator import ProducerBatch

__all__ = [
    "PROTOCOL_VERSION",
    "EARLIEST",
    "LATEST",
    "BrokerInfo",
    "PartitionInfo",
    "TopicInfo",
    "ClusterMetadata",
    "ClusterStatus",
    "metadata_request",
    "produce_request",
    "fetch_request",
    "list_offsets_request",
    "init_producer_id_request",
    "create_partitions_request",
    "create_topic_request",
    "delete_records_request",
    "delete_topic_request",
    "alter_configs_request",
    "alter_broker_configs_request",
    "alter_group_configs_request",
    "cluster_status_request",
    "check_response",
    "parse_topic",
    "parse_metadata",
    "parse_cluster_status",
    "parse_list_offsets",
]

PROTOCOL_VERSION = 1
EARLIEST = -2  # list_offsets timestamp specs (PROTOCOL.md)
LATEST = -1


# ---------------------------------------------------------------- plain data


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int | None  # None: no leader right now
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    preferred_leader: int | None = None
    # Why the partition has no live leader as the answering node sees it (then `leader` is
    # None; `last_leader` is what the metadata recorded); None while it is online.
    offline_reason: str | None = None
    last_leader: int | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool = False
    configs: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int | None
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]
    topic_errors: dict[str, RaftlogError]  # requested topics the broker answered with an error
    # Why the answering node cannot vouch for its metadata ("no quorum: ...", "controller
    # unreachable: ..."), or None.
    controller_problem: str | None = None
    max_request_bytes: int | None = None  # the answering node's limit on a request (max_frame_bytes)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str | None
    controller_id: int | None
    controller_epoch: int | None
    commit_index: int | None
    voters: tuple[dict, ...]
    brokers: tuple[dict, ...]
    # "controller": the controller's view; "local": the answering node's last image, because
    # the controller could not be asked (`controller_problem` says why).
    view: str = "controller"
    controller_problem: str | None = None
    answered_by: int | None = None


# ---------------------------------------------------------------- request builders


def metadata_request(topics: Iterable[str] | None, internal: bool = False) -> dict:
    req: dict[str, Any] = {"op": "metadata", "topics": None if topics is None else sorted(topics)}
    if internal:
        req["internal"] = True
    return req


def produce_request(acks: int, timeout_ms: int, batches: Iterable[ProducerBatch]) -> dict:
    return {
        "op": "produce",
        "acks": acks,
        "timeout_ms": timeout_ms,
        "partitions": [
            {"topic": b.topic, "partition": b.partition, "records": b.payload} for b in batches
        ],
    }


def fetch_request(
    max_wait_ms: int, min_bytes: int, max_bytes: int, partitions: Iterable[tuple[str, int, int, int]]
) -> dict:
    """`partitions`: (topic, partition, fetch_offset, max_bytes) tuples."""
    return {
        "op": "fetch",
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "partitions": [
            {"topic": t, "partition": p, "fetch_offset": o, "max_bytes": m}
            for t, p, o, m in partitions
        ],
    }


def list_offsets_request(partitions: Iterable[tuple[str, int, int]], *, read_committed: bool = False) -> dict:
    """`partitions`: (topic, partition, timestamp) with -2 earliest, -1 latest, else ms;
    `read_committed`: latest is the last stable offset."""
    request = {
        "op": "list_offsets",
        "partitions": [{"topic": t, "partition": p, "timestamp": ts} for t, p, ts in partitions],
    }
    if read_committed:
        request["isolation_level"] = 1
    return request


def init_producer_id_request() -> dict:
    return {"op": "init_producer_id"}


def create_topic_request(
    name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None = None
) -> dict:
    return {
        "op": "create_topic",
        "name": name,
        "partitions": partitions,
        "replication_factor": replication_factor,
        "configs": {str(k): str(v) for k, v in (configs or {}).items()},
    }


def create_partitions_request(name: str, partitions: int, validate_only: bool = False) -> dict:
    """Grow topic `name` to `partitions` partitions (the new total)."""
    return {"op": "create_partitions", "name": name, "partitions": partitions,
            "validate_only": validate_only}


def delete_records_request(partitions: Iterable[tuple[str, int, int]]) -> dict:
    """`partitions`: (topic, partition, offset): every record below `offset` goes (-1: up
    to the high watermark). Send it to the partition's leader."""
    return {"op": "delete_records",
            "partitions": [{"topic": t, "partition": p, "offset": o} for t, p, o in partitions]}


def delete_topic_request(name: str) -> dict:
    return {"op": "delete_topic", "name": name}


def alter_configs_request(
    name: str, set_configs: dict[str, str] | None = None, delete: Iterable[str] = ()
) -> dict:
    return {
        "op": "alter_configs",
        "name": name,
        "set": {str(k): str(v) for k, v in (set_configs or {}).items()},
        "delete": [str(k) for k in delete],
    }


def alter_broker_configs_request(
    resource: str, set_configs: dict[str, str] | None = None, delete: Iterable[str] = ()
) -> dict:
    return {
        "op": "alter_broker_configs",
        "resource": resource,
        "set": {str(k): str(v) for k, v in (set_configs or {}).items()},
        "delete": [str(k) for k in delete],
    }


def alter_group_configs_request(
    group_id: str, set_configs: dict[str, str] | None = None, delete: Iterable[str] = ()
) -> dict:
    return {
        "op": "alter_group_configs",
        "group_id": group_id,
        "set": {str(k): str(v) for k, v in (set_configs or {}).items()},
        "delete": [str(k) for k in delete],
    }


def cluster_status_request() -> dict:
    return {"op": "cluster_status"}


# ---------------------------------------------------------------- response parsers


def check_response(msg: Any) -> dict:
    """The response map if it is ok; raises the server's error (error_from_wire) if not.

    A response that is not a map at all raises UnknownServerError.
    """
    if not isinstance(msg, dict):
        raise UnknownServerError(f"response is not a map: {msg!r:.200}")
    err = msg.get("error")
    if err is not None:
        raise error_from_wire(err)
    return msg


def _leader_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and v >= 0 else None


def _offline_reason(p: dict) -> str | None:
    if not p.get("offline"):
        return None
    reason = p.get("offline_reason")
    return reason if isinstance(reason, str) and reason else "no live leader"


def _parse_partitions(topic: str, parts: Iterable[dict]) -> tuple[PartitionInfo, ...]:
    out = [
        PartitionInfo(
            topic=topic,
            partition=p["partition"],
            leader=None if _offline_reason(p) else _leader_or_none(p.get("leader")),
            leader_epoch=p.get("leader_epoch", -1) if p.get("leader_epoch") is not None else -1,
            replicas=tuple(p.get("replicas") or ()),
            preferred_leader=_leader_or_none(p.get("preferred_leader")),
            offline_reason=_offline_reason(p),
            last_leader=_leader_or_none(p.get("leader")),
        )
        for p in parts
    ]
    out.sort(key=lambda p: p.partition)
    return tuple(out)


def parse_topic(t: dict) -> TopicInfo:
    return TopicInfo(
        name=t["name"],
        partitions=_parse_partitions(t["name"], t.get("partitions") or ()),
        internal=bool(t.get("internal", False)),
        configs=dict(t.get("configs") or {}),
    )


def parse_metadata(msg: dict) -> ClusterMetadata:
    """Parse an ok `metadata` response. Raises the server error if it is not ok."""
    msg = check_response(msg)
    try:
        brokers = {
            b["id"]: BrokerInfo(b["id"], b["host"], b["port"], bool(b.get("fenced", False)))
            for b in msg.get("brokers") or ()
        }
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, RaftlogError] = {}
        for t in msg.get("topics") or ():
            if t.get("error") is not None:
                e = t["error"]
                errors[t["name"]] = error_from_wire(e if isinstance(e, dict) else {"code": e})
            else:
                topics[t["name"]] = parse_topic(t)
    except (KeyError, TypeError) as exc:
        raise UnknownServerError(f"malformed metadata response: {exc!r}") from None
    return ClusterMetadata(
        cluster_id=msg.get("cluster_id"),
        controller_id=_leader_or_none(msg.get("controller_id")),
        brokers=brokers,
        topics=topics,
        topic_errors=errors,
        controller_problem=msg.get("controller_problem") if isinstance(msg.get("controller_problem"), str) else None,
        max_request_bytes=msg.get("max_request_bytes") if isinstance(msg.get("max_request_bytes"), int) else None,
    )


def parse_cluster_status(msg: dict) -> ClusterStatus:
    msg = check_response(msg)
    return ClusterStatus(
        cluster_id=msg.get("cluster_id"),
        controller_id=msg.get("controller_id"),
        controller_epoch=msg.get("controller_epoch"),
        commit_index=msg.get("commit_index"),
        voters=tuple(msg.get("voters") or ()),
        brokers=tuple(msg.get("brokers") or ()),
        view=msg.get("view") if msg.get("view") in ("controller", "local") else "controller",
        controller_problem=msg.get("controller_problem") if isinstance(msg.get("controller_problem"), str) else None,
        answered_by=msg.get("answered_by") if isinstance(msg.get("answered_by"), int) else None,
    )


def parse_list_offsets(msg: dict) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (offset, timestamp)}; raises the first partition error."""
    msg = check_response(msg)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for r in msg.get("partitions") or ():
        if r.get("error") is not None:
            raise error_from_wire(r["error"])
        out[(r["topic"], r["partition"])] = (r.get("offset", -1), r.get("timestamp", -1))
    return out

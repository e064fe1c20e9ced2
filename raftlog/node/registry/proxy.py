"""The REST proxy (Confluent REST Proxy v3, and v2 where the same data fits) over a BrokerPort
and the registry's state: (method, path, query, JSON body, content type) -> (status, JSON).
HTTP itself is listener.py's; the v2 consumer instances' routes are in proxy_consumers.py.

    v3  GET  /v3/clusters, /v3/clusters/{c}, /v3/clusters/{c}/brokers
        GET|POST /v3/clusters/{c}/topics            GET|DELETE /v3/clusters/{c}/topics/{t}
        GET  /v3/clusters/{c}/topics/{t}/partitions[/{p}]
        POST /v3/clusters/{c}/topics/{t}/records    (one record; records:batch for many)
        GET  /v3/clusters/{c}/consumer-groups[/{g}[/lags | /lag-summary]]
    v2  GET  /topics, /topics/{t}    POST /topics/{t}[/partitions/{p}]  (records by Content-Type)

A record's key and value are {"type": JSON|BINARY|STRING|AVRO|JSONSCHEMA|PROTOBUF, "data": ...,
"schema_id" | "subject" [+ "schema_version"]}: BINARY is base64, AVRO/JSONSCHEMA/PROTOBUF are
encoded through the registry in Confluent's wire format (serde.py). Without a partition a keyed
record goes where Kafka's default partitioner puts it (murmur2), a keyless one round-robin.
Errors are Confluent's bodies ({"error_code", "message"}); the cluster's refusals map to them
(`kafka_error`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote

import trio

from partition.batch import BatchBuilder
from raftlog.base.errors import RaftlogError
from raftlog.base.murmur2 import partition_for_key
from raftlog.node.registry.broker import BrokerPort
from raftlog.node.registry.consumers import ConsumerInstances
from raftlog.node.registry.errors import (
    BadRequestError, ForbiddenError, KafkaError, KafkaRetriableError, MethodNotAllowedError, NotFoundError,
    PartitionNotFoundError, RecordNotEncodableError, RegistryError, TopicNotFoundError, UnsupportedMediaTypeError,
    error_body,
)
from raftlog.node.registry.serde import EncodeError, encode_with
from raftlog.node.registry.state import RegistryState

__all__ = ["ProxyCall", "ProxyContext", "PROXY_ROUTES", "handle_proxy", "is_proxy_path", "kafka_error",
           "MAX_BATCH_RECORDS"]

MAX_BATCH_RECORDS: Final = 10_000
MAX_TOPIC_CHARS: Final = 249
_TOPIC_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True)
class ProxyCall:
    method: str
    path: str
    query: Mapping[str, str]
    body: Any = None
    principal: str | None = None
    host: str | None = None
    content_type: str = "application/json"


@dataclass
class ProxyContext:
    broker: BrokerPort
    state_of: Callable[[], RegistryState]
    consumers: ConsumerInstances = field(default_factory=ConsumerInstances)
    clock_s: Callable[[], float] = time.monotonic
    _round_robin: int = 0


Handler = Callable[[ProxyContext, ProxyCall, tuple[str, ...]], Awaitable[Any]]

_RETRIABLE_CODES: Final = frozenset({"NOT_LEADER", "REQUEST_TIMED_OUT", "LEADER_NOT_AVAILABLE", "NOT_CONTROLLER",
                                     "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS",
                                     "PEER_UNAVAILABLE", "NOT_ENOUGH_REPLICAS", "KAFKA_STORAGE_ERROR"})


def kafka_error(exc: RaftlogError) -> RegistryError:
    """The REST error for a refusal of the cluster (its code kept in the message)."""
    if isinstance(exc, RegistryError):
        return exc
    text = f"{exc.code}: {exc.message}"[:500]
    if exc.code == "UNKNOWN_TOPIC_OR_PARTITION":
        return TopicNotFoundError(text)
    if exc.code.endswith("_AUTHORIZATION_FAILED"):
        return ForbiddenError(text)
    if exc.code in _RETRIABLE_CODES or type(exc).retriable:
        return KafkaRetriableError(text)
    if exc.code.startswith(("INVALID_", "TOPIC_ALREADY", "OFFSET_OUT", "POLICY", "MESSAGE_TOO", "RECORD_LIST",
                            "GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP", "UNSUPPORTED")):
        return BadRequestError(text)
    return KafkaError(text)


# ---------------------------------------------------------------------------------- helpers

def _cluster(ctx: ProxyContext, c: str) -> None:
    if c != ctx.broker.cluster_id:
        raise NotFoundError(f"Cluster {c[:80]} not found")


def _topic(ctx: ProxyContext, t: str) -> Any:
    topic = ctx.broker.image().topic(t)
    if topic is None or topic.internal:
        raise TopicNotFoundError(f"Topic '{t[:MAX_TOPIC_CHARS]}' not found.")
    return topic


def _partition(ctx: ProxyContext, t: str, p: str) -> tuple[Any, int]:
    topic = _topic(ctx, t)
    if not (p.isascii() and p.isdigit()) or len(p) > 9 or not int(p) < len(topic.partitions):
        raise PartitionNotFoundError(f"Partition {p[:20]} of topic '{t}' not found.")
    return topic, int(p)


def _self(path: str) -> dict[str, Any]:
    return {"self": path, "resource_name": None}


def _topic_json(ctx: ProxyContext, topic: Any) -> dict[str, Any]:
    c = ctx.broker.cluster_id
    base = f"/v3/clusters/{c}/topics/{topic.name}"
    return {"kind": "KafkaTopic", "metadata": _self(base), "cluster_id": c, "topic_name": topic.name,
            "is_internal": bool(topic.internal), "partitions_count": len(topic.partitions),
            "replication_factor": len(topic.partitions[0].replicas) if topic.partitions else 0,
            "partitions": {"related": f"{base}/partitions"}, "configs": {"related": f"{base}/configs"}}


def _partition_json(ctx: ProxyContext, topic: Any, p: Any) -> dict[str, Any]:
    c = ctx.broker.cluster_id
    base = f"/v3/clusters/{c}/topics/{topic.name}/partitions/{p.partition}"
    return {"kind": "KafkaPartition", "metadata": _self(base), "cluster_id": c, "topic_name": topic.name,
            "partition_id": p.partition,
            "leader": None if p.leader < 0 else {"related": f"{base}/replicas/{p.leader}"},
            "replicas": {"related": f"{base}/replicas"}}


def _list(kind: str, path: str, data: list[Any]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": path, "next": None}, "data": data}


def _object(body: Any, what: str = "the body") -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequestError(f"{what} must be a JSON object")
    return body


# ---------------------------------------------------------------------------------- v3: cluster, topics

async def _clusters(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return _list("KafkaClusterList", "/v3/clusters", [await _cluster_get(ctx, call, (ctx.broker.cluster_id,))])


async def _cluster_get(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    base = f"/v3/clusters/{m[0]}"
    return {"kind": "KafkaCluster", "metadata": _self(base), "cluster_id": m[0],
            "brokers": {"related": f"{base}/brokers"}, "topics": {"related": f"{base}/topics"},
            "consumer_groups": {"related": f"{base}/consumer-groups"}}


async def _brokers(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    image = ctx.broker.image()
    data = [{"kind": "KafkaBroker", "metadata": _self(f"/v3/clusters/{m[0]}/brokers/{b}"), "cluster_id": m[0],
             "broker_id": b, "host": reg.host, "port": reg.port, "rack": None}
            for b, reg in sorted(image.brokers.items())]
    return _list("KafkaBrokerList", f"/v3/clusters/{m[0]}/brokers", data)


async def _topics(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    names = await _visible_topics(ctx, call)
    image = ctx.broker.image()
    data = [_topic_json(ctx, t) for n in names if (t := image.topic(n)) is not None]
    return _list("KafkaTopicList", f"/v3/clusters/{m[0]}/topics", data)


async def _visible_topics(ctx: ProxyContext, call: ProxyCall) -> list[str]:
    """The topics the caller may see (the native metadata op filters by ACLs)."""
    try:
        answer = await ctx.broker.call("metadata", {"topics": None}, call.principal, call.host)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    return sorted(t["name"] for t in answer.get("topics", []) if not t.get("error") and not t.get("internal"))


async def _topic_get(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    topic = _topic(ctx, m[1])
    if m[1] not in await _visible_topics(ctx, call):
        raise TopicNotFoundError(f"Topic '{m[1]}' not found.")
    return _topic_json(ctx, topic)


async def _topic_create(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    body = _object(call.body)
    name = body.get("topic_name")
    if not isinstance(name, str) or not _TOPIC_RE.match(name) or name in (".", ".."):
        raise BadRequestError("topic_name must be 1 to 249 characters of [A-Za-z0-9._-]")
    partitions = body.get("partitions_count", 1)
    rf = body.get("replication_factor", 1)
    if type(partitions) is not int or type(rf) is not int or not 0 < partitions <= 10_000 or not 0 < rf <= 16:
        raise BadRequestError("partitions_count (1..10000) and replication_factor (1..16) must be integers")
    raw_configs = body.get("configs") or []
    if not isinstance(raw_configs, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("value"), str)
            for c in raw_configs):
        raise BadRequestError("configs must be a list of {\"name\": str, \"value\": str}")
    fields = {"name": name, "partitions": partitions, "replication_factor": rf,
              "configs": {c["name"]: c["value"] for c in raw_configs}}
    try:
        await ctx.broker.call("create_topic", fields, call.principal, call.host)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    c = ctx.broker.cluster_id
    base = f"/v3/clusters/{c}/topics/{name}"
    return {"kind": "KafkaTopic", "metadata": _self(base), "cluster_id": c, "topic_name": name,
            "is_internal": False, "partitions_count": partitions, "replication_factor": rf,
            "partitions": {"related": f"{base}/partitions"}, "configs": {"related": f"{base}/configs"}}


async def _topic_delete(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    _topic(ctx, m[1])
    try:
        await ctx.broker.call("delete_topic", {"name": m[1]}, call.principal, call.host)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    return 204, None


async def _partitions(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    topic = _topic(ctx, m[1])
    return _list("KafkaPartitionList", f"/v3/clusters/{m[0]}/topics/{m[1]}/partitions",
                 [_partition_json(ctx, topic, p) for p in topic.partitions])


async def _partition_get(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    topic, p = _partition(ctx, m[1], m[2])
    return _partition_json(ctx, topic, topic.partitions[p])


# ---------------------------------------------------------------------------------- produce

def encode_part(ctx: ProxyContext, part: Any, what: str) -> bytes | None:
    """A v3 key or value ({"type", "data", "schema_id" | "subject", "schema_version"}) as bytes."""
    if part is None:
        return None
    part = _object(part, what)
    kind = str(part.get("type") or "").upper()
    data = part.get("data")
    schema_id = part.get("schema_id")
    subject = part.get("subject")
    if not kind:
        kind = "SCHEMA" if schema_id is not None or subject is not None else "JSON"
    if kind == "BINARY":
        if not isinstance(data, str):
            raise RecordNotEncodableError(f"{what}: BINARY data must be a base64 string")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RecordNotEncodableError(f"{what}: BINARY data is not base64") from None
    if kind == "STRING":
        if not isinstance(data, str):
            raise RecordNotEncodableError(f"{what}: STRING data must be a string")
        return data.encode()
    if kind == "JSON":
        return None if data is None else json.dumps(data, separators=(",", ":")).encode()
    types = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF", "SCHEMA": None}
    if kind not in types:
        raise RecordNotEncodableError(f"{what}: unknown type {kind[:40]!r}")
    if schema_id is not None and type(schema_id) is not int:
        raise RecordNotEncodableError(f"{what}: schema_id must be an integer")
    if schema_id is None and not isinstance(subject, str):
        raise RecordNotEncodableError(f"{what}: {kind} needs a schema_id or a subject")
    try:
        return encode_with(ctx.state_of(), types[kind], data, schema_id=schema_id, subject=subject,
                           version=part.get("schema_version", "latest"))
    except EncodeError as exc:
        raise RecordNotEncodableError(f"{what}: {exc}") from None


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequestError("headers must be a list of {\"name\", \"value\" (base64)}")
    out = []
    for h in raw:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise BadRequestError("each header needs a name")
        value = h.get("value")
        try:
            out.append((h["name"], None if value is None else base64.b64decode(str(value), validate=True)))
        except (binascii.Error, ValueError):
            raise BadRequestError(f"header {h['name'][:40]}: the value is not base64") from None
    return out


def choose_partition(ctx: ProxyContext, topic: Any, key: bytes | None, wanted: Any) -> int:
    n = len(topic.partitions)
    if wanted is not None:
        if type(wanted) is not int or not 0 <= wanted < n:
            raise PartitionNotFoundError(f"Partition {str(wanted)[:20]} of topic '{topic.name}' not found.")
        return wanted
    if key is not None:
        return partition_for_key(key, n)
    ctx._round_robin = (ctx._round_robin + 1) % (1 << 30)
    return ctx._round_robin % n


async def produce_records(ctx: ProxyContext, call: ProxyCall, topic: Any,
                          records: list[tuple[int, bytes | None, bytes | None, list[Any], int]]) -> list[Mapping[str, Any]]:
    """Append (partition, key, value, headers, timestamp_ms) records, one batch per partition,
    the partitions at once; the partition answers in the records' partition order. Raises
    RegistryError (the first partition's refusal: the others' records may be appended, as with
    a Kafka producer's batch to several partitions)."""
    by_partition: dict[int, BatchBuilder] = {}
    for p, key, value, headers, ts in records:
        by_partition.setdefault(p, BatchBuilder()).append(value, key, headers, timestamp_ms=ts)
    answers: dict[int, Mapping[str, Any]] = {}
    failures: list[RaftlogError] = []

    async def one(p: int, batch: bytes) -> None:
        try:
            answers[p] = await ctx.broker.produce(topic.name, p, batch, call.principal, call.host)
        except RaftlogError as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:  # the partitions' appends wait for their acks together
        for p, builder in by_partition.items():
            nursery.start_soon(one, p, builder.build())
    if failures:
        raise kafka_error(failures[0])
    return [answers[p] for p in by_partition]


def _record_of(ctx: ProxyContext, topic: Any, body: Any) -> tuple[int, bytes | None, bytes | None, list[Any], int]:
    body = _object(body, "a record")
    key = encode_part(ctx, body.get("key"), "key")
    value = encode_part(ctx, body.get("value"), "value")
    ts = body.get("timestamp")
    ts_ms = int(time.time() * 1000) if ts is None else ts
    if type(ts_ms) is not int or ts_ms < 0:
        raise BadRequestError("timestamp must be milliseconds since the epoch")
    return choose_partition(ctx, topic, key, body.get("partition_id")), key, value, _headers(body.get("headers")), ts_ms


def _size(b: bytes | None, part: Any) -> Any:
    if b is None:
        return None
    kind = str(part.get("type") or "JSON").upper() if isinstance(part, dict) else "JSON"
    return {"type": kind, "size": len(b)}


async def _produce_one(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    topic = _topic(ctx, m[1])
    record = _record_of(ctx, topic, call.body)
    [answer] = await produce_records(ctx, call, topic, [record])
    return {"error_code": 200, "cluster_id": m[0], "topic_name": m[1], "partition_id": record[0],
            "offset": int(answer["base_offset"]), "timestamp": record[4],
            "key": _size(record[1], call.body.get("key")), "value": _size(record[2], call.body.get("value"))}


async def _produce_batch(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    """records:batch: {"entries": [{"id", ...record}]} -> {"successes": [...], "failures": [...]}
    (a record that does not encode fails alone; the others are appended)."""
    _cluster(ctx, m[0])
    topic = _topic(ctx, m[1])
    entries = _object(call.body).get("entries")
    if not isinstance(entries, list) or not 0 < len(entries) <= MAX_BATCH_RECORDS:
        raise BadRequestError(f"entries must be a list of 1 to {MAX_BATCH_RECORDS} records")
    good, failures = [], []
    for i, entry in enumerate(entries):
        entry_id = entry.get("id", str(i)) if isinstance(entry, dict) else str(i)
        try:
            good.append((entry_id, _record_of(ctx, topic, entry)))
        except RegistryError as exc:
            status, err = error_body(exc)
            failures.append({"id": entry_id, "error_code": status, "message": err["message"]})
    answers = await produce_records(ctx, call, topic, [r for _, r in good]) if good else []
    base = {p: int(a["base_offset"]) for p, a in zip(dict.fromkeys(r[0] for _, r in good), answers)}
    successes = []
    for entry_id, record in good:
        successes.append({"id": entry_id, "cluster_id": m[0], "topic_name": m[1], "partition_id": record[0],
                          "offset": base[record[0]], "timestamp": record[4]})
        base[record[0]] += 1
    return 207 if failures else 200, {"successes": successes, "failures": failures}


# ---------------------------------------------------------------------------------- v2 topics and produce

_V2_FORMATS: Final = {"application/vnd.kafka.binary.v2+json": "binary", "application/vnd.kafka.json.v2+json": "json",
                      "application/vnd.kafka.avro.v2+json": "avro", "application/vnd.kafka.jsonschema.v2+json": "jsonschema",
                      "application/vnd.kafka.protobuf.v2+json": "protobuf"}


def v2_format(content_type: str) -> str:
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in _V2_FORMATS:
        raise UnsupportedMediaTypeError(
            f"HTTP 415 Unsupported Media Type: {media[:80]!r}; one of {', '.join(_V2_FORMATS)}")
    return _V2_FORMATS[media]


async def _v2_topics(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return await _visible_topics(ctx, call)


async def _v2_topic(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    topic = _topic(ctx, m[0])
    return {"name": topic.name, "configs": {},
            "partitions": [{"partition": p.partition, "leader": p.leader,
                            "replicas": [{"broker": r, "leader": r == p.leader, "in_sync": True} for r in p.replicas]}
                           for p in topic.partitions]}


def _v2_part(ctx: ProxyContext, fmt: str, data: Any, schema_id: Any, schema_text: Any, what: str) -> Any:
    if fmt in ("binary", "json"):
        return None if data is None else {"type": fmt.upper(), "data": data}
    if schema_id is None and schema_text is not None:
        raise RecordNotEncodableError(f"{what}: give {what}_schema_id (register the schema in the registry first)")
    return None if data is None else {"type": fmt.upper(), "data": data, "schema_id": schema_id}


async def _v2_produce(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    fmt = v2_format(call.content_type)
    topic = _topic(ctx, m[0])
    fixed = _partition(ctx, m[0], m[1])[1] if len(m) > 1 else None
    body = _object(call.body)
    raw = body.get("records")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_BATCH_RECORDS:
        raise BadRequestError(f"records must be a list of 1 to {MAX_BATCH_RECORDS} records")
    records = []
    for r in raw:
        r = _object(r, "a record")
        wanted = fixed if fixed is not None else r.get("partition")
        v3 = {"key": _v2_part(ctx, fmt, r.get("key"), body.get("key_schema_id"), body.get("key_schema"), "key"),
              "value": _v2_part(ctx, fmt, r.get("value"), body.get("value_schema_id"), body.get("value_schema"), "value"),
              "partition_id": wanted}
        records.append(_record_of(ctx, topic, v3))
    answers = await produce_records(ctx, call, topic, records)
    base = {p: int(a["base_offset"]) for p, a in zip(dict.fromkeys(r[0] for r in records), answers)}
    offsets = []
    for record in records:
        offsets.append({"partition": record[0], "offset": base[record[0]], "error_code": None, "error": None})
        base[record[0]] += 1
    return {"key_schema_id": body.get("key_schema_id"), "value_schema_id": body.get("value_schema_id"),
            "offsets": offsets}


# ---------------------------------------------------------------------------------- routing

def is_proxy_path(path: str) -> bool:
    return path.startswith(("/v3/", "/topics", "/consumers/")) or path == "/v3"


_C: Final = r"([^/]+)"
PROXY_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    (method, re.compile(f"^{pattern}$"), handler)
    for method, pattern, handler in [
        ("GET", "/v3/clusters", _clusters),
        ("GET", f"/v3/clusters/{_C}", _cluster_get),
        ("GET", f"/v3/clusters/{_C}/brokers", _brokers),
        ("GET", f"/v3/clusters/{_C}/topics", _topics),
        ("POST", f"/v3/clusters/{_C}/topics", _topic_create),
        ("GET", f"/v3/clusters/{_C}/topics/{_C}", _topic_get),
        ("DELETE", f"/v3/clusters/{_C}/topics/{_C}", _topic_delete),
        ("GET", f"/v3/clusters/{_C}/topics/{_C}/partitions", _partitions),
        ("GET", f"/v3/clusters/{_C}/topics/{_C}/partitions/{_C}", _partition_get),
        ("POST", f"/v3/clusters/{_C}/topics/{_C}/records", _produce_one),
        ("POST", f"/v3/clusters/{_C}/topics/{_C}/records:batch", _produce_batch),
        ("GET", "/topics", _v2_topics),
        ("GET", f"/topics/{_C}", _v2_topic),
        ("POST", f"/topics/{_C}", _v2_produce),
        ("POST", f"/topics/{_C}/partitions/{_C}", _v2_produce),
    ]
]


async def handle_proxy(ctx: ProxyContext, call: ProxyCall, routes: list[tuple[str, re.Pattern[str], Handler]]) -> tuple[int, Any]:
    """Answer one call: (HTTP status, JSON-able body or None for 204). REST errors become
    Confluent's error bodies; a bug propagates (the listener answers 500)."""
    try:
        allowed = False
        for method, pattern, handler in routes:
            match = pattern.match(call.path)
            if match is None:
                continue
            if method != call.method:
                allowed = True
                continue
            answer = await handler(ctx, call, tuple(unquote(g) for g in match.groups()))
            if isinstance(answer, tuple):
                return answer
            return 200, answer
        if allowed:
            raise MethodNotAllowedError(f"{call.method} is not allowed on {call.path[:200]}")
        raise NotFoundError(f"HTTP 404 Not Found: {call.path[:200]}")
    except RegistryError as exc:
        return error_body(exc)

"""The REST proxy's consumer side: v2 consumer instances (consumers.py holds their state) and
v3 consumer groups with their lags. Routes are in `GROUP_ROUTES`; `REST_ROUTES` is every route
of the proxy (proxy.py's and these).

    v2  POST   /consumers/{g}                                    a new instance
        DELETE /consumers/{g}/instances/{i}
        POST|GET|DELETE .../subscription    POST|GET .../assignments
        POST   .../positions, .../positions/beginning, .../positions/end      (seek)
        GET    .../records?max_bytes=      POST|GET .../offsets     (commit, committed)
    v3  GET    /v3/clusters/{c}/consumer-groups[/{g}[/consumers | /lags | /lag-summary]]

Records are read from each partition's leader once per request (no long poll); keys and values
come back in the instance's format: binary as base64, json parsed, avro/jsonschema/protobuf
decoded through the registry, and a record that does not decode has `value: null` with
`value_error` (and `key_error`) saying why.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Final

from partition.batch import decode_batches
from raftlog.base.errors import RaftlogError, error_from_wire
from raftlog.node.registry.consumers import ConsumerInstance
from raftlog.node.registry.errors import BadRequestError, NotFoundError, PartitionNotFoundError
from raftlog.node.registry.proxy import (
    PROXY_ROUTES, Handler, ProxyCall, ProxyContext, _cluster, _list, _object, _self, kafka_error,
)
from raftlog.node.registry.serde import UndecodableError, decode

__all__ = ["GROUP_ROUTES", "REST_ROUTES", "DEFAULT_MAX_BYTES", "MAX_FETCH_BYTES"]

DEFAULT_MAX_BYTES: Final = 1 << 20
MAX_FETCH_BYTES: Final = 16 << 20


def _instance(ctx: ProxyContext, m: tuple[str, ...]) -> ConsumerInstance:
    return ctx.consumers.get(m[0], m[1], ctx.clock_s())


def _base(call: ProxyCall, i: ConsumerInstance) -> str:
    return f"/consumers/{i.group}/instances/{i.name}"


def _partitions_of(body: Any, key: str, with_offset: bool = False) -> list[tuple[str, int, int]]:
    raw = _object(body).get(key)
    if not isinstance(raw, list) or len(raw) > 10_000:
        raise BadRequestError(f"{key} must be a list of at most 10000 partitions")
    out = []
    for p in raw:
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or type(p.get("partition")) is not int:
            raise BadRequestError(f"each of {key} needs a topic and a partition")
        offset = p.get("offset", 0)
        if with_offset and (type(offset) is not int or offset < 0):
            raise BadRequestError("each offset must be a non-negative integer")
        out.append((p["topic"], p["partition"], offset if with_offset else 0))
    return out


async def _create(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = ctx.consumers.create(m[0], call.body, ctx.clock_s())
    return {"instance_id": i.name, "base_uri": _base(call, i)}


async def _delete(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    ctx.consumers.delete(m[0], m[1], ctx.clock_s())
    return 204, None


async def _subscribe(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    body = _object(call.body)
    topics = body.get("topics")
    pattern = body.get("topic_pattern")
    if isinstance(pattern, str) and topics is None:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise BadRequestError(f"topic_pattern does not compile: {exc}") from None
        image = ctx.broker.image()
        topics = sorted(t.name for t in image.topics.values() if not t.internal and compiled.fullmatch(t.name))
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics) or len(topics) > 10_000:
        raise BadRequestError("topics must be a list of topic names (or give topic_pattern)")
    i.subscription, i.assignment = list(dict.fromkeys(topics)), None
    return 204, None


async def _subscription(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return {"topics": _instance(ctx, m).subscription}


async def _unsubscribe(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    i.subscription = []
    return 204, None


async def _assign(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    i.assignment, i.subscription = [(t, p) for t, p, _ in _partitions_of(call.body, "partitions")], []
    return 204, None


def _assigned(ctx: ProxyContext, i: ConsumerInstance) -> list[tuple[str, int]]:
    if i.assignment is not None:
        return list(i.assignment)
    image = ctx.broker.image()
    out = []
    for name in i.subscription:
        topic = image.topic(name)
        if topic is not None:
            out += [(name, p.partition) for p in topic.partitions]
    return out


async def _assignments(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return {"partitions": [{"topic": t, "partition": p} for t, p in _assigned(ctx, _instance(ctx, m))]}


async def _seek(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    for t, p, offset in _partitions_of(call.body, "offsets", with_offset=True):
        i.positions[(t, p)] = offset
    return 204, None


async def _seek_end(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...], timestamp: int) -> Any:
    i = _instance(ctx, m)
    for t, p, _ in _partitions_of(call.body, "partitions"):
        i.positions[(t, p)] = await _list_offset(ctx, call, t, p, timestamp)
    return 204, None


async def _seek_beginning(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return await _seek_end(ctx, call, m, -2)


async def _seek_latest(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return await _seek_end(ctx, call, m, -1)


async def _list_offset(ctx: ProxyContext, call: ProxyCall, t: str, p: int, timestamp: int) -> int:
    if ctx.broker.image().partition(t, p) is None:
        raise PartitionNotFoundError(f"Partition {p} of topic '{t[:249]}' not found.")
    try:
        return await ctx.broker.list_offsets(t, p, timestamp, call.principal, call.host)
    except RaftlogError as exc:
        raise kafka_error(exc) from None


async def _committed(ctx: ProxyContext, call: ProxyCall, group: str,
                     partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
    fields = {"group_id": group,
              "partitions": None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions]}
    try:
        answer = await ctx.broker.call("offset_fetch", fields, call.principal, call.host, group_id=group)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    return {(x["topic"], x["partition"]): int(x["offset"]) for x in answer.get("partitions", [])
            if not x.get("error") and int(x.get("offset", -1)) >= 0}


def _render(ctx: ProxyContext, fmt: str, raw: bytes | None) -> tuple[Any, str | None]:
    if raw is None:
        return None, None
    if fmt == "binary":
        return base64.b64encode(raw).decode(), None
    if fmt == "json":
        try:
            return json.loads(raw), None
        except (ValueError, UnicodeDecodeError) as exc:
            return None, f"not JSON: {exc}"
    try:
        return decode(ctx.state_of(), raw).value, None
    except UndecodableError as exc:
        return None, str(exc)


async def _records(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    try:
        budget = min(int(call.query.get("max_bytes", DEFAULT_MAX_BYTES)), MAX_FETCH_BYTES)
    except ValueError:
        raise BadRequestError("max_bytes must be an integer") from None
    budget = max(budget, 1)
    partitions = _assigned(ctx, i)
    missing = [tp for tp in partitions if tp not in i.positions]
    if missing:
        committed = await _committed(ctx, call, i.group, missing)
        for t, p in missing:
            i.positions[(t, p)] = committed.get((t, p)) if (t, p) in committed else await _list_offset(
                ctx, call, t, p, -2 if i.auto_offset_reset == "earliest" else -1)
    out: list[dict[str, Any]] = []
    for t, p in partitions:
        if budget <= 0:
            break
        position = i.positions[(t, p)]
        try:
            part = await ctx.broker.fetch(t, p, position, budget, call.principal, call.host)
        except RaftlogError as exc:
            raise kafka_error(exc) from None
        data = part.get("records") or b""
        for header, records in decode_batches(bytes(data)):
            if header.is_control:
                i.positions[(t, p)] = max(i.positions[(t, p)], header.next_offset)
                continue
            for r in records:
                if r.offset < position:
                    continue
                key, key_error = _render(ctx, i.format, r.key)
                value, value_error = _render(ctx, i.format, r.value)
                item = {"topic": t, "key": key, "value": value, "partition": p, "offset": r.offset,
                        "timestamp": r.timestamp}
                if key_error:
                    item["key_error"] = key_error
                if value_error:
                    item["value_error"] = value_error
                out.append(item)
                budget -= len(r.key or b"") + len(r.value or b"") + 16
                i.positions[(t, p)] = r.offset + 1
    return out


async def _commit(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    """Commit the given offsets (each the last one consumed: offset + 1 is committed, as
    Confluent's), or with no body every position the instance has."""
    i = _instance(ctx, m)
    if call.body is None or call.body == {}:
        offsets = [(t, p, o) for (t, p), o in i.positions.items()]
    else:
        offsets = [(t, p, o + 1) for t, p, o in _partitions_of(call.body, "offsets", with_offset=True)]
    fields = {"group_id": i.group, "member_id": "", "generation_id": -1, "group_instance_id": None,
              "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets], "timeout_ms": 30_000}
    try:
        answer = await ctx.broker.call("offset_commit", fields, call.principal, call.host, group_id=i.group)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    errors = [x for x in answer.get("partitions", []) if x.get("error")]
    if errors:
        raise kafka_error(error_from_wire(errors[0]["error"]))
    return 204, None


async def _offsets(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    i = _instance(ctx, m)
    wanted = [(t, p) for t, p, _ in _partitions_of(call.body, "partitions")] if call.body else _assigned(ctx, i)
    committed = await _committed(ctx, call, i.group, wanted)
    return {"offsets": [{"topic": t, "partition": p, "offset": committed.get((t, p), -1), "metadata": ""}
                        for t, p in wanted]}


# ---------------------------------------------------------------------------------- v3 groups

def _group_json(ctx: ProxyContext, c: str, g: dict[str, Any]) -> dict[str, Any]:
    base = f"/v3/clusters/{c}/consumer-groups/{g['group_id']}"
    return {"kind": "KafkaConsumerGroup", "metadata": _self(base), "cluster_id": c,
            "consumer_group_id": g["group_id"], "is_simple": not g.get("protocol_type"),
            "partition_assignor": g.get("protocol") or "", "state": str(g.get("state", "UNKNOWN")).upper(),
            "consumers": {"related": f"{base}/consumers"}, "lag_summary": {"related": f"{base}/lag-summary"}}


async def _groups(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    try:
        answer = await ctx.broker.call("list_groups", {"states": None}, call.principal, call.host)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    groups = sorted(answer.get("groups", []), key=lambda g: g["group_id"])
    return _list("KafkaConsumerGroupList", f"/v3/clusters/{m[0]}/consumer-groups",
                 [_group_json(ctx, m[0], g) for g in groups])


async def _describe(ctx: ProxyContext, call: ProxyCall, group: str) -> dict[str, Any]:
    try:
        answer = await ctx.broker.call("describe_groups", {"group_ids": [group]}, call.principal, call.host,
                                       group_id=group)
    except RaftlogError as exc:
        raise kafka_error(exc) from None
    [g] = answer.get("groups", [{"group_id": group, "state": "Dead"}])[:1] or [{"group_id": group, "state": "Dead"}]
    if g.get("error"):
        raise kafka_error(error_from_wire(g["error"]))
    if str(g.get("state", "")).lower() == "dead":
        raise NotFoundError(f"Consumer group {group[:200]} not found.")
    return g


async def _group(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    return _group_json(ctx, m[0], await _describe(ctx, call, m[1]))


async def _group_consumers(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    _cluster(ctx, m[0])
    g = await _describe(ctx, call, m[1])
    base = f"/v3/clusters/{m[0]}/consumer-groups/{m[1]}/consumers"
    return _list("KafkaConsumerList", base, [
        {"kind": "KafkaConsumer", "metadata": _self(f"{base}/{x['member_id']}"), "cluster_id": m[0],
         "consumer_group_id": m[1], "consumer_id": x["member_id"], "instance_id": x.get("group_instance_id"),
         "client_id": x.get("client_id", "")} for x in g.get("members", [])])


async def _lag_rows(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> list[dict[str, Any]]:
    _cluster(ctx, m[0])
    committed = await _committed(ctx, call, m[1], None)
    if not committed:
        raise NotFoundError(f"Consumer group {m[1][:200]} has no committed offsets.")
    rows = []
    for (t, p), offset in sorted(committed.items()):
        try:
            end = await ctx.broker.list_offsets(t, p, -1, call.principal, call.host)
        except RaftlogError:
            continue  # a topic deleted since, or refused to this caller: no lag to show
        rows.append({"kind": "KafkaConsumerLag",
                     "metadata": _self(f"/v3/clusters/{m[0]}/consumer-groups/{m[1]}/lags/{t}/partitions/{p}"),
                     "cluster_id": m[0], "consumer_group_id": m[1], "topic_name": t, "partition_id": p,
                     "current_offset": offset, "log_end_offset": end, "lag": max(0, end - offset),
                     "consumer_id": "", "instance_id": None, "client_id": ""})
    return rows


async def _lags(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    return _list("KafkaConsumerLagList", f"/v3/clusters/{m[0]}/consumer-groups/{m[1]}/lags",
                 await _lag_rows(ctx, call, m))


async def _lag_summary(ctx: ProxyContext, call: ProxyCall, m: tuple[str, ...]) -> Any:
    rows = await _lag_rows(ctx, call, m)
    top = max(rows, key=lambda r: r["lag"], default=None)
    return {"kind": "KafkaConsumerGroupLagSummary",
            "metadata": _self(f"/v3/clusters/{m[0]}/consumer-groups/{m[1]}/lag-summary"),
            "cluster_id": m[0], "consumer_group_id": m[1],
            "max_lag_consumer_id": "", "max_lag_instance_id": None, "max_lag_client_id": "",
            "max_lag_topic_name": None if top is None else top["topic_name"],
            "max_lag_partition_id": None if top is None else top["partition_id"],
            "max_lag": 0 if top is None else top["lag"], "total_lag": sum(r["lag"] for r in rows)}


_C: Final = r"([^/]+)"
_I: Final = f"/consumers/{_C}/instances/{_C}"
GROUP_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    (method, re.compile(f"^{pattern}$"), handler)
    for method, pattern, handler in [
        ("POST", f"/consumers/{_C}", _create),
        ("DELETE", _I, _delete),
        ("POST", f"{_I}/subscription", _subscribe),
        ("GET", f"{_I}/subscription", _subscription),
        ("DELETE", f"{_I}/subscription", _unsubscribe),
        ("POST", f"{_I}/assignments", _assign),
        ("GET", f"{_I}/assignments", _assignments),
        ("POST", f"{_I}/positions", _seek),
        ("POST", f"{_I}/positions/beginning", _seek_beginning),
        ("POST", f"{_I}/positions/end", _seek_latest),
        ("GET", f"{_I}/records", _records),
        ("POST", f"{_I}/offsets", _commit),
        ("GET", f"{_I}/offsets", _offsets),
        ("GET", f"/v3/clusters/{_C}/consumer-groups", _groups),
        ("GET", f"/v3/clusters/{_C}/consumer-groups/{_C}", _group),
        ("GET", f"/v3/clusters/{_C}/consumer-groups/{_C}/consumers", _group_consumers),
        ("GET", f"/v3/clusters/{_C}/consumer-groups/{_C}/lags", _lags),
        ("GET", f"/v3/clusters/{_C}/consumer-groups/{_C}/lag-summary", _lag_summary),
    ]
]
REST_ROUTES: Final = PROXY_ROUTES + GROUP_ROUTES

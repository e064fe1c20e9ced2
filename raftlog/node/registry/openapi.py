"""The OpenAPI 3.0 description of the registry listener: the Confluent Schema Registry API
(api.py's ROUTES) and the REST proxy (proxy.py, proxy_groups.py), served at GET /openapi.json
and fuzzed by tests/integration/test_rest_schemathesis.py.

Built from the route tables, so a route added there is described (and fuzzed) at once: each
path parameter becomes a string parameter, the documented request bodies are below (`BODIES`),
and every answer is documented as JSON with the statuses the listener gives (never 500: a 500
is a bug, and the fuzz run fails on it).
"""

from __future__ import annotations

import re
from typing import Any, Final

from raftlog.node.registry.api import ROUTES
from raftlog.node.registry.proxy_groups import REST_ROUTES

__all__ = ["rest_openapi", "BODIES"]

_OBJ: Final = {"type": "object"}
_STR: Final = {"type": "string"}
_INT: Final = {"type": "integer"}
_SCHEMA_BODY: Final = {"type": "object", "required": ["schema"], "properties": {
    "schema": _STR, "schemaType": {"type": "string", "enum": ["AVRO", "JSON", "PROTOBUF"]},
    "references": {"type": "array", "items": {"type": "object", "properties": {
        "name": _STR, "subject": _STR, "version": _INT}}}}}
_PART: Final = {"type": "object", "nullable": True, "properties": {
    "type": {"type": "string", "enum": ["JSON", "BINARY", "STRING", "AVRO", "JSONSCHEMA", "PROTOBUF"]},
    "data": {}, "schema_id": _INT, "subject": _STR, "schema_version": _INT}}
_RECORD: Final = {"type": "object", "properties": {
    "partition_id": _INT, "key": _PART, "value": _PART, "timestamp": _INT,
    "headers": {"type": "array", "items": {"type": "object", "properties": {"name": _STR, "value": _STR}}}}}
_PARTITIONS: Final = {"type": "array", "items": {"type": "object", "properties": {"topic": _STR, "partition": _INT}}}
_OFFSETS: Final = {"type": "array", "items": {"type": "object", "properties": {
    "topic": _STR, "partition": _INT, "offset": _INT}}}
# (method, path template) -> the request body's schema.
BODIES: Final[dict[tuple[str, str], dict[str, Any]]] = {
    ("POST", "/subjects/{p1}/versions"): _SCHEMA_BODY,
    ("POST", "/subjects/{p1}"): _SCHEMA_BODY,
    ("POST", "/compatibility/subjects/{p1}/versions"): _SCHEMA_BODY,
    ("POST", "/compatibility/subjects/{p1}/versions/{p2}"): _SCHEMA_BODY,
    ("PUT", "/config"): {"type": "object", "properties": {"compatibility": _STR}},
    ("PUT", "/config/{p1}"): {"type": "object", "properties": {"compatibility": _STR}},
    ("PUT", "/mode"): {"type": "object", "properties": {"mode": _STR}},
    ("PUT", "/mode/{p1}"): {"type": "object", "properties": {"mode": _STR}},
    ("POST", "/v3/clusters/{p1}/topics"): {"type": "object", "required": ["topic_name"], "properties": {
        "topic_name": _STR, "partitions_count": _INT, "replication_factor": _INT,
        "configs": {"type": "array", "items": {"type": "object", "properties": {"name": _STR, "value": _STR}}}}},
    ("POST", "/v3/clusters/{p1}/topics/{p2}/records"): _RECORD,
    ("POST", "/v3/clusters/{p1}/topics/{p2}/records:batch"): {"type": "object", "properties": {
        "entries": {"type": "array", "items": _RECORD}}},
    ("POST", "/topics/{p1}"): {"type": "object", "properties": {"records": {"type": "array", "items": _OBJ}}},
    ("POST", "/topics/{p1}/partitions/{p2}"): {"type": "object", "properties": {
        "records": {"type": "array", "items": _OBJ}}},
    ("POST", "/consumers/{p1}"): {"type": "object", "properties": {
        "name": _STR, "format": _STR, "auto.offset.reset": _STR}},
    ("POST", "/consumers/{p1}/instances/{p2}/subscription"): {"type": "object", "properties": {
        "topics": {"type": "array", "items": _STR}, "topic_pattern": _STR}},
    ("POST", "/consumers/{p1}/instances/{p2}/assignments"): {"type": "object", "properties": {"partitions": _PARTITIONS}},
    ("POST", "/consumers/{p1}/instances/{p2}/positions"): {"type": "object", "properties": {"offsets": _OFFSETS}},
    ("POST", "/consumers/{p1}/instances/{p2}/positions/beginning"): {"type": "object", "properties": {
        "partitions": _PARTITIONS}},
    ("POST", "/consumers/{p1}/instances/{p2}/positions/end"): {"type": "object", "properties": {
        "partitions": _PARTITIONS}},
    ("POST", "/consumers/{p1}/instances/{p2}/offsets"): {"type": "object", "properties": {"offsets": _OFFSETS}},
}
_QUERY: Final = {"deleted": "boolean", "permanent": "boolean", "verbose": "boolean", "defaultToGlobal": "boolean",
                 "subjectPrefix": "string", "max_bytes": "integer"}
_ERRORS: Final = ("400", "401", "403", "404", "405", "409", "413", "415", "422", "429", "503", "504")
_V2_TYPES: Final = ["application/vnd.kafka.json.v2+json", "application/vnd.kafka.binary.v2+json",
                    "application/vnd.kafka.avro.v2+json", "application/vnd.kafka.v2+json"]


def _template(pattern: re.Pattern[str]) -> tuple[str, int]:
    """'^/subjects/([^/]+)/versions$' -> ('/subjects/{p1}/versions', 1)."""
    text = pattern.pattern.strip("^$")
    count = 0

    def name(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"{{p{count}}}"

    return re.sub(r"\((?:[^()]|\([^()]*\))*\)", name, text).replace("\\", ""), count


def _content_type(path: str) -> str:
    if path.startswith("/v3"):
        return "application/json"
    if path.startswith(("/topics", "/consumers")):
        return "application/vnd.kafka.v2+json"
    return "application/vnd.schemaregistry.v1+json"


def _operation(method: str, path: str, params: int) -> dict[str, Any]:
    content_type = _content_type(path)
    answer = {"content": {content_type: {"schema": {}}}}
    ok = "204" if method == "DELETE" and path.startswith(("/v3", "/consumers")) or path.endswith(
        ("/subscription", "/assignments", "/positions", "/beginning", "/end")) and method != "GET" else "200"
    if path.endswith("/offsets") and method == "POST":
        ok = "204"
    responses: dict[str, Any] = {ok: {"description": "done", **({} if ok == "204" else answer)}}
    if path.endswith("records:batch"):
        responses["207"] = {"description": "some records failed", **answer}
    for status in _ERRORS:
        responses[status] = {"description": "Confluent's error body", **answer}
    op: dict[str, Any] = {
        "operationId": f"{method.lower()}{re.sub(r'[^A-Za-z0-9]+', '_', path)}",
        "parameters": [{"name": f"p{i}", "in": "path", "required": True, "schema": _STR}
                       for i in range(1, params + 1)]
        + [{"name": q, "in": "query", "required": False, "schema": {"type": kind}} for q, kind in _QUERY.items()
           if (q in ("deleted", "permanent", "subjectPrefix") and path.startswith("/subjects"))
           or (q == "max_bytes" and path.endswith("/records") and method == "GET")],
        "responses": responses,
    }
    body = BODIES.get((method, path))
    if body is not None:
        media = _V2_TYPES if method == "POST" and path.startswith(("/topics", "/consumers")) else [
            "application/json"]
        op["requestBody"] = {"required": True, "content": {m: {"schema": body} for m in media}}
    return op


def rest_openapi() -> dict[str, Any]:
    """The document (built on each call: cheap, and never stale)."""
    paths: dict[str, dict[str, Any]] = {}
    for method, pattern, *_ in [*ROUTES, *REST_ROUTES]:
        path, params = _template(pattern)
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, params)
    return {
        "openapi": "3.0.3",
        "info": {"title": "raftlog Schema Registry and REST proxy", "version": "1",
                 "description": "Confluent Schema Registry API and Confluent REST Proxy v3 (and v2) of a "
                                "raftlog node. HTTP Basic auth with a cluster user on a secure cluster."},
        "paths": paths,
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
    }

"""The Confluent Schema Registry REST API over the registry's port: (method, path, query,
JSON body) -> (HTTP status, JSON body). Protocol-neutral of HTTP itself (listener.py does the
bytes), so the same function answers a request from the listener and one forwarded by another
node (the peer op `registry_forward`).

Routes (Confluent's; `ROUTES` is the table, grep it): subjects, versions ("latest", -1),
register (POST /subjects/{s}/versions) and look up (POST /subjects/{s}), schemas by id (with
their subjects and versions), soft and hard (?permanent=true) deletes, references
(`referencedby`), /config and /config/{s}, /compatibility/subjects/{s}/versions[/{v}], /mode and
/mode/{s}, /schemas/types. A write on a node that is not the writer is forwarded to it whole.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from raftlog.base.acl import Operation, ResourceType
from raftlog.node.registry.compat import SCHEMA_TYPES, incompatibilities, parse_schema
from raftlog.node.registry.errors import (
    BadRequestError, InvalidSchemaError, InvalidSubjectError, MethodNotAllowedError, NotFoundError,
    RegistryError, SchemaNotFoundError, SubjectNotFoundError, VersionNotFoundError, error_body,
)
from raftlog.node.registry.policy import Allowed, check_call, topic_of
from raftlog.node.registry.state import Record, RegistryState, parse_version

__all__ = ["RegistryPort", "Call", "ROUTES", "handle", "check_subject", "MAX_SUBJECT_CHARS"]

MAX_SUBJECT_CHARS: Final = 255  # a subject is also a topic-name-like key; Confluent has no lower limit
MAX_REFERENCES: Final = 100


class RegistryPort(Protocol):
    """What the API needs from the registry shell (service.py implements it)."""

    @property
    def state(self) -> RegistryState: ...

    def is_writer(self) -> bool: ...

    async def write(self, decide: Callable[[RegistryState], tuple[list[Record], Any]]) -> Any:
        """Run `decide` on the writer's current state, append its records, wait until they are
        applied here; return its answer. Raises what `decide` raises, StoreError, StoreTimeoutError."""
        ...

    async def forward(self, call: "Call") -> tuple[int, Any]:
        """Send the call to the writer; its (status, body). Raises ForwardingError."""
        ...


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: Mapping[str, str]
    body: Any = None
    principal: str | None = None


Handler = Callable[[RegistryPort, Call, tuple[str, ...]], Awaitable[Any]]


def check_subject(subject: str) -> str:
    """Raises InvalidSubjectError for a subject we refuse: empty, over MAX_SUBJECT_CHARS, with a
    '/' or a control character."""
    if not subject or len(subject) > MAX_SUBJECT_CHARS or "/" in subject or any(ord(c) < 32 for c in subject):
        raise InvalidSubjectError(
            f"Invalid subject: it must be 1 to {MAX_SUBJECT_CHARS} characters without '/' or control characters")
    return subject


def _flag(call: Call, name: str) -> bool:
    return call.query.get(name, "false").lower() == "true"


def _schema_body(call: Call) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
    body = call.body
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    text = body.get("schema")
    if not isinstance(text, str):
        raise BadRequestError("the body needs a \"schema\" string")
    if not text.strip():
        raise InvalidSchemaError("Invalid schema: it is empty")
    schema_type = body.get("schemaType", "AVRO") or "AVRO"
    if schema_type not in SCHEMA_TYPES:
        raise BadRequestError(f"unknown schemaType {str(schema_type)[:40]!r}; one of {', '.join(SCHEMA_TYPES)}")
    raw_refs = body.get("references") or []
    if not isinstance(raw_refs, list) or len(raw_refs) > MAX_REFERENCES:
        raise BadRequestError(f"references must be a list of at most {MAX_REFERENCES}")
    refs = []
    for r in raw_refs:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not isinstance(r.get("subject"), str):
            raise BadRequestError("each reference needs a name, a subject and a version")
        refs.append((r["name"], check_subject(r["subject"]), parse_version(r.get("version", -1))))
    return schema_type, text, tuple(refs)


async def _subjects(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    prefix = call.query.get("subjectPrefix", "")
    return [s for s in port.state.subject_names(_flag(call, "deleted")) if s.startswith(prefix)]


async def _versions(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    return [v.version for v in port.state.versions(m[0], _flag(call, "deleted"))]


async def _get_version(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    return port.state.version(m[0], m[1], _flag(call, "deleted")).to_json()


async def _get_version_schema(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    v = port.state.version(m[0], m[1], _flag(call, "deleted"))
    return v.schema if v.schema_type == "PROTOBUF" else json.loads(v.schema)  # Confluent: the raw schema


async def _referenced_by(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    v = port.state.version(m[0], m[1])
    return sorted(x.id for vs in port.state.subjects.values() for x in vs.values()
                  if not x.deleted and any((s, n) == (v.subject, v.version) for _, s, n in x.references))


async def _register(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0]
    schema_type, text, refs = _schema_body(call)
    body = call.body
    want_id = body.get("id") if type(body.get("id")) is int and body.get("id") > 0 else None
    want_version = body.get("version") if type(body.get("version")) is int and body.get("version") > 0 else None

    def decide(state: RegistryState) -> tuple[list[Record], Any]:
        if want_id is not None and state.mode_of(subject) != "IMPORT":
            raise BadRequestError("an id may only be given in IMPORT mode")
        records, v = state.register(subject, schema_type, text, refs, want_id, want_version)
        return records, {"id": v.id}

    return await port.write(decide)


async def _lookup(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    schema_type, text, refs = _schema_body(call)
    port.state.versions(m[0], deleted=True)  # 40401 for a subject we do not know
    found = port.state.lookup(m[0], schema_type, text, refs, deleted=_flag(call, "deleted"))
    if found is None:
        raise SchemaNotFoundError("Schema not found")
    return found.to_json()


async def _delete_subject(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    permanent = _flag(call, "permanent")
    return await port.write(lambda state: state.delete_subject(m[0], permanent))


async def _delete_version(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    permanent = _flag(call, "permanent")
    return await port.write(lambda state: state.delete_version(m[0], m[1], permanent))


async def _schema_by_id(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    v = port.state.by_id(_id(m[0]))
    body = v.to_json()
    return {k: body[k] for k in ("schema", "schemaType", "references") if k in body}


async def _schema_by_id_text(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    return port.state.by_id(_id(m[0])).schema


async def _id_subjects(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    port.state.by_id(_id(m[0]))
    return sorted({v.subject for v in port.state.uses_of(_id(m[0]), _flag(call, "deleted"))})


async def _id_versions(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    port.state.by_id(_id(m[0]))
    return [{"subject": v.subject, "version": v.version} for v in port.state.uses_of(_id(m[0]), _flag(call, "deleted"))]


def _id(text: str) -> int:
    if not text.isdigit() or len(text) > 10:
        raise SchemaNotFoundError(f"Schema {text[:20]} not found")
    return int(text)


async def _types(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    return list(SCHEMA_TYPES)


async def _compatibility(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0]
    schema_type, text, refs = _schema_body(call)
    state = port.state
    new = parse_schema(schema_type, text, state.reference_texts(refs))
    if len(m) > 1:
        try:
            against = [state.version(subject, m[1])]
        except (SubjectNotFoundError, VersionNotFoundError):
            if parse_version(m[1]) != -1:
                raise
            against = []
    else:
        try:
            against = state.versions(subject)
        except SubjectNotFoundError:
            against = []
    level = state.level(subject)
    if len(m) > 1 or not level.endswith("_TRANSITIVE"):
        level = level.removesuffix("_TRANSITIVE")
    problems = incompatibilities(level, new, [state.parsed(v) for v in against])
    answer: dict[str, Any] = {"is_compatible": not problems}
    if _flag(call, "verbose"):
        answer["messages"] = problems
    return answer


async def _get_config(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0] if m else None
    return {"compatibilityLevel": port.state.level(subject, default_to_global=_flag(call, "defaultToGlobal") or not m)}


def _body_field(call: Call, name: str) -> Any:
    if not isinstance(call.body, dict):
        raise BadRequestError("the body must be a JSON object")
    return call.body.get(name)


async def _put_config(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0] if m else None
    level = _body_field(call, "compatibility") or _body_field(call, "compatibilityLevel")
    await port.write(lambda state: (state.set_level(subject, level), None))
    return {"compatibility": str(level).upper()}


async def _delete_config(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0] if m else None
    old = await port.write(lambda state: state.delete_level(subject))
    return {"compatibilityLevel": old}


async def _get_mode(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0] if m else None
    return {"mode": port.state.mode_of(subject, default_to_global=_flag(call, "defaultToGlobal") or not m)}


async def _put_mode(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    subject = m[0] if m else None
    mode = _body_field(call, "mode")
    await port.write(lambda state: (state.set_mode(subject, mode), None))
    return {"mode": str(mode).upper()}


async def _delete_mode(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    old = await port.write(lambda state: state.delete_mode(m[0]))
    return {"mode": old}


async def _associations(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    """Confluent's subject-topic associations (asked by confluent-kafka's serializers before
    they fall back to TopicNameStrategy): raftlog has none to tell."""
    return []


async def _root(port: RegistryPort, call: Call, m: tuple[str, ...]) -> Any:
    return {}


_S: Final = r"([^/]+)"
_V: Final = r"(latest|-1|[^/]+)"
# (method, path pattern, handler, writes): `writes` routes are forwarded to the writer.
ROUTES: Final[list[tuple[str, re.Pattern[str], Handler, bool]]] = [
    (method, re.compile(f"^{pattern}$"), handler, writes)
    for method, pattern, handler, writes in [
        ("GET", "/", _root, False),
        ("GET", r"/associations/resources/([^/]+)/([^/]+)", _associations, False),
        ("GET", "/subjects", _subjects, False),
        ("GET", f"/subjects/{_S}/versions", _versions, False),
        ("POST", f"/subjects/{_S}/versions", _register, True),
        ("GET", f"/subjects/{_S}/versions/{_V}", _get_version, False),
        ("GET", f"/subjects/{_S}/versions/{_V}/schema", _get_version_schema, False),
        ("GET", f"/subjects/{_S}/versions/{_V}/referencedby", _referenced_by, False),
        ("DELETE", f"/subjects/{_S}/versions/{_V}", _delete_version, True),
        ("POST", f"/subjects/{_S}", _lookup, False),
        ("DELETE", f"/subjects/{_S}", _delete_subject, True),
        ("GET", r"/schemas/ids/([^/]+)", _schema_by_id, False),
        ("GET", r"/schemas/ids/([^/]+)/schema", _schema_by_id_text, False),
        ("GET", r"/schemas/ids/([^/]+)/subjects", _id_subjects, False),
        ("GET", r"/schemas/ids/([^/]+)/versions", _id_versions, False),
        ("GET", "/schemas/types", _types, False),
        ("POST", f"/compatibility/subjects/{_S}/versions/{_V}", _compatibility, False),
        ("POST", f"/compatibility/subjects/{_S}/versions", _compatibility, False),
        ("GET", "/config", _get_config, False),
        ("PUT", "/config", _put_config, True),
        ("DELETE", "/config", _delete_config, True),
        ("GET", f"/config/{_S}", _get_config, False),
        ("PUT", f"/config/{_S}", _put_config, True),
        ("DELETE", f"/config/{_S}", _delete_config, True),
        ("GET", "/mode", _get_mode, False),
        ("PUT", "/mode", _put_mode, True),
        ("GET", f"/mode/{_S}", _get_mode, False),
        ("PUT", f"/mode/{_S}", _put_mode, True),
        ("DELETE", f"/mode/{_S}", _delete_mode, True),
    ]
]


def route(method: str, path: str) -> tuple[Handler, tuple[str, ...], bool]:
    """(handler, path parameters, writes) for a request; `path` still percent-encoded (a
    subject may hold an encoded '/', refused as such rather than taken as another route). Raises NotFoundError,
    MethodNotAllowedError, InvalidSubjectError (a subject parameter we refuse)."""
    allowed = False
    for m, pattern, handler, writes in ROUTES:
        match = pattern.match(path)
        if match is None:
            continue
        if m != method:
            allowed = True
            continue
        params = tuple(unquote(g) for g in match.groups())
        if path.startswith(("/subjects/", "/config/", "/mode/", "/compatibility/")) and params:
            check_subject(params[0])
        return handler, params, writes
    if allowed:
        raise MethodNotAllowedError(f"{method} is not allowed on {path[:200]}")
    raise NotFoundError(f"HTTP 404 Not Found: {path[:200]}")


async def handle(port: RegistryPort, call: Call, allowed: Allowed | None = None) -> tuple[int, Any]:
    """Answer one call: (HTTP status, JSON-able body). With `allowed` (the caller's ACL check)
    the call is checked first (policy.py) and a subject listing filtered. Registry errors
    become Confluent's error bodies; anything else propagates (the listener answers 500)."""
    try:
        handler, params, writes = route(call.method, call.path)
        if allowed is not None:
            check_call(allowed, call.method, call.path, params, writes)
        if handler is _register:  # a schema that does not parse never reaches the writer
            schema_type, text, refs = _schema_body(call)
            parse_schema(schema_type, text, port.state.reference_texts(refs))
        if writes and not port.is_writer():
            return await port.forward(call)
        answer = await handler(port, call, params)
        if allowed is not None and handler is _subjects:
            answer = [s for s in answer if allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic_of(s))]
        return 200, answer
    except RegistryError as exc:
        return error_body(exc)

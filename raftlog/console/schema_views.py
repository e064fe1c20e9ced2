"""What the console's schema pages (views.py: /schemas, /schemas/{subject}, its config form)
and the message browser read from the registry the console was given (`--schema-registry`;
raftlog's or any Confluent-compatible one): subjects with their latest version and level, a
subject's versions and a diff of two, and `render_schema(raw)` for the message browser's "schema" format: a record in Confluent's
wire format decoded by the id it carries (raftlog/node/registry/serde.py), or shown as hex with
the reason it does not decode. The registry is read over HTTP in worker threads.
"""

from __future__ import annotations

import difflib
import json
import urllib.parse
from typing import Any, Final

import trio
from starlette.requests import Request

from raftlog.console import browse
from raftlog.console.errors import BadInputError
from raftlog.node.registry.errors import RegistryError
from raftlog.node.registry.remote import RegistrySchemas
from raftlog.node.registry.serde import EncodeError, UndecodableError, decode, encode_with

__all__ = ["render_schema", "encode_value", "registry_of", "blocking", "subjects", "subject", "version_param",
           "LEVELS"]

LEVELS: Final = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
                 "NONE")
MAX_SUBJECTS_SHOWN: Final = 1000


def registry_of(request: Request) -> RegistrySchemas:
    """The registry reader of this console (one per process: schemas by id are cached)."""
    state = request.app.state.console
    url = state.settings.schema_registry
    if url is None:
        raise BadInputError("schema registry", "this console was started without --schema-registry")
    reader = getattr(state, "registry_reader", None)
    if reader is None:
        reader = state.registry_reader = RegistrySchemas(url, timeout_s=state.settings.request_timeout_ms / 1000)
    return reader


async def blocking(request: Request, fn: Any, *args: Any) -> Any:
    return await trio.to_thread.run_sync(lambda: fn(*args), limiter=request.app.state.console.limiter)


def render_schema(registry: RegistrySchemas, raw: bytes | None) -> browse.Rendered:
    """A record part decoded through the registry (blocking), or hex with the reason it is not."""
    if raw is None:
        return browse.Rendered("null", "null", 0)
    try:
        decoded = decode(registry, raw)
    except (UndecodableError, RegistryError) as exc:
        shown = browse.render_bytes(raw, "hex")
        reason = str(exc) if isinstance(exc, UndecodableError) else exc.message
        return browse.Rendered(shown.kind, shown.text, shown.size, note=f"undecodable: {reason}", truncated=shown.truncated)
    pretty = json.dumps(decoded.value, indent=2, ensure_ascii=False)
    cut = pretty[:browse.SHOW_MAX_BYTES]
    return browse.Rendered("json", cut, len(raw), note=f"{decoded.schema_type} schema {decoded.schema_id}",
                           truncated=len(pretty) > len(cut))


def encode_value(registry: RegistrySchemas, subject: str, text: str) -> bytes:
    """The produce form's value (JSON text) encoded with the subject's latest schema (blocking).
    Raises BadInputError saying why not."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInputError("value", f"with a schema the value is JSON: {exc}") from None
    try:
        v = registry.version(subject)
        return encode_with(registry, None, data, schema_id=v.id)
    except EncodeError as exc:
        raise BadInputError("value", str(exc)) from None
    except RegistryError as exc:
        raise BadInputError("schema subject", exc.message) from None


def subjects(registry: RegistrySchemas) -> list[dict[str, Any]]:
    rows = []
    for subject in registry.get("/subjects")[:MAX_SUBJECTS_SHOWN]:
        quoted = urllib.parse.quote(subject, safe="")
        latest = registry.get(f"/subjects/{quoted}/versions/latest")
        level = registry.get(f"/config/{quoted}?defaultToGlobal=true").get("compatibilityLevel")
        rows.append({"subject": subject, "version": latest["version"], "id": latest["id"],
                     "type": latest.get("schemaType", "AVRO"), "level": level})
    return rows


def _pretty(schema_type: str, text: str) -> str:
    if schema_type == "PROTOBUF":
        return text
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=False)
    except ValueError:
        return text


def subject(registry: RegistrySchemas, subject: str, version: str, other: str | None) -> dict[str, Any]:
    quoted = urllib.parse.quote(subject, safe="")
    versions = registry.get(f"/subjects/{quoted}/versions")
    shown = registry.get(f"/subjects/{quoted}/versions/{version}")
    kind = shown.get("schemaType", "AVRO")
    diff = None
    if other:
        against = registry.get(f"/subjects/{quoted}/versions/{other}")
        diff = "\n".join(difflib.unified_diff(
            _pretty(kind, against["schema"]).splitlines(), _pretty(kind, shown["schema"]).splitlines(),
            fromfile=f"version {against['version']}", tofile=f"version {shown['version']}", lineterm=""))
    level = registry.get(f"/config/{quoted}?defaultToGlobal=true").get("compatibilityLevel")
    return {"subject": subject, "versions": versions, "shown": shown, "kind": kind,
            "text": _pretty(kind, shown["schema"]), "diff": diff, "other": other, "level": level}


def version_param(text: str | None, default: str) -> str:
    text = (text or default).strip()
    if text != "latest" and not (text.isascii() and text.isdigit() and len(text) < 10):
        raise BadInputError("version", "a version number or latest")
    return text

"""JSON Schemas for the registry: parsing (checked against its draft's metaschema with
`jsonschema`), the canonical form, and a compatibility check of our own following Confluent's
JSON Schema rules for the common cases: can every document valid under the writer's schema
be read with the reader's (is it valid under it)?

Pure: no I/O. Rules (Confluent's names in brackets):
* `type`: the reader's types must cover the writer's (integer is a number) [TYPE_CHANGED,
  TYPE_NARROWED];
* properties: one in both is checked recursively; one the reader removed is fine while the
  reader's content model is open, not when it is closed (`additionalProperties: false`)
  [PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL]; one the reader added is fine when the writer's
  model is closed, or when it accepts anything, else not (a writer with an open model may have
  written anything under that name) [PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL];
* `required`: a name the reader requires must be required by the writer, unless the
  reader gives it a default [REQUIRED_ATTRIBUTE_ADDED];
* `additionalProperties`: closing an open model is not [ADDITIONAL_PROPERTIES_REMOVED];
* `enum`: the reader's values must include the writer's [ENUM_ARRAY_NARROWED];
* `items`, `oneOf`/`anyOf` (every writer branch read by some reader branch), local `$ref`s;
* bounds: a reader narrower in maxLength/minLength/maximum/minimum/maxItems/minItems is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

__all__ = ["JsonSchema", "parse_json_schema", "json_incompatibilities"]

_MAX_BOUNDS: Final = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_MIN_BOUNDS: Final = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")


@dataclass(frozen=True)
class JsonSchema:
    """A parsed JSON Schema (the document) and its canonical text (sorted keys, no spaces)."""

    document: Any
    canonical: str


def parse_json_schema(text: str, references: list[str] = ()) -> JsonSchema:  # type: ignore[assignment]
    """Parse and check against the draft's metaschema. Raises ValueError saying why not."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON schema: not JSON ({exc})") from None
    if not isinstance(document, (dict, bool)):
        raise ValueError("invalid JSON schema: a schema is an object or a boolean")
    try:
        validator_for(document, default=jsonschema.Draft7Validator).check_schema(document)
    except SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None
    return JsonSchema(document, json.dumps(document, sort_keys=True, separators=(",", ":")))


def json_incompatibilities(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    """Why documents valid under `writer` may be invalid under `reader` (empty: none). Pure."""
    problems: list[str] = []
    _check(reader.document, reader.document, writer.document, writer.document, "#", problems, set())
    return problems


def _resolve(schema: Any, root: Any, depth: int = 0) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 32:
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return {}  # an external reference: not followed, taken as anything
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return {}
            target = target[part]
        schema, depth = target, depth + 1
    return schema


def _types(schema: dict[str, Any]) -> set[str] | None:
    t = schema.get("type")
    if t is None:
        return None
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
    return types


def _open(schema: dict[str, Any]) -> bool:
    return schema.get("additionalProperties", True) is not False


def _accepts_anything(schema: Any) -> bool:
    return schema is True or schema == {}


def _check(r: Any, rroot: Any, w: Any, wroot: Any, path: str, problems: list[str],
           seen: set[tuple[int, int]]) -> None:
    r, w = _resolve(r, rroot), _resolve(w, wroot)
    key = (id(r), id(w))
    if key in seen:
        return
    seen.add(key)
    if r is True or r == {} or w is False:
        return
    if r is False:
        problems.append(f"{path}: the reader accepts nothing")
        return
    if w is True:
        w = {}
    if not isinstance(r, dict) or not isinstance(w, dict):
        return
    for combo in ("oneOf", "anyOf"):
        if isinstance(w.get(combo), list):
            for i, branch in enumerate(w[combo]):
                _check_some(r, rroot, branch, wroot, f"{path}/{combo}/{i}", problems, seen)
            return
        if isinstance(r.get(combo), list):
            _check_some(r, rroot, {k: v for k, v in w.items()}, wroot, path, problems, seen)
            return
    rtypes, wtypes = _types(r), _types(w)
    if rtypes is not None:
        if wtypes is None:
            problems.append(f"{path}: the reader narrowed the type to {sorted(rtypes)}")
        else:
            covered = rtypes | ({"integer"} if "number" in rtypes else set())
            missing = wtypes - covered
            if missing:
                problems.append(f"{path}: type {sorted(missing)} is no longer accepted (reader: {sorted(rtypes)})")
    if "enum" in r:
        if "enum" not in w:
            problems.append(f"{path}: the reader added an enum")
        else:
            lost = [v for v in w["enum"] if v not in r["enum"]]
            if lost:
                problems.append(f"{path}: enum values {lost} were removed")
    for bound in _MAX_BOUNDS:
        if bound in r and (bound not in w or _num(r[bound]) < _num(w[bound])):
            problems.append(f"{path}: {bound} was narrowed")
    for bound in _MIN_BOUNDS:
        if bound in r and (bound not in w or _num(r[bound]) > _num(w[bound])):
            problems.append(f"{path}: {bound} was narrowed")
    _check_object(r, rroot, w, wroot, path, problems, seen)
    if "items" in r and isinstance(r["items"], (dict, bool)):
        _check(r["items"], rroot, w.get("items", {}) if isinstance(w.get("items", {}), (dict, bool)) else {},
               wroot, f"{path}/items", problems, seen)


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _check_some(r: dict[str, Any], rroot: Any, w: Any, wroot: Any, path: str, problems: list[str],
                seen: set[tuple[int, int]]) -> None:
    branches = r.get("oneOf") or r.get("anyOf")
    if not isinstance(branches, list):
        _check(r, rroot, w, wroot, path, problems, seen)
        return
    for branch in branches:
        attempt: list[str] = []
        _check(branch, rroot, w, wroot, path, attempt, set())
        if not attempt:
            return
    problems.append(f"{path}: no branch of the reader's oneOf/anyOf reads the writer's schema")


def _check_object(r: dict[str, Any], rroot: Any, w: dict[str, Any], wroot: Any, path: str,
                  problems: list[str], seen: set[tuple[int, int]]) -> None:
    rprops = r.get("properties") if isinstance(r.get("properties"), dict) else {}
    wprops = w.get("properties") if isinstance(w.get("properties"), dict) else {}
    for name, wprop in wprops.items():
        if name in rprops:
            _check(rprops[name], rroot, wprop, wroot, f"{path}/properties/{name}", problems, seen)
        elif not _open(r):
            problems.append(f"{path}/properties/{name}: removed from a closed content model")
        elif isinstance(r.get("additionalProperties"), dict):
            _check(r["additionalProperties"], rroot, wprop, wroot, f"{path}/properties/{name}", problems, seen)
    for name, rprop in rprops.items():
        if name in wprops:
            continue
        if _open(w) and not _accepts_anything(rprop):
            extra = w.get("additionalProperties")
            if isinstance(extra, dict):
                _check(rprop, rroot, extra, wroot, f"{path}/properties/{name}", problems, seen)
            else:
                problems.append(f"{path}/properties/{name}: added to an open content model")
    if _open(w) and not _open(r):
        problems.append(f"{path}: additionalProperties was removed (the model was closed)")
    rreq = r.get("required") if isinstance(r.get("required"), list) else []
    wreq = set(w.get("required")) if isinstance(w.get("required"), list) else set()
    for name in rreq:
        if name in wreq:
            continue
        prop = _resolve(rprops.get(name, {}), rroot)
        if isinstance(prop, dict) and "default" in prop:
            continue
        problems.append(f"{path}/required/{name}: a required property was added")

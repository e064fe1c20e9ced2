"""Avro schemas for the registry: parsing (fastavro), the canonical form used to find a schema
already registered, and schema resolution (Avro spec, "Schema Resolution") as a pure check:
can a reader with schema R read what a writer wrote with schema W?

Pure: no I/O. The resolution rules followed:
* a writer union: every branch must be readable; a reader union: some branch must read it;
* primitives: the same type, or a promotion (int -> long, float, double; long -> float,
  double; float -> double; string <-> bytes);
* records: the same name (or a reader alias); every reader field either in the writer (by
  name or alias; its type readable) or with a default; writer-only fields are skipped;
* enums: the same name; every writer symbol in the reader, unless the reader has a default;
* fixed: the same name and size; arrays and maps: their items / values readable.
Recursive types are checked once per (reader, writer) pair of names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import fastavro
from fastavro.schema import SchemaParseException, UnknownType, to_parsing_canonical_form

__all__ = ["AvroSchema", "parse_avro", "avro_incompatibilities"]

_PROMOTIONS: Final = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
_PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@dataclass(frozen=True)
class AvroSchema:
    """A parsed Avro schema: fastavro's parsed form, the named types it and its references
    define (fullname -> schema), and Avro's Parsing Canonical Form (for lookups)."""

    parsed: Any
    named: dict[str, Any]
    canonical: str


def parse_avro(text: str, references: list[str] = ()) -> AvroSchema:  # type: ignore[assignment]
    """Parse `text` (after the referenced schemas' texts, which define named types it may use).
    Raises ValueError with the parser's reason when a text is not a valid Avro schema."""
    named: dict[str, Any] = {}
    try:
        for ref in references:
            fastavro.parse_schema(json.loads(ref), named_schemas=named)
        raw = json.loads(text)
        _check_records(raw)
        parsed = fastavro.parse_schema(raw, named_schemas=named)
        canonical = to_parsing_canonical_form(raw) if not references else json.dumps(
            parsed, sort_keys=True, separators=(",", ":"))
    except (json.JSONDecodeError, SchemaParseException, UnknownType, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"invalid Avro schema: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"invalid Avro schema: {exc}") from None
    return AvroSchema(parsed, named, canonical)


def _check_records(schema: Any, depth: int = 0) -> None:
    """fastavro takes a record without `fields`; the spec (and Confluent) do not."""
    if depth > 200:
        raise ValueError("nested too deeply")
    if isinstance(schema, list):
        for branch in schema:
            _check_records(branch, depth + 1)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "error"):
            if not isinstance(schema.get("fields"), list):
                raise ValueError(f"record {schema.get('name')!r} has no fields list")
            for f in schema["fields"]:
                if not isinstance(f, dict) or "type" not in f:
                    raise ValueError(f"a field of record {schema.get('name')!r} has no type")
                _check_records(f["type"], depth + 1)
        else:
            for key in ("type", "items", "values"):
                if isinstance(schema.get(key), (dict, list)):
                    _check_records(schema[key], depth + 1)


def _type_of(schema: Any, named: dict[str, Any]) -> tuple[str, Any]:
    """(type name, the schema with named references resolved one level)."""
    if isinstance(schema, list):
        return "union", schema
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema, schema
        target = named.get(schema)
        if target is None:
            return "unknown", schema
        return _type_of(target, named)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES
                                              and kind not in ("record", "error", "enum", "fixed", "array", "map")):
            return _type_of(kind, named)
        return ("record" if kind == "error" else str(kind)), schema
    return "unknown", schema


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    def short(name: str) -> str:
        return name.rsplit(".", 1)[-1]
    rname, wname = str(reader.get("name", "")), str(writer.get("name", ""))
    aliases = {short(a) for a in reader.get("aliases", ())} | set(reader.get("aliases", ()))
    return rname == wname or short(rname) == short(wname) or wname in aliases or short(wname) in aliases


def avro_incompatibilities(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Why a reader of `reader` cannot read data written with `writer` (empty: it can). Pure."""
    problems: list[str] = []
    _check(reader.parsed, reader.named, writer.parsed, writer.named, "/", problems, set())
    return problems


def _check(r: Any, rn: dict[str, Any], w: Any, wn: dict[str, Any], path: str,
           problems: list[str], seen: set[tuple[str, str]]) -> bool:
    rk, rs = _type_of(r, rn)
    wk, ws = _type_of(w, wn)
    if wk == "union":
        ok = True
        for branch in ws:
            ok = _check(rs, rn, branch, wn, path, problems, seen) and ok
        return ok
    if rk == "union":
        for branch in rs:
            if not _check(branch, rn, ws, wn, path, [], seen):
                continue
            return True
        problems.append(f"{path}: the reader's union has no branch for the writer's {wk}")
        return False
    if rk in _PRIMITIVES or wk in _PRIMITIVES:
        if rk == wk or rk in _PROMOTIONS.get(wk, ()):
            return True
        problems.append(f"{path}: type {wk} cannot be read as {rk}")
        return False
    if rk != wk:
        problems.append(f"{path}: type {wk} cannot be read as {rk}")
        return False
    if rk in ("record", "enum", "fixed"):
        if not _names_match(rs, ws):
            problems.append(f"{path}: name {ws.get('name')} does not match {rs.get('name')}")
            return False
    if rk == "record":
        key = (str(rs.get("name")), str(ws.get("name")))
        if key in seen:
            return True
        seen.add(key)
        writer_fields = {f["name"]: f for f in ws.get("fields", ())}
        ok = True
        for field in rs.get("fields", ()):
            names = [field["name"], *field.get("aliases", ())]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            if match is None:
                if "default" not in field:
                    problems.append(f"{path}{field['name']}: reader field has no default and the writer lacks it")
                    ok = False
                continue
            ok = _check(field["type"], rn, match["type"], wn, f"{path}{field['name']}/", problems, seen) and ok
        return ok
    if rk == "enum":
        if "default" in rs:
            return True
        missing = [s for s in ws.get("symbols", ()) if s not in set(rs.get("symbols", ()))]
        if missing:
            problems.append(f"{path}: the reader's enum lacks symbols {missing} and has no default")
            return False
        return True
    if rk == "fixed":
        if rs.get("size") != ws.get("size"):
            problems.append(f"{path}: fixed size {ws.get('size')} cannot be read as size {rs.get('size')}")
            return False
        return True
    if rk == "array":
        return _check(rs.get("items"), rn, ws.get("items"), wn, f"{path}items/", problems, seen)
    if rk == "map":
        return _check(rs.get("values"), rn, ws.get("values"), wn, f"{path}values/", problems, seen)
    problems.append(f"{path}: unknown type {rk}")
    return False

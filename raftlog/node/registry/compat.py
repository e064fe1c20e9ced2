"""Schema types and compatibility levels: one entry point over the three formats.

    parse_schema("AVRO", text, [referenced texts]) -> Parsed     (raises InvalidSchemaError)
    incompatibilities(level, new, [existing, newest last])        -> [reasons]  (empty: compatible)

Levels (Confluent's): BACKWARD (the new schema reads data written with the latest), FORWARD
(the latest reads data written with the new one), FULL (both), their *_TRANSITIVE forms
(against every existing version instead of only the latest) and NONE. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from raftlog.node.registry.avro import avro_incompatibilities, parse_avro
from raftlog.node.registry.errors import InvalidSchemaError
from raftlog.node.registry.json_schema import json_incompatibilities, parse_json_schema
from raftlog.node.registry.protobuf import parse_protobuf, protobuf_incompatibilities

__all__ = ["SCHEMA_TYPES", "LEVELS", "Parsed", "parse_schema", "incompatibilities"]

SCHEMA_TYPES: Final = ("AVRO", "JSON", "PROTOBUF")
LEVELS: Final = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                 "FULL_TRANSITIVE", "NONE")

_PARSERS: Final[dict[str, Callable[[str, list[str]], Any]]] = {
    "AVRO": parse_avro, "JSON": parse_json_schema, "PROTOBUF": parse_protobuf,
}
_CHECKERS: Final[dict[str, Callable[[Any, Any], list[str]]]] = {
    "AVRO": avro_incompatibilities, "JSON": json_incompatibilities, "PROTOBUF": protobuf_incompatibilities,
}


@dataclass(frozen=True)
class Parsed:
    """A parsed schema: its type, the format's model, and its canonical form (two texts with
    the same canonical form are the same schema: one id)."""

    schema_type: str
    model: Any
    canonical: str


def parse_schema(schema_type: str, text: str, references: Sequence[str] = ()) -> Parsed:
    """Parse `text` of `schema_type` with the texts of its references (in order). Raises
    InvalidSchemaError (42201) with the parser's reason."""
    parser = _PARSERS.get(schema_type)
    if parser is None:
        raise InvalidSchemaError(f"unknown schema type {schema_type!r}; one of {', '.join(SCHEMA_TYPES)}")
    try:
        model = parser(text, list(references))
    except ValueError as exc:
        raise InvalidSchemaError(str(exc)) from None
    except RecursionError:
        raise InvalidSchemaError("invalid schema: nested too deeply") from None
    return Parsed(schema_type, model, model.canonical)


def _pair(reader: Parsed, writer: Parsed) -> list[str]:
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type} to {reader.schema_type}"]
    return _CHECKERS[reader.schema_type](reader.model, writer.model)


def incompatibilities(level: str, new: Parsed, existing: Sequence[Parsed]) -> list[str]:
    """Why `new` may not follow `existing` (oldest first) under `level`; empty when it may.
    Raises ValueError for an unknown level."""
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += [f"{p} (new schema reading old data)" for p in _pair(new, old)]
        if base in ("FORWARD", "FULL"):
            problems += [f"{p} (old schema reading new data)" for p in _pair(old, new)]
        if problems:
            break
    return problems

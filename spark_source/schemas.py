"""Typed keys and values for the source and the sink: `valueFormat` / `keyFormat` = `avro` |
`protobuf` | `json-schema` with `schemaRegistryUrl` decode Confluent's wire format into a struct
column (and encode one), through the registry (raftlog's or Confluent's).

    options: valueFormat, keyFormat, schemaRegistryUrl, valueSubject, keySubject
             (subjects default to <topic>-value / <topic>-key, TopicNameStrategy)

Source: the column's type comes from the subject's latest schema, read once on the driver
(Avro records, JSON Schema objects and Protobuf messages become structs; a JSON Schema's
property without a simple type is its JSON text). Every record is decoded by the schema id it
carries; one that does not decode (no magic byte, an unknown id, bytes that do not fit) gives a
null struct and the reason in `value_error` (`key_error`). Sink: the struct column is encoded
with the subject's latest schema (its id in each record's 5-byte header).

The registry is read over HTTP (raftlog/node/registry/remote.py); the wire format itself is
raftlog/node/registry/serde.py's.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from raftlog.node.registry.compat import Parsed
from raftlog.node.registry.errors import SubjectNotFoundError, VersionNotFoundError
from raftlog.node.registry.remote import RegistrySchemas
from raftlog.node.registry.serde import EncodeError, UndecodableError, decode, encode_with
from spark_source.options import InvalidOption, SourceError

__all__ = ["FORMAT_OPTIONS", "FormatOptions", "parse_format_options", "RegistrySchemas", "arrow_type_of",
           "spark_ddl", "decode_column", "encode_column", "typed_schema_ddl", "typed_batches"]

FORMATS: Final = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
FORMAT_OPTIONS: Final = frozenset({"valueformat", "keyformat", "schemaregistryurl", "valuesubject", "keysubject"})
MAX_DEPTH: Final = 32


@dataclass(frozen=True, slots=True)
class FormatOptions:
    registry_url: str
    value_format: str | None  # AVRO | PROTOBUF | JSON
    key_format: str | None
    value_subject: str | None
    key_subject: str | None

    def subject(self, part: str, topic: str | None) -> str:
        given = self.value_subject if part == "value" else self.key_subject
        if given:
            return given
        if topic is None:
            raise InvalidOption(f"{part}Format needs {part}Subject, or one topic (subscribe / the topic option) "
                                f"to name the subject <topic>-{part}")
        return f"{topic}-{part}"


def parse_format_options(raw: Mapping[str, str]) -> FormatOptions | None:
    """The format options of a lower-cased option map, or None when neither format is set.
    Raises InvalidOption."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    formats = {}
    for part in ("value", "key"):
        given = opts.get(f"{part}format")
        if given is None:
            formats[part] = None
            continue
        if given.strip().lower() not in FORMATS:
            raise InvalidOption(f"option {part}Format={given!r}: expected one of {', '.join(FORMATS)}")
        formats[part] = FORMATS[given.strip().lower()]
    if formats["value"] is None and formats["key"] is None:
        for name in ("schemaregistryurl", "valuesubject", "keysubject"):
            if name in opts:
                raise InvalidOption(f"option {name} needs valueFormat or keyFormat")
        return None
    url = opts.get("schemaregistryurl", "").strip().rstrip("/")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidOption(f"option schemaRegistryUrl={url!r}: expected http(s)://host:port of a schema registry")
    return FormatOptions(url, formats["value"], formats["key"], opts.get("valuesubject"), opts.get("keysubject"))


# ---------------------------------------------------------------------------------- types

_AVRO_PRIMITIVES: Final = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                           "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
_PROTO_SCALARS: Final = {"double": pa.float64(), "float": pa.float32(), "int32": pa.int32(), "sint32": pa.int32(),
                         "sfixed32": pa.int32(), "uint32": pa.int64(), "fixed32": pa.int64(), "int64": pa.int64(),
                         "sint64": pa.int64(), "sfixed64": pa.int64(), "uint64": pa.int64(), "fixed64": pa.int64(),
                         "bool": pa.bool_(), "string": pa.string(), "bytes": pa.string()}
_JSON_TYPES: Final = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


def _avro(schema: Any, depth: int = 0) -> pa.DataType:
    if depth > MAX_DEPTH:
        raise InvalidOption("the Avro schema nests too deeply for a Spark column")
    if isinstance(schema, str):
        return _AVRO_PRIMITIVES.get(schema, pa.string())
    if isinstance(schema, list):  # a union: its one non-null branch, else the JSON text
        branches = [b for b in schema if b != "null"]
        return _avro(branches[0], depth + 1) if len(branches) == 1 else pa.string()
    kind = schema.get("type")
    if kind == "record":
        return pa.struct([pa.field(f["name"], _avro(f["type"], depth + 1)) for f in schema["fields"]])
    if kind == "array":
        return pa.list_(_avro(schema["items"], depth + 1))
    if kind == "map":
        return pa.map_(pa.string(), _avro(schema["values"], depth + 1))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return _avro(kind, depth + 1)


def _json_type(schema: Any, depth: int = 0) -> pa.DataType:
    if depth > MAX_DEPTH or not isinstance(schema, dict):
        return pa.string()
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" and isinstance(schema.get("properties"), dict):
        return pa.struct([pa.field(name, _json_type(sub, depth + 1)) for name, sub in schema["properties"].items()])
    if kind == "array":
        return pa.list_(_json_type(schema.get("items"), depth + 1))
    return _JSON_TYPES.get(kind, pa.string())


def _proto(model: Any, name: str, depth: int = 0) -> pa.DataType:
    if depth > MAX_DEPTH:
        raise InvalidOption("the Protobuf message nests too deeply for a Spark column")
    fields = []
    for _, f in sorted(model.messages[name].items()):
        if f.type.startswith("map<"):
            t: pa.DataType = pa.map_(pa.string(), pa.string())
        elif f.type.startswith("message:"):
            t = _proto(model, f.type.split(":", 1)[1], depth + 1)
        elif f.type.startswith("enum:"):
            t = pa.string()
        else:
            t = _PROTO_SCALARS.get(f.type, pa.string())
        fields.append(pa.field(f.name, pa.list_(t) if f.label == "repeated" and not f.type.startswith("map<") else t))
    return pa.struct(fields)


def arrow_type_of(parsed: Parsed) -> pa.DataType:
    """The Arrow type of a decoded value of `parsed` (a struct for records and messages)."""
    if parsed.schema_type == "AVRO":
        return _avro(json.loads(json.dumps(parsed.model.parsed)))
    if parsed.schema_type == "JSON":
        return _json_type(parsed.model.document)
    model = parsed.model
    prefix = f"{model.package}." if model.package else ""
    top = next(m for m in model.messages if "." not in m.removeprefix(prefix))
    return _proto(model, top)


def spark_ddl(t: pa.DataType) -> str:
    """Spark's DDL type of an Arrow type made by arrow_type_of."""
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"`{f.name}`:{spark_ddl(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{spark_ddl(t.key_type)},{spark_ddl(t.item_type)}>"
    if pa.types.is_list(t):
        return f"array<{spark_ddl(t.value_type)}>"
    return {pa.bool_(): "boolean", pa.int32(): "int", pa.int64(): "bigint", pa.float32(): "float",
            pa.float64(): "double", pa.binary(): "binary", pa.null(): "string"}.get(t, "string")


def _fit(value: Any, t: pa.DataType) -> Any:
    """A decoded value shaped for `t` (JSON text where the type is a string but the value is not)."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            return None
        return {f.name: _fit(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t):
        return [_fit(v, t.value_type) for v in value] if isinstance(value, list) else None
    if pa.types.is_map(t):
        return [(str(k), _fit(v, t.item_type)) for k, v in value.items()] if isinstance(value, dict) else None
    if pa.types.is_string(t) and not isinstance(value, str):
        return json.dumps(value, default=str)
    return value


def decode_column(col: pa.Array, schemas: RegistrySchemas, t: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """(decoded values as `t`, the reason per undecodable record or null)."""
    values, errors = [], []
    for raw in col.to_pylist():
        if raw is None:
            values.append(None)
            errors.append(None)
            continue
        try:
            values.append(_fit(decode(schemas, raw, jsonable=False).value, t))
            errors.append(None)
        except UndecodableError as exc:
            values.append(None)
            errors.append(str(exc))
    return pa.array(values, type=t), pa.array(errors, type=pa.string())


def _unfit(value: Any) -> Any:
    """A Spark row's value back to plain Python (maps come as lists of pairs)."""
    if isinstance(value, dict):
        return {k: _unfit(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {k: _unfit(v) for k, v in value}
        return [_unfit(v) for v in value]
    return value


def encode_column(col: pa.Array, schemas: RegistrySchemas, schema_type: str, subject: str) -> list[bytes | None]:
    """Each struct of the column in the wire format, with the subject's latest schema.
    Raises InvalidOption (no such subject) or SourceError naming the row that does not fit."""
    try:
        v = schemas.version(subject)
    except (SubjectNotFoundError, VersionNotFoundError) as exc:
        raise InvalidOption(f"subject {subject!r} is not in the schema registry: {exc.message}") from None
    out: list[bytes | None] = []
    for i, row in enumerate(col.to_pylist()):
        if row is None:
            out.append(None)
            continue
        data = _unfit(row)
        if schema_type == "JSON":
            data = {k: x for k, x in data.items() if x is not None}
        try:
            out.append(encode_with(schemas, schema_type, data, schema_id=v.id))
        except EncodeError as exc:
            raise SourceError(f"row {i} does not fit {subject} (schema {v.id}): {exc}") from None
    return out


# ---------------------------------------------------------------------------------- the source's columns

def _part_types(formats: FormatOptions, topic: str | None, schemas: RegistrySchemas) -> dict[str, pa.DataType]:
    out = {}
    for part, fmt in (("key", formats.key_format), ("value", formats.value_format)):
        if fmt is None:
            continue
        subject = formats.subject(part, topic)
        try:
            v = schemas.version(subject)
        except (SubjectNotFoundError, VersionNotFoundError) as exc:
            raise InvalidOption(f"subject {subject!r} is not in the schema registry: {exc.message}") from None
        if v.schema_type != fmt:
            raise InvalidOption(f"{part}Format is {fmt} but subject {subject!r} holds a {v.schema_type} schema")
        out[part] = arrow_type_of(schemas.parsed(v))
    return out


def typed_schema_ddl(base_ddl: str, formats: FormatOptions, topic: str | None) -> str:
    """The source's schema with `key` / `value` typed and `key_error` / `value_error` after them."""
    types = _part_types(formats, topic, RegistrySchemas(formats.registry_url))
    columns = []
    for column in base_ddl.split(", "):
        name = column.split(" ", 1)[0]
        if name in types:
            columns += [f"{name} {spark_ddl(types[name])}", f"{name}_error STRING"]
        else:
            columns.append(column)
    return ", ".join(columns)


def typed_batches(batches: Iterator[pa.RecordBatch], formats: FormatOptions,
                  topic: str | None) -> Iterator[pa.RecordBatch]:
    """The source's batches with `key` / `value` decoded (typed_schema_ddl's columns)."""
    schemas = RegistrySchemas(formats.registry_url)
    types = _part_types(formats, topic, schemas)
    for batch in batches:
        names, arrays = [], []
        for name, col in zip(batch.schema.names, batch.columns):
            if name in types:
                decoded, errors = decode_column(col, schemas, types[name])
                names += [name, f"{name}_error"]
                arrays += [decoded, errors]
            else:
                names.append(name)
                arrays.append(col)
        yield pa.RecordBatch.from_arrays(arrays, names=names)

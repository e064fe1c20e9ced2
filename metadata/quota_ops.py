"""The metadata service's client quota ops (issue 41; Kafka's AlterClientQuotas and
DescribeClientQuotas), kept out of service.py: request fields in, ClientQuota records or an
answer from the image out (pure).

    alter_client_quotas     {"entries": [{"entity": {"user": name|null, "client-id": name|null},
                              "ops": [{"key", "value", "remove"}]}], "validate_only": bool}
                            -> {"results": [{"entity"} or {"entity", "error"}]}: the active
                            controller decides (forwarded there like the other admin ops)
    describe_client_quotas  {"components": [{"entity_type", "match_type", "match"}], "strict"}
                            -> {"entries": [{"entity", "values": {key: value}}]}: any node
                            answers from its own image

An entity names "user" and/or "client-id" (Kafka's entity types); a null name is the default
entity (`--entity-default`, DEFAULT_ENTITY in the records). Each entry stands alone: one with a
bad entity or op answers its error (INVALID_REQUEST, INVALID_CONFIG) and the others apply.
Describe's match types are Kafka's: 0 the exact name, 1 the default, 2 any name given; with
`strict` an entity of other types than the components' is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from metadata.errors import InvalidRecordError
from metadata.image import MetadataImage, entity_order
from metadata.records import CLIENT_QUOTA_KEYS, DEFAULT_ENTITY, ClientQuota, Record
from raftlog.base.errors import InvalidConfigError, InvalidRequestError, RaftlogError

__all__ = ["ADMIN_QUOTA_OPS", "DESCRIBE_QUOTA_OPS", "plan_alter", "describe", "MAX_QUOTA_ENTRIES"]

ADMIN_QUOTA_OPS: Final = frozenset({"alter_client_quotas"})
DESCRIBE_QUOTA_OPS: Final = frozenset({"describe_client_quotas"})
ENTITY_TYPES: Final = ("user", "client-id")
MAX_QUOTA_ENTRIES: Final = 1000
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _entity(obj: Any) -> tuple[str | None, str | None]:
    if not isinstance(obj, Mapping) or not obj or not set(obj) <= set(ENTITY_TYPES):
        raise InvalidRequestError(f"a quota entity names {' and/or '.join(ENTITY_TYPES)}", field="entity")
    names = []
    for kind in ENTITY_TYPES:
        name = obj.get(kind, ...)
        if name is not ... and name is not None and type(name) is not str:
            raise InvalidRequestError(f"entity {kind} must be a name or null (the default)", field="entity")
        names.append(None if name is ... else DEFAULT_ENTITY if name is None else name)
    return names[0], names[1]


def entity_to_obj(entity: tuple[str | None, str | None]) -> dict[str, str | None]:
    return {kind: None if name == DEFAULT_ENTITY else name
            for kind, name in zip(ENTITY_TYPES, entity) if name is not None}


def _record(entry: Mapping[str, Any]) -> ClientQuota:
    user, client_id = _entity(entry.get("entity"))
    ops = entry.get("ops")
    if not isinstance(ops, list):
        raise InvalidRequestError("ops must be a list", field="ops")
    set_: dict[str, str] = {}
    delete: list[str] = []
    for op in ops:
        key = op.get("key") if isinstance(op, Mapping) else None
        if key not in CLIENT_QUOTA_KEYS:
            raise InvalidRequestError(f"unknown quota {key!r:.60}; known: {', '.join(CLIENT_QUOTA_KEYS)}", field="key")
        if key in set_ or key in delete:
            raise InvalidRequestError(f"quota {key} altered twice in one entry", field="key")
        if op.get("remove"):
            delete.append(key)
            continue
        value = op.get("value")
        if type(value) not in (int, float) or not (0 < value < math.inf):
            raise InvalidConfigError(f"{key} must be a positive number, got {value!r:.40}", key=key)
        set_[key] = repr(float(value))
    try:
        return ClientQuota(user, client_id, set_, tuple(delete))
    except InvalidRecordError as exc:  # e.g. a name too long for the record
        raise InvalidRequestError(exc.message, field="entity") from None


def plan_alter(fields: Mapping[str, Any]) -> tuple[list[Record], list[dict[str, Any]]]:
    """The records of an alter_client_quotas request (none with validate_only) and its answer."""
    entries = fields.get("entries")
    if not isinstance(entries, list) or len(entries) > MAX_QUOTA_ENTRIES:
        raise InvalidRequestError(f"entries must be a list of at most {MAX_QUOTA_ENTRIES}", field="entries")
    records: list[Record] = []
    results: list[dict[str, Any]] = []
    seen: set[tuple[str | None, str | None]] = set()
    for entry in entries:
        raw = entry.get("entity") if isinstance(entry, Mapping) else None
        try:
            if not isinstance(entry, Mapping):
                raise InvalidRequestError("each entry is a map", field="entries")
            record = _record(entry)
            if record.entity in seen:
                raise InvalidRequestError("the same entity twice in one request", field="entity")
            seen.add(record.entity)
        except RaftlogError as exc:
            results.append({"entity": raw if isinstance(raw, Mapping) else {}, "error": exc.to_wire()})
            continue
        records.append(record)
        results.append({"entity": entity_to_obj(record.entity)})
    return ([] if fields.get("validate_only") else records), results


def _matches(entity: tuple[str | None, str | None], components: list[Any], strict: bool) -> bool:
    named = dict(zip(ENTITY_TYPES, entity))
    asked = set()
    for c in components:
        kind, match_type, match = c.get("entity_type"), c.get("match_type"), c.get("match")
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(f"unknown entity type {kind!r:.40}", field="entity_type")
        if kind in asked:
            raise InvalidRequestError(f"entity type {kind} twice in the filter", field="entity_type")
        asked.add(kind)
        name = named[kind]
        if match_type == MATCH_EXACT:
            if type(match) is not str or name != match:
                return False
        elif match_type == MATCH_DEFAULT:
            if name != DEFAULT_ENTITY:
                return False
        elif match_type == MATCH_SPECIFIED:
            if name is None:
                return False
        else:
            raise InvalidRequestError(f"unknown match type {match_type!r:.20}", field="match_type")
    return not strict or {k for k, n in named.items() if n is not None} <= asked


def describe(image: MetadataImage, fields: Mapping[str, Any]) -> dict[str, Any]:
    components = fields.get("components", [])
    if not isinstance(components, list) or not all(isinstance(c, Mapping) for c in components):
        raise InvalidRequestError("components must be a list of maps", field="components")
    strict = bool(fields.get("strict", False))
    entries = [
        {"entity": entity_to_obj(entity), "values": dict(values)}
        for entity, values in sorted(image.client_quotas.items(), key=lambda kv: entity_order(kv[0]))
        if _matches(entity, components, strict)
    ]
    if not image.client_quotas:  # still check the filter
        _matches((None, None), components, False)
    return {"entries": entries}

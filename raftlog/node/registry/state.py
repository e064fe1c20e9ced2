"""The registry's state machine: replayed from `_schemas` records, answering every read, and
deciding every write as "records to append + the answer" (the shell appends them through the
one writer, the leader of `_schemas`-0, and applies them when it reads them back).

Records are Confluent's (JSON keys and values, so the topic reads as Confluent's does):

    {"keytype": "SCHEMA", "subject": s, "version": v, "magic": 1}
        -> {"subject", "version", "id", "schemaType", "schema", "references", "deleted"} | None
    {"keytype": "CONFIG", "subject": s | null, "magic": 0} -> {"compatibilityLevel": L} | None
    {"keytype": "MODE", "subject": s | null, "magic": 0}   -> {"mode": M} | None

A None value (tombstone) is a hard delete. Invariants: ids are never reused while a record
naming them exists (next id = the largest seen + 1); one canonical schema (type, canonical
form, references) has one id across subjects; versions of a subject only grow. Pure: no I/O,
no clock; not thread-safe (the shell calls it from one trio task at a time).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from raftlog.node.registry.compat import LEVELS, Parsed, incompatibilities, parse_schema
from raftlog.node.registry.errors import (
    IncompatibleSchemaError, InvalidCompatibilityError, InvalidModeError, InvalidSchemaError,
    InvalidVersionError, OperationNotPermittedError, ReferenceExistsError, SchemaNotFoundError,
    SubjectCompatibilityNotSetError, SubjectModeNotSetError, SubjectNotFoundError,
    SubjectNotSoftDeletedError, VersionNotFoundError, VersionNotSoftDeletedError,
)

__all__ = ["Version", "RegistryState", "Record", "record_key", "DEFAULT_LEVEL", "MODES"]

DEFAULT_LEVEL: Final = "BACKWARD"
MODES: Final = ("READWRITE", "READONLY", "IMPORT")
MAX_PARSED_CACHE: Final = 10_000

Record = tuple[bytes, bytes | None]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def record_key(keytype: str, subject: str | None, version: int | None = None) -> bytes:
    """The `_schemas` key of a record (canonical JSON: one key per thing, for compaction)."""
    key: dict[str, Any] = {"keytype": keytype, "subject": subject, "magic": 1 if keytype == "SCHEMA" else 0}
    if version is not None:
        key["version"] = version
    return _json(key)


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """Confluent's body of GET /subjects/{s}/versions/{v}."""
        body: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id,
                                "schema": self.schema}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [{"name": n, "subject": s, "version": v} for n, s, v in self.references]
        return body


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    config: dict[str | None, str] = field(default_factory=dict)
    mode: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    applied_offset: int = -1
    _parsed: dict[int, Parsed] = field(default_factory=dict)

    # ------------------------------------------------------------------ replay

    def apply(self, offset: int, key: bytes, value: bytes | None) -> None:
        """Apply one record read back from `_schemas` at `offset`. Records this version does
        not know are skipped (a newer writer's), and so are records at or below
        `applied_offset` (read twice: applying an older record again would undo a newer one)."""
        if offset <= self.applied_offset:
            return
        self.applied_offset = offset
        try:
            k = json.loads(key)
            v = None if value is None else json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(k, dict):
            return
        subject = k.get("subject")
        kind = k.get("keytype")
        if kind == "SCHEMA" and isinstance(subject, str) and type(k.get("version")) is int:
            versions = self.subjects.setdefault(subject, {})
            if v is None:
                versions.pop(k["version"], None)
                if not versions:
                    del self.subjects[subject]
                return
            refs = tuple((r["name"], r["subject"], r["version"]) for r in v.get("references") or ())
            entry = Version(subject, k["version"], int(v["id"]), v.get("schemaType") or "AVRO",
                            v["schema"], refs, bool(v.get("deleted")))
            versions[entry.version] = entry
            self.max_id = max(self.max_id, entry.id)
        elif kind == "CONFIG":
            if v is None:
                self.config.pop(subject, None)
            elif v.get("compatibilityLevel") in LEVELS:
                self.config[subject] = v["compatibilityLevel"]
        elif kind == "MODE":
            if v is None:
                self.mode.pop(subject, None)
            elif v.get("mode") in MODES:
                self.mode[subject] = v["mode"]

    # ------------------------------------------------------------------ reads

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, vs in self.subjects.items() if deleted or any(not v.deleted for v in vs.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first. Raises SubjectNotFoundError."""
        found = [v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]
        if not found:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        return found

    def version(self, subject: str, version: Any, deleted: bool = False) -> Version:
        """`version`: a number, "latest" or -1. Raises SubjectNotFoundError,
        VersionNotFoundError, InvalidVersionError."""
        number = parse_version(version)
        found = self.versions(subject, deleted=True)
        live = [v for v in found if deleted or not v.deleted]
        if number == -1:
            if not live:
                raise SubjectNotFoundError(f"Subject '{subject}' not found.")
            return live[-1]
        match = next((v for v in live if v.version == number), None)
        if match is None:
            raise VersionNotFoundError(f"Version {number} not found.")
        return match

    def by_id(self, schema_id: int) -> Version:
        """One version holding schema `schema_id` (its text and type). Raises SchemaNotFoundError."""
        for versions in self.subjects.values():
            for v in versions.values():
                if v.id == schema_id:
                    return v
        raise SchemaNotFoundError(f"Schema {schema_id} not found")

    def uses_of(self, schema_id: int, deleted: bool = False) -> list[Version]:
        return [v for s in sorted(self.subjects) for _, v in sorted(self.subjects[s].items())
                if v.id == schema_id and (deleted or not v.deleted)]

    def level(self, subject: str | None, default_to_global: bool = True) -> str:
        """The compatibility level of `subject` (None: the global one). Raises
        SubjectCompatibilityNotSetError when asked for a subject's own level and it has none."""
        if subject in self.config:
            return self.config[subject]
        if subject is not None and not default_to_global:
            raise SubjectCompatibilityNotSetError(f"Subject '{subject}' does not have subject-level compatibility configured")
        return self.config.get(None, DEFAULT_LEVEL)

    def mode_of(self, subject: str | None, default_to_global: bool = True) -> str:
        if subject in self.mode:
            return self.mode[subject]
        if subject is not None and not default_to_global:
            raise SubjectModeNotSetError(f"Subject '{subject}' does not have subject-level mode configured")
        return self.mode.get(None, "READWRITE")

    def parsed(self, v: Version) -> Parsed:
        cached = self._parsed.get(v.id)
        if cached is None:
            cached = parse_schema(v.schema_type, v.schema, self.reference_texts(v.references))
            if len(self._parsed) >= MAX_PARSED_CACHE:
                self._parsed.clear()
            self._parsed[v.id] = cached
        return cached

    def reference_texts(self, refs: Sequence[tuple[str, str, int]]) -> list[str]:
        """The texts of the referenced versions. Raises InvalidSchemaError for a missing one."""
        texts = []
        for name, subject, version in refs:
            try:
                texts.append(self.version(subject, version).schema)
            except (SubjectNotFoundError, VersionNotFoundError):
                raise InvalidSchemaError(f"Invalid schema: reference {name!r} to {subject} version {version} does not exist") from None
        return texts

    def lookup(self, subject: str, schema_type: str, text: str, refs: Sequence[tuple[str, str, int]],
               deleted: bool = False) -> Version | None:
        """The subject's version with this schema, or None. Raises InvalidSchemaError."""
        new = parse_schema(schema_type, text, self.reference_texts(refs))
        for v in self.subjects.get(subject, {}).values():
            if (deleted or not v.deleted) and v.schema_type == schema_type and v.references == tuple(refs) \
                    and self.parsed(v).canonical == new.canonical:
                return v
        return None

    # ------------------------------------------------------------------ writes (decisions)

    def register(self, subject: str, schema_type: str, text: str, refs: Sequence[tuple[str, str, int]],
                 schema_id: int | None = None, version: int | None = None) -> tuple[list[Record], Version]:
        """Records that register `text` under `subject` (none when it is there already) and the
        version it is (or will be). Raises InvalidSchemaError, IncompatibleSchemaError,
        OperationNotPermittedError (READONLY mode)."""
        mode = self.mode_of(subject)
        if mode == "READONLY":
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        refs = tuple(refs)
        new = parse_schema(schema_type, text, self.reference_texts(refs))
        live = [v for _, v in sorted(self.subjects.get(subject, {}).items()) if not v.deleted]
        for v in live:
            if v.schema_type == schema_type and v.references == refs and self.parsed(v).canonical == new.canonical:
                return [], v
        if mode != "IMPORT":
            problems = incompatibilities(self.level(subject), new, [self.parsed(v) for v in live])
            if problems:
                raise IncompatibleSchemaError(
                    "Schema being registered is incompatible with an earlier schema for subject "
                    f"\"{subject}\", details: {problems}")
        if schema_id is None:
            schema_id = self._same_schema_id(schema_type, new.canonical, refs) or self.max_id + 1
        else:  # IMPORT mode: the id is the caller's, but one id is one schema
            taken = next((v for vs in self.subjects.values() for v in vs.values() if v.id == schema_id), None)
            if taken is not None and (taken.schema_type != schema_type or taken.references != refs
                                      or self.parsed(taken).canonical != new.canonical):
                raise OperationNotPermittedError(f"Overwrite new schema with id {schema_id} is not permitted.")
        everything = self.subjects.get(subject, {})
        number = version if version is not None else (max(everything) + 1 if everything else 1)
        entry = Version(subject, number, schema_id, schema_type, text, refs)
        return [self._schema_record(entry)], entry

    def _same_schema_id(self, schema_type: str, canonical: str, refs: tuple[Any, ...]) -> int | None:
        for versions in self.subjects.values():
            for v in versions.values():
                if v.schema_type == schema_type and v.references == refs and self.parsed(v).canonical == canonical:
                    return v.id
        return None

    def _schema_record(self, v: Version) -> Record:
        value = {"subject": v.subject, "version": v.version, "id": v.id, "schemaType": v.schema_type,
                 "schema": v.schema, "deleted": v.deleted,
                 "references": [{"name": n, "subject": s, "version": n2} for n, s, n2 in v.references]}
        return record_key("SCHEMA", v.subject, v.version), _json(value)

    def _referenced(self, subject: str, version: int) -> bool:
        return any((subject, version) == (s, n) for vs in self.subjects.values() for v in vs.values()
                   if not v.deleted for _, s, n in v.references)

    def delete_subject(self, subject: str, permanent: bool) -> tuple[list[Record], list[int]]:
        """Records that soft-delete (or, after that, hard-delete) every version; the versions.
        Raises SubjectNotFoundError, SubjectNotSoftDeletedError, ReferenceExistsError."""
        if self.mode_of(subject) == "READONLY":
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        everything = self.versions(subject, deleted=True)
        for v in everything:
            if self._referenced(subject, v.version):
                raise ReferenceExistsError(f"One or more references exist to the schema {{subject={subject},version={v.version}}}")
        if permanent:
            if any(not v.deleted for v in everything):
                raise SubjectNotSoftDeletedError(f"Subject '{subject}' was not deleted first before being permanently deleted")
            return [(record_key("SCHEMA", subject, v.version), None) for v in everything], [v.version for v in everything]
        live = self.versions(subject)
        return ([self._schema_record(Version(v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True))
                 for v in live], [v.version for v in live])

    def delete_version(self, subject: str, version: Any, permanent: bool) -> tuple[list[Record], int]:
        """Records that delete one version; its number. Raises as `version` and
        VersionNotSoftDeletedError, ReferenceExistsError."""
        if self.mode_of(subject) == "READONLY":
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        v = self.version(subject, version, deleted=permanent)
        if self._referenced(subject, v.version):
            raise ReferenceExistsError(f"One or more references exist to the schema {{subject={subject},version={v.version}}}")
        if permanent:
            if not v.deleted:
                raise VersionNotSoftDeletedError(f"Subject '{subject}' Version {v.version} was not deleted first before being permanently deleted")
            return [(record_key("SCHEMA", subject, v.version), None)], v.version
        deleted = Version(v.subject, v.version, v.id, v.schema_type, v.schema, v.references, True)
        return [self._schema_record(deleted)], v.version

    def set_level(self, subject: str | None, level: Any) -> list[Record]:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise InvalidCompatibilityError(f"Invalid compatibility level. Valid values are: {', '.join(LEVELS)}")
        return [(record_key("CONFIG", subject), _json({"compatibilityLevel": level.upper()}))]

    def delete_level(self, subject: str | None) -> tuple[list[Record], str]:
        """Records that drop a level (the subject's, or the global one back to the default);
        the level it had. Raises SubjectCompatibilityNotSetError for a subject without one."""
        old = self.level(subject, default_to_global=subject is None)
        return [(record_key("CONFIG", subject), None)], old

    def set_mode(self, subject: str | None, mode: Any) -> list[Record]:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise InvalidModeError(f"Invalid mode. Valid values are: {', '.join(MODES)}")
        return [(record_key("MODE", subject), _json({"mode": mode.upper()}))]

    def delete_mode(self, subject: str) -> tuple[list[Record], str]:
        old = self.mode_of(subject, default_to_global=False)
        return [(record_key("MODE", subject), None)], old


def parse_version(version: Any) -> int:
    """A version from a path or body: a positive int, "latest" or -1 (-1 means latest).
    Raises InvalidVersionError."""
    if version == "latest" or version == -1 or version == "-1":
        return -1
    try:
        number = int(version) if not isinstance(version, bool) else 0
    except (TypeError, ValueError):
        number = 0
    if number < 1 or number > 2**31 - 1:
        raise InvalidVersionError(
            f"The specified version '{str(version)[:40]}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"")
    return number

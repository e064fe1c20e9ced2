"""A registry's schemas read over HTTP (raftlog's or Confluent's), for the clients of the
wire format outside a node: the console's message browser and the Spark source and sink.
`RegistrySchemas` duck-types RegistryState's `by_id`, `version` and `parsed`, so serde.py's
`decode` and `encode_with` take it as they take the state. Blocking (urllib): call it from a
worker thread in async code. Schemas by id are cached (an id's schema never changes);
`version(subject)` asks each time (latest moves).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Final

from raftlog.node.registry.compat import Parsed, parse_schema
from raftlog.node.registry.errors import (
    RegistryUnreachableError, SchemaNotFoundError, SubjectNotFoundError, VersionNotFoundError,
)
from raftlog.node.registry.state import Version

__all__ = ["RegistrySchemas", "HTTP_TIMEOUT_S"]

HTTP_TIMEOUT_S: Final = 30.0
MAX_CACHED: Final = 10_000


class RegistrySchemas:
    """The registry's schemas over HTTP, duck-typing RegistryState's `by_id`, `version` and
    `parsed` for serde.py. Cached: an id's schema never changes."""

    def __init__(self, url: str, timeout_s: float = HTTP_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._by_id: dict[int, Version] = {}
        self._parsed: dict[int, Parsed] = {}

    def get(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """The JSON answer of one registry request. Raises the registry's errors (40401,
        40402, 40403 as their classes) and RegistryUnreachableError for anything else."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                body = {}
            code = body.get("error_code") if isinstance(body, dict) else None
            message = body.get("message", str(exc)) if isinstance(body, dict) else str(exc)
            if code == 40403:
                raise SchemaNotFoundError(message) from None
            if code == 40401:
                raise SubjectNotFoundError(message) from None
            if code == 40402:
                raise VersionNotFoundError(message) from None
            raise RegistryUnreachableError(f"schema registry {self.url}: {exc.code} {message}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RegistryUnreachableError(f"schema registry {self.url} is unreachable: {exc}") from None

    def by_id(self, schema_id: int) -> Version:
        v = self._by_id.get(schema_id)
        if v is None:
            body = self.get(f"/schemas/ids/{schema_id}")
            v = Version("", 0, schema_id, body.get("schemaType", "AVRO"), body["schema"], ())
            if len(self._by_id) >= MAX_CACHED:
                self._by_id.clear()
            self._by_id[schema_id] = v
        return v

    def version(self, subject: str, version: Any = "latest") -> Version:
        body = self.get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}")
        v = Version(subject, body["version"], body["id"], body.get("schemaType", "AVRO"), body["schema"], ())
        self._by_id.setdefault(v.id, v)
        return v

    def parsed(self, v: Version) -> Parsed:
        p = self._parsed.get(v.id)
        if p is None:
            p = self._parsed[v.id] = parse_schema(v.schema_type, v.schema)
        return p

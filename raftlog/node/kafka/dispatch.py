"""The protocol half of the Kafka listener: the API table and what the connection loop
(listener.py) asks of Kafka's schemas: decode a request, encode a response, and the error
answer of an API at a version. Importing it loads kafka-python's protocol classes (codec.py),
so the listener imports it on its first request, in a worker thread, never at node start.

How to add an API: write `async def handle_x(ctx, call) -> Reply` in the module of its family
(produce.py, fetch.py, metadata.py, admin.py, configs.py, groups.py, ...), list it in that
module's `HANDLERS = {api_key: handle_x}`, add the module's map to `HANDLERS` below, and add
the advertised (min, max) to `versions.SUPPORTED_VERSIONS`; a unit test checks that the two
tables name the same keys and that each range lies inside the schema's. The handler gets
the decoded request at the client's version (`call.request`, `call.version`) and returns
the response class at any version (the listener encodes it at the request's).
"""

from __future__ import annotations

from typing import Final

from kafka.protocol.api_message import ApiMessage

from raftlog.node.kafka import acls, admin, configs, errors, fetch, groups, metadata, produce, sasl, versions
from raftlog.node.kafka.codec import (
    API_VERSIONS_KEY,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    decode_body,
    decode_header,
    encode_response,
)
from raftlog.node.kafka.context import Handler

__all__ = [
    "HANDLERS",
    "BEFORE_LOGIN",
    "SASL_AUTHENTICATE_KEY",
    "api_name",
    "error_response",
    "is_known_api",
    "supported",
    "api_versions_unsupported",
    "decode_header",
    "decode_body",
    "encode_response",
]

# api_key -> handler. One map per API family.
HANDLERS: Final[dict[int, Handler]] = {
    **versions.HANDLERS,
    **metadata.HANDLERS,
    **produce.HANDLERS,
    **fetch.HANDLERS,
    **admin.HANDLERS,
    **configs.HANDLERS,
    **groups.HANDLERS,
    **sasl.HANDLERS,
    **acls.HANDLERS,
}

# Before a SASL login completes, only these run (ApiVersions, SaslHandshake, SaslAuthenticate).
BEFORE_LOGIN: Final = frozenset({API_VERSIONS_KEY, *sasl.AUTH_KEYS})
SASL_AUTHENTICATE_KEY: Final = sasl.SASL_AUTHENTICATE_KEY

supported = versions.supported


def is_known_api(api_key: int) -> bool:
    """Whether Kafka defines this API key (the schemas kafka-python carries)."""
    return api_key in REQUEST_CLASSES


def api_name(api_key: int) -> str:
    cls = REQUEST_CLASSES.get(api_key)
    return cls.__name__.removesuffix("Request") if cls is not None else "unknown"


def error_response(api_key: int, version: int, code: int) -> ApiMessage | None:
    """A response of `api_key` at `version` carrying `code` in its top-level error field, or
    None when that response has no top-level error field (the caller closes instead)."""
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None:
        return None
    has_error = any(
        f.get("name") == "ErrorCode" and _in_versions(f.get("versions", ""), version)
        for f in cls.json.get("fields", [])
    )
    if not has_error:
        return None
    return cls[version](error_code=code)


def api_versions_unsupported() -> ApiMessage:
    """KIP-511: the v0 ApiVersions answer (UNSUPPORTED_VERSION, the versions we serve)."""
    return versions.api_versions_response(errors.UNSUPPORTED_VERSION, version=0)


def _in_versions(spec: str, version: int) -> bool:
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo) <= version <= int(hi)
    return spec.isdigit() and version == int(spec)

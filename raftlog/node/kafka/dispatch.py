"""The protocol half of the Kafka listener: the API table and what the connection loop
(listener.py) asks of Kafka's schemas: decode a request, encode a response, and the error
answer of an API at a version. Importing it loads kafka-python's protocol classes (codec.py),
so the listener imports it on its first request, in a worker thread, never at node start.

How to add an API: write `async def handle_x(ctx, call) -> Reply` in the module of its family
(produce.py, fetch.py, metadata.py, admin.py, configs.py, groups.py, txn.py, ...), list it in that
module's `HANDLERS = {api_key: handle_x}`, add the module's map to `HANDLERS` below, and add
the advertised (min, max) to `versions.SUPPORTED_VERSIONS`; a unit test checks that the two
tables name the same keys and that each range lies inside the schema's. The handler gets
the decoded request at the client's version (`call.request`, `call.version`) and returns
the response class at any version (the listener encodes it at the request's).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from kafka.protocol.api_message import ApiMessage

from raftlog.node.kafka import (
    acls,
    admin,
    configs,
    consumer_groups,
    describe,
    elect,
    errors,
    features,
    fetch,
    groups,
    metadata,
    produce,
    quotas,
    reassign,
    sasl,
    share_groups,
    txn,
    versions,
)
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
    **describe.HANDLERS,
    **reassign.HANDLERS,
    **elect.HANDLERS,
    **features.HANDLERS,
    **groups.HANDLERS,
    **consumer_groups.HANDLERS,
    **share_groups.HANDLERS,
    **sasl.HANDLERS,
    **acls.HANDLERS,
    **txn.HANDLERS,
    **quotas.HANDLERS,
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


def error_response(api_key: int, version: int, code: int, request: ApiMessage | None = None,
                   message: str | None = None) -> ApiMessage | None:
    """A response of `api_key` at `version` with `code` in every error field it has (and
    `message` in every error message field): top-level ones, and per item where the errors are
    per topic, partition, resource or key, the items mirroring `request`'s (names and indexes
    copied, so a client matches each answer to what it asked). None only when Kafka's schema
    has no such version (the caller closes, as Kafka does for a version it does not know)."""
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None or not cls.min_version <= version <= cls.max_version:
        return None
    response = cls[version](**_mirror(cls._struct, version, code, message, request))
    try:  # a request field copied into a response field of another type: answer without items
        response.encode(version=version)
    except Exception:  # noqa: BLE001 - any encode failure means the same
        response = cls[version](**_mirror(cls._struct, version, code, message, None))
    return response


# Request field names for a response field of another name (Fetch's Topics -> Responses ...).
_ITEM_SOURCES: Final = {
    "responses": ("topics", "topic_data"),
    "results": ("resources", "topics", "filters", "creations", "entries", "transactions",
                "markers", "dirs", "groups", "topic_partitions"),
    "coordinators": ("coordinator_keys",),
    "topics": ("topic_data", "topic_partitions"),
    "partitions": ("partition_indexes", "partition_indices"),
    "partition_results": ("partitions",),
    "transaction_states": ("transactional_ids",),
    "groups": ("group_ids", "groups"),
}
_SCALAR_ALIASES: Final = {"partition_index": ("partition",), "name": ("topic",), "topic": ("name",)}
# The field a bare string / int item of the request (a key, a partition index) fills.
_KEY_FIELDS: Final = ("key", "name", "topic", "group_id", "transactional_id", "resource_name")
_INDEX_FIELDS: Final = ("partition_index", "partition")


def _mirror(struct: Any, version: int, code: int, message: str | None, source: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    filled_key = False
    for name, field in struct.fields.items():
        if not field.for_version_q(version):
            continue
        camel = field._json["name"]
        if camel == "ErrorCode":
            fields[name] = code
        elif camel == "ErrorMessage":
            fields[name] = message
        elif field.is_struct_array():
            fields[name] = [field.data_class(**_mirror(field, version, code, message, item))
                            for item in _items(source, name)]
        elif not field.is_array() and not field.is_struct():
            if isinstance(source, str):
                if name in _KEY_FIELDS and not filled_key:
                    fields[name], filled_key = source, True
            elif isinstance(source, int) and not isinstance(source, bool):
                if name in _INDEX_FIELDS and not filled_key:
                    fields[name], filled_key = source, True
            elif source is not None:
                for candidate in (name, *_SCALAR_ALIASES.get(name, ())):
                    value = getattr(source, candidate, None)
                    if isinstance(value, (str, int, uuid.UUID)):
                        fields[name] = value
                        break
    return fields


def _items(source: Any, name: str) -> list[Any]:
    if source is None or isinstance(source, (str, int)):
        return []
    for candidate in (name, *_ITEM_SOURCES.get(name, ())):
        value = getattr(source, candidate, None)
        if isinstance(value, list):
            return value
    return []


def api_versions_unsupported() -> ApiMessage:
    """KIP-511: the v0 ApiVersions answer (UNSUPPORTED_VERSION, the versions we serve)."""
    return versions.api_versions_response(errors.UNSUPPORTED_VERSION, version=0)


"""The OpenAPI 3.0 description of the node's HTTP listener (raftlog/node/http.py): what
`GET /health` and `GET /metrics` answer, for operators' tools and for the schemathesis run
against a real node (tests/integration/test_http_schemathesis.py).

Kept beside http.py and changed with it. /health's body is described only as a JSON object
(without the token it says up or down; its details are the node's and change with it), so the
description holds whichever the node sends. 500 is never documented: a node answering it has
a bug, and the schemathesis run fails on it.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["OPENAPI"]

_JSON_OBJECT: Final = {"application/json": {"schema": {"type": "object"}}}
_TEXT: Final = {"text/plain": {"schema": {"type": "string"}}}
# Every path: a head the node cannot parse, or one over MAX_HEAD_BYTES.
_BAD_HEAD: Final = {
    "400": {"description": "a malformed request head", "content": _TEXT},
    "431": {"description": "a request head over 8 KiB", "content": _TEXT},
}

OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.0.3",
    "info": {
        "title": "raftlog node HTTP listener",
        "version": "1",
        "description": "Liveness and Prometheus metrics of one raftlog node. One request per "
                       "connection; no request bodies; heads over 8 KiB get 431.",
    },
    "paths": {
        "/health": {
            "get": {
                "summary": "Whether the node and its components are up",
                "description": "Open to anyone (no token): up or down. 503 while the node is not healthy.",
                "security": [],
                "responses": {
                    "200": {"description": "healthy", "content": _JSON_OBJECT},
                    "503": {"description": "not healthy", "content": _JSON_OBJECT},
                    **_BAD_HEAD,
                },
            },
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus text exposition 0.0.4",
                "description": "Needs the node's http_token when it has one (Bearer, or the "
                               "password of HTTP Basic auth).",
                "security": [{"bearer": []}, {"basic": []}],
                "responses": {
                    "200": {"description": "the metrics", "content": _TEXT},
                    "401": {"description": "the token is missing or wrong", "content": _TEXT},
                    **_BAD_HEAD,
                },
            },
        },
    },
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "basic": {"type": "http", "scheme": "basic"},
        },
    },
}

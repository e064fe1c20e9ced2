"""The registry's HTTP listener: an ASGI app (bytes <-> api.Call) served by Hypercorn's trio
worker inside the node's nursery. All the HTTP serving of the registry is here (so it can move
onto a shared listener shell, and the REST proxy can join it as more routes).

    serve_registry(service, host, port, authenticate=None, ssl=(cert, key) | None, task_status)

Limits: request bodies over `max_body_bytes` are refused with 413 (from Content-Length before
reading, or as soon as a chunked body passes it); heads over H11_MAX_HEAD_BYTES by Hypercorn;
keep-alive connections idle KEEP_ALIVE_S are closed. A body that is not JSON is 400 (Confluent's
error body). With `authenticate(user, password) -> bool` every request needs HTTP Basic auth
(401 otherwise); the principal ("User:<name>") is passed on with the call, and with
`allowed_of(principal, host)` every call is checked against the cluster's ACLs (policy.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qsl

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.registry.api import Call, RegistryPort, handle
from raftlog.node.registry.policy import Allowed
from raftlog.node.registry.errors import BadRequestError, BodyTooLargeError, UnauthorizedError, error_body

__all__ = ["serve_registry", "registry_app", "MAX_BODY_BYTES"]

logger = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 16 << 20  # Confluent's default max schema is well under this
H11_MAX_HEAD_BYTES: Final = 16 << 10
KEEP_ALIVE_S: Final = 30
REQUEST_TIMEOUT_S: Final = 30.0
CONTENT_TYPE: Final = b"application/vnd.schemaregistry.v1+json"

Authenticate = Callable[[str, str], Awaitable[bool]]
# (principal, client host) -> the caller's ACL check, or None when ACLs are off.
AllowedOf = Callable[[str, str], Allowed]


def _principal(headers: list[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() != b"basic":
            return None
        try:
            user, colon, password = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            return None
        return (user, password) if colon else None
    return None


async def _read_body(receive: Any, headers: list[tuple[bytes, bytes]], max_body_bytes: int) -> bytes:
    for name, value in headers:
        if name.lower() == b"content-length" and value.isdigit() and int(value) > max_body_bytes:
            raise BodyTooLargeError(f"the request body is over {max_body_bytes} bytes")
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise trio.BrokenResourceError("client went away")
        body += message.get("body", b"")
        if len(body) > max_body_bytes:
            raise BodyTooLargeError(f"the request body is over {max_body_bytes} bytes")
        if not message.get("more_body", False):
            return bytes(body)


def registry_app(port: RegistryPort, authenticate: Authenticate | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, allowed_of: AllowedOf | None = None,
                 metrics: MetricsRegistry | None = None) -> Callable[..., Awaitable[None]]:
    """The ASGI app serving the registry API over `port`; counts its answers in `metrics`
    (raftlog_schema_registry_requests_total{method, status})."""
    answered = (metrics or MetricsRegistry()).counter(
        "raftlog_schema_registry_requests_total",
        "Schema Registry requests answered, by HTTP method and status.", ("method", "status"))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = scope.get("headers", [])
        try:
            status, answer = await _answer(scope, receive, headers)
        except trio.BrokenResourceError:
            return
        except Exception as exc:  # a bug: say 500 with Confluent's body, log it, keep serving
            log_event(logger, "registry_request_failed", level=logging.ERROR, exc_info=exc)
            status, answer = 500, {"error_code": 50001, "message": f"internal error: {type(exc).__name__}"}
        answered.labels(method=scope.get("method", "")[:8], status=str(status)).inc()
        payload = json.dumps(answer).encode()
        response_headers = [(b"content-type", CONTENT_TYPE), (b"content-length", str(len(payload)).encode())]
        if status == 401:
            response_headers.append((b"www-authenticate", b'Basic realm="raftlog schema registry"'))
        if status == 413:
            response_headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": payload})

    async def _answer(scope: dict[str, Any], receive: Any, headers: list[tuple[bytes, bytes]]) -> tuple[int, Any]:
        principal = None
        try:
            if authenticate is not None:
                credentials = _principal(headers)
                if credentials is None or not await authenticate(*credentials):
                    raise UnauthorizedError("Unauthorized: HTTP Basic authentication with a cluster user is required")
                principal = f"User:{credentials[0]}"
            raw = await _read_body(receive, headers, max_body_bytes)
            body = None
            if raw:
                try:
                    body = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    raise BadRequestError("the body is not JSON") from None
            raw_path = scope.get("raw_path") or scope["path"].encode()
            path = raw_path.decode("latin-1").split("?", 1)[0]
            if len(path) > 1 and path.endswith("/"):
                path = path.rstrip("/")
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        except (UnauthorizedError, BadRequestError, BodyTooLargeError) as exc:
            return error_body(exc)
        allowed = None
        if allowed_of is not None and principal is not None:
            allowed = allowed_of(principal, (scope.get("client") or ("", 0))[0])
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            return await handle(port, Call(scope["method"], path, query, body, principal), allowed)
        return 500, {"error_code": 50002, "message": "the request timed out"}

    return app


def _config(host: str, port: int, ssl: tuple[str, str] | None) -> Config:
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("raftlog.registry.http")
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.h11_max_incomplete_size = H11_MAX_HEAD_BYTES
    config.include_server_header = False
    config.graceful_timeout = 1.0
    if ssl is not None:
        config.certfile, config.keyfile = ssl
    return config


async def serve_registry(port: RegistryPort, host: str, listen_port: int, *,
                         authenticate: Authenticate | None = None, ssl: tuple[str, str] | None = None,
                         max_body_bytes: int = MAX_BODY_BYTES, allowed_of: AllowedOf | None = None,
                         metrics: MetricsRegistry | None = None,
                         task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the registry on host:listen_port until cancelled; reports the bound port.
    Raises OSError when it cannot bind."""
    app = registry_app(port, authenticate, max_body_bytes, allowed_of, metrics)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, _config(host, listen_port, ssl), mode="asgi"))  # type: ignore[arg-type]
        bound = int(binds[0].rsplit(":", 1)[1])
        log_event(logger, "registry_listening", host=host, port=bound)
        task_status.started(bound)

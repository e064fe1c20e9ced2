"""The node's observability listener: a minimal HTTP/1.1 server on trio for two GETs.

    GET /health   -> 200 (healthy) or 503, JSON body from the node's `health()` callback
    GET /metrics  -> 200, Prometheus text format 0.0.4 from the registry
    other paths   -> 404; other methods -> 405; a request we cannot parse -> 400

With a `token` (the node's `http_token`, issue 16), /metrics needs
`Authorization: Bearer <token>` or HTTP Basic auth whose password is the token (any user
name, for scrapers that only do Basic); else 401. /health stays open for probes, but without
the token it says only whether the node and each component are up (`health_summary`: no
topic, partition, offset or broker detail, which Metadata would filter by ACL; issue 39).

One request per connection (`Connection: close`), no request bodies, no keep-alive: scrapers
and probes need nothing more, and it keeps the parser to a request line and headers.

Limits: the request head must fit in `MAX_HEAD_BYTES` (else 431) and arrive within
`READ_TIMEOUT_S` (else the connection is dropped); the response must be written within
`WRITE_TIMEOUT_S`; at most `MAX_CONNECTIONS` connections are served at once (the listener
shell, raftlog/node/listener.py, with a gate of its own: over it a connection is closed at once).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.gate import ConnectionGate, Liveness
from raftlog.node.listener import ListenerMetrics, close_gracefully, connection_handler, serve_listener

__all__ = ["serve_http", "parse_request_head", "health_summary", "MAX_HEAD_BYTES"]

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 8 << 10
MAX_HEADERS: Final = 64
READ_TIMEOUT_S: Final = 10.0
WRITE_TIMEOUT_S: Final = 10.0
MAX_CONNECTIONS: Final = 64
LINGER_S: Final = 1.0

_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def parse_request_head(head: bytes) -> tuple[str, str]:
    """Parse an HTTP/1.x request head (request line + headers, without the blank line).

    Returns (method, path without the query string). Raises ValueError when the head is not
    a well-formed HTTP/1.0 or 1.1 request head.
    """
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("request head is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise ValueError("malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise ValueError(f"unsupported version {version[:20]!r}")
    if not method.isalpha() or not method.isupper():
        raise ValueError("malformed method")
    if not target.startswith("/"):
        raise ValueError("request target must be an absolute path")
    if len(lines) - 1 > MAX_HEADERS:
        raise ValueError("too many headers")
    for line in lines[1:]:
        name, colon, _ = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ValueError("malformed header line")
    return method, target.split("?", 1)[0]


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    """The request head, or None if the client closed first. Raises _BadRequest(431)."""
    buffer = bytearray()
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            return bytes(buffer[:end])
        if len(buffer) > MAX_HEAD_BYTES:
            raise _BadRequest(431, "request head too large")
        data = await stream.receive_some(MAX_HEAD_BYTES)
        if not data:
            return None
        buffer += data


def _response(status: int, content_type: str, body: bytes) -> bytes:
    headers = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    if status == 405:
        headers.append("Allow: GET")
    if status == 401:
        headers.append('WWW-Authenticate: Bearer realm="raftlog", Basic realm="raftlog"')
    return ("\r\n".join(headers) + "\r\n\r\n").encode("ascii") + body


def _text(status: int, message: str) -> bytes:
    return _response(status, "text/plain; charset=utf-8", (message + "\n").encode())


def authorized(head: bytes, token: str) -> bool:
    """True iff the head's Authorization header carries `token` (Bearer, or Basic password)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() != b"authorization":
            continue
        scheme, _, credentials = value.strip().partition(b" ")
        offered = b""
        if scheme.lower() == b"bearer":
            offered = credentials.strip()
        elif scheme.lower() == b"basic":
            try:
                offered = base64.b64decode(credentials.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        return hmac.compare_digest(offered, token.encode())
    return False


def health_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """What /health tells a caller without the token: overall `ok` and "up"/"down" for each
    component of `report` (each map in it; down when its own "ok" is not True). Pure."""
    components = {name: "up" if part.get("ok", True) is True else "down"
                  for name, part in report.items() if isinstance(part, Mapping)}
    return {"ok": report.get("ok") is True, "components": components,
            "details": "send this node's http_token for details"}


def _route(
    method: str, path: str, registry: MetricsRegistry, health: Callable[[], Mapping[str, Any]],
    allowed: bool = True,
) -> bytes:
    if path not in ("/health", "/metrics"):
        return _text(404, "not found")
    if method != "GET":
        return _text(405, "only GET is supported")
    if path != "/health" and not allowed:
        return _text(401, "this node's http_token is needed (Authorization: Bearer <token>)")
    if path == "/metrics":
        try:
            text = registry.render()
        except Exception as exc:  # e.g. a gauge callback that broke: say so, keep serving
            log_event(logger, "metrics_render_failed", level=logging.ERROR, exc_info=exc)
            return _text(500, f"metrics unavailable: {type(exc).__name__}")
        return _response(200, METRICS_CONTENT_TYPE, text.encode())
    try:
        report = dict(health())
        status = 200 if report.get("ok") is True else 503
    except Exception as exc:  # a broken health probe is itself an unhealthy node
        log_event(logger, "health_failed", level=logging.ERROR, exc_info=exc)
        report, status = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 503
    if not allowed:
        report = health_summary(report)
    body = json.dumps(report, default=str, sort_keys=True).encode()
    return _response(status, "application/json", body)


async def _read_and_route(
    stream: trio.SocketStream,
    registry: MetricsRegistry,
    health: Callable[[], Mapping[str, Any]],
    token: str | None = None,
) -> bytes | None:
    """The response to send, or None when the client closed before a whole head arrived."""
    try:
        head = await _read_head(stream)
        if head is None:
            return None
        method, path = parse_request_head(head)
    except _BadRequest as exc:
        return _text(exc.status, str(exc))
    except ValueError as exc:
        return _text(400, str(exc))
    return _route(method, path, registry, health, token is None or authorized(head, token))


async def _serve_one(
    stream: trio.SocketStream,
    registry: MetricsRegistry,
    health: Callable[[], Mapping[str, Any]],
    token: str | None = None,
) -> None:
    async with stream:
        response = None
        try:
            with trio.move_on_after(READ_TIMEOUT_S):
                response = await _read_and_route(stream, registry, health, token)
            if response is not None:  # None: closed early, or too slow to send its head
                with trio.move_on_after(WRITE_TIMEOUT_S):
                    await stream.send_all(response)
                    # Unread input (a too-large head) would turn our close into an RST that
                    # can wipe the response before the client reads it.
                    await close_gracefully(stream, linger_s=LINGER_S)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log_event(logger, "http_conn_failed", level=logging.DEBUG, reason=type(exc).__name__)


async def serve_http(
    registry: MetricsRegistry,
    health: Callable[[], Mapping[str, Any]],
    host: str,
    port: int,
    *,
    token: str | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve /health and /metrics on host:port until cancelled (/metrics and /health's
    details behind `token` when given).

    `health()` returns a JSON-able map; `"ok": True` in it means 200, anything else 503 (a
    `health()` that raises is reported as 503 too). It runs on the trio thread: keep it cheap.
    Reports readiness with `task_status.started(port)` (the actual port; 0 picks one).
    Raises OSError if it cannot bind.
    """
    # Its own gate: probes and scrapers never take the client listeners' connection budget.
    gate = ConnectionGate(max_connections=MAX_CONNECTIONS)
    metrics = ListenerMetrics(registry, "http")

    async def run(stream: trio.abc.Stream, peer: str, session: object, liveness: Liveness,
                  socket_stream: trio.SocketStream | None) -> None:
        assert isinstance(stream, trio.SocketStream)
        await _serve_one(stream, registry, health, token)

    await serve_listener(host, port, name="http", gate=gate, task_status=task_status,
                         handle=connection_handler("http", None, metrics, run))

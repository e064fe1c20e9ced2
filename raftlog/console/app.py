"""The console's ASGI application (Starlette): routes, middleware, error pages.

Middleware, outermost first:
1. `guard`: refuses request bodies over `max_body_bytes` (413 page) or without a length
   (411), adds security headers
   (a Content-Security-Policy that allows only our own scripts, no framing, no sniffing) and
   `Server-Timing: app;dur=<ms>` (time to the response's start, what the 300 ms budget is
   measured against).
2. Starlette's SessionMiddleware: the signed cookie (itsdangerous) holding only a session id;
   HttpOnly, SameSite=Strict.
3. `sessions`: attaches this browser's Session (`request.state.session`) and, on a secure
   cluster, sends visitors without a login to /login.

Errors become pages, never tracebacks: BadInputError 400, CsrfError 403, an ACL refusal
(errors.NOT_ALLOWED) 403, SaslAuthenticationFailedError 401,
UnknownTopicOrPartitionError 404, other RaftlogError and client errors 503 (with the cluster's
one-line message), anything else 500 ("logged"; the traceback goes to the console's log only).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from raftlog.console import share_views, txn_views, views
from raftlog.console.auth import login_required
from raftlog.console.errors import (
    NOT_ALLOWED,
    BadInputError,
    ClientClosedError,
    ConnectionLostError,
    CsrfError,
    NoBrokerAvailableError,
    RaftlogError,
    SaslAuthenticationFailedError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
)
from raftlog.console.state import STATIC_DIR, ConsoleState

__all__ = ["build_app"]

log = logging.getLogger(__name__)

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
OPEN_PATHS = ("/login", "/static/", "/healthz")


def _guard(app: Any, max_body_bytes: int) -> Any:
    async def guard(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or ())
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            await _plain_page(send, 413, f"The form is larger than this console takes ({max_body_bytes >> 20} MiB).")
            return
        if length is None and scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
            # Browsers send a length with every form; a chunked body could be any size.
            await _plain_page(send, 411, "Send the form with a Content-Length.")
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"server-timing", f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()),
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await app(scope, receive, send_with_headers)

    return guard


async def _plain_page(send: Any, status: int, text: str) -> None:
    from html import escape

    body = (f"<!doctype html><html lang=en><meta charset=utf-8><title>raftlog console: {status}</title>"
            f"<body><main><h1>Request refused</h1><p class=error>{escape(text)}</p><p><a href='/'>Overview</a></main>").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _sessions(app: Any, state: ConsoleState) -> Any:
    secure = login_required(state.settings.security)

    async def sessions(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/static/"):
            await app(scope, receive, send)
            return
        session = state.session_for(scope["session"])
        scope.setdefault("state", {})["session"] = session
        if secure and session.credentials is None and not scope["path"].startswith(OPEN_PATHS):
            request = Request(scope)
            if request.method == "GET":
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response: Response = RedirectResponse(f"/login?{views._q(next=target)}", status_code=303)
            else:
                response = HTMLResponse("<p>Log in first: <a href='/login'>login</a></p>", status_code=401)
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    return sessions


def _error_page(status: int, title: str):
    async def handler(request: Request, exc: Exception) -> Response:
        if status >= 500 and not isinstance(exc, (RaftlogError, NoBrokerAvailableError, ConnectionLostError, ClientClosedError)):
            log.error("console page %s failed", request.url.path, exc_info=exc)
            message = "The console failed to build this page; the error is in the console's log."
        elif isinstance(exc, (BadInputError, CsrfError, UnknownGroupError)) or (
                isinstance(exc, UnknownTopicOrPartitionError) and exc.message):
            message = exc.message
        elif isinstance(exc, (NoBrokerAvailableError, ConnectionLostError, ClientClosedError)):
            state: ConsoleState = request.app.state.console
            message = f"no raftlog node answered at {','.join(state.settings.bootstrap)} ({exc}); is the cluster up?"
        else:
            message = str(exc)
        if getattr(request.state, "session", None) is None:
            return HTMLResponse(f"<p>{title}</p>", status_code=status)
        return views.render(request, "error.html", status_code=status, title=title, message=message)

    return handler


def build_app(state: ConsoleState) -> Starlette:
    settings = state.settings
    routes = [
        Route("/", views.overview),
        Route("/live/rates", views.live_rates),
        Route("/topics", views.topics),
        Route("/topics", views.topic_create, methods=["POST"]),
        Route("/topics/{topic}", views.topic),
        Route("/topics/{topic}/configs", views.topic_configs, methods=["POST"]),
        Route("/topics/{topic}/delete", views.topic_delete, methods=["GET", "POST"]),
        Route("/topics/{topic}/messages", views.messages),
        Route("/topics/{topic}/messages", views.produce, methods=["POST"]),
        Route("/topics/{topic}/records/{partition:int}/{offset:int}/{part}", views.record_part),
        Route("/brokers/configs", views.broker_configs, methods=["GET", "POST"]),
        Route("/groups", views.groups),
        Route("/share-groups", share_views.share_groups),
        Route("/share-groups/{group}", share_views.share_group),
        Route("/groups/{group}", views.group),
        Route("/live/groups/{group}", views.live_group),
        Route("/groups/{group}/reset", views.group_reset, methods=["POST"]),
        Route("/groups/{group}/delete", views.group_delete, methods=["GET", "POST"]),
        Route("/transactions", txn_views.transactions),
        Route("/offsets", views.offsets),
        Route("/schemas", views.schemas_page),
        Route("/schemas/{subject}", views.subject_page),
        Route("/schemas/{subject}/config", views.subject_config, methods=["POST"]),
        Route("/login", views.login, methods=["GET", "POST"]),
        Route("/logout", views.logout, methods=["POST"]),
        Route("/healthz", views.healthz),
        Mount("/static", app=StaticFiles(directory=str(STATIC_DIR)), name="static"),
    ]
    handlers = {
        BadInputError: _error_page(400, "That input cannot be used"),
        CsrfError: _error_page(403, "Refused"),
        **{cls: _error_page(403, "Not allowed for your user") for cls in NOT_ALLOWED},
        SaslAuthenticationFailedError: _error_page(401, "The cluster refused your login"),
        UnknownTopicOrPartitionError: _error_page(404, "Not found"),
        UnknownGroupError: _error_page(404, "Not found"),
        RaftlogError: _error_page(503, "The cluster did not answer that"),
        NoBrokerAvailableError: _error_page(503, "No node reachable"),
        ConnectionLostError: _error_page(503, "Connection lost"),
        ClientClosedError: _error_page(503, "Connection closed"),
        HTTPException: _http_error,
        Exception: _error_page(500, "Console error"),
    }
    secret = settings.session_secret or secrets.token_urlsafe(32)
    middleware = [
        Middleware(_GuardMiddleware, max_body_bytes=settings.max_body_bytes),
        Middleware(SessionMiddleware, secret_key=secret, session_cookie="raftlog_console",
                   same_site="strict", https_only=False, max_age=12 * 3600),
        Middleware(_SessionsMiddleware, state=state),
    ]
    app = Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)  # type: ignore[arg-type]
    app.state.console = state
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, wrong method, a form it cannot parse) as pages."""
    status = getattr(exc, "status_code", 400)
    text = {404: "No such page.", 405: "That method is not allowed here."}.get(status, str(getattr(exc, "detail", "")))
    if getattr(request.state, "session", None) is None:
        return HTMLResponse(f"<p>{text}</p>", status_code=status)
    title = {404: "Not found", 405: "Not allowed"}.get(status, "That request cannot be used")
    return views.render(request, "error.html", status_code=status, title=title, message=text)


class _GuardMiddleware:
    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self._call = _guard(app, max_body_bytes)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self._call(scope, receive, send)


class _SessionsMiddleware:
    def __init__(self, app: Any, state: ConsoleState) -> None:
        self._call = _sessions(app, state)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self._call(scope, receive, send)

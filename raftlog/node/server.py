"""The trio listener for the native protocol: accepts connections, decodes frames with
`raftlog.base.protocol`, runs one task per request through the op's handler, writes responses.

It parses and routes; it decides nothing. Handlers (one per op) are protocol-neutral async
functions `handler(Request) -> ok fields | None`; they raise `RaftlogError` for an error
response and must be cancel-safe (the deadline cancels them).

Per connection, a reader task decodes frames and starts a request task per request; a writer
task drains a bounded channel of encoded responses. Responses go out as requests complete,
in any order, matched by `id` (PROTOCOL.md). The handler of a cheap op marked
`inline_handler` (raftlog/base/protocol.py; `replica_fetch`, `produce`) runs in the reader
itself, in request order, with no task or slot (`produce`'s under the request's deadline:
`inline_handler_under_deadline`), and hands back `Later(wait)` for what must wait (a long poll, acks=all), which then runs in a request
task like any other under what is left of the deadline; its errors are answered the same way.

Limits (everything bounded):
* connections are admitted by the node's `ConnectionGate` (raftlog/node/gate.py, shared with
  the Kafka listener): past `max_connections` (or the per-address limit) a new connection is
  accepted and closed at once; the gate's timers close a connection not authenticated in
  time or idle too long;
* at most `max_in_flight` requests per connection: past that the reader stops reading, so
  TCP pushes back on the client;
* the response channel holds `max_in_flight` frames; a writer stuck for `request_timeout_ms`
  on a client that does not read closes the connection;
* every request runs under `request_deadline_ms(...)` and answers REQUEST_TIMED_OUT after it;
* frames over `max_frame_bytes` either way get MESSAGE_TOO_LARGE; until the session is
  complete (SASL, the peer handshake) the limit is PRE_AUTH_MAX_FRAME_BYTES (64 KiB), refused
  when the header arrives, before any of the body is buffered.

Security (`security=ListenerSecurity(...)`, raftlog/node/auth.py; PROTOCOL.md "Authentication
and authorization"): with a TLS context every connection starts with a TLS handshake (bounded
by `tls_handshake_timeout_s`; a failure closes it and counts in
raftlog_tls_handshake_failures_total). Each connection gets a session; until it is complete
the reader handles only its auth ops, one at a time and in order, and any failure or other op
is answered and closes the connection (raftlog_auth_failures_total counts failed logins).
Afterwards each request carries the session's principal and the client's host, and
`session.check()` runs before each request (a user removed while connected is answered and
closed; a session older than `connections_max_reauth_ms` that did not log in again is closed
unanswered, as Kafka does, so that the client reconnects).

Attachments (PROTOCOL.md "Attachments"): a handler may answer `Attached(fields, parts)`; the
response gets `attachment_bytes` and the parts follow its frame. The connection's writer
(raftlog/node/writer.py) sends them: buffers with one writev, file parts with os.sendfile
(read in a worker thread over TLS); a part no longer intact closes the connection
mid-answer. Every FilePart is closed once sent or dropped.

Failure rules: a frame that cannot be decoded (oversized, malformed CBOR, not a map) gets an
error with id 0 and the connection is closed (the byte stream can no longer be trusted); a
decoded map with a bad envelope, an unknown op or a bad `timeout_ms` gets INVALID_REQUEST and
the connection stays; a handler raising a RaftlogError, or another package's typed error whose
`code` is a PROTOCOL.md code, gets that error; anything else gets UNKNOWN_SERVER_ERROR, its
traceback is logged, and the connection stays. Nothing one connection does stops the
listener.
"""

from __future__ import annotations

import contextlib
import logging
import math
from functools import partial
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, NoReturn

import cbor2
import trio

from raftlog.base.aio import acquire_free
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    RaftlogError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    UnknownServerError,
    as_wire_error,
)
from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import StreamReader
from raftlog.base.protocol import (
    ATTACHMENT_FIELD,
    Attached,
    FrameDecoder,
    Later,
    Request,
    encode_frame,
    error_response,
    ok_response,
    parse_request,
)
from raftlog.node.auth import AUTH_OPS, ListenerSecurity, Session, SessionExpiredError
from raftlog.node.gate import ConnectionGate, Liveness
from raftlog.node.listener import ListenerMetrics, close_gracefully, connection_handler, serve_listener
from raftlog.node.writer import ConnectionWriter, Item, Outgoing, release

__all__ = ["Handler", "serve", "request_deadline_ms", "close_gracefully", "DEADLINE_MARGIN_MS"]

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]

# A request's own timeout_ms is for the handler to honour (e.g. acks=all waiting for the high
# watermark); the server's deadline sits a little later so the handler's answer wins the race.
DEADLINE_MARGIN_MS: Final = 500
RECEIVE_CHUNK_BYTES: Final = 256 << 10
# Until a connection's session is complete (SASL, the peer handshake) no frame may announce
# more than this: auth frames are a few hundred bytes, and a stranger gets no buffer.
PRE_AUTH_MAX_FRAME_BYTES: Final = 64 << 10
_NO_DEADLINE: Final = contextlib.nullcontext()  # an inline handler's part without a cancel scope


def _answer(request: Request, result: Mapping[str, Any] | Attached | None) -> dict[str, Any] | Attached | None:
    """A handler's result as the response to `request` (None: no response)."""
    if result is None:
        return None
    if type(result) is Attached:
        return Attached(ok_response(request.id, **result.fields), result.parts)
    return ok_response(request.id, **result)


def _waiting(later: Later) -> Handler:
    """The rest of an inline handler's request (its Later) as a handler of its own."""

    async def wait(request: Request) -> Mapping[str, Any] | Attached | None:
        return await later.wait()

    return wait


def _timed_out(request: Request, deadline_ms: int) -> dict[str, Any]:
    return error_response(request.id, RequestTimedOutError(
        f"no answer to {request.op} within {deadline_ms} ms; it may still take effect"))


def request_deadline_ms(timeout_ms: int | None, request_timeout_ms: int) -> int:
    """The server deadline of one request: the request's `timeout_ms` plus a margin, capped
    by the server's `request_timeout_ms`; that cap alone when the request has none."""
    if timeout_ms is None:
        return request_timeout_ms
    return min(timeout_ms + DEADLINE_MARGIN_MS, request_timeout_ms)


class _Listener:
    """What every connection of one listener shares: handlers, limits, metrics."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        name: str,
        max_frame_bytes: int,
        request_timeout_ms: int,
        max_in_flight: int,
        registry: MetricsRegistry | None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.handlers = dict(handlers)
        # Ops whose handlers run in the connection's reader (protocol.inline_handler).
        self.inline_ops = frozenset(op for op, h in self.handlers.items() if getattr(h, "inline", False))
        # Those whose inline part runs under the request's deadline (inline_handler_under_deadline).
        self.deadline_inline_ops = frozenset(
            op for op, h in self.handlers.items() if getattr(h, "inline_deadline", False))
        self.security = security
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        # The shell's metrics (listener.py); the names below are its, kept for the code here.
        self.metrics = metrics = ListenerMetrics(registry, name)
        self.requests_total = metrics.requests_total
        self.frame_errors_total = metrics.frame_errors_total
        self.auth_failures_total = metrics.auth_failures_total
        self.answered = metrics.answered

    def op_label(self, op: object) -> str:
        # Label values must come from a small set: unknown ops are counted together.
        return op if isinstance(op, str) and op in self.handlers else "unknown"

    def encode(self, response: Mapping[str, Any]) -> bytes:
        """Encode a response frame; one that cannot be sent becomes an error response."""
        return self.encode_or_error(response)[0]

    def encode_or_error(self, response: Mapping[str, Any], attachment_bytes: int = 0) -> tuple[bytes, bool]:
        """(frame, True) for `response`, or (an error response's frame, False) when it cannot
        be sent: over max_frame_bytes (its attachment of `attachment_bytes` too), or not
        encodable."""
        request_id = response["id"]
        try:
            if attachment_bytes > self.max_frame_bytes:
                raise MessageTooLargeError(f"attachment of {attachment_bytes} bytes is over the "
                                           f"limit of {self.max_frame_bytes} bytes")
            return encode_frame(response, max_frame_bytes=self.max_frame_bytes), True
        except MessageTooLargeError as exc:
            return encode_frame(error_response(request_id, exc)), False
        except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
            log_event(
                logger, "response_unencodable", level=logging.ERROR, exc_info=exc,
                listener=self.name, id=request_id,
            )  # fmt: skip
            error = UnknownServerError(f"response could not be encoded: {type(exc).__name__}")
            return encode_frame(error_response(request_id, error)), False


class _Connection:
    def __init__(
        self, stream: trio.abc.Stream, listener: _Listener, peer: str, session: Session | None = None,
        socket_stream: trio.SocketStream | None = None, liveness: Liveness | None = None,
    ) -> None:
        self.stream = stream
        self.listener = listener
        self.peer = peer
        self.session = session
        self.liveness = liveness if liveness is not None else Liveness(0, 0)
        self.liveness.busy = lambda: bool(self.in_flight_ids)
        self.client_host = peer.rsplit(":", 1)[0]
        self.slots = trio.Semaphore(listener.max_in_flight)
        self.in_flight_ids: set[int] = set()
        # The plain socket under `stream` (os.sendfile, writev); None over TLS.
        self.writer = ConnectionWriter(
            stream, socket_stream if socket_stream is not None else (
                stream if isinstance(stream, trio.SocketStream) else None),
            listener.request_timeout_ms / 1000, listener.name, peer)

    async def run(self) -> None:
        listener = self.listener
        send, receive = trio.open_memory_channel[Item](listener.max_in_flight)
        outcome = "abort"
        async with trio.open_nursery() as connection:
            connection.start_soon(self.writer.run, receive, connection.cancel_scope)
            async with send:
                async with trio.open_nursery() as requests:
                    outcome = await self._read_loop(requests, send)
                    if outcome != "eof":
                        requests.cancel_scope.cancel()
                    # On a clean EOF the client may have only half-closed: finish what it
                    # asked for (each request is under its deadline) before closing.
            # `send` is closed: the writer drains what is queued and returns.
        if outcome == "fatal":
            await self._linger()

    async def _read_loop(
        self, requests: trio.Nursery, send: trio.MemorySendChannel[Item]
    ) -> str:
        """Returns "eof" (client finished), "fatal" (undecodable frame answered), "abort"
        (gone, or an oversized frame before authentication: answered, closed without linger)."""
        decoder = FrameDecoder(self._max_frame_bytes())
        reader = StreamReader(self.stream)
        while True:
            try:
                data = await reader.receive(RECEIVE_CHUNK_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return "abort"
            self.liveness.touch()
            if not data:
                if decoder.buffered_bytes:
                    log_event(
                        logger, "conn_truncated_frame", level=logging.DEBUG,
                        listener=self.listener.name, peer=self.peer,
                        buffered_bytes=decoder.buffered_bytes,
                    )  # fmt: skip
                return "eof"
            decoder.feed(data)
            while True:
                # Checked before each frame's header: the session completes between frames.
                decoder.max_frame_bytes = self._max_frame_bytes()
                try:
                    frame = decoder.next_frame()
                except (MessageTooLargeError, InvalidRequestError) as exc:
                    self.listener.frame_errors_total.labels(
                        listener=self.listener.name, code=exc.code
                    ).inc()
                    log_event(
                        logger, "conn_bad_frame", level=logging.INFO,
                        listener=self.listener.name, peer=self.peer, code=exc.code,
                        reason=exc.message,
                    )  # fmt: skip
                    if isinstance(exc, MessageTooLargeError) and self.session is not None and not self.session.complete:
                        # A stranger: answered, then closed at once (no linger reading its body).
                        exc = MessageTooLargeError(f"{exc.message}: authenticate first")
                        await self._queue(send, encode_frame(error_response(0, exc)))
                        return "abort"
                    if isinstance(exc, MessageTooLargeError) and self.listener.name == "client":
                        exc = MessageTooLargeError(
                            f"{exc.message}: raise the node's limit with --max-request-bytes "
                            "(max_frame_bytes in node.toml)")
                    await self._queue(send, encode_frame(error_response(0, exc)))
                    return "fatal"
                if frame is None:
                    break
                if await self._dispatch(frame, requests, send):
                    return "fatal"

    def _max_frame_bytes(self) -> int:
        """The listener's frame limit; PRE_AUTH_MAX_FRAME_BYTES until the session is complete."""
        if self.session is None or self.session.complete:
            return self.listener.max_frame_bytes
        return min(PRE_AUTH_MAX_FRAME_BYTES, self.listener.max_frame_bytes)

    async def _dispatch(
        self,
        frame: dict[str, Any],
        requests: trio.Nursery,
        send: trio.MemorySendChannel[Item],
    ) -> bool:
        """Start the request's task; True when the connection must close (an auth failure)."""
        listener = self.listener
        session = self.session
        try:
            request = parse_request(frame, self.client_host)
            if session is not None:
                if not session.complete or request.op in AUTH_OPS:
                    return await self._authenticate(session, request, send)
                try:
                    session.check()
                except SessionExpiredError as exc:
                    # KIP-368: closed unanswered, as Kafka does; the client connects and logs
                    # in again (an error answer would read as a failed login to give up on).
                    log_event(logger, "conn_session_expired", level=logging.INFO, listener=listener.name,
                              peer=self.peer, reason=exc.message)
                    return True
                except RaftlogError as exc:
                    await self._refuse(request, exc, send)
                    return True
                request = Request(request.id, request.op, request.fields, session.principal, self.client_host)
            handler = listener.handlers.get(request.op)
            if handler is None:
                raise InvalidRequestError(
                    f"unknown op {request.op!r:.60} on the {listener.name} listener",
                    field="op", request_id=request.id,
                )  # fmt: skip
            timeout_ms = request.fields.get("timeout_ms")
            if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms < 0):
                raise InvalidRequestError(
                    "field 'timeout_ms' must be a non-negative integer",
                    field="timeout_ms", request_id=request.id,
                )  # fmt: skip
            if request.id in self.in_flight_ids:
                raise InvalidRequestError(
                    f"request id {request.id} is already in flight on this connection",
                    field="id", request_id=request.id,
                )  # fmt: skip
        except InvalidRequestError as exc:
            listener.requests_total.labels(
                listener=listener.name, op=listener.op_label(frame.get("op")), code=exc.code
            ).inc()
            await self._queue(send, encode_frame(error_response(exc.request_id or 0, exc)))
            return False
        deadline_ms = request_deadline_ms(timeout_ms, listener.request_timeout_ms)
        if request.op in listener.inline_ops:
            await self._run_inline(handler, request, deadline_ms, requests, send)
            return False
        await self._take_slot()
        self.in_flight_ids.add(request.id)
        requests.start_soon(self._run_request, handler, request, deadline_ms, send)
        return False

    async def _take_slot(self) -> None:
        # Backpressure: with max_in_flight requests running, the reader waits here and stops
        # reading the socket. A free slot is taken without a pass through the scheduler (the
        # reader's receive is its checkpoint).
        await acquire_free(self.slots)

    async def _run_inline(self, handler: Handler, request: Request, deadline_ms: int,
                          requests: trio.Nursery, send: trio.MemorySendChannel[Item]) -> None:
        """A request of an inline handler (protocol.inline_handler), in the reader: answered
        at once, with no task or slot of its own (and no deadline, unless the handler is
        `inline_handler_under_deadline`), unless the handler returns Later(wait): then `wait`
        runs in a request task as any handler does, under what is left of the request's
        deadline (the inline part counts). Errors, and the deadline, are answered as `_call`
        answers them."""
        started = trio.current_time()
        try:
            with (trio.fail_after(deadline_ms / 1000) if request.op in self.listener.deadline_inline_ops
                  else _NO_DEADLINE):
                result = await handler(request)
        except trio.TooSlowError:
            response: Any = _timed_out(request, deadline_ms)
        except Exception as exc:  # as in _call
            response = self._failed(request, exc)
        else:
            if type(result) is Later:
                await self._take_slot()
                self.in_flight_ids.add(request.id)
                left_ms = max(0, deadline_ms - int((trio.current_time() - started) * 1000))
                requests.start_soon(self._run_request, _waiting(result), request, left_ms, send, started)
                return
            response = _answer(request, result)
        await self._respond(request, response, started, send)

    async def _authenticate(
        self, session: Session, request: Request, send: trio.MemorySendChannel[Item]
    ) -> bool:
        """One auth op, in the reader (so in order). True when the connection must close."""
        listener = self.listener
        try:
            with trio.fail_after(listener.request_timeout_ms / 1000):
                fields = await session.handle(request)
        except trio.TooSlowError:
            await self._refuse(request, RequestTimedOutError(f"{request.op} took too long"), send)
            return True
        except RaftlogError as exc:
            await self._refuse(request, exc, send)
            return True
        listener.requests_total.labels(listener=listener.name, op=listener.op_label(request.op), code="OK").inc()
        await self._queue(send, listener.encode(ok_response(request.id, **fields)))
        return False

    async def _refuse(self, request: Request, exc: RaftlogError, send: trio.MemorySendChannel[Item]) -> None:
        listener = self.listener
        if isinstance(exc, SaslAuthenticationFailedError):
            listener.auth_failures_total.labels(listener=listener.name).inc()
        listener.requests_total.labels(listener=listener.name, op=listener.op_label(request.op), code=exc.code).inc()
        log_event(
            logger, "conn_auth_failed", level=logging.DEBUG,
            listener=listener.name, peer=self.peer, op=request.op[:40], code=exc.code,
        )  # fmt: skip
        await self._queue(send, encode_frame(error_response(request.id, exc)))

    async def _run_request(
        self,
        handler: Handler,
        request: Request,
        deadline_ms: int,
        send: trio.MemorySendChannel[Item],
        started: float | None = None,
    ) -> None:
        # `started`: when the reader began the request (an inline handler's Later): its latency.
        started = trio.current_time() if started is None else started
        try:
            response = await self._call(handler, request, deadline_ms)
            await self._respond(request, response, started, send)
        finally:
            self.in_flight_ids.discard(request.id)
            self.slots.release()

    async def _respond(self, request: Request, response: dict[str, Any] | Attached | None,
                       started: float, send: trio.MemorySendChannel[Item]) -> None:
        """Count the answer and queue it for the writer."""
        listener = self.listener
        attached = None
        if type(response) is Attached:
            attached, response = response, dict(response.fields)
        error = None if response is None else response.get("error")
        listener.answered(request.op, "OK" if error is None else error["code"],
                          (trio.current_time() - started) * 1000)
        if attached is not None:
            await self._queue_attached(send, response, attached)
        elif response is not None:
            await self._queue(send, listener.encode(response))

    async def _call(
        self, handler: Handler, request: Request, deadline_ms: int
    ) -> dict[str, Any] | Attached | None:
        """Run the handler under the deadline (and what it hands back as Later, under the
        same one); return the response map (None: no response), or for an answer with an
        attachment, Attached(response map, parts)."""
        try:
            with trio.fail_after(deadline_ms / 1000):
                result = await handler(request)
                if type(result) is Later:
                    result = await result.wait()
        except trio.TooSlowError:
            return _timed_out(request, deadline_ms)
        except Exception as exc:  # a handler bug answers one request, not the connection
            return self._failed(request, exc)
        return _answer(request, result)

    def _failed(self, request: Request, exc: Exception) -> dict[str, Any]:
        """The error response for a handler's exception (a bug: UNKNOWN_SERVER_ERROR, logged)."""
        wire_error = as_wire_error(exc)
        if wire_error is None:
            log_event(
                logger, "handler_failed", level=logging.ERROR, exc_info=exc,
                listener=self.listener.name, op=request.op, id=request.id, peer=self.peer,
            )  # fmt: skip
            wire_error = UnknownServerError(f"{type(exc).__name__} while handling {request.op}")
        return error_response(request.id, wire_error)

    async def _queue_attached(self, send: trio.MemorySendChannel[Item], response: dict[str, Any],
                              attached: Attached) -> None:
        """Queue an ok answer and its attachment (the parts are released on every path)."""
        try:
            total = attached.length
            frame, ok = self.listener.encode_or_error({**response, ATTACHMENT_FIELD: total}, total)
            if ok and total:
                item, attached = Outgoing(frame, attached), Attached({}, ())  # the item owns it
                await self._queue(send, item)
                return
        finally:
            attached.close()
        await self._queue(send, frame)

    async def _queue(self, send: trio.MemorySendChannel[Item], item: Item) -> None:
        self.liveness.touch()  # an answer is traffic: a long poll's end keeps the connection alive
        try:
            # Handed to the waiting writer (or its buffer) without a pass through the
            # scheduler; only a full channel waits.
            send.send_nowait(item)
            return
        except trio.WouldBlock:
            pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            release(item)
            log_event(logger, "response_dropped", level=logging.DEBUG, peer=self.peer)
            return
        try:
            await send.send(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The writer has gone (the client stopped reading or reset); the connection is
            # being torn down, so this response has nowhere to go.
            release(item)
            log_event(logger, "response_dropped", level=logging.DEBUG, peer=self.peer)
        except BaseException:
            release(item)
            raise

    async def _linger(self) -> None:
        if isinstance(self.stream, trio.abc.HalfCloseableStream):
            await close_gracefully(self.stream)


async def _run_connection(listener: _Listener, stream: trio.abc.Stream, peer: str,
                          session: Session | None, liveness: Liveness,
                          socket_stream: trio.SocketStream | None) -> None:
    await _Connection(stream, listener, peer, session, liveness=liveness, socket_stream=socket_stream).run()


async def serve(
    handlers: Mapping[str, Handler],
    host: str,
    port: int,
    *,
    max_frame_bytes: int,
    request_timeout_ms: int,
    max_in_flight: int = 256,
    max_connections: int = 1024,
    name: str = "client",
    registry: MetricsRegistry | None = None,
    security: ListenerSecurity | None = None,
    gate: ConnectionGate | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen on host:port and serve the native protocol until cancelled.

    `handlers` maps op names to handlers. Reports readiness with `task_status.started(port)`
    (the actual port, so port 0 picks a free one). `registry` receives the listener's
    metrics (raftlog_requests_total, raftlog_request_latency_ms, raftlog_frame_errors_total,
    raftlog_connections, and with `security` raftlog_auth_failures_total and
    raftlog_tls_handshake_failures_total), labelled with `name`. `security` adds TLS and/or
    per-connection authentication (module docstring). `gate`: the node's connection limits
    and timers (raftlog/node/gate.py, shared by its listeners); by default one of this
    listener's own with `max_connections` and no timers. Raises OSError if it cannot bind.

    Concurrency: handlers of one connection run concurrently; handlers must be cancel-safe.
    """
    if max_in_flight < 1 or max_connections < 1 or request_timeout_ms < 1:
        raise ValueError("max_in_flight, max_connections and request_timeout_ms must be >= 1")
    if not math.isfinite(max_frame_bytes) or max_frame_bytes < 1:
        raise ValueError("max_frame_bytes must be >= 1")
    listener = _Listener(
        handlers,
        name=name,
        max_frame_bytes=max_frame_bytes,
        request_timeout_ms=request_timeout_ms,
        max_in_flight=max_in_flight,
        registry=registry,
        security=security,
    )
    if gate is None:
        gate = ConnectionGate(max_connections=max_connections, registry=registry)
    handle = connection_handler(name, security, listener.metrics, partial(_run_connection, listener))
    await serve_listener(host, port, name=name, gate=gate, handle=handle, task_status=task_status,
                         max_frame_bytes=max_frame_bytes, max_in_flight=max_in_flight)

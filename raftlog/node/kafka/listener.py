"""The Kafka listener: a trio server that speaks Kafka's wire protocol over the node's own
services, beside the native listener (raftlog/server.py). It parses and routes; the service
code it calls (the native client handlers, the replica manager) decides.

    serve_kafka(ctx, host, port, max_request_bytes=..., ...)   started by the node

Per connection: a reader reads frames (`int32 size` + request), decodes the header and body
(codec.py), and calls the API's handler; a writer sends the responses in request order
(Kafka's per-connection guarantee). Handlers run one at a time in request order; a handler
that must wait (long poll, acks=all, admin) returns `Later`, which runs in its own task, so
up to `max_in_flight` requests of a connection wait at once (context.py).

Lazy protocol: kafka-python's protocol classes cost the node about a second to import, so
this module and what the node imports with it (context.py, wire.py) do without them; the
first request on any connection loads `dispatch.py` (the API table, codecs) in a worker
thread, while the trio loop keeps serving, and every later request uses it. How an API is
added: dispatch.py.

Limits (everything bounded): connections admitted by the node's `ConnectionGate`
(raftlog/node/gate.py, shared with the native listeners: `max_connections`, the per-address
limit, the pre-authentication and idle timers; a connection over a limit is closed at once);
frames up to `max_request_bytes`, and until the session is complete up to
`sasl_max_receive_bytes` (Kafka's sasl.server.max.receive.size, 512 KiB), refused as soon as
the size arrives; at most `max_in_flight` requests per connection
awaiting their response (then the reader stops reading, and TCP pushes back); every request
under `request_timeout_ms`; a writer stuck that long on a client that does not read closes
the connection.

Security (`security=ListenerSecurity(...)`, raftlog/node/auth.py, the client listener's
settings): with a TLS context every connection starts with a TLS handshake (bounded by
`tls_handshake_timeout_s`; a failure closes it and counts in
raftlog_tls_handshake_failures_total{listener="kafka"}); fetched records then go through
the TLS stream (read from the segment in a worker thread) instead of os.sendfile (both:
raftlog/node/writer.py, the native listener's writer). Each
connection gets a session; until it is complete (SASL: sasl.py) only ApiVersions,
SaslHandshake and SaslAuthenticate run, and anything else closes the connection; a failed
login counts in raftlog_auth_failures_total{listener="kafka"}. Before each later request the
session is checked (a user removed while connected is closed, and so is a session older
than `connections_max_reauth_ms` that did not log in again: KIP-368, no answer, as Kafka). The connection is the current
connection of its requests (context.py), so the ports (`ctx.port()`, `ctx.txn_port()`, ...) and
`ctx.access()` apply its principal's ACLs.

Bad input: a frame over `max_request_bytes` (or a negative size), a header or body that does
not decode (truncated, garbage), an api key we have no schema for: one log line
(`kafka_conn_closed` with the reason) and the connection is closed, as Kafka does for a key it
does not know; earlier responses of that connection are still sent. An API whose schema we
carry (kafka-python's, Kafka 4's, and schemas/) that we do not serve, or one we serve at a
version we do not: at once, an answer in that API's layout at the request's version with
UNSUPPORTED_VERSION in every error field (per topic, partition or key where its errors are
per item, mirroring the request: dispatch.error_response), and the connection stays open;
ApiVersions per KIP-511: a v0 answer listing what we serve. Only a version above the schema's
is closed (one log line): no layout to answer in. A handler bug: UNKNOWN_SERVER_ERROR in the
response's error fields; its traceback is logged. Nothing one connection does stops the
listener or another connection. Requests before ApiVersions are served (Kafka does; old clients skip it).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import struct
from collections.abc import Mapping
from functools import partial
from types import ModuleType
from typing import Any, Final, NoReturn

import trio

from raftlog.base.errors import RaftlogError
from raftlog.base.eventlog import log_event
from raftlog.node.auth import ListenerSecurity, Session, SessionExpiredError
from raftlog.node.gate import ConnectionGate, Liveness
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.listener import ListenerMetrics, bind, connection_handler, serve_listener
from raftlog.node.kafka import errors
from raftlog.node.kafka.fast_produce import answer_bytes, read_call
from raftlog.node.kafka.mux import MAX_MESSAGE_BYTES, Pipe
from raftlog.node.kafka.workers import NetworkWorkers
from raftlog.node.kafka.context import Call, ConnectionState, Encoded, Handler, KafkaContext, Later
from raftlog.node.kafka.wire import API_VERSIONS_KEY, Chunk, CodecError, FileRange, Header
from raftlog.node.quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from raftlog.node.writer import ConnectionWriter

__all__ = ["serve_kafka", "load_protocol"]

logger = logging.getLogger(__name__)

RECEIVE_CHUNK_BYTES: Final = 256 << 10
_SIZE: Final = struct.Struct(">i")
SASL_SERVER_MAX_RECEIVE_SIZE: Final = 524288  # Kafka's sasl.server.max.receive.size default
SASL_AUTHENTICATION_FAILED: Final = 58
PRODUCE_KEY: Final = 0
# Never throttled by request_percentage (Kafka's exempt APIs a client sends: ApiVersions and
# the SASL login), so a throttled client can still connect and learn the versions.
_REQUEST_QUOTA_EXEMPT: Final = frozenset({API_VERSIONS_KEY, 17, 36})


class _Close(Exception):
    """Close the connection after the responses before this one (reason logged)."""

    def __init__(self, reason: str, **fields: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fields = fields


class _Slot:
    """One request's place in the response order. `close_after`: close once this response
    is written (a failed login's answer)."""

    __slots__ = ("done", "chunks", "close", "close_after", "throttle_ms")

    def __init__(self) -> None:
        self.throttle_ms = 0  # a quota's throttle time, reported in the response
        self.done = trio.Event()
        self.chunks: list[Chunk] | None = None
        self.close: _Close | None = None
        self.close_after: _Close | None = None


PROTOCOL_MODULE: Final = "raftlog.node.kafka.dispatch"


def load_protocol() -> ModuleType:
    """Import the protocol half (dispatch.py: kafka-python's classes, the API table).
    Blocking, about a second the first time: the listener runs it in a worker thread."""
    return importlib.import_module(PROTOCOL_MODULE)


class _Listener:
    def __init__(
        self, ctx: KafkaContext, handlers: Mapping[int, Handler] | None, *, max_request_bytes: int,
        request_timeout_ms: int, max_in_flight: int, registry: MetricsRegistry | None,
        security: ListenerSecurity | None = None, sasl_max_receive_bytes: int = 0,
    ) -> None:  # fmt: skip
        self.ctx = ctx
        self.sasl_max_receive_bytes = sasl_max_receive_bytes or SASL_SERVER_MAX_RECEIVE_SIZE
        self.security = security
        self._handlers = handlers
        self.handlers: dict[int, Handler] = {}
        self.proto: ModuleType | None = None  # dispatch.py once loaded
        self._loading: trio.Event | None = None
        self.max_request_bytes = max_request_bytes
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        # The shell's metrics (raftlog/node/listener.py); the names below are its.
        self.metrics = metrics = ListenerMetrics(registry, "kafka")
        self.requests_total = metrics.requests_total
        self.request_latency_ms = metrics.request_latency_ms
        self.frame_errors_total = metrics.frame_errors_total
        self.auth_failures_total = metrics.auth_failures_total
        self.request_bytes_total = metrics.request_bytes_total
        self._produce_metrics: tuple[Any, Any, Any] | None = None
        registry = registry if registry is not None else MetricsRegistry()
        sessions = ctx.fetch_sessions
        if sessions is not None:  # Kafka's kafka.server:type=FetchSessionCache
            registry.gauge("raftlog_fetch_sessions", "Incremental fetch sessions cached (KIP-227).").set_function(
                lambda: len(sessions))
            registry.gauge("raftlog_fetch_session_partitions",
                           "Partitions of the cached fetch sessions.").set_function(sessions.partitions)
            evicted = registry.counter("raftlog_fetch_session_evictions_total",
                                       "Fetch sessions evicted to make room for a new one.")
            sessions.on_evict = evicted.inc
        self.network_produce_calls_total = registry.counter(
            "raftlog_kafka_network_produce_calls_total",
            "Produce requests a Kafka network worker decoded and handed to the main process as calls.")
        self.quota_throttle_time_ms = registry.counter(
            "raftlog_quota_throttle_time_ms",
            "Throttle time given to clients over a quota, in ms, by quota type and entity (user, client id).",
            ("quota", "user", "client_id"),
        )

    def produce_metrics(self) -> tuple[Any, Any, Any]:
        """Produce's series of request bytes, OK requests and latency (the fast path's, looked
        up once)."""
        if self._produce_metrics is None:
            self._produce_metrics = (self.request_bytes_total.labels(listener="kafka", op="Produce"),
                                     self.requests_total.labels(listener="kafka", op="Produce", code="OK"),
                                     self.request_latency_ms.labels(listener="kafka", op="Produce"))
        return self._produce_metrics

    async def load(self) -> None:
        """Load the protocol half once (the first request of any connection); concurrent
        first requests wait for the same load. Raises what the import raises (a broken
        install): that connection fails and logs, the next request tries again."""
        while self.proto is None:
            if self._loading is not None:
                await self._loading.wait()
                continue
            self._loading = loading = trio.Event()
            started = trio.current_time()
            try:
                proto = await trio.to_thread.run_sync(load_protocol)
            finally:
                self._loading = None
                loading.set()
            self.handlers = dict(proto.HANDLERS if self._handlers is None else self._handlers)
            self.proto = proto
            log_event(logger, "kafka_protocol_loaded",
                      load_ms=round((trio.current_time() - started) * 1000))


class _Connection:
    def __init__(self, stream: trio.abc.Stream, listener: _Listener, peer: str, session: Any = None,
                 socket_stream: trio.SocketStream | None = None, liveness: Liveness | None = None) -> None:
        self.stream = stream
        self.liveness = liveness if liveness is not None else Liveness(0, 0)
        self.waiting = 0  # Later tasks in flight: the connection is not idle
        self.liveness.busy = lambda: self.waiting > 0
        # The raw socket for os.sendfile; None over TLS (records then go through the stream).
        self.socket_stream = socket_stream if socket_stream is not None else (
            stream if isinstance(stream, trio.SocketStream) else None)
        self.listener = listener
        self.writer = ConnectionWriter(stream, self.socket_stream, listener.request_timeout_ms / 1000,
                                       "kafka", peer, disk_limiter=listener.ctx.disk_limiter)
        self.state = ConnectionState(peer=peer, session=session)
        self.cancel_scope: trio.CancelScope | None = None
        self.muted_until = 0.0  # trio time: no request is read before (a quota's throttle)
        self.state.record_quota = self._throttle  # Fetch's consumer_byte_rate (fetch.py)

    def _throttle(self, quota: str, client_id: str, value: float) -> int:
        """Record `value` against the connection's quota of this type (raftlog/node/quotas.py);
        the throttle time in ms, for which the connection is then muted."""
        listener = self.listener
        manager = listener.ctx.quotas
        configured = getattr(getattr(listener.ctx.metadata, "image", None), "client_quotas", None)
        if manager is None or not configured:
            return 0
        user = self.state.principal.partition(":")[2] or self.state.principal
        now = trio.current_time()
        wait = manager.record(configured, quota, user, client_id, value, int(now * 1000))
        if wait:
            self.muted_until = max(self.muted_until, now + wait / 1000)
            listener.quota_throttle_time_ms.labels(quota=quota, user=user, client_id=client_id).inc(wait)
        return wait

    async def run(self) -> None:
        self.state.enter()  # this task's (and its children's) current connection: ACLs
        send, receive = trio.open_memory_channel[_Slot](self.listener.max_in_flight)
        async with trio.open_nursery() as connection:
            self.cancel_scope = connection.cancel_scope
            connection.start_soon(self._write_loop, receive)
            calls = trio.CancelScope()
            if isinstance(self.stream, Pipe):  # a network worker's connection: its produce calls
                connection.start_soon(self._call_loop, self.stream, calls)
            async with send:
                async with trio.open_nursery() as requests:
                    await self._read_loop(requests, send)
            calls.cancel()  # the client sent its EOF: its calls' answers would go nowhere
            # `send` closed: the writer sends what is queued, then returns.

    async def _call_loop(self, pipe: Pipe, scope: trio.CancelScope) -> None:
        """The Produce requests a Kafka network worker decoded for this connection (its fast
        path: network_worker.py), served in order as `_dispatch` serves a frame's, answered
        with compact answers (fast_produce.py) that the worker encodes and writes in the
        connection's response order."""
        with scope:
            async with trio.open_nursery() as laters:
                while True:
                    try:
                        payload = await pipe.next_message()
                    except trio.BrokenResourceError:
                        return
                    await self._produce_call(pipe, payload, laters)

    async def _produce_call(self, pipe: Pipe, payload: bytes, laters: trio.Nursery) -> None:
        listener = self.listener
        seq, header, request, frame_bytes = read_call(payload)
        listener.network_produce_calls_total.inc()
        self.liveness.touch()
        if self.muted_until > trio.current_time():  # a quota's throttle, as the read loop waits
            await trio.sleep_until(self.muted_until)
        if listener.proto is None:
            await listener.load()
        started = trio.current_time()
        produce_metrics = listener.produce_metrics()
        produce_metrics[0].inc(frame_bytes)
        throttle_ms = 0
        try:
            handler = listener.handlers.get(PRODUCE_KEY)
            if handler is None:
                raise _Close("unknown_api_key", api_key=PRODUCE_KEY, correlation_id=header.correlation_id)
            client_id = header.client_id or ""
            if listener.ctx.quotas is not None:
                throttle_ms = self._throttle(PRODUCER_BYTE_RATE, client_id, frame_bytes)
            # A cancel scope, not fail_after (a generator context manager: 12 % of this
            # method's time in the profile); the same TooSlowError on expiry.
            with trio.CancelScope(deadline=started + listener.request_timeout_ms / 1000) as scope:
                reply = await handler(listener.ctx, Call(header, request, self.state))
            if scope.cancelled_caught:
                raise trio.TooSlowError
            if listener.ctx.quotas is not None:  # the request quota, as _dispatch counts it
                used = (trio.current_time() - started) * 100
                throttle_ms = max(throttle_ms, self._throttle(REQUEST_PERCENTAGE, client_id, used))
        except _Close as exc:
            reply = exc
        except Exception as exc:  # a handler bug answers one request, as on the raw path
            reply = self._failure(header, exc)
        if isinstance(reply, Later):
            self.waiting += 1
            laters.start_soon(self._later_call, pipe, seq, reply, header, started, throttle_ms)
        else:
            self._answer_call(pipe, seq, header, started, reply, throttle_ms)

    async def _later_call(self, pipe: Pipe, seq: int, later: Later, header: Header, started: float,
                          throttle_ms: int) -> None:
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.listener.request_timeout_ms / 1000) as scope:
                reply = await later.fn()
            if scope.cancelled_caught:
                raise trio.TooSlowError
        except Exception as exc:  # noqa: BLE001 - TooSlowError and handler bugs alike
            reply = self._failure(header, exc)
        finally:
            self.waiting -= 1
        self._answer_call(pipe, seq, header, started, reply, throttle_ms)

    def _answer_call(self, pipe: Pipe, seq: int, header: Header, started: float, reply: Any,
                     throttle_ms: int) -> None:
        listener = self.listener
        code = "OK"
        if isinstance(reply, _Close):  # the worker closes after the answers before this one
            listener.frame_errors_total.labels(listener="kafka", code=reply.reason).inc()
            self._log_close(reply)
            pipe.send_message(answer_bytes(seq, close=reply.reason))
            code = reply.reason
        elif reply is None:  # acks=0: no response
            pipe.send_message(answer_bytes(seq))
        else:
            if throttle_ms:
                reply.throttle_time_ms = throttle_ms
            payload = answer_bytes(seq, reply)
            if len(payload) > MAX_MESSAGE_BYTES:  # the link's bound (mux.py): close instead
                close = _Close("response_too_large", api="Produce", bytes=len(payload))
                self._log_close(close)
                payload = answer_bytes(seq, close=close.reason)
                code = close.reason
            pipe.send_message(payload)
        produce_metrics = listener.produce_metrics()
        if code == "OK":
            produce_metrics[1].inc()
        else:
            listener.requests_total.labels(listener="kafka", op="Produce", code=code).inc()
        produce_metrics[2].observe((trio.current_time() - started) * 1000)

    async def _read_loop(self, requests: trio.Nursery, send: trio.MemorySendChannel[_Slot]) -> None:
        buffer = bytearray()
        listener = self.listener
        while True:
            while True:
                if len(buffer) >= 4:
                    size = _SIZE.unpack_from(buffer, 0)[0]
                    if self.state.authenticated:
                        limit, reason = listener.max_request_bytes, "frame_too_large"
                    else:  # Kafka's sasl.server.max.receive.size: nothing big before the login
                        limit, reason = listener.sasl_max_receive_bytes, "frame_too_large_before_authentication"
                    if size < 0 or size > limit:
                        await self._close_after(send, _Close(
                            reason if size > 0 else "frame_size_negative", size=size, max_bytes=limit,
                        ))  # fmt: skip
                        return
                    if len(buffer) >= 4 + size:
                        break
                try:
                    data = await self.stream.receive_some(RECEIVE_CHUNK_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                self.liveness.touch()
                if not data:
                    if buffer:
                        self._log_close(_Close("truncated_frame", buffered_bytes=len(buffer)))
                    return
                buffer += data
            size = _SIZE.unpack_from(buffer, 0)[0]
            frame = bytes(buffer[4:4 + size])
            del buffer[:4 + size]
            if listener.proto is None:
                await listener.load()
            if self.muted_until > trio.current_time():  # Kafka mutes a throttled client's channel
                await trio.sleep_until(self.muted_until)
            slot = _Slot()
            await send.send(slot)  # bounded: max_in_flight slots await their response
            close = await self._dispatch(frame, slot, requests)
            if close is not None:
                return

    async def _dispatch(self, frame: bytes, slot: _Slot, requests: trio.Nursery) -> _Close | None:
        listener = self.listener
        started = trio.current_time()
        header: Header | None = None
        try:
            proto = listener.proto
            header, offset = proto.decode_header(frame)
            listener.request_bytes_total.labels(listener="kafka", op=proto.api_name(header.api_key)).inc(4 + len(frame))
            handler = listener.handlers.get(header.api_key)
            if not proto.is_known_api(header.api_key):
                raise _Close("unknown_api_key", api_key=header.api_key,
                             correlation_id=header.correlation_id)
            if not self.state.authenticate():
                if header.api_key not in proto.BEFORE_LOGIN:
                    raise _Close("not_authenticated", api=proto.api_name(header.api_key))
            elif self.state.session is not None:
                try:
                    self.state.session.check()  # a user removed while connected is cut off
                except SessionExpiredError:  # KIP-368: past connections.max.reauth.ms, Kafka closes
                    raise _Close("session_expired", api=proto.api_name(header.api_key)) from None
                except RaftlogError:
                    raise _Close("credentials_removed", api=proto.api_name(header.api_key)) from None
            if handler is None or not proto.supported(header.api_key, header.api_version):
                self._finish(slot, header, started, self._unsupported(header, frame, offset))
                return None
            body = proto.decode_body(header, frame, offset)
            if header.api_key == PRODUCE_KEY and listener.ctx.quotas is not None:
                slot.throttle_ms = self._throttle(PRODUCER_BYTE_RATE, header.client_id or "", 4 + len(frame))
            call = Call(header, body, self.state)
            with trio.fail_after(listener.request_timeout_ms / 1000):
                reply = await handler(listener.ctx, call)
            if listener.ctx.quotas is not None and header.api_key not in _REQUEST_QUOTA_EXEMPT:
                # Kafka's request quota: the handler's time on this node's one event loop (the
                # decode and the handler's synchronous part: a Later's waits are not work), in
                # percent-seconds, as Kafka counts request handler thread time.
                used = (trio.current_time() - started) * 100
                slot.throttle_ms = max(slot.throttle_ms,
                                       self._throttle(REQUEST_PERCENTAGE, header.client_id or "", used))
            if isinstance(reply, Later):
                self.waiting += 1
                requests.start_soon(self._run_later, reply, slot, header, started)
            else:
                self._finish(slot, header, started, reply)
            if self.state.close_reason is not None:  # e.g. a failed login: answer, then close
                close = _Close(self.state.close_reason, api=listener.proto.api_name(header.api_key))
                slot.close_after = close
                return close
            return None
        except CodecError as exc:
            close = _Close("malformed_request", reason_detail=str(exc),
                           correlation_id=header.correlation_id if header else None)
        except _Close as exc:
            close = exc
        except Exception as exc:  # a handler bug answers (or closes) one request
            assert header is not None
            self._finish(slot, header, started, self._failure(header, exc))
            return None
        listener.frame_errors_total.labels(listener="kafka", code=close.reason).inc()
        slot.close = close
        slot.done.set()
        return close

    async def _run_later(self, later: Later, slot: _Slot, header: Header, started: float) -> None:
        try:
            with trio.fail_after(self.listener.request_timeout_ms / 1000):
                reply = await later.fn()
        except Exception as exc:  # noqa: BLE001 - TooSlowError and handler bugs alike
            reply = self._failure(header, exc)
        finally:
            self.waiting -= 1
        self._finish(slot, header, started, reply)

    def _failure(self, header: Header, exc: Exception) -> Any:
        if isinstance(exc, trio.TooSlowError):
            code = errors.REQUEST_TIMED_OUT
        else:
            code, _ = errors.kafka_error(exc)
            if code == errors.UNKNOWN_SERVER_ERROR:
                log_event(
                    logger, "kafka_handler_failed", level=logging.ERROR, exc_info=exc,
                    api=self.listener.proto.api_name(header.api_key), version=header.api_version,
                    peer=self.state.peer,
                )  # fmt: skip
        proto = self.listener.proto
        response = proto.error_response(header.api_key, header.api_version, code)
        if response is None:
            return _Close("handler_failed", api=proto.api_name(header.api_key), error=type(exc).__name__)
        return response

    def _unsupported(self, header: Header, frame: bytes, offset: int) -> Any:
        proto = self.listener.proto
        if header.api_key == API_VERSIONS_KEY:
            # KIP-511: answer in v0 layout (header v0 too) with the versions we do serve.
            response = proto.api_versions_unsupported()
            return Encoded(proto.encode_response(header, response, version=0))
        try:  # the request's topics, partitions or keys, for per-item errors
            request = proto.decode_body(header, frame, offset, removed=True)
        except CodecError:
            request = None
        response = proto.error_response(header.api_key, header.api_version, errors.UNSUPPORTED_VERSION,
                                        request, f"{proto.api_name(header.api_key)} v{header.api_version} "
                                        "is not supported by raftlog")
        if response is None:  # a version Kafka's schema does not have either
            return _Close("unsupported_version", api=proto.api_name(header.api_key),
                          version=header.api_version)
        log_event(logger, "kafka_unsupported_version", level=logging.INFO,
                  api=proto.api_name(header.api_key), version=header.api_version, peer=self.state.peer)
        return response

    def _finish(self, slot: _Slot, header: Header, started: float, reply: Any) -> None:
        listener = self.listener
        proto = listener.proto
        op = proto.api_name(header.api_key)
        code = "OK"
        try:
            if isinstance(reply, _Close):
                slot.close = reply
                code = reply.reason
            elif isinstance(reply, Encoded):
                slot.chunks = reply.chunks
            elif reply is not None:
                if slot.throttle_ms and hasattr(reply, "throttle_time_ms"):
                    reply.throttle_time_ms = slot.throttle_ms
                slot.chunks = proto.encode_response(header, reply)
                error = getattr(reply, "error_code", 0)
                code = "OK" if not error else str(error)
                if error == SASL_AUTHENTICATION_FAILED and header.api_key == proto.SASL_AUTHENTICATE_KEY:
                    listener.auth_failures_total.labels(listener="kafka").inc()
        except Exception as exc:  # noqa: BLE001 - a response that does not encode is a bug
            log_event(logger, "kafka_response_unencodable", level=logging.ERROR, exc_info=exc,
                      api=op, version=header.api_version)
            slot.close = _Close("response_unencodable", api=op)
            code = "response_unencodable"
        listener.requests_total.labels(listener="kafka", op=op, code=code).inc()
        listener.request_latency_ms.labels(listener="kafka", op=op).observe(
            (trio.current_time() - started) * 1000
        )
        slot.done.set()

    async def _close_after(self, send: trio.MemorySendChannel[_Slot], close: _Close) -> None:
        self.listener.frame_errors_total.labels(listener="kafka", code=close.reason).inc()
        slot = _Slot()
        slot.close = close
        slot.done.set()
        await send.send(slot)

    def _log_close(self, close: _Close) -> None:
        log_event(logger, "kafka_conn_closed", level=logging.INFO, peer=self.state.peer,
                  reason=close.reason, **close.fields)

    async def _write_loop(self, receive: trio.MemoryReceiveChannel[_Slot]) -> None:
        write_timeout_s = self.listener.request_timeout_ms / 1000
        async with receive:
            async for slot in receive:
                await slot.done.wait()
                if slot.close is not None:
                    self._log_close(slot.close)
                    self._release(slot.chunks)
                    self._drain_and_release(receive)
                    assert self.cancel_scope is not None
                    self.cancel_scope.cancel()
                    return
                if slot.chunks is None:
                    continue  # acks=0: no response
                self.liveness.touch()  # an answer is traffic
                try:
                    with trio.fail_after(write_timeout_s):
                        await self._send_chunks(slot.chunks)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                        OSError) as exc:
                    log_event(logger, "kafka_conn_write_failed", level=logging.DEBUG,
                              peer=self.state.peer, reason=type(exc).__name__)
                    self._drain_and_release(receive)
                    assert self.cancel_scope is not None
                    self.cancel_scope.cancel()
                    return
                finally:
                    self._release(slot.chunks)
                if slot.close_after is not None:  # answered; now close (a failed login)
                    self._log_close(slot.close_after)
                    self._drain_and_release(receive)
                    if isinstance(self.stream, trio.abc.HalfCloseableStream):
                        with trio.move_on_after(1):  # let the answer arrive before the close
                            await self.stream.send_eof()
                    assert self.cancel_scope is not None
                    self.cancel_scope.cancel()
                    return

    @staticmethod
    def _release(chunks: list[Chunk] | None) -> None:
        for chunk in chunks or ():
            if isinstance(chunk, FileRange):
                chunk.close()

    def _drain_and_release(self, receive: trio.MemoryReceiveChannel[_Slot]) -> None:
        # Responses that will never be sent still own file descriptors (zero-copy fetch).
        while True:
            try:
                slot = receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            self._release(slot.chunks)

    async def _send_chunks(self, chunks: list[Chunk]) -> None:
        """The connection's writer (raftlog/node/writer.py, the native listener's): buffers
        with writev and file ranges with os.sendfile on the trio thread (the replica read
        or warmed them into the page cache: kafka/fetch.py), or through the TLS stream."""
        await self.writer.send_parts(chunks)


async def _run_connection(listener: _Listener, stream: trio.abc.Stream, peer: str, session: Session | None,
                          liveness: Liveness, socket_stream: trio.SocketStream | None) -> None:
    await _Connection(stream, listener, peer, session, liveness=liveness, socket_stream=socket_stream).run()


async def serve_kafka(
    ctx: KafkaContext,
    host: str,
    port: int,
    *,
    max_request_bytes: int,
    request_timeout_ms: int,
    max_in_flight: int = 256,
    max_connections: int = 1024,
    sasl_max_receive_bytes: int = SASL_SERVER_MAX_RECEIVE_SIZE,
    handlers: Mapping[int, Handler] | None = None,
    registry: MetricsRegistry | None = None,
    security: ListenerSecurity | None = None,
    gate: ConnectionGate | None = None,
    network_processes: int = 0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen on host:port and serve Kafka's protocol until cancelled. Reports readiness with
    the bound port (port 0 picks a free one). `security`: TLS and/or SASL sessions (the
    module docstring); until a connection's session is complete no frame may be over
    `sasl_max_receive_bytes` (Kafka's sasl.server.max.receive.size). `gate`: the node's
    connection limits and timers (raftlog/node/gate.py); by default one of this listener's
    own with `max_connections` and no timers. `network_processes` > 0: that many worker
    processes accept and carry the connections (workers.py); this process binds the port and
    serves every request. Raises OSError if it cannot bind."""
    if max_in_flight < 1 or max_connections < 1 or request_timeout_ms < 1 or max_request_bytes < 64:
        raise ValueError("max_in_flight, max_connections, request_timeout_ms >= 1; "
                         "max_request_bytes >= 64")
    listener = _Listener(
        ctx, handlers, max_request_bytes=max_request_bytes,
        request_timeout_ms=request_timeout_ms, max_in_flight=max_in_flight, registry=registry,
        security=security, sasl_max_receive_bytes=sasl_max_receive_bytes,
    )  # fmt: skip
    if gate is None:
        gate = ConnectionGate(max_connections=max_connections, registry=registry)
    handle = connection_handler("kafka", security, listener.metrics, partial(_run_connection, listener))
    if network_processes > 0:
        socket_listeners, actual_port = await bind(host, port)
        async with contextlib.AsyncExitStack() as stack:
            for socket_listener in socket_listeners:
                await stack.enter_async_context(socket_listener)
            # Plaintext connections without SASL: the workers serve Produce's connection side
            # themselves (network_worker.py); under TLS or SASL they carry the bytes only.
            workers = NetworkWorkers(network_processes, socket_listeners, gate, handle, registry=registry,
                                     fast_max_in_flight=max_in_flight if security is None else 0,
                                     fast_max_frame_bytes=max_request_bytes)
            log_event(logger, "listening", listener="kafka", host=host, port=actual_port,
                      max_request_bytes=max_request_bytes, max_in_flight=max_in_flight,
                      network_processes=network_processes)
            task_status.started(actual_port)
            await workers.run()
        raise AssertionError("unreachable: the workers only end by cancellation")
    await serve_listener(host, port, name="kafka", gate=gate, handle=handle, task_status=task_status,
                         max_request_bytes=max_request_bytes, max_in_flight=max_in_flight)

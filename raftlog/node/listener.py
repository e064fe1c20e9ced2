"""The listener shell, written once for every listener of the node (the native `server.py`, the
Kafka `kafka/listener.py`, the observability `http.py`; a schema registry / REST listener joins
the same way): bind, accept through the node's gate, one task per connection (TLS and session
set-up, the connection count, a bug kept to its connection), the listener's metrics, and a
graceful close. A listener supplies only its per-connection protocol:

    metrics = ListenerMetrics(registry, "kafka")
    handle = connection_handler("kafka", security, metrics, run)   # run(stream, peer, session,
                                                                   #     liveness, socket_stream)
    await serve_listener(host, port, name="kafka", gate=gate, handle=handle,
                         task_status=task_status, max_in_flight=256)   # extra fields are logged

Where each part lives: the accept loop, the connection limits and the per-connection timers in
`gate.py` (`accept_loop`, `ConnectionGate`, `Liveness`); TLS and SASL/peer sessions in
`auth.py` (`ListenerSecurity.accept`); the per-connection protocol (frames, dispatch, responses)
in each listener; the node's listeners' limits in `ListenerSettings`, built from
`config.py` by `settings.py`.

Metrics (labelled with the listener's name; the series are shared by every listener of one
registry): raftlog_requests_total{listener,op,code}, raftlog_request_latency_ms{listener,op},
raftlog_frame_errors_total{listener,code}, raftlog_connections{listener},
raftlog_auth_failures_total{listener}, raftlog_tls_handshake_failures_total{listener}.

Failure rules: an exception out of one connection's protocol is logged (`conn_failed`, with
its traceback) and ends that connection only; a cancellation (shutdown) still propagates.
Concurrency: trio-thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.auth import ListenerSecurity, Session
from raftlog.node.gate import ConnectionGate, Handle, Liveness, accept_loop

__all__ = [
    "ListenerMetrics",
    "ListenerSettings",
    "RunConnection",
    "bind",
    "close_gracefully",
    "connection_handler",
    "serve_listener",
]

logger = logging.getLogger(__name__)

LINGER_S = 1.0  # after a last answer: how long to discard input so that it is read
LINGER_MAX_BYTES = 16 << 20
LINGER_CHUNK_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """The limits of one request/response listener (native client or peer, Kafka)."""

    max_frame_bytes: int     # a frame (request or response) over this gets MESSAGE_TOO_LARGE
    request_timeout_ms: int  # the server deadline of every request
    max_in_flight: int       # requests at once per connection (then the reader stops reading)



class ListenerMetrics:
    """One listener's metrics (module docstring) and its open-connection count."""

    def __init__(self, registry: MetricsRegistry | None, name: str) -> None:
        self.name = name
        self.connections = 0
        registry = registry if registry is not None else MetricsRegistry()
        self.requests_total = registry.counter(
            "raftlog_requests_total",
            "Requests answered, by listener, op and result code (OK for success).",
            ("listener", "op", "code"),
        )
        self.request_latency_ms = registry.histogram(
            "raftlog_request_latency_ms",
            "Time from a request's start (slot taken) to its response being ready, in ms.",
            ("listener", "op"),
        )
        self.request_bytes_total = registry.counter(
            "raftlog_request_bytes_total",
            "Bytes of the requests received (frames, size prefix included), by listener and op.",
            ("listener", "op"),
        )
        self.frame_errors_total = registry.counter(
            "raftlog_frame_errors_total",
            "Connections closed because a frame could not be decoded, by code.",
            ("listener", "code"),
        )
        registry.gauge(
            "raftlog_connections", "Open connections, by listener.", ("listener",)
        ).labels(listener=name).set_function(lambda: self.connections)
        self.auth_failures_total = registry.counter(
            "raftlog_auth_failures_total",
            "Failed authentications (SASL logins, peer handshakes), by listener.",
            ("listener",),
        )
        self.tls_handshake_failures_total = registry.counter(
            "raftlog_tls_handshake_failures_total",
            "Connections closed because their TLS handshake failed, by listener.",
            ("listener",),
        )
        # Series of answered requests, bounded by the listener's ops times the registry's codes.
        self._answers: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    def answered(self, op: str, code: str, latency_ms: float) -> None:
        """Count one answer of a known op (raftlog_requests_total and the latency histogram).
        The series are looked up once per (op, code): `labels()` per request cost ~2 us each."""
        counter = self._answers.get((op, code))
        if counter is None:
            counter = self._answers[(op, code)] = self.requests_total.labels(
                listener=self.name, op=op, code=code)
        counter.inc()
        latency = self._latency.get(op)
        if latency is None:
            latency = self._latency[op] = self.request_latency_ms.labels(listener=self.name, op=op)
        latency.observe(latency_ms)


# run(stream, peer, session, liveness, socket_stream): one connection's protocol, until it ends.
# `stream` is the TLS stream or the socket; `socket_stream` the plain socket under it (None
# over TLS: no sendfile); `session` None on a listener without security.
RunConnection = Callable[
    [trio.abc.Stream, str, Session | None, Liveness, trio.SocketStream | None], Awaitable[None]
]


def connection_handler(
    name: str, security: ListenerSecurity | None, metrics: ListenerMetrics, run: RunConnection
) -> Handle:
    """The gate's `handle(stream, peer, liveness)` for a listener: counts the connection, sets
    up TLS and the session (with `security`), runs the protocol, logs a failure (module
    docstring)."""

    async def handle(stream: trio.abc.Stream, peer: str, liveness: Liveness) -> None:
        metrics.connections += 1
        log_event(logger, "conn_open", level=logging.DEBUG, listener=name, peer=peer)
        # The socket for os.sendfile; None for a Kafka network worker's link (kafka/workers.py),
        # the socket under the stream of a connection a worker handed over.
        socket_stream = stream if isinstance(stream, trio.SocketStream) else getattr(stream, "socket_stream", None)
        try:
            if security is None:
                async with stream:
                    await run(stream, peer, None, liveness, socket_stream)
                return
            liveness.authenticated = lambda: False  # until the session is complete
            accepted = await security.accept(stream, peer, listener=name,
                                             tls_failures=metrics.tls_handshake_failures_total)
            if accepted is None:
                return
            secured, session = accepted
            liveness.authenticated = lambda: session.complete
            async with secured:
                await run(secured, peer, session, liveness, socket_stream if secured is stream else None)
        except* Exception as group:  # a bug in one connection must not stop the listener
            # except*: a cancellation travelling with the bug (shutdown) still propagates.
            log_event(logger, "conn_failed", level=logging.ERROR, exc_info=group,
                      listener=name, peer=peer)
        finally:
            metrics.connections -= 1
            log_event(logger, "conn_closed", level=logging.DEBUG, listener=name, peer=peer)

    return handle


async def bind(host: str, port: int) -> tuple[list[trio.SocketListener], int]:
    """The listening sockets of host:port and the port bound (port 0 picks a free one: then
    one socket only, so the port is unique across address families). Raises OSError."""
    socket_listeners = await trio.open_tcp_listeners(port, host=host or None)
    if port == 0 and len(socket_listeners) > 1:
        for extra in socket_listeners[1:]:
            await extra.aclose()
        socket_listeners = socket_listeners[:1]
    return socket_listeners, socket_listeners[0].socket.getsockname()[1]


async def serve_listener(
    host: str,
    port: int,
    *,
    name: str,
    gate: ConnectionGate,
    handle: Handle,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    **log_fields: Any,
) -> NoReturn:
    """Bind host:port and run `handle` for every connection `gate` admits, until cancelled.
    Reports readiness with `task_status.started(port)` (the port bound) and logs `listening`
    with `log_fields`. Raises OSError if it cannot bind."""
    socket_listeners, actual_port = await bind(host, port)
    async with trio.open_nursery() as nursery:
        for socket_listener in socket_listeners:
            nursery.start_soon(accept_loop, socket_listener, gate, name, handle, nursery)
        log_event(logger, "listening", listener=name, host=host, port=actual_port, **log_fields)
        task_status.started(actual_port)
        await trio.sleep_forever()
    raise AssertionError("unreachable: the nursery only ends by cancellation")


async def close_gracefully(
    stream: trio.abc.HalfCloseableStream, *, linger_s: float = LINGER_S,
    max_bytes: int = LINGER_MAX_BYTES,
) -> None:
    """Send FIN, then read and discard input until EOF, `linger_s` or `max_bytes`.

    Closing a socket with unread input makes the kernel send RST, which can destroy a last
    response (an error we just wrote) before the client reads it. The caller still closes
    the stream afterwards.
    """
    try:
        await stream.send_eof()
        discarded = 0
        with trio.move_on_after(linger_s):
            while discarded < max_bytes:
                data = await stream.receive_some(LINGER_CHUNK_BYTES)
                if not data:
                    break
                discarded += len(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return  # the peer is gone already: nothing left to protect

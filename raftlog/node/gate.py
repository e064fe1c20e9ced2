"""The accept side of the node's listeners, written once for the native (server.py) and the
Kafka (kafka/listener.py) listeners: who may connect, and how long a connection may stay
without authenticating or without traffic (issue 39; Kafka's connection quotas).

    gate = ConnectionGate(max_connections=1024, max_connections_per_ip=256, ...)   # per node
    await accept_loop(socket_listener, gate, "kafka", handle, nursery)              # per socket
    # handle(stream, peer, liveness): liveness.authenticated / .busy say what the connection is

Limits (Kafka's names, `raftlog/node/config.py`):
* `max_connections`: connections at once on the client and Kafka listeners together (Kafka's
  broker-wide `max.connections`). A listener in `own_budget` (the peer listener) counts
  against a budget of its own of the same size, as Kafka exempts its inter-broker listener:
  strangers filling the client ports never cut the cluster's own links.
* `max_connections_per_ip` (with `per_ip_overrides`, Kafka's
  `max.connections.per.ip.overrides`, "address:count,..."): connections at once from one
  address, over every gated listener (Kafka's rule). Addresses match literally (an IP as
  the socket reports it; names are not resolved).
A connection over a limit is accepted and closed at once (never left in the kernel's
backlog, where it would hold everyone behind it), logged once per address (bounded) and
counted in raftlog_connections_refused_total{listener,reason}.

Timers (`Liveness`, one watchdog task per connection, from accept):
* `preauth_timeout_ms`: a connection whose session is not complete that long after accept
  (TLS handshake and SASL/peer handshake included) is closed;
* `idle_ms` (Kafka's `connections.max.idle.ms`): one with no bytes received or responses
  sent, and no request in flight, for that long is closed.
Both count in raftlog_connections_closed_total{listener,reason}.

Also: `raise_fd_limit()` lifts the process's soft RLIMIT_NOFILE to its hard limit at start, so
the connection limits, not the descriptor table, decide who is refused; `open_files_families`
puts the descriptors held and that limit on /metrics (issue 46: a node holds one per replica).

Concurrency: trio-thread only.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, NoReturn

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import Metric, MetricsRegistry, gauge_family

__all__ = [
    "ConnectionGate",
    "Liveness",
    "OnceLog",
    "accept_loop",
    "overdue",
    "peer_name",
    "open_files_families",
    "raise_fd_limit",
    "run_admitted",
    "UNLIMITED",
]

logger = logging.getLogger(__name__)

UNLIMITED: Final = 2**31 - 1  # Kafka's default for its connection limits
ACCEPT_BACKOFF_S: Final = 0.1
MAX_LOGGED_ADDRESSES: Final = 4096
_RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
CLIENTS_BUDGET: Final = "clients"


class OnceLog:
    """Log a refusal once per remote address (bounded: the oldest addresses are forgotten)."""

    def __init__(self, max_addresses: int = MAX_LOGGED_ADDRESSES) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max = max_addresses

    def first(self, address: str) -> bool:
        if address in self._seen:
            return False
        self._seen[address] = None
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True


class ConnectionGate:
    """The node's connection counts: per budget (the client and Kafka listeners share one,
    each listener in `own_budget` has its own) and per remote address. `admit` and `release`
    are pure bookkeeping; the accept loop does the closing."""

    def __init__(
        self,
        *,
        max_connections: int = UNLIMITED,
        max_connections_per_ip: int = UNLIMITED,
        per_ip_overrides: Mapping[str, int] | None = None,
        own_budget: frozenset[str] = frozenset({"peer"}),
        idle_ms: int = 0,
        preauth_timeout_ms: int = 0,
        registry: MetricsRegistry | None = None,
    ) -> None:
        if max_connections < 1 or max_connections_per_ip < 0:
            raise ValueError("max_connections must be >= 1 and max_connections_per_ip >= 0")
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.own_budget = own_budget
        self.idle_ms = idle_ms
        self.preauth_timeout_ms = preauth_timeout_ms
        self._budgets: dict[str, int] = {}
        self._per_ip: dict[str, int] = {}  # only addresses with a connection open: bounded by them
        self._refusals = OnceLog()
        self._timeouts = OnceLog()
        registry = registry if registry is not None else MetricsRegistry()
        self.refused_total = registry.counter(
            "raftlog_connections_refused_total",
            "Connections closed at accept because a connection limit was reached, by listener and reason.",
            ("listener", "reason"),
        )
        self.closed_total = registry.counter(
            "raftlog_connections_closed_total",
            "Connections closed by a timer (preauth_timeout, idle), by listener and reason.",
            ("listener", "reason"),
        )

    def _budget(self, listener: str) -> str:
        return listener if listener in self.own_budget else CLIENTS_BUDGET

    def limit_of(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)

    def admit(self, listener: str, host: str) -> str | None:
        """Count a new connection from `host` on `listener` and return None, or return why it
        is refused ("max_connections", "max_connections_per_ip"; then nothing is counted)."""
        budget = self._budget(listener)
        if self._budgets.get(budget, 0) >= self.max_connections:
            return "max_connections"
        if self._per_ip.get(host, 0) >= self.limit_of(host):
            return "max_connections_per_ip"
        self._budgets[budget] = self._budgets.get(budget, 0) + 1
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        return None

    def release(self, listener: str, host: str) -> None:
        """Uncount a connection that `admit` counted."""
        budget = self._budget(listener)
        self._budgets[budget] -= 1
        left = self._per_ip[host] - 1
        if left:
            self._per_ip[host] = left
        else:
            del self._per_ip[host]

    def timed_out(self, listener: str, host: str, reason: str) -> None:
        """Count a connection closed by its timer; a stranger that did not log in in time is
        logged once per address (an idle close is routine: debug)."""
        self.closed_total.labels(listener=listener, reason=reason).inc()
        stranger = reason == "preauth_timeout" and self._timeouts.first(host)
        log_event(logger, "conn_timed_out", level=logging.WARNING if stranger else logging.DEBUG,
                  listener=listener, address=host, reason=reason)

    def refused(self, listener: str, host: str, reason: str) -> None:
        self.refused_total.labels(listener=listener, reason=reason).inc()
        if self._refusals.first(host):
            log_event(
                logger, "conn_refused", level=logging.WARNING, listener=listener, address=host,
                reason=reason, limit=self.max_connections if reason == "max_connections" else self.limit_of(host),
            )  # fmt: skip


def overdue(
    now_s: float, *, accepted_s: float, active_s: float, authenticated: bool, busy: bool,
    idle_s: float, preauth_s: float,
) -> tuple[str | None, float]:  # fmt: skip
    """(why the connection must close now or None, when to look again). A timer of 0 is off.
    Pure: the watchdog passes the times."""
    wake = float("inf")
    if preauth_s > 0 and not authenticated:
        deadline = accepted_s + preauth_s
        if now_s >= deadline:
            return "preauth_timeout", now_s
        wake = deadline
    if idle_s > 0:
        deadline = active_s + idle_s
        if busy:
            deadline = now_s + idle_s  # a request in flight is not idle; look again later
        elif now_s >= deadline:
            return "idle", now_s
        wake = min(wake, deadline)
    return None, wake


class Liveness:
    """One connection's timers. The listener sets `authenticated` (its session is complete;
    default: yes, a listener without sessions) and `busy` (a request is in flight), and
    calls `touch()` on traffic."""

    def __init__(self, idle_ms: int, preauth_timeout_ms: int) -> None:
        self.idle_s = idle_ms / 1000
        self.preauth_s = preauth_timeout_ms / 1000
        self.accepted_s = self.active_s = trio.current_time()
        self.authenticated: Callable[[], bool] = lambda: True
        self.busy: Callable[[], bool] = lambda: False

    def touch(self) -> None:
        self.active_s = trio.current_time()

    async def watch(self) -> str:
        """Return once the connection must close, with the reason (never, with both timers
        off)."""
        while True:
            reason, wake = overdue(
                trio.current_time(), accepted_s=self.accepted_s, active_s=self.active_s,
                authenticated=self.authenticated(), busy=self.busy(), idle_s=self.idle_s,
                preauth_s=self.preauth_s,
            )  # fmt: skip
            if reason is not None:
                return reason
            await trio.sleep_until(wake)


def peer_name(stream: trio.SocketStream) -> str:
    """The remote "host:port" of an accepted socket ("?" when the kernel no longer knows)."""
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return f"{host}:{port}"


Handle = Callable[[trio.abc.Stream, str, Liveness], Awaitable[None]]


async def run_admitted(stream: trio.abc.Stream, peer: str, host: str, gate: ConnectionGate, listener: str,
                       handle: Handle) -> None:
    """Run one admitted connection: `handle` under its timers; the gate's count released and the
    stream closed at the end (also for connections a Kafka network worker accepted)."""
    liveness = Liveness(gate.idle_ms, gate.preauth_timeout_ms)
    try:
        async with trio.open_nursery() as nursery:

            async def watchdog() -> None:
                gate.timed_out(listener, host, await liveness.watch())
                nursery.cancel_scope.cancel()

            nursery.start_soon(watchdog)
            try:
                await handle(stream, peer, liveness)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        gate.release(listener, host)
        await trio.aclose_forcefully(stream)  # a no-op when the handler closed it


async def accept_loop(
    socket_listener: trio.SocketListener, gate: ConnectionGate, listener: str, handle: Handle,
    nursery: trio.Nursery,
) -> NoReturn:  # fmt: skip
    """Accept connections until cancelled: each one the gate admits runs `handle(stream,
    peer, liveness)` in `nursery` (under its timers; uncounted when it ends); one it refuses
    is closed at once. Out of descriptors: log, back off, go on. Raises other OSErrors."""
    async with socket_listener:
        while True:
            try:
                stream = await socket_listener.accept()
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    raise
                log_event(logger, "accept_failed", level=logging.WARNING, listener=listener,
                          reason=exc.strerror)
                await trio.sleep(ACCEPT_BACKOFF_S)  # out of descriptors: let connections end
                continue
            peer = peer_name(stream)
            host = peer.rsplit(":", 1)[0]
            reason = gate.admit(listener, host)
            if reason is not None:
                gate.refused(listener, host, reason)
                stream.socket.close()  # FIN now; nothing is read or answered
                continue
            nursery.start_soon(run_admitted, stream, peer, host, gate, listener, handle)


def raise_fd_limit() -> tuple[int, int]:
    """Lift the soft RLIMIT_NOFILE to the hard limit (each connection holds a descriptor);
    returns (soft, hard) in force afterwards. Leaves it as it is when the kernel refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard or hard == resource.RLIM_INFINITY and soft != hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


def open_files_families() -> list[Metric]:
    """/metrics at scrape time: the descriptors this process holds (/proc/self/fd) and its soft
    RLIMIT_NOFILE, so that an operator sees the headroom before EMFILE (docs: performance,
    "Descriptors")."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        held = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:  # no /proc (not Linux): the limit alone
        return [gauge_family("raftlog_open_files_limit", "The node process's soft RLIMIT_NOFILE.",
                             values={(): soft})]
    return [gauge_family("raftlog_open_files", "Descriptors the node process holds (sockets, segment files, ...).",
                         values={(): held}),
            gauge_family("raftlog_open_files_limit", "The node process's soft RLIMIT_NOFILE.",
                         values={(): soft})]

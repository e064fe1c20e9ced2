"""The node's Kafka network worker processes, main side (issue 46: Kafka's
num.network.threads as processes, `kafka_network_processes`).

    workers = NetworkWorkers(count, socket_listeners, gate, handle, registry=registry)
    await workers.run()          # until cancelled; started by serve_kafka instead of accepting

With workers on, the main process binds the Kafka port (so the port and its errors are the
node's) and accepts nothing itself: each worker (network_worker.py) accepts from the same
listening sockets, inherited, and carries each connection's bytes over its local link
(mux.py). Here each connection the worker opens goes through the node's `ConnectionGate`
(max_connections, per address, the pre-authentication and idle timers: refused ones are
closed at once) and the gate's `handle`, the Kafka listener's: TLS, SASL, frames, every
API, ACLs, quotas and request timeouts run here exactly as for a connection accepted in
this process, on the link's stream instead of the socket (zero-copy fetch ranges are read
and sent through the stream, as over TLS). On a plaintext listener without SASL
(`fast_max_in_flight` > 0) the workers also serve Produce's connection side: they decode
Produce requests and send compact calls that the listener's connection serves with the
produce handler (network_worker.py; raftlog_kafka_network_produce_calls_total counts them),
and hand a connection's socket itself to this process at its first Fetch (worker_produce.py:
SCM_RIGHTS over a side channel, the bytes read and not served over the link): from then on
the listener serves it as a connection accepted here (os.sendfile for the records), under
the same gate count, timers and peer (`_handle`; raftlog_kafka_network_handovers_total).

Lifecycle: a worker is started with `python -m raftlog.node.kafka.network_worker`; one that
exits (or whose link breaks) is logged (`kafka_network_process_exited`), its connections
end (clients reconnect), and it is started again after a backoff that doubles from
RESTART_MIN_S to RESTART_MAX_S (reset after RESTART_RESET_S of running). At shutdown each
is stopped by its pid (SIGKILL: it holds no state); a main that dies takes its workers with
it (their parent-death signal). Metrics: raftlog_kafka_network_processes (running) and
raftlog_kafka_network_process_restarts_total.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from functools import partial
from typing import Final

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.gate import ConnectionGate, Handle, Liveness, run_admitted
from raftlog.node.kafka.mux import CLOSE, SIDE_CONN_ID, Mux, Pipe

__all__ = ["NetworkWorkers", "default_network_processes", "network_processes_of", "usable_cpus",
           "MAX_NETWORK_PROCESSES"]

logger = logging.getLogger(__name__)

RESTART_MIN_S: Final = 0.1
RESTART_MAX_S: Final = 5.0
RESTART_RESET_S: Final = 30.0
MAX_NETWORK_PROCESSES: Final = 64
WORKER_MODULE: Final = "raftlog.node.kafka.network_worker"
EXIT_POLL_S: Final = 0.5


def default_network_processes(cpus: int) -> int:
    """The worker count for a node that may run on `cpus` CPUs: none on one CPU (today's
    in-process path), else one per CPU beside the main's, at most 4."""
    return 0 if cpus <= 1 else min(cpus - 1, 4)


def network_processes_of(setting: int) -> int:
    """The worker count of the `kafka_network_processes` setting (-1: by the usable CPUs)."""
    return default_network_processes(usable_cpus()) if setting < 0 else setting


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, e.g. under taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class NetworkWorkers:
    def __init__(self, count: int, socket_listeners: list[trio.SocketListener], gate: ConnectionGate,
                 handle: Handle, *, name: str = "kafka", registry: MetricsRegistry | None = None,
                 fast_max_in_flight: int = 0, fast_max_frame_bytes: int = 0) -> None:
        if not 1 <= count <= MAX_NETWORK_PROCESSES:
            raise ValueError(f"network processes: 1..{MAX_NETWORK_PROCESSES}, got {count}")
        self.count = count
        self.fast_max_in_flight = fast_max_in_flight  # > 0: the workers serve Produce's connection side
        self.fast_max_frame_bytes = fast_max_frame_bytes  # the listener's max_request_bytes
        self.listen_fds = [listener.socket.fileno() for listener in socket_listeners]
        self.gate = gate
        self.handle = handle
        self.name = name
        self.pids: dict[int, int] = {}  # worker index -> pid of the running process
        self._connections: trio.Nursery | None = None  # run()'s
        registry = registry if registry is not None else MetricsRegistry()
        registry.gauge("raftlog_kafka_network_processes",
                       "Kafka network worker processes running (kafka_network_processes).").set_function(
            lambda: len(self.pids))
        self.restarts_total = registry.counter(
            "raftlog_kafka_network_process_restarts_total",
            "Kafka network worker processes started again after one exited.")
        self.handovers_total = registry.counter(
            "raftlog_kafka_network_handovers_total",
            "Plaintext connections a Kafka network worker handed to the main process (at their first Fetch: "
            "the main serves them from then on, with zero-copy sends).")

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            # Every connection runs here, not under its worker's link: one the worker handed
            # over (a socket the main now serves) outlives that worker.
            self._connections = nursery
            for index in range(self.count):
                nursery.start_soon(self._supervise, index)

    async def _supervise(self, index: int) -> None:
        backoff = RESTART_MIN_S
        first = True
        while True:
            if not first:
                self.restarts_total.inc()
            first = False
            started = trio.current_time()
            try:
                code = await self._run_one(index)
            except Exception as exc:  # noqa: BLE001 - a worker's trouble must not stop the node
                log_event(logger, "kafka_network_process_failed", level=logging.ERROR, exc_info=exc, index=index)
                code = None
            log_event(logger, "kafka_network_process_exited", level=logging.WARNING, index=index,
                      returncode=code, restart_in_s=backoff)
            if trio.current_time() - started >= RESTART_RESET_S:
                backoff = RESTART_MIN_S
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RESTART_MAX_S)

    async def _run_one(self, index: int) -> int | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The side channel: the sockets of connections the worker hands over (SCM_RIGHTS).
        side, side_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            command = [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno()), str(side_theirs.fileno()),
                       str(os.getpid()), str(self.fast_max_in_flight), str(self.fast_max_frame_bytes),
                       *(str(fd) for fd in self.listen_fds)]
            # Forked here, on the trio thread, not in a worker thread as trio's open_process
            # does: Linux sends the parent-death signal when the *thread* that forked ends,
            # and trio's idle worker threads end after 10 s.
            process = subprocess.Popen(command, pass_fds=(theirs.fileno(), side_theirs.fileno(), *self.listen_fds),
                                       stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            side.close()
            raise
        finally:
            theirs.close()
            side_theirs.close()
        self.pids[index] = process.pid
        log_event(logger, "kafka_network_process_started", level=logging.INFO, index=index, pid=process.pid)
        link = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        assert self._connections is not None, "run() starts the workers"
        connections = self._connections
        handoff = _Handoff(side)
        try:
            async with link, trio.open_nursery() as nursery:
                mux = Mux(link)
                handoff.mux = mux

                def on_open(conn_id: int, peer: str) -> None:
                    host = peer.rsplit(":", 1)[0]
                    reason = self.gate.admit(self.name, host)
                    if reason is not None:
                        self.gate.refused(self.name, host, reason)
                        mux.send(CLOSE, conn_id)  # the worker closes the client's socket
                        handoff.drop(conn_id)  # a socket it handed over already
                        return
                    connections.start_soon(run_admitted, mux.open_pipe(conn_id), peer, host, self.gate,
                                           self.name, partial(self._handle, handoff))

                async def link_task() -> None:
                    await mux.run(on_open)
                    nursery.cancel_scope.cancel()  # the worker is gone: its connections end

                nursery.start_soon(link_task)
                nursery.start_soon(handoff.receive_loop)
                await _exited(process)
                nursery.cancel_scope.cancel()
        finally:
            handoff.end()
            self.pids.pop(index, None)
            if process.poll() is None:
                process.kill()  # by its pid; it holds no state
                process.wait()  # at once after SIGKILL
        return process.returncode

    async def _handle(self, handoff: "_Handoff", pipe: Pipe, peer: str, liveness: Liveness) -> None:
        """One connection a worker accepted: over its pipe; then, if the worker handed its
        socket over (a Fetch came), over the socket as if accepted here (sendfile and all),
        the unserved bytes first; same gate count, timers and peer throughout."""
        try:
            await self.handle(pipe, peer, liveness)
            if pipe.handed_over is None:
                return
            sock = await handoff.take(pipe.conn_id)
            if sock is None:
                return  # the worker died before its socket came: the client reconnects
            self.handovers_total.inc()
            stream = _Prefixed(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), pipe.handed_over)
            await self.handle(stream, peer, liveness)
        finally:
            handoff.drop(pipe.conn_id)


class _Prefixed(trio.abc.HalfCloseableStream):
    """A handed-over client socket: the bytes the worker read and did not serve, then the
    socket's. `socket_stream` is the socket (the listener's sendfile and writev)."""

    def __init__(self, socket_stream: trio.SocketStream, prefix: bytes) -> None:
        self.socket_stream = socket_stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix, b""
            await trio.lowlevel.checkpoint()
            return data
        return await self.socket_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.socket_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.socket_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.socket_stream.send_eof()

    async def aclose(self) -> None:
        await self.socket_stream.aclose()


class _Handoff:
    """The main's end of one worker's side channel: the client sockets it hands over, each
    with its connection id, kept until the connection's task takes it (it may come before
    the link's OPEN of the connection: two sockets). A socket whose connection the main no
    longer has (closed here meanwhile) is closed at once; all left are closed when the
    worker's link ends. Bounded by the worker's open connections."""

    def __init__(self, side: socket.socket) -> None:
        side.setblocking(False)
        self.side = side
        self.mux: Mux | None = None
        self.sockets: dict[int, socket.socket] = {}
        self.ended = False
        self._changed = trio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def receive_loop(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.side)
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.side, SIDE_CONN_ID.size, 1)
            except BlockingIOError:
                continue
            if not data:
                return  # the worker is gone
            conn_id = SIDE_CONN_ID.unpack(data)[0] if len(data) == SIDE_CONN_ID.size else None
            for fd in fds:
                sock = socket.socket(fileno=fd)
                mux = self.mux
                # The socket may come before the link's OPEN of its connection (ids count up);
                # one of a connection the main has closed already is closed (its client sees the end).
                if conn_id is None or mux is None or not (conn_id > mux.last_opened or conn_id in mux.pipes
                                                          or conn_id in mux.handing):
                    sock.close()
                    continue
                old = self.sockets.pop(conn_id, None)
                if old is not None:
                    old.close()
                self.sockets[conn_id] = sock
            self._wake()

    async def take(self, conn_id: int) -> socket.socket | None:
        """The socket handed over for `conn_id` (it may come after the mux's HANDOVER), or
        None once the worker's link has ended without it."""
        while conn_id not in self.sockets:
            if self.ended:
                return None
            await self._changed.wait()
        return self.sockets.pop(conn_id)

    def drop(self, conn_id: int) -> None:
        if self.mux is not None:
            self.mux.handing.discard(conn_id)
        sock = self.sockets.pop(conn_id, None)
        if sock is not None:
            sock.close()

    def end(self) -> None:
        self.ended = True
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
        self.side.close()
        self._wake()


async def _exited(process: subprocess.Popen[bytes]) -> None:
    """Wait until `process` exits (a pidfd where Linux has them, else polling) and reap it."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        while process.poll() is None:
            await trio.sleep(EXIT_POLL_S)
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    process.wait()

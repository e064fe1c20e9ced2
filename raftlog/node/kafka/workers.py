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
produce handler (network_worker.py; raftlog_kafka_network_produce_calls_total counts them).

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
from typing import Final

import trio

from raftlog.base.eventlog import log_event
from raftlog.base.metrics import MetricsRegistry
from raftlog.node.gate import ConnectionGate, Handle, run_admitted
from raftlog.node.kafka.mux import CLOSE, Mux

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
        registry = registry if registry is not None else MetricsRegistry()
        registry.gauge("raftlog_kafka_network_processes",
                       "Kafka network worker processes running (kafka_network_processes).").set_function(
            lambda: len(self.pids))
        self.restarts_total = registry.counter(
            "raftlog_kafka_network_process_restarts_total",
            "Kafka network worker processes started again after one exited.")

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
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
        try:
            command = [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno()), str(os.getpid()),
                       str(self.fast_max_in_flight), str(self.fast_max_frame_bytes), *(str(fd) for fd in self.listen_fds)]
            # Forked here, on the trio thread, not in a worker thread as trio's open_process
            # does: Linux sends the parent-death signal when the *thread* that forked ends,
            # and trio's idle worker threads end after 10 s.
            process = subprocess.Popen(command, pass_fds=(theirs.fileno(), *self.listen_fds),
                                       stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pids[index] = process.pid
        log_event(logger, "kafka_network_process_started", level=logging.INFO, index=index, pid=process.pid)
        link = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        try:
            async with link, trio.open_nursery() as nursery:
                mux = Mux(link)

                def on_open(conn_id: int, peer: str) -> None:
                    host = peer.rsplit(":", 1)[0]
                    reason = self.gate.admit(self.name, host)
                    if reason is not None:
                        self.gate.refused(self.name, host, reason)
                        mux.send(CLOSE, conn_id)  # the worker closes the client's socket
                        return
                    nursery.start_soon(run_admitted, mux.open_pipe(conn_id), peer, host, self.gate,
                                       self.name, self.handle)

                async def link_task() -> None:
                    await mux.run(on_open)
                    nursery.cancel_scope.cancel()  # the worker is gone: its connections end

                nursery.start_soon(link_task)
                await _exited(process)
                nursery.cancel_scope.cancel()
        finally:
            self.pids.pop(index, None)
            if process.poll() is None:
                process.kill()  # by its pid; it holds no state
                process.wait()  # at once after SIGKILL
        return process.returncode


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

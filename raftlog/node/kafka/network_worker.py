"""A Kafka network worker process (issue 46: Kafka's num.network.threads, as processes).

    python -m raftlog.node.kafka.network_worker MUX_FD SIDE_FD PARENT_PID MAX_IN_FLIGHT MAX_FRAME_BYTES LISTEN_FD...

Started by the node's main process (workers.py), never by hand. It accepts on the Kafka
listening sockets the main bound (inherited descriptors: the port, its errors and its
backlog stay the node's; every worker accepts from the same queue) and carries each client
connection to the main over the local link (mux.py, the socketpair MUX_FD), where the
node's gate admits it and the Kafka listener serves it.

Two ways to carry a connection:
* MAX_IN_FLIGHT 0 (a listener with TLS or SASL: the bytes are the main's to read): its
  bytes, both ways (`_proxy`).
* MAX_IN_FLIGHT > 0 (plaintext without SASL): Produce's connection side runs here
  (worker_produce.py: the worker decodes Produce requests and sends the main compact calls;
  every other request goes to the main as its frame; answers in request order). At the
  connection's first Fetch the worker hands the client's socket itself to the main (once
  every earlier request is answered: SCM_RIGHTS over the side channel SIDE_FD, the bytes
  read and not served over the link) and forgets it: the main serves consumers with its
  zero-copy sends (os.sendfile), producers stay here. That module
  imports kafka-python: it is loaded in a thread once the worker accepts, and the
  connections accepted before it is ready are carried as bytes.

It dies with the main: Linux's parent-death signal (prctl, asked first thing), and the end of
the link (the main closing it or dying) ends the process. Concurrency: one trio loop.
"""

from __future__ import annotations

import importlib
import logging
import socket
import sys
from types import ModuleType
from typing import Final

import trio

from raftlog.base.eventlog import log_event
from raftlog.node.gate import peer_name
from raftlog.node.kafka.mux import CHUNK_BYTES, OPEN, Mux, Pipe
from raftlog.node.pidfile import die_with_parent

__all__ = ["main"]

ACCEPT_BACKOFF_S: Final = 0.1
CLOSE_GRACE_S: Final = 5.0  # after the main closed: how long the client has to read its last bytes
FAST_MODULE: Final = "raftlog.node.kafka.worker_produce"

logger = logging.getLogger(__name__)


async def _proxy(client: trio.SocketStream, pipe: Pipe) -> None:
    """Copy one client's bytes both ways until either end closes. When the main closes while
    the client is still sending, what the main sent before (a TLS alert, an error answer)
    still reaches the client: the copy towards the client ends the connection once it has
    passed those on, or after CLOSE_GRACE_S when the client does not read them."""
    async with client, trio.open_nursery() as nursery:

        async def upstream() -> None:  # client -> main
            try:
                while data := await client.receive_some(CHUNK_BYTES):
                    try:
                        await pipe.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):  # the main closed
                        await trio.sleep(CLOSE_GRACE_S)  # downstream's end cancels this first
                        break
                else:
                    await pipe.send_eof()
                    return
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            nursery.cancel_scope.cancel()

        async def downstream() -> None:  # main -> client
            try:
                while data := await pipe.receive_some():
                    await client.send_all(data)
                await client.send_eof()  # the main's EOF: its CLOSE follows
                await pipe.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(upstream)
        nursery.start_soon(downstream)
    pipe.close()


async def _accept_loop(listener: trio.SocketListener, mux: Mux, ids: list[int], nursery: trio.Nursery,
                       max_in_flight: int, max_frame_bytes: int, fast: list[ModuleType],
                       side: trio.socket.SocketType) -> None:
    while True:
        try:
            client = await listener.accept()
        except OSError:  # out of descriptors, an aborted connection: go on
            await trio.sleep(ACCEPT_BACKOFF_S)
            continue
        ids[0] += 1
        conn_id = ids[0]
        pipe = mux.open_pipe(conn_id)
        mux.send(OPEN, conn_id, peer_name(client).encode())
        if max_in_flight and fast:
            nursery.start_soon(fast[0].FastConnection(client, pipe, max_in_flight, max_frame_bytes, side).run)
        else:
            nursery.start_soon(_proxy, client, pipe)


async def serve(mux_fd: int, side_fd: int, listen_fds: list[int], max_in_flight: int = 0,
                max_frame_bytes: int = 0) -> None:
    """Accept and carry connections until the link to the main ends."""
    link = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=mux_fd)))
    side = trio.socket.from_stdlib_socket(socket.socket(fileno=side_fd))
    listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
                 for fd in listen_fds]
    mux = Mux(link)
    ids = [0]
    fast: list[ModuleType] = []  # worker_produce.py once loaded
    async with trio.open_nursery() as nursery:
        if max_in_flight:
            nursery.start_soon(_load_fast, fast)
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, mux, ids, nursery, max_in_flight, max_frame_bytes, fast,
                               side)
        await mux.run()
        nursery.cancel_scope.cancel()


async def _load_fast(fast: list[ModuleType]) -> None:
    """Load the Produce path (kafka-python's import: about a second) beside the accepting."""
    try:
        fast.append(await trio.to_thread.run_sync(importlib.import_module, FAST_MODULE))
    except Exception as exc:  # noqa: BLE001 - a broken install: the connections stay bytes
        log_event(logger, "kafka_network_fast_path_failed", level=logging.ERROR, exc_info=exc)


def main(argv: list[str]) -> int:
    mux_fd, side_fd, parent_pid, max_in_flight, max_frame_bytes, *listen_fds = (int(arg) for arg in argv)
    if not die_with_parent(parent_pid):
        return 1  # the main died before we asked
    trio.run(serve, mux_fd, side_fd, listen_fds, max_in_flight, max_frame_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

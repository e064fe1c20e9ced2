"""Run the console: the Starlette app on Hypercorn's trio worker, plus the metrics sampler.

    run_console(settings, out=sys.stdout) -> exit code     (`raftlog console`)

Prints one line when it listens: `raftlog console at http://HOST:PORT (cluster ...)`, the
line `raftlog cluster up` and the tests wait for. Stops cleanly on SIGINT or SIGTERM:
Hypercorn stops accepting, open requests finish within its graceful timeout, the sampler
and the live streams are cancelled, and every client connection is closed.
"""

from __future__ import annotations

import errno
import logging
import signal
from functools import partial
from typing import TextIO

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from raftlog.console.app import build_app
from raftlog.console.settings import ConsoleSettings
from raftlog.console.state import ConsoleState

__all__ = ["run_console", "serve_console", "READY_PREFIX"]

log = logging.getLogger(__name__)

READY_PREFIX = "raftlog console at "
GRACEFUL_TIMEOUT_S = 3.0


def _hypercorn_config(settings: ConsoleSettings) -> Config:
    config = Config()
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    config.bind = [f"{host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("raftlog.console.http")
    config.graceful_timeout = GRACEFUL_TIMEOUT_S
    config.keep_alive_timeout = 30
    config.h11_max_incomplete_size = 16 * 1024
    config.include_server_header = False
    return config


async def serve_console(settings: ConsoleSettings, stop: trio.Event,
                        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until `stop` is set. Reports started with the console's URL."""
    state = ConsoleState(settings)
    sampler = trio.CancelScope()

    async def sample() -> None:
        with sampler:
            await state.sample_metrics()

    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, build_app(state), _hypercorn_config(settings),
                                                shutdown_trigger=stop.wait))
            nursery.start_soon(sample)
            task_status.started(binds[0])
            await stop.wait()
            sampler.cancel()
            # The nursery ends when Hypercorn has closed its connections (graceful timeout).
    finally:
        state.close()


def run_console(settings: ConsoleSettings, *, out: TextIO) -> int:
    """Run until SIGINT/SIGTERM. Returns 0 after a clean stop, 2 when the port is taken."""

    async def main() -> int:
        stop = trio.Event()
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    async for _ in signals:
                        stop.set()
                        return

                nursery.start_soon(on_signal)
                url = await nursery.start(serve_console, settings, stop)
                out.write(f"{READY_PREFIX}{url} (cluster {','.join(settings.bootstrap)})\n")
                out.flush()
        return 0

    def in_use(e: BaseException) -> bool:
        return isinstance(e, OSError) and e.errno == errno.EADDRINUSE

    try:
        return trio.run(main)
    except BaseExceptionGroup as group:
        if group.subgroup(in_use) is None:
            raise
    except OSError as exc:
        if not in_use(exc):
            raise
    out.write(f"raftlog console: {settings.host}:{settings.port} is in use; pick another with --port\n")
    out.flush()
    return 2

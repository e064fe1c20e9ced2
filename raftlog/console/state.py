"""One console process's state: settings, client pool, sessions, live series, and the
sampler task that scrapes the nodes' /metrics.

Concurrency: everything here lives on the console's trio thread, except the ClientPool
(thread-safe: worker threads lease clients from it). Live streams (SSE) are counted and
bounded (`settings.max_streams`); each ends after `settings.stream_max_s` (EventSource
reconnects by itself).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.templating import Jinja2Templates

from raftlog.console.auth import Credentials, Session, SessionStore, client_config, config_key
from raftlog.console.backend import ClientPool, fetch_node_http
from raftlog.console.errors import RequestTimedOutError
from raftlog.console.history import Series, SeriesBook
from raftlog.console.scrape import MAX_METRICS_BYTES, counter_rates, parse_metrics, partition_sizes
from raftlog.console.settings import ConsoleSettings

__all__ = ["ConsoleState", "TEMPLATES_DIR", "STATIC_DIR"]

log = logging.getLogger(__name__)

TEMPLATES_DIR = Path(__file__).with_name("templates")
STATIC_DIR = Path(__file__).with_name("static")
RATE_NAMES = ("produce_requests", "fetch_requests")


class _CountedStream(StreamingResponse):
    """A StreamingResponse that holds one of the console's live-stream slots while it runs."""

    def __init__(self, state: "ConsoleState", content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._console = state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self._console.streams += 1
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._console.streams -= 1


class ConsoleState:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.pool = ClientPool(list(settings.bootstrap), request_timeout_ms=settings.request_timeout_ms)
        self.limiter = trio.CapacityLimiter(settings.worker_threads)
        self.templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
        self.templates.env.autoescape = True
        self.sessions = SessionStore()
        self.rates = Series()
        self.lags = SeriesBook()
        self.samples: list[dict] = [{} for _ in settings.node_http]
        self.nodes_scraped = 0
        self.streams = 0
        self.cluster_label = ",".join(settings.bootstrap)

    # ---- sessions

    def session_for(self, scope_session: dict) -> Session:
        """This browser's session (a new anonymous one when it has none or it expired)."""
        now = int(time.monotonic() * 1000)
        s = self.sessions.get(scope_session.get("sid"), now)
        if s is None:
            s = self.sessions.create(None, now)
            scope_session.clear()
            scope_session["sid"] = s.sid
        return s

    def login(self, request: Request, credentials: Credentials) -> Session:
        old = request.state.session
        self.sessions.drop(old.sid)
        s = self.sessions.create(credentials, int(time.monotonic() * 1000))
        request.session.clear()
        request.session["sid"] = s.sid
        request.state.session = s
        return s

    def logout(self, request: Request) -> None:
        s: Session = request.state.session
        self.sessions.drop(s.sid)
        if s.credentials is not None:
            self.pool.drop_user(client_config(self.settings.security, s.credentials))
        request.session.clear()

    # ---- live series

    def rates_payload(self) -> dict[str, Any]:
        names = list(RATE_NAMES)
        for _, values in self.rates.points:
            for k in values:
                if k not in names:
                    names.append(k)
        cols = self.rates.columns(names)
        return {"t": cols[0], "names": names, "series": cols[1:]}

    def record_lag(self, request: Request, group_id: str, sample: dict) -> Series:
        key = (config_key(client_config(self.settings.security, request.state.session.credentials)), group_id)
        series = self.lags.get(key)
        series.add(time.time(), {"total_lag": sample.get("total_lag")})
        return series

    def partition_sizes(self) -> dict[tuple[str, int], float]:
        return partition_sizes(self.samples)

    def event_stream(self, events: AsyncIterator[str]) -> StreamingResponse:
        if self.streams >= self.settings.max_streams:
            raise RequestTimedOutError(f"too many live views open ({self.streams}); close some tabs")

        async def framed() -> AsyncIterator[str]:
            yield f"retry: {int(self.settings.scrape_interval_s * 1500)}\n\n"
            async for chunk in events:
                yield chunk

        return _CountedStream(self, framed())

    async def stream_ticks(self) -> AsyncIterator[None]:
        """Yields once at once, then every scrape interval, for at most stream_max_s."""
        end = trio.current_time() + self.settings.stream_max_s
        while trio.current_time() < end:
            yield
            await trio.sleep(self.settings.scrape_interval_s)

    # ---- the sampler

    async def sample_metrics(self) -> None:
        """Scrape every node's /metrics each interval and keep the cluster's rates. Runs
        until cancelled; a node that does not answer counts as no data for that round."""
        if not self.settings.node_http:
            return
        previous: list[dict] | None = None
        previous_t = 0.0

        def scrape(address: str) -> dict:
            got = fetch_node_http(address, "/metrics", self.settings.node_http_token)
            if got is None or got[0] != 200:
                return {}
            return parse_metrics(got[1][:MAX_METRICS_BYTES].decode("utf-8", "replace"))

        while True:
            t = time.time()
            current: list[dict] = [{} for _ in self.settings.node_http]

            async def one(i: int, address: str) -> None:
                current[i] = await trio.to_thread.run_sync(scrape, address, limiter=self.limiter)

            async with trio.open_nursery() as nursery:
                for i, address in enumerate(self.settings.node_http):
                    nursery.start_soon(one, i, address)
            self.samples = current
            self.nodes_scraped = sum(1 for s in current if s)
            if previous is not None and t > previous_t:
                self.rates.add(t, counter_rates(previous, current, t - previous_t).as_dict())
            previous, previous_t = current, t
            await trio.sleep(self.settings.scrape_interval_s)

    def close(self) -> None:
        self.pool.close()

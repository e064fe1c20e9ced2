"""What one console process is told at start (`raftlog console` flags; `cluster up`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["ConsoleSettings", "DEFAULT_PORT", "DEFAULT_HOST"]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8080


@dataclass(frozen=True)
class ConsoleSettings:
    bootstrap: tuple[str, ...]                    # host:port of any nodes' client listeners
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT                      # 0: any free port (printed at start)
    node_http: tuple[str, ...] = ()               # host:port of the nodes' HTTP listeners (health, metrics)
    node_http_token: str | None = field(default=None, repr=False)  # the nodes' http_token, if they have one
    schema_registry: str | None = None            # a registry's URL: decoded records, /schemas
    security: dict[str, str] = field(default_factory=lambda: {"security.protocol": "PLAINTEXT"})
    request_timeout_ms: int = 5000                # per cluster request made for a page
    scrape_interval_s: float = 2.0                # /metrics and group lag sampling
    session_secret: str | None = field(default=None, repr=False)  # None: random per process
    max_body_bytes: int = 16 << 20                # a form larger than this gets 413
    max_streams: int = 32                         # live (SSE) connections at once
    stream_max_s: float = 900.0                   # a live stream ends after this (the browser reconnects)
    worker_threads: int = 8                       # blocking client calls at once

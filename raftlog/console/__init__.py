"""raftlog's web console: see and steer a cluster in a browser (issue 18).

    raftlog console [--bootstrap HOST:PORT,...] [--port 8080] [--node-http HOST:PORT,...]
                    [--command-config client.properties]

A separate process and an ordinary client of the cluster (never part of a node): Starlette on
Hypercorn's trio worker, server-rendered Jinja2 pages, a little JavaScript, Server-Sent
Events for the live parts, uPlot (MIT, vendored in static/) for charts.

Modules: `settings` (what the process is told), `auth` (login, sessions, CSRF; the seam with
the client's security options), `browse` (the message browser's decisions, pure), `scrape`
(/metrics parsing and rates, pure), `history` (bounded series, pure), `backend` (blocking
client calls), `state` (one process's state, the sampler), `views` (pages), `app` (routes,
middleware, error pages), `server` (Hypercorn), `process` (start it as a child process).

Layer: CLI level. May import `raftlog.client`, the registry of errors, `partition.batch`
and the pure group-record codec (`groupcoord.records`); never `raftlog.node` or a service.
"""

from raftlog.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings"]

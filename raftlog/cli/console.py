"""`raftlog console`: the web console (raftlog/console/), started from the command line.

    raftlog console                                   # http://127.0.0.1:8080, cluster at the default bootstrap
    raftlog console --bootstrap 127.0.0.1:9092 --node-http 127.0.0.1:9095 --port 8081
    raftlog console --command-config client.properties   # a secure cluster: visitors log in

Registered on the root group by `raftlog/cli/main.py`; imports only `common` of the CLI.
The console's own modules are imported only when the command runs (the rest of the CLI does
not pay for Starlette and Jinja2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from raftlog.cli.common import DEFAULT_BOOTSTRAP, CliFailure, friendly

__all__ = ["console_cmd"]


def _addresses(text: str, what: str) -> tuple[str, ...]:
    out = []
    for address in (a.strip() for a in text.split(",")):
        if not address:
            continue
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliFailure(f"{what}: expected host:port, got {address!r}")
        out.append(address)
    return tuple(out)


def _registry_url(text: str) -> str | None:
    text = text.strip().rstrip("/")
    if not text:
        return None
    if not text.startswith(("http://", "https://")) or "://" not in text or not text.split("://", 1)[1]:
        raise CliFailure(f"--schema-registry: expected http(s)://host:port, got {text!r}")
    return text


@click.command("console")
@click.option("--bootstrap", envvar="RAFTLOG_BOOTSTRAP", default=DEFAULT_BOOTSTRAP, show_default=True,
              help="host:port[,host:port...] of any nodes' client listeners (env RAFTLOG_BOOTSTRAP).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve the console on (a non-loopback one exposes it to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to serve the console on (0: any free port, printed at start).")
@click.option("--node-http", envvar="RAFTLOG_NODE_HTTP", default="",
              help="host:port[,...] of the nodes' HTTP listeners, for live rates (/metrics) and "
                   "per-replica lag (/health) (env RAFTLOG_NODE_HTTP).")
@click.option("--node-http-token-file", envvar="RAFTLOG_NODE_HTTP_TOKEN_FILE", type=click.Path(dir_okay=False),
              help="File holding the nodes' http_token, sent to their HTTP listeners: a node with "
                   "a token answers /metrics and /health's details only with it "
                   "(env RAFTLOG_NODE_HTTP_TOKEN_FILE).")
@click.option("--command-config", envvar="RAFTLOG_COMMAND_CONFIG", type=click.Path(dir_okay=False),
              help="Client properties of a secure cluster (security.protocol, sasl.mechanism, "
                   "ssl.ca.location); visitors then log in with their own SCRAM credentials.")
@click.option("--schema-registry", envvar="RAFTLOG_SCHEMA_REGISTRY", default="",
              help="URL of a schema registry (a node's, e.g. http://127.0.0.1:9097): the message browser "
                   "decodes Avro/Protobuf/JSON Schema records and /schemas shows its subjects "
                   "(env RAFTLOG_SCHEMA_REGISTRY).")
@click.option("--timeout", type=click.FloatRange(0.5, 120), default=5.0, show_default=True,
              help="Seconds a page waits for the cluster before it says so.")
@click.option("--supervisor-pid", type=int, hidden=True,
              help="Stop when this process (our parent: raftlog cluster up) dies.")
@friendly
def console_cmd(bootstrap: str, host: str, port: int, node_http: str, node_http_token_file: str | None,
                command_config: str | None, schema_registry: str, timeout: float, supervisor_pid: int | None) -> None:
    """Serve the web console: brokers, topics, messages, consumer groups and lag.

    It is a client of the cluster like this CLI (never part of a node): it needs only
    --bootstrap. Stop it with Ctrl-C.

    \b
    Example:
      raftlog console                                   # then open http://127.0.0.1:8080
      raftlog console --bootstrap 127.0.0.1:9092 --node-http 127.0.0.1:9095,127.0.0.1:9105
    """
    if supervisor_pid is not None:
        from raftlog.node.pidfile import die_with_parent

        if not die_with_parent(supervisor_pid):  # SIGTERM when `cluster up` dies, however it dies
            raise CliFailure(f"supervisor {supervisor_pid} is gone; not starting")
    from raftlog.console.auth import cluster_security, read_properties
    from raftlog.console.errors import BadInputError
    from raftlog.console.server import run_console
    from raftlog.console.settings import ConsoleSettings

    addresses = _addresses(bootstrap, "--bootstrap")
    if not addresses:
        raise CliFailure("--bootstrap needs at least one host:port")
    try:
        security = cluster_security(read_properties(command_config)) if command_config else None
    except BadInputError as exc:
        raise CliFailure(exc.message, exit_code=2) from None
    try:
        node_http_token = Path(node_http_token_file).read_text().strip() if node_http_token_file else None
    except OSError as exc:
        raise CliFailure(f"--node-http-token-file: cannot read {node_http_token_file}: {exc.strerror}",
                         exit_code=2) from None
    settings = ConsoleSettings(
        bootstrap=addresses, host=host, port=port, node_http=_addresses(node_http, "--node-http"),
        node_http_token=node_http_token or None,
        schema_registry=_registry_url(schema_registry),
        request_timeout_ms=int(timeout * 1000),
        **({"security": security} if security is not None else {}),
    )  # fmt: skip
    sys.exit(run_console(settings, out=sys.stdout))

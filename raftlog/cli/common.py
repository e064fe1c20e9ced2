"""What every `raftlog` command shares: the bootstrap option and its check, the security
settings (`--command-config`), one-line failures (`friendly`), JSON and table output. Every
command module imports these public names from here; no command module imports another.

Security: every command that talks to the cluster takes `--command-config FILE` (Kafka's CLI
convention; env RAFTLOG_COMMAND_CONFIG), a client.properties in librdkafka/Kafka form
(`raftlog cluster up --secure` writes one). It is read once, when the option is parsed, and
every client the command opens gets it: `client_kwargs()` / `security()`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import socket
import time
from collections.abc import Iterable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from raftlog.base.errors import ConfigError, RaftlogError, UnknownTopicOrPartitionError
from raftlog.base.protocol import FirstBytes, FrameDecoder, encode_frame

# With no --bootstrap and no RAFTLOG_BOOTSTRAP: the list `raftlog cluster up` wrote into
# ./raftlog-data (its default data dir), else the three nodes of a default `cluster up`.
DEFAULT_DATA_DIR = "raftlog-data"
BOOTSTRAP_FILE = "bootstrap"
DEFAULT_BOOTSTRAP = "127.0.0.1:9093,127.0.0.1:9103,127.0.0.1:9113"
PROBE_TIMEOUT_S = 1.5
# A new topic's shape when the user does not say (topics create, produce's auto-creation).
TOPIC_PARTITIONS = 3
TOPIC_MAX_REPLICATION_FACTOR = 3
_CANNOT_CONNECT = "cannot connect"

F = TypeVar("F", bound=Callable[..., Any])


def version() -> str:
    try:
        return importlib.metadata.version("raftlog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class CliFailure(Exception):
    """A user-facing failure: one line, exit code."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def friendly(fn: F) -> F:
    """Turn expected failures into one line on stderr and an exit code (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool((ctx.find_root().obj or {}).get("debug"))
        try:
            return fn(*args, **kwargs)
        except CliFailure as exc:
            if debug:
                raise
            click.echo(f"raftlog: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except ConfigError as exc:
            if debug:
                raise
            click.echo(f"raftlog: {exc}", err=True)
            ctx.exit(2)
        except _client_errors() as exc:
            if debug:
                raise
            click.echo(f"raftlog: {exc}{_security_hint(exc)}", err=True)
            ctx.exit(1)
        except RaftlogError as exc:
            if debug:
                raise
            click.echo(f"raftlog: {describe_error(exc)}{_security_hint(exc)}", err=True)
            ctx.exit(1)

    return wrapper  # type: ignore[return-value]


def _client_errors() -> tuple[type[BaseException], ...]:
    from raftlog.client import ClientClosedError, ConnectionLostError, NoBrokerAvailableError

    return (NoBrokerAvailableError, ConnectionLostError, ClientClosedError)


def _security_hint(exc: BaseException) -> str:
    """What to try when a failure looks like the wrong security settings."""
    from raftlog.base.errors import (
        IllegalSaslStateError,
        SaslAuthenticationFailedError,
        UnsupportedSaslMechanismError,
    )
    from raftlog.client import ConnectionLostError, NoBrokerAvailableError
    from raftlog.client.errors import SslAuthenticationFailedError

    given = (click.get_current_context().find_root().obj or {}).get("command_config")
    if isinstance(exc, IllegalSaslStateError):
        if given is None:
            return " (this cluster wants a login: give --command-config FILE or set RAFTLOG_COMMAND_CONFIG)"
        return f" (the listener wants a SASL login: check security.protocol and sasl.* in {given})"
    if isinstance(exc, (SaslAuthenticationFailedError, UnsupportedSaslMechanismError)):
        return f" (check sasl.username, sasl.password and sasl.mechanism in {given})" if given else ""
    if isinstance(exc, SslAuthenticationFailedError):
        return f" (check security.protocol and ssl.ca.location in {given})" if given else ""
    if isinstance(exc, (ConnectionLostError, NoBrokerAvailableError)) and given is None:
        return " (if the cluster is secure, give --command-config FILE or set RAFTLOG_COMMAND_CONFIG)"
    return ""


def describe_error(exc: RaftlogError) -> str:
    code = exc.code
    hints = {
        "UNKNOWN_TOPIC_OR_PARTITION": "unknown topic",
        "TOPIC_ALREADY_EXISTS": "topic already exists",
        "INVALID_REPLICATION_FACTOR": "bad replication factor",
        "INVALID_PARTITIONS": "bad partition count",
        "INVALID_TOPIC": "bad topic name",
        "INVALID_CONFIG": "bad topic config",
        "NOT_CONTROLLER": "no active controller right now (an election may be under way; retry)",
        "REQUEST_TIMED_OUT": "timed out; the change may or may not have been applied",
    }
    what = hints.get(code)
    message = exc.message or ""
    if what and message:
        return f"{what}: {message} [{code}]"
    return f"{what or code}" + (f": {message}" if message else "") + (f" [{code}]" if what else "")


def default_bootstrap(cwd: Path | None = None) -> str:
    """./raftlog-data/bootstrap (written by `raftlog cluster up`) when it exists and is
    readable, else DEFAULT_BOOTSTRAP."""
    path = (cwd or Path.cwd()) / DEFAULT_DATA_DIR / BOOTSTRAP_FILE
    try:
        text = path.read_text().strip()
    except OSError:
        return DEFAULT_BOOTSTRAP
    return text or DEFAULT_BOOTSTRAP


def bootstrap_list(bootstrap: str | None) -> list[str]:
    if bootstrap is None:
        bootstrap = default_bootstrap()
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise CliFailure("--bootstrap needs at least one host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CliFailure(f"--bootstrap: expected host:port, got {address!r}")
    return addresses


def _hello(address: str, timeout_s: float) -> str | None:
    """Connect to `address` and ask one cheap question in the raftlog protocol (a metadata
    request for no topics). None: a raftlog client listener answered. Else why not, in a
    few words ("refused the connection", "answered HTTP, not the raftlog protocol", ...)."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except OSError as exc:
        return f"{_CANNOT_CONNECT} ({exc.strerror or exc})"
    found = security()
    if found is not None and found.tls:
        # A TLS listener answers no plaintext question: that it accepts the connection is
        # all the probe asks (the client's own handshake says the rest).
        sock.close()
        return None
    decoder = FrameDecoder(1 << 20)
    first = FirstBytes()
    try:
        with sock:
            sock.settimeout(timeout_s)
            # The blank line in `hello` ends an HTTP request head, so an HTTP server answers
            # at once (400) instead of waiting for one; a raftlog node ignores the field.
            sock.sendall(encode_frame({"v": 1, "id": 1, "op": "metadata", "topics": [], "hello": "\r\n\r\n"}))
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    return "closed the connection without answering: not the raftlog protocol"
                what = first.check(data)
                if what is not None:
                    return f"answered {what}, not the raftlog protocol"
                decoder.feed(data)
                try:
                    message = decoder.next_frame()
                except RaftlogError as exc:
                    return f"answered something that is not the raftlog protocol ({exc})"
                if message is None:
                    continue
                error = message.get("error")
                text = str(error.get("message", "")) if isinstance(error, dict) else ""
                # The peer listener knows no client op, or first wants a peer handshake.
                if "unknown op" in text or "peer authentication" in text:
                    return "answered as a raftlog peer listener, not the client listener"
                return None
    except TimeoutError:
        return f"accepted the connection but gave no raftlog answer within {timeout_s:g} s"
    except ConnectionResetError:
        # Our question was refused unread: a listener that closes a stranger's frame at its
        # header (the metadata quorum's port, issue 39) resets the connection.
        return "reset the connection without answering: not the raftlog protocol"
    except OSError as exc:
        return f"connection failed ({exc.strerror or exc})"


def probe(addresses: list[str]) -> list[str]:
    """The addresses that answer the raftlog protocol (at least one), tried in order; stops
    at the first that answers. Fails at once with one line per address that does not (a
    port that is not raftlog's says what answered it), instead of the client retrying until
    its deadline."""
    problems: list[tuple[str, str]] = []
    for i, address in enumerate(addresses):
        why = _hello(address, PROBE_TIMEOUT_S)
        if why is None:
            return addresses[i:] + addresses[:i]
        problems.append((address, why))
    hint = "set --bootstrap or RAFTLOG_BOOTSTRAP; start a local cluster with scripts/quorum"
    if security() is None and not all(why.startswith(_CANNOT_CONNECT) for _, why in problems):
        # A TLS listener closes on a plaintext hello: the likeliest cause is a secure cluster.
        hint = "if the cluster is secure, give --command-config FILE or set RAFTLOG_COMMAND_CONFIG; " + hint
    if all(why.startswith(_CANNOT_CONNECT) for _, why in problems):
        reasons = sorted({why.removeprefix(_CANNOT_CONNECT).strip(" ()") for _, why in problems})
        raise CliFailure(f"no raftlog node reachable at {', '.join(addresses)} ({'; '.join(reasons)}); {hint}")
    if len(problems) == 1:
        raise CliFailure(f"{problems[0][0]} {problems[0][1]} ({hint})")
    listed = "; ".join(f"{address} {why}" for address, why in problems)
    raise CliFailure(f"no raftlog node reachable: {listed} ({hint})")


EXIT_NO_CONTROLLER = 2  # `cluster status` when no controller answers (no quorum, unreachable)


def describe(admin: Any, names: list[str] | None, *, internal: bool = False) -> Any:
    """The metadata answer (ClusterMetadata) for `names` (None: every topic): topics, the
    offline partitions with their reasons, and the answering node's controller problem."""
    from raftlog.client.request import metadata_request, parse_metadata

    return parse_metadata(admin.request(metadata_request(names, internal=internal)))


def describe_topic(admin: Any, topic: str) -> Any | None:
    """The topic's TopicInfo, or None when it does not exist (yet, on the answering node)."""
    try:
        return admin.describe_topics([topic])[topic]
    except RaftlogError as exc:
        if isinstance(exc, UnknownTopicOrPartitionError):
            return None
        raise


NEW_TOPIC_LEADERS_WAIT_S = 10.0  # a topic just created: its first elections take moments


def await_leaders(admin: Any, topic: str, timeout_s: float = NEW_TOPIC_LEADERS_WAIT_S) -> Any | None:
    """The TopicInfo of a topic just created, once every partition has a leader (their first
    election takes moments), or the last one seen after `timeout_s` (None: never seen)."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = describe_topic(admin, topic)
        if (info is not None and all(p.leader is not None for p in info.partitions)) \
                or time.monotonic() >= deadline:
            return info
        time.sleep(0.05)  # polling the metadata under a deadline


def offline_summary(topic: Any, partitions: list[int] | None = None) -> list[str]:
    """"topic-p, topic-q: reason" for the offline partitions of `topic` (of `partitions`
    only, when given), grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for p in topic.partitions:
        if p.offline_reason is not None and (partitions is None or p.partition in partitions):
            by_reason.setdefault(p.offline_reason, []).append(f"{topic.name}-{p.partition}")
    return [f"{', '.join(names)}: {reason}" for reason, names in by_reason.items()]


def admin_from_context(ctx: click.Context) -> Any:
    from raftlog.client import Admin

    opts = ctx.obj
    addresses = connect(opts["bootstrap"])
    return Admin(addresses, request_timeout_ms=int(opts["timeout"] * 1000), **client_kwargs())


def _load_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--command-config's callback: read the file now (a bad one stops the command before it
    connects anywhere, naming the key at fault, never a value)."""
    from raftlog.base.client_properties import ClientSecurity

    root = ctx.find_root()
    root.ensure_object(dict)
    if not value:
        return
    try:
        security = ClientSecurity.from_file(value)
    except RaftlogError as exc:  # InvalidConfigError: it names the key, never a value
        raise click.BadParameter(f"{value}: {exc.message}", ctx=ctx, param=param) from None
    root.obj["security"] = security
    root.obj["command_config"] = value


def security() -> Any:
    """The ClientSecurity of --command-config / RAFTLOG_COMMAND_CONFIG, or None."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    return (ctx.find_root().obj or {}).get("security")


def client_kwargs() -> dict[str, Any]:
    """Keyword arguments that give a raftlog client this command's security settings."""
    found = security()
    return {} if found is None else {"security": found}


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    """`KEY=VALUE` options as a dict; raises CliFailure naming the option for a bad one."""
    pairs = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise CliFailure(f"{what}: expected key=value, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def command_config_option(fn: F) -> F:
    """--command-config FILE (env RAFTLOG_COMMAND_CONFIG): the client.properties to connect with."""
    return click.option(
        "--command-config", type=click.Path(dir_okay=False), envvar="RAFTLOG_COMMAND_CONFIG",
        expose_value=False, is_eager=True, callback=_load_command_config,
        help="Client properties (security.protocol, sasl.*, ssl.*) as for Kafka's tools and "
             "kcat -F; `raftlog cluster up --secure` writes one (env RAFTLOG_COMMAND_CONFIG).",
    )(fn)


BOOTSTRAP_HELP = ("host:port[,host:port...] of any nodes' client listeners; each is tried (env "
                  "RAFTLOG_BOOTSTRAP; default: ./raftlog-data/bootstrap as `raftlog cluster up` wrote it, "
                  f"else {DEFAULT_BOOTSTRAP}).")


def connection_options(fn: F) -> F:
    """--bootstrap, --timeout and --command-config, for every command that talks to the cluster."""
    fn = command_config_option(fn)
    fn = click.option("--timeout", type=click.FloatRange(0.5, 600), default=15.0, show_default=True,
                      help="Seconds to wait for an answer.")(fn)
    fn = click.option("--bootstrap", envvar="RAFTLOG_BOOTSTRAP", default=None, metavar="HOST:PORT[,...]",
                      help=BOOTSTRAP_HELP)(fn)
    return fn


def admin_options(fn: F) -> F:
    """--bootstrap, --timeout and --json for every admin command."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")(fn)
    return connection_options(fn)


def connect(bootstrap: str | None) -> list[str]:
    """The checked bootstrap addresses (None: the default, `default_bootstrap`), the first
    one that answers the raftlog protocol first (CliFailure when none does)."""
    return probe(bootstrap_list(bootstrap))


def admin_request(bootstrap: str | None, timeout: float, request: dict[str, Any]) -> dict[str, Any]:
    """One native admin request (routed to the controller by the node that takes it)."""
    from raftlog.client import Admin

    with Admin(connect(bootstrap), request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        return admin.request(request)


STATUS_OTHERS_TIMEOUT_S = 5.0  # each other node asked for `cluster status` when the first had no controller


def best_status(statuses: list[Any]) -> Any:
    """Of several nodes' ClusterStatus answers, the one to believe: the controller's view (the
    newest controller epoch, then the highest commit index); without one, the freshest image
    (highest commit index) answered by a node that image still counts as a voter, a removed
    voter's stale view last; ties: the earlier answer."""
    def index(s: Any) -> int:
        return s.commit_index if isinstance(s.commit_index, int) else -1

    led = [s for s in statuses if s.view == "controller" and s.controller_id is not None]
    if led:
        return max(led, key=lambda s: (s.controller_epoch if isinstance(s.controller_epoch, int) else -1, index(s)))
    freshest = max(statuses, key=index)
    voters = {v.get("id") for v in freshest.voters}
    return max(statuses, key=lambda s: (s.answered_by in voters, index(s)))


def cluster_status(bootstrap: str | None, timeout: float) -> Any:
    """The cluster's status (ClusterStatus) from a node that can vouch for it. A node that sees
    no controller answers with its own last image (view "local"): a voter removed from the
    metadata quorum keeps running alone and sees none while the others have one. Then every
    other node (the bootstrap list and the brokers the answer names) is asked too, at once,
    each for at most STATUS_OTHERS_TIMEOUT_S, and `best_status` picks the answer, so one
    node's view is never taken for the cluster's while another knows the controller."""
    import queue
    import threading

    from metadata.loader import hostport
    from raftlog.client import Admin

    addresses, kwargs = connect(bootstrap), client_kwargs()
    with Admin(addresses, request_timeout_ms=int(timeout * 1000), **kwargs) as admin:
        first = admin.cluster_status()
    if first.view == "controller" and first.controller_id is not None:
        return first
    own = {hostport(b["host"], b["port"]) for b in first.brokers if b.get("id") == first.answered_by}
    named = [hostport(b["host"], b["port"]) for b in first.brokers if b.get("host") and b.get("port")]
    others = [a for a in dict.fromkeys([*addresses, *named]) if a not in own]
    per_node_s = min(timeout, STATUS_OTHERS_TIMEOUT_S)
    answers: queue.Queue[Any] = queue.Queue()

    def ask(address: str) -> None:
        try:
            with Admin([address], request_timeout_ms=int(per_node_s * 1000), **kwargs) as other:
                answers.put(other.cluster_status())
        except (RaftlogError, OSError) as exc:  # down or unreachable: the others may answer
            answers.put(exc)

    for address in others:  # daemon threads: each is bounded by its Admin's timeout
        threading.Thread(target=ask, args=(address,), daemon=True).start()
    statuses, deadline = [first], time.monotonic() + per_node_s + 1.0
    for _ in others:
        try:
            got = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not isinstance(got, BaseException):
            statuses.append(got)
            if got.view == "controller" and got.controller_id is not None:
                break
    return best_status(statuses)


def store(ctx: click.Context, **values: Any) -> None:
    ctx.ensure_object(dict)
    ctx.obj.update(values)



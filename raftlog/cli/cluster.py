"""A local cluster on one machine: node configs, node processes, and `raftlog cluster up`.

    raftlog cluster up [--nodes 3] [--data-dir ./raftlog-data] [--base-port 9092] [--secure]

Layout under the data dir (created on first run, reused after):

    cluster.toml            cluster id, secret, node count, ports, secure (mode 0600: holds the secret)
    bootstrap               every node's client address, comma-separated (the CLI's default)
    supervisor.pid          the running `cluster up` (removed when it stops)
    node-<i>/node.toml      that node's config (mode 0600)
    node-<i>/node.pid       the running node (pidfile.py)
    node-<i>/node.log       its log lines (stdout and stderr)
    node-<i>/...            its data (meta.properties, quorum/, partitions later)
    client.properties, tls/, bootstrap_credentials, http_token
                            with --secure: the CA, node certificates, the admin's login
                            (raftlog/cli/secure.py)

`--secure` (first run only; the data dir remembers it): TLS and SASL/SCRAM on the client and
Kafka listeners, mutual TLS between nodes, ACLs, /metrics behind a token, and an admin user
whose login is <data-dir>/client.properties.

Node i (1-based) listens on 127.0.0.1 at base_port + 10*(i-1) + {0 kafka, 1 client (native),
2 peer, 3 quorum, 4 http, 5 schema registry}: with the default base port node 1's Kafka
listener is 9092, Kafka's port (`kcat -b 127.0.0.1:9092`), its native listener 9093 (the
raftlog CLI's default) and its Schema Registry 9097 (`raftlog schemas`' default).

Process rules (also used by the test harness and scripts/bench_failover.py): each node runs
as `python -m raftlog.cli node start --config node.toml` in its own session (so a Ctrl-C at
the terminal reaches only the supervisor, which then stops the nodes one signal each), and
is always stopped by its PID: SIGTERM, wait up to a grace period, then SIGKILL. Nodes that
`cluster up` starts get `--supervisor-pid`: they stop when the supervisor dies however it
dies (SIGKILL, a closed terminal), so none is left holding its ports. SIGHUP stops the
supervisor as SIGTERM does. `cluster up` on a data dir whose nodes (or supervisor) still run
refuses and names their PIDs.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TextIO

from raftlog.base.errors import ConfigError
from raftlog.cli.secure import SecureMaterial
from raftlog.node.config import HostPort, Listeners, NodeConfig, config_to_toml, load_config, new_cluster_id
from raftlog.node.pidfile import NODE_PID_FILE, SUPERVISOR_PID_FILE, check_private, claim, release, running_pid

__all__ = [
    "DEFAULT_BASE_PORT",
    "NodePorts",
    "ClusterLayout",
    "build_node_configs",
    "write_private",
    "NodeProcess",
    "free_ports",
    "cluster_up",
]

DEFAULT_BASE_PORT: Final = 9092
DEFAULT_HOST: Final = "127.0.0.1"
PORT_STRIDE: Final = 10
CLUSTER_FILE: Final = "cluster.toml"
BOOTSTRAP_FILE: Final = "bootstrap"
DEFAULT_DATA_DIR: Final = "raftlog-data"  # relative to the working directory
STOP_GRACE_S: Final = 15.0
READY_TIMEOUT_S: Final = 60.0
MAX_RESTARTS: Final = 5
MAX_NODES: Final = 9  # ports stay within one stride each; voters beyond that only slow Raft


@dataclasses.dataclass(frozen=True)
class NodePorts:
    """A node's listener ports. Positional order (client, peer, quorum, http, kafka) is the
    order callers pass `free_ports(5)` in; `from_base` lays them out kafka first."""

    client: int
    peer: int
    quorum: int
    http: int
    kafka: int
    schema_registry: int = 0  # 0: any free port

    @classmethod
    def from_base(cls, base_port: int, index: int) -> "NodePorts":
        first = base_port + PORT_STRIDE * index
        return cls(client=first + 1, peer=first + 2, quorum=first + 3, http=first + 4, kafka=first,
                   schema_registry=first + 5)


def build_node_configs(
    root: Path,
    cluster_id: str,
    secret: str,
    ports: Mapping[int, NodePorts],
    *,
    host: str = DEFAULT_HOST,
    hosts: Mapping[int, str] | None = None,
    voters: Iterable[int] | None = None,
    broker_only: Iterable[int] = (),
    settings: Mapping[str, Any] | None = None,
) -> dict[int, NodeConfig]:
    """NodeConfigs for nodes `ports` (id -> ports), data dirs `root/node-<id>`, listening on
    `host` (or on `hosts[id]`: one address per machine). `voters` (default: every node not in
    `broker_only`) run the quorum; `settings` sets other NodeConfig fields (e.g. heartbeat_ms)."""
    broker_only = set(broker_only)
    voter_ids = sorted(voters) if voters is not None else sorted(set(ports) - broker_only)

    def host_of(node_id: int) -> str:
        return host if hosts is None else hosts.get(node_id, host)

    quorum = MappingProxyType({v: HostPort(host_of(v), ports[v].quorum) for v in voter_ids})
    peers = MappingProxyType({v: HostPort(host_of(v), ports[v].peer) for v in voter_ids})
    configs = {}
    for node_id, p in sorted(ports.items()):
        address = host_of(node_id)
        roles = frozenset({"broker"}) if node_id in broker_only else (
            frozenset({"controller", "broker"}) if node_id in voter_ids else frozenset({"broker"})
        )
        configs[node_id] = NodeConfig(
            node_id=node_id,
            data_dir=root / f"node-{node_id}",
            cluster_id=cluster_id,
            roles=roles,
            listeners=Listeners(
                kafka=HostPort(address, p.kafka), client=HostPort(address, p.client),
                peer=HostPort(address, p.peer), quorum=HostPort(address, p.quorum),
                http=HostPort(address, p.http), schema_registry=HostPort(address, p.schema_registry),
            ),  # fmt: skip
            controller_quorum_voters=quorum,
            controller_peers=peers,
            cluster_secret=secret,
            **dict(settings or {}),
        )
    return configs


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by the owner only (0600), atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # also when the temp file existed with looser bits
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


def write_node_config(config: NodeConfig) -> Path:
    """Write `config` to data_dir/node.toml (0600) and check it loads back. Returns the path."""
    path = config.data_dir / "node.toml"
    write_private(path, config_to_toml(config))
    load_config(path, env={})  # raises ConfigError if we generated something invalid
    return path


@dataclasses.dataclass(frozen=True)
class ClusterLayout:
    """What `cluster.toml` holds."""

    root: Path
    cluster_id: str
    cluster_secret: str = dataclasses.field(repr=False)
    nodes: int
    base_port: int
    host: str = DEFAULT_HOST
    secure: bool = False

    def ports(self) -> dict[int, NodePorts]:
        return {i + 1: NodePorts.from_base(self.base_port, i) for i in range(self.nodes)}

    def secure_material(self) -> tuple[SecureMaterial, bool]:
        """A secure cluster's CA, certificates and admin login, made where missing."""
        return SecureMaterial.ensure(self.root, self.ports(), [self.host])

    def configs(self) -> dict[int, NodeConfig]:
        configs = build_node_configs(self.root, self.cluster_id, self.cluster_secret, self.ports(), host=self.host)
        if self.secure:
            material = SecureMaterial(self.root)
            configs = {i: dataclasses.replace(c, **material.node_settings(i)) for i, c in configs.items()}
        return configs

    @classmethod
    def load_or_create(cls, root: Path, nodes: int | None, base_port: int | None,
                       secure: bool = False) -> tuple["ClusterLayout", bool]:
        """Read root/cluster.toml, or create it (new cluster id and secret). Returns (layout,
        created). Raises ConfigError when the stored layout contradicts `nodes`/`base_port`,
        or `secure` asks for security a plaintext cluster was made without."""
        path = root / CLUSTER_FILE
        if path.exists():
            try:
                stored = tomllib.loads(path.read_text())
                layout = cls(root, stored["cluster_id"], stored["cluster_secret"], int(stored["nodes"]),
                             int(stored["base_port"]), stored.get("host", DEFAULT_HOST),
                             bool(stored.get("secure", False)))
            except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{path}: unreadable cluster file ({exc}); move it away to start afresh") from None
            for name, wanted, have in (("--nodes", nodes, layout.nodes), ("--base-port", base_port, layout.base_port)):
                if wanted is not None and wanted != have:
                    raise ConfigError(
                        f"{root} holds a cluster of {layout.nodes} node(s) at base port {layout.base_port}; "
                        f"{name} {wanted} differs (use another --data-dir for a different cluster)"
                    )
            if secure and not layout.secure:
                raise ConfigError(
                    f"{root} holds a cluster made without --secure; its nodes and clients run in plaintext. "
                    "Use another --data-dir for a secure cluster"
                )
            return layout, False
        nodes = 3 if nodes is None else nodes
        base_port = DEFAULT_BASE_PORT if base_port is None else base_port
        if not 1 <= nodes <= MAX_NODES:
            raise ConfigError(f"--nodes must be 1..{MAX_NODES}, got {nodes}")
        if not 1024 <= base_port <= 65535 - PORT_STRIDE * nodes:
            raise ConfigError(f"--base-port must be 1024..{65535 - PORT_STRIDE * nodes}, got {base_port}")
        layout = cls(root, new_cluster_id(), secrets.token_urlsafe(32), nodes, base_port, secure=secure)
        write_private(path, (
            "# raftlog cluster up: this cluster's identity and ports (keep private: holds the secret)\n"
            f'cluster_id = "{layout.cluster_id}"\ncluster_secret = "{layout.cluster_secret}"\n'
            f"nodes = {nodes}\nbase_port = {base_port}\nhost = \"{layout.host}\"\n"
            f"secure = {'true' if secure else 'false'}\n"
        ))  # fmt: skip
        return layout, True


LOWEST_LISTEN_PORT: Final = 10_000
# "index/count": this process (and its children) picks ports only from its own slice of the
# range, so processes picking at the same time never hand out one port twice. The test suite
# sets it per pytest-xdist worker (tests/conftest.py); unset: the whole range.
PORT_SLICE_ENV: Final = "RAFTLOG_PORT_SLICE"


def _port_slice() -> tuple[int, int]:
    """(index, count) from PORT_SLICE_ENV; (0, 1) when unset or malformed."""
    index, _, count = os.environ.get(PORT_SLICE_ENV, "").partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        return 0, 1
    return (i, n) if 0 <= i < n else (0, 1)


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def free_ports(count: int, host: str = DEFAULT_HOST) -> list[int]:
    """`count` distinct ports that are free now, for listeners started a moment later.

    Where the kernel says its ephemeral range (Linux), they are picked at random BELOW it:
    a port the kernel handed out for port 0 is an ephemeral one, and any outgoing connection
    (a node already running dials its peers) may take it before our listener binds it, which
    made cluster starts fail with EADDRINUSE now and then. Elsewhere: the kernel's choice.

    A port this process handed out lately (the last `_HANDED_OUT.maxlen`) is not handed out
    again: its listener may not be bound yet (a cluster asks for each node's ports in turn,
    and two nodes given one port failed to start). With RAFTLOG_PORT_SLICE="i/n" only the
    ports p with p % n == i are picked (parallel test workers: disjoint slices)."""
    span = _ephemeral_range()
    if span is None or span[0] - LOWEST_LISTEN_PORT < 1000:
        return _handed_out(_kernel_ports(count, host))
    index, slices = _port_slice()
    rng = secrets.SystemRandom()
    chosen: list[int] = []
    with _HANDED_OUT_LOCK:
        recent = set(_HANDED_OUT)
    for _ in range(count * 50):
        if len(chosen) == count:
            break
        port = rng.randrange(LOWEST_LISTEN_PORT, span[0])
        port += (index - port) % slices  # the next port of this slice
        if port >= span[0]:
            continue
        if port not in chosen and port not in recent and not port_in_use(host, port):
            chosen.append(port)
    if len(chosen) < count:
        return _handed_out(_kernel_ports(count, host))
    return _handed_out(chosen)


_HANDED_OUT: Final[deque[int]] = deque(maxlen=4096)
_HANDED_OUT_LOCK: Final = threading.Lock()


def _handed_out(ports: list[int]) -> list[int]:
    with _HANDED_OUT_LOCK:
        _HANDED_OUT.extend(ports)
    return ports


def _kernel_ports(count: int, host: str) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> bool:
    """True when a listener holds host:port (TIME_WAIT leftovers do not count: the nodes
    bind with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class NodeProcess:
    """One `raftlog node start` process, stopped only by its PID. `supervised`: the node
    stops when this process dies (`--supervisor-pid`); start it from the main thread (Linux
    sends the parent-death signal when the starting *thread* ends)."""

    def __init__(self, node_id: int, config_path: Path, log_path: Path, *, env: Mapping[str, str] | None = None,
                 supervised: bool = False):
        self.node_id = node_id
        self.config_path = config_path
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.supervised = supervised
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "raftlog.cli", "node", "start", "--config", str(self.config_path)]
        if self.supervised:
            argv += ["--supervisor-pid", str(os.getpid())]
        return argv

    def start(self) -> "NodeProcess":
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.proc is not None
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass  # exited between poll() and kill()

    def kill(self) -> int | None:
        """SIGKILL by PID and reap; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        self.signal(signal.SIGKILL)
        return self.proc.wait()

    def terminate(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM by PID, then SIGKILL after `grace_s`. Returns the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(processes: Iterable[NodeProcess], grace_s: float = STOP_GRACE_S) -> dict[int, int | None]:
    """SIGTERM every live process by PID, wait for all up to `grace_s`, SIGKILL the rest."""
    processes = list(processes)
    for p in processes:
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    codes: dict[int, int | None] = {}
    for p in processes:
        if p.proc is None:
            continue
        try:
            codes[p.node_id] = p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[p.node_id] = p.kill()
    return codes


# ---------------------------------------------------------------------------- cluster up


def _status(bootstrap: list[str], security: Any = None) -> Any:
    from raftlog.client import Admin  # the client is only needed by the supervisor

    with Admin(bootstrap, request_timeout_ms=3000, security=security) as admin:
        return admin.cluster_status(timeout_ms=3000)


def cluster_up(
    root: Path,
    nodes: int | None,
    base_port: int | None,
    *,
    out: TextIO,
    status: Callable[..., Any] = _status,
    ready_timeout_s: float = READY_TIMEOUT_S,
    restart: bool = True,
    console_port: int | None = None,
    secure: bool = False,
) -> int:
    """Start (or restart) the local cluster under `root`, wait until it has a controller and
    every broker is registered and unfenced, print a table, and supervise until SIGINT or
    SIGTERM; then stop every node. A node that exits meanwhile is restarted (`restart`, at
    most MAX_RESTARTS times each, so a crash loop ends). With `console_port` (0: any free
    port) the web console runs beside the nodes (raftlog/console/process.py), logs to
    <root>/console.log, is printed with its URL and stopped with them; a console that cannot
    start (port taken) is reported and the cluster runs on without it. With `secure` (or a
    data dir made with it) the nodes run secured (raftlog/cli/secure.py), the supervisor logs
    in as the admin, and the console asks its visitors to log in. Returns the exit code (0:
    started and stopped cleanly). Raises ConfigError for a bad layout."""
    root = root.resolve()
    # The nodes' own dirs are 0700, but in a root others may write they could be swapped.
    check_private(root)
    layout, created = ClusterLayout.load_or_create(root, nodes, base_port, secure)
    security = None
    material_created = False
    if layout.secure:
        material, material_created = layout.secure_material()
        security = material.admin_security()
    configs = layout.configs()
    _refuse_running(root, configs)
    busy = [(i, name, getattr(ports, name)) for i, ports in layout.ports().items()
            for name in ("kafka", "client", "peer", "quorum", "http", "schema_registry") if port_in_use(layout.host, getattr(ports, name))]
    if busy:
        i, name, port = busy[0]
        raise ConfigError(
            f"port {port} (node {i} {name}) is in use: is this cluster already running? "
            f"Stop it, or pick other ports with --base-port on a new --data-dir"
        )
    processes = {}
    for node_id, config in configs.items():
        path = write_node_config(config)
        processes[node_id] = NodeProcess(node_id, path, config.data_dir / "node.log", supervised=True)
    bootstrap = [str(c.listeners.client) for c in configs.values()]
    write_private(root / BOOTSTRAP_FILE, ",".join(bootstrap) + "\n")
    claim(root / SUPERVISOR_PID_FILE)

    stop = threading.Event()
    signals_seen = [0]

    def on_signal(signum: int, frame: Any) -> None:
        signals_seen[0] += 1
        if signals_seen[0] > 1:
            for p in processes.values():
                p.signal(signal.SIGKILL)  # second Ctrl-C: no more waiting
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    console = None
    try:
        verb = "creating" if created else "restarting"
        out.write(f"{verb} cluster {layout.cluster_id} ({layout.nodes} nodes, data in {root})\n")
        out.flush()
        for p in processes.values():
            p.start()
        ask = status if security is None else (lambda b: status(b, security))
        ready = _wait_ready(processes, bootstrap, layout.nodes, ask, ready_timeout_s, stop, out)
        if ready is None:
            return _shutdown(processes, out, failed=True)
        material = SecureMaterial(root) if layout.secure else None
        console = (_start_console(root, configs, console_port, out,
                                  None if material is None else material.client_properties,
                                  None if material is None else material.http_token_file)
                   if console_port is not None else None)
        _print_table(out, configs, processes, ready,
                     console=None if console is None else f"{console[1]} (pid {console[0].pid}, log {root / 'console.log'})",
                     secure_root=root if layout.secure else None, first_secure_run=material_created)
        restarts: dict[int, int] = {}
        while not stop.wait(0.5):
            for node_id, p in processes.items():
                code = p.returncode()
                if code is None or stop.is_set():
                    continue
                restarts[node_id] = restarts.get(node_id, 0) + 1
                if not restart or restarts[node_id] > MAX_RESTARTS:
                    if restarts[node_id] == (MAX_RESTARTS + 1 if restart else 1):
                        out.write(
                            f"node {node_id} (pid {p.pid}) exited with code {code}; log: {p.log_path}; "
                            f"not restarting it (start it by hand: raftlog node start --config {p.config_path})\n"
                        )  # fmt: skip
                        out.flush()
                    continue
                out.write(f"node {node_id} (pid {p.pid}) exited with code {code}; restarting it "
                          f"({restarts[node_id]}/{MAX_RESTARTS}); log: {p.log_path}\n")
                out.flush()
                p.start()
                out.write(f"node {node_id} restarted (pid {p.pid})\n")
                out.flush()
        if console is not None:
            console[0].stop()
        return _shutdown(processes, out, failed=False)
    finally:
        if console is not None and console[0].proc is not None and console[0].proc.poll() is None:
            console[0].stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        release(root / SUPERVISOR_PID_FILE)


def _refuse_running(root: Path, configs: Mapping[int, NodeConfig]) -> None:
    """ConfigError naming the PIDs when this cluster's supervisor or nodes still run."""
    supervisor = running_pid(root / SUPERVISOR_PID_FILE)
    nodes = {i: pid for i, c in configs.items() if (pid := running_pid(c.data_dir / NODE_PID_FILE)) is not None}
    if supervisor is None and not nodes:
        return
    held = ([f"supervisor pid {supervisor}"] if supervisor is not None else []) + [
        f"node {i} pid {pid}" for i, pid in sorted(nodes.items())]
    pids = " ".join(str(p) for p in ([supervisor] if supervisor is not None else []) + sorted(nodes.values()))
    raise ConfigError(f"{root} is still in use: {', '.join(held)}; stop them first (kill {pids}), "
                      "or use another --data-dir")


def _wait_ready(processes: Mapping[int, NodeProcess], bootstrap: list[str], nodes: int,
                status: Callable[[list[str]], Any], timeout_s: float, stop: threading.Event,
                out: TextIO) -> Any:
    from raftlog.base.errors import RaftlogError
    from raftlog.client.errors import NoBrokerAvailableError

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline and not stop.is_set():
        for node_id, p in processes.items():
            code = p.returncode()
            if code is not None:
                out.write(f"node {node_id} exited with code {code} during startup; the end of {p.log_path}:\n")
                out.write(p.log_tail() + "\n")
                return None
        try:
            last = status(bootstrap)
        except (RaftlogError, NoBrokerAvailableError, OSError):
            last = None
        if last is not None and last.controller_id is not None and sum(
            1 for b in last.brokers if not b.get("fenced", True)
        ) >= nodes:
            return last
        stop.wait(0.2)
    if not stop.is_set():
        out.write(f"the cluster was not ready within {timeout_s:.0f} s (last status: {last}); "
                  f"see the node logs under {processes[min(processes)].log_path.parent.parent}\n")
    return None


def _start_console(root: Path, configs: Mapping[int, NodeConfig], port: int, out: TextIO,
                   command_config: Path | None = None, http_token_file: Path | None = None) -> Any:
    """(ConsoleChild, url) of the web console for this cluster, or None (said on `out`).
    `command_config`: a secure cluster's client.properties (the console takes its protocol and
    CA, never its login: visitors log in as themselves); `http_token_file`: the nodes'
    http_token, for /metrics and /health's details."""
    from raftlog.console.process import ConsoleChild

    child = ConsoleChild([str(c.listeners.client) for c in configs.values()],
                         [str(c.listeners.http) for c in configs.values()], port=port, log_path=root / "console.log")
    if command_config is not None:
        child.argv += ["--command-config", str(command_config)]
    if http_token_file is not None:
        child.argv += ["--node-http-token-file", str(http_token_file)]
    registry = next((c.listeners.schema_registry for c in configs.values() if c.listeners.schema_registry.port), None)
    if registry is not None and command_config is None:  # a secure cluster's registry wants each visitor's login
        child.argv += ["--schema-registry", f"http://{registry}"]
    url = child.start()
    if url is None:
        out.write(f"web console not started: {child.problem} (pick a port with --console-port, or --no-console)\n")
        out.flush()
        return None
    return child, url


def _print_table(out: TextIO, configs: Mapping[int, NodeConfig], processes: Mapping[int, NodeProcess],
                 status: Any, console: str | None = None, *, secure_root: Path | None = None,
                 first_secure_run: bool = False) -> None:
    rows = [("NODE", "KAFKA", "CLIENT", "ROLES", "CONTROLLER", "PID", "LOG")]
    for node_id, config in configs.items():
        rows.append((
            str(node_id), str(config.listeners.kafka), str(config.listeners.client),
            ",".join(sorted(config.roles)),
            f"yes (epoch {status.controller_epoch})" if node_id == status.controller_id else "",
            str(processes[node_id].pid), str(processes[node_id].log_path),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out.write(f"cluster {status.cluster_id} is up\n")
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")
    every = ",".join(str(c.listeners.client) for c in configs.values())
    root = configs[min(configs)].data_dir.parent
    out.write(f"bootstrap: {every} (in {root / BOOTSTRAP_FILE})\n")
    scheme = "https" if configs[min(configs)].client_tls else "http"
    registries = ",".join(f"{scheme}://{c.listeners.schema_registry}" for c in configs.values()
                          if c.listeners.schema_registry.port)
    if registries:  # confluent-kafka's SchemaRegistryClient takes the list as its url
        out.write(f"schema registry: {registries}\n")
    if Path(DEFAULT_DATA_DIR).resolve() != root:
        # The CLI finds ./raftlog-data/bootstrap by itself; any other data dir needs this.
        out.write(f"first:  export RAFTLOG_BOOTSTRAP={every}\n")
    if secure_root is not None:
        first = configs[min(configs)].listeners.client
        hint = "" if str(first) == f"{DEFAULT_HOST}:{DEFAULT_BASE_PORT + 1}" else f" --bootstrap {first}"
        _print_secure(out, configs, secure_root, first_secure_run, hint, console)
        return
    out.write(
        f"try:  raftlog topics create demo --partitions 6 --replication-factor {min(3, len(configs))}\n"
        "      raftlog topics describe demo\n      raftlog cluster status\n"
        + (f"console: {console}\n" if console else "")
        + "stop: Ctrl-C (stops every node cleanly)\n"
    )  # fmt: skip
    out.flush()


def _print_secure(out: TextIO, configs: Mapping[int, NodeConfig], root: Path, first_run: bool, hint: str,
                  console: str | None) -> None:
    material = SecureMaterial(root)
    props = material.client_properties
    kafka = configs[min(configs)].listeners.kafka
    http = configs[min(configs)].listeners.http
    rf = min(3, len(configs))
    if first_run:
        out.write(
            "secure cluster: TLS + SASL/SCRAM on the client and Kafka listeners, mutual TLS between nodes, ACLs on.\n"
            f"created its CA ({material.ca_file}), node certificates and an admin user (a super user);\n"
            f"the admin's login is {props} (mode 0600; its password is nowhere else: keep the file safe).\n"
        )  # fmt: skip
    out.write(
        f"use it:  export RAFTLOG_COMMAND_CONFIG={props}\n"
        f"         raftlog topics create demo --partitions 6 --replication-factor {rf}{hint}\n"
        f"         raftlog --help   (every command takes --command-config {props})\n"
        f"         kcat -F {props} -b {kafka} -L\n"
        f"         raftlog users add alice{hint}; raftlog acls add --allow alice --operation write --topic demo{hint}\n"
        f"metrics: curl -H \"Authorization: Bearer $(cat {material.http_token_file})\" http://{http}/metrics\n"
        + (f"console: {console} (log in as a SCRAM user, e.g. admin with the password in {props})\n" if console else "")
        + "stop: Ctrl-C (stops every node cleanly)\n"
    )  # fmt: skip
    out.flush()


def _shutdown(processes: Mapping[int, NodeProcess], out: TextIO, *, failed: bool) -> int:
    out.write("stopping nodes...\n")
    out.flush()
    running = {i for i, p in processes.items() if p.alive()}
    codes = stop_all(processes.values())
    summary = ", ".join(f"node {i}: exit {c}" for i, c in sorted(codes.items()))
    out.write(f"stopped ({summary})\n")
    out.flush()
    # Nodes that had died before (e.g. killed to try failover) do not spoil a clean stop.
    clean = all(codes.get(i) == 0 for i in running)
    return 1 if failed or not clean else 0

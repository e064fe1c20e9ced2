"""Test harness: real `raftlog node start` processes on free loopback ports with temp data
dirs, driven from synchronous test code.

    with NodeCluster(tmp_path, size=3) as cluster:   # voters 1..3, combined mode
        cluster.start_all()
        cluster.wait_ready()                          # a controller, every broker unfenced
        cluster.call(2, "create_topic", name="t", partitions=6, replication_factor=3)
        cluster.kill(cluster.controller_id())         # SIGKILL by PID
        cluster.add_node(4)                           # a broker-only node (not a voter)

Rules it keeps: every process is started by this harness and stopped by its PID (SIGTERM
then SIGKILL; `stop_all` runs on exit even when a test fails); waits poll a condition under
a deadline (`wait_for`) and never sleep blindly; node logs stay in each node's data dir
(`node.log`) and the last lines are shown when a wait fails. Other helpers reuse this
module: keep it free of test-specific assertions. tests/conftest.py puts this folder on
sys.path, so a test imports it by name (scripts outside tests/ load it by path):

    import node_harness as harness
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import secrets
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from raftlog.cli.cluster import (
    DEFAULT_BASE_PORT,
    NodePorts,
    NodeProcess,
    build_node_configs,
    free_ports,
    stop_all,
    write_node_config,
)
from raftlog.node.config import NodeConfig, new_cluster_id
from raftlog.base.errors import RaftlogError, error_from_wire
from raftlog.base.client_properties import ClientSecurity
from raftlog.base.protocol import FrameDecoder, encode_frame
from raftlog.base.sasl import ScramClient

# Fast failure detection so tests do not wait out Kafka-sized sessions.
TEST_SETTINGS: Mapping[str, Any] = {"heartbeat_ms": 300, "session_timeout_ms": 2000}
_POLL_S = 0.05


def _exchange(sock: Any, decoder: FrameDecoder, address: str, request_id: int, op: str,
              fields: Mapping[str, Any]) -> dict[str, Any]:
    sock.sendall(encode_frame({**fields, "v": 1, "id": request_id, "op": op}))
    while True:
        message = decoder.next_frame()
        if message is not None:
            return message
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError(f"{address} closed the connection without answering {op}")
        decoder.feed(data)


def raw_call(address: str, op: str, timeout_s: float = 10.0, security: ClientSecurity | None = None,
             source: str | None = None, **fields: Any) -> dict[str, Any]:
    """One request to one node's listener over a fresh blocking socket; returns the whole
    response map (ok or error). With `security` (a client.properties' settings) the socket is
    TLS and/or logs in with SASL first (a failed login is returned as the response). Raises
    OSError when the node cannot be reached. `source`: the local address to connect from (a
    127.0.0.0/8 address stands for another client host)."""
    host, _, port = address.rpartition(":")
    decoder = FrameDecoder(max_frame_bytes=1 << 30)
    with contextlib.ExitStack() as stack:
        sock: Any = stack.enter_context(socket.create_connection(
            (host, int(port)), timeout=timeout_s, source_address=None if source is None else (source, 0)))
        context = None if security is None else security.ssl_context()
        if context is not None:
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
        sasl = None if security is None else security.sasl_client()
        if sasl is not None:
            answer = _exchange(sock, decoder, address, 1, "sasl_handshake", {"mechanism": sasl.mechanism})
            if "error" in answer:
                return answer
            message = sasl.first_message()
            while True:
                answer = _exchange(sock, decoder, address, 1, "sasl_authenticate", {"auth_bytes": message})
                if "error" in answer or answer["complete"]:
                    break
                message = sasl.final_message(answer["auth_bytes"])
            if "error" in answer:
                return answer
            if isinstance(sasl, ScramClient):
                sasl.verify_server_final(answer["auth_bytes"])
        return _exchange(sock, decoder, address, 2, op, fields)


class RawConnection:
    """One kept plain socket to a node's listener, for requests one after another (raw_call
    opens a socket per request): what talks to a node that can accept no new connection
    (out of descriptors). Close it (or use it as a context manager)."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._decoder = FrameDecoder(max_frame_bytes=1 << 30)
        self._request_id = 0

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """The whole response map (ok or error)."""
        self._request_id += 1
        return _exchange(self._sock, self._decoder, self.address, self._request_id, op, fields)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def ok(response: Mapping[str, Any]) -> dict[str, Any]:
    """The ok response's fields; raises the response's RaftlogError otherwise."""
    if "error" in response:
        raise error_from_wire(response["error"])
    return dict(response)


@contextlib.contextmanager
def secure_cluster(root: Path, admin_password: str, size: int = 1, *,
                   users: Mapping[tuple[str, str], str] | None = None,
                   settings: Mapping[str, Any] | None = None) -> Iterator["NodeCluster"]:
    """A started, ready secure cluster (the material of `cluster up --secure`: TLS, SASL/SCRAM,
    ACLs, an admin user with `admin_password`) under `root`; `.material` is its SecureMaterial.
    `users` ({(name, SCRAM mechanism): password}) are seeded beside the admin; `settings`
    overrides NodeConfig fields of every node. Every node is stopped by PID on exit."""
    from metadata.records import UserScramCredential
    from metadata.security_ops import read_bootstrap_credentials, write_bootstrap_credentials
    from raftlog.base.sasl import scram_credential
    from raftlog.cli.secure import SecureMaterial

    material, _ = SecureMaterial.ensure(root, range(1, size + 1), ["127.0.0.1"], admin_password=admin_password)
    if users:
        seeded = [UserScramCredential.of(name, scram_credential(mechanism, password))
                  for (name, mechanism), password in sorted(users.items())]
        write_bootstrap_credentials(material.bootstrap_file,
                                    [*read_bootstrap_credentials(material.bootstrap_file), *seeded])
    with NodeCluster(root, size=size, security=material.admin_security()) as cluster:
        for node_id in cluster.configs:
            cluster.configs[node_id] = dataclasses.replace(cluster.configs[node_id], **material.node_settings(node_id),
                                                           **(settings or {}))
        cluster.material = material
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        yield cluster


def load_module(name: str, path: Path) -> Any:
    """A helper module by path (test folders are not packages), once per session: another
    test file's helpers (its connection class, its forged batches) under `name`."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def one_node_with_topic(root: Path, topic: str) -> Iterator["NodeCluster"]:
    """A started, ready one-node cluster under `root` with `topic` (one partition) led.
    Its node is stopped by PID on exit."""
    from raftlog.client import Admin

    with NodeCluster(root, size=1) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
            admin.create_topic(topic, 1, 1)
            cluster.wait_for(lambda: admin.describe_topics([topic])[topic].partitions[0].leader is not None,
                             30, f"a leader of {topic}")
        yield cluster


class NodeCluster:
    """N nodes of one cluster under `root` (node i in root/node-<i>)."""

    def __init__(
        self,
        root: Path,
        size: int = 3,
        *,
        settings: Mapping[str, Any] | None = None,
        cluster_id: str | None = None,
        security: ClientSecurity | None = None,
        hosts: Mapping[int, str] | None = None,
        first_node_id: int = 1,
    ) -> None:
        self.root = Path(root)
        # node id -> its own address (one machine each: every node on the default ports)
        self.hosts = None if hosts is None else dict(hosts)
        self.security = security  # how call() connects (a secure cluster's admin settings)
        self.cluster_id = cluster_id or new_cluster_id()
        self.secret = secrets.token_urlsafe(24)
        self.settings = dict(TEST_SETTINGS if settings is None else settings)
        # node ids first_node_id.. (0: Kafka's docker clusters' broker ids 0, 1, 2)
        self.voters = list(range(first_node_id, first_node_id + size))
        self.ports: dict[int, NodePorts] = {}
        self.configs: dict[int, NodeConfig] = {}
        self.processes: dict[int, NodeProcess] = {}
        for node_id in self.voters:
            self._allocate(node_id)
        self._rebuild_configs(broker_only=())

    # -- configuration --

    def _allocate(self, node_id: int) -> None:
        if self.hosts is None:
            self.ports[node_id] = NodePorts(*free_ports(6))
        else:
            self.ports[node_id] = NodePorts.from_base(DEFAULT_BASE_PORT, 0)

    def _rebuild_configs(self, broker_only: Iterable[int]) -> None:
        configs = build_node_configs(
            self.root, self.cluster_id, self.secret, self.ports, hosts=self.hosts, voters=self.voters,
            broker_only=broker_only, settings=self.settings,
        )  # fmt: skip
        for node_id, config in configs.items():
            if node_id not in self.configs:
                self.configs[node_id] = config

    def add_node(self, node_id: int, *, start: bool = True) -> NodeConfig:
        """A broker-only node (not a voter) of this cluster; started unless start=False."""
        if node_id in self.ports:
            raise ValueError(f"node {node_id} exists")
        self._allocate(node_id)
        self._rebuild_configs(broker_only=[node_id])
        if start:
            self.start(node_id)
        return self.configs[node_id]

    def add_controller_node(self, node_id: int, *, voters: Iterable[int], start: bool = True) -> NodeConfig:
        """A new controller+broker node whose config names `voters` (the quorum's voters as it
        will find them, itself included); the running voters add it with `add_controller`."""
        if node_id in self.ports:
            raise ValueError(f"node {node_id} exists")
        self._allocate(node_id)
        configs = build_node_configs(
            self.root, self.cluster_id, self.secret, self.ports, hosts=self.hosts, voters=sorted(voters),
            settings=self.settings,
        )  # fmt: skip
        self.configs[node_id] = configs[node_id]
        if start:
            self.start(node_id)
        return self.configs[node_id]

    def client(self, node_id: int) -> str:
        return str(self.configs[node_id].listeners.client)

    def kafka(self, node_id: int) -> str:
        """The node's Kafka-protocol listener, "host:port"."""
        return str(self.configs[node_id].listeners.kafka)

    def kafka_bootstrap(self) -> str:
        """Kafka clients' bootstrap.servers: every live node's Kafka listener, comma-separated."""
        return ",".join(self.kafka(n) for n in self.live())

    def http(self, node_id: int) -> str:
        return str(self.configs[node_id].listeners.http)

    def schema_registry(self, node_id: int) -> str:
        """The node's Schema Registry URL: "https://host:port" when its clients use TLS."""
        config = self.configs[node_id]
        return f"{'https' if config.client_tls else 'http'}://{config.listeners.schema_registry}"

    def bootstrap(self) -> list[str]:
        return [self.client(n) for n in self.live()]

    # -- processes --

    def start(self, node_id: int) -> NodeProcess:
        config = self.configs[node_id]
        path = write_node_config(config)
        process = self._process(node_id, path, config.data_dir / "node.log")
        self.processes[node_id] = process.start()
        return process

    def _process(self, node_id: int, config_path: Path, log_path: Path) -> NodeProcess:
        """The process that runs node `node_id` (netns_hosts.py runs it inside its host)."""
        return NodeProcess(node_id, config_path, log_path)

    def start_all(self) -> None:
        for node_id in self.configs:
            if node_id not in self.processes or not self.processes[node_id].alive():
                self.start(node_id)

    def live(self) -> list[int]:
        return [n for n, p in sorted(self.processes.items()) if p.alive()]

    def kill(self, node_id: int) -> int | None:
        """SIGKILL by PID; returns the exit code."""
        return self.processes[node_id].kill()

    def terminate(self, node_id: int, grace_s: float = 15.0) -> int | None:
        """SIGTERM by PID (graceful), SIGKILL after `grace_s`; returns the exit code."""
        return self.processes[node_id].terminate(grace_s)

    def stop_all(self, grace_s: float = 15.0) -> dict[int, int | None]:
        """SIGTERM every live node once (by PID), wait, SIGKILL stragglers; exit codes."""
        return stop_all(self.processes.values(), grace_s)

    def __enter__(self) -> "NodeCluster":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop_all()

    # -- requests --

    def call(self, node_id: int, op: str, timeout_s: float = 15.0, **fields: Any) -> dict[str, Any]:
        """Send `op` to node `node_id`'s client listener; the ok fields, or raises its error."""
        return ok(raw_call(self.client(node_id), op, timeout_s=timeout_s, security=self.security, **fields))

    def status(self, node_id: int | None = None) -> dict[str, Any]:
        return self.call(node_id if node_id is not None else self.live()[0], "cluster_status")

    def health(self, node_id: int) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://{self.http(node_id)}/health", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read())

    def controller_id(self, node_id: int | None = None) -> int | None:
        return self.status(node_id).get("controller_id")

    # -- waiting --

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """Poll `predicate()` until it returns something truthy (exceptions count as "not
        yet") and return that; fail with the last error and the nodes' log tails."""
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        pause = threading.Event()
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, RaftlogError, KeyError, TypeError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                tails = "\n".join(
                    f"--- node {n} (exit {p.returncode()}):\n{p.log_tail(8)}" for n, p in self.processes.items()
                )
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last error: {last!r}\n{tails}")
            pause.wait(_POLL_S)  # the poll interval of a deadline-bounded wait, not a sync point

    def ready_status(self, node_id: int | None = None, brokers: Iterable[int] | None = None) -> dict[str, Any] | None:
        """The cluster_status (of `node_id`, else of the first live node) when a controller
        answers and `brokers` (default: every live node) are registered and unfenced; else
        None. Without `node_id`, every live node's own image must say so: a test may ask any
        node first (the REST proxy's broker list asked node 3 while its image still lacked
        its own registration)."""
        wanted = set(self.live() if brokers is None else brokers)
        first = None
        for n in [node_id] if node_id is not None else self.live():
            status = self.status(n)
            unfenced = {b["id"] for b in status["brokers"] if not b["fenced"]}
            if status.get("controller_id") is None or not wanted <= unfenced:
                return None
            first = first or status
        return first

    def wait_ready(self, timeout_s: float = 30.0, brokers: Iterable[int] | None = None) -> dict[str, Any]:
        return self.wait_for(lambda: self.ready_status(brokers=brokers), timeout_s, "a ready cluster")

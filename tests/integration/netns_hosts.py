"""Several hosts on one machine: Linux network namespaces, one address each on a bridge (from
198.18.0.0/15, no route out), and nodes run inside them. Used by the multi-host tests
(test_ops_multihost.py, test_elastic_multihost.py):

    with netns_hosts.made_or_skip(5) as hosts:          # skips (one reason) without root or iproute2
        with netns_hosts.NamespacedCluster(tmp_path, hosts, size=3) as cluster:
            cluster.start_all()                          # node i in namespace i, at hosts.ips[i - 1]
            cluster.add_node(4)                          # a broker-only node on host 4

The test process stays in the machine's own namespace and reaches the hosts through the
bridge's address, as a client on the network would. Every namespace, bridge and veth made is
removed on exit; every node is stopped by its PID (NodeCluster's rules)."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from raftlog.cli.cluster import NodeProcess

import node_harness as harness


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _unused_prefix() -> str:
    """A random /24 inside 198.18.0.0/15 that no interface here uses yet (two test files making
    hosts at once, on two xdist workers, must not share one)."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=30).stdout
    rng = random.Random()
    for _ in range(100):
        subnet = rng.randrange(0, 512)
        prefix = f"198.{18 + subnet // 256}.{subnet % 256}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free /24 in 198.18.0.0/15")


class Hosts:
    """`count` namespaces on one bridge; the bridge's own address (in this namespace) lets the
    test reach them as a client would. Names carry a random tag: parallel runs never meet."""

    def __init__(self, count: int) -> None:
        tag = secrets.token_hex(3)
        self.bridge = f"rl{tag}br"
        prefix = _unused_prefix()
        self.client_ip = f"{prefix}.254"
        self.namespaces = [f"rl{tag}n{i}" for i in range(1, count + 1)]
        self.ips = [f"{prefix}.{i}" for i in range(1, count + 1)]
        self._made: list[tuple[str, ...]] = []

    def make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", "del", self.bridge))
        _ip("addr", "add", f"{self.client_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, ip) in enumerate(zip(self.namespaces, self.ips), 1):
            _ip("netns", "add", ns)
            self._made.append(("netns", "del", ns))
            host_end, ns_end = f"{self.bridge[:-2]}h{i}", f"{self.bridge[:-2]}c{i}"
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", ns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")  # only a connected /24: no route out

    def remove(self) -> None:
        for args in reversed(self._made):  # netns del takes its veth end (and the pair) along
            subprocess.run(["ip", *args], capture_output=True, timeout=30)

    def listeners(self, ns: str) -> list[str]:
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]


@contextlib.contextmanager
def made_or_skip(count: int) -> Iterator[Hosts]:
    """`count` hosts, removed on exit; the test skips with the reason where they cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs scripts/test as root)")
    if shutil.which("ip") is None or shutil.which("ss") is None:
        pytest.skip("the `ip` and `ss` tools (iproute2) are missing")
    made = Hosts(count)
    try:
        made.make()
    except subprocess.CalledProcessError as exc:
        made.remove()
        pytest.skip(f"cannot make network namespaces here: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
    try:
        yield made
    finally:
        made.remove()


class NamespacedNode(NodeProcess):
    """A node run inside namespace `ns` by `ip netns exec` (which execs it: the PID is the
    node's): `raftlog node start --config` as NodeProcess runs it, or a bash `script` whose
    last command `exec`s it."""

    def __init__(self, node_id: int, ns: str, config_path: Path, log_path: Path, *,
                 env: Mapping[str, str] | None = None, script: str | None = None) -> None:
        super().__init__(node_id, config_path, log_path, env=env)
        self.ns = ns
        self.script = script

    def argv(self) -> list[str]:
        command = super().argv() if self.script is None else ["bash", "-e", "-c", self.script]
        return ["ip", "netns", "exec", self.ns, *command]


class NamespacedCluster(harness.NodeCluster):
    """A NodeCluster whose node i runs on host i (`hosts.namespaces[i - 1]`), listening at its
    address on the default ports, in plaintext (allowed explicitly: a trusted test network)."""

    def __init__(self, root: Path, hosts: Hosts, size: int = 3, **settings: Any) -> None:
        self.namespaces = dict(enumerate(hosts.namespaces, 1))
        super().__init__(root, size, hosts=dict(enumerate(hosts.ips, 1)),
                         settings={**harness.TEST_SETTINGS, "allow_plaintext": True, **settings})

    def _process(self, node_id: int, config_path: Path, log_path: Path) -> NodeProcess:
        return NamespacedNode(node_id, self.namespaces[node_id], config_path, log_path)


def wait_for(nodes: Mapping[int, NodeProcess], predicate: Any, timeout_s: float, what: str) -> Any:
    """Poll under a deadline; on failure show the nodes' log tails."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, harness.RaftlogError, KeyError, ValueError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            tails = "\n".join(f"--- node {i}:\n{n.log_tail(10)}" for i, n in nodes.items())
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}\n{tails}")
        threading.Event().wait(0.2)  # the poll interval under a deadline

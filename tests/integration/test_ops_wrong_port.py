"""Issue 20, wrong-port answers: pointed at something that is not a raftlog client listener (a node's HTTP, Kafka, peer or quorum port, or an unrelated HTTP service), the CLI says what answered in one line and exits 1 at once, and the Python client raises NoBrokerAvailableError saying so instead of retrying to its deadline or logging "frame of 1213486160 bytes"; given a list, the client tries every address until one is a node."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

import pytest

from raftlog.base.protocol import foreign_protocol
from raftlog.client import Admin, NoBrokerAvailableError

import node_harness as harness

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
HANG_LIMIT_S = 12  # a bound on a hang (the issue saw 17 s), not a speed measurement


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("wrong-port"), size=1) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        yield cluster


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No access log on the test's stderr."""


@pytest.fixture(scope="module")
def web():
    """An unrelated HTTP service on a free port (the standard library's)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def cli(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAFTLOG_BOOTSTRAP", "RAFTLOG_DEBUG")}
    return subprocess.run([*RAFTLOG, *args, "--bootstrap", bootstrap], capture_output=True, text=True,
                          env=env, timeout=HANG_LIMIT_S)


def one_line(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 1, process
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in process.stderr and "frame of" not in process.stderr, process.stderr
    return lines[0]


def test_cli_names_what_answered(node, web):
    """Why: "Pointing --bootstrap at a port that is not raftlog (the HTTP port, an unrelated
    HTTP service) hangs 17 s and says "timed out; the change may or may not have been
    applied" on a read-only command, or prints six lines of "frame of 1213486160 bytes"."""
    config = node.configs[1]
    http_port = str(config.listeners.http)
    for address in (http_port, web):
        line = one_line(cli("topics", "list", bootstrap=address))
        assert f"{address} answered HTTP, not the raftlog protocol" in line, line
    line = one_line(cli("cluster", "status", bootstrap=str(config.listeners.peer)))
    assert "peer listener, not the client listener" in line, line
    for listener in (config.listeners.kafka, config.listeners.quorum):
        line = one_line(cli("topics", "list", bootstrap=str(listener)))
        assert str(listener) in line and ("not the raftlog protocol" in line or "no raftlog answer" in line), line
    # With one good address among them, the command works.
    good = cli("topics", "list", bootstrap=f"{http_port},{config.listeners.client}")
    assert good.returncode == 0, good


def test_client_raises_what_answered(node, web):
    config = node.configs[1]
    cases = {str(config.listeners.http): "answered HTTP, not the raftlog protocol",
             web: "answered HTTP, not the raftlog protocol",
             str(config.listeners.kafka): "without answering: not the raftlog protocol"}
    for address, expected in cases.items():
        with Admin([address], request_timeout_ms=HANG_LIMIT_S * 1000) as admin:
            with pytest.raises(NoBrokerAvailableError, match=expected):
                admin.list_topics()
    # Issue 20, "clients try every address": a foreign port and a closed one before the node's.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there once closed
    with Admin([str(config.listeners.http), closed, str(config.listeners.client)],
               request_timeout_ms=HANG_LIMIT_S * 1000) as admin:
        assert isinstance(admin.list_topics(), list)


@pytest.mark.parametrize(("first", "what"), [
    (b"HTTP/1.1 400 Bad Request\r\n", "HTTP"),
    (b"\x15\x03\x01\x00\x02", "TLS"),
    (b"\x00\x00\x00\x08\x00\x00\x00\x01\x00\x23", "a Kafka-protocol listener"),
    (b"\x00\x00\x00\x10\xa2bid\x01", None),  # a raftlog frame: a CBOR map
    (b"\x00\x00", None),  # too short to judge
])  # fmt: skip
def test_foreign_protocol(first, what):
    assert foreign_protocol(first) == what

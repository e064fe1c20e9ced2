"""Issue 39's strangers against real nodes, plain and secure (TLS+SASL): 1,100 idle connections to the Kafka and the native client port do not lock a node out (a new client is served, the per-address limit closes the extra ones at once, the timers close the idle and the unauthenticated ones, /metrics counts them); an oversized frame before authentication on the native client, peer and Kafka ports closes the connection with the node's RSS within a bound; 40 parallel connections guess passwords no faster than one address may; a SASL session past connections_max_reauth_ms is closed, and may log in again on its connection before that (librdkafka does, and keeps producing)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import resource
import selectors
import socket
import ssl
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer as KProducer
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from raftlog import Producer
from raftlog.base.client_properties import load_properties
from raftlog.base.protocol import FrameDecoder
from raftlog.base.sasl import ScramClient
from raftlog.cli.secure import SecureMaterial
from raftlog.node.auth import LoginThrottle

import node_harness as harness

FLOOD = 1_100  # idle connections per attack (the sweep's number)
PER_IP = 50  # the test's max_connections_per_ip
IDLE_MS = 3_000
PREAUTH_MS = 3_000
REAUTH_MS = 8_000
# The node's settings for this module: short timers so the test sees them fire.
LIMITS = {
    "max_connections_per_ip": PER_IP, "connections_max_idle_ms": IDLE_MS,
    "connections_preauth_timeout_ms": PREAUTH_MS, "connections_max_reauth_ms": REAUTH_MS,
}  # fmt: skip
RSS_GROWTH_MAX = 16 << 20  # what an oversized frame before authentication may cost a node
ANNOUNCED = 120 << 20  # the sweep's frame to the peer port: 120 MiB announced ...
STREAMED = 40 << 20  # ... and 40 MiB sent
# To the client ports: under their 64 MiB frame limit (a larger one was always refused at once)
CLIENT_ANNOUNCED = 60 << 20
GUESS_WINDOW_S = 8.0
ADMIN_PASSWORD = "stranger-admin-Pw-" + "5d21"
# Each attack comes from its own loopback address: the node's per-address state (limits,
# the login throttle) starts fresh for it, and the test's own clients (127.0.0.1) are others.
IDLE_KAFKA, IDLE_CLIENT, PREAUTH_PEER, BIG_FRAMES, GUESSER = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"


@pytest.fixture(scope="module", autouse=True)
def enough_descriptors() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * FLOOD:
        if hard != resource.RLIM_INFINITY and hard < 4 * FLOOD:
            pytest.skip(f"this test holds {FLOOD} sockets at once; RLIMIT_NOFILE hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (4 * FLOOD, hard))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with harness.NodeCluster(tmp_path_factory.mktemp("plain"), size=1,
                             settings={**harness.TEST_SETTINGS, **LIMITS}) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        yield cluster


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("secure")
    material, _ = SecureMaterial.ensure(root, [1], ["127.0.0.1"], admin_password=ADMIN_PASSWORD)
    with harness.NodeCluster(root, size=1, security=material.admin_security()) as cluster:
        cluster.configs[1] = dataclasses.replace(cluster.configs[1], **material.node_settings(1), **LIMITS)
        cluster.material = material
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        yield cluster


# -- helpers -------------------------------------------------------------------------------


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def tls_context(cluster: Any) -> ssl.SSLContext | None:
    security = cluster.security
    return None if security is None else security.ssl_context()


def metrics(cluster: Any) -> str:
    request = urllib.request.Request(f"http://{cluster.http(1)}/metrics")
    material = getattr(cluster, "material", None)
    if material is not None:
        request.add_header("Authorization", f"Bearer {material.http_token()}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def counter(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def rss_bytes(cluster: Any) -> int:
    pid = cluster.processes[1].pid
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@contextlib.contextmanager
def flood(address: str, source: str, count: int, context: ssl.SSLContext | None) -> Iterator[list[Any]]:
    """`count` connections from `source`, each left silent (over TLS: the handshake done,
    then nothing). Yields the ones still open after connecting (TLS: after the handshake; a
    refused one fails it); closes every socket at the end."""
    host, port = split(address)
    opened: list[Any] = []
    try:
        raw = [socket.create_connection((host, port), timeout=10, source_address=(source, 0)) for _ in range(count)]
        opened.extend(raw)
        if context is None:
            yield raw
            return
        secured = []
        for sock in raw:
            try:
                tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
                opened.append(tls)
                tls.do_handshake()
                secured.append(tls)
            except (OSError, ssl.SSLError):
                continue  # refused at accept: closed before (or during) the handshake
        yield secured
    finally:
        for sock in opened:
            sock.close()


def closed_by_server(socks: list[Any], timeout_s: float, enough: int | None = None) -> list[Any]:
    """The sockets the server closes (EOF, reset, or a TLS close) within `timeout_s`, or as
    soon as `enough` of them (default: all) are."""
    closed: list[Any] = []
    enough = len(socks) if enough is None else enough
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while selector.get_map() and len(closed) < enough and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                sock = key.fileobj
                try:
                    sock.settimeout(1)
                    data = sock.recv(1 << 16)
                except (OSError, ssl.SSLError):
                    data = b""
                if not data:
                    selector.unregister(sock)
                    closed.append(sock)
    return closed


def kafka_served(cluster: Any, topic: str) -> None:
    """A new Kafka client (ApiVersions, Metadata, Produce) is served within a deadline."""
    conf = {"bootstrap.servers": cluster.kafka(1), "message.timeout.ms": 30_000, "socket.timeout.ms": 30_000}
    material = getattr(cluster, "material", None)
    if material is not None:
        conf.update(load_properties(material.client_properties))
        conf["bootstrap.servers"] = cluster.kafka(1)
    outcomes: list[Any] = []
    producer = KProducer(conf)
    producer.produce(topic, b"served", on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(60) == 0
    assert outcomes == [None]


def native_served(cluster: Any, topic: str) -> None:
    """A new native client (metadata, then a produce) is served within a deadline."""
    assert "brokers" in harness.ok(harness.raw_call(cluster.client(1), "metadata", timeout_s=30,
                                                    security=cluster.security))
    cluster.call(1, "create_topic", name=topic, partitions=1, replication_factor=1)
    security = None if cluster.security is None else load_properties(cluster.material.client_properties)
    with Producer(cluster.client(1), security=security, max_block_ms=60_000) as producer:
        partition, offset = producer.send(topic, b"served").result(timeout=60)
    assert partition == 0 and offset >= 0


def idle_flood_then_served(cluster: Any, listener: str, source: str, served: Any, timer: str) -> None:
    address = cluster.kafka(1) if listener == "kafka" else cluster.client(1)
    before = metrics(cluster)
    with flood(address, source, FLOOD, tls_context(cluster)) as held:
        # the per-address limit: all but PER_IP closed by the node at once, not left waiting
        # unanswered in its backlog (over TLS those fail their handshake inside flood())
        if tls_context(cluster) is None:
            refused = closed_by_server(held, timeout_s=60, enough=FLOOD - PER_IP)
            assert len(refused) >= FLOOD - PER_IP
            held = [s for s in held if s not in refused]
        assert len(held) <= PER_IP
        served(cluster, f"served-{listener}")
        # the admitted ones, silent: closed by the idle timer (plain) or pre-auth timer (TLS)
        assert len(closed_by_server(held, timeout_s=60)) == len(held)
    after = metrics(cluster)
    refused = counter(after, "raftlog_connections_refused_total", listener=listener, reason="max_connections_per_ip")
    assert refused - counter(before, "raftlog_connections_refused_total", listener=listener,
                             reason="max_connections_per_ip") >= FLOOD - PER_IP
    closed = counter(after, "raftlog_connections_closed_total", listener=listener, reason=timer)
    assert closed - counter(before, "raftlog_connections_closed_total", listener=listener, reason=timer) >= 1


def oversized_frame(cluster: Any, address: str, context: ssl.SSLContext | None, header: bytes) -> None:
    """Announce a frame of `header`'s size and stream up to STREAMED before authenticating: the node
    closes the connection, and its RSS grows by less than RSS_GROWTH_MAX."""
    host, port = split(address)
    rss_before = rss_bytes(cluster)
    with contextlib.ExitStack() as stack:
        sock: Any = stack.enter_context(socket.create_connection((host, port), timeout=10,
                                                                 source_address=(BIG_FRAMES, 0)))
        if context is not None:
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
        chunk = bytes(1 << 20)
        try:
            sock.sendall(header)
            for _ in range(STREAMED // len(chunk)):
                sock.sendall(chunk)
        except (OSError, ssl.SSLError):
            pass  # closed by the node while we were still sending: what we want
        assert closed_by_server([sock], timeout_s=30) == [sock], "the node kept reading the oversized frame"
    growth = rss_bytes(cluster) - rss_before
    assert growth < RSS_GROWTH_MAX, f"RSS grew by {growth >> 20} MiB"


# -- plain cluster --------------------------------------------------------------------------


def test_plain_idle_flood_on_the_kafka_port(plain):
    idle_flood_then_served(plain, "kafka", IDLE_KAFKA, kafka_served, "idle")


def test_plain_idle_flood_on_the_native_port(plain):
    idle_flood_then_served(plain, "client", IDLE_CLIENT, native_served, "idle")


def test_plain_peer_port_closes_a_silent_stranger_and_an_oversized_frame(plain):
    peer = str(plain.configs[1].listeners.peer)
    host, port = split(peer)
    with socket.create_connection((host, port), timeout=10, source_address=(PREAUTH_PEER, 0)) as silent:
        assert closed_by_server([silent], timeout_s=60) == [silent]
    assert counter(metrics(plain), "raftlog_connections_closed_total", listener="peer", reason="preauth_timeout") >= 1
    oversized_frame(plain, peer, None, struct.pack(">I", ANNOUNCED))


# -- secure cluster -------------------------------------------------------------------------


def test_secure_idle_tls_flood_on_the_kafka_port(secure):
    idle_flood_then_served(secure, "kafka", IDLE_KAFKA, kafka_served, "preauth_timeout")


def test_secure_idle_tls_flood_on_the_native_port(secure):
    idle_flood_then_served(secure, "client", IDLE_CLIENT, native_served, "preauth_timeout")


def test_secure_oversized_frames_before_the_login(secure):
    context = tls_context(secure)
    oversized_frame(secure, secure.client(1), context, struct.pack(">I", CLIENT_ANNOUNCED))
    oversized_frame(secure, secure.kafka(1), context, struct.pack(">i", CLIENT_ANNOUNCED))


class KafkaConn:
    """A blocking raw Kafka connection over TLS (for the SASL exchanges)."""

    def __init__(self, cluster: Any, source: str | None = None) -> None:
        host, port = split(cluster.kafka(1))
        raw = socket.create_connection((host, port), timeout=30, source_address=None if source is None else (source, 0))
        self.sock = tls_context(cluster).wrap_socket(raw, server_hostname=host)
        self.cid = 0

    def call(self, message: Any, version: int, response_cls: Any) -> Any:
        """The decoded response, or None when the node closed the connection instead."""
        self.cid += 1
        message.with_header(correlation_id=self.cid, client_id="stranger-test")
        try:
            self.sock.sendall(bytes(message.encode(version=version, header=True, framed=True)))
            size = struct.unpack(">i", self._read(4))[0]
            frame = self._read(size)
        except (OSError, ssl.SSLError, EOFError):
            return None
        return response_cls.decode(frame[4:], version=version)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = self.sock.recv(n - len(data))
            if not more:
                raise EOFError
            data += more
        return data

    def login(self, user: str, password: str) -> Any:
        """SaslHandshake v1 + SaslAuthenticate v1 rounds (SCRAM-SHA-512): the last answer."""
        client = ScramClient("SCRAM-SHA-512", user, password)
        if self.call(SaslHandshakeRequest[1](mechanism=client.mechanism), 1, SaslHandshakeResponse) is None:
            return None
        answer = self.call(SaslAuthenticateRequest[1](auth_bytes=client.first_message()), 1, SaslAuthenticateResponse)
        if answer is None or answer.error_code:
            return answer
        final = client.final_message(answer.auth_bytes)
        return self.call(SaslAuthenticateRequest[1](auth_bytes=final), 1, SaslAuthenticateResponse)

    def close(self) -> None:
        self.sock.close()


def _native_guess(cluster: Any) -> str | None:
    wrong = dataclasses.replace(cluster.security, password="not-the-password")
    answer = harness.raw_call(cluster.client(1), "metadata", timeout_s=30, security=wrong, source=GUESSER)
    return answer.get("error", {}).get("code")


def _kafka_guess(cluster: Any) -> str | None:
    conn = KafkaConn(cluster, GUESSER)
    try:
        answer = conn.login("admin", "not-the-password")
    finally:
        conn.close()
    return None if answer is None else ("SASL_AUTHENTICATION_FAILED" if answer.error_code == 58 else str(answer.error_code))


def single_address_allowance(window_s: float) -> int:
    """How many failed logins one address gets answered within `window_s` from a fresh
    start: the node's throttle (its defaults) delays the n-th failure's answer by its n-th
    delay, one after another."""
    throttle, spent_ms, count = LoginThrottle(), 0, 0
    while True:
        spent_ms += throttle.failed("one", now_ms=spent_ms)
        if spent_ms > window_s * 1000:
            return count
        count += 1


def test_forty_parallel_connections_guess_no_faster_than_one_address(secure):
    start = threading.Event()
    answered: list[float] = []
    lock = threading.Lock()
    t0 = [0.0]

    def guesser(guess: Any) -> None:
        start.wait(30)
        for _ in range(25):  # bounded: far more than the window allows
            if time.monotonic() - t0[0] > GUESS_WINDOW_S:
                return
            try:
                code = guess(secure)
            except (OSError, ssl.SSLError, ConnectionError):
                continue  # closed while waiting for its turn (pre-auth timer): try again
            if code == "SASL_AUTHENTICATION_FAILED":
                with lock:
                    answered.append(time.monotonic() - t0[0])

    # 20 connections to each client listener, all from one address: they share its throttle
    threads = [threading.Thread(target=guesser, args=(g,), daemon=True)
               for g in [_native_guess, _kafka_guess] * 20]
    for thread in threads:
        thread.start()
    t0[0] = time.monotonic()
    start.set()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    in_window = [t for t in answered if t <= GUESS_WINDOW_S]
    allowance = single_address_allowance(GUESS_WINDOW_S)
    assert 1 <= len(in_window) <= allowance, (len(in_window), allowance)
    # another address is not slowed by it
    assert "brokers" in secure.call(1, "metadata")


def test_a_session_past_its_lifetime_is_closed_and_may_log_in_again_before(secure):
    conn = KafkaConn(secure)
    try:
        answer = conn.login("admin", ADMIN_PASSWORD)
        assert answer is not None and answer.error_code == 0
        assert answer.session_lifetime_ms == REAUTH_MS  # KIP-368: the client learns it
        again = conn.login("admin", ADMIN_PASSWORD)  # re-authentication on the same connection
        assert again is not None and again.error_code == 0 and again.session_lifetime_ms == REAUTH_MS
        # requests go on until the session is older than its lifetime, then the node closes it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if conn.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse) is None:
                break
            threading.Event().wait(0.5)  # the pace of the poll, bounded by the deadline
        else:
            raise AssertionError("the session outlived connections_max_reauth_ms")
    finally:
        conn.close()
    # the native listener too: renewed by a new login, closed unanswered once past its lifetime
    host, port = split(secure.client(1))
    security = secure.security
    decoder = FrameDecoder(1 << 20)
    with socket.create_connection((host, port), timeout=30) as raw:
        with security.ssl_context().wrap_socket(raw, server_hostname=host) as sock:
            request_id = 0

            def exchange(op: str, **fields: Any) -> dict[str, Any]:
                nonlocal request_id
                request_id += 1
                return harness._exchange(sock, decoder, host, request_id, op, fields)

            for _ in range(2):  # a login, then a re-authentication on the same connection
                client = security.sasl_client()
                assert "mechanisms" in exchange("sasl_handshake", mechanism=client.mechanism)
                first = exchange("sasl_authenticate", auth_bytes=client.first_message())
                final = exchange("sasl_authenticate", auth_bytes=client.final_message(first["auth_bytes"]))
                assert final["complete"] and final["session_lifetime_ms"] == REAUTH_MS
            deadline = time.monotonic() + 60
            with pytest.raises((ConnectionError, ssl.SSLError)):
                while time.monotonic() < deadline:
                    assert "brokers" in exchange("metadata")
                    threading.Event().wait(0.5)  # the pace of the poll, bounded by the deadline


def test_a_kafka_client_logs_in_again_before_its_session_ends(secure):
    """librdkafka reads session_lifetime_ms and re-authenticates on its connection (KIP-368):
    producing across several lifetimes loses nothing and no session is cut off."""
    conf = load_properties(secure.material.client_properties)
    conf.update({"bootstrap.servers": secure.kafka(1), "message.timeout.ms": 30_000})
    def seen() -> tuple[float, float]:
        text = metrics(secure)
        return (counter(text, "raftlog_frame_errors_total", code="session_expired", listener="kafka"),
                counter(text, "raftlog_requests_total", listener="kafka", op="SaslAuthenticate", code="OK"))

    expired_before, logins_before = seen()
    producer = KProducer(conf)
    outcomes: list[Any] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline and sent < 200:  # bounded either way
        producer.produce("lifetimes", b"%d" % sent, on_delivery=lambda err, msg: outcomes.append(err))
        sent += 1
        assert producer.flush(30) == 0
        threading.Event().wait(0.25)  # the pace of the producer, bounded by the deadline
    assert outcomes == [None] * sent
    expired_after, logins_after = seen()
    assert expired_after == expired_before  # no session was cut off ...
    assert logins_after - logins_before >= 3 * 2  # ... because it logged in again (SCRAM: 2 rounds a login)

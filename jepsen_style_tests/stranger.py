"""The stranger: a client that breaks the rules (the ``stranger`` nemesis), and what it saw.

`Stranger.attack` (the nemesis op ``start-stranger``), against every running node:

1. *baseline*: is each node serving an ordinary client now? A fresh connection to its native
   client port (a ``metadata`` request, logged in as the run's admin on a secure cluster) and
   to its Kafka port (ApiVersions, answered before authentication as Kafka does), each
   answered within `PROBE_TIMEOUT_S`;
2. *lying batches*: as a producer the cluster lets write (plain cluster: anyone; secure: the
   run's admin, logged in with SASL PLAIN over TLS), raw Kafka Produce requests (v3, acks=all) to the leader of a side topic `STRANGER_TOPIC` carrying a
   RecordBatch v2 with a valid CRC that lies (`lying_batch`): whether each was ACCEPTED
   (error code 0) or refused, with the code;
3. *oversized frames*: one unauthenticated connection to each node's quorum, peer, native and
   Kafka port announcing a 2 GiB frame (in that port's framing: PySyncObj's native-endian
   int32 on the quorum port, a big-endian length elsewhere), then streaming at most
   `stream_bytes` of it; what the node did (closed the connection, stopped reading, or took
   it all) and how much its resident memory grew;
4. *idle connections*: `idle_per_listener` TCP connections to each node's Kafka and native
   client ports that then say nothing (issue 39 locked everyone out with 1,100);
5. *served*: the probes of 1. again, while everything of 3. and 4. is held open.

`Stranger.release` (``stop-stranger``) probes once more, counts the held connections the
nodes closed meanwhile, and closes them all. The checker (checker.py) makes a run invalid for
an accepted lying batch (``lying-batch-accepted``) or a node that served at baseline and not
while the stranger held on (``stranger-starved-clients``).

Every connection comes from `SOURCE_HOST` (another loopback address), so a node's
per-address limits apply to the stranger alone and not to the run's own clients on
127.0.0.1. Everything is bounded: connections (`idle_per_listener` per listener, one
oversized one per port), bytes (`stream_bytes` per connection), time (every connect, send
and probe has a timeout). Blocking (sockets, threads): call from a worker thread. Every
socket it opens is closed by `release` (or `close`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from crc32c import crc32c

from partition.batch import HEADER_BYTES, BatchBuilder

from .db import LocalCluster

__all__ = ["LYING_KINDS", "Stranger", "lying_batch", "STRANGER_TOPIC", "SOURCE_HOST"]

STRANGER_TOPIC = "jepsen-stranger"
SOURCE_HOST = "127.0.0.66"
IDLE_PER_LISTENER = 1100
STREAM_BYTES = 8 << 20
ANNOUNCED_BYTES = (1 << 31) - 1
CHUNK_BYTES = 64 << 10
CONNECT_TIMEOUT_S = 2.0
SEND_TIMEOUT_S = 2.0
PROBE_TIMEOUT_S = 10.0
PRODUCE_TIMEOUT_S = 15.0
CONSECUTIVE_CONNECT_FAILURES = 3  # then a listener is taken to refuse the stranger
LYING_KINDS = ("records-count", "offset-deltas")
_CRC_AT, _ATTRIBUTES_AT, _LAST_OFFSET_DELTA_AT, _COUNT_AT = 17, 21, 23, 57
_API_VERSIONS, _PRODUCE, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 0, 17, 36


def lying_batch(kind: str, *, timestamp_ms: int = 1_000) -> bytes:
    """A RecordBatch v2 (no producer id, uncompressed) with a valid CRC whose header lies:

    * ``records-count``: it claims 2**31-1 records (and a last offset delta to match) and
      holds one (issue 39: the partition's next offset jumped past 2**31);
    * ``offset-deltas``: two records, the second with offset delta 5 where the header's last
      offset delta says 1.
    Raises ValueError for another kind."""
    builder = BatchBuilder()
    if kind == "records-count":
        builder.append(b"stranger", timestamp_ms=timestamp_ms)
        out = bytearray(builder.build())
        out[_LAST_OFFSET_DELTA_AT:_LAST_OFFSET_DELTA_AT + 4] = struct.pack(">i", (1 << 31) - 2)
        out[_COUNT_AT:_COUNT_AT + 4] = struct.pack(">i", (1 << 31) - 1)
    elif kind == "offset-deltas":
        builder.append(b"stranger-1", timestamp_ms=timestamp_ms)
        builder.append(b"stranger-2", timestamp_ms=timestamp_ms)
        out = bytearray(builder.build())
        # Record 2: its length varint, attributes (1 byte), timestamp delta (0: one byte),
        # then the offset delta, zigzag 1 = 0x02, made zigzag 5 = 0x0a.
        length, used = _varint(out, HEADER_BYTES)
        second = HEADER_BYTES + used + length
        _, used2 = _varint(out, second)
        at = second + used2 + 1 + 1
        if out[at] != 0x02:
            raise AssertionError(f"unexpected record layout: offset delta byte {out[at]:#x}")
        out[at] = 0x0A
    else:
        raise ValueError(f"unknown lying batch {kind!r}; known: {', '.join(LYING_KINDS)}")
    out[_CRC_AT:_CRC_AT + 4] = struct.pack(">I", crc32c(bytes(out[_ATTRIBUTES_AT:])))
    return bytes(out)


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, bytes used)."""
    shift = raw = 0
    for used in range(1, 6):
        b = buf[pos + used - 1]
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), used
        shift += 7
    raise ValueError("varint too long")


class Stranger:
    """The attack on `db`'s running nodes and what it held open (module docstring).

    Concurrency: one caller (the nemesis serialises its ops); the attack's own parallel
    work runs in a bounded thread pool."""

    def __init__(self, db: LocalCluster, *, idle_per_listener: int = IDLE_PER_LISTENER,
                 stream_bytes: int = STREAM_BYTES, source_host: str = SOURCE_HOST):
        self.db = db
        self.idle_per_listener = idle_per_listener
        self.stream_bytes = stream_bytes
        self.source_host = source_host
        self.held: list[socket.socket] = []
        self.baseline: dict[str, dict[str, bool]] = {}

    # ------------------------------------------------------------------ the attack

    def attack(self) -> dict[str, Any]:
        """Steps 1-5 of the module docstring; the ok value of ``start-stranger``."""
        nodes = self.db.running()
        self.baseline = self.served(nodes)
        out: dict[str, Any] = {"nodes": nodes, "baseline": self.baseline}
        out["lying"] = self._lying()  # first: what follows may lock the producer out too
        rss_before = {n: _rss_bytes(self.db.pid(n)) for n in nodes}
        out["oversized"] = self._oversized(nodes)
        out["rss_growth_bytes"] = {str(n): _growth(rss_before[n], _rss_bytes(self.db.pid(n))) for n in nodes}
        out["idle"] = {str(n): self._open_idle(n) for n in nodes}
        out["served"] = self.served(nodes)
        return out

    def release(self) -> dict[str, Any]:
        """Probe again, then close what the attack held; the ok value of ``stop-stranger``."""
        nodes = [int(n) for n in self.baseline if int(n) in self.db.running()]
        served = self.served(nodes)
        closed_by_node = sum(1 for s in self.held if _closed_by_peer(s))
        held = len(self.held)
        self.close()
        return {"served": served, "held": held, "closed_by_node": closed_by_node}

    def close(self) -> None:
        for s in self.held:
            with contextlib.suppress(OSError):
                s.close()
        self.held.clear()

    # ------------------------------------------------------------------ probes

    def served(self, nodes: Iterable[int]) -> dict[str, dict[str, bool]]:
        """Per node: did a fresh ordinary client get an answer on the native client port
        and on the Kafka port within PROBE_TIMEOUT_S?"""
        nodes = list(nodes)
        jobs: dict[tuple[int, str], Callable[[], bool]] = {}
        for n in nodes:
            jobs[(n, "client")] = lambda n=n: self._probe_native(n)
            jobs[(n, "kafka")] = lambda n=n: self._probe_kafka(n)
        results = _in_threads(jobs)
        return {str(n): {k: bool(results[(n, k)]) for k in ("client", "kafka")} for n in nodes}

    def _probe_native(self, node: int) -> bool:
        from raftlog.base.errors import RaftlogError, RequestTimedOutError
        from raftlog.client import Admin
        from raftlog.client.errors import NoBrokerAvailableError

        timeout_ms = int(PROBE_TIMEOUT_S * 1000)
        try:
            with Admin([self.db.client_address(node)], request_timeout_ms=timeout_ms,
                       security=self.db.client_security) as admin:
                admin.request({"op": "metadata", "topics": []}, timeout_ms=timeout_ms)
        except (RequestTimedOutError, NoBrokerAvailableError, OSError):
            return False
        except RaftlogError:
            return True  # an answer, if an error: served
        return True

    def _probe_kafka(self, node: int) -> bool:
        try:
            with self._kafka_connection(node, source=False) as sock:
                _kafka_call(sock, _API_VERSIONS, 0, 1, b"")
        except (OSError, ValueError):
            return False
        return True

    # ------------------------------------------------------------------ idle connections

    def _connect(self, address: tuple[str, int]) -> socket.socket:
        return socket.create_connection(address, timeout=CONNECT_TIMEOUT_S, source_address=(self.source_host, 0))

    def _open_idle(self, node: int) -> dict[str, dict[str, int]]:
        out = {}
        for kind, address in (("client", self.db.client_address(node)), ("kafka", self.db.kafka_address(node))):
            host, _, port = address.rpartition(":")
            opened = failed = in_a_row = 0
            while opened + failed < self.idle_per_listener and in_a_row < CONSECUTIVE_CONNECT_FAILURES:
                try:
                    self.held.append(self._connect((host, int(port))))
                    opened += 1
                    in_a_row = 0
                except OSError:
                    failed += 1
                    in_a_row += 1
            out[kind] = {"opened": opened, "failed": failed}
        return out

    # ------------------------------------------------------------------ oversized frames

    def _oversized(self, nodes: list[int]) -> list[dict[str, Any]]:
        jobs: dict[tuple[int, str], Callable[[], dict[str, Any]]] = {}
        for n in nodes:
            ports = self.db.ports[n]
            for kind, port in (("quorum", ports.quorum), ("peer", ports.peer), ("client", ports.client),
                               ("kafka", ports.kafka)):
                jobs[(n, kind)] = lambda n=n, kind=kind, port=port: self._stream(n, kind, port)
        results = _in_threads(jobs)
        return [{"node": n, "port": kind, **results[(n, kind)]} for n, kind in jobs]

    def _stream(self, node: int, kind: str, port: int) -> dict[str, Any]:
        """Announce a 2 GiB frame, stream up to stream_bytes of it: what the node did."""
        # PySyncObj's TCP framing is struct 'i' (native order); ours and Kafka's are big-endian.
        header = struct.pack("=i" if kind == "quorum" else ">i", ANNOUNCED_BYTES)
        try:
            sock = self._connect((self.db.host, port))
        except OSError as exc:
            return {"sent_bytes": 0, "outcome": "refused", "error": type(exc).__name__}
        self.held.append(sock)
        sock.settimeout(SEND_TIMEOUT_S)
        chunk = bytes(CHUNK_BYTES)
        sent = 0
        try:
            sock.sendall(header)
            while sent < self.stream_bytes:
                sock.sendall(chunk)
                sent += len(chunk)
        except TimeoutError:
            return {"sent_bytes": sent, "outcome": "stopped-reading"}
        except OSError as exc:
            return {"sent_bytes": sent, "outcome": "closed", "error": type(exc).__name__}
        return {"sent_bytes": sent, "outcome": "closed" if _closed_by_peer(sock) else "took-it-all"}

    # ------------------------------------------------------------------ lying batches

    def _lying(self) -> list[dict[str, Any]]:
        try:
            leader = self._side_topic_leader()
        except Exception as exc:  # noqa: BLE001 — recorded in the history, the attack goes on
            return [{"kind": k, "skipped": f"no leader for {STRANGER_TOPIC}: {type(exc).__name__}: {exc}"}
                    for k in LYING_KINDS]
        out = []
        for i, kind in enumerate(LYING_KINDS):
            entry: dict[str, Any] = {"kind": kind, "node": leader}
            try:
                with self._kafka_connection(leader, source=True) as sock:
                    _kafka_login(sock, self.db.client_security)
                    code, base_offset = _produce(sock, i + 2, STRANGER_TOPIC, 0, lying_batch(kind))
                entry.update(error_code=code, base_offset=base_offset, accepted=code == 0)
            except (OSError, ValueError) as exc:
                entry.update(accepted=False, error=type(exc).__name__)  # no answer: not accepted
            out.append(entry)
        return out

    def _side_topic_leader(self) -> int:
        from raftlog.base.errors import TopicAlreadyExistsError
        from raftlog.client import Admin

        running = self.db.running()
        with Admin([self.db.client_address(n) for n in running], request_timeout_ms=10_000,
                   security=self.db.client_security) as admin:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topic(STRANGER_TOPIC, 1, min(3, len(self.db.node_ids)))
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while True:
                leader = admin.describe_topics([STRANGER_TOPIC])[STRANGER_TOPIC].partitions[0].leader
                if leader is not None and leader in running:
                    return int(leader)
                if time.monotonic() > deadline:
                    raise TimeoutError("no leader")
                time.sleep(0.1)  # poll interval of a deadline-bounded wait

    @contextlib.contextmanager
    def _kafka_connection(self, node: int, *, source: bool) -> Any:
        host, _, port = self.db.kafka_address(node).rpartition(":")
        source_address = (self.source_host, 0) if source else None
        sock: Any = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S, source_address=source_address)
        try:
            context = None if self.db.client_security is None else self.db.client_security.ssl_context()
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
            yield sock
        finally:
            with contextlib.suppress(OSError):
                sock.close()


# ---------------------------------------------------------------------- helpers


def _in_threads(jobs: dict[Any, Callable[[], Any]]) -> dict[Any, Any]:
    if not jobs:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(jobs))) as pool:
        futures = {key: pool.submit(fn) for key, fn in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


def _closed_by_peer(sock: socket.socket) -> bool:
    """True if the node closed (or reset) this connection; what it sent before (an error
    answer) is read and dropped, 1 MiB at most."""
    try:
        sock.setblocking(False)
        for _ in range(16):
            if not sock.recv(CHUNK_BYTES):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


def _rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _growth(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


def _exact(sock: Any, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the node")
        data += chunk
    return bytes(data)


def _kafka_call(sock: Any, api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """One Kafka request (header v1, client id "stranger"); the response body after its
    correlation id. Raises ValueError on a mismatched answer, OSError on a lost connection."""
    client_id = b"stranger"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _exact(sock, 4))
    if not 4 <= size <= 1 << 20:
        raise ValueError(f"answer of {size} bytes")
    frame = _exact(sock, size)
    if struct.unpack(">i", frame[:4])[0] != correlation_id:
        raise ValueError("answer to another request")
    return frame[4:]


def _kafka_login(sock: Any, security: Any) -> None:
    """SASL PLAIN (over the TLS `sock` already is) as the run's admin, when the cluster has
    logins; nothing otherwise. Raises ValueError when the node refuses."""
    if security is None or not getattr(security, "mechanism", None):
        return
    mechanism = b"PLAIN"
    answer = _kafka_call(sock, _SASL_HANDSHAKE, 1, 100, struct.pack(">h", len(mechanism)) + mechanism)
    if struct.unpack_from(">h", answer)[0]:
        raise ValueError(f"SaslHandshake refused: error code {struct.unpack_from('>h', answer)[0]}")
    token = b"\0" + security.username.encode() + b"\0" + security.password.encode()
    answer = _kafka_call(sock, _SASL_AUTHENTICATE, 0, 101, struct.pack(">i", len(token)) + token)
    if struct.unpack_from(">h", answer)[0]:
        raise ValueError(f"SaslAuthenticate refused: error code {struct.unpack_from('>h', answer)[0]}")


def _produce(sock: Any, correlation_id: int, topic: str, partition: int, records: bytes) -> tuple[int, int]:
    """Produce v3 (acks=all) of `records` to one partition: (error code, base offset)."""
    name = topic.encode()
    body = (struct.pack(">hhi", -1, -1, int(PRODUCE_TIMEOUT_S * 1000))  # null transactional id, acks
            + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records)
    answer = _kafka_call(sock, _PRODUCE, 3, correlation_id, body)
    # [topics: name, [partition, error_code, base_offset, log_append_time]] throttle_time_ms
    pos = 4
    (name_len,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + name_len + 4
    _partition, code, base_offset = struct.unpack_from(">ihq", answer, pos)
    return code, base_offset


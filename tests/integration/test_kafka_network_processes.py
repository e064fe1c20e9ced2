"""A node with Kafka network worker processes (`kafka_network_processes`, issue 46;
raftlog/node/kafka/workers.py): real clients (confluent-kafka, kafka-python, kcat) produce,
consume, use a group and a transaction through the workers; the node's connection limit
holds for connections the workers accepted; a worker SIGKILLed under load loses nothing
acked and comes back; a worker serves Produce on a plaintext connection (request order kept
with the requests the main serves, acks=0, a lying CRC, the topic's rules); a SASL_SSL node with ACLs logs in and refuses through its workers; a
connection goes to the main at its first Fetch (answers in order, consumers of both clients
read while a producer writes, clients gone mid-hand-over leave the counts whole); a node
SIGKILLed leaves no worker behind. The other Kafka test files run with workers on
by default (kafka_network_processes -1: one worker per node on two CPUs; docs/explanations/performance.md)."""

from __future__ import annotations

import os
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from raftlog.base.client_properties import load_properties

import node_harness as harness

pytestmark = pytest.mark.cluster

WORKERS = 2
ADMIN_PASSWORD = "workers-admin-Pw-" + "51c2ad"
CAROL_PASSWORD = "workers-carol-Pw-" + "0be4f7"


def worker_pids(node_pid: int) -> set[int]:
    """The node process's children: its Kafka network workers."""
    pids: set[int] = set()
    try:
        for task in Path(f"/proc/{node_pid}/task").iterdir():
            pids.update(int(p) for p in (task / "children").read_text().split())
    except OSError:
        return set()
    return {p for p in pids if b"network_worker" in _cmdline(p)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def metric(node: harness.NodeCluster, name: str) -> float:
    text = urllib.request.urlopen(f"http://{node.http(1)}/metrics", timeout=10).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")
              or line.startswith(name + "{")]
    return sum(values)


@pytest.fixture(scope="module", autouse=True)
def _own_worker_count() -> Iterator[None]:
    """The environment beats a node's config file: this module sets its own counts."""
    saved = os.environ.pop("RAFTLOG_KAFKA_NETWORK_PROCESSES", None)
    yield
    if saved is not None:
        os.environ["RAFTLOG_KAFKA_NETWORK_PROCESSES"] = saved


@pytest.fixture(scope="module")
def node(_own_worker_count: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    settings = {**harness.TEST_SETTINGS, "kafka_network_processes": WORKERS, "max_connections": 40}
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-workers"), size=1, settings=settings) as cluster:
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        cluster.wait_for(lambda: len(worker_pids(cluster.processes[1].pid)) == WORKERS, 60, "the workers")
        yield cluster


def create_topic(node: harness.NodeCluster, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": node.kafka(1)})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    node.wait_for(lambda: all(p.leader >= 0 for p in admin.list_topics(name, timeout=10).topics[name].partitions.values())
                  and admin.list_topics(name, timeout=10).topics[name].error is None, 30, f"leaders of {name}")


def produce(bootstrap: str, topic: str, values: list[bytes], **conf: Any) -> None:
    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000, **conf})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(60) == 0
    assert failed == []


def consume_all(bootstrap: str, topic: str, count: int, partitions: int = 1, want: set[bytes] | None = None,
                **conf: Any) -> list[bytes]:
    """The first `count` records of the topic (or, with `want`, until every one of those
    came: retried produces may have written some twice)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while (len(got) < count if want is None else not want <= set(got)) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_workers_run_and_clients_produce_and_consume(node):
    assert metric(node, "raftlog_kafka_network_processes") == WORKERS
    create_topic(node, "w-basic")
    values = [f"v{i}".encode() for i in range(500)]
    produce(node.kafka(1), "w-basic", values)
    assert sorted(consume_all(node.kafka(1), "w-basic", 500)) == sorted(values)
    # kcat and kafka-python through the same workers
    if shutil.which("kcat"):
        out = subprocess.run(["kcat", "-C", "-b", node.kafka(1), "-t", "w-basic", "-e", "-o", "beginning", "-q"],
                             capture_output=True, timeout=60)
        assert out.returncode == 0 and len(out.stdout.splitlines()) == 500
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP

    producer = KafkaProducer(bootstrap_servers=node.kafka(1), acks="all")
    producer.send("w-basic", b"from-kafka-python").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=node.kafka(1), enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([KTP("w-basic", 0)])
    consumer.seek_to_beginning()
    assert b"from-kafka-python" in [m.value for m in consumer]
    consumer.close()


def test_group_and_transaction_through_workers(node):
    create_topic(node, "w-txn")
    producer = Producer({"bootstrap.servers": node.kafka(1), "transactional.id": "w-tx-1"})
    deadline = time.monotonic() + 60
    while True:  # the first coordinator lookup on a fresh node is retriable
        try:
            producer.init_transactions(30)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    producer.begin_transaction()
    for i in range(10):
        producer.produce("w-txn", f"t{i}".encode())
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": node.kafka(1), "group.id": "w-group", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe(["w-txn"])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())

    def commit() -> int | None:
        try:
            consumer.commit(asynchronous=False)
            return consumer.committed([TopicPartition("w-txn", 0)], timeout=10)[0].offset
        except KafkaException:  # the group coordinator's first load is retriable
            return None

    try:
        committed = node.wait_for(commit, max(1.0, deadline - time.monotonic()), "the group's first commit")
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"t{i}".encode() for i in range(10))
    assert committed is not None and committed >= 10


def test_max_connections_holds_for_worker_connections(node):
    host, port = node.kafka(1).rsplit(":", 1)
    sockets = []
    try:
        for _ in range(60):  # max_connections 40 over the client and Kafka listeners
            sockets.append(socket.create_connection((host, int(port)), timeout=10))
        # The node closes those over the limit at once (a FIN or a reset); the admitted wait
        # for a request.
        open_ = list(sockets)
        closed = 0
        deadline = time.monotonic() + 60
        while closed < 20 and time.monotonic() < deadline:
            readable, _, _ = select.select(open_, [], [], 0.5)
            for s in readable:
                try:
                    ended = s.recv(1) == b""
                except ConnectionResetError:
                    ended = True
                if ended:
                    closed += 1
                    open_.remove(s)
        assert closed >= 20
        assert open_, "every connection closed: none admitted"
        node.wait_for(lambda: metric(node, "raftlog_connections_refused_total") >= 20, 30, "refusals counted")
    finally:
        for s in sockets:
            s.close()
    node.wait_for(lambda: metric(node, 'raftlog_connections{listener="kafka"}') <= 2, 30, "connections released")
    produce(node.kafka(1), "w-basic", [b"after-the-flood"])


def test_worker_sigkilled_under_load_loses_nothing_acked_and_comes_back(node):
    create_topic(node, "w-kill", partitions=3)
    before = worker_pids(node.processes[1].pid)
    assert len(before) == WORKERS
    # The node has run longer than trio's idle threads live (10 s): no worker died with one.
    assert metric(node, "raftlog_kafka_network_process_restarts_total") == 0
    acked: list[bytes] = []
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": node.kafka(1), "acks": "all", "message.timeout.ms": 60000,
                             "linger.ms": 5})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(msg.value())

        i = 0
        while not stop.is_set():
            producer.produce("w-kill", f"k{i}".encode(), on_delivery=delivered)
            producer.poll(0)
            i += 1
            if i % 200 == 0:
                producer.flush(30)
        producer.flush(60)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    node.wait_for(lambda: len(acked) >= 500, 60, "acked records before the kill")
    for pid in before:
        os.kill(pid, 9)
    count = len(acked)
    node.wait_for(lambda: len(acked) >= count + 500, 90, "acked records after the kill")
    stop.set()
    thread.join(120)
    assert not thread.is_alive()
    node.wait_for(lambda: len(worker_pids(node.processes[1].pid) - before) == WORKERS, 60, "the workers back")
    assert metric(node, "raftlog_kafka_network_process_restarts_total") == WORKERS
    got = set(consume_all(node.kafka(1), "w-kill", len(acked), partitions=3, want=set(acked)))
    assert set(acked) <= got


def test_secure_node_logs_in_and_refuses_through_workers(tmp_path):
    users = {("carol", "SCRAM-SHA-512"): CAROL_PASSWORD}
    with harness.secure_cluster(tmp_path, ADMIN_PASSWORD, users=users,
                                settings={"kafka_network_processes": 1}) as secure:
        secure.wait_for(lambda: len(worker_pids(secure.processes[1].pid)) == 1, 60, "the worker")
        conf = load_properties(secure.material.client_properties)
        conf.update({"bootstrap.servers": secure.kafka(1), "sasl.username": "admin",
                     "sasl.password": ADMIN_PASSWORD, "sasl.mechanism": "SCRAM-SHA-512"})
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("w-secure", 1, 1)])["w-secure"].result(30)
        secure.wait_for(lambda: admin.list_topics("w-secure", timeout=10).topics["w-secure"].partitions[0].leader >= 0,
                        30, "a leader")
        produce(secure.kafka(1), "w-secure", [b"s1", b"s2"], **conf)
        assert sorted(consume_all(secure.kafka(1), "w-secure", 2, **conf)) == [b"s1", b"s2"]
        # A wrong password gets nothing (SASL runs in the main, behind the worker).
        errors: list[int] = []
        bad = Producer({**conf, "sasl.password": "wrong", "message.timeout.ms": 5000,
                        "error_cb": lambda e: errors.append(e.code())})
        bad.produce("w-secure", b"nope")
        bad.flush(10)
        assert KafkaError._AUTHENTICATION in errors
        # An ACL refusal: carol logs in but may not write the topic.
        refused: list[Any] = []
        carol = Producer({**conf, "sasl.username": "carol", "sasl.password": CAROL_PASSWORD,
                          "message.timeout.ms": 15000})
        carol.produce("w-secure", b"c1", on_delivery=lambda err, msg: refused.append(err))
        carol.flush(30)
        assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


forge = harness.load_module("batch_forge", Path(__file__).parent.parent / "unit" / "partition" / "batch_forge.py")
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87


def _produce_request(topic: str, records: bytes, acks: int, correlation_id: int, version: int = 9) -> bytes:
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](transactional_id=None, acks=acks, timeout_ms=10_000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=records)])])
    request.with_header(correlation_id=correlation_id, client_id="worker-fast-test")
    return bytes(request.encode(version=version, header=True, framed=True))


def _other_request(message: Any, correlation_id: int, version: int) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id="worker-fast-test")
    return bytes(message.encode(version=version, header=True, framed=True))


def _frames(sock: socket.socket, count: int) -> list[bytes]:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    return [exact(struct.unpack(">i", exact(4))[0]) for _ in range(count)]


def _produce_answer(frame: bytes, version: int) -> Any:
    [t] = ProduceResponse.decode(frame[5 if version >= 9 else 4:], version=version).responses
    [p] = t.partition_responses
    return p


def _wait_for_the_fast_path(node: harness.NodeCluster, topic: str, connections: int = 1) -> None:
    """Until a new connection's produce is a worker's call (a worker loads its Produce path
    after it starts accepting: the connections before are carried as bytes); with
    `connections`, until that many in a row are (so each worker has loaded it, very likely)."""
    host, port = node.kafka(1).rsplit(":", 1)

    def served_by_a_worker() -> bool:
        calls = metric(node, "raftlog_kafka_network_produce_calls_total")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(_produce_request(topic, forge.batch(forge.values(1)), 1, 1))
            _frames(sock, 1)
        return metric(node, "raftlog_kafka_network_produce_calls_total") > calls

    node.wait_for(lambda: all(served_by_a_worker() for _ in range(connections)), 60, "a worker's produce call")


def test_produce_is_served_by_the_worker_in_request_order(node):
    """Produce requests pipelined between other APIs on one connection: the worker serves the
    produces (its calls are counted) and the main the rest, answered in request order; an
    acks=0 produce gets no answer and appends in its place; a batch whose CRC lies is refused
    with CORRUPT_MESSAGE as without workers, and the connection goes on."""
    create_topic(node, "w-fast")
    _wait_for_the_fast_path(node, "w-fast")
    calls = metric(node, "raftlog_kafka_network_produce_calls_total")
    corrupt = bytearray(forge.batch(forge.values(1)))
    corrupt[-1] ^= 1  # a record byte: the CRC-32C no longer matches
    host, port = node.kafka(1).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join([
            _other_request(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 1, 12),
            _produce_request("w-fast", forge.batch(forge.values(3)), 1, 2),
            _other_request(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3, 3),
            _produce_request("w-fast", forge.batch(forge.values(2, start=10)), 0, 4),
            _produce_request("w-fast", forge.batch(forge.values(1, start=20)), -1, 5, version=3),
            _produce_request("w-fast", bytes(corrupt), 1, 6),
            _other_request(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 7, 12),
        ]))
        frames = _frames(sock, 6)
        assert [struct.unpack(">i", f[:4])[0] for f in frames] == [1, 2, 3, 5, 6, 7]
        first, after_acks0, lying = (_produce_answer(frames[1], 9), _produce_answer(frames[3], 3),
                                     _produce_answer(frames[4], 9))
        base = first.base_offset  # after the probes of _wait_for_the_fast_path
        assert first.error_code == 0
        assert (after_acks0.error_code, after_acks0.base_offset) == (0, base + 5)  # acks=0 took base+3, +4
        assert lying.error_code == CORRUPT_MESSAGE
        # the connection goes on
        sock.sendall(_produce_request("w-fast", forge.batch(forge.values(1, start=30)), 1, 8))
        [frame] = _frames(sock, 1)
        assert (_produce_answer(frame, 9).error_code, _produce_answer(frame, 9).base_offset) == (0, base + 6)
    assert metric(node, "raftlog_kafka_network_produce_calls_total") >= calls + 5
    assert len(consume_all(node.kafka(1), "w-fast", base + 7)) == base + 7


def test_a_frame_over_the_link_chunk_hands_the_connection_to_the_main(node):
    """A produce larger than the link's chunk (256 KiB) is not a worker's call: the rest of
    the connection goes to the main as bytes, which serves it (answers in order)."""
    create_topic(node, "w-big")
    _wait_for_the_fast_path(node, "w-big")
    big = forge.batch([forge.record(0, value=b"x" * (300 << 10))])
    host, port = node.kafka(1).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(_produce_request("w-big", forge.batch(forge.values(1)), 1, 1)
                     + _produce_request("w-big", big, 1, 2)
                     + _produce_request("w-big", forge.batch(forge.values(1)), 1, 3))
        frames = _frames(sock, 3)
    assert [struct.unpack(">i", f[:4])[0] for f in frames] == [1, 2, 3]
    small, large, after = (_produce_answer(f, 9) for f in frames)
    assert (small.error_code, large.error_code, after.error_code) == (0, 0, 0)
    assert after.base_offset == large.base_offset + 1 == small.base_offset + 2


def test_topic_rules_hold_for_batches_a_worker_checked(node):
    """The worker checks what needs no topic; the leader still applies the topic's:
    max.message.bytes (MESSAGE_TOO_LARGE) and, on a compacted topic, keys (INVALID_RECORD)."""
    admin = AdminClient({"bootstrap.servers": node.kafka(1)})
    for name, config in (("w-small", {"max.message.bytes": "200"}), ("w-compact", {"cleanup.policy": "compact"})):
        admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(30)
        node.wait_for(lambda: admin.list_topics(name, timeout=10).topics[name].partitions[0].leader >= 0,
                      30, f"a leader of {name}")
    _wait_for_the_fast_path(node, "w-small")
    host, port = node.kafka(1).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(_produce_request("w-small", forge.batch(forge.values(40)), 1, 1)
                     + _produce_request("w-compact", forge.batch(forge.values(1)), 1, 2)
                     + _produce_request("w-small", forge.batch(forge.values(1)), 1, 3))
        too_large, keyless, fine = (_produce_answer(f, 9) for f in _frames(sock, 3))
    assert too_large.error_code == MESSAGE_TOO_LARGE
    assert keyless.error_code == INVALID_RECORD
    assert fine.error_code == 0


def _fetch_request(topic: str, correlation_id: int, offset: int = 0) -> bytes:
    T, P = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
    return _other_request(FetchRequest[12](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[T(topic=topic, partitions=[P(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
                                             current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)])]),
        correlation_id, 12)


def _api_versions(correlation_id: int) -> bytes:
    return _other_request(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                          correlation_id, 3)


def test_a_connection_goes_to_the_main_at_its_first_fetch_in_request_order(node):
    """Pipelined requests on one connection: ApiVersions, Metadata and a Produce through the
    worker (the produce is its call), then a Fetch: the worker hands the socket to the main
    (counted), which answers the Fetch and everything after, in request order, records and all."""
    create_topic(node, "w-hand")  # the mark goes first: every Fetch here reads it at offset 0
    create_topic(node, "w-hand-probe")
    _wait_for_the_fast_path(node, "w-hand-probe", connections=8)
    handovers = metric(node, "raftlog_kafka_network_handovers_total")
    calls = metric(node, "raftlog_kafka_network_produce_calls_total")
    mark = forge.batch([forge.record(0, value=b"handover-mark")])
    host, port = node.kafka(1).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join([
            _api_versions(1),
            _other_request(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 2, 12),
            _produce_request("w-hand", mark, -1, 3),  # acks=all: the Fetch after it reads it
            _fetch_request("w-hand", 4),
            _other_request(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 5, 12),
            _produce_request("w-hand", forge.batch(forge.values(1)), 1, 6),
            _fetch_request("w-hand", 7),
        ]))
        frames = _frames(sock, 7)
        assert [struct.unpack(">i", f[:4])[0] for f in frames] == [1, 2, 3, 4, 5, 6, 7]
        first, second = _produce_answer(frames[2], 9), _produce_answer(frames[5], 9)
        assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 1)
        assert b"handover-mark" in frames[3] and b"handover-mark" in frames[6]
        # the connection goes on at the main
        sock.sendall(_produce_request("w-hand", forge.batch(forge.values(1)), 1, 8) + _fetch_request("w-hand", 9))
        after, fetched = _frames(sock, 2)
        assert _produce_answer(after, 9).base_offset == first.base_offset + 2
        assert struct.unpack(">i", fetched[:4])[0] == 9 and b"handover-mark" in fetched
    assert metric(node, "raftlog_kafka_network_handovers_total") == handovers + 1
    assert metric(node, "raftlog_kafka_network_produce_calls_total") == calls + 1  # the one before the Fetch


def test_connections_whose_first_request_is_a_fetch(node):
    """A Fetch as a connection's first request: the worker hands the socket over at once (it
    may reach the main before the link's OPEN of the connection); each is answered."""
    create_topic(node, "w-first")
    _wait_for_the_fast_path(node, "w-first", connections=8)
    host, port = node.kafka(1).rsplit(":", 1)
    for index in range(20):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(_fetch_request("w-first", index) + _api_versions(100 + index))
            assert [struct.unpack(">i", f[:4])[0] for f in _frames(sock, 2)] == [index, 100 + index]


def test_consumers_read_while_a_producer_writes_through_the_workers(node):
    """confluent-kafka's and kafka-python's consumers read a topic while confluent-kafka's
    producer writes it, on one node with workers: the consumers' connections go to the main
    at their first Fetch; every record read."""
    create_topic(node, "w-live", partitions=3)
    _wait_for_the_fast_path(node, "w-live", connections=8)
    handovers = metric(node, "raftlog_kafka_network_handovers_total")
    values = [f"live{i}".encode() for i in range(3000)]
    failures: list[BaseException] = []

    def write() -> None:
        try:
            produce(node.kafka(1), "w-live", values, **{"linger.ms": 5})
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        by_confluent = consume_all(node.kafka(1), "w-live", 0, partitions=3, want=set(values))
        consumer = KafkaConsumer(bootstrap_servers=node.kafka(1), enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=90_000)
        try:
            consumer.assign([KafkaTopicPartition("w-live", p) for p in range(3)])
            by_kafka_python: set[bytes] = set()
            for message in consumer:
                by_kafka_python.add(message.value)
                if set(values) <= by_kafka_python:
                    break
        finally:
            consumer.close()
    finally:
        writer.join(120)
    assert not writer.is_alive() and failures == []
    assert set(values) <= set(by_confluent)
    assert set(values) <= by_kafka_python
    assert metric(node, "raftlog_kafka_network_handovers_total") >= handovers + 2


def test_clients_gone_during_the_hand_over_are_released(node):
    """Clients that close right after their Fetch (before, during or after the hand-over):
    the node's count of open connections goes back, and the gate's counts stay whole: as many
    connections as before are admitted again, none refused."""
    create_topic(node, "w-gone")
    _wait_for_the_fast_path(node, "w-gone")
    host, port = node.kafka(1).rsplit(":", 1)
    open_before = metric(node, 'raftlog_connections{listener="kafka"}')
    for i in range(30):
        sock = socket.create_connection((host, int(port)), timeout=30)
        request = _produce_request("w-gone", forge.batch(forge.values(1)), 1, 1) + _fetch_request("w-gone", 2)
        if i % 3 == 2:  # some wait for the answers first: the hand-over is done
            sock.sendall(request)
            _frames(sock, 2)
        else:
            sock.sendall(request if i % 3 else request[:-3])  # one sends part of its Fetch only
        sock.close()
    node.wait_for(lambda: metric(node, 'raftlog_connections{listener="kafka"}') <= open_before, 60,
                  "connections released")
    refused = metric(node, "raftlog_connections_refused_total")
    sockets = [socket.create_connection((host, int(port)), timeout=30) for _ in range(30)]
    try:
        for index, sock in enumerate(sockets):
            sock.sendall(_api_versions(index))
        for index, sock in enumerate(sockets):
            assert struct.unpack(">i", _frames(sock, 1)[0][:4])[0] == index
    finally:
        for sock in sockets:
            sock.close()
    assert metric(node, "raftlog_connections_refused_total") == refused


def test_node_sigkilled_leaves_no_worker(node):
    pids = worker_pids(node.processes[1].pid)
    assert len(pids) == WORKERS
    node.kill(1)
    node.wait_for(lambda: not any(alive(p) for p in pids), 30, "the workers gone with the node")

"""Client quotas (issue 41) through Kafka's wire on a real node: AlterClientQuotas stores them in
the metadata log (a user, a client id, the user default), DescribeClientQuotas reads them back
with Kafka's filters, removal and bad entries answer as Kafka's do, and the quotas outlive a
restart of the node (they are in the metadata log, not in memory); `raftlog quotas` drives the
same; a producer's, a consumer's and a request-time quota each throttle their client, and only it."""

from __future__ import annotations

from collections.abc import Iterator

import json
import os
import time
import urllib.request

import pytest
from click.testing import CliRunner
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

import node_harness as harness
from raftlog.cli.main import main as cli
from test_kafka_bad_input import connect
from test_kafka_unsupported import call

pytestmark = pytest.mark.cluster

INVALID_REQUEST = 42
INVALID_CONFIG = 40
A, D = AlterClientQuotasRequest, DescribeClientQuotasRequest


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("quotas"), size=1) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


def alter(sock, entries, correlation_id: int, validate_only: bool = False, version: int = 1):
    request = A[version](validate_only=validate_only, entries=[A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.EntryData.OpData(key=k, value=v, remove=v is None) if v is not None
             else A.EntryData.OpData(key=k, value=0.0, remove=True) for k, v in ops])
        for entity, ops in entries])
    answer = call(sock, request, version, correlation_id)
    return [(e.error_code, [(x.entity_type, x.entity_name) for x in e.entity]) for e in answer.entries]


def describe(sock, components, correlation_id: int, strict: bool = False, version: int = 1):
    answer = call(sock, D[version](strict=strict, components=[
        D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components]), version, correlation_id)
    assert answer.error_code == 0, answer
    return {tuple((x.entity_type, x.entity_name) for x in e.entity): {v.key: v.value for v in e.values}
            for e in answer.entries}


def test_quotas_are_stored_described_and_removed(node: harness.NodeCluster) -> None:
    with connect(node) as sock:
        assert alter(sock, [
            ([("user", "alice")], [("producer_byte_rate", 1048576.0), ("consumer_byte_rate", 2e6)]),
            ([("client-id", "app")], [("request_percentage", 50.0)]),
            ([("user", None)], [("producer_byte_rate", 5e6)]),  # --entity-default
            ([("user", "bob"), ("client-id", "app")], [("producer_byte_rate", 100.0)]),
        ], 1) == [(0, [("user", "alice")]), (0, [("client-id", "app")]), (0, [("user", None)]),
                  (0, [("user", "bob"), ("client-id", "app")])]
        everything = describe(sock, [], 2)
        assert everything == {
            (("client-id", "app"),): {"request_percentage": 50.0},
            (("user", "alice"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2e6},
            (("user", None),): {"producer_byte_rate": 5e6},
            (("user", "bob"), ("client-id", "app")): {"producer_byte_rate": 100.0},
        }
        assert describe(sock, [("user", 0, "alice")], 3) == {(("user", "alice"),): everything[(("user", "alice"),)]}
        assert set(describe(sock, [("user", 1, None)], 4)) == {(("user", None),)}
        assert set(describe(sock, [("user", 2, None)], 5)) == {
            (("user", "alice"),), (("user", None),), (("user", "bob"), ("client-id", "app"))}
        assert set(describe(sock, [("user", 2, None)], 6, strict=True)) == {(("user", "alice"),), (("user", None),)}
        # remove one value; a validate-only change changes nothing; bad entries fail alone
        assert alter(sock, [([("user", "alice")], [("consumer_byte_rate", None)])], 7)[0][0] == 0
        assert alter(sock, [([("user", "alice")], [("producer_byte_rate", 1.0)])], 8, validate_only=True)[0][0] == 0
        bad = alter(sock, [([("user", "carol")], [("bogus_rate", 1.0)]),
                           ([("group", "g")], [("producer_byte_rate", 1.0)]),
                           ([("user", "dave")], [("producer_byte_rate", -5.0)]),
                           ([("user", "erin")], [("producer_byte_rate", 7.0)])], 9)
        assert [code for code, _ in bad] == [INVALID_REQUEST, INVALID_REQUEST, INVALID_CONFIG, 0]
        assert describe(sock, [("user", 0, "alice")], 10) == {(("user", "alice"),): {"producer_byte_rate": 1048576.0}}
        assert describe(sock, [("user", 0, "erin")], 11, version=0) == {(("user", "erin"),): {"producer_byte_rate": 7.0}}
        assert describe(sock, [("user", 0, "carol")], 12) == {}


def test_the_cli_alters_and_describes_quotas(node: harness.NodeCluster) -> None:
    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["quotas", *args, "--bootstrap", node.client(1)])
        assert result.exit_code == 0, result.output
        return result.output

    run("alter", "--user-default", "--client-id", "etl", "--add-config", "consumer_byte_rate=3e6,request_percentage=150")
    found = json.loads(run("describe", "--user-default", "--client-id", "etl", "--json"))
    assert found == [{"entity": {"user": None, "client-id": "etl"},
                      "values": {"consumer_byte_rate": 3e6, "request_percentage": 150.0}}]
    run("alter", "--user-default", "--client-id", "etl", "--delete-config", "request_percentage")
    assert "user=<default>, client-id=etl  consumer_byte_rate=3e+06" in run(
        "describe", "--user-default", "--client-id", "etl")
    bad = CliRunner().invoke(cli, ["quotas", "alter", "--user", "x", "--add-config", "bogus=1",
                                   "--bootstrap", node.client(1)])
    assert bad.exit_code != 0 and "bogus" in bad.output


def test_quotas_outlive_a_restart(node: harness.NodeCluster) -> None:
    node.terminate(1)
    node.start(1)
    node.wait_ready(timeout_s=60)
    with connect(node) as sock:
        assert describe(sock, [("user", 0, "alice")], 1) == {(("user", "alice"),): {"producer_byte_rate": 1048576.0}}


def test_a_producer_limited_to_1_mb_s_gets_it_and_an_unlimited_one_is_not_throttled(node: harness.NodeCluster) -> None:
    """librdkafka producers (client ids `limited`, with a 1 MB/s quota, and `free`, without) on
    one broker at once: over 30 s (after 6 s to settle) the limited one's acked bytes/s, from its
    delivery reports, are within 10 % of 1 MB/s, and it is throttled (throttle_time_ms in its
    answers, raftlog_quota_throttle_time_ms for its client id); the free one never hears a
    throttle time and gets more."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap()})
    admin.create_topics([NewTopic("throttled", 3, 1)])["throttled"].result(timeout=60)
    with connect(node) as sock:
        # the user default of the first test would win over a client id's quota (Kafka's order)
        assert alter(sock, [([("user", None)], [("producer_byte_rate", None)]),
                            ([("client-id", "limited")], [("producer_byte_rate", 1_000_000.0)])], 1) == [
            (0, [("user", None)]), (0, [("client-id", "limited")])]
    throttles: dict[str, list[int]] = {"limited": [], "free": []}
    acked: dict[str, list[tuple[float, int]]] = {"limited": [], "free": []}
    value = b"x" * 10_000

    def producer(name: str) -> Producer:
        return Producer({"bootstrap.servers": node.kafka_bootstrap(), "client.id": name, "linger.ms": 5,
                         "throttle_cb": lambda event: throttles[name].append(event.throttle_time),
                         "queue.buffering.max.kbytes": 4096})

    producers = {name: producer(name) for name in acked}

    def delivered(name: str):
        def report(err, msg) -> None:
            assert err is None, err
            acked[name].append((time.monotonic(), len(msg.value())))
        return report

    start = time.monotonic()
    while time.monotonic() - start < 36:  # 6 s to settle into the quota, then 30 s measured
        for name, p in producers.items():
            try:
                p.produce("throttled", value, on_delivery=delivered(name))
            except BufferError:
                pass
            p.poll(0)
        time.sleep(0.001)  # not synchronisation: keeps this loop from spinning a core
    for p in producers.values():
        assert p.flush(60) == 0
    limited = sum(n for t, n in acked["limited"] if start + 6 <= t <= start + 36) / 30
    free = sum(n for t, n in acked["free"] if start + 6 <= t <= start + 36) / 30
    print(f"limited {limited:.0f} B/s, free {free:.0f} B/s, {len(throttles['limited'])} throttles")
    # The quota caps the rate from above (+10 %); below the cap is the loaded machine (877 kB/s
    # at load 40), as for the consumer quota below: the lower side is loose.
    assert 700_000 <= limited <= 1_100_000 and free > limited, (limited, free)
    assert throttles["limited"] and max(throttles["limited"]) > 0
    assert throttles["free"] == [] or max(throttles["free"]) == 0, throttles["free"]
    found = {}
    with urllib.request.urlopen(f"http://{node.http(1)}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("raftlog_quota_throttle_time_ms"):
                found[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    assert any('client_id="limited"' in k and v > 0 for k, v in found.items()), found
    assert not any('client_id="free"' in k for k in found), found


def _throttle_metrics(node: harness.NodeCluster, quota: str) -> dict[str, float]:
    found = {}
    with urllib.request.urlopen(f"http://{node.http(1)}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("raftlog_quota_throttle_time_ms") and f'quota="{quota}"' in line:
                found[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return found


def test_a_consumer_limited_to_1_mb_s_reads_it_and_an_unlimited_one_is_not_slowed(node: harness.NodeCluster) -> None:
    """librdkafka consumers (client ids `slow-reader`, with a 1 MB/s consumer_byte_rate, and
    `fast-reader`, without) read one topic on one broker at once: over 30 s (after 6 s to
    settle) the limited one's bytes/s are within 10 % of 1 MB/s, and it hears throttle times;
    the unlimited one reads the whole topic faster and hears none."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap()})
    admin.create_topics([NewTopic("read-throttled", 2, 1)])["read-throttled"].result(timeout=60)
    with connect(node) as sock:
        assert alter(sock, [([("client-id", "slow-reader")], [("consumer_byte_rate", 1_000_000.0)])], 1) == [
            (0, [("client-id", "slow-reader")])]
    total = 48_000_000
    producer = Producer({"bootstrap.servers": node.kafka_bootstrap(), "linger.ms": 20, "client.id": "filler"})
    value = b"y" * 10_000
    for _ in range(total // len(value)):
        while True:
            try:
                producer.produce("read-throttled", value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    throttles: dict[str, list[int]] = {"slow-reader": [], "fast-reader": []}
    read: dict[str, list[tuple[float, int]]] = {"slow-reader": [], "fast-reader": []}

    def consumer(name: str) -> Consumer:
        c = Consumer({"bootstrap.servers": node.kafka_bootstrap(), "client.id": name, "group.id": name,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "max.partition.fetch.bytes": 262144, "fetch.max.bytes": 1_000_000,
                      "throttle_cb": lambda event: throttles[name].append(event.throttle_time)})
        c.subscribe(["read-throttled"])
        return c

    consumers = {name: consumer(name) for name in read}
    start = time.monotonic()
    try:
        while time.monotonic() - start < 36:  # 6 s to settle into the quota, then 30 s measured
            for name, c in consumers.items():
                for msg in c.consume(100, timeout=0.01):
                    assert msg.error() is None, msg.error()
                    read[name].append((time.monotonic(), len(msg.value())))
    finally:
        for c in consumers.values():
            c.close()
    limited = sum(n for t, n in read["slow-reader"] if start + 6 <= t <= start + 36) / 30
    fast_total = sum(n for _, n in read["fast-reader"])
    slow_total = sum(n for _, n in read["slow-reader"])
    print(f"limited {limited:.0f} B/s; read in all: fast {fast_total}, slow {slow_total}; "
          f"{len(throttles['slow-reader'])} throttles")
    # The quota caps the rate from above (+10 %); below the cap is the loaded machine, not the
    # quota (CI saw 891 kB/s at load 20+, and 462 kB/s with a ten-minute fault run beside it;
    # 956 kB/s alone): the lower side is checked only while the machine has CPU to spare.
    assert limited <= 1_100_000, limited
    if os.getloadavg()[0] < 2 * (os.cpu_count() or 1):
        assert limited >= 700_000, (limited, os.getloadavg())
    assert fast_total == total > slow_total, (fast_total, slow_total)  # the unlimited one read it all
    assert throttles["slow-reader"] and max(throttles["slow-reader"]) > 0
    assert throttles["fast-reader"] == [] or max(throttles["fast-reader"]) == 0, throttles["fast-reader"]
    found = _throttle_metrics(node, "consumer_byte_rate")
    assert any('client_id="slow-reader"' in k and v > 0 for k, v in found.items()), found
    assert not any('client_id="fast-reader"' in k for k in found), found


def test_request_percentage_throttles_a_busy_client_only(node: harness.NodeCluster) -> None:
    """A client id with a tiny request_percentage (0.01 % of a thread) hears a throttle time in
    its Metadata answers after a few requests, and the node counts it; another client id
    sending the same requests hears none."""
    from kafka.protocol.metadata import MetadataRequest
    from test_kafka_bad_input import read_frame
    from raftlog.node.kafka import codec

    with connect(node) as sock:
        assert alter(sock, [([("client-id", "busy")], [("request_percentage", 0.01)])], 1)[0][0] == 0

    def throttle_times(client_id: str) -> list[int]:
        out = []
        with connect(node) as sock:
            # A throttled answer is held up to the sampled span (11 s, raftlog/node/quotas.py),
            # more than connect()'s 10 s when the first request costs a loaded machine > 2 ms.
            sock.settimeout(30)
            for i in range(20):
                message = MetadataRequest[4](topics=None, allow_auto_topic_creation=False)
                message.with_header(correlation_id=i, client_id=client_id)
                sock.sendall(bytes(message.encode(version=4, header=True, framed=True)))
                frame = read_frame(sock)
                out.append(codec.RESPONSE_CLASSES[3][4].decode(frame[4:]).throttle_time_ms)
        return out

    busy = throttle_times("busy")
    assert max(busy) > 0, busy
    assert max(throttle_times("idle")) == 0
    found = _throttle_metrics(node, "request_percentage")
    assert any('client_id="busy"' in k and v > 0 for k, v in found.items()), found
    with connect(node) as sock:  # later tests: no request quota
        assert alter(sock, [([("client-id", "busy")], [("request_percentage", None)])], 2)[0][0] == 0

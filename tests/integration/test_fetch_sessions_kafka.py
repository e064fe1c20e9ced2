"""Fetch sessions (KIP-227, issue 41) on a real node: kafka-python (which keeps sessions; librdkafka
does not: it sends epoch -1) consuming 1,000 partitions sends incremental fetches whose requests
are at most a tenth of the full ones' bytes (the node's raftlog_request_bytes_total per Fetch),
the node reports the session in /metrics, and the wire answers Kafka's session errors."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer.fetch import FetchRequest

import node_harness as harness
from test_kafka_bad_input import connect
from test_kafka_unsupported import call

pytestmark = pytest.mark.cluster

TOPIC = "many"
PARTITIONS = 1000
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("fetch_sessions"), size=1) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=120)
        producer = Producer({"bootstrap.servers": c.kafka_bootstrap()})
        for i in range(0, PARTITIONS, 50):
            producer.produce(TOPIC, value=b"v%d" % i, partition=i)
        assert producer.flush(120) == 0
        yield c


def metrics(node: harness.NodeCluster) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{node.http(1)}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        m = re.match(r'^(raftlog_(?:request_bytes_total|requests_total|fetch_session\w*)(?:\{[^}]*\})?) (\S+)$', line)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def fetch_totals(node: harness.NodeCluster) -> tuple[float, float]:
    """(request bytes, requests) of Fetch on the Kafka listener so far."""
    found = metrics(node)
    sent = found.get('raftlog_request_bytes_total{listener="kafka",op="Fetch"}', 0.0)
    count = sum(v for k, v in found.items() if k.startswith("raftlog_requests_total{")
                and 'listener="kafka"' in k and 'op="Fetch"' in k)
    return sent, count


def consume(node: harness.NodeCluster, sessions: bool, fetches: int) -> float:
    """Bytes per Fetch request of a consumer of every partition, once it has read all there
    is: the steady state, where a session's fetches name nothing."""
    consumer = KafkaConsumer(bootstrap_servers=node.kafka_bootstrap(), enable_incremental_fetch_sessions=sessions,
                             fetch_max_wait_ms=50, auto_offset_reset="earliest", enable_auto_commit=False,
                             request_timeout_ms=60_000)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 120
        while got < PARTITIONS // 50:
            assert time.monotonic() < deadline, f"read {got} of {PARTITIONS // 50} records"
            got += sum(len(v) for v in consumer.poll(timeout_ms=1000).values())
        consumer.poll(timeout_ms=500)  # the offsets of the last records go in one more fetch
        bytes_before, count_before = fetch_totals(node)
        deadline = time.monotonic() + 120
        while fetch_totals(node)[1] - count_before < fetches:
            assert time.monotonic() < deadline, "the consumer stopped fetching"
            assert not consumer.poll(timeout_ms=200), "nothing new was produced"
        bytes_after, count_after = fetch_totals(node)
        return (bytes_after - bytes_before) / (count_after - count_before)
    finally:
        consumer.close()


def test_a_consumer_of_1000_partitions_sends_incremental_fetches_a_tenth_the_size(node: harness.NodeCluster) -> None:
    full = consume(node, sessions=False, fetches=20)
    assert full > PARTITIONS * 12, full  # each full fetch names every partition (offset, bytes, ...)
    incremental = consume(node, sessions=True, fetches=20)
    assert incremental * 10 <= full, (incremental, full)
    found = metrics(node)
    assert found["raftlog_fetch_sessions"] >= 1 and found["raftlog_fetch_session_partitions"] >= PARTITIONS


def test_session_errors_are_kafkas(node: harness.NodeCluster) -> None:
    T, P = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition

    def fetch(session_id: int, epoch: int, partitions: list[tuple[int, int]], correlation_id: int):
        return call(sock, FetchRequest[12](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="",
            topics=[T(topic=TOPIC, partitions=[P(partition=p, fetch_offset=o, partition_max_bytes=1 << 16,
                                                 current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
                                               for p, o in partitions])] if partitions else []), 12, correlation_id)

    with connect(node) as sock:
        first = fetch(0, 0, [(0, 0), (1, 0), (50, 0)], 1)
        assert first.error_code == 0 and first.session_id != 0, first
        assert sorted(p.partition_index for t in first.responses for p in t.partitions) == [0, 1, 50]
        # incremental: the client moves partitions 0 and 50 past their one record; nothing
        # changed since the last answer, so none is answered; then a fetch that names nothing
        caught_up = fetch(first.session_id, 1, [(0, 1), (50, 1)], 2)
        assert (caught_up.error_code, caught_up.session_id, caught_up.responses) == (0, first.session_id, [])
        rewound = fetch(first.session_id, 2, [(50, 0)], 3)  # back to the record: only 50 answers
        assert [(p.partition_index, p.high_watermark) for t in rewound.responses for p in t.partitions] == [(50, 1)]
        stale = fetch(first.session_id, 2, [], 4)  # epoch 2 was used
        assert (stale.error_code, stale.session_id, stale.responses) == (INVALID_FETCH_SESSION_EPOCH, 0, [])
        unknown = fetch(first.session_id ^ 0x5A5A, 1, [], 5)
        assert unknown.error_code == FETCH_SESSION_ID_NOT_FOUND and unknown.session_id == 0
        closed = fetch(first.session_id, -1, [(1, 0)], 6)  # FINAL: sessionless, closes the session
        assert closed.error_code == 0 and closed.session_id == 0
        assert fetch(first.session_id, 3, [], 7).error_code == FETCH_SESSION_ID_NOT_FOUND

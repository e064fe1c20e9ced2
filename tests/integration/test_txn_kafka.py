"""The transaction coordinator on a real 3-node cluster, over the Kafka wire: confluent-kafka's, kafka-python's and aiokafka's transactional producers initialise (confluent-kafka's timed out before issue 42); raw requests get Kafka's answer for each step and each misuse (zombie fencing by a second InitProducerId, a silent producer's transaction aborted on timeout, a stale epoch, an unknown id, a commit of nothing), DescribeTransactions/ListTransactions and `raftlog transactions list/describe` show the state, and after a SIGKILL of the coordinator the next leader of its `__transaction_state` partition has the transaction rebuilt and completes it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest

from test_kafka_group_versions import Conn
from test_kafka_groups import create

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.cluster

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE = 0, 3, 16, 15
COORDINATOR_LOAD_IN_PROGRESS = 14
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, OPERATION_NOT_ATTEMPTED = 50, 51, 55
PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND = 90, 105
RETRIABLE = (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS)
TOPIC = "txn-t"
DEADLINE_S = 60  # an upper bound on waiting, never a speed claim


def retry(fn: Any, what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Call `fn` until its answer's error is not retriable (a coordinator being found,
    loaded or completing a step), as a client does."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = fn()
        if getattr(r, "error_code", NONE) not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def coordinator(cluster: Any, tid: str) -> tuple[int, Conn]:
    """The id's coordinator (a live node, after a failover the new leader) and a connection."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        boot = Conn(cluster.kafka(cluster.live()[0]))
        try:
            r = retry(lambda: boot.call(FindCoordinatorRequest, 3, key=tid, key_type=1), f"coordinator of {tid}")
        finally:
            boot.close()
        assert r.error_code == NONE, r
        assert f"{r.host}:{r.port}" == cluster.kafka(r.node_id)
        if r.node_id in cluster.live():
            return r.node_id, Conn(cluster.kafka(r.node_id))
        assert time.monotonic() < deadline, f"no live coordinator of {tid}"
        time.sleep(0.2)


def init(conn: Conn, tid: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> Any:
    return retry(lambda: conn.call(InitProducerIdRequest, 4, transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                   producer_id=pid, producer_epoch=epoch), "init")


def add(conn: Conn, tid: str, pid: int, epoch: int, partitions: list[int], topic: str = TOPIC,
        version: int = 3) -> list[int]:
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    r = retry(lambda: conn.call(AddPartitionsToTxnRequest, version, v3_and_below_transactional_id=tid,
                                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                v3_and_below_topics=[T(name=topic, partitions=partitions)]), "add")
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def end(conn: Conn, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return retry(lambda: conn.call(EndTxnRequest, version, transactional_id=tid, producer_id=pid,
                                   producer_epoch=epoch, committed=commit), "end").error_code


def describe(conn: Conn, tid: str) -> Any:
    return conn.call(DescribeTransactionsRequest, 0, transactional_ids=[tid]).transaction_states[0]


def wait_state(conn: Conn, tid: str, state: str) -> None:
    """The markers and the Complete write follow EndTxn's answer (as in Kafka): poll."""
    deadline = time.monotonic() + DEADLINE_S
    while (d := describe(conn, tid)).transaction_state != state:
        assert time.monotonic() < deadline, d
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(cluster: Any) -> Any:
    """The shared 3-node cluster with TOPIC (3 partitions, RF 3) created."""
    create(cluster, TOPIC, 3)
    return cluster


def test_confluent_init_transactions_succeeds(cluster):
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": "ck-1"})
    producer.init_transactions(DEADLINE_S)  # raised (fatal) or timed out before issue 42
    _, conn = coordinator(cluster, "ck-1")
    try:
        d = describe(conn, "ck-1")
        assert d.error_code == NONE and d.transaction_state == "Empty" and d.producer_epoch == 0, d
    finally:
        conn.close()


def test_kafka_python_and_aiokafka_init_transactions(cluster):
    import kafka
    kp = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), transactional_id="kp-1")
    try:
        kp.init_transactions()  # kafka-python 3 blocks until the coordinator answers
    finally:
        kp.close(timeout=10)
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    async def aio() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), transactional_id="aio-1")
        await asyncio.wait_for(producer.start(), DEADLINE_S)  # start() runs InitProducerId
        await producer.stop()

    asyncio.run(aio())
    for tid in ("kp-1", "aio-1"):
        _, conn = coordinator(cluster, tid)
        try:
            d = describe(conn, tid)
            assert d.error_code == NONE and d.transaction_state == "Empty", d
        finally:
            conn.close()


def test_a_transaction_step_by_step_and_kafkas_errors(cluster):
    tid = "raw-1"
    _, conn = coordinator(cluster, tid)
    try:
        assert init(conn, tid, timeout_ms=0).error_code == INVALID_TRANSACTION_TIMEOUT
        r = init(conn, tid)
        assert r.error_code == NONE and r.producer_epoch == 0, r
        pid = r.producer_id
        assert end(conn, tid, pid, 0, True) == INVALID_TXN_STATE  # nothing to commit
        _, other = coordinator(cluster, "nobody")
        try:  # an id nobody initialised, at its own coordinator
            assert end(other, "nobody", pid, 0, True) == INVALID_PRODUCER_ID_MAPPING
            assert describe(other, "nobody").error_code == TRANSACTIONAL_ID_NOT_FOUND
        finally:
            other.close()
        assert add(conn, tid, pid, 0, [0, 99]) == [OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
        assert add(conn, tid, pid, 0, [0, 1]) == [NONE, NONE]
        off = retry(lambda: conn.call(AddOffsetsToTxnRequest, 3, transactional_id=tid, producer_id=pid,
                                      producer_epoch=0, group_id="g-raw"), "add offsets")
        assert off.error_code == NONE
        d = describe(conn, tid)
        assert d.transaction_state == "Ongoing" and d.transaction_start_time_ms > 0
        assert {(t.topic, p) for t in d.topics for p in t.partitions} >= {(TOPIC, 0), (TOPIC, 1)}
        listed = conn.call(ListTransactionsRequest, 1, state_filters=["Ongoing", "Bogus"], producer_id_filters=[],
                           duration_filter=-1)
        assert listed.unknown_state_filters == ["Bogus"]
        assert tid in [t.transactional_id for t in listed.transaction_states]
        assert end(conn, tid, pid, 0, True) == NONE
        wait_state(conn, tid, "CompleteCommit")
        assert end(conn, tid, pid, 0, True) == NONE  # a retried commit is answered again
        assert end(conn, tid, pid, 0, False) == INVALID_TXN_STATE
    finally:
        conn.close()


def test_a_second_producer_fences_the_zombie(cluster):
    tid = "zombie-1"
    _, conn = coordinator(cluster, tid)
    try:
        old = init(conn, tid)
        assert add(conn, tid, old.producer_id, old.producer_epoch, [2]) == [NONE]
        # The new producer's first InitProducerId aborts the zombie's transaction (answered
        # CONCURRENT_TRANSACTIONS, which `init` retries) and then gets the next epoch.
        new = init(conn, tid)
        assert new.error_code == NONE and new.producer_id == old.producer_id and new.producer_epoch == 2, new
        assert add(conn, tid, old.producer_id, old.producer_epoch, [2]) == [PRODUCER_FENCED]
        assert end(conn, tid, old.producer_id, old.producer_epoch, True) == PRODUCER_FENCED
        assert end(conn, tid, old.producer_id, old.producer_epoch, True, version=1) == INVALID_PRODUCER_EPOCH
        wait_state(conn, tid, "Empty")
    finally:
        conn.close()


def test_a_silent_producers_transaction_is_aborted_and_fenced(cluster):
    tid = "silent-1"
    _, conn = coordinator(cluster, tid)
    try:
        r = init(conn, tid, timeout_ms=1000)
        assert add(conn, tid, r.producer_id, r.producer_epoch, [1]) == [NONE]
        wait_state(conn, tid, "CompleteAbort")  # the coordinator's timer, not a request, did it
        d = describe(conn, tid)
        assert d.producer_epoch == r.producer_epoch + 1 and not d.topics, d
        assert end(conn, tid, r.producer_id, r.producer_epoch, True) == PRODUCER_FENCED
    finally:
        conn.close()


def test_raftlog_transactions_list_and_describe(cluster):
    tid = "cli-1"
    _, conn = coordinator(cluster, tid)
    try:
        r = init(conn, tid)
        assert add(conn, tid, r.producer_id, r.producer_epoch, [1]) == [NONE]
    finally:
        conn.close()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raftlog.cli", "transactions", *args, "--bootstrap",
                               ",".join(cluster.bootstrap())], capture_output=True, text=True, timeout=60)

    listed = cli("list", "--state", "Ongoing", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(t["transactional_id"], t["producer_id"]) for t in json.loads(listed.stdout)
            if t["transactional_id"] == tid] == [(tid, r.producer_id)]
    described = cli("describe", tid, "--json")
    assert described.returncode == 0, described.stderr
    d = json.loads(described.stdout)
    assert d["state"] == "Ongoing" and d["partitions"] == [[TOPIC, 1]], d
    unknown = cli("describe", "never-used")
    assert unknown.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.stderr, unknown


def test_coordinator_sigkill_mid_transaction_rebuilds_it(cluster):
    tid = "failover-1"
    node_id, conn = coordinator(cluster, tid)
    try:
        r = init(conn, tid)
        assert add(conn, tid, r.producer_id, r.producer_epoch, [0, 2]) == [NONE, NONE]
    finally:
        conn.close()
    cluster.kill(node_id)
    try:
        new_id, conn = coordinator(cluster, tid)
        try:
            assert new_id != node_id
            d = retry(lambda: describe(conn, tid), "describe after failover")
            assert d.error_code == NONE and d.transaction_state == "Ongoing", d
            assert {p for t in d.topics for p in t.partitions} == {0, 2}
            assert end(conn, tid, r.producer_id, r.producer_epoch, True) == NONE
            wait_state(conn, tid, "CompleteCommit")
        finally:
            conn.close()
    finally:
        cluster.start(node_id)
        cluster.wait_ready(timeout_s=60)

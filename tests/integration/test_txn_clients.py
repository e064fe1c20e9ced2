"""Transactions with more clients and a killed application (issue 42), on a real 3-node cluster: aiokafka's transactional producer (commit, abort, send_offsets_to_transaction) with a read_committed AIOKafkaConsumer that sees only committed records; and a consume-transform-produce application (tests/integration/txn_app.py) SIGKILLed mid-transaction, twice, each new instance with the same transactional.id fencing the old and continuing: every input record's output appears exactly once for read_committed readers, the killed transactions' output only for read_uncommitted ones."""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from json_lines import read_json_lines
from test_kafka_groups import create
from test_txn_e2e import consume_all

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.cluster

DEADLINE_S = 60  # an upper bound on waiting, never a speed claim
APP = Path(__file__).with_name("txn_app.py")


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_everywhere(cluster: Any, topics: list[str]) -> None:
    """Every node's Kafka metadata has each topic with a leader for every partition (the
    clients below may ask any node)."""
    for node_id in cluster.live():
        admin = ck.admin.AdminClient({"bootstrap.servers": cluster.kafka(node_id)})

        def known(admin: Any = admin) -> bool:
            md = admin.list_topics(timeout=10)
            return all(t in md.topics and md.topics[t].error is None and md.topics[t].partitions
                       and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics)

        cluster.wait_for(known, DEADLINE_S, f"node {node_id} knows {topics}")


def test_aiokafka_transactions_and_a_read_committed_consumer(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.structs import TopicPartition

    topic, src = topic_name("aio-txn"), topic_name("aio-src")
    create(cluster, topic, 3)
    create(cluster, src, 1)
    wait_everywhere(cluster, [topic, src])
    group = f"aio-g-{src}"
    bootstrap = cluster.kafka_bootstrap()

    async def scenario() -> tuple[list[bytes], list[bytes], dict[int, int]]:
        plain = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await asyncio.wait_for(plain.start(), DEADLINE_S)
        try:
            for i in range(5):
                await plain.send_and_wait(src, f"s{i}".encode(), partition=0)
        finally:
            await plain.stop()
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{topic}")
        await asyncio.wait_for(p.start(), DEADLINE_S)
        try:
            async with p.transaction():  # commits on leaving the block
                for i in range(9):
                    await p.send(topic, f"c{i}".encode(), partition=i % 3)
            await p.begin_transaction()
            for i in range(6):
                await p.send(topic, f"a{i}".encode(), partition=i % 3)
            await p.abort_transaction()
            # Consume-transform-produce: the source's offsets committed in the transaction.
            await p.begin_transaction()
            for i in range(5):
                await p.send(topic, f"t{i}".encode(), partition=i % 3)
            await p.send_offsets_to_transaction({TopicPartition(src, 0): 5}, group)
            await p.commit_transaction()
        finally:
            await p.stop()
        # A group member that reads src resumes at the offset the transaction committed.
        member = aiokafka.AIOKafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group,
                                           auto_offset_reset="earliest", enable_auto_commit=False)
        await asyncio.wait_for(member.start(), DEADLINE_S)
        try:
            committed = await member.committed(TopicPartition(src, 0))
        finally:
            await member.stop()
        return (await read(aiokafka, bootstrap, topic, "read_committed", 14),
                await read(aiokafka, bootstrap, topic, "read_uncommitted", 20), {0: committed})

    committed_values, uncommitted_values, offsets = asyncio.run(scenario())
    assert sorted(committed_values) == sorted([f"c{i}".encode() for i in range(9)]
                                              + [f"t{i}".encode() for i in range(5)])
    assert {v[:1] for v in uncommitted_values} == {b"c", b"a", b"t"} and len(uncommitted_values) == 20
    assert offsets == {0: 5}


async def read(aiokafka: Any, bootstrap: str, topic: str, isolation: str, expect: int) -> list[bytes]:
    """Values of `topic` an AIOKafkaConsumer with `isolation` reads from the beginning: until
    `expect` came, then until a second more brings nothing (a late aborted record would show)."""
    c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                  auto_offset_reset="earliest", isolation_level=isolation)
    await asyncio.wait_for(c.start(), DEADLINE_S)
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            got = await c.getmany(timeout_ms=1000)
            batch = [m.value for ms in got.values() for m in ms]
            values += batch
            if len(values) >= expect and not batch:
                break
    finally:
        await c.stop()
    return values


def _txn_starts(cluster: Any, topic: str) -> dict[int, int]:
    """producer id -> current_txn_start_offset of partition 0, by Kafka's DescribeProducers
    (kafka-python's admin, which asks the partition's leader)."""
    import kafka

    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=30_000)
    try:
        states = admin.describe_producers([kafka.TopicPartition(topic, 0)])
    finally:
        admin.close()
    (state,) = states.values()
    producers = state.active_producers if hasattr(state, "active_producers") else state["active_producers"]
    out = {}
    for pr in producers:
        get = (lambda k, pr=pr: getattr(pr, k)) if hasattr(pr, "producer_id") else pr.__getitem__
        out[get("producer_id")] = get("current_transaction_start_offset")
    return out


def test_describe_producers_shows_where_an_open_transaction_begins(cluster):
    """Kafka's DescribeProducers answers current_txn_start_offset (kafka-transactions
    find-hanging reads it; the console shows it): the open transaction's first offset, -1
    once its marker is written."""
    topic = topic_name("txn-producers")
    create(cluster, topic, 1)
    wait_everywhere(cluster, [topic])
    plain = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    plain.produce(topic, b"plain", partition=0)
    assert plain.flush(DEADLINE_S) == 0  # offset 0
    p = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"dp-{topic}"})
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    p.produce(topic, b"t", partition=0)
    assert p.flush(DEADLINE_S) == 0  # offset 1, open
    open_now = _txn_starts(cluster, topic)
    assert list(open_now.values()) == [1], open_now  # (the plain producer is not idempotent: no id)
    p.commit_transaction(DEADLINE_S)
    cluster.wait_for(lambda: set(_txn_starts(cluster, topic).values()) == {-1}, DEADLINE_S, "the marker closes it")


class App:
    """One txn_app.py process; its JSON events are read by a thread into a bounded queue."""

    def __init__(self, cluster: Any, log: Path, *args: str):
        self.log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, str(APP), cluster.kafka_bootstrap(), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.events: queue.Queue[dict] = queue.Queue(maxsize=100_000)
        self.reader = read_json_lines(self.proc, self.events)

    def wait_event(self, ev: str, timeout_s: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                e = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"txn_app: no {ev!r} within {timeout_s}s (exit {self.proc.poll()}, "
                                     f"stderr in {self.log.name})") from None
            if e["ev"] == ev:
                return e
            assert e["ev"] != "deadline", e

    def stop(self, kill: bool) -> None:
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()  # SIGKILL: no close, no abort, the transaction left open
            else:
                self.proc.terminate()
        self.proc.wait(30)
        self.reader.join(30)  # stdout ends with the process
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.log.close()


def test_app_sigkilled_mid_transaction_each_input_once(cluster, tmp_path):
    src, dst = topic_name("app-in"), topic_name("app-out")
    create(cluster, src, 3)
    create(cluster, dst, 3)
    wait_everywhere(cluster, [src, dst])
    plain = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    for i in range(150):
        plain.produce(src, f"{i}".encode(), partition=i % 3)
    assert plain.flush(DEADLINE_S) == 0
    args = [src, dst, f"app-{src}", f"app-tx-{src}"]
    runs = []
    try:
        # Two instances killed while a transaction's output is written but not committed.
        for n, hold_at in enumerate(("3", "2")):
            app = App(cluster, tmp_path / f"app{n}.log", *args, "--hold-at", hold_at)
            runs.append(app)
            assert app.wait_event("holding")["txn"] == int(hold_at)
            app.stop(kill=True)
        # The third fences the second (aborting its transaction) and finishes the input.
        last = App(cluster, tmp_path / "app-last.log", *args, "--until-end")
        runs.append(last)
        last.wait_event("done", timeout_s=240)
    finally:
        for app in runs:
            app.stop(kill=True)
    out = [v for _, v in consume_all(cluster, dst, "read_committed")]
    assert sorted(out) == sorted(f"{i}!".encode() for i in range(150)), "every input's output exactly once"
    everything = consume_all(cluster, dst, "read_uncommitted")
    assert len(everything) > 150  # the killed instances' flushed output is there, aborted

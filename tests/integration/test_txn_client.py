"""raftlog's own clients and transactions on a real 3-node cluster: a committed transaction is seen whole by a read_committed Consumer, an aborted one never (a read_uncommitted one sees both), a zombie producer is fenced by a newer one with its transactional id and its records stay invisible, offsets sent with a transaction are committed only when it commits, and the trio shell does the same."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import trio

from raftlog import aio
from raftlog.base.errors import ProducerFencedError
from raftlog.client import Consumer, Producer
from raftlog.client.errors import TransactionStateError

from test_kafka_groups import create

pytestmark = pytest.mark.cluster

PARTITIONS = 3
DEADLINE_S = 60  # an upper bound on waiting, never a speed claim


def read_until(cluster: Any, topic: str, isolation_level: str, last: bytes | Callable[[list[bytes]], bool]) -> list[bytes]:
    """Every value of `topic` from the beginning, polled until `last` was read (or `last(values)`)."""
    values: list[bytes] = []
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest", isolation_level=isolation_level) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        c.seek_to_beginning()

        def got_last() -> bool:
            values.extend(r.value for r in c.poll(timeout_ms=500))
            return last(values) if callable(last) else last in values

        cluster.wait_for(got_last, DEADLINE_S, f"{last!r} in {topic} ({isolation_level})")
    return values


def txn_producer(cluster: Any, tid: str) -> Producer:
    return Producer(cluster.bootstrap(), transactional_id=tid, linger_ms=5, request_timeout_ms=15_000)


def test_commit_visible_abort_invisible(cluster: Any) -> None:
    topic = "txn-client-basic"
    create(cluster, topic, PARTITIONS)
    with txn_producer(cluster, "txc-basic") as p:
        with pytest.raises(TransactionStateError):
            p.send(topic, b"before-init")
        pid, epoch = p.init_transactions()
        assert pid >= 0 and epoch >= 0
        with pytest.raises(TransactionStateError):
            p.send(topic, b"outside")
        p.begin_transaction()
        aborted = [p.send(topic, b"aborted-%d" % i, partition=i % PARTITIONS) for i in range(30)]
        for f in aborted:
            f.result(DEADLINE_S)  # written, in an open transaction
        p.abort_transaction()
        p.begin_transaction()
        for i in range(30):
            p.send(topic, b"committed-%d" % i, partition=i % PARTITIONS)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"last", partition=0)
        p.commit_transaction()
    # Each partition's aborted records come before its committed ones: all committed ones read
    # means every aborted one was passed over.
    committed = read_until(cluster, topic, "read_committed",
                           lambda vs: b"last" in vs and sum(v.startswith(b"committed") for v in vs) >= 30)
    assert not [v for v in committed if v.startswith(b"aborted")]
    assert sorted(v for v in committed if v.startswith(b"committed")) == sorted(b"committed-%d" % i for i in range(30))
    uncommitted = read_until(cluster, topic, "read_uncommitted",
                             lambda vs: sum(v.startswith((b"aborted", b"committed")) for v in vs) >= 60)
    assert sorted(v for v in uncommitted if v.startswith(b"aborted")) == sorted(b"aborted-%d" % i for i in range(30))


def test_zombie_is_fenced(cluster: Any) -> None:
    topic = "txn-client-fence"
    create(cluster, topic, PARTITIONS)
    with txn_producer(cluster, "txc-fence") as old, txn_producer(cluster, "txc-fence") as new:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie-1", partition=1).result(DEADLINE_S)
        new.init_transactions()  # bumps the epoch: the old one's open transaction is aborted
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"zombie-2", partition=1)
            old.commit_transaction()
        with pytest.raises(ProducerFencedError):
            old.begin_transaction()  # fenced for good
        new.begin_transaction()
        new.send(topic, b"new", partition=1)
        new.commit_transaction()
    values = read_until(cluster, topic, "read_committed", b"new")
    assert not [v for v in values if v.startswith(b"zombie")]


def test_offsets_commit_with_the_transaction(cluster: Any) -> None:
    topic, group = "txn-client-offsets", "txc-group"
    create(cluster, topic, PARTITIONS)
    with Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c:
        def committed() -> dict:
            return c.committed([(topic, p) for p in range(PARTITIONS)])

        with txn_producer(cluster, "txc-offsets") as p:
            p.init_transactions()
            p.begin_transaction()
            p.send(topic, b"out-aborted", partition=0)
            p.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): 7}, group)
            p.abort_transaction()
            assert committed() == {(topic, 0): None, (topic, 1): None, (topic, 2): None}
            p.begin_transaction()
            p.send(topic, b"out", partition=0)
            p.send_offsets_to_transaction({(topic, 0): 3, (topic, 1): 4}, group)
            p.commit_transaction()
        # The offsets land with the COMMIT marker in __consumer_offsets, which follows the answer.
        cluster.wait_for(lambda: committed() == {(topic, 0): 3, (topic, 1): 4, (topic, 2): None},
                         DEADLINE_S, "the transaction's offsets")
    values = read_until(cluster, topic, "read_committed", b"out")
    assert b"out-aborted" not in values


async def test_trio_shell(cluster: Any) -> None:
    topic = "txn-client-trio"
    await trio.to_thread.run_sync(create, cluster, topic, PARTITIONS)
    async with aio.Producer(cluster.bootstrap(), transactional_id="txc-trio") as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send(topic, b"trio-aborted", partition=2)
        await p.abort_transaction()
        p.begin_transaction()
        await p.send(topic, b"trio-committed", partition=2)
        await p.commit_transaction()
    seen: list[bytes] = []
    async with aio.Consumer(cluster.bootstrap(), auto_offset_reset="earliest",
                            isolation_level="read_committed") as c:
        c.assign([(topic, 2)])
        with trio.fail_after(DEADLINE_S):
            while b"trio-committed" not in seen:
                seen.extend(r.value for r in await c.poll(500))
    assert b"trio-aborted" not in seen

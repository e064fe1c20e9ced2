"""The partition leader's link to the transaction coordinator (raftlog/node/txn_link.py):
a fenced producer's produce is answered INVALID_PRODUCER_EPOCH, as Kafka's broker answers it;
the implicit add of Transactions V2 waits out CONCURRENT_TRANSACTIONS (bounded), a
verification (part 1) does not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from groupcoord.txn_port import AddPartitionsToTxn, TxnPartitionsAdded
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    NotEnoughReplicasError,
    ProducerFencedError,
)
from raftlog.node.txn_link import TxnLink

pytestmark = pytest.mark.unit


class _Metadata:
    image = SimpleNamespace(partition=lambda topic, p: SimpleNamespace(leader=1))

    def peer_address(self, broker_id: int) -> str | None:
        return None


def _link(answers: list[Any]) -> tuple[TxnLink, list[dict[str, Any]]]:
    asked: list[dict[str, Any]] = []

    class Txn:
        async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded:
            asked.append({"verify_only": request.verify_only, "partitions": list(request.partitions)})
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    link = TxnLink(1, _Metadata(), peers=None, port=None,  # type: ignore[arg-type]
                   txn=Txn(), txn_partitions=4)
    return link, asked


async def test_a_fenced_producers_produce_is_invalid_producer_epoch():
    link, _ = _link([ProducerFencedError("fenced")])
    with pytest.raises(InvalidProducerEpochError):
        await link.verify_txn("app", "t", 0, 5, 1, add=True)


async def test_the_implicit_add_waits_out_concurrent_transactions():
    link, asked = _link([ConcurrentTransactionsError("busy"), ConcurrentTransactionsError("busy"), TxnPartitionsAdded()])
    await link.verify_txn("app", "t", 0, 5, 1, add=True)
    assert len(asked) == 3 and all(a["verify_only"] is False for a in asked)


async def test_a_verification_does_not_retry_and_answers_not_enough_replicas():
    link, asked = _link([ConcurrentTransactionsError("busy")])
    with pytest.raises(NotEnoughReplicasError):  # Kafka's ReplicaManager: retriable for every client
        await link.verify_txn("app", "t", 0, 5, 1)
    assert [a["verify_only"] for a in asked] == [True]


async def test_a_partly_failed_marker_task_never_counts_for_a_later_transaction():
    """The fault suite's lost write (issue 42): a Transactions V1 producer commits every
    transaction with one producer id and epoch. A coordinator's marker task marked t-3 and
    failed on t-2 (leadership moved); another node finished that transaction. When this node
    coordinates the id again, the next commit over the same partitions must mark t-3 again:
    the progress belonged to the first transaction (before: no COMMIT marker, and the producer's
    next ABORT marker took the committed records)."""
    from groupcoord.txn_coordinator import Markers
    from raftlog.base.errors import NotLeaderError

    written: list[tuple[str, int, int]] = []
    fail = {("t", 2)}

    class Port:
        async def write_txn_marker(self, marker: Any, deadline: float) -> None:
            if (marker.topic, marker.partition) in fail:
                raise NotLeaderError("moved")
            written.append((marker.topic, marker.partition, marker.coordinator_epoch))

    link = TxnLink(1, _Metadata(), peers=None, port=Port(), txn=None, txn_partitions=4)  # type: ignore[arg-type]
    parts = frozenset({("t", 2), ("t", 3)})
    with pytest.raises(NotLeaderError):
        await link.write_markers(Markers("app", 5, 0, True, parts, coordinator_epoch=1))
    assert written == [("t", 3, 1)]
    fail.clear()  # the first transaction was finished by another coordinator; this node leads again
    await link.write_markers(Markers("app", 5, 0, True, parts, coordinator_epoch=2))
    assert sorted(written[1:]) == [("t", 2, 2), ("t", 3, 2)]
    await link.write_markers(Markers("app", 5, 0, True, frozenset({("t", 3)}), coordinator_epoch=2))
    assert written[3:] == [("t", 3, 2)]  # another transaction, same epoch: marked too

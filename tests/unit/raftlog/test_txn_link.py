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

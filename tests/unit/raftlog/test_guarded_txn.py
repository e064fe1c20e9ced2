"""The transaction port behind the one ACL guard (raftlog/node/guarded_txn.py): Kafka's rules on
the TransactionalId resource, for the native and the Kafka listener alike; a refused request
never reaches the port, a refused id of a describe is answered in its place, a listing leaves
out what the principal may not DESCRIBE, the brokers' batched AddPartitionsToTxn needs
CLUSTER_ACTION first."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from groupcoord.port import Coordinator
from groupcoord.txn_port import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    DescribedTxn,
    InitTxnProducerId,
    ListedTxn,
    ListTransactions,
    ProducerEpoch,
    TxnListing,
    TxnPartitionsAdded,
)
from metadata.authorizer import Authorizer
from raftlog.base.acl import AclBinding, Operation, ResourceType
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from raftlog.base.protocol import Request
from raftlog.node.authorize import Guard, guard_handlers
from raftlog.node.guarded_txn import GuardedTxn
from raftlog.node.native_txn import txn_handlers

pytestmark = pytest.mark.unit

ALICE = "User:alice"
X, T, G, C = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def acl(rt: ResourceType, name: str, op: Operation) -> AclBinding:
    return AclBinding(rt, name, "literal", ALICE, "*", op, "allow")


class FakeTxnPort:
    """Records the ops that reached it."""

    node_id = 1

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def find_txn_coordinator(self, transactional_id: str) -> Coordinator:
        self.seen.append(("find_txn_coordinator", transactional_id))
        return Coordinator(1, "h", 9093, 0)

    async def init_txn_producer_id(self, request: InitTxnProducerId) -> ProducerEpoch:
        self.seen.append(("init_txn_producer_id", request.transactional_id))
        return ProducerEpoch(7, 0)

    async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded:
        self.seen.append(("add_partitions_to_txn", request.transactional_id))
        return TxnPartitionsAdded()

    async def add_offsets_to_txn(self, request: AddOffsetsToTxn) -> None:
        self.seen.append(("add_offsets_to_txn", request.group_id))

    async def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTxn]:
        self.seen.append(("describe_transactions", list(transactional_ids)))
        return [DescribedTxn(t, "Empty") for t in transactional_ids]

    async def list_transactions(self, request: ListTransactions) -> TxnListing:
        self.seen.append(("list_transactions", None))
        return TxnListing(1, [ListedTxn("app", 7, "Ongoing"), ListedTxn("other", 8, "Ongoing")])


def guarded(acls: list[AclBinding]) -> tuple[FakeTxnPort, GuardedTxn]:
    port = FakeTxnPort()
    authorizer = Authorizer(acls, super_users=frozenset())
    return port, GuardedTxn(port, Guard(lambda: authorizer).access(ALICE, "10.0.0.1"))


ACLS = [acl(X, "app", Operation.WRITE), acl(X, "app", Operation.DESCRIBE), acl(T, "out", Operation.WRITE),
        acl(G, "g", Operation.READ)]


async def test_transaction_ops_follow_kafkas_transactional_id_rules():
    port, txn = guarded(ACLS)
    await txn.init_txn_producer_id(InitTxnProducerId("app", 60_000))
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await txn.init_txn_producer_id(InitTxnProducerId("other", 60_000))
    await txn.add_partitions_to_txn(AddPartitionsToTxn("app", 7, 0, [("out", 0)]))
    with pytest.raises(TopicAuthorizationFailedError):  # WRITE on every topic, too
        await txn.add_partitions_to_txn(AddPartitionsToTxn("app", 7, 0, [("out", 0), ("secret", 0)]))
    with pytest.raises(GroupAuthorizationFailedError):  # READ on the group
        await txn.add_offsets_to_txn(AddOffsetsToTxn("app", 7, 0, "h"))
    described = await txn.describe_transactions(["app", "other"])
    assert [(d.transactional_id, type(d.error)) for d in described] == [
        ("app", type(None)), ("other", TransactionalIdAuthorizationFailedError)]
    listed = await txn.list_transactions(ListTransactions())
    assert [t.transactional_id for t in listed.transactions] == ["app"]  # DESCRIBE on "other" missing
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await txn.find_txn_coordinator("other")
    assert port.seen == [("init_txn_producer_id", "app"), ("add_partitions_to_txn", "app"),
                         ("describe_transactions", ["app"]), ("list_transactions", None)]  # refusals never ran


async def test_the_brokers_batched_add_needs_cluster_action_then_each_transactions_rule():
    port, txn = guarded(ACLS)
    batch = [AddPartitionsToTxn("app", 7, 0, [("out", 0)]), AddPartitionsToTxn("other", 8, 0, [("out", 0)])]
    with pytest.raises(ClusterAuthorizationFailedError):
        await txn.add_partitions_to_txns(batch)
    assert port.seen == []
    port, txn = guarded([*ACLS, acl(C, "kafka-cluster", Operation.CLUSTER_ACTION)])
    answers = await txn.add_partitions_to_txns(batch)
    assert isinstance(answers[0], TxnPartitionsAdded)
    assert isinstance(answers[1], TransactionalIdAuthorizationFailedError)
    assert port.seen == [("add_partitions_to_txn", "app")]


async def test_the_native_adapter_is_guarded_at_the_port_and_answers_refused_ids_in_place():
    port = FakeTxnPort()
    authorizer = Authorizer(ACLS, super_users=frozenset())
    handlers = guard_handlers(txn_handlers(port, Guard(lambda: authorizer)), authorizer_of=lambda: authorizer)

    def req(op: str, **fields: Any) -> Request:
        return Request(1, op, MappingProxyType(fields), ALICE, "10.0.0.1")

    answer = await handlers["describe_transactions"](req("describe_transactions", transactional_ids=["app", "other"]))
    assert [(t["transactional_id"], t.get("error", {}).get("code")) for t in answer["transactions"]] == [
        ("app", None), ("other", TransactionalIdAuthorizationFailedError.code)]
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await handlers["end_txn"](req("end_txn", transactional_id="other", producer_id=8, producer_epoch=0,
                                      commit=True))
    assert await handlers["init_txn_producer_id"](req("init_txn_producer_id", transactional_id="app",
                                                      transaction_timeout_ms=60_000)) == {
        "producer_id": 7, "producer_epoch": 0}

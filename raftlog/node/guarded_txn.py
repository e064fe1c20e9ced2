"""The transaction port (groupcoord/txn_port.py) behind one principal's ACLs, for both
listeners: the transaction ops' rules are declared once, as `TxnRule`s in
raftlog/node/authorize.py `POLICIES` (Kafka's rules on the TransactionalId resource; listed in
docs/reference/native-protocol.md), and checked here before the port is called, so a refused
request has no effect:

    txn = GuardedTxn(txn_port, guard.access(principal, host))

* a whole-request rule (the id; also the group, or every topic of the partitions) raises its
  refusal (TRANSACTIONAL_ID_ / GROUP_ / TOPIC_AUTHORIZATION_FAILED);
* a refused id of a describe never reaches the port and is answered
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED in its place (after the allowed ones);
* list_transactions leaves out the ids the principal may not DESCRIBE;
* add_partitions_to_txns, Kafka's batched broker-to-broker AddPartitionsToTxn (v4), needs
  CLUSTER_ACTION on the cluster first, then each transaction its own rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from groupcoord.port import Coordinator, PartitionOutcome
from groupcoord.txn_port import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    DescribedTxn,
    EndTxn,
    InitTxnProducerId,
    ListTransactions,
    ProducerEpoch,
    TxnListing,
    TxnOffsetCommit,
    TxnPartitionsAdded,
    TxnPort,
)
from raftlog.base.acl import CLUSTER_NAME, ResourceType
from raftlog.base.errors import RaftlogError
from raftlog.node.authorize import POLICIES, Access, ResourceRule, TxnRule, refusal

__all__ = ["GuardedTxn"]

T, G, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID


def _rule(op: str) -> TxnRule:
    rule = POLICIES[op]
    assert isinstance(rule, TxnRule), op
    return rule


class GuardedTxn:
    """See the module docstring. Implements `TxnPort`."""

    def __init__(self, port: TxnPort, access: Access) -> None:
        self._port = port
        self._access = access

    @property
    def node_id(self) -> int:
        return self._port.node_id

    def _require(self, op: str, transactional_id: str, group_id: str | None = None,
                 topics: Sequence[str] = ()) -> None:
        rule = _rule(op)
        self._access.require(rule.txn, X, transactional_id)
        if rule.group is not None and group_id is not None:
            self._access.require(rule.group, G, group_id)
        if rule.topics is not None:
            for topic in dict.fromkeys(topics):
                self._access.require(rule.topics, T, topic)

    async def find_txn_coordinator(self, transactional_id: str) -> Coordinator:
        self._require("find_txn_coordinator", transactional_id)
        return await self._port.find_txn_coordinator(transactional_id)

    async def init_txn_producer_id(self, request: InitTxnProducerId) -> ProducerEpoch:
        self._require("init_txn_producer_id", request.transactional_id)
        return await self._port.init_txn_producer_id(request)

    async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded:
        self._require("add_partitions_to_txn", request.transactional_id, topics=[t for t, _ in request.partitions])
        return await self._port.add_partitions_to_txn(request)

    async def add_partitions_to_txns(self, requests: Sequence[AddPartitionsToTxn],
                                     ) -> list[TxnPartitionsAdded | RaftlogError]:
        """The batched form: raises the cluster's refusal; else each transaction's answer or
        error, in the order asked."""
        rule = POLICIES["add_partitions_to_txns"]
        assert isinstance(rule, ResourceRule)
        rule.require(self._access, CLUSTER_NAME)
        out: list[TxnPartitionsAdded | RaftlogError] = []
        for request in requests:
            try:
                out.append(await self.add_partitions_to_txn(request))
            except RaftlogError as exc:
                out.append(exc)
        return out

    async def add_offsets_to_txn(self, request: AddOffsetsToTxn) -> None:
        self._require("add_offsets_to_txn", request.transactional_id, request.group_id)
        await self._port.add_offsets_to_txn(request)

    async def end_txn(self, request: EndTxn) -> ProducerEpoch:
        self._require("end_txn", request.transactional_id)
        return await self._port.end_txn(request)

    async def txn_offset_commit(self, request: TxnOffsetCommit) -> list[PartitionOutcome]:
        self._require("txn_offset_commit", request.transactional_id, request.group_id)
        return await self._port.txn_offset_commit(request)

    async def describe_transactions(self, transactional_ids: Sequence[str]) -> list[DescribedTxn]:
        rule = _rule("describe_transactions")
        access = self._access
        allowed = [t for t in transactional_ids if access.allowed(rule.txn, X, t)]
        refused = [DescribedTxn(t, error=refusal(rule.txn, X, t)) for t in transactional_ids if t not in allowed]
        answered = await self._port.describe_transactions(allowed) if allowed else []
        return [*answered, *refused]

    async def list_transactions(self, request: ListTransactions) -> TxnListing:
        rule = _rule("list_transactions")
        listing = await self._port.list_transactions(request)
        if self._access.authorizer is None:
            return listing
        return replace(listing, transactions=[t for t in listing.transactions
                                              if self._access.allowed(rule.txn, X, t.transactional_id)])

"""The native protocol's adapter of the transaction port (groupcoord/txn_port.py): each op's
CBOR fields parsed into the port's dataclasses, the call behind the one ACL guard
(raftlog/node/guarded_txn.py `GuardedTxn`, the request's principal), CBOR fields out (an
item's error as its `error` map), as PROTOCOL.md describes them.

    handlers = txn_handlers(port, guard)   # {"init_txn_producer_id": ..., "end_txn": ..., ...}

Ops: find_txn_coordinator, init_txn_producer_id, add_partitions_to_txn, add_offsets_to_txn,
end_txn, txn_offset_commit, describe_transactions, list_transactions.
`add_partitions_request` is also the peer op `verify_txn`'s parse (raftlog/node/txn_link.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from groupcoord.port import CommitOffset
from groupcoord.txn_port import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    EndTxn,
    InitTxnProducerId,
    ListTransactions,
    TxnOffsetCommit,
    TxnPartitionsAdded,
    TxnPort,
)
from raftlog.base.protocol import Request, field
from raftlog.node.authorize import Guard, guarded_at_port
from raftlog.node.guarded_txn import GuardedTxn
from raftlog.node.native_groups import coordinator_fields

__all__ = ["add_partitions_answer", "add_partitions_request", "txn_handlers"]

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


def _producer(request: Request) -> tuple[str, int, int]:
    return (field(request, "transactional_id", str), field(request, "producer_id", int),
            field(request, "producer_epoch", int))


def add_partitions_request(request: Request) -> AddPartitionsToTxn:
    tid, pid, epoch = _producer(request)
    parts = [(field(d, "topic", str, where=f"partitions[{i}]"),
              field(d, "partition", int, min_value=0, where=f"partitions[{i}]"))
             for i, d in enumerate(field(request, "partitions", list, items=dict))]
    return AddPartitionsToTxn(tid, pid, epoch, parts, field(request, "verify_only", bool, default=False))


def add_partitions_answer(added: TxnPartitionsAdded) -> dict[str, Any]:
    if not added.unknown:
        return {}
    return {"unknown": [{"topic": t, "partition": p} for t, p in added.unknown]}


def txn_handlers(port: TxnPort, guard: Guard) -> dict[str, Handler]:
    """The native client handlers of the transaction ops, each calling the port behind `guard`."""

    def guarded(request: Request) -> GuardedTxn:
        return GuardedTxn(port, guard.access(request.principal, request.client_host))

    async def find_txn_coordinator(request: Request) -> dict[str, Any]:
        return coordinator_fields(await guarded(request).find_txn_coordinator(field(request, "transactional_id", str)))

    async def init_txn_producer_id(request: Request) -> dict[str, Any]:
        done = await guarded(request).init_txn_producer_id(InitTxnProducerId(
            field(request, "transactional_id", str), field(request, "transaction_timeout_ms", int),
            field(request, "producer_id", int, default=-1), field(request, "producer_epoch", int, default=-1)))
        return {"producer_id": done.producer_id, "producer_epoch": done.producer_epoch}

    async def add_partitions_to_txn(request: Request) -> dict[str, Any]:
        return add_partitions_answer(await guarded(request).add_partitions_to_txn(add_partitions_request(request)))

    async def add_offsets_to_txn(request: Request) -> dict[str, Any]:
        await guarded(request).add_offsets_to_txn(AddOffsetsToTxn(*_producer(request), field(request, "group_id", str)))
        return {}

    async def end_txn(request: Request) -> dict[str, Any]:
        bump = field(request, "bump_epoch", bool, default=False)
        done = await guarded(request).end_txn(EndTxn(*_producer(request), field(request, "commit", bool), bump))
        return {"producer_id": done.producer_id, "producer_epoch": done.producer_epoch} if bump else {}

    async def txn_offset_commit(request: Request) -> dict[str, Any]:
        offsets = []
        for i, d in enumerate(field(request, "offsets", list, items=dict)):
            w = f"offsets[{i}]"
            offsets.append(CommitOffset(
                field(d, "topic", str, where=w), field(d, "partition", int, min_value=0, where=w),
                field(d, "offset", int, where=w),
                field(d, "leader_epoch", int, default=None, nullable=True, where=w),
                field(d, "metadata", str, default="", where=w),
            ))  # fmt: skip
        tid, pid, epoch = _producer(request)
        done = await guarded(request).txn_offset_commit(TxnOffsetCommit(
            transactional_id=tid, group_id=field(request, "group_id", str), producer_id=pid, producer_epoch=epoch,
            offsets=offsets, add_to_txn=field(request, "add_to_txn", bool, default=False),
            member_id=field(request, "member_id", str, default=""),
            generation_id=field(request, "generation_id", int, default=-1),
            group_instance_id=field(request, "group_instance_id", str, default=None, nullable=True),
        ))  # fmt: skip
        return {"partitions": [{"topic": r.topic, "partition": r.partition} for r in done]}

    async def describe_transactions(request: Request) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        for t in await guarded(request).describe_transactions(field(request, "transactional_ids", list, items=str)):
            if t.error is not None:
                out.append({"transactional_id": t.transactional_id, "error": t.error.to_wire()})
                continue
            out.append({"transactional_id": t.transactional_id, "state": t.state, "producer_id": t.producer_id,
                        "producer_epoch": t.producer_epoch, "timeout_ms": t.timeout_ms, "start_ms": t.start_ms,
                        "partitions": [[topic, p] for topic, p in t.partitions]})
        return {"transactions": out}

    async def list_transactions(request: Request) -> dict[str, Any]:
        listing = await guarded(request).list_transactions(ListTransactions(
            field(request, "states", list, items=str, default=None, nullable=True),
            field(request, "producer_ids", list, items=int, default=None, nullable=True),
            field(request, "min_duration_ms", int, default=-1)))
        return {"node_id": listing.node_id, "transactions": [
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
            for t in listing.transactions]}

    return guarded_at_port({
        "find_txn_coordinator": find_txn_coordinator,
        "init_txn_producer_id": init_txn_producer_id,
        "add_partitions_to_txn": add_partitions_to_txn,
        "add_offsets_to_txn": add_offsets_to_txn,
        "end_txn": end_txn,
        "txn_offset_commit": txn_offset_commit,
        "describe_transactions": describe_transactions,
        "list_transactions": list_transactions,
    })

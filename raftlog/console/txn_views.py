"""The console's transactions page (issue 42; app.py routes it): /transactions shows

* every transactional id whose transaction is not finished (Ongoing, PrepareCommit,
  PrepareAbort), as its coordinator holds it: producer id, epoch, state, age (now minus the
  transaction's start), timeout and the partitions it wrote to;
* per partition of those transactions, the open transactions its leader holds (Kafka's
  DescribeProducers): producer id, epoch, the transaction's first offset there, and the last
  stable offset they hold back beside the high watermark (what read_committed readers wait for).

Read with the visitor's own clients (ACLs apply: ids the visitor may not DESCRIBE are left out
by the coordinators). At most MAX_SHOWN transactional ids are described. A partition whose
leader does not answer shows its error in place; the page never fails for one of them.
"""

from __future__ import annotations

import time
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from raftlog.base.errors import RaftlogError, error_from_wire
from raftlog.base.topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_PARTITIONS,
    partition_for_transactional_id,
)
from raftlog.client.request import list_offsets_request
from raftlog.console.views import render, run_blocking

__all__ = ["transactions"]

OPEN_STATES: Final = ("Ongoing", "PrepareCommit", "PrepareAbort")
MAX_SHOWN: Final = 200  # transactional ids described on one page


def _open_transactions(cs: Any) -> list[dict[str, Any]]:
    """The described open transactions, by transactional id (coordinators' view)."""
    admin = cs.admin
    if TRANSACTION_STATE_TOPIC not in admin.list_topics(internal=True):
        return []
    listed = admin.request_many([({"op": "list_transactions", "states": list(OPEN_STATES)}, (TRANSACTION_STATE_TOPIC, p))
                                 for p in range(TRANSACTION_STATE_TOPIC_PARTITIONS)])
    ids = sorted({t["transactional_id"] for a in listed for t in a.get("transactions") or ()})[:MAX_SHOWN]
    if not ids:
        return []
    answers = admin.request_many([
        ({"op": "describe_transactions", "transactional_ids": [tid]},
         (TRANSACTION_STATE_TOPIC, partition_for_transactional_id(tid, TRANSACTION_STATE_TOPIC_PARTITIONS)))
        for tid in ids])
    now_ms = int(time.time() * 1000)
    out = []
    for a in answers:
        for t in a.get("transactions") or ():
            if t.get("error") or t.get("state") not in OPEN_STATES:
                continue  # finished since it was listed, or not ours to see
            start = t.get("start_ms", -1)
            out.append({**t, "age_s": round((now_ms - start) / 1000, 1) if start and start > 0 else None,
                        "partitions": sorted((p[0], p[1]) for p in t.get("partitions") or ())})
    return out


def _partition_rows(cs: Any, txns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per partition of `txns` (user topics), its leader's open transactions and offsets."""
    by_producer = {t["producer_id"]: t for t in txns}
    tps = sorted({tp for t in txns for tp in t["partitions"] if tp[0] != OFFSETS_TOPIC})
    if not tps:
        return []
    requests = []
    for t, p in tps:
        requests.append(({"op": "describe_producers", "partitions": [{"topic": t, "partition": p}]}, (t, p)))
        requests.append((list_offsets_request([(t, p, -1)]), (t, p)))
        requests.append((list_offsets_request([(t, p, -1)], read_committed=True), (t, p)))
    try:
        answers = cs.admin.request_many(requests)
    except RaftlogError as exc:  # one leader away: say so for every row rather than fail the page
        return [{"topic": t, "partition": p, "error": str(exc), "open": []} for t, p in tps]
    rows = []
    for i, (t, p) in enumerate(tps):
        producers, end, stable = (answers[3 * i + k]["partitions"][0] for k in range(3))
        error = producers.get("error") or end.get("error") or stable.get("error")
        if error:
            rows.append({"topic": t, "partition": p, "error": str(error_from_wire(error)), "open": []})
            continue
        open_txns = []
        for pr in producers.get("producers") or ():
            if pr.get("current_txn_start_offset", -1) < 0:
                continue
            txn = by_producer.get(pr["producer_id"])
            open_txns.append({**pr, "transactional_id": txn["transactional_id"] if txn else None,
                              "age_s": txn["age_s"] if txn else None})
        rows.append({"topic": t, "partition": p, "error": None, "high_watermark": end["offset"],
                     "last_stable_offset": stable["offset"],
                     "open": sorted(open_txns, key=lambda o: o["current_txn_start_offset"])})
    return rows


def _page(cs: Any) -> dict[str, Any]:
    txns = _open_transactions(cs)
    return {"transactions": txns, "partitions": _partition_rows(cs, txns), "max_shown": MAX_SHOWN}


async def transactions(request: Request) -> Response:
    return render(request, "transactions.html", **await run_blocking(request, _page))

"""The checker of the ``txn`` workload: Kafka transactions judged the way Jepsen's Kafka
workload (and Elle) judge them. Pure: ``check_txn(history) -> CheckResult``; no I/O, no clock.

History shapes (beyond `jepsen_style_tests.history`): a ``txn`` op is one transaction of a
transactional producer, optionally reading first through the same process's read_committed
consumer (consume-transform-produce):

=========  ===========================================  =====================================
f          invoke value                                 completion value
=========  ===========================================  =====================================
``txn``    ``[["poll"], ["send", key, v], ...]``         the same micro-ops, done:
           (extra ``abort: bool``: abort on purpose)    ``["poll", {key: [[offset, v], ...]}]``
                                                        and ``["send", key, [offset|None, v]]``
=========  ===========================================  =====================================

``ok`` — committed (``commit_transaction`` returned), every send's offset known; ``fail`` —
aborted for certain (``abort_transaction`` returned: on purpose, error ``aborted``, or after an
abortable error); ``info`` — unknown. The poll micro-op (if any) happened whatever the outcome:
it is a read of the process's consumer like a ``poll`` op (``positions`` in the completion's
extra). A transaction *must have committed* if it ended ``ok``, or ``info`` and one of its
values was read by an ok read.

Checks, on top of every check of `checker.check` (which sees each send micro-op as a ``send``
of the transaction's outcome and each poll micro-op as a ``poll``: so ``G1a``, the *aborted
read*, is a value of an aborted transaction seen by a read_committed consumer; ``lost-write``,
``unseen``, ``duplicate``, ``inconsistent-offsets`` (external consistency: one offset, one
value, for every reader and the writer), nonmonotonic and skipping polls and sends (internal
consistency: offsets increase per partition, inside a poll and inside a transaction)):

``G1b``        intermediate read: a consumer returned a write of committed transaction T on key
               k and read past (returned a later offset of k, or its position passed) T's other
               write on k without returning it — it saw T's intermediate state of k as final.
``torn-txn``   the same across partitions: the consumer returned a write of T on one key and
               read past T's write on another key without returning it.
``G0``, ``G1c``, ``G0-realtime``, ``G1c-realtime``
               a cycle in the dependency graph of committed transactions (below), named as
               Elle names them: ``G0`` with write-write edges only, ``G1c`` with a write-read
               edge, ``-realtime`` when a real-time edge is needed to close it.

The dependency graph is built over *events*, not whole transactions, because Kafka orders no
two concurrent transactions: two producers may interleave their appends to two partitions in
opposite orders (a write-write "cycle" between whole transactions that is legal). Each
transaction T has a start (its invoke), a read (its poll micro-op), one event per append, and
an end (the commit decision), with T.start -> T.read -> each append -> T.end. Edges between
transactions, each a fact about time that a correct implementation cannot break:

* ww: on each key, the append at the lower offset -> the next append (log order);
* wr: T.end -> U.read when U's poll returned a value of T (read_committed: only after T's commit);
* rt: T.end -> U.start when T completed ``ok`` before U was invoked (Elle's real-time frontier,
  so the edges stay few).

A cycle is a contradiction: some event happened before itself. Reading data past the LSO (an
open transaction's appends) closes one: U reads T's append, then appends to a key T appends to
later, before T commits: T.end -> U.read -> U.append(k) -> T.append(k) -> T.end.
"""

from __future__ import annotations

import dataclasses
import gc
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from .checker import ANOMALIES, CheckerInputError, CheckResult, check
from .history import History, Op

__all__ = ["TXN_ANOMALIES", "check_txn", "to_send_history"]

TXN_ANOMALIES = ("G1b", "torn-txn", "G0", "G1c", "G0-realtime", "G1c-realtime")
_CYCLES_MAX = 16  # cycles reported per anomaly name (the count of components is kept)
_CASE_INDEX_FIELDS = ("op", "writer", "max_read")


@dataclasses.dataclass
class _Txn:
    index: int  # the invoke's history index: the transaction's name in every case
    process: Any
    type: str  # ok | fail | info
    sends: list[tuple[str, Any, int | None]]  # (key, v, offset)
    reads: dict[str, list[tuple[int, Any]]]
    polled: bool
    positions: dict[str, int]
    done_index: int | None


def _micro_ops(value: Any, where: int) -> list[list[Any]]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, (list, tuple)) and m for m in value):
        raise CheckerInputError(f"txn {where} value is not a list of micro-ops: {value!r}")
    return [list(m) for m in value]


def _parse_txn(invoke: Op, done: Op | None) -> _Txn:
    planned = _micro_ops(invoke.value, invoke.index)
    kind = done.type if done is not None else "info"
    result = _micro_ops(done.value, done.index) if done is not None and done.value is not None else planned
    planned_sends = [(str(m[1]), m[2]) for m in planned if m[0] == "send"]
    sends: list[tuple[str, Any, int | None]] = []
    reads: dict[str, list[tuple[int, Any]]] = {}
    polled = False
    for m in result:
        if m[0] == "send":
            key, got = str(m[1]), m[2]
            offset, v = (got[0], got[1]) if isinstance(got, (list, tuple)) else (None, got)
            sends.append((key, v, int(offset) if offset is not None and kind == "ok" else None))
        elif m[0] == "poll" and len(m) > 1 and isinstance(m[1], Mapping):
            polled = True
            for key, pairs in m[1].items():
                reads[str(key)] = [(int(p[0]), p[1]) for p in pairs]
    if [(k, v) for k, v, _ in sends] != planned_sends:
        raise CheckerInputError(f"txn {invoke.index} completed with other sends than it planned")
    if kind == "ok" and any(o is None for _, _, o in sends):
        raise CheckerInputError(f"ok txn {done.index if done else '?'} has a send without an offset")
    positions = {str(k): int(o) for k, o in ((done.get("positions") or {}) if done is not None else {}).items()}
    return _Txn(invoke.index, invoke.process, kind, sends, reads, polled, positions,
                done.index if done is not None else None)


def to_send_history(history: History) -> tuple[History, list[int], list[_Txn]]:
    """The history `checker.check` understands: each txn becomes its poll micro-op (an ok
    ``poll``) and one ``send`` per append with the transaction's outcome, all at the txn's
    completion on its process. Returns it, the original index of each of its ops, and the txns."""
    txns: dict[int, _Txn] = {}
    done_of: dict[int, int] = {}
    for pair in history.pairs():
        if pair.f == "txn":
            txn = _parse_txn(pair.invoke, pair.completion)
            txns[pair.invoke.index] = txn
            if pair.completion is not None:
                done_of[pair.completion.index] = pair.invoke.index
    ops: list[Op] = []
    origin: list[int] = []

    def emit(op: Op, where: int) -> None:
        ops.append(dataclasses.replace(op, index=len(ops)))
        origin.append(where)

    def expand(txn: _Txn, at: Op | None) -> None:
        t = at.time_ns if at is not None else 0
        where = at.index if at is not None else txn.index
        if txn.polled:
            reads = {k: [[o, v] for o, v in kv] for k, kv in txn.reads.items()}
            emit(Op("invoke", "poll", txn.process, None, t), where)
            emit(Op("ok", "poll", txn.process, reads, t, extra={"positions": txn.positions}), where)
        for key, v, offset in txn.sends:
            emit(Op("invoke", "send", txn.process, [key, v], t), txn.index)
            if txn.type == "ok":
                emit(Op("ok", "send", txn.process, [key, [offset, v]], t), txn.index)
            elif txn.type == "fail":
                emit(Op("fail", "send", txn.process, [key, v], t, error="aborted"), txn.index)
            else:
                emit(Op("info", "send", txn.process, [key, [None, v]], t, error="txn-unknown"), txn.index)

    for op in history:
        if op.f != "txn":
            emit(op, op.index)
        elif not op.is_invoke:
            expand(txns[done_of[op.index]], op)
    for txn in txns.values():
        if txn.done_index is None:
            expand(txn, None)  # the run ended with it in flight: info, at the end
    return History(ops), origin, sorted(txns.values(), key=lambda x: x.index)


def _remap(cases: list[dict[str, Any]], origin: list[int]) -> list[dict[str, Any]]:
    out = []
    for case in cases:
        case = dict(case)
        for name in _CASE_INDEX_FIELDS:
            if isinstance(case.get(name), int):
                case[name] = origin[case[name]]
        if isinstance(case.get("ops"), list):
            case["ops"] = [origin[i] if isinstance(i, int) else i for i in case["ops"]]
        out.append(case)
    return out


class _Reads:
    """Per process: what its consumer returned and how far it read, per key and session."""

    def __init__(self) -> None:
        # process -> its sessions, each key -> [lo, hi) offsets covered; and the values returned
        self.covered: dict[Any, list[dict[str, list[int]]]] = defaultdict(lambda: [{}])
        self.returned: dict[Any, set[tuple[str, Any]]] = defaultdict(set)

    def reset(self, process: Any, keys: Iterable[str] = ()) -> None:
        """A fresh consumer (no keys), or an assign: the keys named read from the beginning."""
        self.covered[process].append({str(k): [0, 0] for k in keys})

    def read(self, process: Any, reads: Mapping[str, list[tuple[int, Any]]], positions: Mapping[str, int]) -> None:
        ranges = self.covered[process][-1]
        for key, kv in reads.items():
            for offset, value in kv:
                self.returned[process].add((key, value))
                lo_hi = ranges.setdefault(key, [offset, offset + 1])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], offset), max(lo_hi[1], offset + 1)
        for key, position in positions.items():
            if key in ranges:
                ranges[key][1] = max(ranges[key][1], int(position))

    def read_past(self, process: Any, key: str, offset: int) -> bool:
        return any(key in r and r[key][0] <= offset < r[key][1] for r in self.covered.get(process, ()))


def _poll_reads(op: Op) -> dict[str, list[tuple[int, Any]]]:
    if not isinstance(op.value, Mapping):
        return {}
    return {str(k): [(int(p[0]), p[1]) for p in kv if p[0] is not None] for k, kv in op.value.items()}


def _torn(history: History, txns: list[_Txn], committed: set[int], offset_of: Mapping[tuple[str, Any], int],
          found: dict[str, list[dict[str, Any]]]) -> None:
    reads = _Reads()
    by_index = {t.done_index: t for t in txns if t.done_index is not None}
    for op in history:
        if op.is_invoke or not op.is_client:
            continue
        if op.f == "poll" and op.type == "ok":
            reads.read(op.process, _poll_reads(op), op.get("positions") or {})
        elif op.f == "txn" and op.index in by_index and by_index[op.index].polled:
            t = by_index[op.index]  # its poll happened whatever the outcome
            reads.read(op.process, t.reads, t.positions)
        if op.type == "info":
            reads.reset(op.process)  # a fresh consumer
        elif op.f == "assign" and op.type == "ok" and isinstance(op.value, list):
            # txn_client (as kafka_client) assigns new keys from the beginning; kept keys were.
            reads.reset(op.process, op.value)
    for txn in txns:
        if txn.index not in committed:
            continue
        writes = [(k, v, offset_of.get((k, v))) for k, v, _ in txn.sends]
        for process, seen in reads.returned.items():
            got = [(k, v) for k, v, _ in writes if (k, v) in seen]
            if not got:
                continue
            for key, value, offset in writes:
                if (key, value) in seen or offset is None or not reads.read_past(process, key, offset):
                    continue
                same_key = any(k == key for k, _ in got)
                found["G1b" if same_key else "torn-txn"].append(
                    {"txn": txn.index, "process": process, "key": key, "value": value, "offset": offset,
                     "seen": [[k, v] for k, v in got]})


def _graph(txns: list[_Txn], committed: set[int], offset_of: Mapping[tuple[str, Any], int],
           history: History) -> dict[str, dict[tuple, set[tuple]]]:
    """Edges by kind: ``intra`` (start -> read -> appends -> end), ``ww``, ``wr``, ``rt``."""
    edges: dict[str, dict[tuple, set[tuple]]] = {k: defaultdict(set) for k in ("intra", "ww", "wr", "rt")}
    writer: dict[tuple[str, Any], int] = {}
    by_key: dict[str, list[tuple[int, int, Any]]] = defaultdict(list)
    for t in txns:
        if t.index not in committed:
            continue
        start, read, end = (t.index, "start"), (t.index, "read"), (t.index, "end")
        edges["intra"][start].add(read)
        for key, value, _ in t.sends:
            append = (t.index, "append", key, value)
            edges["intra"][read].add(append)
            edges["intra"][append].add(end)
            writer[(key, value)] = t.index
            if (key, value) in offset_of:
                by_key[key].append((offset_of[(key, value)], t.index, value))
    for key, appends in by_key.items():
        appends.sort(key=lambda a: a[0])
        for (_, ta, va), (_, tb, vb) in zip(appends, appends[1:]):
            edges["ww"][(ta, "append", key, va)].add((tb, "append", key, vb))
    for t in txns:
        if t.index not in committed:
            continue
        for key, kv in t.reads.items():
            for _, value in kv:
                w = writer.get((key, value))
                if w is not None and w != t.index:
                    edges["wr"][(w, "end")].add((t.index, "read"))
    # rt: Elle's frontier of ok transactions completed and not yet followed by another.
    ok_by_done = {t.done_index: t for t in txns if t.type == "ok" and t.done_index is not None}
    index_committed = {t.index for t in txns if t.index in committed}
    frontier: set[int] = set()
    preds: dict[int, set[int]] = {}
    for op in history:
        if op.f != "txn":
            continue
        if op.is_invoke and op.index in index_committed:
            preds[op.index] = set(frontier)
            for u in frontier:
                edges["rt"][(u, "end")].add((op.index, "start"))
        elif op.index in ok_by_done:
            t = ok_by_done[op.index]
            frontier = (frontier - preds.get(t.index, set())) | {t.index}
    return edges


def _sccs(nodes: Iterable[tuple], adj: Mapping[tuple, set[tuple]]) -> list[list[tuple]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index: dict[tuple, int] = {}
    low: dict[tuple, int] = {}
    on_stack: set[tuple] = set()
    stack: list[tuple] = []
    out: list[list[tuple]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(adj.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def _cycle(component: list[tuple], adj: Mapping[tuple, set[tuple]]) -> list[tuple]:
    """A shortest cycle through the component's first node (BFS inside the component)."""
    inside = set(component)
    start = min(component, key=repr)
    parent: dict[tuple, tuple] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(adj.get(node, ()), key=repr):
            if child not in inside:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    return [start, start]


def _cycles(edges: dict[str, dict[tuple, set[tuple]]], found: dict[str, list[dict[str, Any]]]) -> None:
    levels = (("G0", ("intra", "ww")), ("G1c", ("intra", "ww", "wr")), ("G0-realtime", ("intra", "ww", "rt")),
              ("G1c-realtime", ("intra", "ww", "wr", "rt")))
    explained: set[tuple] = set()
    for name, kinds in levels:
        adj: dict[tuple, set[tuple]] = defaultdict(set)
        for kind in kinds:
            for a, bs in edges[kind].items():
                adj[a] |= bs
        nodes = sorted(set(adj) | {b for bs in adj.values() for b in bs}, key=repr)
        for component in _sccs(nodes, adj):
            if explained & set(component):
                continue
            explained |= set(component)
            if len(found[name]) >= _CYCLES_MAX:
                found[name].append({"component_events": len(component)})
                continue
            path = _cycle(component, adj)
            steps = []
            for a, b in zip(path, path[1:]):
                kind = next((k for k in kinds if b in edges[k].get(a, ())), "?")
                if kind != "intra":
                    steps.append({"from": a[0], "to": b[0], "edge": kind, **({"key": a[2]} if kind == "ww" else {})})
            found[name].append({"txns": sorted({e[0] for e in component}), "cycle": steps})


def check_txn(history: History | Iterable[Op], *, allowed: Iterable[str] = ()) -> CheckResult:
    """Checks a ``txn`` workload history (module doc); the verdict as `checker.check`'s."""
    # Millions of small objects and none of them cyclic garbage: without the collector's full
    # passes (each over the whole heap) a ten-minute history checks in a fraction of the time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _check_txn(history, allowed)
    finally:
        if enabled:
            gc.enable()


def _check_txn(history: History | Iterable[Op], allowed: Iterable[str]) -> CheckResult:
    if not isinstance(history, History):
        history = History(history)
    allowed_set = frozenset(allowed)
    unknown_allowed = allowed_set - set(ANOMALIES) - set(TXN_ANOMALIES)
    if unknown_allowed:
        raise CheckerInputError(f"unknown anomaly names in allowed: {sorted(unknown_allowed)}")
    sends_history, origin, txns = to_send_history(history)
    base = check(sends_history, allowed=allowed_set & set(ANOMALIES))
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, cases in base.anomalies.items():
        found[name] = _remap(cases, origin)

    # Offsets: from acks and from every read (the lowest, should there be several).
    offset_of: dict[tuple[str, Any], int] = {}

    def note(key: str, value: Any, offset: int) -> None:
        offset_of[(key, value)] = min(offset, offset_of.get((key, value), offset))

    read_values: set[tuple[str, Any]] = set()
    for op in sends_history:
        if op.f == "poll" and op.type == "ok":
            for key, kv in _poll_reads(op).items():
                for offset, value in kv:
                    note(key, value, offset)
                    read_values.add((key, value))
    for t in txns:
        for key, value, offset in t.sends:
            if offset is not None:
                note(key, value, offset)
    committed = {t.index for t in txns
                 if t.type == "ok" or (t.type == "info" and any((k, v) in read_values for k, v, _ in t.sends))}
    _torn(history, txns, committed, offset_of, found)
    _cycles(_graph(txns, committed, offset_of, history), found)

    order = list(ANOMALIES) + list(TXN_ANOMALIES)
    anomalies = {name: found[name] for name in order if found.get(name)}
    bad = tuple(name for name in anomalies if name not in allowed_set)
    txn_counts: dict[str, int] = defaultdict(int)
    for t in txns:
        txn_counts[t.type] += 1
    unknown_reasons = list(base.unknown_reasons)
    if not any(t.type == "ok" for t in txns):
        unknown_reasons.insert(0, "no transaction committed")
    verdict = "invalid" if bad else ("unknown" if unknown_reasons else "valid")
    stats = {**base.stats, "txns": dict(sorted(txn_counts.items())), "txns_committed": len(committed)}
    return CheckResult(verdict=verdict, anomalies=anomalies, bad=bad, unknown_reasons=tuple(unknown_reasons),
                       stats=stats)

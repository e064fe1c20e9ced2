"""The ``share`` workload's checker: a share group's guarantees (KIP-932) on a history of
`share_client` ops.

Facts it reads: ``send`` ops (ok: acknowledged, acks=all; info: maybe written), and ``share``
completions — deliveries (the records a member acquired in a poll, each with its delivery
count) and acknowledgements (with their type and whether the leader applied them: `result`
None). A delivery happened somewhere inside its op; an applied acknowledgement happened inside
its op, and its member held the record's lock from its poll until then.

Anomalies (all make the history invalid):
* ``lost`` — an acknowledged send never delivered.
* ``phantom`` — a delivered value no send wrote.
* ``double-accept`` — a value ACCEPTed twice with success (or ACCEPTed and REJECTed).
* ``redelivered-after-accept`` / ``redelivered-after-reject`` — a delivery begun after an
  applied ACCEPT / REJECT of the value completed.
* ``redelivered-after-exhausted`` — a delivery begun after an applied RELEASE of the value's
  delivery number `limit` (it is archived).
* ``delivery-count-exceeded`` — a delivery count above `limit` (``max.delivery.attempts``).
* ``double-acquisition`` — a value delivered to member B entirely within member A's lock (A's
  poll completed before B's began, and A's applied acknowledgement began after B's poll ended).
* ``gap-over-record`` — an offset acquired without its record (archived as a GAP by the
  member) where an acknowledged send wrote a value.
* ``unsettled`` — a delivered value never ACCEPTed or REJECTed nor archived at the limit, with
  no acknowledgement of unknown outcome (any sent one that failed: see `_maybe_applied`) and
  no lost op that could have taken its last deliveries (a step that ended ``info``, or a poll
  whose share_fetch of the value's partition had an attempt go unanswered, after the last
  delivery seen): the final drain should have settled it.

Stats: deliveries, redeliveries, accepted, rejected, exhausted, maybe-settled.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from .checker import CheckResult
from .history import History, Pair

__all__ = ["check_share", "SHARE_ANOMALIES"]

SHARE_ANOMALIES: Final = (
    "lost", "phantom", "double-accept", "redelivered-after-accept", "redelivered-after-reject",
    "redelivered-after-exhausted", "delivery-count-exceeded", "double-acquisition", "unsettled", "gap-over-record",
)
MAX_CASES: Final = 1000  # per anomaly


@dataclass(frozen=True, slots=True)
class _Delivery:
    value: Any
    key: str
    offset: int
    count: int
    process: Any
    start_ns: int  # the poll's invoke
    end_ns: int  # the poll's completion


@dataclass(frozen=True, slots=True)
class _Ack:
    value: Any
    type: str
    count: int
    result: str | None
    process: Any
    start_ns: int
    end_ns: int


def _share_facts(pairs: Iterable[Pair],
                 ) -> tuple[list[_Delivery], list[_Ack], list[Pair], list[Any], list[tuple[Any, int]]]:
    deliveries, acks, lost_steps, gaps = [], [], [], []
    unanswered: list[tuple[Any, int]] = []  # (key, the poll's completion time)
    for p in pairs:
        if p.f != "share":
            continue
        if p.type != "ok" or p.completion is None:
            lost_steps.append(p)
            continue
        value = p.completion.value or {}
        t0, t1 = p.invoke.time_ns, p.completion.time_ns
        for key, offset, v, count in value.get("deliveries") or ():
            deliveries.append(_Delivery(v, key, offset, count, p.process, t0, t1))
        for key, offset, v, count, kind, result in value.get("acks") or ():
            acks.append(_Ack(v, kind, count, result, p.process, t0, t1))
        gaps += [(key, offset, p.process) for key, offset in value.get("gaps") or ()]
        unanswered += [(key, t1) for key in value.get("unanswered") or ()]
    return deliveries, acks, lost_steps, gaps, unanswered


def _sends(history: History) -> tuple[dict[Any, tuple[str, int]], set[Any]]:
    acked, maybe = {}, set()
    for p in history.pairs():
        if p.f != "send":
            continue
        if p.type == "ok" and p.completion is not None:
            key, (offset, v) = p.completion.value
            acked[v] = (key, offset)
        elif p.type == "info":
            v = p.invoke.value[1]
            maybe.add(v[1] if isinstance(v, list) else v)
    return acked, maybe


def check_share(history: History, *, limit: int = 5) -> CheckResult:
    """The verdict on a ``share`` history; `limit` is the group's delivery count limit."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def flag(name: str, case: dict[str, Any]) -> None:
        if len(found[name]) < MAX_CASES:
            found[name].append(case)

    acked_sends, maybe_sends = _sends(history)
    deliveries, acks, lost_steps, gaps, unanswered = _share_facts(history.pairs())
    written = {where: v for v, where in acked_sends.items()}
    for key, offset, process in gaps:
        if (key, offset) in written:
            flag("gap-over-record", {"key": key, "offset": offset, "value": written[(key, offset)], "process": process})
    by_value: dict[Any, list[_Delivery]] = defaultdict(list)
    for d in deliveries:
        by_value[d.value].append(d)
    acks_by_value: dict[Any, list[_Ack]] = defaultdict(list)
    for a in acks:
        acks_by_value[a.value].append(a)

    for v in sorted(set(acked_sends) - set(by_value), key=str):
        flag("lost", {"value": v})
    for v in sorted(set(by_value) - set(acked_sends) - maybe_sends, key=str):
        flag("phantom", {"value": v, "deliveries": len(by_value[v])})
    stats: Counter[str] = Counter(deliveries=len(deliveries))
    for v, ds in by_value.items():
        ds.sort(key=lambda d: d.start_ns)
        stats["redeliveries"] += len(ds) - 1
        applied = [a for a in acks_by_value.get(v, ()) if a.result is None]
        for d in ds:
            if d.count > limit:
                flag("delivery-count-exceeded", {"value": v, "count": d.count, "limit": limit, "process": d.process})
        finals = [a for a in applied if a.type in ("accept", "reject")]
        if len([a for a in finals if a.type == "accept"]) > 1 or len({a.type for a in finals}) > 1:
            flag("double-accept", {"value": v, "acks": [[a.type, a.process, a.end_ns] for a in finals]})
        ends = [(a, f"redelivered-after-{a.type}") for a in finals]
        ends += [(a, "redelivered-after-exhausted") for a in applied if a.type == "release" and a.count >= limit]
        for a, name in ends:
            later = [d for d in ds if d.start_ns > a.end_ns]
            if later:
                flag(name, {"value": v, "ack_process": a.process, "ack_end_ns": a.end_ns,
                            "delivered_to": later[0].process, "delivered_at_ns": later[0].start_ns,
                            "count": later[0].count})
        _double_acquisitions(v, ds, applied, flag)
        exhausted = any(a.type == "release" and a.count >= limit for a in applied) or ds[-1].count >= limit
        if finals:
            stats["accepted" if finals[0].type == "accept" else "rejected"] += 1
        elif exhausted:
            stats["exhausted"] += 1
        else:
            last = ds[-1]
            unknown = [a for a in acks_by_value.get(v, ()) if a.result is not None and a.end_ns >= last.end_ns
                       and _maybe_applied(a.result)]
            # Lost steps (info polls) after it may have taken it up to the limit unseen.
            hidden = sum(1 for p in lost_steps if p.invoke.time_ns >= last.start_ns)
            hidden += sum(1 for key, end_ns in unanswered if key == last.key and end_ns >= last.end_ns)
            if unknown or last.count + hidden >= limit:
                stats["maybe-settled"] += 1
            else:
                flag("unsettled", {"value": v, "last_count": last.count, "last_process": last.process,
                                   "last_delivery_ns": last.end_ns})
    bad = tuple(n for n in SHARE_ANOMALIES if found.get(n))
    return CheckResult("invalid" if bad else "valid", dict(found), bad, (),
                       {**stats, "acked_sends": len(acked_sends), "lost_steps": len(lost_steps)})


def _maybe_applied(result: str) -> bool:
    """Whether a failed acknowledgement may have been applied all the same: every one that was
    sent. Even INVALID_RECORD_STATE: the client retries a request whose connection broke, and a
    first attempt the old leader applied (its answer lost with it) makes the retry at the new
    leader find the record no longer held."""
    return result != "not-held"


def _double_acquisitions(v: Any, ds: list[_Delivery], applied: list[_Ack], flag: Any) -> None:
    """A holds the lock from the end of its poll until its applied acknowledgement begins (the
    ack that follows that poll in A's process); B's whole poll inside that span acquired a
    record A held."""
    for a_delivery in ds:
        ack = min((a for a in applied if a.process == a_delivery.process and a.start_ns >= a_delivery.end_ns
                   and a.count == a_delivery.count), key=lambda a: a.start_ns, default=None)
        if ack is None:
            continue
        for b in ds:
            if b is not a_delivery and b.start_ns > a_delivery.end_ns and b.end_ns < ack.start_ns:
                flag("double-acquisition", {"value": v, "holder": a_delivery.process, "holder_count": a_delivery.count,
                                            "other": b.process, "other_count": b.count})

"""Checkers over a history: Kafka-style anomalies, named as Jepsen's Kafka workload names them.

Pure: ``check(history) -> CheckResult``; no I/O, no clock. Op shapes are those documented in
`jepsen_style_tests.history` (one send per op; polls return ``{key: [[offset, v], ...]}``).
Values are unique per key: a value sent twice to one key is a harness bug and raises
`CheckerInputError`.

Facts built first (Jepsen's "analysis"):

* **writer of (k, v)** — the send pair that carried v to k (invoke without completion = info).
* **ok reads** — for each key, the values returned by ``ok`` polls.
* **must have committed** — a send that ended ``ok``, or ``info`` and its value was read by
  an ``ok`` poll.
* **log of k** — offset -> set of values, from every poll that returned pairs (any outcome:
  a consumer must never return garbage) and from every send that must have committed and
  knows its offset.
* **index** — the *dense* position of an offset among the offsets of k's log that hold a
  value. Offsets with no known value (compacted away, never read, control records) do not
  count, so a gap with no value in it is not a skip.

Anomalies (a case is a dict; ``op``/``ops`` fields are history indexes):

``inconsistent-offsets``  two or more distinct values at one offset of one key.
``duplicate``             one value at two or more offsets of one key.
``lost-write``            for key k, let *bound* be the highest index at which an ``ok`` poll
                          read some value v (using v's first index). A value whose last index is
                          <= bound, whose writer must have committed, and that no ``ok`` poll
                          read, was lost: later offsets were read, it never was.
``unseen``                a value whose send ended ``ok`` that no ``ok`` poll read by the end of
                          the history — counted only for keys whose final reads reached the end
                          of the log (see *unknown*); Jepsen counts it always.
``nonmonotonic-send``     one process's successive sends (``ok``/``info`` whose value is in the
                          log: at its acked offset, else the first offset it was read at) to one
                          key whose index does not increase.
``nonmonotonic-poll``     one process's successive ``ok`` polls of one key where the first
                          offset of the later poll is at or before the last offset of the
                          earlier (index delta < 1).
``poll-skip``             the same, with index delta > 1: values the consumer should have read
                          in between exist in the log; the case lists them.
``int-nonmonotonic-poll``, ``int-poll-skip``
                          the same two, between consecutive pairs inside one poll of one key.
``G1a``                   aborted read: an ``ok`` poll read a value whose send ended ``fail``.
``unwritten-read``        a poll returned a value that no send ever carried (garbage; Jepsen
                          throws here instead).
``double-assignment``     group check: in one group and generation, one key owned by two
                          member ids (from ``assignment`` / ``rebalance_log`` of ``ok`` ops).
``nonmonotonic-commit``   group check: an ``ok`` ``commit`` or ``offset-fetch`` for (group, key)
                          that was *invoked after* another of those *completed* with a higher
                          offset: a committed offset went backwards in real time.
``orphaned-process``      operations check: an ``ok`` ``kill-supervisor`` nemesis op whose side
                          cluster left processes running (``left``) or ports held
                          (``ports_held``) after its supervisor was SIGKILLed.
``lying-batch-accepted``  stranger check: an ``ok`` ``start-stranger`` op whose lying record
                          batches (header and records disagree, valid CRC) a leader accepted
                          (error code 0) instead of refusing.
``stranger-starved-clients``
                          stranger check: an ``ok`` ``start-stranger``/``stop-stranger`` op in
                          which a node that served a fresh client at the stranger's baseline
                          (native client port, Kafka port) did not serve one while the
                          stranger held its idle connections and oversized frames open.

Per-process poll tracking follows Jepsen: an ``ok`` ``assign``/``subscribe`` keeps only the
keys it names (``seek_to_beginning`` forgets all); keys in an op's ``rebalance_log`` are not
compared; and (beyond Jepsen) an ``info`` poll forgets the process's positions, and polls in
different ``generation_id``s are not compared.

Verdict: ``invalid`` if any anomaly not in `allowed` was found; else ``unknown`` if the
history cannot show much — no send was acknowledged, no ``ok`` poll read anything, or some key
has acknowledged values unseen while the final reads did not reach that key's end; else
``valid``. The *end* of a key is the ``log_end_offset`` of the last ``ok`` ``end-offsets`` op;
without one, one past the highest offset known for the key. Reads *reached* it if an ``ok``
poll returned an offset >= end - 1 or reported ``positions[k] >= end``. If the cluster reports
an end below an acknowledged offset, reads can reach the end and the value is then ``unseen``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .history import COMPLETION_TYPES, HarnessError, History, Op, Pair

__all__ = ["ANOMALIES", "CheckResult", "CheckerInputError", "check"]

ANOMALIES = (
    "inconsistent-offsets",
    "duplicate",
    "lost-write",
    "unseen",
    "nonmonotonic-send",
    "nonmonotonic-poll",
    "poll-skip",
    "int-nonmonotonic-poll",
    "int-poll-skip",
    "G1a",
    "unwritten-read",
    "double-assignment",
    "nonmonotonic-commit",
    "orphaned-process",
    "lying-batch-accepted",
    "stranger-starved-clients",
)

_EXAMPLE_LIST_MAX = 32  # values listed in one case (unseen, poll-skip); counts say the rest


class CheckerInputError(HarnessError):
    code = "checker-input-invalid"


@dataclass(frozen=True)
class CheckResult:
    """The verdict with every case found.

    `anomalies` maps each anomaly name found to its cases (all of them); `bad` are the names
    that make it invalid; `unknown_reasons` say why a clean result is ``unknown``."""

    verdict: str
    anomalies: Mapping[str, list[dict[str, Any]]]
    bad: tuple[str, ...]
    unknown_reasons: tuple[str, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.verdict == "valid"

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(cases) for name, cases in self.anomalies.items()}

    def to_json_dict(self, *, examples_max: int = 8) -> dict[str, Any]:
        """A JSON-able summary: counts of each anomaly and its first `examples_max` cases."""
        return {
            "verdict": self.verdict,
            "valid": self.valid,
            "bad_anomalies": list(self.bad),
            "anomaly_counts": self.counts,
            "anomalies": {name: cases[:examples_max] for name, cases in self.anomalies.items()},
            "unknown_reasons": list(self.unknown_reasons),
            "stats": dict(self.stats),
        }


@dataclass(frozen=True, slots=True)
class _Send:
    pair: Pair
    key: str
    value: Any
    offset: int | None

    @property
    def type(self) -> str:
        return self.pair.type

    @property
    def op_index(self) -> int:
        done = self.pair.completion
        return done.index if done is not None else self.pair.invoke.index


def _parse_send(pair: Pair) -> _Send:
    """Key, value and (if known) offset of a send, from its completion or else its invoke."""
    invoke_value = pair.invoke.value
    if not (isinstance(invoke_value, (list, tuple)) and len(invoke_value) == 2):
        raise CheckerInputError(f"send {pair.invoke.index} value is not [key, v]: {invoke_value!r}")
    key, value = invoke_value
    offset = None
    done = pair.completion
    if done is not None and isinstance(done.value, (list, tuple)) and len(done.value) == 2:
        result = done.value[1]
        if isinstance(result, (list, tuple)) and len(result) == 2:
            offset = result[0] if pair.type in ("ok", "info") else None
            if result[1] != value:
                raise CheckerInputError(f"send {done.index} completed with value {result[1]!r}, sent {value!r}")
    if pair.type == "ok" and offset is None:
        raise CheckerInputError(f"ok send {done.index if done else '?'} has no offset")
    return _Send(pair, str(key), value, offset)


def _reads(op: Op | None) -> dict[str, list[tuple[int | None, Any]]]:
    """``{key: [(offset, value), ...]}`` returned by a poll completion (empty if none)."""
    if op is None or op.f != "poll" or not isinstance(op.value, Mapping):
        return {}
    out: dict[str, list[tuple[int | None, Any]]] = {}
    for key, pairs in op.value.items():
        out[str(key)] = [(pair[0], pair[1]) for pair in pairs]
    return out


class _KeyLog:
    """Offsets -> values of one key, with dense indexes."""

    def __init__(self) -> None:
        self.values_at: dict[int, set[Any]] = defaultdict(set)
        self.offsets_of: dict[Any, set[int]] = defaultdict(set)
        self._sorted: list[int] = []

    def add(self, offset: int, value: Any) -> None:
        self.values_at[offset].add(value)
        self.offsets_of[value].add(offset)

    def freeze(self) -> None:
        self._sorted = sorted(self.values_at)

    def index(self, offset: int) -> int:
        return bisect.bisect_left(self._sorted, offset)

    def offset_at(self, index: int) -> int:
        return self._sorted[index]

    def first_index(self, value: Any) -> int | None:
        offsets = self.offsets_of.get(value)
        return self.index(min(offsets)) if offsets else None

    def last_index(self, value: Any) -> int | None:
        offsets = self.offsets_of.get(value)
        return self.index(max(offsets)) if offsets else None

    def values_between(self, lo_index: int, hi_index: int, limit: int) -> list[Any]:
        """One value per offset strictly between two indexes, at most `limit` of them."""
        stop = min(hi_index, lo_index + 1 + limit)
        return [_sorted_values(self.values_at[self._sorted[i]])[0] for i in range(lo_index + 1, stop)]

    @property
    def max_offset(self) -> int | None:
        return self._sorted[-1] if self._sorted else None


def _sorted_values(values: Iterable[Any]) -> list[Any]:
    return sorted(values, key=lambda v: (not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else repr(v)))


def _orphans(history: History, found: dict[str, list[dict[str, Any]]]) -> None:
    """``orphaned-process``: a supervisor kill that left processes or ports behind."""
    for op in history:
        if op.f == "kill-supervisor" and op.type == "ok" and isinstance(op.value, Mapping):
            left, held = list(op.value.get("left") or ()), list(op.value.get("ports_held") or ())
            if left or held:
                found["orphaned-process"].append({"op": op.index, "left": left, "ports_held": held,
                                                  "supervisor": op.value.get("supervisor")})


def _stranger(history: History, found: dict[str, list[dict[str, Any]]]) -> None:
    """``lying-batch-accepted`` and ``stranger-starved-clients`` (stranger.py's op values)."""
    baseline: Mapping[str, Any] = {}
    for op in history:
        if op.type != "ok" or op.f not in ("start-stranger", "stop-stranger") or not isinstance(op.value, Mapping):
            continue
        if op.f == "start-stranger":
            baseline = op.value.get("baseline") or {}
            for entry in op.value.get("lying") or ():
                if isinstance(entry, Mapping) and entry.get("accepted"):
                    found["lying-batch-accepted"].append({"op": op.index, **entry})
        for node, listeners in sorted((op.value.get("served") or {}).items()):
            before = baseline.get(node) or {}
            starved = sorted(k for k, ok in listeners.items() if not ok and before.get(k))
            if starved:
                found["stranger-starved-clients"].append({"op": op.index, "f": op.f, "node": node,
                                                          "listeners": starved})


def check(history: History | Iterable[Op], *, allowed: Iterable[str] = ()) -> CheckResult:
    """Checks a history; returns the verdict and every case of every anomaly (module doc).

    `allowed` names anomalies that are reported but do not make the result invalid (Jepsen
    allows ``poll-skip`` and ``nonmonotonic-poll`` for subscribe workloads).
    Raises `CheckerInputError` on histories the analysis cannot interpret."""
    if not isinstance(history, History):
        history = History(history)
    allowed_set = frozenset(allowed)
    unknown_allowed = allowed_set - set(ANOMALIES)
    if unknown_allowed:
        raise CheckerInputError(f"unknown anomaly names in allowed: {sorted(unknown_allowed)}")

    pairs = history.pairs()
    sends = [_parse_send(p) for p in pairs if p.f == "send"]
    writer_of: dict[str, dict[Any, _Send]] = defaultdict(dict)
    for send in sends:
        if send.value in writer_of[send.key]:
            raise CheckerInputError(f"value {send.value!r} sent twice to {send.key}")
        writer_of[send.key][send.value] = send

    poll_ops = [op for op in history if op.f == "poll" and not op.is_invoke]
    ok_reads: dict[str, set[Any]] = defaultdict(set)
    readers_of: dict[tuple[str, Any], list[int]] = defaultdict(list)
    for op in poll_ops:
        for key, kv in _reads(op).items():
            for _, value in kv:
                if op.type == "ok":
                    ok_reads[key].add(value)
                    readers_of[(key, value)].append(op.index)

    def must_have_committed(send: _Send) -> bool:
        return send.type == "ok" or (send.type == "info" and send.value in ok_reads.get(send.key, ()))

    logs: dict[str, _KeyLog] = defaultdict(_KeyLog)
    for op in poll_ops:
        for key, kv in _reads(op).items():
            for offset, value in kv:
                if offset is not None:
                    logs[key].add(int(offset), value)
    for send in sends:
        if send.offset is not None and must_have_committed(send):
            logs[send.key].add(int(send.offset), send.value)
    for log in logs.values():
        log.freeze()

    found: dict[str, list[dict[str, Any]]] = defaultdict(list)

    # inconsistent-offsets and duplicate: straight from the log.
    for key in sorted(logs):
        log = logs[key]
        for offset in sorted(log.values_at):
            values = log.values_at[offset]
            if len(values) > 1:
                found["inconsistent-offsets"].append(
                    {"key": key, "offset": offset, "values": _sorted_values(values)}
                )
        for value in _sorted_values(log.offsets_of):
            offsets = log.offsets_of[value]
            if len(offsets) > 1:
                found["duplicate"].append({"key": key, "value": value, "offsets": sorted(offsets)})

    # G1a and unwritten-read: who wrote what was read.
    for op in poll_ops:
        for key, kv in _reads(op).items():
            for offset, value in kv:
                writer = writer_of.get(key, {}).get(value)
                if writer is None:
                    found["unwritten-read"].append({"key": key, "value": value, "offset": offset, "op": op.index})
                elif writer.type == "fail" and op.type == "ok":
                    found["G1a"].append(
                        {"key": key, "value": value, "offset": offset, "op": op.index, "writer": writer.op_index}
                    )

    # lost-write
    for key in sorted(ok_reads):
        log = logs.get(key)
        if log is None:
            continue
        read = ok_reads[key]
        firsts = [i for i in (log.first_index(v) for v in read) if i is not None]
        if not firsts:
            continue
        bound = max(firsts)
        bound_offset = log.offset_at(bound)
        max_reader = next(
            (readers_of[(key, v)][0] for v in log.values_at[bound_offset] if (key, v) in readers_of), None
        )
        for value in _sorted_values(log.offsets_of):
            if value in read:
                continue
            last = log.last_index(value)
            writer = writer_of.get(key, {}).get(value)
            if last is None or last > bound or writer is None or not must_have_committed(writer):
                continue
            found["lost-write"].append(
                {
                    "key": key,
                    "value": value,
                    "offset": min(log.offsets_of[value]),
                    "max_read_offset": bound_offset,
                    "writer": writer.op_index,
                    "max_read": max_reader,
                }
            )

    # unseen, and whether the final reads reached each key's end.
    ends: dict[str, int] = {}
    for op in history.filter(f="end-offsets", type="ok"):
        if isinstance(op.value, Mapping):
            ends.update({str(k): int(v) for k, v in op.value.items() if v is not None})
    reached: dict[str, int] = defaultdict(int)
    for op in poll_ops:
        if op.type != "ok":
            continue
        for key, kv in _reads(op).items():
            offsets = [o for o, _ in kv if o is not None]
            if offsets:
                reached[key] = max(reached[key], max(offsets) + 1)
        for key, position in (op.get("positions") or {}).items():
            reached[str(key)] = max(reached[str(key)], int(position))
    unknown_reasons: list[str] = []
    acked: dict[str, set[Any]] = defaultdict(set)
    for send in sends:
        if send.type == "ok":
            acked[send.key].add(send.value)
    for key in sorted(acked):
        missing = acked[key] - ok_reads.get(key, set())
        if not missing:
            continue
        if key in ends:
            end = ends[key]
        else:
            # Every ok send knows its offset, so the key's log is not empty here.
            end = (logs[key].max_offset or 0) + 1
        case = {
            "key": key,
            "count": len(missing),
            "values": _sorted_values(missing)[:_EXAMPLE_LIST_MAX],
            "read_to_offset": reached.get(key, 0),
            "end_offset": end,
        }
        if reached.get(key, 0) >= end:
            found["unseen"].append(case)
        else:
            unknown_reasons.append(
                f"final reads of {key} stopped at offset {reached.get(key, 0)} before its end "
                f"{end}: {len(missing)} acknowledged value(s) unseen"
            )

    # Per-process ordering: polls and sends.
    _poll_order(history, logs, found)
    _send_order(history, sends, logs, found)

    # Group checks.
    _double_assignment(history, found)
    _nonmonotonic_commit(history, found)
    _orphans(history, found)
    _stranger(history, found)

    anomalies = {name: found[name] for name in ANOMALIES if found.get(name)}
    bad = tuple(name for name in anomalies if name not in allowed_set)

    if not any(s.type == "ok" for s in sends):
        unknown_reasons.insert(0, "no send was acknowledged")
    if not any(ok_reads.values()):
        unknown_reasons.insert(0, "no ok poll read anything")

    verdict = "invalid" if bad else ("unknown" if unknown_reasons else "valid")
    return CheckResult(
        verdict=verdict,
        anomalies=anomalies,
        bad=bad,
        unknown_reasons=tuple(unknown_reasons),
        stats=_stats(history, sends, ok_reads, logs, ends, reached),
    )


def _poll_order(history: History, logs: Mapping[str, _KeyLog], found: dict[str, list[dict[str, Any]]]) -> None:
    # process -> key -> (last offset read, op index, generation_id)
    last_reads: dict[Any, dict[str, tuple[int, int, Any]]] = defaultdict(dict)
    for op in history:
        if op.is_invoke:
            continue
        state = last_reads[op.process]
        if op.f in ("assign", "subscribe") and op.type == "ok":
            if history.invocation_of(op).get("seek_to_beginning"):
                state.clear()
            else:
                keep = {str(k) for k in (op.value or [])}
                for key in [k for k in state if k not in keep]:
                    del state[key]
            continue
        if op.f != "poll":
            continue
        if op.type == "info":
            state.clear()  # the consumer's position is unknown now
            continue
        if op.type != "ok":
            continue
        rebalanced = {str(k) for entry in (op.get("rebalance_log") or []) for k in entry.get("keys", [])}
        generation = op.get("generation_id")
        for key, kv in _reads(op).items():
            offsets = [int(o) for o, _ in kv if o is not None]
            if not offsets:
                continue
            log = logs[key]
            if key not in rebalanced:
                for a, b in zip(offsets, offsets[1:]):
                    _classify(log, key, a, b, "int-poll-skip", "int-nonmonotonic-poll", {"op": op.index}, found)
                previous = state.get(key)
                if previous is not None and previous[2] == generation:
                    _classify(
                        log,
                        key,
                        previous[0],
                        offsets[0],
                        "poll-skip",
                        "nonmonotonic-poll",
                        {"ops": [previous[1], op.index]},
                        found,
                    )
            state[key] = (offsets[-1], op.index, generation)


def _classify(
    log: _KeyLog,
    key: str,
    offset_a: int,
    offset_b: int,
    skip_name: str,
    nonmonotonic_name: str,
    where: dict[str, Any],
    found: dict[str, list[dict[str, Any]]],
) -> None:
    i, j = log.index(offset_a), log.index(offset_b)
    delta = j - i
    if delta > 1:
        found[skip_name].append(
            {
                "key": key,
                "offsets": [offset_a, offset_b],
                "delta": delta,
                "skipped": log.values_between(i, j, _EXAMPLE_LIST_MAX),  # delta - 1 in all
                **where,
            }
        )
    elif delta < 1:
        found[nonmonotonic_name].append({"key": key, "offsets": [offset_a, offset_b], "delta": delta, **where})


def _send_order(
    history: History, sends: list[_Send], logs: Mapping[str, _KeyLog], found: dict[str, list[dict[str, Any]]]
) -> None:
    by_completion = {s.pair.completion.index: s for s in sends if s.pair.completion is not None}
    last_sends: dict[Any, dict[str, tuple[int, _Send]]] = defaultdict(dict)
    for op in history:
        send = by_completion.get(op.index)
        if send is None or send.type not in ("ok", "info"):
            continue
        log = logs.get(send.key)
        if log is None or send.value not in log.offsets_of:
            continue  # not in the version order (an info send nobody read): no position
        offsets = log.offsets_of[send.value]
        offset = send.offset if send.offset in offsets else min(offsets)
        previous = last_sends[op.process].get(send.key)
        if previous is not None:
            delta = log.index(offset) - log.index(previous[0])
            if delta < 1:
                found["nonmonotonic-send"].append(
                    {
                        "key": send.key,
                        "values": [previous[1].value, send.value],
                        "offsets": [previous[0], offset],
                        "delta": delta,
                        "ops": [previous[1].op_index, send.op_index],
                    }
                )
        last_sends[op.process][send.key] = (offset, send)


def _double_assignment(history: History, found: dict[str, list[dict[str, Any]]]) -> None:
    owners: dict[tuple[Any, Any, str], dict[Any, int]] = defaultdict(dict)
    for op in history:
        if op.type != "ok":
            continue
        group = op.get("group")
        claims = []
        if op.get("generation_id") is not None and op.get("assignment") is not None:
            claims.append((op.get("generation_id"), op.get("member_id"), op.get("assignment")))
        for entry in op.get("rebalance_log") or []:
            claims.append((entry.get("generation_id"), entry.get("member_id", op.get("member_id")), entry.get("keys", [])))
        for generation, member, keys in claims:
            if generation is None:
                continue
            for key in keys:
                owners[(group, generation, str(key))].setdefault(member, op.index)
    for (group, generation, key), members in sorted(owners.items(), key=lambda kv: repr(kv[0])):
        if len(members) > 1:
            found["double-assignment"].append(
                {"group": group, "generation_id": generation, "key": key, "members": {str(m): i for m, i in members.items()}}
            )


def _nonmonotonic_commit(history: History, found: dict[str, list[dict[str, Any]]]) -> None:
    # (group, key) -> [(invoke index, completion index, offset, op index)]
    seen: dict[tuple[Any, str], list[tuple[int, int, int, int]]] = defaultdict(list)
    for pair in history.pairs():
        done = pair.completion
        if pair.f not in ("commit", "offset-fetch") or done is None or done.type != "ok":
            continue
        if not isinstance(done.value, Mapping):
            continue
        group = done.get("group", pair.invoke.get("group"))
        for key, offset in done.value.items():
            if offset is not None:
                seen[(group, str(key))].append((pair.invoke.index, done.index, int(offset), done.index))
    for (group, key), observations in sorted(seen.items(), key=lambda kv: repr(kv[0])):
        by_completion = sorted(observations, key=lambda o: o[1])
        best: tuple[int, int] | None = None  # (offset, op index) highest completed so far
        cursor = 0
        for invoke_index, _, offset, op_index in sorted(observations, key=lambda o: o[0]):
            while cursor < len(by_completion) and by_completion[cursor][1] < invoke_index:
                candidate = by_completion[cursor]
                if best is None or candidate[2] > best[0]:
                    best = (candidate[2], candidate[3])
                cursor += 1
            if best is not None and offset < best[0]:
                found["nonmonotonic-commit"].append(
                    {"group": group, "key": key, "offset": offset, "previous_offset": best[0], "ops": [best[1], op_index]}
                )


def _stats(
    history: History,
    sends: list[_Send],
    ok_reads: Mapping[str, set[Any]],
    logs: Mapping[str, _KeyLog],
    ends: Mapping[str, int],
    reached: Mapping[str, int],
) -> dict[str, Any]:
    sends_by_type = {t: sum(1 for s in sends if s.type == t) for t in COMPLETION_TYPES}
    info_causes = sorted({op.error or "unknown" for op in history if op.type == "info" and op.is_client})
    return {
        "ops": len(history),
        "counts": history.counts(),
        "sends": sends_by_type,
        "values_read": sum(len(v) for v in ok_reads.values()),
        "keys": sorted(set(logs) | {s.key for s in sends}),
        "end_offsets": dict(sorted(ends.items())),
        "read_to_offsets": dict(sorted(reached.items())),
        "info_causes": info_causes,
    }

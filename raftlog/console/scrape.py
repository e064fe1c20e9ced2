"""Live rates from the nodes' `/metrics` (Prometheus text format 0.0.4): a pure parser and
a pure rate calculator; the console's shell fetches the text and keeps the samples.

    samples = parse_metrics(text)                    # {(name, labels): value}
    rates = counter_rates(previous, current, dt_s)   # RateSnapshot: produce/fetch requests/s, ...

What is read (every family is optional: a node of another version, or one that issue 20's
metrics have not reached yet, simply has fewer numbers; nothing here raises on a missing
family):
* `raftlog_requests_total{listener="client",op=...}`: produce and fetch requests per second
  (op "produce" / "fetch"), summed over result codes.
* counters whose name says records or bytes in or out (`..._records_in_total`,
  `..._bytes_out_total`, Kafka's `messages_in`, ...): one family per flow (the first by
  name), summed over its labels.

A counter that went down (the node restarted) counts as starting again from zero, as
Prometheus' `rate()` does. Lines that are not samples (comments, HELP, TYPE) are skipped;
a malformed sample line is skipped too (one bad line never hides the others).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = ["parse_metrics", "counter_rates", "partition_sizes", "RateSnapshot", "MAX_METRICS_BYTES", "MAX_SAMPLES"]

MAX_METRICS_BYTES: Final = 8 << 20   # a node's whole /metrics page; more is cut off
MAX_SAMPLES: Final = 200_000

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_FLOW = re.compile(r"(records|messages|bytes)_(in|out)(_total)?$")


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def _labels(text: str) -> Labels | None:
    inner = text[1:-1]
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if m is None or m.end() == pos:
            return None if inner[pos:].strip() else tuple(sorted(out))
        out.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
    return tuple(sorted(out))


def parse_metrics(text: str) -> Samples:
    """{(metric name, sorted label pairs): value} of every well-formed sample line (at most
    MAX_SAMPLES). Values `+Inf`, `-Inf`, `NaN` parse as floats."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = _labels(m.group(2)) if m.group(2) else ()
        if labels is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[(m.group(1), labels)] = value
        if len(out) >= MAX_SAMPLES:
            break
    return out


def _label(labels: Labels, name: str) -> str | None:
    for k, v in labels:
        if k == name:
            return v
    return None


@dataclass(frozen=True)
class RateSnapshot:
    """Per-second rates over one scrape interval, summed over the nodes given."""

    produce_requests: float | None = None
    fetch_requests: float | None = None
    flows: dict[str, float] = field(default_factory=dict)  # e.g. {"records_in": 1234.0}

    def as_dict(self) -> dict[str, float | None]:
        return {"produce_requests": self.produce_requests, "fetch_requests": self.fetch_requests,
                **self.flows}


def _delta(prev: float | None, cur: float) -> float:
    if prev is None or cur < prev:  # new series, or a counter reset (node restart)
        return cur if prev is not None else 0.0
    return cur - prev


def counter_rates(previous: Iterable[Mapping[tuple[str, Labels], float]],
                  current: Iterable[Mapping[tuple[str, Labels], float]], interval_s: float) -> RateSnapshot:
    """Rates between two scrapes of the same nodes (`previous[i]` and `current[i]` are node
    i's samples; a node missing from one scrape is passed as {}). `interval_s` > 0."""
    if not interval_s > 0 or math.isinf(interval_s):
        raise ValueError(f"interval_s must be a positive number, got {interval_s!r}")
    produce = fetch = None
    per_family: dict[str, dict[str, float]] = {}  # flow -> family -> summed delta
    for prev, cur in zip(previous, current):
        if not prev or not cur:
            continue
        for (name, labels), value in cur.items():
            if name == "raftlog_requests_total" and _label(labels, "listener") in ("client", None):
                op = _label(labels, "op")
                if op == "produce":
                    produce = (produce or 0.0) + _delta(prev.get((name, labels)), value)
                elif op == "fetch":
                    fetch = (fetch or 0.0) + _delta(prev.get((name, labels)), value)
                continue
            flow = _FLOW.search(name)
            if flow is None or not name.endswith("_total"):
                continue
            what = "records" if flow.group(1) in ("records", "messages") else "bytes"
            families = per_family.setdefault(f"{what}_{flow.group(2)}", {})
            families[name] = families.get(name, 0.0) + _delta(prev.get((name, labels)), value)
    # One family per flow (raftlog's own first, then by name): a node may expose the same flow twice (per
    # topic and per broker, or under Kafka's name too), and summing them would double it.
    flows = {key: families[min(families, key=lambda n: (not n.startswith("raftlog_"), n))]
             for key, families in per_family.items()}
    return RateSnapshot(
        produce_requests=None if produce is None else produce / interval_s,
        fetch_requests=None if fetch is None else fetch / interval_s,
        flows={k: v / interval_s for k, v in sorted(flows.items())},
    )


_SIZE = re.compile(r"(log|partition)_size_bytes$")


def partition_sizes(per_node: Iterable[Mapping[tuple[str, Labels], float]]) -> dict[tuple[str, int], float]:
    """{(topic, partition): bytes} from any gauge named `..._log_size_bytes` or
    `..._partition_size_bytes` with `topic` and `partition` labels (the largest replica's
    size); {} when no node exposes one."""
    out: dict[tuple[str, int], float] = {}
    for samples in per_node:
        for (name, labels), value in samples.items():
            if _SIZE.search(name) is None:
                continue
            topic, partition = _label(labels, "topic"), _label(labels, "partition")
            if topic is None or partition is None or not partition.isdigit():
                continue
            key = (topic, int(partition))
            out[key] = max(out.get(key, 0.0), value)
    return out

"""The node's metrics registry, exposed in Prometheus text format by `prometheus-client`.

    registry = MetricsRegistry()
    requests = registry.counter("raftlog_requests_total", "Requests answered.", ("op", "code"))
    requests.labels(op="produce", code="OK").inc()
    registry.collector(lambda: [gauge_family("raftlog_x", "X.", ("topic",), {("t",): 1})])
    registry.render()  # -> "# HELP raftlog_requests_total ...\n# TYPE ...\n..."

Two kinds of metrics:
* Families updated as things happen: counters, gauges (set, inc/dec, or a callback read at
  scrape time) and histograms with fixed buckets (`counter`, `gauge`, `histogram`). Use them
  for events (requests, errors, elections) whose label values come from small sets.
* Collectors (`collector(fn)`): `fn()` runs at every scrape and returns whole families built
  from a service's state (`gauge_family`, `counter_family`). Per-partition, per-topic and
  per-group families are made this way, so 1,000 partitions cost nothing between scrapes.

`render()` is `prometheus_client.generate_latest` over the registry: the library does the
exposition (escaping, HELP/TYPE lines, histogram series), not this module. No I/O here:
`raftlog/node/http.py` serves `render()`.

Invariants:
* Names and label names are checked against the Prometheus grammar when registered.
* Registering the same name again with the same kind and labels returns the same family
  (two listeners can share metrics); anything else with that name is a ValueError.
* Bounded: a family holds at most `max_series` label combinations; one more raises
  ValueError rather than growing without limit (label values must come from small sets).
  Collectors are bounded by the state they describe.
* Counters only go up; histogram buckets are cumulative and end with +Inf.

Concurrency: updates take a per-family lock, so the PySyncObj tick thread may update a
metric while trio renders. Collectors run on the thread that calls `render()` (the node's
trio thread), so they may read trio-owned state without locks.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.utils import floatToGoString

__all__ = [
    "MetricsRegistry",
    "Counter",
    "Gauge",
    "Histogram",
    "Metric",
    "gauge_family",
    "counter_family",
    "DEFAULT_LATENCY_BUCKETS_MS",
    "CONTENT_TYPE",
]

logger = logging.getLogger(__name__)

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4  # what generate_latest writes
DEFAULT_LATENCY_BUCKETS_MS: Final = (
    0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip
DEFAULT_MAX_SERIES: Final = 1000

_NAME_RE: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_RE: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def _check_names(name: str, labelnames: Sequence[str]) -> None:
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid metric name {name!r}")
    for label in labelnames:
        if not _LABEL_RE.match(label) or label.startswith("__"):
            raise ValueError(f"invalid label name {label!r} for {name}")
    if len(set(labelnames)) != len(labelnames):
        raise ValueError(f"duplicate label names for {name}")


def gauge_family(name: str, help_text: str, labelnames: Sequence[str] = (),
                 values: Mapping[tuple[Any, ...], float] | Iterable[tuple[tuple[Any, ...], float]] = ()) -> Metric:
    """A whole gauge family for a collector: `values` maps label values (in `labelnames`
    order; converted with str) to numbers."""
    _check_names(name, labelnames)
    family = GaugeMetricFamily(name, help_text, labels=list(labelnames))
    items = values.items() if isinstance(values, Mapping) else values
    for labels, value in items:
        family.add_metric([str(v) for v in labels], float(value))
    return family


def counter_family(name: str, help_text: str, labelnames: Sequence[str] = (),
                   values: Mapping[tuple[Any, ...], float] | Iterable[tuple[tuple[Any, ...], float]] = ()) -> Metric:
    """A whole counter family for a collector (name it `..._total`), as `gauge_family`."""
    _check_names(name, labelnames)
    family = CounterMetricFamily(name, help_text, labels=list(labelnames))
    items = values.items() if isinstance(values, Mapping) else values
    for labels, value in items:
        family.add_metric([str(v) for v in labels], float(value))
    return family


class _Family:
    kind: str = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str], max_series: int):
        _check_names(name, labelnames)
        self.name = name
        self.help_text = help_text
        self.labelnames = tuple(labelnames)
        self.max_series = max_series
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], object] = {}

    def _key(self, labels: dict[str, object]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(
                f"{self.name} takes labels {list(self.labelnames)}, got {sorted(labels)}"
            )
        return tuple(str(labels[name]) for name in self.labelnames)

    def _child(self, key: tuple[str, ...]) -> Any:
        # One lock per family guards both the series table and every series' numbers.
        with self._lock:
            child = self._children.get(key)
            if child is None:
                if len(self._children) >= self.max_series:
                    raise ValueError(
                        f"{self.name} already has {self.max_series} label combinations"
                    )
                child = self._children[key] = self._new_child()
            return child

    def _new_child(self) -> object:
        raise NotImplementedError

    def _default_child(self) -> Any:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}: use .labels()")
        return self._child(())

    def _items(self) -> list[tuple[tuple[str, ...], Any]]:
        with self._lock:
            return sorted(self._children.items())

    def collect(self) -> list[Metric]:
        """prometheus-client's Collector interface: this family as one Metric."""
        raise NotImplementedError


class _CounterChild:
    __slots__ = ("value", "_lock")

    def __init__(self, lock: threading.Lock) -> None:
        self.value = 0.0
        self._lock = lock

    def inc(self, amount: float = 1) -> None:
        """Add `amount` (>= 0). Raises ValueError for a negative amount."""
        if amount < 0:
            raise ValueError("a counter cannot go down")
        with self._lock:
            self.value += amount


class Counter(_Family):
    """A monotonically increasing count; name it `..._total`."""

    kind = "counter"

    def _new_child(self) -> _CounterChild:
        return _CounterChild(self._lock)

    def labels(self, **labels: object) -> _CounterChild:
        return self._child(self._key(labels))

    def inc(self, amount: float = 1) -> None:
        self._default_child().inc(amount)

    def value(self, **labels: object) -> float:
        """Current value of one series (0 when it was never touched); for tests and health."""
        child = self._children.get(self._key(labels))
        return child.value if child is not None else 0.0

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(self.name, self.help_text, labels=list(self.labelnames))
        for key, child in self._items():
            family.add_metric(list(key), child.value)
        return [family]


class _GaugeChild:
    __slots__ = ("_value", "_function", "_lock")

    def __init__(self, lock: threading.Lock) -> None:
        self._value = 0.0
        self._function: Callable[[], float] | None = None
        self._lock = lock

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1) -> None:
        with self._lock:
            self._value -= amount

    def set_function(self, function: Callable[[], float]) -> None:
        """Read the value from `function()` at every scrape (it must be cheap and not block)."""
        self._function = function

    @property
    def value(self) -> float:
        function = self._function
        if function is not None:
            return float(function())
        return self._value


class Gauge(_Family):
    """A value that goes up and down, or a callback read at scrape time."""

    kind = "gauge"

    def _new_child(self) -> _GaugeChild:
        return _GaugeChild(self._lock)

    def labels(self, **labels: object) -> _GaugeChild:
        return self._child(self._key(labels))

    def set(self, value: float) -> None:
        self._default_child().set(value)

    def inc(self, amount: float = 1) -> None:
        self._default_child().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._default_child().dec(amount)

    def set_function(self, function: Callable[[], float]) -> None:
        self._default_child().set_function(function)

    def value(self, **labels: object) -> float:
        child = self._children.get(self._key(labels))
        return child.value if child is not None else 0.0

    def collect(self) -> list[Metric]:
        family = GaugeMetricFamily(self.name, self.help_text, labels=list(self.labelnames))
        for key, child in self._items():
            family.add_metric(list(key), child.value)  # a callback that raises fails the scrape
        return [family]


class _HistogramChild:
    __slots__ = ("bounds", "counts", "total", "count", "_lock")

    def __init__(self, bounds: tuple[float, ...], lock: threading.Lock) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative; +Inf is `count`
        self.total = 0.0
        self.count = 0
        self._lock = lock

    def observe(self, value: float) -> None:
        with self._lock:
            for index, bound in enumerate(self.bounds):
                if value <= bound:
                    self.counts[index] += 1
                    break
            self.total += value
            self.count += 1


class Histogram(_Family):
    """Observations counted into fixed buckets (upper bounds, ascending; +Inf is implied)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str],
        max_series: int,
        buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS_MS,
    ) -> None:
        if "le" in labelnames:
            raise ValueError(f"'le' is reserved in histogram {name}")
        bounds = self.bounds_of(buckets)
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"buckets of {name} must be distinct and ascending")
        super().__init__(name, help_text, labelnames, max_series)
        self.buckets = bounds

    @staticmethod
    def bounds_of(buckets: Sequence[float]) -> tuple[float, ...]:
        """The finite upper bounds of `buckets` as floats (+Inf is always implied)."""
        return tuple(float(b) for b in buckets if not math.isinf(b))

    def _new_child(self) -> _HistogramChild:
        return _HistogramChild(self.buckets, self._lock)

    def labels(self, **labels: object) -> _HistogramChild:
        return self._child(self._key(labels))

    def observe(self, value: float) -> None:
        self._default_child().observe(value)

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self.name, self.help_text, labels=list(self.labelnames))
        for key, child in self._items():
            with self._lock:
                counts, total, count = list(child.counts), child.total, child.count
            buckets, cumulative = [], 0
            for bound, n in zip(child.bounds, counts):
                cumulative += n
                buckets.append((floatToGoString(bound), cumulative))
            buckets.append(("+Inf", count))
            family.add_metric(list(key), buckets, total)
        return [family]


class _Collector:
    """A `collector(fn)` callback as prometheus-client's Collector."""

    def __init__(self, function: Callable[[], Iterable[Metric]]) -> None:
        self._function = function

    def collect(self) -> Iterable[Metric]:
        return list(self._function())


class MetricsRegistry:
    """Holds metric families and collectors, and renders them all."""

    def __init__(self, *, max_series: int = DEFAULT_MAX_SERIES) -> None:
        self.max_series = max_series
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()
        # auto_describe off: collectors are not called at registration (their services may
        # not be running yet); name clashes between families are checked here instead.
        self._registry = CollectorRegistry(auto_describe=False)

    def _register(
        self, cls: type[_Family], name: str, help_text: str, labelnames: Sequence[str], **extra: Any
    ) -> Any:
        with self._lock:
            existing = self._families.get(name)
            if existing is not None:
                same = type(existing) is cls and existing.labelnames == tuple(labelnames)
                if same and isinstance(existing, Histogram):
                    same = existing.buckets == Histogram.bounds_of(extra["buckets"])
                if not same:
                    raise ValueError(f"metric {name} is already registered differently")
                return existing
            family = cls(name, help_text, labelnames, self.max_series, **extra)
            self._families[name] = family
            self._registry.register(family)
            return family

    def counter(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Counter:
        return self._register(Counter, name, help_text, labelnames)

    def gauge(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Gauge:
        return self._register(Gauge, name, help_text, labelnames)

    def histogram(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS_MS,
    ) -> Histogram:
        return self._register(Histogram, name, help_text, labelnames, buckets=buckets)

    def collector(self, function: Callable[[], Iterable[Metric]]) -> None:
        """Call `function()` at every scrape; it returns whole families (`gauge_family`,
        `counter_family`) made from the caller's state. It must be cheap and not block; it
        runs on the thread that renders (the node's trio thread)."""
        self._registry.register(_Collector(function))

    def render(self) -> str:
        """Every family and collector in text format 0.0.4, ending in \\n ("" when empty).
        Raises what a gauge callback or a collector raises."""
        return generate_latest(self._registry).decode("utf-8")

"""Client quotas as Kafka's (issue 41), the pure core: which quota applies to a request (Kafka's
eight levels of user / client-id entities, defaults included), the rate it is measured against
(a sampled window), and the throttle time of a request that takes the rate over its bound.
No I/O and no clock: callers pass `now_ms`. The quotas come from the metadata image
(`image.client_quotas`, from metadata/records.py ClientQuota records). The Kafka listener
enforces all three (raftlog/node/kafka/listener.py; docs/quotas-and-fetch-sessions.md):
Produce request bytes, Fetch record bytes (kafka/fetch.py) and each request's handler time.

Quota types (Kafka's names): `producer_byte_rate` (bytes/s of Produce requests),
`consumer_byte_rate` (bytes/s of Fetch responses), `request_percentage` (time handling the
client's requests, as a percentage of one thread).

Which quota applies (Kafka's ClientQuotaManager): for a request of user U and client id C, the
first of these entities with a quota of the type, most specific first:

    1 user=U, client-id=C        2 user=U, client-id=<default>   3 user=U
    4 user=<default>, client-id=C   5 user=<default>, client-id=<default>   6 user=<default>
    7 client-id=C                8 client-id=<default>

A default is applied to each entity on its own: under `user=<default>` every user has its own
rate of that size. The rate is measured per *tags*: (U, C) at levels 1, 2, 4 and 5, (U, "") at 3
and 6 (a user's clients share it), ("", C) at 7 and 8.

The rate (Kafka's Rate over a SampledStat): `samples` windows of `window_ms` (Kafka's
quota.window.num 11, quota.window.size.seconds 1); windows older than all of them are dropped;
rate = sum / elapsed, the elapsed time at least (samples - 1) windows, so a new client's first
request is not judged on a few milliseconds. Throttle time (Kafka's QuotaUtils.throttleTime):
when the rate with this request recorded is over the bound, (rate - bound) / bound x elapsed,
at most the whole sampled span (samples x window_ms): the time for the rate to fall back to
the bound if the client sends nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from metadata.records import CLIENT_QUOTA_KEYS, DEFAULT_ENTITY

__all__ = [
    "DEFAULT",
    "QUOTA_TYPES",
    "PRODUCER_BYTE_RATE",
    "CONSUMER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "EntityKey",
    "resolve",
    "SampledRate",
    "QuotaManager",
    "throttle_ms",
]

DEFAULT: Final = DEFAULT_ENTITY  # Kafka's default entity name (`--entity-default`)
QUOTA_TYPES: Final = CLIENT_QUOTA_KEYS  # as the metadata log's quota records name them
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE = QUOTA_TYPES
SAMPLES: Final = 11  # Kafka's quota.window.num
WINDOW_MS: Final = 1000  # Kafka's quota.window.size.seconds
MAX_TRACKED: Final = 10_000  # rates kept before idle ones are dropped

# A quota entity as configured: (user, client id), each a name, DEFAULT, or None (not part of it).
EntityKey: TypeAlias = tuple[str | None, str | None]
# Quotas as configured: entity -> {quota type: bound}.
Quotas: TypeAlias = Mapping[EntityKey, Mapping[str, float]]


def resolve(quotas: Quotas, user: str, client_id: str, quota_type: str) -> tuple[tuple[str, str], float] | None:
    """The (tags, bound) of the quota of `quota_type` that applies to (user, client_id), or
    None when none does (the client is not limited)."""
    levels: tuple[tuple[EntityKey, tuple[str, str]], ...] = (
        ((user, client_id), (user, client_id)),
        ((user, DEFAULT), (user, client_id)),
        ((user, None), (user, "")),
        ((DEFAULT, client_id), (user, client_id)),
        ((DEFAULT, DEFAULT), (user, client_id)),
        ((DEFAULT, None), (user, "")),
        ((None, client_id), ("", client_id)),
        ((None, DEFAULT), ("", client_id)),
    )
    for entity, tags in levels:
        bound = quotas.get(entity, {}).get(quota_type)
        if bound is not None:
            return tags, bound
    return None


@dataclass(slots=True)
class SampledRate:
    """Kafka's Rate over `samples` windows of `window_ms`: per-second rate of what was recorded."""

    samples: int = SAMPLES
    window_ms: int = WINDOW_MS
    _windows: list[list[float]] = field(default_factory=list)  # [start_ms, total], oldest first

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms - self._windows[-1][0] >= self.window_ms:
            self._windows.append([float(now_ms), 0.0])
            del self._windows[:-self.samples]
        self._windows[-1][1] += value

    def elapsed_ms(self, now_ms: int) -> float:
        """Kafka's Rate.windowSize: since the oldest window began, at least samples - 1 windows."""
        self._purge(now_ms)
        oldest = self._windows[0][0] if self._windows else float(now_ms)
        return max(now_ms - oldest, (self.samples - 1) * self.window_ms)

    def rate(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(w[1] for w in self._windows) * 1000.0 / max(self.elapsed_ms(now_ms), 1.0)

    def _purge(self, now_ms: int) -> None:
        span = self.samples * self.window_ms
        while self._windows and now_ms - self._windows[0][0] >= span:
            del self._windows[0]


def throttle_ms(rate: SampledRate, bound: float, now_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime, bounded by the sampled span: 0 within the bound."""
    observed = rate.rate(now_ms)
    if bound <= 0:
        return rate.samples * rate.window_ms if observed > 0 else 0
    if observed <= bound:
        return 0
    wait = (observed - bound) / bound * rate.elapsed_ms(now_ms)
    return int(min(round(wait), rate.samples * rate.window_ms))


class QuotaManager:
    """Per broker: one sampled rate per (quota type, tags), and the throttle time each tag set
    was given (for /metrics: raftlog_quota_throttle_time_ms). `record` returns how long to
    hold the answer (and mute the connection)."""

    def __init__(self, samples: int = SAMPLES, window_ms: int = WINDOW_MS) -> None:
        if samples < 2 or window_ms < 1:
            raise ValueError("samples >= 2 and window_ms >= 1")
        self.samples, self.window_ms = samples, window_ms
        self._rates: dict[tuple[str, tuple[str, str]], SampledRate] = {}
        self.throttled_ms: dict[tuple[str, tuple[str, str]], int] = {}

    def record(self, quotas: Quotas, quota_type: str, user: str, client_id: str, value: float,
               now_ms: int) -> int:
        """Record `value` (bytes, or percent-seconds for request_percentage) of a request of
        (user, client_id); the throttle time in ms (0: within its quota, or no quota)."""
        found = resolve(quotas, user, client_id, quota_type)
        if found is None:
            return 0
        tags, bound = found
        key = (quota_type, tags)
        rate = self._rates.get(key)
        if rate is None:
            if len(self._rates) >= MAX_TRACKED:
                self.forget_idle(now_ms)
            rate = self._rates[key] = SampledRate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        wait = throttle_ms(rate, bound, now_ms)
        if wait:
            self.throttled_ms[key] = self.throttled_ms.get(key, 0) + wait
        return wait

    def forget_idle(self, now_ms: int) -> None:
        """Drop the rates of entities silent for the whole sampled span (bounded memory)."""
        for key in [k for k, r in self._rates.items() if r.rate(now_ms) == 0]:
            del self._rates[key]

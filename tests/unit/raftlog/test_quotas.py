"""Kafka's client quota rules, the pure core (raftlog/node/quotas.py): which entity's quota
applies, the sampled rate, and a client that waits out its throttle times holds its bound."""

from __future__ import annotations

import pytest

from raftlog.node.quotas import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaManager,
    SampledRate,
    resolve,
    throttle_ms,
)

pytestmark = pytest.mark.unit

P = PRODUCER_BYTE_RATE


def test_the_most_specific_entity_with_the_quota_type_applies():
    quotas = {
        (None, DEFAULT): {P: 8.0},
        (None, "app"): {P: 7.0},
        (DEFAULT, None): {P: 6.0},
        (DEFAULT, DEFAULT): {P: 5.0},
        (DEFAULT, "app"): {P: 4.0},
        ("alice", None): {P: 3.0, CONSUMER_BYTE_RATE: 30.0},
        ("alice", DEFAULT): {P: 2.0},
        ("alice", "app"): {P: 1.0},
    }
    assert resolve(quotas, "alice", "app", P) == (("alice", "app"), 1.0)
    assert resolve(quotas, "alice", "other", P) == (("alice", "other"), 2.0)
    assert resolve(quotas, "alice", "app", CONSUMER_BYTE_RATE) == (("alice", ""), 30.0)  # per type
    assert resolve(quotas, "bob", "app", P) == (("bob", "app"), 4.0)
    assert resolve(quotas, "bob", "other", P) == (("bob", "other"), 5.0)
    del quotas[(DEFAULT, DEFAULT)], quotas[(DEFAULT, "app")]
    assert resolve(quotas, "bob", "app", P) == (("bob", ""), 6.0)  # a default per user, shared by its clients
    del quotas[(DEFAULT, None)]
    assert resolve(quotas, "bob", "app", P) == (("", "app"), 7.0)
    assert resolve(quotas, "bob", "x", P) == (("", "x"), 8.0)
    assert resolve({}, "bob", "x", P) is None


def test_the_rate_is_over_at_least_samples_minus_one_windows_and_forgets_old_windows():
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    assert rate.rate(0) == pytest.approx(1000.0)  # 10 kB over the 10 s minimum span
    for t in range(1, 30):
        rate.record(10_000, now_ms=t * 1000)
    assert rate.rate(29_000) == pytest.approx(11 * 10_000 / 10.0)  # 11 windows kept, 10 s elapsed
    assert rate.rate(60_000) == 0.0


def test_throttle_time_is_kafkas_formula():
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(20_000, now_ms=0)  # 2000 B/s over 10 s against a bound of 1000: 100 % over
    assert throttle_ms(rate, 1000.0, 0) == 10_000
    assert throttle_ms(rate, 2000.0, 0) == 0
    rate.record(10**9, now_ms=0)
    assert throttle_ms(rate, 1000.0, 0) == 11_000  # at most the sampled span


def simulate(manager: QuotaManager, quotas, user: str, seconds: int, batch_bytes: int, gap_ms: int) -> tuple[float, int]:
    """A producer sending `batch_bytes` every `gap_ms`, waiting out each throttle time as a
    Kafka client does; (bytes/s achieved, total throttle ms)."""
    now = sent = throttled = 0
    while now < seconds * 1000:
        wait = manager.record(quotas, P, user, "perf", batch_bytes, now)
        sent += batch_bytes
        throttled += wait
        now += max(gap_ms, wait)
    return sent / (now / 1000), throttled


def test_a_limited_producer_holds_its_bound_and_an_unlimited_one_is_never_throttled():
    quotas = {("limited", None): {P: 1_000_000.0}}
    manager = QuotaManager()
    achieved, throttled = simulate(manager, quotas, "limited", 30, 64 * 1024, 5)  # would be 13 MB/s
    assert 0.9 * 1_000_000 <= achieved <= 1.1 * 1_000_000, achieved
    assert throttled > 0 and manager.throttled_ms[(P, ("limited", ""))] == throttled
    free, throttled = simulate(manager, quotas, "free", 30, 64 * 1024, 5)
    assert throttled == 0 and free > 10_000_000


def test_idle_rates_are_forgotten():
    manager = QuotaManager()
    quotas = {(DEFAULT, None): {P: 100.0}}
    for user in ("a", "b", "c"):
        manager.record(quotas, P, user, "x", 10, now_ms=0)
    manager.forget_idle(now_ms=60_000)
    assert manager._rates == {}

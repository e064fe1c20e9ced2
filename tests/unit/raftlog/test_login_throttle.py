"""Failed logins are rate-limited per host: each failure in a row from a host doubles the wait before its answer up to a cap, a success or a quiet spell resets it, other hosts are not slowed, the table of hosts is bounded, and one host gets one login step at a time across its connections."""

from __future__ import annotations

import trio
import trio.testing

from raftlog.node.auth import LoginThrottle


def test_delays_double_per_failure_up_to_the_cap():
    throttle = LoginThrottle(base_delay_ms=100, max_delay_ms=1000)
    assert [throttle.failed("10.0.0.9", now_ms=i) for i in range(6)] == [100, 200, 400, 800, 1000, 1000]
    # a thousand in a row stay at the cap (no overflow, no unbounded wait)
    assert max(throttle.failed("10.0.0.9", now_ms=10 + i) for i in range(1000)) == 1000


def test_other_hosts_are_not_slowed():
    throttle = LoginThrottle(base_delay_ms=100, max_delay_ms=3000)
    for i in range(20):
        throttle.failed("10.0.0.9", now_ms=i)
    assert throttle.failed("10.0.0.7", now_ms=30) == 100


def test_a_success_or_a_quiet_spell_resets_the_host():
    throttle = LoginThrottle(base_delay_ms=100, max_delay_ms=3000, forget_ms=60_000)
    for i in range(5):
        throttle.failed("h", now_ms=i)
    throttle.succeeded("h")
    assert throttle.failed("h", now_ms=10) == 100
    assert throttle.failed("h", now_ms=20) == 200
    assert throttle.failed("h", now_ms=20 + 60_001) == 100  # forgotten after forget_ms without failures


def test_the_host_table_is_bounded():
    throttle = LoginThrottle(base_delay_ms=100, max_delay_ms=3000, max_hosts=3)
    for _ in range(4):
        throttle.failed("first", now_ms=0)
    for host in ("b", "c", "d"):  # the oldest host is dropped to make room
        throttle.failed(host, now_ms=1)
    assert len(throttle._failures) == 3
    assert throttle.failed("first", now_ms=2) == 100


async def test_one_login_step_per_host_at_a_time_across_connections():
    """Parallel connections from one host take turns (so their failure delays add up); another
    host is not held up; the table of turns empties once nobody waits."""
    throttle = LoginThrottle()
    order: list[str] = []
    inside = trio.Event()
    release = trio.Event()

    async def first() -> None:
        async with throttle.turn("h"):
            order.append("first in")
            inside.set()
            await release.wait()
            order.append("first out")

    async def second() -> None:
        async with throttle.turn("h"):
            order.append("second in")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await inside.wait()
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        async with throttle.turn("other"):  # not blocked by h's turn
            order.append("other")
        release.set()
    assert order == ["first in", "other", "first out", "second in"]
    assert throttle._turns == {}

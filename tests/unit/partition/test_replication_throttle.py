"""The replication throttle (partition/throttle.py): a learner's catch-up bytes are delivered
no faster than the rate, voters are never held back, and a rate of 0 is no limit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from partition.throttle import Throttle, charge_learner_answer, deliver_throttled, hold_learner_fetch


def test_bytes_delivered_never_run_ahead_of_the_rate():
    t = Throttle(1000)
    now = 0.0
    delivered_at = []
    for _ in range(50):
        now += 0.01  # answers arrive every 10 ms, 100 bytes each: 10 kB/s offered
        delivered_at.append(now + t.delay_s(100, now))
    # 5000 bytes at 1000 B/s: the last is delivered after ~4.9 s, not 0.5 s
    assert delivered_at[-1] == pytest.approx(0.01 + 49 * 0.1, rel=1e-6)
    for i, at in enumerate(delivered_at):
        assert (i + 1) * 100 <= 1000 * (at - 0.01) + 100 + 1e-6
    assert Throttle(0).delay_s(10**9, 0.0) == 0.0
    with pytest.raises(ValueError):
        Throttle(-1)


def _replica(learner: bool, got: list):
    membership = SimpleNamespace(learners=(7,) if learner else ())

    async def deliver(m):
        got.append((trio.current_time(), m))

    return SimpleNamespace(replica_id=7, core=SimpleNamespace(membership=membership), deliver=deliver)


@pytest.mark.parametrize("learner", [True, False])
async def test_only_learners_wait(learner, autojump_clock):
    got: list = []
    replica = _replica(learner, got)
    throttle = Throttle(1000)
    message = SimpleNamespace(records=b"x" * 500)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        held = [deliver_throttled(nursery, throttle, replica, message) for _ in range(3)]
    if learner:
        assert held == [False, True, True]  # the first fits; the next two wait 0.5 s and 1 s
        assert [round(t - start, 3) for t, _ in got] == [0.5, 1.0]  # on the mock clock
    else:
        assert held == [False] * 3 and got == []


@pytest.mark.parametrize("learner", [True, False])
async def test_a_leader_holds_a_learners_fetch_while_its_answers_run_ahead_of_the_rate(learner, autojump_clock):
    """leader.replication.throttled.rate: the records sent to learner 7 are charged as they
    leave; its next fetch waits until they fit the rate. A voter's fetch never waits."""
    got: list = []
    replica = _replica(learner, got)  # the leader's replica; broker 7 a learner or a voter
    throttle = Throttle(1000)
    answer = SimpleNamespace(records=b"x" * 1500)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        assert not hold_learner_fetch(nursery, throttle, replica, 7, "fetch-1")  # nothing charged yet
        charge_learner_answer(throttle, replica, 7, answer)  # 1.5 s worth at 1000 B/s
        held = hold_learner_fetch(nursery, throttle, replica, 7, "fetch-2")
    if learner:
        assert held and [(round(t - start, 3), m) for t, m in got] == [(1.5, "fetch-2")]
    else:
        assert not held and got == [] and throttle.debt_s(trio.current_time()) == 0.0
    assert Throttle(0).debt_s(0.0) == 0.0

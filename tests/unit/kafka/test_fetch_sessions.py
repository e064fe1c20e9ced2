"""The KIP-227 session cache's rules (raftlog/node/kafka/fetch_sessions.py), without a server."""

from __future__ import annotations

import random

import pytest

from raftlog.node.kafka.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSessionCache,
    SessionPart,
    next_epoch,
)

pytestmark = pytest.mark.unit

QUIET = (10, 10, 0, False, False)  # hw, lso, log start, has records, error


def _parts(n: int, topic: str = "t", offset: int = 0) -> list:
    return [((topic, i), SessionPart(offset, 1 << 20)) for i in range(n)]


def _open(cache: FetchSessionCache, n: int, now_ms: int = 0, topic: str = "t") -> int:
    plan = cache.begin(0, INITIAL_EPOCH, _parts(n, topic), [], uses_topic_ids=False, now_ms=now_ms)
    session_id, include = cache.finish(plan, [QUIET] * n, now_ms=now_ms)
    assert include == [True] * n
    return session_id


def test_a_full_fetch_at_epoch_0_creates_a_session_and_incremental_ones_answer_only_changes():
    cache = FetchSessionCache(10, rng=random.Random(1))
    session_id = _open(cache, 4)
    assert session_id > 0 and len(cache) == 1 and cache.partitions() == 4
    plan = cache.begin(session_id, 1, [], [], uses_topic_ids=False, now_ms=1)
    assert plan.incremental and [k for k, _ in plan.parts] == [("t", i) for i in range(4)]
    # partition 1 got records, 2's high watermark moved, 3 failed; 0 is as it was
    outcomes = [QUIET, (11, 11, 0, True, False), (12, 12, 0, False, False), (-1, -1, -1, False, True)]
    sid, include = cache.finish(plan, outcomes, now_ms=1)
    assert sid == session_id and include == [False, True, True, True]
    # the next epoch: nothing new but the failed partition, which is answered until it recovers
    plan = cache.begin(session_id, 2, [], [], uses_topic_ids=False, now_ms=2)
    keys = [k for k, _ in plan.parts]
    assert keys == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]  # answered ones rotated last, in order
    _, include = cache.finish(plan, [QUIET, (11, 11, 0, False, False), (12, 12, 0, False, False), QUIET],
                              now_ms=2)
    assert include == [False, False, False, True]


def test_an_incremental_request_updates_adds_and_forgets_partitions():
    cache = FetchSessionCache(10)
    session_id = _open(cache, 3)
    plan = cache.begin(session_id, 1, [(("t", 1), SessionPart(50, 100)), (("u", 0), SessionPart(7, 100))],
                       [("t", 2)], uses_topic_ids=False, now_ms=1)
    state = dict(plan.parts)
    assert set(state) == {("t", 0), ("t", 1), ("u", 0)}
    assert state[("t", 1)].fetch_offset == 50 and state[("u", 0)].fetch_offset == 7
    _, include = cache.finish(plan, [QUIET] * 3, now_ms=1)
    assert include == [False, False, True]  # only the new partition has never been answered


def test_unknown_session_wrong_epoch_and_topic_id_switch_are_kafkas_errors():
    cache = FetchSessionCache(10)
    session_id = _open(cache, 2)
    assert cache.begin(session_id + 1, 1, [], [], uses_topic_ids=False, now_ms=1).error == FETCH_SESSION_ID_NOT_FOUND
    assert cache.begin(session_id, 5, [], [], uses_topic_ids=False, now_ms=1).error == INVALID_FETCH_SESSION_EPOCH
    assert cache.begin(session_id, 1, [], [], uses_topic_ids=True, now_ms=1).error == FETCH_SESSION_TOPIC_ID_ERROR
    plan = cache.begin(session_id, 1, [], [], uses_topic_ids=False, now_ms=1)
    assert plan.error == 0
    # a replayed epoch is refused: the epoch moved on with the request that carried it
    assert cache.begin(session_id, 1, [], [], uses_topic_ids=False, now_ms=1).error == INVALID_FETCH_SESSION_EPOCH


def test_final_epoch_closes_the_session_and_epoch_0_replaces_it():
    cache = FetchSessionCache(10)
    first = _open(cache, 2)
    plan = cache.begin(first, INITIAL_EPOCH, _parts(3), [], uses_topic_ids=False, now_ms=1)
    second, _ = cache.finish(plan, [QUIET] * 3, now_ms=1)
    assert second not in (0, first) and len(cache) == 1
    plan = cache.begin(second, FINAL_EPOCH, _parts(3), [], uses_topic_ids=False, now_ms=2)
    assert not plan.incremental and len(cache) == 0
    sid, include = cache.finish(plan, [QUIET] * 3, now_ms=2)
    assert sid == 0 and include == [True] * 3 and len(cache) == 0


def test_a_full_cache_protects_new_sessions_and_evicts_stale_then_small_old_ones():
    cache = FetchSessionCache(2, eviction_ms=1000)
    evicted = []
    cache.on_evict = lambda: evicted.append(1)
    a = _open(cache, 5, now_ms=0)
    b = _open(cache, 1, now_ms=0, topic="b")
    assert a and b
    assert _open(cache, 50, now_ms=500) == 0  # both used just now, created just now: protected
    cache.finish(cache.begin(a, 1, [], [], uses_topic_ids=False, now_ms=1900), [QUIET] * 5, now_ms=1900)
    # at 2000 b is stale (unused for 2000 ms > 1000): it goes first
    c = _open(cache, 3, now_ms=2000)
    assert c and len(cache) == 2 and len(evicted) == 1
    assert cache.begin(b, 1, [], [], uses_topic_ids=False, now_ms=2000).error == FETCH_SESSION_ID_NOT_FOUND
    # at 2500 nothing is stale; a (5 partitions, old) can be evicted only by a bigger one
    cache.finish(cache.begin(c, 1, [], [], uses_topic_ids=False, now_ms=2400), [QUIET] * 3, now_ms=2400)
    assert _open(cache, 4, now_ms=2500) == 0  # c is young, a is bigger than 4
    assert _open(cache, 6, now_ms=2500) != 0 and len(evicted) == 2
    assert cache.begin(a, 2, [], [], uses_topic_ids=False, now_ms=2500).error == FETCH_SESSION_ID_NOT_FOUND


def test_no_slots_or_no_partitions_means_no_session():
    assert _open(FetchSessionCache(0), 3) == 0
    cache = FetchSessionCache(5)
    plan = cache.begin(0, INITIAL_EPOCH, [], [], uses_topic_ids=False, now_ms=0)
    assert cache.finish(plan, [], now_ms=0) == (0, [])


def test_epochs_wrap_to_1_and_negative_stays():
    assert next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


def test_a_session_evicted_during_the_fetch_answers_session_id_0():
    cache = FetchSessionCache(1, eviction_ms=0)
    a = _open(cache, 1, now_ms=0)
    plan = cache.begin(a, 1, [], [], uses_topic_ids=False, now_ms=5)
    _open(cache, 2, now_ms=10)  # stale after 0 ms: a goes
    sid, include = cache.finish(plan, [(11, 11, 0, True, False)], now_ms=10)
    assert sid == 0 and include == [True]

"""When the replication links could next have news for the manager's tick loop (issue 19: an
idle node's tick loop sleeps until then instead of waking 20 times a second)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from partition.replication import ReplicationLinks
from raftlog.base.protocol import Request

SILENCE_S = 1.25


def _links(news: list[int] | None = None) -> ReplicationLinks:
    return ReplicationLinks(1, SimpleNamespace(tls=False), lambda b: None, lambda t, p: None,
                            session_max_wait_ms=500, silence_ms=int(SILENCE_S * 1000),
                            on_news=None if news is None else (lambda: news.append(1)))


async def test_the_next_news_is_the_first_silence_a_link_could_begin():
    links = _links()
    now = trio.current_time()
    assert links.next_news_at(now) == pytest.approx(now + SILENCE_S)  # no link: one limit at most
    follower = links._link(2)
    follower.last_request_at = now - 1.0  # its last replica_fetch here
    assert links.next_news_at(now) == pytest.approx(now + 0.25)
    leader = links._link(3)
    leader.held.add(("t", 0))  # it holds a fetch of ours and last answered 1.2 s ago
    leader.last_ok = now - 1.2
    assert links.next_news_at(now) == pytest.approx(now + 0.05)
    # Both silences are reported once; after that they are not news again.
    assert links.watch(now + 0.3)[:2] == ([3], [2])
    later = now + 0.3
    assert links.next_news_at(later) == pytest.approx(later + SILENCE_S)


async def test_a_follower_broker_heard_again_is_news_at_once():
    news: list[int] = []
    links = _links(news)
    now = trio.current_time()
    links._link(2).last_request_at = now - 2.0
    assert links.watch(now)[1] == [2]  # silent
    request = Request(1, "replica_fetch", {"broker_id": 2, "max_wait_ms": 0, "max_bytes": 1 << 20,
                                           "attach": True, "fetches": []})
    await links._handle_replica_fetch(request)
    assert news == [1]
    assert links.watch(trio.current_time())[2] == [2]  # heard
    await links._handle_replica_fetch(request)
    assert news == [1]  # not news: it was not silent


def _long_silent(seconds: float) -> tuple[ReplicationLinks, float]:
    """Links to leader broker 3 (holding a fetch of ours, last answered `seconds` ago) and
    follower broker 2 (last fetched `seconds` ago), and the time now."""
    links = _links()
    now = trio.current_time()
    leader = links._link(3)
    leader.held.add(("t", 0))
    leader.last_ok = now - seconds
    links._link(2).last_request_at = now - seconds
    return links, now


async def test_a_broker_heard_on_any_op_keeps_all_its_groups_quiet():
    # Silence is judged per broker (issue 46): a leader broker whose answers to our fetch
    # session are late but that sent us a raft batch, or a replica_fetch, just now is alive.
    links, now = _long_silent(2.0)
    assert not links.answering(3)
    await links._handle_raft(Request(1, "raft", {"broker_id": 3, "messages": []}))
    assert links.answering(3)
    links._link(2).heard_at = trio.current_time()  # e.g. it answered one of our fetches
    assert links.watch(trio.current_time()) == ([], [], [])
    # Heard nothing more for a silence limit: both are silent after all.
    assert links.watch(trio.current_time() + SILENCE_S + 0.1)[:2] == ([3], [2])


async def test_a_late_watch_blames_no_link_and_silences_count_again_from_it():
    # A watch far behind its timer means our own loop was starved (what the sockets hold may
    # be unread): nothing is reported, and each silence needs a whole limit after that call.
    links, now = _long_silent(5.0)
    assert links.watch(now, due=now - 2.0) == ([], [], [])
    assert links.stalls == 1
    assert links.next_news_at(now) == pytest.approx(now + SILENCE_S)
    assert links.watch(now + 1.0, due=now + 0.95) == ([], [], [])  # on time, within a limit
    assert links.stalls == 1
    assert links.watch(now + SILENCE_S + 0.1, due=now + SILENCE_S + 0.05)[:2] == ([3], [2])

"""Fetch sessions (KIP-227): the broker's bounded cache of incremental fetch sessions. Pure:
no I/O, no clock, no kafka-python (times come in as `now_ms`, ids from a given rng), so it is
built at node start and unit-tested without a server; fetch.py is its only user.

A consumer with many partitions names them all once (a FULL fetch, epoch 0); the broker
answers with a session id and from then on the consumer sends INCREMENTAL fetches (that id,
the next epoch) naming only the partitions whose fetch offset changed, were added, or are
forgotten (`forgotten_topics_data`), and the broker answers only the partitions that changed:
new records, a high watermark, last stable offset or log start offset other than the one
last sent, or an error. Kafka's rules (FetchSession.scala), kept here:

* epoch 0 (INITIAL): a full fetch; the named session, if any, is closed and a new one is
  created for the fetched partitions when a slot is free or can be freed (below), else the
  answer carries session id 0 (the client keeps sending full fetches).
* epoch -1 (FINAL): a full fetch without a session; the named session, if any, is closed.
* epoch > 0: incremental. An unknown id is FETCH_SESSION_ID_NOT_FOUND; an epoch other than
  the session's next one is INVALID_FETCH_SESSION_EPOCH (the client starts again with a full
  fetch); a request naming topics by id against a session that named them by name (or the
  reverse) is FETCH_SESSION_TOPIC_ID_ERROR. Epochs run 1, 2, ... 2^31-1, then 1 again.
* The cache holds at most `max_slots` sessions (Kafka's max.incremental.fetch.session.cache.slots).
  When full, a new session evicts the least recently used one if it has not been used for
  `eviction_ms` (Kafka's 120 s); else the smallest session older than `eviction_ms` (by
  partitions, then id) if the new one is bigger. A session created within `eviction_ms` is
  never evicted for another client's new one: a consumer that just got its session keeps it.
* Partitions of an incremental answer are rotated: those answered go to the end of the
  session's order, so a response byte limit does not starve the last ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "FetchSessionCache",
    "SessionPart",
    "SessionPlan",
    "INITIAL_EPOCH",
    "FINAL_EPOCH",
    "INVALID_SESSION_ID",
    "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH",
    "FETCH_SESSION_TOPIC_ID_ERROR",
]

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
MAX_EPOCH: Final = 2**31 - 1
EVICTION_MS: Final = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
# Kafka's error codes (raftlog/node/kafka/errors.py has the registry of the others).
FETCH_SESSION_ID_NOT_FOUND: Final = 70
INVALID_FETCH_SESSION_EPOCH: Final = 71
FETCH_SESSION_TOPIC_ID_ERROR: Final = 106

# A partition's key in a session: (topic name or topic id, partition index).
Key = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    return epoch if epoch < 0 else 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class SessionPart:
    """One partition of a session: what the client asked (fetch offset, byte limit, leader
    epoch) and what it was last told (-1: nothing yet, so the next answer includes it)."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def changed(self, high_watermark: int, last_stable_offset: int, log_start_offset: int,
                has_records: bool, error: bool, *, update: bool) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: whether the client must hear of
        this partition; with `update`, remember what it is told. An error always answers and
        forgets the watermarks, so the partition is answered again once it recovers."""
        must = has_records or error or (high_watermark, last_stable_offset, log_start_offset) != (
            self.high_watermark, self.last_stable_offset, self.log_start_offset)
        if update:
            if error:
                self.high_watermark = self.last_stable_offset = self.log_start_offset = -1
            else:
                self.high_watermark, self.last_stable_offset = high_watermark, last_stable_offset
                self.log_start_offset = log_start_offset
        return must


@dataclass(slots=True)
class _Session:
    id: int
    epoch: int  # the epoch the next request must carry
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    parts: dict[Key, SessionPart] = field(default_factory=dict)


@dataclass(slots=True)
class SessionPlan:
    """What one fetch request asks for, once read against the cache. `error`: a top-level
    error code (answer it alone, session id 0). `parts`: the partitions to fetch, in order.
    `incremental`: answer only the partitions `finish` says changed."""

    error: int = 0
    parts: list[tuple[Key, SessionPart]] = field(default_factory=list)
    incremental: bool = False
    create: bool = False  # a full fetch at epoch 0: `finish` tries to create a session
    session_id: int = INVALID_SESSION_ID
    uses_topic_ids: bool = False


class FetchSessionCache:
    """The broker's sessions. `begin` reads a request (before the fetch), `finish` picks the
    partitions of the answer and creates or updates the session (after it). Counters for
    /metrics: `evictions`, `created`, and `len(cache)`, `partitions()`."""

    def __init__(self, max_slots: int = 1000, *, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        if max_slots < 0 or eviction_ms < 0:
            raise ValueError("max_slots and eviction_ms must be >= 0")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, _Session] = {}
        self.evictions = 0
        self.created = 0
        self.on_evict: Callable[[], None] | None = None  # a metric's inc

    def __len__(self) -> int:
        return len(self._sessions)

    def partitions(self) -> int:
        return sum(len(s.parts) for s in self._sessions.values())

    def begin(self, session_id: int, epoch: int, parts: Sequence[tuple[Key, SessionPart]],
              forgotten: Iterable[Key], *, uses_topic_ids: bool, now_ms: int) -> SessionPlan:
        """Read one fetch request: `parts` are the partitions it names with their fetch state,
        `forgotten` those it drops (incremental only)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return SessionPlan(parts=list(parts), create=epoch == INITIAL_EPOCH, uses_topic_ids=uses_topic_ids)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionPlan(error=FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionPlan(error=INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionPlan(error=FETCH_SESSION_TOPIC_ID_ERROR)
        for key in forgotten:
            session.parts.pop(key, None)
        for key, part in parts:
            cached = session.parts.get(key)
            if cached is None:
                session.parts[key] = part
            else:
                cached.fetch_offset, cached.max_bytes = part.fetch_offset, part.max_bytes
                cached.leader_epoch = part.leader_epoch
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return SessionPlan(parts=list(session.parts.items()), incremental=True, session_id=session.id,
                           uses_topic_ids=uses_topic_ids)

    def finish(self, plan: SessionPlan, outcomes: Sequence[tuple[int, int, int, bool, bool]],
               *, now_ms: int) -> tuple[int, list[bool]]:
        """After the fetch: `outcomes[i]` is (high watermark, last stable offset, log start
        offset, has records, error) of `plan.parts[i]`. Returns the session id to answer and,
        per part, whether the answer includes it (all of a full fetch's)."""
        if not plan.incremental:
            for (_, part), outcome in zip(plan.parts, outcomes):
                part.changed(*outcome, update=True)
            session_id = self._create(plan, now_ms) if plan.create else INVALID_SESSION_ID
            return session_id, [True] * len(plan.parts)
        session = self._sessions.get(plan.session_id)
        include = [part.changed(*outcome, update=True) for (_, part), outcome in zip(plan.parts, outcomes)]
        if session is None:  # evicted while the fetch waited: the client starts again
            return INVALID_SESSION_ID, include
        for (key, _), answered in zip(plan.parts, include):
            if answered and key in session.parts:  # rotate: answered ones go last
                session.parts[key] = session.parts.pop(key)
        return session.id, include

    def _create(self, plan: SessionPlan, now_ms: int) -> int:
        if self.max_slots == 0 or not plan.parts:
            return INVALID_SESSION_ID
        if len(self._sessions) >= self.max_slots and not self._evict_for(len(plan.parts), now_ms):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(1, MAX_EPOCH)
        self._sessions[session_id] = _Session(
            session_id, next_epoch(INITIAL_EPOCH), plan.uses_topic_ids, now_ms, now_ms, dict(plan.parts))
        self.created += 1
        return session_id

    def _evict_for(self, size: int, now_ms: int) -> bool:
        """Kafka's FetchSessionCache.tryEvict for a client (not a follower) session of `size`."""
        stale = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            victim = stale
        else:
            old = [s for s in self._sessions.values() if now_ms - s.created_ms > self.eviction_ms]
            if not old:
                return False
            victim = min(old, key=lambda s: (len(s.parts), s.id))
            if size <= len(victim.parts):
                return False
        del self._sessions[victim.id]
        self.evictions += 1
        if self.on_evict is not None:
            self.on_evict()
        return True

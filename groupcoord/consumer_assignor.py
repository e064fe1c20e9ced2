"""KIP-848's server-side assignors (pure): the coordinator, not a group leader, computes each
member's target assignment from the members' subscriptions and the topics' partition counts.

    assign(name, members, topics, previous) -> {member_id: frozenset[(topic, partition)]}

* `members`: {member_id: frozenset of subscribed topic names} (regexes already resolved);
* `topics`: {topic: partition_count} of the topics that exist;
* `previous`: the last target assignment, so that `uniform` keeps partitions where they are.

Assignors (Kafka's names, `group.consumer.assignor`):
* `uniform` (Kafka's default, UniformAssignor): sticky and balanced. A partition stays with
  its previous member while that member still subscribes to its topic and holds no more than
  its share; the rest go, one at a time, to the eligible member holding the fewest; then
  partitions move from the most loaded member to an eligible one holding at least two fewer,
  until no such move exists. With equal subscriptions the counts differ by at most one.
* `range` (Kafka's RangeAssignor): per topic, the subscribed members sorted by member id take
  contiguous ranges, the first `count % members` one more.

Invariants (checked by the unit tests with random memberships): every partition of a topic
some member subscribes to is assigned to exactly one member subscribed to it; nothing else
is assigned. Deterministic: the same input gives the same output (ties go to the smaller
member id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "TopicPartition", "assign"]

TopicPartition = tuple[str, int]
Assignment = frozenset[TopicPartition]

ASSIGNORS: Final = ("uniform", "range")
DEFAULT_ASSIGNOR: Final = "uniform"
MAX_MOVES_FACTOR: Final = 4  # balancing moves are bounded by 4 x the partition count


def _eligible(members: Mapping[str, frozenset[str]], topics: Mapping[str, int]) -> dict[TopicPartition, list[str]]:
    """Each partition of a subscribed, existing topic -> the sorted members subscribed to it."""
    by_topic: dict[str, list[str]] = {}
    for mid in sorted(members):
        for t in members[mid]:
            if t in topics:
                by_topic.setdefault(t, []).append(mid)
    return {(t, p): mids for t, mids in sorted(by_topic.items()) for p in range(topics[t])}


def _range(members: Mapping[str, frozenset[str]], topics: Mapping[str, int]) -> dict[str, Assignment]:
    out: dict[str, set[TopicPartition]] = {mid: set() for mid in members}
    for t in sorted(topics):
        mids = sorted(mid for mid, subs in members.items() if t in subs)
        if not mids:
            continue
        share, extra = divmod(topics[t], len(mids))
        for i, mid in enumerate(mids):
            first = i * share + min(i, extra)  # the first `extra` members take one more each
            out[mid].update((t, p) for p in range(first, first + share + (i < extra)))
    return {mid: frozenset(tps) for mid, tps in out.items()}


def _uniform(
    members: Mapping[str, frozenset[str]],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    eligible = _eligible(members, topics)
    out: dict[str, set[TopicPartition]] = {mid: set() for mid in members}
    if not eligible:
        return {mid: frozenset() for mid in members}
    # Each member's fair share among the members it competes with (an upper bound for what it
    # keeps): partitions it could hold / members competing for them, rounded up.
    share: dict[str, int] = {}
    for mid in members:
        own = [tp for tp, mids in eligible.items() if mid in mids]
        if own:
            competitors = {m for tp in own for m in eligible[tp]}
            share[mid] = -(-len(own) // len(competitors))
        else:
            share[mid] = 0
    # 1. Stickiness: keep what a member held, up to its share.
    for mid in sorted(previous):
        if mid not in out:
            continue
        for tp in sorted(previous[mid]):
            if len(out[mid]) >= share[mid]:
                break
            mids = eligible.get(tp)
            if mids is not None and mid in mids and not any(tp in a for a in out.values()):
                out[mid].add(tp)
    owned = {tp for a in out.values() for tp in a}
    # 2. The rest, one at a time, to the eligible member holding the fewest.
    for tp, mids in eligible.items():
        if tp not in owned:
            best = min(mids, key=lambda m: (len(out[m]), m))
            out[best].add(tp)
    # 3. Balance: a partition moves to the least loaded member eligible for it while that one
    #    holds at least two fewer; passes over the partitions until none moves (bounded).
    owner = {tp: mid for mid, a in out.items() for tp in a}
    for _ in range(MAX_MOVES_FACTOR * len(eligible)):
        moves = 0
        for tp in sorted(owner):
            src = owner[tp]
            dst = min(eligible[tp], key=lambda m: (len(out[m]), m))
            if len(out[dst]) + 2 <= len(out[src]):
                out[src].discard(tp)
                out[dst].add(tp)
                owner[tp] = dst
                moves += 1
        if not moves:
            break
    return {mid: frozenset(tps) for mid, tps in out.items()}


def assign(
    name: str,
    members: Mapping[str, frozenset[str]],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment] | None = None,
) -> dict[str, Assignment]:
    """The target assignment of every member in `members` by the assignor `name` (one of
    ASSIGNORS; ValueError otherwise)."""
    if name == "range":
        return _range(members, topics)
    if name == "uniform":
        return _uniform(members, topics, previous or {})
    raise ValueError(f"unknown assignor {name!r}: one of {', '.join(ASSIGNORS)}")

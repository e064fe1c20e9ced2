"""Client-side partition assignors (pure): range, roundrobin, sticky, cooperative-sticky.

The group leader (a client) runs one of these on the members' subscriptions it got in its
JoinGroup answer and sends the result in SyncGroup; the coordinator never looks inside. The
bytes are Kafka's ConsumerProtocol Subscription and Assignment (raftlog/base/consumer_protocol.py), so a
raftlog member and Kafka clients share a group: whichever is leader reads everyone's
subscription. The names are Kafka's ("range", "roundrobin", "sticky", "cooperative-sticky"),
so the coordinator finds a protocol every member supports.

Every assignor has the signature
    assign(partitions_per_topic: {topic: count}, subscriptions: {member_id: Subscription})
        -> {member_id: [(topic, partition), ...]}      (sorted lists, every member present)
and gives each partition of a subscribed, existing topic to exactly one member subscribed to
it. Topics nobody subscribes to, or that do not exist, are left out.

* range (Kafka's RangeAssignor): per topic, members in order (static members by
  group_instance_id first, then member ids) get consecutive ranges; the first `n % m` one more.
* roundrobin: all partitions in (topic, partition) order dealt round-robin over the sorted
  members, skipping members not subscribed to the partition's topic.
* sticky: balanced first, then keeps as many previously owned partitions (`owned_partitions`
  in the subscription; a partition claimed by two members goes to the higher `generation`)
  as balance allows. With identical subscriptions the result is optimal: every member gets
  ⌊P/M⌋ or ⌈P/M⌉ and the number of partitions that stay put is the maximum possible.
  Otherwise a greedy fill plus moves from members with 2+ more partitions than an eligible one.
* cooperative-sticky (KIP-429): the sticky target, minus every partition that another member
  still owns: the owner is not given it any more, so it revokes it and rejoins, and the next
  rebalance hands it over. No partition is ever owned by two members at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raftlog.base.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

__all__ = [
    "ASSIGNORS", "Assignor", "Assignment", "Subscription", "TopicPartition", "assign",
    "range_assign", "roundrobin_assign", "sticky_assign", "cooperative_sticky_assign",
    "encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment",
]


# --- helpers ----------------------------------------------------------------------------


def _member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: (0, subscriptions[m].group_instance_id, m)
                  if subscriptions[m].group_instance_id is not None else (1, m, m))


def _topics_in_play(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> list[str]:
    wanted = {t for s in subscriptions.values() for t in s.topics}
    return sorted(t for t in wanted if partitions_per_topic.get(t, 0) > 0)


def _finish(subscriptions: Mapping[str, Subscription], out: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    return {m: sorted(out.get(m, [])) for m in subscriptions}


# --- range / roundrobin ------------------------------------------------------------------


def range_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    order = _member_order(subscriptions)
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    for topic in _topics_in_play(partitions_per_topic, subscriptions):
        members = [m for m in order if topic in subscriptions[m].topics]
        n = partitions_per_topic[topic]
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count
    return _finish(subscriptions, out)


def roundrobin_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    order = sorted(subscriptions)
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    i = 0
    for topic in _topics_in_play(partitions_per_topic, subscriptions):
        for p in range(partitions_per_topic[topic]):
            # Someone subscribes to `topic` (it is in play), so this loop ends within a lap.
            while topic not in subscriptions[order[i % len(order)]].topics:
                i += 1
            out[order[i % len(order)]].append((topic, p))
            i += 1
    return _finish(subscriptions, out)


# --- sticky -------------------------------------------------------------------------------


def _previous_owners(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
    """Valid previous ownership: the partition exists, its owner still subscribes to the topic;
    a partition claimed twice goes to the claim with the higher generation (then member id)."""
    owner: dict[TopicPartition, str] = {}
    for m in sorted(subscriptions, key=lambda m: (-subscriptions[m].generation, m)):
        s = subscriptions[m]
        for tp in s.owned_partitions:
            t, p = tp
            if t in s.topics and 0 <= p < partitions_per_topic.get(t, 0) and tp not in owner:
                owner[tp] = m
    return owner


def sticky_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    if not subscriptions:
        return {}
    topics = _topics_in_play(partitions_per_topic, subscriptions)
    everything = [(t, p) for t in topics for p in range(partitions_per_topic[t])]
    previous = _previous_owners(partitions_per_topic, subscriptions)
    owned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    for tp, m in sorted(previous.items()):
        owned[m].append(tp)
    topic_sets = {frozenset(s.topics) & frozenset(topics) for s in subscriptions.values()}
    if len(topic_sets) == 1:
        out = _sticky_uniform(everything, owned)
    else:
        out = _sticky_general(everything, owned, subscriptions)
    return _finish(subscriptions, out)


def _sticky_uniform(everything: list[TopicPartition], owned: dict[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    members = sorted(owned)
    min_quota, num_max = divmod(len(everything), len(members))
    max_quota = min_quota + (1 if num_max else 0)
    out: dict[str, list[TopicPartition]] = {}
    max_slots = num_max
    # The members that own the most keep the larger quotas: that keeps the most in place.
    for m in sorted(members, key=lambda m: (-len(owned[m]), m)):
        mine = owned[m]
        if len(mine) > min_quota and max_slots > 0:
            out[m] = mine[:max_quota]
            max_slots -= 1
        else:
            out[m] = mine[:min_quota]
    taken = {tp for tps in out.values() for tp in tps}
    free = [tp for tp in everything if tp not in taken]
    it = iter(free)
    for m in members:
        while len(out[m]) < min_quota:
            out[m].append(next(it))
    for m in members:
        if max_slots == 0:
            break
        if len(out[m]) == min_quota:
            out[m].append(next(it))
            max_slots -= 1
    assert next(it, None) is None, "sticky: partitions left over"
    return out


def _sticky_general(everything: list[TopicPartition], owned: dict[str, list[TopicPartition]],
                    subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    eligible = {tp: [m for m in sorted(subscriptions) if tp[0] in subscriptions[m].topics] for tp in everything}
    out = {m: list(tps) for m, tps in owned.items()}
    taken = {tp for tps in out.values() for tp in tps}
    # Fill: the partitions with the fewest candidates first, each to its least-loaded candidate.
    for tp in sorted((tp for tp in everything if tp not in taken), key=lambda tp: (len(eligible[tp]), tp)):
        m = min(eligible[tp], key=lambda m: (len(out[m]), m))
        out[m].append(tp)
    # Balance: move a partition to an eligible member with at least 2 fewer. Each move lowers
    # the sum of squared loads, so this ends; the bound is a guard, not the stop rule.
    for _ in range(len(everything) * max(1, len(out))):
        moved = False
        for a in sorted(out, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[a], reverse=True):
                target = min(eligible[tp], key=lambda m: (len(out[m]), m))
                if len(out[target]) + 1 < len(out[a]):
                    out[a].remove(tp)
                    out[target].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return out


def cooperative_sticky_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    target = sticky_assign(partitions_per_topic, subscriptions)
    claimed: dict[TopicPartition, set[str]] = {}
    for m, s in subscriptions.items():
        for tp in s.owned_partitions:
            claimed.setdefault(tp, set()).add(m)
    return {
        m: [tp for tp in tps if tp not in claimed or m in claimed[tp]]
        for m, tps in target.items()
    }


Assignor = Callable[[Mapping[str, int], Mapping[str, Subscription]], dict[str, list[TopicPartition]]]

ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}


def assign(name: str, partitions_per_topic: Mapping[str, int], member_metadata: Mapping[str, tuple[str | None, bytes]]) -> dict[str, bytes]:
    """What a group leader runs: decode the members' subscriptions ({member_id:
    (group_instance_id, subscription bytes)} from its JoinGroup answer), assign with the
    assignor `name`, and encode each member's assignment for SyncGroup. Raises KeyError for an
    unknown assignor, CorruptMessageError for a bad subscription."""
    subs = {m: decode_subscription(blob, inst) for m, (inst, blob) in member_metadata.items()}
    result = ASSIGNORS[name](partitions_per_topic, subs)
    return {m: encode_assignment(Assignment(tuple(tps))) for m, tps in result.items()}

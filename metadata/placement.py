"""Where replicas go (pure): rack-aware placement of new partitions and of single replicas
that move (a decommission, the balancer).

Racks (Kafka's rack-aware assignment, AdminUtils.assignReplicasToBrokers): the brokers are
ordered rack-alternated — the first broker of each rack (racks in name order, brokers in id
order), then the second of each, ... — so consecutive brokers of the ring are in different
racks. A partition's replicas are its leader and the next brokers round that ring, skipping
a broker whose rack already holds a replica of the partition until every rack holds one.
Brokers without a rack (`None`) form one rack of their own named "" for this purpose: a
cluster with no racks at all places exactly as the plain ring does.

Public API:
    rack_alternated(racks) -> list[int]
    ring_placement(racks, leader_counts, count, replication_factor) -> list[tuple[int, ...]]
    replacement(replicas, leaving, racks, load) -> int | None
    racks_spread(replicas, racks) -> bool
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

__all__ = ["rack_alternated", "racks_spread", "replacement", "ring_placement"]


def rack_alternated(racks: Mapping[int, str | None]) -> list[int]:
    """The broker ids of `racks` (id -> rack) in rack-alternated order (module docstring)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id] or "", []).append(broker_id)
    columns = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max((len(c) for c in columns), default=0)):
        out.extend(c[i] for c in columns if i < len(c))
    return out


def _rack(racks: Mapping[int, str | None], broker_id: int) -> str:
    return racks.get(broker_id) or ""


def _replicas_from(ring: Sequence[int], racks: Mapping[int, str | None], start: int,
                   replication_factor: int) -> tuple[int, ...]:
    all_racks = {_rack(racks, b) for b in ring}
    chosen = [ring[start]]
    used = {_rack(racks, ring[start])}
    n = len(ring)
    while len(chosen) < replication_factor:
        spread = len(used) < len(all_racks)
        for step in range(1, n):
            b = ring[(start + step) % n]
            if b in chosen or (spread and _rack(racks, b) in used):
                continue
            break
        chosen.append(b)
        used.add(_rack(racks, b))
    return tuple(chosen)


def ring_placement(racks: Mapping[int, str | None], leader_counts: Mapping[int, int], count: int,
                   replication_factor: int) -> list[tuple[int, ...]]:
    """Replicas of `count` new partitions on the brokers of `racks` (at least
    `replication_factor` of them). Each partition's preferred leader is the broker with the
    fewest preferred leaderships so far (`leader_counts`, plus those placed here), ties
    going to the next broker round the ring after the previous partition's leader; the
    other replicas follow round the rack-alternated ring (module docstring)."""
    ring = rack_alternated(racks)
    n = len(ring)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} > {n} brokers")
    counts = [leader_counts.get(b, 0) for b in ring]
    cursor = min(range(n), key=lambda i: (counts[i], i))
    out = []
    for _ in range(count):
        leader = min(range(n), key=lambda i: (counts[i], (i - cursor) % n))
        counts[leader] += 1
        out.append(_replicas_from(ring, racks, leader, replication_factor))
        cursor = (leader + 1) % n
    return out


def replacement(replicas: Sequence[int], leaving: int, racks: Mapping[int, str | None],
                load: Mapping[int, int]) -> int | None:
    """The broker (of `racks`: the eligible ones) to take `leaving`'s place among `replicas`:
    not already a replica; in a rack none of the staying replicas is in when there is one,
    else in `leaving`'s rack when there is one; then the least loaded (`load`), lowest id.
    None when no broker is eligible."""
    staying = [r for r in replicas if r != leaving]
    candidates = [b for b in racks if b not in replicas]
    if not candidates:
        return None
    used = {_rack(racks, r) for r in staying}
    leaving_rack = _rack(racks, leaving) if leaving in racks else None

    def key(b: int) -> tuple[int, int, int]:
        rack = _rack(racks, b)
        fit = 0 if rack not in used else (1 if rack == leaving_rack else 2)
        return fit, load.get(b, 0), b

    return min(candidates, key=key)


def racks_spread(replicas: Iterable[int], racks: Mapping[int, str | None]) -> bool:
    """Whether `replicas` cover as many racks as they can: min(len(replicas), racks known)."""
    replicas = list(replicas)
    all_racks = {_rack(racks, b) for b in racks}
    return len({_rack(racks, r) for r in replicas}) >= min(len(replicas), len(all_racks))

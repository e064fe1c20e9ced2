"""The balancer (pure): from a metadata image (and partition sizes) to a plan of replica
moves that brings replica counts, preferred-leader counts and disk bytes per broker within a
tolerance, keeping every partition's replication factor and rack spread (docs/elastic.md).

Which brokers: the placeable ones (unfenced, not draining or decommissioned). A partition
that is moving already, or has a replica on a broker that is not placeable (fenced, draining:
the decommission or the failure handling owns it) is left alone.

The plan is greedy, one replica at a time, on a model it updates as it goes:
1. replicas: while a broker `h` holds more than `slack` replicas above another, `l`
   (slack = max(1, tolerance × mean); the widest such pair first, then the next when racks
   allow no move between them), move one replica of `h` to `l`: of a
   partition not on `l`, whose racks stay spread (placement.racks_spread) when they were;
   preferring one `h` is the preferred leader of when `h` leads more than `l`, else one it
   is not; then the largest (bytes balance too).
2. leaders: while preferred-leader counts differ by more than the slack (pairs as in 1), swap: the
   preferred-leader replica of `h` moves to `l` and, to keep the replica counts, a
   non-leader replica of `l` (of another partition, not on `h`) moves to `h`.
3. bytes: while bytes differ by more than tolerance × mean bytes and by more than
   `min_gap_bytes` (a move copies a replica: a gap of a few KiB on an idle cluster is
   balanced), swap a larger replica of `h` with a smaller non-leader replica of `l` when
   that narrows the gap.
Every step strictly narrows a gap, so the plan is finite; at most `max_moves` partitions.
A moved replica keeps its place in the partition's replica list, so moving a preferred
leader makes the new broker the preferred leader (the delta keeps the old one while it
stays a replica).

Public API:
    plan(image, sizes=None, tolerance=0.1, max_moves=1000, min_gap_bytes=64 MiB) -> list[Move]
    Move(topic, partition, replicas, reason); loads(image, sizes) -> dict[int, BrokerLoad]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from metadata.image import MetadataImage
from metadata.placement import racks_spread

__all__ = ["BrokerLoad", "Move", "loads", "plan"]

DEFAULT_TOLERANCE = 0.1
DEFAULT_MAX_MOVES = 1000
# A bytes gap no larger is balanced (node setting partition_autobalancing_min_gap_bytes): 64 MiB,
# a few seconds of a move's copying, against the tolerance alone proposing swaps over 1 KiB.
DEFAULT_MIN_GAP_BYTES = 64 << 20


@dataclass(frozen=True)
class Move:
    """Move `topic`-`partition` to `replicas` (preferred leader first), and why."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    reason: str


@dataclass
class BrokerLoad:
    replicas: int = 0
    leaders: int = 0
    bytes: int = 0


class _Model:
    def __init__(self, image: MetadataImage, sizes: Mapping[tuple[str, int], int], min_gap_bytes: int = 0):
        self.min_gap_bytes = min_gap_bytes
        self.brokers = image.placeable_broker_ids()
        self.racks = {b: image.brokers[b].rack for b in self.brokers}
        eligible = set(self.brokers)
        self.parts: dict[tuple[str, int], list[int]] = {}
        self.sizes = {k: max(0, int(v)) for k, v in sizes.items()}
        self.load = {b: BrokerLoad() for b in self.brokers}
        self.fixed: dict[int, BrokerLoad] = {}
        for name in image.topic_names():
            t = image.topic(name)
            assert t is not None
            for p in t.partitions:
                key = (name, p.partition)
                # the preferred leader first (a move keeps it while it stays a replica)
                replicas = [p.preferred_leader] + [r for r in p.replicas if r != p.preferred_leader]
                if not p.reassigning and set(replicas) <= eligible:
                    self.parts[key] = replicas
                for i, r in enumerate(replicas):
                    if r in self.load:
                        self._add(r, key, i == 0, 1)
        self.moved: dict[tuple[str, int], str] = {}
        self.original = {k: tuple(v) for k, v in self.parts.items()}

    def _add(self, b: int, key: tuple[str, int], leader: bool, sign: int) -> None:
        load = self.load[b]
        load.replicas += sign
        load.leaders += sign if leader else 0
        load.bytes += sign * self.sizes.get(key, 0)

    def move(self, key: tuple[str, int], frm: int, to: int, reason: str) -> None:
        replicas = self.parts[key]
        i = replicas.index(frm)
        self._add(frm, key, i == 0, -1)
        replicas[i] = to
        self._add(to, key, i == 0, 1)
        self.moved.setdefault(key, reason)

    def can_move(self, key: tuple[str, int], frm: int, to: int) -> bool:
        replicas = self.parts[key]
        if frm not in replicas or to in replicas:
            return False
        after = [to if r == frm else r for r in replicas]
        return racks_spread(after, self.racks) or not racks_spread(replicas, self.racks)

    def extremes(self, metric: str) -> tuple[int, int]:
        value = lambda b: (getattr(self.load[b], metric), b)  # noqa: E731
        return max(self.brokers, key=value), min(self.brokers, key=value)

    def slack(self, metric: str, tolerance: float) -> float:
        total = sum(getattr(v, metric) for v in self.load.values())
        mean = total / max(1, len(self.brokers))
        return max(1.0, tolerance * mean, self.min_gap_bytes if metric == "bytes" else 0)

    def pairs(self, metric: str, tolerance: float) -> list[tuple[int, int]]:
        """(more loaded, less loaded) broker pairs further apart than the slack, widest first
        (racks may forbid every move between the two extremes but not between others)."""
        slack = self.slack(metric, tolerance)
        value = {b: getattr(self.load[b], metric) for b in self.brokers}
        out = [(value[h] - value[l], h, l) for h in self.brokers for l in self.brokers
               if value[h] - value[l] > slack]
        return [(h, l) for _, h, l in sorted(out, key=lambda x: (-x[0], x[1], x[2]))]

    def gap(self, metric: str) -> tuple[int, int, int]:
        h, l = self.extremes(metric)
        return getattr(self.load[h], metric) - getattr(self.load[l], metric), h, l


def _replica_pass(m: _Model, tolerance: float, budget: int) -> None:
    while len(m.moved) < budget:
        for h, l in m.pairs("replicas", tolerance):
            want_leader = m.load[h].leaders > m.load[l].leaders
            options = [k for k in m.parts if m.can_move(k, h, l)]
            if options:
                best = max(options, key=lambda k: ((m.parts[k][0] == h) == want_leader, m.sizes.get(k, 0), k))
                m.move(best, h, l, f"replicas: broker {h} holds {m.load[h].replicas}, broker {l} {m.load[l].replicas}")
                break
        else:
            return


def _swap(m: _Model, metric: str, h: int, l: int, reason: str, first_leader: bool) -> bool:
    ups = [k for k, reps in m.parts.items() if (reps[0] == h) == first_leader and m.can_move(k, h, l)]
    downs = [k for k, reps in m.parts.items() if reps[0] != l and m.can_move(k, l, h)]
    gap = getattr(m.load[h], metric) - getattr(m.load[l], metric)
    for up in sorted(ups, key=lambda k: -m.sizes.get(k, 0)):
        for down in sorted(downs, key=lambda k: m.sizes.get(k, 0)):
            if down == up:
                continue
            delta = m.sizes.get(up, 0) - m.sizes.get(down, 0) if metric == "bytes" else 1
            if 0 < delta < gap or (metric != "bytes" and gap > 1):
                m.move(up, h, l, reason)
                m.move(down, l, h, reason)
                return True
    return False


def _swap_pass(m: _Model, metric: str, tolerance: float, budget: int) -> None:
    while len(m.moved) + 2 <= budget:
        for h, l in m.pairs(metric, tolerance):
            reason = f"{metric}: broker {h} {getattr(m.load[h], metric)}, broker {l} {getattr(m.load[l], metric)}"
            if _swap(m, metric, h, l, reason, first_leader=metric == "leaders"):
                break
            if metric == "leaders" and _lone_leader_move(m, tolerance, h, reason):
                break
        else:
            return


def _lone_leader_move(m: _Model, tolerance: float, h: int, reason: str) -> bool:
    """Move one of `h`'s preferred-leader replicas to a broker leading at least two fewer,
    when the replica counts stay within the slack (or no worse)."""
    before = m.gap("replicas")[0]
    limit = max(m.slack("replicas", tolerance), before)
    for x in sorted(m.brokers, key=lambda b: (m.load[b].leaders, m.load[b].replicas, b)):
        if m.load[x].leaders > m.load[h].leaders - 2:
            return False
        for key, reps in sorted(m.parts.items()):
            if reps[0] != h or not m.can_move(key, h, x):
                continue
            was_moved = key in m.moved
            m.move(key, h, x, reason)
            if m.gap("replicas")[0] <= limit:
                return True
            m.move(key, x, h, reason)  # undo
            if not was_moved:
                del m.moved[key]
    return False


def loads(image: MetadataImage, sizes: Mapping[tuple[str, int], int] | None = None) -> dict[int, BrokerLoad]:
    """Replicas, preferred leaderships and bytes of every placeable broker."""
    return _Model(image, sizes or {}).load


def plan(image: MetadataImage, sizes: Mapping[tuple[str, int], int] | None = None,
         tolerance: float = DEFAULT_TOLERANCE, max_moves: int = DEFAULT_MAX_MOVES,
         min_gap_bytes: int = DEFAULT_MIN_GAP_BYTES) -> list[Move]:
    """The moves that balance the placeable brokers (module docstring); [] when balanced.
    `sizes`: bytes of each (topic, partition), unknown ones 0; brokers whose bytes differ by
    `min_gap_bytes` or less are balanced by bytes."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    if min_gap_bytes < 0:
        raise ValueError(f"min_gap_bytes must be >= 0, got {min_gap_bytes}")
    m = _Model(image, sizes or {}, min_gap_bytes)
    if len(m.brokers) < 2:
        return []
    _replica_pass(m, tolerance, max_moves)
    _swap_pass(m, "leaders", tolerance, max_moves)
    _swap_pass(m, "bytes", tolerance, max_moves)
    return [Move(k[0], k[1], tuple(m.parts[k]), why) for k, why in sorted(m.moved.items())
            if set(m.parts[k]) != set(m.original[k])]

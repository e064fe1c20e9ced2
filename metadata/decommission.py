"""Decommissioning a broker (pure): judge the request, choose the moves that empty it, and
tell when it is empty (docs/elastic.md).

A decommission's life in the metadata log (records.BrokerState), driven by the controller's
tick, so a controller failover resumes it from the image:
    draining        no new replica is placed on the broker (image.placeable_broker_ids);
                    each tick starts moves (PartitionReassignment, as a reassignment would)
                    of its partitions not already moving, the internal topics' first (the
                    group coordinators they carry move with their leadership), at most
                    `max_moves` in flight; each replica goes to `placement.replacement`.
    decommissioned  once no partition names it (replicas, adding or removing): the broker is
                    fenced and stays fenced (its heartbeats no longer unfence it); the
                    operator stops the process.
    active          `recommission` at any point: moves already started finish, no new ones.

Refused with the reason and nothing recorded: an unregistered broker
[BROKER_ID_NOT_REGISTERED]; a decommission that would leave some topic with fewer brokers
that may hold replicas than its replication factor (RF 3 on 3 brokers)
[INVALID_REPLICATION_FACTOR].
"""

from __future__ import annotations

from raftlog.base.errors import BrokerIdNotRegisteredError, InvalidReplicationFactorError

from metadata.image import MetadataImage
from metadata.placement import replacement
from metadata.records import BrokerState, PartitionReassignment

__all__ = ["drain_moves", "drained", "judge_decommission", "judge_recommission", "rack_map"]


def rack_map(image: MetadataImage, broker_ids: tuple[int, ...] | None = None) -> dict[int, str | None]:
    """Broker id -> rack of `broker_ids` (default: the placeable brokers)."""
    ids = image.placeable_broker_ids() if broker_ids is None else broker_ids
    return {b: image.brokers[b].rack for b in ids}


def _require(image: MetadataImage, broker_id: int) -> None:
    if type(broker_id) is not int or image.broker(broker_id) is None:
        raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")


def judge_decommission(image: MetadataImage, broker_id: int) -> BrokerState | None:
    """The record that starts draining `broker_id`, or None when it is draining or
    decommissioned already. Raises as the module docstring says."""
    _require(image, broker_id)
    if image.broker_state(broker_id) != "active":
        return None
    left = [b for b in image.brokers if b != broker_id and image.broker_state(b) == "active"]
    for name in image.topic_names():
        t = image.topic(name)
        rf = max((len(p.target_replicas) for p in t.partitions), default=0)  # type: ignore[union-attr]
        if rf > len(left):
            raise InvalidReplicationFactorError(
                f"decommissioning broker {broker_id} would leave topic {name} (replication factor {rf}) "
                f"with {len(left)} brokers {sorted(left)}: add a broker first or lower its replication factor")
    return BrokerState(broker_id, "draining")


def judge_recommission(image: MetadataImage, broker_id: int) -> BrokerState | None:
    """The record that makes `broker_id` active again, or None when it is active."""
    _require(image, broker_id)
    return None if image.broker_state(broker_id) == "active" else BrokerState(broker_id, "active")


def drained(image: MetadataImage, broker_id: int) -> bool:
    """Whether no partition names `broker_id` any more (moves to or from it included)."""
    return not image.partitions_assigned_to(broker_id)


def drain_moves(image: MetadataImage, broker_id: int, max_moves: int,
                skip: frozenset[tuple[str, int]] = frozenset()) -> list[PartitionReassignment]:
    """Moves that take `broker_id`'s replicas elsewhere: of partitions not moving already
    nor in `skip` (moves proposed and not yet applied), internal topics first, so that at most
    `max_moves` partitions are moving at once (counting every move in the image). A
    partition with no eligible broker for the replica is left for a later tick."""
    in_flight = sum(1 for name in image.topic_names()
                    for p in image.topic(name).partitions if p.reassigning)  # type: ignore[union-attr]
    budget = max_moves - in_flight - len(skip)
    racks = rack_map(image, tuple(b for b in image.placeable_broker_ids() if b != broker_id))
    load = image.replica_counts()
    order = sorted(image.topic_names(), key=lambda n: (not image.topic(n).internal, n))  # type: ignore[union-attr]
    out: list[PartitionReassignment] = []
    for name in order:
        t = image.topic(name)
        assert t is not None
        for p in t.partitions:
            if budget <= 0:
                return out
            if broker_id not in p.replicas or p.reassigning or (name, p.partition) in skip:
                continue
            to = replacement(p.replicas, broker_id, racks, load)
            if to is None:
                continue
            target = tuple(to if r == broker_id else r for r in p.replicas)
            out.append(PartitionReassignment(t.topic_id, p.partition, target + (broker_id,), (to,), (broker_id,)))
            load[to] = load.get(to, 0) + 1
            budget -= 1
    return out

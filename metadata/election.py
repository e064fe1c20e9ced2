"""Preferred leader elections asked for by an operator (Kafka's ElectLeaders PREFERRED) (pure).

The controller already moves leadership back to each partition's preferred replica on its own
(Controller.preferred_leader_moves, after the replica's broker has been unfenced for a while).
ElectLeaders asks for that now, for the partitions named: each is judged here from the image,
and the controller shell (active_controller.py) asks the current leader to transfer leadership
(the peer op `transfer_leadership`), as its tick does.

Public API:
    preferred_election(image, topic, partition) -> LeaderMove
        raises UnknownTopicOrPartitionError, ElectionNotNeededError, PreferredLeaderNotAvailableError
    partitions_off_preferred(image) -> list[(topic, partition)]    what "every partition" means
"""

from __future__ import annotations

from metadata.controller import LeaderMove
from metadata.image import MetadataImage
from raftlog.base.errors import (
    ElectionNotNeededError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)

__all__ = ["preferred_election", "partitions_off_preferred"]


def preferred_election(image: MetadataImage, topic: str, partition: int) -> LeaderMove:
    """The leader move that makes `topic`-`partition`'s preferred replica its leader."""
    name = f"{topic}-{partition}"
    p = image.partition(topic, partition)
    t = image.topic(topic)
    if p is None or t is None or not t.complete:
        raise UnknownTopicOrPartitionError(f"{name} does not exist")
    if p.leader == p.preferred_leader:
        raise ElectionNotNeededError(f"{name}: broker {p.leader}, its preferred replica, already leads it")
    broker = image.broker(p.preferred_leader)
    if broker is None or broker.fenced:
        raise PreferredLeaderNotAvailableError(f"{name}: the preferred replica's broker {p.preferred_leader} is fenced")
    if p.leader == -1:
        raise PreferredLeaderNotAvailableError(
            f"{name} has no leader to hand over from: its replicas elect one by Raft (or see "
            "ElectLeaders UNCLEAN / raftlog partitions recover)")
    return LeaderMove(topic, partition, p.leader, p.leader_epoch, p.preferred_leader)


def partitions_off_preferred(image: MetadataImage) -> list[tuple[str, int]]:
    """Every partition of a complete topic whose leader is not its preferred replica."""
    return [(t.name, p.partition) for t in sorted(image.topics.values(), key=lambda t: t.name) if t.complete
            for p in t.partitions if p.leader != p.preferred_leader]

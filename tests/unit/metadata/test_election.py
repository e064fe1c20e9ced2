"""ElectLeaders PREFERRED judged from the image: the move to the preferred replica, or why
none is made (not needed, the preferred broker fenced, no leader, no such partition)."""

from __future__ import annotations

import pytest

from metadata.delta import replay
from metadata.election import partitions_off_preferred, preferred_election
from metadata.image import MetadataImage
from metadata.records import Partition, RegisterBroker, Topic, UnfenceBroker
from raftlog.base.errors import ElectionNotNeededError, PreferredLeaderNotAvailableError, UnknownTopicOrPartitionError


def _image(leaders: list[int], fenced: set[int] = frozenset()) -> MetadataImage:
    image = MetadataImage.empty()
    for b in (1, 2, 3):
        image = replay(image, RegisterBroker(b, f"inc-{b}", "localhost", 9000 + b, "localhost", 9100 + b))
        if b not in fenced:
            image = replay(image, UnfenceBroker(b, f"inc-{b}"))
    image = replay(image, Topic("t", "tid", len(leaders)))
    for i, leader in enumerate(leaders):
        image = replay(image, Partition("tid", i, (1, 2, 3), 1, leader, 1))
    return image


def test_a_partition_led_by_another_replica_moves_to_the_preferred_one():
    image = _image([2, 1, -1])
    move = preferred_election(image, "t", 0)
    assert (move.topic, move.partition, move.leader, move.preferred_leader) == ("t", 0, 2, 1)
    assert partitions_off_preferred(image) == [("t", 0), ("t", 2)]


@pytest.mark.parametrize("leaders, fenced, partition, error, words", [
    ([1], set(), 0, ElectionNotNeededError, "already leads"),
    ([2], {1}, 0, PreferredLeaderNotAvailableError, "fenced"),
    ([-1], set(), 0, PreferredLeaderNotAvailableError, "no leader"),
    ([1], set(), 5, UnknownTopicOrPartitionError, "does not exist"),
])
def test_no_move_says_why(leaders, fenced, partition, error, words):
    with pytest.raises(error, match=words):
        preferred_election(_image(leaders, fenced), "t", partition)

"""The replica manager's reconcile skips a topic whose image changed only in its leaders
(issue 46: leader reports are most image changes at 10,000 partitions)."""

from __future__ import annotations

from dataclasses import replace

from metadata.image import PartitionState, TopicImage


def _topic(*parts: PartitionState, configs=None) -> TopicImage:
    return TopicImage("t", "id-1", False, len(parts), configs or {}, tuple(parts))


def _moved(old: TopicImage | None, new: TopicImage) -> bool:
    return new.only_leaders_moved_since(old)


def test_only_leader_changes_are_skipped_and_everything_else_is_not():
    p0, p1 = PartitionState(0, (1, 2, 3), 1, 1, 0), PartitionState(1, (2, 3, 1), 2, 2, 0)
    old = _topic(p0, p1)
    assert _moved(old, _topic(replace(p0, leader=2, leader_epoch=3), p1))
    assert not _moved(None, old)  # new topic
    assert not _moved(old, _topic(replace(p0, replicas=(1, 2, 4)), p1))
    assert not _moved(old, _topic(replace(p0, adding_replicas=(4,)), p1))
    assert not _moved(old, _topic(p0, replace(p1, removing_replicas=(1,))))
    assert not _moved(old, _topic(p0, p1, PartitionState(2, (3, 1, 2), 3, 3, 0)))
    assert not _moved(old, _topic(p0, p1, configs={"retention.ms": "1000"}))

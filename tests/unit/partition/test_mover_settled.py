"""The replica mover skips a led partition it found settled while its topic's image and its core's membership stay the same objects (issue 46: an idle node's passes over every leader), and looks again at once when either changes."""

from __future__ import annotations

import types

import trio

import partition.mover as mover_module
from partition.mover import MOVE_INTERVAL_S, Mover
from partition.raft import Membership


class Image:
    def __init__(self, topic: object, reassigning: bool = False) -> None:
        self.topics = {"tid": topic}
        self.state = types.SimpleNamespace(target_replicas=(1, 2, 3), reassigning=reassigning)

    def partition(self, topic: str, partition: int) -> object:
        return self.state


async def test_a_settled_partition_is_skipped_until_its_topic_or_membership_changes(autojump_clock, monkeypatch):
    calls = []

    def counting(current, target, leader_id):
        calls.append(current)
        return None  # where it should be

    monkeypatch.setattr(mover_module, "next_step", counting)
    core = types.SimpleNamespace(membership=Membership((1, 2, 3)), membership_change_pending=False,
                                 committed_membership=Membership((1, 2, 3)))
    r = types.SimpleNamespace(topic="t", partition=0, topic_id="tid", replica_id=1, is_leader=True,
                              online=True, closed=False, core=core)
    image = Image(object())
    reported = []

    async def report(*args):
        reported.append(args)

    m = Mover(lambda: [r], lambda: image, types.SimpleNamespace(report_partition_membership=report))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(m.run)
        await trio.sleep(MOVE_INTERVAL_S * 10.5)
        assert len(calls) == 1  # settled at the first pass, skipped at the next nine
        core.membership = Membership((1, 2, 3))  # an equal but new membership: looked at again
        await trio.sleep(MOVE_INTERVAL_S)
        assert len(calls) == 2
        image = Image(object(), reassigning=True)  # the topic's image changed: a move in progress
        await trio.sleep(MOVE_INTERVAL_S * 3)
        assert len(calls) == 5 and reported  # never settled while a move is in progress
        nursery.cancel_scope.cancel()

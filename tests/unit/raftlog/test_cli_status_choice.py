"""`raftlog cluster status` believes the node that can vouch for the cluster (raftlog/cli/common.py
best_status): the controller's view over any node's own image, and without a controller the
freshest image from a node it still counts as a voter, never a removed voter's stale one."""

from __future__ import annotations

import pytest

from raftlog.cli.common import best_status
from raftlog.client.request import ClusterStatus

pytestmark = pytest.mark.unit


def _status(by: int, voters: list[int], commit: int, controller: int | None = None, epoch: int = 1) -> ClusterStatus:
    return ClusterStatus(cluster_id="c", controller_id=controller, controller_epoch=epoch, commit_index=commit,
                         voters=tuple({"id": v} for v in voters), brokers=(),
                         view="local" if controller is None else "controller", answered_by=by)


def test_the_controllers_view_wins_over_a_removed_voters():
    removed = _status(4, [1, 2, 3, 4, 5], 120)  # still lists the voters it was removed from
    led = _status(1, [1, 2, 3, 5], 118, controller=5, epoch=3)
    assert best_status([removed, led]) is led
    newer = _status(2, [1, 2, 3, 5], 125, controller=1, epoch=4)
    assert best_status([removed, led, newer]) is newer  # the newest controller epoch


def test_without_a_controller_a_current_voters_fresh_image_wins():
    removed = _status(4, [1, 2, 3, 4], 90)
    voter = _status(2, [1, 2, 3], 100)  # removal committed: 4 is no voter in the freshest image
    assert best_status([removed, voter]) is voter
    assert best_status([removed]) is removed  # alone, it is all there is
    older = _status(3, [1, 2, 3], 95)
    assert best_status([removed, older, voter]) is voter

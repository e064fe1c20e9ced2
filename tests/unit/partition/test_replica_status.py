"""A replica's status (/health) says "leader" only once it serves as one: a core elected in an epoch that is not durable yet (its LeaderChange waits for the quorum-state fsync, so produce and fetch still answer NOT_LEADER) shows as a candidate with no leader."""

from __future__ import annotations

import random

import trio

from metadata.topic_config import TopicConfig
from partition.replica import Replica

WAIT_S = 10


class _Quiet:
    file_slices = False

    def send(self, replica, to, message):
        raise AssertionError("a single voter sends nothing")

    def answering(self, broker_id):
        return False


async def test_an_elected_core_is_a_leader_in_the_status_only_once_the_replica_serves_as_one(tmp_path, nursery):
    r = Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1,), directory=tmp_path / "p",
                topic_config=TopicConfig.from_configs({}), transport=_Quiet(), rng=random.Random(1),
                clock_ms=lambda: 1000)
    await trio.to_thread.run_sync(r.open)
    r.attach(nursery)
    changed = trio.Event()
    r.watch(changed)  # set at the replica's next leadership or high-watermark change
    await r.start_election()
    with trio.fail_after(WAIT_S):
        while not r.is_leader:
            await changed.wait()
            changed = trio.Event()
            r.watch(changed)
    assert (r.status()["role"], r.status()["leader_id"]) == ("leader", 1)
    # The shell between the core's election and the LeaderChange it holds back (as in a
    # leader transfer to a follower whose quorum-state fsync is slow).
    r.is_leader = False
    assert r.core.status()["role"] == "leader"
    assert (r.status()["role"], r.status()["leader_id"]) == ("candidate", None)
    await r.close()

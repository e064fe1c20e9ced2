"""A tick that starts an election runs in the replica's own task: the tick loop, which ticks
every partition of the node in turn, does not wait for that candidacy's quorum-state fsync
(at 1,000 partitions, hundreds of candidacies after a node died had made single passes of the
tick loop take seconds)."""

from __future__ import annotations

import random
import threading

import trio

import partition.quorum_state as quorum_state_module
from metadata.topic_config import TopicConfig
from partition.replica import Replica


class _NoTransport:
    file_slices = False

    def send(self, replica, to, message):
        raise AssertionError("a single voter sends nothing")

    def answering(self, broker_id):
        return False


async def test_the_tick_that_starts_a_candidacy_does_not_wait_for_its_fsync(tmp_path, monkeypatch):
    r = Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1,),
                directory=tmp_path / "t-0", topic_config=TopicConfig.from_configs({}),
                transport=_NoTransport(), rng=random.Random(1), clock_ms=lambda: 1000)
    r.open()
    release = threading.Event()
    writes: list[object] = []
    began = trio.Event()
    real_write = quorum_state_module.write_quorum_states

    def held_write(batch):  # in the group commit's worker thread
        writes.extend(state for _, state in batch)
        trio.from_thread.run_sync(began.set)
        assert release.wait(30), "the test never released the fsync"
        return real_write(batch)

    monkeypatch.setattr(quorum_state_module, "write_quorum_states", held_write)
    try:
        async with trio.open_nursery() as nursery:
            r.attach(nursery)
            for _ in range(1000):
                if r.core.runs_on_next_tick():
                    break
                await r.tick()
            else:
                raise AssertionError("the election timer never expired")
            with trio.fail_after(5):  # the tick loop used to wait here until the fsync ended
                await r.tick()
            with trio.fail_after(5):
                await began.wait()  # the candidacy's write, begun by the replica's own task
            with trio.fail_after(5):
                await r.tick()  # the tick loop goes on meanwhile; this replica's tick is skipped
            assert r.skipped_ticks >= 1 and not r.is_leader and writes[0].voted_for == 1
            release.set()
            with trio.fail_after(10):
                while not r.is_leader:  # the candidacy's write, then the leader's own
                    changed = trio.Event()
                    r.watch(changed)  # set at the next leadership or high-watermark change
                    await changed.wait()
            assert r.core.epoch == writes[0].epoch and len(writes) == 2
            nursery.cancel_scope.cancel()
    finally:
        release.set()
        r.log.close()

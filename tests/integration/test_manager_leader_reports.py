"""A ReplicaManager on a real single-voter MetadataService reports the leaderships its replicas win in batches (report_partition_leaders, one call in flight, at most MAX_REPORTS_PER_CALL each), and every one lands in the image; a failed call is retried as soon as another controller is known."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

import partition.manager as manager_module
from metadata.controller import LeaderReport
from metadata.service import MetadataService
from partition.manager import ReplicaManager
from partition.replica_settings import ReplicaSettings
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request
from raftlog.cli.cluster import free_ports
from raftlog.node.config import HostPort, Listeners, NodeConfig
from raftlog.node.main import quorum_factory
from raftlog.node.server import serve
from raftlog.node.settings import metadata_settings, partition_settings

WAIT_S = 30.0
PARTITIONS = 48


class CountingMetadata(MetadataService):
    """The real service; remembers the size of each batch of leader reports it forwards."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def report_partition_leaders(self, reports: list[LeaderReport], **kw: Any) -> list[dict[str, Any]]:
        self.batches.append(len(reports))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await super().report_partition_leaders(reports, **kw)
        finally:
            self.in_flight -= 1


def _config(tmp_path: Path) -> NodeConfig:
    client, peer, quorum, http = free_ports(4)
    return NodeConfig(
        node_id=1, data_dir=tmp_path / "node-1", cluster_id="test-cluster",
        roles=frozenset({"controller", "broker"}),
        listeners=Listeners(HostPort("127.0.0.1", client), HostPort("127.0.0.1", peer),
                            HostPort("127.0.0.1", quorum), HostPort("127.0.0.1", http)),
        controller_quorum_voters={1: HostPort("127.0.0.1", quorum)},
        controller_peers={1: HostPort("127.0.0.1", peer)},
        cluster_secret=secrets.token_urlsafe(24), heartbeat_ms=100, session_timeout_ms=1000,
    )  # fmt: skip


async def _run(tmp_path: Path) -> tuple[CountingMetadata, dict[int, tuple[int, int]]]:
    config = _config(tmp_path)
    async with trio.open_nursery() as nursery:
        pool = PeerPool(1)
        await nursery.start(pool.run)
        md = CountingMetadata(metadata_settings(config), "test-cluster", pool, quorum_factory=quorum_factory(config))
        await nursery.start(md.run)
        await nursery.start(lambda task_status: serve(
            dict(md.peer_handlers), "127.0.0.1", config.listeners.peer.port, max_frame_bytes=1 << 20,
            request_timeout_ms=5000, name="peer", task_status=task_status))
        await md.wait_for(lambda image: image.broker(1) is not None and not image.broker(1).fenced, WAIT_S)
        mgr = ReplicaManager(replace(partition_settings(config), replica=ReplicaSettings(tick_ms=20, election_timeout_ms=300)),
                             md, pool)
        md.subscribe(mgr.on_image)
        await nursery.start(mgr.run)
        await md.client_handlers["create_topic"](
            Request(1, "create_topic", {"name": "t", "partitions": PARTITIONS, "replication_factor": 1}))
        # Every replica leads the first term its record names (a single voter) and reports; the
        # image shows each (epoch 1: the record's own epoch 0 is "named, not confirmed").
        image = await md.wait_for(
            lambda image: (t := image.topic("t")) is not None
            and all(p.leader == 1 and p.leader_epoch >= 1 for p in t.partitions) and image,
            WAIT_S)
        leaders = {p.partition: (p.leader, p.leader_epoch) for p in image.topic("t").partitions}
        for p in range(PARTITIONS):
            assert mgr.replica("t", p).leader_epoch == leaders[p][1]
        with trio.fail_after(WAIT_S):  # nothing left queued or in flight
            while mgr._reporting:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return md, leaders


async def test_leader_reports_go_in_batches_one_call_at_a_time(tmp_path):
    md, leaders = await _run(tmp_path)
    assert len(leaders) == PARTITIONS and all(leader == 1 for leader, _ in leaders.values())
    assert sum(md.batches) >= PARTITIONS  # each leadership reported (at least) once
    assert len(md.batches) < PARTITIONS and max(md.batches) > 1  # ... not one call each
    assert md.max_in_flight == 1


async def test_a_batch_holds_at_most_max_reports_per_call(tmp_path, monkeypatch):
    monkeypatch.setattr(manager_module, "MAX_REPORTS_PER_CALL", 5)
    md, leaders = await _run(tmp_path)
    assert all(leader == 1 for leader, _ in leaders.values())
    assert max(md.batches) <= 5 and sum(md.batches) >= PARTITIONS and md.max_in_flight == 1


async def test_a_failed_report_is_retried_once_another_controller_is_known(autojump_clock):
    """The backoff after a failed call (up to 2 s) ends early when a controller other than the
    one the call went to becomes known: after the controller's node died, reports waited out
    the backoff long after the new controller was active."""
    metadata = SimpleNamespace(controller_id=None)
    mgr = SimpleNamespace(metadata=metadata)

    async def backoff(seconds, controller_id):
        t0 = trio.current_time()
        await ReplicaManager._report_backoff(mgr, seconds, controller_id)
        return trio.current_time() - t0

    assert await backoff(2.0, None) >= 2.0  # nobody known: the whole backoff
    metadata.controller_id = 3
    assert await backoff(2.0, 3) >= 2.0  # still the controller the call went to
    async with trio.open_nursery() as nursery:
        took: list[float] = []

        async def wait():
            took.append(await backoff(2.0, 3))

        nursery.start_soon(wait)
        await trio.sleep(0.3)
        metadata.controller_id = 1  # a new active controller
    assert 0.3 <= took[0] < 0.3 + 2 * manager_module.REPORT_CONTROLLER_POLL_S

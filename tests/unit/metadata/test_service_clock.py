"""On trio's MockClock, the metadata service's broker timers act at the virtual times they promise: the local broker heartbeats every heartbeat_ms (±10 %), the active controller fences a broker silent for more than session_timeout_ms (and not before), a heartbeat unfences it, and a controlled shutdown fences at once and stops the heartbeats. Beside the timers: a metadata answer names the leader a replica on this node knows when its epoch is newer than the image's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from metadata.quorum import QuorumNotRunningError
from metadata.service import MetadataService
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request
from raftlog.node.config import HostPort, Listeners, NodeConfig
from raftlog.node.settings import metadata_settings

HEARTBEAT_S = 1.5
SESSION_S = 9.0
TICK_S = 0.5  # the controller's tick: min(heartbeat_ms, 500) ms


class MemoryQuorum:
    """A single voter of the metadata quorum (metadata/quorum.py's port) that commits each
    proposal at once, on the trio thread. The PySyncObj bridge works in threads in real time,
    which MockClock cannot drive."""

    def __init__(self, node_id: int, *, on_commit: Callable[[int, bytes], None],
                 on_leader_change: Callable[[int | None, int], None]) -> None:
        self.node_id = node_id
        self.commands: list[bytes] = []
        self._on_commit = on_commit
        self._on_leader_change = on_leader_change
        self._running = False

    @property
    def is_leader(self) -> bool:
        return self._running

    @property
    def leader_id(self) -> int | None:
        return self.node_id if self._running else None

    @property
    def term(self) -> int:
        return 1

    @property
    def commit_index(self) -> int:
        return len(self.commands)

    @property
    def voters(self) -> dict[int, str]:
        return {self.node_id: "memory:0"}

    def status(self) -> dict[str, Any]:
        return {"term": self.term, "leader_id": self.leader_id, "has_quorum": self._running,
                "commit_index": self.commit_index, "voters": {str(self.node_id): "memory:0"}}

    async def change_voters(self, op: str, node_id: int, address: str | None, *, timeout_s: float) -> dict[int, str]:
        raise NotImplementedError("a single voter in memory")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        self._on_leader_change(self.node_id, self.term)
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self._running = False

    async def propose(self, command: bytes, *, timeout_s: float) -> int:
        await trio.lowlevel.checkpoint()
        if not self._running:
            raise QuorumNotRunningError("the quorum is not running")
        self.commands.append(command)
        self._on_commit(len(self.commands), command)
        return len(self.commands)


def _config(tmp_path: Path) -> NodeConfig:
    # Addresses only: nothing here is bound or dialled.
    return NodeConfig(
        node_id=1, data_dir=tmp_path, cluster_id="clocked", roles=frozenset({"controller", "broker"}),
        listeners=Listeners(HostPort("127.0.0.1", 24901), HostPort("127.0.0.1", 24902),
                            HostPort("127.0.0.1", 24903), HostPort("127.0.0.1", 24904)),
        controller_quorum_voters={1: HostPort("127.0.0.1", 24903)},
        controller_peers={1: HostPort("127.0.0.1", 24902)},
        cluster_secret="not-used-by-a-memory-quorum", heartbeat_ms=int(HEARTBEAT_S * 1000),
        session_timeout_ms=int(SESSION_S * 1000),
    )  # fmt: skip


async def _started(nursery: trio.Nursery, tmp_path: Path) -> MetadataService:
    pool = PeerPool(1)
    await nursery.start(pool.run)
    service = MetadataService(metadata_settings(_config(tmp_path)), "clocked", pool,
                              quorum_factory=lambda **kw: MemoryQuorum(1, **kw))
    await nursery.start(service.run)
    await service.wait_for(lambda image: image.broker(1) is not None and not image.broker(1).fenced, 30)
    assert service.registered and service.is_active_controller and not service.fenced
    return service


async def _peer(service: MetadataService, op: str, **fields: Any) -> dict[str, Any]:
    return await service.peer_handlers[op](Request(1, op, fields))


async def test_the_local_broker_heartbeats_every_heartbeat_ms(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        service = await _started(nursery, tmp_path)
        ages_ms = []
        for _ in range(200):  # 50 virtual seconds, sampled every 0.25 s
            await trio.sleep(0.25)
            status = await service.client_handlers["cluster_status"](Request(1, "cluster_status", {}))
            (broker,) = status["brokers"]
            ages_ms.append(broker["last_heartbeat_age_ms"])
        assert max(ages_ms) <= HEARTBEAT_S * 1.1 * 1000
        assert max(ages_ms) >= HEARTBEAT_S * 0.9 * 1000 - 250  # it waits between heartbeats
        assert not service.image.broker(1).fenced
        nursery.cancel_scope.cancel()


async def test_a_silent_broker_is_fenced_after_its_session_timeout_and_unfenced_by_a_heartbeat(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        service = await _started(nursery, tmp_path)
        await _peer(service, "broker_register", broker_id=2, incarnation_id="two", host="127.0.0.1",
                    port=24911, peer_host="127.0.0.1", peer_port=24912)
        first = await _peer(service, "broker_heartbeat", broker_id=2, incarnation_id="two")
        assert first["fenced"] is False  # the heartbeat after registering unfences it
        last_heartbeat = trio.current_time()
        await service.wait_for(lambda image: image.broker(2).fenced, 60)
        silent_s = trio.current_time() - last_heartbeat
        assert SESSION_S < silent_s <= SESSION_S + TICK_S + 0.01, silent_s
        assert not service.image.broker(1).fenced  # the local broker kept heartbeating
        again = await _peer(service, "broker_heartbeat", broker_id=2, incarnation_id="two")
        assert again["fenced"] is False and not service.image.broker(2).fenced
        nursery.cancel_scope.cancel()


async def test_a_controlled_shutdown_fences_at_once_and_stops_heartbeats(autojump_clock, tmp_path):
    async with trio.open_nursery() as nursery:
        service = await _started(nursery, tmp_path)
        start = trio.current_time()
        await service.drain()
        assert service.image.broker(1).fenced and trio.current_time() - start < 0.01
        await trio.sleep(3 * SESSION_S)  # no heartbeat unfences it meanwhile
        assert service.image.broker(1).fenced
        status = await service.client_handlers["cluster_status"](Request(1, "cluster_status", {}))
        assert status["brokers"][0]["last_heartbeat_age_ms"] >= 3 * SESSION_S * 1000
        nursery.cancel_scope.cancel()


async def test_a_metadata_answer_names_the_leader_a_local_replica_knows_at_a_newer_epoch(
    autojump_clock, tmp_path
):
    async with trio.open_nursery() as nursery:
        service = await _started(nursery, tmp_path)
        await service.client_handlers["create_topic"](
            Request(1, "create_topic", {"name": "t", "partitions": 1, "replication_factor": 1}))
        await service.wait_for(lambda image: image.topic("t") is not None and image.topic("t").complete, 10)
        await _peer(service, "report_partition_leader", topic="t", partition=0, leader_id=1, leader_epoch=2)
        image_p = service.image.topic("t").partitions[0]
        assert (image_p.leader, image_p.leader_epoch) == (1, 2)

        async def answered(view: tuple[bool, int | None, int]) -> dict[str, Any]:
            service.partition_view = lambda topic, partition: view
            md = await service.client_handlers["metadata"](Request(1, "metadata", {"topics": ["t"]}))
            (part,) = md["topics"][0]["partitions"]
            return part

        newer = await answered((True, 1, image_p.leader_epoch + 3))
        assert (newer["leader"], newer["leader_epoch"], newer["offline"]) == (1, image_p.leader_epoch + 3, False)
        # Not newer: the image stands (an older or equal epoch never overrides it).
        for epoch in (image_p.leader_epoch, image_p.leader_epoch - 1):
            same = await answered((True, 5, epoch))
            assert (same["leader"], same["leader_epoch"]) == (image_p.leader, image_p.leader_epoch)
        # A replica here that knows no leader: the image's leader, marked offline.
        none = await answered((True, None, image_p.leader_epoch + 5))
        assert (none["leader"], none["leader_epoch"]) == (image_p.leader, image_p.leader_epoch)
        assert none["offline"] and "sees none" in none["offline_reason"]
        nursery.cancel_scope.cancel()

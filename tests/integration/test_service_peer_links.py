"""In one trio run: PeerPool multiplexes calls over one connection (answers out of order, typed errors, backoff, timeouts, lost connections), and MetadataService on a single voter registers its broker, answers admin ops, records leader reports (one and in batches) and producer-id blocks, and feeds a broker-only service over metadata_fetch."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from metadata.controller import LeaderReport
from metadata.service import MetadataService
from raftlog.cli.cluster import free_ports
from raftlog.node.config import HostPort, Listeners, NodeConfig
from raftlog.base.errors import (
    InvalidRequestError,
    NotControllerError,
    PeerUnavailableError,
    RequestTimedOutError,
)
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request
from raftlog.node.server import serve
from raftlog.node.main import quorum_factory
from raftlog.node.settings import metadata_settings

WAIT_S = 20.0


async def _serve(nursery: trio.Nursery, handlers: dict, port: int = 0) -> tuple[str, trio.CancelScope]:
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[int]) -> None:
        with scope:
            await serve(handlers, "127.0.0.1", port, max_frame_bytes=1 << 20, request_timeout_ms=5000,
                        name="peer", task_status=task_status)

    bound = await nursery.start(run)
    return f"127.0.0.1:{bound}", scope


async def test_peer_pool_multiplexes_and_maps_errors():
    release = trio.Event()
    hang = trio.Event()  # never set

    async def first(request: Request) -> dict:
        await release.wait()  # answered only after `second` ran: out of order on one connection
        return {"n": 1}

    async def second(request: Request) -> dict:
        release.set()
        return {"n": 2, "echo": request.fields.get("x")}

    async def refuse(request: Request) -> dict:
        raise NotControllerError(controller_id=7, controller="h:1")

    async def forever(request: Request) -> dict:
        await hang.wait()
        return {}

    handlers = {"first": first, "second": second, "refuse": refuse, "forever": forever}
    async with trio.open_nursery() as nursery:
        address, server = await _serve(nursery, handlers)
        pool = PeerPool(1)
        await nursery.start(pool.run)
        order: list[int] = []

        async def call(op: str) -> None:
            result = await pool.call(address, op, {"x": "y"}, timeout_s=5)
            order.append(result["n"])

        # `first` is answered only after `second` reached the server: a pool that waited for
        # one answer before sending the next request would time out here.
        async with trio.open_nursery() as calls:
            calls.start_soon(call, "first")
            await trio.testing.wait_all_tasks_blocked()
            calls.start_soon(call, "second")
        assert sorted(order) == [1, 2]
        assert pool.status() == {address: {"connected": True, "in_flight": 0, "failures": 0}}

        with pytest.raises(NotControllerError) as info:
            await pool.call(address, "refuse", {}, timeout_s=5)
        assert (info.value.controller_id, info.value.controller) == (7, "h:1")
        with pytest.raises(InvalidRequestError):
            await pool.call(address, "no_such_op", {}, timeout_s=5)
        with pytest.raises(RequestTimedOutError):
            await pool.call(address, "forever", {}, timeout_s=0.2)
        assert (await pool.call(address, "second", {}, timeout_s=5))["n"] == 2  # still usable

        # The listener goes away while a call waits: unknown outcome, then no connection.
        async def lose() -> None:
            await trio.testing.wait_all_tasks_blocked()
            server.cancel()

        nursery.start_soon(lose)
        with pytest.raises(RequestTimedOutError, match="lost"):
            await pool.call(address, "forever", {}, timeout_s=5)
        with pytest.raises(PeerUnavailableError):
            await pool.call(address, "second", {}, timeout_s=5)
        with pytest.raises(PeerUnavailableError, match="backoff"):  # fails fast while backing off
            await pool.call(address, "second", {}, timeout_s=5)
        nursery.cancel_scope.cancel()


def _config(tmp_path: Path, node_id: int, ports: list[int], voter_ports: tuple[int, int], roles: set[str],
            secret: str) -> NodeConfig:
    client, peer, quorum, http = ports
    return NodeConfig(
        node_id=node_id, data_dir=tmp_path / f"node-{node_id}", cluster_id="test-cluster",
        roles=frozenset(roles),
        listeners=Listeners(HostPort("127.0.0.1", client), HostPort("127.0.0.1", peer),
                            HostPort("127.0.0.1", quorum), HostPort("127.0.0.1", http)),
        controller_quorum_voters={1: HostPort("127.0.0.1", voter_ports[0])},
        controller_peers={1: HostPort("127.0.0.1", voter_ports[1])},
        cluster_secret=secret, heartbeat_ms=100, session_timeout_ms=1000,
    )  # fmt: skip


def _unfenced(broker_id: int) -> Any:
    return lambda image: image.broker(broker_id) is not None and not image.broker(broker_id).fenced


async def test_single_voter_service_and_a_broker_only_node(tmp_path):
    secret = secrets.token_urlsafe(24)
    ports1, ports2 = free_ports(4), free_ports(4)
    voter = (ports1[2], ports1[1])
    c1 = _config(tmp_path, 1, ports1, voter, {"controller", "broker"}, secret)
    c2 = _config(tmp_path, 2, ports2, voter, {"broker"}, secret)
    async with trio.open_nursery() as nursery:
        pool1, pool2 = PeerPool(1), PeerPool(2)
        await nursery.start(pool1.run)
        await nursery.start(pool2.run)
        s1 = MetadataService(metadata_settings(c1), "test-cluster", pool1, quorum_factory=quorum_factory(c1))
        images: list[int] = []
        s1.subscribe(lambda image: images.append(len(image.brokers)))
        await nursery.start(s1.run)
        await _serve(nursery, dict(s1.peer_handlers), c1.listeners.peer.port)
        await s1.wait_for(_unfenced(1), WAIT_S)  # registered, then unfenced by its heartbeat
        assert s1.registered and s1.is_active_controller
        assert images and images[-1] == 1  # subscribers saw every image

        created = await s1.client_handlers["create_topic"](
            Request(1, "create_topic", {"name": "t", "partitions": 2, "replication_factor": 1}))
        assert [p["replicas"] for p in created["partitions"]] == [[1], [1]]
        assert await s1.report_partition_leader("t", 0, 1, 3) is True
        assert s1.image.partition("t", 0).leader == 1 and s1.image.partition("t", 0).leader_epoch == 3
        assert await s1.report_partition_leader("t", 0, 1, 2) is False  # older news: no change
        first = await s1.allocate_producer_ids()
        second = await s1.allocate_producer_ids()
        assert second[0] >= first[0] + first[1]

        s2 = MetadataService(metadata_settings(c2), "test-cluster", pool2)
        await nursery.start(s2.run)
        # Its image comes over metadata_fetch; its registration over the peer pool.
        await s2.wait_for(lambda image: image.topic("t") is not None and _unfenced(2)(image), WAIT_S)
        assert s2.controller_id == 1 and s2.applied_index <= s1.applied_index
        assert s2.peer_address(1) == str(c1.listeners.peer)
        md = await s2.client_handlers["metadata"](Request(2, "metadata", {"topics": ["t", "nope"]}))
        assert [t["name"] for t in md["topics"]] == ["t", "nope"] and md["topics"][1]["error"]
        status = await s2.client_handlers["cluster_status"](Request(3, "cluster_status", {}))
        assert status["controller_id"] == 1 and status["answered_by"] == 1  # the controller's view
        # A batch of leader reports from the broker-only node, over the peer link: per report.
        results = await s2.report_partition_leaders(
            [LeaderReport("t", 1, 1, 4), LeaderReport("nope", 0, 1, 1), LeaderReport("t", 0, 1, 1)])
        assert results[0] == {"changed": True} and results[2] == {"changed": False}  # epoch 1 < 3
        assert results[1]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert s1.image.partition("t", 1).leader_epoch == 4
        nursery.cancel_scope.cancel()

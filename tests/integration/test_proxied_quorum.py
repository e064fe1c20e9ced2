"""A 3-node cluster whose node-to-node links all go through fault proxies elects a controller, and isolating the controller's node makes another node controller."""

from __future__ import annotations

import time

import trio

import pytest

from jepsen_style_tests.db import LocalCluster
from raftlog.node.config import config_to_toml, load_config
from raftlog.base.errors import ConfigError
from jepsen_style_tests.net import Network


def _controller_seen_by(db: LocalCluster, node_id: int) -> int | None:
    from raftlog.client import Admin
    from raftlog.base.errors import RaftlogError

    try:
        with Admin([db.client_address(node_id)], request_timeout_ms=1500) as admin:
            return admin.cluster_status(timeout_ms=1500).controller_id
    except (RaftlogError, OSError):
        return None


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # poll interval of a deadline-bounded wait


async def test_proxied_cluster_elects_and_fails_over(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        network = Network(db.targets())
        async with trio.open_nursery() as nursery:
            await nursery.start(network.serve)
            db.route_through(network.addresses_for)
            # Every node dials every other node's peer and quorum listener via its proxy.
            for src in db.node_ids:
                overrides = db.configs[src].dial_overrides
                assert len(overrides) == 2 * (len(db.node_ids) - 1)
                assert all(str(network.proxy(src, dst, kind).port) in target
                           for dst in db.node_ids if dst != src
                           for kind, target in [("quorum", overrides[f"127.0.0.1:{db.ports[dst].quorum}"]),
                                                ("peer", overrides[f"127.0.0.1:{db.ports[dst].peer}"])])
            await trio.to_thread.run_sync(db.start_all)
            status = await trio.to_thread.run_sync(db.wait_ready, 60.0)
            old = status.controller_id
            assert old in db.node_ids
            quorum_bytes = sum(network.proxy(s, d, "quorum").bytes_relayed["forward"]
                               for s in db.node_ids for d in db.node_ids if s != d)
            assert quorum_bytes > 0  # the quorum really talks through the proxies
            peer_bytes = sum(network.proxy(s, d, "peer").bytes_relayed["forward"]
                             for s in db.node_ids for d in db.node_ids if s != d)
            assert peer_bytes > 0  # so do broker -> controller calls (PeerPool)

            network.isolate(old)
            others = [n for n in db.node_ids if n != old]

            def new_controller() -> int | None:
                seen = {_controller_seen_by(db, n) for n in others}
                return seen.pop() if len(seen) == 1 and None not in seen and old not in seen else None

            new = await trio.to_thread.run_sync(_wait, new_controller, 30.0, "a new controller")
            assert new in others
            network.heal()
            await trio.to_thread.run_sync(db.wait_ready, 60.0)
            nursery.cancel_scope.cancel()
        codes = db.close()
        assert set(codes) == set(db.node_ids)


def test_dial_overrides_config_round_trip(tmp_path):
    base = {"node_id": 1, "data_dir": str(tmp_path), "controller_quorum_voters": "1@127.0.0.1:9095",
            "cluster_secret": "s" * 20}
    config = load_config(None, env={"RAFTLOG_DIAL_OVERRIDES": "127.0.0.1:9193=127.0.0.1:40001"}, overrides=base)
    assert dict(config.dial_overrides) == {"127.0.0.1:9193": "127.0.0.1:40001"}
    path = tmp_path / "node.toml"
    path.write_text(config_to_toml(config))
    assert load_config(path, env={}) == config
    assert dict(load_config(None, env={}, overrides=base).dial_overrides) == {}
    with pytest.raises(ConfigError, match="dial_overrides"):
        load_config(None, env={}, overrides={**base, "dial_overrides": {"127.0.0.1:9193": "nowhere"}})

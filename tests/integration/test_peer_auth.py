"""The peer listener of real nodes serves only members: a stranger's metadata_fetch, broker_register (+ heartbeat), Raft vote and replica fetch get nothing, a wrong secret fails the handshake, refusals are logged once per address, and the cluster itself still replicates."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from raftlog.base.errors import SaslAuthenticationFailedError, error_from_wire
from raftlog.base.peer_auth import PeerAuthDialer, peer_key
from raftlog.base.protocol import FrameDecoder, encode_frame


class RawPeer:
    """A blocking connection to a peer listener that keeps going between requests."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder(max_frame_bytes=1 << 30)
        self.next_id = 1

    def call(self, op: str, **fields: Any) -> dict[str, Any] | None:
        """The response map, or None when the listener closed without one."""
        self.next_id += 1
        self.sock.sendall(encode_frame({**fields, "v": 1, "id": self.next_id, "op": op}))
        while (frame := self.decoder.next_frame()) is None:
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self.decoder.feed(data)
        return frame

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


def peer_address(cluster: Any, node_id: int) -> str:
    return str(cluster.configs[node_id].listeners.peer)


def refused(response: dict[str, Any] | None) -> bool:
    if response is None:
        return True
    return "error" in response and response["error"]["code"] == "SASL_AUTHENTICATION_FAILED"


ATTACKS = [
    ("metadata_fetch", {"after_index": 0, "max_wait_ms": 0, "max_envelopes": 1000}),
    ("broker_register", {"broker_id": 99, "incarnation_id": "evil", "host": "127.0.0.1", "port": 1,
                         "peer_host": "127.0.0.1", "peer_port": 2}),
    ("broker_heartbeat", {"broker_id": 99, "incarnation_id": "evil"}),
    ("raft", {"messages": [{"kind": "vote_request", "topic": "t", "partition": 0, "epoch": 99,
                            "candidate": 99, "last_epoch": 99, "last_offset": 10**9}]}),
    ("replica_fetch", {"broker_id": 99, "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0,
                                                      "last_fetched_epoch": 0}]}),
]


@pytest.mark.parametrize("op, fields", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_stranger_gets_nothing(cluster, op, fields):
    controller = cluster.controller_id()
    peer = RawPeer(peer_address(cluster, controller))
    try:
        response = peer.call(op, **fields)
        assert refused(response), response
        assert response is None or set(response["error"]) <= {"code", "message"}  # no data, only the refusal
        assert peer.closed()
    finally:
        peer.close()


def test_the_spoofed_broker_never_registers(cluster):
    created = cluster.call(1, "create_topic", name="after-attack", partitions=6, replication_factor=3)
    replicas = {r for p in created["partitions"] for r in p["replicas"]}
    assert replicas == {1, 2, 3}
    assert sorted(b["id"] for b in cluster.status()["brokers"]) == [1, 2, 3]


def test_a_wrong_secret_fails_the_handshake_both_ways(cluster):
    peer = RawPeer(peer_address(cluster, 2))
    try:
        stranger = PeerAuthDialer(peer_key("not-the-cluster-secret"), 2)
        challenge = peer.call("peer_auth_hello", **stranger.hello())
        assert challenge is not None and "error" not in challenge
        with pytest.raises(SaslAuthenticationFailedError):
            stranger.finish(challenge)  # the listener did not prove our (wrong) secret
        answer = peer.call("peer_auth_finish", proof=b"\0" * 32)
        assert refused(answer) and peer.closed()
    finally:
        peer.close()


def test_the_secret_opens_the_door(cluster):
    # A positive control: the same raw client with the real secret is served.
    peer = RawPeer(peer_address(cluster, cluster.controller_id()))
    try:
        dialer = PeerAuthDialer(peer_key(cluster.secret), 7)
        challenge = peer.call("peer_auth_hello", **dialer.hello())
        finish = peer.call("peer_auth_finish", **dialer.finish(challenge))
        assert finish is not None and finish.get("node_id") == 7, finish
        fetched = peer.call("metadata_fetch", after_index=0, max_wait_ms=0, max_envelopes=10)
        assert fetched is not None and "error" not in fetched and fetched["envelopes"], fetched
    finally:
        peer.close()


def test_refusals_are_logged_once_per_address_and_never_the_secret(cluster):
    controller = cluster.controller_id()
    for _ in range(3):
        peer = RawPeer(peer_address(cluster, controller))
        try:
            assert refused(peer.call("metadata_fetch", after_index=0, max_wait_ms=0, max_envelopes=1))
        finally:
            peer.close()
    log = (cluster.configs[controller].data_dir / "node.log").read_text()
    assert log.count("peer_auth_refused") == 1, log[-2000:]
    for node_id in cluster.live():
        text = (cluster.configs[node_id].data_dir / "node.log").read_text()
        assert cluster.secret not in text


def test_errors_from_refusals_are_typed():
    error = error_from_wire({"code": "SASL_AUTHENTICATION_FAILED", "message": "x"})
    assert isinstance(error, SaslAuthenticationFailedError)

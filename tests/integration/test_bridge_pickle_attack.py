"""A crafted pickle never runs on a bridge voter (secret, then whitelist) and the quorum keeps committing."""

from __future__ import annotations

import io
import os
import pickle
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

import pytest

import raftlog.node.bridge as bridge


import bridge_node as harness


class _OpenFile:
    """Unpickling this calls open(path, "w"): creates the file."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


class _System:
    """Unpickling this runs a shell command that creates the file."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.path}",))


def _payloads(target: Path) -> list[bytes]:
    # Protocol 2, like PySyncObj's own traffic; also the newest protocol.
    return [
        pickle.dumps(_OpenFile(target), 2),
        pickle.dumps({"type": "append_entries", "x": _System(target)}, 2),
        pickle.dumps(_OpenFile(target), pickle.HIGHEST_PROTOCOL),
    ]


def test_whitelist_blocks_crafted_pickles_in_every_patched_loader(tmp_path: Path) -> None:
    import pysyncobj.journal
    import pysyncobj.pickle

    target = tmp_path / "pwned"
    control = tmp_path / "control"
    for payload in _payloads(control):  # the payloads are live under the stock unpickler
        result = pickle.loads(payload)
        if hasattr(result, "close"):
            result.close()
        assert control.exists()
        control.unlink()
    before = bridge.unpickle_rejections()
    for payload in _payloads(target):
        for load in (
            pysyncobj.pickle.loads,
            pysyncobj.journal.loads,
            lambda data: pysyncobj.pickle.load(io.BytesIO(data)),
        ):
            with pytest.raises(pickle.UnpicklingError, match="not allowed"):
                load(payload)
    assert not target.exists()
    assert bridge.unpickle_rejections() == before + 9


def test_whitelist_admits_pysyncobj_traffic() -> None:
    import pysyncobj.pickle
    from pysyncobj.node import TCPNode

    message = {
        "type": "append_entries",
        "term": 3,
        "commit_index": 5,
        "entries": [(b"\x00" + pickle.dumps((0, (b"\xff" * 40,)), 2), 4, 3), (b"", 5, 3)],
        "prevLogIdx": 3,
        "prevLogTerm": 2,
    }
    assert pysyncobj.pickle.loads(pysyncobj.pickle.dumps(message)) == message
    nodes = {TCPNode("127.0.0.1:9")}
    membership = ["add", "x", nodes]
    assert pysyncobj.pickle.loads(pysyncobj.pickle.dumps(membership)) == membership


def test_guard_is_idempotent_and_restores_stdlib_pickle() -> None:
    import pysyncobj.pickle

    bridge._install_pickle_guard()
    bridge._install_pickle_guard()
    assert pysyncobj.pickle.loads is bridge.restricted_loads
    stdlib = pickle._Unpickler  # type: ignore[attr-defined]
    assert stdlib.dispatch[pickle.SHORT_BINSTRING[0]] is stdlib.load_short_binstring
    assert stdlib.dispatch[pickle.BINSTRING[0]] is stdlib.load_binstring


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    cluster = harness.Cluster(tmp_path / "cluster", 3, password="the-real-secret")
    try:
        yield cluster.start_all()
    finally:
        cluster.stop_all()


def _frame(data: bytes) -> bytes:
    return struct.pack("i", len(data)) + data


def _fernet_frame(password: str, payload: bytes) -> bytes:
    from pysyncobj.encryptor import getEncryptor  # the attacker uses the same library

    token = getEncryptor(password).encrypt_at_time(zlib.compress(payload), int(time.monotonic()))
    return _frame(token)


def _send_and_expect_hangup(address: str, frame: bytes) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(frame)
        sock.settimeout(5)
        try:
            assert sock.recv(4096) == b""  # the voter drops the connection, sends nothing
        except ConnectionResetError:
            pass


def test_crafted_frames_do_not_run_and_quorum_keeps_committing(
    cluster: Any, tmp_path: Path
) -> None:
    leader_id = cluster.wait_leader()
    leader = cluster.nodes[leader_id]
    assert leader.propose(b"before")["event"] == "proposed"
    target = tmp_path / "pwned"
    attacks = []
    for payload in _payloads(target):
        attacks.append(("raw frame, no secret", _frame(zlib.compress(payload))))
        attacks.append(("wrong secret", _fernet_frame("guessed-secret", payload)))
        # Past the HMAC (the attacker knows the secret): only the whitelist stands.
        attacks.append(("right secret", _fernet_frame("the-real-secret", payload)))
    for node in cluster.nodes.values():
        for _, frame in attacks:
            _send_and_expect_hangup(node.address, frame)

    assert all(node.alive() for node in cluster.nodes.values())
    assert cluster.wait_leader() == leader_id
    assert leader.propose(b"after")["event"] == "proposed"
    for node in cluster.nodes.values():
        node.wait_for(lambda n: n.applied() == [b"before", b"after"], 10.0, "both commands")
        # Only the frames with the right secret reached the unpickler, and it refused them.
        assert node.status()["unpickle_rejections"] == 3
    assert not target.exists()

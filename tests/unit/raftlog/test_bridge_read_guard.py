"""The bridge's read guard on a real PySyncObj TcpConnection over a loopback TCP pair: a stranger's oversized or negative length ends the connection at its header, a first frame is read to its end and no further, and an authenticated connection reads at most READ_BUDGET_BYTES per read event."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any, Iterator

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import POLL_EVENT_TYPE, createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

import raftlog.node.bridge as bridge
from raftlog.node import quorum_gate as gate


@pytest.fixture
def pair() -> Iterator[tuple[Any, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:  # TCP: loopback buffers hold MiBs
        theirs = socket.create_connection(server.getsockname(), timeout=10)
        ours, _ = server.accept()
    ours.setblocking(False)
    conn = TcpConnection(createPoller("auto"), socket=ours, recvBufferSize=2**16)
    conn.encryptor = getEncryptor("the-cluster-secret")  # as TCPTransport sets it
    try:
        yield conn, theirs
    finally:
        conn.disconnect()
        theirs.close()


def _read_event(conn: Any) -> None:
    conn._TcpConnection__processConnection(conn.fileno(), POLL_EVENT_TYPE.READ)


def _buffered(conn: Any) -> int:
    return len(conn._TcpConnection__readBuffer)


@pytest.mark.parametrize(("length", "reason"), [(2**31 - 1, "preauth_frame_too_large"),
                                                (-5, "negative_frame_length")])
def test_a_strangers_bad_length_ends_the_connection_at_its_header(pair, length, reason):
    conn, theirs = pair
    before = bridge.quorum_refusals().get(reason, 0)
    theirs.sendall(struct.pack("i", length) + b"\0" * 60_000)
    _read_event(conn)
    assert conn.state == CONNECTION_STATE.DISCONNECTED
    assert bridge.quorum_refusals()[reason] == before + 1


def test_a_strangers_first_frame_is_read_to_its_end_and_no_further(pair):
    conn, theirs = pair
    theirs.sendall(struct.pack("i", 300) + b"\x01" * 299)  # one byte short
    _read_event(conn)
    assert conn.state == CONNECTION_STATE.CONNECTED and _buffered(conn) == 303
    before = bridge.quorum_refusals().get("not_authenticated", 0)
    theirs.sendall(b"\x01" + b"\x02" * 50_000)  # the frame's last byte, then more
    _read_event(conn)  # reads exactly the frame, which does not decrypt: closed, counted
    assert conn.state == CONNECTION_STATE.DISCONNECTED
    assert bridge.quorum_refusals()["not_authenticated"] == before + 1


def test_an_authenticated_connection_reads_at_most_the_budget_per_event(pair):
    conn, theirs = pair
    conn._rl_authenticated = True
    length = 4 * gate.READ_BUDGET_BYTES  # of a frame announced twice as long: it stays open
    sender = threading.Thread(target=theirs.sendall, args=(struct.pack("i", 2 * length) + b"\0" * length,))
    sender.start()
    sender.join(10)  # all of it waiting in the kernel (if it fits), as a fast sender's would be
    seen = 0
    try:
        while seen < length + 4:
            _read_event(conn)
            assert conn.state == CONNECTION_STATE.CONNECTED
            grown = _buffered(conn) - seen
            assert grown <= gate.READ_BUDGET_BYTES
            seen += grown
    finally:
        sender.join(10)
    assert seen == length + 4

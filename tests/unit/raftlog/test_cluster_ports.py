"""free_ports: distinct ports that bind, chosen below the kernel's ephemeral range (so an outgoing connection cannot take one before its listener binds it), and never one it handed out lately (its listener may not be bound yet)."""

import socket
from collections import deque

from raftlog.cli.cluster import LOWEST_LISTEN_PORT, _ephemeral_range, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    ports = free_ports(12)
    assert len(set(ports)) == 12
    span = _ephemeral_range()
    if span is not None:
        assert all(LOWEST_LISTEN_PORT <= p < span[0] for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", p))


def test_a_port_with_a_listener_is_never_chosen(monkeypatch):
    if _ephemeral_range() is None:
        return
    (busy,) = free_ports(1)
    (free,) = free_ports(1)
    picks = iter([busy, busy, free])

    class Scripted:
        def randrange(self, low, high):
            return next(picks)

    monkeypatch.setattr("raftlog.cli.cluster.secrets.SystemRandom", Scripted)
    monkeypatch.setattr("raftlog.cli.cluster._HANDED_OUT", deque(maxlen=8))  # forget them
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", busy))
        listener.listen()
        assert free_ports(1) == [free]


def test_a_port_handed_out_lately_is_not_handed_out_again():
    # Nothing binds these: a cluster's nodes ask one after another, before any listens.
    asked = [free_ports(5) for _ in range(200)]
    every = [p for ports in asked for p in ports]
    assert len(set(every)) == len(every) == 1000


def test_a_port_slice_keeps_parallel_pickers_apart(monkeypatch):
    # RAFTLOG_PORT_SLICE="i/n" (set per pytest-xdist worker by tests/conftest.py): only p % n == i.
    if _ephemeral_range() is None:
        return
    for index in range(3):
        monkeypatch.setenv("RAFTLOG_PORT_SLICE", f"{index}/3")
        assert {p % 3 for p in free_ports(20)} == {index}
    monkeypatch.setenv("RAFTLOG_PORT_SLICE", "3/3")  # malformed: the whole range
    assert len(set(free_ports(20))) == 20

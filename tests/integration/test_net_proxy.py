"""Per-link TCP proxies on loopback: pass-through relays, drop breaks and refuses, blackhole
stalls (and heal delivers what was held), delay adds at least the delay, one-way faults cut one
direction, and Network shapes (isolate, halves, majorities ring, groups) cut the right flows."""

from __future__ import annotations

import functools
import random

import pytest
import trio

from jepsen_style_tests.net import (
    BLACKHOLE,
    DROP,
    PASS,
    LinkProxy,
    Mode,
    NetError,
    Network,
    delayed,
    grudge_complete,
    grudge_halves,
    grudge_isolate,
    grudge_majorities_ring,
    majority,
)

STALL_S = 0.25  # how long "nothing arrives" must hold for a stall to count
DEADLINE_S = 5


class EchoServer:
    """Echoes every byte back; counts connections and bytes received."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.got_bytes = trio.Event()
        self.port = 0

    async def handler(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        async with stream:
            try:
                while data := await stream.receive_some(65536):
                    self.received += data
                    self.got_bytes.set()
                    await stream.send_all(data)
            except trio.BrokenResourceError:
                return

    async def start(self, nursery: trio.Nursery) -> EchoServer:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self.handler, 0, host="127.0.0.1"))
        self.port = listeners[0].socket.getsockname()[1]
        return self


async def start_proxy(nursery, target_port, **options) -> LinkProxy:
    proxy = LinkProxy(("127.0.0.1", target_port), **options)
    port = await nursery.start(proxy.serve)
    assert port == proxy.port and port > 0
    return proxy


async def connect(port: int) -> trio.SocketStream:
    with trio.fail_after(DEADLINE_S):
        return await trio.open_tcp_stream("127.0.0.1", port)


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    buf = bytearray()
    with trio.fail_after(DEADLINE_S):
        while len(buf) < n:
            data = await stream.receive_some(n - len(buf))
            if not data:
                raise EOFError(f"EOF after {len(buf)} of {n} bytes")
            buf += data
    return bytes(buf)


async def round_trip(stream: trio.SocketStream, payload: bytes) -> bytes:
    await stream.send_all(payload)
    return await receive_exactly(stream, len(payload))


async def closed_by_peer(stream: trio.SocketStream) -> bool:
    with trio.fail_after(DEADLINE_S):
        try:
            return await stream.receive_some(1024) == b""
        except trio.BrokenResourceError:
            return True


async def stalls(stream: trio.SocketStream) -> bool:
    """True if nothing arrives within STALL_S (a read that times out)."""
    with trio.move_on_after(STALL_S):
        await stream.receive_some(1024)
        return False
    return True


async def test_pass_through_relays_both_ways():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        async with await connect(proxy.port) as stream:
            assert await round_trip(stream, b"hello") == b"hello"
            big = bytes(range(256)) * 2048  # 512 KiB: more than the queue holds at once
            async with trio.open_nursery() as io:
                io.start_soon(stream.send_all, big)
                assert await receive_exactly(stream, len(big)) == big
        assert proxy.bytes_relayed["forward"] == proxy.bytes_relayed["reverse"] == 5 + len(big)
        nursery.cancel_scope.cancel()


async def test_drop_closes_existing_refuses_new_and_heal_restores():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        existing = await connect(proxy.port)
        assert await round_trip(existing, b"a") == b"a"

        proxy.set_mode(forward=DROP)
        assert await closed_by_peer(existing)
        refused = await connect(proxy.port)
        assert await closed_by_peer(refused)
        assert proxy.connections_refused == 1 and echo.connections == 1

        proxy.set_mode(forward=PASS)
        async with await connect(proxy.port) as fresh:
            assert await round_trip(fresh, b"back") == b"back"
        await existing.aclose()
        await refused.aclose()
        nursery.cancel_scope.cancel()


async def test_blackhole_stalls_and_heal_delivers_the_held_bytes():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        async with await connect(proxy.port) as stream:
            assert await round_trip(stream, b"1") == b"1"
            proxy.set_mode(forward=BLACKHOLE, reverse=BLACKHOLE)
            await stream.send_all(b"held")
            assert await stalls(stream)
            assert bytes(echo.received) == b"1"  # nothing got through
            proxy.set_mode(forward=PASS, reverse=PASS)
            assert await receive_exactly(stream, 4) == b"held"
        nursery.cancel_scope.cancel()


async def test_blackhole_on_a_new_connection_does_not_reach_the_target():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        proxy.set_mode(forward=BLACKHOLE)
        async with await connect(proxy.port) as stream:  # accepted...
            await stream.send_all(b"x")
            assert await stalls(stream)
            assert echo.connections == 0  # ...but never connected upstream
            proxy.set_mode(forward=PASS)
            assert await receive_exactly(stream, 1) == b"x"
        assert echo.connections == 1
        nursery.cancel_scope.cancel()


async def test_one_way_blackhole_lets_requests_in_and_holds_replies():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        async with await connect(proxy.port) as stream:
            proxy.set_mode(reverse=BLACKHOLE)
            await stream.send_all(b"ping")
            with trio.fail_after(DEADLINE_S):
                await echo.got_bytes.wait()
            assert bytes(echo.received) == b"ping"
            assert await stalls(stream)
            proxy.set_mode(reverse=PASS)
            assert await receive_exactly(stream, 4) == b"ping"
        nursery.cancel_scope.cancel()


async def test_delay_adds_at_least_the_delay():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port)
        async with await connect(proxy.port) as stream:
            proxy.set_mode(forward=delayed(300), reverse=delayed(200))
            started = trio.current_time()
            assert await round_trip(stream, b"slow") == b"slow"
            assert trio.current_time() - started >= 0.5
            proxy.set_mode(forward=delayed(0), reverse=PASS)
            started = trio.current_time()
            assert await round_trip(stream, b"fast") == b"fast"
            assert trio.current_time() - started < 0.5  # generous: the machine is shared
        nursery.cancel_scope.cancel()


async def test_connection_limit_closes_extra_connections():
    async with trio.open_nursery() as nursery:
        echo = await EchoServer().start(nursery)
        proxy = await start_proxy(nursery, echo.port, max_connections=2)
        first, second = await connect(proxy.port), await connect(proxy.port)
        assert await round_trip(first, b"1") == b"1" and await round_trip(second, b"2") == b"2"
        third = await connect(proxy.port)
        assert await closed_by_peer(third)
        assert proxy.connection_count == 2 and proxy.connections_refused == 1
        for stream in (first, second, third):
            await stream.aclose()
        nursery.cancel_scope.cancel()


def test_bad_modes_and_options_are_rejected():
    with pytest.raises(NetError):
        Mode("sideways")
    with pytest.raises(NetError):
        Mode("delay", 0)
    assert delayed(0) == PASS and delayed(5) == Mode("delay", 5)
    with pytest.raises(NetError):
        LinkProxy(("127.0.0.1", 1), queue_chunks=0)


# ---------------------------------------------------------------------- pure shapes


def test_grudges():
    assert grudge_isolate([1, 2, 3], 2) == {2: {1, 3}, 1: {2}, 3: {2}}
    assert grudge_halves([1, 2, 3, 4, 5]) == {1: {3, 4, 5}, 2: {3, 4, 5}, 3: {1, 2}, 4: {1, 2}, 5: {1, 2}}
    assert grudge_complete([[1], [2], [3]]) == {1: {2, 3}, 2: {1, 3}, 3: {1, 2}}
    with pytest.raises(NetError):
        grudge_complete([[1, 2], [2, 3]])
    with pytest.raises(NetError):
        grudge_isolate([1, 2], 9)


@pytest.mark.parametrize("n", [3, 4, 5, 7])
def test_majorities_ring_gives_each_node_its_own_majority(n):
    nodes = list(range(n))
    grudge = grudge_majorities_ring(nodes, random.Random(n))
    hears = {node: frozenset(nodes) - grudge[node] for node in nodes}
    assert set(grudge) == set(nodes)
    assert all(node in hears[node] and len(hears[node]) == majority(n) for node in nodes)
    assert len(set(hears.values())) == n  # no two nodes share a majority


# ---------------------------------------------------------------------- the network


async def test_network_isolate_cuts_one_node_and_heal_restores():
    async with trio.open_nursery() as nursery:
        echoes = {node: await EchoServer().start(nursery) for node in (1, 2, 3)}
        targets = {node: {"peer": ("127.0.0.1", echo.port)} for node, echo in echoes.items()}
        network = await nursery.start(Network(targets).serve)
        ports = {network.address(s, d, "peer")[1] for s in (1, 2, 3) for d in (1, 2, 3) if s != d}
        assert len(ports) == 6  # one proxy per ordered pair
        assert set(network.addresses_for(1)["peer"]) == {2, 3}

        s12 = await connect(network.address(1, 2, "peer")[1])
        s21 = await connect(network.address(2, 1, "peer")[1])
        s23 = await connect(network.address(2, 3, "peer")[1])
        for stream in (s12, s21, s23):
            assert await round_trip(stream, b"ok") == b"ok"

        assert network.isolate(1) == {1: {2, 3}, 2: {1}, 3: {1}}
        await s12.send_all(b"a")
        await s21.send_all(b"b")
        assert await stalls(s12) and await stalls(s21)
        assert await round_trip(s23, b"still") == b"still"

        network.heal()
        assert network.grudge == {}
        assert await receive_exactly(s12, 1) == b"a"
        assert await receive_exactly(s21, 1) == b"b"

        network.apply({2: [1]}, mode=DROP)  # one-way: 2 stops hearing 1, on both links
        assert await closed_by_peer(s12) and await closed_by_peer(s21)
        assert await round_trip(s23, b"fine") == b"fine"
        with pytest.raises(NetError):
            network.apply({2: [9]})
        with pytest.raises(NetError):
            network.apply({2: [1]}, mode=delayed(5))
        network.heal()
        for stream in (s12, s21, s23):
            await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_network_shapes_set_the_right_link_modes():
    async with trio.open_nursery() as nursery:
        targets = {n: {"peer": ("127.0.0.1", 9), "quorum": ("127.0.0.1", 10)} for n in "abcde"}
        network = await nursery.start(Network(targets).serve)

        def cut(src, dst):
            forward = network.proxy(src, dst, "quorum").mode("forward")
            reverse = network.proxy(dst, src, "peer").mode("reverse")
            assert forward == reverse  # both links agree on the flow src -> dst
            return forward != PASS

        network.partition([["a", "b"], ["c", "d", "e"]])
        assert cut("a", "c") and cut("c", "a") and not cut("a", "b") and not cut("d", "e")
        network.majorities_ring(random.Random(1))
        assert sum(cut(s, d) for s in "abcde" for d in "abcde" if s != d) == 5 * 2
        network.halves(random.Random(2))
        assert sum(cut(s, d) for s in "abcde" for d in "abcde" if s != d) == 2 * 2 * 3
        network.heal()
        network.slow(30)  # slow but connected
        assert network.proxy("a", "b", "peer").mode("forward") == delayed(30)
        network.isolate("a")  # a cut flow is cut, the rest stays slow
        assert cut("a", "b") and network.proxy("b", "c", "peer").mode("reverse") == delayed(30)
        network.heal()
        assert not any(cut(s, d) for s in "abcde" for d in "abcde" if s != d)
        assert network.proxy("a", "b", "peer").mode("forward") == PASS
        nursery.cancel_scope.cancel()


async def test_network_listens_on_the_ports_it_is_given():
    # Hand-started runs keep to a port range (scripts/jepsen run --ports LOW-HIGH).
    from jepsen_style_tests.db import ports_in

    targets = {n: {"peer": ("127.0.0.1", 9), "quorum": ("127.0.0.1", 10)} for n in (1, 2, 3)}
    assert Network.proxy_count(targets) == 12
    with pytest.raises(NetError):
        Network(targets, listen_ports=[1, 2])
    async with trio.open_nursery() as nursery:
        probe = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]  # a free area of ports
        low = probe.socket.getsockname()[1]
        await probe.aclose()
        given = ports_in((low, min(low + 400, 65535)), 12)
        network = await nursery.start(Network(targets, listen_ports=given).serve)
        bound = [network.address(s, d, k)[1]
                 for s in (1, 2, 3) for d in (1, 2, 3) if s != d for k in ("peer", "quorum")]  # fmt: skip
        assert sorted(bound) == sorted(given)
        nursery.cancel_scope.cancel()

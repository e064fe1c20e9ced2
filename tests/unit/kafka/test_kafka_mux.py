"""The link between the node's main process and a Kafka network worker (raftlog/node/kafka/mux.py):
two Muxes over a trio memory stream pair carry many connections' bytes both ways, in order,
within each pipe's credit window; EOF, CLOSE and the link's end reach the other side."""

from __future__ import annotations

import trio
import trio.testing

from raftlog.node.kafka.mux import DATA, OPEN, Mux


async def _pair(window_bytes: int = 1 << 20):
    left, right = trio.testing.memory_stream_pair()
    return Mux(left, window_bytes=window_bytes), Mux(right, window_bytes=window_bytes)


def test_many_pipes_carry_bytes_both_ways_in_order() -> None:
    async def main() -> None:
        worker, node = await _pair(window_bytes=4096)  # small: the credit must flow back
        opened: dict[int, str] = {}
        got: dict[int, bytes] = {}

        async with trio.open_nursery() as nursery:
            def on_open(conn_id: int, peer: str) -> None:
                opened[conn_id] = peer
                pipe = node.open_pipe(conn_id)

                async def echo_upper() -> None:  # the main side: read all, answer, close
                    data = b""
                    while chunk := await pipe.receive_some(1000):
                        data += chunk
                    got[conn_id] = data
                    await pipe.send_all(data.upper())
                    await pipe.aclose()

                nursery.start_soon(echo_upper)

            nursery.start_soon(worker.run)
            nursery.start_soon(node.run, on_open)
            answers: dict[int, bytes] = {}

            async def client(conn_id: int) -> None:
                pipe = worker.open_pipe(conn_id)
                worker.send(OPEN, conn_id, f"127.0.0.1:{conn_id}".encode())
                payload = bytes((97 + conn_id % 26,)) * 20_000
                await pipe.send_all(payload)
                await pipe.send_eof()
                data = b""
                try:
                    while chunk := await pipe.receive_some():
                        data += chunk
                except trio.BrokenResourceError:  # the main's CLOSE after its answer
                    pass
                answers[conn_id] = data

            async with trio.open_nursery() as clients:
                for conn_id in range(1, 9):
                    clients.start_soon(client, conn_id)
            nursery.cancel_scope.cancel()
        assert sorted(opened) == list(range(1, 9))
        assert opened[3] == "127.0.0.1:3"
        for conn_id in range(1, 9):
            expected = bytes((97 + conn_id % 26,)) * 20_000
            assert got[conn_id] == expected
            assert answers[conn_id] == expected.upper()

    trio.run(main)


def test_a_sender_without_credit_waits_and_the_link_end_breaks_pipes() -> None:
    async def main() -> None:
        worker, node = await _pair(window_bytes=100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            node_pipe: list = []
            nursery.start_soon(node.run, lambda cid, peer: node_pipe.append(node.open_pipe(cid)))
            pipe = worker.open_pipe(1)
            worker.send(OPEN, 1, b"h:1")
            await pipe.send_all(b"x" * 100)  # exactly the window
            with trio.move_on_after(0.2) as waited:  # nobody reads at the main: no credit
                await pipe.send_all(b"y")
            assert waited.cancelled_caught
            assert await node_pipe[0].receive_some() == b"x" * 100  # consumed: credit back
            with trio.fail_after(5):
                await pipe.send_all(b"z")
                assert await node_pipe[0].receive_some() == b"z"
            nursery.cancel_scope.cancel()
        # The link ended: the pipes of both ends are broken.
        for broken in (pipe, node_pipe[0]):
            try:
                await broken.send_all(b"after")
            except trio.BrokenResourceError:
                continue
            raise AssertionError("a pipe of an ended link still sends")

    trio.run(main)


def test_worker_count_follows_the_usable_cpus() -> None:
    from raftlog.node.config import ConfigError, load_config
    from raftlog.node.kafka.workers import default_network_processes, network_processes_of, usable_cpus

    assert [default_network_processes(c) for c in (1, 2, 3, 5, 16)] == [0, 1, 2, 4, 4]
    assert network_processes_of(3) == 3 and network_processes_of(0) == 0
    assert network_processes_of(-1) == default_network_processes(usable_cpus())
    base = {"RAFTLOG_NODE_ID": "1", "RAFTLOG_DATA_DIR": "/tmp/raftlog-test-1", "RAFTLOG_CLUSTER_SECRET": "s" * 16,
            "RAFTLOG_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9095"}
    config = load_config(None, env={**base, "RAFTLOG_KAFKA_NETWORK_PROCESSES": "2"}, overrides={})
    assert config.kafka_network_processes == 2
    try:
        load_config(None, env={**base, "RAFTLOG_KAFKA_NETWORK_PROCESSES": "65"}, overrides={})
    except ConfigError as exc:
        assert "kafka_network_processes" in str(exc)
    else:
        raise AssertionError("65 worker processes accepted")


def test_a_hand_over_ends_the_pipe_at_the_main_with_the_unserved_bytes() -> None:
    """The worker's HANDOVER: the main's pipe reads what came before it, then its end; it
    carries the unserved bytes and the connection waits for its socket (`handing`); the
    worker has forgotten the pipe and sends no CLOSE."""
    async def main() -> None:
        worker, node = await _pair()
        opened_send, opened = trio.open_memory_channel(2)  # the main's pipes, as the link opens them
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            nursery.start_soon(node.run, lambda conn_id, peer: opened_send.send_nowait(node.open_pipe(conn_id)))
            pipe = worker.open_pipe(7)
            worker.send(OPEN, 7, b"127.0.0.1:7")
            await pipe.send_all(b"before")
            pipe.hand_over(b"the fetch and after")
            assert 7 not in worker.pipes
            with trio.fail_after(10):
                main_pipe = await opened.receive()
                assert await main_pipe.receive_some() == b"before"
                assert await main_pipe.receive_some() == b""  # the pipe's part ends here: HANDOVER came
            assert 7 in node.handing
            assert main_pipe.handed_over == b"the fetch and after"
            await main_pipe.aclose()  # its CLOSE: the worker knows the id no more, and goes on
            worker.send(OPEN, 8, b"127.0.0.1:8")
            with trio.fail_after(10):
                assert (await opened.receive()).conn_id == 8
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_worker_passes_on_what_the_main_sent_before_it_closed() -> None:
    """The main refuses a connection: its last bytes (a TLS alert) and its CLOSE arrive
    together while the client is still sending. The worker's proxy gives the client those
    bytes before it closes the socket, whichever of its two copies runs first (trio varies
    the order of tasks woken together: the scenario runs many times)."""
    from raftlog.node.kafka.network_worker import _proxy

    async def once() -> bytes:
        worker, node = await _pair()
        client_end, worker_end = trio.socket.socketpair()
        client, near = trio.SocketStream(client_end), trio.SocketStream(worker_end)

        def refuse(conn_id: int, peer: str) -> None:
            pipe = node.open_pipe(conn_id)
            pipe.feed_eof()  # as the main's handler would: it stops reading
            node.send(DATA, conn_id, b"ALERT")
            pipe.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            nursery.start_soon(node.run, refuse)

            async def keep_sending() -> None:  # the client's requests, read as the main's answer comes
                try:
                    while True:
                        await client.send_all(b"request")
                        await trio.lowlevel.checkpoint()  # let the worker read between sends
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass

            nursery.start_soon(keep_sending)
            worker.send(OPEN, 1, b"127.0.0.1:1")
            nursery.start_soon(_proxy, near, worker.open_pipe(1))
            got = b""
            with trio.fail_after(10):
                try:
                    while chunk := await client.receive_some():
                        got += chunk
                except (trio.BrokenResourceError, OSError):  # a reset after the bytes: also an end
                    pass
            nursery.cancel_scope.cancel()
        await client.aclose()
        return got

    async def main() -> None:
        for _ in range(40):
            assert await once() == b"ALERT"

    trio.run(main)

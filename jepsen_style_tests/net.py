"""Network faults without root: every link between nodes goes through a TCP proxy we own.

A `LinkProxy` listens on a local port and relays each accepted connection to one target
``host:port``. Its two byte directions have separate modes:

* ``forward`` — bytes from whoever dialled the proxy to the target;
* ``reverse`` — bytes from the target back to the dialler.

Modes (`Mode`):

``pass``       relay as is.
``delay``      relay each chunk no earlier than ``delay_ms`` after it was read (order kept).
``blackhole``  accept but stall: stop reading, hold what was read. Like a partition where TCP
               keeps retransmitting: senders block once kernel buffers fill, and on heal the
               held bytes flow again, unless a peer gave up and closed first. A *new*
               connection is accepted but not connected upstream until ``forward`` flows.
``drop``       fail fast: existing connections are closed, new ones are accepted and closed.
               TCP cannot lose one direction of a connection and keep the other, so ``drop``
               in either direction closes the whole connection.

`Network` owns one proxy per (dialler node, target node, port kind) — e.g. kinds ``"peer"``
(partition replication) and ``"quorum"`` (the metadata Raft) — and applies partition shapes as
Jepsen's *grudges*: ``{node: nodes it must not hear from}``. Cutting traffic ``src -> dst``
stalls the ``forward`` direction of proxy (src dials dst) and the ``reverse`` direction of proxy
(dst dials src), so a grudge is one-way whichever side opened the connection. The pure
``grudge_*`` functions compute the shapes: isolate one node (the nemesis resolves "the leader of
a partition" or "the controller" to a node first), halves, majorities ring, explicit groups.

Nodes must dial their peers at `Network.address` (``src``'s view of ``dst``). PySyncObj names
peers by the address it dials and checks the address a connecting peer announces, so the
quorum needs a node identity separate from the dial address (see the lead's report).

Invariants: every task runs in a nursery owned by ``serve``; each direction of a connection
holds at most ``queue_chunks * chunk_bytes`` bytes; connections per proxy are capped
(``max_connections``: beyond it new ones are closed at once); upstream connects time out.
Concurrency: `set_mode`, `Network.apply` and the shape helpers are synchronous and must be
called from the trio thread that runs ``serve``; they take effect at once.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import trio

from .history import HarnessError

__all__ = [
    "Mode",
    "PASS",
    "DROP",
    "BLACKHOLE",
    "delayed",
    "FORWARD",
    "REVERSE",
    "NetError",
    "LinkProxy",
    "Network",
    "Grudge",
    "grudge_complete",
    "grudge_isolate",
    "grudge_halves",
    "grudge_majorities_ring",
    "majority",
]

log = logging.getLogger(__name__)

FORWARD = "forward"
REVERSE = "reverse"
_DIRECTIONS = (FORWARD, REVERSE)
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

Node = Hashable
Grudge = Mapping[Node, frozenset]


class NetError(HarnessError):
    code = "net-error"


@dataclass(frozen=True, slots=True)
class Mode:
    """How one direction of a link behaves: ``pass``, ``drop``, ``blackhole`` or ``delay``."""

    kind: str
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("pass", "drop", "blackhole", "delay"):
            raise NetError(f"unknown link mode {self.kind!r}")
        if self.delay_ms < 0 or (self.kind == "delay") != (self.delay_ms > 0):
            raise NetError(f"bad delay_ms={self.delay_ms} for mode {self.kind!r}")


PASS = Mode("pass")
DROP = Mode("drop")
BLACKHOLE = Mode("blackhole")


def delayed(delay_ms: int) -> Mode:
    """The ``delay`` mode (``pass`` for 0 ms)."""
    return Mode("delay", int(delay_ms)) if delay_ms > 0 else PASS


class LinkProxy:
    """A TCP relay to `target` whose forward and reverse directions can be faulted.

    `serve` binds (port 0 picks a free one), reports the bound port through
    ``task_status.started(port)`` and relays until cancelled. `listen_host` must be an IP
    literal so that one socket is bound."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str = "",
        chunk_bytes: int = 64 * 1024,
        queue_chunks: int = 16,
        max_connections: int = 64,
        connect_timeout_ms: int = 5_000,
    ):
        if chunk_bytes <= 0 or queue_chunks <= 0 or max_connections <= 0:
            raise NetError("chunk_bytes, queue_chunks and max_connections must be positive")
        self.target = (target[0], int(target[1]))
        self.name = name or f"->{target[0]}:{target[1]}"
        self._listen_host = listen_host
        self._listen_port = listen_port
        self._chunk_bytes = chunk_bytes
        self._queue_chunks = queue_chunks
        self._max_connections = max_connections
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._modes = {FORWARD: PASS, REVERSE: PASS}
        self._mode_changed = trio.Event()
        self._connections: set[trio.CancelScope] = set()
        self._port: int | None = None
        self.bytes_relayed = {FORWARD: 0, REVERSE: 0}
        self.connections_accepted = 0
        self.connections_refused = 0

    # ------------------------------------------------------------------ control

    @property
    def port(self) -> int:
        if self._port is None:
            raise NetError(f"proxy {self.name} is not serving yet")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return (self._listen_host, self.port)

    def mode(self, direction: str) -> Mode:
        return self._modes[direction]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def set_mode(self, *, forward: Mode | None = None, reverse: Mode | None = None) -> None:
        """Changes the modes given; ``drop`` in either direction closes every connection."""
        if forward is not None:
            self._modes[FORWARD] = forward
        if reverse is not None:
            self._modes[REVERSE] = reverse
        if self._dropping():
            for scope in list(self._connections):
                scope.cancel()
        # Wake every waiter; each re-reads the modes it cares about.
        changed, self._mode_changed = self._mode_changed, trio.Event()
        changed.set()

    def _dropping(self) -> bool:
        return DROP in self._modes.values()

    # ------------------------------------------------------------------ relaying

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self._listen_port, host=self._listen_host)
        if len(listeners) != 1:
            for extra in listeners:
                await extra.aclose()
            raise NetError(f"listen_host {self._listen_host!r} bound {len(listeners)} sockets; use an IP")
        self._port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            log.debug("proxy %s listening on %s:%d", self.name, self._listen_host, self._port)
            task_status.started(self._port)

    async def _handle(self, downstream: trio.SocketStream) -> None:
        async with downstream:
            if self._dropping() or len(self._connections) >= self._max_connections:
                self.connections_refused += 1
                return
            self.connections_accepted += 1
            with trio.CancelScope() as scope:
                self._connections.add(scope)
                try:
                    await self._connect_and_relay(downstream, scope)
                finally:
                    self._connections.discard(scope)

    async def _wait_until_flowing(self, direction: str) -> None:
        changed = self._mode_changed
        while self._modes[direction].kind == "blackhole":
            await changed.wait()
            changed = self._mode_changed

    async def _connect_and_relay(self, downstream: trio.SocketStream, scope: trio.CancelScope) -> None:
        # Under a forward blackhole the dialler's SYN would be lost: don't reach the target yet.
        await self._wait_until_flowing(FORWARD)
        upstream = None
        with trio.move_on_after(self._connect_timeout_s):
            try:
                upstream = await trio.open_tcp_stream(*self.target)
            except OSError as exc:
                log.debug("proxy %s: connect to target failed: %s", self.name, exc)
        if upstream is None:
            return
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(self._relay, downstream, upstream, FORWARD, scope)
            nursery.start_soon(self._relay, upstream, downstream, REVERSE, scope)

    async def _relay(
        self, source: trio.SocketStream, sink: trio.SocketStream, direction: str, scope: trio.CancelScope
    ) -> None:
        send_chunks, receive_chunks = trio.open_memory_channel[tuple[float, bytes]](self._queue_chunks)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_side, source, send_chunks, direction, scope)
            nursery.start_soon(self._write_side, sink, receive_chunks, direction, scope)

    async def _read_side(
        self,
        source: trio.SocketStream,
        chunks: trio.MemorySendChannel[tuple[float, bytes]],
        direction: str,
        scope: trio.CancelScope,
    ) -> None:
        async with chunks:
            while True:
                await self._wait_until_flowing(direction)
                try:
                    data = await source.receive_some(self._chunk_bytes)
                except _STREAM_ERRORS:
                    scope.cancel()  # a reset on one side ends the whole connection
                    return
                if not data:
                    return  # EOF: closing the channel makes the writer half-close
                deliver_at = trio.current_time() + self._modes[direction].delay_ms / 1000
                await chunks.send((deliver_at, data))

    async def _write_side(
        self,
        sink: trio.SocketStream,
        chunks: trio.MemoryReceiveChannel[tuple[float, bytes]],
        direction: str,
        scope: trio.CancelScope,
    ) -> None:
        async with chunks:
            async for deliver_at, data in chunks:
                await trio.sleep_until(deliver_at)
                await self._wait_until_flowing(direction)  # bytes read before a blackhole are held
                try:
                    await sink.send_all(data)
                except _STREAM_ERRORS:
                    scope.cancel()
                    return
                self.bytes_relayed[direction] += len(data)
        try:
            await sink.send_eof()
        except _STREAM_ERRORS:
            scope.cancel()


# ---------------------------------------------------------------------- grudges (pure)


def majority(n: int) -> int:
    """The smallest majority of `n` nodes."""
    return n // 2 + 1


def grudge_complete(groups: Iterable[Iterable[Node]]) -> dict[Node, frozenset]:
    """Each node hears only from nodes of its own group (Jepsen's complete-grudge)."""
    groups = [frozenset(g) for g in groups]
    everyone = frozenset().union(*groups) if groups else frozenset()
    seen: set = set()
    for group in groups:
        if seen & group:
            raise NetError(f"node(s) {sorted(map(str, seen & group))} in two groups")
        seen |= group
    return {node: everyone - group for group in groups for node in group}


def grudge_isolate(nodes: Sequence[Node], node: Node) -> dict[Node, frozenset]:
    """`node` alone on one side, everyone else on the other."""
    if node not in nodes:
        raise NetError(f"{node!r} is not one of {list(nodes)!r}")
    return grudge_complete([[node], [n for n in nodes if n != node]])


def grudge_halves(nodes: Sequence[Node]) -> dict[Node, frozenset]:
    """The first ``n // 2`` nodes (the smaller half) against the rest; shuffle first for random halves."""
    cut = len(nodes) // 2
    return grudge_complete([nodes[:cut], nodes[cut:]])


def grudge_majorities_ring(nodes: Sequence[Node], rng: random.Random) -> dict[Node, frozenset]:
    """Every node hears from a majority, and no two nodes hear from the same majority.

    Nodes are shuffled into a ring; each window of `majority` consecutive nodes is the set its
    middle node hears from (Jepsen's "perfect" variant; with 3 nodes each hears one other)."""
    ring = list(nodes)
    rng.shuffle(ring)
    n, m = len(ring), majority(len(ring))
    everyone = frozenset(ring)
    grudge = {}
    for start in range(n):
        window = [ring[(start + i) % n] for i in range(m)]
        grudge[window[m // 2]] = everyone - frozenset(window)
    return grudge


# ---------------------------------------------------------------------- the network


class Network:
    """Proxies for every ordered pair of distinct nodes and every port kind, plus shapes.

    `targets` maps each node to its real listening addresses by kind, e.g.
    ``{1: {"peer": ("127.0.0.1", 9101), "quorum": ("127.0.0.1", 9201)}, 2: {...}}``."""

    def __init__(
        self,
        targets: Mapping[Node, Mapping[str, tuple[str, int]]],
        *,
        listen_host: str = "127.0.0.1",
        listen_ports: Sequence[int] | None = None,
        **proxy_options: int,
    ):
        """`listen_ports`: one per proxy (`proxy_count`), in the order of `targets`; free
        ones picked by the kernel when None."""
        if len(targets) < 2:
            raise NetError("a network needs at least two nodes")
        self.nodes: tuple[Node, ...] = tuple(targets)
        links = [(src, dst, kind, address) for src in self.nodes for dst in self.nodes if src != dst
                 for kind, address in targets[dst].items()]  # fmt: skip
        if listen_ports is not None and len(listen_ports) != len(links):
            raise NetError(f"{len(links)} proxies need {len(links)} listen ports, got {len(listen_ports)}")
        self._proxies: dict[tuple[Node, Node, str], LinkProxy] = {}
        for i, (src, dst, kind, address) in enumerate(links):
            self._proxies[(src, dst, kind)] = LinkProxy(
                address, listen_host=listen_host, listen_port=0 if listen_ports is None else int(listen_ports[i]),
                name=f"{src}->{dst}/{kind}", **proxy_options,
            )  # fmt: skip
        self._grudge: dict[Node, frozenset] = {}
        self._fault_mode = BLACKHOLE
        self._delay_ms = 0

    @staticmethod
    def proxy_count(targets: Mapping[Node, Mapping[str, tuple[str, int]]]) -> int:
        """How many proxies (and listen ports) a `Network` over `targets` has."""
        return sum(len(kinds) * (len(targets) - 1) for kinds in targets.values())

    async def serve(self, *, task_status: trio.TaskStatus[Network] = trio.TASK_STATUS_IGNORED) -> None:
        """Starts every proxy; reports ``self`` once all are bound; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            for proxy in self._proxies.values():
                await nursery.start(proxy.serve)
            task_status.started(self)

    def proxy(self, src: Node, dst: Node, kind: str) -> LinkProxy:
        try:
            return self._proxies[(src, dst, kind)]
        except KeyError:
            raise NetError(f"no link {src!r}->{dst!r} of kind {kind!r}") from None

    def address(self, src: Node, dst: Node, kind: str) -> tuple[str, int]:
        """Where `src` must dial to reach `dst`'s `kind` port."""
        return self.proxy(src, dst, kind).address

    def addresses_for(self, src: Node) -> dict[str, dict[Node, tuple[str, int]]]:
        """``{kind: {dst: address}}``: the peer map to put in `src`'s configuration."""
        out: dict[str, dict[Node, tuple[str, int]]] = {}
        for (a, dst, kind), proxy in self._proxies.items():
            if a == src:
                out.setdefault(kind, {})[dst] = proxy.address
        return out

    @property
    def grudge(self) -> dict[Node, frozenset]:
        return dict(self._grudge)

    def _flow_mode(self, src: Node, dst: Node) -> Mode:
        if src in self._grudge.get(dst, ()):
            return self._fault_mode
        return delayed(self._delay_ms)

    def _refresh(self) -> None:
        for (src, dst, _), proxy in self._proxies.items():
            proxy.set_mode(forward=self._flow_mode(src, dst), reverse=self._flow_mode(dst, src))

    def apply(self, grudge: Mapping[Node, Iterable[Node]], mode: Mode = BLACKHOLE) -> dict[Node, frozenset]:
        """Replaces the current partition: traffic from each ``src in grudge[dst]`` to `dst`
        gets `mode` (``blackhole`` or ``drop``); all other traffic flows. Returns the grudge."""
        if mode.kind not in ("blackhole", "drop"):
            raise NetError(f"a partition cuts with blackhole or drop, not {mode.kind}")
        clean = {dst: frozenset(srcs) for dst, srcs in grudge.items() if srcs}
        unknown = (set(clean) | set().union(*clean.values())) - set(self.nodes) if clean else set()
        if unknown:
            raise NetError(f"unknown node(s) in grudge: {sorted(map(str, unknown))}")
        self._grudge, self._fault_mode = clean, mode
        self._refresh()
        return self.grudge

    def isolate(self, node: Node, mode: Mode = BLACKHOLE) -> dict[Node, frozenset]:
        return self.apply(grudge_isolate(self.nodes, node), mode)

    def partition(self, groups: Iterable[Iterable[Node]], mode: Mode = BLACKHOLE) -> dict[Node, frozenset]:
        return self.apply(grudge_complete(groups), mode)

    def halves(self, rng: random.Random | None = None, mode: Mode = BLACKHOLE) -> dict[Node, frozenset]:
        nodes = list(self.nodes)
        if rng is not None:
            rng.shuffle(nodes)
        return self.apply(grudge_halves(nodes), mode)

    def majorities_ring(self, rng: random.Random, mode: Mode = BLACKHOLE) -> dict[Node, frozenset]:
        return self.apply(grudge_majorities_ring(self.nodes, rng), mode)

    def slow(self, delay_ms: int) -> None:
        """Delays every flow that is not cut by `delay_ms` (0 restores full speed)."""
        if delay_ms < 0 or not math.isfinite(delay_ms):
            raise NetError(f"bad delay_ms={delay_ms}")
        self._delay_ms = int(delay_ms)
        self._refresh()

    def heal(self) -> None:
        """Everything flows again at full speed; held bytes are delivered."""
        self._grudge, self._delay_ms = {}, 0
        self._refresh()

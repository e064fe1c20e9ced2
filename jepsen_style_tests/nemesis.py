"""The nemesis: composable faults against a `LocalCluster` and its `Network` of link proxies.

`Nemesis.invoke(op)` performs one nemesis op (shapes in `jepsen_style_tests.history`) and
returns its completion ``(type, value, error)``. A fault ``X`` is opened by ``start-X`` and
closed by ``stop-X``; every ``stop-X`` is safe to send with nothing active (the final phase
sends them all). Ops:

=====================  =====================================  ==================================
f                      value                                  ok value
=====================  =====================================  ==================================
start-partition        "isolate-one" | "isolate-leader" |     {"shape", "grudge": {dst: [src]}}
                       "isolate-controller" | "halves" |
                       "majorities-ring" | {"groups": [[n]]}
stop-partition         None                                   None (heal)
start-kill             "one" | "leader" | "controller" |      [nodes killed] (SIGKILL)
                       "minority" | "all" | node id
stop-kill              None                                   [nodes restarted]
start-pause            same targets                           [nodes paused] (SIGSTOP)
stop-pause             None                                   [nodes resumed] (SIGCONT)
start-delay            {"delay_ms": n}                        None
stop-delay             None                                   None
rolling-restart        None                                   [nodes] (SIGTERM + start, each in
                                                              turn, waiting until it is ready)
corrupt-tail           {"node": n, "mode": "torn"|"bitflip"}  what was cut (the node is killed,
                                                              damaged and started again)
kill-supervisor        None                                   {"supervisor", "pids", "left",
                                                              "ports_held"}: a side `cluster up`
                                                              SIGKILLed; what it left running
                                                              (supervisor.py)
bitflip                {"node": n, "flips": k}                the file and the bits flipped
                                                              anywhere in one segment or index
                                                              file, closed segments included
                                                              (killed, damaged, started again)
start-disk-full        {"node": n}                            bytes written to fill its disk
stop-disk-full         None                                   [nodes whose filler was deleted]
power-loss             {"node": n} | {"nodes": "all"}         per node what its disk dropped
                                                              (killed, every write it had not
                                                              fsynced dropped, started again)
start-stranger         None | {"idle_per_listener": n,        what the stranger saw (stranger.py):
                       "stream_bytes": b}                     "baseline", "lying", "oversized",
                                                              "rss_growth_bytes", "idle", "served"
stop-stranger          None                                   {"served", "held", "closed_by_node"}
                                                              (its connections closed)
start-reassign         {"partitions": k}                      [{"key", "from", "to", "error"?}]:
                                                              k partitions of the run's topic
                                                              moved to random replica sets
                                                              (issue 44)
stop-reassign          None                                   [{"key", "from", "to", "error"?}]:
                                                              partitions left with fewer
                                                              replicas than the topic's RF
                                                              given that many again
=====================  =====================================  ==================================

"leader" means the leader of a partition of the run's topic drawn at random; "controller" the
active controller. A target that cannot be resolved (no leader known) completes ``fail``
(nothing was done). Any exception completes ``info``.

`faults(names, ...)` builds the `generator.Fault` menu for `generator.fault_cycle` from short
names: ``kill``, ``pause``, ``partition``, ``leader-kill``, ``controller-kill``, ``rolling``,
``corrupt``, ``delay``, ``bitflip``, ``disk-full``, ``power-loss``, ``power-loss-all``,
``supervisor-kill``, ``stranger`` (a client breaking the rules: idle connections, oversized
unauthenticated frames to every port, lying record batches; `jepsen_style_tests.stranger`;
the checker makes a run invalid when a lying batch is accepted or a node stops serving other
clients meanwhile), ``reassign`` (random moves of random partitions, issue 44: each target a
random set of the nodes, of the topic's replication factor or one fewer but never under 2,
so that moves change membership even when every node holds a replica; its stop gives every
shrunk partition the full factor again; a refused move, REASSIGNMENT_IN_PROGRESS while one is
under way, is recorded in the op's value). The storage faults (``corrupt``, ``bitflip``, ``disk-full``) all hit one
`damage_node`: a minority, so every committed entry
keeps intact copies on a majority. ``disk-full`` needs the run to have given that node a small
disk (`LocalCluster.make_small_disk`, root only; the runner leaves the fault out and says why
when it cannot). ``power-loss`` SIGKILLs one `power_node` (a minority: the damage node, or
another one when ``disk-full`` owns the damage node's partition storage), drops every write it
had not fsynced (its data dir is a lazyfs, `LocalCluster.make_lazy_disk`) and starts it again;
``power-loss-all`` does it to every node at once (valid only because every node fsyncs what it
acknowledges: partition data under flush_policy=always, Raft terms and votes, the metadata
quorum's journal); with ``disk-full`` in the same run, the damage node's small disk is mounted
inside its lazy data dir (its partition storage then keeps what it did not fsync). Both need
/dev/fuse and a working mount; the runner leaves them out and says why otherwise.

Randomness comes from the injected `random.Random`. Blocking process and file work runs in
worker threads; the network is changed on the trio thread (net.py requires it).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import trio

from . import net
from .db import LocalCluster
from .generator import Fault
from .history import HarnessError, Op, parse_key
from .stranger import Stranger
from .supervisor import supervisor_kill

__all__ = ["Nemesis", "NemesisError", "faults", "FAULT_NAMES"]

log = logging.getLogger(__name__)

FAULT_NAMES = ("kill", "pause", "partition", "leader-kill", "controller-kill", "rolling", "corrupt", "delay",
               "bitflip", "disk-full", "power-loss", "power-loss-all", "supervisor-kill", "stranger", "reassign")
STORAGE_FAULTS = ("corrupt", "bitflip", "disk-full")
POWER_FAULTS = ("power-loss", "power-loss-all")
PARTITION_SHAPES = ("isolate-one", "isolate-leader", "isolate-controller", "halves", "majorities-ring")
LOOKUP_TIMEOUT_MS = 3000
READY_TIMEOUT_S = 60.0


class NemesisError(HarnessError):
    code = "nemesis-error"


class _Unresolved(Exception):
    """A target could not be resolved: the op did nothing (completes ``fail``)."""


def faults(names: Iterable[str], *, damage_node: int | None = None, power_node: int | None = None) -> list[Fault]:
    """The fault menu for `generator.fault_cycle` from short names (see module doc).
    ``corrupt`` damages `damage_node` only (one node's disk: the others hold every
    committed entry); ``power-loss`` hits `power_node` only (default: `damage_node`)."""
    power_node = damage_node if power_node is None else power_node
    menu: list[Fault] = []
    for name in names:
        if name == "kill":
            menu += [Fault("kill", {"f": "start-kill", "value": t}, {"f": "stop-kill"}) for t in ("one", "minority")]
        elif name == "pause":
            menu += [Fault("pause", {"f": "start-pause", "value": t}, {"f": "stop-pause"}) for t in ("one", "leader")]
        elif name == "partition":
            menu += [Fault("partition", {"f": "start-partition", "value": s}, {"f": "stop-partition"})
                     for s in PARTITION_SHAPES]  # fmt: skip
        elif name == "leader-kill":
            menu.append(Fault("kill", {"f": "start-kill", "value": "leader"}, {"f": "stop-kill"}))
        elif name == "controller-kill":
            menu.append(Fault("kill", {"f": "start-kill", "value": "controller"}, {"f": "stop-kill"}))
        elif name == "rolling":
            menu.append(Fault("rolling", {"f": "rolling-restart"}, {"f": "stop-kill"}))
        elif name == "corrupt":
            if damage_node is None:
                raise NemesisError("the corrupt fault needs damage_node")
            menu += [Fault("corrupt", {"f": "corrupt-tail", "value": {"node": damage_node, "mode": m}},
                           {"f": "stop-kill"}) for m in ("torn", "bitflip")]  # fmt: skip
        elif name == "delay":
            menu.append(Fault("delay", {"f": "start-delay", "value": {"delay_ms": 50}}, {"f": "stop-delay"}))
        elif name == "supervisor-kill":
            menu.append(Fault("supervisor-kill", {"f": "kill-supervisor"}, {"f": "stop-kill"}))
        elif name == "bitflip":
            if damage_node is None:
                raise NemesisError("the bitflip fault needs damage_node")
            menu.append(Fault("bitflip", {"f": "bitflip", "value": {"node": damage_node, "flips": 3}},
                              {"f": "stop-kill"}))
        elif name == "disk-full":
            if damage_node is None:
                raise NemesisError("the disk-full fault needs damage_node")
            menu.append(Fault("disk-full", {"f": "start-disk-full", "value": {"node": damage_node}},
                              {"f": "stop-disk-full"}))
        elif name == "power-loss":
            if power_node is None:
                raise NemesisError("the power-loss fault needs power_node")
            menu.append(Fault("power-loss", {"f": "power-loss", "value": {"node": power_node}}, {"f": "stop-kill"}))
        elif name == "power-loss-all":
            menu.append(Fault("power-loss", {"f": "power-loss", "value": {"nodes": "all"}}, {"f": "stop-kill"}))
        elif name == "stranger":
            menu.append(Fault("stranger", {"f": "start-stranger", "value": None}, {"f": "stop-stranger"}))
        elif name == "reassign":
            menu.append(Fault("reassign", {"f": "start-reassign", "value": {"partitions": 2}},
                              {"f": "stop-reassign"}))
        else:
            raise NemesisError(f"unknown fault {name!r}; known: {', '.join(FAULT_NAMES)}")
    if not menu:
        raise NemesisError("no faults named")
    return menu


class Nemesis:
    """Performs nemesis ops on `db` and `network` (see the module docstring).

    Concurrency: one op at a time, on the trio thread that serves `network`."""

    def __init__(
        self,
        db: LocalCluster,
        network: net.Network | None,
        *,
        rng: random.Random,
        keys: Sequence[str],
        mode: net.Mode = net.BLACKHOLE,
    ):
        self.db = db
        self.network = network
        self.rng = rng
        self.keys = tuple(keys)
        self.mode = mode
        self.killed: set[int] = set()
        self.stranger: Stranger | None = None
        self.replication_factor: dict[str, int] = {}  # per key, as first seen (reassign)

    async def invoke(self, op: Op) -> tuple[str, Any, str | None]:
        """Performs `op`; returns ``(type, value, error)`` of its completion."""
        handler = HANDLERS.get(op.f)
        if handler is None:
            return "fail", op.value, "unknown-nemesis-op"
        try:
            return "ok", await handler(self, op.value), None
        except _Unresolved as exc:
            return "fail", op.value, f"unresolved: {exc}"
        except (HarnessError, OSError, RuntimeError, ValueError) as exc:
            log.warning("nemesis %s failed: %r", op.f, exc)
            return "info", op.value, type(exc).__name__

    # ------------------------------------------------------------------ lookups

    def _status(self) -> Any:
        from raftlog.client import Admin

        running = self.db.running()
        if not running:
            raise _Unresolved("no node running")
        with Admin([self.db.client_address(n) for n in running], request_timeout_ms=LOOKUP_TIMEOUT_MS,
                   security=self.db.client_security) as admin:
            return admin.cluster_status(timeout_ms=LOOKUP_TIMEOUT_MS)

    def _describe(self) -> dict[str, Any]:
        """The run's topics as `Admin.describe_topics` answers (blocking)."""
        from raftlog.client import Admin

        running = self.db.running()
        if not running:
            raise _Unresolved("no node running")
        topics = sorted({parse_key(k)[0] for k in self.keys})
        with Admin([self.db.client_address(n) for n in running], request_timeout_ms=LOOKUP_TIMEOUT_MS,
                   security=self.db.client_security) as admin:
            return admin.describe_topics(topics, timeout_ms=LOOKUP_TIMEOUT_MS)

    def _leaders(self) -> dict[str, int]:
        described = self._describe()
        return {
            f"{t}-{p.partition}": p.leader for t, info in described.items() for p in info.partitions
            if p.leader is not None
        }  # fmt: skip

    async def _lookup(self, fn: Any) -> Any:
        from raftlog.base.errors import RaftlogError

        try:
            return await trio.to_thread.run_sync(fn)
        except (RaftlogError, OSError) as exc:
            raise _Unresolved(f"cluster lookup failed: {type(exc).__name__}") from None

    async def _controller(self) -> int:
        status = await self._lookup(self._status)
        if status.controller_id is None:
            raise _Unresolved("no controller known")
        return int(status.controller_id)

    async def _leader(self) -> int:
        leaders = await self._lookup(self._leaders)
        candidates = sorted(k for k, n in leaders.items() if n in self.db.running())
        if not candidates:
            raise _Unresolved("no partition leader known")
        return int(leaders[self.rng.choice(candidates)])

    async def _targets(self, target: Any, pool: Sequence[int]) -> list[int]:
        nodes = list(self.db.node_ids)
        if isinstance(target, int) and not isinstance(target, bool):
            return [target] if target in pool else []
        if target == "one":
            return [self.rng.choice(pool)] if pool else []
        if target == "leader":
            node = await self._leader()
            return [node] if node in pool else []
        if target == "controller":
            node = await self._controller()
            return [node] if node in pool else []
        if target == "minority":
            count = max(1, (len(nodes) - 1) // 2)
            return sorted(self.rng.sample(list(pool), min(count, len(pool))))
        if target == "all":
            return sorted(pool)
        raise NemesisError(f"unknown target {target!r}")

    # ------------------------------------------------------------------ partitions

    async def _start_partition(self, shape: Any) -> dict[str, Any]:
        if self.network is None:
            raise NemesisError("this run has no network proxies")
        nodes = list(self.db.node_ids)
        if isinstance(shape, Mapping) and "groups" in shape:
            grudge = net.grudge_complete(shape["groups"])
        elif shape == "isolate-one":
            grudge = net.grudge_isolate(nodes, self.rng.choice(nodes))
        elif shape == "isolate-leader":
            grudge = net.grudge_isolate(nodes, await self._leader())
        elif shape == "isolate-controller":
            grudge = net.grudge_isolate(nodes, await self._controller())
        elif shape == "halves":
            shuffled = list(nodes)
            self.rng.shuffle(shuffled)
            grudge = net.grudge_halves(shuffled)
        elif shape == "majorities-ring":
            grudge = net.grudge_majorities_ring(nodes, self.rng)
        else:
            raise NemesisError(f"unknown partition shape {shape!r}")
        applied = self.network.apply(grudge, self.mode)
        return {"shape": shape, "grudge": {str(dst): sorted(srcs) for dst, srcs in sorted(applied.items())}}

    async def _stop_partition(self, _value: Any) -> None:
        if self.network is not None:
            self.network.heal()
        return None

    async def _start_delay(self, value: Any) -> None:
        if self.network is None:
            raise NemesisError("this run has no network proxies")
        self.network.slow(int(value["delay_ms"]))
        return None

    async def _stop_delay(self, _value: Any) -> None:
        if self.network is not None:
            self.network.slow(0)
        return None

    # ------------------------------------------------------------------ processes

    async def _start_kill(self, target: Any) -> list[int]:
        nodes = await self._targets(target, self.db.live())
        if not nodes:
            raise _Unresolved(f"no live node for target {target!r}")
        for node in nodes:
            await trio.to_thread.run_sync(self.db.kill, node)
            self.killed.add(node)
        return nodes

    async def _stop_kill(self, _value: Any) -> list[int]:
        started = []
        for node in self.db.node_ids:
            if not self.db.alive(node):
                await trio.to_thread.run_sync(self.db.start, node)
                started.append(node)
        self.killed.clear()
        return started

    async def _start_pause(self, target: Any) -> list[int]:
        nodes = await self._targets(target, self.db.running())
        if not nodes:
            raise _Unresolved(f"no running node for target {target!r}")
        return [n for n in nodes if self.db.pause(n)]

    async def _stop_pause(self, _value: Any) -> list[int]:
        return [n for n in sorted(self.db.paused) if self.db.resume(n)]

    async def _rolling_restart(self, _value: Any) -> list[int]:
        done = []
        for node in self.db.node_ids:
            if not self.db.alive(node):
                continue
            await trio.to_thread.run_sync(self.db.restart, node)
            await trio.to_thread.run_sync(self.db.wait_ready, READY_TIMEOUT_S)
            done.append(node)
        return done

    async def _kill_supervisor(self, _value: Any) -> dict[str, Any]:
        """A side `cluster up` SIGKILLed; what it left running (supervisor.py)."""
        rng = random.Random(self.rng.getrandbits(64))
        return await trio.to_thread.run_sync(supervisor_kill, self.db.root / "supervisor-kill", rng)

    async def _bitflip(self, value: Mapping[str, Any]) -> dict[str, Any]:
        node, flips = int(value["node"]), int(value.get("flips", 3))
        self.db.resume(node)
        await trio.to_thread.run_sync(self.db.kill, node)
        try:
            rng = random.Random(self.rng.getrandbits(64))
            return await trio.to_thread.run_sync(lambda: self.db.flip_bits(node, rng=rng, flips=flips))
        finally:
            await trio.to_thread.run_sync(self.db.start, node)

    async def _power_loss(self, value: Mapping[str, Any]) -> list[dict[str, Any]]:
        nodes = list(self.db.node_ids) if value.get("nodes") == "all" else [int(value["node"])]
        for node in nodes:
            self.db.resume(node)
            await trio.to_thread.run_sync(self.db.kill, node)
        try:
            return [await trio.to_thread.run_sync(self.db.lose_power, node) for node in nodes]
        finally:
            for node in nodes:
                await trio.to_thread.run_sync(self.db.start, node)

    async def _start_disk_full(self, value: Mapping[str, Any]) -> dict[str, Any]:
        node = int(value["node"])
        written = await trio.to_thread.run_sync(self.db.fill_disk, node)
        return {"node": node, "filled_bytes": written}

    async def _stop_disk_full(self, _value: Any) -> list[int]:
        freed = []
        for node in sorted(self.db.small_disks):
            if await trio.to_thread.run_sync(self.db.free_disk, node):
                freed.append(node)
        return freed

    async def _corrupt_tail(self, value: Mapping[str, Any]) -> dict[str, Any]:
        node, mode = int(value["node"]), str(value["mode"])
        self.db.resume(node)
        await trio.to_thread.run_sync(self.db.kill, node)
        try:
            rng = random.Random(self.rng.getrandbits(64))
            return await trio.to_thread.run_sync(lambda: self.db.damage_tail(node, mode=mode, rng=rng, keys=self.keys))
        finally:
            await trio.to_thread.run_sync(self.db.start, node)

    # ------------------------------------------------------------------ replica moves

    def _replicas(self) -> dict[str, tuple[int, ...]]:
        described = self._describe()
        found = {f"{t}-{p.partition}": tuple(p.replicas) for t, info in described.items() for p in info.partitions}
        for key, replicas in found.items():
            self.replication_factor.setdefault(key, len(replicas))
        return found

    def _move(self, moves: list[tuple[str, tuple[int, ...], list[int]]]) -> list[dict[str, Any]]:
        """Ask for every move in one request; each item's outcome (a refusal is not a failure)."""
        from raftlog.client import Admin

        if not moves:
            return []
        items = []
        for key, _, target in moves:
            topic, partition = parse_key(key)
            items.append({"topic": topic, "partition": partition, "replicas": target})
        running = self.db.running()
        with Admin([self.db.client_address(n) for n in running], request_timeout_ms=LOOKUP_TIMEOUT_MS,
                   security=self.db.client_security) as admin:
            answer = admin.request({"op": "alter_partition_reassignments", "partitions": items},
                                   timeout_ms=LOOKUP_TIMEOUT_MS)
        rows = []
        for (key, before, target), result in zip(moves, answer["results"], strict=True):
            row: dict[str, Any] = {"key": key, "from": list(before), "to": target}
            if result.get("error"):
                row["error"] = result["error"].get("code")
            rows.append(row)
        return rows

    async def _start_reassign(self, value: Any) -> list[dict[str, Any]]:
        count = int(value.get("partitions", 1)) if isinstance(value, Mapping) else 1
        current = await self._lookup(self._replicas)
        nodes = list(self.db.node_ids)
        moves = []
        for key in self.rng.sample(sorted(current), min(count, len(current))):
            factor = self.replication_factor[key]
            sizes = [n for n in (factor - 1, factor) if 2 <= n <= len(nodes)] or [min(factor, len(nodes))]
            target = self.rng.sample(nodes, self.rng.choice(sizes))
            moves.append((key, current[key], target))
        return await self._lookup(lambda: self._move(moves))

    async def _stop_reassign(self, _value: Any) -> list[dict[str, Any]]:
        current = await self._lookup(self._replicas)
        nodes = list(self.db.node_ids)
        moves = []
        for key, replicas in sorted(current.items()):
            factor = min(self.replication_factor[key], len(nodes))
            if len(replicas) < factor:
                extra = self.rng.sample([n for n in nodes if n not in replicas], factor - len(replicas))
                moves.append((key, replicas, [*replicas, *extra]))
        return await self._lookup(lambda: self._move(moves))

    # ------------------------------------------------------------------ the stranger

    async def _start_stranger(self, value: Any) -> dict[str, Any]:
        """Idle connections, oversized frames, lying batches (stranger.py); what it saw."""
        if self.stranger is not None:
            await trio.to_thread.run_sync(self.stranger.close)
        options = dict(value) if isinstance(value, Mapping) else {}
        self.stranger = Stranger(self.db, **options)
        return await trio.to_thread.run_sync(self.stranger.attack)

    async def _stop_stranger(self, _value: Any) -> dict[str, Any] | None:
        stranger, self.stranger = self.stranger, None
        if stranger is None:
            return None
        return await trio.to_thread.run_sync(stranger.release)


# Every nemesis op, by its ``f``: the one place an op name meets its code.
HANDLERS: dict[str, Callable[[Nemesis, Any], Awaitable[Any]]] = {
    "start-partition": Nemesis._start_partition,
    "stop-partition": Nemesis._stop_partition,
    "start-delay": Nemesis._start_delay,
    "stop-delay": Nemesis._stop_delay,
    "start-kill": Nemesis._start_kill,
    "stop-kill": Nemesis._stop_kill,
    "start-pause": Nemesis._start_pause,
    "stop-pause": Nemesis._stop_pause,
    "rolling-restart": Nemesis._rolling_restart,
    "kill-supervisor": Nemesis._kill_supervisor,
    "bitflip": Nemesis._bitflip,
    "power-loss": Nemesis._power_loss,
    "start-disk-full": Nemesis._start_disk_full,
    "stop-disk-full": Nemesis._stop_disk_full,
    "corrupt-tail": Nemesis._corrupt_tail,
    "start-stranger": Nemesis._start_stranger,
    "start-reassign": Nemesis._start_reassign,
    "stop-reassign": Nemesis._stop_reassign,
    "stop-stranger": Nemesis._stop_stranger,
}

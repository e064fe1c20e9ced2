"""The runner: one fault-injection test against a real local cluster, end to end.

    python -m jepsen_style_tests run --workload queue --nemesis kill,pause,partition \\
        --time-limit 60 --rate 200 --nodes 3

Steps: start the link proxies (`net.Network`, one per (node, node, port kind)), start the
nodes with every node-to-node link routed through them (`db.LocalCluster.route_through`),
wait until the cluster is ready, create the topic (RF = min(3, nodes), acks=all,
``flush_policy=always`` unless `RunConfig.flush_policy` says otherwise, `partitions`
partitions), then interpret the generator (below) with
`concurrency` client processes and the nemesis, streaming every op to ``history.jsonl``. The
final phase heals everything, waits `recovery_s`, and reads every partition to its end. Then
`checker.check` gives the verdict and `report.write_report` writes ``store/<test>/<time>/``
(history.jsonl, results.json, summary.txt, throughput.png, latency.png; node logs under
``cluster/logs/``). Every node process is stopped by its PID whatever happens.

Workloads (`WORKLOADS`): ``queue`` mixes sends, polls and manual ``assign``s; ``group`` mixes
sends, polls, ``subscribe``s to the one consumer group `GROUP_ID` and ``commit``s of the
members' positions (the final phase reads with ``assign`` in all). ``kafka`` (the group mix)
and ``kafka-assign`` (the queue mix) speak Kafka's wire protocol through confluent-kafka
(`kafka_client.KafkaClient`: an idempotent producer, consumers in the group or by assign) to
the nodes' Kafka listeners. (A mix of assigns and subscribes in one run would not do: each
switch is a fresh consumer starting over, which the checker rightly calls nonmonotonic.)

The interpreter follows `generator`'s contract exactly (the same loop as `generator.simulate`,
with the trio clock): an op is recorded before it is dispatched; a completion is recorded,
then the generator is updated, then its process is freed — a client process whose op ended
``info`` is retired and its worker continues as ``process + concurrency`` with a new client.

Workload ``queue`` (Jepsen's Kafka queue): a mix of ``send`` (unique ints), ``poll`` and
``assign`` (random subsets of the keys), at `rate` ops/s.

Exit codes (`run_main`): 0 valid, 1 invalid, 2 unknown (or the run could not complete).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

import trio

from . import generator as g
from . import net
from .checker import CheckResult, check
from .client import Client, ClientOptions
from .kafka_client import KafkaClient
from .txn_checker import check_txn
from .txn_client import TxnClient, txns
from .share_checker import check_share
from .share_client import SHARE_DELIVERY_LIMIT, SHARE_SETTINGS, ShareClient, share_drain, share_ops
from .db import FAST_SETTINGS, LocalCluster, ports_in
from .history import NEMESIS, History, HistoryWriter, Op, key_of
from .nemesis import FAULT_NAMES, POWER_FAULTS, STORAGE_FAULTS, Nemesis, faults
from .report import ReportFiles, run_dir, write_report

__all__ = ["RunConfig", "RunOutcome", "run", "run_main", "EXIT_CODES"]

log = logging.getLogger(__name__)

EXIT_CODES = {"valid": 0, "invalid": 1, "unknown": 2}
TOPIC = "jepsen"
READY_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 5.0
VALUE_STRIDE = 1_000_000_000
WORKLOADS = ("queue", "group", "kafka", "kafka-assign", "txn", "share")
KAFKA_WORKLOADS = ("kafka", "kafka-assign", "txn")
GROUP_ID = "jepsen"  # the one consumer group of the group workload
MAX_OPS = 2_000_000  # a bound on one history (about 1 GB of JSON at most)
# A client op's own deadlines end it within ~15 s (a send's 6 s timeout, a join's 10 s rebalance
# timeout, ...). One that outlives OP_TIMEOUT_S anyway ends info ``op-timeout`` and its client
# is abandoned with its worker thread; a close that outlives CLOSE_TIMEOUT_S is abandoned the
# same way. librdkafka's consumer close and synchronous commit have no deadline (its issue
# 3740: a close retries its coordinator query forever while no broker answers), and a CI run
# of the kafka workload under kills hung for its whole 90 minutes.
OP_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 20.0


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on (recorded in results.json)."""

    workload: str = "queue"
    nemesis: tuple[str, ...] = ("kill", "pause", "partition")
    time_limit_s: float = 60.0
    rate: float = 200.0
    nodes: int = 3
    partitions: int = 4
    concurrency: int = 6
    fault_interval_s: float = 10.0  # one fault cycle: quiet half, faulty half
    recovery_s: float = 5.0
    read_limit_s: float = 60.0
    seed: int | None = None
    store: str = "store"
    test_name: str | None = None
    keep_data: bool = False
    network: bool = True
    secure: bool = False  # the cluster of `raftlog cluster up --secure` (TLS, SASL, ACLs, mTLS peers)
    damage_node: int | None = None  # the node the storage faults hit (default: drawn by the seed)
    power_node: int | None = None  # the node power-loss hits (default: see `power_node_for`)
    # Inclusive (low, high): every listener of the run (nodes and fault proxies) in it; any free
    # ports when None.
    port_range: tuple[int, int] | None = None
    # The topic's flush_policy: "always" fsyncs before acknowledging; "interval" (fsync every
    # 60 s here) does not, a control that power-loss-all must catch losing acknowledged writes.
    flush_policy: str = "always"

    def name(self) -> str:
        return self.test_name or f"{self.workload}-{'+'.join(self.nemesis) or 'none'}"


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    verdict: str
    result: CheckResult
    history: History
    files: ReportFiles
    seed: int

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 2)


def _send_ops(config: RunConfig, keys: Sequence[str]) -> g.Generator:
    return g.rate(config.rate, g.mix(
        # Three send streams weigh sends 3:2:1 against polls and assigns; their value ranges
        # are disjoint, so every value stays unique for the run.
        *(g.sends(keys, first_value=k * VALUE_STRIDE) for k in range(3)), g.polls(poll_ms=100), g.polls(poll_ms=100),
        # queue (and kafka-assign): manual assigns; group (and kafka): subscribes to one consumer
        # group and commits positions.
        *((g.reassigns(keys),) if config.workload in ("queue", "kafka-assign") else
          (g.reassigns(keys, f="subscribe", group=GROUP_ID), g.repeat({"f": "commit", "value": None}))),
    ))  # fmt: skip


def workload(config: RunConfig, keys: Sequence[str], rng: random.Random) -> g.Generator:
    """The whole generator: the workload with the fault schedule, then the final phase."""
    if config.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {config.workload!r}; known: {', '.join(WORKLOADS)}")
    limit_ns = int(config.time_limit_s * g.SEC_NS)
    if config.workload == "txn":
        # Transactions weigh 3:2:1 against polls and assigns (txn_client: each a transaction of
        # 1-4 appends, half of them reading first, one in five aborted on purpose).
        client_ops = g.rate(config.rate, g.mix(
            *(txns(keys, first_value=k * VALUE_STRIDE) for k in range(3)), g.polls(poll_ms=100),
            g.polls(poll_ms=100), g.reassigns(keys)))
    elif config.workload == "share":
        # share_client: sends 1:1 with share-group steps (poll, then acknowledge what it holds).
        client_ops = share_ops(keys, rate=config.rate, value_stride=VALUE_STRIDE)
    else:
        client_ops = _send_ops(config, keys)
    main: list[Any] = [g.time_limit(limit_ns, g.clients(client_ops))]
    if config.nemesis:
        damage_node = config.damage_node or rng.choice(range(1, config.nodes + 1))
        half_ns = int(config.fault_interval_s * g.SEC_NS / 2)
        menu = faults(config.nemesis, damage_node=damage_node, power_node=config.power_node or damage_node)
        schedule = g.fault_cycle(menu, quiet_ns=half_ns, fault_ns=half_ns)
        main.insert(0, g.time_limit(limit_ns, g.nemesis(schedule)))
    heal = ({"f": "stop-stranger"}, {"f": "stop-partition"}, {"f": "stop-delay"}, {"f": "stop-pause"},
            {"f": "stop-disk-full"}, {"f": "stop-kill"})
    if "reassign" in config.nemesis:  # the full replication factor back once every node is up
        heal += ({"f": "stop-reassign"},)
    if config.workload == "share":  # the final reads: every member drains the share group
        return g.phases(g.any_of(*main), g.nemesis(g.seq(*(dict(op, process=NEMESIS) for op in heal))),
                        g.sleep(int(config.recovery_s * g.SEC_NS)),
                        share_drain(int(config.read_limit_s * g.SEC_NS)))
    final = g.final_phase(
        keys, heal=heal, recovery_ns=int(config.recovery_s * g.SEC_NS), read_limit_ns=int(config.read_limit_s * g.SEC_NS)
    )
    return g.phases(g.any_of(*main), final)


async def _close(client: Any) -> None:
    """Closes a client within CLOSE_TIMEOUT_S, or abandons it (its close goes on in its thread)."""
    with trio.move_on_after(CLOSE_TIMEOUT_S) as scope:
        await client.close()
    if scope.cancelled_caught:
        log.warning("closing a %s outlived %.0f s: abandoned", type(client).__name__, CLOSE_TIMEOUT_S)


class _Interpreter:
    """Runs a generator against real clients and the nemesis (see the module docstring)."""

    def __init__(self, gen: g.Generator, writer: HistoryWriter, *, concurrency: int, rng: random.Random,
                 bootstrap: Sequence[str], nemesis: Nemesis, out: TextIO | None,
                 client_class: Callable[..., Any] = Client, security: Any = None):
        self.security = security
        self.gen: g.Generator | None = gen
        self.writer = writer
        self.concurrency = concurrency
        self.rng = rng
        self.bootstrap = list(bootstrap)
        self.client_class = client_class
        self.nemesis = nemesis
        self.out = out
        self.ops: list[Op] = []
        self.processes: list[Any] = list(range(concurrency)) + [NEMESIS]
        self.free: set[Any] = set(self.processes)
        self.clients: dict[int, Client] = {}
        self.in_flight = 0
        self.counts: dict[str, int] = {"ok": 0, "fail": 0, "info": 0}
        send_channel, receive_channel = trio.open_memory_channel[Op](concurrency + 1)
        self._done_send, self._done_receive = send_channel, receive_channel
        self._start = 0.0
        self._next_progress = PROGRESS_EVERY_S
        self._nursery: Any = None  # run()'s: ops, and the closes of retired clients

    def now_ns(self) -> int:
        return int((trio.current_time() - self._start) * 1e9)

    def _context(self) -> g.Context:
        return g.Context(self.now_ns(), tuple(self.processes), frozenset(self.free), self.rng)

    def _record(self, op: Op) -> Op:
        if len(self.ops) >= MAX_OPS:
            raise g.GeneratorError(f"more than {MAX_OPS} ops")
        op = self.writer.append(dataclasses.replace(op, index=len(self.ops), wall_time=time.time()))
        self.ops.append(op)
        return op

    async def _perform(self, invoke: Op) -> None:
        extra: dict[str, Any] = {}
        try:
            if invoke.process == NEMESIS:
                kind, value, error = await self.nemesis.invoke(invoke)
            else:
                client = self.clients.get(invoke.process)
                if client is None:
                    # A txn client's transactional id belongs to its worker, not to the process.
                    worker = ({"worker": invoke.process % self.concurrency}
                              if getattr(self.client_class, "takes_worker", False) else {})
                    client = self.clients[invoke.process] = self.client_class(
                        self.bootstrap, options=ClientOptions(security=self.security), **worker)
                answer = None
                with trio.move_on_after(OP_TIMEOUT_S):
                    answer = await client.invoke(invoke)
                if answer is None:
                    log.warning("op %s on %s outlived %.0f s: its client is abandoned", invoke.f, invoke.process,
                                OP_TIMEOUT_S)
                    del self.clients[invoke.process]  # not closed: its thread may still be inside it
                    answer = "info", invoke.value, "op-timeout", {}
                kind, value, error, extra = answer
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            log.warning("op %s on %s raised %r", invoke.f, invoke.process, exc)
            kind, value, error = "info", invoke.value, type(exc).__name__
        completion = Op(kind, invoke.f, invoke.process, value, self.now_ns(), error=error, extra=extra)
        await self._done_send.send(completion)

    def _progress(self, force: bool = False) -> None:
        elapsed = trio.current_time() - self._start
        if self.out is None or (not force and elapsed < self._next_progress):
            return
        self._next_progress = elapsed + PROGRESS_EVERY_S
        faults = ",".join(sorted(f"{n}" for n in self.nemesis.db.paused)) or "-"
        self.out.write(
            f"[{elapsed:6.1f}s] ops={len(self.ops)} ok={self.counts['ok']} info={self.counts['info']} "
            f"fail={self.counts['fail']} live={self.nemesis.db.live()} paused={faults} "
            f"grudge={bool(self.nemesis.network and self.nemesis.network.grudge)}\n"
        )
        self.out.flush()

    async def _complete(self, completion: Op) -> None:
        self.in_flight -= 1
        completion = self._record(completion)
        self.counts[completion.type] = self.counts.get(completion.type, 0) + 1
        if self.gen is not None:
            self.gen = self.gen.update(self._context(), completion)
        process = completion.process
        if completion.type == "info" and process != NEMESIS:
            old = self.clients.pop(process, None)
            if old is not None:
                self._nursery.start_soon(_close, old)  # the run goes on meanwhile
            self.processes[self.processes.index(process)] = process + self.concurrency
            self.free.add(process + self.concurrency)
        else:
            self.free.add(process)

    async def run(self) -> list[Op]:
        self._start = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                while True:
                    self._progress()
                    ctx = self._context()
                    step = self.gen.op(ctx) if self.gen is not None else None
                    if step is not None and isinstance(step[0], Op):
                        invoke, self.gen = step
                        invoke = self._record(dataclasses.replace(invoke, time_ns=self.now_ns()))
                        self.free.discard(invoke.process)
                        if self.gen is not None:
                            self.gen = self.gen.update(self._context(), invoke)
                        self.in_flight += 1
                        nursery.start_soon(self._perform, invoke)
                        continue
                    if step is None:
                        if self.in_flight == 0:
                            break
                        await self._complete(await self._done_receive.receive())
                        continue
                    pending, self.gen = step
                    wake = pending.wake_ns
                    if wake is not None and wake <= self.now_ns():
                        await trio.lowlevel.checkpoint()
                        continue
                    if wake is not None:
                        deadline = self._start + wake / 1e9
                    else:
                        deadline = trio.current_time() + PROGRESS_EVERY_S
                    done_op: Op | None = None
                    with trio.move_on_at(deadline):
                        done_op = await self._done_receive.receive()
                    if done_op is not None:
                        await self._complete(done_op)
                    while True:  # drain what else finished, without waiting
                        try:
                            done = self._done_receive.receive_nowait()
                        except trio.WouldBlock:
                            break
                        await self._complete(done)
        finally:
            with trio.CancelScope(shield=True):  # each close is bounded
                for client in self.clients.values():
                    await _close(client)
            self._progress(force=True)
        return self.ops


def _client_class(workload_name: str) -> Callable[..., Any]:
    if workload_name == "txn":
        return TxnClient
    if workload_name == "share":
        return ShareClient
    return KafkaClient if workload_name in KAFKA_WORKLOADS else Client


def power_node_for(config: RunConfig) -> int | None:
    """The node ``power-loss`` hits: the damage node, unless ``disk-full`` mounts its small disk
    there (both cannot own its partition storage): then the next node. None with one node."""
    if config.damage_node is None:
        return None
    if "disk-full" not in config.nemesis:
        return config.damage_node
    if config.nodes < 2:
        return None
    return config.damage_node % config.nodes + 1


def _mount_lazy_disks(db: LocalCluster, config: RunConfig, out: TextIO | None) -> RunConfig:
    """Gives the power-loss faults their lazy disks; leaves out (and says why) those that
    cannot have them."""
    wanted = [n for n in config.nemesis if n in POWER_FAULTS]
    if not wanted:
        return config
    if "power-loss-all" in wanted:
        nodes = list(db.node_ids)
    else:
        nodes = [] if config.power_node is None else [config.power_node]
    why_not = None if nodes else "no node for it (one node, and disk-full owns its disk)"
    for node in nodes:
        if why_not is None:
            why_not = db.make_lazy_disk(node)
    if why_not is None:
        return config
    if out is not None:
        out.write(f"{','.join(wanted)} left out: {why_not}\n")
        out.flush()
    log.warning("%s left out: %s", ",".join(wanted), why_not)
    return dataclasses.replace(config, nemesis=tuple(n for n in config.nemesis if n not in POWER_FAULTS))


STORAGE_SEGMENT_BYTES = 64 << 10
UNSAFE_FLUSH_INTERVAL_MS = 60_000  # storage faults need closed segments to damage


def _create_topic(db: LocalCluster, partitions: int, replication_factor: int,
                  configs: dict[str, str] | None = None) -> None:
    from raftlog.client import Admin
    from raftlog.base.errors import RaftlogError

    deadline = time.monotonic() + READY_TIMEOUT_S
    with Admin(db.bootstrap(), request_timeout_ms=10_000, security=db.client_security) as admin:
        admin.create_topic(TOPIC, partitions, replication_factor, {"flush_policy": "always", **(configs or {})})
        while True:
            try:
                info = admin.describe_topics([TOPIC], timeout_ms=5000)[TOPIC]
                if len(info.partitions) == partitions and all(p.leader is not None for p in info.partitions):
                    return
            except RaftlogError as exc:
                log.debug("topic not ready: %r", exc)
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {TOPIC} has no leader for every partition after {READY_TIMEOUT_S} s")
            time.sleep(0.1)  # poll interval of a deadline-bounded wait


def _network(config: RunConfig, db: LocalCluster) -> net.Network | None:
    """The run's fault proxies (with `config.network`), on ports of `config.port_range` above
    the nodes' when it is given."""
    if not config.network or config.nodes < 2:
        return None
    targets = db.targets()
    if config.port_range is None:
        return net.Network(targets)
    taken = max(p for ports in db.ports.values() for p in dataclasses.astuple(ports))
    listen = ports_in((taken + 1, config.port_range[1]), net.Network.proxy_count(targets))
    return net.Network(targets, listen_ports=listen)


async def run(config: RunConfig, *, out: TextIO | None = sys.stdout) -> RunOutcome:
    """Runs one test; returns its outcome (verdict, result, history, report files)."""
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    unknown = set(config.nemesis) - set(FAULT_NAMES)
    if unknown:
        raise ValueError(f"unknown nemesis {sorted(unknown)}; known: {', '.join(FAULT_NAMES)}")
    directory = run_dir(config.store, config.name(), datetime.now())
    keys = [key_of(TOPIC, p) for p in range(config.partitions)]
    if out is not None:
        out.write(f"run {config.name()} seed={seed} dir={directory}\n")
        out.flush()
    if config.secure and config.workload in KAFKA_WORKLOADS:
        raise ValueError(f"the {config.workload} workload does not run against a secure cluster (--secure) yet")
    settings = {**FAST_SETTINGS, **(SHARE_SETTINGS if config.workload == "share" else {})}
    db = LocalCluster(directory / "cluster", config.nodes, secure=config.secure, port_range=config.port_range,
                      settings=settings)
    if set(config.nemesis) & {*STORAGE_FAULTS, *POWER_FAULTS} and config.damage_node is None:
        config = dataclasses.replace(config, damage_node=random.Random(seed ^ 0xD15C).choice(db.node_ids))
    if set(config.nemesis) & set(POWER_FAULTS):
        # Before the small disk: with power-loss-all, the damage node's small disk is mounted
        # inside its lazy data dir (its partition storage then keeps what it did not fsync).
        config = dataclasses.replace(config, power_node=config.power_node or power_node_for(config))
        config = _mount_lazy_disks(db, config, out)
    if "disk-full" in config.nemesis:
        why_not = db.make_small_disk(config.damage_node)
        if why_not is not None:
            config = dataclasses.replace(config, nemesis=tuple(n for n in config.nemesis if n != "disk-full"))
            if out is not None:
                out.write(f"disk-full left out: {why_not}\n")
    network = _network(config, db)
    nemesis = Nemesis(db, network, rng=random.Random(rng.getrandbits(64)), keys=keys)
    gen = workload(config, keys, rng)
    try:
        async with trio.open_nursery() as nursery:
            if network is not None:
                await nursery.start(network.serve)
                db.route_through(network.addresses_for)
            await trio.to_thread.run_sync(db.start_all)
            await trio.to_thread.run_sync(db.wait_ready, READY_TIMEOUT_S)
            topic_configs = ({"segment_bytes": str(STORAGE_SEGMENT_BYTES)}
                             if set(config.nemesis) & set(STORAGE_FAULTS) else {})
            topic_configs["flush_policy"] = config.flush_policy
            if config.flush_policy == "interval":
                topic_configs["flush_interval_ms"] = str(UNSAFE_FLUSH_INTERVAL_MS)
            await trio.to_thread.run_sync(_create_topic, db, config.partitions, min(3, config.nodes),
                                          topic_configs)
            with HistoryWriter(directory / "history.jsonl") as writer:
                kafka = config.workload in KAFKA_WORKLOADS
                interpreter = _Interpreter(gen, writer, concurrency=config.concurrency, rng=rng,
                                           bootstrap=db.kafka_bootstrap() if kafka else db.bootstrap(),
                                           nemesis=nemesis, out=out, client_class=_client_class(config.workload),
                                           security=db.client_security)
                ops = await interpreter.run()
            nursery.cancel_scope.cancel()
    finally:
        if nemesis.stranger is not None:
            nemesis.stranger.close()  # a run cut short holds the stranger's sockets still
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(db.close)
    history = History(ops)
    if config.workload == "share":
        result = check_share(history, limit=SHARE_DELIVERY_LIMIT)
    else:
        result = check_txn(history) if config.workload == "txn" else check(history)
    extra = {"seed": seed, "config": dataclasses.asdict(config), "cluster_id": db.cluster_id}
    files = write_report(directory, history, result, test_name=config.name(), extra=extra)
    if result.verdict == "valid" and not config.keep_data:
        for node in db.node_ids:
            db.remove_data(node)  # logs stay in cluster/logs
    if out is not None:
        counts = history.counts()
        sends = counts.get("txn" if config.workload == "txn" else "send", {})
        out.write(
            f"verdict: {result.verdict}  ops={len(history)} {'txns' if config.workload == 'txn' else 'sends'} ok={sends.get('ok', 0)} "
            f"info={sends.get('info', 0)} fail={sends.get('fail', 0)} "
            f"faults={len(history.fault_windows())} anomalies={json.dumps(result.counts)} "
            f"unknown_reasons={list(result.unknown_reasons)}\n  {directory}\n"
        )
        out.flush()
    return RunOutcome(result.verdict, result, history, files, seed)


def run_main(config: RunConfig, *, out: TextIO = sys.stdout) -> int:
    """Runs `config` in a fresh trio loop; returns the exit code (0 valid, 1 invalid, 2 unknown)."""
    outcome = trio.run(functools.partial(run, config, out=out))
    return outcome.exit_code

"""The db of a fault-injection run: real `raftlog node start` processes of one local cluster.

`LocalCluster` owns N nodes (ids 1..N, all voters, combined mode), each with its own data dir
``<root>/node-<i>/`` and log file ``<root>/logs/node-<i>.log`` (outside the data dir, so a
wipe keeps the log). Configs come from `raftlog.cli.cluster.build_node_configs` (the same code as
`raftlog cluster up`), plus per-node `dial_overrides` so that node i reaches node j's peer and
quorum listeners through the fault proxy (i -> j) of `jepsen_style_tests.net.Network`.

Process control, always by PID: `start`, `stop` (SIGTERM, then SIGKILL after a grace period),
`kill` (SIGKILL), `pause` (SIGSTOP) / `resume` (SIGCONT), `wipe` (a stopped node's data dir),
`restart`. Storage damage: `damage_tail` cuts (torn write) or bit-flips the tail of the last
segment of a partition log of a stopped node; `flip_bits` flips bits anywhere in any segment
or index file of a stopped node (closed segments included). A full disk: `make_small_disk`
mounts a tmpfs (root only; it says why not otherwise) as one node's partition storage before
it starts, `fill_disk` fills it with a filler file until ENOSPC and `free_disk` deletes the
filler; `close` unmounts it. Power loss: `make_lazy_disk` mounts a lazyfs
(`jepsen_style_tests.lazyfs`, a FUSE filesystem that can drop every write not yet fsynced) as
one node's whole data dir (partition storage, metadata-quorum journal, meta.properties)
before it starts, backed by ``<root>/node-<i>.backing``; `lose_power` makes a *stopped*
node's disk lose everything it did not fsync; `close` unmounts it and stops its process by
PID.

Invariants: every process this module starts is stopped by its PID by `close()` — called by
the context manager's exit and, as a last resort, by an `atexit` hook — even when the run
fails; a paused node is resumed before it is signalled to stop (a stopped process would not
act on SIGTERM). All methods are blocking (subprocess waits, file I/O): call them from a
worker thread (`trio.to_thread.run_sync`) in async code. Not thread-safe: one caller at a
time (the nemesis serialises its ops).
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import logging
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from raftlog.cli.cluster import (
    NodePorts,
    NodeProcess,
    build_node_configs,
    free_ports,
    port_in_use,
    stop_all,
    write_node_config,
)
from raftlog.cli.secure import SecureMaterial
from raftlog.node.config import NodeConfig, new_cluster_id

from .history import HarnessError
from .lazyfs import LazyFsError, LazyFsMount, attic_for, cannot_mount

__all__ = ["DbError", "LocalCluster", "FAST_SETTINGS", "STOP_GRACE_S"]

log = logging.getLogger(__name__)

# Fast failure detection so that a run sees many leader changes in a minute; the scrubber
# re-reads sealed segments every few seconds, so damage a read does not meet is found too.
FAST_SETTINGS: Mapping[str, Any] = {"heartbeat_ms": 300, "session_timeout_ms": 2000,
                                    "scrub_interval_ms": 5000}
STOP_GRACE_S = 10.0
MAX_NODES = 9
PARTITIONS_DIR = "partitions"
SEGMENT_SUFFIX = ".log"
DAMAGE_SUFFIXES = (".log", ".index", ".timeindex")
FILLER = ".disk-filler"
FILL_CHUNK_BYTES = 1 << 20
MAX_FILL_BYTES = 8 << 30


class DbError(HarnessError):
    code = "db-error"


class LocalCluster:
    """N real node processes on loopback ports (see the module docstring)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int = 3,
        *,
        host: str = "127.0.0.1",
        settings: Mapping[str, Any] | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        secure: bool = False,
        port_range: tuple[int, int] | None = None,
    ):
        if not 1 <= size <= MAX_NODES:
            raise DbError(f"size must be 1..{MAX_NODES}, got {size}")
        self.root = Path(root)
        self.host = host
        self.node_ids: tuple[int, ...] = tuple(range(1, size + 1))
        self.cluster_id = new_cluster_id()
        self._secret = secrets.token_urlsafe(24)
        self.settings = dict(FAST_SETTINGS if settings is None else settings)
        self.stop_grace_s = stop_grace_s
        ports = ports_in(port_range, 5 * size, host) if port_range else free_ports(5 * size, host)
        self.small_disks: dict[int, Path] = {}
        self.lazy_disks: dict[int, LazyFsMount] = {}
        self.ports: dict[int, NodePorts] = {
            n: NodePorts(*ports[5 * k : 5 * k + 5]) for k, n in enumerate(self.node_ids)
        }
        self.configs: dict[int, NodeConfig] = build_node_configs(
            self.root, self.cluster_id, self._secret, self.ports, host=host, settings=self.settings
        )
        # `secure`: what `raftlog cluster up --secure` runs (TLS + SASL/SCRAM clients, mutual-TLS
        # peers, ACLs); clients and the harness log in as its admin (`client_security`).
        self.client_security: Any = None
        if secure:
            material, _ = SecureMaterial.ensure(self.root, self.node_ids, [host])
            self.configs = {n: dataclasses.replace(c, **material.node_settings(n)) for n, c in self.configs.items()}
            self.client_security = material.admin_security()
        self.processes: dict[int, NodeProcess] = {}
        self.paused: set[int] = set()
        self._closed = False
        atexit.register(self.close)

    # ------------------------------------------------------------------ addresses

    def targets(self) -> dict[int, dict[str, tuple[str, int]]]:
        """``{node: {"peer": (host, port), "quorum": (host, port)}}``: what `Network` proxies."""
        return {
            n: {"peer": (self.host, self.ports[n].peer), "quorum": (self.host, self.ports[n].quorum)}
            for n in self.node_ids
        }

    def set_dial_overrides(self, node_id: int, overrides: Mapping[str, str]) -> None:
        """Node `node_id` dials each identity address of `overrides` at the mapped address
        (takes effect at its next start)."""
        self.configs[node_id] = dataclasses.replace(self.configs[node_id], dial_overrides=dict(overrides))

    def route_through(self, addresses_for: Any) -> None:
        """Sends every node-to-node link through proxies: `addresses_for(src)` is
        `Network.addresses_for` (``{kind: {dst: (host, port)}}``)."""
        for src in self.node_ids:
            overrides: dict[str, str] = {}
            for kind, by_dst in addresses_for(src).items():
                for dst, (host, port) in by_dst.items():
                    real = self.targets()[dst][kind]
                    overrides[f"{real[0]}:{real[1]}"] = f"{host}:{port}"
            self.set_dial_overrides(src, overrides)

    def client_address(self, node_id: int) -> str:
        return str(self.configs[node_id].listeners.client)

    def bootstrap(self) -> list[str]:
        return [self.client_address(n) for n in self.node_ids]

    def kafka_address(self, node_id: int) -> str:
        """The node's Kafka-protocol listener, "host:port"."""
        return str(self.configs[node_id].listeners.kafka)

    def kafka_bootstrap(self) -> list[str]:
        return [self.kafka_address(n) for n in self.node_ids]

    def data_dir(self, node_id: int) -> Path:
        return self.configs[node_id].data_dir

    def log_path(self, node_id: int) -> Path:
        return self.root / "logs" / f"node-{node_id}.log"

    # ------------------------------------------------------------------ processes

    def _check(self, node_id: int) -> None:
        if node_id not in self.configs:
            raise DbError(f"no node {node_id!r}; nodes are {list(self.node_ids)}")
        if self._closed:
            raise DbError("the cluster is closed")

    def alive(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.alive()

    def live(self) -> list[int]:
        return [n for n in self.node_ids if self.alive(n)]

    def running(self) -> list[int]:
        """Live and not paused."""
        return [n for n in self.live() if n not in self.paused]

    def pid(self, node_id: int) -> int | None:
        process = self.processes.get(node_id)
        return None if process is None else process.pid

    def start(self, node_id: int) -> bool:
        """Starts the node unless it runs; returns True if it started a process."""
        self._check(node_id)
        if self.alive(node_id):
            return False
        config = self.configs[node_id]
        path = write_node_config(config)
        process = NodeProcess(node_id, path, self.log_path(node_id))
        self.processes[node_id] = process.start()
        self.paused.discard(node_id)
        log.info("started node %d (pid %s)", node_id, process.pid)
        return True

    def start_all(self) -> list[int]:
        return [n for n in self.node_ids if self.start(n)]

    def _resume_if_paused(self, node_id: int) -> None:
        if node_id in self.paused:
            self.processes[node_id].signal(signal.SIGCONT)
            self.paused.discard(node_id)

    def stop(self, node_id: int) -> int | None:
        """SIGTERM by PID (graceful), SIGKILL after the grace period; the exit code."""
        self._check(node_id)
        process = self.processes.get(node_id)
        if process is None or not process.alive():
            return None
        self._resume_if_paused(node_id)
        return process.terminate(self.stop_grace_s)

    def kill(self, node_id: int) -> int | None:
        """SIGKILL by PID and reap; the exit code (None if it was not running)."""
        self._check(node_id)
        process = self.processes.get(node_id)
        if process is None or not process.alive():
            return None
        code = process.kill()
        self.paused.discard(node_id)
        return code

    def pause(self, node_id: int) -> bool:
        """SIGSTOP by PID; True if the node was running and is now paused."""
        self._check(node_id)
        if not self.alive(node_id) or node_id in self.paused:
            return False
        self.processes[node_id].signal(signal.SIGSTOP)
        self.paused.add(node_id)
        return True

    def resume(self, node_id: int) -> bool:
        """SIGCONT by PID; True if the node was paused."""
        self._check(node_id)
        if node_id not in self.paused:
            return False
        self._resume_if_paused(node_id)
        return True

    def restart(self, node_id: int) -> int | None:
        """Graceful stop, then start; the stop's exit code."""
        code = self.stop(node_id)
        self.start(node_id)
        return code

    def wipe(self, node_id: int) -> None:
        """Deletes a stopped node's data dir (it rejoins empty at its next start)."""
        self._check(node_id)
        if self.alive(node_id):
            raise DbError(f"node {node_id} is running; stop it before wiping")
        shutil.rmtree(self.data_dir(node_id), ignore_errors=True)

    def close(self) -> dict[int, int | None]:
        """Stops every process this cluster started, by PID (paused ones are resumed first).
        Idempotent; returns exit codes of the processes that were running."""
        if self._closed:
            return {}
        self._closed = True
        atexit.unregister(self.close)
        for node_id in list(self.paused):
            self._resume_if_paused(node_id)
        running = [p for p in self.processes.values() if p.alive()]
        codes = stop_all(running, self.stop_grace_s)
        for node_id, where in list(self.small_disks.items()):
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
            del self.small_disks[node_id]
        for node_id, mount in list(self.lazy_disks.items()):
            mount.close()
            del self.lazy_disks[node_id]
        return codes

    def remove_data(self, node_id: int) -> None:
        """Deletes a node's data (its data dir, and a lazy disk's backing directory) once the
        cluster is closed: what a valid run does not keep."""
        if not self._closed:
            raise DbError("close the cluster before removing its data")
        backing = self._lazy_backing(node_id)
        for path in (self.data_dir(node_id), backing, attic_for(backing)):
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ readiness

    def ready_status(self, timeout_ms: int = 2000) -> Any:
        """The cluster status when a controller answers and every live node is an unfenced
        broker; else None. Never raises for an unreachable cluster."""
        from raftlog.client import Admin
        from raftlog.base.errors import RaftlogError

        live = set(self.running())
        if not live:
            return None
        try:
            with Admin([self.client_address(n) for n in sorted(live)], request_timeout_ms=timeout_ms,
                       security=self.client_security) as admin:
                status = admin.cluster_status(timeout_ms=timeout_ms)
        except (RaftlogError, OSError):
            return None
        unfenced = {b["id"] for b in status.brokers if not b.get("fenced", True)}
        if status.controller_id is not None and live <= unfenced:
            return status
        return None

    def wait_ready(self, timeout_s: float = 60.0) -> Any:
        """Polls `ready_status` under a deadline; raises DbError with log tails on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.ready_status()
            if status is not None:
                return status
            for n, process in self.processes.items():
                if process.returncode() not in (None, 0, -signal.SIGKILL, -signal.SIGTERM):
                    raise DbError(f"node {n} exited with {process.returncode()}:\n{process.log_tail(12)}")
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- node {n}:\n{p.log_tail(8)}" for n, p in self.processes.items())
                raise DbError(f"cluster not ready within {timeout_s} s\n{tails}")
            time.sleep(0.2)  # poll interval of a deadline-bounded wait

    # ------------------------------------------------------------------ storage damage

    def segment_files(self, node_id: int) -> dict[str, list[Path]]:
        """``{"<topic>-<partition>": [segment .log files in offset order]}`` of a node."""
        out: dict[str, list[Path]] = {}
        base = self.data_dir(node_id) / PARTITIONS_DIR
        if not base.is_dir():
            return out
        for directory in sorted(base.iterdir()):
            if directory.is_dir():
                segments = sorted(p for p in directory.iterdir() if p.name.endswith(SEGMENT_SUFFIX))
                if segments:
                    out[directory.name] = segments
        return out

    def damage_tail(
        self, node_id: int, *, mode: str, rng: random.Random, keys: Iterable[str] | None = None,
        max_cut_bytes: int = 4096,
    ) -> dict[str, Any]:
        """Damages the last non-empty segment of one partition log of a *stopped* node:
        ``torn`` cuts 1..max_cut_bytes off its end (a torn write), ``bitflip`` flips one bit
        in its last max_cut_bytes, of a partition drawn from `keys` (default: any). Returns what
        was done (``{"node", "key", "file", "mode", "size", ...}``); ``{"node", "mode",
        "skipped": reason}`` if there was nothing to damage."""
        self._check(node_id)
        if self.alive(node_id):
            raise DbError(f"node {node_id} is running; stop it before damaging its storage")
        if mode not in ("torn", "bitflip"):
            raise DbError(f"mode must be torn or bitflip, got {mode!r}")
        logs = self.segment_files(node_id)
        candidates = {k: [s for s in segs if s.stat().st_size > 0] for k, segs in logs.items()}
        wanted = None if keys is None else set(keys)
        candidates = {k: segs for k, segs in candidates.items() if segs and (wanted is None or k in wanted)}
        if not candidates:
            return {"node": node_id, "mode": mode, "skipped": "no non-empty segment"}
        chosen = rng.choice(sorted(candidates))
        path = candidates[chosen][-1]
        size = path.stat().st_size
        window = min(size, max_cut_bytes)
        result: dict[str, Any] = {"node": node_id, "key": chosen, "file": path.name, "mode": mode, "size": size}
        if mode == "torn":
            cut = rng.randint(1, window)
            os.truncate(path, size - cut)
            result["cut_bytes"] = cut
        else:
            position = size - rng.randint(1, window)
            bit = rng.randrange(8)
            with open(path, "r+b") as handle:
                handle.seek(position)
                byte = handle.read(1)[0]
                handle.seek(position)
                handle.write(bytes([byte ^ (1 << bit)]))
                handle.flush()
                os.fsync(handle.fileno())
            result.update(position=position, bit=bit)
        log.info("damaged node %d: %s", node_id, result)
        return result

    def flip_bits(self, node_id: int, *, rng: random.Random, flips: int = 3,
                  keys: Iterable[str] | None = None) -> dict[str, Any]:
        """Flips `flips` random bits at random places of ONE file drawn, weighted by size (as
        bit rot is), from every non-empty segment and index file (`.log`, `.index`,
        `.timeindex`) of the partitions of a *stopped* node (of `keys` if given), closed
        segments included. Returns what it did
        (``{"node", "key", "file", "flips": [[position, bit], ...]}``), or ``{"node",
        "skipped": reason}``."""
        self._check(node_id)
        if self.alive(node_id):
            raise DbError(f"node {node_id} is running; stop it before damaging its storage")
        base = self.data_dir(node_id) / PARTITIONS_DIR
        wanted = None if keys is None else set(keys)
        files = []
        if base.is_dir():
            for directory in sorted(p for p in base.iterdir() if p.is_dir()):
                if wanted is None or directory.name in wanted:
                    files += [p for p in sorted(directory.iterdir())
                              if p.name.endswith(DAMAGE_SUFFIXES) and p.stat().st_size > 0]
        if not files:
            return {"node": node_id, "skipped": "no non-empty segment or index file"}
        path = rng.choices(files, weights=[p.stat().st_size for p in files])[0]
        size = path.stat().st_size
        done = []
        with open(path, "r+b") as handle:
            for _ in range(flips):
                position, bit = rng.randrange(size), rng.randrange(8)
                handle.seek(position)
                byte = handle.read(1)[0]
                handle.seek(position)
                handle.write(bytes([byte ^ (1 << bit)]))
                done.append([position, bit])
            handle.flush()
            os.fsync(handle.fileno())
        result = {"node": node_id, "key": path.parent.name, "file": path.name, "size": size, "flips": done}
        log.info("flipped bits on node %d: %s", node_id, result)
        return result

    def make_small_disk(self, node_id: int, size_bytes: int = 256 << 20) -> str | None:
        """Mounts a tmpfs of `size_bytes` as node `node_id`'s partition storage (before the
        node first starts). Returns None, or why it cannot (then nothing changed)."""
        self._check(node_id)
        if os.geteuid() != 0:
            return "mounting a tmpfs needs root"
        where = self.data_dir(node_id) / PARTITIONS_DIR
        if where.exists() and any(where.iterdir()):
            return f"{where} already holds data"
        where.mkdir(parents=True, exist_ok=True)
        if node_id in self.lazy_disks:
            # The mount point's name must survive a power loss (an undone name would take the
            # mount with it): inside a lazy data dir, make it durable first.
            try:
                self.lazy_disks[node_id].sync()
            except LazyFsError as exc:
                return f"cannot make {where} durable on the lazy disk: {exc}"
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            return f"mount failed: {r.stderr.strip() or r.returncode}"
        self.small_disks[node_id] = where
        return None

    def _lazy_backing(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}.backing"

    def make_lazy_disk(self, node_id: int) -> str | None:
        """Mounts a lazyfs as node `node_id`'s data dir (before the node first starts), so that
        `lose_power` can drop what it did not fsync. Returns None, or why it cannot (then
        nothing changed)."""
        self._check(node_id)
        why = cannot_mount()
        if why is not None:
            return why
        where = self.data_dir(node_id)
        if where.exists() and any(where.iterdir()):
            return f"{where} already holds data"
        mount = LazyFsMount(self._lazy_backing(node_id), where, log_path=self.root / "logs" / f"lazyfs-{node_id}.log")
        try:
            mount.start()
        except (LazyFsError, OSError) as exc:
            return str(exc)
        self.lazy_disks[node_id] = mount
        return None

    def lose_power(self, node_id: int) -> dict[str, Any]:
        """Drops every write of a *stopped* node that its lazy disk holds unsynced (file data
        not fsynced; names whose directory was not fsynced). Returns what was dropped
        (``{"node", "undone_ops", "rolled_back_files", "dropped_bytes"}``)."""
        self._check(node_id)
        if self.alive(node_id):
            raise DbError(f"node {node_id} is running; kill it before its power goes")
        mount = self.lazy_disks.get(node_id)
        if mount is None:
            raise DbError(f"node {node_id} has no lazy disk (make_lazy_disk)")
        try:
            dropped = mount.lose()
        except LazyFsError as exc:
            raise DbError(f"node {node_id}: {exc}") from None
        dropped.pop("ok", None)
        result = {"node": node_id, **dropped}
        log.info("power loss on node %d: %s", node_id, result)
        return result

    def fill_disk(self, node_id: int) -> int:
        """Fills node `node_id`'s small disk with a filler file until it is full (ENOSPC);
        returns the bytes written. Raises DbError without a small disk."""
        where = self.small_disks.get(node_id)
        if where is None:
            raise DbError(f"node {node_id} has no small disk (make_small_disk)")
        chunk = bytes(FILL_CHUNK_BYTES)
        written = 0
        fd = os.open(where / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while written < MAX_FILL_BYTES:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        break
                    chunk = bytes(max(1, len(chunk) // 16))  # fill the last bytes too
        finally:
            os.close(fd)
        return written

    def free_disk(self, node_id: int) -> bool:
        """Deletes the filler file of node `node_id`'s small disk; whether there was one."""
        where = self.small_disks.get(node_id)
        if where is None:
            return False
        try:
            os.unlink(where / FILLER)
        except FileNotFoundError:
            return False
        return True


def ports_in(port_range: tuple[int, int], count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` ports free now, the lowest ones of [low, high] (a caller's own range)."""
    low, high = port_range
    if not 0 < low <= high < 65536:
        raise DbError(f"bad port range {low}-{high}")
    chosen = [p for p in range(low, high + 1) if not port_in_use(host, p)][:count]
    if len(chosen) < count:
        raise DbError(f"fewer than {count} free ports in {low}-{high}")
    return chosen

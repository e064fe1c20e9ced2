"""One metadata-quorum voter (raftlog.node.bridge) in its own process, plus the test-side harness
that starts, drives, SIGKILLs and restarts such processes.

Node process: ``python bridge_node.py --node-id 1 --voter 1=127.0.0.1:7001 --voter 2=... \
--data-dir DIR [--log-compaction-min-entries N]``; the cluster secret comes from the
environment variable ``BRIDGE_NODE_PASSWORD`` (not argv, which `ps` shows).

Protocol, one JSON object per line.
  stdin:  {"op": "propose", "req": n, "command": hex, "timeout_s": s} | {"op": "status", "req": n}
  stdout: {"event": "ready", "node_id", "pid"}
          {"event": "applied", "index", "command": hex}     every on_commit, in index order
          {"event": "leader", "leader_id", "term"}          every on_leader_change
          {"event": "proposed", "req", "index"} | {"event": "error", "req", "code", "leader_id"}
          {"event": "status", "req", "status"} | {"event": "stopped"}
The process exits cleanly on SIGTERM or when stdin closes (so an orphan never lingers).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from raftlog.cli.cluster import free_ports

PASSWORD_ENV = "BRIDGE_NODE_PASSWORD"
_MAX_LINE_BYTES = 1024 * 1024


# --------------------------------------------------------------------------------------------
# Node process side


async def _serve(args: argparse.Namespace) -> None:
    import trio

    from raftlog.base.errors import RaftlogError
    from raftlog.node.metadata_quorum import MetadataQuorum, QuorumConfig

    voters = dict(_parse_voter(v) for v in args.voter)
    config = QuorumConfig(
        node_id=args.node_id,
        self_address=voters.pop(args.node_id),
        peers=voters,
        data_dir=Path(args.data_dir),
        password=os.environ[PASSWORD_ENV],
        log_compaction_min_entries=args.log_compaction_min_entries,
    )

    def emit(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    quorum = MetadataQuorum(
        config,
        on_commit=lambda i, c: emit({"event": "applied", "index": i, "command": c.hex()}),
        on_leader_change=lambda l, t: emit({"event": "leader", "leader_id": l, "term": t}),
    )

    async def propose(req: int, command: bytes, timeout_s: float) -> None:
        try:
            index = await quorum.propose(command, timeout_s=timeout_s)
        except RaftlogError as exc:
            leader_id = getattr(exc, "leader_id", None)
            emit({"event": "error", "req": req, "code": exc.code, "leader_id": leader_id})
        else:
            emit({"event": "proposed", "req": req, "index": index})

    async def read_commands(nursery: trio.Nursery) -> None:
        stdin = trio.lowlevel.FdStream(os.dup(0))
        buffer = b""
        while True:
            chunk = await stdin.receive_some(65536)
            if not chunk:
                nursery.cancel_scope.cancel()
                return
            buffer += chunk
            if len(buffer) > _MAX_LINE_BYTES and b"\n" not in buffer:
                raise ValueError("command line too long")
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                op = json.loads(line)
                if op["op"] == "propose":
                    nursery.start_soon(
                        propose, op["req"], bytes.fromhex(op["command"]), op["timeout_s"]
                    )
                elif op["op"] == "status":
                    emit({"event": "status", "req": op["req"], "status": quorum.status()})

    async def on_sigterm(cancel_scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                cancel_scope.cancel()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(on_sigterm, nursery.cancel_scope)
        await nursery.start(quorum.run)
        emit({"event": "ready", "node_id": args.node_id, "pid": os.getpid()})
        nursery.start_soon(read_commands, nursery)
    emit({"event": "stopped"})


def _parse_voter(text: str) -> tuple[int, str]:
    node_id, _, address = text.partition("=")
    return int(node_id), address


def main(argv: list[str] | None = None) -> None:
    import logging

    import trio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--voter", action="append", required=True, help="id=host:port")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--log-compaction-min-entries", type=int, default=5000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("raftlog.node.bridge").setLevel(logging.INFO)
    trio.run(_serve, args)


# --------------------------------------------------------------------------------------------
# Test side (synchronous: one reader thread per process, waits under deadlines)


class NodeProcess:
    """One bridge voter process and everything it printed (events stamped on receipt)."""

    def __init__(
        self,
        node_id: int,
        voters: dict[int, str],
        data_dir: Path,
        password: str,
        *,
        log_compaction_min_entries: int = 5000,
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        self.data_dir = data_dir
        self.password = password
        self.log_compaction_min_entries = log_compaction_min_entries
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.exited = False
        self.proc: subprocess.Popen[bytes] | None = None
        self._req = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> str:
        return self.voters[self.node_id]

    def start(self) -> "NodeProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, __file__, "--node-id", str(self.node_id)]
        for node_id, address in sorted(self.voters.items()):
            argv += ["--voter", f"{node_id}={address}"]
        argv += ["--data-dir", str(self.data_dir)]
        argv += ["--log-compaction-min-entries", str(self.log_compaction_min_entries)]
        env = dict(os.environ, **{PASSWORD_ENV: self.password})
        with open(self.data_dir / "stderr.log", "ab") as stderr:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                event = json.loads(line)
                event["t"] = time.monotonic()
                with self.cond:
                    self.events.append(event)
                    self.cond.notify_all()
        with self.cond:
            self.exited = True
            self.cond.notify_all()

    def wait_for(
        self, predicate: Callable[["NodeProcess"], Any], timeout_s: float, what: str
    ) -> Any:
        """Wait until ``predicate(self)`` is truthy; return its value or fail the test."""
        with self.cond:
            result = self.cond.wait_for(lambda: predicate(self) or self.exited, timeout_s)
            value = predicate(self)
            if not value:
                tail = self.events[-5:]
                state = "exited" if self.exited else "running" if result else "timed out"
                raise AssertionError(f"node {self.node_id} {state} waiting for {what}: {tail}")
            return value

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        self.wait_for(lambda n: n._find("ready"), timeout_s, "ready")

    def _find(self, kind: str, **fields: Any) -> dict[str, Any] | None:
        for event in self.events:
            if event["event"] == kind and all(event.get(k) == v for k, v in fields.items()):
                return event
        return None

    def applied(self) -> list[bytes]:
        """Commands in on_commit order; asserts the indices are 1, 2, 3, ..."""
        with self.cond:
            applied = [e for e in self.events if e["event"] == "applied"]
        assert [e["index"] for e in applied] == list(range(1, len(applied) + 1))
        return [bytes.fromhex(e["command"]) for e in applied]

    def leader(self) -> tuple[int | None, int] | None:
        with self.cond:
            for event in reversed(self.events):
                if event["event"] == "leader":
                    return event["leader_id"], event["term"]
        return None

    def request(self, op: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self._req += 1
        req = self._req
        self.proc.stdin.write((json.dumps({**op, "req": req}) + "\n").encode())
        self.proc.stdin.flush()
        return self.wait_for(
            lambda n: next((e for e in n.events if e.get("req") == req), None), timeout_s, op["op"]
        )

    def propose(self, command: bytes, timeout_s: float = 3.0) -> dict[str, Any]:
        op = {"op": "propose", "command": command.hex(), "timeout_s": timeout_s}
        return self.request(op, timeout_s + 5.0)

    def status(self) -> dict[str, Any]:
        return self.request({"op": "status"}, 5.0)["status"]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL by PID and reap."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
            self._close()

    def _close(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        self._reader.join(10)

    def terminate(self, timeout_s: float = 10.0) -> int:
        """SIGTERM by PID (graceful stop), SIGKILL if it does not exit in time."""
        assert self.proc is not None
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._close()
        return code


class Cluster:
    """N voters on loopback ports with data dirs under ``root``."""

    def __init__(
        self, root: Path, size: int, *, password: str = "test-secret", **node_kwargs: Any
    ) -> None:
        ports = free_ports(size)
        self.voters = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
        self.root = root
        self.password = password
        self.node_kwargs = node_kwargs
        self.nodes: dict[int, NodeProcess] = {}

    def start(self, node_id: int) -> NodeProcess:
        node = NodeProcess(
            node_id, self.voters, self.root / f"node{node_id}", self.password, **self.node_kwargs
        )
        self.nodes[node_id] = node.start()
        return node

    def start_all(self) -> "Cluster":
        for node_id in self.voters:
            self.start(node_id)
        for node in self.nodes.values():
            node.wait_ready()
        return self

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.alive()]

    def wait_leader(self, timeout_s: float = 10.0, exclude: int | None = None) -> int:
        """Poll until every live node names the same leader (not ``exclude``) in one term."""
        deadline = time.monotonic() + timeout_s
        while True:
            views = {n.leader() for n in self.live()}
            if len(views) == 1:
                view = views.pop()
                if view is not None and view[0] is not None and view[0] != exclude:
                    return view[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed leader within {timeout_s} s: {views}")
            node = self.live()[0]
            with node.cond:  # wake on any new event of one node, at most every 50 ms
                node.cond.wait(0.05)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node.kill()


if __name__ == "__main__":
    main()

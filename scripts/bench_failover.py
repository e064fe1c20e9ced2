#!/usr/bin/env python3
"""Controller failover time: start a 3-node cluster, SIGKILL the active controller, and time
(a) until a surviving node's `cluster_status` names a new controller and (b) until a
`create_topic` sent to a survivor succeeds. The killed node is restarted (and must register
again) before the next run. Prints each run and the medians.

    .venv/bin/python scripts/bench_failover.py [--runs 5] [--keep]
    scripts/bench failover --small     # 3 runs

Writes bench-results/failover.png (`--plot`): each run's timeline from the kill to the new
controller and to the first create_topic that succeeds (scripts/plots.py).

Every node is a real `raftlog node start` process on free loopback ports with its data in a
temp dir (kept with --keep); all are stopped by PID at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import baseline
import plots as bench_plot
from raftlog.cli.cluster import NodePorts, NodeProcess, build_node_configs, free_ports, stop_all, write_node_config
from raftlog.node.config import new_cluster_id
from raftlog.base.protocol import FrameDecoder, encode_frame

POLL_S = 0.02


def call(address: str, op: str, timeout_s: float, **fields: Any) -> dict[str, Any]:
    host, _, port = address.rpartition(":")
    decoder = FrameDecoder(max_frame_bytes=1 << 26)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode_frame({**fields, "v": 1, "id": 1, "op": op}))
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed")
            decoder.feed(data)
            if (message := decoder.next_frame()) is not None:
                return message


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        pause.wait(POLL_S)
    raise SystemExit(f"timed out after {timeout_s} s waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="failovers measured (default 5)")
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--session-timeout-ms", type=int, default=3000,
                        help="broker session (only delays the killed broker's re-registration)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    parser.add_argument("--small", action="store_true", help="3 runs (unless --runs is given)")
    bench_plot.add_plot_option(parser, "failover")
    args = parser.parse_args()
    baseline.fill_defaults(args, {"runs": (5, 3)})

    root = Path(tempfile.mkdtemp(prefix="raftlog-failover-"))
    ports = {i: NodePorts(*free_ports(5)) for i in (1, 2, 3)}
    settings = {"heartbeat_ms": args.heartbeat_ms, "session_timeout_ms": args.session_timeout_ms}
    configs = build_node_configs(root, new_cluster_id(), secrets.token_urlsafe(24), ports, settings=settings)
    client = {i: str(c.listeners.client) for i, c in configs.items()}
    processes: dict[int, NodeProcess] = {}

    def start(node_id: int) -> None:
        path = write_node_config(configs[node_id])
        processes[node_id] = NodeProcess(node_id, path, configs[node_id].data_dir / "node.log").start()

    def status(node_id: int) -> dict[str, Any]:
        response = call(client[node_id], "cluster_status", 2.0)
        return {} if "error" in response else response

    def healthy(node_id: int) -> bool:
        url = f"http://{configs[node_id].listeners.http}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read()).get("ok") is True
        except urllib.error.HTTPError as exc:
            exc.close()
            return False

    def ready() -> int | None:
        s = status(min(i for i, p in processes.items() if p.alive()))
        unfenced = {b["id"] for b in s.get("brokers", ()) if not b["fenced"]}
        return s.get("controller_id") if s.get("controller_id") and unfenced == {1, 2, 3} else None

    elected_ms: list[float] = []
    created_ms: list[float] = []
    try:
        for node_id in configs:
            start(node_id)
        wait_for(ready, 60, "the cluster")
        print(f"3 nodes up in {root} (heartbeat {args.heartbeat_ms} ms, session {args.session_timeout_ms} ms)")
        for run in range(1, args.runs + 1):
            old = wait_for(ready, 60, "a ready cluster")
            survivor = next(i for i in configs if i != old)
            processes[old].kill()
            t0 = time.monotonic()

            def new_controller() -> int | None:
                cid = status(survivor).get("controller_id")
                return cid if cid not in (None, old) else None

            new = wait_for(new_controller, 30, "a new controller")
            t1 = time.monotonic()
            name = f"failover-{run}"

            def created() -> bool:
                response = call(client[survivor], "create_topic", 10.0, name=name, partitions=3,
                                replication_factor=2, timeout_ms=5000)
                return "error" not in response or response["error"]["code"] == "TOPIC_ALREADY_EXISTS"

            wait_for(created, 30, "a create_topic to succeed")
            t2 = time.monotonic()
            elected_ms.append((t1 - t0) * 1000)
            created_ms.append((t2 - t0) * 1000)
            print(f"run {run}: killed controller {old}; node {new} answers as controller after "
                  f"{elected_ms[-1]:.0f} ms; create_topic ok after {created_ms[-1]:.0f} ms", flush=True)
            start(old)
            # The next run needs all three voters again: wait until the restarted node's own
            # /health says its broker registered (a new incarnation) and is unfenced.
            wait_for(lambda: healthy(old), 60, f"node {old} back")
        print(f"median of {args.runs}: new controller {statistics.median(elected_ms):.0f} ms, "
              f"create_topic {statistics.median(created_ms):.0f} ms "
              f"(min {min(elected_ms):.0f}, max {max(elected_ms):.0f} ms)")
        bench_plot.failover_timeline(
            args.plot, f"controller failover, 3 nodes on one machine (heartbeat {args.heartbeat_ms} ms): "
            f"median new controller {statistics.median(elected_ms):.0f} ms",
            [{"new controller answers": e, "create_topic succeeds": c} for e, c in zip(elected_ms, created_ms)],
            note=bench_plot.command_note(), target_ms=2000)
        return 0
    finally:
        stop_all(processes.values())
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

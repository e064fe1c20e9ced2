"""Command line of the fault-injection harness.

    python -m jepsen_style_tests run --workload queue --nemesis kill,pause,partition \
        --time-limit 60 --rate 200 --nodes 3 [--partitions 4] [--concurrency 6] [--seed N]
        [--fault-interval 10] [--store store]

Nemeses: kill, pause, partition, leader-kill, controller-kill, rolling, corrupt, delay,
bitflip (bits flipped anywhere in a segment or index file of one node), disk-full (one node's
partition storage is a small tmpfs that fills up and empties again; root only) (or "none").
Prints a progress line every few seconds and the verdict; writes store/<test>/<timestamp>/.
Exit code: 0 valid, 1 invalid, 2 unknown.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .nemesis import FAULT_NAMES
from .runner import RunConfig, run_main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jepsen_style_tests", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one test against a local cluster")
    run.add_argument("--workload", default="queue", choices=["queue", "group"])
    run.add_argument("--nemesis", default="kill,pause,partition",
                     help=f"comma-separated from {','.join(FAULT_NAMES)}, or none")
    run.add_argument("--time-limit", type=float, default=60.0, help="seconds of workload (default 60)")
    run.add_argument("--rate", type=float, default=200.0, help="client ops per second (default 200)")
    run.add_argument("--nodes", type=int, default=3)
    run.add_argument("--partitions", type=int, default=4)
    run.add_argument("--concurrency", type=int, default=6, help="client processes")
    run.add_argument("--fault-interval", type=float, default=10.0, help="seconds per fault cycle (quiet + fault)")
    run.add_argument("--recovery", type=float, default=5.0, help="seconds to wait after healing")
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--store", default="store")
    run.add_argument("--name", default=None, help="test name (default: workload-nemeses)")
    run.add_argument("--keep-data", action="store_true", help="keep node data dirs of a valid run")
    run.add_argument("--log-level", default="WARNING")
    run.add_argument("--secure", action="store_true",
                     help="run against a secure cluster (as raftlog cluster up --secure: TLS, SASL/SCRAM, ACLs, mTLS peers)")
    run.add_argument("--damage-node", type=int, default=None,
                     help="the node the storage faults (corrupt, bitflip, disk-full) hit (default: drawn)")
    run.add_argument("--ports", default=None, metavar="LOW-HIGH",
                     help="take the nodes' listener ports from this range (default: any free ones)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    nemesis = () if args.nemesis in ("", "none") else tuple(n.strip() for n in args.nemesis.split(",") if n.strip())
    config = RunConfig(
        workload=args.workload, nemesis=nemesis, time_limit_s=args.time_limit, rate=args.rate,
        nodes=args.nodes, partitions=args.partitions, concurrency=args.concurrency,
        fault_interval_s=args.fault_interval, recovery_s=args.recovery, seed=args.seed,
        store=args.store, test_name=args.name, keep_data=args.keep_data, secure=args.secure,
        damage_node=args.damage_node,
        port_range=tuple(int(p) for p in args.ports.split("-", 1)) if args.ports else None,
    )  # fmt: skip
    return run_main(config, out=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())

"""Command line of the fault-injection harness.

    python -m jepsen_style_tests run --workload queue|group|kafka|kafka-assign|txn|share --nemesis kill,pause,partition \
        --time-limit 60 --rate 200 --nodes 3 [--partitions 4] [--concurrency 6] [--seed N]
        [--fault-interval 10] [--store store] [--ports 27000-27499]

Nemeses: kill, pause, partition, leader-kill, controller-kill, rolling, corrupt, delay,
bitflip (bits flipped anywhere in a segment or index file of one node), disk-full (one node's
partition storage is a small tmpfs that fills up and empties again; root only), power-loss (one
node's data dir is a FUSE filesystem that drops every write not fsynced when the node is
killed; needs /dev/fuse), power-loss-all (the same to every node at once), stranger (idle
connections, oversized unauthenticated frames to every port and lying record batches, from
127.0.0.66; invalid if a lying batch is accepted or a node stops serving other clients)
(or "none"). Faults are drawn in rounds: every named nemesis once per round.
Prints a progress line every few seconds and the verdict; writes store/<test>/<timestamp>/.
Exit code: 0 valid, 1 invalid, 2 unknown.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .nemesis import FAULT_NAMES
from .runner import WORKLOADS, RunConfig, run_main


# The docstring's paragraph on the nemeses, shown by --help and run --help.
NEMESES_HELP = next(p for p in __doc__.split("\n\n") if p.startswith("Nemeses:"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jepsen_style_tests", description=__doc__.split("\n")[0],
                                     epilog=NEMESES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one test against a local cluster", epilog=NEMESES_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--workload", default="queue", choices=list(WORKLOADS),
                     help="queue: sends, polls and manual assigns (Jepsen's Kafka queue); group: sends, "
                          "polls, subscribes to one consumer group and commits; kafka, kafka-assign: the "
                          "group and queue mixes through Kafka's wire protocol (confluent-kafka); txn: Kafka "
                          "transactions (committed and aborted) with read_committed reads; share: a share "
                          "group (KIP-932) of every client, acknowledging, releasing and rejecting "
                          "(default queue)")
    run.add_argument("--nemesis", default="kill,pause,partition",
                     help=f"comma-separated from {','.join(FAULT_NAMES)}, or none")
    run.add_argument("--time-limit", type=float, default=60.0, help="seconds of workload (default 60)")
    run.add_argument("--rate", type=float, default=200.0, help="client ops per second (default 200)")
    run.add_argument("--nodes", type=int, default=3, help="node processes, every one a voter (default 3)")
    run.add_argument("--partitions", type=int, default=4, help="partitions of the test topic (default 4)")
    run.add_argument("--concurrency", type=int, default=6, help="client processes (default 6)")
    run.add_argument("--fault-interval", type=float, default=10.0, help="seconds per fault cycle: quiet, then fault (default 10)")
    run.add_argument("--recovery", type=float, default=5.0, help="seconds the final phase waits after healing every fault, before it reads "
                          "every partition to its end (default 5)")
    run.add_argument("--seed", type=int, default=None,
                     help="seed of the generator and nemesis schedule (default: random, printed)")
    run.add_argument("--store", default="store",
                     help="where results go: STORE/<test>/<timestamp>/ (default store)")
    run.add_argument("--name", default=None, help="test name (default: workload-nemeses)")
    run.add_argument("--keep-data", action="store_true", help="keep node data dirs of a valid run")
    run.add_argument("--log-level", default="WARNING", help="the harness's own logging (default WARNING)")
    run.add_argument("--secure", action="store_true",
                     help="run against a secure cluster (as raftlog cluster up --secure: TLS, SASL/SCRAM, ACLs, mTLS peers)")
    run.add_argument("--damage-node", type=int, default=None,
                     help="the node the storage faults (corrupt, bitflip, disk-full) hit (default: drawn)")
    run.add_argument("--flush-policy", default="always", choices=["always", "interval"],
                     help="the topic's flush_policy (interval: acknowledged before fsync, a control run)")
    run.add_argument("--power-node", type=int, default=None,
                     help="the node power-loss hits (default: the damage node, or the next one with disk-full)")
    run.add_argument("--ports", default=None, metavar="LOW-HIGH",
                     help="take every listener port of the run (nodes and fault proxies) from this range "
                          "(default: any free ones)")
    return parser


def _port_range(parser: argparse.ArgumentParser, text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    low, sep, high = text.partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit() or not 0 < int(low) <= int(high) < 65536:
        parser.error(f"--ports wants LOW-HIGH, e.g. 27000-27499 (got {text!r})")
    return int(low), int(high)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    nemesis = () if args.nemesis in ("", "none") else tuple(n.strip() for n in args.nemesis.split(",") if n.strip())
    if args.partitions < 1 or args.nodes < 1 or args.concurrency < 1:
        parser.error("--partitions, --nodes and --concurrency must be at least 1")
    unknown = sorted(set(nemesis) - set(FAULT_NAMES))
    if unknown:
        parser.error(f"unknown nemesis {', '.join(unknown)}; known: {', '.join(FAULT_NAMES)}")
    config = RunConfig(
        workload=args.workload, nemesis=nemesis, time_limit_s=args.time_limit, rate=args.rate,
        nodes=args.nodes, partitions=args.partitions, concurrency=args.concurrency,
        fault_interval_s=args.fault_interval, recovery_s=args.recovery, seed=args.seed,
        store=args.store, test_name=args.name, keep_data=args.keep_data, secure=args.secure,
        damage_node=args.damage_node, power_node=args.power_node, flush_policy=args.flush_policy,
        port_range=_port_range(parser, args.ports),
    )  # fmt: skip
    return run_main(config, out=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())

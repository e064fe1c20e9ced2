"""`raftlog partitions recover | reassign | reassignments | elect-leaders`. `recover`: the operator's unclean recovery of a partition whose majority
of replicas is flagged needs_catch_up (partition/raft.py "Damaged storage"), like Kafka's
`kafka-leader-election --election-type unclean`.

    raftlog partitions recover events 3 --broker 2 --unclean

It sends `recover_partition {topic, partition, unclean: true}` (PROTOCOL.md) straight to
broker N's client listener (the op is about that broker's own replica, so it is never routed
or retried elsewhere), found through `cluster_status`. Without `--unclean` it refuses before
contacting anybody. Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from raftlog.cli.common import (
    BOOTSTRAP_HELP,
    CliFailure,
    admin_options,
    admin_request,
    client_kwargs,
    command_config_option,
    connect,
    emit_json,
    friendly,
    table,
)

__all__ = ["partitions", "recover_partition"]

MAX_RESPONSE_FRAME_BYTES = 1 << 20  # the answer is {} or an error: small
_RISK = "records acknowledged but missing from that replica's log are lost for good"


def recover_partition(address: str, topic: str, partition: int, *, timeout_s: float,
                      security: Any = None) -> dict[str, Any]:
    """Send one `recover_partition` (unclean: true) to the node at `address` over a fresh
    socket (TLS and logged in as `security`, a ClientSecurity, says), without retry (a
    second try would only be refused as "not flagged"). Returns the ok fields. Raises the
    node's RaftlogError, OSError (unreachable, closed), or RequestTimedOutError (no answer in
    `timeout_s`: the flag may or may not be cleared)."""
    from raftlog.base.errors import RequestTimedOutError
    from raftlog.base.protocol import FrameDecoder, encode_frame, parse_response
    from raftlog.client.network_blocking import open_socket

    host, _, port = address.rpartition(":")
    frame = encode_frame({"v": 1, "id": 1, "op": "recover_partition", "topic": topic,
                          "partition": partition, "unclean": True})
    decoder = FrameDecoder(max_frame_bytes=MAX_RESPONSE_FRAME_BYTES)
    deadline = time.monotonic() + timeout_s
    with open_socket((host.strip("[]"), int(port)), timeout_s=timeout_s, security=security,
                     decoder=decoder) as sock:
        sock.sendall(frame)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestTimedOutError(f"no answer from {address} in {timeout_s} s")
            sock.settimeout(left)
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                raise RequestTimedOutError(f"no answer from {address} in {timeout_s} s") from None
            if not data:
                raise ConnectionError(f"{address} closed the connection without answering")
            decoder.feed(data)
            message = decoder.next_frame()
            if message is not None:
                response = parse_response(message)
                if response.error is not None:
                    raise response.error
                return dict(response.fields)


@click.group("partitions")
def partitions() -> None:
    """Operator actions on one partition's replicas."""


@partitions.command("recover")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(0, None))
@click.option("--broker", "broker_id", type=int, required=True,
              help="The broker whose (flagged) replica is to lead; its log is what survives.")
@click.option("--unclean", is_flag=True,
              help=f"Accept the risk: {_RISK}. Required.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
@click.option("--timeout", type=click.FloatRange(0.5, 600), default=15.0, show_default=True,
              help="Seconds to wait for an answer.")
@click.option("--bootstrap", envvar="RAFTLOG_BOOTSTRAP", default=None, metavar="HOST:PORT[,...]",
              help=BOOTSTRAP_HELP)
@command_config_option
@friendly
def partitions_recover(topic: str, partition: int, broker_id: int, unclean: bool, as_json: bool,
                       timeout: float, bootstrap: str) -> None:
    """Unclean recovery: clear broker N's replica's needs_catch_up flag on TOPIC PARTITION
    and have it run for leader at once.

    For a partition with no leader because a majority of its replicas lost data to damaged
    storage (needs_catch_up: true under replicas.partitions in each node's /health). The
    other flagged replicas vote for it if its log is at least as long as theirs, then copy
    it. Refused when the partition has a live leader or the replica is not flagged.

    RISK: records acknowledged (even acks=all) but missing from broker N's log are lost for
    good. Choose the flagged replica with the largest log_end_offset.

    \b
    Example:
      curl -s http://127.0.0.1:9096/health      # find flagged replicas, their log_end_offset
                                                # (-H "Authorization: Bearer TOKEN" with http_token)
      raftlog partitions recover events 3 --broker 2 --unclean
      raftlog topics describe events            # a leader appears within a few seconds
    """
    from raftlog.client import Admin

    name = f"{topic}-{partition}"
    if not unclean:
        raise CliFailure(f"refusing to recover {name} without --unclean: records acknowledged but missing "
                         f"from broker {broker_id}'s replica are lost for good")
    addresses = connect(bootstrap)
    with Admin(addresses, request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        status = admin.cluster_status()
    found = [b for b in status.brokers if b.get("id") == broker_id]
    if not found:
        known = ", ".join(str(b.get("id")) for b in status.brokers) or "none"
        raise CliFailure(f"broker {broker_id} is not registered (brokers: {known})")
    address = f"{found[0]['host']}:{found[0]['port']}"
    try:
        recover_partition(address, topic, partition, timeout_s=timeout, **client_kwargs())
    except OSError as exc:
        raise CliFailure(f"broker {broker_id} at {address} is not reachable: {exc}") from None
    if as_json:
        emit_json({"topic": topic, "partition": partition, "broker": broker_id, "recovered": True})
        return
    click.echo(f"cleared needs_catch_up on broker {broker_id}'s replica of {name}; it is running "
               f"for leader (check: raftlog topics describe {topic})")


def _plan_items(topic: str | None, partition: int | None, to_brokers: str | None, cancel: bool,
                plan: Any) -> list[dict[str, Any]]:
    """The request's `partitions` from the command line or a Kafka plan file
    ({"version": 1, "partitions": [{"topic", "partition", "replicas"}]})."""
    if plan is not None:
        if topic is not None or to_brokers is not None:
            raise CliFailure("give either --plan FILE or TOPIC PARTITION --to-brokers, not both")
        try:
            doc = json.load(plan)
            entries = doc["partitions"]
            items = [{"topic": str(e["topic"]), "partition": int(e["partition"]),
                      "replicas": None if cancel else [int(b) for b in e["replicas"]]} for e in entries]
        except (ValueError, KeyError, TypeError) as exc:
            raise CliFailure(f"{plan.name}: not a reassignment plan ({exc!r})") from None
        if not items:
            raise CliFailure(f"{plan.name}: the plan names no partitions")
        return items
    if topic is None or partition is None:
        raise CliFailure("name TOPIC PARTITION (or --plan FILE)")
    if cancel:
        return [{"topic": topic, "partition": partition, "replicas": None}]
    if not to_brokers:
        raise CliFailure("say where to: --to-brokers 1,2,4 (or --cancel)")
    try:
        replicas = [int(b) for b in to_brokers.split(",")]
    except ValueError:
        raise CliFailure(f"--to-brokers {to_brokers!r}: expected broker ids like 1,2,4") from None
    return [{"topic": topic, "partition": partition, "replicas": replicas}]


@partitions.command("reassign")
@click.argument("topic", required=False)
@click.argument("partition", type=click.IntRange(0, None), required=False)
@click.option("--to-brokers", default=None, metavar="ID,ID,...",
              help="The new replicas, the preferred leader first (e.g. 1,2,4).")
@click.option("--plan", type=click.File("r"), default=None,
              help="A Kafka reassignment plan (kafka-reassign-partitions JSON) instead.")
@click.option("--cancel", is_flag=True, help="Cancel the move(s) in progress instead.")
@admin_options
@friendly
def partitions_reassign(topic: str | None, partition: int | None, to_brokers: str | None, plan: Any,
                        cancel: bool, as_json: bool, timeout: float, bootstrap: str) -> None:
    """Move a partition's replicas to other brokers (or cancel a move), while it serves.

    The partition's Raft group adds the new replicas as learners, promotes each once it has
    caught up, then removes the old ones (leadership moves first); the controller records
    the move and ends it when the group's membership is the target
    (docs/reassignment.md). Follow it with `raftlog partitions reassignments`.

    \b
    Examples:
      raftlog partitions reassign events 0 --to-brokers 1,2,4
      raftlog partitions reassign --plan plan.json
      raftlog partitions reassign events 0 --cancel
    """
    items = _plan_items(topic, partition, to_brokers, cancel, plan)
    answer = admin_request(bootstrap, timeout, {"op": "alter_partition_reassignments", "partitions": items})
    results = answer.get("results", [])
    rows = []
    for item, result in zip(items, results):
        error = (result.get("error") or {}) if isinstance(result, dict) else {}
        rows.append({"topic": item["topic"], "partition": item["partition"],
                     "replicas": item["replicas"], "error": error.get("code"),
                     "message": error.get("message")})
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            name = f"{row['topic']}-{row['partition']}"
            what = "cancelled" if row["replicas"] is None else f"moving to {row['replicas']}"
            click.echo(f"{name}: {what}" if row["error"] is None
                       else f"{name}: refused: {row['error']}: {row['message']}")
    if any(row["error"] is not None for row in rows):
        raise SystemExit(1)


@partitions.command("elect-leaders")
@click.argument("topic", required=False)
@click.argument("partition", type=click.IntRange(0, None), required=False)
@admin_options
@friendly
def partitions_elect_leaders(topic: str | None, partition: int | None, as_json: bool, timeout: float,
                             bootstrap: str) -> None:
    """Hand leadership back to each partition's preferred replica (the first of its replicas)
    now, like `kafka-leader-election --election-type preferred`: one partition, every
    partition of TOPIC, or (no argument) every partition led by another replica.

    \b
    Examples:
      raftlog partitions elect-leaders
      raftlog partitions elect-leaders events 3
    """
    from raftlog.client import Admin

    fields: dict[str, Any] = {}
    with Admin(connect(bootstrap), request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        if topic is not None:
            count = partition + 1 if partition is not None else len(admin.describe_topics([topic])[topic].partitions)
            wanted = [partition] if partition is not None else range(count)
            fields["partitions"] = [{"topic": topic, "partition": p} for p in wanted]
        results = admin.request({"op": "elect_leaders", **fields}).get("results", [])
    rows = [{"topic": r["topic"], "partition": r["partition"], "error": (r.get("error") or {}).get("code"),
             "message": (r.get("error") or {}).get("message")} for r in results]
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("every partition is led by its preferred replica")
    for row in [] if as_json else rows:
        name = f"{row['topic']}-{row['partition']}"
        click.echo(f"{name}: leadership handed to the preferred replica" if row["error"] is None
                   else f"{name}: {row['error']}: {row['message']}")
    if any(row["error"] not in (None, "ELECTION_NOT_NEEDED") for row in rows):
        raise SystemExit(1)


@partitions.command("reassignments")
@admin_options
@friendly
def partitions_reassignments(as_json: bool, timeout: float, bootstrap: str) -> None:
    """List the replica moves in progress (replicas, adding, removing)."""
    moves = admin_request(bootstrap, timeout, {"op": "list_partition_reassignments"}).get("reassignments", [])
    if as_json:
        emit_json(moves)
        return
    if not moves:
        click.echo("no reassignments in progress")
        return
    table([("PARTITION", "REPLICAS", "ADDING", "REMOVING")] + [
        (f"{m['topic']}-{m['partition']}", ",".join(map(str, m["replicas"])),
         ",".join(map(str, m["adding_replicas"])), ",".join(map(str, m["removing_replicas"])))
        for m in moves])

"""`raftlog brokers list | decommission | recommission | alter-config` and `raftlog cluster
balance | add-controller | remove-controller` (docs/elastic.md, docs/how-to/grow-and-shrink.md; alter-config: dynamic broker configs, Kafka's `kafka-configs
--entity-type brokers --alter`, docs/operator-apis.md). Each is one native admin op (PROTOCOL.md: cluster_status,
decommission_broker, recommission_broker, balance, add_controller, remove_controller) that the
node taking it routes to the active controller. Registered by raftlog/cli/main.py (`balance_cmd`,
`add_controller_cmd` and `remove_controller_cmd` under `cluster`).
"""

from __future__ import annotations

import click

from raftlog.cli.common import (
    CliFailure, admin_from_context, admin_options, admin_request, emit_json, friendly, parse_pairs, store, table,
)

__all__ = ["add_controller_cmd", "balance_cmd", "brokers", "remove_controller_cmd"]


@click.group()
def brokers() -> None:
    """List brokers; take one out for good (decommission) or back in (recommission); change
    dynamic broker configs (alter-config)."""


@brokers.command("list")
@admin_options
@friendly
def brokers_list(as_json: bool, timeout: float, bootstrap: str) -> None:
    """Every broker: rack, state (active, draining, decommissioned), fenced or not, and how
    many replicas and leaderships it holds.

    \b
    Example:
      raftlog brokers list
    """
    rows = admin_request(bootstrap, timeout, {"op": "cluster_status"}).get("brokers", [])
    if as_json:
        emit_json(rows)
        return
    table([("BROKER", "RACK", "STATE", "FENCED", "REPLICAS", "LEADERS", "KAFKA ADDRESS")] + [
        (str(b.get("id")), str(b.get("rack") or "-"), str(b.get("state", "active")),
         "yes" if b.get("fenced") else "no", str(b.get("replicas", "-")), str(b.get("leaders", "-")),
         str(b.get("kafka") or "-"))
        for b in rows])


@brokers.command("decommission")
@click.argument("broker_id", type=click.IntRange(0, None))
@admin_options
@friendly
def brokers_decommission(broker_id: int, as_json: bool, timeout: float, bootstrap: str) -> None:
    """Move every replica off BROKER_ID (internal topics first: the group coordinators go
    with them), then fence it for good; stop its process once `brokers list` says
    decommissioned. Refused, with the reason, when a topic would be left with fewer brokers
    than its replication factor.

    \b
    Examples:
      raftlog brokers decommission 4
      raftlog brokers list            # 4: draining ... then decommissioned, 0 replicas
    """
    _broker_op("decommission_broker", broker_id, as_json, timeout, bootstrap)


@brokers.command("recommission")
@click.argument("broker_id", type=click.IntRange(0, None))
@admin_options
@friendly
def brokers_recommission(broker_id: int, as_json: bool, timeout: float, bootstrap: str) -> None:
    """Make BROKER_ID active again: no more moves off it (those started finish); a
    decommissioned broker is unfenced by its next heartbeat and may take replicas again."""
    _broker_op("recommission_broker", broker_id, as_json, timeout, bootstrap)


def _broker_op(op: str, broker_id: int, as_json: bool, timeout: float, bootstrap: str) -> None:
    answer = admin_request(bootstrap, timeout, {"op": op, "broker_id": broker_id})
    if as_json:
        emit_json(answer)
    else:
        click.echo(f"broker {broker_id}: {answer.get('state')}")


@click.command("balance")
@click.option("--dry-run", is_flag=True, help="Print the plan; move nothing.")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True,
              help="Allowed spread of replica and leader counts, as a fraction of the mean (at least 1).")
@click.option("--max-moves", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="At most this many partitions move.")
@admin_options
@friendly
def balance_cmd(dry_run: bool, tolerance: float, max_moves: int, as_json: bool, timeout: float,
                bootstrap: str) -> None:
    """Spread replicas and preferred leaders evenly over the brokers (racks kept), by
    reassignments; follow them with `raftlog partitions reassignments`.

    \b
    Examples:
      raftlog cluster balance --dry-run
      raftlog cluster balance
    """
    answer = admin_request(bootstrap, timeout, {"op": "balance", "dry_run": dry_run, "tolerance": tolerance,
                                                "max_moves": max_moves})
    moves = answer.get("moves", [])
    if as_json:
        emit_json(moves)
    elif not moves:
        click.echo("balanced: nothing to move")
    else:
        for m in moves:
            name = f"{m['topic']}-{m['partition']}"
            error = m.get("error")
            if error:
                click.echo(f"{name}: refused: {error.get('code')}: {error.get('message')}")
            else:
                verb = "would move" if dry_run else "moving"
                click.echo(f"{name}: {verb} to {m['replicas']} ({m['reason']})")
    if any(m.get("error") for m in moves):
        raise SystemExit(1)


def _echo_voters(answer: dict, as_json: bool) -> None:
    voters = answer.get("voters", {})
    if as_json:
        emit_json(voters)
    else:
        click.echo("voters: " + ", ".join(f"{v}@{a}" for v, a in sorted(voters.items(), key=lambda kv: int(kv[0]))))


@click.command("add-controller")
@click.option("--id", "node_id", type=click.IntRange(0), required=True, help="The new voter's node id.")
@click.option("--quorum-address", required=True, metavar="HOST:PORT",
              help="Its quorum listener, as in its controller_quorum_voters entry.")
@admin_options
@friendly
def add_controller_cmd(node_id: int, quorum_address: str, as_json: bool, timeout: float, bootstrap: str) -> None:
    """Add a voter to the metadata quorum (one at a time). Start the node first with the
    controller role and `--voters` naming the current voters and itself; it catches up from
    the log. Refused when the live voters could not form the new set's majority.

    \b
    Example:
      raftlog cluster add-controller --id 4 --quorum-address 127.0.0.1:9494
    """
    _echo_voters(admin_request(bootstrap, timeout, {"op": "add_controller", "voter_id": node_id,
                                                    "quorum_address": quorum_address}), as_json)


@click.command("remove-controller")
@click.option("--id", "node_id", type=click.IntRange(0), required=True, help="The voter to remove.")
@admin_options
@friendly
def remove_controller_cmd(node_id: int, as_json: bool, timeout: float, bootstrap: str) -> None:
    """Remove a voter from the metadata quorum (a dead one, or one to retire; then stop it).
    Refused for the last voter, the quorum's leader, or when the voters left that are live
    would be fewer than their majority.

    \b
    Example:
      raftlog cluster remove-controller --id 3
    """
    _echo_voters(admin_request(bootstrap, timeout, {"op": "remove_controller", "voter_id": node_id}), as_json)


@brokers.command("alter-config")
@click.option("--broker", "broker_id", type=click.IntRange(0), default=None,
              help="The broker whose configs change (default: the cluster-wide default).")
@click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE", help="Set a config (repeatable).")
@click.option("--delete", "delete_keys", multiple=True, metavar="KEY",
              help="Back to the next source: the cluster default, then the node's own setting (repeatable).")
@admin_options
@click.pass_context
@friendly
def brokers_alter_config(ctx: click.Context, broker_id: int | None, set_items: tuple[str, ...],
                         delete_keys: tuple[str, ...], bootstrap: str, timeout: float, as_json: bool) -> None:
    """Change dynamic broker configs (prints the ones then set on that resource).

    \b
    Example:
      raftlog brokers alter-config --set auto.create.topics.enable=false
      raftlog brokers alter-config --broker 1 --set num.partitions=3 --delete max.connections
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    if not set_items and not delete_keys:
        raise CliFailure("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    resource = "" if broker_id is None else str(broker_id)
    with admin_from_context(ctx) as admin:
        configs = admin.alter_broker_configs(resource, parse_pairs(set_items, "--set"), list(delete_keys))
    if as_json:
        emit_json({"broker": broker_id, "configs": configs})
        return
    who = "the cluster default" if broker_id is None else f"broker {broker_id}"
    click.echo(f"altered {who}; dynamic configs now: " +
               (", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or "(none)"))

"""`raftlog brokers alter-config`: dynamic broker configs (Kafka's `kafka-configs
--entity-type brokers --alter`).

    raftlog brokers alter-config --set num.partitions=6                 # the cluster default
    raftlog brokers alter-config --broker 2 --set max.connections=500
    raftlog brokers alter-config --broker 2 --delete max.connections

Recorded in the metadata log and applied on the nodes without a restart; the dynamic ones
are listed in metadata/broker_config.py (docs/operator-apis.md), the others are refused with
the reason. Reading them back: `kafka-configs --describe --entity-type brokers` or any Kafka
admin client's DescribeConfigs. Needs ALTER_CONFIGS on the cluster when ACLs are on.
Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

import click

from raftlog.cli.common import CliFailure, admin_from_context, admin_options, emit_json, friendly, parse_pairs, store

__all__ = ["brokers"]


@click.group("brokers")
def brokers() -> None:
    """Dynamic broker configs (per broker or cluster-wide)."""


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

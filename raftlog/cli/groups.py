"""`raftlog groups list|describe|reset-offsets|delete|config`: consumer groups, like Kafka's
kafka-consumer-groups tool, and any group's configs (consumer and share groups: Kafka's
`kafka-configs --entity-type groups`).

    raftlog groups list
    raftlog groups describe my-group            # per partition: committed, log end, lag, owner
    raftlog groups reset-offsets my-group --topic events --to-earliest [--execute]
    raftlog groups delete my-group
    raftlog groups config my-group --set consumer.session.timeout.ms=60000 [--delete KEY]

Registered on the root group by raftlog/cli/main.py. Human tables by
default, `--json` for scripts. `reset-offsets` is a dry run unless `--execute` (Kafka's rule);
it needs an inactive group (no members).
"""

from __future__ import annotations

from typing import Any

import click

from raftlog.cli.common import (
    CliFailure,
    admin_from_context,
    admin_options,
    client_kwargs,
    connect,
    emit_json,
    friendly,
    parse_pairs,
    store,
    table,
)

__all__ = ["groups"]

def _group_admin(bootstrap: str, timeout: float) -> Any:
    from raftlog.client.group_admin import GroupAdmin

    return GroupAdmin(connect(bootstrap), request_timeout_ms=int(timeout * 1000), **client_kwargs())


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


@click.group("groups")
def groups() -> None:
    """Consumer groups: list, describe (lag), reset offsets, delete; any group's configs.

    \b
    Examples:
      raftlog groups list
      raftlog groups describe billing                 # committed offset, log end, lag, owner
      raftlog groups reset-offsets billing --topic orders --to-earliest --execute
      raftlog groups delete billing
      raftlog groups config jobs --set share.auto.offset.reset=earliest
    """


@groups.command("list")
@admin_options
@friendly
def groups_list(bootstrap: str, timeout: float, as_json: bool) -> None:
    """Every group of the cluster (each broker lists the groups it coordinates).

    \b
    Example:
      raftlog groups list --json
    """
    with _group_admin(bootstrap, timeout) as ga:
        found = ga.list_groups()
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no groups")
        return
    table([("GROUP", "TYPE", "STATE", "PROTOCOL TYPE", "COORDINATOR")] +
           [(g["group_id"], g.get("type") or "classic", g["state"], g["protocol_type"] or "-",
             _s(g.get("coordinator"))) for g in found])


@groups.command("describe")
@click.argument("group_id")
@admin_options
@friendly
def groups_describe(group_id: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Per partition: committed offset, log end offset, lag, and the owning member. A KIP-848
    group (group.protocol=consumer) also shows its group and assignment epochs and each
    member's epoch, state, and current vs target assignment. An unknown group (no members, no
    committed offsets) is an error (exit 1).

    \b
    Examples:
      raftlog groups describe billing
      raftlog groups describe billing --json
    """
    with _group_admin(bootstrap, timeout) as ga:
        d = ga.describe_group(group_id)
        if d["state"] == "Dead" and not d["members"] and not d["partitions"]:
            known = sorted(g["group_id"] for g in ga.list_groups())
            listed = f"; groups: {', '.join(known[:10])}" + (", ..." if len(known) > 10 else "") if known \
                else "; there are no groups"
            raise CliFailure(f"unknown group {group_id!r} (no members, no committed offsets){listed}")
    if as_json:
        emit_json(d)
        return
    click.echo(f"group {group_id}: {d['state']}" + (f" ({d['protocol']})" if d.get("protocol") else "")
               + f", {len(d['members'])} member(s)")
    if d.get("type") == "consumer":
        _describe_kip848(d)
    unreadable = [m["member_id"] for m in d["members"] if not m.get("assignment_readable", True)]
    if unreadable and d.get("protocol_type") == "consumer":
        click.echo(f"{len(unreadable)} member(s) with an assignment that is not Kafka's ConsumerProtocol")
    if not d["partitions"]:
        click.echo("no committed offsets and no assigned partitions")
        return
    table([("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
            "CLIENT-ID")] + [
        (r["topic"], str(r["partition"]), _s(r["committed_offset"]), _s(r["log_end_offset"]), _s(r["lag"]),
         _s(r["member_id"]), _s(r.get("host")), _s(r["client_id"]))
        for r in d["partitions"]
    ])


def _tps(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in tps) or "-"


def _describe_kip848(d: dict) -> None:
    """A KIP-848 group: its epochs and each member's current vs target assignment."""
    click.echo(f"protocol: consumer (KIP-848), group epoch {d['group_epoch']}, assignment epoch "
               f"{d['assignment_epoch']}, assignor {d['assignor']}")
    if d["members"]:
        # PROTOCOL: "classic" for a classic member inside the group (an online upgrade under way).
        table([("MEMBER-ID", "PROTOCOL", "EPOCH", "STATE", "ASSIGNED", "TARGET", "REVOKING", "CLIENT-ID")] + [
            (m["member_id"], "classic" if m.get("classic") else "consumer", _s(m.get("member_epoch")),
             _s(m.get("member_state")), _tps(m["partitions"]), _tps(m.get("target")),
             _tps(m.get("pending_revocation")), _s(m["client_id"]))
            for m in d["members"]])


@groups.command("reset-offsets")
@click.argument("group_id")
@click.option("--topic", "topics", multiple=True, required=True, help="Topic to reset (repeatable).")
@click.option("--to-earliest", "strategy", flag_value="earliest", help="To the log start offset.")
@click.option("--to-latest", "strategy", flag_value="latest", help="To the log end offset.")
@click.option("--to-offset", type=click.IntRange(0), help="To this offset (clamped into the log).")
@click.option("--to-datetime-ms", type=click.IntRange(0), help="To the first offset at or after this time (ms).")
@click.option("--execute", is_flag=True, help="Write the offsets (default: a dry run that only shows them).")
@admin_options
@friendly
def groups_reset_offsets(group_id: str, topics: tuple[str, ...], strategy: str | None, to_offset: int | None,
                         to_datetime_ms: int | None, execute: bool, bootstrap: str, timeout: float,
                         as_json: bool) -> None:
    """Reset an inactive group's committed offsets (a dry run unless --execute).

    \b
    Examples:
      raftlog groups reset-offsets billing --topic orders --to-earliest
      raftlog groups reset-offsets billing --topic orders --to-offset 1000 --execute
      raftlog groups reset-offsets billing --topic orders --to-datetime-ms 1700000000000 --execute
    """
    given = [s for s in (strategy, to_offset, to_datetime_ms) if s is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime-ms")
    value = None
    if to_offset is not None:
        strategy, value = "offset", to_offset
    elif to_datetime_ms is not None:
        strategy, value = "timestamp", to_datetime_ms
    assert strategy is not None
    with _group_admin(bootstrap, timeout) as ga:
        r = ga.reset_offsets(group_id, topics, strategy, value, dry_run=not execute)
    if as_json:
        emit_json(r)
        return
    table([("TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET")] + [
        (p["topic"], str(p["partition"]), _s(None if p["previous_offset"] < 0 else p["previous_offset"]),
         str(p["offset"])) for p in r["partitions"]
    ])
    if r["dry_run"]:
        click.echo("(dry run: nothing written; add --execute to write these offsets)")


@groups.command("delete")
@click.argument("group_id")
@admin_options
@friendly
def groups_delete(group_id: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Delete an inactive group and its committed offsets.

    \b
    Example:
      raftlog groups delete billing
    """
    with _group_admin(bootstrap, timeout) as ga:
        ga.delete_group(group_id)
    if as_json:
        emit_json({"deleted": group_id})
        return
    click.echo(f"deleted group {group_id}")


@groups.command("config")
@click.argument("group_id")
@click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE",
              help="Set a group config, e.g. share.record.lock.duration.ms=15000 (repeatable).")
@click.option("--delete", "delete_keys", multiple=True, metavar="KEY",
              help="Back to the broker's default (repeatable).")
@admin_options
@click.pass_context
@friendly
def groups_config(ctx: click.Context, group_id: str, set_items: tuple[str, ...], delete_keys: tuple[str, ...],
                  bootstrap: str, timeout: float, as_json: bool) -> None:
    """Show or change a group's configs (Kafka 4's group configs, for consumer and share
    groups: consumer.session.timeout.ms, consumer.heartbeat.interval.ms, share.session.timeout.ms,
    share.heartbeat.interval.ms, share.record.lock.duration.ms, share.delivery.count.limit,
    share.partition.max.record.locks, share.auto.offset.reset, ...). Without --set / --delete,
    prints the configs set on the group; the group need not exist yet. A bad name or value is
    refused naming the key, and nothing changes.

    \b
    Examples:
      raftlog groups config jobs
      raftlog groups config jobs --set share.auto.offset.reset=earliest --set share.record.lock.duration.ms=15000
      raftlog groups config billing --delete consumer.session.timeout.ms
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        if set_items or delete_keys:
            configs = admin.alter_group_configs(group_id, parse_pairs(set_items, "--set"), list(delete_keys))
        else:
            configs = admin.describe_group_configs(group_id)
    if as_json:
        emit_json({"group_id": group_id, "configs": configs})
        return
    if not configs:
        click.echo(f"group {group_id}: no configs set (the broker's defaults apply)")
        return
    table([("CONFIG", "VALUE")] + sorted(configs.items()))

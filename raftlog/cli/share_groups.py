"""`raftlog share-groups list|describe|reset-offsets|delete`: share groups (KIP-932), like
Kafka's kafka-share-groups tool.

    raftlog share-groups list
    raftlog share-groups describe jobs           # members; per partition: start offset, log end, lag
    raftlog share-groups reset-offsets jobs --topic orders --to-earliest [--execute]
    raftlog share-groups delete jobs

Registered on the root group by raftlog/cli/main.py. Human tables by default, `--json` for
scripts. `reset-offsets` is a dry run unless `--execute` (Kafka's rule) and needs a group
without members. A share group's configs (share.record.lock.duration.ms, share.auto.offset.reset,
...) are `raftlog groups config NAME` (raftlog/cli/groups.py).
"""

from __future__ import annotations

from typing import Any

import click

from raftlog.cli.common import admin_options, client_kwargs, connect, emit_json, friendly, table

__all__ = ["share_groups"]


def _admin(bootstrap: str, timeout: float) -> Any:
    from raftlog.client.share_admin import ShareGroupAdmin

    return ShareGroupAdmin(connect(bootstrap), request_timeout_ms=int(timeout * 1000), **client_kwargs())


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


@click.group("share-groups")
def share_groups() -> None:
    """Share groups (queues): list, describe (members, start offsets, lag), reset offsets, delete.

    \b
    Examples:
      raftlog share-groups list
      raftlog share-groups describe jobs
      raftlog share-groups reset-offsets jobs --topic orders --to-earliest --execute
      raftlog share-groups delete jobs
      raftlog groups config jobs --set share.auto.offset.reset=earliest   # a share group's configs
    """


@share_groups.command("list")
@admin_options
@friendly
def share_groups_list(bootstrap: str, timeout: float, as_json: bool) -> None:
    """Every share group of the cluster (each coordinator lists its own)."""
    with _admin(bootstrap, timeout) as sa:
        found = sa.list_groups()
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no share groups")
        return
    table([("GROUP", "STATE", "MEMBERS")] + [(g["group_id"], g["state"], str(g["members"])) for g in found])


@share_groups.command("describe")
@click.argument("group_id")
@admin_options
@friendly
def share_groups_describe(group_id: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Members (epoch, client, assignment) and, per partition of the subscribed topics, the
    share-partition start offset, the log end offset, the lag and the records in flight."""
    with _admin(bootstrap, timeout) as sa:
        d = sa.describe_group(group_id)
    if as_json:
        emit_json(d)
        return
    click.echo(f"share group {group_id}: {d['state']}, epoch {d['group_epoch']}, {len(d['members'])} member(s)")
    if d["members"]:
        table([("MEMBER-ID", "EPOCH", "CLIENT-ID", "HOST", "TOPICS")] + [
            (m["member_id"], str(m["member_epoch"]), m["client_id"] or "-", m["client_host"] or "-",
             ",".join(m["subscribed_topic_names"])) for m in d["members"]])
    if d["partitions"]:
        table([("TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG", "IN-FLIGHT")] + [
            (r["topic"], str(r["partition"]), _s(r["start_offset"]), _s(r["log_end_offset"]), _s(r["lag"]),
             str(sum(x["last_offset"] - x["first_offset"] + 1 for x in r["in_flight"]
                     if x["state"] == "ACQUIRED"))) for r in d["partitions"]])


@share_groups.command("reset-offsets")
@click.argument("group_id")
@click.option("--topic", required=True, help="The topic whose share partitions start again.")
@click.option("--to-earliest", "to", flag_value="earliest", help="Start at the log start.")
@click.option("--to-latest", "to", flag_value="latest", help="Start at the log end (only new records).")
@click.option("--to-offset", "to_offset", type=click.IntRange(0), help="Start at this offset.")
@click.option("--execute", is_flag=True, help="Do it (without: show what would be done).")
@admin_options
@friendly
def share_groups_reset(group_id: str, topic: str, to: str | None, to_offset: int | None, execute: bool,
                       bootstrap: str, timeout: float, as_json: bool) -> None:
    """Start the group's share partitions of --topic again (the group must have no members)."""
    if (to is None) == (to_offset is None):
        raise click.UsageError("give one of --to-earliest, --to-latest, --to-offset")
    if not execute:
        click.echo(f"dry run: would start share group {group_id} on {topic} at "
                   f"{to or to_offset} (add --execute)")
        return
    with _admin(bootstrap, timeout) as sa:
        done = sa.reset_offsets(group_id, topic, to if to is not None else int(to_offset or 0))
    if as_json:
        emit_json([{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(done.items())])
        return
    table([("TOPIC", "PARTITION", "NEW-START-OFFSET")] + [(t, str(p), str(o)) for (t, p), o in sorted(done.items())])


@share_groups.command("delete")
@click.argument("group_id")
@admin_options
@friendly
def share_groups_delete(group_id: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Delete a share group without members."""
    with _admin(bootstrap, timeout) as sa:
        sa.delete_group(group_id)
    if as_json:
        emit_json({"deleted": group_id})
    else:
        click.echo(f"deleted share group {group_id}")

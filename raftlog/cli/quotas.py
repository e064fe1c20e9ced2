"""`raftlog quotas describe|alter`: client quotas (Kafka's `kafka-configs --entity-type
users/clients --describe|--alter --add-config/--delete-config`).

    raftlog quotas alter --user alice --add-config producer_byte_rate=1048576
    raftlog quotas alter --user-default --add-config consumer_byte_rate=5e6
    raftlog quotas alter --client-id app --delete-config request_percentage
    raftlog quotas describe                  # every quota
    raftlog quotas describe --user alice

Quota names are Kafka's: producer_byte_rate, consumer_byte_rate (bytes/s per broker) and
request_percentage. Changing quotas needs ALTER_CONFIGS on the cluster, describing them
DESCRIBE_CONFIGS. Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

from typing import Any

import click

from raftlog.cli.common import CliFailure, admin_from_context, admin_options, emit_json, friendly, store, table

__all__ = ["quotas"]

MATCH_EXACT, MATCH_DEFAULT = 0, 1


@click.group("quotas")
def quotas() -> None:
    """Describe and alter client quotas (byte rates, request percentage) per user and client id."""


def _entity(user: str | None, user_default: bool, client_id: str | None, client_default: bool) -> dict[str, str | None]:
    if user is not None and user_default or client_id is not None and client_default:
        raise CliFailure("give a name or the default for each entity type, not both")
    entity: dict[str, str | None] = {}
    if user is not None or user_default:
        entity["user"] = user
    if client_id is not None or client_default:
        entity["client-id"] = client_id
    return entity


def _entity_options(fn: Any) -> Any:
    for option in reversed((
        click.option("--user", help="The user (Kafka's --entity-type users --entity-name)."),
        click.option("--user-default", is_flag=True, help="The default user (Kafka's --entity-default)."),
        click.option("--client-id", help="The client id (Kafka's --entity-type clients --entity-name)."),
        click.option("--client-default", is_flag=True, help="The default client id."),
    )):
        fn = option(fn)
    return fn


def _show(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity.items())


@quotas.command("describe")
@_entity_options
@admin_options
@click.pass_context
@friendly
def quotas_describe(ctx: click.Context, user: str | None, user_default: bool, client_id: str | None,
                    client_default: bool, bootstrap: str, timeout: float, as_json: bool) -> None:
    """List the quotas (of the entity given, else all).

    \b
    Examples:
      raftlog quotas describe
      raftlog quotas describe --user alice --client-id app
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    entity = _entity(user, user_default, client_id, client_default)
    components = [{"entity_type": kind, "match_type": MATCH_DEFAULT if name is None else MATCH_EXACT, "match": name}
                  for kind, name in entity.items()]
    with admin_from_context(ctx) as admin:
        found = admin.describe_quotas(components, strict=bool(entity))
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no quotas")
        return
    rows = [("ENTITY", "QUOTAS")]
    for e in found:
        rows.append((_show(e["entity"]), ", ".join(f"{k}={v:g}" for k, v in sorted(e["values"].items()))))
    table(rows)


def _parse_configs(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise CliFailure(f"--add-config {item!r}: expected name=number") from None
        if not sep:
            raise CliFailure(f"--add-config {item!r}: expected name=number")
    return out


@quotas.command("alter")
@_entity_options
@click.option("--add-config", "add", default="", help="name=value[,name=value...] to set.")
@click.option("--delete-config", "delete", default="", help="name[,name...] to remove.")
@click.option("--validate-only", is_flag=True, help="Check the change, apply nothing.")
@admin_options
@click.pass_context
@friendly
def quotas_alter(ctx: click.Context, user: str | None, user_default: bool, client_id: str | None,
                 client_default: bool, add: str, delete: str, validate_only: bool, bootstrap: str, timeout: float,
                 as_json: bool) -> None:
    """Set or remove quota values of one entity (a user, a client id, or both).

    \b
    Examples:
      raftlog quotas alter --user alice --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
      raftlog quotas alter --user-default --client-default --add-config request_percentage=200
      raftlog quotas alter --user alice --delete-config consumer_byte_rate
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    entity = _entity(user, user_default, client_id, client_default)
    if not entity:
        raise CliFailure("name the entity: --user NAME / --user-default and/or --client-id ID / --client-default")
    values = _parse_configs(add)
    remove = [k.strip() for k in delete.split(",") if k.strip()]
    if not values and not remove:
        raise CliFailure("nothing to change: give --add-config and/or --delete-config")
    with admin_from_context(ctx) as admin:
        admin.alter_quotas(entity, values, remove, validate_only=validate_only)
    if as_json:
        emit_json({"entity": entity, "set": values, "removed": remove, "validate_only": validate_only})
    else:
        click.echo(f"{'valid' if validate_only else 'altered'}: {_show(entity)}")

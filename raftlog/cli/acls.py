"""`raftlog acls add|list|remove`: ACLs in Kafka's model, with kafka-acls' habits.

    raftlog acls add --allow-principal User:alice --operation write --operation describe --topic orders
    raftlog acls add --allow alice --operation read --topic orders- --resource-pattern-type prefixed
    raftlog acls add --allow alice --operation read --group billing
    raftlog acls add --deny bob --operation all --topic secrets --deny-host 10.0.0.7
    raftlog acls list [--topic orders] [--principal User:alice] [--json]
    raftlog acls remove --allow alice --operation write --topic orders

A principal is `User:<name>` (a bare name means that); `User:*` is everyone. One `add` makes
every combination of the principals, operations and resources given (as kafka-acls does).
`remove` deletes the ACLs matching what is given (an operation, principal or host left out
matches any); `list` shows those matching its filters. Changing ACLs needs ALTER on the
cluster (a super user, e.g. the admin of `raftlog cluster up --secure`), listing DESCRIBE.
Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import click

from raftlog.base.acl import CLUSTER_NAME, AclBinding, AclFilter, PatternType, ResourceType
from raftlog.base.errors import InvalidRequestError
from raftlog.cli.common import CliFailure, admin_from_context, admin_options, emit_json, friendly, store, table

__all__ = ["acls"]

_PATTERNS = ["literal", "prefixed"]


def principal(name: str) -> str:
    """"alice" -> "User:alice"; "User:alice" and "User:*" as they are."""
    name = name.strip()
    return name if ":" in name else f"User:{name}"


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else []))


def resource_options(fn: Any) -> Any:
    fn = click.option("--cluster", is_flag=True, help="The cluster resource (create topics, ACLs, users...).")(fn)
    fn = click.option("--group", "groups", multiple=True, metavar="NAME",
                      help="A consumer group (repeatable; '*' for every group).")(fn)
    fn = click.option("--topic", "topics", multiple=True, metavar="NAME",
                      help="A topic (repeatable; '*' for every topic).")(fn)
    return fn


def binding_options(fn: Any) -> Any:
    fn = click.option("--deny-host", "deny_hosts", multiple=True, metavar="IP",
                      help="Host the deny applies to (default every host).")(fn)
    fn = click.option("--allow-host", "allow_hosts", multiple=True, metavar="IP",
                      help="Host the allow applies to (default every host).")(fn)
    fn = click.option("--deny-principal", "--deny", "deny", multiple=True, metavar="PRINCIPAL",
                      help="User:<name> (or a bare name) to deny (repeatable).")(fn)
    fn = click.option("--allow-principal", "--allow", "allow", multiple=True, metavar="PRINCIPAL",
                      help="User:<name> (or a bare name) to allow (repeatable; User:* is everyone).")(fn)
    fn = click.option("--operation", "operations", multiple=True, metavar="OP",
                      help="read, write, create, delete, alter, describe, describe_configs, alter_configs, "
                           "idempotent_write, cluster_action or all (repeatable).")(fn)
    fn = click.option("--resource-pattern-type", "pattern", type=click.Choice(_PATTERNS, case_sensitive=False),
                      default="literal", show_default=True,
                      help="literal: the name itself; prefixed: every name starting with it.")(fn)
    return resource_options(fn)


def _acl_json(b: AclBinding) -> dict[str, str]:
    return b.to_obj()


def _print(bindings: list[AclBinding], as_json: bool, empty: str) -> None:
    if as_json:
        emit_json([_acl_json(b) for b in bindings])
        return
    if not bindings:
        click.echo(empty)
        return
    rows = [("PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "PATTERN", "HOST")]
    for b in sorted(bindings, key=lambda b: (b.resource_type.value, b.resource_name, b.principal,
                                             b.operation.value, b.permission.value)):
        rows.append((b.principal, b.permission.value, b.operation.value,
                     f"{b.resource_type.value}:{b.resource_name}", b.pattern_type.value, b.host))
    table(rows)


@click.group("acls")
def acls() -> None:
    """Add, list and remove ACLs (who may do what to which topic, group or the cluster)."""


@acls.command("add")
@binding_options
@admin_options
@click.pass_context
@friendly
def acls_add(ctx: click.Context, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, pattern: str,
             operations: tuple[str, ...], allow: tuple[str, ...], deny: tuple[str, ...], allow_hosts: tuple[str, ...],
             deny_hosts: tuple[str, ...], bootstrap: str, timeout: float, as_json: bool) -> None:
    """Allow or deny PRINCIPALs OPERATIONs on resources (every combination given).

    \b
    Examples:
      raftlog acls add --allow alice --operation write --operation describe --topic orders
      raftlog acls add --allow alice --operation read --topic orders- --resource-pattern-type prefixed
      raftlog acls add --allow alice --operation read --group billing
      raftlog acls add --deny User:bob --operation all --topic secrets
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    resources = _resources(topics, groups, cluster)
    if not resources:
        raise CliFailure("name a resource: --topic NAME, --group NAME or --cluster")
    if not operations:
        raise CliFailure("name an operation: --operation read|write|create|delete|alter|describe|...|all")
    if not allow and not deny:
        raise CliFailure("name a principal: --allow-principal User:NAME or --deny-principal User:NAME")
    sides = [("allow", p, allow_hosts or ("*",)) for p in allow] + [("deny", p, deny_hosts or ("*",)) for p in deny]
    try:
        bindings = [
            AclBinding(rt, name, PatternType.LITERAL if rt is ResourceType.CLUSTER else pattern,
                       principal(who), host, op, permission)
            for (rt, name), op, (permission, who, hosts) in product(resources, operations, sides)
            for host in hosts
        ]  # fmt: skip
    except InvalidRequestError as exc:
        raise CliFailure(f"bad ACL: {exc.message}") from None
    with admin_from_context(ctx) as admin:
        admin.create_acls(bindings)
    if as_json:
        emit_json([_acl_json(b) for b in bindings])
        return
    click.echo(f"added {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}:")
    _print(bindings, False, "")


def _filters(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, pattern: str | None,
             operations: tuple[str, ...], principals: list[tuple[str | None, str | None]],
             hosts: tuple[str, ...]) -> list[AclFilter]:
    resources: list[tuple[ResourceType, str | None]] = list(_resources(topics, groups, cluster)) or [
        (ResourceType.ANY, None)
    ]
    try:
        return [
            AclFilter(resource_type=rt, resource_name=name,
                      pattern_type=PatternType.ANY if pattern is None or name is None else pattern,
                      principal=who, host=host, operation=op, permission=permission or "any")
            for (rt, name), op, (permission, who), host in product(
                resources, operations or ("any",), principals or [(None, None)], hosts or (None,))
        ]  # fmt: skip
    except InvalidRequestError as exc:
        raise CliFailure(f"bad filter: {exc.message}") from None


@acls.command("list")
@resource_options
@click.option("--principal", "principals", multiple=True, metavar="PRINCIPAL",
              help="Only this principal's ACLs (repeatable).")
@click.option("--resource-pattern-type", "pattern", type=click.Choice(["any", "match", *_PATTERNS], case_sensitive=False),
              default="any", show_default=True,
              help="With --topic/--group: any (that name, either pattern type), match (every ACL that "
                   "applies to the name: its literal, '*' and prefixes), literal or prefixed.")
@admin_options
@click.pass_context
@friendly
def acls_list(ctx: click.Context, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
              principals: tuple[str, ...], pattern: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """List ACLs (all, or those on the resources and principals given).

    \b
    Examples:
      raftlog acls list
      raftlog acls list --topic orders --resource-pattern-type match
      raftlog acls list --principal User:alice --json
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    filters = _filters(topics, groups, cluster, pattern, (), [(None, principal(p)) for p in principals], ())
    found: dict[tuple[str, ...], AclBinding] = {}
    with admin_from_context(ctx) as admin:
        for f in filters:
            for b in admin.describe_acls(f):
                found[tuple(b.to_obj().values())] = b
    _print(list(found.values()), as_json, "no ACLs")


@acls.command("remove")
@binding_options
@admin_options
@click.pass_context
@friendly
def acls_remove(ctx: click.Context, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, pattern: str,
                operations: tuple[str, ...], allow: tuple[str, ...], deny: tuple[str, ...],
                allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...], bootstrap: str, timeout: float,
                as_json: bool) -> None:
    """Remove the ACLs on the resources given that match the principals, operations and hosts
    given (one left out matches any).

    \b
    Examples:
      raftlog acls remove --allow alice --operation write --topic orders
      raftlog acls remove --topic orders            # every ACL on the literal topic orders
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    if not (topics or groups or cluster):
        raise CliFailure("name a resource: --topic NAME, --group NAME or --cluster")
    principals = [("allow", principal(p)) for p in allow] + [("deny", principal(p)) for p in deny]
    hosts = tuple(allow_hosts) + tuple(deny_hosts)
    filters = _filters(topics, groups, cluster, pattern, operations, principals, hosts)  # type: ignore[arg-type]
    with admin_from_context(ctx) as admin:
        removed = admin.delete_acls(filters)
    if as_json:
        emit_json([_acl_json(b) for b in removed])
        return
    if not removed:
        click.echo("no ACL matched: nothing removed")
        return
    click.echo(f"removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}:")
    _print(removed, False, "")

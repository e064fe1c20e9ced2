"""`raftlog features describe|upgrade|downgrade`: the cluster's feature levels (Kafka's
`kafka-features describe|upgrade|downgrade`; metadata/features.py has the levels and rules).

    raftlog features describe
    raftlog features downgrade --feature group.version=0
    raftlog features upgrade --feature group.version=1 --dry-run

Changing a level needs ALTER on the cluster. Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

import click

from raftlog.cli.common import CliFailure, admin_from_context, admin_options, emit_json, friendly, store, table

__all__ = ["features"]

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@click.group("features")
def features() -> None:
    """Describe and change the cluster's feature levels (metadata.version, group.version, ...)."""


@features.command("describe")
@admin_options
@click.pass_context
@friendly
def features_describe(ctx: click.Context, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Each feature: the levels raftlog supports and the level finalized (0: off).

    \b
    Example:
      raftlog features describe
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        found = admin.describe_features()
    if as_json:
        emit_json(found)
        return
    rows = [("FEATURE", "SUPPORTED", "FINALIZED")]
    for name, (lo, hi) in sorted(found["supported"].items()):
        rows.append((name, f"{lo}-{hi}", str(found["finalized"].get(name, 0))))
    table(rows)


def _levels(items: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for item in items:
        name, sep, level = item.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise CliFailure(f"--feature {item!r}: expected NAME=LEVEL")
        out[name.strip()] = int(level)
    if not out:
        raise CliFailure("name a feature: --feature NAME=LEVEL")
    return out


def _update(ctx: click.Context, items: tuple[str, ...], upgrade_type: int, dry_run: bool, bootstrap: str,
            timeout: float, as_json: bool) -> None:
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    levels = _levels(items)
    with admin_from_context(ctx) as admin:
        admin.update_features(levels, upgrade_type=upgrade_type, validate_only=dry_run)
    if as_json:
        emit_json({"levels": levels, "dry_run": dry_run})
    else:
        click.echo(("valid: " if dry_run else "finalized: ") + ", ".join(f"{k}={v}" for k, v in levels.items()))


_FEATURE = click.option("--feature", "items", multiple=True, metavar="NAME=LEVEL", help="A feature and its level (repeatable).")
_DRY_RUN = click.option("--dry-run", is_flag=True, help="Check the change, apply nothing.")


@features.command("upgrade")
@_FEATURE
@_DRY_RUN
@admin_options
@click.pass_context
@friendly
def features_upgrade(ctx: click.Context, items: tuple[str, ...], dry_run: bool, bootstrap: str, timeout: float,
                     as_json: bool) -> None:
    """Raise features to the levels given (all or none).

    \b
    Example:
      raftlog features upgrade --feature group.version=1
    """
    _update(ctx, items, UPGRADE, dry_run, bootstrap, timeout, as_json)


@features.command("downgrade")
@_FEATURE
@click.option("--unsafe", is_flag=True, help="An unsafe (lossy) downgrade, as Kafka's --unsafe.")
@_DRY_RUN
@admin_options
@click.pass_context
@friendly
def features_downgrade(ctx: click.Context, items: tuple[str, ...], unsafe: bool, dry_run: bool, bootstrap: str,
                       timeout: float, as_json: bool) -> None:
    """Lower features to the levels given (metadata.version is never lowered, as in Kafka 4).

    \b
    Example:
      raftlog features downgrade --feature group.version=0
    """
    _update(ctx, items, UNSAFE_DOWNGRADE if unsafe else SAFE_DOWNGRADE, dry_run, bootstrap, timeout, as_json)

"""Every raftlog CLI command that talks to a cluster (it has --bootstrap) also takes --command-config (with RAFTLOG_COMMAND_CONFIG), so a secure cluster's client.properties works everywhere."""

from __future__ import annotations

from collections.abc import Iterator

import click

from raftlog.cli.main import main


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def option(command: click.Command, flag: str) -> click.Option | None:
    return next((p for p in command.params if isinstance(p, click.Option) and flag in p.opts), None)


def test_every_command_with_bootstrap_takes_the_command_config():
    talking = {name: command for name, command in commands(main) if option(command, "--bootstrap")}
    # The ones the README and issue 16 name, so the walk above found the tree.
    assert {"topics create", "produce", "consume", "acls add", "users add", "cluster status", "perf produce"} <= set(talking)
    missing = [name for name, command in talking.items() if option(command, "--command-config") is None]
    assert missing == []
    wrong_env = [name for name, command in talking.items()
                 if option(command, "--command-config").envvar != "RAFTLOG_COMMAND_CONFIG"]
    assert wrong_env == []

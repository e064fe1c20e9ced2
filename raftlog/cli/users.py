"""`raftlog users add|remove|list`: SCRAM users (Kafka's `kafka-configs --entity-type users
--alter --add-config 'SCRAM-SHA-512=[password=...]'`).

    raftlog users add alice                       # asks for the password twice (hidden)
    printf '%s\\n' "$PASSWORD" | raftlog users add alice --password-stdin
    raftlog users list
    raftlog users remove alice                    # its open connections are cut off

The password is never an argument (it would show in `ps` and shell history): typed at a
prompt or read from stdin. It never leaves this process either: the node gets a salted
password (PBKDF2 with a fresh salt) per mechanism and keeps only keys derived from it. That
still lets its holder log in, so the command refuses to send it without TLS unless
`--allow-plaintext`. A new user can do nothing until ACLs allow it (`raftlog acls add`).
Changing users needs ALTER on the cluster (a super user), listing DESCRIBE.
Registered on the root group by raftlog/cli/main.py.
"""

from __future__ import annotations

import sys

import click

from raftlog.base.errors import UnacceptableCredentialError
from raftlog.base.sasl import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS
from raftlog.cli.common import CliFailure, admin_from_context, admin_options, emit_json, friendly, security, store, table

__all__ = ["users"]

MAX_PASSWORD_BYTES = 1024


@click.group("users")
def users() -> None:
    """Add, list and remove SCRAM users (their ACLs: raftlog acls)."""


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline(MAX_PASSWORD_BYTES + 2)
        password = line.rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            raise CliFailure("no terminal to ask for the password: pipe it in with --password-stdin")
        password = click.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
    if not password:
        raise CliFailure("empty password")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise CliFailure(f"a password is at most {MAX_PASSWORD_BYTES} bytes")
    return password


@users.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(sorted(SCRAM_MECHANISMS)),
              help="SCRAM mechanism(s) to set (default: both).")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=DEFAULT_ITERATIONS,
              show_default=True, help="PBKDF2 iterations of the stored credential.")
@click.option("--allow-plaintext", is_flag=True,
              help="Send the salted password even without TLS (it lets its holder log in).")
@admin_options
@click.pass_context
@friendly
def users_add(ctx: click.Context, name: str, password_stdin: bool, mechanisms: tuple[str, ...], iterations: int,
              allow_plaintext: bool, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Create user NAME, or set a new password for it (its SCRAM credentials).

    \b
    Examples:
      raftlog users add alice
      printf '%s\\n' "$ALICE_PASSWORD" | raftlog users add alice --password-stdin
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    settings = security()
    if not allow_plaintext and (settings is None or not settings.tls):
        raise CliFailure("refusing to send a credential without TLS: give --command-config with "
                         "security.protocol SASL_SSL (or SSL), or --allow-plaintext")
    password = _read_password(password_stdin)
    chosen = mechanisms or tuple(sorted(SCRAM_MECHANISMS))
    with admin_from_context(ctx) as admin:
        try:
            admin.upsert_user(name, password, mechanisms=chosen, iterations=iterations)
        except UnacceptableCredentialError as exc:
            raise CliFailure(f"user {name!r} refused: {exc.message}") from None
    if as_json:
        emit_json({"user": name, "mechanisms": list(chosen), "iterations": iterations})
    else:
        click.echo(f"user {name} set ({', '.join(chosen)}, {iterations} iterations); "
                   f"give it rights with: raftlog acls add --allow User:{name} --operation ... --topic ...")


@users.command("remove")
@click.argument("name")
@admin_options
@click.pass_context
@friendly
def users_remove(ctx: click.Context, name: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Remove user NAME (every SCRAM credential). Its open connections fail their next
    request; its ACLs stay (remove them with raftlog acls remove --allow User:NAME ...).

    \b
    Example:
      raftlog users remove alice
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        admin.delete_user(name)
    if as_json:
        emit_json({"removed": name})
    else:
        click.echo(f"removed user {name}")


@users.command("list")
@admin_options
@click.pass_context
@friendly
def users_list(ctx: click.Context, bootstrap: str, timeout: float, as_json: bool) -> None:
    """List users that have SCRAM credentials (mechanisms and iterations, never a secret).

    \b
    Example:
      raftlog users list
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        found = admin.describe_users()
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no users")
        return
    rows = [("USER", "MECHANISMS")]
    for user in sorted(found):
        rows.append((user, ", ".join(f"{m} ({n} iterations)" for m, n in sorted(found[user].items()))))
    table(rows)

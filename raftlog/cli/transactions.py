"""`raftlog transactions list|describe`: transactional ids and their state, like Kafka's
kafka-transactions tool (its `abort` of a hanging transaction needs the log side of issue 42
and is not served yet).

    raftlog transactions list [--state Ongoing]...
    raftlog transactions describe my-app

Each request goes to the leader of the `__transaction_state` partition that coordinates it
(`list` asks the leader of every partition; each answers the ids it coordinates). Registered
on the root group by raftlog/cli/main.py. Human tables by default, `--json` for scripts.
"""

from __future__ import annotations

import time
from typing import Any

import click

from raftlog.base.errors import error_from_wire
from raftlog.base.topics import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_PARTITIONS,
    partition_for_transactional_id,
)
from raftlog.cli.common import CliFailure, admin_options, client_kwargs, connect, emit_json, friendly, table

__all__ = ["transactions"]

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "PrepareEpochFence", "Dead")
NO_TRANSACTIONS = f"no transactional id has been used yet ({TRANSACTION_STATE_TOPIC} does not exist)"


def _admin(bootstrap: str | None, timeout: float) -> Any:
    from raftlog.client.blocking import Admin

    return Admin(connect(bootstrap), request_timeout_ms=int(timeout * 1000), **client_kwargs())


@click.group("transactions")
def transactions() -> None:
    """Transactional producers: list ids, describe one (docs/transactions.md).

    \b
    Examples:
      raftlog transactions list
      raftlog transactions list --state Ongoing --json
      raftlog transactions describe my-app
    """


@transactions.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES),
              help="Only ids in this state (repeatable).")
@admin_options
@friendly
def transactions_list(states: tuple[str, ...], bootstrap: str | None, timeout: float, as_json: bool) -> None:
    """Every transactional id of the cluster, with its producer id, state and coordinator."""
    request = {"op": "list_transactions", "states": list(states) or None}
    with _admin(bootstrap, timeout) as admin:
        if TRANSACTION_STATE_TOPIC not in admin.list_topics(internal=True):
            answers = []
            if not as_json:
                click.echo(NO_TRANSACTIONS)
                return
        else:
            answers = admin.request_many([(request, (TRANSACTION_STATE_TOPIC, p))
                                          for p in range(TRANSACTION_STATE_TOPIC_PARTITIONS)])
    found: dict[str, dict[str, Any]] = {}
    for a in answers:
        for t in a.get("transactions") or ():
            found[t["transactional_id"]] = {**t, "coordinator": a.get("node_id")}
    rows = [found[k] for k in sorted(found)]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no transactional ids")
        return
    table([("TRANSACTIONAL-ID", "PRODUCER-ID", "STATE", "COORDINATOR")]
          + [(t["transactional_id"], str(t["producer_id"]), t["state"], str(t["coordinator"])) for t in rows])


@transactions.command("describe")
@click.argument("transactional_id")
@admin_options
@friendly
def transactions_describe(transactional_id: str, bootstrap: str | None, timeout: float, as_json: bool) -> None:
    """One id's state: producer id and epoch, timeout, the ongoing transaction's start and
    partitions. An unknown id is an error (exit 1)."""
    p = partition_for_transactional_id(transactional_id)
    with _admin(bootstrap, timeout) as admin:
        if TRANSACTION_STATE_TOPIC not in admin.list_topics(internal=True):
            raise CliFailure(f"unknown transactional id {transactional_id!r}: {NO_TRANSACTIONS}")
        answer = admin.request({"op": "describe_transactions", "transactional_ids": [transactional_id]},
                               route=(TRANSACTION_STATE_TOPIC, p))
    d = answer["transactions"][0]
    if d.get("error"):
        raise error_from_wire(d["error"])
    if as_json:
        emit_json(d)
        return
    started = "-" if d["start_ms"] < 0 else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(d["start_ms"] / 1000))
    click.echo(f"transactional id {transactional_id}: {d['state']}, producer id {d['producer_id']} "
               f"epoch {d['producer_epoch']}, timeout {d['timeout_ms']} ms, started {started}")
    if d["partitions"]:
        table([("TOPIC", "PARTITION")] + [(t, str(n)) for t, n in d["partitions"]])

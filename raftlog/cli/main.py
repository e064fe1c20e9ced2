"""The `raftlog` command (click): run nodes and a local cluster, administer topics.

    raftlog node start --config node.toml           run one node (flags/RAFTLOG_* override the file)
    raftlog cluster up [--nodes 3]                  a local cluster on 127.0.0.1 (scripts/quorum)
    raftlog cluster status                          voters, controller, brokers
    raftlog topics create|list|describe|delete|alter
    raftlog partitions recover TOPIC PARTITION --broker N --unclean   (raftlog/cli/partitions.py)
    raftlog console [--port 8080]                   the web console (raftlog/cli/console.py, raftlog/console/)
    raftlog acls add|list|remove, raftlog users add|list|remove   (acls.py, users.py)
    raftlog schemas register|list|describe|compatibility|delete    (schemas.py: the Schema Registry)

Admin commands talk to `--bootstrap` (default 127.0.0.1:9093, or $RAFTLOG_BOOTSTRAP) through
the blocking client `raftlog.client.Admin`; any node answers (it forwards to the
controller), with the security settings of `--command-config FILE` / $RAFTLOG_COMMAND_CONFIG
(a client.properties; `cluster up --secure` writes one). Output: human tables by default,
`--json` for scripts. Failures print one line
and exit 1 (2 for a bad configuration); `raftlog --debug ...` shows the traceback instead.
What is printed here is the command's user-facing output, not logging.
Shell completion comes with click: `eval "$(_RAFTLOG_COMPLETE=bash_source raftlog)"`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from raftlog.cli import console as _console
from raftlog.cli import acls as _acls
from raftlog.cli import brokers as _brokers
from raftlog.cli import groups as _groups
from raftlog.cli import share_groups as _share_groups
from raftlog.cli import partitions as _partitions
from raftlog.cli import records as _records
from raftlog.cli import transactions as _transactions
from raftlog.cli import schemas as _schemas
from raftlog.cli import features as _features
from raftlog.cli import quotas as _quotas
from raftlog.cli import users as _users
from raftlog.base.errors import ClusterAuthorizationFailedError, RaftlogError, UnknownTopicOrPartitionError
from raftlog.cli.common import (
    EXIT_NO_CONTROLLER,
    NEW_TOPIC_LEADERS_WAIT_S,
    TOPIC_MAX_REPLICATION_FACTOR,
    TOPIC_PARTITIONS,
    CliFailure,
    cluster_status,
    describe,
    admin_from_context,
    await_leaders,
    admin_options,
    command_config_option,
    emit_json,
    friendly,
    parse_pairs,
    store,
    table,
    version,
)

# ----------------------------------------------------------------------------- root


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(version(), "--version", prog_name="raftlog")
@click.option("--debug", is_flag=True, envvar="RAFTLOG_DEBUG", help="Show tracebacks on errors.")
@command_config_option
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """raftlog: a Kafka-like replicated commit log.

    \b
    Start a local three-node cluster, then make a topic:
      scripts/quorum                      # or: raftlog cluster up
      raftlog topics create demo --partitions 6 --replication-factor 3
      raftlog topics describe demo
    """
    store(ctx, debug=debug)


# ----------------------------------------------------------------------------- node


@main.group()
def node() -> None:
    """Run a node process."""


@node.command("start")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="node.toml to read.")
@click.option("--node-id", type=int, help="This node's id (node_id).")
@click.option("--data-dir", help="Where its data lives (data_dir).")
@click.option("--cluster-id", help="The cluster's id (cluster_id; needed on a data dir's first start).")
@click.option("--roles", help='"controller,broker" (default) or "broker" (not a voter).')
@click.option("--host", "listen_host", metavar="HOST", envvar="RAFTLOG_HOST",
              help="Listen on HOST with the default ports (kafka 9092, client 9093, peer 9094, quorum "
                   "9095, http 9096); the flags below override one listener each (env RAFTLOG_HOST).")
@click.option("--kafka", "listeners_kafka", metavar="HOST:PORT", help="Kafka (wire protocol) listener.")
@click.option("--client", "listeners_client", metavar="HOST:PORT", help="Client (native protocol) listener.")
@click.option("--peer", "listeners_peer", metavar="HOST:PORT", help="Peer listener (replication, controller RPCs).")
@click.option("--quorum", "listeners_quorum", metavar="HOST:PORT", help="Quorum (PySyncObj) listener.")
@click.option("--http", "listeners_http", metavar="HOST:PORT", help="HTTP listener (/health, /metrics).")
@click.option("--schema-registry", "listeners_schema_registry", metavar="HOST:PORT",
              help="Schema Registry listener (default: the HTTP listener's host, its port + 1).")
@click.option("--advertised-host", metavar="HOST",
              help="The name others dial when a listener binds 0.0.0.0 (advertised_host).")
@click.option("--voters", "controller_quorum_voters", metavar="ID@HOST:PORT,...",
              help="The metadata quorum: every voter's quorum listener (controller_quorum_voters).")
@click.option("--controller-peers", "controller_peers", metavar="ID@HOST:PORT,...",
              help="Every voter's peer listener, where brokers reach the controller (controller_peers).")
@click.option("--cluster-secret-file", type=click.Path(dir_okay=False, exists=True),
              envvar="RAFTLOG_CLUSTER_SECRET_FILE",
              help="A file holding the cluster secret (env RAFTLOG_CLUSTER_SECRET_FILE; or "
                   "RAFTLOG_CLUSTER_SECRET, the key cluster_secret). "
                   "Not a flag of its own: command lines are visible to every user.")
@click.option("--allow-plaintext", "allow_plaintext", flag_value=True, default=None,
              help="Serve listeners on non-loopback addresses without TLS and authentication "
                   "(allow_plaintext; only on a network you trust).")
@click.option("--max-request-bytes", "max_frame_bytes", type=int,
              help="Largest request a client may send (max_frame_bytes; default 64 MiB).")
@click.option("--rack", "broker_rack", metavar="RACK",
              help="This broker's rack or zone (broker_rack, Kafka's broker.rack): replicas are "
                   "spread over racks; consumers with client.rack fetch from their rack.")
@click.option("--log-level", help="DEBUG, INFO, WARNING, ERROR.")
@click.option("--log-file", help="Append log lines here (default: stderr).")
@click.option("--supervisor-pid", type=int, hidden=True,
              help="Stop when this process (our parent: raftlog cluster up) dies.")
def node_start(config_path: str | None, supervisor_pid: int | None, listen_host: str | None,
               cluster_secret_file: str | None, **flags: Any) -> None:
    """Run one node until SIGTERM, SIGHUP or Ctrl-C (then stop cleanly; a second signal
    exits at once).

    Settings come from the TOML file, then RAFTLOG_* environment variables (the key in upper
    case: RAFTLOG_NODE_ID, RAFTLOG_LISTENERS_CLIENT, RAFTLOG_CONTROLLER_QUORUM_VOTERS,
    RAFTLOG_CLUSTER_SECRET, ...), then these flags. A node on its own host needs: node id,
    cluster id, data dir, its listeners (--host), the voters and their peer listeners, and
    the cluster secret. Every node of a cluster gets the same voters, peers, cluster id and
    secret.

    \b
    Examples:
      raftlog node start --config raftlog-data/node-1/node.toml
      raftlog node start --node-id 1 --cluster-id MkU3OEVBNTcwNTJENDM2Qk --data-dir /var/lib/raftlog \\
          --host 10.0.0.1 --cluster-secret-file /etc/raftlog/secret --allow-plaintext \\
          --voters 1@10.0.0.1:9095,2@10.0.0.2:9095,3@10.0.0.3:9095 \\
          --controller-peers 1@10.0.0.1:9094,2@10.0.0.2:9094,3@10.0.0.3:9094
      raftlog node start --config node.toml --client 0.0.0.0:9093 --advertised-host node1.example
    """
    from raftlog.node.config import Listeners
    from raftlog.node.main import main as node_main

    overrides = {k: v for k, v in flags.items() if v is not None}
    if listen_host is not None:
        for name in ("kafka", "client", "peer", "quorum", "http"):
            default = getattr(Listeners(), name)
            overrides.setdefault(f"listeners_{name}", str(type(default)(listen_host, default.port)))
    if cluster_secret_file is not None:
        try:
            overrides["cluster_secret"] = Path(cluster_secret_file).read_text().strip()
        except OSError as exc:
            click.echo(f"raftlog node: --cluster-secret-file: {exc.strerror}", err=True)
            sys.exit(2)
    sys.exit(node_main(config_path, overrides, supervisor_pid=supervisor_pid))


# ----------------------------------------------------------------------------- cluster


@main.group()
def cluster() -> None:
    """Run a local cluster, or look at one."""


@cluster.command("new-id")
def cluster_new_id() -> None:
    """Print a new cluster id (for `raftlog node start --cluster-id` on several hosts; Kafka's
    `kafka-storage random-uuid`).

    \b
    Example:
      raftlog cluster new-id > cluster-id
    """
    from raftlog.node.config import new_cluster_id

    click.echo(new_cluster_id())


@cluster.command("up")
@click.option("--nodes", type=click.IntRange(1, 9), default=None, help="Node count (default 3; fixed once created).")
@click.option("--data-dir", type=click.Path(file_okay=False), default="./raftlog-data", show_default=True,
              help="Where the cluster lives; re-running on it restarts the same cluster.")
@click.option("--base-port", type=click.IntRange(1024, 65000), default=None,
              help="Node i listens on base+10*(i-1)+{0 kafka,1 client,2 peer,3 quorum,4 http,5 schema registry} (default 9092: kcat -b 127.0.0.1:9092).")
@click.option("--restart/--no-restart", default=True, show_default=True,
              help="Restart a node that exits (at most 5 times each).")
@click.option("--console-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Serve the web console on 127.0.0.1 at this port (0: any free port).")
@click.option("--no-console", is_flag=True, help="Do not start the web console.")
@click.option("--secure", is_flag=True,
              help="First run: TLS, SASL/SCRAM, ACLs and mutual-TLS peers; writes <data-dir>/client.properties "
                   "(the admin's login) for --command-config and kcat -F. Later runs keep what the data dir has.")
@friendly
def cluster_up_cmd(nodes: int | None, data_dir: str, base_port: int | None, restart: bool, console_port: int,
                   no_console: bool, secure: bool) -> None:
    """Start N nodes on 127.0.0.1 and supervise them until Ctrl-C.

    Generates a cluster id, a cluster secret and each node's node.toml on first run (in
    the data dir, mode 0600); waits until a controller is elected and every broker is
    registered; prints where each node listens. Each node logs to <data-dir>/node-<i>/node.log.
    The web console (raftlog console) starts beside them, at the URL printed.

    With --secure (first run) it also makes a cluster CA, a certificate per node, an admin
    user with a random password (stored in the cluster only as SCRAM keys) and
    <data-dir>/client.properties (mode 0600) that logs in as it, and prints how to use it.

    \b
    Example:
      raftlog cluster up                      # three nodes, node 1: kafka 9092, native client 9093
      raftlog cluster up --nodes 1 --data-dir /tmp/one --base-port 19092
      raftlog cluster up --secure --data-dir ./secure-data
    """
    import os

    from raftlog.cli.cluster import cluster_up
    from raftlog.node.pidfile import PRIVATE_UMASK

    os.umask(PRIVATE_UMASK)  # its keys, certificates, configs and logs: 0600 / 0700 (pidfile.py)
    code = cluster_up(Path(data_dir), nodes, base_port, out=sys.stdout, restart=restart,
                      console_port=None if no_console else console_port, secure=secure)
    sys.exit(code)


@cluster.command("status")
@admin_options
@click.pass_context
@friendly
def cluster_status_cmd(ctx: click.Context, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Show the voters, the active controller and its epoch, the metadata commit index, and
    every broker (fenced or not, last heartbeat age as the controller saw it).

    Exit 0 with a controller; exit 2 when none answers ("no quorum": the metadata quorum
    has no leader; "controller unreachable"): broker states are then unknown. A node that
    sees no controller (a voter removed from the quorum, say) is not taken at its word: the
    other nodes (--bootstrap and the brokers it names) are asked too.

    \b
    Example:
      raftlog cluster status
      raftlog cluster status --bootstrap 127.0.0.1:9103 --json
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    status = cluster_status(bootstrap, timeout)  # the other nodes too when this one sees no controller
    no_controller = status.view == "local" or status.controller_id is None
    if as_json:
        emit_json({
            "cluster_id": status.cluster_id, "controller_id": status.controller_id,
            "controller_epoch": status.controller_epoch, "commit_index": status.commit_index,
            "voters": list(status.voters), "brokers": list(status.brokers), "view": status.view,
            "controller_problem": status.controller_problem, "answered_by": status.answered_by,
        })  # fmt: skip
        if no_controller:
            ctx.exit(EXIT_NO_CONTROLLER)
        return
    click.echo(f"cluster     {status.cluster_id}")
    if no_controller:
        problem = status.controller_problem or "controller unreachable"
        click.echo(f"controller  NONE: {problem}")
        click.echo(f"            (what follows is node {status.answered_by}'s last metadata, not the "
                   "controller's: broker states are unknown)")
    else:
        click.echo(f"controller  node {status.controller_id}, epoch {status.controller_epoch}")
    click.echo(f"metadata    commit index {status.commit_index}")
    click.echo("")
    rows = [("VOTER", "QUORUM ADDRESS", "PEER ADDRESS", "ROLE")]
    for v in status.voters:
        rows.append((str(v.get("id")), str(v.get("address")), str(v.get("peer") or "-"),
                     "controller" if v.get("leader") and not no_controller else "voter"))
    table(rows)
    click.echo("")
    rows = [("BROKER", "KAFKA ADDRESS", "CLIENT ADDRESS", "STATE", "LAST HEARTBEAT")]
    for b in status.brokers:
        age = b.get("last_heartbeat_age_ms")
        state = "fenced" if b.get("fenced") else "unfenced"
        if no_controller:
            state = f"unknown (last: {state})"
        rows.append((str(b.get("id")), str(b.get("kafka") or "-"), f"{b.get('host')}:{b.get('port')}",
                     state, "-" if age is None else f"{age / 1000:.1f} s ago"))
    table(rows)
    if no_controller:
        click.echo(f"raftlog: {status.controller_problem or 'controller unreachable'}", err=True)
        ctx.exit(EXIT_NO_CONTROLLER)


# ----------------------------------------------------------------------------- topics


@main.group()
def topics() -> None:
    """Create, list, describe, delete and alter topics."""


def _topic_json(t: Any) -> dict[str, Any]:
    return {
        "name": t.name, "internal": t.internal, "configs": dict(t.configs),
        "partitions": [
            {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
             "replicas": list(p.replicas), "preferred_leader": p.preferred_leader,
             "offline": p.offline_reason is not None, "offline_reason": p.offline_reason,
             "last_leader": p.last_leader}
            for p in t.partitions
        ],
    }  # fmt: skip


def _print_topic(t: Any) -> None:
    rf = len(t.partitions[0].replicas) if t.partitions else 0
    configs = ", ".join(f"{k}={v}" for k, v in sorted(t.configs.items())) or "(defaults)"
    kind = "  (internal)" if t.internal else ""
    click.echo(f"topic {t.name}{kind}: {len(t.partitions)} partitions, replication factor {rf}, configs {configs}")
    rows = [("PARTITION", "LEADER", "EPOCH", "REPLICAS", "PREFERRED", "STATE")]
    for p in t.partitions:
        if p.offline_reason is not None:
            leader = "-" if p.last_leader is None else f"- (was {p.last_leader})"
            state = f"OFFLINE: {p.offline_reason}"
        else:
            leader, state = ("-" if p.leader is None else str(p.leader)), "online"
        rows.append((str(p.partition), leader, str(p.leader_epoch), ",".join(map(str, p.replicas)),
                     "-" if p.preferred_leader is None else str(p.preferred_leader), state))
    table(rows)
    offline = sum(1 for p in t.partitions if p.offline_reason is not None)
    if offline:
        click.echo(f"{offline} of {len(t.partitions)} partitions offline (no live leader)")
    counts: dict[int, int] = {}
    for p in t.partitions:
        if p.preferred_leader is not None:
            counts[p.preferred_leader] = counts.get(p.preferred_leader, 0) + 1
    if counts:
        spread = ", ".join(f"broker {b}: {n}" for b, n in sorted(counts.items()))
        click.echo(f"preferred leaders: {spread}")


def _require_topic(admin: Any, name: str) -> None:
    """Fail fast on an unknown topic: the client retries UNKNOWN_TOPIC_OR_PARTITION (it is
    retriable for produce, where metadata may lag) until its deadline. A metadata request
    naming the topic waits briefly on the node for a topic created a moment ago."""
    try:
        admin.describe_topics([name])
    except RaftlogError as exc:
        if isinstance(exc, UnknownTopicOrPartitionError):
            raise CliFailure(f"unknown topic: {name}") from None
        raise


@topics.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=TOPIC_PARTITIONS, show_default=True,
              help="Number of partitions.")
@click.option("--replication-factor", "-r", type=int, default=None,
              help=f"Replicas per partition (at most the live brokers; default min({TOPIC_MAX_REPLICATION_FACTOR}, live brokers), "
                   "as `raftlog produce` creates topics).")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic config, e.g. retention_ms=3600000 (repeatable).")
@admin_options
@click.pass_context
@friendly
def topics_create(ctx: click.Context, name: str, partitions: int, replication_factor: int | None,
                  configs: tuple[str, ...], bootstrap: str, timeout: float, as_json: bool) -> None:
    """Create topic NAME; the controller places replicas and spreads preferred leaders.

    \b
    Example:
      raftlog topics create demo                  # 3 partitions, RF min(3, live brokers)
      raftlog topics create demo --partitions 6 --replication-factor 3
      raftlog topics create events -p 12 -r 3 -c retention_ms=86400000 -c cleanup_policy=delete
      raftlog topics create blobs -c max_message_bytes=8388608      # records up to 8 MiB
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    pairs = parse_pairs(configs, "--config")
    with admin_from_context(ctx) as admin:
        if replication_factor is None:
            try:
                live = sum(1 for b in admin.cluster_status().brokers if not b.get("fenced"))
            except ClusterAuthorizationFailedError:
                # A user without DESCRIBE on the cluster (ACLs): the brokers metadata lists.
                live = len(describe(admin, []).brokers)
            replication_factor = max(1, min(TOPIC_MAX_REPLICATION_FACTOR, live))
        topic = admin.create_topic(name, partitions, replication_factor, pairs or None)
        try:  # with configs and internal flag, and led: the first elections take moments
            topic = await_leaders(admin, name, min(timeout, NEW_TOPIC_LEADERS_WAIT_S)) or topic
        except RaftlogError:
            pass  # created; the first answer is enough to show
    if as_json:
        emit_json(_topic_json(topic))
        return
    click.echo(f"created topic {name}")
    _print_topic(topic)


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@admin_options
@click.pass_context
@friendly
def topics_list(ctx: click.Context, internal: bool, bootstrap: str, timeout: float, as_json: bool) -> None:
    """List topic names.

    \b
    Example:
      raftlog topics list
      raftlog topics list --internal --json
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        names = admin.list_topics(internal=internal)
    if as_json:
        emit_json(names)
        return
    for name in names:
        click.echo(name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@click.option("--internal", is_flag=True, help="With no NAME: include internal topics.")
@admin_options
@click.pass_context
@friendly
def topics_describe(ctx: click.Context, names: tuple[str, ...], internal: bool, bootstrap: str,
                    timeout: float, as_json: bool) -> None:
    """Show partitions, leaders, replicas and preferred leaders of NAMES (default: all).

    A partition with no live leader (none elected, its leader fenced, or no majority of its
    replicas up) shows as OFFLINE with the reason.

    \b
    Example:
      raftlog topics describe demo
      raftlog topics describe --json
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        if names:
            answer = describe(admin, list(names))
            missing = [n for n in names if n in answer.topic_errors]
            if missing:
                raise CliFailure(f"unknown topic{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        else:
            answer = describe(admin, None, internal=internal)
    found = {n: t for n, t in answer.topics.items() if names or internal or not t.internal}
    ordered = [found[n] for n in (names or sorted(found)) if n in found]
    if as_json:
        emit_json({t.name: _topic_json(t) for t in ordered})
        return
    if answer.controller_problem:
        click.echo(f"warning: {answer.controller_problem}; leaders are as last recorded", err=True)
    if not ordered:
        click.echo("no topics (create one: raftlog topics create NAME)")
    for i, t in enumerate(ordered):
        if i:
            click.echo("")
        _print_topic(t)


@topics.command("delete")
@click.argument("name")
@admin_options
@click.pass_context
@friendly
def topics_delete(ctx: click.Context, name: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Delete topic NAME.

    \b
    Example:
      raftlog topics delete demo
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    with admin_from_context(ctx) as admin:
        _require_topic(admin, name)
        admin.delete_topic(name)
    if as_json:
        emit_json({"deleted": name})
    else:
        click.echo(f"deleted topic {name}")


@topics.command("alter")
@click.argument("name")
@click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE", help="Set a config (repeatable).")
@click.option("--delete", "delete_keys", multiple=True, metavar="KEY", help="Back to the default (repeatable).")
@click.option("--partitions", "-p", type=click.IntRange(1), default=None,
              help="Grow the topic to this many partitions (never fewer; keyed records may then "
                   "map to other partitions, as in Kafka).")
@admin_options
@click.pass_context
@friendly
def topics_alter(ctx: click.Context, name: str, set_items: tuple[str, ...], delete_keys: tuple[str, ...],
                 partitions: int | None, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Change topic NAME's configs (prints the configs set explicitly afterwards) and/or its
    partition count (kafka-topics --alter --partitions).

    \b
    Example:
      raftlog topics alter demo --set retention_ms=3600000 --delete segment_bytes
      raftlog topics alter demo --partitions 12
    """
    store(ctx, bootstrap=bootstrap, timeout=timeout)
    if not set_items and not delete_keys and partitions is None:
        raise CliFailure("nothing to change: give --set KEY=VALUE, --delete KEY and/or --partitions N")
    pairs = parse_pairs(set_items, "--set")
    out: dict[str, Any] = {"name": name}
    with admin_from_context(ctx) as admin:
        _require_topic(admin, name)
        if partitions is not None:
            topic = admin.create_partitions(name, partitions)
            out["partitions"] = len(topic.partitions)
        if set_items or delete_keys:
            out["configs"] = admin.alter_configs(name, pairs, list(delete_keys))
    if as_json:
        emit_json(out)
        return
    if "partitions" in out:
        click.echo(f"topic {name} now has {out['partitions']} partitions")
    if "configs" in out:
        click.echo(f"altered topic {name}; configs now: " +
                   (", ".join(f"{k}={v}" for k, v in sorted(out["configs"].items())) or "(defaults)"))


main.add_command(_records.produce_cmd)
main.add_command(_records.consume_cmd)
main.add_command(_records.perf)
main.add_command(_groups.groups)
main.add_command(_share_groups.share_groups)
main.add_command(_partitions.partitions)
main.add_command(_brokers.brokers)
cluster.add_command(_brokers.balance_cmd)
cluster.add_command(_brokers.add_controller_cmd)
cluster.add_command(_brokers.remove_controller_cmd)
main.add_command(_console.console_cmd)
main.add_command(_acls.acls)
main.add_command(_users.users)
main.add_command(_transactions.transactions)
main.add_command(_quotas.quotas)
main.add_command(_features.features)
main.add_command(_schemas.schemas)

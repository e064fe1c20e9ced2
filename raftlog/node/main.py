"""One raftlog node process: a trio nursery of services behind four listeners.

    raftlog node start --config node.toml          (raftlog/cli/main.py parses flags, calls main())

Listeners: kafka (Kafka's wire protocol, `raftlog.node.kafka.listener.serve_kafka`, over the same
services), client (native protocol, `serve()`), peer (the same protocol for broker<->broker
and broker->controller RPCs), quorum (PySyncObj, inside the MetadataService on voters),
http (GET /health, GET /metrics), schema_registry (the Confluent-compatible Schema Registry,
raftlog/node/registry/: HTTP on Hypercorn, its state in `_schemas`).

Composition (`NodeService`, below): `build_services(config, metadata, peers)` lists the
services; each brings `client_handlers` and `peer_handlers` (an op belongs to exactly one
service), a `run()` started with `nursery.start` (so it reports ready), `on_image` (fed by
the MetadataService after every replayed envelope), `health()` (merged into /health) and
`async drain()`: called on SIGTERM/Ctrl-C, before cancellation, for work that makes a stop
clean (the metadata service's controlled shutdown, the replicas' leadership hand-off). Note: `on_image`
may be called before the service's own `run()` has started (the metadata log replays from
disk as soon as the quorum runs): keep the latest image and act on it once running.

Security (issue 16): the peer listener admits members only (peer_security_of); the client
and Kafka listeners get the same TLS/SASL sessions and, with ACLs enabled, every client op
behind the ACL guard (client_security_of, raftlog/node/authorize.py; the Kafka listener runs
the guarded handlers as each connection's principal, raftlog/node/kafka/context.py);
/metrics needs `http_token` when set.

Start order: meta.properties checked (a data dir of another cluster is refused before
anything is written), peer pool, services (quorum bound), peer listener, client listener,
http listener; Kafka listener, then `node_ready` is logged. Stop: the first SIGTERM, SIGINT or SIGHUP (or, with --supervisor-pid, the supervisor's death) drains the
services (bounded by DRAIN_TIMEOUT_S) and cancels the nursery; every service cleans up in
its own `finally` (the quorum syncs its journal) and the process exits 0. A second signal
exits at once with os._exit(128 + signal). Exit codes: 0 clean stop, 1 a failure (logged
with its traceback), 2 a configuration error (one line on stderr).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Protocol

import trio

from groupcoord.service import GroupCoordinatorService
from groupcoord.txn_coordinator import Markers
from groupcoord.txn_service import TxnCoordinatorService
from groupcoord.share_service import ShareService
from metadata.image import MetadataImage
from metadata.quorum import QuorumFactory
from metadata.security_ops import read_bootstrap_credentials
from metadata.service import MetadataService
from partition.internal_topic import LocalInternalTopics
from partition.manager import ReplicaManager
from partition.port import TxnMarker
from raftlog.base.errors import ConfigError
from raftlog.base.eventlog import log_event, setup_logging
from raftlog.base.metrics import MetricsRegistry
from raftlog.base.peer import PeerPool
from raftlog.base.peer_auth import peer_key
from raftlog.base.protocol import Request
from raftlog.base.tls import client_context, server_context
from raftlog.node.auth import ListenerSecurity, client_session_factory, peer_session_factory
from raftlog.node.authorize import AuthorizerCache, Guard, guard_handlers
from raftlog.node.native_groups import group_handlers
from raftlog.node.native_share import share_handlers
from raftlog.node.native_txn import txn_handlers
from raftlog.node.native_partition import partition_handlers
from raftlog.node.metadata_quorum import MetadataQuorum, QuorumConfig
from raftlog.node.dynamic_config import DynamicBrokerConfig
from raftlog.node.config import NodeConfig, ensure_meta_properties, load_config, take_incarnation
from raftlog.node.http import serve_http
from raftlog.node.kafka.context import KafkaContext
from raftlog.node.kafka.fetch_sessions import FetchSessionCache
from raftlog.node.quotas import QuotaManager
from raftlog.node.gate import ConnectionGate, open_files_families, raise_fd_limit
from raftlog.node.kafka.listener import serve_kafka
from raftlog.node.kafka.workers import network_processes_of
from raftlog.node.registry.listener import serve_registry
from raftlog.node.registry.log import ReplicaSchemasLog
from raftlog.node.registry.service import RegistryService
from raftlog.node.registry.auth import basic_authenticator
from raftlog.node.registry.broker import NodeBroker
from raftlog.node.registry.consumers import ConsumerInstances
from raftlog.node.registry.proxy import ProxyContext
from raftlog.node.registry.openapi import rest_openapi
from raftlog.node.pidfile import (
    NODE_PID_FILE, PRIVATE_UMASK, check_private, claim, die_with_parent, parent_gone, release,
)
from raftlog.node.server import serve
from raftlog.node.txn_link import TxnLink
from raftlog.node.settings import (
    group_settings,
    listener_settings,
    metadata_settings,
    share_settings,
    partition_settings,
    txn_settings,
)

__all__ = [
    "NodeService", "build_services", "client_security_of", "main", "merge_handlers", "peer_security_of",
    "quorum_factory", "run_node",
]

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT_S: Final = 5.0
PARENT_POLL_S: Final = 0.5
FD_HEADROOM: Final = 256  # descriptors besides connections and segment files (peers, quorum, logs)
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_CONFIG: Final = 2

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


class NodeService(Protocol):
    name: str
    client_handlers: Mapping[str, Handler]
    peer_handlers: Mapping[str, Handler]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    def on_image(self, image: MetadataImage) -> None: ...

    def health(self) -> dict[str, Any]: ...

    async def drain(self) -> None: ...


def build_services(config: NodeConfig, metadata: MetadataService, peers: PeerPool,
                   registry: MetricsRegistry | None = None) -> list[NodeService]:
    """The node's services, metadata first (started in this order, drained in reverse).
    Broker services join here, e.g.:
        if config.is_broker: services.append(ReplicaManager(partition_settings(config), ...))
    Each service gets its typed settings (settings.py) and its collaborators through their
    ports: the coordinators see the replicas as `InternalTopics` (partition/internal_topic.py)."""
    services: list[NodeService] = [metadata]
    replicas = None
    if config.is_broker:
        replicas = ReplicaManager(partition_settings(config), metadata, peers, registry=registry)
        services.append(replicas)
        topics = LocalInternalTopics(replicas)
        groups = GroupCoordinatorService(group_settings(config), metadata, topics)
        services.append(groups)
        link: list[TxnLink] = []  # the coordinator and its link to the partitions know each other

        async def write_markers(markers: Markers) -> None:
            await link[0].write_markers(markers)

        settings = txn_settings(config)
        txn = TxnCoordinatorService(settings, metadata, topics, new_producer_id=replicas.port.init_producer_id,
                                    write_markers=write_markers)
        link.append(TxnLink(config.node_id, metadata, peers, replicas.port, txn, settings.coordinator.partitions))
        replicas.port.txn_verifier = link[0]
        groups.txn_offsets.txn_verifier = link[0]  # TxnOffsetCommit v5 adds the group's partition (KIP-890)
        txn.txn_offsets = groups.txn_offsets  # the transaction port's TxnOffsetCommit

        async def on_marker(marker: TxnMarker) -> None:  # TxnOffsetCommit's offsets apply at commit
            await groups.txn_offsets.on_marker(marker.topic, marker.partition, marker.producer_id, marker.commit)

        replicas.port.on_marker = on_marker
        services.append(txn)
        services.append(link[0])
        share = ShareService(share_settings(config), metadata, topics, peers, groups)  # KIP-932
        groups.share_groups = share  # DeleteGroups of a share group
        services.append(share)
    services.append(RegistryService(config.node_id, ReplicaSchemasLog(config.node_id, metadata, replicas, peers), peers))
    if config.is_broker:  # the REST proxy's way to the partitions (peer op proxy_call)
        services.append(NodeBroker(config.node_id, metadata.cluster_id, lambda: metadata.image, peers))
    return services


def quorum_factory(config: NodeConfig) -> QuorumFactory | None:
    """What builds this voter's metadata quorum (PySyncObj, through the bridge), or None on a
    broker-only node. The metadata service calls it with its commit and leader callbacks."""
    if not config.is_controller:
        return None
    voters = {v: str(a) for v, a in config.controller_quorum_voters.items()}
    assert config.cluster_secret is not None  # load_config checks it for controllers
    settings = QuorumConfig(
        node_id=config.node_id,
        self_address=voters[config.node_id],
        peers={v: a for v, a in voters.items() if v != config.node_id},
        data_dir=config.data_dir,
        password=config.cluster_secret,
        leader_fallback_timeout_s=config.controller_quorum_fetch_timeout_ms / 1000,
        dial_overrides=dict(config.dial_overrides),
    )
    return partial(MetadataQuorum, settings)


def peer_security_of(config: NodeConfig) -> tuple[PeerPool, ListenerSecurity]:
    """The peer pool and the peer listener's security: members only, always (PROTOCOL.md
    "Peer listener"): mutual TLS with node certificates when `peer_tls`, else the HMAC
    handshake keyed by the cluster secret."""
    assert config.cluster_secret is not None  # load_config requires it of every node
    dial_context = listen_context = None
    key: bytes | None = peer_key(config.cluster_secret)
    if config.peer_tls:
        assert config.tls_cert_file and config.tls_key_file and config.tls_ca_file  # load_config checks
        files = dict(cert_file=str(config.tls_cert_file), key_file=str(config.tls_key_file))
        listen_context = server_context(**files, ca_file=str(config.tls_ca_file), client_auth="required")
        dial_context = client_context(ca_file=str(config.tls_ca_file), **files)
        key = None  # a node certificate is the only proof accepted
    peers = PeerPool(config.node_id, max_frame_bytes=config.peer_max_frame_bytes,
                     dial_overrides=config.dial_overrides, auth_key=key, ssl_context=dial_context)
    return peers, ListenerSecurity(ssl_context=listen_context, new_session=peer_session_factory(key))


def client_security_of(config: NodeConfig, image_of: Callable[[], MetadataImage]) -> ListenerSecurity | None:
    """TLS and/or authentication for the client listener, or None for plain PLAINTEXT
    without ACLs. SCRAM credentials come from the node's current metadata image."""
    if not (config.client_tls or config.client_sasl or config.authorizer_enabled):
        return None
    context = None
    if config.client_tls:
        assert config.tls_cert_file and config.tls_key_file
        client_auth = {"none": "none", "requested": "optional", "required": "required"}[config.ssl_client_auth]
        context = server_context(
            cert_file=str(config.tls_cert_file), key_file=str(config.tls_key_file),
            ca_file=None if config.tls_ca_file is None else str(config.tls_ca_file), client_auth=client_auth,
        )  # fmt: skip
    factory = client_session_factory(
        sasl=config.client_sasl, tls=config.client_tls,
        lookup=lambda user, mechanism: image_of().scram_credential(user, mechanism),
        mechanisms=config.sasl_mechanisms, clock_ms=lambda: int(trio.current_time() * 1000),
        reauth_ms=config.connections_max_reauth_ms,
    )  # fmt: skip
    return ListenerSecurity(ssl_context=context, new_session=factory)


def gate_of(config: NodeConfig, registry: MetricsRegistry) -> ConnectionGate:
    """The node's connection limits and timers (raftlog/node/gate.py), from its settings. The
    descriptor limit is lifted first (raise_fd_limit); a limit still below what the settings
    allow is logged: connections past it fail at accept (EMFILE) instead of being refused."""
    soft, hard = raise_fd_limit()
    wanted = 2 * config.max_connections + config.log_open_files_max + FD_HEADROOM
    if soft < wanted:
        log_event(logger, "fd_limit_low", level=logging.WARNING, soft=soft, hard=hard, wanted=wanted)
    registry.collector(open_files_families)
    return ConnectionGate(
        max_connections=config.max_connections, max_connections_per_ip=config.max_connections_per_ip,
        per_ip_overrides=config.per_ip_overrides, idle_ms=config.connections_max_idle_ms,
        preauth_timeout_ms=config.connections_preauth_timeout_ms, registry=registry,
    )  # fmt: skip


def merge_handlers(tables: Sequence[tuple[str, Mapping[str, Handler]]]) -> dict[str, Handler]:
    """One op -> handler map from (service name, its op -> handler table) pairs. Raises
    ValueError when two services claim one op."""
    merged: dict[str, Handler] = {}
    owner: dict[str, str] = {}
    for name, table in tables:
        for op, handler in table.items():
            if op in merged:
                raise ValueError(f"op {op!r} is claimed by both {owner[op]} and {name}")
            merged[op] = handler
            owner[op] = name
    return merged


async def _watch_signals(signals: Any, stop: trio.Event) -> None:
    async for signum in signals:
        if stop.is_set():
            log_event(logger, "node_exit_now", level=logging.WARNING, signal=signal.Signals(signum).name)
            logging.shutdown()
            os._exit(128 + signum)
        log_event(logger, "node_stopping", signal=signal.Signals(signum).name)
        stop.set()


async def run_node(
    config: NodeConfig,
    cluster_id: str,
    *,
    stop: trio.Event | None = None,
    registry: MetricsRegistry | None = None,
    task_status: trio.TaskStatus[dict[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the node until `stop` is set (then drain and stop cleanly) or a service fails
    (its exception propagates). Reports started with the bound ports {listener: port}."""
    stop = stop if stop is not None else trio.Event()
    registry = registry if registry is not None else MetricsRegistry()
    peers, peer_security = peer_security_of(config)
    bootstrap = () if config.bootstrap_credentials_file is None else await trio.to_thread.run_sync(
        read_bootstrap_credentials, config.bootstrap_credentials_file)
    incarnation = await trio.to_thread.run_sync(take_incarnation, config.data_dir) if config.is_broker else None
    metadata = MetadataService(metadata_settings(config), cluster_id, peers, quorum_factory=quorum_factory(config),
                               registry=registry, bootstrap_credentials=bootstrap, incarnation=incarnation)
    services = build_services(config, metadata, peers, registry)
    client_security = client_security_of(config, lambda: metadata.image)
    authorizer_of = None
    if config.authorizer_enabled:
        authorizers = AuthorizerCache(lambda: metadata.image, super_users=frozenset(config.super_users),
                                      allow_if_no_acls=config.allow_everyone_if_no_acl_found)
        authorizer_of = authorizers.current
    guard = Guard(authorizer_of)  # the one ACL guard of both listeners
    replicas = next((s for s in services if isinstance(s, ReplicaManager)), None)
    groups = next((s for s in services if isinstance(s, GroupCoordinatorService)), None)
    # The typed ports' native adapters (their ops checked by the guard at the port).
    port_handlers = [] if replicas is None else [("partitions", partition_handlers(replicas.port, guard))]
    port_handlers += [] if groups is None else [("group port", group_handlers(groups, guard))]
    txn = next((s for s in services if isinstance(s, TxnCoordinatorService)), None)
    port_handlers += [] if txn is None else [("transaction port", txn_handlers(txn, guard))]
    share = next((s for s in services if isinstance(s, ShareService)), None)
    port_handlers += [] if share is None else [("share port", share_handlers(share, guard))]
    client_handlers = merge_handlers([(s.name, s.client_handlers) for s in services] + port_handlers)
    if authorizer_of is not None:
        client_handlers = guard_handlers(client_handlers, authorizer_of=authorizer_of)
    peer_handlers = merge_handlers([(s.name, s.peer_handlers) for s in services])
    for service in services:
        if service is not metadata:
            metadata.subscribe(service.on_image)
        collect = getattr(service, "collect_metrics", None)
        if collect is not None:  # per-group families, made at scrape time
            registry.collector(collect)
        if isinstance(service, ReplicaManager):  # metadata answers say what the replicas see
            metadata.partition_view = service.local_leader
            metadata.partition_bytes = service.leader_partition_bytes  # the balancer's disk goal
    busy = [s.busy_partitions for s in services if callable(getattr(s, "busy_partitions", None))]
    metadata.busy_partitions = lambda: [row for rows in busy for row in rows()]  # coordinators a move must wait for

    def health() -> dict[str, Any]:
        report: dict[str, Any] = {"node_id": config.node_id, "cluster_id": cluster_id,
                                  "roles": sorted(config.roles)}
        ok = True
        for service in services:
            part = service.health()
            ok = ok and part.get("ok", True) is True
            report[service.name] = part
        report["peers"] = peers.status()
        report["ok"] = ok
        return report

    listen = config.listeners
    gate = gate_of(config, registry)  # one per node: every listener's connections count together
    client_limits, peer_limits = listener_settings(config), listener_settings(config, peer=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(peers.run)
        for service in services:
            await nursery.start(service.run)
        ports = {}
        ports["peer"] = await nursery.start(partial(
            serve, peer_handlers, listen.peer.host, listen.peer.port, name="peer",
            max_frame_bytes=peer_limits.max_frame_bytes, request_timeout_ms=peer_limits.request_timeout_ms,
            max_in_flight=peer_limits.max_in_flight, registry=registry, security=peer_security, gate=gate,
        ))  # fmt: skip
        ports["client"] = await nursery.start(partial(
            serve, client_handlers, listen.client.host, listen.client.port, name="client",
            max_frame_bytes=client_limits.max_frame_bytes, request_timeout_ms=client_limits.request_timeout_ms,
            max_in_flight=client_limits.max_in_flight, registry=registry, security=client_security, gate=gate,
        ))  # fmt: skip
        ports["http"] = await nursery.start(partial(
            serve_http, registry, health, listen.http.host, listen.http.port, token=config.http_token,
        ))  # fmt: skip
        # The Schema Registry: Basic auth with the cluster's SCRAM users when clients authenticate,
        # over TLS when the client listener has it.
        schema_registry = next(s for s in services if isinstance(s, RegistryService))
        broker = next((s for s in services if isinstance(s, NodeBroker)), None)
        proxy = None
        if broker is not None:  # the REST proxy runs the same (guarded) client handlers
            broker.handlers = client_handlers
            proxy = ProxyContext(broker, lambda: schema_registry.state, ConsumerInstances(
                config.consumer_instance_timeout_ms, config.rest_max_consumer_instances))
        ports["schema_registry"] = await nursery.start(partial(
            serve_registry, schema_registry, listen.schema_registry.host, listen.schema_registry.port,
            authenticate=basic_authenticator(lambda: metadata.image, config.sasl_mechanisms) if config.client_sasl else None,
            ssl=(str(config.tls_cert_file), str(config.tls_key_file)) if config.client_tls else None,
            allowed_of=None if authorizer_of is None else (
                lambda principal, host: partial(authorizer_of().authorize, principal, host)),
            metrics=registry, proxy=proxy, openapi=rest_openapi,
        ))  # fmt: skip
        # The Kafka listener has the client listener's security: the same TLS context, SASL
        # sessions (one failed-login throttle and replay window for both) and ACLs.
        kafka_ctx = KafkaContext(
            node_id=config.node_id, cluster_id=cluster_id,
            metadata=metadata,
            replicas=None if replicas is None else replicas.port,
            groups=groups,
            txn=txn,
            share=share,
            auto_create_topics=config.auto_create_topics,
            default_partitions=config.default_partitions,
            default_replication_factor=config.default_replication_factor,
            request_timeout_ms=config.request_timeout_ms,
            node_config=config, authorizer_of=authorizer_of, guard=guard,
            fetch_sessions=FetchSessionCache(config.max_incremental_fetch_session_cache_slots),
            quotas=QuotaManager(),
        )  # fmt: skip
        # Dynamic broker configs (metadata log) over the static ones: now and on every change.
        dynamic_config = DynamicBrokerConfig(config, [kafka_ctx, gate] + ([] if replicas is None else [replicas.port, replicas]))
        dynamic_config.on_image(metadata.image)
        metadata.subscribe(dynamic_config.on_image)
        ports["kafka"] = await nursery.start(partial(
            serve_kafka, kafka_ctx, listen.kafka.host, listen.kafka.port,
            max_request_bytes=client_limits.max_frame_bytes, request_timeout_ms=client_limits.request_timeout_ms,
            max_in_flight=client_limits.max_in_flight, sasl_max_receive_bytes=config.sasl_server_max_receive_size,
            registry=registry, security=client_security, gate=gate,
            network_processes=network_processes_of(config.kafka_network_processes),
        ))  # fmt: skip
        # Everything built so far (modules, services, replicas) lives as long as the node:
        # out of the cyclic GC's reach, a full collection no longer walks it. Measured: a
        # full collection of the node's startup objects took ~17 ms, a pause that reached the
        # produce latency p99; after gc.freeze() ~0.
        gc.collect()
        gc.freeze()
        log_event(
            logger, "node_ready", node_id=config.node_id, cluster_id=cluster_id,
            roles=",".join(sorted(config.roles)), kafka=ports.get("kafka"), client=ports["client"],
            peer=ports["peer"],
            http=ports["http"], schema_registry=ports["schema_registry"], pid=os.getpid(),
        )  # fmt: skip
        task_status.started(ports)
        await stop.wait()
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            for service in reversed(services):
                await service.drain()
        nursery.cancel_scope.cancel()
    log_event(logger, "node_stopped", node_id=config.node_id)


async def _watch_parent(supervisor_pid: int, stop: trio.Event) -> None:
    """Stop (cleanly) once the supervisor is gone: the parent-death signal's twin for where
    prctl is missing, and for a supervisor that died between our fork and the prctl."""
    while not parent_gone(supervisor_pid):
        await trio.sleep(PARENT_POLL_S)
    if not stop.is_set():
        log_event(logger, "node_stopping", reason=f"supervisor {supervisor_pid} is gone")
        stop.set()


async def _main_async(config: NodeConfig, cluster_id: str, supervisor_pid: int | None = None) -> None:
    stop = trio.Event()
    # Signals are caught from the very start, so a SIGTERM during startup is a clean stop too.
    # SIGHUP (the terminal that started us closed) stops the node as SIGTERM does.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, signals, stop)
            if supervisor_pid is not None:
                nursery.start_soon(_watch_parent, supervisor_pid, stop)
            await run_node(config, cluster_id, stop=stop)
            nursery.cancel_scope.cancel()


def main(config_path: str | None, overrides: Mapping[str, Any] | None = None,
         env: Mapping[str, str] | None = None, *, supervisor_pid: int | None = None) -> int:
    """Load the configuration, check the data dir, run the node. Returns the exit code.
    `supervisor_pid`: stop when that process (our parent) dies (pidfile.die_with_parent)."""
    os.umask(PRIVATE_UMASK)  # every file and directory the node makes: 0600 / 0700 (pidfile.py)
    if supervisor_pid is not None and not die_with_parent(supervisor_pid):
        sys.stderr.write(f"raftlog node: supervisor {supervisor_pid} is gone; not starting\n")
        return EXIT_FAILURE
    try:
        config = load_config(config_path, env=os.environ if env is None else env, overrides=overrides)
        config.controller_peer_addresses()  # fail now, not at the first broker RPC
        check_private(config.data_dir)
        cluster_id = ensure_meta_properties(config.data_dir, config.node_id, config.cluster_id)
        pid_path = config.data_dir / NODE_PID_FILE
        claim(pid_path)  # refuses a data dir another live node holds
    except ConfigError as exc:
        sys.stderr.write(f"raftlog node: {exc}\n")
        return EXIT_CONFIG
    setup_logging(config.log_level, file=config.log_file, node_id=config.node_id)
    keep_freed_memory()
    log_event(logger, "node_starting", node_id=config.node_id, cluster_id=cluster_id,
              data_dir=str(config.data_dir), roles=",".join(sorted(config.roles)))
    try:
        trio.run(_main_async, config, cluster_id, supervisor_pid)
    except Exception as exc:  # a service or listener failed: say what, with the traceback
        log_event(logger, "node_failed", level=logging.ERROR, exc_info=exc)
        first = _first(exc)
        sys.stderr.write(f"raftlog node {config.node_id}: failed: {type(first).__name__}: {first}\n")
        return EXIT_FAILURE
    finally:
        release(pid_path)
        logging.shutdown()
    return EXIT_OK


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 32 << 20  # glibc's maximum for this setting on 64-bit
TRIM_THRESHOLD_BYTES: Final = 128 << 20


def keep_freed_memory() -> bool:
    """Ask glibc to serve large buffers (batches, frames) from the heap and to keep up to
    TRIM_THRESHOLD_BYTES of freed heap instead of returning it to the kernel at once.

    Why: by default every buffer over 128 KiB-32 MiB is a fresh mmap and every free of it a
    munmap, so each 256 KiB batch a broker receives, decodes or sends costs ~64 page faults;
    on the VMs we run on each first touch of a page also faults in the host. Measured at RF=3
    with 256 KiB batches: 50-125 page faults per batch per node -> ~0, and 15-30% less CPU per
    batch on the followers. Returns False where there is no glibc mallopt (nothing changes)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def _first(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group

"""Node configuration: one frozen `NodeConfig`, loaded from a TOML file, then `RAFTLOG_*`
environment variables, then command-line overrides (each later source wins per key).

    node_id = 1
    data_dir = "/var/lib/raftlog/1"
    roles = ["controller", "broker"]          # default: both (KRaft "combined" mode)
    cluster_secret = "..."                    # required: peer authentication, PySyncObj password
    [listeners]
    kafka = "127.0.0.1:9092"                  # Kafka's wire protocol (Kafka clients, kcat)
    client = "127.0.0.1:9093"                 # the native protocol (raftlog CLI and client)
    peer = "127.0.0.1:9094"
    quorum = "127.0.0.1:9095"
    http = "127.0.0.1:9096"
    schema_registry = "127.0.0.1:9097"         # the Schema Registry (default: http's host, its port + 1)
    [controller_quorum_voters]                # or "1@host:port,2@host:port" (Kafka's format)
    1 = "127.0.0.1:9095"
    [controller_peers]                        # the voters' peer listeners, same formats
    1 = "127.0.0.1:9094"
    [topic_defaults]
    retention_ms = "604800000"
    [dial_overrides]                          # identity address -> address to dial instead
    "127.0.0.1:9103" = "127.0.0.1:41003"      # (fault-injection proxies; default: none)

Environment: `RAFTLOG_` + the key in upper case with dots as underscores, e.g.
RAFTLOG_NODE_ID, RAFTLOG_LISTENERS_CLIENT, RAFTLOG_ROLES="broker",
RAFTLOG_CONTROLLER_QUORUM_VOTERS="1@h:9095,2@h:9105", RAFTLOG_CONTROLLER_PEERS="1@h:9094,...".
`RAFTLOG_*` names that are not config
keys are ignored (client tools use that prefix too). Overrides: a mapping of key -> value
with dotted keys ("listeners.client") or nested maps; None values are skipped so argparse
defaults can be passed as they are.

Invariants:
* Every error is a ConfigError whose message names the key and where its value came from
  (the file path, the environment variable or the override). Unknown keys in the file or in
  overrides are errors, with a suggestion when the key looks like a typo.
* A loaded NodeConfig is valid: ports in range, listeners distinct, a controller is one of
  the voters and its quorum listener is its voter address, every node has a secret.
* `controller_peers`, when given, names exactly the voters: brokers dial the active
  controller's peer listener there (register, heartbeat, leader reports, producer ids), and
  broker-only nodes pull the metadata log from it. A node finds every voter's peer address
  with `controller_peer_addresses()`, which raises ConfigError for a missing one (its own
  entry defaults to its own advertised peer listener, so a one-voter cluster needs none).
* `dial_overrides` maps a peer's identity address ("host:port", as listed in the voters,
  controller_peers or a broker registration) to the address this node dials to reach it.
  The identity stays the real address everywhere (PySyncObj names voters by it, brokers
  register it); only the TCP connect goes elsewhere, e.g. to a per-link proxy of the fault
  harness. Keys and values are normalised "host:port" strings; empty by default.
* `cluster_secret` and `http_token` never appear in repr() or logs.
* Security (issue 16; PROTOCOL.md "Authentication and authorization"): `security_protocol`
  of the client and Kafka listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; TLS needs `tls_cert_file`
  and `tls_key_file`), `sasl_mechanisms`, `ssl_client_auth` (none/requested/required: mTLS
  principals, checked against `tls_ca_file`), `peer_tls` (mutual TLS with node certificates on
  the peer listener; without it peers use the HMAC handshake), `acls_enabled` (default: on
  whenever the client listener authenticates), `super_users`, `http_token` (/metrics needs it
  when set), `bootstrap_credentials_file` (salted SCRAM keys the controller seeds into an
  empty credential store; `raftlog cluster up --secure` writes it). Safe default: a listener bound to a non-loopback address without TLS and
  authentication (client: SASL_SSL or SSL with required client certificates; peer: peer_tls;
  http: http_token; kafka: as client, whose settings it shares; schema_registry: SASL_SSL,
  whose TLS and users it takes for HTTPS and Basic auth) refuses to start unless
  `allow_plaintext = true`.
* `ensure_meta_properties` ties a data dir to one (cluster_id, node_id) for life, like
  Kafka's meta.properties; it writes the file atomically and fsyncs it and its directory.

Size (issue 13's ~800-line rule): over it because it is one table of node settings with
their validation and their file, environment and flag loading; the security checks are the
seam to cut along.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import ipaddress
import os
import random
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from metadata.topic_config import COMPRESSION_TYPES
from raftlog.base.errors import ConfigError
from raftlog.base.protocol import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES_LIMIT, PEER_MAX_FRAME_BYTES

__all__ = [
    "HostPort",
    "Listeners",
    "NodeConfig",
    "ROLES",
    "ENV_PREFIX",
    "META_PROPERTIES",
    "parse_host_port",
    "parse_voters",
    "env_name",
    "load_config",
    "config_to_toml",
    "ensure_meta_properties",
    "take_incarnation",
    "new_cluster_id",
]

ROLES: Final = frozenset({"controller", "broker"})
ENV_PREFIX: Final = "RAFTLOG_"
META_PROPERTIES: Final = "meta.properties"
INCARNATION_FILE: Final = "broker.incarnation"  # the incarnation id that runs (ran) here
META_VERSION: Final = 1
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MIN_SECRET_CHARS: Final = 16
MAX_NODE_ID: Final = (1 << 31) - 1
_CLUSTER_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
# A move's catch-up on a broker without its own setting (docs/elastic.md "The default throttle")
DEFAULT_FOLLOWER_REPLICATION_THROTTLED_RATE: Final = 10 << 20


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_host_port(text: str | HostPort, *, min_port: int = 0) -> HostPort:
    """Parse "host:port" (IPv6 as "[::1]:port"). Raises ValueError naming the problem."""
    if isinstance(text, HostPort):
        text = str(text)
    if not isinstance(text, str):
        raise ValueError(f"expected a \"host:port\" string, got {type(text).__name__}")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"expected \"[ipv6]:port\", got {text!r}")
        port_text = rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ValueError(f"expected \"host:port\", got {text!r}")
        if ":" in host:
            raise ValueError(f"write an IPv6 address as \"[addr]:port\", got {text!r}")
    if not port_text.isdigit():
        raise ValueError(f"port must be a number, got {port_text!r} in {text!r}")
    port = int(port_text)
    if not min_port <= port <= 65535:
        raise ValueError(f"port {port} is out of range {min_port}..65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"host must not contain spaces: {text!r}")
    return HostPort(host, port)


def parse_voters(value: Any) -> dict[int, HostPort]:
    """Parse controller quorum voters: a map {id: "host:port"} (ids may be strings, as TOML
    keys are) or Kafka's "id@host:port,id@host:port". Raises ValueError."""
    if isinstance(value, str):
        pairs: list[tuple[Any, Any]] = []
        for item in value.split(","):
            voter_id, at, address = item.strip().partition("@")
            if not at:
                raise ValueError(f"expected \"id@host:port\", got {item.strip()!r}")
            pairs.append((voter_id, address))
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise ValueError(f"expected a table or \"id@host:port,...\", got {type(value).__name__}")
    voters: dict[int, HostPort] = {}
    for raw_id, address in pairs:
        voter_id = _to_int(raw_id)
        if not 0 <= voter_id <= MAX_NODE_ID:
            raise ValueError(f"voter id {voter_id} is out of range 0..{MAX_NODE_ID}")
        if voter_id in voters:
            raise ValueError(f"voter {voter_id} is listed twice")
        voters[voter_id] = parse_host_port(address, min_port=1)
    if not voters:
        raise ValueError("at least one voter is needed")
    addresses = [str(a) for a in voters.values()]
    if len(set(addresses)) != len(addresses):
        raise ValueError("two voters share an address")
    return voters


LISTENER_NAMES: Final = ("kafka", "client", "peer", "quorum", "http", "schema_registry")


@dataclass(frozen=True, slots=True)
class Listeners:
    """Where the node listens. Port 0 (not allowed for `quorum`) picks a free port."""

    client: HostPort = HostPort("127.0.0.1", 9093)
    peer: HostPort = HostPort("127.0.0.1", 9094)
    quorum: HostPort = HostPort("127.0.0.1", 9095)
    http: HostPort = HostPort("127.0.0.1", 9096)
    kafka: HostPort = HostPort("127.0.0.1", 9092)  # last: callers pass the others positionally
    # The Confluent-compatible Schema Registry (raftlog/node/registry/). Default (None): the
    # http listener's host and the next port (9097 beside the default 9096, as `cluster up`
    # lays node 1 out; 0 when http's is 0). Confluent's 8081 would clash between the nodes of
    # one host.
    schema_registry: HostPort = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.schema_registry is None:
            port = self.http.port + 1 if 0 < self.http.port < 65535 else 0
            object.__setattr__(self, "schema_registry", HostPort(self.http.host, port))


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    data_dir: Path
    cluster_id: str | None = None
    roles: frozenset[str] = ROLES
    listeners: Listeners = Listeners()
    # The host other nodes and clients should use when a listener binds a wildcard address.
    advertised_host: str | None = None
    controller_quorum_voters: Mapping[int, HostPort] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    controller_peers: Mapping[int, HostPort] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    # The same on every node (required): authenticates peers (the HMAC handshake) and is the
    # metadata quorum's (PySyncObj's) password.
    cluster_secret: str | None = dataclasses.field(default=None, repr=False)
    log_level: str = "INFO"
    log_file: Path | None = None
    # A broker heartbeats to the active controller this often.
    heartbeat_ms: int = 1500
    # A broker whose heartbeats stop this long is fenced (more than heartbeat_ms).
    session_timeout_ms: int = 9000
    # A partition replica that hears no leader this long runs for leader.
    election_timeout_ms: int = 1000
    # The metadata quorum (PySyncObj): its leader steps down after this long without a
    # majority's answers, and a voter runs after 0.4-1.4 times it without the leader's
    # (Kafka's controller.quorum.fetch.timeout.ms; raftlog's default keeps PySyncObj's
    # 0.4-1.4 s). Longer rides out a starved process (10,000 partitions on a loaded machine).
    controller_quorum_fetch_timeout_ms: int = 1000
    # The longest a listener works on one request before it answers REQUEST_TIMED_OUT.
    request_timeout_ms: int = 30000
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    # Largest frame on the peer listener (replication between nodes).
    peer_max_frame_bytes: int = PEER_MAX_FRAME_BYTES
    # Connections at once on the client and Kafka listeners together (Kafka's max.connections).
    max_connections: int = 1024
    max_in_flight: int = 256  # per connection
    # Worker processes that accept and carry the Kafka listener's connections (Kafka's
    # num.network.threads, as processes; issue 46): 0 none (one process), -1 (the default)
    # one per CPU the node may use beside the main's, at most 4 (none on one CPU).
    kafka_network_processes: int = -1
    # Partitions and replication factor of a topic created without them (Kafka's num.partitions,
    # default.replication.factor).
    default_partitions: int = 1
    default_replication_factor: int = 1
    # Kafka's auto.create.topics.enable: a Kafka Metadata request naming an unknown topic
    # creates it with default_partitions / default_replication_factor.
    auto_create_topics: bool = True
    # Kafka's broker compression.type: the codec the leader stores produced batches in when a
    # topic's own compression.type is `producer` (producer: as the producer sent them).
    compression_type: str = "producer"
    # The scrubber (partition/manager.py): re-read every sealed segment at this pace (0: off),
    # starting a pass at most every scrub_interval_ms.
    scrub_bytes_per_s: int = 4 << 20
    scrub_interval_ms: int = 3_600_000
    # Sealed segments' files kept open at most (an LRU; partition/segment.py "Open files"):
    # the active segments' files stay open besides, one per partition.
    log_open_files_max: int = 512
    # The group coordinator (Kafka's group.* names; lower than Kafka's 6000 / 3000 ms so a
    # consumer may use short sessions and a first rebalance is quick).
    group_min_session_timeout_ms: int = 1_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 1_000
    # Cluster-wide defaults of topic settings ({retention_ms = "..."}).
    topic_defaults: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    # Identity address -> address to dial instead (the fault harness's proxies; default none).
    dial_overrides: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    # Of the client and Kafka listeners; TLS needs tls_cert_file and tls_key_file.
    security_protocol: str = "PLAINTEXT"
    # SASL mechanisms offered (PLAIN over TLS only).
    sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
    # The node's TLS certificate and key (PEM), and the CA that client certificates and peers
    # are checked against.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    ssl_client_auth: str = "none"
    peer_tls: bool = False
    acls_enabled: bool | None = None
    # Principals ("User:alice") that every ACL check allows.
    super_users: tuple[str, ...] = ()
    # Kafka's rule: a resource with no ACL at all is open to everyone when true.
    allow_everyone_if_no_acl_found: bool = False
    allow_plaintext: bool = False
    http_token: str | None = dataclasses.field(default=None, repr=False)
    bootstrap_credentials_file: Path | None = None
    # -- connection limits (issue 39; Kafka's names; raftlog/node/gate.py) --
    # max_connections above is Kafka's broker-wide max.connections: the client and Kafka
    # listeners together; the peer listener has a budget of its own of the same size.
    max_connections_per_ip: int = 256  # over every listener (Kafka's max.connections.per.ip)
    max_connections_per_ip_overrides: str = ""  # "address:count,..." (normalised)
    connections_max_idle_ms: int = 600_000  # 0: off
    connections_preauth_timeout_ms: int = 10_000  # accept to a complete session; 0: off
    connections_max_reauth_ms: int = 0  # KIP-368 SASL session lifetime; 0: off
    sasl_server_max_receive_size: int = 524_288  # Kafka listener, before the login (bytes)
    # -- KIP-227 fetch sessions (issue 41; raftlog/node/kafka/fetch_sessions.py) --
    max_incremental_fetch_session_cache_slots: int = 1000  # 0: no sessions (every fetch full)
    # -- KIP-848 consumer groups (issue 43; Kafka's group.consumer.* names; groupcoord/consumer_group_ops.py) --
    group_consumer_assignor: str = "uniform"  # the server-side assignor when members name none
    group_consumer_session_timeout_ms: int = 45_000  # a member silent this long is fenced
    group_consumer_heartbeat_interval_ms: int = 5_000  # told to members in every heartbeat answer
    group_consumer_migration_policy: str = "bidirectional"  # which online classic <-> consumer conversions are allowed
    # the REST proxy (issue 45): Confluent's consumer.instance.timeout.ms, and a bound on instances
    consumer_instance_timeout_ms: int = 300_000
    rest_max_consumer_instances: int = 1000
    # -- an elastic cluster (issue 44; docs/elastic.md) --
    broker_rack: str | None = None  # Kafka's broker.rack: placement spreads replicas over racks
    partition_autobalancing_mode: str = "off"  # off | node_add | continuous (Redpanda's setting)
    # continuous: a broker fenced this long has its replicas moved off (Redpanda's
    # partition_autobalancing_node_availability_timeout_sec)
    partition_autobalancing_node_availability_timeout_ms: int = 900_000
    # the balancer's bytes goal moves nothing while brokers' bytes differ by at most this (or
    # by the tolerance x mean, when more): a move copies data, worth it only for a real gap
    partition_autobalancing_min_gap_bytes: int = 64 << 20
    # bytes/s the replicas this broker adds by a move take in catching up; 0: no limit
    # (Kafka's follower.replication.throttled.rate; partition/throttle.py). Default 10 MiB/s,
    # as Redpanda's raft_learner_recovery_rate has one (docs/elastic.md "The default throttle")
    follower_replication_throttled_rate: int = DEFAULT_FOLLOWER_REPLICATION_THROTTLED_RATE
    # bytes/s this broker's leaders send to the replicas a move adds; 0: no limit
    # (Kafka's leader.replication.throttled.rate; partition/throttle.py)
    leader_replication_throttled_rate: int = 0
    # -- transactions (issue 42; Kafka's name; groupcoord/txn_coordinator.py) --
    transaction_max_timeout_ms: int = 900_000  # longest transaction timeout a producer may ask
    # how often timed-out transactions are looked for (and aborted): Kafka's 10 s, so a
    # transaction outlives its timeout by up to this, as on Kafka
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # -- KIP-932 share groups (issue 43; Kafka's group.share.* names; partition/share_partition.py) --
    group_share_record_lock_duration_ms: int = 30_000  # an acquired record's lock
    group_share_delivery_count_limit: int = 5  # deliveries before a record is archived
    group_share_partition_max_record_locks: int = 2000  # in-flight records per share partition
    group_share_session_timeout_ms: int = 45_000  # a share member silent this long is removed
    group_share_heartbeat_interval_ms: int = 5_000  # told to share members in every heartbeat answer
    # The keys set by the config file, environment or flags (load_config), as `_KEYS` names
    # them ("listeners.kafka"): DescribeConfigs reports these STATIC_BROKER_CONFIG, the rest
    # DEFAULT_CONFIG (Kafka's sources). Not a setting: never compared, never written.
    configured: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False)

    @property
    def per_ip_overrides(self) -> dict[str, int]:
        """max_connections_per_ip_overrides as {address: count}."""
        return _parse_per_ip_overrides(self.max_connections_per_ip_overrides)

    @property
    def client_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def client_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def authorizer_enabled(self) -> bool:
        """ACLs are checked: by default whenever the client listener authenticates."""
        if self.acls_enabled is not None:
            return self.acls_enabled
        return self.client_sasl or self.ssl_client_auth != "none"

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def advertised(self, listener: str) -> HostPort:
        """The address others should dial for `listener` ("client", "peer", "quorum",
        "http"): the listener's, with `advertised_host` replacing a wildcard host."""
        bound: HostPort = getattr(self.listeners, listener)
        if self.advertised_host is not None and bound.host in _WILDCARD_HOSTS:
            return HostPort(self.advertised_host, bound.port)
        return bound

    def controller_peer_addresses(self) -> dict[int, HostPort]:
        """{voter id: its peer listener}. This node's own entry defaults to its advertised
        peer listener. Raises ConfigError naming the voters whose peer address is unknown."""
        peers = dict(self.controller_peers)
        if self.is_controller and self.node_id not in peers:
            peers[self.node_id] = self.advertised("peer")
        missing = sorted(set(self.controller_quorum_voters) - set(peers))
        if missing:
            raise ConfigError(
                f"controller_peers: no peer address for voter(s) {missing}; brokers reach the "
                f"active controller there (e.g. controller_peers = \"1@127.0.0.1:9093,...\", "
                f"or {env_name('controller_peers')})"
            )
        return {voter: peers[voter] for voter in sorted(self.controller_quorum_voters)}


# ---- converters: raw value (TOML value, env string or override) -> typed value ----------


def _to_int(value: Any) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ValueError(f"expected an integer, got {value!r:.60}")


def _to_bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {value!r:.60}")


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _to_nonempty_str(value: Any) -> str:
    text = _to_str(value)
    if not text:
        raise ValueError("must not be empty")
    return text


def _to_rack(value: Any) -> str:
    text = _to_nonempty_str(value)
    if len(text) > 64:  # metadata.records.MAX_ID_CHARS
        raise ValueError(f"at most 64 characters, got {len(text)}")
    return text


def _to_path(value: Any) -> Path:
    if isinstance(value, Path):
        return value
    return Path(_to_nonempty_str(value)).expanduser()


def _to_roles(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple | set | frozenset):
        items = [_to_str(v) for v in value]
    else:
        raise ValueError(f"expected a list of roles, got {type(value).__name__}")
    unknown = sorted(set(items) - ROLES)
    if unknown:
        raise ValueError(f"unknown role(s) {unknown}; roles are {sorted(ROLES)}")
    if not items:
        raise ValueError(f"at least one role is needed, from {sorted(ROLES)}")
    return frozenset(items)


def _to_log_level(value: Any) -> str:
    level = _to_str(value).upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {value!r}; use one of {list(LOG_LEVELS)}")
    return level


def _to_str_map(value: Any) -> Mapping[str, str]:
    if isinstance(value, str):
        result: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            key, eq, text = item.partition("=")
            if not eq or not key:
                raise ValueError(f"expected \"key=value,...\", got {item!r}")
            result[key.strip()] = text.strip()
        return MappingProxyType(result)
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table, got {type(value).__name__}")
    result = {}
    for key, item in value.items():
        if isinstance(item, bool):
            result[str(key)] = "true" if item else "false"
        elif isinstance(item, int | str):
            result[str(key)] = str(item)
        else:
            raise ValueError(f"value of {key!r} must be a string or integer")
    return MappingProxyType(result)


def _to_dial_overrides(value: Any) -> Mapping[str, str]:
    """{"host:port": "host:port"} from a table or "from=to,from=to"; both sides normalised."""
    raw = _to_str_map(value)
    result: dict[str, str] = {}
    for identity, dial in raw.items():
        try:
            key = str(parse_host_port(identity, min_port=1))
            target = str(parse_host_port(dial, min_port=1))
        except ValueError as exc:
            raise ValueError(f"{identity!r}: {exc}") from None
        if key in result:
            raise ValueError(f"{key} is listed twice")
        result[key] = target
    return MappingProxyType(result)


def _parse_per_ip_overrides(text: str) -> dict[str, int]:
    """{address: count} from Kafka's "address:count,address:count" (IPv6 as "[::1]:5")."""
    result: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, colon, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"expected \"address:count,...\", got {item!r:.60}")
        if host in result:
            raise ValueError(f"{host} is listed twice")
        result[host] = int(count)
    return result


def _to_per_ip_overrides(value: Any) -> str:
    """Kafka's max.connections.per.ip.overrides ("address:count,...") or a table {address =
    count}, normalised to "address:count,..." (so the config stays one plain string)."""
    if isinstance(value, Mapping):
        value = ",".join(f"{k}:{_to_int(v)}" for k, v in value.items())
    parsed = _parse_per_ip_overrides(_to_str(value))
    return ",".join(f"[{h}]:{n}" if ":" in h else f"{h}:{n}" for h, n in parsed.items())


SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def _to_choice(value: Any, choices: tuple[str, ...], *, upper: bool = False) -> str:
    text = _to_str(value).strip()
    text = text.upper() if upper else text.lower()
    if text not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r:.40}")
    return text


def _str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [_to_str(v).strip() for v in value]
    raise ValueError(f"expected a list, got {type(value).__name__}")


def _to_choices(value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    items = [_to_choice(v, choices, upper=True) for v in _str_list(value)]
    if not items:
        raise ValueError(f"at least one of {', '.join(choices)}")
    return tuple(dict.fromkeys(items))


def _to_principals(value: Any) -> tuple[str, ...]:
    items = _str_list(value)
    for item in items:
        if not item.startswith("User:") or len(item) <= len("User:"):
            raise ValueError(f"a principal is 'User:<name>', got {item!r:.60}")
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True, slots=True)
class _Key:
    convert: Callable[[Any], Any]
    field: str  # NodeConfig field, or "listeners.<name>"


_KEYS: Final[dict[str, _Key]] = {
    "node_id": _Key(_to_int, "node_id"),
    "data_dir": _Key(_to_path, "data_dir"),
    "cluster_id": _Key(_to_nonempty_str, "cluster_id"),
    "roles": _Key(_to_roles, "roles"),
    "listeners.kafka": _Key(parse_host_port, "listeners.kafka"),
    "listeners.client": _Key(parse_host_port, "listeners.client"),
    "listeners.peer": _Key(parse_host_port, "listeners.peer"),
    "listeners.quorum": _Key(lambda v: parse_host_port(v, min_port=1), "listeners.quorum"),
    "listeners.http": _Key(parse_host_port, "listeners.http"),
    "listeners.schema_registry": _Key(parse_host_port, "listeners.schema_registry"),
    "advertised_host": _Key(_to_nonempty_str, "advertised_host"),
    "controller_quorum_voters": _Key(
        lambda v: MappingProxyType(parse_voters(v)), "controller_quorum_voters"
    ),
    "controller_peers": _Key(
        lambda v: MappingProxyType(parse_voters(v)), "controller_peers"
    ),
    "cluster_secret": _Key(_to_nonempty_str, "cluster_secret"),
    "log_level": _Key(_to_log_level, "log_level"),
    "log_file": _Key(_to_path, "log_file"),
    "heartbeat_ms": _Key(_to_int, "heartbeat_ms"),
    "session_timeout_ms": _Key(_to_int, "session_timeout_ms"),
    "election_timeout_ms": _Key(_to_int, "election_timeout_ms"),
    "controller_quorum_fetch_timeout_ms": _Key(_to_int, "controller_quorum_fetch_timeout_ms"),
    "request_timeout_ms": _Key(_to_int, "request_timeout_ms"),
    "max_frame_bytes": _Key(_to_int, "max_frame_bytes"),
    "peer_max_frame_bytes": _Key(_to_int, "peer_max_frame_bytes"),
    "max_connections": _Key(_to_int, "max_connections"),
    "max_in_flight": _Key(_to_int, "max_in_flight"),
    "kafka_network_processes": _Key(_to_int, "kafka_network_processes"),
    "default_partitions": _Key(_to_int, "default_partitions"),
    "default_replication_factor": _Key(_to_int, "default_replication_factor"),
    "auto_create_topics": _Key(_to_bool, "auto_create_topics"),
    "compression_type": _Key(lambda v: _to_choice(v, COMPRESSION_TYPES), "compression_type"),
    "scrub_bytes_per_s": _Key(_to_int, "scrub_bytes_per_s"),
    "scrub_interval_ms": _Key(_to_int, "scrub_interval_ms"),
    "log_open_files_max": _Key(_to_int, "log_open_files_max"),
    "group_min_session_timeout_ms": _Key(_to_int, "group_min_session_timeout_ms"),
    "group_max_session_timeout_ms": _Key(_to_int, "group_max_session_timeout_ms"),
    "group_initial_rebalance_delay_ms": _Key(_to_int, "group_initial_rebalance_delay_ms"),
    "topic_defaults": _Key(_to_str_map, "topic_defaults"),
    "dial_overrides": _Key(_to_dial_overrides, "dial_overrides"),
    "security_protocol": _Key(lambda v: _to_choice(v, SECURITY_PROTOCOLS, upper=True), "security_protocol"),
    "sasl_mechanisms": _Key(lambda v: _to_choices(v, SASL_MECHANISMS), "sasl_mechanisms"),
    "tls_cert_file": _Key(_to_path, "tls_cert_file"),
    "tls_key_file": _Key(_to_path, "tls_key_file"),
    "tls_ca_file": _Key(_to_path, "tls_ca_file"),
    "ssl_client_auth": _Key(lambda v: _to_choice(v, ("none", "requested", "required")), "ssl_client_auth"),
    "peer_tls": _Key(_to_bool, "peer_tls"),
    "acls_enabled": _Key(_to_bool, "acls_enabled"),
    "super_users": _Key(_to_principals, "super_users"),
    "allow_everyone_if_no_acl_found": _Key(_to_bool, "allow_everyone_if_no_acl_found"),
    "allow_plaintext": _Key(_to_bool, "allow_plaintext"),
    "http_token": _Key(_to_nonempty_str, "http_token"),
    "bootstrap_credentials_file": _Key(_to_path, "bootstrap_credentials_file"),
    # connection limits (issue 39)
    "max_connections_per_ip": _Key(_to_int, "max_connections_per_ip"),
    "max_connections_per_ip_overrides": _Key(_to_per_ip_overrides, "max_connections_per_ip_overrides"),
    "connections_max_idle_ms": _Key(_to_int, "connections_max_idle_ms"),
    "connections_preauth_timeout_ms": _Key(_to_int, "connections_preauth_timeout_ms"),
    "connections_max_reauth_ms": _Key(_to_int, "connections_max_reauth_ms"),
    "sasl_server_max_receive_size": _Key(_to_int, "sasl_server_max_receive_size"),
    "max_incremental_fetch_session_cache_slots": _Key(_to_int, "max_incremental_fetch_session_cache_slots"),
    # KIP-848 consumer groups (issue 43)
    "group_consumer_assignor": _Key(lambda v: _to_choice(v, ("uniform", "range")), "group_consumer_assignor"),
    "group_consumer_session_timeout_ms": _Key(_to_int, "group_consumer_session_timeout_ms"),
    "group_consumer_heartbeat_interval_ms": _Key(_to_int, "group_consumer_heartbeat_interval_ms"),
    "group_consumer_migration_policy": _Key(
        lambda v: _to_choice(v, ("bidirectional", "upgrade", "downgrade", "disabled")), "group_consumer_migration_policy"),
    "consumer_instance_timeout_ms": _Key(_to_int, "consumer_instance_timeout_ms"),
    "rest_max_consumer_instances": _Key(_to_int, "rest_max_consumer_instances"),
    # an elastic cluster (issue 44)
    "broker_rack": _Key(_to_rack, "broker_rack"),
    "partition_autobalancing_mode": _Key(lambda v: _to_choice(v, ("off", "node_add", "continuous")),
                                         "partition_autobalancing_mode"),
    "partition_autobalancing_node_availability_timeout_ms": _Key(
        _to_int, "partition_autobalancing_node_availability_timeout_ms"),
    "partition_autobalancing_min_gap_bytes": _Key(_to_int, "partition_autobalancing_min_gap_bytes"),
    "follower_replication_throttled_rate": _Key(_to_int, "follower_replication_throttled_rate"),
    "leader_replication_throttled_rate": _Key(_to_int, "leader_replication_throttled_rate"),
    "transaction_max_timeout_ms": _Key(_to_int, "transaction_max_timeout_ms"),
    "transaction_abort_timed_out_transaction_cleanup_interval_ms":
        _Key(_to_int, "transaction_abort_timed_out_transaction_cleanup_interval_ms"),
    # KIP-932 share groups (issue 43)
    **{k: _Key(_to_int, k) for k in ("group_share_record_lock_duration_ms", "group_share_delivery_count_limit",
                                     "group_share_partition_max_record_locks", "group_share_session_timeout_ms",
                                     "group_share_heartbeat_interval_ms")},
}
_NESTED_TABLES: Final = ("listeners",)  # tables whose keys are config keys themselves
_INT_RANGES: Final = {
    "node_id": (0, MAX_NODE_ID),
    "heartbeat_ms": (1, 3_600_000),
    "session_timeout_ms": (1, 3_600_000),
    "election_timeout_ms": (10, 3_600_000),
    "controller_quorum_fetch_timeout_ms": (800, 600_000),  # PySyncObj: 0.4x above 3 heartbeats
    "request_timeout_ms": (1, 3_600_000),
    "max_frame_bytes": (1024, MAX_FRAME_BYTES_LIMIT),
    "peer_max_frame_bytes": (1024, MAX_FRAME_BYTES_LIMIT),
    "max_connections": (1, 1_000_000),
    "max_in_flight": (1, 65_536),
    "kafka_network_processes": (-1, 64),
    "default_partitions": (1, 100_000),
    "default_replication_factor": (1, 1_000),
    "scrub_bytes_per_s": (0, 1 << 40),
    "scrub_interval_ms": (1, 365 * 24 * 3_600_000),
    "log_open_files_max": (1, 1_000_000),
    "group_min_session_timeout_ms": (1, 3_600_000),
    "group_max_session_timeout_ms": (1, 3_600_000),
    "group_initial_rebalance_delay_ms": (0, 3_600_000),
    # connection limits (issue 39)
    "max_connections_per_ip": (0, 1_000_000),
    "connections_max_idle_ms": (0, 7 * 24 * 3_600_000),
    "connections_preauth_timeout_ms": (0, 3_600_000),
    "connections_max_reauth_ms": (0, 365 * 24 * 3_600_000),
    "sasl_server_max_receive_size": (1024, MAX_FRAME_BYTES_LIMIT),
    "max_incremental_fetch_session_cache_slots": (0, 1_000_000),
    "group_consumer_session_timeout_ms": (100, 3_600_000),
    "group_consumer_heartbeat_interval_ms": (10, 3_600_000),
    "consumer_instance_timeout_ms": (1000, 7 * 24 * 3_600_000),
    "rest_max_consumer_instances": (1, 100_000),
    "partition_autobalancing_node_availability_timeout_ms": (1_000, 365 * 24 * 3_600_000),
    "partition_autobalancing_min_gap_bytes": (0, 1 << 50),
    "follower_replication_throttled_rate": (0, 1 << 40),
    "leader_replication_throttled_rate": (0, 1 << 40),
    "transaction_max_timeout_ms": (1, 2**31 - 1),
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": (1, 2**31 - 1),
    # Kafka's bounds for group.share.* (GroupCoordinatorConfig / ShareGroupConfig)
    "group_share_record_lock_duration_ms": (1000, 3_600_000),
    "group_share_delivery_count_limit": (2, 10),
    "group_share_partition_max_record_locks": (100, 10_000),
    "group_share_session_timeout_ms": (100, 3_600_000),
    "group_share_heartbeat_interval_ms": (10, 3_600_000),
}


def env_name(key: str) -> str:
    """The environment variable of a config key: listeners.client -> RAFTLOG_LISTENERS_CLIENT."""
    return ENV_PREFIX + key.upper().replace(".", "_")


def _unknown_key(key: str, source: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(_KEYS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{source}: unknown key '{key}'{hint}")


def _flatten(table: Mapping[str, Any], source: str, *, aliases: bool = False) -> dict[str, Any]:
    # aliases: overrides may spell a nested key with an underscore (listeners_client), as
    # argparse destinations do.
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if key in _NESTED_TABLES:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {key}: expected a table")
            for sub_key, sub_value in value.items():
                dotted = f"{key}.{sub_key}"
                if dotted not in _KEYS:
                    raise _unknown_key(dotted, source)
                flat[dotted] = sub_value
        else:
            dotted = key if key in _KEYS or not aliases else key.replace("_", ".", 1)
            if dotted not in _KEYS:
                raise _unknown_key(key, source)
            flat[dotted] = value
    return flat


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_config(
    path: Path | str | None,
    *,
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
) -> NodeConfig:
    """Load and validate the node configuration: file < environment < overrides.

    Returns a valid NodeConfig. Raises ConfigError naming the key and its source for a file
    that cannot be read or parsed, an unknown key, a value of the wrong type or range, or
    settings that contradict each other.
    """
    raw: dict[str, tuple[Any, str]] = {}
    if path is not None:
        path = Path(path)
        for key, value in _flatten(_read_file(path), str(path)).items():
            raw[key] = (value, str(path))
    for key in _KEYS:
        name = env_name(key)
        if name in env:
            raw[key] = (env[name], f"environment variable {name}")
    if overrides:
        nested = {k: v for k, v in overrides.items() if v is not None}
        for key, value in _flatten(nested, "override", aliases=True).items():
            if value is not None:
                raw[key] = (value, "override")
    return _build(raw)


def _build(raw: Mapping[str, tuple[Any, str]]) -> NodeConfig:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, (value, source) in raw.items():
        try:
            values[key] = _KEYS[key].convert(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}: {exc}") from None
        sources[key] = source

    def fail(key: str, problem: str) -> ConfigError:
        where = sources.get(key, "defaults")
        return ConfigError(f"{where}: {key}: {problem}")

    for key in ("node_id", "data_dir"):
        if key not in values:
            raise ConfigError(
                f"{key} is required: set it in the config file, with {env_name(key)}, "
                "or with a flag"
            )
    for key, (low, high) in _INT_RANGES.items():
        if key in values and not low <= values[key] <= high:
            raise fail(key, f"{values[key]} is out of range {low}..{high}")
    if "cluster_id" in values and not _CLUSTER_ID_RE.match(values["cluster_id"]):
        raise fail("cluster_id", "use 1 to 64 characters from A-Z a-z 0-9 _ -")

    listeners = Listeners(
        **{
            name: values.get(f"listeners.{name}", None if name == "schema_registry" else getattr(Listeners(), name))
            for name in LISTENER_NAMES
        }
    )
    config_fields = {k: v for k, v in values.items() if not k.startswith("listeners.")}
    config = NodeConfig(listeners=listeners, configured=frozenset(values), **config_fields)

    seen: dict[tuple[str, int], str] = {}
    for name in LISTENER_NAMES:
        if name == "quorum" and not config.is_controller:
            continue  # a broker-only node opens no quorum listener
        address: HostPort = getattr(listeners, name)
        if address.port == 0:
            continue
        for (host, port), other in seen.items():
            if port == address.port and (
                host == address.host or {host, address.host} & _WILDCARD_HOSTS
            ):
                raise fail(f"listeners.{name}", f"{address} clashes with listeners.{other}")
        seen[(address.host, address.port)] = name
    if config.advertised_host is None:
        for name in ("kafka", "client", "peer"):
            if config.is_broker and getattr(listeners, name).host in _WILDCARD_HOSTS:
                raise fail(
                    f"listeners.{name}",
                    "binds every interface; set advertised_host to the name others should dial",
                )
    if config.group_consumer_session_timeout_ms <= config.group_consumer_heartbeat_interval_ms:
        blamed = ("group_consumer_session_timeout_ms" if "group_consumer_session_timeout_ms" in sources
                  else "group_consumer_heartbeat_interval_ms")
        raise fail(blamed, f"group_consumer_session_timeout_ms ({config.group_consumer_session_timeout_ms}) "
                           f"must be more than group_consumer_heartbeat_interval_ms "
                           f"({config.group_consumer_heartbeat_interval_ms})")
    if config.group_share_session_timeout_ms <= config.group_share_heartbeat_interval_ms:
        raise fail("group_share_session_timeout_ms",
                   f"group_share_session_timeout_ms ({config.group_share_session_timeout_ms}) must be more than "
                   f"group_share_heartbeat_interval_ms ({config.group_share_heartbeat_interval_ms})")
    if config.session_timeout_ms <= config.heartbeat_ms:
        blamed = "session_timeout_ms" if "session_timeout_ms" in sources else "heartbeat_ms"
        raise fail(
            blamed,
            f"session_timeout_ms ({config.session_timeout_ms}) must be more than "
            f"heartbeat_ms ({config.heartbeat_ms})",
        )
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise fail("group_min_session_timeout_ms",
                   f"{config.group_min_session_timeout_ms} is more than group_max_session_timeout_ms "
                   f"({config.group_max_session_timeout_ms})")
    voters = config.controller_quorum_voters
    if not voters:
        raise ConfigError(
            "controller_quorum_voters is required (e.g. \"1@127.0.0.1:9094\"): every node "
            "must know the metadata quorum"
        )
    peers = config.controller_peers
    if peers and set(peers) != set(voters):
        raise fail(
            "controller_peers",
            f"names voters {sorted(peers)} but controller_quorum_voters names {sorted(voters)}",
        )
    if config.is_controller:
        if config.node_id not in voters:
            raise fail(
                "controller_quorum_voters",
                f"node {config.node_id} has the controller role but is not among the voters "
                f"{sorted(voters)}",
            )
        own = voters[config.node_id]
        quorum = listeners.quorum
        if own.port != quorum.port or (
            own.host != quorum.host and quorum.host not in _WILDCARD_HOSTS
        ):
            raise fail(
                "listeners.quorum",
                f"{quorum} differs from this node's voter address {own} "
                "in controller_quorum_voters",
            )
    _check_security(config, fail)
    # Every node: peers prove membership with it (and voters key PySyncObj's traffic with it).
    if config.cluster_secret is None:
        raise ConfigError(
            "cluster_secret is required (it authenticates the peer listener's connections and "
            f"the metadata quorum's PySyncObj traffic): set it or {env_name('cluster_secret')}"
        )
    if len(config.cluster_secret) < MIN_SECRET_CHARS:
        raise fail("cluster_secret", f"use at least {MIN_SECRET_CHARS} characters")
    return config


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name, or a wildcard ("", 0.0.0.0, ::): reachable from elsewhere


def _check_security(config: NodeConfig, fail: Callable[[str, str], ConfigError]) -> None:
    if config.client_tls or config.peer_tls:
        for key, path in (("tls_cert_file", config.tls_cert_file), ("tls_key_file", config.tls_key_file)):
            if path is None:
                raise fail(key, "TLS (security_protocol SSL/SASL_SSL or peer_tls) needs a certificate and key")
    if (config.ssl_client_auth != "none" or config.peer_tls) and config.tls_ca_file is None:
        raise fail("tls_ca_file", "client certificates (ssl_client_auth, peer_tls) are checked against a CA file")
    if config.ssl_client_auth != "none" and not config.client_tls:
        raise fail("ssl_client_auth", "client certificates need security_protocol SSL or SASL_SSL")
    if config.allow_plaintext:
        return
    secure = {
        "client": config.security_protocol == "SASL_SSL"
        or (config.security_protocol == "SSL" and config.ssl_client_auth == "required"),
        "peer": config.peer_tls,
        "http": config.http_token is not None,
    }
    secure["kafka"] = secure["client"]  # the Kafka listener has the client listener's security
    # The Schema Registry: HTTPS with the client listener's certificate, Basic auth by SCRAM users.
    secure["schema_registry"] = config.security_protocol == "SASL_SSL"
    for name, ok in secure.items():
        address: HostPort = getattr(config.listeners, name)
        if not ok and not _is_loopback(address.host):
            raise fail(
                f"listeners.{name}",
                f"{address} is reachable from other hosts but has no TLS and authentication; secure it "
                "(raftlog cluster up --secure shows how) or set allow_plaintext = true",
            )


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'


def config_to_toml(node: NodeConfig) -> str:
    """Render a NodeConfig as TOML that load_config reads back to an equal NodeConfig
    (for `raftlog cluster up`). Includes the secret: write the file with mode 0600. Settings
    at their default are left out, as a hand-written file leaves them (so the node reports
    them DEFAULT_CONFIG, not STATIC_BROKER_CONFIG, as Kafka does)."""
    lines: list[str] = []
    tables: list[str] = []
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if value is None or item.name == "configured" or _at_default(item, value):
            continue
        if item.name == "listeners":
            tables.append("\n[listeners]")
            tables.extend(
                f"{name} = {_toml_string(str(getattr(value, name)))}"
                for name in LISTENER_NAMES
            )
        elif item.name in ("controller_quorum_voters", "controller_peers"):
            if not value:
                continue
            tables.append(f"\n[{item.name}]")
            tables.extend(f'"{vid}" = {_toml_string(str(a))}' for vid, a in sorted(value.items()))
        elif item.name in ("topic_defaults", "dial_overrides"):
            if value:
                tables.append(f"\n[{item.name}]")
                tables.extend(
                    f"{_toml_string(k)} = {_toml_string(v)}" for k, v in sorted(value.items())
                )
        elif item.name == "roles":
            lines.append(f"roles = [{', '.join(_toml_string(r) for r in sorted(value))}]")
        elif isinstance(value, tuple):
            lines.append(f"{item.name} = [{', '.join(_toml_string(v) for v in value)}]")
        elif isinstance(value, bool):
            lines.append(f"{item.name} = {'true' if value else 'false'}")
        elif isinstance(value, int):
            lines.append(f"{item.name} = {value}")
        else:
            lines.append(f"{item.name} = {_toml_string(str(value))}")
    return "\n".join(lines + tables) + "\n"


def _at_default(item: dataclasses.Field, value: Any) -> bool:
    if item.default is not dataclasses.MISSING:
        return bool(value == item.default)
    if item.default_factory is not dataclasses.MISSING:
        return bool(value == item.default_factory())
    return False


def new_cluster_id(rng: random.Random | None = None) -> str:
    """A new cluster id: 16 random bytes as 22 characters of URL-safe base64 (as Kafka's).
    Uses `rng` when given (tests), else the OS's randomness."""
    raw = rng.randbytes(16) if rng is not None else os.urandom(16)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _read_meta(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file; is this a raftlog data dir?") from None
    entries: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ConfigError(f"{path}: malformed line {line[:60]!r}")
        entries[key.strip()] = value.strip()
    return entries


def _write_atomically(path: Path, text: str) -> None:
    temp = path.with_name(path.name + ".tmp")
    with temp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself must survive a crash
    finally:
        os.close(directory)


def take_incarnation(data_dir: Path | str) -> tuple[str | None, str]:
    """(the broker incarnation id that last ran on `data_dir` or None, a new one for this
    process), the new one written in its place first (atomically, durably). Call only after
    claiming the data dir (pidfile.claim): then the previous process is gone, and the
    controller lets this one replace it at once (Controller.register_broker). An unreadable
    file counts as no predecessor (the registration then waits out the old session)."""
    path = Path(data_dir) / INCARNATION_FILE
    try:
        previous = path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        previous = None
    new = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")
    _write_atomically(path, new + "\n")
    return previous, new


def ensure_meta_properties(data_dir: Path | str, node_id: int, cluster_id: str | None) -> str:
    """Bind `data_dir` to (cluster_id, node_id), or check that it already is.

    On first start (no meta.properties) it creates the directory and writes the file
    atomically (temp file, fsync, rename, fsync the directory); `cluster_id` is then
    required. Later it checks the stored ids. Returns the cluster id in force (the stored one
    when `cluster_id` is None). Raises ConfigError when the directory belongs to another
    cluster or another node, when no cluster id is known, or when the file is unreadable.

    Ordering: the file is durable before this returns, so nothing is written to a data dir
    that is not yet bound to its cluster.
    """
    data_dir = Path(data_dir)
    path = data_dir / META_PROPERTIES
    if path.exists():
        entries = _read_meta(path)
        stored_cluster = entries.get("cluster.id")
        stored_node = entries.get("node.id")
        if not stored_cluster or stored_node is None or not stored_node.isdigit():
            raise ConfigError(f"{path}: missing or bad cluster.id / node.id")
        if cluster_id is not None and cluster_id != stored_cluster:
            raise ConfigError(
                f"{path}: data dir belongs to cluster {stored_cluster}, not {cluster_id}; "
                "point data_dir elsewhere or wipe it to join this cluster"
            )
        if int(stored_node) != node_id:
            raise ConfigError(
                f"{path}: data dir belongs to node {stored_node}, not node {node_id}; "
                "each node needs its own data_dir"
            )
        return stored_cluster
    if cluster_id is None:
        raise ConfigError(
            f"{data_dir}: not formatted (no {META_PROPERTIES}) and no cluster_id given; "
            "set cluster_id (`raftlog cluster up` generates one)"
        )
    if not _CLUSTER_ID_RE.match(cluster_id):
        raise ConfigError(f"cluster_id {cluster_id!r}: use 1 to 64 characters from A-Z a-z 0-9 _ -")
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_atomically(
            path,
            "# raftlog meta.properties: binds this data dir to one cluster and node\n"
            f"version={META_VERSION}\ncluster.id={cluster_id}\nnode.id={node_id}\n",
        )
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror}") from None
    return cluster_id

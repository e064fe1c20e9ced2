"""Dynamic broker configs: which broker settings change without a restart, and how (pure).

Kafka keeps dynamic broker configs in the metadata log (a ConfigRecord of a BROKER resource,
per broker id or the cluster default `""`); so does raftlog (`records.BrokerConfig`, replayed
into `image.broker_configs[resource]`). A node's effective value of a dynamic setting is, as
in Kafka: its own broker entry (DYNAMIC_BROKER_CONFIG), else the cluster default
(DYNAMIC_DEFAULT_BROKER_CONFIG), else what it was started with (STATIC_BROKER_CONFIG /
DEFAULT_CONFIG). Names are Kafka's; `attr` is the NodeConfig field each one overrides.

Only settings a running node re-reads are dynamic (`DYNAMIC_BROKER_CONFIGS`): the defaults of
new topics (read by the controller and by CreateTopics), auto-creation (Metadata) and the
connection limits (the connection gate). The broker configs raftlog reads at start
(`STATIC_BROKER_CONFIGS`, Kafka's names DescribeConfigs lists) are read-only: altering one
is refused with InvalidRequestError naming the keys, as Kafka refuses
"Cannot update these configs dynamically". A name raftlog does not know at all is stored as
given and has no effect, as Kafka stores a broker config name its KafkaConfig does not define
(AlterConfigs and IncrementalAlterConfigs alike: KafkaJS's `alter broker configs` sets
`cleanup.policy` on a broker); DescribeConfigs does not list it.

Invariants:
* A resource is `""` or a broker id in decimal; a stored value is the normalized string of a
  value `parse` accepts, so equal settings are equal strings in records and images.

Public API:
    DYNAMIC_BROKER_CONFIGS: Mapping[name, BrokerConfigDef]
    check_resource(resource) -> str                               raises InvalidRequestError
    normalize_broker_configs(configs) -> dict[str, str]           raises InvalidRequestError / InvalidConfigError
    alter(current, set, delete) -> dict[str, str] | None          the resource's configs after (None: no change)
    effective(image_configs, broker_id) -> dict[name, (value, source)]
    describe(image_configs) -> [{"name", "type", "doc", "cluster", "brokers"}]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Final, Mapping

from metadata.topic_config import COMPRESSION_TYPES
from raftlog.base.errors import InvalidConfigError, InvalidRequestError

__all__ = [
    "BrokerConfigDef", "DYNAMIC_BROKER_CONFIGS", "STATIC_BROKER_CONFIGS", "CLUSTER_DEFAULT", "SOURCE_DYNAMIC_BROKER",
    "SOURCE_DYNAMIC_DEFAULT_BROKER", "check_resource", "normalize_broker_configs", "alter", "effective", "describe",
]

CLUSTER_DEFAULT: Final = ""
SOURCE_DYNAMIC_BROKER: Final = 2  # Kafka's DescribeConfigs ConfigSource values
SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
INT32_MAX: Final = 2**31 - 1
MAX_BROKER_ID_CHARS: Final = 10
_INT_RE: Final = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}\Z")  # a config name as Kafka spells them
MAX_UNKNOWN_VALUE_CHARS: Final = 4096


@dataclass(frozen=True)
class BrokerConfigDef:
    """One dynamic broker config: Kafka's name, the NodeConfig attribute it overrides, its
    Kafka type name, and `parse(str) -> typed` (ValueError with the reason)."""

    name: str
    attr: str
    type: str  # "int" | "boolean" | "string"
    doc: str
    parse: Callable[[str], object]


def _int(lo: int, hi: int = INT32_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if not _INT_RE.match(text):
            raise ValueError(f"{text!r} is not an integer")
        if not lo <= int(text) <= hi:
            raise ValueError(f"{text} is out of range ({lo}..{hi})")
        return int(text)

    return parse


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


def _compression_type(text: str) -> str:
    value = text.strip().lower()
    if value not in COMPRESSION_TYPES:
        raise ValueError(f"{text!r} is not one of {', '.join(COMPRESSION_TYPES)}")
    return value


DYNAMIC_BROKER_CONFIGS: Final[Mapping[str, BrokerConfigDef]] = MappingProxyType({d.name: d for d in (
    BrokerConfigDef("num.partitions", "default_partitions", "int",
                    "partitions of a topic created without a count", _int(1)),
    BrokerConfigDef("default.replication.factor", "default_replication_factor", "int",
                    "replicas of a topic created without a replication factor", _int(1, 32767)),
    BrokerConfigDef("auto.create.topics.enable", "auto_create_topics", "boolean",
                    "create a topic a Metadata request names and that does not exist", _boolean),
    BrokerConfigDef("max.connections", "max_connections", "int",
                    "client connections this node accepts at once", _int(1)),
    BrokerConfigDef("max.connections.per.ip", "max_connections_per_ip", "int",
                    "client connections this node accepts at once from one address", _int(0)),
    BrokerConfigDef("compression.type", "compression_type", "string",
                    "the codec a leader stores produced batches in, for topics at producer", _compression_type),
    # The replication throttles (partition/throttle.py; kafka-reassign-partitions --throttle
    # sets them and --verify / --cancel delete them), and the one Kafka sets beside them for
    # moves between log dirs (one data dir here: accepted, no effect).
    BrokerConfigDef("leader.replication.throttled.rate", "leader_replication_throttled_rate", "long",
                    "bytes/s this broker's leaders send to replicas a move adds (0: no limit)", _int(0, 1 << 40)),
    BrokerConfigDef("follower.replication.throttled.rate", "follower_replication_throttled_rate", "long",
                    "bytes/s the replicas this broker adds by a move take (0: no limit)", _int(0, 1 << 40)),
    BrokerConfigDef("replica.alter.log.dirs.io.max.bytes.per.second",
                    "replica_alter_log_dirs_io_max_bytes_per_second", "long",
                    "moves between log dirs (raftlog has one data dir: no effect)", _int(0, 1 << 62)),
)})  # fmt: skip


# The broker configs raftlog serves read-only (raftlog/node/kafka/broker_configs.py lists
# them in DescribeConfigs; tests/unit/metadata checks the two agree) and Kafka's other
# start-time settings a client is likely to try: refused, as Kafka refuses them.
STATIC_BROKER_CONFIGS: Final = frozenset({
    "broker.id", "node.id", "process.roles", "listeners", "advertised.listeners", "log.dirs", "log.dir",
    "log.retention.hours", "log.retention.ms", "log.retention.minutes", "message.max.bytes",
    "socket.request.max.bytes", "max.connections.per.ip.overrides", "connections.max.idle.ms",
    "connections.max.reauth.ms", "sasl.server.max.receive.size", "sasl.enabled.mechanisms", "ssl.client.auth",
    "super.users", "allow.everyone.if.no.acl.found", "raftlog.cluster.secret", "controller.quorum.voters",
    "controller.listener.names", "inter.broker.listener.name", "listener.security.protocol.map",
    "authorizer.class.name", "zookeeper.connect", "broker.rack",
})


def check_resource(resource: object) -> str:
    """`resource` if it names the cluster default (`""`) or a broker id; raises InvalidRequestError."""
    if not isinstance(resource, str) or not (
        resource == CLUSTER_DEFAULT or (len(resource) <= MAX_BROKER_ID_CHARS and _INT_RE.match(resource)
                                        and int(resource) >= 0)):
        raise InvalidRequestError(f"broker resource must be a broker id or \"\" (the cluster default), "
                                  f"not {str(resource)[:40]!r}")
    return resource


def _refuse_static(names: list[str]) -> None:
    static = sorted(n for n in names if n in STATIC_BROKER_CONFIGS)
    if static:
        raise InvalidRequestError(
            f"Cannot update these configs dynamically: {static} (raftlog applies only "
            f"{sorted(DYNAMIC_BROKER_CONFIGS)} without a restart; set the others in the node's config "
            "file or RAFTLOG_* environment and restart it)")


def normalize_broker_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Each value parsed and printed back (`" 007"` -> `"7"`, `"TRUE"` -> `"true"`); a name
    raftlog does not know kept as given (module docstring). Raises InvalidRequestError for a
    read-only key (or a name that is not a broker config name), InvalidConfigError for a bad value."""
    if not isinstance(configs, Mapping):
        raise InvalidRequestError("broker configs must be a map of names to values")
    _refuse_static(list(configs))
    out = {}
    for name, text in sorted(configs.items()):
        if not isinstance(text, str):
            raise InvalidConfigError(f"{name}: the value must be a string", key=name)
        if name not in DYNAMIC_BROKER_CONFIGS:  # unknown: stored, no effect
            if not _NAME_RE.match(name) or len(text) > MAX_UNKNOWN_VALUE_CHARS:
                raise InvalidRequestError(f"{name[:60]!r}: not a broker config name, or its value is over "
                                          f"{MAX_UNKNOWN_VALUE_CHARS} characters")
            out[name] = text
            continue
        try:
            value = DYNAMIC_BROKER_CONFIGS[name].parse(text)
        except ValueError as exc:
            raise InvalidConfigError(f"{name}: {exc}", key=name) from None
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def alter(current: Mapping[str, str], set: Mapping[str, str], delete: list[str] | tuple[str, ...]) -> dict[str, str] | None:
    """A resource's dynamic configs after setting `set` and deleting `delete` (back to the
    next source), or None when nothing changes. Raises as normalize_broker_configs, and
    InvalidRequestError for a key both set and deleted."""
    normalized = normalize_broker_configs(set)
    if not isinstance(delete, (list, tuple)) or not all(isinstance(k, str) for k in delete):
        raise InvalidRequestError("delete must be a list of config names")
    _refuse_static(list(delete))
    both = sorted(k for k in delete if k in normalized)
    if both:
        raise InvalidRequestError(f"config keys both set and deleted: {both}")
    after = {k: v for k, v in current.items() if k not in delete}
    after.update(normalized)
    after = dict(sorted(after.items()))
    return None if after == dict(current) else after


def describe(broker_configs: Mapping[str, Mapping[str, str]]) -> list[dict[str, object]]:
    """Every dynamic broker config with what the metadata log sets for it: {"name", "type",
    "doc", "cluster": the cluster default or None, "brokers": {broker id: value}} (the
    native `describe_broker_configs`; a node's static value is its own, listed by Kafka's
    DescribeConfigs of that broker)."""
    return [{"name": name, "type": d.type, "doc": d.doc,
             "cluster": broker_configs.get(CLUSTER_DEFAULT, {}).get(name),
             "brokers": {r: c[name] for r, c in sorted(broker_configs.items(), key=lambda rc: (len(rc[0]), rc[0]))
                         if r != CLUSTER_DEFAULT and name in c}}
            for name, d in DYNAMIC_BROKER_CONFIGS.items()]


def effective(broker_configs: Mapping[str, Mapping[str, str]], broker_id: int) -> dict[str, tuple[object, int]]:
    """The dynamic settings in force on `broker_id`: name -> (typed value, source), only
    those set for it or cluster-wide (the rest keep the node's static value)."""
    out: dict[str, tuple[object, int]] = {}
    for resource, source in ((CLUSTER_DEFAULT, SOURCE_DYNAMIC_DEFAULT_BROKER), (str(broker_id), SOURCE_DYNAMIC_BROKER)):
        for name, text in broker_configs.get(resource, {}).items():
            definition = DYNAMIC_BROKER_CONFIGS.get(name)
            if definition is not None:  # a name a newer node wrote: not ours to apply
                out[name] = (definition.parse(text), source)
    return out

"""Broker configs for DescribeConfigs (32) of a BROKER resource (configs.py).

Each entry is a setting of `raftlog/node/config.py` under Kafka's broker config name, with
its value as Kafka prints it, its source and read_only / is_sensitive flags (a secret's value
is null). The dynamic ones (metadata/broker_config.py: num.partitions, default.replication.factor,
auto.create.topics.enable, max.connections, max.connections.per.ip, compression.type) are not read-only; their
value comes from the metadata log when set there: this broker's entry
(DYNAMIC_BROKER_CONFIG), else the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG). Otherwise
the source is STATIC_BROKER_CONFIG when the node's config file, environment or flags set it
(even to its default value, as Kafka reports what server.properties sets), DEFAULT_CONFIG when
not; `is_default` says whether the value is raftlog's default.

Which broker answers: the one asked, as in Kafka (the Java AdminClient and kafka-python send
a BROKER resource to that broker itself). A node answers for its own id; another id gets
INVALID_REQUEST "Unexpected broker id", Kafka's answer to a request sent to the wrong
broker. The cluster default (`""`) lists the cluster-wide dynamic configs set, as Kafka does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any, Final

from metadata.broker_config import (
    CLUSTER_DEFAULT,
    DYNAMIC_BROKER_CONFIGS,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
)
from metadata.topic_config import TOPIC_CONFIGS, canonical_key

__all__ = ["broker_entries", "default_entries", "SOURCE_STATIC_BROKER", "SOURCE_DEFAULT"]

SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST, TYPE_PASSWORD = 1, 2, 3, 5, 7, 9
_TYPES: Final = {"int": TYPE_INT, "boolean": TYPE_BOOLEAN}


def _listener(config: Any, address: Any) -> str:
    return f"{config.security_protocol}://{address}"


def _bool(value: bool | None) -> str:
    return "true" if value else "false"


def _topic_default(config: Any, key: str) -> str:
    """The node's default of a new topic's config `key` (topic_defaults, else raftlog's)."""
    for name, value in config.topic_defaults.items():
        if canonical_key(name) == key:
            return value
    return TOPIC_CONFIGS[key].default


# Kafka name -> (NodeConfig attribute, Kafka type, value as Kafka prints it, sensitive).
_BROKER: Final[dict[str, tuple[str, int, Callable[[Any], str | None], bool]]] = {
    "broker.id": ("node_id", TYPE_INT, lambda c: str(c.node_id), False),
    "node.id": ("node_id", TYPE_INT, lambda c: str(c.node_id), False),
    "process.roles": ("roles", TYPE_LIST, lambda c: ",".join(sorted(c.roles, reverse=True)), False),
    "listeners": ("listeners", TYPE_STRING,
                  lambda c: _listener(c, c.listeners.kafka), False),
    "advertised.listeners": ("advertised_host", TYPE_STRING,
                             lambda c: _listener(c, c.advertised("kafka")), False),
    "log.dirs": ("data_dir", TYPE_STRING, lambda c: str(c.data_dir), False),
    "num.partitions": ("default_partitions", TYPE_INT, lambda c: str(c.default_partitions), False),
    "default.replication.factor": ("default_replication_factor", TYPE_INT,
                                   lambda c: str(c.default_replication_factor), False),
    "auto.create.topics.enable": ("auto_create_topics", TYPE_BOOLEAN,
                                  lambda c: _bool(c.auto_create_topics), False),
    "compression.type": ("compression_type", TYPE_STRING, lambda c: c.compression_type, False),
    # The defaults of new topics' retention.ms and max.message.bytes (topic_defaults, else
    # raftlog's defaults: Kafka's), under Kafka's broker names; read-only.
    "log.retention.hours": ("topic_defaults", TYPE_INT,
                            lambda c: str(int(_topic_default(c, "retention_ms")) // 3_600_000), False),
    "message.max.bytes": ("topic_defaults", TYPE_INT, lambda c: _topic_default(c, "max_message_bytes"), False),
    "socket.request.max.bytes": ("max_frame_bytes", TYPE_INT, lambda c: str(c.max_frame_bytes), False),
    "max.connections": ("max_connections", TYPE_INT, lambda c: str(c.max_connections), False),
    "max.connections.per.ip": ("max_connections_per_ip", TYPE_INT,
                               lambda c: str(c.max_connections_per_ip), False),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", TYPE_STRING,
                                         lambda c: c.max_connections_per_ip_overrides, False),
    "connections.max.idle.ms": ("connections_max_idle_ms", TYPE_LONG,
                                lambda c: str(c.connections_max_idle_ms), False),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", TYPE_LONG,
                                  lambda c: str(c.connections_max_reauth_ms), False),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", TYPE_INT,
                                     lambda c: str(c.sasl_server_max_receive_size), False),
    "sasl.enabled.mechanisms": ("sasl_mechanisms", TYPE_LIST, lambda c: ",".join(c.sasl_mechanisms), False),
    "ssl.client.auth": ("ssl_client_auth", TYPE_STRING, lambda c: c.ssl_client_auth, False),
    "super.users": ("super_users", TYPE_STRING, lambda c: ";".join(c.super_users), False),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", TYPE_BOOLEAN,
                                       lambda c: _bool(c.allow_everyone_if_no_acl_found), False),
    # The peer listener's and PySyncObj's shared secret: sensitive, never printed.
    "raftlog.cluster.secret": ("cluster_secret", TYPE_PASSWORD, lambda c: None, True),
}


def _configured(node: Any, attr: str, name: str) -> bool:
    """Whether the node's own configuration (file, environment, flags) sets Kafka's `name`."""
    if attr == "topic_defaults":
        key = "retention_ms" if name == "log.retention.hours" else "max_message_bytes"
        return any(canonical_key(k) == key for k in node.topic_defaults)
    if attr == "advertised_host":  # advertised.listeners: the host, else the listener itself
        attr = "advertised_host" if node.advertised_host is not None else "listeners.kafka"
    elif attr == "listeners":
        attr = "listeners.kafka"
    return attr in node.configured


def _defaults(config: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def broker_entries(node: Any, keys: set[str] | None,
                   broker_configs: Mapping[str, Mapping[str, str]] | None = None) -> list[dict[str, Any]]:
    """The node's broker configs (those named in `keys`, or all) as dicts of Kafka's
    DescribeConfigs entry fields, the dynamic ones of `broker_configs` (the image's) over
    the static ones."""
    defaults = _defaults(node)
    own = (broker_configs or {}).get(str(node.node_id), {})
    cluster = (broker_configs or {}).get(CLUSTER_DEFAULT, {})
    out = []
    for name, (attr, kind, render, sensitive) in _BROKER.items():
        if keys is not None and name not in keys:
            continue
        dynamic = name in DYNAMIC_BROKER_CONFIGS
        is_default = attr in defaults and getattr(node, attr) == defaults[attr]
        value, source = render(node), SOURCE_STATIC_BROKER if _configured(node, attr, name) else SOURCE_DEFAULT
        if name in own:
            value, source, is_default = own[name], SOURCE_DYNAMIC_BROKER, False
        elif name in cluster:
            value, source, is_default = cluster[name], SOURCE_DYNAMIC_DEFAULT_BROKER, False
        how = ("dynamic: kafka-configs --alter or raftlog cluster configs alter" if dynamic
               else "read-only: set at node start")
        out.append({
            "name": name, "value": None if sensitive else value, "read_only": not dynamic,
            "is_default": is_default, "config_source": source,
            "is_sensitive": sensitive, "config_type": kind,
            "documentation": f"raftlog's {attr} ({how})",
        })  # fmt: skip
    return out


def default_entries(broker_configs: Mapping[str, Mapping[str, str]], keys: set[str] | None) -> list[dict[str, Any]]:
    """The cluster-wide dynamic broker configs set (resource `""`), as Kafka lists them."""
    out = []
    for name, value in broker_configs.get(CLUSTER_DEFAULT, {}).items():
        definition = DYNAMIC_BROKER_CONFIGS.get(name)
        if definition is None or (keys is not None and name not in keys):
            continue
        out.append({
            "name": name, "value": value, "read_only": False, "is_default": False,
            "config_source": SOURCE_DYNAMIC_DEFAULT_BROKER, "is_sensitive": False,
            "config_type": _TYPES.get(definition.type, TYPE_STRING), "documentation": definition.doc,
        })  # fmt: skip
    return out

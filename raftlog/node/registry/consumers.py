"""The REST proxy's v2 consumer instances (Confluent REST Proxy's `POST /consumers/{group}`):
their state, bounded in number, expired when idle. Pure: `now_s` is an argument.

An instance is named within its group; it has an embedded format (binary, json, avro,
jsonschema, protobuf), `auto.offset.reset` (earliest | latest), either a subscription (topics)
or a manual assignment (partitions), and a position per partition it has read or was moved to
(seek). Positions it has not got yet come from the group's committed offset, else from
`auto.offset.reset` (the proxy asks the cluster; see proxy_consumers.py).

Unlike Confluent's (a KafkaConsumer per instance, rebalanced with the group's other members),
an instance here does not join the group as a member: it reads every partition of its
subscription and commits to the group's offsets (as a group without members, generation -1).
Two instances of one group subscribed to one topic therefore both read all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from raftlog.node.registry.errors import (
    ConsumerAlreadyExistsError, ConsumerInstanceNotFoundError, InvalidConsumerConfigError, TooManyConsumersError,
)

__all__ = ["ConsumerInstance", "ConsumerInstances", "FORMATS", "DEFAULT_INSTANCE_TIMEOUT_MS", "DEFAULT_MAX_INSTANCES"]

FORMATS: Final = ("binary", "json", "avro", "jsonschema", "protobuf")
DEFAULT_INSTANCE_TIMEOUT_MS: Final = 300_000  # Confluent's consumer.instance.timeout.ms
DEFAULT_MAX_INSTANCES: Final = 1000
MAX_NAME_CHARS: Final = 255


@dataclass
class ConsumerInstance:
    group: str
    name: str
    format: str
    auto_offset_reset: str
    last_used_s: float
    subscription: list[str] = field(default_factory=list)
    assignment: list[tuple[str, int]] | None = None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)


def _name_ok(text: Any) -> bool:
    return isinstance(text, str) and 0 < len(text) <= MAX_NAME_CHARS and "/" not in text and text.isprintable()


class ConsumerInstances:
    """Every consumer instance of this node's proxy, at most `max_instances`; an instance not
    used for `instance_timeout_ms` is gone (Confluent's consumer.instance.timeout.ms)."""

    def __init__(self, instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
                 max_instances: int = DEFAULT_MAX_INSTANCES) -> None:
        self.instance_timeout_ms = instance_timeout_ms
        self.max_instances = max_instances
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._counter = 0

    def __len__(self) -> int:
        return len(self._instances)

    def expire(self, now_s: float) -> list[ConsumerInstance]:
        """Drop the instances idle longer than the timeout; the dropped ones."""
        limit = self.instance_timeout_ms / 1000
        gone = [i for i in self._instances.values() if now_s - i.last_used_s > limit]
        for i in gone:
            del self._instances[(i.group, i.name)]
        return gone

    def create(self, group: str, config: Any, now_s: float) -> ConsumerInstance:
        """A new instance from Confluent's create body ({"name", "format", "auto.offset.reset",
        ...}). Raises InvalidConsumerConfigError, ConsumerAlreadyExistsError, TooManyConsumersError."""
        self.expire(now_s)
        if not _name_ok(group):
            raise InvalidConsumerConfigError(f"invalid group name: 1 to {MAX_NAME_CHARS} printable characters without '/'")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise InvalidConsumerConfigError("the body must be a JSON object")
        name = config.get("name")
        if name is None:
            self._counter += 1
            name = f"rest-consumer-{self._counter}"
        if not _name_ok(name):
            raise InvalidConsumerConfigError(f"invalid instance name: 1 to {MAX_NAME_CHARS} printable characters without '/'")
        fmt = str(config.get("format", "binary")).lower()
        if fmt not in FORMATS:
            raise InvalidConsumerConfigError(f"unknown format {fmt[:40]!r}; one of {', '.join(FORMATS)}")
        reset = str(config.get("auto.offset.reset", "latest")).lower()
        if reset not in ("earliest", "latest"):
            raise InvalidConsumerConfigError("auto.offset.reset must be earliest or latest")
        if (group, name) in self._instances:
            raise ConsumerAlreadyExistsError(f"Consumer with specified consumer ID {name[:80]} already exists in group {group[:80]}")
        if len(self._instances) >= self.max_instances:
            raise TooManyConsumersError(f"this node has {self.max_instances} consumer instances (the limit); delete one")
        instance = ConsumerInstance(group, name, fmt, reset, now_s)
        self._instances[(group, name)] = instance
        return instance

    def get(self, group: str, name: str, now_s: float) -> ConsumerInstance:
        """The instance (its idle time restarts). Raises ConsumerInstanceNotFoundError."""
        self.expire(now_s)
        instance = self._instances.get((group, name))
        if instance is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        instance.last_used_s = now_s
        return instance

    def delete(self, group: str, name: str, now_s: float) -> None:
        self.get(group, name, now_s)
        del self._instances[(group, name)]

"""Topic configuration schema: keys, types, defaults and ranges (pure).

Values travel as strings, as in Kafka (`{"retention_ms": "60000"}`); this module parses them
to typed values and normalises the strings, so that two equal settings are equal strings in
records and images ("007" → "7", "delete,compact" → "compact,delete").

Invariants:
* Only keys in `TOPIC_CONFIGS` exist; every key has a default, so a topic's effective value is
  its set value or the default (`TopicConfig.from_configs`).
* Only knobs something reads are here (partition log, retention, compaction, flush, produce
  size check). Key names use our underscore spelling of Kafka's dotted names; Kafka's own
  names (`retention.ms`, `cleanup.policy`, `flush.ms`, ...: `KAFKA_NAMES`) are accepted
  wherever a key is read (`canonical_key`), so users type what they know from Kafka.

Public API:
    TOPIC_CONFIGS: Mapping[str, ConfigDef]
    parse_value(key, value: str) -> int | str          raises InvalidConfigError
    normalize_configs(configs: Mapping[str, str]) -> dict[str, str]   raises InvalidConfigError
    TopicConfig.from_configs(configs) -> TopicConfig   typed view with defaults filled in
    describe_configs(configs) -> tuple[ConfigEntry, ...]   every key: value, is_default
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Final, Mapping

from raftlog.base.errors import InvalidConfigError

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_CONFIG_VALUE_CHARS = 256

_INT_RE = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_CLEANUP_POLICIES = {
    frozenset({"delete"}): "delete",
    frozenset({"compact"}): "compact",
    frozenset({"compact", "delete"}): "compact,delete",
}


@dataclass(frozen=True)
class ConfigDef:
    """One config key. `parse(str) -> typed value` raises ValueError with a human reason;
    `normalize(typed) -> str` gives the canonical string."""

    name: str
    type: str  # "long" | "int" | "double" | "enum" | "list"
    default: str
    doc: str
    parse: Callable[[str], object]
    normalize: Callable[[object], str]


def _int_parser(lo: int, hi: int, allow_minus_one: bool = False) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if not _INT_RE.match(text):
            raise ValueError(f"{text!r} is not an integer")
        value = int(text)
        if allow_minus_one and value == -1:
            return value
        if not lo <= value <= hi:
            extra = "-1 or " if allow_minus_one else ""
            raise ValueError(f"{value} is out of range ({extra}{lo}..{hi})")
        return value

    return parse


def _enum_parser(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        text = text.strip()
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _parse_cleanup_policy(text: str) -> str:
    parts = frozenset(p.strip() for p in text.split(","))
    name = _CLEANUP_POLICIES.get(parts)
    if name is None:
        raise ValueError(f"{text!r} is not one of delete, compact, compact,delete")
    return name


def _parse_timestamp_type(text: str) -> str:
    text = text.strip()
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError(f"{text!r} is not one of CreateTime, LogAppendTime")
    return text


def _parse_ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{value} is out of range (0..1)")
    return value


COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def _parse_compression_type(text: str) -> str:
    """Kafka's compression.type values; `none` is read as Kafka's `uncompressed`."""
    value = text.strip().lower()
    value = "uncompressed" if value == "none" else value
    if value not in COMPRESSION_TYPES:
        raise ValueError(f"{text!r} is not one of {', '.join(COMPRESSION_TYPES)}")
    return value


_THROTTLED_REPLICA_RE: Final = re.compile(r"[0-9]+:[0-9]+\Z")


def _parse_throttled_replicas(text: str) -> str:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"]:
        return "*"
    for item in items:
        if not _THROTTLED_REPLICA_RE.match(item):
            raise ValueError(f"{item!r} is not partition:broker (or give \"*\")")
    return ",".join(items)


def _long(name: str, default: int, lo: int, doc: str, *, hi: int = INT64_MAX, minus_one: bool = False) -> ConfigDef:
    return ConfigDef(name, "long", str(default), doc, _int_parser(lo, hi, minus_one), str)


TOPIC_CONFIGS: Mapping[str, ConfigDef] = MappingProxyType(
    {
        d.name: d
        for d in (
            ConfigDef(
                "cleanup_policy", "list", "delete",
                "delete old segments by retention, compact by key, or both",
                _parse_cleanup_policy, str,
            ),
            _long("retention_ms", 7 * 24 * 3600 * 1000, 0,
                  "delete segments whose newest record is older (-1: keep forever)", minus_one=True),
            _long("retention_bytes", -1, 0,
                  "delete oldest segments while the partition is larger (-1: no size limit)", minus_one=True),
            ConfigDef(
                "segment_bytes", "int", str(1024 * 1024 * 1024),
                "roll the active segment at this size (>= 4096)",
                _int_parser(4096, INT32_MAX), str,
            ),
            _long("segment_ms", 7 * 24 * 3600 * 1000, 1, "roll the active segment after this age"),
            _long("delete_retention_ms", 24 * 3600 * 1000, 0,
                  "keep compaction tombstones this long"),
            ConfigDef(
                "flush_policy", "enum", "always",
                "fsync every append (always), every flush_interval_ms (interval), or never",
                _enum_parser(("always", "interval", "never")), str,
            ),
            _long("flush_interval_ms", 1000, 1, "fsync period under flush_policy=interval"),
            ConfigDef(
                "max_message_bytes", "int", str(1024 * 1024 + 12),
                "largest record batch a producer may append",
                _int_parser(0, INT32_MAX), str,
            ),
            ConfigDef(
                "message_timestamp_type", "enum", "CreateTime",
                "the timestamp a batch keeps: the producer's (CreateTime), or the leader's clock at "
                "its append (LogAppendTime: the batch's max timestamp rewritten, its CRC recomputed)",
                _parse_timestamp_type, str,
            ),
            # Checked on produce (partition/validator.py TimestampPolicy): INVALID_TIMESTAMP.
            _long("message_timestamp_before_max_ms", INT64_MAX, 0,
                  "refuse a CreateTime batch whose timestamps are older than this before the leader's clock"),
            _long("message_timestamp_after_max_ms", INT64_MAX, 0,
                  "refuse a CreateTime batch whose timestamps are further than this ahead of the leader's clock"),
            _long("message_timestamp_difference_max_ms", INT64_MAX, 0,
                  "Kafka 3's bound on both sides (before and after), for clients that still set it"),
            # Kafka's cleaner and deletion knobs: accepted and stored, with no effect here
            # (raftlog's cleaner compacts a segment once it is sealed; files go at once).
            ConfigDef(
                "min_cleanable_dirty_ratio", "double", "0.5",
                "stored, no effect: raftlog's cleaner compacts every sealed segment, whatever the ratio",
                _parse_ratio, repr,
            ),
            _long("max_compaction_lag_ms", INT64_MAX, 1,
                  "stored, no effect: raftlog's cleaner compacts every sealed segment"),
            _long("file_delete_delay_ms", 60000, 0,
                  "stored, no effect: raftlog deletes a segment's files when retention drops it"),
            ConfigDef(
                "compression_type", "enum", "producer",
                "the codec batches are stored in: the producer's (producer), or the leader "
                "recompresses each batch in another codec into this one (uncompressed, gzip, "
                "snappy, lz4, zstd); producer follows the broker's compression.type",
                _parse_compression_type, str,
            ),
            ConfigDef(
                "min_insync_replicas", "int", "1",
                "accepted for Kafka's tools; in raftlog acks=all always waits for a majority of "
                "the partition's voters (Raft), whatever this says",
                _int_parser(1, INT32_MAX), str,
            ),
            # Kafka's lists of throttled replicas ("partition:broker,..." or "*"), which
            # kafka-reassign-partitions sets and clears; raftlog throttles every replica a move
            # adds (partition/throttle.py), so they are kept and shown, with no other effect.
            ConfigDef(
                "leader_replication_throttled_replicas", "list", "",
                "Kafka's throttled replicas on the leader side (kept; raftlog throttles every move)",
                _parse_throttled_replicas, str,
            ),
            ConfigDef(
                "follower_replication_throttled_replicas", "list", "",
                "Kafka's throttled replicas on the follower side (kept; raftlog throttles every move)",
                _parse_throttled_replicas, str,
            ),
        )
    }
)


# our key -> Kafka's topic config name (the dotted spelling, except where Kafka's knob has
# another name: its flush.ms is our flush_interval_ms).
KAFKA_NAMES: Mapping[str, str] = MappingProxyType({
    key: {"flush_interval_ms": "flush.ms"}.get(key, key.replace("_", "."))
    for key in TOPIC_CONFIGS
})
_FROM_KAFKA: Mapping[str, str] = MappingProxyType({v: k for k, v in KAFKA_NAMES.items()})


def canonical_key(key: str) -> str:
    """Our key for `key` given either way (`retention.ms` -> `retention_ms`); an unknown key
    comes back unchanged (and is refused by parse_value)."""
    return _FROM_KAFKA.get(key, key) if isinstance(key, str) else key


def parse_value(key: str, value: str) -> int | str:
    """Parse one config value. Raises InvalidConfigError naming the key when the key is
    unknown, the value is not a string, or it is out of range. Kafka's names are accepted."""
    key = canonical_key(key)
    spec = TOPIC_CONFIGS.get(key)
    if spec is None:
        raise InvalidConfigError(
            f"unknown topic config {key!r} (known: {', '.join(sorted(TOPIC_CONFIGS))})", key=key
        )
    if not isinstance(value, str):
        raise InvalidConfigError(f"config {key!r}: value must be a string, got {type(value).__name__}", key=key)
    if len(value) > MAX_CONFIG_VALUE_CHARS:
        raise InvalidConfigError(f"config {key!r}: value longer than {MAX_CONFIG_VALUE_CHARS} chars", key=key)
    try:
        return spec.parse(value)  # type: ignore[return-value]
    except ValueError as e:
        raise InvalidConfigError(f"config {key!r}: {e}", key=key) from None


def normalize_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Validate every key/value and return them as canonical strings (sorted by key).
    Raises InvalidConfigError naming the first bad key (in sorted order)."""
    if not isinstance(configs, Mapping):
        raise InvalidConfigError("configs must be a map of string to string")
    out: dict[str, str] = {}
    for given in sorted(configs, key=str):
        if not isinstance(given, str):
            raise InvalidConfigError(f"config key must be a string, got {given!r}", key=None)
        value = parse_value(given, configs[given])  # raises for unknown keys first
        key = canonical_key(given)
        if key in out:
            raise InvalidConfigError(f"config {key!r} is given twice ({given!r} is the same key)",
                                     key=key)
        out[key] = TOPIC_CONFIGS[key].normalize(value)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class TopicConfig:
    """Effective (typed) configuration of one topic: set values over defaults."""

    cleanup_policy: str
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    delete_retention_ms: int
    flush_policy: str
    flush_interval_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    compression_type: str
    min_insync_replicas: int
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = INT64_MAX
    message_timestamp_difference_max_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_compaction_lag_ms: int = INT64_MAX
    file_delete_delay_ms: int = 60000

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> "TopicConfig":
        """Typed view. Raises InvalidConfigError on a bad value (images hold only values the
        controller validated, so this raises only for hand-built maps)."""
        values = {key: parse_value(key, configs.get(key, spec.default)) for key, spec in TOPIC_CONFIGS.items()}
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool
    type: str
    doc: str


def describe_configs(configs: Mapping[str, str]) -> tuple[ConfigEntry, ...]:
    """Every known key in name order with its effective value and whether it is the default
    (a key set explicitly to the default value counts as set, as in Kafka)."""
    return tuple(
        ConfigEntry(
            name=key,
            value=configs.get(key, spec.default),
            is_default=key not in configs,
            type=spec.type,
            doc=spec.doc,
        )
        for key, spec in sorted(TOPIC_CONFIGS.items())
    )

"""Group configs (Kafka 4's GroupConfig, KIP-848 / KIP-932): per-group dynamic settings (pure).

Kafka keeps a group's configs in the metadata log (a ConfigRecord of a GROUP resource);
so does raftlog (`records.GroupConfig`, replayed into `image.group_configs[group_id]`). A
coordinator uses a group's value in place of the broker's default for that group
(`consumer.session.timeout.ms` for `group.consumer.session.timeout.ms`, ...: `synonym`),
from the next heartbeat or acquisition on, without a restart.

The names, types, defaults and lower bounds are Kafka 4.4's `GroupConfig`. An upper bound is
the range raftlog accepts for the broker setting of the same meaning (raftlog/node/config.py;
raftlog has no separate group.*.min/max.* broker settings). The keys of features raftlog does
not serve (streams groups, the share dead-letter queue, server-side assignor offload) are
validated and stored as Kafka does, and have no effect.

Refusals are Kafka's: an unknown name is INVALID_CONFIG "Unknown group config name: ...", a bad
value INVALID_CONFIG naming the key; a session timeout not above the group's heartbeat
interval (both set on the group) is INVALID_CONFIG. Nothing is stored then.

Invariants:
* A group's entry is never an empty map; a stored value is the normalized string of a value
  `DEFS[name].parse` accepts, so equal settings are equal strings in records and images.

Public API:
    DEFS: Mapping[name, GroupConfigDef]
    normalize(configs) -> dict[str, str]                raises InvalidConfigError
    alter(current, set, delete) -> dict | None          the group's configs after (None: no change)
    value(configs, name, default) -> typed value        a group's value of `name`, else `default`
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Final, Mapping

from raftlog.base.errors import InvalidConfigError, InvalidRequestError

__all__ = ["GroupConfigDef", "DEFS", "normalize", "alter", "value", "MAX_GROUP_ID_CHARS"]

INT32_MAX: Final = 2**31 - 1
MAX_GROUP_ID_CHARS: Final = 255
MAX_VALUE_CHARS: Final = 1024
_INT_RE: Final = re.compile(r"-?(0|[1-9][0-9]*)\Z")
# ISO-8601 durations Kafka's by_duration:<duration> accepts (java.time.Duration.parse).
_DURATION_RE: Final = re.compile(r"P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?\Z", re.IGNORECASE)


@dataclass(frozen=True)
class GroupConfigDef:
    """One group config: Kafka's name, type name, default (Kafka's; the broker's own value
    of `synonym` wins where the broker has it), the broker setting it overrides (Kafka's
    name, or None), doc, and `parse(str) -> typed` (ValueError with the reason)."""

    name: str
    type: str  # "int" | "long" | "boolean" | "string" | "list"
    default: str | None
    synonym: str | None
    doc: str
    parse: Callable[[str], object]
    internal: bool = False  # Kafka's internal configs: accepted and stored, not described


def _int(lo: int, hi: int = INT32_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if not _INT_RE.match(text):
            raise ValueError("Not a number of type INT")
        if int(text) < lo:
            raise ValueError(f"Value must be at least {lo}")
        if int(text) > hi:
            raise ValueError(f"Value must be no more than {hi}")
        return int(text)

    return parse


def _boolean(text: str) -> bool:
    v = text.strip().lower()
    if v not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return v == "true"


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        v = text.strip().lower()
        if v not in options:
            raise ValueError(f"String must be one of: {', '.join(options)}")
        return v

    return parse


def _auto_offset_reset(text: str) -> str:
    v = text.strip().lower()
    if v in ("latest", "earliest"):
        return v
    if v.startswith("by_duration:") and _DURATION_RE.match(text.strip()[len("by_duration:"):]) \
            and len(v) > len("by_duration:p"):
        return "by_duration:" + text.strip()[len("by_duration:"):].upper()
    raise ValueError("String must be one of: latest, earliest, by_duration:PnDTnHnMn.nS")


def _string(text: str) -> str:
    return text.strip()


def _list(text: str) -> str:
    return ",".join(v.strip() for v in text.split(",") if v.strip())


_MS_MAX: Final = 3_600_000  # raftlog's bound on its group.* broker settings (config.py)
_STORED: Final = " (stored as Kafka does; raftlog does not serve this feature, so it has no effect)"

DEFS: Final[Mapping[str, GroupConfigDef]] = MappingProxyType({d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "int", "45000", "group.consumer.session.timeout.ms",
                   "The timeout to detect client failures when using the consumer group protocol.", _int(1, _MS_MAX)),
    GroupConfigDef("consumer.heartbeat.interval.ms", "int", "5000", "group.consumer.heartbeat.interval.ms",
                   "The heartbeat interval given to the members of a consumer group.", _int(1, _MS_MAX)),
    GroupConfigDef("consumer.assignment.interval.ms", "int", "1000", "group.consumer.assignment.interval.ms",
                   "The minimum time between assignment computations of a consumer group" + _STORED, _int(0)),
    GroupConfigDef("consumer.assignor.offload.enable", "boolean", "true", "group.consumer.assignor.offload.enable",
                   "Whether assignments are computed off the coordinator's thread" + _STORED, _boolean, internal=True),
    GroupConfigDef("share.session.timeout.ms", "int", "45000", "group.share.session.timeout.ms",
                   "The timeout to detect client failures when using the share group protocol.", _int(1, _MS_MAX)),
    GroupConfigDef("share.heartbeat.interval.ms", "int", "5000", "group.share.heartbeat.interval.ms",
                   "The heartbeat interval given to the members of a share group.", _int(1, _MS_MAX)),
    GroupConfigDef("share.record.lock.duration.ms", "int", "30000", "group.share.record.lock.duration.ms",
                   "The record acquisition lock duration in milliseconds for share groups.", _int(1000, _MS_MAX)),
    GroupConfigDef("share.delivery.count.limit", "int", "5", "group.share.delivery.count.limit",
                   "The maximum number of delivery attempts for a record delivered to a share group.", _int(2, 10)),
    GroupConfigDef("share.partition.max.record.locks", "int", "2000", "group.share.partition.max.record.locks",
                   "Share-group record lock limit per share-partition.", _int(100, 10_000)),
    GroupConfigDef("share.auto.offset.reset", "string", "latest", None,
                   "The strategy to initialize the share-partition start offset: earliest, latest or "
                   "by_duration:<ISO-8601 duration>.", _auto_offset_reset),
    GroupConfigDef("share.isolation.level", "string", "read_uncommitted", None,
                   "Controls how to read records written transactionally (read_committed or read_uncommitted).",
                   _choice("read_committed", "read_uncommitted")),
    GroupConfigDef("share.renew.acknowledge.enable", "boolean", "true", None,
                   "Whether the renew acknowledge type is enabled for the share group" + _STORED, _boolean),
    GroupConfigDef("share.assignment.interval.ms", "int", "1000", "group.share.assignment.interval.ms",
                   "The minimum time between assignment computations of a share group" + _STORED, _int(0)),
    GroupConfigDef("share.assignor.offload.enable", "boolean", "true", "group.share.assignor.offload.enable",
                   "Whether share assignments are computed off the coordinator's thread" + _STORED, _boolean, internal=True),
    GroupConfigDef("streams.session.timeout.ms", "int", "45000", "group.streams.session.timeout.ms",
                   "The timeout to detect client failures when using the streams group protocol" + _STORED, _int(1)),
    GroupConfigDef("streams.heartbeat.interval.ms", "int", "5000", "group.streams.heartbeat.interval.ms",
                   "The heartbeat interval given to the members of a streams group" + _STORED, _int(1)),
    GroupConfigDef("streams.num.standby.replicas", "int", "0", "group.streams.num.standby.replicas",
                   "The number of standby replicas for each task" + _STORED, _int(0)),
    GroupConfigDef("streams.initial.rebalance.delay.ms", "int", "3000", "group.streams.initial.rebalance.delay.ms",
                   "The delay before the first rebalance of a streams group" + _STORED, _int(0)),
    GroupConfigDef("streams.assignment.interval.ms", "int", "1000", "group.streams.assignment.interval.ms",
                   "The minimum time between assignment computations of a streams group" + _STORED, _int(0)),
    GroupConfigDef("streams.assignor.offload.enable", "boolean", "true", "group.streams.assignor.offload.enable",
                   "Whether streams assignments are computed off the coordinator's thread" + _STORED, _boolean, internal=True),
    GroupConfigDef("streams.task.offset.interval.ms", "int", "60000", "group.streams.task.offset.interval.ms",
                   "How often streams members report their task offsets" + _STORED, _int(1), internal=True),
    GroupConfigDef("streams.num.warmup.replicas", "int", "2", "group.streams.num.warmup.replicas",
                   "The number of warmup replicas for each task" + _STORED, _int(0), internal=True),
    GroupConfigDef("streams.rack.aware.assignment.tags", "list", "", "group.streams.rack.aware.assignment.tags",
                   "The client tags the rack-aware streams assignor uses" + _STORED, _list),
    GroupConfigDef("streams.acceptable.recovery.lag", "long", "10000", "group.streams.acceptable.recovery.lag",
                   "The lag a streams task may have and count as caught up" + _STORED, _int(0, 2**63 - 1), internal=True),
    GroupConfigDef("streams.assignor.name", "string", None, "group.streams.assignors",
                   "The task assignor of this streams group" + _STORED, _string),
    GroupConfigDef("errors.deadletterqueue.topic.name", "string", "", None,
                   "The dead-letter queue topic of this share group" + _STORED, _string),
    GroupConfigDef("errors.deadletterqueue.copy.record.enable", "boolean", "false", None,
                   "Whether the dead-letter queue gets a copy of the record" + _STORED, _boolean),
)})  # fmt: skip

# (session timeout, heartbeat interval): the first must be above the second (Kafka's check).
_ORDERED: Final = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                   ("share.session.timeout.ms", "share.heartbeat.interval.ms"))


def _render(parsed: object) -> str:
    return ("true" if parsed else "false") if isinstance(parsed, bool) else str(parsed)


def normalize(configs: Mapping[str, str]) -> dict[str, str]:
    """Each value parsed and printed back (`" 007"` -> `"7"`, `"EARLIEST"` -> `"earliest"`).
    Raises InvalidConfigError naming the key (an unknown name, a bad value)."""
    if not isinstance(configs, Mapping):
        raise InvalidRequestError("group configs must be a map of names to values")
    out = {}
    for name, text in sorted(configs.items()):
        definition = DEFS.get(name) if isinstance(name, str) else None
        if definition is None:
            raise InvalidConfigError(f"Unknown group config name: {str(name)[:80]}", key=str(name)[:80])
        if not isinstance(text, str) or len(text) > MAX_VALUE_CHARS:
            raise InvalidConfigError(f"{name}: the value must be a string of at most {MAX_VALUE_CHARS} characters",
                                     key=name)
        try:
            out[name] = _render(definition.parse(text))
        except ValueError as exc:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: {exc}", key=name) from None
    return out


def alter(current: Mapping[str, str], set: Mapping[str, str],
          delete: list[str] | tuple[str, ...]) -> dict[str, str] | None:
    """A group's configs after setting `set` and deleting `delete` (back to the broker's
    default), or None when nothing changes. Raises InvalidConfigError as `normalize` (also
    for a session timeout not above the heartbeat interval), InvalidRequestError for a key
    both set and deleted."""
    normalized = normalize(set)
    if not isinstance(delete, (list, tuple)) or not all(isinstance(k, str) for k in delete):
        raise InvalidRequestError("delete must be a list of config names")
    for name in delete:
        if name not in DEFS:
            raise InvalidConfigError(f"Unknown group config name: {name[:80]}", key=name[:80])
    both = sorted(k for k in delete if k in normalized)
    if both:
        raise InvalidRequestError(f"config keys both set and deleted: {both}")
    after = {k: v for k, v in current.items() if k not in delete}
    after.update(normalized)
    for session, heartbeat in _ORDERED:
        if session in after and heartbeat in after and int(after[session]) <= int(after[heartbeat]):
            raise InvalidConfigError(f"{session} must be greater than {heartbeat}", key=session)
    after = dict(sorted(after.items()))
    return None if after == dict(current) else after


def value(configs: Mapping[str, str] | None, name: str, default: object) -> object:
    """The group's value of `name` (typed as its definition parses it), else `default`."""
    text = (configs or {}).get(name)
    if text is None:
        return default
    try:
        return DEFS[name].parse(text)
    except (KeyError, ValueError):  # a name or value a newer node wrote: not ours to apply
        return default

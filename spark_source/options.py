"""Option parsing for `format("raftlog")`: Spark's option map in, one frozen `SourceOptions` out.

Pure: no I/O, no Spark session. Spark hands options over with lower-cased keys and string
values; `parse_options` lower-cases again (callers outside Spark may not) and checks every
value, raising `InvalidOption` with the option's user-facing name and what was expected.
Unknown options are errors (a typo such as `startingOffset` would otherwise be silently
ignored and read from the wrong place); `path` is tolerated because Spark may pass it.

Names mirror Spark's Kafka source: `subscribe` / `subscribePattern` / `assign` (exactly one),
`startingOffsets`, `endingOffsets` (batch only), `startingTimestamp`,
`startingOffsetsByTimestamp`, `startingOffsetsByTimestampStrategy`, `endingTimestamp`,
`maxOffsetsPerTrigger`, `failOnDataLoss`, `includeHeaders`, `minPartitions`,
`kafka.isolation.level` (read_committed, the default, or read_uncommitted). raftlog adds
`bootstrap` (alias `raftlog.bootstrap.servers`), `startingOffsets = "group:<id>"`,
`commitToGroup`, `decode`, fetch tuning under `raftlog.*`, and `raftlog.provider.*`,
passed unchecked to a custom provider factory.

Errors of the package (one root, stable `code`, never on the wire):

    SourceError                  SPARK_SOURCE_ERROR
     ├── InvalidOption           INVALID_CONFIG        a bad option value or combination
     ├── DataLoss                DATA_LOSS             records gone (retention, truncation,
     │                                                 deleted partition); failOnDataLoss
     ├── NotAvailableYet         NOT_AVAILABLE_YET     a feature raftlog does not have yet
     └── ReadTimedOut            REQUEST_TIMED_OUT     a planned range could not be read in time
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from raftlog.base.errors import InvalidConfigError, RaftlogError, RejectedError, RequestTimedOutError
from raftlog.base.topics import OFFSETS_TOPIC

__all__ = [
    "SourceError",
    "InvalidOption",
    "DataLoss",
    "NotAvailableYet",
    "ReadTimedOut",
    "TopicPartition",
    "Subscription",
    "OffsetSpec",
    "SourceOptions",
    "parse_options",
    "EARLIEST",
    "LATEST",
    "PROVIDER_PREFIX",
]

TopicPartition = tuple[str, int]

EARLIEST = -2  # Kafka's JSON markers in startingOffsets / endingOffsets
LATEST = -1


class SourceError(RaftlogError):
    """Root of the source's own errors; each also derives from the registry class that says
    whether anything happened (raftlog/base/errors.py)."""


class InvalidOption(SourceError, InvalidConfigError, ValueError):
    pass


class DataLoss(SourceError, RejectedError):
    """Records the query should read are gone. Raised only when failOnDataLoss is true."""

    code = "DATA_LOSS"


class NotAvailableYet(SourceError, RejectedError, NotImplementedError):
    code = "NOT_AVAILABLE_YET"


class ReadTimedOut(SourceError, RequestTimedOutError, TimeoutError):
    pass


# Every option we understand, by lower-cased key.
_KNOWN = frozenset({
    "bootstrap", "raftlog.bootstrap.servers",
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp",
    "maxoffsetspertrigger", "failondataloss", "includeheaders", "minpartitions",
    "committogroup", "decode",
    "raftlog.fetch.max.bytes", "raftlog.request.timeout.ms", "raftlog.read.timeout.ms",
    "path", "kafka.isolation.level",
    # typed keys and values through a schema registry (spark_source/schemas.py)
    "valueformat", "keyformat", "schemaregistryurl", "valuesubject", "keysubject",
})
# Kafka options that cannot work here, with the reason (clearer than "unknown option").
_UNSUPPORTED = {
    "minoffsetspertrigger": "a Python data source cannot combine read limits (ReadMaxRows and "
                            "ReadMinRows), so only maxOffsetsPerTrigger is supported",
    "maxtriggerdelay": "it only makes sense with minOffsetsPerTrigger, which is not supported",
    "kafka.bootstrap.servers": "use 'bootstrap' or 'raftlog.bootstrap.servers'",
}

# Options under this prefix are not checked here: they belong to a custom provider factory
# (RaftlogDataSource.provider_factory), which reads them from SourceOptions.raw.
PROVIDER_PREFIX = "raftlog.provider."

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
_GROUP_PREFIX = "group:"
_DECODE_VALUES = ("offsets",)


@dataclass(frozen=True, slots=True)
class Subscription:
    """What to read: exactly one of topics (subscribe), pattern (subscribePattern, a full
    match as Java's `Pattern.matches`), or assigned partitions (assign)."""

    kind: str  # "subscribe" | "subscribepattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribepattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    kind: "earliest" | "latest" | "specific" (offsets: {tp: offset or -2/-1}) |
    "timestamp" (timestamp: one for all partitions, or offsets: {tp: ms}) |
    "group" (group_id: a consumer group's committed offsets).
    """

    kind: str
    offsets: Mapping[TopicPartition, int] | None = None
    timestamp: int | None = None
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only; None for streaming
    streaming: bool
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    commit_to_group: str | None = None
    timestamp_strategy: str = "error"  # no offset at/after the timestamp: "error" | "latest"
    fetch_max_bytes: int = 4 * 1024 * 1024
    request_timeout_ms: int = 30_000
    read_timeout_ms: int = 120_000
    raw: Mapping[str, str] = field(default_factory=dict)  # the lower-cased map, for providers
    decode: str | None = None  # "offsets": __consumer_offsets as committed offsets (batch)
    # kafka.isolation.level (Spark's Kafka source option): read_committed (the default) reads
    # up to the last stable offset and skips aborted transactions' records.
    read_committed: bool = True


def _bad(name: str, value: object, expected: str) -> InvalidOption:
    return InvalidOption(f"option {name}={value!r}: expected {expected}")


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    v = opts.get(key)
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise _bad(name, v, "'true' or 'false'")


def _int(opts: Mapping[str, str], key: str, name: str, default: int | None, *,
         minimum: int = 1, maximum: int = (1 << 63) - 1) -> int | None:
    v = opts.get(key)
    if v is None:
        return default
    s = str(v).strip()
    if not re.fullmatch(r"-?[0-9]+", s):
        raise _bad(name, v, f"an integer >= {minimum}")
    n = int(s)
    if not minimum <= n <= maximum:
        raise _bad(name, v, f"an integer in [{minimum}, {maximum}]")
    return n


def _topic(name: str, t: object) -> str:
    if not isinstance(t, str) or not _TOPIC_RE.fullmatch(t) or t in (".", ".."):
        raise _bad(name, t, "topic names of [A-Za-z0-9._-], 1..249 characters")
    return t


def _json(name: str, v: str) -> object:
    try:
        return json.loads(v)
    except (json.JSONDecodeError, TypeError) as exc:
        raise _bad(name, v, f"JSON ({exc})") from None


def _partition_key(name: str, k: object) -> int:
    # JSON object keys are strings; Kafka writes partitions as "0", "1", ...
    if isinstance(k, str) and re.fullmatch(r"[0-9]+", k) and int(k) <= 0x7FFFFFFF:
        return int(k)
    raise _bad(name, k, "partition numbers as JSON keys (\"0\", \"1\", ...)")


def _per_partition(name: str, v: str, *, allowed_markers: tuple[int, ...],
                   marker_help: str) -> dict[TopicPartition, int]:
    """{"topic": {"0": n, ...}, ...} -> {(topic, 0): n}; n >= 0 or one of allowed_markers."""
    doc = _json(name, v)
    if not isinstance(doc, dict) or not doc:
        raise _bad(name, v, 'a JSON object such as {"topicA": {"0": 23, "1": -2}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        _topic(name, topic)
        if not isinstance(parts, dict) or not parts:
            raise _bad(name, v, f"a non-empty object of partitions for topic {topic!r}")
        for k, n in parts.items():
            p = _partition_key(name, k)
            if type(n) is not int or (n < 0 and n not in allowed_markers):
                raise _bad(name, n, f"an offset >= 0{marker_help} for {topic}-{p}")
            out[(topic, p)] = n
    return out


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise InvalidOption(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    v = opts[kind]
    if kind == "subscribe":
        topics = [t.strip() for t in str(v).split(",") if t.strip()]
        if not topics:
            raise _bad("subscribe", v, "a comma-separated list of topics")
        for t in topics:
            _topic("subscribe", t)
        return Subscription(kind, topics=tuple(sorted(set(topics))))
    if kind == "subscribepattern":
        s = str(v)
        if not s.strip():
            raise _bad("subscribePattern", v, "a regular expression")
        try:
            re.compile(s)
        except re.error as exc:
            raise _bad("subscribePattern", v, f"a valid regular expression ({exc})") from None
        return Subscription(kind, pattern=s)
    doc = _json("assign", v)
    if not isinstance(doc, dict) or not doc:
        raise _bad("assign", v, 'a JSON object such as {"topicA": [0, 1], "topicB": [2]}')
    assigned: set[TopicPartition] = set()
    for topic, parts in doc.items():
        _topic("assign", topic)
        if not isinstance(parts, list) or not parts or not all(
            type(p) is int and 0 <= p <= 0x7FFFFFFF for p in parts
        ):
            raise _bad("assign", parts, f"a non-empty list of partition numbers for {topic!r}")
        assigned.update((topic, p) for p in parts)
    return Subscription(kind, assigned=tuple(sorted(assigned)))


def _starting(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    # Kafka's precedence: startingTimestamp, then startingOffsetsByTimestamp, then
    # startingOffsets. Setting two of them is an error here: the precedence surprises.
    given = [k for k in ("startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets")
             if k in opts]
    if len(given) > 1:
        raise InvalidOption(f"set only one of startingTimestamp, startingOffsetsByTimestamp, "
                            f"startingOffsets (got {', '.join(given)})")
    if "startingtimestamp" in opts:
        ts = _int(opts, "startingtimestamp", "startingTimestamp", None, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts)
    if "startingoffsetsbytimestamp" in opts:
        per = _per_partition("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"],
                             allowed_markers=(), marker_help=" (a timestamp in ms)")
        return OffsetSpec("timestamp", offsets=per)
    v = opts.get("startingoffsets")
    if v is None:
        # Kafka's defaults: a stream starts at the end, a batch at the beginning.
        return OffsetSpec("latest" if streaming else "earliest")
    s = str(v).strip()
    if s.lower() == "earliest":
        return OffsetSpec("earliest")
    if s.lower() == "latest":
        if not streaming:
            raise InvalidOption("startingOffsets='latest' is not allowed in a batch query "
                                "(it would read nothing)")
        return OffsetSpec("latest")
    if s.lower().startswith(_GROUP_PREFIX):
        group_id = s[len(_GROUP_PREFIX):].strip()
        if not group_id:
            raise _bad("startingOffsets", v, "'group:<group id>' with a non-empty group id")
        return OffsetSpec("group", group_id=group_id)
    markers = (EARLIEST, LATEST) if streaming else (EARLIEST,)
    per = _per_partition("startingOffsets", s, allowed_markers=markers,
                         marker_help=", -2 (earliest)" + (" or -1 (latest)" if streaming else ""))
    return OffsetSpec("specific", offsets=per)


def _ending(opts: Mapping[str, str], streaming: bool) -> OffsetSpec | None:
    given = [k for k in ("endingoffsets", "endingtimestamp") if k in opts]
    if streaming:
        if given:
            raise InvalidOption(f"{given[0]} is only for batch queries (a stream has no end)")
        return None
    if len(given) > 1:
        raise InvalidOption("set only one of endingOffsets and endingTimestamp")
    if "endingtimestamp" in opts:
        ts = _int(opts, "endingtimestamp", "endingTimestamp", None, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts)
    v = opts.get("endingoffsets")
    if v is None or str(v).strip().lower() == "latest":
        return OffsetSpec("latest")
    if str(v).strip().lower() == "earliest":
        raise InvalidOption("endingOffsets='earliest' is not allowed (it would read nothing)")
    per = _per_partition("endingOffsets", str(v), allowed_markers=(LATEST,),
                         marker_help=" or -1 (latest)")
    return OffsetSpec("specific", offsets=per)


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and convert Spark's option map. Returns SourceOptions; raises InvalidOption
    naming the option and what it expects."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    for k in opts:
        if k in _UNSUPPORTED:
            raise InvalidOption(f"option {k} is not supported: {_UNSUPPORTED[k]}")
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith(PROVIDER_PREFIX))
    if unknown:
        raise InvalidOption(f"unknown option(s) {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(_KNOWN - {'path'}))}")
    boot = [opts[k] for k in ("bootstrap", "raftlog.bootstrap.servers") if k in opts]
    if len(boot) != 1 or not boot[0].strip():
        raise InvalidOption("set 'bootstrap' (or 'raftlog.bootstrap.servers') to "
                            "'host:port[,host:port...]', exactly once")
    bootstrap = ",".join(a.strip() for a in boot[0].split(",") if a.strip())
    for addr in bootstrap.split(","):
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _bad("bootstrap", addr, "'host:port' entries separated by commas")
    decode = opts.get("decode")
    if decode is not None:
        decode = decode.strip().lower()
        if decode not in _DECODE_VALUES:
            raise _bad("decode", opts["decode"], "'offsets'")
        if streaming:
            raise InvalidOption("decode=offsets is for batch reads (the latest committed "
                                "offset per key is a snapshot, not a stream)")
        if not any(k in opts for k in ("subscribe", "subscribepattern", "assign")):
            opts = {**opts, "subscribe": OFFSETS_TOPIC}
    subscription = _subscription(opts)
    if decode is not None and not (subscription.kind == "subscribe"
                                   and subscription.topics == (OFFSETS_TOPIC,)):
        raise InvalidOption(f"decode=offsets reads only {OFFSETS_TOPIC} (leave out "
                            "subscribe, or subscribe to it)")
    starting = _starting(opts, streaming)
    ending = _ending(opts, streaming)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _bad("startingOffsetsByTimestampStrategy", strategy, "'error' or 'latest'")
    max_per_trigger = _int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", None)
    if not streaming:
        max_per_trigger = None  # as Kafka's source: a batch query reads its whole range
    isolation = opts.get("kafka.isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise _bad("kafka.isolation.level", opts["kafka.isolation.level"], "'read_committed' or 'read_uncommitted'")
    commit_to_group = opts.get("committogroup")
    if commit_to_group is not None:
        commit_to_group = commit_to_group.strip()
        if not commit_to_group:
            raise _bad("commitToGroup", opts["committogroup"], "a non-empty group id")
        if not streaming:
            raise InvalidOption("commitToGroup is only for streaming queries")
    return SourceOptions(
        bootstrap=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        streaming=streaming,
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        min_partitions=_int(opts, "minpartitions", "minPartitions", None),
        commit_to_group=commit_to_group,
        timestamp_strategy=strategy,
        fetch_max_bytes=_int(opts, "raftlog.fetch.max.bytes", "raftlog.fetch.max.bytes",
                             4 * 1024 * 1024, minimum=1024, maximum=1 << 30),
        request_timeout_ms=_int(opts, "raftlog.request.timeout.ms", "raftlog.request.timeout.ms",
                                30_000, minimum=100, maximum=3_600_000),
        read_timeout_ms=_int(opts, "raftlog.read.timeout.ms", "raftlog.read.timeout.ms",
                             120_000, minimum=100, maximum=86_400_000),
        raw=opts,
        decode=decode,
        read_committed=isolation == "read_committed",
    )

"""Pure planning for the Spark source: offsets JSON, resolving start/end, ranges, limits, splits.

No I/O, no clock, no Spark session: the shell (`source.py`) asks the cluster for partition
metadata and earliest/latest/timestamp offsets, then calls these functions.

Invariants:
* Offset JSON (what Spark stores in the checkpoint and compares as a string) has a fixed
  key order: topics sorted, partitions ascending by number, written as strings
  (`{"a": {"0": 5, "2": 7, "10": 1}}`), so equal offsets are equal strings.
* A range is [start, end): `end` is the offset after the last one read. Nothing planned
  reads past the `end` it was given, even if more records arrive.
* `rate_limit` never admits more than `limit` offsets in total and, when anything is
  pending, admits at least one (progress).
* Data loss (records below the log start offset after retention, a partition that went
  away, an offset that went backwards) raises `DataLoss` when failOnDataLoss is true, or
  comes back as a warning string and is skipped when it is false: the shell logs it.
* `RaftlogInputPartition` holds only plain values: it pickles, and no socket travels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spark_source.options import (
    EARLIEST,
    LATEST,
    DataLoss,
    InvalidOption,
    OffsetSpec,
    Subscription,
    TopicPartition,
)

try:  # Spark insists on this base class; keep the module importable without pyspark.
    from pyspark.sql.datasource import InputPartition as _InputPartitionBase
except ImportError:  # pragma: no cover - pyspark is in the `spark` extra
    _InputPartitionBase = object  # type: ignore[assignment,misc]

__all__ = [
    "PartitionMeta",
    "RaftlogInputPartition",
    "offsets_to_json",
    "offsets_from_json",
    "select_partitions",
    "timestamps_to_look_up",
    "resolve_offsets",
    "plan_ranges",
    "next_end_offsets",
    "rate_limit",
    "split_ranges",
    "on_data_loss",
]


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """One partition as the cluster describes it: where it lives right now."""

    topic: str
    partition: int
    leader_id: int | None = None
    leader: str | None = None  # "host:port" of the leader, when known
    internal: bool = False


@dataclass(frozen=True)
class RaftlogInputPartition(_InputPartitionBase):
    """One Spark task's work: records [start, end) of topic-partition, and where its leader
    was at planning time (a hint: the reader follows leader changes anyway)."""

    topic: str
    partition: int
    start: int
    end: int
    leader_id: int | None = None
    leader: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


# ---------------------------------------------------------------- offsets JSON


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{(topic, p): n} -> {"topic": {"p": n}} with topics sorted and partitions ascending."""
    out: dict[str, dict[str, int]] = {}
    for topic, p in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def offsets_from_json(doc: object) -> dict[TopicPartition, int]:
    """The inverse of offsets_to_json (what Spark gives back from the checkpoint).
    Raises InvalidOption if `doc` is not {topic: {"p": offset >= 0}}."""
    if not isinstance(doc, Mapping):
        raise InvalidOption(f"offset is not a JSON object: {doc!r:.200}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(topic, str) or not isinstance(parts, Mapping):
            raise InvalidOption(f"offset for {topic!r} is not an object of partitions")
        for p, n in parts.items():
            if not (isinstance(p, str) and p.isdigit()) or type(n) is not int or n < 0:
                raise InvalidOption(f"offset entry {topic}/{p!r}: {n!r} is not a partition "
                                    "number and an offset >= 0")
            out[(topic, int(p))] = n
    return out


# ---------------------------------------------------------------- resolving


def select_partitions(sub: Subscription, metas: Iterable[PartitionMeta]) -> list[PartitionMeta]:
    """The partitions a subscription reads, sorted by (topic, partition).

    subscribePattern skips internal topics (Kafka's exclude.internal.topics); `assign` must
    name partitions that exist (InvalidOption lists the missing ones); `subscribe` to a topic
    with no partitions yet reads nothing (a stream picks it up when it appears).
    """
    metas = list(metas)
    if sub.kind == "assign":
        by_tp = {(m.topic, m.partition): m for m in metas}
        missing = [tp for tp in sub.assigned if tp not in by_tp]
        if missing:
            raise InvalidOption("assign names partitions that do not exist: "
                                + ", ".join(f"{t}-{p}" for t, p in missing))
        chosen = [by_tp[tp] for tp in sub.assigned]
    else:
        chosen = [m for m in metas if sub.matches(m.topic)
                  and not (m.internal and sub.kind == "subscribepattern")]
    return sorted(chosen, key=lambda m: (m.topic, m.partition))


def timestamps_to_look_up(spec: OffsetSpec, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """For a "timestamp" spec, {tp: ms} to ask the cluster for (the first offset at or after
    ms). Raises InvalidOption if a per-partition map misses or adds partitions."""
    if spec.kind != "timestamp":
        return {}
    if spec.offsets is None:
        return {tp: int(spec.timestamp) for tp in partitions}
    _same_partitions("startingOffsetsByTimestamp", spec.offsets, partitions)
    return {tp: spec.offsets[tp] for tp in partitions}


def _same_partitions(name: str, given: Mapping[TopicPartition, int],
                     partitions: Sequence[TopicPartition]) -> None:
    # Kafka's rule: specific offsets must name exactly the subscribed partitions.
    want = set(partitions)
    missing = sorted(want - set(given))
    extra = sorted(set(given) - want)
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise InvalidOption(f"{name} must name every subscribed partition, and only those: "
                            + "; ".join(parts))


def resolve_offsets(
    spec: OffsetSpec,
    partitions: Sequence[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    name: str,
    by_timestamp: Mapping[TopicPartition, int | None] | None = None,
    committed: Mapping[TopicPartition, int | None] | None = None,
    timestamp_strategy: str = "error",
) -> dict[TopicPartition, int]:
    """Concrete offsets for every partition from a spec and the cluster's answers.

    `by_timestamp`: the first offset at or after each timestamp (None: no such record; then
    "error" raises InvalidOption, "latest" takes the latest offset). `committed`: a group's
    committed offsets (None: no commit; the partition starts at earliest). Specific offsets
    are clamped into nothing: the shell checks them against the log with `plan_ranges`.
    """
    out: dict[TopicPartition, int] = {}
    kind = spec.kind
    if kind == "specific":
        _same_partitions(name, spec.offsets or {}, partitions)
    for tp in partitions:
        if kind == "earliest":
            out[tp] = earliest[tp]
        elif kind == "latest":
            out[tp] = latest[tp]
        elif kind == "specific":
            n = spec.offsets[tp]
            out[tp] = earliest[tp] if n == EARLIEST else latest[tp] if n == LATEST else n
        elif kind == "timestamp":
            off = None if by_timestamp is None else by_timestamp.get(tp)
            if off is None:
                if timestamp_strategy != "latest":
                    raise InvalidOption(
                        f"{name}: no record at or after the timestamp in {tp[0]}-{tp[1]}; set "
                        "startingOffsetsByTimestampStrategy=latest to start at the end instead")
                off = latest[tp]
            out[tp] = off
        elif kind == "group":
            c = None if committed is None else committed.get(tp)
            out[tp] = earliest[tp] if c is None else c
        else:
            raise InvalidOption(f"unknown offset spec {kind!r}")
    return out


# ---------------------------------------------------------------- data loss


def on_data_loss(message: str, fail_on_data_loss: bool, warnings: list[str]) -> None:
    """Raise DataLoss, or record the warning (Kafka's wording of the remedy included)."""
    if fail_on_data_loss:
        raise DataLoss(message + ". Some data may have been lost because it is no longer "
                       "in raftlog (retention, truncation or a deleted topic). If you want "
                       "the query to continue in that case, set failOnDataLoss to false.")
    warnings.append(message + ". Some data may have been lost; continuing because "
                    "failOnDataLoss is false.")


# ---------------------------------------------------------------- ranges


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    metas: Mapping[TopicPartition, PartitionMeta] | None = None,
    *,
    fail_on_data_loss: bool = True,
    new_partitions_from_zero: bool = True,
) -> tuple[list[RaftlogInputPartition], list[str]]:
    """One RaftlogInputPartition per partition of `end` with records to read, and warnings.

    A partition in `end` but not in `start` is new: it starts at its earliest offset (loss if
    that is not 0, when `new_partitions_from_zero`). A start below the log start offset has
    lost records: the range begins at the log start (after the DataLoss decision). An end
    below the start (the log went backwards) is loss, and the partition reads nothing.
    Empty ranges are left out. Order: (topic, partition).
    """
    warnings: list[str] = []
    ranges: list[RaftlogInputPartition] = []
    metas = metas or {}
    for tp in sorted(end):
        e = end[tp]
        s = start.get(tp)
        low = earliest.get(tp)
        if s is None:
            s = 0 if low is None else low
            if new_partitions_from_zero and s != 0:
                on_data_loss(f"added partition {tp[0]}-{tp[1]} starts from {s} instead of 0",
                             fail_on_data_loss, warnings)
        if e < s:
            on_data_loss(f"partition {tp[0]}-{tp[1]}'s offset went back from {s} to {e}",
                         fail_on_data_loss, warnings)
            continue
        if low is not None and s < low:
            on_data_loss(f"cannot read {tp[0]}-{tp[1]} from offset {s}: the log starts at "
                         f"{low}", fail_on_data_loss, warnings)
            s = min(low, e)
        if e > s:
            m = metas.get(tp)
            ranges.append(RaftlogInputPartition(tp[0], tp[1], s, e,
                                                None if m is None else m.leader_id,
                                                None if m is None else m.leader))
    return ranges, warnings


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """End offsets admitting at most `limit` offsets in total, shared out in proportion to
    each partition's backlog (as Spark's KafkaSource does).

    Kafka's source rounds each share up when it is below 1 ("don't starve small
    partitions"), which can exceed the limit; Spark's ReadMaxRows says a source must not
    read more, so this uses largest remainders instead: floor every share, then hand the
    leftover offsets one each to the largest fractional parts (ties: (topic, partition)
    order). Partitions in `latest` but not in `start` have no backlog here (the caller puts
    new partitions into `start` at their earliest offset first).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    backlog = {tp: latest[tp] - start[tp] for tp in latest if tp in start and latest[tp] > start[tp]}
    total = sum(backlog.values())
    out = dict(latest)
    if total <= limit:
        return out
    shares: dict[TopicPartition, int] = {}
    fractions: list[tuple[int, TopicPartition]] = []
    for tp in sorted(backlog):
        # Exact integer arithmetic: limit * size // total (no float rounding at 2**53).
        whole, rem = divmod(limit * backlog[tp], total)
        shares[tp] = whole
        fractions.append((rem, tp))
    leftover = limit - sum(shares.values())
    fractions.sort(key=lambda x: -x[0])  # stable: ties keep (topic, partition) order
    for _rem, tp in fractions[:leftover]:
        shares[tp] += 1
    for tp, n in shares.items():
        out[tp] = start[tp] + n
    return out


def next_end_offsets(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    earliest_of_new: Mapping[TopicPartition, int],
    *,
    limit: int | None,
    fail_on_data_loss: bool,
    target: Mapping[TopicPartition, int] | None = None,
) -> tuple[dict[TopicPartition, int], list[str]]:
    """The end offset of the next micro-batch (streaming `latestOffset`), and warnings.

    `latest`: the high watermarks of the partitions subscribed now. `target`: the offsets
    fixed by prepareForTriggerAvailableNow (no batch goes past them). A partition of `start`
    that no longer exists is loss and leaves the offset. New partitions join at their
    earliest offset. `limit` (ReadMaxRows) caps the offsets admitted over all partitions.
    Returns `start` itself (same keys, same values) when there is nothing new.
    """
    warnings: list[str] = []
    for tp in sorted(set(start) - set(latest)):
        on_data_loss(f"partition {tp[0]}-{tp[1]} no longer exists", fail_on_data_loss, warnings)
    cap = dict(latest)
    if target is not None:
        cap = {tp: min(n, target[tp]) if tp in target else n for tp, n in cap.items()
               if tp in target or tp in start}
    # Where each partition's backlog begins: the previous end, or earliest for new ones.
    begin = {tp: (start[tp] if tp in start else earliest_of_new.get(tp, 0)) for tp in cap}
    if limit is None:
        end = cap
    else:
        # A partition whose offset went back (cap < begin) has no backlog: rate_limit keeps
        # its cap as is and plan_ranges reports it.
        end = rate_limit(begin, cap, limit)
    return {tp: end[tp] for tp in sorted(end)}, warnings


def split_ranges(ranges: Sequence[RaftlogInputPartition], min_partitions: int | None) -> list[RaftlogInputPartition]:
    """Split ranges so that there are about `min_partitions` of them (Kafka's minPartitions).

    Unchanged when there are already at least that many. Otherwise each range gets
    max(1, round(size / total * min_partitions)) pieces of near-equal size, so big ranges
    split more; pieces keep their partition's leader hint and cover the range exactly.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[RaftlogInputPartition] = []
    for r in ranges:
        parts = max(1, min(r.size, int(math.floor(r.size * min_partitions / total + 0.5))))
        for i in range(parts):
            s = r.start + r.size * i // parts
            e = r.start + r.size * (i + 1) // parts
            out.append(RaftlogInputPartition(r.topic, r.partition, s, e, r.leader_id, r.leader))
    return out

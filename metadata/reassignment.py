"""Partition reassignment in the controller (pure): judge a plan, start, cancel and complete
moves as PartitionReassignment records (docs/reassignment.md).

A move's life in the metadata log:
    start     replicas = target + the original replicas leaving; adding = target - original;
              removing = original - target.
    complete  replicas = target (no adding, no removing): proposed when the partition's
              leader reports that its Raft group's committed voters are exactly the target.
    cancel    replicas = original (no adding, no removing); the group walks its membership
              back the same way it walked forward (partition/membership.py `next_step`).
A controller failover loses nothing: the move is in the image, and the leaders keep steering
toward it and report again.

Every item is judged on its own and either fully recorded or refused with its Kafka error
(nothing half-done): an unknown topic or partition [UNKNOWN_TOPIC_OR_PARTITION]; no
replicas, a duplicate, an unregistered broker or too many [INVALID_REPLICA_ASSIGNMENT]; a
move already in progress [REASSIGNMENT_IN_PROGRESS] (cancel it first; Kafka would replace
its target); a cancel with none [NO_REASSIGNMENT_IN_PROGRESS]; the same partition twice in
one request [INVALID_REQUEST]; a move (or cancel) of an internal topic's partition while its
coordinator is busy [COORDINATOR_LOAD_IN_PROGRESS or CONCURRENT_TRANSACTIONS, with the reason].
`check_replicas` / `check_assignments` judge a replica list an
operator gives (a move's target; a manual assignment in CreateTopics and CreatePartitions).

Busy coordinators. A move changes the partition's leader in the end (the old leader leaves, or
the preferred one takes over), and a coordinator moves with its partition's leadership: the
new leader replays the partition from the start. Kafka moves such a partition at any time and
lets the clients ride out COORDINATOR_LOAD_IN_PROGRESS; here, as Redpanda waits for a
partition's pending work before it moves it, a move is refused while the partition's
coordinator is busy, so it never cuts into a load or a transaction's completion:

* `__consumer_offsets`-p: the group coordinator is loading p (COORDINATOR_LOAD_IN_PROGRESS);
* `__transaction_state`-p: the transaction coordinator is loading p
  (COORDINATOR_LOAD_IN_PROGRESS), or a transaction of p has its state write or its
  COMMIT/ABORT markers in flight (CONCURRENT_TRANSACTIONS, the transactional id named: e.g.
  a marker's partition has no leader);
* `__share_group_state`-p: the share coordinator is replaying p for a new leader epoch
  (COORDINATOR_LOAD_IN_PROGRESS);
* `_schemas` is never busy: the schema registry holds no state a move could cut (it reads
  the topic as a consumer does, and writes through its leader).

The leaders report busy partitions with each broker heartbeat (`busy_partitions`, rows of
raftlog/base/topics.py `busy_row`); the controller keeps each broker's last report, for a
session timeout, and counts a row only from the partition's current leader. Both errors are
retriable: the same request goes through once the coordinator is idle. A report is at most a
heartbeat old (1.5 s), so "busy" is what the leader said then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from raftlog.base.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    RaftlogError,
    ReassignmentInProgressError,
    UnknownTopicOrPartitionError,
    error_from_wire,
)

from metadata.image import MetadataImage, PartitionState
from metadata.records import MAX_REPLICAS, PartitionReassignment

__all__ = ["ReassignmentItem", "ReassignmentStatus", "busy_partitions", "completion", "list_reassignments",
           "plan_reassignments", "check_replicas", "check_assignments"]


@dataclass(frozen=True)
class ReassignmentItem:
    """Move `topic`-`partition` to `replicas` (in preference order), or cancel its move (None)."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True)
class ReassignmentStatus:
    """A move in progress, as ListPartitionReassignments answers it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def _partition(image: MetadataImage, topic: str, partition: int) -> tuple[str, PartitionState]:
    t = image.topic(topic)
    if t is None or not t.complete or not 0 <= partition < len(t.partitions):
        raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
    return t.topic_id, t.partitions[partition]


def _judge(image: MetadataImage, item: ReassignmentItem) -> PartitionReassignment | None:
    topic_id, cur = _partition(image, item.topic, item.partition)
    where = f"{item.topic}-{item.partition}"
    if item.replicas is None:
        if not cur.reassigning:
            raise NoReassignmentInProgressError(f"{where}: no reassignment in progress")
        return PartitionReassignment(topic_id, item.partition, cur.original_replicas)
    target = check_replicas(image, where, item.replicas)
    if cur.reassigning:
        raise ReassignmentInProgressError(
            f"{where}: moving to {list(cur.target_replicas)} already; cancel that first")
    if set(target) == set(cur.replicas):
        return None  # already there (the order only names the preferred leader)
    adding = tuple(r for r in target if r not in cur.replicas)
    removing = tuple(r for r in cur.replicas if r not in target)
    return PartitionReassignment(topic_id, item.partition, target + removing, adding, removing)


def busy_partitions(image: MetadataImage, reports: Mapping[int, list[Any]]
                    ) -> dict[tuple[str, int], RaftlogError]:
    """The internal partitions whose coordinator is busy (module docstring "Busy
    coordinators"), from each broker's last heartbeat `reports`: a row counts only from the
    partition's current leader; rows that are not well formed are ignored (a report, not a
    command)."""
    out: dict[tuple[str, int], RaftlogError] = {}
    for broker_id, rows in reports.items():
        for row in rows:
            if not (isinstance(row, dict) and isinstance(row.get("topic"), str)
                    and type(row.get("partition")) is int and isinstance(row.get("error"), dict)):
                continue
            state = image.partition(row["topic"], row["partition"])
            if state is not None and state.leader == broker_id:
                out[(row["topic"], row["partition"])] = error_from_wire(row["error"])
    return out


def plan_reassignments(
    image: MetadataImage, items: Iterable[ReassignmentItem],
    busy: Mapping[tuple[str, int], RaftlogError] | None = None,
) -> tuple[list[PartitionReassignment], list[RaftlogError | None]]:
    """The records that start or cancel the moves of `items`, and per item None (accepted,
    or nothing to do) or the error refusing it (module docstring); `busy`: the internal
    partitions whose coordinator is busy, with the reason (`busy_partitions`)."""
    records: list[PartitionReassignment] = []
    results: list[RaftlogError | None] = []
    seen: set[tuple[str, int]] = set()
    for item in items:
        key = (item.topic, item.partition)
        try:
            if key in seen:
                raise InvalidRequestError(f"{item.topic}-{item.partition} appears twice in the request")
            seen.add(key)
            record = _judge(image, item)
            reason = (busy or {}).get(key)
            if reason is not None and record is not None:
                refused = type(reason)(f"{item.topic}-{item.partition} is not moved while its coordinator is "
                                       f"busy: {reason.message}")
                refused.code = reason.code  # a code this version does not know stays as reported
                raise refused
        except RaftlogError as exc:
            results.append(exc)
            continue
        if record is not None:
            records.append(record)
        results.append(None)
    return records, results


def completion(image: MetadataImage, topic: str, partition: int,
               voters: Iterable[int], learners: Iterable[int] = ()) -> PartitionReassignment | None:
    """The record that ends `topic`-`partition`'s move once its Raft group's committed
    membership is `voters` (and `learners`), as its leader reports: the target (completed)
    or the original replicas (the move was cancelled and walked back); None when the
    membership is neither, or no move is in progress. Raises UnknownTopicOrPartitionError."""
    topic_id, cur = _partition(image, topic, partition)
    if not cur.reassigning or tuple(learners):
        return None
    voters = set(voters)
    for end in (cur.target_replicas, cur.original_replicas):
        if voters == set(end):
            return PartitionReassignment(topic_id, partition, end)
    return None


def list_reassignments(
    image: MetadataImage, partitions: Iterable[tuple[str, int]] | None = None
) -> list[ReassignmentStatus]:
    """The moves in progress: of every partition (`partitions` None), or of those named
    (an unknown one or one not moving is left out, as Kafka does)."""
    out: list[ReassignmentStatus] = []
    if partitions is None:
        wanted = [(name, p.partition) for name in image.topic_names()
                  for p in image.topic(name).partitions]  # type: ignore[union-attr]
    else:
        wanted = list(partitions)
    for name, index in wanted:
        t = image.topic(name)
        if t is None or not 0 <= index < len(t.partitions):
            continue
        p = t.partitions[index]
        if p.reassigning:
            out.append(ReassignmentStatus(name, index, p.replicas, p.adding_replicas, p.removing_replicas))
    return out


def check_replicas(image: MetadataImage, where: str, replicas: Iterable[object]) -> tuple[int, ...]:
    """One partition's replica list as given by an operator (a move's target, a manual
    assignment): 1..MAX_REPLICAS distinct ids of registered brokers. Raises
    InvalidReplicaAssignmentError naming what is wrong."""
    if isinstance(replicas, (str, bytes)) or not isinstance(replicas, (list, tuple)):
        raise InvalidReplicaAssignmentError(f"{where}: replicas must be a list of broker ids")
    target = tuple(replicas)
    if not target:
        raise InvalidReplicaAssignmentError(f"{where}: no replicas (replication factor 0)")
    if len(target) > MAX_REPLICAS or any(type(r) is not int or r < 0 for r in target):
        raise InvalidReplicaAssignmentError(f"{where}: replicas must be 1..{MAX_REPLICAS} broker ids")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"{where}: a broker appears twice in {list(target)}")
    unknown = [r for r in target if image.broker(r) is None]
    if unknown:
        raise InvalidReplicaAssignmentError(f"{where}: brokers {unknown} do not exist")
    return target  # type: ignore[return-value]  # checked: ints


def check_assignments(image: MetadataImage, where: str, assignments: object,
                      replication_factor: int | None = None) -> list[tuple[int, ...]]:
    """Manual replica assignments of new partitions (CreateTopics, CreatePartitions), one
    replica list per partition, in order, the first replica the preferred leader: each as
    `check_replicas`, all of one replication factor (`replication_factor` when given, the
    topic's), and not all fenced (a partition needs a live replica). Raises
    InvalidReplicaAssignmentError naming the partition and the reason."""
    if isinstance(assignments, (str, bytes)) or not isinstance(assignments, (list, tuple)) or not assignments:
        raise InvalidReplicaAssignmentError(f"{where}: the assignment lists no partition")
    out = [check_replicas(image, f"{where} partition {i}", r) for i, r in enumerate(assignments)]
    rf = len(out[0]) if replication_factor is None else replication_factor
    for i, replicas in enumerate(out):
        if len(replicas) != rf:
            raise InvalidReplicaAssignmentError(
                f"{where} partition {i}: {len(replicas)} replicas, but every partition needs {rf}")
        if all(image.broker(r).fenced for r in replicas):  # type: ignore[union-attr]  # checked above
            raise InvalidReplicaAssignmentError(f"{where} partition {i}: every broker of {list(replicas)} is fenced")
    return out

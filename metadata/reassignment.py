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
one request [INVALID_REQUEST]. `check_replicas` / `check_assignments` judge a replica list an
operator gives (a move's target; a manual assignment in CreateTopics and CreatePartitions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from raftlog.base.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    RaftlogError,
    ReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from metadata.image import MetadataImage, PartitionState
from metadata.records import MAX_REPLICAS, PartitionReassignment

__all__ = ["ReassignmentItem", "ReassignmentStatus", "completion", "list_reassignments", "plan_reassignments",
           "check_replicas", "check_assignments"]


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


def plan_reassignments(
    image: MetadataImage, items: Iterable[ReassignmentItem]
) -> tuple[list[PartitionReassignment], list[RaftlogError | None]]:
    """The records that start or cancel the moves of `items`, and per item None (accepted,
    or nothing to do) or the error refusing it (module docstring)."""
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

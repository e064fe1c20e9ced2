"""Offsets: OffsetCommit (fenced by member id and generation, as Kafka's
handleCommitOffsets) and OffsetFetch. A commit is answered only after its acks=all append
committed, and the cache takes it only then (`CoordinatorContext.apply_committed`), so an
offset read back is always one the log holds.

Kafka semantics kept: commits are accepted in PreparingRebalance (with the ending
generation, counting as a heartbeat), refused in CompletingRebalance; generation -1 commits
from anyone only for an Empty group (assign() consumers, admin tools). Deviation: a commit
refused as a whole (fencing) answers one top-level error instead of the same error per
partition.

Functions over a `CoordinatorContext`, each the body of one public call of GroupCoordinator
(coordinator.py documents their responses and errors). Pure.
May import: raftlog.base, and groupcoord's context, records and state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from groupcoord import consumer_group_ops
from groupcoord.context import (
    NO_GENERATION,
    CommitOffset,
    CoordinatorContext,
    Pending,
    Response,
    check_int,
    check_str,
)
from groupcoord.records import Key, OffsetKey, OffsetValue, Value
from groupcoord.state import Group, GroupState
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidRequestError,
    OffsetMetadataTooLargeError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.base.topics import MAX_TOPIC_NAME_CHARS

__all__ = ["offset_commit", "offset_fetch", "txn_offset_commit"]

# TxnOffsetCommit's pending offsets held at once (more: COORDINATOR_NOT_AVAILABLE, retriable;
# INVALID_REQUEST past the offsets of one producer).
MAX_TXN_PRODUCERS: Final = 10_000
MAX_TXN_OFFSETS: Final = 100_000


def offset_commit(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    offsets: Sequence[CommitOffset],
    now_ms: int,
    member_id: str = "",
    generation_id: int = NO_GENERATION,
    group_instance_id: str | None = None,
) -> Response | Pending:
    check_str("member_id", member_id, 0)
    check_int("generation_id", generation_id, NO_GENERATION)
    if not isinstance(offsets, Sequence) or len(offsets) > ctx.config.max_commit_partitions:
        raise InvalidRequestError(
            f"offsets: a list of at most {ctx.config.max_commit_partitions}", field="offsets")
    try:
        commits = [CommitOffset(*o) for o in offsets]
    except TypeError:
        raise InvalidRequestError("offsets: (topic, partition, offset, leader_epoch, metadata)",
                                       field="offsets") from None
    for c in commits:
        check_str("topic", c.topic, 1, MAX_TOPIC_NAME_CHARS)
        check_int("partition", c.partition, 0, 2**31 - 1)
        check_int("offset", c.offset)
        if c.leader_epoch is not None:
            check_int("leader_epoch", c.leader_epoch, -1, 2**31 - 1)
        if type(c.metadata) is not str:
            raise InvalidRequestError("metadata: expected str", field="metadata")
    partition = ctx.route(group_id)
    group = ctx.groups.get(group_id)
    if group is None:
        if generation_id >= 0:
            raise IllegalGenerationError(f"group {group_id!r} does not exist at generation {generation_id}")
        ctx.check_group_room()
        # The group appears in the cache when the first offset is committed.
    elif consumer_group_ops.validate_commit(ctx, group_id, member_id, generation_id):
        ctx.touch(group)  # a KIP-848 group: the member epoch was checked
    else:
        _validate_commit(ctx, group, member_id, generation_id, group_instance_id, now_ms)
        ctx.touch(group)
    ctx.check_append_room()
    return _do_commit(ctx, group_id, partition, commits, now_ms)


def txn_offset_commit(
    ctx: CoordinatorContext,
    *,
    group_id: str,
    offsets: Sequence[CommitOffset],
    now_ms: int,
    producer_id: int,
    producer_epoch: int,
    member_id: str = "",
    generation_id: int = NO_GENERATION,
    group_instance_id: str | None = None,
) -> Response | Pending:
    """TxnOffsetCommit (issue 42). The request is checked (the group is coordinated here; with
    a generation (v3+), the member and generation as OffsetCommit's), then its offsets are
    appended to the group's partition as a transactional batch of the producer (Kafka's
    GroupMetadataManager.storeOffsets with a producer id): once committed they are held in
    `ctx.txn_offsets` until the transaction's marker (`complete_txn`), and a replay of the
    partition rebuilds them (replay.py), so a coordinator failover loses none."""
    partition = ctx.route(group_id)
    group = ctx.groups.get(group_id)
    if group is not None and generation_id >= 0 and \
            not consumer_group_ops.validate_commit(ctx, group_id, member_id, generation_id):
        _validate_commit(ctx, group, member_id, generation_id, group_instance_id, now_ms)
    if producer_id not in ctx.txn_offsets and len(ctx.txn_offsets) >= MAX_TXN_PRODUCERS:
        raise CoordinatorNotAvailableError(f"{MAX_TXN_PRODUCERS} producers hold pending offsets here")
    if ctx.txn_offset_count(producer_id) + len(offsets) > MAX_TXN_OFFSETS:
        raise InvalidRequestError(f"at most {MAX_TXN_OFFSETS} pending offsets per producer", field="offsets")
    ctx.check_append_room()
    return _do_commit(ctx, group_id, partition, [CommitOffset(*o) for o in offsets], now_ms,
                      producer=(producer_id, producer_epoch))


def _validate_commit(ctx: CoordinatorContext, group: Group, member_id: str, generation_id: int, instance: str | None, now_ms: int) -> None:
    # Kafka's order of checks (GroupCoordinator.handleCommitOffsets).
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being removed")
    if group.is_static_member_fenced(member_id, instance):
        raise FencedInstanceIdError(f"instance {instance!r} is held by a newer member")
    if generation_id < 0 and group.is_(GroupState.EMPTY):
        return  # the group only stores offsets (assign() consumers, admin tools)
    if group.is_(GroupState.COMPLETING_REBALANCE):
        raise RebalanceInProgressError("the group is completing a rebalance: commit after SyncGroup")
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
    if generation_id != group.generation_id:
        raise IllegalGenerationError(f"generation {generation_id}, the group is at {group.generation_id}")
    # Stable, or PreparingRebalance with the generation that is ending: accepted, and it
    # counts as a heartbeat.
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms


def _do_commit(ctx: CoordinatorContext, group_id: str, partition: int, commits: list[CommitOffset], now_ms: int,
               producer: tuple[int, int] | None = None) -> Response | Pending:
    results: list[dict[str, Any]] = []
    items: list[tuple[Key, Value | None]] = []
    for c in commits:
        entry: dict[str, Any] = {"topic": c.topic, "partition": c.partition}
        if len(c.metadata.encode()) > ctx.config.offset_metadata_max_bytes:
            err: RaftlogError = OffsetMetadataTooLargeError(
                f"metadata over {ctx.config.offset_metadata_max_bytes} bytes")
            entry["error"] = {"code": err.code, "message": str(err)}
        else:
            epoch = c.leader_epoch if c.leader_epoch is not None and c.leader_epoch >= 0 else None
            items.append((OffsetKey(group_id, c.topic, c.partition),
                          OffsetValue(c.offset, c.metadata, now_ms, epoch)))
        results.append(entry)
    if not items:
        return {"partitions": results}
    key = ctx.new_key(group_id)

    def committed(now: int) -> None:
        ctx.complete(key, {"partitions": results})

    def failed(err: RaftlogError, now: int) -> None:
        ctx.complete(key, {"partitions": [
            r if "error" in r else {**r, "error": {"code": err.code, "message": str(err)}} for r in results
        ]})

    ctx.append(partition, items, committed, failed, producer)
    return Pending(key)


def offset_fetch(ctx: CoordinatorContext, *, group_id: str, partitions: Sequence[tuple[str, int]] | None = None,
                 member_id: str = "", member_epoch: int = NO_GENERATION) -> Response:
    if partitions is not None:
        for t, p in partitions:
            check_str("topic", t, 1, MAX_TOPIC_NAME_CHARS)
            check_int("partition", p, 0, 2**31 - 1)
    ctx.route(group_id)
    if member_id or member_epoch >= 0:  # a KIP-848 member asks (OffsetFetch v9): its epoch must be current
        consumer_group_ops.validate_commit(ctx, group_id, member_id, member_epoch)
    group = ctx.groups.get(group_id)
    stored = group.offsets if group is not None and not group.is_(GroupState.DEAD) else {}
    wanted = sorted(stored) if partitions is None else [(t, p) for t, p in partitions]
    out = []
    for t, p in wanted:
        e = stored.get((t, p))
        out.append({
            "topic": t,
            "partition": p,
            "offset": -1 if e is None else e.offset,
            "leader_epoch": -1 if e is None or e.leader_epoch is None else e.leader_epoch,
            "metadata": "" if e is None else e.metadata,
        })
    return {"partitions": out}

"""The group coordinator's pure core and its public API: Kafka's classic group protocol and offset storage for
the groups whose `__consumer_offsets` partition this node leads.

No I/O, no clock, no threads: every call takes `now_ms`, ids come from an injected
`random.Random`, and every call returns a `Result` that tells the shell what to do.

The contract with the shell (service.py)
----------------------------------------
    result = coordinator.join_group(..., now_ms=now)        # or any other handler / tick
    Result(response, appends, completions, next_deadline_ms)

* `response`: the answer to *this* request: a dict of ok fields, a `RaftlogError` instance (send
  it as the error), or `Pending(key)`: the answer comes later as a completion for `key`.
  Register the waiter for `key` right after the call returns (the core never completes a key
  within the call that created it: such an answer is returned directly as `response`).
* `appends`: `Append(append_id, partition, records)`: append `records` (key bytes, value
  bytes or None = tombstone) to `__consumer_offsets` partition `partition`, as one batch,
  with acks=all, in the order given (several appends to one partition: in the order given).
  When the append is committed call `on_append_committed(append_id, base_offset, now_ms)`;
  when it failed (or its outcome is unknown) call `on_append_failed(append_id, error, now_ms)`.
  The cache (offsets, stored group) changes only on `on_append_committed`: a commit answered
  ok is durable, and an offset read back is always one the log holds.
* `completions`: `(key, response)` pairs answering earlier `Pending` requests. A key the shell
  no longer waits for is simply dropped by it (and `abandon(key)` tells the core to forget it).
* `next_deadline_ms`: the earliest time at which `tick(now_ms)` has work (session expiry,
  rebalance timeout, initial rebalance delay); None = no timer. Keep one timer at the value of
  the latest Result; an early or spurious tick is harmless.

Ordering: the shell reports `on_append_committed` for one partition in log order (Raft commits
in order). Even so, the cache takes an offset record only if its log offset is later than the
one it holds, so no late report or replay can move a committed offset back.

Partition ownership (failover): begin_load(p) → load(p, chunk)* → finish_load(p, now_ms), and
unload(p) when this node stops leading p. While p loads, its groups' requests answer
COORDINATOR_LOAD_IN_PROGRESS; for a partition not led here, NOT_COORDINATOR (replay.py).

Bounds: `group_max_size` members (incl. pending members) per group, `max_groups` groups
(new ones; replay is never refused), `max_pending` pending requests, `max_pending_appends`
appends in flight (over them: COORDINATOR_NOT_AVAILABLE, retriable).

Where the work is done (each a set of functions over one `CoordinatorContext`):
* context.py     the state, the effect plumbing, routing, timers, the offset cache's rule;
* membership.py  JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the rebalance, `tick`, with
                 Kafka's semantics and our deviations listed there;
* offsets.py     OffsetCommit (fencing) and OffsetFetch;
* admin.py       ListGroups, DescribeGroups, DeleteGroups, the offset reset;
* replay.py      begin_load / load / finish_load / unload.
This module only runs them: each public method is one `CoordinatorContext.run`.
May import: raftlog.base, and the groupcoord modules above.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from groupcoord import admin, consumer_group_ops, membership, replay
from groupcoord import offsets as offset_handlers  # `offsets` is a parameter name below
from groupcoord.context import (
    ACTIVE,
    LOADING,
    NO_GENERATION,
    Append,
    CommitOffset,
    CoordinatorConfig,
    CoordinatorContext,
    Pending,
    Result,
)
from groupcoord.state import Group
from raftlog.base.errors import RaftlogError

__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "Result",
    "Append",
    "Pending",
    "CommitOffset",
]


class GroupCoordinator:
    """Groups and offsets of the `__consumer_offsets` partitions this node leads. Not
    thread-safe: the shell calls it from one trio task at a time."""

    def __init__(self, config: CoordinatorConfig | None = None, rng: random.Random | None = None):
        self.config = config or CoordinatorConfig()
        self._ctx = CoordinatorContext(self.config, rng or random.Random(0))

    def use_group_configs(self, lookup: Callable[[str], Mapping[str, str]]) -> None:
        """Where the core reads a group's configs (consumer.session.timeout.ms, ...) at each use."""
        self._ctx.group_configs = lookup

    # ==== queries for the shell and tests ==============================================

    def partition_for(self, group_id: str) -> int:
        return self._ctx.partition_for(group_id)

    def group(self, group_id: str) -> Group | None:
        """The live group (tests inspect it; the shell must not mutate it)."""
        return self._ctx.groups.get(group_id)

    def groups(self) -> list[Group]:
        """Every live group of the partitions loaded here (read-only: /metrics reads them)."""
        return list(self._ctx.groups.values())

    @property
    def _groups(self) -> dict[str, Group]:
        # Every live group; the simulation tests check each one's invariants after every call.
        return self._ctx.groups

    def is_active(self, partition: int) -> bool:
        return self._ctx.is_active(partition)

    def pending_count(self) -> int:
        return len(self._ctx.pending)

    def next_deadline_ms(self) -> int | None:
        return self._ctx.next_deadline_ms()

    def health(self) -> dict[str, Any]:
        ctx = self._ctx
        return {
            "partitions_active": sorted(p for p, s in ctx.partitions.items() if s == ACTIVE),
            "partitions_loading": sorted(p for p, s in ctx.partitions.items() if s == LOADING),
            "groups": len(ctx.groups),
            "pending": len(ctx.pending),
            "appends_in_flight": len(ctx.appends),
        }

    # ==== partition ownership ============================================================

    def begin_load(self, partition: int) -> Result:
        """This node became leader of `partition`: its groups answer COORDINATOR_LOAD_IN_PROGRESS
        until `finish_load`. If it was already loaded, its old state is dropped first."""
        return self._ctx.run(lambda: replay.begin_load(self._ctx, partition))

    def load(self, partition: int, records: Iterable[tuple]) -> int:
        """Replay records `(log_offset, key, value)`, or `(log_offset, key, value, producer_id,
        marker)` (transactional writes and their markers: replay.py) of `partition` in log order (may be called
        once per chunk). Returns how many were applied. Records at or before the last log
        offset seen are skipped (a chunk fed twice changes nothing). A record that does not
        decode is skipped and counted (logged): one bad record must not keep a coordinator
        down. Has no effects for the shell, so it returns a count, not a Result."""
        return replay.load(self._ctx, partition, records)

    def finish_load(self, partition: int, now_ms: int) -> Result:
        """The replay reached the log end: build the groups and serve them. Ok response:
        {groups, offsets, errors} (counts)."""
        return self._ctx.run(lambda: replay.finish_load(self._ctx, partition, now_ms))

    def unload(self, partition: int) -> Result:
        """This node no longer leads `partition`: drop its groups; their pending requests are
        answered NOT_COORDINATOR."""
        return self._ctx.run(lambda: replay.drop_partition(self._ctx, partition))

    # ==== appends ========================================================================

    def on_append_committed(self, append_id: int, base_offset: int, now_ms: int) -> Result:
        """The append `append_id` is committed (acks=all) at log offsets base_offset, +1, ...:
        apply it to the cache and answer whoever waited for it. Unknown ids are ignored (the
        partition was unloaded meanwhile)."""
        return self._ctx.run(lambda: self._ctx.append_committed(append_id, base_offset, now_ms))

    def on_append_failed(self, append_id: int, error: RaftlogError, now_ms: int) -> Result:
        """The append failed or its outcome is unknown (`error`: why). The cache is left as
        it was (a later replay settles an unknown outcome)."""
        return self._ctx.run(lambda: self._ctx.append_failed(append_id, error, now_ms))

    # ==== timers =========================================================================

    def tick(self, now_ms: int) -> Result:
        """Expire silent members and pending members, end join phases whose rebalance timeout
        or initial delay passed."""
        return self._ctx.run(lambda: membership.tick(self._ctx, now_ms))

    # ==== membership =====================================================================

    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        topics: Mapping[str, int] | None = None,
    ) -> Result:
        """JoinGroup (`topics`: {name: partition count} of the cluster's topics, which a
        classic member inside a consumer group needs; classic_member.py). Ok response: {member_id, generation_id, protocol_type, protocol_name,
        leader, members: [{member_id, group_instance_id, metadata}] (the leader only, else [])}.
        Errors: MEMBER_ID_REQUIRED (member_id detail), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED,
        COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS (a newer join of the same member
        superseded this one), and the routing errors."""
        return self._ctx.run(lambda: membership.join_group(
            self._ctx, group_id=group_id, member_id=member_id, protocol_type=protocol_type,
            protocols=protocols, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, now_ms=now_ms,
            group_instance_id=group_instance_id, client_id=client_id, client_host=client_host, topics=topics,
        ))

    def sync_group(
        self,
        *,
        group_id: str,
        member_id: str,
        generation_id: int,
        now_ms: int,
        assignments: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Result:
        """SyncGroup. The leader sends `assignments` (member id → bytes; members left out get
        b""); followers send none and wait for it. Ok response: {protocol_type, protocol_name,
        assignment}. Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
        INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, routing."""
        return self._ctx.run(lambda: membership.sync_group(
            self._ctx, group_id=group_id, member_id=member_id, generation_id=generation_id,
            now_ms=now_ms, assignments=assignments, group_instance_id=group_instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
        ))

    def heartbeat(
        self, *, group_id: str, member_id: str, generation_id: int, now_ms: int, group_instance_id: str | None = None
    ) -> Result:
        """Heartbeat. Ok response: {}. Errors: REBALANCE_IN_PROGRESS (rejoin), UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, routing."""
        return self._ctx.run(lambda: membership.heartbeat(
            self._ctx, group_id=group_id, member_id=member_id, generation_id=generation_id,
            now_ms=now_ms, group_instance_id=group_instance_id,
        ))

    def leave_group(self, *, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int) -> Result:
        """LeaveGroup for (member_id, group_instance_id) pairs (a static member may leave by
        instance id with member_id ""). Ok response: {members: [{member_id, group_instance_id}
        or with `error`: {code, message}]}. Top-level errors: COORDINATOR_NOT_AVAILABLE, routing."""
        return self._ctx.run(lambda: membership.leave_group(
            self._ctx, group_id=group_id, members=members, now_ms=now_ms))

    # ==== KIP-848 consumer groups ========================================================

    def consumer_group_heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                                 topics: Mapping[str, int], now_ms: int, **fields: Any) -> Result:
        """ConsumerGroupHeartbeat (consumer_group_ops.heartbeat documents the fields and
        errors). `topics`: {name: partition count} of the cluster's topics now. Ok response
        (after its records are committed): {member_id, member_epoch, heartbeat_interval_ms,
        assignment: sorted [(topic, partition)] or None (unchanged)}."""
        return self._ctx.run(lambda: consumer_group_ops.heartbeat(
            self._ctx, group_id=group_id, member_id=member_id, member_epoch=member_epoch, topics=topics,
            now_ms=now_ms, **fields))

    def consumer_group_describe(self, group_ids: Sequence[str]) -> Result:
        """ConsumerGroupDescribe (consumer_group_ops.describe documents the response)."""
        return self._ctx.run(lambda: consumer_group_ops.describe(self._ctx, group_ids))

    def consumer_group(self, group_id: str) -> Any:
        """The live KIP-848 group (tests and /metrics read it; the shell must not mutate it)."""
        return self._ctx.consumer_groups.get(group_id)

    # ==== offsets ========================================================================

    def offset_commit(
        self,
        *,
        group_id: str,
        offsets: Sequence[CommitOffset],
        now_ms: int,
        member_id: str = "",
        generation_id: int = NO_GENERATION,
        group_instance_id: str | None = None,
    ) -> Result:
        """OffsetCommit. Ok response (after the acks=all append): {partitions: [{topic,
        partition} or with `error`: {code, message}]} (per-partition errors:
        OFFSET_METADATA_TOO_LARGE, INVALID_REQUEST). A commit refused as a whole raises one
        error: COORDINATOR_NOT_AVAILABLE (group Dead or append failed), NOT_COORDINATOR (leadership
        lost), FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (CompletingRebalance), UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, routing."""
        return self._ctx.run(lambda: offset_handlers.offset_commit(
            self._ctx, group_id=group_id, offsets=offsets, now_ms=now_ms, member_id=member_id,
            generation_id=generation_id, group_instance_id=group_instance_id,
        ))

    def txn_offset_commit(self, *, group_id: str, offsets: Sequence[CommitOffset], now_ms: int,
                          producer_id: int, producer_epoch: int, member_id: str = "",
                          generation_id: int = NO_GENERATION, group_instance_id: str | None = None) -> Result:
        """TxnOffsetCommit (offsets.txn_offset_commit): check the request, then append its
        offsets as a transactional batch of the producer; they take effect when its COMMIT
        marker reaches the group's partition (`complete_txn`). Errors as OffsetCommit's."""
        return self._ctx.run(lambda: offset_handlers.txn_offset_commit(
            self._ctx, group_id=group_id, offsets=offsets, now_ms=now_ms, producer_id=producer_id,
            producer_epoch=producer_epoch, member_id=member_id, generation_id=generation_id,
            group_instance_id=group_instance_id))

    def complete_txn(self, partition: int, producer_id: int, commit: bool, now_ms: int) -> Result:
        """The marker of `producer_id`'s transaction is committed in `__consumer_offsets-<partition>`:
        its pending offsets there apply (COMMIT) or are dropped (ABORT). A partition still
        loading ignores it (its replay reads the marker)."""
        def body() -> None:
            if self._ctx.is_active(partition):
                self._ctx.complete_txn(partition, producer_id, commit, now_ms)
        return self._ctx.run(body)

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The (topic, partition)s of `group_id` with transactional offsets whose marker has not
        come (OffsetFetch's require_stable answers them UNSTABLE_OFFSET_COMMIT)."""
        return {tp for groups in self._ctx.txn_offsets.values() for tp in groups.get(group_id, ())}

    def txn_offset_producers(self) -> int:
        return len(self._ctx.txn_offsets)

    def offset_fetch(self, *, group_id: str, partitions: Sequence[tuple[str, int]] | None = None,
                     member_id: str = "", member_epoch: int = NO_GENERATION) -> Result:
        """OffsetFetch: committed offsets of `partitions`, or of every partition the group has
        committed when None. Ok response: {partitions: [{topic, partition, offset (-1 none),
        leader_epoch (-1 none), metadata}]}. Errors: routing; for a KIP-848 group asked by a
        member (OffsetFetch v9): UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH."""
        return self._ctx.run(lambda: offset_handlers.offset_fetch(
            self._ctx, group_id=group_id, partitions=partitions, member_id=member_id, member_epoch=member_epoch))

    # ==== administration =================================================================

    def list_groups(self, states: Sequence[str] | None = None) -> Result:
        """ListGroups of the partitions served here (loaded ones). Ok response: {groups:
        [{group_id, protocol_type, state}]}, sorted by id, Dead groups left out."""
        return self._ctx.run(lambda: admin.list_groups(self._ctx, states))

    def describe_groups(self, group_ids: Sequence[str]) -> Result:
        """DescribeGroups. Ok response: {groups: [{group_id, state, protocol_type, protocol,
        members: [{member_id, group_instance_id, client_id, client_host, metadata,
        assignment}]} or {group_id, error}]}. Metadata and assignment are given only for a
        Stable group (as Kafka); an unknown group is described as Dead with no members."""
        return self._ctx.run(lambda: admin.describe_groups(self._ctx, group_ids))

    def delete_group(self, *, group_id: str, now_ms: int) -> Result:
        """Delete an Empty group and its offsets (tombstones, acks=all). Ok response: {} after
        the append. Errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, routing, append errors. The
        group is Dead while the tombstones are in flight (joins and commits get
        COORDINATOR_NOT_AVAILABLE); if the append fails it is Empty again."""
        return self._ctx.run(lambda: admin.delete_group(self._ctx, group_id=group_id, now_ms=now_ms))

    def delete_offsets(self, *, group_id: str, partitions: Sequence[tuple[str, int]], now_ms: int) -> Result:
        """Kafka's OffsetDelete: remove the committed offsets of `partitions` (tombstones,
        acks=all). Ok response: {partitions: [{topic, partition, error?}]}, the error
        GROUP_SUBSCRIBED_TO_TOPIC for every partition while the group has members. Errors:
        GROUP_ID_NOT_FOUND, INVALID_REQUEST, routing, append errors."""
        return self._ctx.run(lambda: admin.delete_offsets(
            self._ctx, group_id=group_id, partitions=partitions, now_ms=now_ms))

    def reset_offsets(
        self,
        *,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        now_ms: int,
        dry_run: bool = False,
    ) -> Result:
        """Set the committed offsets of an inactive group (Empty or unknown) to `offsets`
        (planned by `plan_offset_reset`). Ok response: {dry_run, partitions: [{topic,
        partition, previous_offset (-1 none), offset}]}; with dry_run nothing is written.
        Errors: NON_EMPTY_GROUP, COORDINATOR_NOT_AVAILABLE (Dead), INVALID_REQUEST, routing."""
        return self._ctx.run(lambda: admin.reset_offsets(
            self._ctx, group_id=group_id, offsets=offsets, now_ms=now_ms, dry_run=dry_run))

    # ==== the shell gave up on a request =================================================

    def abandon(self, key: int) -> None:
        """The shell stopped waiting for `key` (its deadline passed or the client went away).
        The core forgets the key; the request itself stands (a member that joined still counts
        as joined, as in Kafka when the connection of a waiting JoinGroup drops)."""
        self._ctx.pending.pop(key, None)

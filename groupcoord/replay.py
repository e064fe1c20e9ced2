"""Partition ownership for the group coordinator: loading a `__consumer_offsets` partition by
replaying its log, and dropping it when this node stops leading it.

    begin_load(p) → load(p, [(log_offset, key, value), ...])* → finish_load(p, now_ms)
    unload(p)   when this node stops leading p

Replay: records apply in log order, the later record for a key wins (so a deliberate commit of
a lower offset, e.g. a reset, stands), a tombstone deletes; a chunk fed twice is ignored (log
offsets must grow); a record that does not decode, or whose group belongs to another
partition, is skipped and counted. Reloaded groups with members are Stable (members must
heartbeat within their session timeout from `finish_load`), others Empty. Dropping a
partition answers its groups' pending requests NOT_COORDINATOR and forgets its appends in
flight (the next leader's replay settles their outcome).

Transactional offsets (TxnOffsetCommit, issue 42; Kafka's GroupMetadataManager load): a record
may come as (log_offset, key, value, producer_id, marker) (partition.keyed.logged_records). An
offset record of a transactional batch (producer_id >= 0) is held for its producer until
that producer's marker: COMMIT applies the held offsets (a record later in the log for the
same key still wins), ABORT drops them. Offsets whose marker the log does not hold yet stay
pending after `finish_load` (`ctx.txn_offsets`), for the marker still to come.

Functions over a `CoordinatorContext`, called inside its `run` (except `load`). Pure.
May import: raftlog.base, and groupcoord's context, records and state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from groupcoord import consumer_group_ops
from groupcoord.consumer_group_records import ConsumerGroupKey, decode_record
from groupcoord.context import ACTIVE, LOADING, CoordinatorContext, LoadBuffer, offset_entry
from groupcoord.errors import InvalidGroupRecordError
from groupcoord.records import GroupValue, OffsetKey, OffsetValue
from groupcoord.state import Group, GroupState, Member
from raftlog.base.errors import InvalidRequestError, NotCoordinatorError
from raftlog.base.topics import partition_for_group

__all__ = ["begin_load", "load", "finish_load", "drop_partition"]

log = logging.getLogger(__name__)


def begin_load(ctx: CoordinatorContext, partition: int) -> None:
    """This node leads `partition` now; an earlier state of it is dropped first."""
    if type(partition) is not int or not 0 <= partition < ctx.config.partitions:
        raise InvalidRequestError(f"partition {partition!r} of __consumer_offsets", field="partition")
    if partition in ctx.partitions:
        drop_partition(ctx, partition)
    ctx.partitions[partition] = LOADING
    ctx.loads[partition] = LoadBuffer()


def load(ctx: CoordinatorContext, partition: int, records: Iterable[tuple]) -> int:
    """Replay one chunk; returns how many records were applied."""
    buf = ctx.loads.get(partition)
    if buf is None or ctx.partitions.get(partition) != LOADING:
        raise RuntimeError(f"partition {partition} is not loading")
    applied = 0
    for record in records:
        log_offset, key_bytes, value_bytes = record[0], record[1], record[2]
        producer_id, marker = (record[3], record[4]) if len(record) > 3 else (-1, None)
        if log_offset <= buf.last_log_offset:
            continue
        buf.last_log_offset = log_offset
        if marker is not None:
            _replay_marker(buf, producer_id, marker)
            applied += 1
            continue
        try:
            key, value = decode_record(key_bytes, value_bytes)
        except InvalidGroupRecordError as e:
            buf.errors += 1
            log.warning("__consumer_offsets-%d offset %d: skipping a bad record: %s", partition, log_offset, e)
            continue
        if partition_for_group(key.group, ctx.config.partitions) != partition:
            buf.errors += 1
            log.warning("__consumer_offsets-%d offset %d: group %r belongs elsewhere", partition, log_offset, key.group)
            continue
        applied += 1
        if isinstance(key, ConsumerGroupKey):
            kept = buf.consumer.setdefault(key.group, {})
            if value is None:
                kept.pop(key, None)
            else:
                kept[key] = value
        elif isinstance(key, OffsetKey):
            k3 = (key.group, key.topic, key.partition)
            if producer_id >= 0:  # transactional: counts once its COMMIT marker is replayed
                if isinstance(value, OffsetValue):
                    buf.txn.setdefault(producer_id, {})[k3] = offset_entry(value, log_offset)
            elif value is None:
                buf.offsets.pop(k3, None)
            else:
                assert isinstance(value, OffsetValue)
                buf.offsets[k3] = offset_entry(value, log_offset)
        elif value is None:
            buf.groups.pop(key.group, None)
        else:
            assert isinstance(value, GroupValue)
            buf.groups[key.group] = (value, log_offset)
    return applied


def _replay_marker(buf: LoadBuffer, producer_id: int, commit: bool) -> None:
    held = buf.txn.pop(producer_id, None)
    if not held or not commit:
        return
    for k3, entry in held.items():
        current = buf.offsets.get(k3)
        if current is None or current.log_offset < entry.log_offset:
            buf.offsets[k3] = entry


def finish_load(ctx: CoordinatorContext, partition: int, now_ms: int) -> dict:
    """Build the replayed groups and serve them; returns counts {groups, offsets, errors}."""
    buf = ctx.loads.pop(partition, None)
    if buf is None or ctx.partitions.get(partition) != LOADING:
        raise RuntimeError(f"partition {partition} is not loading")
    for gid, (value, log_offset) in buf.groups.items():
        group = _group_from_value(gid, value, log_offset, now_ms)
        ctx.groups[gid] = group
        ctx.touch(group)
    for gid, kept in buf.consumer.items():
        cg = consumer_group_ops.build_from_records(gid, kept, now_ms, ctx.config.group_consumer_session_timeout_ms)
        if cg is None:
            continue
        ctx.groups.pop(gid, None)  # a classic record left behind by an unfinished conversion
        group = ctx.groups[gid] = Group(gid, protocol_type=consumer_group_ops.PROTOCOL_TYPE, state_timestamp_ms=now_ms)
        ctx.consumer_groups[gid] = cg
        ctx.touch(group)
    for (gid, topic, p), entry in buf.offsets.items():
        group = ctx.groups.get(gid)
        if group is None:
            group = ctx.groups[gid] = Group(gid, state_timestamp_ms=now_ms)
        group.offsets[(topic, p)] = entry
    pending = 0
    for producer_id, held in buf.txn.items():
        for (gid, topic, p), entry in held.items():
            ctx.txn_offsets.setdefault(producer_id, {}).setdefault(gid, {})[(topic, p)] = entry
            pending += 1
    ctx.partitions[partition] = ACTIVE
    return {"groups": len(buf.groups), "offsets": len(buf.offsets), "txn_offsets": pending, "errors": buf.errors}


def drop_partition(ctx: CoordinatorContext, partition: int) -> None:
    """Forget `partition`: its groups, loads and appends; answer its requests NOT_COORDINATOR."""
    ctx.partitions.pop(partition, None)
    ctx.loads.pop(partition, None)
    gone = NotCoordinatorError(f"partition {partition} of __consumer_offsets moved")
    # Groups first: the failure callbacks of the appends below then find their group gone
    # and only answer their requests (no rebalance, no new append, on a partition we left).
    for gid in [g for g in ctx.groups if ctx.partition_for(g) == partition]:
        group = ctx.groups.pop(gid)
        ctx.consumer_groups.pop(gid, None)
        group.state = GroupState.DEAD  # not a state-machine step: the group leaves this node
        for m in group.members.values():
            ctx.complete(m.join_key, gone)
            ctx.complete(m.sync_key, gone)
        ctx.unschedule(gid)
    for append_id in [a for a, inflight in ctx.appends.items() if inflight.partition == partition]:
        inflight = ctx.appends.pop(append_id)
        if inflight.on_fail is not None:
            inflight.on_fail(gone, -1)
    for key in [k for k, gid in ctx.pending.items() if ctx.partition_for(gid) == partition]:
        ctx.complete(key, gone)
    for producer_id in list(ctx.txn_offsets):
        groups = ctx.txn_offsets[producer_id]
        for gid in [g for g in groups if ctx.partition_for(g) == partition]:
            del groups[gid]
        if not groups:
            del ctx.txn_offsets[producer_id]


def _group_from_value(group_id: str, value: GroupValue, log_offset: int, now_ms: int) -> Group:
    group = Group(group_id, generation_id=value.generation, protocol_type=value.protocol_type or None,
                  state_timestamp_ms=value.current_state_timestamp or now_ms, group_log_offset=log_offset)
    for mv in value.members:
        assert value.protocol is not None
        group.add(Member(
            member_id=mv.member_id,
            client_id=mv.client_id,
            client_host=mv.client_host,
            session_timeout_ms=mv.session_timeout_ms,
            rebalance_timeout_ms=mv.rebalance_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=((value.protocol, mv.subscription),),
            group_instance_id=mv.group_instance_id,
            assignment=mv.assignment,
            heartbeat_deadline_ms=now_ms + mv.session_timeout_ms,
        ))
    if value.members:
        group.leader_id = value.leader
        group.protocol_name = value.protocol
        # A stored group with members finished a rebalance: it resumes Stable (Kafka's load).
        group.state = GroupState.STABLE
    return group

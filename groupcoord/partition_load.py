"""Following an internal topic's leadership and replaying its partitions into a coordinator
core, shared by the shells of the group coordinator (`__consumer_offsets`, service.py) and
the transaction coordinator (`__transaction_state`, txn_service.py).

    await follow_leadership(topics, topic, check, interval_s)   (runs until cancelled)
    applied, end_offset = await replay_partition(part, ours, feed)
    caught_up = await wait_caught_up(part, ours)

Both work over the coordinators' partition port (internal_topic.py: `InternalTopics`,
`InternalPartition`), never a Replica or its Log.

`follow_leadership` calls `check()` at once, whenever a local partition of `topic` gains or
loses leadership (`InternalTopics.add_leadership_listener`), and every `interval_s` besides (a
failed load's retry).

Ordering: first waits until the replica's high watermark reaches the log end seen at the call
(every record an earlier leader committed is below it; Raft moves a new leader's high
watermark only with an offset of its own epoch), then reads from the log start to the high
watermark in LOAD_CHUNK_BYTES chunks (committed data only), handing each chunk's keyed,
non-control records to `feed` as (offset, key, value). Stops early, without error, as soon as
`ours()` is false (leadership moved on). One chunk per trio checkpoint, so the node keeps
serving meanwhile. Raises what the partition's reads raise (RaftlogError).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

from groupcoord.internal_topic import InternalPartition, InternalTopics
from partition.keyed import KeyedRecord, keyed_records

__all__ = ["follow_leadership", "replay_partition", "wait_caught_up", "LOAD_CHUNK_BYTES"]

LOAD_CHUNK_BYTES: Final = 1 << 20
HW_POLL_S: Final = 0.2

Records = list[KeyedRecord]
Decode = Callable[[bytes, int], tuple[list, int]]


async def replay_partition(r: InternalPartition, ours: Callable[[], bool],
                           feed: Callable[[Records], int], *,
                           decode: Decode = keyed_records) -> tuple[int, int]:
    """(records `feed` applied, the offset replay reached). `r` is the local leader partition.
    `decode` turns a chunk into records (`keyed_records`; the group coordinator passes
    `logged_records`, which keeps transactional writes and their markers)."""
    await wait_caught_up(r, ours)
    offset = r.log_start_offset
    applied = 0
    while ours() and offset < r.high_watermark:
        data = await r.read_committed(offset, LOAD_CHUNK_BYTES)
        if not data:
            break
        records, offset = decode(data, offset)
        applied += feed(records)
        await trio.sleep(0)
    return applied, offset


async def wait_caught_up(r: InternalPartition, ours: Callable[[], bool]) -> bool:
    """Wait until the leader `r`'s high watermark reaches the log end seen now (everything an
    earlier leader committed is then readable), or `ours()` turns false; whether it did. A new
    leader's high watermark lags until an offset of its own epoch commits: a replay before that
    misses committed records. Unbounded: the caller bounds it (a cancel scope) if it must."""
    target = r.log_end_offset
    while ours() and r.high_watermark < target:
        wake = trio.Event()
        r.watch(wake)
        try:
            with trio.move_on_after(HW_POLL_S):
                await wake.wait()
        finally:
            r.unwatch(wake)
    return r.high_watermark >= target


async def follow_leadership(topics: InternalTopics, topic: str, check: Callable[[], None],
                            interval_s: float) -> None:
    """See the module docstring. Concurrency: trio thread; the listener only sets an event."""
    changed = [trio.Event()]

    def on_change(changed_topic: str, partition: int) -> None:
        if changed_topic == topic:
            changed[0].set()

    topics.add_leadership_listener(on_change)
    while True:
        changed[0] = trio.Event()
        check()
        with trio.move_on_after(interval_s):
            await changed[0].wait()

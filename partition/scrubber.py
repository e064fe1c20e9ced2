"""The scrubber's check of one sealed segment (partition/manager.py "Scrubber"): the full check
(partition/segment.py SegmentVerifier) in paced worker-thread steps; what it finds goes to
`Replica.report_damage`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio

from partition.errors import StorageDamageError
from partition.segment import SegmentVerifier

if TYPE_CHECKING:
    from partition.replica import Replica
    from partition.storage_metrics import StorageMetrics

__all__ = ["scrub_segment", "SCRUB_STEP_BYTES"]

SCRUB_STEP_BYTES: Final = 1 << 20  # one worker-thread read of the scrubber


async def scrub_segment(r: Replica, base: int, limiter: trio.CapacityLimiter, metrics: StorageMetrics,
                        bytes_per_s: int) -> int:
    """Check one segment in paced steps in a worker thread; returns the bytes read."""
    log = r.log
    read = 0
    with log.pinned_segment(base) as found:
        if found is None:
            return 0
        seg, nxt = found
        check = SegmentVerifier(seg, max_offset=nxt, check_index=True)
        while not check.done:
            if r.log is not log or not r.online:
                return read
            n = await trio.to_thread.run_sync(check.step, SCRUB_STEP_BYTES,
                                              limiter=limiter)
            read += n
            metrics.scrubbed(n)
            await trio.sleep(n / bytes_per_s)
    metrics.scrubbed_segment()
    if check.damage is not None:
        r.report_damage(StorageDamageError(check.damage, segment=base, position=check.valid_bytes,
                                           offset=check.damage_offset), found_by="scrub")
    elif check.index_problem is not None or log.index_files_match(base) is False:
        r.report_damage(StorageDamageError(
            check.index_problem or f"segment {seg.name}: index files differ from its indexes",
            segment=base, position=0, offset=base, what="index"), found_by="scrub")
    return read


"""The open files of sealed segments (partition/segment.py "Open files"): one cache per
node, owned by who hosts the replicas (partition/replica_storage.py `DiskWork.files`) and
handed to each log and its segments, so that a node with many partitions keeps at most
`max_open` sealed segment files open while nobody uses them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

__all__ = ["FileCache", "DEFAULT_MAX_OPEN_SEGMENTS"]


class CachedFile(Protocol):
    """What the cache reads and closes of a segment (its state under the cache's `lock`)."""

    log_path: Path
    _fd: int | None
    _evictable: bool
    _pins: int


class FileCache:
    """The open files of sealed segments of one node's logs (module docstring "Open files"),
    owned by who hosts the replicas (partition/replica_storage.py `DiskWork.files`) and
    handed to each log and its segments: at most `max_open` of them stay open while nobody
    uses them, least recently used closed
    first; a use reopens. Segments pinned meanwhile stay open (above the cap if need be).
    `lock` guards every segment's fd, pins and close state."""

    def __init__(self, max_open: int):
        self.max_open = max_open
        self.lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        self.reopens = 0
        self.evictions = 0

    def set_max_open(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max open files {max_open} < 1")
        with self.lock:
            self.max_open = max_open
            self.evict_over_cap()

    # The rest: under `lock`.

    def touch(self, seg: CachedFile) -> None:
        self._open[seg] = None
        self._open.move_to_end(seg)

    def forget(self, seg: CachedFile) -> None:
        self._open.pop(seg, None)

    def reopen(self, seg: CachedFile) -> None:
        seg._fd = os.open(seg.log_path, os.O_RDWR)
        self.reopens += 1
        if seg._evictable:
            self.touch(seg)
            self.evict_over_cap()

    def evict_over_cap(self) -> None:
        if len(self._open) <= self.max_open:
            return
        for seg in list(self._open):
            if len(self._open) <= self.max_open:
                return
            if seg._pins == 0:
                del self._open[seg]
                fd, seg._fd = seg._fd, None
                if fd is not None:
                    os.close(fd)
                self.evictions += 1


# Sized for 1,000 partitions with a few sealed segments each under the usual 1,024 (soft) and
# 4,096 open-file limits beside the active segments' files and the sockets: the node sets it
# from `log_open_files_max`.
DEFAULT_MAX_OPEN_SEGMENTS = 512

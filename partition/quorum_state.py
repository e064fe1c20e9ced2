"""The quorum-state store of a partition replica, as KRaft's `quorum-state` file: the Raft
core's durable vote (partition/raft.py `PersistQuorumState`), one file per replica, and the
node's group commit of those writes.

Format: `quorum-state` = u32 big-endian CRC-32C + canonical CBOR {epoch, voted_for,
leader_id, needs_catch_up}, zero-padded to QUORUM_STATE_BYTES (512: one sector). A file
without needs_catch_up reads as false (the replica sets it, durably, when log recovery
dropped data); a file without padding, from an older version, reads the same. Written in
place and fdatasynced (a first write, or one over an unpadded file, writes a temp file and
renames it: partition/file_io.py `overwrite_durably`); only then does the replica tell the
core `quorum_state_persisted(version)`. An attached replica's write joins the node's group
commit (`QuorumStateCommits`: one syncfs per batch instead of an fdatasync per file, on
filesystems whose syncfs makes files durable).
"""

from __future__ import annotations

import errno
import io
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import cbor2
import trio
from crc32c import crc32c

from partition.file_io import ATOMIC_OVERWRITE_BYTES, overwrite_durably, overwrite_durably_many
from partition.raft import Membership, QuorumState
from raftlog.base.errors import InvalidReplicaAssignmentError, KafkaStorageError

__all__ = [
    "QUORUM_STATE_FILE", "QUORUM_STATE_BYTES", "QuorumStateCorruptError", "QuorumStateCommits",
    "read_quorum_state", "write_quorum_state", "write_quorum_states",
]


QUORUM_STATE_FILE = "quorum-state"
_CRC = struct.Struct(">I")
# quorum-state's size: CRC and CBOR, zero-padded to one sector, so that it is overwritten in
# place (file_io.overwrite_durably). Files of older versions hold no padding and read the same.
QUORUM_STATE_BYTES: Final = ATOMIC_OVERWRITE_BYTES


class QuorumStateCorruptError(KafkaStorageError):
    """The replica's quorum-state file is damaged: the replica cannot vote or lead."""


def _quorum_state_bytes(state: QuorumState) -> bytes:
    obj: dict[str, object] = {"epoch": state.epoch, "voted_for": state.voted_for,
                              "leader_id": state.leader_id, "needs_catch_up": state.needs_catch_up}
    if state.membership is not None:  # the committed membership folded out of the log
        obj["membership"] = [list(state.membership.voters), list(state.membership.learners),
                             state.membership_offset]
    if state.membership_scan_from >= 0:  # membership entries in the log from here
        obj["membership_scan_from"] = state.membership_scan_from
    body = cbor2.dumps(
        obj,
        canonical=True,
    ).ljust(QUORUM_STATE_BYTES - _CRC.size, b"\0")
    return _CRC.pack(crc32c(body)) + body


def write_quorum_state(directory: Path, state: QuorumState) -> None:
    """Write `quorum-state` durably: in place, fdatasynced, once it has the padded size
    (file_io.overwrite_durably). Blocking."""
    overwrite_durably(directory, QUORUM_STATE_FILE, _quorum_state_bytes(state))


def write_quorum_states(writes: list[tuple[Path, QuorumState]]) -> list[OSError | None]:
    """Many replicas' `quorum-state` files at once, each as durably as `write_quorum_state`
    writes one (file_io.overwrite_durably_many): an OSError or None per write. Blocking."""
    return overwrite_durably_many([(d, QUORUM_STATE_FILE, _quorum_state_bytes(st)) for d, st in writes])


@dataclass(eq=False)
class _QuorumStateWrite:
    directory: Path
    state: QuorumState
    done: trio.Event = field(default_factory=trio.Event)
    error: OSError | None = None


class QuorumStateCommits:
    """Group commit of one node's quorum-state writes (`DiskWork.quorum_states`). A write
    joins the next batch; one worker thread writes a batch with `write_quorum_states` (one
    syncfs for all of it instead of an fdatasync per file, where syncfs makes files durable:
    file_io.overwrite_durably_many), and a batch takes whatever arrived
    while the one before was written. When a node dies, its followers on the others run
    hundreds of elections at once, and each chains three quorum-state writes (the
    candidate's vote, the voter's, the new leader's): one at a time they queued behind each
    other in the journal, and the vote round trip outgrew the window that keeps the two
    survivors from running against each other (split votes: a fifth of the partitions)."""

    def __init__(self) -> None:
        self._waiting: list[_QuorumStateWrite] = []
        self._writing = False
        self.batches = 0
        self.writes = 0

    async def write(self, nursery: trio.Nursery, directory: Path, state: QuorumState) -> None:
        """Write `state` durably; the batch runs in `nursery`. Raises the write's OSError.
        Like the worker thread it stands for, not cancellable once asked."""
        w = _QuorumStateWrite(directory, state)
        self._waiting.append(w)
        if not self._writing:
            nursery.start_soon(self._write_batches)
            self._writing = True
        with trio.CancelScope(shield=True):
            await w.done.wait()
        if w.error is not None:
            raise w.error

    async def _write_batches(self) -> None:
        with trio.CancelScope(shield=True):  # every waiter is answered, at shutdown too
            try:
                while self._waiting:
                    batch, self._waiting = self._waiting, []
                    try:
                        errors = await trio.to_thread.run_sync(
                            write_quorum_states, [(w.directory, w.state) for w in batch])
                    except Exception as exc:  # a bug, not a disk error: fail the batch loudly
                        errors = [OSError(errno.EIO, f"quorum-state group commit: {exc!r}") for _ in batch]
                    self.batches += 1
                    self.writes += len(batch)
                    for w, error in zip(batch, errors, strict=True):
                        w.error = error
                        w.done.set()
            finally:
                self._writing = False


def read_quorum_state(directory: Path) -> QuorumState:
    """The durable quorum state; QuorumState() if there is none. Raises QuorumStateCorruptError."""
    try:
        data = (directory / QUORUM_STATE_FILE).read_bytes()
    except FileNotFoundError:
        return QuorumState()
    if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c(data[4:]):
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad CRC")
    try:
        body = io.BytesIO(data[_CRC.size:])
        obj = cbor2.load(body)
        if body.read().strip(b"\0"):
            raise ValueError("bytes after the state are not padding")
        # Files written before needs_catch_up existed lack it: nothing was flagged then.
        membership, membership_offset = None, -1
        if "membership" in obj:  # absent before membership changes existed
            voters, learners, membership_offset = obj["membership"]
            membership = Membership(tuple(voters), tuple(learners))
        state = QuorumState(obj["epoch"], obj["voted_for"], obj["leader_id"],
                            obj.get("needs_catch_up", False), membership, membership_offset,
                            obj.get("membership_scan_from", -1))
    except (cbor2.CBORDecodeError, KeyError, TypeError, ValueError, InvalidReplicaAssignmentError) as exc:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: {exc}") from None
    if type(state.needs_catch_up) is not bool:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad needs_catch_up")
    if type(state.epoch) is not int or state.epoch < 0:
        raise QuorumStateCorruptError(f"{directory / QUORUM_STATE_FILE}: bad epoch")
    return state

"""The metadata quorum's files on disk, in our own formats (no pickle): the journal of Raft
entries, the meta file (term, vote, commit index) and the log-compaction dump. PySyncObj
reaches them only through raftlog/node/bridge.py, which adapts `JournalFile` to its journal
interface and writes dumps with `write_blob`.

Journal: magic, then records ``u32 length | u32 CRC-32C(body) | body``, body = ``u64 Raft
index | u64 term | command``, appended with ``pwrite``; `sync()` makes them durable with one
``fdatasync`` (the bridge decides when: before anything that depends on them is sent).
Meta and dump: magic + u32 CRC-32C + canonical CBOR, written to a temp file, fsynced, renamed,
directory fsynced (the dump: fsynced in place, renamed by PySyncObj, see the bridge).

Every byte is checked on load, and damage is never silently applied or silently dropped:
* A torn tail (the remains of writes a crash cut short: a last record running past the end of
  the file or all zeros, or bad bytes holding a whole 512-byte sector of zeros, a block
  allocated but never written, as etcd's WAL judges torn writes) was never fsynced, hence
  never acknowledged, and nor was anything after it: it is cut, with a warning saying how
  many bytes.
* Any other bad record (a flipped byte or a bad length in a record written whole, whether valid
  records follow it or not) is damage at rest: it, or entries after it, may have been
  acknowledged, so cutting there could lose committed metadata. Loading raises
  QuorumStorageError naming the file, byte offset and Raft index, and changes nothing; the
  voter does not start. (The operator's way out, while the other voters hold the log: move
  this voter's quorum directory aside so it catches up from the leader.)
* A meta or dump file whose CRC or header does not match raises QuorumStorageError too.
Not covered: a disk that lies about fsync; and one damage the format cannot tell from a short
write, a flip that grows the last record's length past the end of the file (it is cut as torn).

Concurrency: one thread at a time (the quorum's owner thread, then PySyncObj's tick thread).
May import: raftlog.base and metadata.quorum (its errors).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Any, Final

import cbor2
from crc32c import crc32c

from metadata.quorum import QuorumStorageError

__all__ = [
    "JournalFile",
    "Entry",
    "write_blob",
    "read_blob",
    "read_dump",
    "read_dump_voters",
    "fsync_dir",
    "META_MAGIC",
    "DUMP_MAGIC",
]

logger = logging.getLogger(__name__)

JOURNAL_MAGIC: Final = b"RLQJ\x01\x00\x00\x00"
META_MAGIC: Final = b"RLQM\x01"
DUMP_MAGIC: Final = b"RLQD\x01"
_RECORD_HEAD = struct.Struct("<II")  # body length, CRC-32C(body)
_RECORD_KEYS = struct.Struct("<QQ")  # Raft index, term
_MAX_BODY_BYTES: Final = 1 << 26     # far above any command the quorum accepts (1 MiB max)
_SECTOR: Final = 512
_ZERO_SECTOR: Final = bytes(_SECTOR)

Entry = tuple[bytes, int, int]  # (command, Raft index, term), as PySyncObj keeps them


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc(data: bytes) -> int:
    return crc32c(data)


def write_blob(path: Path, magic: bytes, obj: Any, *, replace: bool) -> None:
    """Write magic + u32 CRC + canonical CBOR; fsync; if replace, write to a temp file, rename
    over ``path`` and fsync the directory."""
    body = cbor2.dumps(obj, canonical=True)
    target = path.with_name(path.name + ".tmp") if replace else path
    with open(target, "wb") as f:
        f.write(magic + struct.pack("<I", _crc(body)) + body)
        f.flush()
        os.fsync(f.fileno())
    if replace:
        os.replace(target, path)
        fsync_dir(path.parent)


def read_blob(path: Path, magic: bytes) -> Any:
    """The object in a blob file; QuorumStorageError on a bad header or CRC."""
    raw = path.read_bytes()
    head = len(magic) + 4
    if len(raw) < head or raw[: len(magic)] != magic:
        raise QuorumStorageError(f"{path}: bad header")
    (crc,) = struct.unpack_from("<I", raw, len(magic))
    if _crc(raw[head:]) != crc:
        raise QuorumStorageError(f"{path}: CRC mismatch")
    return cbor2.loads(raw[head:])


def _entry_from_cbor(value: Any) -> Entry:
    command, idx, term = value
    if not (isinstance(command, bytes) and isinstance(idx, int) and isinstance(term, int)):
        raise QuorumStorageError("malformed dump entry")
    return (command, idx, term)


def read_dump(path: Path) -> tuple[Entry, Entry, list[bytes]]:
    """-> (entry0, entry1, commands): the Raft entries at last_applied-1 and last_applied, and
    the command list as of last_applied."""
    obj = read_blob(path, DUMP_MAGIC)
    commands = obj["commands"]
    if not isinstance(commands, list) or not all(isinstance(c, bytes) for c in commands):
        raise QuorumStorageError(f"{path}: malformed command list")
    return _entry_from_cbor(obj["entry0"]), _entry_from_cbor(obj["entry1"]), commands


def read_dump_voters(path: Path) -> dict[str, int | None] | None:
    """The voters a dump recorded ({quorum address: node id}; issue 44), or None for a dump
    written before voters could change."""
    voters = read_blob(path, DUMP_MAGIC).get("voters")
    if voters is None:
        return None
    if not isinstance(voters, dict) or not all(
        isinstance(a, str) and (i is None or isinstance(i, int)) for a, i in voters.items()
    ):
        raise QuorumStorageError(f"{path}: malformed voter set")
    return dict(voters)


def _record(command: bytes, idx: int, term: int) -> bytes:
    body = _RECORD_KEYS.pack(idx, term) + command
    return _RECORD_HEAD.pack(len(body), _crc(body)) + body


def _parse(raw: bytes, pos: int) -> tuple[Entry, int] | None:
    """The record at `pos` and where the next one starts, or None if it is not a whole record
    with a matching CRC."""
    if pos + _RECORD_HEAD.size > len(raw):
        return None
    length, crc = _RECORD_HEAD.unpack_from(raw, pos)
    start = pos + _RECORD_HEAD.size
    if not _RECORD_KEYS.size <= length <= _MAX_BODY_BYTES or start + length > len(raw):
        return None
    body = raw[start : start + length]
    if _crc(body) != crc:
        return None
    idx, term = _RECORD_KEYS.unpack_from(body)
    return (body[_RECORD_KEYS.size :], idx, term), start + length


def _is_torn(raw: bytes, pos: int, last_idx: int, last_term: int) -> bool:
    """Whether the bad bytes from `pos` on are a torn tail: a write a crash cut short, so
    never fsynced. Yes if they hold a sector of zeros (allocated, never written), or if nothing
    valid follows and the bad record was never whole (its header or body runs past the end of
    the file, or it is all zeros). No if a valid record continues the log after them, or if the
    bad record is whole with a wrong CRC (a flipped byte, not a short write)."""
    following = _valid_record_after(raw, pos, last_idx, last_term)
    if _has_zero_sector(raw, pos, len(raw) if following is None else following):
        return True
    if following is not None:
        return False
    if raw.count(0, pos) == len(raw) - pos:
        return True
    if pos + _RECORD_HEAD.size > len(raw):
        return True
    (length, _) = _RECORD_HEAD.unpack_from(raw, pos)
    return pos + _RECORD_HEAD.size + length > len(raw)


def _has_zero_sector(raw: bytes, start: int, end: int) -> bool:
    """Whether [start, end) holds a whole 512-byte sector of zeros: a block the file system
    allocated for an append that a crash kept from being written (etcd's torn-entry test)."""
    first = -(-start // _SECTOR) * _SECTOR
    return any(raw[q : q + _SECTOR] == _ZERO_SECTOR for q in range(first, end - _SECTOR + 1, _SECTOR))


def _valid_record_after(raw: bytes, pos: int, after_idx: int, min_term: int) -> int | None:
    """The offset of a valid record past the bad one at `pos` that continues the log (a later
    Raft index, no older term), or None. The bad record's own length is tried first (a flipped
    byte in a body); then every offset (a damaged length field)."""
    if pos + _RECORD_HEAD.size <= len(raw):
        (length, _) = _RECORD_HEAD.unpack_from(raw, pos)
        candidates = [pos + _RECORD_HEAD.size + length]
    else:
        candidates = []
    candidates.extend(range(pos + 1, len(raw) - _RECORD_HEAD.size - _RECORD_KEYS.size + 1))
    for q in candidates:
        found = _parse(raw, q)
        if found is not None and found[0][1] > after_idx and found[0][2] >= min_term:
            return q
    return None


class JournalFile:
    """One quorum journal, its meta file, and the entries in memory.

    Invariants: ``entries[k]`` is the record at byte offset ``_offsets[k]``; the file ends at
    ``_end``; ``_dirty`` is set by every change not yet made durable by ``sync()``.
    """

    def __init__(self, path: Path, dump_path: Path) -> None:
        self.path = path
        self._meta_path = path.with_name(path.name + ".meta")
        self.entries: list[Entry] = []
        self._offsets: list[int] = []
        self._dirty = False
        self._dir_dirty = not path.exists() or not self._meta_path.exists()
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._end = self._load()
            self._meta = self._load_meta()
            self._meta_saved = True
            self._finish_interrupted_compaction(dump_path)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise

    # -- load --

    def _load(self) -> int:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0:
            os.pwrite(self._fd, JOURNAL_MAGIC, 0)
            self._dirty = True
            return len(JOURNAL_MAGIC)
        raw = os.pread(self._fd, size, 0)
        if raw[: len(JOURNAL_MAGIC)] != JOURNAL_MAGIC:
            raise QuorumStorageError(f"{self.path}: not a raftlog quorum journal")
        pos = len(JOURNAL_MAGIC)
        while (found := _parse(raw, pos)) is not None:
            entry, following = found
            self._offsets.append(pos)
            self.entries.append(entry)
            pos = following
        if pos == size:
            return pos
        last_idx = self.entries[-1][1] if self.entries else 0
        if not _is_torn(raw, pos, last_idx, self.entries[-1][2] if self.entries else 0):
            raise QuorumStorageError(
                f"{self.path}: the record at byte {pos} (after Raft index {last_idx}) is damaged "
                f"(CRC-32C mismatch or bad length), and this is not a torn tail: it was written "
                f"whole, or valid records follow it, so it may have been acknowledged. The voter "
                f"will not start on it; move {self.path.parent} aside to let this voter catch up "
                f"from the leader (while the other voters hold the log)"
            )
        # A torn tail was never fsynced, hence never acknowledged: safe to cut.
        logger.warning("%s: cutting %d bytes of torn tail after Raft index %d", self.path, size - pos,
                       last_idx)
        os.ftruncate(self._fd, pos)
        self._dirty = True
        return pos

    def _load_meta(self) -> dict[str, Any]:
        if not self._meta_path.exists():
            return {"commit_index": 1, "term": 0, "voted_for": None}
        meta = read_blob(self._meta_path, META_MAGIC)
        if not isinstance(meta, dict) or not {"commit_index", "term", "voted_for"} <= meta.keys():
            raise QuorumStorageError(f"{self._meta_path}: malformed")
        return meta

    def _finish_interrupted_compaction(self, dump_path: Path) -> None:
        # PySyncObj writes the dump, then compacts the journal a tick later. If we died in
        # between, the journal still starts before the dump, and PySyncObj would throw away the
        # journal's tail on load (it only keeps a journal whose first two entries are the
        # dump's). Finish the compaction instead.
        if not dump_path.exists():
            return
        entry0, entry1, _ = read_dump(dump_path)
        for k in range(1, len(self.entries) - 1):
            if self.entries[k] == entry0 and self.entries[k + 1] == entry1:
                logger.info("%s: completing compaction up to index %d", self.path, entry0[1])
                self.compact_to(k)
                return

    # -- entries --

    def append(self, command: bytes, idx: int, term: int) -> None:
        assert self._fd is not None
        command = bytes(command)
        record = _record(command, idx, term)
        os.pwrite(self._fd, record, self._end)
        self._offsets.append(self._end)
        self.entries.append((command, idx, term))
        self._end += len(record)
        self._dirty = True

    def truncate_at(self, k: int) -> None:
        """Drop entries k, k+1, ... (a follower's log conflicts with the leader's)."""
        assert self._fd is not None
        if k >= len(self.entries):
            return
        self._end = self._offsets[k]
        os.ftruncate(self._fd, self._end)
        del self.entries[k:]
        del self._offsets[k:]
        self._dirty = True

    def compact_to(self, k: int) -> None:
        """Drop entries before k. Rewrites into a new file that is fsynced and renamed over the
        journal: a crash leaves either the old or the new journal."""
        assert self._fd is not None
        kept = self.entries[k:]
        tmp = self.path.with_name(self.path.name + ".compact.tmp")
        offsets = []
        with open(tmp, "wb") as f:
            f.write(JOURNAL_MAGIC)
            pos = len(JOURNAL_MAGIC)
            for command, idx, term in kept:
                record = _record(command, idx, term)
                offsets.append(pos)
                f.write(record)
                pos += len(record)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self.entries, self._offsets, self._end = list(kept), offsets, pos
        self._dirty = False

    # -- meta --

    @property
    def commit_index(self) -> int:
        return int(self._meta["commit_index"])

    def set_commit_index(self, commit_index: int) -> None:
        """Stored lazily (`store_meta_if_changed`): Raft relearns it, safety does not need it."""
        if self._meta["commit_index"] != commit_index:
            self._meta["commit_index"] = commit_index
            self._meta_saved = False

    @property
    def term(self) -> int:
        return int(self._meta["term"])

    @property
    def voted_for(self) -> str | None:
        return self._meta["voted_for"]

    def set_term_and_vote(self, term: int, voted_for: str | None) -> None:
        """Durable when this returns. Ordering: before the vote or message that reflects it is
        sent (the bridge calls this on the same stack)."""
        self._meta["term"] = term
        self._meta["voted_for"] = voted_for
        self._store_meta()

    def store_meta_if_changed(self) -> None:
        if not self._meta_saved:
            self._store_meta()

    def _store_meta(self) -> None:
        write_blob(self._meta_path, META_MAGIC, self._meta, replace=True)
        self._meta_saved = True

    # -- durability --

    def sync(self) -> None:
        """Make every change so far durable: one fdatasync if anything changed."""
        if self._dirty and self._fd is not None:
            os.fdatasync(self._fd)
            self._dirty = False
        if self._dir_dirty:
            fsync_dir(self.path.parent)
            self._dir_dirty = False

    def close(self) -> None:
        """Sync, store the meta, close. Idempotent."""
        if self._fd is None:
            return
        self.sync()
        self.store_meta_if_changed()
        os.close(self._fd)
        self._fd = None

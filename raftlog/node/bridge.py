"""The metadata quorum: PySyncObj behind a trio-facing API, with its guardrails.

This is the only module in raftlog that imports pysyncobj (pinned to 0.3.17: it reaches into
that version's hooks). The replicated state is an append-only list of small opaque commands
(canonical-CBOR metadata envelopes; not interpreted here). Index ``i`` is the 1-based position
of a command in that list: dense, identical on every voter, stable across restarts. It is not
the Raft log index (which also counts leader no-ops); the Raft numbers appear in ``status()``.

API (trio): ``MetadataQuorum(config, on_commit=, on_leader_change=)``, ``await run()``,
``await propose(command, timeout_s=) -> index``, properties ``is_leader``, ``leader_id``,
``term`` (the controller epoch), ``commit_index``, ``has_quorum``, and ``status()``.

Threads. PySyncObj runs one tick thread per voter (20 ticks/s, woken early by a pipe on each
proposal). A dedicated owner thread constructs the SyncObj (key derivation, journal load and
port binding block) and later destroys it; it must outlive the tick thread because PySyncObj
stops ticking when its constructing thread dies. The tick thread never touches trio objects:
every commit, proposal result and status change is handed over with
``TrioToken.run_sync_soon``, whose FIFO order gives:

* ``on_commit(index, command)`` runs on the trio thread for every command, in index order,
  exactly once per ``run()`` (so also for every command replayed from disk after a restart);
* ``on_commit(i, ...)`` has run before ``propose`` returns ``i``;
* ``on_leader_change(leader_id | None, term)`` runs on each change of (leader, term), ordered
  with the commits around it.

Security guardrails (PySyncObj pickles every message, command, and its journal meta file):

* ``password`` is mandatory: Fernet (AES-128-CBC + HMAC-SHA256) authenticates each frame
  before it is unpickled. One cluster-wide secret, no per-node identity.
* A whitelisting unpickler replaces ``pysyncobj.pickle.loads/load`` and
  ``pysyncobj.journal.loads`` (patched once, at import): even an authenticated peer cannot name
  a global outside ``_ALLOWED_GLOBALS``. Importing pysyncobj also patches the stdlib's
  pure-Python ``pickle._Unpickler`` dispatch table; that is undone here.
* The listener binds ``self_address`` only (PySyncObj binds 0.0.0.0 by default).
* The log-compaction dump is our own format (canonical CBOR + CRC-32C), not pickle.

Durability (group commit). The journal here replaces PySyncObj's mmap journal: one file of
CRC-framed records written with ``pwrite``, plus a CBOR meta file (term, vote, commit index).
Ordering: (1) a follower holds back its acknowledgements (``next_node_idx``) while it
handles one batch of incoming messages, then ``fdatasync``s once and releases them; (2) the
leader ``fdatasync``s once per tick, after taking new commands and again at the start of the
next tick, so every entry it counts for itself in the commit calculation is on disk; (3) term
and vote go to a temp file that is fsynced, renamed, and its directory fsynced, before the
vote or message that depends on them is sent; (4) a dump is fsynced (file and directory)
before the journal is compacted against it, and compaction writes a new journal file that is
fsynced and renamed. Hence: once ``propose`` returns ``i`` (or any voter applies ``i``),
command ``i`` is on stable storage on a majority of voters; it survives ``kill -9`` or power
loss of every voter as long as a majority's disks do. A torn journal tail (records failing
their CRC) is cut on open; it cannot hold an acknowledged entry. Not covered: a disk that
lies about fsync, and corruption in the middle of the journal (also cut there, with a
warning, like Kafka's recovery; a voter may then need to catch up from the leader).

Proposals are never re-sent by the bridge and PySyncObj may drop callbacks, so every
``propose`` is bounded by ``timeout_s`` and callers make commands idempotent (a request id in
each). Its errors are metadata/quorum.py's (the port this module implements).

Follower truncation (issue 14, case 5). PySyncObj 0.3.17's follower deletes every entry after
an append's prevLogIdx before adding the message's entries, conflict or not (syncobj.py ~990,
logged CRITICAL "truncating already-applied log entries" on fault-free runs): its leader
rewinds its send position on each acknowledgement and re-sends entries in flight. The log
ends up the same only when the message re-adds all of them; a shorter (batch-limited or
empty) message leaves the follower without entries it had acknowledged, and its journal
too, until later messages bring them back. Those entries may count toward a commit: a leader
crash in that window can leave a majority lacking a committed entry (Raft's Leader
Completeness needs acknowledged entries to stay). `trim_append_entries` rewrites each append
before PySyncObj sees it so that it only ever deletes from the first real conflict (Raft
§5.3): entries it already holds are skipped; if it holds more than the message covers, it
keeps them, and the acknowledgement and the commit index are capped at what the message
vouched for (Raft's "index of last new entry"), so nothing unverified is counted or applied.

Known limits: the whole list stays in RAM and every dump holds all of it (fine for metadata in
the MiB range); each command costs about twice its size in the journal (pickled bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import logging
import os
import pickle
import struct
import threading
from pathlib import Path
from typing import Any, Callable

import cbor2
import google_crc32c
import trio

import pysyncobj.journal
import pysyncobj.pickle
import pysyncobj.syncobj
import pysyncobj.version
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException, replicated
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as _pysyncobj_monotonic
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from metadata.quorum import (
    CommandTooLargeError,
    NotQuorumLeaderError,
    ProposalOutcomeUnknownError,
    ProposalRejectedError,
    ProposalTimedOutError,
    QuorumBindError,
    QuorumNotRunningError,
    QuorumStorageError,
)

logger = logging.getLogger(__name__)

PYSYNCOBJ_VERSION = "0.3.17"
if pysyncobj.version.VERSION != PYSYNCOBJ_VERSION:  # pragma: no cover - guards the hooks below
    raise ImportError(
        f"raftlog.node.bridge needs pysyncobj=={PYSYNCOBJ_VERSION}, found {pysyncobj.version.VERSION}"
    )

_MAX_COMMAND_BYTES_LIMIT = 1024 * 1024
_MAX_PENDING_PROPOSALS = 1024


# --------------------------------------------------------------------------------------------
# Restricted unpickling (patched over pysyncobj at import)

# Raw (module, name) pairs as the unpickler sees them: protocol-2 pickles name builtins
# "__builtin__". What PySyncObj's traffic needs: bytes come as _codecs.encode(str, "latin1"),
# b"" as bytes(); sets and Node objects appear in membership entries (unused here, harmless).
_ALLOWED_GLOBALS = frozenset(
    {
        ("_codecs", "encode"),
        ("copyreg", "_reconstructor"),
        ("__builtin__", "object"),
        ("builtins", "object"),
        ("__builtin__", "bytes"),
        ("builtins", "bytes"),
        ("__builtin__", "set"),
        ("builtins", "set"),
        ("__builtin__", "frozenset"),
        ("builtins", "frozenset"),
        ("pysyncobj.node", "Node"),
        ("pysyncobj.node", "TCPNode"),
    }
)

_rejections_lock = threading.Lock()
_rejections = 0


def unpickle_rejections() -> int:
    """How many pickles this process refused (process-wide, like the patch itself)."""
    with _rejections_lock:
        return _rejections


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        global _rejections
        if (module, name) not in _ALLOWED_GLOBALS:
            with _rejections_lock:
                _rejections += 1
            logger.warning("blocked unpickling of global %s.%s", module, name)
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def restricted_load(file: io.BufferedIOBase | io.BytesIO) -> Any:
    """Unpickle from a file, allowing only ``_ALLOWED_GLOBALS``. Raises UnpicklingError."""
    return _RestrictedUnpickler(file).load()


def restricted_loads(data: bytes | str) -> Any:
    """Unpickle bytes, allowing only ``_ALLOWED_GLOBALS``. Raises UnpicklingError."""
    # No fallback to the pure-Python unpickler (PySyncObj retries with it for Python-2 data).
    return restricted_load(io.BytesIO(pysyncobj.pickle.to_bytes(data)))


def _install_pickle_guard() -> None:
    """Idempotent. Must run before any SyncObj exists."""
    pysyncobj.pickle.loads = restricted_loads
    pysyncobj.pickle.load = restricted_load
    # journal.py did `from .pickle import loads`: patch its own binding too.
    pysyncobj.journal.loads = restricted_loads
    # Undo pysyncobj.pickle's import-time patch of the stdlib pure-Python unpickler, which
    # silently turned undecodable str opcodes into bytes for everyone in the process.
    stdlib = pickle._Unpickler  # type: ignore[attr-defined]
    stdlib.dispatch[pickle.SHORT_BINSTRING[0]] = stdlib.load_short_binstring
    stdlib.dispatch[pickle.BINSTRING[0]] = stdlib.load_binstring
    pysyncobj.syncobj.createJournal = _create_journal


# --------------------------------------------------------------------------------------------
# Files: fsync helpers, CRC-framed CBOR blobs


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc(data: bytes) -> int:
    return google_crc32c.value(data)


def _write_blob(path: Path, magic: bytes, obj: Any, *, replace: bool) -> None:
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
        _fsync_dir(path.parent)


def _read_blob(path: Path, magic: bytes) -> Any:
    raw = path.read_bytes()
    head = len(magic) + 4
    if len(raw) < head or raw[: len(magic)] != magic:
        raise QuorumStorageError(f"{path}: bad header")
    (crc,) = struct.unpack_from("<I", raw, len(magic))
    if _crc(raw[head:]) != crc:
        raise QuorumStorageError(f"{path}: CRC mismatch")
    return cbor2.loads(raw[head:])


_META_MAGIC = b"RLQM\x01"
_DUMP_MAGIC = b"RLQD\x01"


def _entry_from_cbor(value: Any) -> tuple[bytes, int, int]:
    command, idx, term = value
    if not (isinstance(command, bytes) and isinstance(idx, int) and isinstance(term, int)):
        raise QuorumStorageError("malformed dump entry")
    return (command, idx, term)


def _read_dump(path: Path) -> tuple[tuple[bytes, int, int], tuple[bytes, int, int], list[bytes]]:
    """-> (entry0, entry1, commands): the Raft entries at last_applied-1 and last_applied, and
    the command list as of last_applied."""
    obj = _read_blob(path, _DUMP_MAGIC)
    commands = obj["commands"]
    if not isinstance(commands, list) or not all(isinstance(c, bytes) for c in commands):
        raise QuorumStorageError(f"{path}: malformed command list")
    return _entry_from_cbor(obj["entry0"]), _entry_from_cbor(obj["entry1"]), commands


# --------------------------------------------------------------------------------------------
# Journal

_JOURNAL_MAGIC = b"RLQJ\x01\x00\x00\x00"
_RECORD_HEAD = struct.Struct("<II")  # body length, CRC-32C(body)
_RECORD_KEYS = struct.Struct("<QQ")  # Raft index, term

# Journals created by MetadataQuorum, handed to PySyncObj through the patched createJournal.
_pending_journals: dict[str, "_Journal"] = {}
_pending_journals_lock = threading.Lock()


def _create_journal(journal_file: str | None) -> pysyncobj.journal.Journal:
    if journal_file is None:
        return pysyncobj.journal.MemoryJournal()
    with _pending_journals_lock:
        journal = _pending_journals.pop(journal_file, None)
    if journal is None:
        raise QuorumStorageError(f"no bridge journal registered for {journal_file}")
    return journal


class _Journal(pysyncobj.journal.Journal):
    """PySyncObj's journal interface over one append-only file of CRC-framed records.

    Invariants: ``self._entries[k]`` is the record at byte offset ``self._offsets[k]``; the file
    ends at ``self._end``; ``self._dirty`` is set by every change not yet made durable by
    ``sync()``. Used by one thread at a time (owner thread, then the tick thread).
    """

    def __init__(self, path: Path, dump_path: Path) -> None:
        self._path = path
        self._meta_path = path.with_name(path.name + ".meta")
        self._entries: list[tuple[bytes, int, int]] = []
        self._offsets: list[int] = []
        self._dirty = False
        self._dir_dirty = not path.exists() or not self._meta_path.exists()
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._end = self._load()
        self._meta = self._load_meta()
        self._meta_saved = True
        self._finish_interrupted_compaction(dump_path)

    def _load(self) -> int:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0:
            os.pwrite(self._fd, _JOURNAL_MAGIC, 0)
            self._dirty = True
            return len(_JOURNAL_MAGIC)
        raw = os.pread(self._fd, size, 0)
        if raw[: len(_JOURNAL_MAGIC)] != _JOURNAL_MAGIC:
            raise QuorumStorageError(f"{self._path}: not a raftlog quorum journal")
        pos = len(_JOURNAL_MAGIC)
        while pos + _RECORD_HEAD.size <= size:
            length, crc = _RECORD_HEAD.unpack_from(raw, pos)
            body = raw[pos + _RECORD_HEAD.size : pos + _RECORD_HEAD.size + length]
            if length < _RECORD_KEYS.size or len(body) != length or _crc(body) != crc:
                break
            idx, term = _RECORD_KEYS.unpack_from(body)
            self._offsets.append(pos)
            self._entries.append((body[_RECORD_KEYS.size :], idx, term))
            pos += _RECORD_HEAD.size + length
        if pos != size:
            # A torn tail was never fsynced, hence never acknowledged: safe to cut.
            logger.warning("%s: cutting %d bytes of torn tail", self._path, size - pos)
            os.ftruncate(self._fd, pos)
            self._dirty = True
        return pos

    def _load_meta(self) -> dict[str, Any]:
        if not self._meta_path.exists():
            return {"commit_index": 1, "term": 0, "voted_for": None}
        meta = _read_blob(self._meta_path, _META_MAGIC)
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
        entry0, entry1, _ = _read_dump(dump_path)
        for k in range(1, len(self._entries) - 1):
            if self._entries[k] == entry0 and self._entries[k + 1] == entry1:
                logger.info("%s: completing compaction up to index %d", self._path, entry0[1])
                self.deleteEntriesTo(k)
                return

    # -- PySyncObj's Journal interface (tick thread) --

    def add(self, command: bytes, idx: int, term: int) -> None:
        assert self._fd is not None
        command = bytes(command)
        body = _RECORD_KEYS.pack(idx, term) + command
        record = _RECORD_HEAD.pack(len(body), _crc(body)) + body
        os.pwrite(self._fd, record, self._end)
        self._offsets.append(self._end)
        self._entries.append((command, idx, term))
        self._end += len(record)
        self._dirty = True

    def clear(self) -> None:
        self._truncate_at(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self._truncate_at(entryFrom)

    def _truncate_at(self, k: int) -> None:
        assert self._fd is not None
        if k >= len(self._entries):
            return
        self._end = self._offsets[k]
        os.ftruncate(self._fd, self._end)
        del self._entries[k:]
        del self._offsets[k:]
        self._dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        # Rewrite into a new file and rename: a crash leaves either the old or the new journal.
        assert self._fd is not None
        kept = self._entries[entryTo:]
        tmp = self._path.with_name(self._path.name + ".compact.tmp")
        offsets = []
        with open(tmp, "wb") as f:
            f.write(_JOURNAL_MAGIC)
            pos = len(_JOURNAL_MAGIC)
            for command, idx, term in kept:
                body = _RECORD_KEYS.pack(idx, term) + command
                offsets.append(pos)
                record = _RECORD_HEAD.pack(len(body), _crc(body)) + body
                f.write(record)
                pos += len(record)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        _fsync_dir(self._path.parent)
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDWR)
        self._entries, self._offsets, self._end = list(kept), offsets, pos
        self._dirty = False

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Not needed for safety (Raft relearns it), so stored lazily like PySyncObj does.
        if self._meta["commit_index"] != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta["commit_index"])

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        # Ordering: durable before the vote/message that reflects it is sent (same call stack).
        self._meta["term"] = term
        self._meta["voted_for"] = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta["term"])

    def getVotedForNodeId(self) -> str | None:
        return self._meta["voted_for"]

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._store_meta()

    def flush(self) -> None:
        self.sync()

    def _destroy(self) -> None:
        if self._fd is None:
            return
        self.sync()
        self.onOneSecondTimer()
        os.close(self._fd)
        self._fd = None

    # -- durability --

    def _store_meta(self) -> None:
        _write_blob(self._meta_path, _META_MAGIC, self._meta, replace=True)
        self._meta_saved = True

    def sync(self) -> None:
        """Make every change so far durable: one fdatasync if anything changed."""
        if self._dirty and self._fd is not None:
            os.fdatasync(self._fd)
            self._dirty = False
        if self._dir_dirty:
            _fsync_dir(self._path.parent)
            self._dir_dirty = False


# --------------------------------------------------------------------------------------------
# Follower appends: delete only from the first conflict (module docstring, issue 14 case 5)


def trim_append_entries(message: dict[str, Any], entries: Any) -> tuple[dict[str, Any], int | None]:
    """Rewrite a regular `append_entries` message for a follower whose log is `entries`
    (a sequence of (command, index, term), contiguous indices) so that PySyncObj's handling,
    which deletes everything after `prevLogIdx`, deletes only from the first entry that
    conflicts (same index, other term). Returns (message, ack_cap): `ack_cap`, when not None,
    is the largest `next_node_idx` the success acknowledgement may claim (the entries we keep
    past what the message covered are not vouched for by the leader). Pure; a message it
    cannot judge (no prevLogIdx match, a chunked transmission) is returned unchanged: PySyncObj
    then answers failure and deletes nothing."""
    prev = message.get("prevLogIdx")
    new = message.get("entries") or []
    if prev is None or "transmission" in message or not len(entries):
        return message, None
    first, last = entries[0][1], entries[-1][1]
    if prev < first or prev >= last or entries[prev - first][2] != message.get("prevLogTerm"):
        return message, None  # a mismatch (PySyncObj refuses) or nothing after prev to lose
    n = 0
    for entry in new:
        idx = entry[1]
        if idx > last or entries[idx - first][2] != entry[2]:
            break
        n += 1
    if n < len(new) and new[n][1] <= last:
        # A real conflict: let PySyncObj delete from there (correct Raft) and add the rest.
        at = new[n][1] - 1
        return {**message, "prevLogIdx": at, "prevLogTerm": entries[at - first][2],
                "entries": list(new[n:])}, None
    if n < len(new):
        # Everything we hold matches; the rest extends our log: append it, delete nothing.
        return {**message, "prevLogIdx": last, "prevLogTerm": entries[-1][2],
                "entries": list(new[n:])}, None
    # The message is all entries we hold, and we hold more: keep them, acknowledge and
    # commit only what the leader vouched for.
    verified = new[-1][1] if new else prev
    return {**message, "prevLogIdx": last, "prevLogTerm": entries[-1][2], "entries": [],
            "commit_index": min(message.get("commit_index", 0), verified)}, verified + 1


# --------------------------------------------------------------------------------------------
# PySyncObj subclasses (everything here runs on the tick thread unless noted)


class _DurableTransport(TCPTransport):
    """Holds back acknowledgements until the entries they cover are fsynced, and dials
    through ``QuorumConfig.dial_overrides``.

    A follower's ``next_node_idx`` promises its entries are stored. Acks produced while
    handling one poll batch are queued and released after a single fdatasync (at the next
    tick, or before any other outgoing message, which keeps per-connection order).

    Dial overrides: PySyncObj names a voter by its address (which side dials, the address a
    connecting voter announces, the vote) so that address must stay the real one; only the
    TCP connect of an outgoing connection goes to the mapped address (a proxy in front of
    the voter). This replaces 0.3.17's ``_connectIfNecessarySingle`` line for line except
    for the address passed to ``connect``.
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self._rl_acks: list[tuple[Any, Any]] = []
        self._rl_dial: dict[str, tuple[str, int]] = {}
        for identity, target in syncObj._rl_quorum._config.dial_overrides.items():
            host, _, port = target.rpartition(":")
            self._rl_dial[identity] = (host.strip("[]"), int(port))
        super().__init__(syncObj, selfNode, otherNodes)
        syncObj._rl_transport = self

    def _connectIfNecessarySingle(self, node: Any) -> bool:
        if node in self._connections and self._connections[node].state != CONNECTION_STATE.DISCONNECTED:
            return True
        if not self._shouldConnect(node):
            return False
        assert node in self._connections
        last = self._lastConnectAttempt.get(node)
        now = _pysyncobj_monotonic()
        if last is not None and now - last < self._syncObj.conf.connectionRetryTime:
            return False
        self._lastConnectAttempt[node] = now
        target = self._rl_dial.get(node.address)
        if target is None:
            return self._connections[node].connect(node.ip, node.port)
        return self._connections[node].connect(globalDnsResolver().resolve(target[0]), target[1])

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "next_node_idx":
            cap = self._syncObj._rl_ack_cap
            if cap is not None and message.get("success") and message["next_node_idx"] > cap:
                message = {**message, "next_node_idx": cap}  # trim_append_entries kept more
            self._rl_acks.append((node, message))
            return True
        self.rl_release_acks()
        return super().send(node, message)

    def rl_release_acks(self) -> None:
        if not self._rl_acks:
            return
        self._syncObj._rl_journal.sync()
        acks, self._rl_acks = self._rl_acks, []
        for node, message in acks:
            super().send(node, message)


class _QuorumSyncObj(SyncObj):
    def __init__(
        self,
        quorum: "MetadataQuorum",
        journal: _Journal,
        self_address: str,
        peer_addresses: list[str],
        conf: SyncObjConf,
    ) -> None:
        # Set before SyncObj.__init__: its tick thread starts (and may apply) inside it.
        self._rl_quorum = quorum
        self._rl_journal = journal
        self._rl_transport: _DurableTransport | None = None  # set by the transport itself
        self._rl_commands: list[bytes] = []
        self._rl_delivered = 0
        self._rl_dump_renamed = False
        self._rl_published: tuple[Any, ...] | None = None
        self._rl_ack_cap: int | None = None  # set while one trimmed append is handled
        # Our own dump format instead of gzip(pickle(__dict__)); also disables fork.
        conf.serializer = self._rl_serialize
        conf.deserializer = self._rl_deserialize
        super().__init__(self_address, peer_addresses, conf, transportClass=_DurableTransport)
        self.addOnTickCallback(self._rl_before_poll)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:  # noqa: N802
        # Replaces the name-mangled handler PySyncObj registers with its transport (bound
        # at construction, so this override is the one called): appends are trimmed first.
        if (isinstance(message, dict) and message.get("type") == "append_entries"
                and message.get("term", -1) >= self.raftCurrentTerm):
            message, self._rl_ack_cap = trim_append_entries(message, self._rl_journal)
        try:
            SyncObj._SyncObj__onMessageReceived(self, node, message)
        finally:
            self._rl_ack_cap = None

    @replicated
    def _rl_append(self, command: bytes) -> int | None:
        if not isinstance(command, bytes):
            # Deterministic on every voter, so skipping keeps the lists identical.
            logger.error("skipping a non-bytes command of type %s", type(command).__name__)
            return None
        self._rl_commands.append(command)
        index = len(self._rl_commands)
        if index > self._rl_delivered:  # a replay before a dump load may repeat indices
            self._rl_delivered = index
            self._rl_quorum._to_trio(self._rl_quorum._deliver_commit, index, command)
        return index

    def _onTick(self, timeToWait: float = 0.0) -> None:
        # Group commit: everything appended since the last sync (including a new leader's no-op
        # appended while polling) is durable before this tick's commit calculation counts it.
        self._rl_sync()
        super()._onTick(timeToWait)
        self._rl_publish()

    def _rl_before_poll(self) -> None:
        # Sync the leader's new entries while the followers are writing theirs.
        self._rl_sync()
        self._rl_publish()

    def _rl_sync(self) -> None:
        self._rl_journal.sync()
        if self._rl_transport is not None:
            self._rl_transport.rl_release_acks()
        if self._rl_dump_renamed:
            # PySyncObj renamed our fsynced dump into place; make the rename durable before
            # this tick compacts the journal against it.
            self._rl_dump_renamed = False
            _fsync_dir(self._rl_quorum._quorum_dir)

    def _rl_publish(self) -> None:
        leader = self._getLeader()
        snapshot = (
            self._isLeader(),
            None if leader is None else leader.id,
            self.raftCurrentTerm,
            self.hasQuorum,
            self.raftCommitIndex,
            self.raftLastApplied,
            len(self._rl_commands),
        )
        if snapshot != self._rl_published:
            self._rl_published = snapshot
            self._rl_quorum._to_trio(self._rl_quorum._on_status, snapshot)

    # -- custom dump (called by PySyncObj's Serializer on the tick thread) --

    def _rl_serialize(self, file_name: str, data: tuple[Any, ...]) -> None:
        entry1, entry0 = data[0], data[1]
        obj = {
            "entry0": [bytes(entry0[0]), entry0[1], entry0[2]],
            "entry1": [bytes(entry1[0]), entry1[1], entry1[2]],
            "commands": self._rl_commands,
        }
        _write_blob(Path(file_name), _DUMP_MAGIC, obj, replace=False)
        self._rl_dump_renamed = True

    def _rl_deserialize(self, file_name: str) -> tuple[Any, ...]:
        path = Path(file_name)
        try:
            entry0, entry1, commands = _read_dump(path)
            # Loaded at start-up or just received from the leader: durable before PySyncObj
            # clears the journal behind it.
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            _fsync_dir(path.parent)
            old = self._rl_commands
            common = min(len(old), len(commands))
            if old[:common] != commands[:common]:
                raise QuorumStorageError("dump diverges from the applied command list")
        except BaseException as exc:
            # PySyncObj logs and swallows exceptions here; make it fatal instead.
            self._rl_quorum._to_trio(self._rl_quorum._fail, exc)
            raise
        logger.info(
            "loaded dump %s: %d commands, raft index %d", path, len(commands), entry1[1]
        )
        self._rl_commands = list(commands)
        for index in range(self._rl_delivered + 1, len(commands) + 1):
            self._rl_quorum._to_trio(self._rl_quorum._deliver_commit, index, commands[index - 1])
        self._rl_delivered = max(self._rl_delivered, len(commands))
        return (entry1, entry0, ())


# --------------------------------------------------------------------------------------------
# Public API


@dataclasses.dataclass(frozen=True)
class QuorumConfig:
    """One voter's settings. ``peers`` are the other voters (node id -> "host:port")."""

    node_id: int
    self_address: str
    peers: dict[int, str]
    data_dir: Path
    password: str
    leader_fallback_timeout_s: float = 1.0
    max_command_bytes: int = 64 * 1024
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 600.0
    # {voter address: address to dial instead} (see _DurableTransport); empty = dial directly.
    dial_overrides: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.password, str) or not self.password:
            raise ValueError("password (the cluster secret) is required")
        if self.node_id in self.peers:
            raise ValueError("peers must not contain node_id")
        addresses = [self.self_address, *self.peers.values()]
        if len(set(addresses)) != len(addresses):
            raise ValueError("voter addresses must be distinct")
        for address in addresses:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"bad address {address!r}, want host:port")
        if not 0 < self.max_command_bytes <= _MAX_COMMAND_BYTES_LIMIT:
            raise ValueError(f"max_command_bytes must be in 1..{_MAX_COMMAND_BYTES_LIMIT}")
        if self.leader_fallback_timeout_s <= 0.1:
            raise ValueError("leader_fallback_timeout_s must exceed the 0.1 s heartbeat")
        if self.log_compaction_min_entries < 2 or self.log_compaction_min_time_s <= 0:
            raise ValueError("bad log compaction settings")
        for identity, target in self.dial_overrides.items():
            host, _, port = str(target).rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"bad dial override {identity!r} -> {target!r}, want host:port")


@dataclasses.dataclass
class _Pending:
    event: trio.Event
    result: Any = None
    error: int | None = None


_FAIL_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}


class MetadataQuorum:
    """One metadata-quorum voter. Create, then ``await run()`` in a nursery.

    Concurrency: all methods and properties are for the trio thread that runs ``run()``.
    """

    def __init__(
        self,
        config: QuorumConfig,
        *,
        on_commit: Callable[[int, bytes], None],
        on_leader_change: Callable[[int | None, int], None],
    ) -> None:
        self._config = config
        self._on_commit = on_commit
        self._on_leader_change = on_leader_change
        self._quorum_dir = Path(config.data_dir) / "quorum"
        self._id_by_address = {config.self_address: config.node_id}
        self._id_by_address.update({address: nid for nid, address in config.peers.items()})
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = False
        self._running = False
        self._stop_requested = threading.Event()
        self._owner_started: trio.Event | None = None
        self._owner_error: BaseException | None = None
        self._fatal: trio.Event | None = None
        self._fatal_error: BaseException | None = None
        self._pending: dict[int, _Pending] = {}
        self._proposal_ids = itertools.count(1)
        self._sync_obj: _QuorumSyncObj | None = None
        # Trio-side view, updated only by _on_status / _deliver_commit.
        self._is_leader = False
        self._leader_id: int | None = None
        self._term = 0
        self._has_quorum = False
        self._raft_commit_index = 0
        self._raft_last_applied = 0
        self._committed_count = 0
        self._last_applied = 0
        self._reported_leader: tuple[int | None, int] = (None, 0)

    # -- properties (trio thread; a view at most one tick old) --

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def term(self) -> int:
        return self._term

    @property
    def commit_index(self) -> int:
        """Highest command index committed and already passed to ``on_commit`` here."""
        return self._last_applied

    @property
    def has_quorum(self) -> bool:
        return self._has_quorum

    def status(self) -> dict[str, Any]:
        """A JSON-able summary for ``cluster status``."""
        voters = {self._config.node_id: self._config.self_address, **self._config.peers}
        return {
            "node_id": self._config.node_id,
            "voters": {str(k): v for k, v in sorted(voters.items())},
            "running": self._running,
            "is_leader": self._is_leader,
            "leader_id": self._leader_id,
            "term": self._term,
            "has_quorum": self._has_quorum,
            "commit_index": self._committed_count,
            "last_applied": self._last_applied,
            "raft_commit_index": self._raft_commit_index,
            "raft_last_applied": self._raft_last_applied,
            "pending_proposals": len(self._pending),
            "unpickle_rejections": unpickle_rejections(),
        }

    # -- lifecycle --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the voter, report started once its port is bound, run until cancelled.

        On cancellation the SyncObj is destroyed (journal synced, meta stored) before this
        returns. Raises QuorumStorageError on corrupt state, QuorumBindError if the port
        cannot be bound, or whatever ``on_commit``/``on_leader_change`` raised.
        """
        if self._started:
            raise RuntimeError("MetadataQuorum.run() can be called once")
        self._started = True
        self._token = trio.lowlevel.current_trio_token()
        self._owner_started = trio.Event()
        self._fatal = trio.Event()
        owner = threading.Thread(
            target=self._owner_main, name=f"raftlog-quorum-{self._config.node_id}", daemon=True
        )
        owner.start()
        try:
            await self._owner_started.wait()
            if self._owner_error is not None:
                raise self._owner_error
            self._running = True
            task_status.started()
            await self._fatal.wait()
            assert self._fatal_error is not None
            raise self._fatal_error
        finally:
            self._running = False
            self._stop_requested.set()
            for pending in self._pending.values():
                pending.error = -1
                pending.event.set()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(owner.join)

    def _owner_main(self) -> None:
        """Owner thread: build the SyncObj, wait for stop, destroy it."""
        config = self._config
        sync_obj: _QuorumSyncObj | None = None
        journal: _Journal | None = None
        journal_path = self._quorum_dir / "journal"
        try:
            self._quorum_dir.mkdir(parents=True, exist_ok=True)
            journal = _Journal(journal_path, self._quorum_dir / "dump")
            with _pending_journals_lock:
                _pending_journals[str(journal_path)] = journal
            conf = SyncObjConf(
                password=config.password,
                autoTick=True,
                commandsQueueSize=_MAX_PENDING_PROPOSALS,
                commandsWaitLeader=False,
                appendEntriesUseBatch=False,
                # Entries at or above this size take PySyncObj's broken chunked path; a
                # command pickles to at most ~2x its size.
                appendEntriesBatchSizeBytes=max(2**18, 4 * config.max_command_bytes),
                leaderFallbackTimeout=config.leader_fallback_timeout_s,
                bindAddress=config.self_address,
                bindRetryTime=0.2,
                maxBindRetries=25,
                connectionRetryTime=0.5,
                journalFile=str(journal_path),
                fullDumpFile=str(self._quorum_dir / "dump"),
                useFork=False,
                dynamicMembershipChange=False,
                logCompactionMinEntries=config.log_compaction_min_entries,
                logCompactionMinTime=config.log_compaction_min_time_s,
            )
            sync_obj = _QuorumSyncObj(
                self, journal, config.self_address, list(config.peers.values()), conf
            )
            try:
                sync_obj.waitBinded()
            except SyncObjException as exc:
                raise QuorumBindError(f"cannot bind {config.self_address}") from exc
            self._sync_obj = sync_obj
        except BaseException as exc:
            with _pending_journals_lock:
                _pending_journals.pop(str(journal_path), None)
            if sync_obj is not None:
                sync_obj.destroy_synchronous()
            if journal is not None:
                journal._destroy()
            self._to_trio(self._owner_done, exc)
            return
        self._to_trio(self._owner_done, None)
        self._stop_requested.wait()
        sync_obj.destroy_synchronous()
        journal._destroy()  # no-op unless the tick thread died before destroying it

    # -- tick/owner thread -> trio --

    def _to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._token is not None
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(fn, *args)

    def _owner_done(self, error: BaseException | None) -> None:
        self._owner_error = error
        assert self._owner_started is not None
        self._owner_started.set()

    def _fail(self, error: BaseException) -> None:
        if self._fatal is not None and self._fatal_error is None:
            self._fatal_error = error
            self._fatal.set()

    def _deliver_commit(self, index: int, command: bytes) -> None:
        if self._fatal_error is not None:
            return
        if index != self._last_applied + 1:
            self._fail(QuorumStorageError(f"commit {index} after {self._last_applied}: gap"))
            return
        self._last_applied = index
        self._committed_count = max(self._committed_count, index)
        try:
            self._on_commit(index, command)
        except Exception as exc:  # surfaced from run(), not lost in trio's callback queue
            self._fail(exc)

    def _on_status(self, snapshot: tuple[Any, ...]) -> None:
        is_leader, leader_address, term, has_quorum, raft_commit, raft_applied, count = snapshot
        self._is_leader = is_leader
        self._leader_id = self._id_by_address.get(leader_address) if leader_address else None
        self._term = term
        self._has_quorum = has_quorum
        self._raft_commit_index = raft_commit
        self._raft_last_applied = raft_applied
        self._committed_count = max(self._committed_count, count)
        key = (self._leader_id, term)
        if key != self._reported_leader and self._fatal_error is None:
            self._reported_leader = key
            try:
                self._on_leader_change(*key)
            except Exception as exc:
                self._fail(exc)

    def _on_result(self, proposal_id: int, result: Any, error: int) -> None:
        pending = self._pending.get(proposal_id)
        if pending is not None and not pending.event.is_set():
            pending.result, pending.error = result, error
            pending.event.set()

    # -- proposals --

    async def propose(self, command: bytes, *, timeout_s: float) -> int:
        """Replicate ``command``; return its index once committed (durable on a majority)
        and already passed to ``on_commit`` here.

        Raises CommandTooLargeError, NotQuorumLeaderError (this voter is not the leader), ProposalRejectedError
        (definitely not committed), ProposalOutcomeUnknownError / ProposalTimedOutError (may commit
        later: retry idempotently), QuorumNotRunningError. Never re-proposes on its own.
        Concurrency: cancel-safe in the sense that cancellation leaves the outcome unknown.
        """
        if not isinstance(command, bytes):
            raise TypeError("command must be bytes")
        if len(command) > self._config.max_command_bytes:
            raise CommandTooLargeError(len(command), self._config.max_command_bytes)
        if not self._running or self._sync_obj is None:
            raise QuorumNotRunningError("the quorum is not running")
        if not self._is_leader:
            raise NotQuorumLeaderError(self._leader_id)
        if len(self._pending) >= _MAX_PENDING_PROPOSALS:
            raise ProposalRejectedError("TOO_MANY_PENDING")
        proposal_id = next(self._proposal_ids)
        pending = _Pending(trio.Event())
        self._pending[proposal_id] = pending

        def on_result(result: Any, error: int) -> None:  # tick thread
            self._to_trio(self._on_result, proposal_id, result, error)

        try:
            with trio.move_on_after(timeout_s):
                try:
                    # Non-blocking: a locked queue put plus a pipe write to wake the tick thread.
                    self._sync_obj._rl_append(command, callback=on_result)
                except BlockingIOError:
                    pass  # wake-up pipe full: the command is queued and the tick thread busy
                await pending.event.wait()
        finally:
            del self._pending[proposal_id]
        if not pending.event.is_set():
            raise ProposalTimedOutError(timeout_s)
        return self._proposal_outcome(pending)

    def _proposal_outcome(self, pending: _Pending) -> int:
        error = pending.error
        if error == FAIL_REASON.SUCCESS:
            if not isinstance(pending.result, int):
                raise ProposalRejectedError("NOT_APPLIED")
            return pending.result
        if error == -1:
            raise ProposalOutcomeUnknownError("STOPPED")
        name = _FAIL_NAMES.get(error, f"FAIL_{error}")
        if error in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
            leader = self._leader_id if self._leader_id != self._config.node_id else None
            raise NotQuorumLeaderError(leader)
        if error in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.DISCARDED, FAIL_REASON.REQUEST_DENIED):
            raise ProposalRejectedError(name)
        raise ProposalOutcomeUnknownError(name)


_install_pickle_guard()

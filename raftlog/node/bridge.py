"""PySyncObj, the metadata quorum's Raft engine, behind our guardrails: the only module that
imports pysyncobj or pickle (pinned to pysyncobj 0.3.17: it reaches into that version's hooks).

    voter = Voter(config, events)      # blocking: loads the journal, binds the port
    voter.propose(command, on_result)  # non-blocking; on_result(ProposalOutcome) on the tick thread
    voter.close()                      # blocking: stops the tick thread, syncs the journal

The replicated state is an append-only list of small opaque commands. Index ``i`` is the
1-based position of a command in that list: dense, identical on every voter, stable across
restarts. It is not the Raft log index (which also counts leader no-ops). PySyncObj runs one
tick thread per voter (20 ticks/s, woken early by a pipe on each proposal); `events`
(`VoterEvents`) hears from it: every applied command once per index, in order (`commit`), every
change of the Raft status (`status`), and a fatal error (`fail`). raftlog/node/quorum_process.py
runs the Voter in a child process of the node (its main thread constructs and closes it, and
so outlives the tick thread: PySyncObj stops ticking when its constructing thread dies), and
raftlog/node/metadata_quorum.py builds the trio API on that.

Security guardrails (PySyncObj pickles every message, command, and its journal meta file):

* ``password`` is mandatory: Fernet (AES-128-CBC + HMAC-SHA256) authenticates each frame
  before it is unpickled. One cluster-wide secret, no per-node identity.
* A whitelisting unpickler replaces ``pysyncobj.pickle.loads/load`` and
  ``pysyncobj.journal.loads`` (patched once, at import): even an authenticated peer cannot name
  a global outside ``_ALLOWED_GLOBALS``. Importing pysyncobj also patches the stdlib's
  pure-Python ``pickle._Unpickler`` dispatch table; that is undone here.
* The listener binds ``self_address`` only (PySyncObj binds 0.0.0.0 by default).
* Nothing is buffered for a stranger (issue 39): PySyncObj's TcpConnection read and parse
  methods are replaced (patched once, at import) so that a frame's length is checked when its
  header arrives, a connection reads only a small first frame until one frame has
  authenticated, reads are budgeted per poll event, and unidentified incoming connections
  are few and short-lived. The limits and their arithmetic: raftlog/node/quorum_gate.py.
* The journal, meta file and log-compaction dump are our own formats (CRC-32C framed; canonical
  CBOR), not pickle: raftlog/node/quorum_journal.py, which also says what a damaged byte does.

Durability (group commit). Our journal (`_Journal` over quorum_journal.JournalFile) replaces
PySyncObj's mmap journal. Ordering: (1) a follower holds back its acknowledgements
(``next_node_idx``) while it handles one batch of incoming messages, then ``fdatasync``s once
and releases them (`_DurableTransport`); (2) the leader ``fdatasync``s once per tick, after
taking new commands and again at the start of the next tick, so every entry it counts for
itself in the commit calculation is on disk; (3) term and vote are durable before the vote or
message that depends on them is sent; (4) a dump is fsynced (file and directory) before the
journal is compacted against it, and compaction writes a new journal file that is fsynced and
renamed. Hence: once a command's index is reported committed (or any voter applies it), it is
on stable storage on a majority of voters; it survives ``kill -9`` or power loss of every
voter as long as a majority's disks do.

Proposals are never re-sent here and PySyncObj may drop callbacks, so every proposal is
bounded by the caller's timeout and callers make commands idempotent (a request id in each).

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
the MiB range); each command costs about twice its size on the wire (pickled bytes).
Size: ~820 lines, over the 800 guideline because everything that reaches into PySyncObj
0.3.17's internals (pickle guard, read guard, journal adapter, transport and SyncObj
subclasses) stays in the one module the version pin guards. Where to cut: the pure
`trim_append_entries` could move beside quorum_gate.py's policy.
May import: metadata.quorum (its errors), raftlog/node/quorum_journal.py and quorum_gate.py.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import logging
import os
import pickle
import socket
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

import pysyncobj.journal
import pysyncobj.pickle
import pysyncobj.syncobj
import pysyncobj.version
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException, replicated
from pysyncobj.syncobj import _COMMAND_TYPE
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as _pysyncobj_monotonic
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from metadata.quorum import QuorumBindError, QuorumStorageError
from raftlog.node import quorum_gate, quorum_voters
from raftlog.node.quorum_journal import (
    DUMP_MAGIC,
    JournalFile,
    fsync_dir,
    read_dump,
    read_dump_voters,
    write_blob,
)

__all__ = [
    "QuorumConfig",
    "Voter",
    "VoterEvents",
    "VoterStatus",
    "ProposalOutcome",
    "MAX_PENDING_PROPOSALS",
    "unpickle_rejections",
    "quorum_refusals",
    "restricted_load",
    "restricted_loads",
]

logger = logging.getLogger(__name__)

PYSYNCOBJ_VERSION = "0.3.17"
if pysyncobj.version.VERSION != PYSYNCOBJ_VERSION:  # pragma: no cover - guards the hooks below
    raise ImportError(
        f"raftlog.node.bridge needs pysyncobj=={PYSYNCOBJ_VERSION}, found {pysyncobj.version.VERSION}"
    )

_MAX_COMMAND_BYTES_LIMIT = 1024 * 1024
MAX_PENDING_PROPOSALS: Final = 1024


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
# Read guard: PySyncObj's TcpConnection reads, with quorum_gate's limits (patched at import)

_refusal_log = quorum_gate.RefusalLog()
_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK)


def quorum_refusals() -> dict[str, int]:
    """Connections this process's quorum port closed, by reason (quorum_gate.py)."""
    return _refusal_log.counts()


def _refuse(conn: Any, reason: str) -> None:
    _refusal_log.refuse(getattr(conn, "_rl_peer", None) or _peer_of(conn), reason)
    conn.disconnect()


def _peer_of(conn: Any) -> str:
    try:
        peer = conn._TcpConnection__socket.getpeername()
    except (AttributeError, OSError):
        return "?"
    return str(peer[0] if isinstance(peer, tuple) else peer) or "?"


def _read_buffer(conn: Any) -> bytearray:
    # PySyncObj resets the buffer to bytes() on (dis)connect; a bytearray appends in place.
    buffer = conn._TcpConnection__readBuffer
    if not isinstance(buffer, bytearray):
        buffer = conn._TcpConnection__readBuffer = bytearray(buffer)
    return buffer


def _header_length(buffer: bytearray) -> int | None:
    if len(buffer) < quorum_gate.HEADER_BYTES:
        return None
    return int(struct.unpack_from("i", buffer)[0])


def _guarded_read_some(conn: Any, budget: int) -> int:
    """One recv (replaces __processRead): bytes read, 0 when nothing more is wanted now."""
    buffer = _read_buffer(conn)
    want = min(conn._TcpConnection__recvBufferSize, budget)
    if not conn._rl_authenticated:
        want = min(want, quorum_gate.preauth_bytes_wanted(len(buffer), _header_length(buffer)))
        if want <= 0:
            return 0  # its first frame is whole: authenticate it before reading more
    sock = conn._TcpConnection__socket
    try:
        incoming = sock.recv(want)
    except OSError as exc:
        if exc.errno not in _AGAIN:
            conn.disconnect()
        return 0
    if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
        conn.disconnect()
        return 0
    before = len(buffer)
    buffer += incoming
    if before < quorum_gate.HEADER_BYTES <= len(buffer):  # the first frame's length, at once
        reason = quorum_gate.length_refusal(_header_length(buffer) or 0, conn._rl_authenticated)
        if reason is not None:
            _refuse(conn, reason)
            return 0
    return len(incoming)


def _guarded_try_read(conn: Any) -> None:
    """Replaces __tryReadBuffer: at most READ_BUDGET_BYTES per read event (was: until EAGAIN)."""
    budget = quorum_gate.READ_BUDGET_BYTES
    while budget > 0:
        got = _guarded_read_some(conn, budget)
        if got <= 0:
            break
        budget -= got
    conn._TcpConnection__lastReadTime = _pysyncobj_monotonic()


def _guarded_parse(conn: Any) -> Any:
    """Replaces __processParseMessage: refuses a bad length before waiting for its body;
    marks the connection authenticated once a token decrypts."""
    buffer = _read_buffer(conn)
    length = _header_length(buffer)
    if length is None:
        return None
    reason = quorum_gate.length_refusal(length, conn._rl_authenticated)
    if reason is not None:
        _refuse(conn, reason)
        return None
    end = quorum_gate.HEADER_BYTES + length
    if len(buffer) < end:
        return None
    data = bytes(buffer[quorum_gate.HEADER_BYTES:end])
    try:
        encryptor = conn.encryptor
        if encryptor is not None:
            timestamp = encryptor.extract_timestamp(data)  # checks the HMAC first
            if timestamp < conn.recvLastTimestamp:
                raise ValueError("frame timestamp went back")
            conn.recvLastTimestamp = timestamp
            data = encryptor.decrypt(data)
            conn._rl_authenticated = True
        message = restricted_loads(zlib.decompress(data))
        if conn.recvRandKey:
            rand_key, message = message
            if rand_key != conn.recvRandKey:
                raise ValueError("wrong connection key")
    except Exception:  # noqa: BLE001 - any bad frame ends the connection, as PySyncObj's did
        if conn._rl_authenticated:
            conn.disconnect()
        else:
            _refuse(conn, "not_authenticated")
        return None
    if encryptor is None:
        conn._rl_authenticated = True
    del buffer[:end]
    return message


_stock_connect = TcpConnection.connect
_stock_disconnect = TcpConnection.disconnect


def _guarded_connect(conn: Any, host: str, port: int) -> bool:
    conn._rl_authenticated = False
    return bool(_stock_connect(conn, host, port))


def _guarded_disconnect(conn: Any) -> None:
    conn._rl_authenticated = False
    _stock_disconnect(conn)


def _install_read_guard() -> None:
    """Idempotent. Replaces 0.3.17's name-mangled read path on every TcpConnection."""
    cls: Any = TcpConnection
    cls._rl_authenticated = False
    cls._rl_peer = None
    cls._rl_accepted_at = 0.0
    cls._TcpConnection__tryReadBuffer = _guarded_try_read
    cls._TcpConnection__processParseMessage = _guarded_parse
    cls.connect = _guarded_connect
    cls.disconnect = _guarded_disconnect

# --------------------------------------------------------------------------------------------
# Journal: PySyncObj's interface over our file format

# Journals opened by Voter, handed to PySyncObj through the patched createJournal.
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
    """PySyncObj's journal interface (camelCase, tick thread) over a JournalFile."""

    def __init__(self, file: JournalFile) -> None:
        self.file = file

    def add(self, command: bytes, idx: int, term: int) -> None:
        self.file.append(command, idx, term)

    def clear(self) -> None:
        self.file.truncate_at(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self.file.truncate_at(entryFrom)

    def deleteEntriesTo(self, entryTo: int) -> None:
        self.file.compact_to(entryTo)

    def __getitem__(self, item: Any) -> Any:
        return self.file.entries[item]

    def __len__(self) -> int:
        return len(self.file.entries)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self.file.set_commit_index(raftCommitIndex)

    def getRaftCommitIndex(self) -> int:
        return self.file.commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        # Ordering: durable before the vote/message that reflects it is sent (same call stack).
        self.file.set_term_and_vote(term, votedForNodeId)

    def getCurrentTerm(self) -> int:
        return self.file.term

    def getVotedForNodeId(self) -> str | None:
        return self.file.voted_for

    def onOneSecondTimer(self) -> None:
        self.file.store_meta_if_changed()

    def flush(self) -> None:
        self.file.sync()

    def _destroy(self) -> None:
        self.file.close()


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
    """Holds back acknowledgements until the entries they cover are fsynced, dials through
    ``QuorumConfig.dial_overrides``, and limits unidentified incoming connections (quorum_gate).

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
        for identity, target in syncObj._rl_config.dial_overrides.items():
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

    def _onNewIncomingConnection(self, conn: Any) -> None:  # noqa: N802
        super()._onNewIncomingConnection(conn)
        conn._rl_accepted_at = _pysyncobj_monotonic()
        conn._rl_peer = _peer_of(conn)
        if len(self._unknownConnections) > quorum_gate.MAX_UNKNOWN_CONNECTIONS:
            _refuse(conn, "too_many_unidentified")  # the newest goes; it leaves the set

    def _onTick(self) -> None:  # noqa: N802
        super()._onTick()
        deadline = _pysyncobj_monotonic() - quorum_gate.PREAUTH_TIMEOUT_S
        for conn in list(self._unknownConnections):
            if not conn._rl_authenticated and conn._rl_accepted_at < deadline:
                _refuse(conn, "preauth_timeout")

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
        self._syncObj._rl_journal.file.sync()
        acks, self._rl_acks = self._rl_acks, []
        for node, message in acks:
            super().send(node, message)


class VoterStatus(NamedTuple):
    """The Raft view after a tick; `command_count` is the length of the applied list."""

    is_leader: bool
    leader_address: str | None
    term: int
    has_quorum: bool
    raft_commit_index: int
    raft_last_applied: int
    command_count: int
    # The last index of this voter's Raft log, and on the leader each peer's match index
    # ((address, index), sorted; empty on a follower): DescribeQuorum's log end offsets.
    log_end_index: int = 0
    match_index: tuple[tuple[str, int], ...] = ()
    # The voters in force here ((address, node id), sorted; issue 44) and, on the leader, the
    # other voters it heard from within leader_fallback_timeout_s (addresses, sorted).
    voters: tuple[tuple[str, int | None], ...] = ()
    live: tuple[str, ...] = ()


class ProposalOutcome(NamedTuple):
    """`kind`: "committed" (`index` set), "not_leader", "rejected" (definitely not committed:
    QUEUE_FULL, DISCARDED, REQUEST_DENIED, NOT_APPLIED) or "unknown" (may still commit);
    `reason`: PySyncObj's FAIL_REASON name."""

    kind: str
    index: int | None = None
    reason: str = ""


class VoterEvents(Protocol):
    """What the tick thread (or the owner thread) reports. Called off the trio thread: an
    implementation hands each call over to its own thread, in order."""

    def commit(self, index: int, command: bytes) -> None: ...

    def status(self, status: VoterStatus) -> None: ...

    def fail(self, error: BaseException) -> None: ...


_FAIL_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}


def _outcome(result: Any, error: int) -> ProposalOutcome:
    if error == FAIL_REASON.SUCCESS:
        if not isinstance(result, int):
            return ProposalOutcome("rejected", reason="NOT_APPLIED")
        return ProposalOutcome("committed", index=result)
    name = _FAIL_NAMES.get(error, f"FAIL_{error}")
    if error in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
        return ProposalOutcome("not_leader", reason=name)
    if error in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.DISCARDED, FAIL_REASON.REQUEST_DENIED):
        return ProposalOutcome("rejected", reason=name)
    return ProposalOutcome("unknown", reason=name)


class _QuorumSyncObj(SyncObj):
    def __init__(
        self,
        config: "QuorumConfig",
        events: VoterEvents,
        journal: _Journal,
        quorum_dir: Path,
        conf: SyncObjConf,
        voters: dict[str, int | None],
    ) -> None:
        # Set before SyncObj.__init__: its tick thread starts (and may apply) inside it.
        self._rl_config = config
        self._rl_voters = dict(voters)  # {address: node id}, self included while a voter
        self._rl_events = events
        self._rl_journal = journal
        self._rl_quorum_dir = quorum_dir
        self._rl_transport: _DurableTransport | None = None  # set by the transport itself
        self._rl_commands: list[bytes] = []
        self._rl_delivered = 0
        self._rl_dump_renamed = False
        self._rl_published: VoterStatus | None = None
        self._rl_ack_cap: int | None = None  # set while one trimmed append is handled
        # Our own dump format instead of gzip(pickle(__dict__)); also disables fork.
        conf.serializer = self._rl_serialize
        conf.deserializer = self._rl_deserialize
        others = [a for a in voters if a != config.self_address]
        super().__init__(config.self_address, others, conf, transportClass=_DurableTransport)
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

    # -- voter changes (issue 44): PySyncObj's dynamic membership, one voter at a time --

    def _SyncObj__doChangeCluster(self, request: Any, reverse: bool = False) -> bool:  # noqa: N802
        # Called when a membership entry is appended (or rolled back) here: record the id too.
        changed = bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        change = _change_of(request)
        if change is not None and (changed or change[1] == self._rl_config.self_address):
            quorum_voters.apply_change(self._rl_voters, change, reverse=reverse)
        return changed

    def _addNodeToCluster(self, args: Any, callback: Any) -> None:  # noqa: N802
        callback(None, FAIL_REASON.REQUEST_DENIED)  # utility messages: only rl_change_voters

    def _removeNodeFromCluster(self, args: Any, callback: Any) -> None:  # noqa: N802
        callback(None, FAIL_REASON.REQUEST_DENIED)

    def rl_change_voters(self, kind: str, address: str, node_id: int, callback: Any) -> None:
        command = pysyncobj.pickle.dumps([kind, address, address, node_id])
        self._applyCommand(command, callback, _COMMAND_TYPE.MEMBERSHIP)

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
            self._rl_events.commit(index, command)
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
        self._rl_journal.file.sync()
        if self._rl_transport is not None:
            self._rl_transport.rl_release_acks()
        if self._rl_dump_renamed:
            # PySyncObj renamed our fsynced dump into place; make the rename durable before
            # this tick compacts the journal against it.
            self._rl_dump_renamed = False
            fsync_dir(self._rl_quorum_dir)

    def _rl_publish(self) -> None:
        leader = self._getLeader()
        status = VoterStatus(
            self._isLeader(),
            None if leader is None else leader.id,
            self.raftCurrentTerm,
            self.hasQuorum,
            self.raftCommitIndex,
            self.raftLastApplied,
            len(self._rl_commands),
            self._SyncObj__getCurrentLogIndex(),
            tuple(sorted((n.id, i) for n, i in self._SyncObj__raftMatchIndex.items())) if self._isLeader() else (),
            tuple(sorted(self._rl_voters.items())),
            self._rl_live() if self._isLeader() else (),
        )
        if status != self._rl_published:
            self._rl_published = status
            self._rl_events.status(status)

    def _rl_live(self) -> tuple[str, ...]:
        deadline = _pysyncobj_monotonic() - self._rl_config.leader_fallback_timeout_s
        # Heard from recently AND holding everything committed: a new leader counts every peer
        # as heard from when it takes over (a voter killed a moment ago too), but only live
        # ones acknowledge its term's entries.
        heard, match = self._SyncObj__lastResponseTime, self._SyncObj__raftMatchIndex
        commit = self.raftCommitIndex
        return tuple(sorted(n.id for n in self._SyncObj__otherNodes
                            if heard.get(n, 0) > deadline and match.get(n, 0) >= commit))

    # -- custom dump (called by PySyncObj's Serializer on the tick thread) --

    def _rl_serialize(self, file_name: str, data: tuple[Any, ...]) -> None:
        entry1, entry0 = data[0], data[1]
        obj = {
            "entry0": [bytes(entry0[0]), entry0[1], entry0[2]],
            "entry1": [bytes(entry1[0]), entry1[1], entry1[2]],
            "commands": self._rl_commands,
            "voters": dict(self._rl_voters),
        }
        write_blob(Path(file_name), DUMP_MAGIC, obj, replace=False)
        self._rl_dump_renamed = True

    def _rl_deserialize(self, file_name: str) -> tuple[Any, ...]:
        path = Path(file_name)
        try:
            entry0, entry1, commands = read_dump(path)
            dumped = read_dump_voters(path)
            # Loaded at start-up or just received from the leader: durable before PySyncObj
            # clears the journal behind it.
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            fsync_dir(path.parent)
            old = self._rl_commands
            common = min(len(old), len(commands))
            if old[:common] != commands[:common]:
                raise QuorumStorageError("dump diverges from the applied command list")
        except BaseException as exc:
            # PySyncObj logs and swallows exceptions here; make it fatal instead.
            self._rl_events.fail(exc)
            raise
        logger.info(
            "loaded dump %s: %d commands, raft index %d", path, len(commands), entry1[1]
        )
        self._rl_commands = list(commands)
        for index in range(self._rl_delivered + 1, len(commands) + 1):
            self._rl_events.commit(index, commands[index - 1])
        self._rl_delivered = max(self._rl_delivered, len(commands))
        # PySyncObj prepends None and sets its peers to item 3. At start-up Voter already
        # folded the dump and the journal after it into _rl_voters; a dump received from the
        # leader replaces the journal, so its voters are the set (an old dump without them:
        # keep ours).
        at_start = self._SyncObj__needLoadDumpFile  # True only for the load at start-up
        if not at_start and dumped is not None:
            self._rl_voters = dict(dumped)
        return (entry1, entry0, [a for a in self._rl_voters if a != self._rl_config.self_address])


# --------------------------------------------------------------------------------------------
# The voter


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
        if self.leader_fallback_timeout_s < 0.8:
            raise ValueError("leader_fallback_timeout_s must be at least 0.8 s (a voter runs"
                             " after 0.4x it, which must exceed three 0.1 s heartbeats)")
        if self.log_compaction_min_entries < 2 or self.log_compaction_min_time_s <= 0:
            raise ValueError("bad log compaction settings")
        for identity, target in self.dial_overrides.items():
            host, _, port = str(target).rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"bad dial override {identity!r} -> {target!r}, want host:port")


class Voter:
    """One PySyncObj voter with our journal and transport. Construct and close it on one
    thread that lives as long as the voter (see the module docstring).

    Raises QuorumStorageError (a journal, meta or dump that does not check) or QuorumBindError
    (the port cannot be bound) from the constructor, which blocks while it loads and binds.
    """

    def __init__(self, config: QuorumConfig, events: VoterEvents) -> None:
        quorum_dir = Path(config.data_dir) / "quorum"
        quorum_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        journal_path = quorum_dir / "journal"
        journal = _Journal(JournalFile(journal_path, quorum_dir / "dump"))
        sync_obj: _QuorumSyncObj | None = None
        try:
            with _pending_journals_lock:
                _pending_journals[str(journal_path)] = journal
            conf = SyncObjConf(
                password=config.password,
                autoTick=True,
                commandsQueueSize=MAX_PENDING_PROPOSALS,
                commandsWaitLeader=False,
                appendEntriesUseBatch=False,
                # Entries at or above this size take PySyncObj's broken chunked path; a
                # command pickles to at most ~2x its size.
                appendEntriesBatchSizeBytes=max(2**18, 4 * config.max_command_bytes),
                leaderFallbackTimeout=config.leader_fallback_timeout_s,
                # A follower runs after 0.4-1.4x it without the leader (PySyncObj's defaults
                # at 1 s); the connection outlives that (its default: 2.5x the longest).
                raftMinTimeout=0.4 * config.leader_fallback_timeout_s,
                raftMaxTimeout=1.4 * config.leader_fallback_timeout_s,
                connectionTimeout=3.5 * max(1.0, config.leader_fallback_timeout_s),
                bindAddress=config.self_address,
                bindRetryTime=0.2,
                maxBindRetries=25,
                connectionRetryTime=0.5,
                journalFile=str(journal_path),
                fullDumpFile=str(quorum_dir / "dump"),
                useFork=False,
                dynamicMembershipChange=True,
                logCompactionMinEntries=config.log_compaction_min_entries,
                logCompactionMinTime=config.log_compaction_min_time_s,
            )
            voters = start_voters(config, journal.file, quorum_dir / "dump")
            sync_obj = _QuorumSyncObj(config, events, journal, quorum_dir, conf, voters)
            try:
                sync_obj.waitBinded()
            except SyncObjException as exc:
                raise QuorumBindError(f"cannot bind {config.self_address}") from exc
        except BaseException:
            with _pending_journals_lock:
                _pending_journals.pop(str(journal_path), None)
            if sync_obj is not None:
                sync_obj.destroy_synchronous()
            journal._destroy()
            raise
        self._sync_obj = sync_obj
        self._journal = journal

    def propose(self, command: bytes, on_result: Callable[[ProposalOutcome], None]) -> None:
        """Queue `command`; `on_result(outcome)` runs later on the tick thread (or never, if
        PySyncObj drops it: callers bound their wait). Non-blocking: a locked queue put plus a
        pipe write to wake the tick thread."""

        def callback(result: Any, error: int) -> None:
            on_result(_outcome(result, error))

        try:
            self._sync_obj._rl_append(command, callback=callback)
        except BlockingIOError:
            pass  # wake-up pipe full: the command is queued and the tick thread busy

    def change_voters(self, kind: str, node_id: int, address: str,
                      on_result: Callable[[ProposalOutcome], None]) -> None:
        """Propose adding (`kind` "add") or removing ("rem") one voter; `on_result` as for
        `propose` ("committed" without an index once the change commits; "rejected"
        REQUEST_DENIED while another change is uncommitted or it changes nothing).
        Non-blocking."""

        def callback(result: Any, error: int) -> None:
            outcome = _outcome(0, error)
            on_result(outcome._replace(index=None) if outcome.kind == "committed" else outcome)

        try:
            self._sync_obj.rl_change_voters(kind, address, node_id, callback)
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Stop the tick thread and close the journal (synced, meta stored). Blocking."""
        self._sync_obj.destroy_synchronous()
        self._journal._destroy()  # no-op unless the tick thread died before destroying it


def _change_of(request: Any) -> quorum_voters.Change | None:
    """A PySyncObj membership request ([kind, address, node, raftlog id?]) as a Change."""
    if not isinstance(request, (list, tuple)) or len(request) < 2:
        return None
    node_id = request[3] if len(request) > 3 and isinstance(request[3], int) else None
    return (str(request[0]), str(request[1]), node_id)


def _journal_changes(entries: Any, after_index: int) -> list[quorum_voters.Change]:
    changes = []
    for command, idx, _term in entries:
        if idx > after_index and command[:1] == bytes([_COMMAND_TYPE.MEMBERSHIP]):
            change = _change_of(restricted_loads(command[1:]))
            if change is not None:
                changes.append(change)
    return changes


def start_voters(config: QuorumConfig, journal: JournalFile, dump_path: Path) -> dict[str, int | None]:
    """The voters this voter starts with ({address: id}): its config's (the set the cluster
    began with), or its dump's, then every membership entry of its journal after that,
    in order (Raft: the latest configuration in the log is in force)."""
    voters: dict[str, int | None] = {config.self_address: config.node_id}
    voters.update({address: nid for nid, address in config.peers.items()})
    after = 0
    if dump_path.is_file():
        dumped = read_dump_voters(dump_path)
        if dumped is not None:
            voters = dict(dumped)
            after = read_dump(dump_path)[1][1]
    return quorum_voters.fold(voters, _journal_changes(journal.entries, after))


_install_pickle_guard()
_install_read_guard()

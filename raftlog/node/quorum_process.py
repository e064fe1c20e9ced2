"""The metadata quorum's voter in its own process (issue 46): bridge.py's Voter, run by a child
Python process, behind a parent-side `ChildVoter` with Voter's interface.

    voter = ChildVoter(config, events)  # blocking: spawns the child, waits for journal + port
    voter.propose(command, on_result)   # non-blocking; on_result on this module's reader thread
    voter.change_voters(kind, node_id, address, on_result)
    voter.close()                       # blocking: the child closes its Voter and exits

Why. PySyncObj's tick thread sends the heartbeats that keep the quorum's leader. Inside a node
with 10,000 partitions it waits for the GIL of a busy event loop and fsyncs its journal on that
thread: the leader changed every 10-20 s. In its own process it has its own GIL; the node's
load no longer reaches the heartbeats.

The child (``python -m raftlog.node.quorum_process``) owns PySyncObj, its journal, meta and
dump files and the quorum port. Its main thread builds the Voter (and so outlives the tick
thread, as bridge.py requires), reads proposals and closes the Voter at the end. One local
socket (a socketpair inherited by the child) carries frames both ways: a 4-byte big-endian
length, then canonical CBOR, a list whose first item names the message.

    down: ["config", {QuorumConfig}] (first), ["propose", id, command],
          ["change", id, kind, node_id, address], ["close"]
    up:   ["started"] | ["error", error name, text]   (once, after the Voter is built or not)
          ["commit", index, command], ["status", [VoterStatus fields]], ["result", id,
          kind, index, reason], ["fail", error name, text], ["counters", rejections, refusals],
          ["log", logger name, level, message, event or null, [[key, value], ...], traceback
          or null]   (the child's log records, logged again by the node: one log, node.log)

Ordering. The child queues every event of its tick thread on one FIFO that one sender thread
writes to the socket; the parent's one reader thread calls `events` and the result callbacks in
arrival order. So the guarantees MetadataQuorum builds on bridge.py's events carry over: every
commit once and in index order, a command's commit before its proposal's result, status changes
ordered with the commits around them. Durability is the child's Voter's (bridge.py): nothing
is reported committed before it is on stable storage on a majority.

Bounds. The child's outgoing queue holds at most MAX_QUEUED_EVENTS events (a status replaces a
status still queued behind no commit; the tick thread waits when it is full, slowing the
quorum rather than growing); the parent's outgoing queue holds at most MAX_PENDING_PROPOSALS
plus a few (beyond that a proposal is refused QUEUE_FULL, nothing sent). A frame holds at most
MAX_FRAME_BYTES.

Life and death. The child asks the kernel for SIGKILL when the thread that spawned it ends
(prctl PR_SET_PDEATHSIG through pidfile.die_with_parent; that thread is MetadataQuorum's owner
thread, which lives as long as the voter) and also exits when its socket closes, so it never
outlives the node. It ignores SIGINT and SIGTERM sent to the node's whole process group (a
terminal's ^C, systemd's stop): the node acts on them and closes it. `close()` asks it to close
its Voter (journal synced, meta stored), waits for its exit by pid, and SIGKILLs it after
CLOSE_TIMEOUT_S. If the child dies while the node runs, `events.fail` reports
QuorumStorageError ("the metadata quorum's process ... exited", log event
quorum_process_exited) and MetadataQuorum's run() raises it: the node stops, as a Kafka
combined node does when its controller dies. A restart replays the journal (every commit
again, in order), so nothing is lost.

May import: metadata.quorum (its errors), raftlog.base (cbor, eventlog), raftlog/node/bridge.py
and pidfile.py.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import metadata.quorum as quorum_errors
from raftlog.base import cbor
from raftlog.base.eventlog import log_event
from raftlog.node.bridge import (
    MAX_PENDING_PROPOSALS,
    ProposalOutcome,
    QuorumConfig,
    Voter,
    VoterEvents,
    VoterStatus,
    quorum_refusals,
    unpickle_rejections,
)
from raftlog.node.pidfile import die_with_parent

__all__ = ["ChildVoter", "MAX_FRAME_BYTES", "MAX_QUEUED_EVENTS", "CLOSE_TIMEOUT_S"]

logger = logging.getLogger(__name__)

_HEADER: Final = struct.Struct(">I")
MAX_FRAME_BYTES: Final = 4 * 1024 * 1024  # a command (<= 1 MiB) plus framing, with room
MAX_QUEUED_EVENTS: Final = 65_536
CLOSE_TIMEOUT_S: Final = 15.0
_START_TIMEOUT_S: Final = 60.0  # PySyncObj's bind retries take at most ~5 s; imports take ~1 s
_COUNTERS_EVERY_S: Final = 1.0

# The errors a child's Voter raises by name (bridge.py); anything else arrives as
# QuorumStorageError naming it.
_ERRORS: Final = {
    "QuorumStorageError": quorum_errors.QuorumStorageError,
    "QuorumBindError": quorum_errors.QuorumBindError,
}


class _FrameError(Exception):
    pass


def _send_frame(sock: socket.socket, message: list[Any]) -> None:
    body = cbor.dumps(message)
    sock.sendall(_HEADER.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> list[Any] | None:
    """The next message, or None at end of stream."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise _FrameError(f"quorum process frame of {length} bytes, more than {MAX_FRAME_BYTES}")
    body = _recv_exact(sock, length)
    if body is None:
        return None
    message = cbor.loads(body, what="quorum process frame", max_bytes=MAX_FRAME_BYTES, error=_FrameError)
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise _FrameError("quorum process frame: not a named message")
    return message


def _error_of(name: str, text: str) -> BaseException:
    cls = _ERRORS.get(name)
    return cls(text) if cls is not None else quorum_errors.QuorumStorageError(f"{name}: {text}")


def _config_message(config: QuorumConfig) -> dict[str, Any]:
    fields = dataclasses.asdict(config)
    fields["data_dir"] = str(config.data_dir)
    fields["peers"] = {str(k): v for k, v in config.peers.items()}  # CBOR maps here: text keys
    return fields


def _config_of(fields: dict[str, Any]) -> QuorumConfig:
    fields = dict(fields)
    fields["data_dir"] = Path(fields["data_dir"])
    fields["peers"] = {int(k): str(v) for k, v in fields["peers"].items()}
    return QuorumConfig(**fields)


def _status_of(fields: list[Any]) -> VoterStatus:
    (is_leader, leader, term, has_quorum, commit, applied, count, end, match, voters, live) = fields
    return VoterStatus(is_leader, leader, term, has_quorum, commit, applied, count, end,
                       tuple((a, i) for a, i in match), tuple((a, n) for a, n in voters), tuple(live))


# --------------------------------------------------------------------------------------------
# Parent side


class ChildVoter:
    """bridge.Voter's interface over a child process (module docstring). Construct and close
    it on one thread that lives as long as the voter: the child dies with that thread.

    Raises what the child's Voter raised (QuorumStorageError, QuorumBindError) from the
    constructor, or QuorumStorageError if the child could not start.
    """

    def __init__(self, config: QuorumConfig, events: VoterEvents) -> None:
        self._events = events
        self._closing = False
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._callbacks: dict[int, Callable[[ProposalOutcome], None]] = {}
        self._callbacks_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._rejections = 0
        self._refusals: dict[str, int] = {}
        self._outgoing: collections.deque[list[Any]] = collections.deque()
        self._out_ready = threading.Condition()
        parent_sock, child_sock = socket.socketpair()
        self._sock = parent_sock
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "raftlog.node.quorum_process", str(child_sock.fileno()), str(os.getpid())],
                pass_fds=[child_sock.fileno()], stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            child_sock.close()
        self.pid = self._proc.pid
        _send_frame(parent_sock, ["config", _config_message(config)])
        self._reader = threading.Thread(target=self._read_loop, name=f"raftlog-quorum-rx-{config.node_id}",
                                        daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"raftlog-quorum-tx-{config.node_id}",
                                        daemon=True)
        self._reader.start()
        self._writer.start()
        if not self._started.wait(_START_TIMEOUT_S):
            self._start_error = quorum_errors.QuorumStorageError(
                f"the metadata quorum's process {self.pid} did not start within {_START_TIMEOUT_S} s")
        if self._start_error is not None:
            self.close()
            raise self._start_error
        log_event(logger, "quorum_process_started", pid=self.pid)

    # -- Voter's interface --

    def propose(self, command: bytes, on_result: Callable[[ProposalOutcome], None]) -> None:
        """Send `command` to the child; `on_result` runs on the reader thread (or never).
        Non-blocking."""
        proposal_id = self._register(on_result)
        self._enqueue(["propose", proposal_id, command], proposal_id)

    def change_voters(self, kind: str, node_id: int, address: str,
                      on_result: Callable[[ProposalOutcome], None]) -> None:
        proposal_id = self._register(on_result)
        self._enqueue(["change", proposal_id, kind, node_id, address], proposal_id)

    def close(self) -> None:
        """Ask the child to close its Voter and exit; wait for it by pid (SIGKILL after
        CLOSE_TIMEOUT_S). Blocking."""
        self._closing = True
        with self._out_ready:
            self._outgoing.append(["close"])
            self._out_ready.notify()
        try:
            self._proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.warning("metadata quorum process %d did not exit in %s s: SIGKILL", self.pid, CLOSE_TIMEOUT_S)
            self._proc.kill()
            self._proc.wait()
        with self._out_ready:
            self._outgoing.append([])  # stops the writer
            self._out_ready.notify()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._reader.join()
        self._writer.join()
        self._sock.close()

    def unpickle_rejections(self) -> int:
        """bridge.unpickle_rejections() of the child (as last reported)."""
        return self._rejections

    def quorum_refusals(self) -> dict[str, int]:
        """bridge.quorum_refusals() of the child (as last reported)."""
        return dict(self._refusals)

    # -- internals --

    def _register(self, on_result: Callable[[ProposalOutcome], None]) -> int:
        proposal_id = next(self._ids)
        with self._callbacks_lock:
            if len(self._callbacks) >= 4 * MAX_PENDING_PROPOSALS:
                # PySyncObj may drop callbacks: forget the oldest (its caller timed out long ago).
                del self._callbacks[next(iter(self._callbacks))]
            self._callbacks[proposal_id] = on_result
        return proposal_id

    def _enqueue(self, message: list[Any], proposal_id: int) -> None:
        with self._out_ready:
            if len(self._outgoing) < MAX_PENDING_PROPOSALS + 16 and not self._closing:
                self._outgoing.append(message)
                self._out_ready.notify()
                return
        self._resolve(proposal_id, ProposalOutcome("rejected", reason="QUEUE_FULL"))

    def _resolve(self, proposal_id: int, outcome: ProposalOutcome) -> None:
        with self._callbacks_lock:
            on_result = self._callbacks.pop(proposal_id, None)
        if on_result is not None:
            on_result(outcome)

    def _write_loop(self) -> None:
        while True:
            with self._out_ready:
                while not self._outgoing:
                    self._out_ready.wait()
                message = self._outgoing.popleft()
            if not message:
                return
            try:
                _send_frame(self._sock, message)
            except OSError:
                return  # the child is gone: the reader reports it

    def _read_loop(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                message = _recv_frame(self._sock)
                if message is None:
                    break
                self._dispatch(message)
        except (OSError, _FrameError) as exc:
            error = exc
        if self._closing:
            return
        if error is not None:
            self._proc.kill()  # a child that speaks nonsense is not trusted further
        code = self._proc.wait()
        text = (f"the metadata quorum's process {self.pid} exited (code {code})"
                + (f" after a bad frame: {error}" if isinstance(error, _FrameError) else ""))
        log_event(logger, "quorum_process_exited", level=logging.CRITICAL, pid=self.pid, code=code,
                  msg=f"{text}: the node stops (a restart replays the quorum's journal)")
        failure = quorum_errors.QuorumStorageError(text)
        if not self._started.is_set():
            self._start_error = failure
            self._started.set()
        else:
            self._events.fail(failure)

    def _dispatch(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "commit":
            self._events.commit(message[1], message[2])
        elif kind == "status":
            self._events.status(_status_of(message[1]))
        elif kind == "result":
            self._resolve(message[1], ProposalOutcome(message[2], message[3], message[4]))
        elif kind == "counters":
            self._rejections, self._refusals = message[1], dict(message[2])
        elif kind == "log":
            _relog(*message[1:])
        elif kind == "fail":
            self._events.fail(_error_of(message[1], message[2]))
        elif kind == "started":
            self._started.set()
        elif kind == "error":
            self._start_error = _error_of(message[1], message[2])
            self._started.set()
        else:
            raise _FrameError(f"unknown quorum process message {kind!r}")


def _relog(name: str, level: int, text: str, event: str | None, fields: list[list[Any]],
           traceback: str | None) -> None:
    """A log record of the child, logged here (the node's handlers and levels apply)."""
    target = logging.getLogger(name)
    if not target.isEnabledFor(level):
        return
    extra = {} if traceback is None else {"exc": traceback}
    if event is not None:
        log_event(target, event, level=level, **dict((str(k), v) for k, v in fields), **extra)
    else:
        target.log(level, text if traceback is None else f"{text}\n{traceback}")


# --------------------------------------------------------------------------------------------
# Child side


def _text_of(error: BaseException) -> str:
    """An error's text without the wire code its str() starts with (the parent adds it again)."""
    return str(getattr(error, "message", None) or error)


class _Uplink:
    """The child's VoterEvents: a bounded FIFO drained to the socket by one sender thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._queue: collections.deque[list[Any]] = collections.deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._counters: tuple[int, dict[str, int]] = (0, {})
        self._thread = threading.Thread(target=self._send_loop, name="raftlog-quorum-uplink", daemon=True)
        self._thread.start()

    def put(self, message: list[Any]) -> None:
        with self._cond:
            if message[0] == "status" and self._queue and self._queue[-1][0] == "status":
                self._queue[-1] = message  # only the newest status matters; order kept
            else:
                while len(self._queue) >= MAX_QUEUED_EVENTS and not self._stopped:
                    self._cond.wait(0.1)
                self._queue.append(message)
            self._cond.notify_all()

    def commit(self, index: int, command: bytes) -> None:
        self.put(["commit", index, command])

    def status(self, status: VoterStatus) -> None:
        self.put(["status", list(status)])

    def fail(self, error: BaseException) -> None:
        self.put(["fail", type(error).__name__, _text_of(error)])

    def result(self, proposal_id: int) -> Callable[[ProposalOutcome], None]:
        return lambda outcome: self.put(["result", proposal_id, outcome.kind, outcome.index, outcome.reason])

    def flush_and_stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._stopped:
                    self._cond.wait(_COUNTERS_EVERY_S)
                batch = list(self._queue)
                self._queue.clear()
                stopped = self._stopped
                self._cond.notify_all()
            counters = (unpickle_rejections(), quorum_refusals())
            if counters != self._counters:
                self._counters = counters
                batch.append(["counters", counters[0], counters[1]])
            try:
                for message in batch:
                    _send_frame(self._sock, message)
            except OSError:
                os._exit(0)  # the node is gone: so are we
            if stopped and not batch:
                return


class _UplinkLogHandler(logging.Handler):
    """The child's log records, sent up to the node (message "log")."""

    def __init__(self, uplink: _Uplink) -> None:
        super().__init__(logging.INFO)
        self._uplink = uplink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, "raftlog_event", None)
            fields = [[str(k), v if isinstance(v, (str, int, float, bool, bytes, type(None))) else str(v)]
                      for k, v in (getattr(record, "raftlog_fields", None) or {}).items()]
            traceback = self.formatter.formatException(record.exc_info) if record.exc_info and self.formatter else None
            self._uplink.put(["log", record.name, record.levelno, record.getMessage(), event, fields, traceback])
        except Exception:  # noqa: BLE001 - logging must not break the voter
            self.handleError(record)


def child_main(fd: int, parent_pid: int) -> int:
    """The child process: build the Voter from the first frame, serve proposals until
    "close" or the end of the stream, then close the Voter."""
    # SIGKILL when the thread that spawned us ends (the journal needs no goodbye: every
    # acknowledgement waited for its fsync). SIGINT and SIGTERM sent to the node's whole
    # process group (a terminal's ^C, systemd's stop) are the node's to act on: it closes us.
    if not die_with_parent(parent_pid, signal.SIGKILL):
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    uplink = _Uplink(sock)
    handler = _UplinkLogHandler(uplink)
    handler.setFormatter(logging.Formatter())
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    try:
        first = _recv_frame(sock)
        if first is None or first[0] != "config":
            raise _FrameError("quorum process: no config")
        voter = Voter(_config_of(first[1]), uplink)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        uplink.put(["error", type(exc).__name__, _text_of(exc)])
        uplink.flush_and_stop()
        return 1
    uplink.put(["started"])
    try:
        while True:
            try:
                message = _recv_frame(sock)
            except (OSError, _FrameError) as exc:
                logger.error("quorum process: %s", exc)
                message = None
            if message is None or message[0] == "close":
                break
            if message[0] == "propose":
                voter.propose(message[2], uplink.result(message[1]))
            elif message[0] == "change":
                voter.change_voters(message[2], message[3], message[4], uplink.result(message[1]))
    finally:
        voter.close()
        uplink.flush_and_stop()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1]), int(sys.argv[2])))
